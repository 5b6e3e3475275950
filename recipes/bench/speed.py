"""Training cost per target token of bench configurations, measured *interleaved* in one process.

``bench.py`` trains configurations one after the other, so its tokens/s ratios move whenever the
load of the 2-core machine changes between two runs (job1's baseline shared its core with a test
suite).  This tool measures the one number the issues set targets on -- training time per target
word relative to the baseline -- in a way that load changes cancel out of: every configuration is
built in this one process from its ``fairseq_ext/tools/evaluation/bench_configs.py`` flags (same task, criterion,
optimizer, bf16 autocast and attention kernel as the bench), all of them train on the *same* fixed
list of real batches, and the configurations take turns: each round times ``--steps`` full
training steps (forward, backward, clipping, Adam update) of every configuration, in a rotated
order.  A round's ratio compares steps taken seconds apart; the table reports the median over
rounds and its spread.

    .venv/bin/python recipes/bench/speed.py --data data/bible_es_en/spm8000 \
        --configs transformer,jas_m11,enc_dc,ms12_aif --rounds 7 --steps 10 \
        --out runs/speed/job1 --table recipes/bench/RESULTS.md

Only configurations that train on the plain translation data (task translation_ext or a task
reading the same folder) are accepted; ``doc_translation`` configurations (Maruf) get ``--doc-ids-dir``
= the segmented folder when the binarized one has no ids, and must be timed against a ``doc_translation`` baseline (``--baseline
maruf_sentence``, ``maruf3_sentence`` for the ch. 3 memory networks) so that every configuration trains on the
same document batches; with ``--doc-generated-dir DIR`` (the sentence model's translations, for configurations
with ``--doc-target-context generated``) every ``doc_translation`` configuration, the baseline included, reads
that target context, so the batches carry it; ``universal_translation``
configurations (Gu ch. 5) take a ``fairseq-ext-data universal`` folder as ``--data`` and the ``gu5_multi``
baseline; ``conversation_translation`` configurations (Maruf ch. 5) take the conversation folder
(``data/bible_conv_es_en``) and the ``maruf5_base`` baseline.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

from fairseq_ext.tools.evaluation import bench_configs
from fairseq_ext.tools.evaluation.runs import logger

ROOT = Path(__file__).resolve().parents[2]

START, END = "<!-- speed:table -->", "<!-- /speed:table -->"
# the baseline configuration of each task whose batches only its own kind reads
BASELINES = {"universal_translation": "gu5_multi", "doc_translation": "maruf_sentence",
             "conversation_translation": "maruf5_base"}


log = logger("speed")


def build(name: str, data: Path, generated_dir=None):
    """Task, model, criterion and fairseq optimizer of a bench configuration (its exact flags)."""
    from fairseq import optim, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = bench_configs.get(name)
    if cfg["task"] not in ("translation_ext", "translation", "translation_decoding", "doc_translation",
                           "universal_translation", "conversation_translation"):
        raise SystemExit(f"error: configuration '{name}' uses task {cfg['task']}; speed.py times "
                         f"plain translation configurations only")
    if cfg.get("prepare"):
        raise SystemExit(f"error: configuration '{name}' needs files made from its job's data before training "
                         f"({', '.join(p for p, _ in cfg['prepare'])}); speed.py does not make them")
    extra = []
    if cfg["task"] == "doc_translation":
        if not (data / "train.ids").exists():  # fairseq-ext-data binarize copies them next to the data
            extra = ["--doc-ids-dir", str(data.parent)]
        flags = cfg["train"]
        generated = "--doc-target-context" in flags and flags[flags.index("--doc-target-context") + 1] == "generated"
        if generated and not generated_dir:
            raise SystemExit(f"error: configuration '{name}' reads the generated target context: give "
                             f"--doc-generated-dir (the folder of the sentence model's {{split}}.{{tgt}})")
        if generated_dir:
            extra += ["--doc-generated-dir", str(generated_dir)]
            if not generated:
                extra += ["--doc-target-context", "generated"]
    argv = [str(data), "--user-dir", str(ROOT / "fairseq_ext"), "--task", cfg["task"], "--cpu",
            "--seed", "1", *extra, *cfg["train"]]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    fcfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(fcfg.task)
    model = task.build_model(fcfg.model)
    criterion = task.build_criterion(fcfg.criterion)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = optim.build_optimizer(fcfg.optimizer, params)
    n_params = sum(p.numel() for p in model.parameters())
    return task, model, criterion, optimizer, float(fcfg.optimization.clip_norm), n_params


def fixed_batches(task, n: int, max_tokens: int, seed: int):
    """The first ``n`` batches of the seeded training epoch (the bench's --max-tokens)."""
    task.load_dataset("train")
    it = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=max_tokens,
                                 max_positions=(1024, 1024), ignore_invalid_inputs=True,
                                 seed=seed).next_epoch_itr(shuffle=True)
    out = []
    for sample in it:
        out.append(sample)
        if len(out) == n:
            break
    return out


def train_steps(system, batches, update_num: int) -> float:
    """Seconds for one full training step per batch (fairseq's task.train_step + clip + step)."""
    task, model, criterion, optimizer, clip, _ = system
    model.train()
    t0 = time.perf_counter()
    for i, sample in enumerate(batches):
        optimizer.zero_grad()
        task.train_step(sample, model, criterion, optimizer, update_num + i)
        optimizer.clip_grad_norm(clip)
        optimizer.step()
    return time.perf_counter() - t0


def merge_table(path: Path, rows, note: str) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    header = ("| config | params | ms per step | time per target token ×base (median) | "
              "range over rounds | rounds × steps | job |\n|---|---|---|---|---|---|---|\n")
    old = []
    if START in text:
        body = text.split(START, 1)[1].split(END, 1)[0]
        old = [ln for ln in body.strip().splitlines()[2:] if ln.startswith("|")]
        job = rows[0].rstrip(" |").rsplit("|", 1)[-1].strip()
        old = [ln for ln in old if ln.rstrip(" |").rsplit("|", 1)[-1].strip() != job]
        pre, post = text.split(START, 1)[0], text.split(END, 1)[1]
    else:
        pre, post = text.rstrip("\n") + "\n\n## Training cost per word, interleaved (recipes/bench/speed.py)\n\n", "\n"
    table = header + "\n".join(rows + old) + "\n"
    path.write_text(f"{pre}{START}\n{table}{END}\n\n{note}\n{post.lstrip()}" if START not in text
                    else f"{pre}{START}\n{table}{END}{post}", encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data/bible_es_en/spm8000", help="segmented folder (with bin/)")
    ap.add_argument("--configs", required=True, help="comma list; the baseline is added first if missing")
    ap.add_argument("--baseline", default="transformer")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10, help="timed training steps per config per round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per config before round 1")
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--table", help="merge the rows into this Markdown file (speed:table markers)")
    ap.add_argument("--doc-generated-dir", help="doc_translation: the generated target context of every "
                                                "configuration (the folder of {split}.{tgt})")
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    data = Path(args.data)
    bin_dir = data / "bin" if (data / "bin").is_dir() else data
    if not (bin_dir / "dict.en.txt").exists() and not any(bin_dir.glob("dict.*.txt")):
        raise SystemExit(f"error: {bin_dir}: no fairseq dictionaries (run fairseq_ext.tools.corpora.corpora prepare)")
    names = [c for c in args.configs.split(",") if c]
    if args.baseline not in names:
        names.insert(0, args.baseline)
    special = ("doc_translation", "universal_translation", "conversation_translation")  # batches only their own kind reads
    base_task = bench_configs.get(args.baseline)["task"]
    for name in names:
        task = bench_configs.get(name)["task"]
        if task != base_task and (task in special or base_task in special):
            raise SystemExit(f"error: configuration '{name}' (task {task}) cannot be timed against the baseline "
                             f"'{args.baseline}' (task {base_task}): every configuration must train on the "
                             f"same batches (--baseline {BASELINES.get(task, 'transformer')})")
    systems = {}
    for name in names:
        torch.manual_seed(1)
        systems[name] = build(name, bin_dir, args.doc_generated_dir)
        log(f"built {name}: {systems[name][5] / 1e6:.2f}M params")
    batches = fixed_batches(systems[names[0]][0], args.steps, args.max_tokens, seed=1)
    ntok = sum(int(b["ntokens"]) for b in batches)
    log(f"{len(batches)} batches, {ntok} target tokens per round per config; {args.rounds} rounds")
    for name in names:
        train_steps(systems[name], batches[: args.warmup], 0)
    times = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            times[name].append(train_steps(systems[name], batches, args.warmup + r * args.steps))
        log(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {times[n][-1] / times[args.baseline][-1]:.3f}x" for n in names))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    job = out.name
    res = {"job": job, "data": str(data), "threads": args.threads, "rounds": args.rounds,
           "steps": args.steps, "target_tokens_per_round": ntok, "machine": platform.machine(),
           "date": datetime.now().isoformat(timespec="minutes"), "configs": {}}
    rows = []
    for name in names:
        ratios = [t / b for t, b in zip(times[name], times[args.baseline])]
        med = statistics.median(ratios)
        res["configs"][name] = {"params": systems[name][5], "seconds": times[name], "ratios": ratios,
                                "median_ratio": med,
                                "ms_per_step": 1000 * statistics.median(times[name]) / args.steps}
        rows.append(f"| {name} | {systems[name][5] / 1e6:.2f}M | "
                    f"{res['configs'][name]['ms_per_step']:.0f} | {med:.3f} | "
                    f"{min(ratios):.3f}–{max(ratios):.3f} | {args.rounds} × {args.steps} | {job} |")
    (out / "speed.json").write_text(json.dumps(res, indent=1), encoding="utf-8")
    print("\n".join(rows))
    if args.table:
        note = ("Each row: median over rounds of (this configuration's time for the round's training "
                "steps) / (the baseline's time for the same batches in the same round); all "
                "configurations train in one process on one fixed list of real batches "
                f"(--max-tokens {args.max_tokens}), interleaved, so machine-load changes cancel.")
        merge_table(Path(args.table), rows, note)
        log(f"rows merged into {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

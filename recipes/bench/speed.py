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
from datetime import datetime
from pathlib import Path

from fairseq_ext.tools.evaluation import bench_configs
from fairseq_ext.tools.evaluation.interleaved import build, fixed_batches, rotated, train_steps
from fairseq_ext.tools.evaluation.runs import logger

START, END = "<!-- speed:table -->", "<!-- /speed:table -->"
# the baseline configuration of each task whose batches only its own kind reads
BASELINES = {"universal_translation": "gu5_multi", "doc_translation": "maruf_sentence",
             "conversation_translation": "maruf5_base"}


log = logger("speed")


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
        for name in rotated(names, r):
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

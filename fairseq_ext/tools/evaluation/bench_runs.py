"""Train, decode and score named configurations of the benchmark (:mod:`~fairseq_ext.tools.evaluation.bench_configs`)
on one prepared data folder under one budget: the engine of ``recipes/bench/bench.py`` (its command line, whose
help tells the whole procedure) and of the parent and child systems of Nguyen ch. 3 (``recipes/nguyen/transfer.py``,
:mod:`~fairseq_ext.tools.chapters.transfer_pipeline`).

* :func:`run_config`: one configuration: ``fairseq-train`` under the budget (wall-clock minutes, updates, or, in the
  learning-curve mode, dev BLEU every N updates with early stopping), ``fairseq-generate`` of the test split,
  sacreBLEU BLEU/chrF and the costs (parameters, training tokens/s, decoding sentences/s) -> ``result.json``;
  :func:`continue_from` seeds a configuration with another curve job's newest interval checkpoint;
* :func:`device_flags`, :func:`cuda_precision`: the configuration's flags for the CPU or a CUDA card;
* :func:`table_rows` / :func:`merge_table` (the bench table) and :func:`converged_rows` / :func:`merge_converged`
  (the "converged" table): rows per configuration and job merged into a Markdown file;
* :func:`build_parser`, :func:`main`: the job (every configuration, the paired bootstrap against the baseline,
  ``summary.json``, curves and tables).
"""
import argparse
import datetime
import json
import math
import shutil
import sys
from pathlib import Path

from fairseq_ext.tools.common import cpu_name
from fairseq_ext.tools.evaluation import bench_configs, bench_pairs, score as ev
from fairseq_ext.tools.evaluation.fairseq_log import (
    best_point, curve_points, parse_curve, parse_generate_log, parse_train_log, plot_curves, stop_reason,
    write_curve_csv, write_curves_csv,
)
from fairseq_ext.tools.evaluation.runs import PACKAGE, ROOT, fmt, logger, post_process, raw_folder, run_logged

BIN = Path(sys.executable).parent
log = logger("bench")


def fairseq_cli(tool: str) -> list:
    """fairseq's ``fairseq-TOOL`` console script beside this interpreter, or ``python -m fairseq_cli.TOOL`` where
    fairseq was put on the path without its scripts (e.g. unpacked wheels on a GPU machine)."""
    script = BIN / f"fairseq-{tool}"
    return [script] if script.exists() else [sys.executable, "-m", f"fairseq_cli.{tool}"]


def continue_from(src: Path, d: Path, data_bin: Path, cfg: dict) -> None:
    """Seed the run folder ``d`` with the newest interval checkpoint of ``src`` (a curve job's folder of the
    same configuration): it becomes ``checkpoint_last.pt`` (fairseq resumes from it), with ``src``'s best
    checkpoint and log; a configuration the other job lacks starts from scratch.  Refused when the checkpoint
    was trained on other data or with another --arch."""
    import torch

    if not src.is_dir():
        log(f"{d.name}: not in {src.parent}, trained from scratch")
        return
    ckpts = sorted(src.glob("checkpoint_*_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    if not ckpts or not (src / "train.log").exists():
        raise SystemExit(f"error: --continue-from: {src} has no interval checkpoint (checkpoint_E_U.pt) and "
                         f"train.log (was it a --curve-every job?)")
    state = torch.load(ckpts[-1], map_location="cpu", weights_only=True)  # fairseq_ext allow-lists Namespace
    c = state["cfg"]
    arch = cfg["train"][cfg["train"].index("--arch") + 1] if "--arch" in cfg["train"] else None
    m = c["model"]
    got_data, got_arch = str(c["task"]["data"]), (m.get("arch") if hasattr(m, "get") else getattr(m, "arch", None))
    if Path(got_data).resolve() != Path(data_bin).resolve() or (arch and got_arch != arch):
        raise SystemExit(f"error: --continue-from: {ckpts[-1]} was trained on {got_data} with --arch {got_arch}, "
                         f"this job uses {data_bin} with --arch {arch}")
    for f, to in ((ckpts[-1], "checkpoint_last.pt"), (src / "checkpoint_best.pt", "checkpoint_best.pt"),
                  (src / "train.log", "train.log")):
        if f.exists():
            shutil.copyfile(f, d / to)
    log(f"{d.name}: continuing {ckpts[-1]} ({state['optimizer_history'][-1].get('num_updates', '?')} updates)")


def stage2_flags(name: str, cfg: dict, args, data_bin: Path, d: Path):
    """The flags of a stage-2 configuration (Maruf's two-stage procedure): the document task's data flags
    (``bench_configs.doc_data_flags``; ``--doc-generated-dir`` for a configuration that reads the generated target
    context), the conversation task's generated target history (``bench_configs.conv_generated_flags``, given
    ``--doc-generated-dir``, for a configuration whose model reads the target history; else the references),
    ``--finetune-from-model STAGE1`` (fairseq resumes ``checkpoint_last.pt`` instead once there is one),
    and the ``--path`` of test decoding: ``BEST:STAGE1`` where doc_bcd's pass 0 is the stage-1 model
    (``--bcd-init base_model``), else the best checkpoint."""
    generated = bench_configs.reads_generated(cfg["train"])
    if generated and not args.doc_generated_dir:
        raise SystemExit(f"error: configuration '{name}' reads the generated target context: give "
                         f"--doc-generated-dir (the stage-1 model's translations, {{split}}.{{tgt}})")
    pass0 = "base_model" in cfg["generate"]
    if pass0 and not args.finetune_from_model:
        raise SystemExit(f"error: configuration '{name}' decodes with the stage-1 model as pass 0: give "
                         f"--finetune-from-model STAGE1.pt")
    task_flags = []
    if cfg["task"] == "doc_translation":
        task_flags = bench_configs.doc_data_flags(data_bin, args.doc_generated_dir if generated else None)
    elif (cfg["task"] == "conversation_translation" and args.doc_generated_dir
          and bench_configs.reads_target_history(cfg["train"])):
        task_flags = bench_configs.conv_generated_flags(args.doc_generated_dir)
    warm = ["--finetune-from-model", args.finetune_from_model] if args.finetune_from_model else []
    ckpt = d / "checkpoint_best.pt"
    return task_flags, warm, f"{ckpt}:{args.finetune_from_model}" if pass0 else ckpt


# flags of the CPU bf16 path (bench_configs BF16): decoding repeats them; on a GPU they are dropped
CPU_ONLY = ("--cpu-bf16", "--math-attention")
# --precision on cuda: fairseq's --amp (float16 autocast, float32 master weights, loss scaling) or --fp16 (float16
# weights); fairseq's --bf16 is its TPU path, so CUDA bf16 is not offered
PRECISIONS = ("auto", "fp32", "amp", "fp16")


def cuda_precision(choice: str) -> str:
    """``--precision`` resolved on this machine: ``auto`` is ``amp`` on a card with float16 tensor cores (compute
    capability 7 or more), else ``fp32``."""
    if choice != "auto":
        return choice
    import torch
    return "amp" if torch.cuda.is_available() and torch.cuda.get_device_capability(0)[0] >= 7 else "fp32"


def device_flags(flags: list, device: str, precision: str = "fp32", train: bool = True) -> list:
    """``flags`` for ``device``: ``--cpu`` added on the CPU (the configuration's own CPU bf16 flags kept); on
    ``cuda`` fairseq's default device without the CPU-only bf16 flags, plus ``--amp`` (training only: decoding
    stays float32) or ``--fp16`` for ``precision``.  Equal-updates rows are comparable across devices; times are
    not."""
    if device == "cpu":
        return [*flags, "--cpu"]
    out = [f for f in flags if f not in CPU_ONLY]
    if precision == "amp" and train:
        out.append("--amp")
    elif precision == "fp16":
        out.append("--fp16")
    return out


def relocated(result: dict, d: Path) -> dict:
    """A reused ``result.json`` whose files were written under another job folder (the folder was moved, or
    gathered from another machine's ``$OUT``): each path it names that is missing but has a file of that name in
    the configuration's folder ``d`` points there."""
    for key, value in result.items():
        if isinstance(value, str) and key.endswith("_file") and not Path(value).exists() \
                and (d / Path(value).name).is_file():
            result[key] = str(d / Path(value).name)
    return result


def run_config(name: str, args, out: Path) -> dict:
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    data_bin = args.data / "bin"
    cfg = bench_configs.resolve(name, d, data_bin, args.src, args.tgt)
    res_file = d / "result.json"
    if res_file.exists() and not args.force:
        log(f"{name}: reusing {res_file}")
        return relocated(json.loads(res_file.read_text()), d)
    for path, argv in cfg["prepare"]:  # files the training flags name (e.g. an Arthur et al. lexicon)
        if not Path(path).exists():
            run_logged([sys.executable, *argv], d / "prepare.log", args.threads, append=True, log=log, cwd=ROOT)
    if args.continue_from and not (d / "train.log").exists():
        continue_from(args.continue_from / name, d, data_bin, cfg)
    task_flags, warm, gen_path = stage2_flags(name, cfg, args, data_bin, d)
    precision = cuda_precision(args.precision) if args.device == "cuda" else None
    limits = ["--stop-time-hours", f"{args.budget_min / 60:.5f}"] if args.budget_min > 0 else []
    if args.max_updates:
        limits += ["--max-update", str(args.max_updates)]
    log_interval = 25
    if args.curve_every:
        log_interval = math.gcd(25, args.curve_every)
        limits += ["--validate-interval-updates", str(args.curve_every), "--validate-interval", "1000000",
                   "--save-interval-updates", str(args.curve_every), "--keep-interval-updates", "1",
                   "--save-interval", "1000000", "--eval-bleu", "--eval-bleu-args",
                   json.dumps({"beam": 1, **bench_configs.DECODE_LIMITS}),
                   "--eval-bleu-remove-bpe", post_process(args.data),
                   "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]
        if args.patience:
            limits += ["--patience", str(args.patience)]
    train_cmd = [*fairseq_cli("train"), data_bin, "--user-dir", PACKAGE, "--task", cfg["task"], *task_flags, *warm,
                 *device_flags(cfg["train"], args.device, precision), "--seed", str(args.seed), *limits, "--max-epoch", "1000",
                 "--save-dir", d, "--no-epoch-checkpoints", "--no-progress-bar", "--log-format", "simple",
                 "--log-interval", str(log_interval), "--skip-invalid-size-inputs-valid-test"]
    # a curve job resumes an interrupted configuration (fairseq restores checkpoint_last.pt): keep its log
    train_wall = run_logged(train_cmd, d / "train.log", args.threads, append=bool(args.curve_every), log=log, cwd=ROOT)
    tr = parse_train_log((d / "train.log").read_text())
    curve = []
    if args.curve_every:
        curve = parse_curve((d / "train.log").read_text())
        write_curve_csv(d / "curve.csv", curve)
        if best_point(curve) is None:
            raise SystemExit(f"error: {d / 'train.log'}: no dev BLEU was logged (does task {cfg['task']} "
                             f"support --eval-bleu?)")
    gen_cmd = [*fairseq_cli("generate"), data_bin, "--user-dir", PACKAGE, "--task", cfg["task"], *task_flags,
               "--path", gen_path, "--gen-subset", "test",
               *device_flags(cfg["generate"] + [f for f in CPU_ONLY if f in cfg["train"]], args.device, precision,
                            train=False)]
    if "--post-process" not in cfg["generate"]:
        gen_cmd += ["--post-process", post_process(args.data)]
    gen_wall = run_logged(gen_cmd, d / "generate.out", args.threads, log=log, cwd=ROOT)
    ge = parse_generate_log((d / "generate.out").read_text())
    raw = raw_folder(args.data)
    tgt = args.tgt
    refs = [raw / f"test.{tgt}"] + ([raw / f"test.{args.ref2}"] if args.ref2 and (raw / f"test.{args.ref2}").exists() else [])
    sc = ev.score_files(d / "generate.out", refs[:1], src=raw / f"test.{args.src}",
                        plot=d / "bleu_by_length.png", plot_title=name)
    sc2 = ev.score_files(d / "generate.out", refs) if len(refs) > 1 else None
    result = {
        "name": name, "desc": cfg["desc"], "device": args.device,
        **({"precision": precision} if precision else {}), "budget_min": args.budget_min,
        "train_wall_s": train_wall,
        "generate_wall_s": gen_wall, **tr, **ge,
        "bleu": sc["bleu"], "chrf": sc["chrf"], "bleu_signature": sc["bleu_signature"],
        "chrf_signature": sc["chrf_signature"], "bleu_str": sc["bleu_str"],
        "bleu_2refs": sc2["bleu"] if sc2 else None, "buckets": sc.get("buckets"),
        "hyp_file": str(d / "generate.out"),
        **({"finetune_from_model": str(args.finetune_from_model)} if args.finetune_from_model else {}),
    }
    if args.curve_every:
        result["curve"] = {"every": args.curve_every, "patience": args.patience, **curve_points(curve),
                           "stopped": stop_reason((d / "train.log").read_text(), args.patience,
                                                  args.max_updates, curve[-1]["updates"])}
    res_file.write_text(json.dumps(result, indent=1, default=str))
    for f in d.glob("checkpoint_last.pt"):
        f.unlink()  # keep the best only
    log(f"{name}: {sc['bleu_str']}")
    log(f"{name}: {sc['chrf_str']}")
    log(f"  signature: {sc['bleu_signature']}")
    log(f"  signature: {sc['chrf_signature']}")
    return result


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def table_rows(results: dict, job: str, args) -> dict:
    base = results.get(bench_configs.BASELINE)
    rows = {}
    for name, r in results.items():
        sig = r.get("significance") or {}
        p = sig.get("bleu_p")
        row = (f"| {name} | {r['desc']} | {fmt(r['bleu'])} | {fmt(r['chrf'])} | "
               f"{fmt(r['bleu'] - base['bleu'], '+.2f') if base else '–'}"
               f"{'' if p is None else f' (p={p:.3f})'} | "
               f"{fmt(r.get('params') / 1e6 if r.get('params') else None)}M | "
               f"{fmt(r.get('train_tokens_per_s'), '.0f')} | "
               f"{fmt(ratio(r.get('train_tokens_per_s'), base and base.get('train_tokens_per_s')))} | "
               f"{fmt(r.get('decode_sent_per_s'), '.1f')} | "
               f"{fmt(ratio(r.get('decode_sent_per_s'), base and base.get('decode_sent_per_s')))} | "
               f"{r.get('updates')} / {r.get('epochs')} | {budget_text(args)} | {job} |")
        rows[name] = row
    return rows


HEADER = ("| config | system | BLEU | chrF | ΔBLEU vs baseline (bootstrap p) | params | train tok/s | "
          "train ×base | decode sent/s | decode ×base | updates / epochs | budget | job |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def _row_key(line: str):
    """``(config, job)`` of a table row: rows of different jobs never replace each other."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return (cells[0], cells[-1])


def _merged_rows(text: str, start: str, end: str, rows: dict):
    """The table rows between ``start`` and ``end`` in ``text`` merged with ``rows`` (a row per configuration and
    job; a re-run of a job replaces its rows), ordered per job with the baseline first; and the block's
    ``- job `NAME`: ...`` note lines by job."""
    existing, notes = {}, {}
    if start in text:
        for line in text.split(start, 1)[1].split(end, 1)[0].splitlines():
            if line.startswith("| ") and not line.startswith("| config") and not line.startswith("|---"):
                existing[_row_key(line)] = line
            elif line.startswith("- job `"):
                notes[line.split("`")[1]] = line
    for line in rows.values():
        existing[_row_key(line)] = line
    ordered = []
    for job in sorted({job for _, job in existing}):  # per job: its baseline first, then the systems
        keys = sorted((k for k in existing if k[1] == job), key=lambda k: (k[0] != bench_configs.BASELINE, k[0]))
        ordered += [existing[k] for k in keys]
    return ordered, notes


def merge_table(path: Path, rows: dict, job_note: str) -> None:
    """Merge this job's rows into the Markdown table in ``path`` (a row per configuration and job;
    re-running a job replaces its rows); keep everything else in the file."""
    text = path.read_text() if path.exists() else ""
    start, end = "<!-- bench:table -->", "<!-- /bench:table -->"
    ordered, _ = _merged_rows(text, start, end, rows)
    block = "\n".join([start, HEADER] + ordered + [end])
    if start in text:
        text = text.split(start, 1)[0] + block + text.split(end, 1)[1]
    else:
        text = text + ("\n" if text else "") + block + "\n"
    jobs_start = "<!-- bench:jobs -->"
    if jobs_start in text and job_note not in text:
        text = text.replace(jobs_start, jobs_start + "\n" + job_note)
    path.write_text(text)


CONVERGED_HEADER = ("| config | system | best dev BLEU (greedy) | test BLEU | chrF | ΔBLEU vs baseline (bootstrap p) | "
                    "updates to best / run | training wall-clock to best / run | stopped by | job |\n"
                    "|---|---|---|---|---|---|---|---|---|---|")


def converged_rows(results: dict, job: str) -> dict:
    base = results.get(bench_configs.BASELINE)
    rows = {}
    for name, r in results.items():
        c = r.get("curve")
        if not c:
            continue
        p = (r.get("significance") or {}).get("bleu_p")
        stop_detail = f" ({c['patience']} validations)" if c["stopped"] == "patience" else ""
        rows[name] = (f"| {name} | {r['desc']} | {fmt(c['best_dev_bleu'])} | {fmt(r['bleu'])} | {fmt(r['chrf'])} | "
                      f"{fmt(r['bleu'] - base['bleu'], '+.2f') if base and name != bench_configs.BASELINE else '–'}"
                      f"{'' if p is None else f' (p={p:.3f})'} | {c['best_updates']:,} / {c['last_updates']:,} | "
                      f"{c['best_train_wall_s'] / 60:.1f} / {c['last_train_wall_s'] / 60:.1f} min | "
                      f"{c['stopped']}{stop_detail} | "
                      f"{job} |")
    return rows


def merge_converged(path: Path, rows: dict, job_note: str) -> None:
    """Merge a curve job's rows into the "converged" table of ``path`` (markers bench:converged; a row per
    configuration and job, a re-run replaces its job's rows) and its note under the table."""
    text = path.read_text() if path.exists() else ""
    start, end = "<!-- bench:converged -->", "<!-- /bench:converged -->"
    ordered, notes = _merged_rows(text, start, end, rows)
    notes[job_note.split("`")[1]] = job_note
    block = "\n".join([start, CONVERGED_HEADER] + ordered + [""] + [notes[j] for j in sorted(notes)] + [end])
    if start in text:
        text = text.split(start, 1)[0] + block + text.split(end, 1)[1]
    else:
        text = text + ("\n" if text else "") + "\n## Converged (recipes/bench/bench.py --curve-every)\n\n" + block + "\n"
    path.write_text(text)


def machine_text(args) -> str:
    """The machine a job's note names: the processor, and the GPU where it trained on one."""
    cpu = cpu_name()
    if args.device == "cpu":
        return cpu
    import torch
    return f"{torch.cuda.get_device_name(0)} {cuda_precision(args.precision)} (CPU {cpu})"


def budget_text(args) -> str:
    """The training budget of a job as the table states it: minutes, updates, or both."""
    parts = ([f"{args.budget_min:g} min"] if args.budget_min > 0 else []) + \
        ([f"{args.max_updates} updates"] if args.max_updates else [])
    return " / ".join(parts) or "until early stopping"


def build_parser(description: str = None) -> argparse.ArgumentParser:
    """The job's options (``description``: the help's text, recipes/bench/bench.py's); callers that run single
    configurations (``run_config``) parse theirs with it, so that every option has its default."""
    ap = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT / "data" / "bible_es_en" / "spm8000",
                    help="segmented folder with bin/ and segment.json (fairseq_ext.tools.corpora.corpora prepare)")
    ap.add_argument("--baseline", default=bench_configs.BASELINE,
                    help="configuration the others are compared with (default %(default)s)")
    ap.add_argument("--configs", default=bench_configs.BASELINE,
                    help=f"comma-separated names from bench_configs (known: {', '.join(bench_configs.CONFIGS)})")
    ap.add_argument("--budget-min", type=float, default=15.0, help="training wall-clock budget per config")
    ap.add_argument("--out", type=Path, default=None, help="job folder (default runs/bench/<timestamp>)")
    ap.add_argument("--table", type=Path, default=None, help="merge the rows into this Markdown file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where fairseq trains and decodes (cpu: the configuration's flags, with its CPU bf16 "
                         "autocast where the CPU has native bf16; cuda: without the CPU bf16 flags, see --precision; "
                         "compare the times of rows of one device only)")
    ap.add_argument("--precision", choices=PRECISIONS, default="auto",
                    help="with --device cuda: fp32, amp (fairseq --amp: float16 autocast in training, float32 "
                         "weights; decoding float32) or fp16 (fairseq --fp16, training and decoding); auto: amp on "
                         "a card with float16 tensor cores (compute capability >= 7), else fp32 (default)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--src", default="es")
    ap.add_argument("--tgt", default="en")
    ap.add_argument("--ref2", default="kjv", help="second reference suffix in the raw folder ('' for none)")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--force", action="store_true", help="re-run configurations that have a result")
    ap.add_argument("--curve-every", type=int, default=0, metavar="N",
                    help="learning-curve mode: dev loss and greedy dev BLEU every N updates (fairseq --eval-bleu), "
                         "best checkpoint by dev BLEU, curves.csv / curves.png (0: off)")
    ap.add_argument("--patience", type=int, default=0, metavar="P",
                    help="with --curve-every: stop after P validations without a better dev BLEU (convergence)")
    ap.add_argument("--max-updates", type=int, default=0, metavar="U",
                    help="stop each configuration at U updates (equal updates; --budget-min 0 for no time cap)")
    ap.add_argument("--continue-from", type=Path, default=None, metavar="JOB",
                    help="with --curve-every: start each configuration not yet started here from its newest interval "
                         "checkpoint in the curve job JOB (same data and configuration), e.g. to take an "
                         "equal-updates job on to convergence")
    ap.add_argument("--finetune-from-model", default=None, metavar="STAGE1.pt",
                    help="stage 2 of a two-stage procedure: warm-start every configuration not yet started from this "
                         "checkpoint (fairseq's option; an interrupted configuration resumes its checkpoint_last.pt); "
                         "a configuration decoded with doc_bcd --bcd-init base_model uses it as pass 0")
    ap.add_argument("--doc-generated-dir", default=None, metavar="DIR",
                    help="doc_translation configurations that read the generated target context, and "
                         "conversation_translation ones that read the target history: the stage-1 model's "
                         "translations ({split}.{tgt}, python -m fairseq_ext.tools.corpora.doc_context)")
    ap.add_argument("--pair", action="append", default=[], metavar="BASE=CFG[,CFG]",
                    help="also compare CFG... against BASE (paired bootstrap on this job's test outputs), the reference "
                         "that differs in one change only, e.g. ms12_aif=ms1,ms2; rows in the pairs table "
                         "(repeatable; every name is trained or reused like --configs)")
    ap.add_argument("--train-only", action="store_true",
                    help="train and decode the listed configurations only (no baseline added, no comparison, no "
                         "table): one lane of a job split over processes; a later run of the whole list reuses "
                         "every result and compares")
    return ap


def main(argv=None, description: str = None):
    """The job of ``argv`` (:func:`build_parser`)."""
    ap = build_parser(description)
    args = ap.parse_args(argv)
    if args.patience and not args.curve_every:
        ap.error("--patience needs --curve-every (early stopping counts its validations)")
    if args.continue_from and not args.curve_every:
        ap.error("--continue-from needs --curve-every (it resumes a curve job's interval checkpoint)")
    if args.budget_min <= 0 and not args.max_updates and not args.patience:
        ap.error("--budget-min 0 needs --max-updates or --patience (nothing would stop training)")
    try:
        pairs = [] if args.train_only else bench_pairs.parse_pairs(args.pair)
    except (ValueError, KeyError) as e:
        ap.error(str(e).strip("'\""))
    bench_configs.BASELINE = args.baseline  # ratios, bootstrap and table order follow it
    if args.finetune_from_model and not Path(args.finetune_from_model).is_file():
        raise SystemExit(f"error: --finetune-from-model {args.finetune_from_model}: no such checkpoint")
    if not (args.data / "bin").is_dir():
        raise SystemExit(f"error: {args.data / 'bin'} missing; run: python -m fairseq_ext.tools.corpora.corpora prepare")
    names = [n for n in args.configs.split(",") if n]
    for n in names:
        bench_configs.get(n)
    names += [n for n in dict.fromkeys(x for base, cfgs in pairs for x in [base] + cfgs) if n not in names]
    if bench_configs.BASELINE not in names and not args.train_only:
        names.insert(0, bench_configs.BASELINE)  # ratios need the baseline of the same job
    job = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    out = args.out or ROOT / "runs" / "bench" / job
    out.mkdir(parents=True, exist_ok=True)
    results = {n: run_config(n, args, out) for n in names}
    if args.train_only:
        log(f"trained {', '.join(names)} in {out} (--train-only: no comparison)")
        return
    base = results[bench_configs.BASELINE]
    others = {n: r["hyp_file"] for n, r in results.items() if n != bench_configs.BASELINE}
    if others:
        raw = raw_folder(args.data)
        cmp = ev.compare_files(base["hyp_file"], list(others.values()), raw / f"test.{args.tgt}",
                               n=args.n_bootstrap)
        print(ev.format_comparison(cmp))
        by_path = {s["name"]: s for s in cmp["systems"]}
        bleu_m, chrf_m = cmp["metrics"]
        for n, path in others.items():
            s = by_path[str(path)]
            results[n]["significance"] = {"bleu_p": s[bleu_m]["p_value"], "chrf_p": s[chrf_m]["p_value"]}
    if pairs:
        prow = bench_pairs.pair_rows(results, pairs, raw_folder(args.data) / f"test.{args.tgt}", args.n_bootstrap,
                                     out.name)
        print(bench_pairs.HEADER)
        print("\n".join(prow.values()))
        if args.table:
            bench_pairs.merge_pairs(args.table, prow)
    curves = {}
    if args.curve_every:  # re-read from the logs: a reused result gets the current parser's clocks
        curves = {n: parse_curve((out / n / "train.log").read_text()) for n in names}
        for n, rows_n in curves.items():
            if results[n].get("curve") and best_point(rows_n):
                results[n]["curve"].update(curve_points(rows_n))
    (out / "summary.json").write_text(json.dumps(results, indent=1, default=str))
    if args.curve_every:
        write_curves_csv(out / "curves.csv", curves)
        plot_curves(curves, out / "curves.png", f"{out.name}: dev every {args.curve_every} updates "
                                                 f"({args.data.name})")
        log(f"curves: {out / 'curves.csv'}, {out / 'curves.png'}")
        conv = converged_rows(results, out.name)
        print(CONVERGED_HEADER)
        print("\n".join(conv.values()))
        if args.table:
            limits = ", ".join(x for x in (f"patience {args.patience}" if args.patience else "",
                                           f"max {args.max_updates} updates" if args.max_updates else "",
                                           f"cap {args.budget_min:g} min" if args.budget_min > 0 else "") if x)
            note = (f"- job `{out.name}`: {', '.join(names)}; dev every {args.curve_every} updates ({limits}); "
                    f"{args.threads} threads, {machine_text(args)}, data `{args.data}`; "
                    + (f"warm-started from `{args.finetune_from_model}`; " if args.finetune_from_model else "")
                    + f"curves {out / 'curves.png'}")
            merge_converged(args.table, conv, note)
            log(f"converged rows merged into {args.table}")
        return
    rows = table_rows(results, out.name, args)
    print(HEADER)
    for r in rows.values():
        print(r)
    if args.table:
        note = (f"- job `{out.name}`: {', '.join(names)}; {budget_text(args)} of training each, "
                f"{args.threads} threads, {machine_text(args)}, data `{args.data}`")
        merge_table(args.table, rows, note)
        log(f"rows merged into {args.table}")


"""CPU seconds per training update of bench configurations (:mod:`~fairseq_ext.tools.evaluation.bench_configs`) on
one prepared data folder, with the exact flags ``recipes/bench/bench.py`` trains them with (the stage-2 warm start
and generated context of :func:`~fairseq_ext.tools.evaluation.bench_runs.stage2_flags` included): the planning
number of a run to convergence (updates x seconds per update), measured without the machine's load in it.

    python -m fairseq_ext.tools.evaluation.update_cost --data data/bible_conv_es_en --src src --tgt tgt \\
        --configs maruf5_base,maruf5_dual --short 2 --long 6 --rounds 3 --out runs/cost [--finetune-from-model S1.pt]

Each round runs ``fairseq-train`` of every configuration twice, for ``--short`` and ``--long`` updates (no
validation, nothing saved; the same first batches of the same seed), in an order rotated by one per round; the CPU
time of a run is its process's user + system time (``getrusage`` of the child), so it does not depend on how many
other processes share the cores, and the difference of the two runs divided by ``long - short`` cancels the
start-up (imports, data loading, model building).  The table gives the median over rounds, its range, and the
ratio to the first configuration (the baseline).  Writes ``OUT/times.tsv`` (one line per run, appended as they
finish), ``OUT/cost.json`` and ``OUT/cost.md``.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from fairseq_ext.tools.common import ToolError, run_cli
from fairseq_ext.tools.evaluation import bench_configs
from fairseq_ext.tools.evaluation.interleaved import rotated
from fairseq_ext.tools.evaluation.runs import PACKAGE, ROOT, logger

log = logger("update_cost")


def train_command(name: str, args, n_updates: int) -> list:
    """``fairseq-train`` of configuration ``name`` as bench.py runs it on ``args.data`` (its task, stage-2 and
    device flags), for ``n_updates`` updates without validation or checkpoints."""
    from fairseq_ext.tools.evaluation import bench_runs

    data_bin = Path(args.data) / "bin"
    cfg = bench_configs.resolve(name, Path(args.out) / name, data_bin, args.src, args.tgt)
    bench_args = bench_runs.build_parser().parse_args(
        ["--data", str(args.data)]
        + (["--finetune-from-model", str(args.finetune_from_model)] if args.finetune_from_model else [])
        + (["--doc-generated-dir", str(args.doc_generated_dir)] if args.doc_generated_dir else []))
    task_flags, warm, _ = bench_runs.stage2_flags(name, cfg, bench_args, data_bin, Path(args.out) / name)
    return [*bench_runs.fairseq_cli("train"), str(data_bin), "--user-dir", PACKAGE, "--task", cfg["task"],
            *task_flags, *warm, *bench_runs.device_flags(cfg["train"], "cpu"), "--seed", "1",
            "--max-update", str(n_updates), "--max-epoch", "1000", "--disable-validation", "--no-save",
            "--no-progress-bar", "--log-format", "simple", "--log-interval", "1"]


def child_cpu_seconds(cmd: list, logfile: Path, threads: int) -> float:
    """Run ``cmd`` (stdout + stderr to ``logfile``) with ``threads`` OpenMP threads; its user + system seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with open(logfile, "w") as f:
        rc = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        tail = "\n".join(Path(logfile).read_text().splitlines()[-20:])
        raise ToolError(f"{logfile}: fairseq-train failed ({rc}):\n{tail}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(names: list, rounds: int, short: int, long: int, run_one, record=None) -> dict:
    """``{config: [CPU s per update, one per round]}``: ``run_one(name, n_updates, round)`` -> CPU seconds of a
    run, every configuration at ``short`` and ``long`` updates per round, in :func:`rotated` order;
    ``record(name, round, n_updates, seconds)`` sees every run as it finishes."""
    per = {n: [] for n in names}
    for r in range(rounds):
        for name in rotated(names, r):
            t = {}
            for n in (short, long):
                t[n] = run_one(name, n, r)
                if record:
                    record(name, r, n, t[n])
            per[name].append((t[long] - t[short]) / (long - short))
    return per


def summarise(per: dict) -> dict:
    """Median, range and ratio to the first configuration of :func:`measure`'s seconds per update."""
    names = list(per)
    base = statistics.median(per[names[0]])
    return {n: {"s_per_update": statistics.median(v), "min": min(v), "max": max(v), "rounds": v,
                "ratio": statistics.median(v) / base if base > 0 else None} for n, v in per.items()}


def markdown(summary: dict, short: int, long: int) -> str:
    names = list(summary)
    rounds = len(summary[names[0]]["rounds"])
    lines = [f"| config | CPU s / update (median of {rounds} rounds; runs of {long} - {short} updates) | range | "
             f"x {names[0]} |", "|---|---|---|---|"]
    for n, s in summary.items():
        ratio = "–" if s["ratio"] is None else f"{s['ratio']:.2f}"
        lines.append(f"| {n} | {s['s_per_update']:.2f} | {s['min']:.2f}-{s['max']:.2f} | {ratio} |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m fairseq_ext.tools.evaluation.update_cost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="prepared folder (its bin/), as bench.py's --data")
    ap.add_argument("--configs", required=True, help="comma-separated; the first is the baseline of the ratios")
    ap.add_argument("--src", default="es")
    ap.add_argument("--tgt", default="en")
    ap.add_argument("--short", type=int, default=2, help="updates of the short run (start-up + SHORT)")
    ap.add_argument("--long", type=int, default=6, help="updates of the long run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--finetune-from-model", default=None, help="bench.py's stage-2 warm start")
    ap.add_argument("--doc-generated-dir", default=None, help="bench.py's generated target context / history")
    ap.add_argument("--out", type=Path, required=True)
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    names = [c for c in a.configs.split(",") if c]
    unknown = [c for c in names if c not in bench_configs.CONFIGS]
    if unknown:
        raise ToolError(f"--configs: unknown configuration(s) {', '.join(unknown)} "
                        f"(fairseq_ext/tools/evaluation/bench_configs.py)")
    if not 0 < a.short < a.long:
        raise ToolError(f"--short {a.short} / --long {a.long}: need 0 < short < long")
    if not (a.data / "bin").is_dir():
        raise ToolError(f"{a.data / 'bin'}: no binarized folder")
    logs = a.out / "log"
    logs.mkdir(parents=True, exist_ok=True)
    times = a.out / "times.tsv"
    times.write_text("config\tround\tupdates\tcpu_s\n")

    def run_one(name, n, r):
        return child_cpu_seconds(train_command(name, a, n), logs / f"{name}.{r}.{n}.log", a.threads)

    def record(name, r, n, s):
        with open(times, "a") as f:
            f.write(f"{name}\t{r}\t{n}\t{s:.3f}\n")
        log(f"{name} round {r}: {n} updates, {s:.1f} CPU s")

    summary = summarise(measure(names, a.rounds, a.short, a.long, run_one, record))
    md = markdown(summary, a.short, a.long)
    (a.out / "cost.json").write_text(json.dumps({"short": a.short, "long": a.long, "threads": a.threads,
                                                 "configs": summary}, indent=1))
    (a.out / "cost.md").write_text(md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    run_cli(main)

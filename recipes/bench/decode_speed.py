"""Decoding cost of systems relative to a baseline, measured *interleaved*: ``fairseq-generate`` runs of
every system take turns, round after round, so that a load change on the 2-core machine hits all of them.

    .venv/bin/python recipes/bench/decode_speed.py --rounds 3 --out runs/maruf_ch4/decode_speed.json \\
        --system "sentence=DATA --user-dir fairseq_ext --task doc_translation ... --path S.pt --beam 1" \\
        --system "hatt_enc_off=DATA --user-dir fairseq_ext --task doc_translation ... --path H.pt --beam 1"

The first ``--system`` is the baseline.  What is timed is fairseq-generate's own decoding time (its line
"Translated N sentences (M tokens) in S s": batches, model forward passes and search, not the start-up
or checkpoint loading).  Each round runs every system once, in an order rotated by one per round; the
ratio of a system in a round is its time over the baseline's time of that round, and the report gives the
median ratio over rounds with its range, the median seconds and tokens/s.  Every run must translate the
same number of sentences (else the systems are not comparable: an error).  Runs use one torch thread
(``--threads``) unless told otherwise.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DONE = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")


def parse_system(spec: str) -> tuple:
    if "=" not in spec:
        raise SystemExit(f"error: --system {spec!r}: expected NAME=ARGS")
    name, args = spec.split("=", 1)
    return name.strip(), shlex.split(args)


def time_generate(args: list, threads: int) -> dict:
    """One ``fairseq-generate`` run: sentences, tokens and seconds from its summary line."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    exe = Path(sys.executable).parent / "fairseq-generate"
    t0 = time.time()
    p = subprocess.run([str(exe), *args], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    m = DONE.search(p.stderr + p.stdout)
    if p.returncode != 0 or m is None:
        tail = (p.stderr or p.stdout)[-2000:]
        raise SystemExit(f"error: fairseq-generate failed ({p.returncode}): {' '.join(args)}\n{tail}")
    return {"sentences": int(m.group(1).replace(",", "")), "tokens": int(m.group(2).replace(",", "")),
            "seconds": float(m.group(3)), "wall": round(wall, 2)}


def summarise(names: list, runs: dict) -> dict:
    base = names[0]
    out = {}
    for n in names:
        ratios = [r["seconds"] / b["seconds"] for r, b in zip(runs[n], runs[base])]
        secs = [r["seconds"] for r in runs[n]]
        toks = [r["tokens"] / r["seconds"] for r in runs[n]]
        out[n] = {"ratio_median": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
                  "ratio_max": round(max(ratios), 3), "seconds_median": round(statistics.median(secs), 2),
                  "tokens_per_s_median": round(statistics.median(toks), 1),
                  "sentences": runs[n][0]["sentences"]}
    return out


def markdown(summary: dict, rounds: int) -> str:
    lines = [f"| system | decode s (median of {rounds}) | target tok/s | time × {next(iter(summary))} (range) |",
             "|---|---|---|---|"]
    for n, s in summary.items():
        lines.append(f"| {n} | {s['seconds_median']} | {s['tokens_per_s_median']} | "
                     f"{s['ratio_median']:.2f} ({s['ratio_min']:.2f}–{s['ratio_max']:.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", action="append", required=True, help="NAME=fairseq-generate arguments (first: baseline)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, help="JSON with every run and the summary")
    a = ap.parse_args(argv)
    systems = [parse_system(s) for s in a.system]
    names = [n for n, _ in systems]
    if len(set(names)) != len(names):
        raise SystemExit("error: --system names must be distinct")
    runs = {n: [] for n in names}
    for r in range(a.rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for name, args in order:
            res = time_generate(args, a.threads)
            runs[name].append(res)
            print(f"[decode_speed] round {r + 1}/{a.rounds} {name}: {res['seconds']:.1f}s "
                  f"({res['sentences']} sentences)", file=sys.stderr, flush=True)
        counts = {n: runs[n][-1]["sentences"] for n in names}
        if len(set(counts.values())) != 1:
            raise SystemExit(f"error: the systems translated different numbers of sentences: {counts}")
    summary = summarise(names, runs)
    # rows in the order the systems were given
    summary = {n: summary[n] for n in names}
    print(markdown(summary, a.rounds))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"runs": runs, "summary": summary, "rounds": a.rounds, "threads": a.threads,
                                     "load_at_end": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

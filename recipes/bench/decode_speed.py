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

``--per-batch`` interleaves finer, for a loaded machine where whole runs vary more than the effects: every
system is loaded once in this process (its checkpoints, task and batches, as fairseq-generate builds them from
its arguments; greedy, ``--beam 1``, unless they give ``--beam``), and in each round every batch (``--batches``
I,J,...: only those, numbered from 0) is decoded by every system in turn, the order rotated by one per batch.
A round's time of a system is the sum of its batches' decoding times (``task.inference_step``); the systems
must have the same batches (the same number of sentences in each).
"""
import argparse
import json
import os
import sys
from pathlib import Path

from fairseq_ext.tools.evaluation.interleaved import (load_decoder, markdown, parse_system, rotated, summarise,
                                                      time_batches, time_generate)


def whole_runs(systems: list, a) -> dict:
    """Every round: one fairseq-generate run per system, in an order rotated per round."""
    runs = {n: [] for n, _ in systems}
    for r in range(a.rounds):
        for name, args in rotated(systems, r):
            res = time_generate(args, a.threads)
            runs[name].append(res)
            print(f"[decode_speed] round {r + 1}/{a.rounds} {name}: {res['seconds']:.1f}s "
                  f"({res['sentences']} sentences)", file=sys.stderr, flush=True)
        counts = {n: runs[n][-1]["sentences"] for n in runs}
        if len(set(counts.values())) != 1:
            raise SystemExit(f"error: the systems translated different numbers of sentences: {counts}")
    return runs


def per_batch(systems: list, a) -> dict:
    """``--per-batch``: every system loaded once in this process, interleaved per batch."""
    import torch

    torch.set_num_threads(a.threads)
    try:
        picks = [int(x) for x in a.batches.split(",")] if a.batches else None
    except ValueError:
        raise SystemExit(f"error: --batches {a.batches!r}: expected batch numbers I,J,...")
    loaded = [(name, load_decoder(args)) for name, args in systems]

    def log(r, last):
        print(f"[decode_speed] round {r + 1}/{a.rounds}: " + ", ".join(
            f"{n} {v['seconds']:.2f}s ({v['sentences']} sentences)" for n, v in last.items()),
            file=sys.stderr, flush=True)
    return time_batches(loaded, a.rounds, picks, log)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", action="append", required=True, help="NAME=fairseq-generate arguments (first: baseline)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, help="JSON with every run and the summary")
    ap.add_argument("--per-batch", action="store_true",
                    help="load every system once in this process; every batch is decoded by every system in "
                         "turn, the order rotated per batch (greedy unless a system gives --beam)")
    ap.add_argument("--batches", help="with --per-batch: time only these batches (I,J,... numbered from 0)")
    a = ap.parse_args(argv)
    systems = [parse_system(s) for s in a.system]
    names = [n for n, _ in systems]
    if len(set(names)) != len(names):
        raise SystemExit("error: --system names must be distinct")
    if a.batches and not a.per_batch:
        raise SystemExit("error: --batches needs --per-batch")
    runs = per_batch(systems, a) if a.per_batch else whole_runs(systems, a)
    summary = summarise(names, runs)
    # rows in the order the systems were given
    summary = {n: summary[n] for n in names}
    print(markdown(summary, a.rounds))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"runs": runs, "summary": summary, "rounds": a.rounds, "threads": a.threads,
                                     "per_batch": a.per_batch, "batches": a.batches,
                                     "load_at_end": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

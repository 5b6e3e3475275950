"""Queries/s of the SEG-NMT retrieval stage (``fairseq-ext-tm retrieve``), old code against new, *interleaved*.

The retrieval (``retrieve_split``: tokens, BM25 top-100, fuzzy re-rank of Eq. 4.1, Algorithm 1) is timed for

* ``old``: ``fairseq_ext/tools/tm/retrieval.py`` as committed at ``--old-rev`` (loaded from git), its engine;
* ``new-<engine>``: the working tree's tool, once per engine of ``--engines``;

on the same index, memory and queries, in one process and one thread. The queries are cut into chunks of
``--chunk``; every chunk is answered by every setup in turn (rotated order), ``--rounds`` times over the
whole query file, so a change of the machine's load hits all setups alike. Reported per setup: queries
per wall second and per CPU second of this process (summed over rounds), the median over rounds of its
wall-clock speed-up against ``old``, and the **agreement**: the share of queries whose written answer
(kept candidates, their fuzzy scores, Algorithm 1's selection) is identical to ``old``'s.

    OMP_NUM_THREADS=1 .venv/bin/python recipes/bench/tm_retrieval.py \\
        --memory-src data/bible_es_en/raw/train.es --query data/bible_es_en/raw/test.es --old-rev b7e6130

(the index is built in a temporary folder unless ``--index`` names one built by ``fairseq-ext-tm
build-index``).
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

from fairseq_ext.tools.common import cpu_name  # noqa: E402
from fairseq_ext.tools.tm import retrieval as new  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = "fairseq_ext/tools/tm/retrieval.py"


def old_module(rev: str) -> types.ModuleType:
    """The retrieval tool as committed at ``rev``, as a module of its own."""
    src = subprocess.run(["git", "show", f"{rev}:{TOOL}"], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    mod = types.ModuleType("retrieval_at_" + rev)
    mod.__file__ = f"{rev}:{TOOL}"
    sys.modules[mod.__name__] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def answer(e) -> tuple:
    return tuple(e.ids), tuple(e.fuzzy), tuple(e.adaptive)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memory-src", required=True)
    ap.add_argument("--query", required=True)
    ap.add_argument("--index", help="an index folder of this memory (default: built in a temporary folder)")
    ap.add_argument("--old-rev", default="HEAD", help="git revision of the old tool (default HEAD)")
    ap.add_argument("--engines", default="numpy,tantivy", help="engines of the new tool (default numpy,tantivy)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=128, help="queries per turn (default 128: two batches)")
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--keep", type=int, default=16)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)

    tmp = None
    folder = args.index
    if folder is None:
        tmp = tempfile.TemporaryDirectory(prefix="tm-bench-")
        folder = os.path.join(tmp.name, "index")
        new.build_index(args.memory_src, folder)
    queries = new.read_lines(args.query)

    setups = {}
    old = old_module(args.old_rev)
    t0 = time.perf_counter()
    mem = old.Memory(args.memory_src)
    setups["old"] = (old, mem, old.open_index(folder, mem))
    mem.codes  # noqa: B018 - vocabulary built before the clock starts, as retrieve_split does
    startup = {"old": time.perf_counter() - t0}
    for engine in args.engines.split(","):
        t0 = time.perf_counter()
        mem = new.Memory(args.memory_src)
        setups[f"new-{engine}"] = (new, mem, new.open_index(folder, mem, engine))
        mem.codes  # noqa: B018
        startup[f"new-{engine}"] = time.perf_counter() - t0

    names = list(setups)
    for mod, mem, retriever in setups.values():   # warm-up: lazy imports (the side-file type) off the clock
        mod.retrieve_one(retriever, mem, mod.tokenize(queries[0]), candidates=args.candidates, keep=args.keep)
    wall = {k: [0.0] * args.rounds for k in names}
    cpu = {k: 0.0 for k in names}
    answers = {k: [None] * len(queries) for k in names}
    stable = {k: True for k in names}
    load0 = os.getloadavg()
    chunks = [range(a, min(a + args.chunk, len(queries))) for a in range(0, len(queries), args.chunk)]
    turn = 0
    for r in range(args.rounds):
        for rows in chunks:
            order = names[turn % len(names):] + names[:turn % len(names)]
            turn += 1
            for k in order:
                mod, mem, retriever = setups[k]
                w0, c0 = time.perf_counter(), time.process_time()
                got = mod.retrieve_split(retriever, mem, [queries[i] for i in rows], candidates=args.candidates,
                                         keep=args.keep, log_every=0)[0]
                wall[k][r] += time.perf_counter() - w0
                cpu[k] += time.process_time() - c0
                for i, e in zip(rows, got):
                    a = answer(e)
                    if answers[k][i] is None:
                        answers[k][i] = a
                    elif answers[k][i] != a:
                        stable[k] = False
    load1 = os.getloadavg()
    n = len(queries)
    res = {"cpu": cpu_name(), "threads": 1, "loadavg_before": load0, "loadavg_after": load1,
           "queries": n, "rounds": args.rounds, "old_rev": args.old_rev, "setups": {}}
    for k in names:
        same = sum(a == b for a, b in zip(answers[k], answers["old"]))
        res["setups"][k] = {
            "qps_wall": round(n * args.rounds / sum(wall[k]), 1),
            "qps_cpu": round(n * args.rounds / cpu[k], 1),
            "speedup_wall_median": round(statistics.median(o / w for o, w in zip(wall["old"], wall[k])), 3),
            "agreement": f"{same}/{n}", "agreement_share": same / n, "deterministic": stable[k],
            "startup_s": round(startup[k], 3)}
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

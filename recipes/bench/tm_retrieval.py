"""Queries/s of the SEG-NMT retrieval stage (``fairseq-ext-tm retrieve``), old code against new, *interleaved*.

The retrieval (``retrieve_split``: tokens, BM25 top-100, fuzzy re-rank of Eq. 4.1, Algorithm 1) is timed for

* ``old@<rev>``: the retrieval tool as committed at each revision of ``--old-rev`` (comma-separated), with
  its default engine. The tool has moved (``fairseq_ext/tools/retrieval.py``, then ``tools/tm/retrieval.py``
  beside ``memory_index.py``, ``selection.py``, ``tm_engines.py``), so the revision's whole
  ``fairseq_ext/tools`` tree is extracted (``git archive``) into a temporary folder and imported under a
  package name of its own (its ``fairseq_ext.tools`` imports renamed), beside the working tree's;
* ``new-<engine>``: the working tree's tool, once per engine of ``--engines``;

on the same index, memory and queries, in one process and one thread. The queries are cut into chunks of
``--chunk``; every chunk is answered by every setup in turn (rotated order), ``--rounds`` times over the
whole query file, so a change of the machine's load hits all setups alike. Reported per setup: queries
per wall second and per CPU second of this process (summed over rounds), the median over rounds of its
wall-clock speed-up against the first old revision (the reference), and the **agreement**: the share of
queries whose written answer (kept candidates, their fuzzy scores, Algorithm 1's selection) is identical to
the reference's. An index the old code refuses (another index format) is rebuilt for it by its own
``build_index`` in a temporary folder.

    OMP_NUM_THREADS=1 .venv/bin/python recipes/bench/tm_retrieval.py \\
        --memory-src data/bible_es_en/raw/train.es --query data/bible_es_en/raw/test.es \\
        --old-rev b7e6130,2102380~1

(the index is built in a temporary folder unless ``--index`` names one built by ``fairseq-ext-tm
build-index``).
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

from fairseq_ext.tools.common import cpu_name  # noqa: E402
from fairseq_ext.tools.tm import retrieval as new  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: where the retrieval tool has lived, newest first (a revision is searched for the first one it has)
TOOL_PATHS = ("fairseq_ext/tools/tm/retrieval.py", "fairseq_ext/tools/retrieval.py")
TOOLS = "fairseq_ext/tools"


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True).stdout


def tool_path(rev: str) -> str:
    """The path of the retrieval tool at ``rev`` (the first of :data:`TOOL_PATHS` it has)."""
    names = set(_git("ls-tree", "-r", "--name-only", rev, TOOLS).decode().split())
    for path in TOOL_PATHS:
        if path in names:
            return path
    raise SystemExit(f"error: {rev}: no retrieval tool at {' or '.join(TOOL_PATHS)}")


def old_module(rev: str, folder: str) -> types.ModuleType:
    """The retrieval tool as committed at ``rev``, imported with the ``fairseq_ext/tools`` tree of that
    revision (extracted under ``folder`` as the package ``_tm_at_<sha>``, so its siblings are the old ones
    too); what it imports from outside ``tools`` (the side-file entry type) is the working tree's."""
    sha = _git("rev-parse", "--short=12", rev).decode().strip()
    path = tool_path(sha)
    alias = f"_tm_at_{sha}"
    for name in [m for m in sys.modules if m == alias or m.startswith(alias + ".")]:
        del sys.modules[name]  # a copy extracted by an earlier call may be gone
    with tarfile.open(fileobj=io.BytesIO(_git("archive", sha, TOOLS))) as tar:
        tar.extractall(folder, filter="data")
    os.rename(os.path.join(folder, "fairseq_ext"), os.path.join(folder, alias))
    for top, _, files in os.walk(os.path.join(folder, alias)):
        for name in files:
            if name.endswith(".py"):
                p = os.path.join(top, name)
                with open(p, encoding="utf-8") as f:
                    text = f.read()
                with open(p, "w", encoding="utf-8") as f:
                    f.write(re.sub(r"\bfairseq_ext\.tools\b", alias + ".tools", text))
    package = types.ModuleType(alias)  # empty: not the old fairseq_ext/__init__ (it would register the models again)
    package.__path__ = [os.path.join(folder, alias)]
    sys.modules[alias] = package
    mod = importlib.import_module(alias + path[len("fairseq_ext"):-len(".py")].replace("/", "."))
    mod.bench_source = f"{rev} ({sha}:{path})"
    return mod


def open_old(mod: types.ModuleType, folder: str, memory_src: str, scratch: str):
    """(memory, retriever) of the old tool on the index in ``folder``; an index it refuses (built in another
    format) is rebuilt by its own ``build_index`` under ``scratch``."""
    mem = mod.Memory(memory_src)
    try:
        return mem, mod.open_index(folder, mem)
    except Exception as e:  # noqa: BLE001 - the old tool's own ToolError class
        own = os.path.join(scratch, "index-" + mod.__name__.split(".")[0])
        print(f"[bench] {mod.bench_source}: refuses {folder} ({e}); its own index in {own}", file=sys.stderr)
        mod.build_index(memory_src, own, memory=mem)
        return mem, mod.open_index(own, mem)


def answer(e) -> tuple:
    return tuple(e.ids), tuple(e.fuzzy), tuple(e.adaptive)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memory-src", required=True)
    ap.add_argument("--query", required=True)
    ap.add_argument("--index", help="an index folder of this memory (default: built in a temporary folder)")
    ap.add_argument("--old-rev", default="HEAD",
                    help="git revisions of the old tool, comma-separated; the first is the reference (default HEAD)")
    ap.add_argument("--engines", default="numpy,tantivy", help="engines of the new tool (default numpy,tantivy)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=128, help="queries per turn (default 128: two batches)")
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--keep", type=int, default=16)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="tm-bench-")
    try:
        return run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, tmp: str) -> int:
    folder = args.index
    if folder is None:
        folder = os.path.join(tmp, "index")
        new.build_index(args.memory_src, folder)
    queries = new.read_lines(args.query)

    setups = {}
    startup = {}
    revs = [r for r in args.old_rev.split(",") if r]
    for i, rev in enumerate(revs):
        old = old_module(rev, os.path.join(tmp, f"src{i}"))
        t0 = time.perf_counter()
        mem, retriever = open_old(old, folder, args.memory_src, tmp)
        mem.codes  # noqa: B018 - vocabulary built before the clock starts, as retrieve_split does
        setups[f"old@{rev}"] = (old, mem, retriever)
        startup[f"old@{rev}"] = time.perf_counter() - t0
    ref = f"old@{revs[0]}"
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
           "queries": n, "rounds": args.rounds, "reference": ref,
           "sources": {k: m.bench_source for k, (m, _, _) in setups.items() if hasattr(m, "bench_source")},
           "setups": {}}
    for k in names:
        same = sum(a == b for a, b in zip(answers[k], answers[ref]))
        res["setups"][k] = {
            "qps_wall": round(n * args.rounds / sum(wall[k]), 1),
            "qps_cpu": round(n * args.rounds / cpu[k], 1),
            "qps_wall_rounds": [round(n / w, 1) for w in wall[k]],
            "speedup_wall_median": round(statistics.median(o / w for o, w in zip(wall[ref], wall[k])), 3),
            "agreement": f"{same}/{n}", "agreement_share": same / n, "deterministic": stable[k],
            "startup_s": round(startup[k], 3)}
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

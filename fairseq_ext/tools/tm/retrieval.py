r"""The retrieval stage of SEG-NMT (Gu thesis ch. 4, §4.2.1) as an offline tool.

The translation memory is the training split: its source side is indexed once, every example of a
split is answered with the most similar training pairs, written as ``{split}.tm.jsonl`` +
``{split}.tm.meta.json`` for the ``seg_translation`` task (:mod:`fairseq_ext.data.translation_memory`).

Per query:

1. word tokens (``tokenize``, case kept) and lowercased index terms (``index_terms``), both of
   :mod:`~fairseq_ext.tools.tm.tm_engines`;
2. BM25 candidates (its ``Retriever``, ``--candidates 100``; k1 = 1.2, b = 0.75);
3. fuzzy re-ranking (:func:`~fairseq_ext.tools.tm.selection.rerank`, Eq. 4.1: S_fuzzy = 1 - D_edit /
   max(|X|, |X'|)), best ``--keep``;
4. adaptive selection (:func:`~fairseq_ext.tools.tm.selection.adaptive_select`, Algorithm 1, coverage with
   the union).

``--train-mode`` excludes a query's own line (§4.2.3); ``--exclude-identical`` also drops identical
lines. Two engines share the interface (:mod:`fairseq_ext.tools.tm.tm_engines`, ``--engine``): ``numpy``
(default) and ``tantivy``. The index (:mod:`fairseq_ext.tools.tm.memory_index`) is stamped and reused; a
stale or corrupt index is refused (``build-index --force`` rebuilds it). This module answers the queries,
reads the side files (``select``, ``tm-baseline``, ``stats``) and holds the CLI.

Usage (installed: ``fairseq-ext-tm``)::

    fairseq-ext-tm build-index --memory-src data/bible_es_en/raw/train.es --index data/bible_es_en/tm_index
    fairseq-ext-tm retrieve --index data/bible_es_en/tm_index --memory-src data/bible_es_en/raw/train.es \
        --query data/bible_es_en/raw/test.es --out-dir data/bible_es_en/spm8000/bin --split test
    fairseq-ext-tm select --side BIN/test.tm.jsonl --selection adaptive|topk [--k 2]
    fairseq-ext-tm tm-baseline --side BIN/test.tm.jsonl --memory-tgt data/bible_es_en/raw/train.en --out hyp
    fairseq-ext-tm stats --side BIN/test.tm.jsonl

``tm-baseline`` is the "TM" baseline of Table 4.2. Bad input prints one ``error: FILE:LINE: ...`` line,
exit status 2.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_ext.tools.common import (
    ArgumentParser, ToolError, atomic_write, json_text, log, positive_int, progress, read_lines, require_file,
    run_cli, write_json,
)
from fairseq_ext.tools.tm.memory_index import Memory, build_index, open_index, sha1_file
from fairseq_ext.tools.tm.selection import adaptive_select, rerank_batch
from fairseq_ext.tools.tm.tm_engines import DEFAULT_ENGINE, ENGINES, TOKENIZER, Retriever, tokenize

__all__ = ["BATCH", "DEFAULT_BINS", "retrieve_one", "retrieve_batch", "retrieve_split", "load_side", "tm_baseline",
           "fuzzy_stats", "parse_bins", "build_parser", "main", "cli_main"]

BATCH = 16                 # queries scored at once (a batch x memory matrix of doubles)
DEFAULT_BINS = tuple(round(0.1 * i, 1) for i in range(11))


# --------------------------------------------------------------------------------------------- retrieval
def retrieve_one(retriever: Retriever, memory: Memory, query_tokens: Sequence[str], *, candidates: int = 100,
                 keep: int = 16, exclude: Iterable[int] = (), timing: Optional[List[float]] = None):
    """The side-file entry of one query: the ``keep`` best of ``candidates`` BM25 hits re-ranked by fuzzy
    score, and Algorithm 1's selection among them. ``exclude``: memory indices never returned."""
    return retrieve_batch(retriever, memory, [query_tokens], candidates=candidates, keep=keep,
                          excludes=[exclude], timing=timing)[0]


def retrieve_batch(retriever: Retriever, memory: Memory, token_lists: Sequence[Sequence[str]], *,
                   candidates: int = 100, keep: int = 16, excludes: Optional[Sequence[Iterable[int]]] = None,
                   timing: Optional[List[float]] = None) -> list:
    """:func:`retrieve_one` of every query of a batch (the engine scores the batch at once), in order.
    ``excludes``: the memory indices never returned, per query; ``timing``: seconds of the BM25 search
    and of the re-ranking + Algorithm 1 are added to ``timing[0]`` and ``timing[1]``."""
    from fairseq_ext.data.translation_memory import TMEntry

    excludes = [set(e) for e in excludes] if excludes is not None else [set() for _ in token_lists]
    t0 = time.perf_counter()
    hits = retriever.search_batch(token_lists, candidates + max(map(len, excludes), default=0))
    for i, ex in enumerate(excludes):
        idx, bm25 = hits[i]
        if ex:
            kept = ~np.isin(idx, np.fromiter(ex, np.int64, len(ex)))
            idx, bm25 = idx[kept], bm25[kept]
        hits[i] = (idx[:candidates], bm25[:candidates])
    t1 = time.perf_counter()
    codes = [memory.encode(toks) for toks in token_lists]
    mem = memory.codes
    entries = []
    for (idx, _), query, (order, fuzzy) in zip(hits, codes, rerank_batch(codes, hits, mem, keep)):
        ids = idx[order].tolist()
        chosen = adaptive_select(query, [mem[i] for i in ids])
        entries.append(TMEntry(ids=ids, fuzzy=fuzzy.tolist(), adaptive=[ids[p] for p in chosen]))
    if timing is not None:
        timing[0] += t1 - t0
        timing[1] += time.perf_counter() - t1
    return entries


def retrieve_split(retriever: Retriever, memory: Memory, queries: Sequence[str], *, candidates: int = 100,
                   keep: int = 16, exclude_self: bool = False, exclude_identical: bool = False,
                   log_every: int = 5000, batch: int = BATCH) -> Tuple[list, dict]:
    """Entries for every query line (one each, in order; ``batch`` queries at a time) and the timing
    ``{"queries", "seconds", "cpu_seconds", "qps", "cpu_qps", "search_ms", "rerank_ms"}`` (wall clock, and
    this process's CPU time: the retrieval runs on one thread). ``exclude_self``: query line i is memory
    line i (training mode)."""
    memory.codes  # noqa: B018 - the vocabulary is built before the clock starts
    entries: list = []
    timing = [0.0, 0.0]
    t0, c0 = time.perf_counter(), time.process_time()
    n = len(queries)
    logged = 0
    for start in progress(range(0, n, batch), desc="retrieve", total=-(-n // batch), unit="batch"):
        rows = range(start, min(start + batch, n))
        toks = [tokenize(queries[i]) for i in rows]
        excludes = [[i] if exclude_self else [] for i in rows]
        if exclude_identical:
            for ex, t in zip(excludes, toks):
                ex.extend(memory.identical(t))
        entries.extend(retrieve_batch(retriever, memory, toks, candidates=candidates, keep=keep,
                                      excludes=excludes, timing=timing))
        if log_every and len(entries) // log_every > logged and len(entries) < n:
            logged = len(entries) // log_every
            log(f"[tm] {len(entries)}/{n} queries, {len(entries) / (time.perf_counter() - t0):.0f} queries/s")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = {"queries": n, "seconds": seconds, "cpu_seconds": cpu,
             "qps": n / seconds if seconds > 0 else float("inf"),
             "cpu_qps": n / cpu if cpu > 0 else float("inf"),
             "search_ms": 1000 * timing[0] / max(n, 1), "rerank_ms": 1000 * timing[1] / max(n, 1)}
    return entries, stats


# --------------------------------------------------------------------------------------------- side files
def _side_location(path: str) -> Tuple[str, str]:
    base = os.path.basename(path)
    if not base.endswith(".tm.jsonl") or base == ".tm.jsonl":
        raise ToolError("a side file is named {split}.tm.jsonl (written by `fairseq-ext-tm retrieve`)", path)
    return os.path.dirname(path) or ".", base[:-len(".tm.jsonl")]


def load_side(path: str):
    """``(entries, meta)`` of a side file given by the path of its ``{split}.tm.jsonl``."""
    from fairseq_ext.data.translation_memory import TMFormatError, read_tm

    data_dir, split = _side_location(path)
    try:
        return read_tm(data_dir, split)
    except TMFormatError as e:
        raise ToolError(str(e)) from None


def tm_baseline(entries, tgt_lines: Sequence[str]) -> List[str]:
    """The "TM" baseline: the target of the best match of every example ("" when none)."""
    return [tgt_lines[e.ids[0]] if e.ids else "" for e in entries]


def fuzzy_stats(entries, bins: Sequence[float] = DEFAULT_BINS) -> dict:
    """Distribution of the top-1 fuzzy score (an example without a candidate counts as 0 in the mean and
    the histogram; bins are ``[a, b)``, the last one ``[a, b]``; a score outside the edges is in no bin),
    plus the average numbers of candidates and of adaptively selected pairs."""
    top = [e.fuzzy[0] if e.fuzzy else 0.0 for e in entries]
    n = len(top)
    edges = list(bins)
    counts = [0] * (len(edges) - 1)
    for s in top:
        for j in range(len(edges) - 1):
            last = j == len(edges) - 2
            if edges[j] <= s < edges[j + 1] or (last and s == edges[j + 1]):
                counts[j] += 1
                break
    srt = sorted(top)
    median = (srt[(n - 1) // 2] + srt[n // 2]) / 2 if n else None
    return {
        "examples": n,
        "with_candidate": sum(1 for e in entries if e.ids),
        "top1_ge_0.5": sum(1 for s in top if s >= 0.5),
        "top1_ge_0.7": sum(1 for s in top if s >= 0.7),
        "top1_ge_0.9": sum(1 for s in top if s >= 0.9),
        "top1_eq_1.0": sum(1 for s in top if s >= 1.0),
        "top1_mean": sum(top) / n if n else None,
        "top1_median": median,
        "avg_candidates": sum(len(e.ids) for e in entries) / n if n else None,
        "avg_adaptive_pairs": sum(len(e.adaptive) for e in entries) / n if n else None,
        "histogram": {"edges": edges, "counts": counts},
    }


def parse_bins(text: str) -> List[float]:
    try:
        edges = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ToolError(f"--bins: not a comma-separated list of numbers: {text!r}") from None
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ToolError(f"--bins: need at least two increasing edges: {text!r}")
    return edges


def _plot_histogram(stats: dict, path: str, title: str) -> None:
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    edges, counts = stats["histogram"]["edges"], stats["histogram"]["counts"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(edges[:-1], counts, width=[b - a for a, b in zip(edges, edges[1:])], align="edge",
           edgecolor="black", color="#4C72B0")
    ax.set_xlabel("top-1 fuzzy score (Eq. 4.1)")
    ax.set_ylabel("examples")
    ax.set_title(title)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="fairseq-ext-tm", allow_abbrev=False,
                        description="SEG-NMT retrieval stage (Gu ch. 4): translation-memory index (tantivy "
                                    "BM25), fuzzy re-ranking (Eq. 4.1), adaptive selection (Alg. 1), the TM "
                                    "baseline.")
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build-index", allow_abbrev=False, help="index the memory's source side (once)")
    b.add_argument("--memory-src", required=True, help="source side of the memory (the training split)")
    b.add_argument("--index", required=True, help="index folder")
    b.add_argument("--force", action="store_true", help="rebuild a stale or corrupt index")

    r = sub.add_parser("retrieve", allow_abbrev=False, help="retrieve for every line of a split; write the "
                                                            "side files {split}.tm.jsonl + .tm.meta.json")
    r.add_argument("--index", required=True, help="index folder of build-index")
    r.add_argument("--memory-src", required=True, help="the memory source file the index was built on")
    r.add_argument("--query", required=True, help="source side of the split (one sentence a line)")
    r.add_argument("--out-dir", required=True, help="folder of the side files (the binarized data)")
    r.add_argument("--split", help="split name of the side files (default: the query file's name up to "
                                   "its first dot)")
    r.add_argument("--train-mode", "--exclude-self", dest="exclude_self", action="store_true",
                   help="the query file is the memory: never return a query's own line")
    r.add_argument("--exclude-identical", action="store_true",
                   help="also drop memory lines whose tokens equal the query's (fuzzy 1.0)")
    r.add_argument("--candidates", type=positive_int, default=100, help="BM25 candidates (default 100)")
    r.add_argument("--keep", type=positive_int, default=16,
                   help="re-ranked candidates written per example (default 16)")
    r.add_argument("--engine", choices=sorted(ENGINES), default=DEFAULT_ENGINE,
                   help=f"BM25 engine (default {DEFAULT_ENGINE}): numpy = tantivy's scoring over arrays built "
                        f"from the memory, tantivy = a search of the index folder; the same candidates")

    s = sub.add_parser("select", allow_abbrev=False, help="the chosen ids of every example (top-K or adaptive)")
    s.add_argument("--side", required=True, help="a {split}.tm.jsonl side file")
    s.add_argument("--selection", choices=("topk", "adaptive"), default="adaptive")
    s.add_argument("--k", type=positive_int, default=1, help="K of top-K (default 1)")
    s.add_argument("--out", help="write the ids here (default: stdout)")

    t = sub.add_parser("tm-baseline", allow_abbrev=False, help="copy the best match's target (the TM baseline)")
    t.add_argument("--side", required=True, help="a {split}.tm.jsonl side file")
    t.add_argument("--memory-tgt", required=True, help="target side of the memory (e.g. train.en)")
    t.add_argument("--out", required=True, help="hypothesis file (one line per example)")

    st = sub.add_parser("stats", allow_abbrev=False, help="distribution of the top-1 fuzzy score (JSON)")
    st.add_argument("--side", required=True, help="a {split}.tm.jsonl side file")
    st.add_argument("--bins", default=",".join(str(b) for b in DEFAULT_BINS),
                    help="histogram edges (default 0,0.1,...,1.0; the last bin includes its right edge)")
    st.add_argument("--plot", metavar="PNG", help="also draw the histogram (matplotlib)")
    st.add_argument("--json", metavar="FILE", help="also write the statistics here")
    return ap


def _cmd_retrieve(args) -> int:
    from fairseq_ext.data.translation_memory import write_tm

    if args.keep > args.candidates:
        raise ToolError(f"--keep {args.keep} is more than --candidates {args.candidates}")
    split = args.split or os.path.basename(args.query).split(".")[0]
    if not split:
        raise ToolError("give --split (cannot derive it from the query file name)", args.query)
    t0 = time.perf_counter()
    memory = Memory(args.memory_src)
    retriever = open_index(args.index, memory, args.engine)
    require_file(args.query, "query file")
    query_sha1 = sha1_file(args.query)
    if args.exclude_self and query_sha1 != memory.sha1:
        raise ToolError(f"--train-mode: the query file must be the memory source {args.memory_src} "
                        f"(a query's own line is excluded by its line number)", args.query)
    queries = memory.lines if query_sha1 == memory.sha1 else read_lines(args.query)
    log(f"[tm] memory {args.memory_src}: {len(memory)} lines; {len(queries)} queries from {args.query} "
        f"(loaded in {time.perf_counter() - t0:.2f}s)")
    entries, stats = retrieve_split(retriever, memory, queries, candidates=args.candidates, keep=args.keep,
                                    exclude_self=args.exclude_self, exclude_identical=args.exclude_identical)
    log(f"[tm] {stats['queries']} queries in {stats['seconds']:.2f}s: {stats['qps']:.0f} queries/s "
        f"({stats['cpu_qps']:.0f} per CPU second, one thread; {args.engine} BM25 top-{args.candidates} "
        f"{stats['search_ms']:.3f} ms + fuzzy re-rank/Alg. 1 {stats['rerank_ms']:.3f} ms per query)")
    meta = {"memory_src": args.memory_src, "memory_lines": len(memory), "memory_size": memory.size,
            "memory_sha1": memory.sha1, "query": args.query, "query_sha1": query_sha1,
            "candidates": args.candidates, "keep": args.keep, "exclude_self": bool(args.exclude_self),
            "exclude_identical": bool(args.exclude_identical), "tokenizer": TOKENIZER,
            "engine": retriever.description, "index": args.index,
            "order": "fuzzy desc, BM25 desc, memory index asc",
            "adaptive": "Algorithm 1 (union erratum) over the kept candidates",
            "similarity": "1 - token Levenshtein / max length (Eq. 4.1)"}
    os.makedirs(args.out_dir, exist_ok=True)
    jsonl, meta_path = write_tm(args.out_dir, split, entries, meta)
    st = fuzzy_stats(entries)
    log(f"[tm] wrote {jsonl} + {os.path.basename(meta_path)}: top-1 fuzzy >= 0.5: {st['top1_ge_0.5']}, "
        f">= 0.7: {st['top1_ge_0.7']} of {st['examples']}; adaptive selects {st['avg_adaptive_pairs'] or 0:.2f} "
        f"pairs on average")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "build-index":
        build_index(args.memory_src, args.index, force=args.force)
        return 0
    if args.command == "retrieve":
        return _cmd_retrieve(args)
    entries, meta = load_side(args.side)
    if args.command == "select":
        chosen = [e.select(args.selection, args.k) for e in entries]
        text = "".join(" ".join(map(str, c)) + "\n" for c in chosen)
        if args.out:
            with atomic_write(args.out) as f:
                f.write(text)
        else:
            sys.stdout.write(text)
        n = max(len(entries), 1)
        what = "adaptive" if args.selection == "adaptive" else f"top-{args.k}"
        log(f"[tm] {what}: {sum(map(len, chosen)) / n:.3f} pairs on average over {len(entries)} examples "
            f"(adaptive: {sum(len(e.adaptive) for e in entries) / n:.3f})")
        return 0
    if args.command == "tm-baseline":
        tgt = read_lines(args.memory_tgt)
        if meta.get("memory_lines") is not None and len(tgt) != meta["memory_lines"]:
            raise ToolError(f"{len(tgt)} lines, but {args.side} was retrieved from a memory of "
                            f"{meta['memory_lines']} lines (another memory?)", args.memory_tgt)
        hyps = tm_baseline(entries, tgt)
        with atomic_write(args.out) as f:
            f.writelines(h + "\n" for h in hyps)
        log(f"[tm] TM baseline: {len(hyps)} lines -> {args.out} ({sum(1 for e in entries if not e.ids)} "
            f"without a match)")
        return 0
    # stats
    st = fuzzy_stats(entries, parse_bins(args.bins))
    st = dict({"side": args.side}, **st)
    sys.stdout.write(json_text(st, indent=1))
    if args.json:
        write_json(args.json, st)
    if args.plot:
        _plot_histogram(st, args.plot, f"{os.path.basename(args.side)}: top-1 fuzzy score "
                                       f"(n={st['examples']})")
        log(f"[tm] histogram -> {args.plot}")
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-tm`` / ``python -m fairseq_ext.tools.tm.retrieval``."""
    run_cli(main, argv)

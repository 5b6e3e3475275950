r"""The retrieval stage of SEG-NMT (Gu thesis ch. 4, §4.2.1) as an offline tool.

The translation memory is the training split: its source side is indexed once, every example of a
split is answered with the most similar training pairs, written as ``{split}.tm.jsonl`` +
``{split}.tm.meta.json`` for the ``seg_translation`` task (:mod:`fairseq_ext.data.translation_memory`).

Per query:

1. word tokens (:func:`tokenize`, case kept) and lowercased index terms (:func:`index_terms`);
2. BM25 candidates (:class:`Retriever`, ``--candidates 100``; k1 = 1.2, b = 0.75);
3. fuzzy re-ranking (:func:`rerank`, Eq. 4.1: S_fuzzy = 1 - D_edit / max(|X|, |X'|)), best ``--keep``;
4. adaptive selection (:func:`adaptive_select`, Algorithm 1, coverage with the union).

``--train-mode`` excludes a query's own line (§4.2.3); ``--exclude-identical`` also drops identical
lines. Two engines share the interface (:mod:`fairseq_ext.tools.tm.tm_engines`, ``--engine``): ``numpy``
(default) and ``tantivy``. The index is stamped and reused; a stale or corrupt index is refused
(``build-index --force`` rebuilds it).

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

import hashlib
import os
import shutil
import sys
import time
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from fairseq_ext.tools.common import (
    ArgumentParser, ToolError, atomic_write, json_text, log, positive_int, progress, read_json, read_lines,
    require_file, run_cli, stamp_path, write_json, write_stamp,
)
from fairseq_ext.tools.tm.tm_engines import (  # noqa: F401 - LINE_FIELD, TEXT_FIELD: the index schema, re-exported
    DEFAULT_ENGINE, ENGINE, ENGINES, LINE_FIELD, TEXT_FIELD, TOKENIZER, NumpyRetriever, Retriever,
    TantivyRetriever, index_terms, tokenize,
)

__all__ = [
    "TOKENIZER", "ENGINE", "ENGINES", "tokenize", "index_terms", "fuzzy_score", "Candidate", "rerank",
    "coverage", "adaptive_select", "Retriever", "TantivyRetriever", "NumpyRetriever", "Memory", "build_index",
    "open_index",
    "retrieve_one", "retrieve_split", "tm_baseline", "fuzzy_stats", "main", "cli_main",
]

INDEX_FORMAT = 1
BATCH = 16                 # queries scored at once (a batch x memory matrix of doubles)
STAMP_STEP = "tm-index"
DEFAULT_BINS = tuple(round(0.1 * i, 1) for i in range(11))


# --------------------------------------------------------------------------------------------- Eq. 4.1
def fuzzy_score(a: Sequence, b: Sequence) -> float:
    """Eq. 4.1: ``1 - Levenshtein(a, b) / max(|a|, |b|)`` over token sequences (1.0 when both are empty).

    The elements are compared for equality only (strings, or integer codes of them)."""
    from rapidfuzz.distance import Levenshtein

    if isinstance(a, str) or isinstance(b, str):
        raise TypeError("fuzzy_score takes token sequences, not strings (use tokenize())")
    n = max(len(a), len(b))
    if n == 0:
        return 1.0
    return 1.0 - Levenshtein.distance(a, b) / n


class Candidate(NamedTuple):
    """One re-ranked memory pair: its memory (training-line) index, fuzzy score and BM25 score."""
    index: int
    fuzzy: float
    bm25: float


def rerank(query: Sequence, hits: Sequence[Tuple[int, float]], memory: Sequence[Sequence],
           keep: Optional[int] = None) -> List[Candidate]:
    """Fuzzy re-ranking of the engine's ``(memory index, BM25)`` hits (Eq. 4.1 against ``memory[index]``,
    in the same token representation as ``query``): fuzzy descending, BM25 descending, index ascending;
    the best ``keep`` (all when ``None``). The scores are exactly :func:`fuzzy_score`'s."""
    if not hits:
        return []
    idx = np.fromiter((h[0] for h in hits), np.int64, len(hits))
    bm25 = np.fromiter((h[1] for h in hits), np.float64, len(hits))
    [(order, fuzzy)] = rerank_batch([query], [(idx, bm25)], memory, keep)
    return [Candidate(*c) for c in zip(idx[order].tolist(), fuzzy.tolist(), bm25[order].tolist())]


def rerank_batch(queries: Sequence[Sequence], hits: Sequence[Tuple[np.ndarray, np.ndarray]],
                 memory: Sequence[Sequence], keep: Optional[int] = None) -> List[Tuple[np.ndarray, np.ndarray]]:
    """:func:`rerank` of a batch on arrays: for every query and its hits ``(memory indices, BM25)``, the
    positions (into its hits) of the best ``keep`` in rank order, and their fuzzy scores. The distances
    of a query come from one ``rapidfuzz.process.cdist`` call, the order of the batch from one
    ``lexsort``; ``1 - d / n`` is computed as ``-(d / n - 1)``, the same double as :func:`fuzzy_score`."""
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    sizes = np.array([len(idx) for idx, _ in hits], dtype=np.int64)
    if not sizes.sum():
        return [(np.zeros(0, np.int64), np.zeros(0, np.float64)) for _ in hits]
    idx = np.concatenate([h[0] for h in hits])
    seqs = [memory[i] for i in idx.tolist()]
    starts = (np.cumsum(sizes) - sizes).tolist()
    dist = np.concatenate([process.cdist([query], seqs[start:start + size], scorer=Levenshtein.distance,
                                         dtype=np.int64, workers=1)[0]
                           for query, start, size in zip(queries, starts, sizes.tolist()) if size])
    longest = np.maximum(np.fromiter(map(len, seqs), np.int64, len(seqs)),
                         np.repeat(np.fromiter(map(len, queries), np.int64, len(queries)), sizes))
    # (query, -fuzzy, -BM25, index) ascending; two empty sequences are identical (fuzzy 1)
    neg_fuzzy = np.where(longest > 0, dist / np.maximum(longest, 1) - 1.0, -1.0)
    rows = np.repeat(np.arange(len(hits)), sizes)
    order = np.lexsort((idx, -np.concatenate([h[1] for h in hits]), neg_fuzzy, rows))
    out = []
    for start, size in zip(starts, sizes.tolist()):
        best = order[start:start + (size if keep is None else min(size, keep))]
        out.append((best - start, -neg_fuzzy[best]))
    return out


# --------------------------------------------------------------------------------------------- Algorithm 1
def coverage(query: Sequence, selected: Iterable[Sequence]) -> float:
    """Share of the tokens of ``query`` (with repeats) that occur in any of the ``selected`` sources."""
    if not query:
        return 0.0
    covered = set()
    for s in selected:
        covered.update(s)
    return sum(1 for x in query if x in covered) / len(query)


def adaptive_select(query: Sequence, candidates: Sequence[Sequence]) -> List[int]:
    """Algorithm 1 with the union erratum: positions (into ``candidates``, ranked best first) of the pairs
    selected greedily, each one strictly increasing the coverage ``c`` of the query's tokens by the union
    of the selected sources. An empty query selects nothing.

    With the union, ``c_tmp - c`` is the share of query positions whose token occurs in ``X'_k`` and in no
    source selected so far, so ``c_tmp > c`` exactly when ``X'_k`` contains a query token not yet covered:
    that test (a set intersection) is what runs here; tests check it against the literal formula."""
    if not query:
        return []
    uncovered = set(query)
    chosen: List[int] = []
    for k, cand in enumerate(candidates):
        if not uncovered:
            break                  # c = 1: nothing can increase it
        if not uncovered.isdisjoint(cand):
            uncovered.difference_update(cand)   # R <- R ∪ {X'_k : Y'_k} (the thesis writes R <- {X'_k : Y'_k})
            chosen.append(k)
    return chosen


# --------------------------------------------------------------------------------------------- memory
def _sha1_bytes(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def _sha1_file(path: str) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_MAX_CODE = 0x10FFFF - 0x800       # code points left when the surrogates are skipped
_MAX_STR_TYPES = 1_000_000         # more token types than this: integer lists instead of strings


def _chars(ids: Sequence[int]) -> str:
    """Token ids as a string of one code point each (the surrogate block skipped)."""
    return "".join([chr(i) if i < 0xD800 else chr(i + 0x800) for i in ids])


class Memory:
    """The source side of the translation memory (a text file, one sentence a line): its lines, word
    tokens, a code of the tokens (for the fast edit distance) and identity (size, lines, SHA-1)."""

    def __init__(self, path: str) -> None:
        require_file(path, "memory source file")
        self.path = path
        with open(path, "rb") as f:
            data = f.read()
        self.size = len(data)
        self.sha1 = _sha1_bytes(data)
        self.lines = read_lines(path)
        self.tokens = [tokenize(s) for s in self.lines]
        self._vocab: Optional[Dict[str, int]] = None
        self._codes: Optional[list] = None
        self._by_tokens: Optional[Dict[tuple, List[int]]] = None
        self._as_str = True

    def __len__(self) -> int:
        return len(self.lines)

    def info(self) -> dict:
        """What identifies the memory (the parameters of the index stamp)."""
        return {"memory_lines": len(self.lines), "memory_size": self.size, "memory_sha1": self.sha1}

    @property
    def codes(self) -> List[Union[str, List[int]]]:
        """Every memory line's tokens in an equality-preserving code, one code per distinct token string:
        a ``str`` with one character per token (rapidfuzz's edit distance is twice as fast on strings as on
        lists), or a list of ints when the memory has too many token types for Unicode."""
        if self._codes is None:
            vocab: Dict[str, int] = {}
            ids = [[vocab.setdefault(t, len(vocab)) for t in toks] for toks in self.tokens]
            self._vocab = vocab
            self._as_str = len(vocab) < _MAX_STR_TYPES
            self._codes = [_chars(x) for x in ids] if self._as_str else ids
        return self._codes

    def encode(self, tokens: Sequence[str]) -> Union[str, List[int]]:
        """``tokens`` in the code of :attr:`codes`; a token absent from the memory gets a code of its own
        (equal tokens, equal codes), so edit distances and coverage are those of the token strings."""
        self.codes  # noqa: B018 - builds the vocabulary
        vocab = self._vocab
        base = len(vocab)
        unk: Dict[str, int] = {}
        ids = [vocab[t] if t in vocab else base + unk.setdefault(t, len(unk)) for t in tokens]
        if not self._as_str:
            return ids
        if base + len(unk) > _MAX_CODE:
            raise ToolError(f"a query with {len(unk)} distinct unknown tokens is too long to encode")
        return _chars(ids)

    def identical(self, tokens: Sequence[str]) -> List[int]:
        """Memory lines whose tokens equal ``tokens``."""
        if self._by_tokens is None:
            by: Dict[tuple, List[int]] = {}
            for i, toks in enumerate(self.tokens):
                by.setdefault(tuple(toks), []).append(i)
            self._by_tokens = by
        return self._by_tokens.get(tuple(tokens), [])


# --------------------------------------------------------------------------------------------- index folder
def _index_files(folder: str) -> List[str]:
    """The files of a built index (tantivy's lock files and our stamp left out)."""
    return sorted(n for n in os.listdir(folder)
                  if os.path.isfile(os.path.join(folder, n)) and not n.startswith(".tantivy-")
                  and not n.startswith(".stamp."))


def _index_params(memory: Memory) -> dict:
    return dict(memory.info(), format=INDEX_FORMAT, engine=ENGINE, tokenizer=TOKENIZER)


def _describe(params: dict) -> str:
    return (f"{params.get('memory_lines')} lines, {params.get('memory_size')} bytes, "
            f"sha1 {str(params.get('memory_sha1'))[:12]}")


def _check_index(folder: str, memory: Memory) -> dict:
    """The stamp of a usable index of ``memory`` in ``folder``; a :class:`ToolError` naming the folder when
    it is missing, stale (built on other data or by another version) or corrupt."""
    if not os.path.isdir(folder):
        raise ToolError("no translation-memory index here (run `fairseq-ext-tm build-index` first)", folder)
    sp = stamp_path(folder, STAMP_STEP)
    if not os.path.isfile(sp):
        raise ToolError("not a complete translation-memory index: no stamp file "
                        f"{os.path.basename(sp)} (an interrupted build or another folder); "
                        "rebuild it with `fairseq-ext-tm build-index --force`", folder)
    try:
        stamp = read_json(sp)
    except (ToolError, OSError, UnicodeDecodeError) as e:
        raise ToolError(f"corrupt index: unreadable stamp ({e}); rebuild it with build-index --force",
                        folder) from None
    if not isinstance(stamp, dict) or not isinstance(stamp.get("params"), dict) \
            or not isinstance(stamp.get("files"), dict):
        raise ToolError("corrupt index: malformed stamp; rebuild it with build-index --force", folder)
    want = _index_params(memory)
    have = stamp["params"]
    if any(have.get(k) != want[k] for k in ("memory_lines", "memory_size", "memory_sha1")):
        raise ToolError(f"stale index: built on other data ({stamp.get('memory_src', '?')}: {_describe(have)}), "
                        f"not on {memory.path} ({_describe(want)}); rebuild it with build-index --force",
                        folder)
    if have != want:
        diff = ", ".join(k for k in sorted(set(want) | set(have)) if have.get(k) != want.get(k))
        raise ToolError(f"stale index: built by another version of the tool (differs in {diff}); "
                        f"rebuild it with build-index --force", folder)
    for name, rec in sorted(stamp["files"].items()):
        p = os.path.join(folder, name)
        if not os.path.isfile(p):
            raise ToolError(f"corrupt index: file {name} is missing; rebuild it with build-index --force",
                            folder)
        if os.path.getsize(p) != rec.get("size") or _sha1_file(p) != rec.get("sha1"):
            raise ToolError(f"corrupt index: file {name} changed since the build; rebuild it with "
                            f"build-index --force", folder)
    return stamp


def open_index(folder: str, memory: Memory, engine: str = DEFAULT_ENGINE) -> Retriever:
    """The retriever of the index in ``folder``, after checking that it was built on ``memory`` and that
    its files are intact (else a :class:`ToolError` naming the folder; never silently used). ``engine``
    ``tantivy`` searches the index itself; ``numpy`` (the same BM25) holds the memory's postings in arrays,
    built from ``memory`` -- the index is checked all the same, so both engines refuse the same folders."""
    if engine not in ENGINES:
        raise ToolError(f"unknown engine {engine!r} (choose from {', '.join(sorted(ENGINES))})")
    _check_index(folder, memory)
    if engine == NumpyRetriever.name:
        return NumpyRetriever(memory.tokens)
    try:
        retriever = TantivyRetriever(folder)
    except ToolError:
        raise
    except Exception as e:  # tantivy raises ValueError/OSError/its own errors on a damaged index
        raise ToolError(f"corrupt index: tantivy cannot open it ({e}); rebuild it with build-index --force",
                        folder) from None
    if len(retriever) != len(memory):
        raise ToolError(f"corrupt index: {len(retriever)} documents for a memory of {len(memory)} lines; "
                        f"rebuild it with build-index --force", folder)
    return retriever


def _removable(folder: str) -> bool:
    """Only an index (ours or tantivy's) or an empty folder is ever deleted by ``--force``."""
    names = os.listdir(folder)
    return not names or os.path.isfile(stamp_path(folder, STAMP_STEP)) or "meta.json" in names


def build_index(memory_src: str, folder: str, force: bool = False, memory: Optional[Memory] = None) -> dict:
    """Build (or reuse) the index of ``memory_src`` in ``folder``. Returns ``{"reused": bool, "seconds",
    "docs", ...}``. An existing index of the same memory is reused; a stale or corrupt one is an error
    unless ``force`` (then rebuilt). The new index is built in a sibling folder and moved into place when
    complete, so a failed build never destroys the old index."""
    t0 = time.perf_counter()
    memory = memory or Memory(memory_src)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ToolError("exists and is not a folder", folder)
    if os.path.isdir(folder):
        try:
            _check_index(folder, memory)
            TantivyRetriever(folder)  # opens
            log(f"[tm] index {folder} is up to date (memory {memory.path}: {_describe(memory.info())}); "
                f"reused (--force rebuilds it)")
            return {"reused": True, "seconds": time.perf_counter() - t0, "docs": len(memory), "index": folder}
        except ToolError as e:
            if not force:
                raise
            if os.listdir(folder) and not _removable(folder):
                raise ToolError("exists and is not a translation-memory index; not deleting it "
                                "(choose another --index folder)", folder) from None
            log(f"[tm] --force: rebuilding {folder} ({e.message})")
        except Exception as e:  # noqa: BLE001 - tantivy cannot open it
            if not force:
                raise ToolError(f"corrupt index: tantivy cannot open it ({e}); rebuild it with "
                                f"build-index --force", folder) from None
            log(f"[tm] --force: rebuilding {folder} (tantivy cannot open it: {e})")
    parent = os.path.dirname(os.path.abspath(folder))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(folder))}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        t_idx = time.perf_counter()
        docs = TantivyRetriever.build(tmp, progress(memory.tokens, desc="index", unit="line"))
        index_seconds = time.perf_counter() - t_idx
        files = {name: {"size": os.path.getsize(os.path.join(tmp, name)),
                        "sha1": _sha1_file(os.path.join(tmp, name))} for name in _index_files(tmp)}
        seconds = time.perf_counter() - t0
        write_stamp(tmp, STAMP_STEP, _index_params(memory), list(files),
                    extra={"memory_src": os.path.abspath(memory.path), "files": files, "docs": docs,
                           "build_seconds": round(seconds, 3)})
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"[tm] indexed {docs} memory lines of {memory.path} into {folder} in {seconds:.2f}s "
        f"(tantivy {index_seconds:.2f}s; {ENGINE})")
    return {"reused": False, "seconds": seconds, "index_seconds": index_seconds, "docs": docs, "index": folder}


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


def _parse_bins(text: str) -> List[float]:
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
    query_sha1 = _sha1_file(args.query)
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
    st = fuzzy_stats(entries, _parse_bins(args.bins))
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


if __name__ == "__main__":
    cli_main()

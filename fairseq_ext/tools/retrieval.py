r"""The retrieval stage of SEG-NMT (Gu thesis ch. 4, §4.2.1) as an offline tool.

The translation memory M is the training split: its source side is indexed once, every example of a split
is answered with the training pairs whose source is most similar, and the answers are written as the side
files ``{split}.tm.jsonl`` + ``{split}.tm.meta.json`` that the task ``seg_translation`` reads
(:mod:`fairseq_ext.data.translation_memory`: a retrieved pair is a training-line index, so nothing is
binarized twice).

Pipeline (one query)
--------------------
1. **Word tokens** (:func:`tokenize`): ``\w+|[^\w\s]`` (Unicode word runs; every other non-space character
   a token of its own), a simple stand-in for the Moses tokenisation of the thesis. Case is **kept** for
   the fuzzy score and Algorithm 1 (the thesis does not lowercase, and Moses keeps punctuation as tokens).
   The **index terms** (:func:`index_terms`) are the word tokens (those with a ``\w`` character)
   lowercased -- punctuation is not a term, as with Lucene's standard analyzer -- for the query and for
   the index alike, so query terms always match index terms. A term never contains whitespace, so the
   index gets the terms joined by one space through tantivy's ``whitespace`` tokenizer (no stemming, no
   stopwords, no length filter). A query with no word token (only punctuation) gets no candidate.
2. **Candidates** (:class:`Retriever`): BM25 over the memory's source side, the query's terms OR-ed
   (a boolean query of term SHOULD clauses built programmatically: no query parser, so ``"`` ``:`` ``(``
   ``*`` ``AND`` in a verse are plain text, never query syntax); a term repeated in the query counts as
   often as it occurs (its clause is boosted by the count, as Lucene sums duplicate SHOULD clauses); 100
   candidates (``--candidates``). Ties at the cut-off are resolved by memory index (more hits are fetched
   until the last one scores strictly below the n-th), so the candidate set never depends on the
   engine's tie order.
3. **Fuzzy re-ranking** (:func:`rerank`, Eq. 4.1): ``S_fuzzy(X, X') = 1 - D_edit(X, X') / max(|X|, |X'|)``
   with the token-level Levenshtein distance (``rapidfuzz``; each distinct token is coded as one Unicode
   character first, an equality-preserving code on which rapidfuzz is twice as fast as on token lists, so
   the scores are exactly those of :func:`fuzzy_score` on the tokens); order: fuzzy score descending,
   then BM25 descending, then memory index ascending (deterministic). The best ``--keep`` (16 = the
   largest K of the thesis) are written.
4. **Adaptive selection** (:func:`adaptive_select`, Algorithm 1 with the union erratum of spec §4.8):
   walking the kept candidates best first, a candidate is added to the selected set R when the coverage
   ``c = Σ_{x∈X} δ[x ∈ R.keys ∪ {X'_k}] / |X|`` (tokens of X with repeats, case kept, punctuation
   included) strictly increases. With the union, R is exactly the candidates that contain at least one
   query token that no better selected candidate contains.

Training mode (``--train-mode`` = ``--exclude-self``, the query file is the memory): the query's own line
is never a candidate (§4.2.3, "ensuring that the exact copy is not included"); ``--exclude-identical``
also drops every memory line whose tokens equal the query's (fuzzy 1.0; default off, as in spec §4.8).
An empty query line gets an empty answer; every query line gets exactly one output line.

The engine
----------
:class:`Retriever` is the one interface the pipeline uses (``search(query_tokens, n) -> [(memory index,
BM25 score)]`` best first, and ``len()``); fuzzy re-ranking and Algorithm 1 are engine-independent
functions. The one implementation shipped (and tested) is :class:`TantivyRetriever`: an embedded
`tantivy <https://github.com/quickwit-oss/tantivy-py>`_ index in a folder (text field ``text`` with term
frequencies, the memory line index as the fast field ``line``). tantivy's BM25 parameters are fixed at
**k1 = 1.2, b = 0.75** (constants of the Rust library, not settable from Python) -- the Lucene defaults
spec §4.8 asks for (the score is Lucene's BM25 with the ``(k1 + 1)`` factor, the same ranking); document
lengths are quantised to one byte, as Lucene's norms are. A memory that outgrows one machine can put a
server engine (Elasticsearch, OpenSearch, a tantivy/quickwit server) behind the same interface: subclass
:class:`Retriever` and pass it to :func:`retrieve_split` (only the tantivy engine is shipped and tested).

The index is built once and reused: ``build-index`` writes a stamp (``.stamp.tm-index.json``) with the
memory file's path, size, line count and SHA-1, the tokenizer and engine, and the size and SHA-1 of every
index file. Re-running with the same memory reuses the index (and says so); an index built on other data
(stale), or whose files are missing, changed or unreadable (corrupt), is refused with an error naming the
index folder, by ``build-index`` as by ``retrieve``; ``build-index --force`` rebuilds it (the new index is
built next to the old one and replaces it only when complete).

Usage (installed: ``fairseq-ext-tm``)::

    fairseq-ext-tm build-index --memory-src data/bible_es_en/raw/train.es --index data/bible_es_en/tm_index
    fairseq-ext-tm retrieve --index data/bible_es_en/tm_index --memory-src data/bible_es_en/raw/train.es \
        --query data/bible_es_en/raw/test.es --out-dir data/bible_es_en/spm8000/bin --split test \
        [--candidates 100] [--keep 16]
    fairseq-ext-tm retrieve ... --query data/bible_es_en/raw/train.es --split train --train-mode \
        [--exclude-identical]
    fairseq-ext-tm select --side BIN/test.tm.jsonl --selection adaptive|topk [--k 2] [--out ids.txt]
    fairseq-ext-tm tm-baseline --side BIN/test.tm.jsonl --memory-tgt data/bible_es_en/raw/train.en --out hyp
    fairseq-ext-tm stats --side BIN/test.tm.jsonl [--bins 0,0.1,...,1] [--plot hist.png] [--json stats.json]

``select`` writes the chosen training-line ids of every example (one line each, space-separated) and logs
the average number of pairs; ``tm-baseline`` is the "TM" baseline of Table 4.2 (the target side of the
best match, an empty line when there is none); ``stats`` prints the distribution of the top-1 fuzzy score
as JSON. Bad input prints one ``error: FILE:LINE: ...`` line, exit status 2; progress and queries/s on
stderr.
"""
from __future__ import annotations

import abc
import hashlib
import os
import re
import shutil
import sys
import time
from collections import Counter
from operator import itemgetter
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from fairseq_ext.tools.common import (
    ArgumentParser, ToolError, atomic_write, json_text, log, positive_int, progress, read_json, read_lines,
    require_file, run_cli, stamp_path, write_json, write_stamp,
)

__all__ = [
    "TOKENIZER", "ENGINE", "tokenize", "index_terms", "fuzzy_score", "Candidate", "rerank", "coverage",
    "adaptive_select", "Retriever", "TantivyRetriever", "Memory", "build_index", "open_index",
    "retrieve_one", "retrieve_split", "tm_baseline", "fuzzy_stats", "main", "cli_main",
]

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_is_word = re.compile(r"\w").match
TOKENIZER = r"regex \w+|[^\w\s], case kept (index terms: the \w+ tokens lowercased)"
ENGINE = "tantivy BM25 (k1=1.2, b=0.75), OR of term queries"
INDEX_FORMAT = 1
STAMP_STEP = "tm-index"
TEXT_FIELD, LINE_FIELD = "text", "line"
_first, _second = itemgetter(0), itemgetter(1)
DEFAULT_BINS = tuple(round(0.1 * i, 1) for i in range(11))


# --------------------------------------------------------------------------------------------- tokens
def tokenize(text: str) -> List[str]:
    """Word tokens of a sentence: ``\\w+`` runs and single non-space characters, case kept."""
    return TOKEN_RE.findall(text)


def index_terms(tokens: Sequence[str]) -> List[str]:
    """The index/query terms of a token list: its word tokens (those with a ``\\w`` character)
    lowercased, in order; punctuation tokens are not terms (as in Lucene's standard analyzer)."""
    return [t.lower() for t in tokens if _is_word(t)]


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
    the best ``keep`` (all when ``None``). The distances come from one ``rapidfuzz.process.cdist`` call;
    the scores are exactly :func:`fuzzy_score`'s."""
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    if not hits:
        return []
    seqs = [memory[i] for i, _ in hits]
    dists = process.cdist([query], seqs, scorer=Levenshtein.distance, dtype=np.int64, workers=1)[0].tolist()
    nq = len(query)
    keys = []
    for (idx, bm25), m, d in zip(hits, seqs, dists):
        n = len(m)
        if nq > n:
            n = nq
        # (-fuzzy, -BM25, index): d / n - 1 is exactly -(1 - d / n), Eq. 4.1 as fuzzy_score computes it
        keys.append((d / n - 1.0 if n else -1.0, -bm25, idx))
    keys.sort()
    if keep is not None:
        del keys[keep:]
    return [Candidate(idx, -nf, -nb) for nf, nb, idx in keys]


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


# --------------------------------------------------------------------------------------------- engines
class Retriever(abc.ABC):
    """The search engine behind the retrieval stage (step 1 of Algorithm 1): ranked candidates from the
    memory for a tokenised query. Implementations return at most ``n`` ``(memory index, score)`` pairs,
    best first, ties by memory index ascending, over the terms :func:`index_terms` of the tokens."""

    description = "abstract"

    @abc.abstractmethod
    def search(self, query_tokens: Sequence[str], n: int) -> List[Tuple[int, float]]:
        """The ``n`` best memory entries for ``query_tokens`` (word tokens of :func:`tokenize`)."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of memory entries indexed."""

    def close(self) -> None:  # pragma: no cover - nothing to release for an embedded index
        pass


def _tantivy():
    try:
        import tantivy
    except ImportError as e:  # pragma: no cover
        raise ToolError(f"the translation-memory index needs the `tantivy` package ({e}); "
                        f"pip install tantivy==0.27.0") from None
    return tantivy


class TantivyRetriever(Retriever):
    """BM25 (k1 = 1.2, b = 0.75, fixed in tantivy) over an embedded tantivy index in a folder.

    ``TantivyRetriever.build(folder, token_lists)`` writes the index (one document per memory line, in
    order, one writer thread); ``TantivyRetriever(folder)`` opens it for searching. Staleness and
    integrity checks are :func:`build_index` / :func:`open_index`'s (the stamp), not this class's."""

    description = ENGINE

    def __init__(self, folder: str) -> None:
        tv = _tantivy()
        self.folder = folder
        self._index = tv.Index.open(folder)
        self._schema = self._index.schema
        self._searcher = self._index.searcher()
        self._n = int(self._searcher.num_docs)
        self._term_query = tv.Query.term_query
        self._boost = tv.Query.boost_query
        self._boolean = tv.Query.boolean_query
        self._should = tv.Occur.Should

    @staticmethod
    def build(folder: str, token_lists: Iterable[Sequence[str]]) -> int:
        """Index ``token_lists`` (memory line i = document with ``line`` i) into the empty ``folder``;
        returns the number of documents."""
        tv = _tantivy()
        sb = tv.SchemaBuilder()
        sb.add_text_field(TEXT_FIELD, tokenizer_name="whitespace", index_option="freq")
        sb.add_unsigned_field(LINE_FIELD, fast=True)
        schema = sb.build()
        os.makedirs(folder, exist_ok=True)
        index = tv.Index(schema, path=folder, reuse=False)
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        n = 0
        for i, toks in enumerate(token_lists):
            doc = tv.Document()
            doc.add_unsigned(LINE_FIELD, i)
            doc.add_text(TEXT_FIELD, " ".join(index_terms(toks)))
            writer.add_document(doc)
            n += 1
        writer.commit()
        writer.wait_merging_threads()
        return n

    def __len__(self) -> int:
        return self._n

    def query(self, query_tokens: Sequence[str]):
        """The tantivy query for the tokens: a boolean OR of one term query per distinct term (boosted by
        its count), or ``None`` when there is no term."""
        terms = Counter(index_terms(query_tokens))
        if not terms:
            return None
        clauses = []
        for term, count in terms.items():  # first-occurrence order: the same query for the same tokens
            q = self._term_query(self._schema, TEXT_FIELD, term, index_option="freq")
            clauses.append((self._should, q if count == 1 else self._boost(q, float(count))))
        return self._boolean(clauses)

    def search(self, query_tokens: Sequence[str], n: int) -> List[Tuple[int, float]]:
        if n <= 0:
            return []
        q = self.query(query_tokens)
        if q is None:
            return []
        limit = n + 1
        while True:
            hits = self._searcher.search(q, limit=limit, count=False).hits
            # all entries tied with the n-th are in `hits` once the last one scores strictly lower
            if len(hits) < limit or hits[n - 1][0] > hits[-1][0]:
                break
            limit *= 2
        lines = self._searcher.fast_field_values(LINE_FIELD, [a for _, a in hits])
        ranked = list(zip(lines, [s for s, _ in hits]))
        ranked.sort(key=_first)                  # memory index ascending, then (stable) score descending
        ranked.sort(key=_second, reverse=True)
        del ranked[n:]
        return ranked


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


def open_index(folder: str, memory: Memory) -> TantivyRetriever:
    """The retriever of the index in ``folder``, after checking that it was built on ``memory`` and that
    its files are intact (else a :class:`ToolError` naming the folder; never silently used)."""
    _check_index(folder, memory)
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
    from fairseq_ext.data.translation_memory import TMEntry

    if not query_tokens:
        return TMEntry()
    ex = set(exclude)
    t0 = time.perf_counter()
    hits = retriever.search(query_tokens, candidates + len(ex))
    if ex:
        hits = [h for h in hits if h[0] not in ex]
    hits = hits[:candidates]
    t1 = time.perf_counter()
    codes = memory.encode(query_tokens)
    mem = memory.codes
    ranked = rerank(codes, hits, mem, keep)
    chosen = adaptive_select(codes, [mem[c.index] for c in ranked])
    if timing is not None:
        timing[0] += t1 - t0
        timing[1] += time.perf_counter() - t1
    return TMEntry(ids=[c.index for c in ranked], fuzzy=[c.fuzzy for c in ranked],
                   adaptive=[ranked[p].index for p in chosen])


def retrieve_split(retriever: Retriever, memory: Memory, queries: Sequence[str], *, candidates: int = 100,
                   keep: int = 16, exclude_self: bool = False, exclude_identical: bool = False,
                   log_every: int = 5000) -> Tuple[list, dict]:
    """Entries for every query line (one each, in order) and the timing ``{"queries", "seconds",
    "cpu_seconds", "qps", "cpu_qps", "search_ms", "rerank_ms"}`` (wall clock, and this process's CPU time:
    the retrieval runs on one thread). ``exclude_self``: query line i is memory line i (training mode)."""
    memory.codes  # noqa: B018 - the vocabulary is built before the clock starts
    entries = []
    timing = [0.0, 0.0]
    t0, c0 = time.perf_counter(), time.process_time()
    n = len(queries)
    for i in progress(range(n), desc="retrieve", total=n, unit="query"):
        toks = tokenize(queries[i])
        ex = [i] if exclude_self else []
        if exclude_identical:
            ex.extend(memory.identical(toks))
        entries.append(retrieve_one(retriever, memory, toks, candidates=candidates, keep=keep, exclude=ex,
                                    timing=timing))
        if log_every and (i + 1) % log_every == 0 and i + 1 < n:
            dt = time.perf_counter() - t0
            log(f"[tm] {i + 1}/{n} queries, {(i + 1) / dt:.0f} queries/s")
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
    retriever = open_index(args.index, memory)
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
        f"({stats['cpu_qps']:.0f} per CPU second, one thread; BM25 top-{args.candidates} "
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
    """Console script ``fairseq-ext-tm`` / ``python -m fairseq_ext.tools.retrieval``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

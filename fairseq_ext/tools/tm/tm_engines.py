r"""The BM25 candidate engines of the SEG-NMT retrieval stage (Gu thesis ch. 4, §4.2.1; step 1 of Algorithm 1).
:mod:`fairseq_ext.tools.tm.retrieval` (``fairseq-ext-tm``) asks a :class:`Retriever` for the BM25 candidates of
a query; this module holds the tokens both sides share and the two engines (``--engine``):

* :class:`NumpyRetriever` (``numpy``, the default): the memory's postings in numpy arrays, built when the
  tool starts, every matching line scored, the top ``n`` selected by partition. Its scores are **tantivy's
  BM25** reproduced term by term: ``idf(t) = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))``, the weight
  ``idf(t) * (1 + k1)`` with **k1 = 1.2, b = 0.75**, line lengths quantised to one byte
  (:func:`fieldnorm_table`), a query term's weight multiplied by its count; each term score is evaluated in
  single precision in tantivy's order (bit for bit), and a line's score is their exact sum.
* :class:`TantivyRetriever` (``tantivy``): an embedded `tantivy <https://github.com/quickwit-oss/tantivy-py>`_
  index queried with a boolean OR of one term query per distinct term (built programmatically, so verse
  text is never query syntax). tantivy sums in single precision, so its scores can differ in the last bits.

Both return the ``n`` best lines, best first, ties resolved by memory index. A server engine can stand
behind the same interface (subclass :class:`Retriever`).

Tokens (shared by the index, the query and the fuzzy re-ranking): :func:`tokenize` gives ``\w+|[^\w\s]``,
case kept; the index terms (:func:`index_terms`) are the word tokens lowercased, for query and memory alike.
"""
from __future__ import annotations

import abc
import itertools
import os
import re
from collections import Counter
from operator import itemgetter
from typing import Dict, Iterable, List, Sequence, Tuple

import numpy as np

from fairseq_ext.tools.common import ToolError

__all__ = ["TOKENIZER", "ENGINE", "ENGINES", "DEFAULT_ENGINE", "tokenize", "index_terms", "fieldnorm_table",
           "Retriever", "TantivyRetriever", "NumpyRetriever"]

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
WORD_RE = re.compile(r"\w+")
_is_word = re.compile(r"\w").match
TOKENIZER = r"regex \w+|[^\w\s], case kept (index terms: the \w+ tokens lowercased)"
ENGINE = "tantivy BM25 (k1=1.2, b=0.75), OR of term queries"   # what the index folder holds (its stamp)
TEXT_FIELD, LINE_FIELD = "text", "line"
_first, _second = itemgetter(0), itemgetter(1)
_F32 = np.float32
K1, B = _F32(1.2), _F32(0.75)


def tokenize(text: str) -> List[str]:
    """Word tokens of a sentence: ``\\w+`` runs and single non-space characters, case kept."""
    return TOKEN_RE.findall(text)


def index_terms(tokens: Sequence[str]) -> List[str]:
    """The index/query terms of a token list: its word tokens (those with a ``\\w`` character)
    lowercased, in order; punctuation tokens are not terms (as in Lucene's standard analyzer)."""
    return [t.lower() for t in tokens if _is_word(t)]


# --------------------------------------------------------------------------------------------- interface
class Retriever(abc.ABC):
    """The search engine behind the retrieval stage (step 1 of Algorithm 1): ranked candidates from the
    memory for a tokenised query. Implementations return at most ``n`` ``(memory index, score)`` pairs,
    best first, ties by memory index ascending, over the terms :func:`index_terms` of the tokens."""

    description = "abstract"

    @abc.abstractmethod
    def search(self, query_tokens: Sequence[str], n: int) -> List[Tuple[int, float]]:
        """The ``n`` best memory entries for ``query_tokens`` (word tokens of :func:`tokenize`)."""

    def search_arrays(self, query_tokens: Sequence[str], n: int) -> Tuple[np.ndarray, np.ndarray]:
        """:meth:`search` as two arrays: memory indices (int64) and scores (float64), best first."""
        hits = self.search(query_tokens, n)
        return (np.fromiter(map(_first, hits), np.int64, len(hits)),
                np.fromiter(map(_second, hits), np.float64, len(hits)))

    def search_batch(self, token_lists: Sequence[Sequence[str]], n: int) -> List[Tuple[np.ndarray, np.ndarray]]:
        """:meth:`search_arrays` of every query of a batch (engines that score a batch at once override it)."""
        return [self.search_arrays(toks, n) for toks in token_lists]

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of memory entries indexed."""

    def close(self) -> None:  # pragma: no cover - nothing to release for an embedded index
        pass


# --------------------------------------------------------------------------------------------- tantivy
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
    integrity checks are the index stamp's (:func:`fairseq_ext.tools.tm.memory_index.open_index`), not this
    class's."""

    name = "tantivy"
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


# --------------------------------------------------------------------------------------------- numpy
def fieldnorm_table() -> np.ndarray:
    """The 256 line lengths a one-byte field norm stands for (tantivy's table): 0..40 exactly, then 8
    entries in steps of 2, 8 in steps of 4, 8 in steps of 8, ... up to 2,013,265,944."""
    table, value, step = list(range(41)), 40, 2
    while len(table) < 256:
        for _ in range(min(8, 256 - len(table))):
            value += step
            table.append(value)
        step *= 2
    return np.array(table, dtype=np.int64)


def _logf_vector(x: np.ndarray) -> np.ndarray:
    """Natural logarithm in single precision as the C library's ``logf`` computes it (what tantivy's
    ``f32::ln`` calls); the correctly rounded double logarithm where the C library cannot be loaded."""
    import ctypes
    import ctypes.util

    try:
        logf = ctypes.CDLL(ctypes.util.find_library("m")).logf
        logf.restype, logf.argtypes = ctypes.c_float, [ctypes.c_float]
    except (OSError, AttributeError, TypeError):  # pragma: no cover - no C math library
        return np.log(x.astype(np.float64)).astype(_F32)
    return np.fromiter((logf(v) for v in x.tolist()), _F32, len(x))


class NumpyRetriever(Retriever):
    """BM25 with tantivy's scores (see the module docstring) over postings held in numpy arrays.

    ``NumpyRetriever(token_lists)``: line ``i`` of the memory is ``token_lists[i]`` (word tokens as
    :func:`tokenize` gives them). Queries are answered a batch at a time (:meth:`search_batch`): every
    line that contains a query term is scored (:meth:`score_matrix`), then the best ``n`` are selected
    above a lower bound of the ``n``-th best score (the ``n``-th best among the lines of the rarest
    query terms)."""

    name = "numpy"
    DENSE_SHARE = 8            # a term in more than 1/8 of the lines is also held as a dense row ...
    MAX_DENSE = 64             # ... for at most 64 terms
    PROBE = 3                  # the n-th best score's lower bound is taken over the lines of 3 n postings
    description = ("numpy BM25 = tantivy's (k1=1.2, b=0.75, one-byte length norms, single-precision term "
                   "scores, exact sums), OR of term queries")

    def __init__(self, token_lists: Iterable[Sequence[str]]) -> None:
        all_terms: List[str] = []
        lengths: List[int] = []
        for toks in token_lists:
            # index_terms(toks): the \w+ tokens are the \w+ runs of the tokens joined by spaces
            words = WORD_RE.findall(" ".join(toks))
            terms = " ".join(words).lower().split(" ") if words else []
            lengths.append(len(terms))
            all_terms.extend(terms)
        self._n = n = len(lengths)
        # term ids in first-occurrence order: a new term gets its position, then the positions are ranked
        first: Dict[str, int] = {}
        raw = np.fromiter(map(first.setdefault, all_terms, itertools.count()), np.int64, len(all_terms))
        positions, term_of = np.unique(raw, return_inverse=True)
        self.vocab = dict(zip(first, np.searchsorted(positions, list(first.values())).tolist()))
        # postings (term, line) with their frequency, by term then line
        line_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
        keys, freqs = np.unique(term_of.astype(np.int64) * max(n, 1) + line_of, return_counts=True)
        term_arr, lines = np.divmod(keys, max(n, 1))
        self.docs = lines.astype(np.intp)
        self.ptr = np.zeros(len(self.vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(term_arr, minlength=len(self.vocab)), out=self.ptr[1:])
        self.df = np.diff(self.ptr)
        self._df_list = self.df.tolist()
        # tantivy's arithmetic, single precision, step by step
        length = np.array(lengths, dtype=np.int64)
        avg = _F32(length.sum()) / _F32(n) if n else _F32(1)
        table = fieldnorm_table()
        norm_of = K1 * ((_F32(1) - B) + (B * table.astype(_F32)) / avg)      # per one-byte length code
        code = np.searchsorted(table, length, side="right") - 1
        tf = freqs.astype(_F32)
        self.tf_factor = tf / (tf + norm_of[code[self.docs]])
        df = self.df.astype(_F32)
        idf = _logf_vector(_F32(1) + ((_F32(n) - df) + _F32(0.5)) / (df + _F32(0.5)))
        self.weight = idf * (_F32(1) + K1)
        # the term score with boost 1 (a query term occurring once), as float64 for the exact sums
        self.score1 = (np.repeat(self.weight, self.df) * self.tf_factor).astype(np.float64)
        # the most frequent terms also as dense rows over all lines: adding a row is cheaper than
        # scattering postings once a term occurs in more than 1/DENSE_SHARE of the lines
        frequent = np.flatnonzero(self.df * self.DENSE_SHARE > max(n, 1))
        frequent = frequent[np.argsort(-self.df[frequent], kind="stable")][:self.MAX_DENSE]
        self.dense_row = {int(t): r for r, t in enumerate(frequent)}
        self._boosted_rows: Dict[Tuple[int, int], np.ndarray] = {}   # (term, count > 1) -> its dense row
        self.dense_tf_factor = np.zeros((len(frequent), n), dtype=_F32)
        self.dense_score1 = np.zeros((len(frequent), n), dtype=np.float64)
        for r, t in enumerate(frequent):
            a, b = self.ptr[t], self.ptr[t + 1]
            self.dense_tf_factor[r, self.docs[a:b]] = self.tf_factor[a:b]
            self.dense_score1[r, self.docs[a:b]] = self.score1[a:b]

    def __len__(self) -> int:
        return self._n

    def query_terms(self, query_tokens: Sequence[str]) -> List[Tuple[int, int]]:
        """``[(term id, count)]`` of the query's distinct terms found in the memory, rarest first (then by
        term id)."""
        vocab, df = self.vocab, self._df_list
        terms = [(vocab[t], c) for t, c in Counter(index_terms(query_tokens)).items() if t in vocab]
        terms.sort(key=lambda tc: (df[tc[0]], tc[0]))
        return terms

    def score_matrix(self, term_lists: Sequence[Sequence[Tuple[int, int]]]) -> np.ndarray:
        """The BM25 score of every memory line (columns) for every query (rows, its ``(term id, count)``
        pairs); 0 for no match. Each entry is the sum of tantivy's term scores, exact in double precision:
        the frequent terms' rows by one matrix product (coefficient = the count when it is a power of two:
        ``f32(f32(w * 2^k) * x) = 2^k * f32(w * x)`` exactly), the others' postings added at their lines."""
        n_q, n = len(term_lists), self._n
        select = np.zeros((n_q, len(self.dense_row)), dtype=np.float64)
        sparse: List[Tuple[int, int, int]] = []
        boosted = []
        for i, terms in enumerate(term_lists):
            for t, c in terms:
                r = self.dense_row.get(t)
                if r is None:
                    sparse.append((i, t, c))
                elif c & (c - 1) == 0:
                    select[i, r] = c
                else:
                    boosted.append((i, t, c, r))
        total = select @ self.dense_score1 if len(self.dense_row) else np.zeros((n_q, n), dtype=np.float64)
        for i, t, c, r in boosted:
            row = self._boosted_rows.get((t, c))
            if row is None:
                row = ((self.weight[t] * _F32(c)) * self.dense_tf_factor[r]).astype(np.float64)
                if len(self._boosted_rows) < self.MAX_DENSE:
                    self._boosted_rows[(t, c)] = row
            total[i] += row
        if sparse:
            lines, values = self._postings(sparse, scores=True)
            np.add.at(total.reshape(-1), lines, values)
        return total

    def _postings(self, pairs: Sequence[Tuple[int, ...]], scores: bool = False):
        """The postings of the ``(query row, term id[, count])`` pairs: their cells ``row * lines + line``
        in a queries x lines matrix, and with ``scores`` their tantivy term scores (boosted by the count)."""
        ptr, docs, n = self.ptr, self.docs, self._n
        bounds = [(ptr[p[1]], ptr[p[1] + 1]) for p in pairs]
        lengths = [b - a for a, b in bounds]
        lines = np.concatenate([docs[a:b] for a, b in bounds])
        lines += np.repeat(np.array([p[0] * n for p in pairs], dtype=np.intp), lengths)
        if not scores:
            return lines
        weight, tf_factor = self.weight, self.tf_factor
        values = np.concatenate([self.score1[a:b] if p[2] == 1 else
                                 ((weight[p[1]] * _F32(p[2])) * tf_factor[a:b]).astype(np.float64)
                                 for p, (a, b) in zip(pairs, bounds)])
        return lines, values

    def search_batch(self, token_lists: Sequence[Sequence[str]], n: int) -> List[Tuple[np.ndarray, np.ndarray]]:
        """The ``n`` best lines of every query: all lines scored (:meth:`score_matrix`), then the lines
        at or above a lower bound of each query's ``n``-th best score -- the ``n``-th best among the lines
        of its rarest terms (:attr:`PROBE` ``* n`` postings) -- sorted by score descending and line ascending,
        and the first ``n`` kept."""
        empty = (np.zeros(0, np.int64), np.zeros(0, np.float64))
        if n <= 0 or not token_lists:
            return [empty for _ in token_lists]
        term_lists = [self.query_terms(toks) for toks in token_lists]
        total = self.score_matrix(term_lists)
        n_q, n_lines = total.shape
        flat = total.reshape(-1)
        # the probe of each query: the lines of its rarest terms, until they hold PROBE * n postings
        df = self.df
        probe = []
        for i, terms in enumerate(term_lists):
            m = 0
            for t, _ in terms:
                probe.append((i, t))
                m += df[t]
                if m >= self.PROBE * n:
                    break
        # every term score is positive: the smallest positive double as the bound selects all matches
        bound = np.full(n_q, np.nextafter(0.0, 1.0))
        if probe:
            cells = np.sort(self._postings(probe))
            cells = cells[np.concatenate(([True], cells[1:] != cells[:-1]))]   # distinct, by query then line
            rows = cells // n_lines
            counts = np.bincount(rows, minlength=n_q)
            width = int(counts.max())
            if width >= n:                                # the n-th best of each row, padded with -1
                padded = np.full((n_q, width), -1.0)
                padded[rows, np.arange(len(cells)) - np.repeat(np.cumsum(counts) - counts, counts)] = flat[cells]
                nth = np.partition(padded, width - n, axis=1)[:, width - n]
                bound = np.where(counts >= n, nth, bound)
        cells = np.flatnonzero(total >= bound[:, None])  # by query, then line
        rows, lines = np.divmod(cells, n_lines)
        scores = flat[cells]
        order = np.argsort(-scores, kind="stable")       # score descending; line ascending (the cell order)
        order = order[np.argsort(rows[order], kind="stable")]                # by query
        lines, scores = lines[order], scores[order]
        out = []
        begin = 0
        for end in np.cumsum(np.bincount(rows, minlength=n_q)).tolist():
            stop = min(end, begin + n)
            out.append((lines[begin:stop], scores[begin:stop]))
            begin = end
        return out

    def search_arrays(self, query_tokens: Sequence[str], n: int) -> Tuple[np.ndarray, np.ndarray]:
        return self.search_batch([query_tokens], n)[0]

    def search(self, query_tokens: Sequence[str], n: int) -> List[Tuple[int, float]]:
        idx, scores = self.search_arrays(query_tokens, n)
        return list(zip(idx.tolist(), scores.tolist()))


ENGINES = {"numpy": NumpyRetriever, "tantivy": TantivyRetriever}
DEFAULT_ENGINE = "numpy"

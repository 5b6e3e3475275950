r"""Fuzzy re-ranking (Eq. 4.1) and adaptive selection (Algorithm 1) of the SEG-NMT retrieval stage (Gu thesis
ch. 4, §4.2.1), steps 3 and 4 after the BM25 candidates of :mod:`fairseq_ext.tools.tm.tm_engines`.

* :func:`fuzzy_score` is Eq. 4.1, ``S_fuzzy(X, X') = 1 - D_edit(X, X') / max(|X|, |X'|)`` over token sequences
  (rapidfuzz's Levenshtein distance); :func:`rerank` / :func:`rerank_batch` order a query's candidates by it
  (ties: BM25 descending, memory index ascending) and keep the best ``--keep``.
* :func:`adaptive_select` is Algorithm 1 with the union erratum: the ranked pairs are taken greedily while
  each one strictly increases :func:`coverage`, the share of the query's tokens found in the union of the
  selected sources.

:mod:`fairseq_ext.tools.tm.retrieval` (``fairseq-ext-tm retrieve``) runs them on every query of a split.
"""
from __future__ import annotations

from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

__all__ = ["fuzzy_score", "Candidate", "rerank", "rerank_batch", "coverage", "adaptive_select"]


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

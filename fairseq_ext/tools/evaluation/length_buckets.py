r"""Corpus BLEU and chrF by bucket of source length (whitespace tokens), via sacreBLEU 2.6's own metrics.

:func:`bleu_by_length` scores the sentences of each bucket ``[lo, hi)`` of :func:`parse_edges` as a corpus
(the "BLEU by sentence length" figures of the theses); :func:`format_buckets` prints the table and
:func:`fairseq_ext.tools.plots.plot_length_buckets` draws it. ``fairseq-ext-score score --src``
(:mod:`fairseq_ext.tools.evaluation.score`) runs it on files. Imports neither torch nor fairseq.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence, Union

from fairseq_ext.tools.common import ToolError
from fairseq_ext.tools.evaluation.bleu import Refs, reference_streams, sacrebleu_metrics

__all__ = ["DEFAULT_EDGES", "parse_edges", "edge_str", "bleu_by_length", "format_buckets"]

DEFAULT_EDGES: tuple[float, ...] = (0, 10, 20, 30, 40, 50, math.inf)


def parse_edges(spec: Union[str, Sequence[Union[int, float, str]], None]) -> list[float]:
    """``'0,10,20,inf'`` (or a sequence) -> increasing bucket edges; buckets are ``[lo, hi)``."""
    if spec is None:
        return list(DEFAULT_EDGES)
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    try:
        edges = [float(str(x).strip()) for x in items if str(x).strip() != ""]
    except ValueError:
        raise ToolError(f"bucket edges must be numbers or 'inf', got {spec!r}") from None
    if any(math.isnan(e) for e in edges):
        raise ToolError(f"bucket edges must be numbers or 'inf', got {spec!r}")
    if len(edges) < 2:
        raise ToolError(f"need at least two bucket edges, got {spec!r}")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ToolError(f"bucket edges must be strictly increasing, got {spec!r}")
    return edges


def edge_str(x: float) -> str:
    return "inf" if math.isinf(x) else (str(int(x)) if float(x).is_integer() else str(x))


def _bucket_label(lo: float, hi: float) -> str:
    if math.isinf(hi):
        return f"{edge_str(lo)}+"
    if float(lo).is_integer() and float(hi).is_integer():
        return f"{int(lo)}-{int(hi) - 1}"
    return f"[{edge_str(lo)},{edge_str(hi)})"


def bleu_by_length(
    src: Sequence[str],
    hyps: Sequence[str],
    refs: Refs,
    edges: Union[str, Sequence[float], None] = DEFAULT_EDGES,
    *,
    tokenised: bool = False,
    lowercase: bool = False,
    chrf_word_order: int = 0,
) -> list[dict[str, Any]]:
    """Corpus BLEU and chrF per bucket of source length (whitespace tokens), ``[lo, hi)``.

    Each row: ``bucket`` (label such as ``'10-19'``, ``'50+'``), ``lo``, ``hi`` (``None`` for
    infinity), ``count``, ``src_tokens``, ``bleu``, ``chrf``, ``bp`` (``None`` when empty).
    Every sentence must fall in a bucket (end the edges with ``inf``); counts sum to the total.
    """
    edges_f = parse_edges(edges)
    src, hyps = list(src), list(hyps)
    if len(src) != len(hyps):
        raise ToolError(f"source has {len(src)} sentences but there are {len(hyps)} hypotheses")
    streams = reference_streams(refs, len(hyps))
    lengths = [len(s.split()) for s in src]
    outside = [i for i, n in enumerate(lengths) if not (edges_f[0] <= n < edges_f[-1])]
    if outside:
        raise ToolError(
            f"{len(outside)} source sentences lie outside the buckets "
            f"[{edge_str(edges_f[0])}, {edge_str(edges_f[-1])}) (e.g. sentence {outside[0]} "
            f"with {lengths[outside[0]]} tokens); end the edges with inf"
        )
    rows = []
    for lo, hi in zip(edges_f, edges_f[1:]):
        idx = [i for i, n in enumerate(lengths) if lo <= n < hi]
        row: dict[str, Any] = {
            "bucket": _bucket_label(lo, hi),
            "lo": lo,
            "hi": None if math.isinf(hi) else hi,
            "count": len(idx),
            "src_tokens": sum(lengths[i] for i in idx),
            "bleu": None,
            "chrf": None,
            "bp": None,
        }
        if idx:
            bleu_m, chrf_m = sacrebleu_metrics(tokenised, lowercase, chrf_word_order)
            h = [hyps[i] for i in idx]
            r = [[s[i] for i in idx] for s in streams]
            b = bleu_m.corpus_score(h, r)
            row.update(bleu=b.score, bp=b.bp, chrf=chrf_m.corpus_score(h, r).score)
        rows.append(row)
    return rows


def format_buckets(rows: Sequence[Mapping[str, Any]], chrf_label: str = "chrF2") -> str:
    """Table of :func:`bleu_by_length` rows, with a total line."""
    head = f"{'src length':>10}  {'count':>6}  {'BLEU':>6}  {chrf_label:>6}  {'BP':>5}"
    out = [head, "-" * len(head)]
    for r in rows:
        f = (lambda v, w, p: f"{v:>{w}.{p}f}" if v is not None else f"{'-':>{w}}")
        out.append(
            f"{r['bucket']:>10}  {r['count']:>6d}  {f(r['bleu'], 6, 2)}  "
            f"{f(r['chrf'], 6, 2)}  {f(r['bp'], 5, 3)}"
        )
    out.append(f"{'total':>10}  {sum(r['count'] for r in rows):>6d}")
    return "\n".join(out)

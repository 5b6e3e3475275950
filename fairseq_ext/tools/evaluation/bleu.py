"""Corpus BLEU and chrF of hypotheses against one or more reference streams, through sacreBLEU 2.6's own
metrics (``sacrebleu.metrics.BLEU`` / ``CHRF``): the one scoring core that :mod:`fairseq_ext.tools.evaluation.score`
(``fairseq-ext-score``) and the document-level BLEU of :mod:`fairseq_ext.tools.evaluation.doc_metrics` share.

``tokenised=True`` is the theses' ``multi-bleu.perl`` setting: BLEU over whitespace tokens (``tokenize='none'``,
no smoothing, so a zero n-gram precision gives 0), labelled :data:`TOKENISED_LABEL`; otherwise sacreBLEU's
defaults (13a tokenizer, exp smoothing).
"""
from __future__ import annotations

import os
from typing import Any, Sequence, Union

from sacrebleu import __version__ as SACREBLEU_VERSION
from sacrebleu.metrics import BLEU, CHRF

from fairseq_ext.tools.common import ToolError, read_lines

__all__ = ["TOKENISED_LABEL", "Refs", "bleu_line", "load_references", "reference_streams", "sacrebleu_metrics",
           "score_corpus"]

TOKENISED_LABEL = "BLEU (tokenised, multi-bleu style)"

Refs = Union[Sequence[str], Sequence[Sequence[str]]]


def sacrebleu_metrics(tokenised: bool, lowercase: bool, chrf_word_order: int) -> tuple[BLEU, CHRF]:
    if tokenised:
        # multi-bleu.perl: whitespace tokens, no smoothing (zero precision -> BLEU 0).
        bleu = BLEU(tokenize="none", smooth_method="none", lowercase=lowercase, force=True)
    else:
        bleu = BLEU(lowercase=lowercase)  # 13a tokenizer, exp smoothing: sacreBLEU defaults
    chrf = CHRF(word_order=chrf_word_order, lowercase=lowercase)
    return bleu, chrf


def reference_streams(refs: Refs, n_hyps: int, what: str = "hypotheses") -> list[list[str]]:
    """``refs`` as a list of reference streams, each as long as the hypotheses."""
    if n_hyps == 0:
        raise ToolError(f"no {what} to score")
    if isinstance(refs, str):
        raise ToolError("refs must be a list of reference sentences or of reference streams")
    refs = list(refs)
    if not refs:
        raise ToolError("no reference given")
    if isinstance(refs[0], str):  # a single stream given as list[str]
        refs = [refs]
    streams = [list(r) for r in refs]
    for k, s in enumerate(streams):
        if len(s) != n_hyps:
            raise ToolError(
                f"reference {k + 1} has {len(s)} sentences but there are {n_hyps} {what}"
            )
    return streams


def score_corpus(
    hyps: Sequence[str],
    refs: Refs,
    tokenised: bool = False,
    *,
    lowercase: bool = False,
    chrf_word_order: int = 0,
) -> dict[str, Any]:
    """Corpus BLEU and chrF of ``hyps`` against one or more reference streams.

    :param hyps: hypotheses, aligned with the references.
    :param refs: ``[stream1, stream2, ...]`` (each a list of sentences), or a single stream.
    :param tokenised: multi-bleu.perl style BLEU on whitespace tokens (``tokenize='none'``).
    :return: dict with ``bleu``, ``chrf``, ``bp``, ``ratio``, ``sys_len``, ``ref_len``,
        ``precisions``, ``counts``, ``totals``, ``bleu_signature``, ``chrf_signature``,
        ``bleu_label``, ``chrf_label``, ``bleu_str``, ``chrf_str``, ``n_sentences``, ``n_refs``.
    """
    hyps = list(hyps)
    streams = reference_streams(refs, len(hyps))
    bleu_m, chrf_m = sacrebleu_metrics(tokenised, lowercase, chrf_word_order)
    b = bleu_m.corpus_score(hyps, streams)
    c = chrf_m.corpus_score(hyps, streams)
    label = TOKENISED_LABEL if tokenised else "BLEU"
    return {
        "bleu": b.score,
        "chrf": c.score,
        "bleu_label": label,
        "chrf_label": c.name,
        "bp": b.bp,
        "ratio": b.ratio,
        "sys_len": b.sys_len,
        "ref_len": b.ref_len,
        "precisions": list(b.precisions),
        "counts": list(b.counts),
        "totals": list(b.totals),
        "bleu_signature": str(bleu_m.get_signature()),
        "chrf_signature": str(chrf_m.get_signature()),
        "bleu_str": bleu_line(label, b),
        "chrf_str": f"{c.name} = {c.score:.2f}",
        "tokenised": tokenised,
        "lowercase": lowercase,
        "n_sentences": len(hyps),
        "n_refs": len(streams),
        "sacrebleu_version": SACREBLEU_VERSION,
    }


def bleu_line(label: str, b: Any) -> str:
    prec = "/".join(f"{p:.1f}" for p in b.precisions)
    return (
        f"{label} = {b.score:.2f} {prec} (BP = {b.bp:.3f} ratio = {b.ratio:.3f} "
        f"hyp_len = {b.sys_len:d} ref_len = {b.ref_len:d})"
    )


def load_references(
    paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
) -> list[list[str]]:
    """Reference files (one sentence a line) as streams; all must have the same length."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    streams = [read_lines(p) for p in paths]
    if not streams:
        raise ToolError("no reference file given")
    n0 = len(streams[0])
    for p, s in zip(paths, streams):
        if len(s) != n0:
            raise ToolError(f"{p}: {len(s)} lines but {paths[0]} has {n0}")
    if n0 == 0:
        raise ToolError(f"{paths[0]}: empty reference file")
    return streams

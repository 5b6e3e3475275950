"""Beam search with the GNMT length penalty (Wu et al., 2016, Eq. 14), which fairseq lacks.

fairseq's ``--lenpen a`` divides a finished hypothesis' log-probability by ``|Y| ** a``.
GNMT divides by ``lp(Y) = ((5 + |Y|) / 6) ** alpha``.  Both are a power of a function of the
length, so for each finalisation step we set fairseq's exponent to the value that makes the two
equal, ``a(L) = alpha * log((5 + L) / 6) / log(L)`` (for L = 1 both are 1), and reuse fairseq's
``finalize_hypos`` unchanged.
"""
from __future__ import annotations

import math

from fairseq.sequence_generator import SequenceGenerator


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (GNMT Eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


def equivalent_fairseq_exponent(length: int, alpha: float) -> float:
    """The ``--lenpen`` exponent with ``length ** a == gnmt_length_penalty(length, alpha)``."""
    if length <= 1:
        return 0.0
    return alpha * math.log((5.0 + length) / 6.0) / math.log(length)


class GNMTLengthPenaltySequenceGenerator(SequenceGenerator):
    """``SequenceGenerator`` whose score normalisation is the GNMT length penalty."""

    def __init__(self, models, tgt_dict, gnmt_alpha: float = 0.6, **kwargs):
        kwargs["normalize_scores"] = True
        super().__init__(models, tgt_dict, **kwargs)
        self.gnmt_alpha = float(gnmt_alpha)

    def finalize_hypos(self, step, *args, **kwargs):
        # finished hypotheses at this step have step + 1 tokens including </s>
        self.len_penalty = equivalent_fairseq_exponent(step + 1, self.gnmt_alpha)
        return super().finalize_hypos(step, *args, **kwargs)

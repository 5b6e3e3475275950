"""Rewards of the simultaneous agent (Gu 2019 §9.4.2; :func:`trajectory_rewards`) and the smoothed sentence
BLEU⁰ they are made of.

* Quality (Eqs. 9.5, 9.6): r^Q_t = BLEU⁰(Y^t, Y*) − BLEU⁰(Y^{t−1}, Y*) on WRITEs (0 on READs), BLEU⁰ the
  smoothed (Lin & Och 2004) geometric mean of the modified n-gram precisions *without* brevity penalty
  (:func:`sentence_bleu0`); the brevity penalty enters at the last step only: ``telescoping`` (default)
  adds BLEU(Y, Y*) − BLEU⁰(Y, Y*) at t = T, so that Σ_t r^Q_t = BLEU(Y, Y*) = BP·BLEU⁰ exactly;
  ``literal`` sets r^Q_T = BLEU(Y, Y*) as Eq. 9.6 is printed. Units: subword ids (⟨/s⟩ excluded), or
  words after merging the subwords (``bpe`` = ``sentencepiece`` / ``subword_nmt``; a partial last word
  counts as a word of the prefix).
* Delay, one type at a time (Fig. 9.4): ``ap`` — d_t = 0 for t < T, d(X, Y) = Σ_τ s(τ)/(|X||Y|) (Eq. 9.7,
  on subwords, ⟨/s⟩ counted in |X| and |Y|) at t = T, r^D_T = β·[d − d*]_+; ``cw`` — c_t = c_{t−1} + 1 on
  READ, 0 on WRITE (Eq. 9.8; no-op READs count), r^D_t = α·[sgn(c_t − c*) + 1] (Eq. 9.9, ``thesis``) or
  α·[c_t − c*]_+ (``linear``, the released code's shape); α, β ≤ 0.

References: Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019
(ch. 9); Lin, Och, "ORANGE: a Method for Evaluating Automatic Evaluation Metrics for Machine Translation",
COLING 2004.
"""
import math
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from fairseq_ext.modules.actor_critic import clipped_matches
from fairseq_ext.modules.latency import READ, WRITE, average_proportion, consecutive_wait, delays_from_actions

DELAY_TYPES = ("ap", "cw")
CW_PENALTIES = ("thesis", "linear")
QUALITY_REWARDS = ("telescoping", "literal")
REWARD_BPE = ("none", "sentencepiece", "subword_nmt")


# ============================================================================================ BLEU⁰
def sentence_bleu0(hyp: Tensor, hyp_len: Tensor, ref: Tensor, ref_len: Tensor, max_order: int = 4
                   ) -> Tuple[Tensor, Tensor]:
    """``(BLEU⁰, BP)`` (N,) of each row of ``hyp`` (N, T) against the same row of ``ref`` (N, T') (right-padded,
    lengths given): BLEU⁰ = exp(¼ Σ_n log p_n) with Lin & Och's smoothing (p_1 = m_1/c_1,
    p_n = (m_n + 1)/(c_n + 1) for n ≥ 2), 0 without a unigram match or for an empty hypothesis;
    BP = min(1, exp(1 − r/c)). BLEU = BP·BLEU⁰ (Eq. 9.5) is the sibling's ``sentence_bleu_plus1``."""
    hyp_len, ref_len = hyp_len.to(hyp.device), ref_len.to(hyp.device)
    c, r = hyp_len.double(), ref_len.double()
    log_p = torch.zeros_like(c)
    any_match = torch.zeros_like(c, dtype=torch.bool)
    for n in range(1, max_order + 1):
        m = clipped_matches(hyp, hyp_len, ref, ref_len, n).double()
        total = (c - n + 1).clamp(min=0)
        any_match |= m > 0
        if n > 1:
            m, total = m + 1, total + 1
        log_p = log_p + torch.log(m.clamp(min=1e-30) / total.clamp(min=1)) / max_order
    bleu0 = torch.where(any_match & (c > 0), log_p.exp(), torch.zeros_like(c))
    bp = torch.where(c < r, torch.exp(1 - r / c.clamp(min=1)), torch.ones_like(c))
    return bleu0, bp


class UnitMapper:
    """The units sentence BLEU counts: subword ids (``bpe`` ``none``) or the words of the merged subwords
    (``sentencepiece`` / ``subword_nmt``, fairseq's ``post_process``), as ints; ⟨/s⟩ and ⟨pad⟩ never count."""

    def __init__(self, dictionary, bpe: str = "none"):
        if bpe not in REWARD_BPE:
            raise ValueError(f"unknown reward bpe {bpe!r}; expected one of {REWARD_BPE}")
        self.dictionary = dictionary
        self.bpe = bpe
        self.skip = {dictionary.eos(), dictionary.pad()}
        self.words: Dict[str, int] = {}

    def clean(self, tokens: Sequence[int]) -> List[int]:
        return [int(t) for t in tokens if int(t) not in self.skip]

    def word_ids(self, tokens: Sequence[int]) -> List[int]:
        from fairseq.data.data_utils import post_process

        text = post_process(" ".join(self.dictionary[t] for t in tokens), self.bpe)
        return [self.words.setdefault(w, len(self.words)) for w in text.split()]

    def units(self, tokens: Sequence[int]) -> List[int]:
        toks = self.clean(tokens)
        return toks if self.bpe == "none" else self.word_ids(toks)

    def prefixes(self, tokens: Sequence[int]) -> List[List[int]]:
        """The units of Y^τ for τ = 1..len(tokens) (a written ⟨/s⟩ adds nothing)."""
        toks = [int(t) for t in tokens]
        return [self.units(toks[:tau]) for tau in range(1, len(toks) + 1)]


def bleu0_and_bp(matches: Sequence[int], hyp_len: int, ref_len: int, max_order: int = 4) -> Tuple[float, float]:
    """BLEU⁰ and BP from the clipped n-gram matches m_1..m_N of a hypothesis of ``hyp_len`` units (the
    smoothing of :func:`sentence_bleu0`)."""
    if hyp_len == 0 or matches[0] == 0:
        bleu0 = 0.0
    else:
        log_p = 0.0
        for n in range(1, max_order + 1):
            m, total = matches[n - 1], max(hyp_len - n + 1, 0)
            if n > 1:
                m, total = m + 1, total + 1
            log_p += math.log(max(m, 1e-30) / max(total, 1)) / max_order
        bleu0 = math.exp(log_p)
    bp = math.exp(1 - ref_len / max(hyp_len, 1)) if hyp_len < ref_len else 1.0
    return bleu0, bp


class PrefixBLEU:
    """BLEU⁰ of a growing hypothesis against one reference, updated in O(N) per added unit (the clipped
    matches of the n-grams that end at the new unit); any other prefix is recounted from scratch."""

    def __init__(self, ref: Sequence[int], max_order: int = 4):
        self.max_order = max_order
        self.ref_len = len(ref)
        self.ref_counts = [Counter(tuple(ref[i: i + n]) for i in range(len(ref) - n + 1))
                           for n in range(1, max_order + 1)]
        self.reset()

    def reset(self) -> None:
        self.units: List[int] = []
        self.counts = [Counter() for _ in range(self.max_order)]
        self.matches = [0] * self.max_order

    def add(self, unit: int) -> None:
        self.units.append(unit)
        for n in range(1, min(self.max_order, len(self.units)) + 1):
            g = tuple(self.units[-n:])
            self.counts[n - 1][g] += 1
            if self.counts[n - 1][g] <= self.ref_counts[n - 1].get(g, 0):
                self.matches[n - 1] += 1

    def score(self, units: Sequence[int]) -> Tuple[float, float]:
        """(BLEU⁰, BP) of ``units`` (fast when it extends the previous call's units by one)."""
        units = list(units)
        if units[:-1] != self.units or not units:
            self.reset()
            for u in units[:-1]:
                self.add(u)
        if units:
            self.add(units[-1])
        return bleu0_and_bp(self.matches, len(units), self.ref_len, self.max_order)


def prefix_bleu(hyp_prefixes: Sequence[Sequence[Sequence[int]]], refs: Sequence[Sequence[int]]
                ) -> Tuple[List[List[float]], List[float]]:
    """For every trajectory i: BLEU⁰(Y^τ_i) for τ = 0..n_i (``hyp_prefixes[i]`` the units of Y^1..Y^{n_i};
    BLEU⁰(∅) = 0) and the final BLEU(Y_i) = BP·BLEU⁰ (:class:`PrefixBLEU`; equal to :func:`sentence_bleu0`)."""
    b0, final = [], []
    for prefixes, ref in zip(hyp_prefixes, refs):
        scorer = PrefixBLEU(ref)
        values, last = [0.0], (0.0, 0.0)
        for p in prefixes:
            last = scorer.score(p) if len(p) else (0.0, 0.0)
            values.append(last[0])
        b0.append(values)
        final.append(last[0] * last[1])
    return b0, final


# ============================================================================================ rewards
@dataclass
class RewardConfig:
    delay_type: str = "ap"
    target_ap: float = 0.5
    target_cw: float = 5.0
    alpha: float = -0.03
    beta: float = -1.0
    cw_penalty: str = "thesis"
    quality: str = "telescoping"

    def __post_init__(self):
        if self.delay_type not in DELAY_TYPES:
            raise ValueError(f"delay type must be one of {DELAY_TYPES}, got {self.delay_type!r}")
        if self.cw_penalty not in CW_PENALTIES:
            raise ValueError(f"cw penalty must be one of {CW_PENALTIES}, got {self.cw_penalty!r}")
        if self.quality not in QUALITY_REWARDS:
            raise ValueError(f"quality reward must be one of {QUALITY_REWARDS}, got {self.quality!r}")
        if self.alpha > 0 or self.beta > 0:
            raise ValueError(f"Eq. 9.9 needs alpha <= 0 and beta <= 0, got {self.alpha}, {self.beta}")


def sign(x: float) -> int:
    return (x > 0) - (x < 0)


def trajectory_rewards(actions: Sequence[int], bleu0: Sequence[float], final_bleu: float, src_len: int,
                       cfg: RewardConfig) -> Dict:
    """r_t = r^Q_t + r^D_t (t = 1..T) of one trajectory (module doc): ``actions`` its READ/WRITE codes (no-op
    READs included), ``bleu0`` BLEU⁰ of Y^0..Y^n (n = its WRITEs), ``final_bleu`` BLEU(Y). Returns
    ``{"rewards", "quality", "delay"}`` (per-step lists) and the trajectory's ``ap``/``cw``."""
    codes = [int(a) for a in actions]
    T = len(codes)
    if T == 0:
        raise ValueError("a trajectory without actions")
    n = sum(codes)
    if len(bleu0) != n + 1:
        raise ValueError(f"{n} WRITEs need {n + 1} BLEU0 values (Y^0..Y^n), got {len(bleu0)}")
    quality, delay = [0.0] * T, [0.0] * T
    w = 0
    for t, a in enumerate(codes):
        if a == WRITE:
            w += 1
            quality[t] = bleu0[w] - bleu0[w - 1]  # ΔBLEU⁰ (Eq. 9.6)
    if cfg.quality == "telescoping":
        quality[-1] += final_bleu - bleu0[n]  # the brevity penalty, at t = T only
    else:
        quality[-1] = final_bleu  # Eq. 9.6 as printed
    delays = delays_from_actions(codes, src_len)
    ap = average_proportion(delays, src_len) if delays else 1.0
    if cfg.delay_type == "ap":
        delay[-1] = cfg.beta * max(ap - cfg.target_ap, 0.0)  # Eq. 9.9, β term, d_t ≠ 0 at t = T only
    else:
        c = 0
        for t, a in enumerate(codes):
            c = c + 1 if a == READ else 0  # Eq. 9.8
            if cfg.cw_penalty == "thesis":
                delay[t] = cfg.alpha * (sign(c - cfg.target_cw) + 1)
            else:
                delay[t] = cfg.alpha * max(c - cfg.target_cw, 0.0)
    return {"rewards": [q + d for q, d in zip(quality, delay)], "quality": quality, "delay": delay,
            "ap": ap, "cw": consecutive_wait(codes)}


def returns_to_go(rewards: Tensor, mask: Tensor) -> Tensor:
    """R_t = Σ_{k ≥ t} r_k (undiscounted; Eq. 9.10 with the index read as t') of (N, T) rewards, 0 at masked
    steps (``mask`` True on a trajectory's steps)."""
    r = rewards.masked_fill(~mask, 0.0)
    return torch.flip(torch.cumsum(torch.flip(r, [1]), 1), [1]).masked_fill(~mask, 0.0)

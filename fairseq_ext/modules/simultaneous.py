"""Simultaneous NMT with a learned READ/WRITE agent (Gu 2019, ch. 9; Gu, Neubig, Cho, Li 2017): the NMT
environment on a frozen uni-directional ``rnnsearch``, the recurrent agent, the rewards and the policies (the agent and the WUE / WOS / WIW / WID / wait-k baselines).

Environment (§9.3.1, Eqs. 9.1–9.3; :class:`SimulEnvironment`)
-------------------------------------------------------------
* The source buffer X holds the source tokens *with* ⟨/s⟩ as its last token; x_1 is read before the
  first decision (Alg. 4 line 1), so η (the number of tokens read) starts at 1.
* Eq. 9.1 h_η = f^UNI-ENC(h_{η−1}, x_η): the NMT's encoder must be left-to-right only (``rnnsearch
  --encoder-unidirectional``, arch ``rnnsearch_gu_wmt15_uni``). Such an encoder is causal — h_η depends on
  x_{1:η} only — so the states of every prefix are the first η states of one pass over the whole
  sentence (:meth:`SimulEnvironment.prefix_states`; the tests check it against encoding the prefix
  alone). A bidirectional encoder is refused.
* Eq. 9.2: attention covers the read prefix x_{1:η} only (the unread positions are masked like pads).
  Until the first WRITE the initial decoder state z_0 = φ_INIT(H^η) (the NMT's tanh(W·mean h)) is
  recomputed from the prefix after every READ (Alg. 4 line 11).
* Eq. 9.3: the candidate (y_τ^η, z_τ^η) is the greedy word of one decoder step from (z_{τ−1}, y_{τ−1})
  with the current prefix, recomputed after every READ from the same (z_{τ−1}, y_{τ−1}). fairseq's bans
  hold: ⟨pad⟩ never, ⟨/s⟩ not as the first word (``min_len`` 1), ⟨/s⟩ forced once τ_MAX words are written,
  τ_MAX = min(a·|X| + b, the NMT's limit − 1) per sentence.
* Actions: READ (η ← η + 1; a no-op once ⟨/s⟩ has been read) and WRITE (emit the candidate; τ ← τ + 1;
  the episode ends when ⟨/s⟩ is written, so nothing is ever written past ⟨/s⟩). At test time
  (``force_write_at_end``) a READ after the source end is turned into a WRITE. An episode is cut after
  |X| + τ_MAX + 1 steps (only a training rollout that keeps READing after the end can get there; the
  thesis's code cuts after 1.5·τ_MAX steps).

Agent (§9.3.2, Eq. 9.4; :class:`SimulAgent`)
---------------------------------------------
o_t = [c_τ^η; z_τ^η; ε_I[y_τ^η]] (context of the candidate step, candidate top-layer decoder state,
decoder input embedding of the candidate word); s_t = GRU(s_{t−1}, o_t); π_θ(a_t | ·) = softmax(W s_t + b)
over {READ, WRITE} (thesis: 512 GRU units); the baseline b_φ(o_t) is an MLP o_t → tanh → 1 (128 units
in the released code). :class:`AdvantageNormalizer` holds the running mean/std of the advantages
(Mnih & Gregor 2014) as buffers, so they are checkpointed with the agent.

Rewards (§9.4.2; :func:`trajectory_rewards`)
--------------------------------------------
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

Latency metrics
---------------
AP (Eq. 9.7), CW, AL, LAAL, DAL and AL_CA are in :mod:`fairseq_ext.modules.latency` (imported here under
their old names: :func:`average_proportion`, :func:`consecutive_wait`, :func:`average_lagging`,
:func:`differentiable_average_lagging`, :func:`latency`, :func:`delays_from_actions`).

Policies (:data:`POLICIES`)
---------------------------
``agent`` (argmax at test, sampled in training), ``wue`` (wait until end: READ to ⟨/s⟩, then WRITE — the
full-sentence greedy decoding of the uni-directional NMT), ``wos`` (wait one step: x_1 is read before the
first decision, then WRITE and READ alternate, g(τ) = min(τ, |X|) — wait-k with k = 1), ``waitk``
(Ma et al. 2019: g(τ) = min(k + τ − 1, |X|)), ``wiw`` / ``wid`` (Cho & Esipova 2016, s0 = 1, δ = 1:
pre-READ x_{η+1}; READ if the probability of the current candidate word drops (WIW) or the most likely
word changes (WID) with it, else WRITE the current candidate).

Decoding: :func:`run_episode` (simultaneous greedy decoding, Alg. 4, batched over sentences) and
:func:`simultaneous_beam_search` (§9.3.3: a beam of K hypotheses inside each run of WRITEs, the policy
observing the best one; on READ the best is committed and the beam collapses to it).

References: Gu, Neubig, Cho, Li, "Learning to Translate in Real-time with Neural Machine Translation",
EACL 2017; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019
(ch. 9); Cho, Esipova, "Can neural machine translation do simultaneous translation?", 2016; Ma et al.,
"STACL: Simultaneous Translation with Implicit Anticipation and Controllable Latency using
Prefix-to-Prefix Framework", ACL 2019; Cherry, Foster, "Thinking Slow about Latency Evaluation for
Simultaneous Machine Translation", 2019; Lin, Och, "ORANGE: a Method for Evaluating Automatic Evaluation
Metrics for Machine Translation", COLING 2004; Mnih, Gregor, "Neural Variational Inference and Learning
in Belief Networks", ICML 2014.
"""
import math
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_ext.modules.actor_critic import clipped_matches
from fairseq_ext.modules.latency import (  # noqa: F401  (the latency metrics, importable from here as before)
    READ,
    WRITE,
    Actions,
    action_codes,
    action_string,
    average_lagging,
    average_proportion,
    consecutive_wait,
    delays_from_actions,
    differentiable_average_lagging,
    latency,
)

POLICIES = ("agent", "wue", "wos", "wiw", "wid", "waitk")
DELAY_TYPES = ("ap", "cw")
CW_PENALTIES = ("thesis", "linear")
QUALITY_REWARDS = ("telescoping", "literal")
ADV_NORMS = ("running", "batch", "none")
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


# ============================================================================================ agent
class AdvantageNormalizer(nn.Module):
    """R̃ = (R̂ − b)/√(σ² + e) with a running mean b and variance σ² of the advantages R̂ (§9.4.3; EMA with
    ``momentum``, started at the first batch's statistics); buffers, so they are checkpointed."""

    def __init__(self, momentum: float = 0.99, eps: float = 1e-8):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("var", torch.ones(()))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, adv: Tensor, mask: Tensor, mode: str = "running", update: bool = True) -> Tensor:
        if mode == "none":
            return adv
        values = adv.detach()[mask].double()
        if values.numel() == 0:
            return adv
        mean, var = values.mean(), values.var(unbiased=False)
        if mode == "running":
            if update:
                m = self.momentum if int(self.count) > 0 else 0.0
                self.mean.copy_(m * self.mean.double() + (1 - m) * mean)
                self.var.copy_(m * self.var.double() + (1 - m) * var)
                self.count += 1
            mean, var = self.mean.double(), self.var.double()
        elif mode != "batch":
            raise ValueError(f"advantage normalisation must be one of {ADV_NORMS}, got {mode!r}")
        return ((adv.double() - mean) / torch.sqrt(var + self.eps)).to(adv.dtype)


class SimulAgent(nn.Module):
    """The READ/WRITE agent (Eq. 9.4) and its baseline b_φ (module doc)."""

    def __init__(self, obs_dim: int, hidden_size: int = 512, baseline_hidden: int = 128, adv_momentum: float = 0.99):
        super().__init__()
        self.obs_dim, self.hidden_size = obs_dim, hidden_size
        self.rnn = nn.GRUCell(obs_dim, hidden_size)
        self.out = nn.Linear(hidden_size, 2)
        self.baseline = nn.Sequential(nn.Linear(obs_dim, baseline_hidden), nn.Tanh(), nn.Linear(baseline_hidden, 1))
        self.adv_norm = AdvantageNormalizer(adv_momentum)
        for p in [*self.rnn.parameters(), *self.out.parameters()]:
            p.param_group = "policy"
        for p in self.baseline.parameters():
            p.param_group = "baseline"

    def initial_hidden(self, rows: int, device=None) -> Tensor:
        return torch.zeros(rows, self.hidden_size, device=device)

    def step(self, obs: Tensor, hidden: Tensor) -> Tuple[Tensor, Tensor]:
        """s_t = GRU(s_{t−1}, o_t) and the log-probabilities (R, 2) of (READ, WRITE)."""
        hidden = self.rnn(obs.type_as(hidden), hidden)
        return hidden, torch.log_softmax(self.out(hidden).float(), dim=-1)

    def value(self, obs: Tensor) -> Tensor:
        """b_φ(o_t) (R,)."""
        return self.baseline(obs).squeeze(-1).float()


# ============================================================================================ environment
def check_environment(nmt) -> None:
    """The NMT must be an ``rnnsearch``-like model with a left-to-right encoder (Eq. 9.1)."""
    enc, dec = nmt.encoder, nmt.decoder
    for name in ("decoder_step", "initial_state", "output_layer", "embed_tokens"):
        if not hasattr(dec, name):
            raise ValueError(f"the simultaneous environment needs an rnnsearch decoder (no {name} in "
                             f"{type(dec).__name__})")
    rnn = getattr(enc, "rnn", None)
    if getattr(rnn, "directions", None) != 1:
        raise ValueError("the simultaneous environment needs a uni-directional (left-to-right) encoder: train the "
                         "NMT with --arch rnnsearch_gu_wmt15_uni or --encoder-unidirectional (Eq. 9.1)")


@dataclass
class Candidate:
    """One decoder step from (z_{τ−1}, y_{τ−1}) with the prefix x_{1:η} (Eq. 9.3), for every row."""
    token: Tensor  # (R,) y_τ^η (argmax after the bans)
    score: Tensor  # (R,) its log-probability
    lprobs: Tensor  # (R, V) after the bans
    state: Dict[str, Tensor]  # z_τ^η's decoder state
    obs: Tensor  # (R, C + H + E) o_t
    eta: Tensor  # (R,) the prefix length it was computed with


class SimulEnvironment:
    """The NMT environment of §9.3.1 over R rows (sentences or trajectories; module doc).

    State per row: ``eta`` (source tokens read), ``tau`` (words written), the decoder state and previous
    word, ``done``; the written ``tokens``/``scores``/``delays`` and the ``actions`` taken (Python lists).
    :meth:`observe` computes the candidates, :meth:`step` applies the actions."""

    def __init__(self, nmt, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, *, max_len_a: float = 0.0,
                 max_len_b: int = 200, max_len: int = 0, min_len: int = 1, force_write_at_end: bool = True):
        check_environment(nmt)
        self.nmt = nmt
        self.dec = nmt.decoder
        d = self.dec.dictionary
        self.pad, self.eos = d.pad(), d.eos()
        self.min_len = min_len
        self.force_write_at_end = force_write_at_end
        with torch.no_grad():
            self.encoder_out = nmt.encoder(src_tokens, src_lengths=src_lengths)
        mask = self.encoder_out["encoder_padding_mask"][0]
        self.real = ~mask
        self.rank = torch.cumsum(self.real.long(), 1)  # 1-based index of each real token
        self.src_len = self.real.sum(1)
        R = src_tokens.size(0)
        self.rows = R
        device = src_tokens.device
        self.device = device
        limit = (max_len or nmt.max_decoder_positions()) - 1
        self.tau_max = torch.clamp((max_len_a * self.src_len.double() + max_len_b).long(), max=limit)
        self.step_limit = self.src_len + self.tau_max + 1
        self.eta = torch.ones(R, dtype=torch.long, device=device).minimum(self.src_len)
        self.tau = torch.zeros(R, dtype=torch.long, device=device)
        self.steps = torch.zeros(R, dtype=torch.long, device=device)
        self.done = torch.zeros(R, dtype=torch.bool, device=device)
        self.prev = torch.full((R,), self.eos, dtype=torch.long, device=device)
        self.state: Optional[Dict[str, Tensor]] = None
        self.tokens: List[List[int]] = [[] for _ in range(R)]
        self.scores: List[List[float]] = [[] for _ in range(R)]
        self.delays: List[List[int]] = [[] for _ in range(R)]
        self.actions: List[List[int]] = [[] for _ in range(R)]
        self.history: List[Dict[str, Tensor]] = []  # per step: active, write, forced (R,)

    # ------------------------------------------------------------------ Eqs. 9.1–9.3
    def prefix_encoder_out(self, eta: Tensor, rows: Optional[Tensor] = None) -> Dict[str, List[Tensor]]:
        """The encoder output of the prefixes x_{1:η} (Eq. 9.1): unread positions masked like pads, the final
        state h_η."""
        enc = self.encoder_out
        if rows is not None:
            enc = self.nmt.encoder.reorder_encoder_out(enc, rows)
            real, rank, src_len = self.real[rows], self.rank[rows], self.src_len[rows]
        else:
            real, rank, src_len = self.real, self.rank, self.src_len
        readable = real & (rank <= eta.unsqueeze(1))
        states = enc["encoder_out"][0]  # (S, R, C)
        last = (real & (rank == eta.unsqueeze(1))).long().argmax(1)
        h_eta = states.transpose(0, 1)[torch.arange(states.size(1), device=states.device), last]
        final = torch.where((eta >= src_len).unsqueeze(1), enc["encoder_final"][0], h_eta)
        return dict(enc, encoder_padding_mask=[~readable], encoder_final=[final])

    def prefix_states(self, eta: int) -> List[Tensor]:
        """h_1..h_η of each row (the states the agent's prefix x_{1:η} attends to)."""
        states = self.encoder_out["encoder_out"][0].transpose(0, 1)
        return [states[r][self.real[r] & (self.rank[r] <= eta)] for r in range(self.rows)]

    @torch.no_grad()
    def candidates(self, state: Optional[Dict[str, Tensor]], prev: Tensor, tau: Tensor, eta: Tensor,
                   rows: Optional[Tensor] = None) -> Candidate:
        """The candidate step of Eq. 9.3 for explicit (state, previous word, τ, η) rows (``rows``: the
        environment rows they belong to); rows with τ = 0 start from φ_INIT(H^η) (Alg. 4 line 11)."""
        dec = self.dec
        enc = self.prefix_encoder_out(eta, rows)
        init = dec.initial_state(enc)
        if state is None:
            state = init
        else:
            fresh = tau.eq(0)  # the key projections are per source position: always those of this source
            state = {k: init[k] if k == "proj_keys" else torch.where(fresh.view(-1, *([1] * (v.dim() - 1))), init[k], v)
                     for k, v in state.items()}
        step = int(tau.max()) + 1 if tau.numel() else 1
        state = dec.transform_state(state, step)
        embedded = dec.dropout(dec.embed_tokens(prev))
        features, new_state, attn = dec.decoder_step(embedded, state, enc, step)
        logits = dec.output_layer(features)
        lprobs = self.nmt.get_normalized_probs((logits.unsqueeze(1), None), log_probs=True)[:, 0].float()
        lprobs = self.constrain(lprobs, tau, self.tau_max if rows is None else self.tau_max[rows])
        score, token = lprobs.max(-1)
        if attn is not None:
            ctx = torch.bmm(attn.unsqueeze(1).type_as(features), enc["encoder_out"][0].transpose(0, 1)).squeeze(1)
        else:
            ctx = enc["encoder_final"][0]
        obs = torch.cat([ctx, new_state["hidden"][:, -1], dec.embed_tokens(token)], dim=-1)
        return Candidate(token, score, lprobs, new_state, obs, eta)

    def constrain(self, lprobs: Tensor, tau: Tensor, tau_max: Tensor) -> Tensor:
        """fairseq's bans: no ⟨pad⟩, no ⟨/s⟩ before ``min_len`` words, only ⟨/s⟩ once τ_MAX words are written."""
        lprobs[lprobs != lprobs] = -math.inf
        lprobs[:, self.pad] = -math.inf
        at_max = tau.ge(tau_max)
        if bool(at_max.any()):
            keep = lprobs[at_max, self.eos].clone()
            lprobs[at_max] = -math.inf
            lprobs[at_max, self.eos] = keep
        early = tau.lt(self.min_len) & ~at_max
        if bool(early.any()):
            lprobs[early, self.eos] = -math.inf
        return lprobs

    def observe(self, eta: Optional[Tensor] = None) -> Candidate:
        """Every row's candidate with its current prefix (or ``eta``: a pre-READ for WIW/WID, clamped to |X|)."""
        eta = self.eta if eta is None else torch.minimum(eta, self.src_len)
        return self.candidates(self.state, self.prev, self.tau, eta)

    @property
    def source_done(self) -> Tensor:
        """(R,) whether ⟨/s⟩ has been read."""
        return self.eta.ge(self.src_len)

    def step(self, write: Tensor, cand: Candidate) -> Dict[str, Tensor]:
        """Apply the actions ``write`` (R,) bool (False: READ) of the active rows; returns this step's
        ``active``, ``write`` (after forcing) and ``forced`` masks (also appended to :attr:`history`)."""
        active = ~self.done
        write = write.to(self.device).bool()
        forced = active & ~write & self.force_write_at_end & self.source_done
        write = (write | forced) & active
        read = active & ~write
        if self.state is None:  # first step: rows still at τ = 0 restart from φ_INIT(H^η) in candidates()
            self.state = {k: v.clone() for k, v in cand.state.items()}
        for r in write.nonzero().squeeze(1).tolist():
            self.tokens[r].append(int(cand.token[r]))
            self.scores[r].append(float(cand.score[r]))
            self.delays[r].append(int(self.eta[r]))
        for r in active.nonzero().squeeze(1).tolist():
            self.actions[r].append(WRITE if bool(write[r]) else READ)
        self.state = {k: cand.state[k] if k == "proj_keys" else torch.where(
            write.view(-1, *([1] * (v.dim() - 1))), cand.state[k], v) for k, v in self.state.items()}
        self.prev = torch.where(write, cand.token, self.prev)
        self.tau = self.tau + write.long()
        self.eta = self.eta + (read & ~self.source_done).long()
        self.steps = self.steps + active.long()
        self.done = self.done | (write & cand.token.eq(self.eos)) | self.steps.ge(self.step_limit)
        record = {"active": active, "write": write, "forced": forced}
        self.history.append(record)
        return record

    def results(self) -> List[Dict]:
        """Per row: ``tokens`` (ending in ⟨/s⟩ unless the episode was cut), ``positional_scores``, ``actions``
        (READ/WRITE codes), ``delays`` g(τ), ``src_len``."""
        return [{"tokens": torch.tensor(self.tokens[r], dtype=torch.long, device=self.device),
                 "positional_scores": torch.tensor(self.scores[r], device=self.device),
                 "actions": list(self.actions[r]), "delays": list(self.delays[r]), "src_len": int(self.src_len[r])}
                for r in range(self.rows)]


# ============================================================================================ policies
class Policy:
    """``act(env, cand) -> write (R,) bool`` for every row (READ where False)."""

    def act(self, env: SimulEnvironment, cand: Candidate) -> Tensor:
        raise NotImplementedError


class WaitUntilEnd(Policy):
    """WUE: READ until ⟨/s⟩ is read, then WRITE."""

    def act(self, env, cand):
        return env.source_done.clone()


class WaitK(Policy):
    """wait-k (Ma et al. 2019): g(τ) = min(k + τ − 1, |X|); k = 1 is WOS (READ and WRITE alternate)."""

    def __init__(self, k: int = 1):
        if k < 1:
            raise ValueError(f"wait-k needs k >= 1, got {k}")
        self.k = k

    def act(self, env, cand):
        return env.eta.ge(torch.minimum(env.tau + self.k, env.src_len))


class WaitIfWorse(Policy):
    """WIW / WID (Cho & Esipova 2016, s0 = 1, δ = 1): pre-READ x_{η+1}; READ if the candidate word's probability
    drops (``diff=False``) or the most likely word changes (``diff=True``), else WRITE the candidate."""

    def __init__(self, diff: bool = False):
        self.diff = diff

    def act(self, env, cand):
        can_read = ~env.source_done
        peek = env.observe(env.eta + 1)
        if self.diff:
            wait = peek.token.ne(cand.token)
        else:
            wait = peek.lprobs.gather(1, cand.token.unsqueeze(1)).squeeze(1) < cand.score
        return ~(can_read & wait)


class AgentPolicy(Policy):
    """The learned agent (Eq. 9.4): argmax (test) or sampled (``sample``) actions. With ``record`` it keeps,
    per step, log π(a_t), the entropy of π_t and b_φ(o_t) of every row (with gradients)."""

    def __init__(self, agent: SimulAgent, rows: int, device=None, sample: bool = False, record: bool = False):
        self.agent = agent
        self.hidden = agent.initial_hidden(rows, device=device)
        self.sample, self.record = sample, record
        self.log_probs: List[Tensor] = []
        self.entropies: List[Tensor] = []
        self.values: List[Tensor] = []

    def act(self, env, cand):
        active = ~env.done
        hidden, logp = self.agent.step(cand.obs, self.hidden)
        self.hidden = torch.where(active.unsqueeze(1), hidden, self.hidden)
        if self.sample:
            action = torch.multinomial(logp.detach().exp(), 1).squeeze(1)
        else:
            action = logp.detach().argmax(-1)
        if self.record:
            forced_write = env.force_write_at_end & env.source_done
            taken = torch.where(forced_write, torch.full_like(action, WRITE), action)
            self.log_probs.append(logp.gather(1, taken.unsqueeze(1)).squeeze(1))
            self.entropies.append(-(logp.exp() * logp).sum(-1))
            self.values.append(self.agent.value(cand.obs))
        return action.eq(WRITE)


def build_policy(name: str, model=None, rows: int = 0, device=None, waitk: int = 3, sample: bool = False,
                 record: bool = False) -> Policy:
    """A policy of :data:`POLICIES`; ``agent`` needs a model with an ``agent`` (a ``simul_agent`` checkpoint)."""
    if name == "agent":
        agent = getattr(model, "agent", None)
        if agent is None:
            raise ValueError(f"--simul-policy agent needs a simul_agent model (--path AGENT.pt), got "
                             f"{type(model).__name__}; the baselines wue/wos/wiw/wid/waitk decode a plain NMT")
        return AgentPolicy(agent, rows, device=device, sample=sample, record=record)
    if name == "wue":
        return WaitUntilEnd()
    if name == "wos":
        return WaitK(1)
    if name == "waitk":
        return WaitK(waitk)
    if name in ("wiw", "wid"):
        return WaitIfWorse(diff=name == "wid")
    raise ValueError(f"unknown simultaneous policy {name!r}; expected one of {POLICIES}")


# ============================================================================================ decoding
def run_episode(env: SimulEnvironment, policy: Policy) -> List[Dict]:
    """Simultaneous greedy decoding (Alg. 4) of every row until all are done; :meth:`SimulEnvironment.results`."""
    while not bool(env.done.all()):
        cand = env.observe()
        env.step(policy.act(env, cand), cand)
    return env.results()


def _select(state: Dict[str, Tensor], index: Tensor) -> Dict[str, Tensor]:
    return {k: v.index_select(0, index) for k, v in state.items()}


@torch.no_grad()
def simultaneous_beam_search(env: SimulEnvironment, policy: Policy, beam_size: int, trace: Optional[List] = None
                             ) -> Dict:
    """Simultaneous beam search (§9.3.3) of a one-row environment. The policy observes the best hypothesis
    (the environment's own state, so the delays are those of greedy decoding with the same actions). On
    WRITE every hypothesis of the beam is extended over the vocabulary with its cumulative −log p and the
    ``beam_size`` best extensions are kept (within a run of WRITEs all hypotheses have the same length, so
    the costs compare); the sentence ends when the best extension is ⟨/s⟩ (other ⟨/s⟩ extensions are
    dropped). On READ the best hypothesis is committed and the beam collapses to it. ``beam_size`` 1 is
    :func:`run_episode`. ``trace`` receives (action, beam size after it) per step. Returns the row's result."""
    if env.rows != 1:
        raise ValueError("simultaneous beam search decodes one sentence at a time")
    if beam_size < 1:
        raise ValueError(f"--simul-beam must be >= 1, got {beam_size}")
    device = env.device
    one = torch.ones(1, dtype=torch.bool, device=device)
    beam_states: Optional[Dict[str, Tensor]] = None  # decoder states of the hypotheses (best first)
    beam_prev = env.prev.clone()
    beam_tokens: List[List[int]] = [[]]  # each hypothesis's words since the current run of WRITEs began
    beam_scores: List[List[float]] = [[]]
    beam_cost = torch.zeros(1, device=device)
    while not bool(env.done.all()):
        cand = env.observe()  # the best hypothesis's candidate: what the policy sees
        write = policy.act(env, cand).bool() | (env.force_write_at_end & env.source_done)
        if not bool(write.all()):  # READ: commit the best hypothesis, collapse the beam
            env.step(write, cand)
            beam_states, beam_prev = None, env.prev.clone()
            beam_tokens, beam_scores, beam_cost = [[]], [[]], torch.zeros(1, device=device)
            if trace is not None:
                trace.append((READ, 1))
            continue
        k = len(beam_tokens)
        if k == 1:
            lprobs, new_state = cand.lprobs, cand.state
        else:
            ext = env.candidates(beam_states, beam_prev, env.tau.expand(k), env.eta.expand(k),
                                 rows=torch.zeros(k, dtype=torch.long, device=device))
            lprobs, new_state = ext.lprobs, ext.state
        V = lprobs.size(-1)  # the model's vocabulary (fairseq's --post-process may grow the dictionary object)
        total = (beam_cost.unsqueeze(1) - lprobs).view(-1)  # cumulative −log p of every extension
        order = torch.argsort(total, stable=True).tolist()
        if order[0] % V == env.eos or beam_size == 1:
            chosen = order[:1]
        else:
            chosen = [i for i in order[: beam_size + k] if i % V != env.eos and math.isfinite(float(total[i]))]
            chosen = chosen[:beam_size]
        idx = torch.tensor(chosen, dtype=torch.long, device=device)
        parents, words = idx // V, idx % V
        beam_tokens = [beam_tokens[p] + [w] for p, w in zip(parents.tolist(), words.tolist())]
        beam_scores = [beam_scores[p] + [float(lprobs[p, w])] for p, w in zip(parents.tolist(), words.tolist())]
        beam_cost = total[idx]
        beam_states = _select(new_state, parents)
        beam_prev = words
        # the environment follows the best hypothesis; its words of this run replace the ones written so far
        top = parents[:1]
        best = Candidate(words[:1], lprobs[top, words[:1]], lprobs[top], _select(new_state, top), cand.obs, cand.eta)
        env.step(one, best)
        run = len(beam_tokens[0])
        env.tokens[0][-run:] = beam_tokens[0]
        env.scores[0][-run:] = beam_scores[0]
        if trace is not None:
            trace.append((WRITE, len(beam_tokens)))
    return env.results()[0]


# ============================================================================================ streaming
class StreamingSimulTranslator:
    """Simultaneous greedy decoding (Alg. 4) of one sentence whose source arrives token by token — the core of
    a SimulEval text agent (``fairseq_ext/tools/simuleval_agent.py``). :meth:`push` source token ids (⟨/s⟩ is
    appended with ``finished``), :meth:`pop` runs the policy until it needs a token that has not arrived
    (a READ is then pending until the next :meth:`push`) or ⟨/s⟩ is written, and returns the words written
    meanwhile. The encoder runs on the tokens read so far (Eq. 9.1: causal, so the states are those of the
    offline environment), and |X| is unknown (no forced WRITE, wait-k without the min) until ``finished``:
    the decisions and words are those of :func:`run_episode` on the whole sentence. ``wiw``/``wid`` pre-read
    a token and are not supported."""

    UNKNOWN_LENGTH = 1 << 30

    def __init__(self, model, policy: str = "agent", waitk: int = 3, max_len: int = 200, min_len: int = 1):
        if policy in ("wiw", "wid"):
            raise ValueError(f"streaming decoding does not support --simul-policy {policy} (it pre-reads a token)")
        check_environment(model)
        self.model, self.policy_name, self.waitk = model, policy, waitk
        self.max_len, self.min_len = max_len, min_len
        self.eos = model.decoder.dictionary.eos()
        self.reset()

    def reset(self) -> None:
        self.source: List[int] = []
        self.source_finished = False
        self.eta, self.tau = 0, 0
        self.state: Optional[Dict[str, Tensor]] = None
        self.prev = self.eos
        self.tokens: List[int] = []
        self.delays: List[int] = []
        self.actions: List[int] = []
        self.pending_read = False
        self.finished = False
        device = next(self.model.parameters()).device
        self.device = device
        self.policy = build_policy(self.policy_name, self.model, rows=1, device=device, waitk=self.waitk)

    def push(self, tokens: Sequence[int], finished: bool = False) -> None:
        if self.source_finished:
            raise ValueError("the source is already finished")
        self.source.extend(int(t) for t in tokens)
        if finished:
            self.source.append(self.eos)
            self.source_finished = True

    def environment(self) -> SimulEnvironment:
        src = torch.tensor([self.source[: self.eta]], dtype=torch.long, device=self.device)
        env = SimulEnvironment(self.model, src, max_len_a=0.0, max_len_b=self.max_len, min_len=self.min_len,
                               force_write_at_end=False)
        total = len(self.source) if self.source_finished else self.UNKNOWN_LENGTH
        env.src_len = torch.tensor([total], device=self.device)
        env.eta = torch.tensor([self.eta], device=self.device)
        env.tau = torch.tensor([self.tau], device=self.device)
        env.state, env.prev = self.state, torch.tensor([self.prev], device=self.device)
        return env

    @torch.no_grad()
    def pop(self) -> List[int]:
        written: List[int] = []
        while not self.finished:
            if self.eta == 0 or self.pending_read:  # x_1's pre-read, or the READ the policy chose last time
                if self.eta >= len(self.source):
                    self.pending_read = self.eta > 0
                    return written
                self.eta += 1
                self.pending_read = False
                continue
            env = self.environment()
            cand = env.observe()
            write = bool(self.policy.act(env, cand)[0]) or (self.source_finished and self.eta >= len(self.source))
            self.actions.append(WRITE if write else READ)
            if not write:
                self.pending_read = True
                continue
            env.step(torch.ones(1, dtype=torch.bool, device=self.device), cand)
            token = env.tokens[0][0]
            self.state, self.prev, self.tau = env.state, token, self.tau + 1
            self.tokens.append(token)
            self.delays.append(self.eta)
            written.append(token)
            self.finished = token == self.eos or self.tau > self.max_len
        return written

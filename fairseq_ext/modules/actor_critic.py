"""The pieces of trainable greedy decoding (Gu 2019, ch. 7; Gu, Cho, Li 2017): the actor π_φ, the critic R^c_ψ,
the critic-aware importance weights of Eq. 7.6, and the two decoding objectives (batched).

* :class:`Actor` — a_t = W₂ tanh(W₁ [z; c_t] + b₁) + b₂ (§7.4.1: one hidden layer of 32 tanh units, a linear
  output of dim(z)); W₂ and b₂ start at zero, so an untrained actor is plain greedy decoding exactly.
  Where a_t enters the decoder (the state site of §7.2.2, or the output site) is the model's
  business (:mod:`fairseq_ext.models.trainable_greedy`). The thesis's 2,056-d input is [z; c] of a 1,028-d
  context; with a bidirectional encoder c_t has 2·1028 dims, so the input size is taken from the NMT's
  actual dimensions (dim z + dim c).
* :class:`Critic` — "a variant of an attention-based NMT model that takes a reference translation as a
  source sentence and a state-action sequence from the actor as a target sentence" (§7.4.1): a
  bidirectional GRU over the reference's embeddings, a Bahdanau-attention GRU whose input at step t is
  [W_s z_t; E_c[ŷ_t]] (the decoder state of the trajectory and the symbol it emitted, DECODE line 13's
  R^c_ψ(Z, Ŷ)), and a scalar read from its state at the trajectory's last step. It returns the raw scalar;
  the objective applies the output activation (sigmoid for bounded BLEU, identity for perplexity).
* :func:`critic_aware_weights` — w_k = exp(−(r^c_k − r_k)²/τ), w̃_k = w_k / Σ_k w_k (Alg. 3, lines 12–13;
  the importance weights of Eq. 7.6 with the locality term as proposal), normalised over the samples of
  each sentence (``group``) or over the whole batch.
* :func:`sentence_bleu_plus1` — smoothed sentence BLEU (Lin & Och 2004, "BLEU+1"), batched on token ids:
  p_1 = m_1/c_1, p_n = (m_n + 1)/(c_n + 1) for n = 2..4, BP = min(1, exp(1 − r/c)),
  BLEU = BP · exp(¼ Σ_n log p_n), 0 when nothing matches (the convention of sacrebleu's ``add-k``).
  Clipped n-gram matches of all rows at once through one ``torch.unique`` over (row, n-gram) keys.
* :func:`mean_log_prob` — the negative-perplexity objective (1/|Ŷ|) Σ_t log p_θ(ŷ_t | ŷ_<t, X) (§7.4.1: "the
  negative log-probability normalized by the length", with the sign of a reward; perplexity = exp(−it)).

References: Gu, Cho, Li, "Trainable Greedy Decoding for Neural Machine Translation", EMNLP 2017; Gu,
"Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019 (ch. 7);
Lin, Och, "ORANGE: a Method for Evaluating Automatic Evaluation Metrics for Machine Translation", COLING 2004.
"""
import math
from typing import Dict, Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_ext.modules.rnn import AttentionalTransition, BahdanauAttention, BiRNNEncoderStack

OBJECTIVES = ("bleu", "perplexity")


class Actor(nn.Module):
    """π_φ([z; c]) → a (see module doc); ``forward(z (B, Dz), ctx (B, Dc)) -> (B, Dz)``."""

    def __init__(self, state_dim: int, context_dim: int, hidden_dim: int = 32):
        super().__init__()
        self.hidden = nn.Linear(state_dim + context_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, state_dim)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, z: Tensor, ctx: Tensor) -> Tensor:
        return self.out(torch.tanh(self.hidden(torch.cat([z, ctx.type_as(z)], dim=-1))))


class Critic(nn.Module):
    """R^c_ψ(Z, Ŷ; Y) (see module doc): :meth:`encode` the references once per sentence, then :meth:`forward`
    any number of trajectories, each pointing at its sentence's reference with ``index``."""

    def __init__(self, num_embeddings: int, padding_idx: int, state_dim: int, embed_dim: int, hidden_size: int,
                 attention_dim: int):
        super().__init__()
        self.padding_idx = padding_idx
        self.embed = nn.Embedding(num_embeddings, embed_dim, padding_idx=padding_idx)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        nn.init.constant_(self.embed.weight[padding_idx], 0.0)
        self.encoder = BiRNNEncoderStack("gru", embed_dim, hidden_size, 1, True)
        C = self.encoder.output_dim
        self.init_proj = nn.Linear(C, hidden_size)
        self.state_proj = nn.Linear(state_dim, embed_dim)
        self.transition = AttentionalTransition("gru", "plain", 2 * embed_dim, C, hidden_size,
                                                BahdanauAttention(hidden_size, C, attention_dim))
        self.output = nn.Linear(hidden_size, 1)

    def encode(self, ref_tokens: Tensor) -> Dict[str, Tensor]:
        """The references (R, S) (padding anywhere) → their memory: states, mask, keys, initial state."""
        mask = ref_tokens.eq(self.padding_idx)
        states, _ = self.encoder(self.embed(ref_tokens), mask)
        real = (~mask).unsqueeze(-1).type_as(states)
        init = torch.tanh(self.init_proj((states * real).sum(1) / real.sum(1).clamp(min=1.0)))
        return {"values": states, "padding_mask": mask, "proj_keys": self.transition.attention.project_keys(states),
                "init": init}

    def forward(self, memory: Dict[str, Tensor], index: Tensor, states: Tensor, tokens: Tensor, lengths: Tensor
                ) -> Tensor:
        """(N,) raw critic scores of N trajectories: ``states`` (N, T, Dz) z_{1:T}, ``tokens`` (N, T) ŷ_{1:T}
        (padded after each row's ``lengths``), ``index`` (N,) the reference row of each trajectory."""
        mem = {k: v.index_select(0, index) for k, v in memory.items()}
        T = int(lengths.max())
        x = torch.cat([self.state_proj(states[:, :T]), self.embed(tokens[:, :T])], dim=-1)
        h, outs = mem["init"], []
        for t in range(T):
            h, _, _, _ = self.transition(x[:, t], h, None, mem)
            outs.append(h)
        last = torch.stack(outs, 1)[torch.arange(h.size(0), device=h.device), lengths - 1]
        return self.output(last).squeeze(-1)


def critic_value(raw: Tensor, objective: str) -> Tensor:
    """r^c from the critic's raw scalar: sigmoid for the bounded BLEU, identity for (negative) perplexity."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}")
    return torch.sigmoid(raw) if objective == "bleu" else raw


def critic_aware_weights(r_c: Tensor, r: Tensor, tau: float, group: Optional[Tensor] = None,
                         uniform: bool = False) -> Tensor:
    """w̃ (N,) of Alg. 3 lines 12–13: w_k = exp(−(r^c_k − r_k)²/τ) normalised to sum 1 within each ``group``
    (e.g. the samples of one sentence; None: the whole batch). ``uniform``: w̃ = 1/|group| (plain
    deterministic policy gradient, the ablation of Fig. 7.4). Computed in the log domain (no underflow for
    small τ) and without gradient."""
    r_c, r = r_c.detach().float(), r.detach().float()
    if group is None:
        group = torch.zeros_like(r, dtype=torch.long)
    n = int(group.max()) + 1 if group.numel() else 0
    if uniform:
        logw = torch.zeros_like(r)
    else:
        if tau <= 0:
            raise ValueError(f"the critic-aware temperature tau must be > 0, got {tau}")
        logw = -(r_c - r).pow(2) / tau
    top = logw.new_full((n,), -math.inf).scatter_reduce(0, group, logw, "amax")
    w = (logw - top[group]).exp()
    return w / w.new_zeros(n).index_add(0, group, w)[group]


# ----------------------------------------------------------------------------------------------- objectives
def ngram_keys(tokens: Tensor, lengths: Tensor, n: int):
    """(rows, n-grams) of a right-padded (N, T) batch: ``(row (M,), grams (M, n))`` for every n-gram that lies
    inside its row's first ``lengths`` tokens."""
    N, T = tokens.shape
    if T < n:
        return tokens.new_zeros(0), tokens.new_zeros(0, n)
    grams = tokens.unfold(1, n, 1)  # (N, T - n + 1, n)
    start = torch.arange(T - n + 1, device=tokens.device)
    ok = start.unsqueeze(0) + n <= lengths.unsqueeze(1)
    rows = torch.arange(N, device=tokens.device).unsqueeze(1).expand_as(ok)
    return rows[ok], grams[ok]


def clipped_matches(hyp: Tensor, hyp_len: Tensor, ref: Tensor, ref_len: Tensor, n: int) -> Tensor:
    """(N,) Σ_g min(count_hyp(g), count_ref(g)) over the n-grams g of each row (BLEU's clipped matches)."""
    N = hyp.size(0)
    hr, hg = ngram_keys(hyp, hyp_len, n)
    rr, rg = ngram_keys(ref, ref_len, n)
    if hr.numel() == 0 or rr.numel() == 0:
        return hyp.new_zeros(N, dtype=torch.float)
    keys = torch.cat([torch.cat([hr.unsqueeze(1), hg], 1), torch.cat([rr.unsqueeze(1), rg], 1)], 0)
    uniq, inverse = torch.unique(keys, dim=0, return_inverse=True)
    U = uniq.size(0)
    count_h = torch.bincount(inverse[: hr.numel()], minlength=U)
    count_r = torch.bincount(inverse[hr.numel():], minlength=U)
    return hyp.new_zeros(N, dtype=torch.float).index_add(0, uniq[:, 0], torch.minimum(count_h, count_r).float())


def sentence_bleu_plus1(hyp: Tensor, hyp_len: Tensor, ref: Tensor, ref_len: Tensor, max_order: int = 4) -> Tensor:
    """(N,) BLEU+1 in [0, 1] of each row of ``hyp`` (N, T) against the same row of ``ref`` (N, T'), both
    right-padded with their lengths given (the tokens to score: no ⟨eos⟩, no pads). See the module doc."""
    hyp_len, ref_len = hyp_len.to(hyp.device), ref_len.to(hyp.device)
    c, r = hyp_len.float(), ref_len.float()
    log_p = torch.zeros_like(c)
    any_match = torch.zeros_like(c, dtype=torch.bool)
    for n in range(1, max_order + 1):
        m = clipped_matches(hyp, hyp_len, ref, ref_len, n)
        total = (c - n + 1).clamp(min=0)
        any_match |= m > 0
        if n > 1:
            m, total = m + 1, total + 1
        log_p = log_p + torch.log(m.clamp(min=1e-30) / total.clamp(min=1)) / max_order
    bp = torch.where(c < r, torch.exp(1 - r / c.clamp(min=1)), torch.ones_like(c))
    bleu = bp * log_p.exp()
    return torch.where(any_match & (c > 0), bleu, torch.zeros_like(bleu))


def mean_log_prob(lprobs: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """(N,) (1/|Ŷ|) Σ_t log p(ŷ_t) from the log-probabilities (N, T, V) of a teacher-forced pass over
    ``target`` (N, T); ``mask`` (N, T) marks the scored tokens (⟨eos⟩ included, pads excluded)."""
    tok = lprobs.float().gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0.0)
    return tok.sum(1) / mask.sum(1).clamp(min=1)

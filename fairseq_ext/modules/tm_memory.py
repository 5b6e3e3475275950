"""The key–value translation memory of SEG-NMT (Gu 2019 ch. 4, §4.2.2, Eqs. 4.2–4.7), shared by the
``seg_nmt`` model (:mod:`fairseq_ext.models.seg_nmt`) and its tests.

Slots. Every retrieved pair (X', Y') is run teacher-forced through the *same* translation model; the step
that predicts y'_τ gives the key c'_τ (its attention context, Eq. 2.7) and the value (z'_τ, y'_τ) (its top
decoder state and the token). The slots of all pairs retrieved for one example are concatenated, pair by
pair (the order of ``tm_index``), real slots first, then padding (:func:`gather_slots`); an example with
no retrieved pair has only padding slots (possibly zero of them).

* :class:`BilinearMetric` — c_tᵀ M c'_τ (Eq. 4.2 "A", Eq. 4.6 "M": the same matrix, §4.8), ``diagonal``
  (default) or ``full``, initialised to the identity (§4.3.1).
* :func:`memory_log_attention` — log q_{t,τ} = log softmax_τ(c_tᵀ M c'_τ − λ β_{t−1,τ}) over the real
  slots (Eq. 4.6; Eq. 4.2 when λ = 0); −∞ at padding, and −∞ everywhere (no NaN) for an example without slots.
* :class:`TMGate` — ζ_t = σ(f_gate([c_t; z_t; z̃_t])): an MLP with one tanh hidden layer (the thesis's
  "feedforward network with a single hidden layer, just like the attention mechanism"), or linear with
  hidden size 0 (the authors' released code); returns the logit, ζ = sigmoid(logit).
* :func:`copy_probs` — p_copy(w | M) = Σ_{τ: y'_τ = w} q_{t,τ} (Eq. 4.3 scattered onto the vocabulary).
* :func:`shallow_fusion` — log p = log(ζ p_copy + (1 − ζ) p_NMT) (Eq. 4.5), exact in log space: a word
  that no slot holds gets log(1 − ζ) + log p_NMT bit for bit (so ζ = 0 is the NMT distribution itself); only
  the slots' words are mixed (their first slots, :func:`slot_first`, found once per sentence).

Coverage (Eq. 4.7) is the per-slot accumulator β_t = β_{t−1} + q_t ζ_t, kept by the decoder in its
incremental state (so it follows the beam).

References: Gu, Wang, Cho, Li, "Search Engine Guided Neural Machine Translation", AAAI 2018; Gu,
"Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq_ext.modules.rnn import front_order
from fairseq_ext.data.errors import UserDataError

TM_METRICS = ("diagonal", "full")


class BilinearMetric(nn.Module):
    """score(c_t, c'_τ) = c_tᵀ M c'_τ with M diagonal (a vector m, init 1) or full (init I) (Eqs. 4.2/4.6)."""

    def __init__(self, dim: int, kind: str = "diagonal"):
        super().__init__()
        if kind not in TM_METRICS:
            raise UserDataError(f"unknown --tm-metric {kind!r} ({', '.join(TM_METRICS)})")
        self.kind = kind
        self.weight = nn.Parameter(torch.ones(dim) if kind == "diagonal" else torch.eye(dim))

    def project(self, query: Tensor) -> Tensor:
        """c_tᵀ M as a (B, C) row per query: (Mᵀ c_t)ᵀ."""
        return query * self.weight if self.kind == "diagonal" else query @ self.weight

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """query c_t (B, C), keys c' (B, M, C) → scores (B, M)."""
        return torch.bmm(keys, self.project(query).unsqueeze(2)).squeeze(2)


# --------------------------------------------------------------------------- a memory shared by a sentence's beam
def shared_group(row: Optional[Tensor], n: int, rows: int) -> Optional[int]:
    """G when hypothesis i reads memory row i // G — fairseq's beam layout (each sentence's hypotheses
    contiguous, the sentences in order; G = 1 without a beam) — else None (an arbitrary ``row``: gather).
    ``row`` (n,) the memory row of each hypothesis (None: row i for hypothesis i); ``rows`` the memory's rows."""
    if row is None:
        return 1 if n == rows else None
    if rows == 0 or n % rows:
        return None
    g = n // rows
    return g if torch.equal(row, torch.arange(rows, device=row.device).repeat_interleave(g)) else None


def shared_scores(metric: BilinearMetric, query: Tensor, keys: Tensor, row: Optional[Tensor]) -> Tensor:
    """c_tᵀ M c'_τ (Eq. 4.6) of the queries (N, C) against the keys (S, M, C) of their memory rows ``row``
    (N,) → (N, M). In the beam layout (:func:`shared_group`) one batched product per sentence reads its
    keys in place; otherwise the rows are gathered first."""
    n, (s, m, c) = query.size(0), keys.shape
    g = shared_group(row, n, s)
    if g is None:
        return metric(query, keys.index_select(0, row))
    q = metric.project(query).view(s, g, c)
    return torch.bmm(q, keys.transpose(1, 2)).reshape(n, m)


def shared_read(weights: Tensor, values: Tensor, row: Optional[Tensor]) -> Tensor:
    """Σ_τ q_{t,τ} z'_τ (Eq. 4.3) of the weights (N, M) over the values (S, M, H) of their memory rows ``row``
    (N,) → (N, H), batched per sentence in the beam layout like :func:`shared_scores`."""
    n, (s, m, h) = weights.size(0), values.shape
    g = shared_group(row, n, s)
    if g is None:
        return torch.bmm(weights.unsqueeze(1), values.index_select(0, row)).squeeze(1)
    return torch.bmm(weights.view(s, g, m), values).reshape(n, h)


def reorder_shared(row: Optional[Tensor], tables: Dict[str, Tensor], new_order: Tensor):
    """Beam reordering of a shared memory: only the (N,) row index moves (``row`` None: the identity over
    the tables' rows); the tables (S, ...) are left in place, except that rows no hypothesis reads any more
    (finished sentences) are dropped. Returns (new row index, tables)."""
    s = next(iter(tables.values())).size(0)
    if row is None:
        row = torch.arange(s, device=new_order.device)
    row = row.index_select(0, new_order)
    used = torch.unique(row)  # sorted
    if used.numel() < s:
        remap = torch.full((s,), -1, dtype=torch.long, device=row.device)
        remap[used] = torch.arange(used.numel(), device=row.device)
        row = remap[row]
        tables = {k: t.index_select(0, used) for k, t in tables.items()}
    return row, tables


def memory_log_attention(scores: Tensor, padding_mask: Tensor, coverage: Optional[Tensor] = None,
                         coverage_weight: Optional[Tensor] = None) -> Tensor:
    """log q (B, M) = log softmax over the real slots of ``scores − λ β`` (Eq. 4.6), in float32; −∞ at
    padding slots (``padding_mask`` True) and on every slot of a row without a real one."""
    scores = scores.float()
    if coverage is not None and coverage_weight is not None:
        scores = scores - coverage_weight.float() * coverage.float()
    empty = padding_mask.all(dim=1, keepdim=True)
    scores = scores.masked_fill(padding_mask & ~empty, float("-inf")).masked_fill(empty, 0.0)
    return torch.log_softmax(scores, dim=-1).masked_fill(padding_mask, float("-inf"))


class TMGate(nn.Module):
    """The gate logit of ζ_t = σ(f_gate(c_t, z_t, z̃_t)) (Eq. 4.5): wᵀ tanh(W x + b) + b' (``hidden`` > 0)
    or wᵀ x + b (``hidden`` = 0), x = [c_t; z_t; z̃_t]."""

    def __init__(self, input_dim: int, hidden: int):
        super().__init__()
        if hidden < 0:
            raise UserDataError(f"--gate-hidden-size must be >= 0, got {hidden}")
        self.hidden = nn.Linear(input_dim, hidden) if hidden > 0 else None
        self.out = nn.Linear(hidden if hidden > 0 else input_dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, I) → the logit (B,)."""
        if self.hidden is not None:
            x = torch.tanh(self.hidden(x))
        return self.out(x).squeeze(-1)


def gate_log_probs(logit: Tensor, empty: Tensor):
    """(log ζ, log(1 − ζ)) (B,) from the gate logit, float32; an example without memory (``empty``) gets
    ζ = 0 exactly (log ζ = −∞, log(1 − ζ) = 0), without a gradient into the gate."""
    logit = logit.float()
    log_zeta = F.logsigmoid(logit).masked_fill(empty, float("-inf"))
    log_rest = F.logsigmoid(-logit).masked_fill(empty, 0.0)
    return log_zeta, log_rest


def copy_probs(q: Tensor, slot_tokens: Tensor, vocab_size: int) -> Tensor:
    """p_copy(w) = Σ_{τ: y'_τ = w} q_τ (Eq. 4.3 on the vocabulary): q (B, [T,] M), slot tokens (B, M)
    → (B, [T,] V)."""
    ids = slot_tokens if q.dim() == 2 else slot_tokens.unsqueeze(1).expand_as(q)
    return q.new_zeros(*q.shape[:-1], vocab_size).scatter_add(-1, ids, q)


def slot_first(slot_tokens: Tensor) -> Tensor:
    """(B, M) → (B, M): for every slot, the first slot of its row holding the same token (itself when it is
    the first) — the distinct words of the memory, found once per sentence for :func:`shallow_fusion`."""
    M = slot_tokens.size(-1)
    same = slot_tokens.unsqueeze(-1) == slot_tokens.unsqueeze(-2)  # (B, M, M)
    slots = torch.arange(M, device=slot_tokens.device)
    return torch.where(same, slots, M).amin(-1) if M else slot_tokens.clone()


def shallow_fusion(nmt_lprobs: Tensor, log_q: Tensor, log_zeta: Tensor, log_rest: Tensor,
                   slot_tokens: Tensor, first: Optional[Tensor] = None) -> Tensor:
    """log p(y_t) = log(ζ_t p_copy(y_t) + (1 − ζ_t) p_NMT(y_t)) (Eq. 4.5).

    ``nmt_lprobs`` (B, T, V) = log p_NMT, ``log_q`` (B, T, M), ``log_zeta`` / ``log_rest`` (B, T) = log ζ,
    log(1 − ζ), ``slot_tokens`` (B, M) the y'_τ of the slots (any id < V at padding slots, whose log q
    is −∞); ``first`` (B, M) = :func:`slot_first` of ``slot_tokens`` (computed here when not given).

    A word that no slot holds gets log(1 − ζ) + log p_NMT bit for bit; only the words of the slots are
    mixed, each as the log-space sum of its NMT term and its slots' copy terms with a per-word shift (the
    arithmetic of :func:`~fairseq_ext.modules.copy_attention.copy_mixture` on the slots' words, not on the
    whole vocabulary)."""
    gen = nmt_lprobs + log_rest.unsqueeze(-1)
    copy = log_q + log_zeta.unsqueeze(-1)
    if first is None:
        first = slot_first(slot_tokens)
    ids, first = slot_tokens.unsqueeze(-2).expand_as(copy), first.unsqueeze(-2).expand_as(copy)
    at = gen.gather(-1, ids)  # each slot's word's NMT term; the word is summed at its first slot
    with torch.no_grad():  # the largest term of each word (its shift); 0 where a word has none
        shift = at.detach().scatter_reduce(-1, first, copy.detach(), reduce="amax", include_self=True)
        shift = shift.masked_fill(~torch.isfinite(shift), 0.0)
    mass = torch.exp(at - shift).scatter_add(-1, first, torch.exp(copy - shift.gather(-1, first)))
    positive = mass > 0  # >= 1 wherever some term is finite (its largest is exp(0))
    mixed = (torch.where(positive, mass, torch.ones_like(mass)).log() + shift).masked_fill(~positive, float("-inf"))
    mixed = mixed.gather(-1, first)
    # a word held by several slots is written once from each; the gradient flows through its first slot only
    if not (torch.is_grad_enabled() and (gen.requires_grad or mixed.requires_grad)):
        return gen.scatter_(-1, ids, mixed)  # decoding: in place (gen is this function's own tensor)
    own = first == torch.arange(first.size(-1), device=first.device)
    return gen.scatter(-1, ids, torch.where(own, mixed, mixed.detach()))


def gather_slots(rows: Dict[str, Tensor], slot_mask: Tensor, tm_index: Tensor) -> Dict[str, Tensor]:
    """The memory of every example from the per-pair slots.

    ``rows``: per retrieved pair r, per position τ, e.g. ``keys`` (R, L, C), ``values`` (R, L, H),
    ``tokens`` (R, L); ``slot_mask`` (R, L) True at real slots; ``tm_index`` (B, K) the pairs of each
    example (rows of R, −1 = none). Returns each entry of ``rows`` as (B, M, ...) with the real slots of
    pair k = 0, 1, ... in order, then padding (zeros), plus ``padding_mask`` (B, M), ``pair`` (B, M) (k,
    −1 at padding) and ``position`` (B, M) (τ, −1 at padding). M = the largest number of real slots."""
    B, K = tm_index.shape
    R, L = slot_mask.shape
    device = slot_mask.device
    valid = tm_index.ge(0)
    sel = tm_index.clamp(min=0)
    if R == 0:
        valid = torch.zeros_like(valid)
        sel = torch.zeros_like(sel)
        L = 0
    real = (slot_mask[sel] if R > 0 else slot_mask.new_zeros(B, K, 0)) & valid.unsqueeze(-1)  # (B, K, L)
    real = real.reshape(B, K * L)
    M = int(real.sum(1).max()) if real.numel() else 0
    order = front_order(~real)[:, :M]  # the real (k, τ) of each example first, in order
    pad = ~real.gather(1, order)
    k = torch.div(order, max(L, 1), rounding_mode="floor")
    tau = order - k * L
    flat = sel.gather(1, k) * L + tau  # (B, M) into R * L
    out = {}
    for name, t in rows.items():
        table = t.reshape(R * L, *t.shape[2:])
        if R == 0:
            picked = t.new_zeros(B, M, *t.shape[2:])
        else:
            picked = table[flat.reshape(-1)].reshape(B, M, *t.shape[2:])
        mask = pad.reshape(B, M, *([1] * (t.dim() - 2)))
        out[name] = picked.masked_fill(mask, 0)
    out["padding_mask"] = pad
    out["pair"] = k.masked_fill(pad, -1)
    out["position"] = tau.masked_fill(pad, -1)
    if M == 0:  # keep shapes (B, 0) on the right device
        out["padding_mask"] = torch.zeros(B, 0, dtype=torch.bool, device=device)
    return out

"""The math of CopyNet (Gu, Lu, Li, Li, ACL 2016; Gu 2019 §3.2, Eqs. 3.1–3.6), shared by the ``copynet``
model and the ``copy_translation`` task (which must agree on the extended vocabulary).

The extended vocabulary of one sentence (§3.2.1, V ∪ {UNK} ∪ V_X): the V target-dictionary ids, then
``num_slots`` per-sentence *copy slots* V, V+1, ...: the k-th distinct source token that has no target id
(a source OOV, or a source-vocabulary word missing from the target vocabulary) owns id V + k, in order of
first occurrence (:func:`source_copy_ids`); an OOV beyond the last slot is ⟨unk⟩. Source tokens are told
apart by their id, so a source OOV must reach the model with an id of its own, ≥ |source dictionary| (the
task gives each distinct OOV string one; the encoder reads every such id as ⟨unk⟩).

* :func:`source_copy_ids` — the extended target id of every source position, and which positions may be
  copied (not ⟨pad⟩, not ⟨/s⟩).
* :class:`CopyScorer` — ψ_c(x_j) = tanh(h_j^T W_c) · z_t (Eq. 3.5; tanh "worked better than linear").
* :func:`copy_mixture` — p(y) = p(y, g) + p(y, c) (Eqs. 3.1–3.3) from the log-probabilities of both modes
  under one normaliser Z: the generate part over V (0 for the copy slots: ψ_g = −∞ there) plus the copy
  probabilities of all positions holding y, scatter-added; exact in log space (no exp/log round trip for
  words that are not in the source, no underflow for those that are).
* :func:`selective_read` — ζ(y_{t−1}) = Σ_τ ρ_tτ h_τ with ρ ∝ the previous step's per-position copy
  probabilities of the positions holding y_{t−1}, renormalised; 0 when y_{t−1} is not in the source (Eq. 3.6).
* :func:`source_to_target_map` — the target id of every source-dictionary id (−1: none).
"""
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def source_to_target_map(src_dict, tgt_dict) -> Tensor:
    """(|src_dict|,) long: the target id of each source symbol, −1 where the target dictionary lacks it; the
    special symbols map onto their target counterparts (⟨unk⟩ → ⟨unk⟩)."""
    table = torch.full((len(src_dict),), -1, dtype=torch.long)
    unk = tgt_dict.unk()
    for i, word in enumerate(src_dict.symbols[: len(src_dict)]):
        j = tgt_dict.index(word)
        if j != unk:
            table[i] = j
    for name in ("pad", "eos", "unk", "bos"):
        table[getattr(src_dict, name)()] = getattr(tgt_dict, name)()
    return table


def source_copy_ids(src_tokens: Tensor, src_to_tgt: Tensor, num_slots: int, tgt_vocab_size: int,
                    src_pad: int, src_eos: int, tgt_pad: int, tgt_unk: int) -> Tuple[Tensor, Tensor]:
    """Extended target ids of the source positions (module doc).

    ``src_tokens`` (B, S): source ids; an id ≥ len(src_to_tgt) is a source OOV (distinct ids = distinct
    words). Returns ``copy_ids`` (B, S) — the target id of a source word the target dictionary has, else
    V + k for the k-th distinct such token of the row (k < ``num_slots``; beyond: ⟨unk⟩), ⟨pad⟩ at pads —
    and ``copy_mask`` (B, S), True where the position can be copied (not ⟨pad⟩, not ⟨/s⟩)."""
    n_src = src_to_tgt.numel()
    in_vocab = src_tokens.lt(n_src) & src_tokens.ge(0)
    mapped = torch.where(in_vocab, src_to_tgt[src_tokens.clamp(0, n_src - 1)], torch.full_like(src_tokens, -1))
    pad = src_tokens.eq(src_pad)
    need = mapped.lt(0) & ~pad  # tokens without a target id: they get copy slots
    ids = mapped.masked_fill(pad, tgt_pad)
    if bool(need.any()):
        same = src_tokens.unsqueeze(2).eq(src_tokens.unsqueeze(1)) & need.unsqueeze(1)  # (B, S, S): [p, q]
        S = src_tokens.size(1)
        # first position q holding the same token (argmax of the first True; need[p] makes [p, p] True)
        first = torch.where(same, torch.arange(S, device=src_tokens.device), S).min(dim=2).values
        is_first = need & first.eq(torch.arange(S, device=src_tokens.device))
        rank = is_first.long().cumsum(1) - 1
        slot = rank.gather(1, first.clamp(max=S - 1))
        ext = torch.where(slot < num_slots, tgt_vocab_size + slot, torch.full_like(slot, tgt_unk))
        ids = torch.where(need, ext, ids)
    mask = ~pad & src_tokens.ne(src_eos)
    return ids, mask


class CopyScorer(nn.Module):
    """ψ_c(x_j) = tanh(h_j^T W_c) · z_t (Eq. 3.5), W_c ∈ R^{C×H} (no bias): ``keys(h)`` once per sentence,
    then ``forward(keys, z_t, mask)`` per step (−∞ where the position cannot be copied)."""

    def __init__(self, key_dim: int, query_dim: int):
        super().__init__()
        self.proj = nn.Linear(key_dim, query_dim, bias=False)
        nn.init.uniform_(self.proj.weight, -0.1, 0.1)

    def keys(self, states: Tensor) -> Tensor:
        """(B, S, C) encoder states h_j → (B, S, H) tanh(h_j^T W_c)."""
        return torch.tanh(self.proj(states))

    def forward(self, keys: Tensor, query: Tensor, mask: Tensor) -> Tensor:
        """keys (B, S, H), query z_t (B, H), mask (B, S) → scores (B, S) (float, −∞ at masked positions)."""
        scores = torch.bmm(keys, query.unsqueeze(2)).squeeze(2)
        return scores.float().masked_fill(~mask, float("-inf"))


def copy_mixture(gen_lprobs: Tensor, copy_lprobs: Tensor, copy_ids: Tensor, num_slots: int) -> Tensor:
    """log p(y) over the V + ``num_slots`` extended ids (Eqs. 3.1–3.3).

    ``gen_lprobs`` (B, T, V) = log p(y, g) and ``copy_lprobs`` (B, T, S) = log p(x_j, c), normalised
    together (one Z); ``copy_ids`` (B, S) the extended id of each position (:func:`source_copy_ids`).
    Equals log(p_g padded with 0 + scatter_add of p_c), computed as logsumexp-by-id with a per-id shift."""
    B, T, V = gen_lprobs.shape
    ids = copy_ids.unsqueeze(1).expand(B, T, copy_ids.size(1))
    gen = F.pad(gen_lprobs, (0, num_slots), value=float("-inf"))
    with torch.no_grad():  # the largest contribution to each id (its shift); 0 where an id has none
        shift = gen.detach().scatter_reduce(-1, ids, copy_lprobs.detach(), reduce="amax", include_self=True)
        shift = shift.masked_fill(~torch.isfinite(shift), 0.0)
    mass = torch.exp(gen - shift).scatter_add(-1, ids, torch.exp(copy_lprobs - shift.gather(-1, ids)))
    # mass >= 1 wherever some mode gives the id probability (its largest term is exp(0)); 0 elsewhere
    positive = mass > 0
    out = torch.where(positive, mass, torch.ones_like(mass)).log() + shift
    return out.masked_fill(~positive, float("-inf"))


def selective_read(prev_copy_probs: Tensor, copy_ids: Tensor, copy_mask: Tensor, prev_tokens: Tensor,
                   states: Tensor) -> Tensor:
    """ζ(y_{t−1}) (B, C) of Eq. 3.6 from the previous step's per-position copy probabilities (B, S), the
    positions' extended ids and mask (B, S), y_{t−1} (B,) and the encoder states h (B, S, C)."""
    hit = copy_ids.eq(prev_tokens.unsqueeze(1)) & copy_mask
    weights = prev_copy_probs * hit.type_as(prev_copy_probs)
    total = weights.sum(1, keepdim=True)  # K
    rho = weights / torch.where(total > 0, total, torch.ones_like(total))
    return torch.bmm(rho.unsqueeze(1).type_as(states), states).squeeze(1)

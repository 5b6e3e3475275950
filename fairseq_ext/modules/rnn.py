"""Recurrent building blocks of the attention-based encoder–decoder ("RNNsearch").

* :class:`BiRNNEncoderStack` — the (bi)directional GRU/LSTM encoder of Eq. 2.6 that accepts fairseq's
  left-padded sources (any padding layout, in fact): the real tokens of each row are moved to the
  front, run through a packed ``nn.GRU``/``nn.LSTM`` and moved back, so padding never enters a state
  and the outputs stay aligned with ``src_tokens`` (attention weights index source positions).
* :class:`BahdanauAttention` — the MLP attention of Eq. 2.7, e_{tτ} = vᵀ tanh(W z + U h_τ), with the
  key projection U h computed once per sentence.
* :class:`AttentionalTransition` — the first decoder layer's transition (Eq. 2.5) in two variants:
  ``plain`` (Bahdanau et al.): c_t = ATT(z_{t−1}, h), z_t = RNN([ε_I[y_{t−1}]; c_t], z_{t−1});
  ``conditional`` (the dl4mt conditional GRU): z' = RNN₁(ε_I[y_{t−1}], z_{t−1}), c_t = ATT(z', h),
  z_t = RNN₂(c_t, z'); without attention the context is a fixed vector (the Enc-Dec baseline).

References: Bahdanau, Cho, Bengio, "Neural Machine Translation by Jointly Learning to Align and
Translate", ICLR 2015; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong
Kong, 2019 (§2.1, Eqs. 2.5–2.7).
"""
from typing import Callable, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

RNN_TYPES = ("gru", "lstm")
DECODER_VARIANTS = ("plain", "conditional")


def make_cell(rnn_type: str, input_size: int, hidden_size: int) -> nn.RNNCellBase:
    if rnn_type not in RNN_TYPES:
        raise ValueError(f"unknown rnn type {rnn_type!r}; expected one of {RNN_TYPES}")
    return (nn.GRUCell if rnn_type == "gru" else nn.LSTMCell)(input_size, hidden_size)


def run_cell(cell: nn.RNNCellBase, x: Tensor, h: Tensor, c: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
    """One transition of a GRU (``c`` None) or LSTM cell: returns the new (hidden, memory cell)."""
    if isinstance(cell, nn.LSTMCell):
        return cell(x, (h, c))
    return cell(x, h), None


def front_order(padding_mask: Tensor) -> Tensor:
    """(B, S) the positions of each row's real tokens in order, then its pads (a permutation per row)."""
    return torch.sort(padding_mask.to(torch.uint8), dim=1, stable=True).indices


class BiRNNEncoderStack(nn.Module):
    """``num_layers`` (bi)directional GRU/LSTM layers over embedded tokens (Eq. 2.6); h_τ = [→h_τ; ←h_τ].

    ``forward(x, padding_mask)`` takes x (B, S, E) and a (B, S) bool mask of pads anywhere in the row
    and returns the states (B, S, C) (zero at pads; C = directions × hidden) and the final states
    (B, C) of the top layer, [→h_{T'}; ←h_1]."""

    def __init__(self, rnn_type: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bidirectional: bool = True, dropout: float = 0.0):
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ValueError(f"unknown rnn type {rnn_type!r}; expected one of {RNN_TYPES}")
        self.directions = 2 if bidirectional else 1
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.output_dim = self.directions * hidden_size
        self.rnn = (nn.GRU if rnn_type == "gru" else nn.LSTM)(
            input_size, hidden_size, num_layers=num_layers, bidirectional=bidirectional, batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0)

    def forward(self, x: Tensor, padding_mask: Tensor) -> Tuple[Tensor, Tensor]:
        B, S, _ = x.shape
        lengths = (~padding_mask).sum(1)
        order = front_order(padding_mask)
        x = x.gather(1, order.unsqueeze(-1).expand_as(x))  # right-padded
        packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)
        if isinstance(h_n, tuple):  # LSTM: (h, c)
            h_n = h_n[0]
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=S)
        out = out.gather(1, order.argsort(1).unsqueeze(-1).expand(-1, -1, self.output_dim))
        out = out.masked_fill(padding_mask.unsqueeze(-1), 0.0)
        final = h_n.view(self.num_layers, self.directions, B, self.hidden_size)[-1]  # (dirs, B, H)
        return out, final.transpose(0, 1).reshape(B, self.output_dim)


class BahdanauAttention(nn.Module):
    """α_{tτ} = softmax_τ(vᵀ tanh(W z + U h_τ + b)), c_t = Σ_τ α_{tτ} h_τ (Eq. 2.7, MLP f^ATT).

    Parameters: W (query_dim × attn_dim, no bias), U (key_dim × attn_dim) + b, v (attn_dim)."""

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, attn_dim)
        self.score = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """U h_τ + b for every source position (B, S, attn_dim): once per sentence."""
        return self.key_proj(keys)

    def forward(self, query: Tensor, proj_keys: Tensor, values: Tensor, padding_mask: Tensor
                ) -> Tuple[Tensor, Tensor]:
        """query (B, Hq), proj_keys (B, S, A), values (B, S, C), padding_mask (B, S) →
        context (B, C), weights (B, S)."""
        scores = self.score(torch.tanh(proj_keys + self.query_proj(query).unsqueeze(1))).squeeze(-1)
        scores = scores.float().masked_fill(padding_mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).type_as(values)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1), weights


class AttentionalTransition(nn.Module):
    """The first decoder layer: one step of Eq. 2.5 with its context c_t (Eq. 2.7).

    * ``plain``: c_t = ATT(z_{t−1}, h); z_t = RNN([x_t; c_t], z_{t−1})  (Bahdanau et al.);
    * ``conditional`` (dl4mt ``gru_cond``): z' = RNN₁(x_t, z_{t−1}); c_t = ATT(z', h); z_t = RNN₂(c_t, z');
    * ``attention=None``: c_t = the fixed ``context`` given to :meth:`forward` (the Enc-Dec baseline).

    x_t is the decoder input at step t (the embedding ε_I[y_{t−1}], or a subclass's richer input)."""

    def __init__(self, rnn_type: str, variant: str, input_size: int, context_size: int, hidden_size: int,
                 attention: Optional[BahdanauAttention]):
        super().__init__()
        if variant not in DECODER_VARIANTS:
            raise ValueError(f"unknown decoder variant {variant!r}; expected one of {DECODER_VARIANTS}")
        self.variant = variant
        self.attention = attention
        if variant == "plain":
            self.cell = make_cell(rnn_type, input_size + context_size, hidden_size)
        else:
            self.cell = make_cell(rnn_type, input_size, hidden_size)
            self.cell_context = make_cell(rnn_type, context_size, hidden_size)

    def attend(self, query: Tensor, memory: dict, context: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
        if self.attention is None:
            return context, None
        return self.attention(query, memory["proj_keys"], memory["values"], memory["padding_mask"])

    def forward(self, x: Tensor, h: Tensor, c: Optional[Tensor], memory: dict, context: Optional[Tensor] = None,
                action: Optional[Callable[[Tensor, Tensor], Tensor]] = None
                ) -> Tuple[Tensor, Optional[Tensor], Tensor, Optional[Tensor]]:
        """x (B, I), h / c (B, H) the previous state, memory = {proj_keys, values, padding_mask} →
        (h_t, c_t (LSTM memory cell or None), context (B, C), attention weights (B, S) or None).

        ``action`` ``(h, ctx) -> h'``: once c_t is known from the unperturbed state, the step continues from h'
        with that same c_t (``conditional`` re-runs RNN₁ from h'): the trainable-greedy actor's site."""
        if self.variant == "plain":
            ctx, weights = self.attend(h, memory, context)
            if action is not None:
                h = action(h, ctx)
            h, c = run_cell(self.cell, torch.cat([x, ctx], dim=-1), h, c)
        else:
            h1, c1 = run_cell(self.cell, x, h, c)
            ctx, weights = self.attend(h1, memory, context)
            if action is not None:
                h1, c1 = run_cell(self.cell, x, action(h, ctx), c)
            h, c = run_cell(self.cell_context, ctx, h1, c1)
        return h, c, ctx, weights

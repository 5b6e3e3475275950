"""Building blocks of Ampomah's Joint Attention Strategies (thesis ch. 3).

* :class:`WeightedSum` — the WS unit (Eq. 3.1): ``WS(r) = sum_i W^i r^i`` with bias-free
  ``W^i in R^{d x d}``.
* :class:`AggregationUnit` — the AGG unit (Eq. 3.3): ``LayerNorm(FFN([r^1; ...; r^b]) + sum_i r^i)``.
* :class:`LayerAggregation` — the Merging Module of the four Layer Aggregation strategies over the
  exposed encoder layers ``F^s = [f^1 .. f^n]`` (``f^1`` lowest, ``f^n = H_e^L``):
  S-Agg (Eq. 3.1), Iter-S-Agg (Eq. 3.2), C-Agg (Eq. 3.4) and Iter-C-Agg (Eq. 3.5).
* :class:`MultiLayerMultiheadAttention` — MLMHA (Eqs. 3.6-3.11), which replaces the
  encoder-decoder attention of a decoder layer, with the switches U0 (joint vs
  representation-specific attention weights) and U1 (context concatenation vs summation).

Parameter counts (our reconstruction of the thesis's): one WS/AGG
(or a chain of ``n-1`` two-input units) shared by all decoder layers; MLMHA has one Q/K/V
projection per exposed layer and a single ``W_o in R^{d_c x d}`` per decoder layer.
"""
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq import utils
from fairseq.incremental_decoding_utils import with_incremental_state

from fairseq_ext.modules.incremental_buffer import IncrementalBufferMixin
from fairseq.modules import FairseqDropout, LayerNorm

STRATEGIES = ("sagg", "iter_sagg", "cagg", "iter_cagg")


def _xavier_blocks_(weight: Tensor, dim: int, axis: int, gain: float = 1.0) -> None:
    """Xavier-uniform init of each ``dim``-wide block (along ``axis``) of a fused weight, i.e.
    exactly as if the matrices of the equations were separate ``Linear(d, d)`` layers."""
    with torch.no_grad():
        for start in range(0, weight.size(axis), dim):
            nn.init.xavier_uniform_(weight.narrow(axis, start, dim), gain=gain)


class WeightedSum(nn.Module):
    """WS unit, Eq. 3.1: ``WS(r) = sum_{i=1}^{b} W^i r^i`` (per token; no bias, no norm).

    The ``b`` matrices are stored as one bias-free ``Linear(b*d, d)`` (``[r^1 .. r^b] [W^1; ..;
    W^b]`` is the same sum, computed with one GEMM); each ``d x d`` block is Xavier-initialised.
    """

    def __init__(self, num_inputs: int, embed_dim: int, layernorm: bool = False):
        super().__init__()
        self.num_inputs = num_inputs
        self.proj = nn.Linear(num_inputs * embed_dim, embed_dim, bias=False)
        _xavier_blocks_(self.proj.weight, embed_dim, axis=1)
        # optional (default off): the thesis has no normalisation after the sum
        self.layer_norm = LayerNorm(embed_dim) if layernorm else None

    def forward(self, inputs: List[Tensor]) -> Tensor:
        assert len(inputs) == self.num_inputs
        x = self.proj(torch.cat(inputs, dim=-1))
        return self.layer_norm(x) if self.layer_norm is not None else x


class AggregationUnit(nn.Module):
    """AGG unit, Eq. 3.3: ``AGG(r) = LayerNorm(r_c + sum_i r^i)``, ``r_c = FFN([r^1; ..; r^b])``.

    The FFN is ``Linear(b*d, F) -> ReLU -> Linear(F, d)`` (the parameter counts give ``F = d_ff``);
    dropout is applied to ``r_c`` before the residual sum, as in a Transformer sublayer.
    """

    def __init__(self, num_inputs: int, embed_dim: int, ffn_dim: int, dropout: float = 0.0,
                 activation_dropout: float = 0.0):
        super().__init__()
        self.num_inputs = num_inputs
        self.fc1 = nn.Linear(num_inputs * embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(activation_dropout,
                                                        module_name=self.__class__.__name__)
        self.layer_norm = LayerNorm(embed_dim)

    def forward(self, inputs: List[Tensor]) -> Tensor:
        assert len(inputs) == self.num_inputs
        r_c = self.fc2(self.activation_dropout_module(F.relu(self.fc1(torch.cat(inputs, dim=-1)))))
        residual = inputs[0]
        for r in inputs[1:]:
            residual = residual + r
        return self.layer_norm(self.dropout_module(r_c) + residual)


class LayerAggregation(nn.Module):
    """Merging Module of the Layer Aggregation JASs (Sec. 3.2.1): ``F^s -> H^a`` (one per sentence).

    * ``sagg``      (S-Agg, Eq. 3.1):       ``H^a = WS([f^1 .. f^n])``
    * ``iter_sagg`` (Iter-S-Agg, Eq. 3.2):  ``H^a_1 = f^1``, ``H^a_i = WS_i([f^i, H^a_{i-1}])``
    * ``cagg``      (C-Agg, Eq. 3.4):       ``H^a = AGG([f^1 .. f^n])``
    * ``iter_cagg`` (Iter-C-Agg, Eq. 3.5):  ``H^a_1 = f^1``, ``H^a_i = AGG_i([f^i, H^a_{i-1}])``

    With ``n = 1`` the module is the identity and has no parameters (n = 1 is the baseline).
    """

    def __init__(self, strategy: str, num_layers: int, embed_dim: int, ffn_dim: int,
                 dropout: float = 0.0, activation_dropout: float = 0.0, sum_layernorm: bool = False):
        super().__init__()
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown layer aggregation {strategy!r}; expected one of {STRATEGIES}")
        self.strategy = strategy
        self.num_layers = n = num_layers
        self.iterative = strategy.startswith("iter_")
        units = (n - 1) if self.iterative else (1 if n > 1 else 0)
        width = 2 if self.iterative else n

        def unit():
            if strategy.endswith("sagg"):
                return WeightedSum(width, embed_dim, layernorm=sum_layernorm)
            return AggregationUnit(width, embed_dim, ffn_dim, dropout, activation_dropout)

        self.units = nn.ModuleList([unit() for _ in range(units)])

    def forward(self, features: List[Tensor]) -> Tensor:
        assert len(features) == self.num_layers, (len(features), self.num_layers)
        if len(self.units) == 0:
            return features[-1]
        if not self.iterative:
            return self.units[0](features)
        h = features[0]
        for i, unit in enumerate(self.units):
            h = unit([features[i + 1], h])
        return h


@with_incremental_state
class MultiLayerMultiheadAttention(IncrementalBufferMixin, nn.Module):
    """Multi-Layer Multi-Head Attention (MLMHA), Eqs. 3.7-3.11.

    Query ``Q = S_d^l`` (``Z x B x d``); keys/values are the ``n`` exposed encoder layers, passed
    as one tensor ``cat([f^1 .. f^n], dim=0)`` of shape ``(n*J) x B x d`` (this keeps the call
    signature of fairseq's :class:`~fairseq.modules.MultiheadAttention`, so the decoder layer of
    fairseq is reused unchanged).

    * Attention Aggregation Unit (Eq. 3.7): ``alpha^i_h = (Q W^{q,i}_h)(f^i W^{k,i}_h)^T / sqrt(d_k)``
      (pre-softmax logits, one Q/K/V projection per exposed layer ``i``).
    * Context Generator: ``U0 = 1`` (Eq. 3.8) ``c^i_h = softmax(alpha^i_h) f^i W^{v,i}_h``;
      ``U0 = 0`` (Eq. 3.9) ``c^i_h = softmax(sum_i alpha^i)_h f^i W^{v,i}_h``.
    * Output (Eqs. 3.10-3.11): ``O_c = C W_o`` with ``C = [c^1; ..; c^n]`` (``U1 = 0``,
      ``W_o in R^{nd x d}``) or ``C = sum_i c^i`` (``U1 = 1``, ``W_o in R^{d x d}``).

    The key-padding mask (shared by every ``f^i``) is applied to the logits before the sum/softmax.
    In incremental decoding the projected keys/values of every ``f^i`` are cached (static).
    With ``n = 1`` this computes exactly fairseq's encoder-decoder attention.
    """

    buffer_key = "attn_state"

    def __init__(self, embed_dim: int, num_heads: int, num_layers: int, u0: int, u1: int,
                 kdim: Optional[int] = None, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim or embed_dim
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.head_dim = embed_dim // num_heads
        assert self.head_dim * num_heads == embed_dim, "embed_dim must be divisible by num_heads"
        self.scaling = self.head_dim ** -0.5
        self.u0, self.u1 = int(u0), int(u1)
        assert self.u0 in (0, 1) and self.u1 in (0, 1)
        self.encoder_decoder_attention = True
        n, d = num_layers, embed_dim
        # per-layer projections, fused: q -> n*d outputs; k/v: (n, d, kdim) applied per f^i
        self.q_proj = nn.Linear(d, n * d, bias=bias)
        self.k_weight = nn.Parameter(torch.empty(n, d, self.kdim))
        self.v_weight = nn.Parameter(torch.empty(n, d, self.kdim))
        self.k_bias = nn.Parameter(torch.zeros(n, d)) if bias else None
        self.v_bias = nn.Parameter(torch.zeros(n, d)) if bias else None
        self.out_proj = nn.Linear((n if self.u1 == 0 else 1) * d, d, bias=bias)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.export_attn = False  # analysis hook: keep the full per-layer attention in last_attn
        self.last_attn: Optional[Tensor] = None
        self.reset_parameters()

    def reset_parameters(self):
        # as fairseq's MultiheadAttention: xavier(gain 1/sqrt 2) for q/k/v, xavier for W_o
        g = 1 / math.sqrt(2)
        _xavier_blocks_(self.q_proj.weight, self.embed_dim, axis=0, gain=g)
        with torch.no_grad():
            for w in (self.k_weight, self.v_weight):
                for i in range(self.num_layers):
                    nn.init.xavier_uniform_(w[i], gain=g)
        nn.init.xavier_uniform_(self.out_proj.weight)
        for b in (self.q_proj.bias, self.k_bias, self.v_bias, self.out_proj.bias):
            if b is not None:
                nn.init.zeros_(b)

    def _project_kv(self, features: Tensor) -> Tuple[Tensor, Tensor]:
        """``(n*J) x B x kdim`` -> keys, values ``B x n x H x J x d_k``."""
        n = self.num_layers
        total, bsz, _ = features.shape
        assert total % n == 0, f"features of length {total} do not split into {n} layers"
        f = features.view(n, total // n, bsz, self.kdim)
        out = []
        for w, b in ((self.k_weight, self.k_bias), (self.v_weight, self.v_bias)):
            x = torch.einsum("njbc,noc->njbo", f, w)
            if b is not None:
                x = x + b[:, None, None, :]
            # n J B (H dk) -> B n H J dk
            out.append(x.view(n, total // n, bsz, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4))
        return out[0], out[1]

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = True,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, _ = query.shape
        n, H, dk = self.num_layers, self.num_heads, self.head_dim

        saved = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        if "prev_key" in saved and static_kv:
            k, v = saved["prev_key"], saved["prev_value"]
        else:
            assert key is not None, "MLMHA needs the exposed encoder layers as key"
            k, v = self._project_kv(key)
            if incremental_state is not None:
                self._set_input_buffer(incremental_state, {"prev_key": k, "prev_value": v})

        # Eq. 3.7: per-layer queries, B n H Z dk
        q = (self.q_proj(query) * self.scaling).view(tgt_len, bsz, n, H, dk).permute(1, 2, 3, 0, 4)
        logits = torch.matmul(q, k.transpose(-1, -2))  # B n H Z J
        if key_padding_mask is not None:
            logits = logits.masked_fill(key_padding_mask.to(torch.bool)[:, None, None, None, :],
                                        float("-inf"))
        if attn_mask is not None:
            logits = logits + attn_mask
        if self.u0 == 0:  # Eq. 3.9: joint attention weights softmax(sum_i alpha^i)
            probs = utils.softmax(logits.sum(dim=1), dim=-1).type_as(logits)  # B H Z J
            p = self.dropout_module(probs)
            if self.u1 == 1:  # spec (f): sum_i alpha_hat v_i = alpha_hat (sum_i v_i)
                ctx = torch.matmul(p, v.sum(dim=1)).unsqueeze(1)  # B 1 H Z dk
            else:
                ctx = torch.matmul(p.unsqueeze(1), v)  # B n H Z dk
        else:  # Eq. 3.8: representation-specific weights softmax(alpha^i)
            probs = utils.softmax(logits, dim=-1).type_as(logits)  # B n H Z J
            ctx = torch.matmul(self.dropout_module(probs), v)  # B n H Z dk
            if self.u1 == 1:
                ctx = ctx.sum(dim=1, keepdim=True)
        # Eqs. 3.10-3.11: B m H Z dk -> Z B (m H dk), m = n (concat) or 1 (sum)
        m = ctx.size(1)
        ctx = ctx.permute(3, 0, 1, 2, 4).reshape(tgt_len, bsz, m * H * dk)
        out = self.out_proj(ctx)

        if self.export_attn:
            self.last_attn = probs.detach()
        attn: Optional[Tensor] = None
        if need_weights:
            a = probs if self.u0 == 0 else probs.mean(dim=1)  # B H Z J
            attn = a.transpose(0, 1) if need_head_weights else a.mean(dim=1)
        return out, attn

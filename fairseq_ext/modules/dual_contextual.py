"""Dual Contextual (DC) module — Ampomah, thesis ch. 5 / Ampomah et al., Machine Translation 2021.

The DC module replaces the self-attention sublayer of a Transformer layer (Sec. 5.3, Figs. 5.1-5.2):

* **Local Context Unit** (Eq. 5.4): ``l_c = LayerNorm(r_hat + r)``,
  ``r_hat_t = GLU([r_{t-a} .. r_{t+b}] W^r + b^r)`` — one 1-D convolution over the full ``d``
  channels with kernel ``f`` (``W^r in R^{f d x 2d}``), then a GLU.
* **Context Interaction Unit** (Eqs. 5.5-5.7): two Feature Interaction units
  ``h_l = FI(r, l_c)`` and ``h_g = FI(r, r)`` (multi-head attention, **no output projection**:
  ``FI(A, B) = [M_1; ..; M_H]``, ``M_i = ATT(A W^q_i, B W^k_i, B W^v_i)``), then the aggregation
  ``z_hat = [h_l; h_g] W_z + b_z`` (``W_z in R^{2d x d}``; the thesis' "h_o" is ``h_g``).

:class:`DualContextual` returns ``z_hat``; the host fairseq layer applies the final
``z_f = LayerNorm(dropout(z_hat) + r)`` of Eq. 5.7 with its own residual and
``self_attn_layer_norm`` — so it slots in where fairseq's :class:`MultiheadAttention` was, with the
same call signature, and the parameter count is ``(2f+4) d^2 + 7d`` more than a
self-attention block.

Decoder (``causal=True``): the convolution is causal (left pad ``f-1``) and both FI units use the
future mask (the keys of FI_l are ``l_c``).  Incremental decoding keeps the last ``f-1`` inputs
``r`` (conv buffer) and growing key/value caches of FI_l and FI_g in fairseq's incremental state,
and gives the same outputs as full-sequence decoding.  Encoder (``causal=False``): the padding of
the even-sized kernel follows ``padding`` — ``same`` (TF/T2T: left ``(f-1)//2``, rest right; window
``[t, t+1]`` for ``f = 2``), ``left`` (``[t-f+1, t]``) or ``right`` (``[t, t+f-1]``); padded
positions are zeroed before the convolution so they cannot leak into ``l_c``.
"""
import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq import utils
from fairseq.incremental_decoding_utils import with_incremental_state

from fairseq_ext.modules.incremental_buffer import IncrementalBufferMixin
from fairseq.modules import FairseqDropout, LayerNorm

PADDINGS = ("same", "left", "right")
AGG_INITS = ("xavier", "local-zero")


def conv_padding(kernel_size: int, mode: str) -> Tuple[int, int]:
    """(left, right) zero padding of the local-context convolution for ``mode``."""
    k = kernel_size - 1
    if mode == "same":
        return k // 2, k - k // 2
    if mode in ("left", "causal"):
        return k, 0
    if mode == "right":
        return 0, k
    raise ValueError(f"unknown DC conv padding {mode!r}; expected one of {PADDINGS}")


class FeatureInteraction(nn.Module):
    """FI unit (Eq. 5.6): multi-head attention of queries ``A`` over keys/values ``B`` whose output is
    the plain concatenation of the heads (no output projection unless ``out_proj``)."""

    def __init__(self, embed_dim: int, num_heads: int, attention_dropout: float = 0.0,
                 out_proj: bool = False):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        assert self.head_dim * num_heads == embed_dim, "embed_dim must be divisible by num_heads"
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim) if out_proj else None
        self.dropout_module = FairseqDropout(attention_dropout, module_name=self.__class__.__name__)
        for lin in (self.q_proj, self.k_proj, self.v_proj):  # as fairseq's MultiheadAttention
            nn.init.xavier_uniform_(lin.weight, gain=1 / math.sqrt(2))
            nn.init.zeros_(lin.bias)
        if self.out_proj is not None:
            nn.init.xavier_uniform_(self.out_proj.weight)
            nn.init.zeros_(self.out_proj.bias)

    def _heads(self, x: Tensor) -> Tensor:
        """T x B x d -> B x H x T x dk"""
        t, b, _ = x.shape
        return x.view(t, b, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def project_kv(self, b: Tensor) -> Tuple[Tensor, Tensor]:
        return self._heads(self.k_proj(b)), self._heads(self.v_proj(b))

    def forward(self, a: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor] = None,
                mask: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``a``: T x B x d queries; ``k``/``v``: B x H x S x dk; ``mask``: bool T x S (True = hide)
        or additive float.  Returns (T x B x d, probabilities B x H x T x S)."""
        t, bsz, _ = a.shape
        q = self._heads(self.q_proj(a) * self.scaling)
        logits = torch.matmul(q, k.transpose(-1, -2))  # B H T S
        if mask is not None:
            if mask.dtype == torch.bool:
                logits = logits.masked_fill(mask, float("-inf"))
            else:
                logits = logits + mask
        if key_padding_mask is not None:
            logits = logits.masked_fill(key_padding_mask.to(torch.bool)[:, None, None, :], float("-inf"))
        probs = utils.softmax(logits, dim=-1).type_as(logits)
        out = torch.matmul(self.dropout_module(probs), v)  # B H T dk
        out = out.permute(2, 0, 1, 3).reshape(t, bsz, self.embed_dim)
        if self.out_proj is not None:
            out = self.out_proj(out)
        return out, probs


@with_incremental_state
class DualContextual(IncrementalBufferMixin, nn.Module):
    """Dual Contextual module (Eqs. 5.4-5.7), a drop-in for fairseq's self-attention.

    ``forward(query, ...)`` takes ``r = query`` (``T x B x d``; ``key``/``value`` are ignored) and
    returns ``(z_hat, None)`` — the host layer adds dropout, the residual ``r`` and the LayerNorm of
    Eq. 5.7.  Set ``export_attn = True`` to keep the FI attention maps (``alpha_l``, ``alpha_g``,
    per head) in ``last_attn`` for the analyses of Sec. 5.6.2.
    """

    buffer_key = "dc_state"

    def __init__(self, embed_dim: int, num_heads: int, kernel_size: int = 2, causal: bool = False,
                 padding: str = "same", dropout: float = 0.0, attention_dropout: float = 0.0,
                 fi_out_proj: bool = False, agg_init: str = "xavier"):
        super().__init__()
        assert kernel_size >= 1
        if agg_init not in AGG_INITS:
            raise ValueError(f"unknown DC aggregation init {agg_init!r}; expected one of {AGG_INITS}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kernel_size, self.causal = kernel_size, causal
        self.padding = conv_padding(kernel_size, "causal" if causal else padding)
        # Eq. 5.4: W^r in R^{f d x 2d}, b^r; GLU; LayerNorm(r_hat + r)
        self.conv = nn.Conv1d(embed_dim, 2 * embed_dim, kernel_size)
        nn.init.xavier_uniform_(self.conv.weight)
        nn.init.zeros_(self.conv.bias)
        self.local_layer_norm = LayerNorm(embed_dim)
        # Eqs. 5.5-5.6: FI_l = FI(r, l_c), FI_g = FI(r, r)
        self.fi_l = FeatureInteraction(embed_dim, num_heads, attention_dropout, fi_out_proj)
        self.fi_g = FeatureInteraction(embed_dim, num_heads, attention_dropout, fi_out_proj)
        # Eq. 5.7: z_hat = [h_l; h_g] W_z + b_z
        self.agg = nn.Linear(2 * embed_dim, embed_dim)
        nn.init.xavier_uniform_(self.agg.weight)
        nn.init.zeros_(self.agg.bias)
        if agg_init == "local-zero":  # the h_l columns: z_hat = h_g W_z[:, d:] at the start (self-attention)
            with torch.no_grad():
                self.agg.weight[:, :embed_dim].zero_()
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.export_attn = False
        self.last_attn: Optional[Dict[str, Tensor]] = None

    # ------------------------------------------------------------------ local context (Eq. 5.4)
    def _glu_conv(self, window: Tensor) -> Tensor:
        """``window``: B x d x (T + f - 1) (already padded) -> r_hat, T x B x d."""
        return F.glu(self.conv(window), dim=1).permute(2, 0, 1)

    def local_context(self, r: Tensor, key_padding_mask: Optional[Tensor],
                      conv_state: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
        """``l_c`` for ``r`` (T x B x d).  With ``conv_state`` (B x (f-1) x d, the previous inputs;
        causal only) the window continues from it; returns (l_c, new conv_state)."""
        x = r
        if key_padding_mask is not None:
            x = x.masked_fill(key_padding_mask.to(torch.bool).t().unsqueeze(-1), 0.0)
        x = x.permute(1, 2, 0)  # B d T
        new_state = None
        if conv_state is not None:
            x = torch.cat([conv_state.transpose(1, 2), x], dim=2)
            if self.kernel_size > 1:
                new_state = x[:, :, x.size(2) - (self.kernel_size - 1):].transpose(1, 2)
        else:
            x = F.pad(x, self.padding)
        r_hat = self._glu_conv(x)
        return self.local_layer_norm(self.dropout_module(r_hat) + r), new_state

    # ------------------------------------------------------------------ DC forward
    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor] = None,
        value: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = False,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        r = query
        tgt_len, bsz, _ = r.shape
        prev_len = 0
        if incremental_state is not None:
            assert self.causal, "incremental decoding needs a causal (decoder) DC module"
            saved = self._get_input_buffer(incremental_state)
            conv_state = saved.get("conv_state")
            if conv_state is None:
                conv_state = r.new_zeros(bsz, self.kernel_size - 1, self.embed_dim)
            l_c, new_conv = self.local_context(r, key_padding_mask, conv_state)
            k_l, v_l = self.fi_l.project_kv(l_c)
            k_g, v_g = self.fi_g.project_kv(r)
            prev_kpm = saved.get("prev_key_padding_mask")
            if "k_l" in saved:
                prev_len = saved["k_l"].size(2)
                k_l = torch.cat([saved["k_l"], k_l], dim=2)
                v_l = torch.cat([saved["v_l"], v_l], dim=2)
                k_g = torch.cat([saved["k_g"], k_g], dim=2)
                v_g = torch.cat([saved["v_g"], v_g], dim=2)
            if prev_kpm is not None or key_padding_mask is not None:
                new = (key_padding_mask.to(torch.bool) if key_padding_mask is not None
                       else r.new_zeros(bsz, tgt_len, dtype=torch.bool))
                old = prev_kpm if prev_kpm is not None else r.new_zeros(bsz, prev_len, dtype=torch.bool)
                key_padding_mask = torch.cat([old, new], dim=1)
            buf: Dict[str, Optional[Tensor]] = {"k_l": k_l, "v_l": v_l, "k_g": k_g, "v_g": v_g}
            if new_conv is not None:
                buf["conv_state"] = new_conv
            if key_padding_mask is not None:
                buf["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, buf)
        else:
            l_c, _ = self.local_context(r, key_padding_mask)
            k_l, v_l = self.fi_l.project_kv(l_c)
            k_g, v_g = self.fi_g.project_kv(r)

        mask: Optional[Tensor] = None
        if self.causal:  # query t (absolute prev_len + t) sees keys <= prev_len + t
            src_len = prev_len + tgt_len
            mask = torch.ones(tgt_len, src_len, dtype=torch.bool, device=r.device).triu_(prev_len + 1)
        elif attn_mask is not None:
            mask = attn_mask
        h_l, p_l = self.fi_l(r, k_l, v_l, key_padding_mask, mask)  # Eq. 5.5
        h_g, p_g = self.fi_g(r, k_g, v_g, key_padding_mask, mask)
        if self.export_attn:
            self.last_attn = {"fi_l": p_l.detach(), "fi_g": p_g.detach()}
        return self.agg(torch.cat([h_l, h_g], dim=-1)), None  # Eq. 5.7 (before residual + LN)

    # ------------------------------------------------------------------ incremental state

"""Nguyen (2021) ch. 7: untied positional attention (cf. Ke et al., TUPE) — ``transformer_untied_pos``.

An attention logit of word plus position embeddings expands into four terms (Eqs. 7.3-7.5); ch. 7 keeps
the word-word term, drops the cross terms and gives the position-position term its own projections::

    s = e_q W_q W_kᵀ e_kᵀ  +  p_q W'_q W'_kᵀ p_kᵀ                                        (7.6)

* no positional embedding is added to the input (this removes the cross terms);
* three positional modules (encoder self, decoder self, decoder cross), each computed once per forward
  pass and added to the pre-softmax logits of every layer of that attention type;
* ``--untied-pos sinusoidal`` (**untied-pos**, Eqs. 7.1-7.2) or ``random`` (**random-untied-pos**, a learned
  table; ``--untied-pos-freeze``);
* ``--untied-pos-scale tupe|standard`` (not in the thesis).

With the positional projections at zero and ``--untied-pos-scale standard`` the model is
``transformer_twt --no-token-positional-embeddings``.

Archs: ``transformer_untied_pos[_random]`` (fairseq base sizes), ``..._bench`` (the bench shape; alias
``*_small``), and the systems of Table 7.1: ``transformer_untied_pos_prenorm_fixnorm_scalenorm``
(**untied-pos**; alias ``twt_untied_pos``), ``transformer_untied_pos_random_prenorm_fixnorm_scalenorm``
(**random-untied-pos**; alias ``twt_random_untied_pos``); the **baseline** row is
``transformer_twt_prenorm_fixnorm_scalenorm``.
"""
import math
from typing import Optional

import torch
import torch.nn as nn
from fairseq.models import register_model, register_model_architecture
from fairseq.modules import MultiheadAttention
from torch import Tensor

from fairseq_ext.modules.vocab_mask import TargetVocabMaskMixin
from fairseq_ext.models.twt import (
    THESIS_PRESETS, TwtDecoder, TwtEncoder, TwtTransformerModel, thesis_preset, transformer_twt,
)
from fairseq_ext.modules.arch_utils import register_presets, register_shaped, set_default
from fairseq_ext.modules.vocab_mask import add_target_vocab_mask_args, set_target_vocab_mask_default
from fairseq_ext.data.errors import UserDataError

POSITION_KINDS = ("sinusoidal", "random")
SCALES = ("tupe", "standard")


def sinusoidal_table(n: int, dim: int) -> Tensor:
    """PE(pos, 2i) = sin(pos/10000^{2i/d}), PE(pos, 2i+1) = cos(pos/10000^{2i/d}) (Eqs. 7.1–7.2)."""
    pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    two_i = torch.arange(0, dim, 2, dtype=torch.float32)
    angle = pos / torch.pow(10000.0, two_i / dim)
    pe = torch.zeros(n, dim)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return pe


class PositionTable(nn.Module):
    """p_0 … p_{n−1}: sinusoidal (a buffer, extended on demand) or random (a parameter)."""

    def __init__(self, kind: str, num_positions: int, dim: int, freeze: bool = False):
        super().__init__()
        if kind not in POSITION_KINDS:
            raise UserDataError(f"--untied-pos {kind!r}: choose from {POSITION_KINDS}")
        self.kind, self.dim, self.num_positions = kind, dim, num_positions
        if kind == "sinusoidal":
            self.register_buffer("table", sinusoidal_table(num_positions, dim), persistent=False)
        else:
            self.table = nn.Parameter(torch.randn(num_positions, dim) * dim ** -0.5,
                                      requires_grad=not freeze)

    def forward(self, n: int) -> Tensor:
        """The first ``n`` positions (n, d)."""
        if n > self.table.size(0):
            if self.kind == "random":
                raise UserDataError(f"position {n - 1} beyond the {self.num_positions} learned positions")
            self.table = sinusoidal_table(n, self.dim).to(self.table.device)
        return self.table[:n]


class PositionalAttentionTerm(nn.Module):
    """The second term of Eq. 7.6 per head, p_q W'_q (p_k W'_k)ᵀ · scaling: (Lq,d),(Lk,d) → (H,Lq,Lk)."""

    def __init__(self, dim: int, num_heads: int, scaling: float):
        super().__init__()
        self.num_heads, self.head_dim, self.scaling = num_heads, dim // num_heads, scaling
        self.q_proj = nn.Linear(dim, dim, bias=False)  # W'_q
        self.k_proj = nn.Linear(dim, dim, bias=False)  # W'_k
        for lin in (self.q_proj, self.k_proj):  # as fairseq's attention q/k projections
            nn.init.xavier_uniform_(lin.weight, gain=1 / math.sqrt(2))

    def forward(self, p_q: Tensor, p_k: Tensor) -> Tensor:
        h, dk = self.num_heads, self.head_dim
        q = self.q_proj(p_q).view(-1, h, dk).transpose(0, 1)
        k = self.k_proj(p_k).view(-1, h, dk).transpose(0, 1)
        return torch.matmul(q, k.transpose(1, 2)) * self.scaling


def token_positions(padding_mask: Optional[Tensor]) -> Optional[Tensor]:
    """0-based positions of the real tokens (B,L) (pads get 0), or ``None`` when nothing is padded
    (then position = index for every sentence)."""
    if padding_mask is None or not bool(padding_mask.any()):
        return None
    return ((~padding_mask).long().cumsum(1) - 1).clamp(min=0)


def gather_keys(term: Tensor, key_pos: Optional[Tensor]) -> Tensor:
    """(H,Lq,P) table of positions → (B|1,H,Lq,Lk) with bias[b,h,i,j] = term[h,i,key_pos[b,j]]."""
    if key_pos is None:
        return term.unsqueeze(0)
    return term[:, :, key_pos].permute(2, 0, 1, 3)  # (H,Lq,B,Lk) -> (B,H,Lq,Lk)


def gather_both(term: Tensor, pos: Optional[Tensor]) -> Tensor:
    """(H,P,P) → (B|1,H,L,L) with bias[b,h,i,j] = term[h,pos[b,i],pos[b,j]] (self-attention)."""
    if pos is None:
        return term.unsqueeze(0)
    n = term.size(-1)
    idx = pos.unsqueeze(2) * n + pos.unsqueeze(1)  # (B,L,L)
    return term.reshape(term.size(0), n * n)[:, idx].transpose(0, 1)


class UntiedPosAttention(MultiheadAttention):
    """fairseq's ``MultiheadAttention`` (same parameters, same ``forward``) whose pre-softmax logits get
    ``self.pos_bias`` (B|1, H, Lq, Lk), set by the stack around each forward, through fairseq's
    ``apply_sparse_mask`` hook: it receives the scaled logits (x_q W_q)(x_k W_k)ᵀ·scaling, before the
    attention mask and the key padding mask are applied and before the softmax (Eq. 7.6); ``scaling``
    is 1/√(2d_k) (TUPE) or 1/√d_k.

    fairseq's ``forward`` hands the call to ``F.multi_head_attention_forward`` — which has no hook and
    a fixed 1/√d_k scaling — whenever there is no incremental state and the keys are not static (the
    encoder and decoder self-attention of a full forward pass).  ``skip_embed_dim_check = True`` turns
    that path off (its only other effect is to skip an assert on the query's embedding size), so that
    every call, in training and in incremental decoding, goes through the path with the hook.
    The incremental state is fairseq's (keys/values (B,H,L,d_k)); it is reordered per hypothesis.
    """

    pos_bias: Optional[Tensor] = None

    @classmethod
    def convert(cls, attn: MultiheadAttention, scaling: float) -> "UntiedPosAttention":
        """Make a built fairseq attention an :class:`UntiedPosAttention` in place.  Only the class
        changes (no new parameters): fairseq's construction (arguments, initialisation, quant-noise)
        is kept as the layer built it."""
        attn.__class__ = cls
        attn.scaling = scaling
        attn.pos_bias = None
        attn.skip_embed_dim_check = True  # never the fused path, which skips apply_sparse_mask
        return attn

    def apply_sparse_mask(self, attn_weights: Tensor, tgt_len: int, src_len: int, bsz: int) -> Tensor:
        """Logits (B·H, Lq, Lk) + the positional term of Eq. 7.6."""
        if self.pos_bias is None:
            return attn_weights
        h = self.num_heads
        biased = attn_weights.view(bsz, h, tgt_len, src_len) + self.pos_bias
        return biased.view(bsz * h, tgt_len, src_len).type_as(attn_weights)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Every cached tensor (keys, values, padding mask; batch first) follows ``new_order``, the
        encoder–decoder cache included: fairseq's version leaves that cache alone when the batch size
        is unchanged (right only when ``new_order`` stays within each sentence's beams)."""
        buf = self._get_input_buffer(incremental_state)
        if buf:
            for name, value in buf.items():
                if value is not None:
                    buf[name] = value.index_select(0, new_order)
            incremental_state = self._set_input_buffer(incremental_state, buf)
        return incremental_state

    def set_beam_size(self, beam_size):
        """Keys/values are cached per hypothesis (no "beamable" encoder–decoder attention, whose
        cache has one row per sentence), so that :meth:`reorder_incremental_state` may index them."""


def _scaling(cfg, heads: int, dim: int) -> float:
    dk = dim // heads
    return (2 * dk) ** -0.5 if cfg.untied_pos_scale == "tupe" else dk ** -0.5


class UntiedPosEncoder(TwtEncoder):
    """TwT encoder without input positions; self-attention logits + the encoder positional term."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        dim, heads = cfg.encoder.embed_dim, cfg.encoder.attention_heads
        scaling = _scaling(cfg, heads, dim)
        self.positions = PositionTable(cfg.untied_pos, cfg.max_source_positions, dim, cfg.untied_pos_freeze)
        self.pos_self = PositionalAttentionTerm(dim, heads, scaling)
        for layer in self.layers:
            UntiedPosAttention.convert(layer.self_attn, scaling)

    def positional_bias(self, src_tokens: Tensor) -> Tensor:
        """p_q W'_q W'_kᵀ p_kᵀ for every source pair (B|1,H,S,S), computed once for all layers."""
        n = src_tokens.size(1)
        p = self.positions(n)
        term = self.pos_self(p, p)  # (H,S,S) over positions 0..S−1
        return gather_both(term, token_positions(src_tokens.eq(self.padding_idx)))

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None):
        bias = self.positional_bias(src_tokens)
        for layer in self.layers:
            layer.self_attn.pos_bias = bias
        try:
            return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        finally:
            for layer in self.layers:
                layer.self_attn.pos_bias = None


class UntiedPosDecoder(TargetVocabMaskMixin, TwtDecoder):
    """TwT decoder without input positions; self- and cross-attention logits + their positional terms."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.target_vocab_mask = None
        dim, heads = cfg.decoder.embed_dim, cfg.decoder.attention_heads
        scaling = _scaling(cfg, heads, dim)
        n = max(cfg.max_target_positions, cfg.max_source_positions)
        self.positions = PositionTable(cfg.untied_pos, n, dim, cfg.untied_pos_freeze)
        self.pos_self = PositionalAttentionTerm(dim, heads, scaling)
        self.pos_cross = PositionalAttentionTerm(dim, heads, scaling) if not no_encoder_attn else None
        for layer in self.layers:
            UntiedPosAttention.convert(layer.self_attn, scaling)
            if layer.encoder_attn is not None:
                UntiedPosAttention.convert(layer.encoder_attn, scaling)

    def positional_biases(self, prev_output_tokens: Tensor, encoder_out, incremental: bool):
        """(self bias (1,H,Tq,T), cross bias (B|1,H,Tq,S) or None); Tq = 1 when decoding step by step."""
        t = prev_output_tokens.size(1)
        src_pad = None
        if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
            src_pad = encoder_out["encoder_padding_mask"][0]
        s = 0
        if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
            s = encoder_out["encoder_out"][0].size(0)
        p = self.positions(max(t, s))
        p_q = p[t - 1: t] if incremental else p[:t]
        self_bias = self.pos_self(p_q, p[:t]).unsqueeze(0)
        cross_bias = None
        if self.pos_cross is not None and s > 0:
            term = self.pos_cross(p_q, p[:s])  # (H,Tq,S) over source positions 0..S−1
            cross_bias = gather_keys(term, token_positions(src_pad))
        return self_bias, cross_bias

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        self_bias, cross_bias = self.positional_biases(prev_output_tokens, encoder_out,
                                                       incremental_state is not None)
        for layer in self.layers:
            layer.self_attn.pos_bias = self_bias
            if layer.encoder_attn is not None:
                layer.encoder_attn.pos_bias = cross_bias
        try:
            return super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                            full_context_alignment, alignment_layer, alignment_heads)
        finally:
            for layer in self.layers:
                layer.self_attn.pos_bias = None
                if layer.encoder_attn is not None:
                    layer.encoder_attn.pos_bias = None

    def output_layer(self, features):
        return self.apply_target_vocab_mask(super().output_layer(features))


@register_model("transformer_untied_pos")
class UntiedPosTransformerModel(TwtTransformerModel):
    """``transformer_twt`` with untied positional attention (ch. 7, Eq. 7.6; see module doc)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--untied-pos", choices=POSITION_KINDS,
                            help="positional vectors p: sinusoidal (untied-pos, Eqs. 7.1-7.2) or random "
                                 "(random-untied-pos, learned, N(0, 1/sqrt(d)) init)")
        parser.add_argument("--untied-pos-freeze", action="store_true",
                            help="with --untied-pos random: keep the random positions fixed")
        parser.add_argument("--untied-pos-scale", choices=SCALES,
                            help="logit scaling: tupe (1/sqrt(2 d_k) on both terms, default) or "
                                 "standard (1/sqrt(d_k))")
        add_target_vocab_mask_args(parser)

    @classmethod
    def build_model(cls, args, task):
        transformer_untied_pos(args)
        args.no_token_positional_embeddings = True  # positions enter only through Eq. 7.6
        model = super().build_model(args, task)
        model.decoder.init_target_vocab_mask(args.target_vocab_mask, task, task.target_dictionary)
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return UntiedPosEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return UntiedPosDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    @torch.no_grad()
    def positional_scores(self, attention: str = "enc", n: int = 101, m: Optional[int] = None) -> Tensor:
        """p_q W'_q W'_kᵀ p_kᵀ (scaled) for query positions 0..n−1 and key positions 0..m−1, per head
        (H,n,m): ``enc`` / ``dec`` self-attention or ``cross`` (target × source), for Figs. 7.1–7.2."""
        m = n if m is None else m
        if attention == "enc":
            p = self.encoder.positions(max(n, m))
            return self.encoder.pos_self(p[:n], p[:m])
        p = self.decoder.positions(max(n, m))
        module = {"dec": self.decoder.pos_self, "cross": self.decoder.pos_cross}[attention]
        return module(p[:n], p[:m])


def untied_defaults(args, kind: str):
    set_default(args, "untied_pos", kind)
    set_default(args, "untied_pos_freeze", False)
    set_default(args, "untied_pos_scale", "tupe")
    set_target_vocab_mask_default(args)


def untied_arch(kind: str, family_arch=transformer_twt):
    def arch(args):
        """Untied positional attention (Eq. 7.6) with ``--untied-pos`` {kind} on the TwT transformer."""
        untied_defaults(args, kind)
        family_arch(args)

    arch.__doc__ = arch.__doc__.format(kind=kind)
    return arch


transformer_untied_pos = untied_arch("sinusoidal")

# transformer_untied_pos[_random] (fairseq base sizes), *_bench (the bench shape; earlier *_small).
UNTIED_KINDS = {"transformer_untied_pos": ("sinusoidal",), "transformer_untied_pos_random": ("random",)}
register_presets("transformer_untied_pos", untied_arch, UNTIED_KINDS)
for _prefix, (_kind,) in UNTIED_KINDS.items():
    register_shaped("transformer_untied_pos", _prefix, untied_arch(_kind), legacy=True)


def thesis_untied(kind: str):
    """Table 7.1 system on the ch. 4/6 model (PreNorm + FixNorm + ScaleNorm, 512/2048, 8 heads, 6+6,
    SMALLINIT, shared embeddings; override sizes per Table 4.1)."""
    return thesis_preset(untied_arch(kind), *THESIS_PRESETS["transformer_twt_prenorm_fixnorm_scalenorm"])


register_model_architecture("transformer_untied_pos", "transformer_untied_pos_prenorm_fixnorm_scalenorm")(
    thesis_untied("sinusoidal"))
register_model_architecture("transformer_untied_pos", "transformer_untied_pos_random_prenorm_fixnorm_scalenorm")(
    thesis_untied("random"))

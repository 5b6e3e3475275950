"""The Non-Autoregressive Transformer with fertility (NAT) of Gu's thesis, ch. 8 — model ``nat_fertility``.

The model factorises translation through a fertility latent variable (Eq. 8.4)::

    p_NA(Y|X) = Σ_{f∈𝓕} Π_{t'} p_F(f_{t'} | x_{1:T'}) · Π_t p(y_t | x_1{f_1}, …, x_{T'}{f_{T'}})      (8.4)

Components: fairseq's Transformer encoder (``--init-encoder-from`` a teacher, §8.5.1); the fertility
predictor (:meth:`NATFertilityModel.fertility_logits`, ``--max-fertility``); the decoder inputs
(``--decoder-input copy-fertility|uniform|positional``, :meth:`NATFertilityModel.decoder_inputs`); decoder
layers with unmasked self-attention (diagonal masked), positional attention (Eq. 8.2), encoder-decoder
attention and FFN; the per-position argmax translation (:meth:`NATFertilityModel.decode`).

This module holds the network only: fertility choice and teacher scoring in
:mod:`fairseq_ext.modules.nat_fertility`; decoding (Eqs. 8.5-8.8) in :mod:`fairseq_ext.generators.nat_fertility`;
losses (Eqs. 8.9-8.11) in :mod:`fairseq_ext.criterions.nat_fertility_label_smoothed_cross_entropy`; fertilities
from :mod:`fairseq_ext.tools.corpora.fertility`, batched by :mod:`fairseq_ext.data.fertility`; task
:mod:`fairseq_ext.tasks.translation_fertility`.

Archs: ``nat_fertility`` (Transformer-base sizes), ``nat_fertility_iwslt16``, ``nat_fertility_bench`` (the
bench transformer's shape, so its encoder can start from the bench teacher), ``nat_fertility_tiny``.

References: Gu, J., Bradbury, J., Xiong, C., Li, V.O.K., Socher, R. "Non-Autoregressive Neural Machine
Translation", ICLR 2018; and Gu, J. "Efficient Neural Machine Translation", PhD thesis, The University of
Hong Kong, 2019, ch. 8 (equation numbers here and in the family's other modules are the thesis').
"""
import logging
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import register_model, register_model_architecture
from fairseq.models.nat import FairseqNATDecoder, FairseqNATModel
from fairseq.models.nat.nonautoregressive_transformer import base_architecture as nat_base_architecture
from fairseq.models.transformer import TransformerConfig
from fairseq.modules import LayerNorm, MultiheadAttention, SinusoidalPositionalEmbedding
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import Tensor

from fairseq_ext.modules.arch_utils import register_shaped, set_default
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

DECODER_INPUTS = ("copy-fertility", "uniform", "positional")
DIAGONAL_MASK_VALUE = -1e9
DEFAULT_MAX_FERTILITY = 50


# ----------------------------------------------------------------------------------------------- helpers
def source_word_mask(src_tokens: Tensor, pad: int, eos: int) -> Tensor:
    """(B, S) bool: the real source words x_1..x_{T'} (neither padding nor the appended ⟨eos⟩)."""
    return src_tokens.ne(pad) & src_tokens.ne(eos)


def fertility_copy_index(fertility: Tensor) -> Tuple[Tensor, Tensor]:
    """Fertility copy (Eq. 8.4's x_1{f_1}, …, x_{T'}{f_{T'}}), vectorised.

    ``fertility`` (B, S) non-negative integers over the padded source positions (0 at padding/⟨eos⟩).
    Returns ``index`` (B, T) — the source position whose fertility slot covers decoder position t, i.e.
    the j with C_{j−1} ≤ t < C_j where C = cumsum(f) — and ``mask`` (B, T), t < Σ_j f_j; T = max Σf (≥ 1).
    """
    fertility = fertility.long().clamp(min=0)
    cum = fertility.cumsum(1)
    lengths = cum[:, -1]
    T = max(int(lengths.max()) if lengths.numel() else 0, 1)
    t = torch.arange(T, device=fertility.device).unsqueeze(0).expand(fertility.size(0), T).contiguous()
    index = torch.searchsorted(cum.contiguous(), t, right=True)  # #{j : C_j ≤ t}
    mask = t < lengths.unsqueeze(1)
    index = index.clamp(max=fertility.size(1) - 1).masked_fill(~mask, 0)
    return index, mask


def uniform_copy_index(src_mask: Tensor, tgt_lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """Uniform copy (§8.3): decoder input t = 1..T copies source word Round(T'·t/T), clamped to [1, T'].

    ``src_mask`` (B, S) marks the (contiguous) real source words; Round(a/b) = ⌊(2a + b) / 2b⌋ exactly
    in integers.  Returns ``index`` (B, T) into the padded source positions and ``mask`` (B, T)."""
    tgt_lengths = tgt_lengths.long()
    src_len = src_mask.long().sum(1).clamp(min=1)
    first = src_mask.long().argmax(1)  # offset of x_1 (left padding)
    T = max(int(tgt_lengths.max()) if tgt_lengths.numel() else 0, 1)
    t = torch.arange(1, T + 1, device=src_mask.device).unsqueeze(0)
    denom = tgt_lengths.clamp(min=1).unsqueeze(1)
    k = torch.div(2 * src_len.unsqueeze(1) * t + denom, 2 * denom, rounding_mode="floor")
    k = torch.minimum(k.clamp(min=1), src_len.unsqueeze(1))
    mask = t <= tgt_lengths.unsqueeze(1)
    index = (first.unsqueeze(1) + k - 1).masked_fill(~mask, 0)
    return index, mask


def self_attention_mask(length: int, device=None, dtype=torch.float32, mask_diagonal: bool = True) -> Optional[Tensor]:
    """(T, T) additive mask of the NAT decoder's self-attention: no causal mask; the diagonal (a query
    attending to itself) gets −1e9 ("each query position is masked only from attending to itself")."""
    if not mask_diagonal:
        return None
    return torch.zeros(length, length, device=device, dtype=dtype).fill_diagonal_(DIAGONAL_MASK_VALUE)


# ----------------------------------------------------------------------------------------------- decoder
class NATFertilityDecoderLayer(TransformerDecoderLayerBase):
    """Decoder layer: masked-diagonal self-attention → positional attention (Eq. 8.2) → encoder
    attention → FFN; each sublayer with residual + LayerNorm (post-LN unless ``normalize_before``)."""

    def __init__(self, cfg, no_encoder_attn=False, positional_attention=True):
        super().__init__(cfg, no_encoder_attn)
        if positional_attention:
            self.pos_attn = MultiheadAttention(
                self.embed_dim, cfg.decoder.attention_heads, kdim=self.embed_dim, vdim=self.embed_dim,
                dropout=cfg.attention_dropout, self_attention=False, encoder_decoder_attention=False)
            self.pos_attn_layer_norm = LayerNorm(self.embed_dim, export=cfg.export)
        else:
            self.pos_attn = None
            self.pos_attn_layer_norm = None

    def _sublayer(self, x: Tensor, fn, layer_norm) -> Tensor:
        residual = x
        if self.normalize_before:
            x = layer_norm(x)
        x = self.dropout_module(fn(x))
        x = residual + x
        if not self.normalize_before:
            x = layer_norm(x)
        return x

    def forward(self, x: Tensor, encoder_out: Optional[Tensor], encoder_padding_mask: Optional[Tensor],
                positions: Optional[Tensor] = None, self_attn_mask: Optional[Tensor] = None,
                self_attn_padding_mask: Optional[Tensor] = None, pos_attn_mask: Optional[Tensor] = None,
                **unused):
        """x: (T, B, C); positions: (T, B, C) sinusoidal encodings for the positional attention."""
        x = self._sublayer(x, lambda h: self.self_attn(
            query=h, key=h, value=h, key_padding_mask=self_attn_padding_mask, attn_mask=self_attn_mask,
            need_weights=False)[0], self.self_attn_layer_norm)
        if self.pos_attn is not None:
            x = self._sublayer(x, lambda h: self.pos_attn(
                query=positions, key=positions, value=h, key_padding_mask=self_attn_padding_mask,
                attn_mask=pos_attn_mask, need_weights=False)[0], self.pos_attn_layer_norm)
        if self.encoder_attn is not None and encoder_out is not None:
            x = self._sublayer(x, lambda h: self.encoder_attn(
                query=h, key=encoder_out, value=encoder_out, key_padding_mask=encoder_padding_mask,
                static_kv=True, need_weights=False)[0], self.encoder_attn_layer_norm)

        def ffn(h):
            h = self.activation_dropout_module(self.activation_fn(self.fc1(h)))
            if self.ffn_layernorm is not None:
                h = self.ffn_layernorm(h)
            return self.fc2(h)

        return self._sublayer(x, ffn, self.final_layer_norm)


class NATFertilityDecoder(FairseqNATDecoder):
    def __init__(self, args, dictionary, embed_tokens):
        # read by build_decoder_layer, which the base constructor calls
        self._positional_attention = not args.no_positional_attention
        super().__init__(args, dictionary, embed_tokens)
        self.dictionary = dictionary
        self.unk = dictionary.unk()
        self.mask_self_diagonal = not args.no_self_attn_diag_mask
        self.pos_attn_diag_mask = args.pos_attn_diag_mask
        if self._positional_attention:
            # p(j, k) = sin/cos(j / 10000^{k/d}) (Eq. 8.2's footnote); fixed, no parameters
            self.pos_attn_positions = SinusoidalPositionalEmbedding(
                self.embed_dim, self.padding_idx, init_size=self.max_target_positions + self.padding_idx + 1)
        else:
            self.pos_attn_positions = None

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(cfg)
        return NATFertilityDecoderLayer(cfg, no_encoder_attn, positional_attention=self._positional_attention)

    def forward(self, encoder_out: Dict[str, List[Tensor]], decoder_input: Optional[Tensor], out_mask: Tensor,
                normalize: bool = False, **unused) -> Tensor:
        """(B, T, V) logits (log-probs with ``normalize``) for the decoder inputs (B, T, C) or, with
        ``decoder_input=None``, positional embeddings only; ``out_mask`` (B, T) marks real positions."""
        features = self.extract_features(encoder_out, decoder_input, out_mask)
        logits = self.output_layer(features)
        return F.log_softmax(logits.float(), -1) if normalize else logits

    def extract_features(self, encoder_out, decoder_input: Optional[Tensor], out_mask: Tensor, **unused):
        B, T = out_mask.shape
        slots = torch.full((B, T), self.unk, dtype=torch.long, device=out_mask.device).masked_fill(
            ~out_mask, self.padding_idx)
        if decoder_input is None:
            x = encoder_out["encoder_out"][0].new_zeros(B, T, self.embed_dim)
        else:
            x = decoder_input
            if self.project_in_dim is not None:
                x = self.project_in_dim(x)
        if self.embed_positions is not None:
            x = x + self.embed_positions(slots)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x).transpose(0, 1)
        padding_mask = ~out_mask
        self_mask = self_attention_mask(T, x.device, x.dtype, self.mask_self_diagonal)
        positions = pos_mask = None
        if self.pos_attn_positions is not None:
            positions = self.pos_attn_positions(slots).to(x.dtype).transpose(0, 1)
            pos_mask = self_attention_mask(T, x.device, x.dtype, self.pos_attn_diag_mask)
        enc = encoder_out["encoder_out"][0] if encoder_out is not None and len(encoder_out["encoder_out"]) else None
        enc_pad = (encoder_out["encoder_padding_mask"][0]
                   if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) else None)
        for layer in self.layers:
            x = layer(x, enc, enc_pad, positions=positions, self_attn_mask=self_mask,
                      self_attn_padding_mask=padding_mask, pos_attn_mask=pos_mask)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x


# ----------------------------------------------------------------------------------------------- model
@register_model("nat_fertility")
class NATFertilityModel(FairseqNATModel):
    """NAT with a fertility predictor (Gu 2018, ch. 8); see the module docstring."""

    @staticmethod
    def add_args(parser):
        FairseqNATModel.add_args(parser)
        parser.add_argument("--decoder-input", dest="nat_decoder_input", choices=DECODER_INPUTS,
                            help="decoder inputs: fertility copy (default), uniform copy, positional only")
        parser.add_argument("--max-fertility", type=int, metavar="L",
                            help="fertility classes 0..L-1 (default 50); larger targets are clamped to L-1")
        parser.add_argument("--no-positional-attention", action="store_true",
                            help="drop the positional attention sublayer (Table 8.3 ablation)")
        parser.add_argument("--pos-attn-diag-mask", action="store_true",
                            help="also mask the diagonal of the positional attention (released code)")
        parser.add_argument("--no-self-attn-diag-mask", action="store_true",
                            help="do not mask the diagonal of the decoder self-attention (ablation)")
        parser.add_argument("--sg-fertility", action="store_true",
                            help="stop the fertility predictor's gradient into the encoder")
        parser.add_argument("--init-encoder-from", type=str, metavar="CKPT",
                            help="initialise the encoder from this autoregressive teacher checkpoint")

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.max_fertility = getattr(args, "max_fertility", None) or DEFAULT_MAX_FERTILITY
        self.decoder_input_mode = getattr(args, "nat_decoder_input", None) or "copy-fertility"
        self.sg_fertility = args.sg_fertility
        self.fertility_proj = nn.Linear(encoder.embed_tokens.embedding_dim, self.max_fertility)

    @classmethod
    def build_model(cls, args, task):
        nat_fertility_base(args)
        model = super().build_model(args, task)
        path = getattr(args, "init_encoder_from", None)
        if path:
            model.init_encoder_from_teacher(path)
        return model

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return NATFertilityDecoder(args, tgt_dict, embed_tokens)

    # -- teacher initialisation -----------------------------------------------------------------
    def init_encoder_from_teacher(self, path: str) -> None:
        """Copy ``encoder.*`` of an AR checkpoint (same encoder shape) into this model's encoder."""
        import os

        from fairseq_ext.modules.checkpoint import load_state

        if not os.path.exists(path):
            # e.g. decoding a NAT checkpoint elsewhere: the weights come from the NAT checkpoint anyway
            logger.warning(f"--init-encoder-from {path}: file not found; encoder left as initialised")
            return
        state = load_state(path)["model"]
        enc = {k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}
        own = self.encoder.state_dict()
        bad = [k for k, v in enc.items() if k in own and own[k].shape != v.shape]
        if bad:
            raise UserDataError(f"--init-encoder-from {path}: shape mismatch for {bad[:5]} "
                             f"(the NAT encoder must have the teacher's sizes)")
        used = {k: v for k, v in enc.items() if k in own}
        if not used:
            raise UserDataError(f"--init-encoder-from {path}: no encoder parameter matched")
        missing = [k for k in own if k not in used and not k.endswith("_float_tensor")]
        self.encoder.load_state_dict(used, strict=False)
        logger.info(f"initialised the encoder from {path}: {len(used)} tensors"
                    + (f"; not in the teacher: {missing}" if missing else ""))

    # -- pieces ------------------------------------------------------------------------------------
    def source_mask(self, src_tokens: Tensor) -> Tensor:
        return source_word_mask(src_tokens, self.pad, self.eos)

    def fertility_logits(self, encoder_out) -> Tensor:
        """(B, S, L) logits of p_F(f_{t'} | x_{1:T'}) from the last encoder layer."""
        h = encoder_out["encoder_out"][0].transpose(0, 1)
        if self.sg_fertility:
            h = h.detach()
        return self.fertility_proj(h)

    def decoder_inputs(self, encoder_out, src_tokens: Tensor, fertility: Optional[Tensor] = None,
                       lengths: Optional[Tensor] = None) -> Tuple[Optional[Tensor], Tensor]:
        """(decoder input (B, T, C) or None, output mask (B, T)) for the configured ``--decoder-input``.

        ``copy-fertility`` needs ``fertility``; ``uniform``/``positional`` use ``lengths`` (B,) or, if
        not given, Σ fertility."""
        src_mask = self.source_mask(src_tokens)
        mode = self.decoder_input_mode
        if mode == "copy-fertility":
            if fertility is None:
                raise UserDataError("--decoder-input copy-fertility needs fertilities")
            index, mask = fertility_copy_index(fertility.masked_fill(~src_mask, 0))
        else:
            if lengths is None:
                if fertility is None:
                    raise UserDataError(f"--decoder-input {mode} needs target lengths or fertilities")
                lengths = fertility.masked_fill(~src_mask, 0).sum(1)
            if mode == "uniform":
                index, mask = uniform_copy_index(src_mask, lengths)
            else:
                T = max(int(lengths.max()), 1)
                mask = torch.arange(T, device=src_tokens.device).unsqueeze(0) < lengths.unsqueeze(1)
                return None, mask
        emb = encoder_out["encoder_embedding"][0]  # (B, S, C): scaled token embeddings
        x = emb.gather(1, index.unsqueeze(-1).expand(-1, -1, emb.size(-1)))
        return x, mask

    def decode(self, encoder_out, src_tokens: Tensor, fertility: Optional[Tensor] = None,
               lengths: Optional[Tensor] = None, normalize: bool = False) -> Tuple[Tensor, Tensor]:
        """(logits (B, T, V), mask (B, T)) of G(x_{1:T'}, f_{1:T'}) — one parallel decoder pass."""
        x, mask = self.decoder_inputs(encoder_out, src_tokens, fertility, lengths)
        return self.decoder(encoder_out, x, mask, normalize=normalize), mask

    def forward(self, src_tokens, src_lengths, fertility: Optional[Tensor] = None,
                tgt_tokens: Optional[Tensor] = None, **kwargs):
        """Training pass given the q-fertilities (Eq. 8.9): returns the translation and fertility
        predictions in fairseq's NAT output format (plus ``encoder_out`` for fine-tuning)."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        fert_logits = self.fertility_logits(encoder_out)
        src_mask = self.source_mask(src_tokens)
        lengths = tgt_tokens.ne(self.pad).sum(1) if tgt_tokens is not None else None
        if fertility is not None:
            fertility = fertility.masked_fill(~src_mask, 0)
            if lengths is not None and self.decoder_input_mode == "copy-fertility" and \
                    not torch.equal(fertility.sum(1), lengths):
                raise UserDataError("fertilities do not sum to the target lengths (were they computed on "
                                 "these targets?)")
        logits, out_mask = self.decode(encoder_out, src_tokens, fertility, lengths)
        if tgt_tokens is not None:
            T = out_mask.size(1)
            if tgt_tokens.size(1) < T:
                tgt_tokens = F.pad(tgt_tokens, (0, T - tgt_tokens.size(1)), value=self.pad)
            tgt_tokens = tgt_tokens[:, :T]
        return {
            "word_ins": {"out": logits, "tgt": tgt_tokens, "mask": out_mask},
            "fertility": {"out": fert_logits, "tgt": fertility, "mask": src_mask},
            "encoder_out": encoder_out,
        }

    # fairseq's IterativeRefinementGenerator interface is not used: see generators/nat_fertility.py
    def forward_decoder(self, *args, **kwargs):
        raise NotImplementedError("decode nat_fertility with the translation_fertility task's generator")

    def initialize_output_tokens(self, *args, **kwargs):
        raise NotImplementedError("decode nat_fertility with the translation_fertility task's generator")


# ----------------------------------------------------------------------------------------------- archs
@register_model_architecture("nat_fertility", "nat_fertility")
def nat_fertility_base(args):
    """Transformer-base sizes, post-LN, no label smoothing (the thesis' WMT NAT, §8.5.1)."""
    set_default(args, "nat_decoder_input", "copy-fertility")
    set_default(args, "max_fertility", DEFAULT_MAX_FERTILITY)
    for flag in ("no_positional_attention", "pos_attn_diag_mask", "no_self_attn_diag_mask", "sg_fertility"):
        set_default(args, flag, False)
    set_default(args, "init_encoder_from", None)
    nat_base_architecture(args)


@register_model_architecture("nat_fertility", "nat_fertility_iwslt16")
def nat_fertility_iwslt16(args):
    """IWSLT16 En-De: d_model 278, d_hidden 507, 5 layers, 2 heads, dropout 0.079 (d_model as in the authors'
    released code; the thesis prints 287)."""
    for side in ("encoder", "decoder"):
        set_default(args, f"{side}_embed_dim", 278)
        set_default(args, f"{side}_ffn_embed_dim", 507)
        set_default(args, f"{side}_layers", 5)
        set_default(args, f"{side}_attention_heads", 2)
    set_default(args, "dropout", 0.079)
    nat_fertility_base(args)


# nat_fertility_bench (earlier nat_fertility_small): the bench shape, so that ``--init-encoder-from``
# the bench teacher works.
register_shaped("nat_fertility", "nat_fertility", nat_fertility_base, legacy=True)


@register_model_architecture("nat_fertility", "nat_fertility_tiny")
def nat_fertility_tiny(args):
    """2+2 layers, d 32, FFN 64, 4 heads, shared embeddings (tests; the shape of harness.TINY_TRANSFORMER)."""
    for side in ("encoder", "decoder"):
        set_default(args, f"{side}_layers", 2)
        set_default(args, f"{side}_embed_dim", 32)
        set_default(args, f"{side}_ffn_embed_dim", 64)
        set_default(args, f"{side}_attention_heads", 4)
    set_default(args, "share_all_embeddings", True)
    nat_fertility_base(args)

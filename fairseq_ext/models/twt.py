"""``transformer_twt``: fairseq's transformer with the switches of Nguyen (2021) ch. 6,
"Transformers without Tears" (Nguyen & Salazar 2019). Everything is fairseq's
:class:`~fairseq.models.transformer.TransformerModel`; this module only adds

* ``--norm-type layernorm|scalenorm|scalenorm-fixed|rmsnorm`` (ScaleNorm Eq. 6.5; fixed g as in Table 6.7);
  PostNorm (Eq. 6.2) / PreNorm (Eq. 6.3) is fairseq's ``--encoder/decoder-normalize-before``;
* ``--fixnorm`` (``--fixnorm-radius``): ℓ2-normalised word embeddings and output projection (§6.3.3;
  logits g·(ŵ·x/‖x‖) + b with a ScaleNorm output norm, Eq. 6.6); ``--output-bias``;
* ``--twt-init fairseq|xavier|smallinit`` (Xavier Eq. 6.4, the "Baseline" of Table 6.2; SMALLINIT §6.2.2);
* ``--word-dropout p`` (§6.3.1, :class:`fairseq_ext.modules.word_dropout.WordDropoutMixin`).

With ``--norm-type layernorm``, no ``--fixnorm`` and ``--twt-init fairseq`` the model is fairseq's
transformer.

Architectures: ``transformer_twt`` (fairseq's ``transformer`` sizes), ``transformer_twt_bench`` (the bench
shape of :mod:`fairseq_ext.modules.arch_utils`; alias ``transformer_twt_small``) and the thesis presets
``transformer_twt_<norms>`` (alias ``twt_<norms>``; 512/2048, 8 heads, 6+6 layers, dropout 0.3, SMALLINIT,
shared embeddings; sizes overridable on the command line).

References: T. Q. Nguyen, "Improving Neural Machine Translation for Low-Resource Languages", PhD
dissertation, University of Notre Dame, 2021 (ch. 3-7 for this family, ``transformer_lex``,
``lstm_luong``, ``transformer_untied_pos`` and the ``transfer_translation``/``concat_translation``
tasks); T. Q. Nguyen and J. Salazar, "Transformers without Tears: Improving the Normalization of
Self-Attention", IWSLT 2019.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)

from fairseq_ext.modules.arch_utils import register_presets, register_shaped, set_default
from fairseq_ext.modules.fast_inference import frozen_derived
from fairseq_ext.modules.norms import (
    NORM_TYPES, FixNormEmbedding, ScaleNorm, add_fixnorm_args, build_norm, fixnorm,
)
from fairseq_ext.modules.word_dropout import WordDropoutMixin, add_word_dropout_args, set_word_dropout_default
from fairseq_ext.data.errors import UserDataError

INIT_SCHEMES = ("fairseq", "xavier", "smallinit")
LAYER_NORM_NAMES = ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")


def swap_norms(layer: nn.Module, cfg) -> nn.Module:
    """Replace a fairseq encoder/decoder layer's LayerNorms by ``cfg.norm_type`` norms (in place)."""
    if cfg.norm_type != "layernorm":
        for name in LAYER_NORM_NAMES:
            if getattr(layer, name, None) is not None:
                setattr(layer, name, build_norm(cfg.norm_type, layer.embed_dim))
    return layer


def twt_init_(model: nn.Module, scheme: str) -> None:
    """Re-initialise the projections of every layer: ``xavier`` (Eq. 6.4) or ``smallinit`` (§6.2.2)."""
    if scheme == "fairseq":
        return
    if scheme not in INIT_SCHEMES:
        raise UserDataError(f"unknown --twt-init {scheme!r}")
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        for attn in (layer.self_attn, getattr(layer, "encoder_attn", None)):
            if attn is None:
                continue
            for lin in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
                if scheme == "xavier":
                    nn.init.xavier_normal_(lin.weight)  # std √(2/(d+d))
                else:
                    nn.init.normal_(lin.weight, std=math.sqrt(2.0 / (5 * layer.embed_dim)))
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)
        for lin in (layer.fc1, layer.fc2):  # std √(2/(d+d_ff)) in both schemes
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)


class TwtEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        if self.layer_norm is not None:  # PreNorm: the extra norm after the stack (§6.2.1)
            self.layer_norm = build_norm(cfg.norm_type, embed_tokens.embedding_dim)

    def build_encoder_layer(self, cfg):
        return swap_norms(super().build_encoder_layer(cfg), cfg)


class TwtDecoder(TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        if self.layer_norm is not None:
            self.layer_norm = build_norm(cfg.norm_type, self.embed_dim)
        if cfg.norm_type == "scalenorm-fixed":  # the output norm supplies the learned g of Eq. 6.6
            owner, name = ((self, "layer_norm") if self.layer_norm is not None
                           else (self.layers[-1], "final_layer_norm"))
            setattr(owner, name, ScaleNorm(self.embed_dim, learnable=True))
        self.fixnorm = cfg.fixnorm
        self.fixnorm_radius = cfg.fixnorm_radius
        self.output_bias = nn.Parameter(torch.zeros(len(dictionary))) if cfg.output_bias else None

    def output_norm(self) -> nn.Module:
        """The last norm before the output projection (N_dec_final under PreNorm, else the last N3)."""
        return self.layer_norm if self.layer_norm is not None else self.layers[-1].final_layer_norm

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return swap_norms(super().build_decoder_layer(cfg, no_encoder_attn), cfg)

    def output_layer(self, features):
        """Logits x·Wᵀ (+ b); with FixNorm W's rows are normalised: g·cos(w, x) + b (Eq. 6.6)."""
        if self.adaptive_softmax is not None or (not self.fixnorm and self.output_bias is None):
            return super().output_layer(features)
        weight = self.output_projection.weight
        if self.fixnorm:  # computed once per weight version under --quantize int8 (then an int8 matrix)
            weight = frozen_derived(fixnorm, weight, self.fixnorm_radius)
        return F.linear(features, weight, self.output_bias)


@register_model("transformer_twt")
class TwtTransformerModel(WordDropoutMixin, TransformerModel):
    """fairseq transformer + ch. 6 norms, FixNorm, output bias, init schemes and word dropout (see
    module doc)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--norm-type", choices=NORM_TYPES,
                            help="norm of every sublayer and stack: layernorm (fairseq), scalenorm "
                                 "(Eq. 6.5, learned g=√d init), scalenorm-fixed (g=√d frozen except the "
                                 "final decoder output norm) or rmsnorm")
        add_fixnorm_args(parser)
        parser.add_argument("--output-bias", dest="output_bias", action="store_true",
                            help="add a zero-initialised output bias (default: on iff --fixnorm)")
        parser.add_argument("--no-output-bias", dest="output_bias", action="store_false",
                            help="no output bias")
        parser.add_argument("--twt-init", choices=INIT_SCHEMES,
                            help="weight init: fairseq (default), xavier (Xavier normal everywhere, "
                                 "Eq. 6.4) or smallinit (attention std √(2/5d), §6.2.2)")
        add_word_dropout_args(parser)

    @classmethod
    def build_model(cls, args, task):
        transformer_twt(args)  # fills what an older checkpoint lacks
        model = super().build_model(args, task)
        twt_init_(model, args.twt_init)
        model.word_dropout_p = args.word_dropout
        return model

    @classmethod
    def build_embedding(cls, cfg, dictionary, embed_dim, path=None):
        if not getattr(cfg, "fixnorm", False):
            return super().build_embedding(cfg, dictionary, embed_dim, path)
        emb = FixNormEmbedding(len(dictionary), embed_dim, dictionary.pad(), cfg.fixnorm_radius)
        if path:
            from fairseq import utils

            utils.load_embedding(utils.parse_embedding(path), dictionary, emb)
        return emb

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return TwtEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return TwtDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


@register_model_architecture("transformer_twt", "transformer_twt")
def transformer_twt(args):
    """fairseq's ``transformer`` defaults; LayerNorm, no FixNorm, fairseq init (≡ fairseq)."""
    set_default(args, "norm_type", "layernorm")
    set_default(args, "fixnorm", False)
    set_default(args, "fixnorm_radius", 1.0)
    set_default(args, "output_bias", bool(args.fixnorm))
    set_default(args, "twt_init", "fairseq")
    set_word_dropout_default(args)
    base_architecture(args)


# transformer_twt_bench (and its earlier name transformer_twt_small): the bench shape.
register_shaped("transformer_twt", "transformer_twt", transformer_twt, legacy=True)


def thesis_preset(family_arch, prenorm: bool, norm_type: str, fixnorm: bool):
    """The ch. 6 thesis configuration on top of ``family_arch`` (``transformer_twt`` or a model built on
    it, which adds its own defaults)."""

    def arch(args):
        """Thesis ch. 6 configuration (§6.3.1, Table 6.1): 512/2048, 8 heads, 6+6 layers,
        dropout 0.3 shared by sublayer outputs, attention weights and ReLU, SMALLINIT, shared
        embeddings."""
        for side in ("encoder", "decoder"):
            set_default(args, f"{side}_normalize_before", prenorm)
        set_default(args, "norm_type", norm_type)
        set_default(args, "fixnorm", fixnorm)
        set_default(args, "twt_init", "smallinit")
        set_default(args, "share_all_embeddings", True)
        set_default(args, "dropout", 0.3)
        set_default(args, "attention_dropout", args.dropout)
        set_default(args, "activation_dropout", args.dropout)
        family_arch(args)

    return arch


# Thesis system → arch: Table 6.3 rows (1)–(4), Table 6.6 and Table 6.7.
THESIS_PRESETS = {
    "transformer_twt_postnorm_layernorm": (False, "layernorm", False),            # (1)
    "transformer_twt_prenorm_layernorm": (True, "layernorm", False),              # (2)
    "transformer_twt_prenorm_fixnorm_layernorm": (True, "layernorm", True),       # (3)
    "transformer_twt_prenorm_fixnorm_scalenorm": (True, "scalenorm", True),       # (4), the final model
    "transformer_twt_postnorm_fixnorm_scalenorm": (False, "scalenorm", True),     # Table 6.6
    "transformer_twt_prenorm_fixnorm_rmsnorm": (True, "rmsnorm", True),           # Table 6.7
    "transformer_twt_prenorm_fixnorm_scalenorm_fixedg": (True, "scalenorm-fixed", True),  # Table 6.7
}
register_presets("transformer_twt", lambda *spec: thesis_preset(transformer_twt, *spec), THESIS_PRESETS)

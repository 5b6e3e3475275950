"""Dual Contextual Transformer — Ampomah, thesis ch. 5 / Ampomah et al., Machine Translation 2021.

Model ``transformer_dc``: fairseq's transformer in which the self-attention sublayer of the chosen
layers is replaced by the DC module (:class:`~fairseq_ext.modules.dual_contextual.DualContextual`,
Eqs. 5.4-5.7).  Encoder layer: ``z_f = DC(H_e^{l-1})``, ``H_e^l = LN(FFN(z_f) + z_f)``; decoder
layer: ``z_f = DC(H_d^{l-1})`` (causal), then the usual encoder-decoder attention and FFN.
Everything else (embeddings, FFNs, encoder-decoder attention, LayerNorm placement) is fairseq's.

Options: ``--dc-kernel-size f`` (default 2, §5.2 of the paper), ``--encoder-dc-layers`` /
``--decoder-dc-layers`` (``all``, ``none``, a range ``i-j`` or a list ``i,j``; 1-based),
``--dc-encoder-conv-padding same|left|right`` and ``--dc-fi-out-proj`` (an output projection in
each FI unit; not in the thesis — the parameter counts exclude it).

Architectures (thesis system -> arch) for ``wmt_en_de`` (base), ``iwslt_small`` and ``bench``
(the shapes of :mod:`fairseq_ext.modules.arch_utils`): Enc-DC ``transformer_dc_enc_*`` (DC in every
encoder layer; the thesis' recommended variant), Dec-DC ``transformer_dc_dec_*``, Full-DC
``transformer_dc_full_*`` (earlier ``transformer_{enc,dec,full}_dc_*``).  The encoder layer-range variants ``[i-j]`` of Table 5.6 are
``--arch transformer_dc_enc_wmt_en_de --encoder-dc-layers i-j``.

References: I. K. E. Ampomah, S. McClean, G. Hawe, "Dual contextual module for neural machine
translation", Machine Translation 35, 2021; and Ampomah's thesis (see :mod:`fairseq_ext.models.joint_attention`).
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from fairseq_ext.modules.arch_utils import SHAPES, parse_layer_set, register_shaped, set_default, wrap_layer
from fairseq_ext.modules.dual_contextual import AGG_INITS, PADDINGS, DualContextual
from fairseq_ext.data.errors import UserDataError


def _dc_module(embed_dim, heads, cfg, causal):
    return DualContextual(
        embed_dim, heads, kernel_size=int(cfg.dc_kernel_size), causal=causal,
        padding=cfg.dc_encoder_conv_padding,
        dropout=cfg.dropout if getattr(cfg, "dc_dropout", None) is None else float(cfg.dc_dropout),
        attention_dropout=cfg.attention_dropout, fi_out_proj=bool(cfg.dc_fi_out_proj),
        agg_init=getattr(cfg, "dc_agg_init", None) or "xavier")


class DCEncoderLayer(TransformerEncoderLayerBase):
    """fairseq encoder layer whose self-attention (with its residual + LN) is the DC module."""

    def build_self_attention(self, embed_dim, cfg):
        return _dc_module(embed_dim, cfg.encoder.attention_heads, cfg, causal=False)


class DCDecoderLayer(TransformerDecoderLayerBase):
    """fairseq decoder layer whose masked self-attention is the causal DC module."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if cfg.cross_self_attention or add_bias_kv or add_zero_attn:
            raise UserDataError("the DC module does not support cross-self-attention / bias_kv / zero_attn")
        return _dc_module(embed_dim, cfg.decoder.attention_heads, cfg, causal=True)


class DCEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        self.dc_layers = parse_layer_set(cfg.encoder_dc_layers, cfg.encoder.layers, "--encoder-dc-layers")
        self._next_layer = 0  # fairseq builds the layers in order; count them to place DC
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)

    def build_encoder_layer(self, cfg):
        self._next_layer += 1
        if self._next_layer in self.dc_layers:
            return wrap_layer(cfg, DCEncoderLayer(cfg, return_fc=self.return_fc))
        return super().build_encoder_layer(cfg)


class DCDecoder(TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.dc_layers = parse_layer_set(cfg.decoder_dc_layers, cfg.decoder.layers, "--decoder-dc-layers")
        self._next_layer = 0
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        self._next_layer += 1
        if self._next_layer in self.dc_layers:
            return wrap_layer(cfg, DCDecoderLayer(cfg, no_encoder_attn))
        return super().build_decoder_layer(cfg, no_encoder_attn)


@register_model("transformer_dc")
class TransformerDCModel(TransformerModel):
    """Transformer with Dual Contextual modules in place of self-attention (thesis ch. 5)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--dc-kernel-size", type=int, metavar="F",
                            help="kernel size f of the Local Context Unit convolution (Eq. 5.4; default 2)")
        parser.add_argument("--encoder-dc-layers", type=str, metavar="SPEC",
                            help="encoder layers with DC: all | none | i-j | i,j (1-based)")
        parser.add_argument("--decoder-dc-layers", type=str, metavar="SPEC",
                            help="decoder layers with (causal) DC: all | none | i-j | i,j (1-based)")
        parser.add_argument("--dc-encoder-conv-padding", choices=PADDINGS,
                            help="encoder conv window for even f: same (TF, [t, t+1] for f=2), "
                                 "left ([t-f+1, t]) or right ([t, t+f-1])")
        parser.add_argument("--dc-fi-out-proj", action="store_true",
                            help="output projection in each FI unit (not in the thesis)")
        parser.add_argument("--dc-dropout", type=float, metavar="P",
                            help="dropout on the convolution output inside the Local Context Unit "
                                 "(Eq. 5.4; default: --dropout)")
        parser.add_argument("--dc-agg-init", choices=AGG_INITS,
                            help="initialisation of the aggregation W_z (Eq. 5.7): xavier (default) or "
                                 "local-zero (the h_l half zero: the module starts as self-attention)")

    @classmethod
    def build_model(cls, args, task):
        dc_defaults(args)
        if int(args.dc_kernel_size) < 1:
            raise UserDataError("--dc-kernel-size must be >= 1")
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return DCEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return DCDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


def dc_defaults(args, encoder: str = "all", decoder: str = "none") -> None:
    set_default(args, "dc_kernel_size", 2)
    set_default(args, "encoder_dc_layers", encoder)
    set_default(args, "decoder_dc_layers", decoder)
    set_default(args, "dc_encoder_conv_padding", "same")
    set_default(args, "dc_fi_out_proj", False)
    set_default(args, "dc_dropout", None)
    set_default(args, "dc_agg_init", "xavier")


@register_model_architecture("transformer_dc", "transformer_dc")
def transformer_dc(args):
    """fairseq base dims; Enc-DC unless the layers are given."""
    dc_defaults(args)
    base_architecture(args)


PLACEMENTS = {"enc": ("all", "none"), "dec": ("none", "all"), "full": ("all", "all")}


def dc_arch(encoder, decoder):
    def arch(args):
        """A DC placement on fairseq's transformer."""
        dc_defaults(args, encoder, decoder)
        base_architecture(args)

    return arch


for _p, (_enc, _dec) in PLACEMENTS.items():  # transformer_{enc,dec,full}_dc_{bench,iwslt_small,wmt_en_de}
    register_shaped("transformer_dc", f"transformer_dc_{_p}", dc_arch(_enc, _dec), shapes=tuple(SHAPES))

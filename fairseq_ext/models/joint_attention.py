"""Joint Attention Strategies (JASs) over the top-n encoder layers — Ampomah, thesis ch. 3.

Model ``transformer_jas``: the fairseq transformer whose encoder also runs a *Source Feature
Collector* (Sec. 3.2, Fig. 3.1) exposing ``F^s = [f^1 .. f^n]``, the outputs of the top ``n``
encoder layers (``f^i = H_e^{L-n+i}``, ``f^n = H_e^L``; the embedding layer is not included), and

* **Layer Aggregation** (Sec. 3.2.1; ``--jas-strategy sagg|iter_sagg|cagg|iter_cagg``): one
  Merging Module (Eqs. 3.1-3.5, :class:`~fairseq_ext.modules.layer_aggregation.LayerAggregation`)
  computes ``H^a`` once per sentence inside the encoder; every decoder layer attends to ``H^a``
  instead of ``H_e^L`` (Eq. 2.11 with ``H_e^L -> H^a``), so the decoder is fairseq's, unchanged.
* **Multi-Layer Attention** (Sec. 3.2.2; ``--jas-strategy mlmha --mlmha-u0 U0 --mlmha-u1 U1``):
  MLMHA (Eqs. 3.6-3.11) replaces the encoder-decoder attention of every decoder layer; the encoder
  passes ``F^s`` in ``encoder_out["jas_features"]`` (``cat(F^s)`` along time, ``(n*J) x B x d``).

``--jas-top-n`` (alias ``--jas-num-layers``; default: all encoder layers) picks n. **n = 1 is the
fairseq transformer exactly**: no extra module is built, the state dict is the baseline's and the
outputs are identical.  ``--jas-mask-layers 1,3`` (1-based encoder layers) zeroes those ``f^i``
before aggregation / MLMHA — the inference-time ablation of Table 3.5, e.g.
``fairseq-generate ... --model-overrides "{'jas_mask_layers': '1,3'}"``; a masked layer outside the
top n changes nothing.  With PreNorm (``--encoder-normalize-before``) every exposed layer passes
through the encoder's final LayerNorm (shared, no new parameters), as ``H_e^L`` does.

Architectures (thesis system -> arch), each for ``wmt_en_de`` (base 6+6, 512/2048/8), ``iwslt_small``
(4+4, 256/1024/4) and ``bench`` (3+3, 256/1024/4, PreNorm; :mod:`fairseq_ext.modules.arch_utils`), all with
three-way tied embeddings: S-Agg ``transformer_jas_sagg_*``, Iter-S-Agg ``transformer_jas_iter_sagg_*``,
C-Agg ``transformer_jas_cagg_*``, Iter-C-Agg ``transformer_jas_iter_cagg_*``, M-00/01/10/11
``transformer_jas_m00_*`` ... ``transformer_jas_m11_*``.  Baselines on the ``transformer`` model:
``transformer_iwslt_small`` (the IWSLT "small" baseline, d_ff 1024), B1 ``transformer_wmt_en_de_ffn4096``
and B2 ``transformer_wmt_en_de_10l`` (Sec. 3.5.2 complexity controls).

Reference: I. K. E. Ampomah, "Sentence Representation Learning and Generation for Neural Machine
Translation", PhD thesis, Ulster University, 2020 (ch. 3-5 for this family and the ``transformer_ms``
and ``transformer_dc`` models).
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from fairseq_ext.modules.layer_aggregation import (
    STRATEGIES,
    LayerAggregation,
    MultiLayerMultiheadAttention,
)
from fairseq_ext.modules.arch_utils import (
    SHAPES, apply_shape, parse_layer_set, register_shaped, set_default, wrap_layer,
)
from fairseq_ext.data.errors import UserDataError

JAS_STRATEGIES = ("none",) + STRATEGIES + ("mlmha",)


class JASEncoder(TransformerEncoderBase):
    """fairseq's encoder + Source Feature Collector (Fig. 3.1) + Merging Module (Sec. 3.2.1).

    Output dict additions: ``encoder_out`` holds ``H^a`` for the Layer Aggregation strategies;
    ``jas_features`` holds ``[cat(f^1 .. f^n, dim=0)]`` for MLMHA (n > 1).
    """

    def __init__(self, cfg, dictionary, embed_tokens):
        super().__init__(cfg, dictionary, embed_tokens)
        self.jas_strategy = cfg.jas_strategy
        self.top_n = int(cfg.jas_top_n)
        assert 1 <= self.top_n <= self.num_layers
        self.mask_layers = parse_layer_set(cfg.jas_mask_layers, self.num_layers, "--jas-mask-layers")
        self.merge: Optional[LayerAggregation] = None
        if self.jas_strategy in STRATEGIES and self.top_n > 1:
            self.merge = LayerAggregation(
                self.jas_strategy, self.top_n, cfg.encoder.embed_dim, int(cfg.jas_agg_ffn_dim),
                dropout=cfg.dropout, activation_dropout=cfg.activation_dropout,
                sum_layernorm=bool(cfg.jas_sum_layernorm))
        self.expose_features = self.jas_strategy == "mlmha" and self.top_n > 1

    @property
    def collects(self) -> bool:
        return self.merge is not None or self.expose_features or bool(self.mask_layers)

    def source_features(self, encoder_out: Dict[str, List[Tensor]]) -> List[Tensor]:
        """Source Feature Collector: ``F^s = [f^1 .. f^n]``, masked layers zeroed (Table 3.5)."""
        n, L = self.top_n, self.num_layers
        states = encoder_out["encoder_states"]
        assert len(states) == L + 1, "the encoder must run with return_all_hiddens"
        feats = [s if self.layer_norm is None else self.layer_norm(s) for s in states[L - n + 1:L]]
        feats.append(encoder_out["encoder_out"][0])  # f^n = H_e^L (final LayerNorm included)
        for i in range(n):
            if L - n + 1 + i in self.mask_layers:
                feats[i] = torch.zeros_like(feats[i])
        return feats

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None,
                return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None):
        collect = self.collects
        out = super().forward(src_tokens, src_lengths, return_all_hiddens or collect, token_embeddings)
        if not collect:
            return out
        feats = self.source_features(out)
        if self.merge is not None:
            out["encoder_out"] = [self.merge(feats)]
        elif self.expose_features:
            out["jas_features"] = [torch.cat(feats, dim=0)]
        else:  # n = 1 with the top layer possibly masked
            out["encoder_out"] = [feats[-1]]
        if not return_all_hiddens:
            out["encoder_states"] = []
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        new = super().reorder_encoder_out(encoder_out, new_order)
        feats = encoder_out.get("jas_features", [])
        if len(feats) > 0:
            new["jas_features"] = [feats[0].index_select(1, new_order)]
        return new


class MLMHADecoderLayer(TransformerDecoderLayerBase):
    """Decoder layer of Eq. 3.6: fairseq's layer with MLMHA as its encoder-decoder attention."""

    def build_encoder_attention(self, embed_dim, cfg):
        return MultiLayerMultiheadAttention(
            embed_dim, cfg.decoder.attention_heads, int(cfg.jas_top_n), int(cfg.mlmha_u0),
            int(cfg.mlmha_u1), kdim=cfg.encoder.embed_dim, dropout=cfg.attention_dropout)


class JASDecoder(TransformerDecoderBase):
    """fairseq's decoder; with MLMHA (n > 1) every layer is an :class:`MLMHADecoderLayer` that
    attends to ``encoder_out["jas_features"]``."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.use_mlmha = cfg.jas_strategy == "mlmha" and int(cfg.jas_top_n) > 1
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        if not self.use_mlmha:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return wrap_layer(cfg, MLMHADecoderLayer(cfg, no_encoder_attn))

    def extract_features(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]],
                         incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        if self.use_mlmha and encoder_out is not None:
            feats = encoder_out.get("jas_features", [])
            assert len(feats) > 0, "MLMHA needs encoder_out['jas_features'] (a JASEncoder)"
            encoder_out = dict(encoder_out)
            encoder_out["encoder_out"] = feats
        return super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                        full_context_alignment, alignment_layer, alignment_heads)


@register_model("transformer_jas")
class TransformerJASModel(TransformerModel):
    """Transformer with a Joint Attention Strategy over the top-n encoder layers (thesis ch. 3)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        # no defaults here: the architecture functions set them (fairseq's legacy convention)
        parser.add_argument("--jas-strategy", choices=JAS_STRATEGIES,
                            help="Layer Aggregation (sagg, iter_sagg, cagg, iter_cagg; Eqs. 3.1-3.5), "
                                 "Multi-Layer Attention (mlmha; Eqs. 3.6-3.11) or none (baseline)")
        parser.add_argument("--jas-top-n", "--jas-num-layers", dest="jas_top_n", type=int, metavar="N",
                            help="expose the top N encoder layers (1..encoder layers; default all; "
                                 "1 = the baseline transformer)")
        parser.add_argument("--mlmha-u0", type=int, choices=(0, 1),
                            help="MLMHA switch U0: 0 joint attention weights softmax(sum_i alpha^i) "
                                 "(Eq. 3.9), 1 representation-specific softmax(alpha^i) (Eq. 3.8)")
        parser.add_argument("--mlmha-u1", type=int, choices=(0, 1),
                            help="MLMHA switch U1: 0 concatenate the n contexts, 1 sum them (Eq. 3.11)")
        parser.add_argument("--jas-agg-ffn-dim", type=int, metavar="F",
                            help="hidden width of the AGG unit FFN (Eq. 3.3; default encoder ffn dim)")
        parser.add_argument("--jas-sum-layernorm", action="store_true",
                            help="LayerNorm after each WS sum (not in the thesis; default off)")
        parser.add_argument("--jas-mask-layers", type=str, metavar="I,J",
                            help="zero these 1-based encoder layers' f^i before aggregation/MLMHA "
                                 "(inference ablation, Table 3.5; use with --model-overrides)")

    @classmethod
    def build_model(cls, args, task):
        jas_defaults(args)
        resolve_jas_args(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return JASEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return JASDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


def resolve_jas_args(args) -> None:
    """Fill n (default: all encoder layers; 1 for ``none``) and the AGG FFN width; validate."""
    L = int(args.encoder_layers)
    if args.jas_strategy == "none":
        args.jas_top_n = 1
    n = int(args.jas_top_n) if args.jas_top_n else L
    if not 1 <= n <= L:
        raise UserDataError(f"--jas-top-n {n} must be in 1..{L} (the number of encoder layers)")
    args.jas_top_n = n
    if not args.jas_agg_ffn_dim:
        args.jas_agg_ffn_dim = args.encoder_ffn_embed_dim
    parse_layer_set(args.jas_mask_layers, L, "--jas-mask-layers")


def jas_defaults(args, strategy: str = "mlmha", u0: int = 1, u1: int = 0) -> None:
    set_default(args, "jas_strategy", strategy)
    set_default(args, "jas_top_n", None)
    set_default(args, "mlmha_u0", u0)
    set_default(args, "mlmha_u1", u1)
    set_default(args, "jas_agg_ffn_dim", None)
    set_default(args, "jas_sum_layernorm", False)
    set_default(args, "jas_mask_layers", "")


# ---------------------------------------------------------------- baseline configurations


def wmt_en_de(args):
    """WMT "base" (Sec. 3.3.2): 6+6 layers, 512/2048/8, three-way tied embeddings."""
    apply_shape(args, "wmt_en_de")
    base_architecture(args)


@register_model_architecture("transformer", "transformer_iwslt_small")
def transformer_iwslt_small(args):
    """IWSLT "small" (Sec. 3.3.2, 4.3.2): 4+4 layers, d 256, d_ff 1024, 4 heads, shared embeddings."""
    apply_shape(args, "iwslt_small")
    base_architecture(args)


@register_model_architecture("transformer", "transformer_wmt_en_de_ffn4096")
def transformer_wmt_en_de_ffn4096(args):
    """B1 (Sec. 3.5.2): base with d_ff = 4096 (printed "4098")."""
    set_default(args, "encoder_ffn_embed_dim", 4096)
    wmt_en_de(args)


@register_model_architecture("transformer", "transformer_wmt_en_de_10l")
def transformer_wmt_en_de_10l(args):
    """B2 (Sec. 3.5.2): base with 10 encoder + 10 decoder layers."""
    set_default(args, "encoder_layers", 10)
    set_default(args, "decoder_layers", 10)
    wmt_en_de(args)


# ---------------------------------------------------------------- JAS architectures


@register_model_architecture("transformer_jas", "transformer_jas")
def transformer_jas(args):
    """fairseq base dims; strategy M-10 (the best WMT system of ch. 3) unless given."""
    jas_defaults(args)
    base_architecture(args)


VARIANTS = {  # arch suffix -> (strategy, U0, U1); thesis names in the docstring above
    "sagg": ("sagg", 1, 0), "iter_sagg": ("iter_sagg", 1, 0),
    "cagg": ("cagg", 1, 0), "iter_cagg": ("iter_cagg", 1, 0),
    "m00": ("mlmha", 0, 0), "m01": ("mlmha", 0, 1), "m10": ("mlmha", 1, 0), "m11": ("mlmha", 1, 1),
}


def jas_arch(strategy, u0, u1):
    def arch(args):
        """A JAS variant on fairseq's transformer."""
        jas_defaults(args, strategy, u0, u1)
        base_architecture(args)

    return arch


for _v, (_s, _u0, _u1) in VARIANTS.items():  # transformer_jas_{variant}_{bench,iwslt_small,wmt_en_de}
    register_shaped("transformer_jas", f"transformer_jas_{_v}", jas_arch(_s, _u0, _u1), shapes=tuple(SHAPES))

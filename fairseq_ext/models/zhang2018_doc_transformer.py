"""``transformer_zhang2018``: the document Transformer of Zhang et al. (2018), the online baseline of
Maruf (2019) ch. 4 (§4.8, footnote 17; details not in the thesis, our choice).

* A context encoder (``--ctx-encoder-layers``, default: as deep as the encoder) over the previous
  ``--ctx-prev-sentences`` (default 2) source sentences, their tokens concatenated, on the *original*
  embeddings (word + position, shared with the encoder).
* Gated context attention sub-layers (:class:`ContextSublayerMixin`: c = MultiHead(x, C, C), then
  x ← γ⊙x + (1−γ)⊙c with the gate of Eq. 4.6–4.7) in every encoder layer (``--ctx-integration encoder``)
  or every decoder layer (``decoder``).
* ``--freeze-sentence-params`` (default on: stage 2 trains only the new parameters).

Architectures: ``transformer_zhang2018`` at the size of Maruf's ch. 4 Transformer (4+4 layers,
512/2048/8, dropout 0.2; :func:`~fairseq_ext.modules.doc_transformer.maruf_sizes`) and
``transformer_zhang2018_bench`` (the bench shape of :mod:`fairseq_ext.modules.arch_utils`); the earlier
names ``zhang2018_doc_transformer[_bench]`` stay registered as aliases. Which sentences are the context
(offline / online) is decided by the dataset (``doc_translation``).

References: J. Zhang et al., "Improving the Transformer Translation Model with Document-Level Context",
EMNLP 2018; S. Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University, 2019
(ch. 4).
"""
import copy
from typing import Dict, List, Optional

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    base_architecture,
)
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor

from fairseq_ext.modules.arch_utils import register_shaped, set_default, wrap_layer
from fairseq_ext.modules.doc_attention import ContextGate
from fairseq_ext.modules.doc_transformer import CTX_INTEGRATIONS, DocTransformerModel, maruf_sizes
from fairseq_ext.modules.local_context import add_prev_sentences_arg


class ContextSublayerMixin:
    """Zhang et al. (2018)'s context attention sub-layer, inserted into a fairseq layer right after its
    self-attention block: c = MultiHead(x, C, C) over the context encoder's output C, then the gate
    x ← γ⊙x + (1−γ)⊙c, γ = σ(W_x x + W_c c) (bias-free, as ``_residual_gating_fn`` of the authors'
    THUMT code) in place of the residual connection, with its own LayerNorm (PostNorm: after the gate;
    PreNorm: on the query). Placed through fairseq's hooks, without copying its layer: PreNorm after
    the first ``residual_connection`` of a forward, PostNorm after ``self_attn_layer_norm``.
    ``ctx_memory`` = (C: Lc×B×C, padding mask B×Lc) is set by the encoder/decoder around each forward."""

    def build_context_sublayer(self, embed_dim: int, num_heads: int, attention_dropout: float):
        from fairseq.modules import LayerNorm, MultiheadAttention

        self.ctx_attn = MultiheadAttention(embed_dim, num_heads, dropout=attention_dropout,
                                           encoder_decoder_attention=True)
        self.ctx_gate = ContextGate(embed_dim)
        self.ctx_layer_norm = LayerNorm(embed_dim)
        self.ctx_memory = None
        self.ctx_incremental_state = None
        self.residuals_seen = 0
        if not self.normalize_before:
            # a bound method, not a closure: copy.deepcopy (int8 quantisation, EMA) rebinds it to the copy
            self.self_attn_layer_norm.register_forward_hook(self._after_self_attn_layer_norm)

    def _after_self_attn_layer_norm(self, module, inputs, output):
        return self.context_sublayer(output)

    def context_sublayer(self, x: Tensor) -> Tensor:
        if self.ctx_memory is None:
            return x
        memory, padding_mask = self.ctx_memory
        q = self.ctx_layer_norm(x) if self.normalize_before else x
        c, _ = self.ctx_attn(query=q, key=memory, value=memory, key_padding_mask=padding_mask,
                             incremental_state=self.ctx_incremental_state, static_kv=True,
                             need_weights=False)
        x = self.ctx_gate(x, c)
        return x if self.normalize_before else self.ctx_layer_norm(x)

    def residual_connection(self, x, residual):
        out = super().residual_connection(x, residual)
        self.residuals_seen += 1
        if self.residuals_seen == 1 and self.normalize_before:  # the self-attention block's residual
            out = self.context_sublayer(out)
        return out


class ZhangEncoderLayer(ContextSublayerMixin, TransformerEncoderLayerBase):
    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        self.build_context_sublayer(cfg.encoder.embed_dim, cfg.encoder.attention_heads,
                                    cfg.attention_dropout)

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        self.residuals_seen = 0
        return super().forward(x, encoder_padding_mask, attn_mask)


class ZhangDecoderLayer(ContextSublayerMixin, TransformerDecoderLayerBase):
    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        self.build_context_sublayer(cfg.decoder.embed_dim, cfg.decoder.attention_heads,
                                    cfg.attention_dropout)

    def forward(self, x, encoder_out=None, encoder_padding_mask=None, incremental_state=None, *args,
                **kwargs):
        self.residuals_seen = 0
        self.ctx_incremental_state = incremental_state
        try:
            return super().forward(x, encoder_out, encoder_padding_mask, incremental_state, *args, **kwargs)
        finally:
            self.ctx_incremental_state = None


def set_context_memory(layers, memory) -> None:
    for layer in layers:
        if isinstance(layer, ContextSublayerMixin):
            layer.ctx_memory = memory


class ZhangEncoder(TransformerEncoderBase):
    """fairseq's encoder + the context encoder over the previous ``--ctx-prev-sentences`` source
    sentences (their tokens concatenated, each with its EOS; a sentence without any gets a lone EOS),
    sharing the word and position embeddings; with ``--ctx-integration encoder`` every encoder layer
    has a gated context attention sub-layer."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        self.ctx_integration = cfg.ctx_integration
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        ctx_cfg = copy.deepcopy(cfg)
        ctx_cfg.encoder.layers = cfg.ctx_encoder_layers
        self.ctx_encoder = TransformerEncoderBase(ctx_cfg, dictionary, embed_tokens)
        if self.embed_positions is not None:
            self.ctx_encoder.embed_positions = self.embed_positions  # shared (learned or sinusoidal)
        self.ctx_prev_sentences = cfg.ctx_prev_sentences

    def build_encoder_layer(self, cfg):
        if self.ctx_integration == "encoder":
            return wrap_layer(cfg, ZhangEncoderLayer(cfg, return_fc=self.return_fc))
        return super().build_encoder_layer(cfg)

    def previous_sentences(self, src_tokens, ctx_src_tokens, ctx_index, ctx_distance) -> Tensor:
        """B×Lc left-padded context input: the sentences at distance −n..−1 (from ``ctx_index`` /
        ``ctx_distance``), in document order, truncated from the left to the maximum source length."""
        from fairseq.data import data_utils

        pad, eos = self.padding_idx, self.dictionary.eos()
        B = src_tokens.size(0)
        rows = []
        for b in range(B):
            picked = []
            if ctx_index is not None and ctx_distance is not None:
                for r, d in zip(ctx_index[b].tolist(), ctx_distance[b].tolist()):
                    if r >= 0 and -self.ctx_prev_sentences <= d < 0:
                        picked.append((d, r))
            parts = []
            for _, r in sorted(picked):
                t = src_tokens[r] if r < B else ctx_src_tokens[r - B]
                parts.append(t[t.ne(pad)])
            seq = torch.cat(parts) if parts else src_tokens.new_full((1,), eos)
            rows.append(seq[-self.max_source_positions:])
        return data_utils.collate_tokens(rows, pad, eos, left_pad=True)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, ctx_src_tokens: Optional[Tensor] = None,
                ctx_index: Optional[Tensor] = None, ctx_distance: Optional[Tensor] = None, **unused):
        ctx_tokens = self.previous_sentences(src_tokens, ctx_src_tokens, ctx_index, ctx_distance)
        ctx = self.ctx_encoder(ctx_tokens, ctx_tokens.ne(self.padding_idx).sum(1))
        memory = (ctx["encoder_out"][0], ctx["encoder_padding_mask"][0])
        set_context_memory(self.layers, memory)
        try:
            out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        finally:
            set_context_memory(self.layers, None)
        if self.ctx_integration == "decoder":  # the decoder's memory; an encoder-side one is not carried (nor reordered)
            out["ctx_encoder_out"] = [memory[0]]
            out["ctx_encoder_padding_mask"] = [memory[1]]
        return out

    @torch.jit.export
    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        out = super().reorder_encoder_out(encoder_out, new_order)
        if "ctx_encoder_out" in encoder_out:
            out["ctx_encoder_out"] = [encoder_out["ctx_encoder_out"][0].index_select(1, new_order)]
            out["ctx_encoder_padding_mask"] = [
                encoder_out["ctx_encoder_padding_mask"][0].index_select(0, new_order)]
        return out


class ZhangDecoder(TransformerDecoderBase):
    """fairseq's decoder; with ``--ctx-integration decoder`` every layer has a gated context attention
    sub-layer between its self-attention and its source attention (the context keys/values are cached
    in the incremental state by fairseq's MultiheadAttention, ``static_kv``)."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.ctx_integration = cfg.ctx_integration
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        if self.ctx_integration == "decoder":
            return wrap_layer(cfg, ZhangDecoderLayer(cfg, no_encoder_attn))
        return super().build_decoder_layer(cfg, no_encoder_attn)

    def output_layer(self, features):
        """fairseq's output projection on the B×T×C ``features`` folded into (B·T)×C: the frozen projection
        (``--freeze-sentence-params``) is then one GEMM, as a trainable one is (torch's ``matmul`` copies a
        frozen weight once per sentence and runs a ``bmm`` instead: the projection onto the vocabulary dominated
        decoding). The numbers are those of the same weight when trainable."""
        if features.dim() != 3:
            return super().output_layer(features)
        B, T, C = features.shape
        return super().output_layer(features.reshape(B * T, C)).view(B, T, -1)

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None,
                         full_context_alignment=False, alignment_layer=None, alignment_heads=None):
        if self.ctx_integration == "decoder" and encoder_out is not None and "ctx_encoder_out" in encoder_out:
            set_context_memory(self.layers, (encoder_out["ctx_encoder_out"][0],
                                             encoder_out["ctx_encoder_padding_mask"][0]))
        try:
            return self.extract_features_scriptable(prev_output_tokens, encoder_out, incremental_state,
                                                    full_context_alignment, alignment_layer,
                                                    alignment_heads)
        finally:
            set_context_memory(self.layers, None)


@register_model("transformer_zhang2018")
class Zhang2018DocTransformerModel(DocTransformerModel):
    """The Zhang et al. (2018) document Transformer, the online baseline of Maruf (2019) ch. 4 (§4.8,
    footnote 17; details not in the thesis, our choice): a context encoder (``--ctx-encoder-layers``,
    default: as deep as the encoder) over the two previous source sentences, on the *original*
    embeddings (word + position, shared with the encoder); gated context attention sub-layers in every
    encoder layer (``--ctx-integration encoder``) or every decoder layer (``decoder``);
    ``--freeze-sentence-params`` (default on: stage 2 trains only the new parameters).

    Size: Table 4.5 gives 59.5M for this baseline vs 50M for the Transformer. At d = 512 a context
    encoder layer is 3.15M and the context sub-layers of 4 layers 6.3M, so ``--ctx-encoder-layers 1``
    gives 59.4M (the Table's count) and the default 4 layers 68.8M."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--ctx-integration", choices=CTX_INTEGRATIONS,
                            help="context attention sub-layers in every encoder or every decoder layer")
        parser.add_argument("--ctx-encoder-layers", type=int, metavar="N",
                            help="layers of the context encoder (default: --encoder-layers)")
        add_prev_sentences_arg(parser, 2)
        parser.add_argument("--freeze-sentence-params", dest="freeze_sentence_params",
                            action="store_true", default=None,
                            help="train only the document parameters (stage 2 of Zhang et al.; default)")
        parser.add_argument("--no-freeze-sentence-params", dest="freeze_sentence_params",
                            action="store_false", help="train all parameters")

    @classmethod
    def build_model(cls, args, task):
        zhang2018_doc_transformer(args)
        model = super().build_model(args, task)
        if args.freeze_sentence_params:
            model.freeze_sentence_parameters()
        return model

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        side = "encoder" if args.ctx_integration == "encoder" else "decoder"
        layers = args.encoder_layers if side == "encoder" else args.decoder_layers
        self.DOC_PARAM_PREFIXES = ("encoder.ctx_encoder.",) + tuple(
            f"{side}.layers.{i}.ctx_" for i in range(layers))

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return ZhangEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return ZhangDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    def freeze_sentence_parameters(self):
        for name, p in self.named_parameters():
            if not self.is_doc_key(name):
                p.requires_grad_(False)

    def new_parameter_count(self) -> int:
        return sum(p.numel() for n, p in self.named_parameters() if self.is_doc_key(n))


def zhang2018_defaults(args):
    """Context encoder as deep as the encoder, two previous sentences, encoder integration, sentence
    parameters frozen."""
    set_default(args, "ctx_integration", "encoder")
    set_default(args, "ctx_prev_sentences", 2)
    set_default(args, "freeze_sentence_params", True)
    base_architecture(args)
    set_default(args, "ctx_encoder_layers", args.encoder_layers)


@register_model_architecture("transformer_zhang2018", "transformer_zhang2018")
def zhang2018_doc_transformer(args):
    """Zhang et al. (2018) at the size of Maruf's ch. 4 Transformer (4+4, 512/2048/8, dropout 0.2)."""
    maruf_sizes(args, 0.2)
    zhang2018_defaults(args)


register_shaped("transformer_zhang2018", "transformer_zhang2018", zhang2018_defaults)

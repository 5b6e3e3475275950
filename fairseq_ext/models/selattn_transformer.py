"""``transformer_selattn``: the context-aware Transformer of Maruf (2019) ch. 4 — hierarchical selective
attention — and the ``transformer_maruf_base`` sentence model it is warm-started from.

The sentence model is fairseq's :class:`~fairseq.models.transformer.TransformerModel`, unchanged. One
Document-level Context Layer (§4.3.1, :class:`~fairseq_ext.modules.doc_attention.DocContextLayer`) and a
context gate (Eqs. 4.6-4.7) are added to the encoder or the decoder (footnote 8):

* ``--ctx-integration encoder`` (monolingual context, Fig. 4.3) or ``decoder`` (bilingual context,
  Fig. 4.4; needs ``--doc-target-context gold|generated``);
* ``--doc-attn hierarchical|sentence|word`` (Eqs. 4.2-4.4 / 4.5), ``--word-norm softmax|sparsemax``;
* ``--ctx-rep-model pretrained`` (context from a frozen copy of the sentence model, filled at the warm
  start, :mod:`fairseq_ext.modules.warm_start`) or ``current``;
* ``--empty-context zero|identity``: what a sentence without context gets;
* ``--ctx-rep-cache-mb``: with ``pretrained``, each context sentence's encoding by the frozen copy (with
  ``decoder``: also the frozen decoder's features of its translation) is kept across batches and epochs
  (:mod:`fairseq_ext.modules.frozen_encodings`; the frozen copy never drops out, so the kept value is the one it
  would compute again).

Which sentences are the context is decided by the dataset (``doc_translation``).

Architectures (Tables 4.2-4.5): ``transformer_selattn_{enc,dec}_{sent,word,hier_sparsesoft,hier_sparsesparse}``
at the thesis size, each also ``..._bench``; ``transformer_maruf_base`` (+ ``_bench``) is the stage-1
sentence model. The Zhang et al. (2018) baseline is :mod:`fairseq_ext.models.zhang2018_doc_transformer`.
Old names stay registered as aliases (``arch_utils.ARCH_ALIASES``). ``new_parameter_count`` gives the
parameter overhead of Table 4.5.

References: S. Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University, 2019
(ch. 4); S. Maruf, A. F. T. Martins and G. Haffari, "Selective Attention for Context-aware Neural
Machine Translation", NAACL 2019.
"""
import copy
import logging
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    base_architecture,
)
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import Tensor

from fairseq_ext.modules.arch_utils import register_presets, register_shaped, set_default, wrap_layer
from fairseq_ext.modules.doc_attention import (
    DOC_ATTENTION_TYPES,
    WORD_NORMS,
    ContextGate,
    DocContext,
    DocContextLayer,
    left_pad_merge,
    reorder_prepared,
    word_mask_of,
)
from fairseq_ext.modules.doc_transformer import CTX_INTEGRATIONS, DocTransformerModel, maruf_sizes
from fairseq_ext.modules.frozen_encodings import FrozenEncodingCache, decoder_inputs
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

CTX_REP_MODELS = ("pretrained", "current")
EMPTY_CONTEXT = ("zero", "identity")
CTX_REP_CACHE_MB = 512.0
CTX_KEYS = ("ctx_src_tokens", "ctx_src_lengths", "ctx_index", "ctx_distance", "ctx_tgt_tokens",
            "ctx_tgt_lengths")
# state-dict prefixes of the document-only modules (warm start; module names below)
SELATTN_DOC_PREFIXES = ("encoder.ctx_layer.", "encoder.ctx_gate.", "encoder.ctx_rep_",
                        "decoder.ctx_layer.", "decoder.ctx_gate.", "decoder.ctx_rep_")
DOC_MODULES = ("ctx_layer.", "ctx_gate.", "ctx_rep_")


# ----------------------------------------------------------------------------- helpers
def freeze_(module: nn.Module) -> nn.Module:
    """No gradients, eval mode, own incremental-state ids (a copy must not share its original's)."""
    for p in module.parameters():
        p.requires_grad_(False)
    for m in module.modules():
        if hasattr(m, "init_incremental_state"):
            m.init_incremental_state()
    return module.eval()


def copy_sentence_state_(src: nn.Module, dst: nn.Module) -> int:
    """Load ``src``'s sentence tensors (not its document-only modules) into ``dst``; every tensor of
    ``dst`` must be filled. Returns the number of tensors copied."""
    state = {k: v for k, v in src.state_dict().items() if not k.startswith(DOC_MODULES)}
    missing, _ = dst.load_state_dict(state, strict=False)
    if missing:
        raise RuntimeError(f"frozen sentence copy: no source for {missing}")
    return len(state)


def empty_index(src_tokens: Tensor) -> Tensor:
    return src_tokens.new_zeros(src_tokens.size(0), 0)


class SourceAttentionTapDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer that keeps the output of its source-attention sub-layer
    (``source_attn_out``, T×B×C): the residual of the FFN block, i.e. the post-residual,
    post-LayerNorm Y_MHsrc under PostNorm and the post-residual sum under PreNorm. No parameters of its
    own."""

    source_attn_out: Optional[Tensor] = None

    def residual_connection(self, x, residual):
        self.source_attn_out = residual  # the last call of a forward is the FFN's: residual = Y_MHsrc
        return super().residual_connection(x, residual)


class TapDecoder(TransformerDecoderBase):
    """fairseq's decoder whose last layer is a :class:`SourceAttentionTapDecoderLayer` (same parameters
    and outputs as fairseq's)."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        self._layers_built += 1
        if self._layers_built == cfg.decoder.layers and not no_encoder_attn:
            return wrap_layer(cfg, SourceAttentionTapDecoderLayer(cfg, no_encoder_attn))
        return super().build_decoder_layer(cfg, no_encoder_attn)

    def last_source_attention(self) -> Tensor:
        """B×T×C source-attention outputs of the last layer in the latest forward (then forgotten)."""
        layer = self.layers[-1]
        out, layer.source_attn_out = layer.source_attn_out, None
        return out.transpose(0, 1)

    def sentence_features(self, prev_output_tokens, encoder_out):
        """Teacher-forced features of the plain sentence decoder: (final outputs, last-layer
        source-attention outputs), both B×T×C."""
        x, _ = TransformerDecoderBase.extract_features_scriptable(self, prev_output_tokens, encoder_out)
        return x, self.last_source_attention()


def context_args(cfg, side: str) -> dict:
    """DocContextLayer keyword arguments from the model config (``side``: encoder or decoder)."""
    sub = getattr(cfg, side)
    return dict(embed_dim=sub.embed_dim, ffn_embed_dim=cfg.ctx_ffn_embed_dim or sub.ffn_embed_dim,
                num_heads=cfg.ctx_attention_heads or sub.attention_heads, doc_attn=cfg.doc_attn,
                word_norm=cfg.word_norm, dropout=cfg.ctx_dropout,
                attention_dropout=cfg.ctx_attention_dropout,
                activation_dropout=cfg.ctx_activation_dropout,
                activation_fn=getattr(cfg, "activation_fn", "relu") or "relu")


def gate_(gate: ContextGate, r: Tensor, c: Optional[Tensor], has_ctx: Optional[Tensor],
          empty_context: str) -> Tensor:
    """Eq. 4.7 on B×T×C ``r`` (``c`` None = no context anywhere: a zero vector)."""
    if c is None:
        if empty_context == "identity":
            return r
        c = torch.zeros_like(r)
    out = gate(r, c)
    if empty_context == "identity" and has_ctx is not None:
        out = torch.where(has_ctx[:, None, None], out, r)
    return out


# ----------------------------------------------------------------------------- encoder and decoder
class SelAttnEncoder(TransformerEncoderBase):
    """fairseq's encoder; with ``--ctx-integration encoder`` the context layer and gate follow it, with
    ``decoder`` it hands the sentence set's encodings to the decoder (in ``encoder_out``)."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.ctx_integration = cfg.ctx_integration
        self.ctx_rep_model = cfg.ctx_rep_model
        self.empty_context = cfg.empty_context
        if self.ctx_integration == "encoder":
            self.ctx_layer = DocContextLayer(**context_args(cfg, "encoder"))
            self.ctx_gate = ContextGate(cfg.encoder.embed_dim)
        self.ctx_rep_encoder: Optional[TransformerEncoderBase] = None
        self.ctx_rep_cache = FrozenEncodingCache(getattr(cfg, "ctx_rep_cache_mb", CTX_REP_CACHE_MB))
        self._warned_unfilled = False

    def train(self, mode: bool = True):
        super().train(mode)
        if self.ctx_rep_encoder is not None:
            self.ctx_rep_encoder.eval()  # the frozen sentence encoder never drops out
        return self

    def attach_frozen_copy(self):
        """The frozen sentence encoder of ``--ctx-rep-model pretrained`` (own embedding copy)."""
        self.ctx_rep_encoder = TransformerEncoderBase(self.cfg, self.dictionary,
                                                      copy.deepcopy(self.embed_tokens))
        self.register_buffer("ctx_rep_filled", torch.zeros(1, dtype=torch.bool))
        self.refresh_frozen_copy(filled=False)

    def refresh_frozen_copy(self, filled: bool = True):
        copy_sentence_state_(self, self.ctx_rep_encoder)
        freeze_(self.ctx_rep_encoder)
        self.ctx_rep_filled.fill_(filled)
        self.ctx_rep_cache.clear()

    def sentence_set(self, encoder_out, src_tokens, ctx_src_tokens, ctx_src_lengths):
        """Encodings of the N-set (batch rows, then the extra rows): (N×L×C batch-first states,
        N×L padding mask, N×L tokens), without gradients."""
        if ctx_src_tokens is None:
            ctx_src_tokens = src_tokens.new_full((0, 1), self.padding_idx)
        if ctx_src_lengths is None:
            ctx_src_lengths = ctx_src_tokens.ne(self.padding_idx).sum(1)
        with torch.no_grad():
            if self.ctx_rep_encoder is not None:
                if self.training and not bool(self.ctx_rep_filled) and not self._warned_unfilled:
                    logger.warning("--ctx-rep-model pretrained: the frozen sentence encoder was never "
                                   "filled from a sentence checkpoint (use --finetune-from-model)")
                    self._warned_unfilled = True
                tokens = self.merge_tokens(src_tokens, ctx_src_tokens)
                states, pad_mask = self.ctx_rep_cache.encode(self.ctx_rep_encoder, tokens, self.padding_idx)
                return states, pad_mask, tokens
            batch = encoder_out["encoder_out"][0].detach().transpose(0, 1)
            batch_pad = encoder_out["encoder_padding_mask"][0]
            if ctx_src_tokens.size(0) == 0:
                return batch, batch_pad, src_tokens
            extra = TransformerEncoderBase.forward(self, ctx_src_tokens, ctx_src_lengths)
            states, pad_mask = left_pad_merge(batch, batch_pad, extra["encoder_out"][0].transpose(0, 1),
                                              extra["encoder_padding_mask"][0])
            return states, pad_mask, self.merge_tokens(src_tokens, ctx_src_tokens)

    def merge_tokens(self, src_tokens: Tensor, ctx_src_tokens: Tensor) -> Tensor:
        """The N-set's left-padded token matrix."""
        L = max(src_tokens.size(1), ctx_src_tokens.size(1))

        def pad(t):
            return torch.cat([t.new_full((t.size(0), L - t.size(1)), self.padding_idx), t], 1)

        return torch.cat([pad(src_tokens), pad(ctx_src_tokens)], 0)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, ctx_src_tokens: Optional[Tensor] = None,
                ctx_src_lengths: Optional[Tensor] = None, ctx_index: Optional[Tensor] = None,
                ctx_tgt_tokens: Optional[Tensor] = None, ctx_tgt_lengths: Optional[Tensor] = None,
                ctx_distance: Optional[Tensor] = None, **unused):
        out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        if ctx_index is None:
            ctx_index = empty_index(src_tokens)
        has_context = ctx_index.size(1) > 0 and bool(ctx_index.ge(0).any())
        if self.ctx_integration == "encoder":
            r = out["encoder_out"][0].transpose(0, 1)
            c = has_ctx = None
            if has_context:
                states, pad_mask, tokens = self.sentence_set(out, src_tokens, ctx_src_tokens,
                                                             ctx_src_lengths)
                prepared = self.ctx_layer.prepare(
                    DocContext(states, word_mask_of(tokens, self.dictionary) & ~pad_mask, ctx_index))
                c, _ = self.ctx_layer(r, prepared)
                has_ctx = prepared["sent_mask"].any(-1)
            out["encoder_out"] = [gate_(self.ctx_gate, r, c, has_ctx, self.empty_context).transpose(0, 1)]
            return out
        out["ctx_index"] = [ctx_index]
        if has_context:
            if ctx_tgt_tokens is None:
                raise UserDataError("--ctx-integration decoder needs the target side of the context "
                                 "(ctx_tgt_tokens: doc_translation --doc-target-context gold|generated)")
            states, pad_mask, tokens = self.sentence_set(out, src_tokens, ctx_src_tokens, ctx_src_lengths)
            out["ctx_nset_out"] = [states.transpose(0, 1)]  # L x N x C
            out["ctx_nset_tokens"] = [tokens]
            out["ctx_nset_padding_mask"] = [pad_mask]
            out["ctx_tgt_tokens"] = [ctx_tgt_tokens]
        return out

    @torch.jit.export
    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        """fairseq's reorder; ``ctx_index`` follows the batch, the sentence-set tensors (indexed by
        N-set row) stay as they are."""
        out = super().reorder_encoder_out(encoder_out, new_order)
        if "ctx_index" in encoder_out:
            out["ctx_index"] = [encoder_out["ctx_index"][0].index_select(0, new_order)]
        for key in ("ctx_nset_out", "ctx_nset_padding_mask", "ctx_nset_tokens", "ctx_tgt_tokens"):
            if key in encoder_out:
                out[key] = encoder_out[key]
        return out


class SelAttnDecoder(TapDecoder):
    """fairseq's decoder; with ``--ctx-integration decoder`` the context layer reads the context
    translations and the gate acts on the final decoder output (Fig. 4.4)."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.ctx_integration = cfg.ctx_integration
        self.empty_context = cfg.empty_context
        if self.ctx_integration == "decoder":
            self.ctx_layer = DocContextLayer(**context_args(cfg, "decoder"))
            self.ctx_gate = ContextGate(cfg.decoder.embed_dim)
        self.ctx_rep_decoder: Optional[TapDecoder] = None
        self.ctx_rep_cache = FrozenEncodingCache(getattr(cfg, "ctx_rep_cache_mb", CTX_REP_CACHE_MB))

    def train(self, mode: bool = True):
        super().train(mode)
        if self.ctx_rep_decoder is not None:
            self.ctx_rep_decoder.eval()
        return self

    def attach_frozen_copy(self, embed_tokens: nn.Module, encoder: Optional[nn.Module] = None):
        """The frozen sentence decoder of ``--ctx-rep-model pretrained`` (only its features are used;
        it keeps fairseq's output projection so that it is a complete sentence decoder); ``encoder``: the frozen
        encoder whose states it reads (its features are cached while both stay as they are)."""
        self.ctx_rep_decoder = TapDecoder(self.cfg, self.dictionary, embed_tokens)
        self.ctx_rep_cache.watch = [encoder] if encoder is not None else []
        self.refresh_frozen_copy()

    def refresh_frozen_copy(self):
        copy_sentence_state_(self, self.ctx_rep_decoder)
        freeze_(self.ctx_rep_decoder)
        self.ctx_rep_cache.clear()

    def context_memory(self, encoder_out) -> Optional[Dict[str, Tensor]]:
        """Project and gather the context translations' keys/values (None: no context)."""
        if "ctx_nset_out" not in encoder_out:
            return None
        targets = encoder_out["ctx_tgt_tokens"][0]
        prev = decoder_inputs(targets, self.padding_idx, self.dictionary.eos())
        nset_out = {"encoder_out": encoder_out["ctx_nset_out"],
                    "encoder_padding_mask": encoder_out["ctx_nset_padding_mask"]}
        with torch.no_grad():
            if self.ctx_rep_decoder is None:
                values, keys = self.sentence_features(prev, nset_out)
            else:
                values, keys = self.ctx_rep_cache.features(self.ctx_rep_decoder, prev, nset_out,
                                                           encoder_out["ctx_nset_tokens"][0], self.padding_idx)
        ctx = DocContext(keys, word_mask_of(prev, self.dictionary), encoder_out["ctx_index"][0], values)
        return self.ctx_layer.prepare(ctx)

    def extract_features(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]],
                         incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        x, extra = self.extract_features_scriptable(prev_output_tokens, encoder_out, incremental_state,
                                                    full_context_alignment, alignment_layer,
                                                    alignment_heads)
        if self.ctx_integration != "decoder":
            return x, extra
        query = self.last_source_attention()
        prepared = self.get_incremental_state(incremental_state, "doc_ctx")
        if prepared is None and encoder_out is not None:
            prepared = self.context_memory(encoder_out)
            if prepared is not None:
                self.set_incremental_state(incremental_state, "doc_ctx", prepared)
        c = has_ctx = None
        if prepared is not None:
            c, _ = self.ctx_layer(query, prepared)
            has_ctx = prepared["sent_mask"].any(-1)
        return gate_(self.ctx_gate, x, c, has_ctx, self.empty_context), extra

    def reorder_incremental_state(self, incremental_state, new_order):
        prepared = self.get_incremental_state(incremental_state, "doc_ctx")
        if prepared is not None:
            self.set_incremental_state(incremental_state, "doc_ctx", reorder_prepared(prepared, new_order))


@register_model("transformer_selattn")
class SelAttnTransformerModel(DocTransformerModel):
    """Transformer + Document-level Context Layer + context gate (Maruf 2019 ch. 4; module doc)."""

    DOC_PARAM_PREFIXES = SELATTN_DOC_PREFIXES

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--ctx-integration", choices=CTX_INTEGRATIONS,
                            help="where the context enters: encoder (source context, Fig. 4.3) or "
                                 "decoder (bilingual context, Fig. 4.4; needs ctx_tgt_tokens)")
        parser.add_argument("--doc-attn", choices=DOC_ATTENTION_TYPES,
                            help="context attention: hierarchical (Eq. 4.2-4.4), sentence or word "
                                 "(flat softmax, Eq. 4.5)")
        parser.add_argument("--word-norm", choices=WORD_NORMS,
                            help="word level of the hierarchical attention: softmax (sparse-soft) or "
                                 "sparsemax (sparse-sparse); the sentence level is always sparsemax")
        parser.add_argument("--ctx-rep-model", choices=CTX_REP_MODELS,
                            help="context keys/values from a frozen copy of the warm-starting sentence "
                                 "model (pretrained, the thesis) or from the model itself, detached "
                                 "(current)")
        parser.add_argument("--empty-context", choices=EMPTY_CONTEXT,
                            help="a sentence without context: zero context vector through the gate "
                                 "(zero, default) or the sentence model's output unchanged (identity)")
        parser.add_argument("--ctx-rep-cache-mb", type=float, metavar="MB",
                            help="--ctx-rep-model pretrained: keep each sentence's encoding by the frozen "
                                 "sentence encoder (decoder integration: also the frozen decoder's features of "
                                 "its translation) across batches and epochs, up to MB megabytes per side "
                                 f"(default {CTX_REP_CACHE_MB:g}; 0 = encode every batch's context again)")
        parser.add_argument("--ctx-dropout", type=float, metavar="D",
                            help="dropout of the context layer's sub-layer outputs (default --dropout)")
        parser.add_argument("--ctx-attention-dropout", type=float, metavar="D",
                            help="dropout on the context attention weights (default --attention-dropout)")
        parser.add_argument("--ctx-activation-dropout", type=float, metavar="D",
                            help="dropout after the context FFN's activation (default "
                                 "--activation-dropout)")
        parser.add_argument("--ctx-ffn-embed-dim", type=int, metavar="N",
                            help="context FFN inner size (default: that of the integrating side)")
        parser.add_argument("--ctx-attention-heads", type=int, metavar="N",
                            help="context attention heads (default: that of the integrating side)")

    @classmethod
    def build_model(cls, args, task):
        selattn_transformer(args)  # fills what an older checkpoint lacks
        model = super().build_model(args, task)
        if args.ctx_rep_model == "pretrained":
            model.attach_frozen_sentence_model()
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return SelAttnEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return SelAttnDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    def attach_frozen_sentence_model(self):
        self.encoder.attach_frozen_copy()
        if self.encoder.ctx_integration == "decoder":
            shared = self.decoder.embed_tokens is self.encoder.embed_tokens
            emb = (self.encoder.ctx_rep_encoder.embed_tokens if shared
                   else copy.deepcopy(self.decoder.embed_tokens))
            self.decoder.attach_frozen_copy(emb, self.encoder.ctx_rep_encoder)

    def after_sentence_warm_start(self):
        """Fill the frozen sentence copy (``--ctx-rep-model pretrained``) with the loaded weights."""
        if self.encoder.ctx_rep_encoder is not None:
            self.encoder.refresh_frozen_copy()
        if self.decoder.ctx_rep_decoder is not None:
            self.decoder.refresh_frozen_copy()

    def new_parameter_count(self, trainable_only: bool = True) -> int:
        """Parameters of the document-only modules (by default without the frozen copies)."""
        return sum(p.numel() for n, p in self.named_parameters()
                   if self.is_doc_key(n) and (p.requires_grad or not trainable_only))


def selattn_transformer(args):
    """fairseq's ``transformer`` defaults + hierarchical sparse-soft attention in the encoder, context
    vectors from the frozen pre-trained sentence model, zero context vector when there is none."""
    set_default(args, "ctx_integration", "encoder")
    set_default(args, "doc_attn", "hierarchical")
    set_default(args, "word_norm", "softmax")
    set_default(args, "ctx_rep_model", "pretrained")
    set_default(args, "empty_context", "zero")
    set_default(args, "ctx_rep_cache_mb", CTX_REP_CACHE_MB)
    set_default(args, "ctx_ffn_embed_dim", None)
    set_default(args, "ctx_attention_heads", None)
    base_architecture(args)
    set_default(args, "ctx_dropout", args.dropout)
    set_default(args, "ctx_attention_dropout", args.attention_dropout)
    set_default(args, "ctx_activation_dropout", args.activation_dropout)


register_model_architecture("transformer_selattn", "transformer_selattn")(selattn_transformer)


@register_model_architecture("transformer", "transformer_maruf_base")
def transformer_maruf_base(args):
    """Stage-1 sentence Transformer of ch. 4 (fairseq ``transformer``; dropout 0.1)."""
    maruf_sizes(args, 0.1)
    base_architecture(args)


# the bench-size sentence model (= the project's transformer baseline) for warm-starting *_bench archs
register_shaped("transformer", "transformer_maruf_base", base_architecture)


def selattn_preset(integration: str, doc_attn: str, word_norm: str, thesis_size: bool):
    def arch(args):
        set_default(args, "ctx_integration", integration)
        set_default(args, "doc_attn", doc_attn)
        set_default(args, "word_norm", word_norm)
        if thesis_size:
            maruf_sizes(args, 0.2)
        selattn_transformer(args)

    arch.__doc__ = (f"Maruf (2019) ch. 4: context in the {integration}, {doc_attn} attention"
                    + (f" ({'sparse-soft' if word_norm == 'softmax' else 'sparse-sparse'})"
                       if doc_attn == "hierarchical" else "") + ".")
    return arch


# Thesis system → arch (Tables 4.2–4.5): (integration, --doc-attn, --word-norm)
SELATTN_PRESETS = {
    "transformer_selattn_enc_sent": ("encoder", "sentence", "softmax"),                  # +Attention, sentence
    "transformer_selattn_enc_word": ("encoder", "word", "softmax"),                      # +Attention, word
    "transformer_selattn_enc_hier_sparsesoft": ("encoder", "hierarchical", "softmax"),   # +H-Attention sparse-soft
    "transformer_selattn_enc_hier_sparsesparse": ("encoder", "hierarchical", "sparsemax"),  # sparse-sparse
    "transformer_selattn_dec_sent": ("decoder", "sentence", "softmax"),
    "transformer_selattn_dec_word": ("decoder", "word", "softmax"),
    "transformer_selattn_dec_hier_sparsesoft": ("decoder", "hierarchical", "softmax"),
    "transformer_selattn_dec_hier_sparsesparse": ("decoder", "hierarchical", "sparsemax"),
}
register_presets("transformer_selattn", selattn_preset, {name: (*spec, True) for name, spec in SELATTN_PRESETS.items()})
for _name, _spec in SELATTN_PRESETS.items():
    register_shaped("transformer_selattn", _name, selattn_preset(*_spec, thesis_size=False))

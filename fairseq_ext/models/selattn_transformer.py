"""``selattn_transformer``: the context-aware Transformer of Maruf (2019) ch. 4 — hierarchical selective
attention (Maruf, Martins & Haffari, NAACL 2019) — and the ``transformer_maruf_base`` sentence model it
is warm-started from.

The sentence model is fairseq's :class:`~fairseq.models.transformer.TransformerModel`, unchanged (same
parameter names, so any ``transformer`` checkpoint of the same shape warm-starts it). One
Document-level Context Layer (§4.3.1, :class:`~fairseq_ext.modules.doc_attention.DocContextLayer`)
and a context gate (Eq. 4.6–4.7) are added to the encoder **or** the decoder (footnote 8):

* ``--ctx-integration encoder`` (monolingual context, Fig. 4.3): K_w = V_w = the last-encoder-layer
  vectors of every word of the context sentences (BOS/EOS/pad excluded), K_s = V_s = their
  per-sentence averages; the queries are the current sentence's encoder outputs r; the gated
  r̃ = γ⊙r + (1−γ)⊙c replaces the encoder output the decoder attends to.
* ``--ctx-integration decoder`` (bilingual context, Fig. 4.4; needs ``ctx_tgt_tokens``, i.e. the task's
  ``--doc-target-context gold|generated``): the decoder is run teacher-forced over the context
  translations; keys = the last decoder layer's source-attention sub-layer outputs, values = the final
  decoder outputs (words = the positions whose decoder input is a word); the queries are the current
  tokens' last-layer source-attention outputs (post-residual, post-LayerNorm under PostNorm; the
  post-residual sum under PreNorm); the gate acts on the final decoder output before the output
  projection. In incremental decoding the projected context keys/values are computed once per
  sentence, cached in the incremental state and reordered with the beam.
* ``--doc-attn hierarchical|sentence|word`` (Eq. 4.2–4.4 / Eq. 4.5), ``--word-norm softmax|sparsemax``
  (hierarchical: sentence level always sparsemax; "sparse-soft" / "sparse-sparse").
* ``--ctx-rep-model pretrained`` (default; the thesis: "the Encoder Context Encoding block stores the
  sentence and word-level keys and values produced from the pre-trained sentence-level NMT model",
  our choice, the same at training and test time): the context vectors come from a **frozen copy** of
  the sentence model's encoder (and decoder, for decoder integration), filled when a sentence
  checkpoint warm-starts the model (``--finetune-from-model``; :mod:`fairseq_ext.modules.warm_start`).
  ``current``: the model's own encoder/decoder, detached (run under ``no_grad``; the thesis's code
  recomputes the context with the fine-tuned model at test time).
* ``--empty-context zero`` (default): a sentence without context gets a zero context vector c = 0, so
  r̃ = σ(W_r r)⊙r (our choice; the thesis's code instead spreads the weight uniformly over masked
  sentences, leaking future sentences online). ``identity``: r̃ = r for such sentences, so with no
  context at all the model *is* its sentence model.

Which sentences are the context (offline / online, size) is decided by the dataset (``ctx_index`` of
the batch contract, ``doc_translation``); the model uses what it is given.

Architectures (thesis system → arch; Table 4.2–4.5): ``selattn_{enc,dec}_{sent,word,hier_sparsesoft,
hier_sparsesparse}`` at the thesis size (4+4 layers, 512/2048/8, separate source/target embeddings,
decoder input/output tied, all dropouts 0.2 in stage 2), each also ``..._bench`` (the bench shape of
:mod:`fairseq_ext.modules.arch_utils`); ``transformer_maruf_base`` (+ ``_bench``) is the stage-1 sentence
model (fairseq ``transformer``, dropout 0.1). ``zhang2018_doc_transformer`` (+ ``_bench``; the decoder
variant is ``--ctx-integration decoder``) is the Zhang et al. (2018) baseline (see
:class:`Zhang2018DocTransformerModel`).

Parameters (``new_parameter_count``; the frozen copies of ``pretrained`` are not trainable and not
counted): +ATTENTION = 4d² (bias-free Q, K, V, O) + 2·d·d_ff + d_ff + d (FFN) + 4d (two LayerNorms) +
2d² (gate) = 3,674,624 at d = 512; +H-ATTENTION adds 2d² (separate Q_s/K_s): 4,198,912 — with a 20k
source and target vocabulary 49.9M → 53.6M / 54.1M, Table 4.5's 50M → 53.7M / 54.2M.

References: S. Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University, 2019
(ch. 4); S. Maruf, A. F. T. Martins and G. Haffari, "Selective Attention for Context-aware Neural
Machine Translation", NAACL 2019; J. Zhang et al., "Improving the Transformer Translation Model with
Document-Level Context", EMNLP 2018.
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
    TransformerModel,
    base_architecture,
)
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor

from fairseq_ext.modules.arch_utils import register_shaped, set_default, wrap_layer
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
from fairseq_ext.modules.warm_start import SentenceWarmStartMixin

logger = logging.getLogger(__name__)

CTX_INTEGRATIONS = ("encoder", "decoder")
CTX_REP_MODELS = ("pretrained", "current")
EMPTY_CONTEXT = ("zero", "identity")
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


def decoder_inputs(targets: Tensor, pad: int, eos: int) -> Tensor:
    """fairseq's ``collate_tokens(move_eos_to_beginning=True)`` on right-padded targets (…, EOS, pad):
    EOS first, shifted right, the final EOS dropped."""
    lengths = targets.ne(pad).sum(1, keepdim=True)
    prev = torch.cat([targets.new_full((targets.size(0), 1), eos), targets[:, :-1]], 1)
    positions = torch.arange(prev.size(1), device=prev.device).unsqueeze(0)
    return prev.masked_fill(positions >= lengths, pad)


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
                out = self.ctx_rep_encoder(tokens, tokens.ne(self.padding_idx).sum(1))
                return out["encoder_out"][0].transpose(0, 1), out["encoder_padding_mask"][0], tokens
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
                raise ValueError("--ctx-integration decoder needs the target side of the context "
                                 "(ctx_tgt_tokens: doc_translation --doc-target-context gold|generated)")
            states, pad_mask, _ = self.sentence_set(out, src_tokens, ctx_src_tokens, ctx_src_lengths)
            out["ctx_nset_out"] = [states.transpose(0, 1)]  # L x N x C
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
        for key in ("ctx_nset_out", "ctx_nset_padding_mask", "ctx_tgt_tokens"):
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

    def train(self, mode: bool = True):
        super().train(mode)
        if self.ctx_rep_decoder is not None:
            self.ctx_rep_decoder.eval()
        return self

    def attach_frozen_copy(self, embed_tokens: nn.Module):
        """The frozen sentence decoder of ``--ctx-rep-model pretrained`` (only its features are used;
        it keeps fairseq's output projection so that it is a complete sentence decoder)."""
        self.ctx_rep_decoder = TapDecoder(self.cfg, self.dictionary, embed_tokens)
        self.refresh_frozen_copy()

    def refresh_frozen_copy(self):
        copy_sentence_state_(self, self.ctx_rep_decoder)
        freeze_(self.ctx_rep_decoder)

    def context_memory(self, encoder_out) -> Optional[Dict[str, Tensor]]:
        """Project and gather the context translations' keys/values (None: no context)."""
        if "ctx_nset_out" not in encoder_out:
            return None
        targets = encoder_out["ctx_tgt_tokens"][0]
        prev = decoder_inputs(targets, self.padding_idx, self.dictionary.eos())
        nset_out = {"encoder_out": encoder_out["ctx_nset_out"],
                    "encoder_padding_mask": encoder_out["ctx_nset_padding_mask"]}
        rep = self.ctx_rep_decoder if self.ctx_rep_decoder is not None else self
        with torch.no_grad():
            values, keys = rep.sentence_features(prev, nset_out)
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


# ----------------------------------------------------------------------------- the model
class DocTransformerModel(SentenceWarmStartMixin, TransformerModel):
    """fairseq's TransformerModel whose forward passes the document keys of ``net_input`` (the batch
    contract of ``doc_translation``, which gives them only to models with ``uses_document_context``)
    to the encoder."""

    uses_document_context = True

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, **ctx):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths,
                                   return_all_hiddens=return_all_hiddens, **ctx)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)

    def sentence_parameter_names(self) -> List[str]:
        return [n for n, _ in self.named_parameters() if not self.is_doc_key(n)]

    def doc_parameter_names(self) -> List[str]:
        return [n for n, _ in self.named_parameters() if self.is_doc_key(n)]


@register_model("selattn_transformer")
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
            self.decoder.attach_frozen_copy(emb)

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
    set_default(args, "ctx_ffn_embed_dim", None)
    set_default(args, "ctx_attention_heads", None)
    base_architecture(args)
    set_default(args, "ctx_dropout", args.dropout)
    set_default(args, "ctx_attention_dropout", args.attention_dropout)
    set_default(args, "ctx_activation_dropout", args.activation_dropout)


register_model_architecture("selattn_transformer", "selattn_transformer")(selattn_transformer)


def maruf_sizes(args, dropout: float):
    """The ch. 4 Transformer (§4.4.1): 4+4 layers, 512/2048, 8 heads, separate source/target
    embeddings with the decoder's input and output embeddings tied ([code]), all four dropouts
    ``dropout`` (0.1 for the sentence model, 0.2 for the context-aware model)."""
    for side in ("encoder", "decoder"):
        set_default(args, f"{side}_layers", 4)
        set_default(args, f"{side}_embed_dim", 512)
        set_default(args, f"{side}_ffn_embed_dim", 2048)
        set_default(args, f"{side}_attention_heads", 8)
    set_default(args, "share_decoder_input_output_embed", True)
    set_default(args, "dropout", dropout)
    set_default(args, "attention_dropout", args.dropout)
    set_default(args, "activation_dropout", args.dropout)


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
    "selattn_enc_sent": ("encoder", "sentence", "softmax"),                  # +Attention, sentence
    "selattn_enc_word": ("encoder", "word", "softmax"),                      # +Attention, word
    "selattn_enc_hier_sparsesoft": ("encoder", "hierarchical", "softmax"),   # +H-Attention sparse-soft
    "selattn_enc_hier_sparsesparse": ("encoder", "hierarchical", "sparsemax"),  # sparse-sparse
    "selattn_dec_sent": ("decoder", "sentence", "softmax"),
    "selattn_dec_word": ("decoder", "word", "softmax"),
    "selattn_dec_hier_sparsesoft": ("decoder", "hierarchical", "softmax"),
    "selattn_dec_hier_sparsesparse": ("decoder", "hierarchical", "sparsemax"),
}
for _name, _spec in SELATTN_PRESETS.items():
    register_model_architecture("selattn_transformer", _name)(selattn_preset(*_spec, thesis_size=True))
    register_shaped("selattn_transformer", _name, selattn_preset(*_spec, thesis_size=False))


# ----------------------------------------------------------------------------- Zhang et al. (2018)
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


@register_model("zhang2018_doc_transformer")
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
        parser.add_argument("--ctx-prev-sentences", type=int, metavar="N",
                            help="previous source sentences in the context (default 2)")
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


@register_model_architecture("zhang2018_doc_transformer", "zhang2018_doc_transformer")
def zhang2018_doc_transformer(args):
    """Zhang et al. (2018) at the size of Maruf's ch. 4 Transformer (4+4, 512/2048/8, dropout 0.2)."""
    maruf_sizes(args, 0.2)
    zhang2018_defaults(args)


register_shaped("zhang2018_doc_transformer", "zhang2018_doc_transformer", zhang2018_defaults)

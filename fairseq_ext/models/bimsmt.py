"""``bimsmt``: the bilingual multi-speaker conversation model of Maruf (2019) ch. 5 (Bi-MSMT), on ``rnnsearch``
(:mod:`fairseq_ext.models.rnnsearch`) through its hooks; the history math is in
:mod:`fairseq_ext.modules.bimsmt`, the batch contract in :mod:`fairseq_ext.data.conversations`.

* **Base** (§5.1): two RNNsearch models, En→F and F→En, with separate parameters and one joint
  vocabulary; a row goes to the model of its direction, so ``cross_entropy`` is the objective of §5.3.4.
* **Sentence vectors** (``--src-sent-encoder rnnlm|nmt_encoder``) and **turn-RNNs** (one bi-GRU per
  language, :class:`~fairseq_ext.modules.bimsmt.TurnRNN`).
* **Source context** ``--src-ctx`` (§5.2, Eqs. 5.1-5.3), **target context** ``--tgt-ctx`` (§5.3), **dual
  context** ``--dual`` (§5.4); target vectors are the last decoder state of a translation, teacher-forced
  through the direction model's sentence path (``--tgt-vectors frozen_base`` for the thesis's frozen base).
* **Incorporation** ``--ctx-inject initdec|adddec|initdec_adddec`` (§5.5): the context enters the initial
  decoder state and/or the first decoder layer at every step
  (:class:`~fairseq_ext.modules.memnet.MemoryInputGRUCell`).
* ``--zero-context`` (and :meth:`BiMSMTModel.context_disabled`): the two base models exactly.

Stage-wise training (§5.7): train ``bimsmt_base``, then ``--finetune-from-model BASE.pt --arch bimsmt``
(the context parameters, :meth:`BiMSMTModel.doc_param_prefixes`, keep their initialisation).

Archs: ``bimsmt`` (thesis size, ``rnnsearch_maruf_small``), ``bimsmt_base`` (no context), ``bimsmt_bench``
(CPU benchmark sizes) and ``bimsmt_tiny`` (tests).

Reference: Maruf, Martins, Haffari, "Contextual Neural Model for Translating Bilingual Multi-Speaker
Conversations", WMT 2018; Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University,
2019, ch. 5.
"""
import contextlib
import logging
import os
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.models import (
    ARCH_CONFIG_REGISTRY,
    BaseFairseqModel,
    FairseqEncoderDecoderModel,
    register_model,
    register_model_architecture,
)
from torch import Tensor

from fairseq_ext.models.rnnsearch import RNNSearchDecoder, RNNSearchEncoder, RNNSearchModel, rnnsearch
from fairseq_ext.modules.arch_utils import set_default
from fairseq_ext.modules.bimsmt import (
    CTX_INJECTIONS,
    DUAL_CONTEXTS,
    SENT_ENCODERS,
    SRC_CONTEXTS,
    TGT_CONTEXTS,
    History,
    MixContext,
    SourceContext,
    TargetContext,
    TurnRNN,
)
from fairseq_ext.modules.conversation_history import ConversationHistoryMixin, trim_columns
from fairseq_ext.modules.memnet import LMSentenceEncoder, MemoryInputGRUCell, lm_sizes
from fairseq_ext.modules.warm_start import SentenceWarmStartMixin
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

DIRECTIONS = 2  # 0: English -> Foreign, 1: Foreign -> English (the source language of a row)
TGT_VECTORS = ("sentence_path", "frozen_base")


def context_layout(cfg) -> Tuple[bool, bool, bool]:
    """(source context?, target context?, mix?) of a configuration, validated."""
    src, tgt, dual = cfg.src_ctx != "none", cfg.tgt_ctx != "none", cfg.dual
    if dual == "src_tgt" and not (src and tgt):
        raise UserDataError("--dual src_tgt feeds both o^src and o^tgt: it needs --src-ctx and --tgt-ctx (not none)")
    if dual == "src_tgt_mix" and (src or tgt):
        raise UserDataError("--dual src_tgt_mix replaces the source and target contexts: leave --src-ctx and "
                         "--tgt-ctx at none")
    if dual == "none" and src and tgt:
        raise UserDataError("--src-ctx and --tgt-ctx together are the Dual Context Src-Tgt model: add --dual src_tgt")
    return src, tgt, dual == "src_tgt_mix"


class BiMSMTDecoder(RNNSearchDecoder):
    """rnnsearch's decoder + InitDec / AddDec of the per-sentence context ``encoder_out["conv_context"]``
    (B, Dc) (module doc). The context sits in the state (``conv_context``), so it follows the beam."""

    def __init__(self, cfg, dictionary, embed_tokens, context_dim: int, ctx_dim: int, n_vectors: int):
        self.ctx_dim = ctx_dim
        self.initdec = ctx_dim > 0 and cfg.ctx_inject in ("initdec", "initdec_adddec")
        self.adddec = ctx_dim > 0 and cfg.ctx_inject in ("adddec", "initdec_adddec")
        super().__init__(cfg, dictionary, embed_tokens, context_dim)
        H, L, E = cfg.decoder_hidden_size, cfg.decoder_layers, embed_tokens.embedding_dim
        if self.adddec:
            if cfg.rnn_type != "gru":
                raise UserDataError("AddDec needs --rnn-type gru (the thesis's decoder)")
            sentence_input = E + context_dim if self.transition.variant == "plain" else E
            self.transition.cell = MemoryInputGRUCell(sentence_input, ctx_dim, H, memory_offset=E)
        if self.initdec:
            width = ctx_dim
            if n_vectors > 1:
                self.init_dual = nn.Linear(ctx_dim, H, bias=False)  # o = tanh(W [o^src; o^tgt])
                width = H
            self.init_ctx = nn.Linear(width, L * H, bias=False)  # U (per layer), b_s = the base's bias
        self._zero_context = False

    @property
    def zero_context(self) -> bool:
        return self._zero_context

    @zero_context.setter
    def zero_context(self, value: bool) -> None:
        self._zero_context = bool(value)
        if isinstance(self.transition.cell, MemoryInputGRUCell):
            self.transition.cell.use_memory = not value

    def step_input_dim(self, embed_dim: int) -> int:
        return embed_dim + (self.ctx_dim if self.adddec else 0)

    def context_of(self, encoder_out, batch: int, like: Tensor) -> Optional[Tensor]:
        ctx = encoder_out.get("conv_context")
        if self.zero_context or not ctx:
            return None
        return ctx[0].type_as(like)

    def initial_state(self, encoder_out):
        state = super().initial_state(encoder_out)
        hidden = state["hidden"]
        B = hidden.size(0)
        ctx = self.context_of(encoder_out, B, hidden)
        if self.initdec and ctx is not None:
            o = torch.tanh(self.init_dual(ctx)) if hasattr(self, "init_dual") else ctx
            pre = self.initial_preactivation(encoder_out) + self.init_ctx(o)  # s_0 = tanh(W_init mean h + b + U o)
            state["hidden"] = torch.tanh(pre).view(B, self.num_layers, self.hidden_size)
        if self.adddec:
            state["conv_context"] = ctx if ctx is not None else hidden.new_zeros(B, self.ctx_dim)
        return state

    def step_input(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int) -> Tensor:
        if not self.adddec:
            return embedded
        return torch.cat([embedded, state["conv_context"].type_as(embedded)], dim=-1)


class BiMSMTDirection(FairseqEncoderDecoderModel):
    """One direction's base model (rnnsearch encoder + :class:`BiMSMTDecoder`) and its context modules."""

    def __init__(self, encoder, decoder, lang: int, src_context=None, tgt_context=None, mix_context=None):
        super().__init__(encoder, decoder)
        self.lang = lang
        self.src_context, self.tgt_context, self.mix_context = src_context, tgt_context, mix_context

    @property
    def uses_context(self) -> bool:
        return any(m is not None for m in (self.src_context, self.tgt_context, self.mix_context))

    def context(self, h: Tensor, hist: History) -> Tuple[Tensor, Dict[str, Tensor]]:
        """The context vector(s) o (B, Dc) of rows whose source language is this direction's, and the
        extras (gates, attention weights) keyed ``src_*`` / ``tgt_*`` / ``mix_*``."""
        own = torch.full((h.size(0),), self.lang, dtype=torch.long, device=h.device)
        parts, extras = [], {}
        for name, module in (("src", self.src_context), ("tgt", self.tgt_context), ("mix", self.mix_context)):
            if module is not None:
                o, ex = module(h, hist, own)
                parts.append(o)
                extras.update({f"{name}_{k}": v for k, v in ex.items()})
        return torch.cat(parts, dim=-1), extras

    def forward(self, src_tokens, src_lengths, prev_output_tokens, conv_context=None, **kwargs):
        enc = self.encoder(src_tokens, src_lengths)
        if conv_context is not None:
            enc["conv_context"] = [conv_context]
        return self.decoder(prev_output_tokens, encoder_out=enc)


@register_model("bimsmt")
class BiMSMTModel(SentenceWarmStartMixin, ConversationHistoryMixin, BaseFairseqModel):
    """Bi-MSMT (module doc)."""

    #: the ``conversation_translation`` task passes the history keys to this model
    uses_conversation_history = True

    def __init__(self, args, directions: nn.ModuleList, turn_rnns: Optional[nn.ModuleList],
                 sent_encoders: Optional[nn.ModuleList], dictionary):
        super().__init__()
        self.args = args
        self.directions = directions
        self.turn_rnns = turn_rnns
        self.sent_encoders = sent_encoders
        self.dictionary = dictionary
        self.use_src, self.use_tgt, self.use_mix = context_layout(args)
        self.sent_encoder_kind = args.src_sent_encoder
        self._zero_context = False
        self.zero_context = bool(getattr(args, "zero_context", False))

    # ------------------------------------------------------------------ options
    @staticmethod
    def add_args(parser):
        RNNSearchModel.add_args(parser)
        parser.add_argument("--src-ctx", choices=SRC_CONTEXTS, help="source-side history (§5.3.1.1)")
        parser.add_argument("--tgt-ctx", choices=TGT_CONTEXTS, help="target-side history (§5.3.1.2)")
        parser.add_argument("--dual", choices=DUAL_CONTEXTS,
                            help="src_tgt: feed o^src and o^tgt; src_tgt_mix: mixing along the language axis")
        parser.add_argument("--ctx-inject", choices=CTX_INJECTIONS,
                            help="initdec: the decoder's initial state; adddec: an extra decoder input per step")
        parser.add_argument("--src-sent-encoder", choices=SENT_ENCODERS,
                            help="source sentence vectors: frozen bi-RNNLMs (--sent-lm) or the NMT encoder")
        parser.add_argument("--sent-lm", metavar="EN_FWD,EN_BWD,F_FWD,F_BWD",
                            help="lstm_lm checkpoints (forward, reversed) of the first and the second language")
        parser.add_argument("--sent-lm-dims", metavar="E,H,L",
                            help="(filled in from --sent-lm) embedding, hidden size and layers of the LMs")
        parser.add_argument("--tgt-vectors", choices=TGT_VECTORS,
                            help="target vectors of the history's translations in training: sentence_path = this "
                                 "model's sentence path (also at test time); frozen_base = a frozen copy of the "
                                 "base models taken at the warm start (the thesis; test time: this model)")
        parser.add_argument("--zero-context", action="store_true", default=None,
                            help="every context vector 0: the two base models exactly")

    @classmethod
    def build_model(cls, args, task):
        bimsmt(args)
        src, tgt, mix = context_layout(args)
        d = task.source_dictionary
        if task.target_dictionary != d:
            raise UserDataError("bimsmt needs one joint dictionary for both sides (both directions share it)")
        if (src or mix) and args.encoder_unidirectional:
            raise UserDataError("the Turn-RNN states must match the query [fwd h_M; bwd h_1]: a bidirectional encoder")
        H, He = args.decoder_hidden_size, args.encoder_hidden_size
        D = 2 * He
        n_vectors = 2 if (src and tgt) or mix else 1
        ctx_dim = H * n_vectors if (src or tgt or mix) else 0
        sent_encoders = None
        if (src or mix) and args.src_sent_encoder == "rnnlm":
            sent_encoders = nn.ModuleList(cls.build_sentence_lms(args, d))
        sent_dim = sent_encoders[0].output_dim if sent_encoders is not None else D
        turn_rnns = nn.ModuleList([TurnRNN(sent_dim, He) for _ in range(2)]) if (src or mix) else None
        directions, frozen = [], []
        for lang in range(DIRECTIONS):
            enc_emb, dec_emb = RNNSearchModel.build_embeddings(args, d, d)
            encoder = RNNSearchEncoder(args, d, enc_emb)
            decoder = BiMSMTDecoder(args, d, dec_emb, encoder.output_dim, ctx_dim, n_vectors)
            directions.append(BiMSMTDirection(
                encoder, decoder, lang,
                SourceContext(args.src_ctx, D, H) if src else None,
                TargetContext(D, H) if tgt else None,
                MixContext(D, H) if mix else None))
            if (tgt or mix) and args.tgt_vectors == "frozen_base":
                f_enc, f_dec = RNNSearchModel.build_embeddings(args, d, d)
                frozen.append(BiMSMTDirection(RNNSearchEncoder(args, d, f_enc),
                                              BiMSMTDecoder(args, d, f_dec, encoder.output_dim, 0, 1), lang))
        model = cls(args, nn.ModuleList(directions), turn_rnns, sent_encoders, d)
        if frozen:
            model.frozen_base = nn.ModuleList(frozen)
            model.sync_frozen_base()
        return model

    @torch.no_grad()
    def sync_frozen_base(self) -> None:
        """Copy the base (sentence) parameters of both directions into the frozen copy (``frozen_base``)."""
        if getattr(self, "frozen_base", None) is None:
            return
        for src, dst in zip(self.directions, self.frozen_base):
            own = src.state_dict()
            dst.load_state_dict({k: own[k] for k in dst.state_dict()}, strict=True)
        self.frozen_base.requires_grad_(False)

    @staticmethod
    def build_sentence_lms(args, dictionary) -> List[LMSentenceEncoder]:
        """The two frozen bi-RNNLM sentence encoders (first language, second language): from the checkpoints
        when they exist (recording their sizes), else empty at ``--sent-lm-dims`` (a trained model's
        checkpoint then fills them)."""
        paths = [p for p in (args.sent_lm or "").split(",") if p]
        if len(paths) != 4 and not args.sent_lm_dims:
            raise UserDataError("--src-sent-encoder rnnlm needs --sent-lm EN_FWD.pt,EN_BWD.pt,F_FWD.pt,F_BWD.pt (four "
                             "lstm_lm checkpoints on the joint dictionary), or use --src-sent-encoder nmt_encoder")
        if len(paths) == 4 and all(os.path.exists(p) for p in paths):
            encs = [LMSentenceEncoder.from_checkpoints(paths[0], paths[1], dictionary),
                    LMSentenceEncoder.from_checkpoints(paths[2], paths[3], dictionary)]
            dims = {lm_sizes(p) for p in paths}
            if len(dims) != 1:
                raise UserDataError(f"--sent-lm: the four LMs must have one size (embedding, hidden, layers), got {dims}")
            args.sent_lm_dims = ",".join(str(x) for x in dims.pop())
            return encs
        if not args.sent_lm_dims:
            raise FileNotFoundError(f"--sent-lm: one of {paths} not found")
        emb, hidden, layers = (int(x) for x in str(args.sent_lm_dims).split(","))
        if paths:
            logger.warning("--sent-lm %s not found: the sentence LMs come from the model checkpoint", args.sent_lm)
        return [LMSentenceEncoder(len(dictionary), emb, hidden, layers, dictionary.pad(), dictionary.eos())
                for _ in range(2)]

    def doc_param_prefixes(self) -> Tuple[str, ...]:
        """The context-only parameters (absent from a base checkpoint)."""
        out = ["turn_rnns.", "sent_encoders.", "frozen_base."]
        for d in range(DIRECTIONS):
            out += [f"directions.{d}.src_context.", f"directions.{d}.tgt_context.", f"directions.{d}.mix_context.",
                    f"directions.{d}.decoder.init_ctx.", f"directions.{d}.decoder.init_dual.",
                    f"directions.{d}.decoder.transition.cell.weight_mem"]
        return tuple(out)

    def after_sentence_warm_start(self) -> None:
        """The frozen base copy (``--tgt-vectors frozen_base``) takes the base checkpoint's parameters; the RNNLM
        sentence encoders were loaded when the model was built."""
        self.sync_frozen_base()

    # ------------------------------------------------------------------ switches
    @property
    def uses_context(self) -> bool:
        return (self.use_src or self.use_tgt or self.use_mix) and not self.zero_context

    @property
    def uses_target_history(self) -> bool:
        return (self.use_tgt or self.use_mix) and not self.zero_context

    @property
    def zero_context(self) -> bool:
        return self._zero_context

    @zero_context.setter
    def zero_context(self, value: bool) -> None:
        self._zero_context = bool(value)
        for m in self.directions:
            m.decoder.zero_context = bool(value)

    @contextlib.contextmanager
    def context_disabled(self):
        """Run the two base models (every context vector 0) inside the block."""
        saved = self.zero_context
        self.zero_context = True
        try:
            yield self
        finally:
            self.zero_context = saved

    # ------------------------------------------------------------------ fairseq interface
    def forward(self, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor,
                direction: Optional[Tensor] = None, hist_src_tokens: Optional[Tensor] = None,
                hist_src_lengths: Optional[Tensor] = None, nset_lang: Optional[Tensor] = None,
                nset_turn: Optional[Tensor] = None, hist_index: Optional[Tensor] = None,
                hist_tgt_tokens: Optional[Tensor] = None, hist_tgt_lengths: Optional[Tensor] = None, **kwargs):
        """Teacher-forced pass over a conversation batch (contract: :mod:`fairseq_ext.data.conversations`)
        → (logits (B, T, V), {"attn": [None], "context": {direction: extras}, "rows": {direction: rows}})."""
        if direction is None:
            raise UserDataError("bimsmt needs the conversation keys (net_input['direction'], ...): train and "
                             "decode it with --task conversation_translation")
        pad = self.dictionary.pad()
        B = src_tokens.size(0)
        enc_outs, rows_of = {}, {}
        for d in range(DIRECTIONS):
            rows = direction.eq(d).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            src = trim_columns(src_tokens.index_select(0, rows), pad)
            rows_of[d] = rows
            enc_outs[d] = self.directions[d].encoder(src, src_lengths.index_select(0, rows))
        extras: Dict[int, Dict[str, Tensor]] = {}
        if self.uses_context:
            if hist_index is None or nset_lang is None or nset_turn is None:
                raise UserDataError("bimsmt with a context needs hist_index / nset_lang / nset_turn "
                                 "(--task conversation_translation)")
            if hist_src_tokens is None:
                hist_src_tokens = src_tokens.new_full((0, 1), pad)
            nset_src = [src_tokens, hist_src_tokens]
            finals = {}
            if self.sent_encoders is None:
                for d, rows in rows_of.items():
                    for k, r in enumerate(rows.tolist()):
                        finals[r] = enc_outs[d]["encoder_final"][0][k]
            sent = self.nset_sentence_vectors(nset_src, nset_lang, finals) if (self.use_src or self.use_mix) \
                else src_tokens.new_zeros(nset_lang.size(0), 2 * self.args.encoder_hidden_size).float()
            tgt_vec = None
            if self.use_tgt or self.use_mix:
                if hist_tgt_tokens is None:
                    raise UserDataError("bimsmt with a target context needs the translations of the history "
                                     "(hist_tgt_tokens): --conv-target-history generated|reference in training; "
                                     "the conversation_online generator at test time")
                tgt_vec = self.history_target_vectors(nset_src, nset_lang, hist_index, hist_tgt_tokens,
                                                      hist_tgt_lengths)
            hist = self.encode_history(sent, nset_lang, nset_turn, hist_index, tgt_vec)
            for d, rows in rows_of.items():
                sub = History(*[None if t is None else t.index_select(0, rows) for t in hist])
                ctx, extras[d] = self.directions[d].context(enc_outs[d]["encoder_final"][0], sub)
                enc_outs[d]["conv_context"] = [ctx]
        logits = None
        for d, rows in rows_of.items():
            out, _ = self.directions[d].decoder(prev_output_tokens.index_select(0, rows), encoder_out=enc_outs[d])
            if logits is None:
                logits = out.new_zeros(B, out.size(1), out.size(2))
            logits[rows] = out
        return logits, {"attn": [None], "context": extras, "rows": rows_of}

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None):
        logits = net_output[0]
        return utils.log_softmax(logits, dim=-1) if log_probs else utils.softmax(logits, dim=-1)

    def get_targets(self, sample, net_output):
        return sample["target"]

    def max_positions(self):
        return self.directions[0].max_positions()

    def max_decoder_positions(self):
        return self.directions[0].max_decoder_positions()


# ---------------------------------------------------------------------------------------------- architectures
def bimsmt(args):
    """The Bi-MSMT options' defaults (sizes from the arch; the thesis's by default)."""
    set_default(args, "src_ctx", "lang_sent_attn")
    set_default(args, "tgt_ctx", "none")
    set_default(args, "dual", "none")
    set_default(args, "ctx_inject", "initdec")
    set_default(args, "src_sent_encoder", "rnnlm")
    set_default(args, "sent_lm", None)
    set_default(args, "sent_lm_dims", None)
    set_default(args, "zero_context", False)
    set_default(args, "tgt_vectors", "sentence_path")
    rnnsearch(args)


def _dual_defaults(args):
    """``--dual`` chooses the contexts it needs when they were not given."""
    dual = getattr(args, "dual", None)
    if dual == "src_tgt":
        set_default(args, "src_ctx", "lang_sent_attn")
        set_default(args, "tgt_ctx", "lang_sent_attn")
    elif dual == "src_tgt_mix":
        set_default(args, "src_ctx", "none")
        set_default(args, "tgt_ctx", "none")


@register_model_architecture("bimsmt", "bimsmt")
def bimsmt_thesis(args):
    """Thesis size (§5.1, ``rnnsearch_maruf_small``: bi-GRU 256, 2-layer plain GRU decoder 256, alignment 128),
    dropout 0.2 (§5.7); Lang-Specific S-Attention source context, InitDec, bi-RNNLM sentence vectors."""
    _dual_defaults(args)
    set_default(args, "dropout", 0.2)
    ARCH_CONFIG_REGISTRY["rnnsearch_maruf_small"](args)
    bimsmt(args)


@register_model_architecture("bimsmt", "bimsmt_base")
def bimsmt_base(args):
    """The base models of §5.1 (no context), thesis size: stage 1 of §5.7."""
    set_default(args, "src_ctx", "none")
    set_default(args, "tgt_ctx", "none")
    set_default(args, "dual", "none")
    bimsmt_thesis(args)


@register_model_architecture("bimsmt", "bimsmt_bench")
def bimsmt_bench(args):
    """The CPU benchmark's sizes (``rnnsearch_bench``: emb 256, encoder 2x288, decoder 576, attention 288,
    all embeddings shared within a direction, dropout 0.2) with the thesis's plain 2-layer decoder and
    NMT-encoder sentence vectors."""
    _dual_defaults(args)
    set_default(args, "decoder_variant", "plain")
    set_default(args, "decoder_layers", 2)
    set_default(args, "src_sent_encoder", "nmt_encoder")
    ARCH_CONFIG_REGISTRY["rnnsearch_bench"](args)
    bimsmt(args)


@register_model_architecture("bimsmt", "bimsmt_tiny")
def bimsmt_tiny(args):
    """Unit and command-line tests: emb 16, hidden 16 (encoder 2x16), 2-layer plain GRU decoder, attention 16,
    no dropout, NMT-encoder sentence vectors."""
    _dual_defaults(args)
    set_default(args, "encoder_embed_dim", 16)
    set_default(args, "encoder_hidden_size", 16)
    set_default(args, "decoder_layers", 2)
    set_default(args, "decoder_variant", "plain")
    set_default(args, "dropout", 0.0)
    set_default(args, "src_sent_encoder", "nmt_encoder")
    bimsmt(args)

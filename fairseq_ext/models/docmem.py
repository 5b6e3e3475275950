"""``docmem``: document-context NMT with memory networks (Maruf 2019 ch. 3, §3.2-§3.5) and the two
local-context RNN baselines of §3.5, as an extension of ``rnnsearch`` (:mod:`fairseq_ext.models.rnnsearch`)
through its hooks; the memory math is in :mod:`fairseq_ext.modules.memnet`. Document context arrives in
``net_input`` as the ``doc_translation`` task gives it (``ctx_src_tokens``, ``ctx_index``,
``ctx_distance``, ``ctx_tgt_tokens``).

Model (Eqs. 3.3-3.4, Fig. 3.2), with two static per-sentence memory readings:

* **source memory** (Fig. 3.3, ``--doc-memories src|both``): c^{src} = MEMNET(M[X^{-j}], h^j) over a
  document-level bi-GRU of sentence vectors (``--src-mem-encoder encoder|rnnlm``);
* **target memory** (``tgt|both``): c^{tgt} = MEMNET(M[Y^{-j}], s^j + W_at h^j) over the last decoder
  states of the context sentences' current translations (teacher-forced, no gradient);
* **Memory-to-Context** (``--memory-integration m2c``, Fig. 3.2a): [c^src; c^tgt] enter the first
  decoder GRU layer (:class:`~fairseq_ext.modules.memnet.MemoryInputGRUCell`);
* **Memory-to-Output** (``m2o``, Fig. 3.2b): W_ys c^src + W_yt c^tgt are added to the logits.

``--zero-memory`` (and :meth:`DocMemModel.memory_disabled`) gives the rnnsearch sentence model bit for
bit (stage 1 of §3.5.1); a stage-1 ``rnnsearch`` checkpoint warm-starts the sentence parameters
(``--finetune-from-model``, :data:`DOC_PARAM_PREFIXES`). :func:`extra_parameters` gives the parameter
counts of Table 3.3.

Baselines (§3.5, ``--doc-context``): ``docmem_prevtgt`` (PREV TGT, Table 3.6) and ``docmem_jean2017``
(an extra attention over the previous source sentence, Jean et al. 2017).

Archs: ``docmem`` (= ``docmem_m2c_both``), ``docmem_{m2c,m2o}[_{src,tgt,both}]`` at the thesis size,
``…_bench`` at the CPU benchmark size, ``docmem_prevtgt[_bench]``, ``docmem_jean2017[_bench]``,
``docmem_tiny``.

Reference: Maruf & Haffari, "Document Context Neural Machine Translation with Memory Networks", ACL 2018;
Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University, 2019, ch. 3; Jean,
Lauly, Firat, Cho, "Does Neural Machine Translation Benefit from Larger Context?", arXiv 2017.
"""
import contextlib
import logging
import os
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from fairseq.models import ARCH_CONFIG_REGISTRY, register_model, register_model_architecture
from torch import Tensor

from fairseq_ext.models.rnnsearch import RNNSearchDecoder, RNNSearchEncoder, RNNSearchModel, rnnsearch
from fairseq_ext.modules.arch_utils import register_presets, set_default
from fairseq_ext.modules.memnet import (
    DocumentRNN,
    LMSentenceEncoder,
    MemoryInputGRUCell,
    decoder_inputs,
    gather_rows,
    last_states,
    lm_sizes,
    memnet_read,
    pad_cat,
    parse_lm_paths,
    previous_row,
)
from fairseq_ext.modules.rnn import BahdanauAttention
from fairseq_ext.modules.warm_start import SentenceWarmStartMixin
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

DOC_CONTEXTS = ("memory", "prev_tgt", "jean2017")
DOC_MEMORIES = ("src", "tgt", "both")
MEMORY_INTEGRATIONS = ("m2c", "m2o")
SRC_MEM_ENCODERS = ("encoder", "rnnlm")

#: encoder_out entries that describe the whole N-set (not one row per batch sentence): never reordered.
STATIC_KEYS = ("nset_encoder_out", "nset_padding_mask", "nset_final", "ctx_tgt_tokens", "ctx_tgt_lengths",
               "ctx_tgt_states")

#: the document-only parameters (absent from a sentence checkpoint)
DOC_PARAM_PREFIXES = ("encoder.doc_rnn.", "encoder.sentence_lm.", "decoder.transition.cell.weight_mem",
                      "decoder.tgt_query_proj.", "decoder.output_src_memory.", "decoder.output_tgt_memory.",
                      "decoder.jean_attention.")


def memory_layout(cfg) -> Tuple[bool, bool]:
    """(source memory?, target memory?) of a ``--doc-context memory`` model."""
    if cfg.doc_context != "memory":
        return False, False
    return cfg.doc_memories in ("src", "both"), cfg.doc_memories in ("tgt", "both")


def extra_parameters(H: int, C: int, V: int, memories: str, integration: str, Ds: Optional[int] = None) -> int:
    """The parameters a ``docmem`` model has over its sentence model (module doc; §3.1 / Table 3.3)."""
    Ds = C if Ds is None else Ds
    src, tgt = memories in ("src", "both"), memories in ("tgt", "both")
    Hd = C // 2
    n = 0
    if src:
        n += 2 * 3 * Hd * (Ds + Hd + 2)  # document bi-GRU (weights and both biases, per direction)
        n += 3 * H * C if integration == "m2c" else V * C
    if tgt:
        n += C * H  # W_at
        n += 3 * H * H if integration == "m2c" else V * H
    return n


class DocMemEncoder(RNNSearchEncoder):
    """rnnsearch's encoder + the N-set encodings and the source-memory reading (module doc).

    Adds to ``encoder_out``: per batch row ``ctx_index``, ``ctx_distance``, ``self_row`` (the row of the
    N-set; follows beam reordering), ``doc_src_context`` (c^src, B × C) and ``doc_src_attn`` (the memory
    weights, B × K); for the whole N-set (:data:`STATIC_KEYS`) ``nset_encoder_out`` (N, S', C),
    ``nset_padding_mask``, ``nset_final`` and the task's ``ctx_tgt_tokens`` / ``ctx_tgt_lengths``."""

    def __init__(self, cfg, dictionary, embed_tokens, sentence_lm: Optional[LMSentenceEncoder] = None):
        super().__init__(cfg, dictionary, embed_tokens)
        self.doc_context = cfg.doc_context
        self.use_src, use_tgt = memory_layout(cfg)
        self.needs_nset = use_tgt or cfg.doc_context in ("prev_tgt", "jean2017")
        self.zero_memory = bool(cfg.zero_memory)
        self.src_mem_encoder = cfg.src_mem_encoder
        if self.use_src:
            if self.output_dim % 2:
                raise UserDataError(f"the source memory's bi-GRU needs an even encoder width, got {self.output_dim}")
            self.sentence_lm = sentence_lm
            in_dim = sentence_lm.output_dim if sentence_lm is not None else self.output_dim
            self.doc_rnn = DocumentRNN(in_dim, self.output_dim // 2, cfg.doc_rnn_dropout)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, ctx_src_tokens: Optional[Tensor] = None,
                ctx_src_lengths: Optional[Tensor] = None, ctx_index: Optional[Tensor] = None,
                ctx_distance: Optional[Tensor] = None, ctx_tgt_tokens: Optional[Tensor] = None,
                ctx_tgt_lengths: Optional[Tensor] = None, **kwargs) -> Dict[str, List[Tensor]]:
        out = super().forward(src_tokens, src_lengths)
        B = src_tokens.size(0)
        if ctx_index is None:  # no document context: every memory is empty
            ctx_index = src_tokens.new_full((B, 0), -1)
            ctx_distance = src_tokens.new_zeros((B, 0))
        out["ctx_index"], out["ctx_distance"] = [ctx_index], [ctx_distance]
        out["self_row"] = [torch.arange(B, device=src_tokens.device)]
        if self.zero_memory:
            return out
        has_extra = ctx_src_tokens is not None and ctx_src_tokens.size(0) > 0
        final = out["encoder_final"][0]
        extra = None
        if has_extra and (self.needs_nset or (self.use_src and self.sentence_lm is None)):
            grad = torch.is_grad_enabled() and self.doc_context == "jean2017"  # attended by a trained attention
            with torch.set_grad_enabled(grad):
                extra = RNNSearchEncoder.forward(self, ctx_src_tokens, ctx_src_lengths)
        if self.needs_nset:
            states, mask = [out["encoder_out"][0].transpose(0, 1)], [out["encoder_padding_mask"][0]]
            finals = [final]
            if extra is not None:
                states.append(extra["encoder_out"][0].transpose(0, 1))
                mask.append(extra["encoder_padding_mask"][0])
                finals.append(extra["encoder_final"][0])
            out["nset_encoder_out"] = [pad_cat(states, 0.0)]
            out["nset_padding_mask"] = [pad_cat(mask, True)]
            out["nset_final"] = [torch.cat(finals, 0)]
            if ctx_tgt_tokens is not None:
                if ctx_tgt_lengths is None:
                    ctx_tgt_lengths = ctx_tgt_tokens.ne(self.dictionary.pad()).sum(1)
                out["ctx_tgt_tokens"], out["ctx_tgt_lengths"] = [ctx_tgt_tokens], [ctx_tgt_lengths]
        if self.use_src:
            if self.sentence_lm is not None:
                tokens = [src_tokens] + ([ctx_src_tokens] if has_extra else [])
                vectors = self.sentence_lm(pad_cat(tokens, self.padding_idx))
            else:
                vectors = torch.cat([final] + ([extra["encoder_final"][0]] if extra is not None else []), 0).detach()
            cells, cell_mask = self.doc_rnn(vectors.type_as(final), ctx_index, ctx_distance, out["self_row"][0])
            context, weights = memnet_read(final, cells, cell_mask)  # c^src = MEMNET(M[X^-j], h^j)
            out["doc_src_context"], out["doc_src_attn"] = [context], [weights]
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        static = {k: v for k, v in encoder_out.items() if k in STATIC_KEYS}
        rows = super().reorder_encoder_out({k: v for k, v in encoder_out.items() if k not in STATIC_KEYS}, new_order)
        rows.update(static)
        return rows


class DocMemDecoder(RNNSearchDecoder):
    """rnnsearch's decoder + the target memory and the M2C / M2O integration (module doc).

    The per-sentence readings sit in the decoder state as ``memory`` (B, |c^src| + |c^tgt|) (``jean2017``:
    ``jean_keys`` / ``jean_values`` / ``jean_mask`` of the previous source sentence), so
    ``reorder_incremental_state`` carries them with the beam."""

    def __init__(self, cfg, dictionary, embed_tokens, context_dim: int):
        H = cfg.decoder_hidden_size
        self.doc_context = cfg.doc_context
        self.use_src, self.use_tgt = memory_layout(cfg)
        self.integration = cfg.memory_integration if cfg.doc_context == "memory" else "m2c"
        if cfg.doc_context == "memory":
            self.memory_dim = context_dim * self.use_src + H * self.use_tgt
        else:
            self.memory_dim = H if cfg.doc_context == "prev_tgt" else context_dim
        super().__init__(cfg, dictionary, embed_tokens, context_dim)
        E = embed_tokens.embedding_dim
        self.out_dim = cfg.decoder_out_embed_dim
        if self.integration == "m2c":
            if cfg.rnn_type != "gru":
                raise UserDataError("Memory-to-Context needs --rnn-type gru (the thesis's decoder)")
            sentence_input = E + context_dim if self.transition.variant == "plain" else E
            self.transition.cell = MemoryInputGRUCell(sentence_input, self.memory_dim, H, memory_offset=E)
        if self.use_tgt:
            self.tgt_query_proj = nn.Linear(context_dim, H, bias=False)  # W_at
        if self.integration == "m2o":
            V = len(dictionary)
            if self.use_src:
                self.output_src_memory = nn.Linear(context_dim, V, bias=False)  # W_ys
            if self.use_tgt:
                self.output_tgt_memory = nn.Linear(H, V, bias=False)  # W_yt
        if self.doc_context == "jean2017":
            self.jean_attention = BahdanauAttention(H, context_dim, cfg.attention_dim)
        self._zero_memory = False
        self.zero_memory = bool(cfg.zero_memory)

    @property
    def zero_memory(self) -> bool:
        """All memory readings zero, memory terms skipped: the sentence model exactly."""
        return self._zero_memory

    @zero_memory.setter
    def zero_memory(self, value: bool) -> None:
        self._zero_memory = bool(value)
        if isinstance(self.transition.cell, MemoryInputGRUCell):
            self.transition.cell.use_memory = not value

    @contextlib.contextmanager
    def sentence_mode(self):
        """The decoder's sentence path for the target-memory states: zero memory, no dropout, no noise,
        no gradient."""
        saved = (self.zero_memory, self.training, self.state_perturbation)
        self.zero_memory, self.state_perturbation = True, None
        self.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.zero_memory, self.state_perturbation = saved[0], saved[2]
            self.train(saved[1])

    # ------------------------------------------------------------------ the memories
    def translation_states(self, encoder_out, rows: Tensor) -> Tensor:
        """s^{|y|} (R, H) of the current translations of the N-set ``rows``: each teacher-forced with its own
        source through the sentence path (module doc), or the rows of ``ctx_tgt_states`` when the caller
        already has them (:meth:`DocMemModel.encoder_out_with_targets`)."""
        if encoder_out.get("ctx_tgt_states"):
            return encoder_out["ctx_tgt_states"][0].index_select(0, rows)
        if not encoder_out.get("ctx_tgt_tokens"):
            raise UserDataError(f"--doc-context {self.doc_context} needs the current translations of the context "
                             f"(ctx_tgt_tokens): train with --doc-target-context generated|gold, decode with "
                             f"doc_bcd (or --doc-target-context), or use --zero-memory")
        tokens = encoder_out["ctx_tgt_tokens"][0].index_select(0, rows)
        lengths = encoder_out["ctx_tgt_lengths"][0].index_select(0, rows)
        prev = decoder_inputs(tokens, lengths, self.dictionary.eos(), self.dictionary.pad())
        prev = prev[:, : max(int(lengths.max()), 1)]
        enc = {"encoder_out": [encoder_out["nset_encoder_out"][0].index_select(0, rows).transpose(0, 1)],
               "encoder_padding_mask": [encoder_out["nset_padding_mask"][0].index_select(0, rows)],
               "encoder_final": [encoder_out["nset_final"][0].index_select(0, rows)]}
        with self.sentence_mode():
            _, extra = self.extract_features(prev, enc)
        return last_states(extra["states"][0], lengths)

    def nset_states(self, encoder_out, needed: Tensor) -> Tuple[Tensor, Tensor]:
        """Translation states of the N-set rows in ``needed`` (any shape, −1 ignored): (R, H) and the map
        N-set row → its row there (−1 elsewhere)."""
        N = encoder_out["nset_final"][0].size(0)
        rows = torch.unique(needed[needed.ge(0)])
        local = needed.new_full((N,), -1)
        local[rows] = torch.arange(rows.numel(), device=rows.device)
        return self.translation_states(encoder_out, rows), local

    def read_memories(self, encoder_out, hidden: Tensor) -> Dict[str, Tensor]:
        """The static per-sentence state entries (module doc)."""
        ctx_index = encoder_out["ctx_index"][0]
        B = ctx_index.size(0)
        if self.doc_context == "jean2017":
            prev = previous_row(ctx_index, encoder_out["ctx_distance"][0])
            if "nset_encoder_out" not in encoder_out:
                raise ValueError("jean2017 needs the encoder's N-set states")
            values = encoder_out["nset_encoder_out"][0].index_select(0, prev.clamp(min=0))
            mask = encoder_out["nset_padding_mask"][0].index_select(0, prev.clamp(min=0)) | prev.lt(0).unsqueeze(1)
            values = values.masked_fill(mask.unsqueeze(-1), 0.0)
            return {"jean_keys": self.jean_attention.project_keys(values), "jean_values": values, "jean_mask": mask}
        if self.doc_context == "prev_tgt":
            prev = previous_row(ctx_index, encoder_out["ctx_distance"][0])
            if bool(prev.lt(0).all()):
                return {"memory": hidden.new_zeros(B, self.memory_dim)}
            states, local = self.nset_states(encoder_out, prev)
            memory, _ = gather_rows(states, torch.where(prev.ge(0), local[prev.clamp(min=0)], prev).unsqueeze(1))
            return {"memory": memory.squeeze(1)}
        parts = []
        if self.use_src:
            parts.append(encoder_out["doc_src_context"][0])
        if self.use_tgt:
            self_row = encoder_out["self_row"][0]
            if bool(ctx_index.lt(0).all()):  # no context anywhere: c^tgt = 0 (the query is not needed)
                parts.append(hidden.new_zeros(B, self.hidden_size))
            else:
                states, local = self.nset_states(encoder_out, torch.cat([ctx_index.reshape(-1), self_row]))
                query = states[local[self_row]] + self.tgt_query_proj(encoder_out["encoder_final"][0])
                cells, mask = gather_rows(states, torch.where(ctx_index.ge(0), local[ctx_index.clamp(min=0)],
                                                              ctx_index))
                context, _ = memnet_read(query, cells, mask)  # c^tgt = MEMNET(M[Y^-j], s^j + W_at h^j)
                parts.append(context)
        return {"memory": torch.cat(parts, dim=-1).type_as(hidden)}

    # ------------------------------------------------------------------ rnnsearch hooks
    def step_input_dim(self, embed_dim: int) -> int:
        return embed_dim + (self.memory_dim if self.integration == "m2c" else 0)

    def initial_state(self, encoder_out):
        state = super().initial_state(encoder_out)
        hidden = state["hidden"]
        if self.zero_memory:
            if self.doc_context != "jean2017":
                state["memory"] = hidden.new_zeros(hidden.size(0), self.memory_dim)
            return state
        state.update(self.read_memories(encoder_out, hidden))
        return state

    def step_input(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int) -> Tensor:
        if self.integration != "m2c":
            return embedded
        if self.doc_context == "jean2017":
            memory = self.jean_context(state) if not self.zero_memory else \
                embedded.new_zeros(embedded.size(0), self.memory_dim)
        else:
            memory = state["memory"]
        return torch.cat([embedded, memory.type_as(embedded)], dim=-1)

    def jean_context(self, state: Dict[str, Tensor]) -> Tensor:
        """Jean et al.'s context vector at this step: attention from z_{t−1} (first layer) over the previous
        source sentence (zero if it has none: its values are zero, its mask then opened)."""
        mask = state["jean_mask"]
        mask = mask & ~mask.all(dim=1, keepdim=True)
        context, _ = self.jean_attention(state["hidden"][:, 0], state["jean_keys"], state["jean_values"], mask)
        return context

    def decoder_step(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int):
        features, new_state, weights = super().decoder_step(embedded, state, encoder_out, step)
        if self.integration == "m2o":
            features = torch.cat([features, state["memory"].type_as(features)], dim=-1)
        return features, new_state, weights

    def output_layer(self, features: Tensor) -> Tensor:
        if self.integration != "m2o":
            return super().output_layer(features)
        logits = super().output_layer(features[..., : self.out_dim])
        if self.zero_memory:
            return logits
        memory = features[..., self.out_dim:]
        C = self.context_dim if self.use_src else 0
        if self.use_src:
            logits = logits + self.output_src_memory(memory[..., :C])  # W_ys c^src
        if self.use_tgt:
            logits = logits + self.output_tgt_memory(memory[..., C:])  # W_yt c^tgt
        return logits


@register_model("docmem")
class DocMemModel(SentenceWarmStartMixin, RNNSearchModel):
    """Document-context NMT with memory networks and the local-context baselines (module doc)."""

    DOC_PARAM_PREFIXES = DOC_PARAM_PREFIXES
    #: the ``doc_translation`` task passes the context keys (``ctx_*``) to this model
    uses_document_context = True

    @staticmethod
    def add_args(parser):
        RNNSearchModel.add_args(parser)
        parser.add_argument("--doc-context", choices=DOC_CONTEXTS,
                            help="memory: the MemNet source/target memories (ch. 3); prev_tgt: the previous "
                                 "translation's last decoder state; jean2017: attention over the previous source")
        parser.add_argument("--doc-memories", choices=DOC_MEMORIES, help="which memories (--doc-context memory)")
        parser.add_argument("--memory-integration", choices=MEMORY_INTEGRATIONS,
                            help="m2c: readings are extra inputs of the first decoder layer; m2o: extra logit terms")
        parser.add_argument("--src-mem-encoder", choices=SRC_MEM_ENCODERS,
                            help="sentence vectors of the source memory: the NMT encoder's [fwd h_M; bwd h_1] "
                                 "(no gradient) or a frozen bi-LSTM from two lstm_lm checkpoints (--src-mem-lm)")
        parser.add_argument("--src-mem-lm", metavar="FWD.pt,BWD.pt",
                            help="forward and backward (reversed-source) lstm_lm checkpoints, dictionary = the "
                                 "source dictionary")
        parser.add_argument("--src-mem-lm-dims", metavar="E,H,L",
                            help="(filled in from --src-mem-lm) embedding, hidden size and layers of the LMs")
        parser.add_argument("--doc-rnn-dropout", type=float, metavar="D",
                            help="dropout on the input of the source memory's document bi-GRU")
        parser.add_argument("--zero-context", "--zero-memory", dest="zero_memory", action="store_true", default=None,
                            help="stage 1: every memory reading is zero (the sentence model exactly); "
                                 "--zero-memory is its earlier spelling")

    @classmethod
    def build_model(cls, args, task):
        docmem(args)
        if args.doc_context != "memory" and args.memory_integration == "m2o":
            raise UserDataError(f"--doc-context {args.doc_context} is a Memory-to-Context baseline (m2o not supported)")
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        enc_emb, dec_emb = cls.build_embeddings(args, src_dict, tgt_dict)
        use_src, _ = memory_layout(args)
        lm = cls.build_sentence_lm(args, src_dict) if use_src and args.src_mem_encoder == "rnnlm" else None
        encoder = DocMemEncoder(args, src_dict, enc_emb, lm)
        decoder = DocMemDecoder(args, tgt_dict, dec_emb, encoder.output_dim)
        return cls(encoder, decoder)

    @staticmethod
    def build_sentence_lm(args, src_dict) -> LMSentenceEncoder:
        """The frozen RNNLM sentence encoder: from the checkpoints when they exist (recording their sizes in
        ``args``), else empty at the recorded sizes (a trained model's checkpoint then fills it)."""
        fwd, bwd = parse_lm_paths(args.src_mem_lm)
        if os.path.exists(fwd) and os.path.exists(bwd):
            lm = LMSentenceEncoder.from_checkpoints(fwd, bwd, src_dict)
            args.src_mem_lm_dims = ",".join(str(x) for x in lm_sizes(fwd))
            return lm
        if not args.src_mem_lm_dims:
            raise FileNotFoundError(f"--src-mem-lm: {fwd} or {bwd} not found")
        emb, hidden, layers = (int(x) for x in str(args.src_mem_lm_dims).split(","))
        logger.warning("--src-mem-lm %s not found: the sentence LMs come from the model checkpoint", args.src_mem_lm)
        return LMSentenceEncoder(len(src_dict), emb, hidden, layers, src_dict.pad(), src_dict.eos())

    # ------------------------------------------------------------------ public interface (doc_bcd)
    @property
    def uses_target_context(self) -> bool:
        """Whether the output depends on the current translations of the context (``ctx_tgt_tokens``)."""
        return self.decoder.use_tgt or self.decoder.doc_context == "prev_tgt"

    @property
    def memory_states_are_decoder_states(self) -> bool:
        """Whether the target side of the memory (Eq. 3.4's M[Y^{-j}], PREV TGT's state) is the sentence path's
        top decoder state s^{|y|} at the step that predicts ⟨eos⟩: then the memory-disabled greedy decoding
        of a sentence (:meth:`memory_disabled`) computes it for its own output on the way."""
        return self.uses_target_context

    def encoder_out_with_targets(self, encoder_out: Dict[str, List[Tensor]], ctx_tgt_tokens: Tensor,
                                 ctx_tgt_lengths: Tensor, ctx_tgt_states: Optional[Tensor] = None
                                 ) -> Dict[str, List[Tensor]]:
        """``encoder_out`` as the encoder would return it given ``ctx_tgt_tokens`` / ``ctx_tgt_lengths``
        instead: the translations of the context only enter the target memory, which the decoder reads from
        these two entries (Eq. 3.4's c^tgt), so the sentence and N-set encodings and c^src (Fig. 3.3) are
        reused as they are (``doc_bcd``'s passes after the first encoding). ``ctx_tgt_states`` (N, H): the
        s^{|y|} of these translations when known (:meth:`memory_states`), read instead of teacher-forcing."""
        out = dict(encoder_out)
        out.pop("ctx_tgt_states", None)
        if "nset_final" in out:
            out["ctx_tgt_tokens"], out["ctx_tgt_lengths"] = [ctx_tgt_tokens], [ctx_tgt_lengths]
            if ctx_tgt_states is not None:
                out["ctx_tgt_states"] = [ctx_tgt_states]
        return out

    def memory_states(self, encoder_out: Dict[str, List[Tensor]], ctx_tgt_tokens: Tensor, ctx_tgt_lengths: Tensor,
                      rows: Tensor) -> Tensor:
        """s^{|y|} (R, H) of the translations ``ctx_tgt_tokens`` of the N-set ``rows`` (one teacher-forced pass
        through the sentence path, the target memory's own computation)."""
        out = self.encoder_out_with_targets(encoder_out, ctx_tgt_tokens, ctx_tgt_lengths)
        return self.decoder.translation_states(out, rows)

    @property
    def zero_memory(self) -> bool:
        return self.decoder.zero_memory

    @zero_memory.setter
    def zero_memory(self, value: bool) -> None:
        self.encoder.zero_memory = bool(value)
        self.decoder.zero_memory = bool(value)

    @contextlib.contextmanager
    def memory_disabled(self):
        """Run the model as its sentence model (every memory reading zero) inside the block."""
        saved = self.zero_memory
        self.zero_memory = True
        try:
            yield self
        finally:
            self.zero_memory = saved

    def after_sentence_warm_start(self) -> None:
        """Nothing to fill: the RNNLM sentence encoder was loaded when the model was built."""


# ---------------------------------------------------------------------------------------------- architectures
def docmem(args):
    """The docmem options' defaults (the model's sizes come from the arch, default ``rnnsearch_maruf``)."""
    set_default(args, "doc_context", "memory")
    set_default(args, "doc_memories", "both")
    set_default(args, "memory_integration", "m2c")
    set_default(args, "src_mem_encoder", "encoder")
    set_default(args, "src_mem_lm", None)
    set_default(args, "src_mem_lm_dims", None)
    set_default(args, "zero_memory", False)
    set_default(args, "dropout", 0.2)
    set_default(args, "doc_rnn_dropout", args.dropout)
    rnnsearch(args)


def thesis_size(args):
    """§3.5.1: rnnsearch_maruf (bi-GRU 512, 2-layer GRU decoder 512, alignment 256); dropout 0.2 (single
    memory), 0.5 with 0.2 on the document RNN (both memories)."""
    both = getattr(args, "doc_context", None) in (None, "memory") and getattr(args, "doc_memories", None) == "both"
    set_default(args, "dropout", 0.5 if both else 0.2)
    set_default(args, "doc_rnn_dropout", 0.2)
    ARCH_CONFIG_REGISTRY["rnnsearch_maruf"](args)
    docmem(args)


def bench_size(args):
    """The CPU benchmark's sizes (``rnnsearch_bench``: conditional GRU, emb 256, encoder 2x288, decoder 576,
    attention 288, all embeddings shared, dropout 0.2)."""
    ARCH_CONFIG_REGISTRY["rnnsearch_bench"](args)
    docmem(args)


def variant(size, **defaults):
    def arch(args):
        for key, value in defaults.items():
            set_default(args, key, value)
        size(args)

    arch.__doc__ = f"{size.__doc__} Defaults: {defaults}."
    return arch


def preset(size, defaults: dict):
    """The architecture of a :data:`PRESETS` entry: ``defaults``, then the sizes ``size``."""
    return variant(size, **defaults)


SIZES = (("", thesis_size), ("_bench", bench_size))
# arch -> (size, defaults): every memory system (integration x memories) and the two local-context baselines (§3.5)
PRESETS = {
    "docmem": (thesis_size, {"doc_memories": "both"}),
    **{f"docmem_{i}": (thesis_size, {"memory_integration": i, "doc_memories": "both"}) for i in MEMORY_INTEGRATIONS},
    **{f"docmem_{i}_{m}{suffix}": (size, {"memory_integration": i, "doc_memories": m})
       for i in MEMORY_INTEGRATIONS for m in DOC_MEMORIES for suffix, size in SIZES},
    **{f"{name}{suffix}": (size, {"doc_context": kind})
       for kind, name in (("prev_tgt", "docmem_prevtgt"), ("jean2017", "docmem_jean2017")) for suffix, size in SIZES},
}
register_presets("docmem", preset, PRESETS)


@register_model_architecture("docmem", "docmem_tiny")
def docmem_tiny(args):
    """Unit and command-line tests: emb 16, hidden 16 (encoder 2x16), 2-layer plain GRU decoder, attention 16,
    no dropout; both memories, Memory-to-Context."""
    set_default(args, "encoder_embed_dim", 16)
    set_default(args, "encoder_hidden_size", 16)
    set_default(args, "decoder_layers", 2)
    set_default(args, "decoder_variant", "plain")
    set_default(args, "dropout", 0.0)
    docmem(args)

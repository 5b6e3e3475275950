"""``docmem_wang2017``: the cross-sentence context model of Wang et al. (2017), the second local-context
baseline of Maruf (2019) ch. 3 (§3.5, Tables 3.4-3.5; the same hyper-parameters and two-stage training as the
memory models, footnote 10), built on ``docmem`` (:mod:`fairseq_ext.models.docmem`) through its hooks.

A hierarchical RNN summarises the previous ``--ctx-prev-sentences`` (3) source sentences into the document
vector D (:class:`~fairseq_ext.modules.local_context.HierarchicalSummary`; Wang et al. §2.1: a word-level GRU per
sentence, a sentence-level GRU over their last states) and D enters the decoder (Wang et al. §2.2):

* ``--doc-summary-input aux`` ("auxiliary context"): s_i = GRU(s_{i−1}, [ε[y_{i−1}]; c_i; D]) in the first decoder
  layer -- the Memory-to-Context input of Eq. 3.6 with D as the memory, as the thesis runs this baseline;
* ``gated_aux`` ("gating auxiliary context"): the same with z_i ⊙ D, z_i = σ(U_z s_{i−1} + W_z ε[y_{i−1}] +
  C_z c_i) (:class:`~fairseq_ext.modules.local_context.GatedMemoryInputGRUCell`);
* ``none``: no auxiliary input (with ``--doc-summary-init``: "initialisation" alone);
* ``--doc-summary-init``: s_0 = tanh(W_init mean_τ h_τ + W_D D + b), the decoder's initial state.

D = 0 for the first sentence of a document, and ``--zero-context`` gives the rnnsearch sentence model bit for
bit (stage 1; its checkpoint warm-starts the sentence parameters, ``--finetune-from-model``). Only the
sentences at distance −1 … −k are read, whatever context ``doc_translation`` gives.

Architectures: ``docmem_wang2017`` (aux, the thesis's Table 3.4 row), ``docmem_wang2017_gated``,
``docmem_wang2017_init``, ``docmem_wang2017_init_gated`` (Wang et al.'s best) at the thesis size
(``rnnsearch_maruf``), each also ``…_bench`` (``rnnsearch_bench``). D is as wide as the encoder's states; both
GRUs of the summary train with the translation loss.

Differences from the paper (our choices): the decoder initialisation keeps rnnsearch's mean-pooled term (Wang et
al.'s decoder starts from the last encoder state); the encoder initialisation ("Init_enc") is not offered; the
``conditional`` decoder's gate has no C_z c_i term (c_i is computed after the cell that reads D).

References: L. Wang, Z. Tu, A. Way and Q. Liu, "Exploiting Cross-Sentence Context for Neural Machine
Translation", EMNLP 2017; S. Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University,
2019, ch. 3.
"""
from typing import Dict, List, Optional

import torch.nn as nn
from fairseq.models import register_model
from torch import Tensor

from fairseq_ext.data.errors import UserDataError
from fairseq_ext.models.docmem import DocMemDecoder, DocMemEncoder, DocMemModel, bench_size, docmem, thesis_size
from fairseq_ext.modules.arch_utils import register_presets, set_default
from fairseq_ext.modules.local_context import (
    GatedMemoryInputGRUCell,
    HierarchicalSummary,
    add_prev_sentences_arg,
    nset_tokens,
    previous_rows,
)
from fairseq_ext.modules.rnn import make_cell

SUMMARY_INPUTS = ("aux", "gated_aux", "none")
DOC_CONTEXT = "wang2017"
WANG_PARAM_PREFIXES = ("encoder.summary.", "decoder.transition.cell.weight_mem", "decoder.transition.cell.gate_",
                       "decoder.summary_init.")


class Wang2017Encoder(DocMemEncoder):
    """docmem's encoder (the document keys) + D in ``encoder_out["doc_summary"]`` (B, C)."""

    def __init__(self, cfg, dictionary, embed_tokens):
        super().__init__(cfg, dictionary, embed_tokens)
        self.prev_sentences = cfg.ctx_prev_sentences
        self.summary = HierarchicalSummary(embed_tokens.embedding_dim, self.output_dim)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, ctx_src_tokens: Optional[Tensor] = None,
                ctx_src_lengths: Optional[Tensor] = None, ctx_index: Optional[Tensor] = None,
                ctx_distance: Optional[Tensor] = None, **kwargs) -> Dict[str, List[Tensor]]:
        out = super().forward(src_tokens, src_lengths, ctx_src_tokens, ctx_src_lengths, ctx_index, ctx_distance,
                              **kwargs)
        if not self.zero_memory:
            prev = previous_rows(out["ctx_index"][0], out["ctx_distance"][0], self.prev_sentences)
            tokens = nset_tokens(src_tokens, ctx_src_tokens, self.padding_idx)
            embed = lambda t: self.dropout(self.embed_tokens(t))  # noqa: E731  (the encoder's embeddings)
            out["doc_summary"] = [self.summary(embed, tokens, prev, self.padding_idx)]
        return out


class Wang2017Decoder(DocMemDecoder):
    """docmem's Memory-to-Context decoder with memory = D (``aux``), its gated form (``gated_aux``) or none, and
    the initial-state term W_D D (``--doc-summary-init``)."""

    def __init__(self, cfg, dictionary, embed_tokens, context_dim: int):
        self.summary_input = cfg.doc_summary_input
        super().__init__(cfg, dictionary, embed_tokens, context_dim)  # memory_dim = context_dim = |D|
        cell = self.transition.cell
        if self.summary_input == "gated_aux":
            self.transition.cell = GatedMemoryInputGRUCell(cell.input_size, self.memory_dim, self.hidden_size,
                                                           memory_offset=embed_tokens.embedding_dim)
        elif self.summary_input == "none":
            self.transition.cell = make_cell("gru", cell.input_size, self.hidden_size)
        self.summary_init = (nn.Linear(context_dim, self.num_layers * self.hidden_size, bias=False)
                             if cfg.doc_summary_init else None)  # W_D
        self.zero_memory = bool(cfg.zero_memory)  # applied to the cell just built

    def step_input_dim(self, embed_dim: int) -> int:
        return embed_dim + (self.memory_dim if self.summary_input != "none" else 0)

    def step_input(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int) -> Tensor:
        if self.summary_input == "none":
            return embedded
        return super().step_input(embedded, state, encoder_out, step)

    def initial_preactivation(self, encoder_out: Dict[str, List[Tensor]]) -> Tensor:
        pre = super().initial_preactivation(encoder_out)
        if self.summary_init is None or self.zero_memory:
            return pre
        return pre + self.summary_init(encoder_out["doc_summary"][0].type_as(pre))

    def read_memories(self, encoder_out, hidden: Tensor) -> Dict[str, Tensor]:
        return {"memory": encoder_out["doc_summary"][0].type_as(hidden)}


@register_model("docmem_wang2017")
class Wang2017DocModel(DocMemModel):
    """Wang et al. (2017) on rnnsearch (module doc); docmem's interface (``--zero-context``,
    ``memory_disabled``, the warm start)."""

    DOC_PARAM_PREFIXES = WANG_PARAM_PREFIXES

    @staticmethod
    def add_args(parser):
        DocMemModel.add_args(parser)
        add_prev_sentences_arg(parser, 3)
        parser.add_argument("--doc-summary-input", choices=SUMMARY_INPUTS,
                            help="how D enters the decoder: aux (an extra input of the first decoder layer, the "
                                 "thesis), gated_aux (gated by the decoder state, the word and the context) or none")
        parser.add_argument("--doc-summary-init", action="store_true", default=None,
                            help="D also enters the decoder's initial state")

    @classmethod
    def build_model(cls, args, task):
        wang2017_defaults(args)
        if args.doc_context != DOC_CONTEXT:
            raise UserDataError(f"--doc-context {args.doc_context}: the docmem_wang2017 model reads its own context "
                                f"(drop --doc-context, or use the docmem model)")
        if args.doc_summary_input == "none" and not args.doc_summary_init:
            raise UserDataError("--doc-summary-input none without --doc-summary-init: D would enter nowhere")
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        enc_emb, dec_emb = cls.build_embeddings(args, src_dict, tgt_dict)
        encoder = Wang2017Encoder(args, src_dict, enc_emb)
        decoder = Wang2017Decoder(args, tgt_dict, dec_emb, encoder.output_dim)
        return cls(encoder, decoder)


def wang2017_defaults(args):
    """Three previous sentences, D as an auxiliary decoder input (the thesis), no initialisation term; docmem's
    defaults (rnnsearch sizes unless a size function ran first)."""
    set_default(args, "doc_context", DOC_CONTEXT)
    set_default(args, "ctx_prev_sentences", 3)
    set_default(args, "doc_summary_input", "aux")
    set_default(args, "doc_summary_init", False)
    docmem(args)


def wang2017_preset(size, summary_input: str, init: bool):
    def arch(args):
        set_default(args, "doc_summary_input", summary_input)
        set_default(args, "doc_summary_init", init)
        set_default(args, "doc_context", DOC_CONTEXT)
        size(args)  # the sizes, then docmem's defaults
        wang2017_defaults(args)

    arch.__doc__ = f"Wang et al. (2017): --doc-summary-input {summary_input}, --doc-summary-init {init}; {size.__doc__}"
    return arch


# Wang et al. (2017) Table 2 system -> (size, --doc-summary-input, --doc-summary-init); the first is the thesis's
# Table 3.4 row ("the summary vector is an additional decoder input, as in M2C").
SIZES = (("", thesis_size), ("_bench", bench_size))
WANG_PRESETS = {f"docmem_wang2017{name}{suffix}": (size, *spec)
                for name, spec in (("", ("aux", False)),                 # +Auxi (Maruf Table 3.4)
                                   ("_gated", ("gated_aux", False)),     # +Gating Auxi
                                   ("_init", ("none", True)),            # +Init_dec
                                   ("_init_gated", ("gated_aux", True)))  # +Init_dec +Gating Auxi
                for suffix, size in SIZES}
register_presets("docmem_wang2017", wang2017_preset, WANG_PRESETS)

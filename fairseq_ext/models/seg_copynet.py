"""``seg_copynet``: the COPYNET baseline of SEG-NMT (Gu 2019 ch. 4, Table 4.2: "copy directly over the target
side of the searched pair"), CopyNet (§3.2, Eqs. 3.1–3.6; :mod:`fairseq_ext.models.copynet`) whose copy
source is the top-1 retrieved target Y' instead of the source sentence.

* The source X is encoded and attended as in rnnsearch (Eqs. 2.6–2.7).
* Y' = the target side of the first pair of ``tm_index`` (the best retrieved pair; ``seg_translation``
  task) is read by its own bidirectional RNN (``tm_rnn``, the width of the source encoder) over the
  decoder's target embeddings; its states h'_j are the copy keys: ψ_c(y'_j) = tanh(h'_jᵀ W_c) · z_t (Eq. 3.5
  with h_j = the states of Y').
* Generate and copy modes share one normaliser (Eqs. 3.1–3.3, V_X = the tokens of Y'); the copy mass of a
  token is summed onto its target id (Y' is in the target vocabulary, so there are no copy slots), the
  selective read (Eq. 3.6) reads the states of Y'. Copyable: every token of Y' but ⟨pad⟩ and ⟨/s⟩. An
  example without a retrieved pair has no copyable position: its copy scores are −∞ and the model is
  CopyNet's generate mode alone.

Train with task ``seg_translation`` and ``--criterion copynet_cross_entropy`` (the marginal likelihood) or
``seg_nmt_cross_entropy``. Archs: ``seg_copynet`` (the sizes of ``seg_nmt``: ``rnnsearch_jrc``),
``seg_copynet_bench`` (``rnnsearch_bench``), ``seg_copynet_tiny`` (tests).

References: Gu, Lu, Li, Li, "Incorporating Copying Mechanism in Sequence-to-Sequence Learning", ACL 2016;
Gu, Wang, Cho, Li, "Search Engine Guided Neural Machine Translation", AAAI 2018; Gu, "Efficient Neural
Machine Translation", PhD thesis, The University of Hong Kong, 2019.
"""
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from fairseq.models import ARCH_CONFIG_REGISTRY, register_model, register_model_architecture
from torch import Tensor

from fairseq_ext.models.copynet import CopyNetDecoder
from fairseq_ext.models.rnnsearch import RNNSearchDecoder, RNNSearchEncoder, RNNSearchModel, rnnsearch_tiny
from fairseq_ext.modules.copy_attention import selective_read
from fairseq_ext.modules.rnn import BiRNNEncoderStack
from fairseq_ext.data.errors import UserDataError


class SegCopyNetEncoder(RNNSearchEncoder):
    """rnnsearch's encoder + the top-1 retrieved target: ``encoder_out`` adds ``tm_states`` (B, L, C) (the
    states of Y', zero at pads), ``src_copy_ids`` (B, L) (its target ids) and ``src_copy_mask`` (B, L)."""

    def __init__(self, cfg, dictionary, embed_tokens, tgt_embed_tokens: nn.Embedding, tgt_dict):
        super().__init__(cfg, dictionary, embed_tokens)
        if self.output_dim % 2:
            raise UserDataError(f"seg_copynet's bidirectional Y' encoder needs an even encoder width, "
                             f"got {self.output_dim}")
        self.tm_embed_tokens = tgt_embed_tokens
        self.tm_rnn = BiRNNEncoderStack(cfg.rnn_type, tgt_embed_tokens.embedding_dim, self.output_dim // 2, 1, True)
        self.tgt_pad, self.tgt_eos = tgt_dict.pad(), tgt_dict.eos()

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None,
                tm_tgt_tokens: Optional[Tensor] = None, tm_index: Optional[Tensor] = None,
                **kwargs) -> Dict[str, List[Tensor]]:
        out = super().forward(src_tokens, src_lengths)
        B = src_tokens.size(0)
        if tm_index is None or tm_index.size(1) == 0 or tm_tgt_tokens is None or tm_tgt_tokens.size(0) == 0:
            tokens = src_tokens.new_full((B, 1), self.tgt_pad)
        else:
            top = tm_index[:, 0]
            tokens = tm_tgt_tokens.index_select(0, top.clamp(min=0))
            tokens = tokens.masked_fill(top.lt(0).unsqueeze(1), self.tgt_pad)
        pad = tokens.eq(self.tgt_pad)
        states, _ = self.tm_rnn(self.dropout(self.tm_embed_tokens(tokens)), pad)
        out["tm_states"] = [self.dropout(states)]
        out["src_copy_ids"] = [tokens]
        out["src_copy_mask"] = [~pad & tokens.ne(self.tgt_eos)]
        return out


class SegCopyNetDecoder(CopyNetDecoder):
    """CopyNet's decoder whose copy keys and selective read are the states of Y' (``tm_states``)."""

    def initial_state(self, encoder_out):
        state = RNNSearchDecoder.initial_state(self, encoder_out)
        states = encoder_out["tm_states"][0]
        state["copy_keys"] = self.copy_scorer.keys(states)
        state["copy_probs"] = states.new_zeros(states.shape[:2])  # no copy before step 1
        return state

    def step_input(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int) -> Tensor:
        prev = self.step_tokens[:, step - self.first_step]
        zeta = selective_read(state["copy_probs"], encoder_out["src_copy_ids"][0], encoder_out["src_copy_mask"][0],
                              prev, encoder_out["tm_states"][0])
        return torch.cat([embedded, zeta.type_as(embedded)], dim=-1)


@register_model("seg_copynet")
class SegCopyNetModel(RNNSearchModel):
    """CopyNet over the top-1 retrieved target (module doc)."""

    #: the ``seg_translation`` task passes the retrieved pairs (``tm_*``) to this model
    uses_translation_memory = True

    @classmethod
    def build_model(cls, args, task):
        seg_copynet_defaults(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        enc_emb, dec_emb = cls.build_embeddings(args, src_dict, tgt_dict)
        encoder = SegCopyNetEncoder(args, src_dict, enc_emb, dec_emb, tgt_dict)
        decoder = SegCopyNetDecoder(args, tgt_dict, dec_emb, encoder.output_dim, num_slots=0)
        return cls(encoder, decoder)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return self.decoder.get_normalized_probs(net_output, log_probs, sample)


def seg_copynet_defaults(args):
    ARCH_CONFIG_REGISTRY["rnnsearch_jrc"](args)


@register_model_architecture("seg_copynet", "seg_copynet")
def seg_copynet(args):
    """The COPYNET row of Table 4.2 at SEG-NMT's size (``rnnsearch_jrc``: GRU 1024, emb 512)."""
    seg_copynet_defaults(args)


@register_model_architecture("seg_copynet", "seg_copynet_bench")
def seg_copynet_bench(args):
    """``rnnsearch_bench``'s sizes."""
    ARCH_CONFIG_REGISTRY["rnnsearch_bench"](args)
    seg_copynet_defaults(args)


@register_model_architecture("seg_copynet", "seg_copynet_tiny")
def seg_copynet_tiny(args):
    """Unit and command-line tests: ``rnnsearch_tiny``."""
    rnnsearch_tiny(args)
    seg_copynet_defaults(args)

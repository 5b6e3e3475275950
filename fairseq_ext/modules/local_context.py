"""Local-context building blocks of the document baselines that read a fixed number of *previous* sentences
(Maruf 2019 §3.5 and §4.4: Wang et al. 2017, Miculicich et al. 2018), on the batch contract of
``doc_translation`` (``ctx_index`` / ``ctx_distance``, :mod:`fairseq_ext.data.documents`).

* :func:`previous_rows` -- the N-set rows of the sentences at distance −k … −1, one slot per distance (−1 where
  the document has none): whatever context the task gives (offline or online, any ``--doc-context-size``), a
  model reading only these slots never sees a later sentence.
* :class:`HierarchicalSummary` -- Wang et al. (2017)'s cross-sentence summary (§2.1 of the paper): a word-level
  GRU over each previous source sentence (its last state is the sentence vector S_k), a sentence-level GRU over
  S_{−k} … S_{−1} in document order, whose last state is the document vector D; D = 0 for a sentence without any
  previous sentence (our choice).
* :class:`GatedMemoryInputGRUCell` -- Wang et al.'s "gating auxiliary context": the first decoder GRU of
  :class:`~fairseq_ext.modules.memnet.MemoryInputGRUCell` reads z_i ⊙ D instead of D, with
  z_i = σ(U_z s_{i−1} + W_z ε[y_{i−1}] + C_z c_i) (bias-free as the paper's equation; C_z c_i only where c_i is
  known before the cell runs: the ``plain`` decoder; the ``conditional`` decoder attends after it).

References: L. Wang, Z. Tu, A. Way and Q. Liu, "Exploiting Cross-Sentence Context for Neural Machine
Translation", EMNLP 2017; L. Miculicich, D. Ram, N. Pappas and J. Henderson, "Document-Level Neural Machine
Translation with Hierarchical Attention Networks", EMNLP 2018; S. Maruf, "Document-wide Neural Machine
Translation", PhD thesis, Monash University, 2019 (Tables 3.4 and 4.3).
"""
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_ext.modules.memnet import MemoryInputGRUCell, pad_cat
from fairseq_ext.modules.rnn import BiRNNEncoderStack


def add_prev_sentences_arg(parser, default: int) -> None:
    """``--ctx-prev-sentences N``: the previous sentences a local-context baseline reads (Zhang et al. 2018: 2; Wang
    et al. 2017, Miculicich et al. 2018: 3)."""
    parser.add_argument("--ctx-prev-sentences", type=int, metavar="N",
                        help=f"previous sentences in the context (default {default})")


def previous_rows(ctx_index: Tensor, ctx_distance: Tensor, k: int) -> Tensor:
    """(B, k): column j holds the N-set row of the sentence at distance j − k (−k … −1, oldest first), −1 where
    there is none."""
    B = ctx_index.size(0)
    out = ctx_index.new_full((B, k + 1), -1)
    if ctx_index.size(1) == 0 or k <= 0:
        return out[:, :k]
    keep = ctx_index.ge(0) & ctx_distance.lt(0) & ctx_distance.ge(-k)
    slot = torch.where(keep, ctx_distance + k, torch.full_like(ctx_distance, k))  # column k: the discarded
    out.scatter_(1, slot, torch.where(keep, ctx_index, torch.full_like(ctx_index, -1)))
    return out[:, :k]


class HierarchicalSummary(nn.Module):
    """D = GRU_sent(GRU_word(x^{−k}), …, GRU_word(x^{−1})) (module doc), both GRUs ``hidden_size`` wide."""

    def __init__(self, embed_dim: int, hidden_size: int):
        super().__init__()
        self.word_rnn = BiRNNEncoderStack("gru", embed_dim, hidden_size, bidirectional=False)
        self.sentence_rnn = BiRNNEncoderStack("gru", hidden_size, hidden_size, bidirectional=False)
        self.output_dim = hidden_size

    def forward(self, embed, nset_tokens: Tensor, prev: Tensor, pad: int) -> Tensor:
        """``embed``: tokens → (R, S, E) embeddings (with their dropout); ``nset_tokens`` (N, S) the N-set's
        source tokens (any padding); ``prev`` (B, k) from :func:`previous_rows` → D (B, hidden)."""
        B, k = prev.shape
        has = prev.ge(0)
        if k == 0 or not bool(has.any()):
            return self.sentence_rnn.rnn.weight_hh_l0.new_zeros(B, self.output_dim)
        rows, where = torch.unique(prev[has], return_inverse=True)  # each needed sentence summarised once
        tokens = nset_tokens.index_select(0, rows)
        _, sentence = self.word_rnn(embed(tokens), tokens.eq(pad))   # S_j: the last state (R, H)
        slots = torch.zeros_like(prev)
        slots[has] = where
        seq = sentence.index_select(0, slots.reshape(-1)).view(B, k, -1)
        _, summary = self.sentence_rnn(seq, ~has)                    # D: the last state over the real slots
        return summary * has.any(1, keepdim=True).type_as(summary)


def nset_tokens(src_tokens: Tensor, ctx_src_tokens: Optional[Tensor], pad: int) -> Tensor:
    """The N-set's source tokens: the batch rows, then the extra rows (padding anywhere in a row)."""
    if ctx_src_tokens is None or ctx_src_tokens.size(0) == 0:
        return src_tokens
    return pad_cat([src_tokens, ctx_src_tokens], pad)


class GatedMemoryInputGRUCell(MemoryInputGRUCell):
    """:class:`MemoryInputGRUCell` whose memory m = D is gated first (module doc): z = σ(U_z h + W_x x) with x the
    cell's sentence input ([ε[y]; c] in the ``plain`` decoder, ε[y] in the ``conditional`` one); the GRU reads
    z ⊙ D. With ``use_memory`` off it is ``nn.GRUCell`` on x exactly, as its parent."""

    def __init__(self, input_size: int, memory_size: int, hidden_size: int, memory_offset: int):
        super().__init__(input_size, memory_size, hidden_size, memory_offset)
        self.gate_hidden = nn.Linear(hidden_size, memory_size, bias=False)  # U_z
        self.gate_input = nn.Linear(input_size, memory_size, bias=False)    # [W_z; C_z]

    def forward(self, x: Tensor, h: Optional[Tensor] = None) -> Tensor:
        if not self.use_memory:
            return super().forward(x, h)
        sentence, m = self.split(x)
        if h is None:
            h = x.new_zeros(x.size(0), self.hidden_size)
        z = torch.sigmoid(self.gate_hidden(h) + self.gate_input(sentence))
        a, b = self.memory_offset, self.memory_offset + self.memory_size
        return super().forward(torch.cat([x[:, :a], z * m, x[:, b:]], dim=-1), h)

"""The hierarchical attention network (HAN) context layer of Miculicich et al. (2018), the online baseline of
Maruf (2019) ch. 4 (Tables 4.3-4.5), with the interface of :class:`~fairseq_ext.modules.doc_attention.
DocContextLayer` (``prepare`` once per batch, ``forward`` per query word) so that it plugs into the ch. 4
document Transformer. For the query h_t of the current word and the previous sentences j (Eqs. 1-5 of the paper):

* word level: s^j_t = LN(MultiHead_w(LN(h_t), h^j, h^j)) -- one multi-head attention over the words of each
  context sentence (softmax, words only: BOS/EOS/pad masked);
* sentence level: d_t = MultiHead_s(LN(h_t), s_t, s_t) over the sentence summaries s^j_t of *this* query word
  (bottom-up: the sentence keys depend on h_t), softmax over the sentences;
* d_t = FFN(d_t) with a residual connection and its LayerNorm first (OpenNMT's position-wise FFN, as the authors'
  code); a word without any context gets d_t = 0;
* :class:`HANGate`: h̃_t = LN(λ_t ⊙ h_t + (1 − λ_t) ⊙ d_t), λ_t = σ(W_h h_t + W_d d_t) (Eq. 5; bias-free, as the
  ch. 4 gate of :class:`~fairseq_ext.modules.doc_attention.ContextGate` and the thesis's own HAN code; the
  final LayerNorm as both implementations).

The context states and the attention's query are detached (as the authors' code: the context layer trains its own
parameters and the gate, the sentence model gets its gradient through the gate). Projections are bias-free and
share :class:`~fairseq_ext.modules.doc_attention.ContextAttentionBase`'s conventions (per-head d_k scaling, fp32
masked softmax, exact zeros on masked entries).

What differs from Maruf's hierarchical attention (``--doc-attn hierarchical``): bottom-up instead of top-down
(sentence keys from the word-level summaries of the query, not the sentences' mean word keys), softmax at both
levels (no sparsemax), a LayerNorm between the levels, the residual FFN and the LayerNorm after the gate.

References: L. Miculicich, D. Ram, N. Pappas and J. Henderson, "Document-Level Neural Machine Translation with
Hierarchical Attention Networks", EMNLP 2018; S. Maruf, "Document-wide Neural Machine Translation", PhD thesis,
Monash University, 2019 (ch. 4).
"""
from typing import Dict

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules import LayerNorm
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor

from fairseq_ext.modules.doc_attention import (
    ContextAttentionBase,
    ContextGate,
    DocContext,
    gather_rows,
    masked_softmax,
)


class HANAttention(ContextAttentionBase):
    """One level of HAN: bias-free multi-head attention (Q, K, V, W^O) whose keys/values are given per batch
    sentence (the word level: the context words; the sentence level: the word-level summaries)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__(embed_dim, num_heads, dropout)
        self.q_proj, self.k_proj, self.v_proj = self.linear(), self.linear(), self.linear()
        self.reset_parameters()


class HANContextLayer(nn.Module):
    """The HAN context layer (module doc): ``prepare(DocContext)`` → per batch sentence the projected words of
    its context sentences; ``forward(query (B, T, C), prepared)`` → d (B, T, C) (zero without context)."""

    def __init__(self, embed_dim: int, ffn_embed_dim: int, num_heads: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, activation_dropout: float = 0.0, activation_fn: str = "relu",
                 **unused):
        super().__init__()
        self.word_attn = HANAttention(embed_dim, num_heads, attention_dropout)
        self.sent_attn = HANAttention(embed_dim, num_heads, attention_dropout)
        self.query_word_layer_norm = LayerNorm(embed_dim)
        self.query_sent_layer_norm = LayerNorm(embed_dim)
        self.word_layer_norm = LayerNorm(embed_dim)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.ffn_layer_norm = LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)

    def prepare(self, ctx: DocContext) -> Dict[str, Tensor]:
        """Word keys and values of each batch sentence's context, (B, K, L, H, d_k); masks (B, K, L) and (B, K).
        Everything is indexed by the batch sentence on dim 0 (an incremental state, reordered with the beam)."""
        attn = self.word_attn
        words = ctx.words.detach()
        valid = ctx.index.ge(0)
        word_mask = gather_rows(ctx.word_mask, ctx.index) & valid.unsqueeze(-1)
        return {"k_w": gather_rows(attn.heads(attn.k_proj(words)), ctx.index),
                "v_w": gather_rows(attn.heads(attn.v_proj(words)), ctx.index),
                "word_mask": word_mask, "sent_mask": word_mask.any(-1)}

    def forward(self, query: Tensor, prepared: Dict[str, Tensor], need_weights: bool = False):
        """``query`` (B, T, C) → (d (B, T, C), {"word": (B, H, T, K, L), "sentence": (B, H, T, K)} or None)."""
        h = query.detach()
        w, s = self.word_attn, self.sent_attn
        q_w = w.query(w.q_proj, self.query_word_layer_norm(h))                          # B H T D
        scores = torch.einsum("bhtd,bklhd->bhtkl", q_w, prepared["k_w"])
        alpha_w = masked_softmax(scores, prepared["word_mask"][:, None, None])          # per sentence
        summary = torch.einsum("bhtkl,bklhd->bthkd", w.dropout_module(alpha_w), prepared["v_w"])
        B, T, H, K, D = summary.shape
        summary = w.out_proj(summary.permute(0, 1, 3, 2, 4).reshape(B, T, K, H * D))  # s^j_t: B T K C
        summary = self.word_layer_norm(summary)
        q_s = s.query(s.q_proj, self.query_sent_layer_norm(h))                           # B H T D
        k_s, v_s = s.heads(s.k_proj(summary)), s.heads(s.v_proj(summary))              # B T K H D
        alpha_s = masked_softmax(torch.einsum("bhtd,btkhd->bhtk", q_s, k_s),
                                 prepared["sent_mask"][:, None, None, :])
        d = s.finish(torch.einsum("bhtk,btkhd->bhtd", s.dropout_module(alpha_s), v_s))  # B T C
        d = self.dropout_module(d)
        y = self.activation_dropout_module(self.activation_fn(self.fc1(self.ffn_layer_norm(d))))
        d = d + self.dropout_module(self.fc2(y))
        d = d * ContextAttentionBase.has_context(prepared).to(d.dtype)[:, None, None]
        return d, ({"word": alpha_w, "sentence": alpha_s} if need_weights else None)


class HANGate(ContextGate):
    """h̃ = LN(λ ⊙ h + (1 − λ) ⊙ d), λ = σ(W_h h + W_d d) (Eq. 5 of the paper, then the final LayerNorm)."""

    def __init__(self, embed_dim: int):
        super().__init__(embed_dim)
        self.layer_norm = LayerNorm(embed_dim)

    def forward(self, r: Tensor, c: Tensor, return_gate: bool = False):
        out, gamma = super().forward(r, c, return_gate=True)
        out = self.layer_norm(out)
        return (out, gamma) if return_gate else out

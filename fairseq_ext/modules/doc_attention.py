"""Document-level context layer of Maruf (2019) ch. 4 ("Selective Attention for Context-aware NMT",
Maruf, Martins & Haffari, NAACL 2019): sparsemax (Eq. 4.1), hierarchical multi-head attention
(Eq. 4.2–4.4), flat sentence- or word-level multi-head attention (Eq. 4.5), the Document-level Context
Layer (§4.3.1, Fig. 4.1) and context gating (Eq. 4.6–4.7).

The document context of a batch arrives as a :class:`DocContext`: the word vectors of the batch's
*sentence set* (N rows: the batch sentences, then the extra context sentences; see the batch contract
of ``doc_translation``), a mask of their words (BOS/EOS/pad excluded, as in the thesis's code) and
``index`` (B, K), the rows of each batch sentence's context (−1 = padding). Every attention module
projects the N rows once (:meth:`prepare`), gathers them per batch sentence, and then attends for
each query word (the attention is *dynamic*, §4.3.1.2) with :meth:`forward`. Everything
:meth:`prepare` returns is indexed by the batch sentence on dim 0, so it can be cached in an
incremental state and reordered for the beam (:func:`reorder_prepared`, which keeps each tensor's layout).

Conventions shared by all modules: no biases in the attention projections and the gate (thesis code),
per-head d_k = d_model / heads for the 1/√d_k scaling (our choice), scores normalised in fp32 with a
*finite* large negative mask (exact zeros on masked entries, our choice), and a sentence without any
context word gets an all-zero weight vector, hence a **zero context vector** from the context layer
(our choice: the thesis's code spreads uniform weight over masked sentences instead, which leaks
future sentences in the online setting).

References: S. Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University,
2019 (ch. 4); S. Maruf, A. F. T. Martins and G. Haffari, "Selective Attention for Context-aware Neural
Machine Translation", NAACL 2019; A. F. T. Martins and R. F. Astudillo, "From Softmax to Sparsemax",
ICML 2016; Z. Tu et al., "Learning to Remember Translation History with a Continuous Cache", TACL 2018
(context gating).
"""
import math
from typing import Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import LayerNorm
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor

DOC_ATTENTION_TYPES = ("sentence", "word", "hierarchical")
WORD_NORMS = ("softmax", "sparsemax")
MASK_VALUE = -1e9  # finite: sparsemax sorts its input (our choice)


# ----------------------------------------------------------------------------- normalisers
def sparsemax(scores: Tensor, mask: Optional[Tensor] = None, dim: int = -1) -> Tensor:
    """sparsemax(z) = argmin_{α ∈ Δ} ‖α − z‖² (Eq. 4.1; Martins & Astudillo 2016) along ``dim``, by
    ``entmax.sparsemax``. ``mask`` (broadcastable to ``scores``; True = keep) sets the other entries
    to a finite large negative value first; they get exactly 0, and a row with no kept entry is an
    all-zero vector (with zero, finite gradients). fp16/bf16 scores are normalised in fp32; the result
    has ``scores.dtype``."""
    return normalise(scores, mask, dim, "sparsemax")


def masked_softmax(scores: Tensor, mask: Optional[Tensor] = None, dim: int = -1) -> Tensor:
    """Softmax with the same masking conventions as :func:`sparsemax`."""
    return normalise(scores, mask, dim, "softmax")


def normalise(scores: Tensor, mask: Optional[Tensor], dim: int, kind: str) -> Tensor:
    """:func:`sparsemax` / :func:`masked_softmax` by ``kind``; ``mask`` None: ``scores`` are used as they are (a
    caller that masked them with :data:`MASK_VALUE` itself gets exact zeros on the masked entries of a row with at
    least one kept entry, since a finite −10⁹ gives exactly 0 under both normalisers; an all-masked row is then
    uniform, not zero)."""
    from entmax import sparsemax as entmax_sparsemax

    dtype = scores.dtype
    if scores.size(dim) == 0:
        return scores.clone()
    low = scores.dtype in (torch.float16, torch.bfloat16)
    x = scores.float() if low else scores  # fp32 at least
    if mask is not None:
        mask = mask.expand_as(x)
        x = x.masked_fill(~mask, MASK_VALUE)
    if kind == "sparsemax":
        p = entmax_sparsemax(x, dim=dim)
    elif kind == "softmax":
        p = F.softmax(x, dim=dim)
    else:
        raise ValueError(f"unknown normaliser {kind!r}")
    if mask is not None:
        p = p.masked_fill(~mask, 0.0)  # exact zeros; an all-masked row becomes all zeros
    return p.to(dtype)


# ----------------------------------------------------------------------------- the context memory
class DocContext(NamedTuple):
    """The context of a batch. ``words`` (N, L, C): key vectors of the N-set's tokens; ``word_mask``
    (N, L) bool: True on the words (not BOS/EOS/pad); ``index`` (B, K): the N-set rows of each batch
    sentence's context, −1 = padding; ``values`` (N, L, C): the value vectors when they differ from the
    keys (decoder integration: keys = source-attention outputs, values = decoder outputs)."""

    words: Tensor
    word_mask: Tensor
    index: Tensor
    values: Optional[Tensor] = None

    def value_vectors(self) -> Tensor:
        return self.words if self.values is None else self.values


def word_mask_of(tokens: Tensor, dictionary) -> Tensor:
    """True where ``tokens`` is a word (not pad, EOS or BOS of ``dictionary``)."""
    return tokens.ne(dictionary.pad()) & tokens.ne(dictionary.eos()) & tokens.ne(dictionary.bos())


def sentence_vectors(ctx: DocContext, values: bool = False) -> Tuple[Tensor, Tensor]:
    """``(N, C)`` per-sentence averages of the word key (or ``values``) vectors (K_s, V_s, §4.3.3) and
    ``(N,)`` whether a row has any word (a row without words is never attended to)."""
    words = ctx.value_vectors() if values else ctx.words
    m = ctx.word_mask.to(words.dtype).unsqueeze(-1)
    count = m.sum(1)
    return (words * m).sum(1) / count.clamp(min=1), count.squeeze(-1) > 0


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` for an (N, ...) tensor and a (B, K) index with −1 padding (→ row 0, to be masked)."""
    flat = index.clamp(min=0).reshape(-1)
    return x.index_select(0, flat).view(*index.shape, *x.shape[1:])


def left_pad_merge(a: Tensor, a_pad: Tensor, b: Tensor, b_pad: Tensor) -> Tuple[Tensor, Tensor]:
    """Stack two batch-first, left-padded sequences ``a`` (B, La, C) and ``b`` (E, Lb, C) (with their
    padding masks, True = pad) into (B+E, max(La, Lb), C), left-padding the shorter one with zeros."""
    L = max(a.size(1), b.size(1))

    def pad(x, m):
        extra = L - x.size(1)
        if extra == 0:
            return x, m
        return (torch.cat([x.new_zeros(x.size(0), extra, *x.shape[2:]), x], 1),
                torch.cat([m.new_ones(m.size(0), extra), m], 1))

    a, a_pad = pad(a, a_pad)
    b, b_pad = pad(b, b_pad)
    return torch.cat([a, b], 0), torch.cat([a_pad, b_pad], 0)


def reorder_prepared(prepared: Dict[str, Tensor], new_order: Tensor) -> Dict[str, Tensor]:
    """The prepared context of the rows ``new_order`` (a beam's reordering); the same dict, not a copy of the whole
    context memory, when the order keeps every row in place (a decoding step in which no row finished)."""
    rows = next(iter(prepared.values())).size(0) if prepared else 0
    if new_order.numel() == rows and torch.equal(new_order, torch.arange(rows, device=new_order.device)):
        return prepared
    return {k: select_rows(v, new_order) for k, v in prepared.items()}


def select_rows(x: Tensor, rows: Tensor) -> Tensor:
    """``x[rows]`` along dim 0, in ``x``'s layout: a head-major memory (dim 1 outermost in storage, as the
    H-attention's word keys and values) stays head-major, so its readers still need no copy."""
    if x.dim() > 1 and x.stride(1) == x.size(0) * x.stride(0):
        return x.transpose(0, 1).index_select(1, rows).transpose(0, 1)
    return x.index_select(0, rows)


# ----------------------------------------------------------------------------- attention modules
class ContextAttentionBase(nn.Module):
    """Multi-head context attention over a :class:`DocContext`; bias-free projections, per-head d_k,
    attention dropout on the final weights, output projection W^O."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by {num_heads} heads")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    def linear(self) -> nn.Linear:
        return nn.Linear(self.embed_dim, self.embed_dim, bias=False)

    def reset_parameters(self):
        """fairseq's MultiheadAttention initialisation (input projections xavier_uniform with gain
        1/√2, output projection xavier_uniform)."""
        for name, mod in self.named_children():
            if isinstance(mod, nn.Linear):
                nn.init.xavier_uniform_(mod.weight, gain=1.0 if name == "out_proj" else 1 / math.sqrt(2))

    def heads(self, x: Tensor) -> Tensor:
        """(..., C) → (..., H, d_k)."""
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim)

    def query(self, proj: nn.Linear, x: Tensor) -> Tensor:
        """(B, T, C) → (B, H, T, d_k), scaled by 1/√d_k."""
        return self.heads(proj(x) * self.scaling).transpose(1, 2)

    def finish(self, out: Tensor) -> Tensor:
        """(B, H, T, d_k) → (B, T, C) through W^O."""
        B, H, T, D = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * D))

    @staticmethod
    def has_context(prepared: Dict[str, Tensor]) -> Tensor:
        """(B,) whether a batch sentence has at least one context sentence with a word."""
        return prepared["sent_mask"].any(-1)


class HierarchicalMultiheadAttention(ContextAttentionBase):
    """H-MULTIHEAD(Q_s, K_s, Q_w, K_w, V_w) = W^O Concat(head_1..head_H) (§4.3.1.1, Fig. 4.2), each head

    * α_s = sparsemax(K_sᵀQ_s/√d_k) over the context sentences (Eq. 4.2),
    * α_w^j = sparsemax or softmax(K_w^jᵀQ_w/√d_k) over the words of sentence j (Eq. 4.3,
      ``word_norm``: "sparse-sparse" or "sparse-soft"),
    * α_hier^j = α_s(j)·α_w^j (Eq. 4.4; the weights of the whole document sum to 1), read V_w α_hier.

    Q_s and Q_w are two projections of the same query vectors (footnote 5); five bias-free input
    projections plus W^O (6·d² parameters). Word attention is computed for every sentence (footnote 4)
    and the gradient flows through α_s (the thesis's code treats α_s as a constant there)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, word_norm="softmax"):
        super().__init__(embed_dim, num_heads, dropout)
        if word_norm not in WORD_NORMS:
            raise ValueError(f"unknown word_norm {word_norm!r}")
        self.word_norm = word_norm
        self.q_s_proj, self.q_w_proj = self.linear(), self.linear()
        self.k_s_proj, self.k_w_proj, self.v_w_proj = self.linear(), self.linear(), self.linear()
        self.reset_parameters()

    def prepare(self, ctx: DocContext) -> Dict[str, Tensor]:
        """Each N-set row projected once (K_s, K_w, V_w), then laid out per batch sentence as the two matrix
        products of :meth:`forward` read them: ``k_w`` and ``v_w`` (B, H, K·L, d_k), views of head-major (H, B, K·L,
        d_k) tensors that one ``index_select`` fills. The word scores and the values read of every query word (all T
        of the encoder, or one decoding step) are then two batched GEMMs over H·B that copy no context (the word
        attention costs B·T·K·L per head: every query word reads every word of its context)."""
        sents, has_words = sentence_vectors(ctx)
        valid = ctx.index.ge(0)
        k_s = gather_rows(self.heads(self.k_s_proj(sents)), ctx.index)          # B K H D
        word_mask = gather_rows(ctx.word_mask, ctx.index) & valid.unsqueeze(-1)  # B K L
        return {
            "k_s": k_s.permute(0, 2, 1, 3),                # B H K D
            "k_w": self.word_memory(self.k_w_proj, ctx.words, ctx.index),
            "v_w": self.word_memory(self.v_w_proj, ctx.value_vectors(), ctx.index),
            "sent_mask": valid & gather_rows(has_words, ctx.index),
            "word_mask": word_mask,
        }

    def word_memory(self, proj: nn.Linear, words: Tensor, index: Tensor) -> Tensor:
        """(N, L, C) word vectors → their projection per batch sentence's context: (B, H, K·L, d_k), a view of a
        contiguous (H, B, K·L, d_k) tensor. The N rows are made head-major first (N·L·C, once), so the B·K·L·C
        gather is the only copy of the context (one ``index_select``; its backward one ``index_add``)."""
        (B, K), (N, L) = index.shape, words.shape[:2]
        x = self.heads(proj(words)).permute(2, 0, 1, 3).contiguous()             # H N L D
        x = x.index_select(1, index.clamp(min=0).reshape(-1))                    # H B·K L D (-1 -> row 0, masked)
        return x.view(self.num_heads, B, K * L, self.head_dim).transpose(0, 1)

    def forward(self, query: Tensor, prepared: Dict[str, Tensor], need_weights: bool = False):
        """``query`` (B, T, C) → (B, T, C) and, with ``need_weights``, ``{"sentence": α_s (B, H, T, K),
        "word": α_hier (B, H, T, K, L)}`` (before dropout)."""
        B, T, _ = query.shape
        q_s, q_w = self.query(self.q_s_proj, query), self.query(self.q_w_proj, query)
        sent_mask = prepared["sent_mask"][:, None, None, :]                        # B 1 1 K
        alpha_s = sparsemax(torch.einsum("bhtd,bhkd->bhtk", q_s, prepared["k_s"]), sent_mask)
        word_mask = prepared["word_mask"]
        K, L = word_mask.shape[-2:]
        H = self.num_heads
        # head-major (H, B, ...): the memory's own layout (prepare), so neither product copies it
        k_w, v_w = prepared["k_w"].transpose(0, 1), prepared["v_w"].transpose(0, 1)       # H B K·L D
        word_scores = torch.matmul(q_w.transpose(0, 1), k_w.transpose(-1, -2))           # H B T K·L
        # masked in place (the scores are ours) before the per-sentence view: a write through the view would make
        # the backward copy the whole score gradient. A sentence without words gets a uniform row here, and
        # α_s = 0 exactly, so its α_hier is zero without a second pass.
        word_scores.masked_fill_(~word_mask.reshape(1, B, 1, K * L), MASK_VALUE)
        alpha_w = normalise(word_scores.view(H, B, T, K, L), None, -1, self.word_norm)
        a_s = alpha_s.transpose(0, 1).unsqueeze(-1)                                      # H B T K 1
        alpha = alpha_w * a_s if alpha_w.requires_grad else alpha_w.mul_(a_s)   # Eq. 4.4
        probs = self.dropout_module(alpha).view(H, B, T, K * L)
        out = self.finish(torch.matmul(probs, v_w).transpose(0, 1))
        return out, ({"sentence": alpha_s, "word": alpha.transpose(0, 1)} if need_weights else None)


class SentenceMultiheadAttention(ContextAttentionBase):
    """Flat sentence-level attention (Eq. 4.5, * = s): V_s softmax(K_sᵀQ_s/√d_k) over the context
    sentences, K_s = V_s = per-sentence average word vectors (§4.3.3, footnote 9). 4·d² parameters."""

    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__(embed_dim, num_heads, dropout)
        self.q_proj, self.k_proj, self.v_proj = self.linear(), self.linear(), self.linear()
        self.reset_parameters()

    def prepare(self, ctx: DocContext) -> Dict[str, Tensor]:
        sents, has_words = sentence_vectors(ctx)
        sent_values = sents if ctx.values is None else sentence_vectors(ctx, values=True)[0]
        valid = ctx.index.ge(0)
        return {
            "k": gather_rows(self.heads(self.k_proj(sents)), ctx.index).permute(0, 2, 1, 3),  # B H K D
            "v": gather_rows(self.heads(self.v_proj(sent_values)), ctx.index).permute(0, 2, 1, 3),
            "sent_mask": valid & gather_rows(has_words, ctx.index),
        }

    def forward(self, query: Tensor, prepared: Dict[str, Tensor], need_weights: bool = False):
        q = self.query(self.q_proj, query)
        alpha = masked_softmax(torch.einsum("bhtd,bhkd->bhtk", q, prepared["k"]),
                               prepared["sent_mask"][:, None, None, :])
        out = self.finish(torch.matmul(self.dropout_module(alpha), prepared["v"]))
        return out, ({"sentence": alpha} if need_weights else None)


class WordMultiheadAttention(ContextAttentionBase):
    """Flat word-level attention (Eq. 4.5, * = w): one softmax over every word of every context
    sentence, K_w = V_w = the word vectors. 4·d² parameters."""

    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__(embed_dim, num_heads, dropout)
        self.q_proj, self.k_proj, self.v_proj = self.linear(), self.linear(), self.linear()
        self.reset_parameters()

    def prepare(self, ctx: DocContext) -> Dict[str, Tensor]:
        B, K = ctx.index.shape
        L = ctx.words.size(1)
        valid = ctx.index.ge(0)
        word_mask = gather_rows(ctx.word_mask, ctx.index) & valid.unsqueeze(-1)

        def kv(proj, x):
            x = gather_rows(self.heads(proj(x)), ctx.index)                        # B K L H D
            return x.permute(0, 3, 1, 2, 4).reshape(B, self.num_heads, K * L, self.head_dim)

        return {"k": kv(self.k_proj, ctx.words), "v": kv(self.v_proj, ctx.value_vectors()),
                "word_mask": word_mask.view(B, K * L),
                "sent_mask": word_mask.any(-1)}

    def forward(self, query: Tensor, prepared: Dict[str, Tensor], need_weights: bool = False):
        q = self.query(self.q_proj, query)
        alpha = masked_softmax(torch.matmul(q, prepared["k"].transpose(-1, -2)),
                               prepared["word_mask"][:, None, None, :])
        out = self.finish(torch.matmul(self.dropout_module(alpha), prepared["v"]))
        return out, ({"word": alpha} if need_weights else None)


def build_context_attention(doc_attn: str, embed_dim: int, num_heads: int, dropout: float = 0.0,
                            word_norm: str = "softmax") -> ContextAttentionBase:
    if doc_attn == "hierarchical":
        return HierarchicalMultiheadAttention(embed_dim, num_heads, dropout, word_norm)
    if doc_attn == "sentence":
        return SentenceMultiheadAttention(embed_dim, num_heads, dropout)
    if doc_attn == "word":
        return WordMultiheadAttention(embed_dim, num_heads, dropout)
    raise ValueError(f"unknown doc attention {doc_attn!r} (choose from {DOC_ATTENTION_TYPES})")


# ----------------------------------------------------------------------------- layer and gate
class DocContextLayer(nn.Module):
    """The Document-level Context Layer (§4.3.1, Fig. 4.1): multi-head context attention → dropout →
    LayerNorm → position-wise FFN (fc1, activation, activation dropout, fc2, dropout) → LayerNorm, with
    **no residual connections** (footnote 3; the order of the thesis's code). A batch sentence without
    context gets a zero vector (our choice)."""

    def __init__(self, embed_dim: int, ffn_embed_dim: int, num_heads: int, doc_attn: str = "hierarchical",
                 word_norm: str = "softmax", dropout: float = 0.1, attention_dropout: float = 0.0,
                 activation_dropout: float = 0.0, activation_fn: str = "relu"):
        super().__init__()
        self.context_attn = build_context_attention(doc_attn, embed_dim, num_heads, attention_dropout,
                                                    word_norm)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.context_attn_layer_norm = LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.activation_dropout_module = FairseqDropout(activation_dropout,
                                                        module_name=self.__class__.__name__)
        self.final_layer_norm = LayerNorm(embed_dim)

    def prepare(self, ctx: DocContext) -> Dict[str, Tensor]:
        """Project and gather the context once per batch (per sentence in incremental decoding)."""
        return self.context_attn.prepare(ctx)

    def forward(self, query: Tensor, prepared: Dict[str, Tensor], need_weights: bool = False):
        """``query`` (B, T, C) → the context vectors c (B, T, C) (and the attention weights)."""
        x, weights = self.context_attn(query, prepared, need_weights=need_weights)
        x = self.context_attn_layer_norm(self.dropout_module(x))
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        x = self.final_layer_norm(self.dropout_module(self.fc2(x)))
        has_ctx = ContextAttentionBase.has_context(prepared)
        return x * has_ctx.to(x.dtype)[:, None, None], weights


class ContextGate(nn.Module):
    """Context gating (Eq. 4.6–4.7, after Tu et al. 2018): γ = σ(W_r r + W_d c), r̃ = γ⊙r + (1−γ)⊙c;
    W_r and W_d are d×d without bias (thesis code)."""

    def __init__(self, embed_dim: int):
        super().__init__()
        self.w_r = nn.Linear(embed_dim, embed_dim, bias=False)
        self.w_d = nn.Linear(embed_dim, embed_dim, bias=False)
        nn.init.xavier_uniform_(self.w_r.weight)
        nn.init.xavier_uniform_(self.w_d.weight)

    def forward(self, r: Tensor, c: Tensor, return_gate: bool = False):
        gamma = torch.sigmoid(self.w_r(r) + self.w_d(c))
        out = gamma * r + (1 - gamma) * c
        return (out, gamma) if return_gate else out

"""The lexical translation module of Nguyen (2021) ch. 5 (§5.4; Nguyen & Chiang, NAACL 2018) and the
discrete-lexicon bias of the Arthur et al. (2016) baseline (§5.5.2).

Lexical module (§5.4, the equations there are unnumbered): with f_s the embeddings of the source
words and a_t(s) the main model's attention weights at target step t,

    f^ℓ_t = tanh Σ_s a_t(s) f_s                          (attention-weighted *embeddings*)
    h^ℓ_t = tanh(W f^ℓ_t) + f^ℓ_t                        (one-hidden-layer FFNN with a skip)
    lexical logits = W^ℓ h^ℓ_t + b^ℓ,                    added to W^o h̃_t + b^o of Eq. 5.1

"we normalize h^ℓ_t and the rows of W^ℓ as well" (fixnorm, §5.3): with ``radius`` r > 0,
h^ℓ ← r·h^ℓ/‖h^ℓ‖ and W^ℓ_e ← r·W^ℓ_e/‖W^ℓ_e‖ (a reparameterisation in the forward pass), so that
each lexical logit minus b^ℓ lies in [−r², r²]. W^ℓ is *not* tied to the word embeddings; b^ℓ is a
separate, zero-initialised bias. ``radius=0`` leaves both unnormalised.

Choices where the thesis is silent: no bias inside the FFNN (``ffn_bias``); dropout
on the attended source embeddings and on h^ℓ before normalisation (as in the reference implementation); W^ℓ initialised
U[−0.01, 0.01] (the thesis' init for every parameter; only the row directions matter under fixnorm).

Everything is vectorised over the batch and all target positions: one batched matmul (B,T,S)×(B,S,d).

Arthur et al. baseline (:class:`DiscreteLexiconBias`): see its docstring; the lexicon itself is built
by the ``fairseq-ext-arthur-lexicon`` tool.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import FairseqDropout

from fairseq_ext.modules.fast_inference import frozen_derived
from fairseq_ext.modules.norms import fixnorm
from fairseq_ext.data.errors import UserDataError


class LexicalTranslation(nn.Module):
    """f^ℓ = tanh(a·f); h^ℓ = tanh(W f^ℓ) + f^ℓ; logits^ℓ = FIXNORM_r(W^ℓ) FIXNORM_r(h^ℓ) + b^ℓ (§5.4)."""

    def __init__(self, embed_dim: int, num_words: int, radius: float = 0.0, dropout: float = 0.0,
                 ffn_bias: bool = False):
        super().__init__()
        self.embed_dim, self.num_words, self.radius = embed_dim, num_words, float(radius or 0.0)
        self.ffn = nn.Linear(embed_dim, embed_dim, bias=ffn_bias)  # W
        self.weight = nn.Parameter(torch.empty(num_words, embed_dim))  # W^ℓ (not tied)
        self.bias = nn.Parameter(torch.zeros(num_words))  # b^ℓ
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        nn.init.xavier_uniform_(self.ffn.weight)
        if ffn_bias:
            nn.init.zeros_(self.ffn.bias)
        nn.init.uniform_(self.weight, -0.01, 0.01)

    # -- the two halves of the module ------------------------------------------------------------
    def context(self, attn: torch.Tensor, src_embed: torch.Tensor, src_padding_mask=None) -> torch.Tensor:
        """f^ℓ_t = tanh Σ_s a_t(s) f_s for every target step: attn (B,T,S), src_embed (B,S,d) → (B,T,d)."""
        f = self.dropout_module(src_embed)
        if src_padding_mask is not None:  # attention on pads is 0 anyway; guards against NaN rows
            f = f.masked_fill(src_padding_mask.unsqueeze(-1), 0.0)
        return torch.tanh(torch.bmm(attn.to(f.dtype), f))

    def hidden(self, f_lex: torch.Tensor) -> torch.Tensor:
        """h^ℓ = tanh(W f^ℓ) + f^ℓ, dropout, then (radius r > 0) r·h^ℓ/‖h^ℓ‖."""
        h = self.dropout_module(torch.tanh(self.ffn(f_lex)) + f_lex)
        return fixnorm(h, self.radius) if self.radius > 0 else h

    def output_weight(self) -> torch.Tensor:
        # computed once per weight version under --quantize int8 (then an int8 matrix)
        return frozen_derived(fixnorm, self.weight, self.radius) if self.radius > 0 else self.weight

    def logits(self, h_lex: torch.Tensor) -> torch.Tensor:
        """W^ℓ h^ℓ + b^ℓ (rows of W^ℓ at norm r under fixnorm)."""
        return F.linear(h_lex, self.output_weight().to(h_lex.dtype), self.bias.to(h_lex.dtype))

    def forward(self, attn: torch.Tensor, src_embed: torch.Tensor, src_padding_mask=None) -> torch.Tensor:
        """Lexical logits (B,T,V) from attention (B,T,S) over source embeddings (B,S,d)."""
        return self.logits(self.hidden(self.context(attn, src_embed, src_padding_mask)))

    def lexicon_logits(self, src_embed: torch.Tensor) -> torch.Tensor:
        """p^ℓ(y | f) = softmax(W^ℓ h^ℓ + b^ℓ) logits for single source words (§5.6.5): all attention on
        one word, so f^ℓ = tanh(f) and h^ℓ = FIXNORM_r(tanh(W tanh f) + tanh f) (as in the reference implementation). (N,d) → (N,V)."""
        return self.logits(self.hidden(torch.tanh(src_embed)))

    def extra_repr(self) -> str:
        return (f"{self.embed_dim} -> {self.num_words}, radius={self.radius or 'none'}, "
                f"ffn_bias={self.ffn.bias is not None}")


# ----------------------------------------------------------------------- Arthur et al. (2016)
class DiscreteLexiconBias(nn.Module):
    """The "bias" integration of a discrete translation lexicon (Arthur et al. 2016 Eq. 9 / thesis
    §5.5.2, the ch. 5 baseline "Arthur")::

        p(e_t | e_<t, f) = softmax(W^o h̃_t + b^o + log(L_f a_t + ε))

    L_f ∈ R^{|V_e|×|f|} has the lexical distributions p_l(· | f_j) of the source words as columns and
    a_t ∈ R^{|f|} is the decoder's attention at step t, so p_lex,t(e) = Σ_j a_t(j) p_l(e | f_j);
    ε = 0.001 (Arthur et al.'s value). :meth:`forward` returns log(p_lex,t + ε) (B,T,V_e), to be added to
    the logits.

    The lexicon is kept as the top-k entries of every source type: ``index`` (V_f, k) target ids and
    ``prob`` (V_f, k) p_l(e | f) (0 where a type has fewer than k entries). Both are persistent
    buffers, so a checkpoint carries its lexicon; when a state dict is loaded they take its shapes.
    p_lex is scattered from the (B, T, S·k) products, never materialising a dense (B, S, V_e) L_f
    (the thesis' KFTT run did not fit on the GPU with a dense one).
    """

    def __init__(self, num_src: int, num_tgt: int, eps: float = 1e-3):
        super().__init__()
        self.num_src, self.num_tgt, self.eps = num_src, num_tgt, float(eps)
        self.register_buffer("index", torch.zeros(num_src, 0, dtype=torch.int32))
        self.register_buffer("prob", torch.zeros(num_src, 0))
        self.loaded = False  # a lexicon was given (set_lexicon) or read from a state dict

    @torch.no_grad()
    def set_lexicon(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """Load p_l(e | f) given as the COO entries of a sparse (V_f × V_e) matrix: ``indices`` (2, nnz)
        rows (f, e), ``values`` (nnz,). Each row f must be a (sub-)distribution: Σ_e p_l(e | f) ≤ 1."""
        f, e = indices[0].long(), indices[1].long()
        values = values.float()
        if len(f) and (f.min() < 0 or f.max() >= self.num_src or e.min() < 0 or e.max() >= self.num_tgt):
            raise UserDataError(f"lexicon entries outside the {self.num_src} x {self.num_tgt} dictionaries")
        if len(values) and (values.min() < 0 or values.max() > 1):
            raise UserDataError("lexicon probabilities must lie in [0, 1]")
        row_sums = torch.zeros(self.num_src).index_add_(0, f, values)
        if len(f) and row_sums.max() > 1 + 1e-4:
            raise UserDataError(f"lexicon row of source type {int(row_sums.argmax())} sums to "
                             f"{float(row_sums.max()):.4f} > 1")
        counts = torch.bincount(f, minlength=self.num_src)
        k = int(counts.max()) if len(f) else 0
        by_prob = torch.argsort(-values, stable=True)
        order = by_prob[torch.argsort(f[by_prob], stable=True)]  # by f, then by decreasing p
        f, e, values = f[order], e[order], values[order]
        rank = torch.arange(len(f)) - (torch.cumsum(counts, 0) - counts)[f]
        index = torch.zeros(self.num_src, k, dtype=torch.int32)
        prob = torch.zeros(self.num_src, k)
        index[f, rank] = e.int()
        prob[f, rank] = values
        self.index = index.to(self.index.device)
        self.prob = prob.to(self.prob.device, self.prob.dtype)
        self.loaded = True

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        for name in ("index", "prob"):  # the checkpoint's lexicon, whatever its k
            key = prefix + name
            if key in state_dict:
                old = self._buffers[name]
                self._buffers[name] = torch.empty(state_dict[key].shape, dtype=old.dtype, device=old.device)
                self.loaded = True
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def lexical_probs(self, attn: torch.Tensor, src_tokens: torch.Tensor) -> torch.Tensor:
        """p_lex = L_f a_t for every step: attn (B,T,S) over the source tokens (B,S) → (B,T,V_e), float32."""
        if not self.loaded:
            raise RuntimeError("no Arthur lexicon: the --arthur-lexicon file was missing when the model "
                               "was built and no checkpoint supplied one")
        bsz, tgt_len, src_len = attn.shape
        k = self.index.size(1)
        out = attn.new_zeros(bsz, tgt_len, self.num_tgt, dtype=torch.float32)
        if k == 0:
            return out
        idx = self.index[src_tokens].long().reshape(bsz, 1, src_len * k).expand(bsz, tgt_len, src_len * k)
        weights = attn.float().unsqueeze(-1) * self.prob[src_tokens].float().unsqueeze(1)  # (B,T,S,k)
        return out.scatter_add(2, idx, weights.reshape(bsz, tgt_len, src_len * k))

    def forward(self, attn: torch.Tensor, src_tokens: torch.Tensor) -> torch.Tensor:
        """log(L_f a_t + ε) (B,T,V_e), the bias added to the output logits."""
        return torch.log(self.lexical_probs(attn, src_tokens) + self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_src} -> {self.num_tgt}, top-{self.index.size(1)}, eps={self.eps}"

"""The lexical translation module of Nguyen (2021) ch. 5 (§5.4; Nguyen & Chiang, NAACL 2018),
plus token-level word dropout (§6.3.1).

Lexical module (§5.4, the equations there are unnumbered): with f_s the embeddings of the source
words and a_t(s) the main model's attention weights at target step t,

    f^ℓ_t = tanh Σ_s a_t(s) f_s                          (attention-weighted *embeddings*)
    h^ℓ_t = tanh(W f^ℓ_t) + f^ℓ_t                        (one-hidden-layer FFNN with a skip)
    lexical logits = W^ℓ h^ℓ_t + b^ℓ,                    added to W^o h̃_t + b^o of Eq. 5.1

"we normalize h^ℓ_t and the rows of W^ℓ as well" (fixnorm, §5.3): with ``radius`` r > 0,
h^ℓ ← r·h^ℓ/‖h^ℓ‖ and W^ℓ_e ← r·W^ℓ_e/‖W^ℓ_e‖ (a reparameterisation in the forward pass), so that
each lexical logit minus b^ℓ lies in [−r², r²]. W^ℓ is *not* tied to the word embeddings; b^ℓ is a
separate, zero-initialised bias. ``radius=0`` leaves both unnormalised.

Choices where the thesis is silent (spec 002 §5.7): no bias inside the FFNN (``ffn_bias``); dropout
on the attended source embeddings and on h^ℓ before normalisation [RI]; W^ℓ initialised
U[−0.01, 0.01] (the thesis' init for every parameter; only the row directions matter under fixnorm).

Everything is vectorised over the batch and all target positions: one batched matmul (B,T,S)×(B,S,d).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import FairseqDropout

from fairseq_ext.modules.norms import fixnorm


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
        return fixnorm(self.weight, self.radius) if self.radius > 0 else self.weight

    def logits(self, h_lex: torch.Tensor) -> torch.Tensor:
        """W^ℓ h^ℓ + b^ℓ (rows of W^ℓ at norm r under fixnorm)."""
        return F.linear(h_lex, self.output_weight().to(h_lex.dtype), self.bias.to(h_lex.dtype))

    def forward(self, attn: torch.Tensor, src_embed: torch.Tensor, src_padding_mask=None) -> torch.Tensor:
        """Lexical logits (B,T,V) from attention (B,T,S) over source embeddings (B,S,d)."""
        return self.logits(self.hidden(self.context(attn, src_embed, src_padding_mask)))

    def lexicon_logits(self, src_embed: torch.Tensor) -> torch.Tensor:
        """p^ℓ(y | f) = softmax(W^ℓ h^ℓ + b^ℓ) logits for single source words (§5.6.5): all attention on
        one word, so f^ℓ = tanh(f) and h^ℓ = FIXNORM_r(tanh(W tanh f) + tanh f) [RI]. (N,d) → (N,V)."""
        return self.logits(self.hidden(torch.tanh(src_embed)))

    def extra_repr(self) -> str:
        return (f"{self.embed_dim} -> {self.num_words}, radius={self.radius or 'none'}, "
                f"ffn_bias={self.ffn.bias is not None}")


def word_dropout(tokens: torch.Tensor, p: float, unk: int, nspecial: int, training: bool = True,
                 generator=None) -> torch.Tensor:
    """Replace each non-special token by ``unk`` with probability ``p`` (training only) — the word
    dropout of §6.3.1 ("instead of zeroing the word embeddings, we randomly replace tokens with
    UNK"). Specials (ids < ``nspecial``: <s>, <pad>, </s>, <unk>) are never replaced."""
    if not training or p <= 0:
        return tokens
    drop = torch.rand(tokens.shape, device=tokens.device, generator=generator) < p
    return tokens.masked_fill(drop & tokens.ge(nspecial), unk)

"""ℓ2-based normalisations of Nguyen (2021), ch. 6 ("Transformers without Tears") and ch. 5 (FixNorm).

* :class:`ScaleNorm` — ``g · x / ‖x‖`` with one scalar ``g`` per norm (Eq. 6.5), initialised to √d
  (§6.3.3); ``learnable=False`` is the fixed-g variant of Table 6.7 (g frozen at √d).
* :class:`RMSNorm` — Zhang & Sennrich's ``g_i · x_i / RMS(x)`` (per-unit g, init 1, no bias); with all
  g_i = 1 it equals ScaleNorm with g = √d ("tying the g_i of RMSNORM and dividing by √d retrieves
  SCALENORM", §6.4.2).
* :func:`fixnorm` / :class:`FixNormEmbedding` — FIXNORM(w) = r · w/‖w‖ (§6.2.3; Ch. 5 W_e = r v_e/‖v_e‖),
  a reparameterisation applied in the forward pass. Combined with a ScaleNorm output this gives
  Eq. 6.6, g·(w·x)/(‖w‖‖x‖).

Norms are computed in float32 (also under bf16 autocast) and ‖x‖ is clamped at ``eps`` = 1e-5 (as in the reference implementation).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import LayerNorm
from fairseq_ext.data.errors import UserDataError

NORM_TYPES = ("layernorm", "scalenorm", "scalenorm-fixed", "rmsnorm")


def _l2(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x.norm(dim=-1, keepdim=True).clamp(min=eps)


class ScaleNorm(nn.Module):
    """SCALENORM(x; g) = g · x/‖x‖ (Eq. 6.5): project onto the sphere of radius g.

    ``g`` is a single learned scalar initialised to √d (§6.3.3) (``scale`` overrides the init);
    with ``learnable=False`` it is a buffer frozen at that value (fixed-g ScaleNorm, Table 6.7).
    """

    def __init__(self, dim: int, scale: float = None, learnable: bool = True, eps: float = 1e-5):
        super().__init__()
        self.dim, self.eps, self.learnable = dim, eps, learnable
        g = torch.tensor([math.sqrt(dim) if scale is None else float(scale)])
        if learnable:
            self.g = nn.Parameter(g)
        else:
            self.register_buffer("g", g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * (self.g.float() / _l2(xf, self.eps))).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, g={'learned' if self.learnable else 'fixed'}, eps={self.eps}"


class RMSNorm(nn.Module):
    """RMSNORM (Zhang & Sennrich 2019; §6.4.2, Table 6.7): g_i · x_i / RMS(x), RMS(x) = ‖x‖/√d.

    One learned gain per unit (the O(Ld) variant of Table 6.7), initialised to 1, no bias.
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        rms = _l2(xf, self.eps) / math.sqrt(self.dim)
        return (xf / rms * self.weight.float()).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


def build_norm(norm_type: str, dim: int, learnable: bool = None, export: bool = False) -> nn.Module:
    """The norm of ``--norm-type`` for a ``dim``-dimensional sublayer.

    ``layernorm`` returns fairseq's own :func:`fairseq.modules.LayerNorm`, so that the model reduces
    exactly to fairseq's transformer. ``learnable`` overrides whether a ScaleNorm's g is learned
    (the fixed-g model learns the g of its final decoder output norm, as in the reference implementation).
    """
    if norm_type == "layernorm":
        return LayerNorm(dim, export=export)
    if norm_type in ("scalenorm", "scalenorm-fixed"):
        return ScaleNorm(dim, learnable=(norm_type == "scalenorm") if learnable is None else learnable)
    if norm_type == "rmsnorm":
        return RMSNorm(dim)
    raise UserDataError(f"unknown --norm-type {norm_type!r}; choose from {', '.join(NORM_TYPES)}")


def fixnorm(weight: torch.Tensor, radius: float = 1.0, eps: float = 1e-5) -> torch.Tensor:
    """FIXNORM(w) = r · w/‖w‖, row by row (§6.2.3; Ch. 5: W_e = r v_e/‖v_e‖). Zero rows stay zero."""
    return weight * (radius / _l2(weight.float(), eps)).to(weight.dtype)


class FixNormEmbedding(nn.Embedding):
    """Word embeddings reparameterised to a fixed norm ``radius`` in the forward pass (FIXNORM).

    Initialised U[−0.01, 0.01] (padding row 0) as in (§6.3.3); the tied output projection uses
    :func:`fixnorm` of the same ``weight``. Only the looked-up rows are normalised (same values).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int, radius: float = 1.0):
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx)
        self.radius = radius
        nn.init.uniform_(self.weight, -0.01, 0.01)
        with torch.no_grad():
            self.weight[padding_idx].zero_()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return fixnorm(F.embedding(tokens, self.weight, self.padding_idx), self.radius)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", fixnorm radius={self.radius}"


def add_fixnorm_args(parser):
    """``--fixnorm`` / ``--fixnorm-radius``, shared by the transformer and LSTM families. The radius
    has no global default: each architecture states its own (1 for the transformer archs, Eq. 6.6;
    5, or 3.5 with the lexical module, for the LSTM archs of Table 5.4)."""
    parser.add_argument("--fixnorm", action="store_true",
                        help="l2-normalise the target word embeddings and the output projection rows "
                             "(FixNorm / fixnorm)")
    parser.add_argument("--fixnorm-radius", type=float, metavar="R",
                        help="their norm r (default set by the architecture: 1 for transformer archs, "
                             "5 for lstm_luong archs)")

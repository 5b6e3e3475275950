"""Universal Lexical Representation (ULR) and Mixture of Language Experts (MoLE) for extremely
low-resource NMT: Jiatao Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong
Kong, 2019, ch. 5 (also Gu, Hassan, Devlin, Li, "Universal Neural Machine Translation for Extremely Low
Resource Languages", NAACL 2018).

ULR (§5.3.1, :class:`ULREmbedding`): fixed query embeddings ε_Q[x] (projected by the orthogonal O_k of
Eq. 5.4, :func:`procrustes`), fixed keys ε_K[u] and trained values ε_U[u] of the universal tokens, a trained
matrix A::

    (5.3)  q(u | x) = softmax_u( ε_K[u]ᵀ · A · ε_Q[x] / τ )                   τ = 0.05, fixed
    (5.2)  ε[x] = Σ_i ε_U[u_i] · q(u_i | x)
    (5.5)  ε[x] = α(x) · ε_E[x] + β(x) · Σ_i ε_U[u_i] · q(u_i | x)            β = 1

Queries, keys and α are buffers (saved, never trained); a zero query row gives a uniform q
(:func:`alpha_with_missing` for a learned fallback); ``language_specific=False`` is pure ULR (Eq. 5.2);
``closest_only=True`` is the "Closest Uni-Token Only" ablation of Table 5.4.

MoLE (§5.3.2): K experts and a gate on every encoder state (Eq. 5.6) with the gate loss of Eq. 5.7
(:func:`mole_gate_loss`); sentences of the low-resource language do not update MoLE.

Torch only: the offline side (``fairseq-ext-ulr``) writes the arrays, the model loads them.
"""
import argparse
import os
from typing import Dict, Optional, Tuple

import numpy as np

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq_ext.modules.arch_utils import set_default
from fairseq_ext.data.errors import UserDataError

DEFAULT_TEMPERATURE = 0.05
ULR_FILES = ("query.npy", "key.npy", "alpha.npy")  # written by ``fairseq-ext-ulr project``


# ----------------------------------------------------------------------------------------------- Eq. 5.4
def procrustes(x: Tensor, y: Tensor) -> Tensor:
    """Orthogonal O (d, d) maximising Σ_i x_iᵀ O y_i over seed pairs (Eq. 5.4; Smith et al., 2017).

    ``x`` (n, d) source (query) vectors, ``y`` (n, d) English (key) vectors, row i a seed pair.  With
    Xᵀ Y = U Σ Vᵀ, O = U Vᵀ.  The projected query (column form Oᵀ ε_Q[x]) is, for row vectors,
    ``x @ O`` ≈ y.  Computed in float64; returned in ``x``'s dtype.
    """
    x = torch.as_tensor(x)
    y = torch.as_tensor(y)
    if x.dim() != 2 or x.shape != y.shape:
        raise ValueError(f"procrustes needs two (n, d) matrices of the same shape, got {tuple(x.shape)} "
                         f"and {tuple(y.shape)}")
    dtype = x.dtype if x.is_floating_point() else torch.float32
    m = x.double().t() @ y.double()
    u, _, vh = torch.linalg.svd(m)
    return (u @ vh).to(dtype)


def alpha_with_missing(alpha: Tensor, query: Tensor) -> Tensor:
    """α of Eq. 5.5 also set to 1 for the pieces whose query row is zero (specials, pieces without a
    monolingual embedding, whose q would be uniform): the spec's fallback to a learned embedding.
    ``alpha`` (V,) bool, ``query`` (V, dq) → (V,) bool."""
    alpha = torch.as_tensor(alpha).bool()
    query = torch.as_tensor(query)
    if alpha.shape[0] != query.shape[0]:
        raise ValueError(f"alpha has {alpha.shape[0]} rows but query has {query.shape[0]}")
    return alpha | (query.abs().sum(-1) == 0).to(alpha.device)


# ----------------------------------------------------------------------------------------------- ULR
class ULREmbedding(nn.Module):
    """ε[x] = α(x)·ε_E[x] + Σ_i ε_U[u_i] q(u_i|x), q(u|x) = softmax_u(ε_Kᵀ A ε_Q[x] / τ) (Eqs. 5.2/5.3/5.5).

    Args:
        num_embeddings: V, the source dictionary size (rows of ``query`` and ``alpha``).
        embedding_dim: d, the size of ε_U (and ε_E).
        padding_idx: the pad index (zero output).
        query: (V, dq) projected query embeddings O_kᵀ ε_Q[x] (zero rows: no embedding).
        key: (M, dq) key embeddings ε_K of the universal tokens.
        alpha: (V,) bool, α(x) of Eq. 5.5 (ignored when ``language_specific=False``); None: all False.
        temperature: τ of Eq. 5.3 (0.05).
        fixed_A: A stays the identity (a buffer) — "+ULR (A=I)".
        language_specific: add α(x)·ε_E[x] (Eq. 5.5); False: pure ULR (Eq. 5.2), no ε_E.
        closest_only: q is a one-hot at the closest universal token ("Closest Uni-Token Only").
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int], query, key,
                 alpha=None, temperature: float = DEFAULT_TEMPERATURE, fixed_A: bool = False,
                 language_specific: bool = True, closest_only: bool = False):
        super().__init__()
        query = torch.as_tensor(query, dtype=torch.float32).detach().clone()
        key = torch.as_tensor(key, dtype=torch.float32).detach().clone()
        if query.dim() != 2 or key.dim() != 2 or query.shape[1] != key.shape[1]:
            raise ValueError(f"query (V, dq) and key (M, dq) must share dq: got {tuple(query.shape)} and "
                             f"{tuple(key.shape)}")
        if query.shape[0] != num_embeddings:
            raise ValueError(f"query has {query.shape[0]} rows but the dictionary has {num_embeddings} entries")
        if alpha is None:
            alpha = torch.zeros(num_embeddings, dtype=torch.bool)
        alpha = torch.as_tensor(alpha).bool().detach().clone()
        if alpha.shape != (num_embeddings,):
            raise ValueError(f"alpha must have shape ({num_embeddings},), got {tuple(alpha.shape)}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.num_universal, self.query_dim = key.shape[0], key.shape[1]
        self.temperature = float(temperature)
        self.fixed_A, self.language_specific, self.closest_only = fixed_A, language_specific, closest_only

        self.register_buffer("query", query)  # ε_Q projected, frozen
        self.register_buffer("key", key)  # ε_K, frozen
        self.register_buffer("alpha", alpha)  # α(x), frozen
        eye = torch.eye(self.query_dim)
        if fixed_A:
            self.register_buffer("A", eye)
        else:
            self.A = nn.Parameter(eye)
        self.universal = nn.Parameter(torch.randn(self.num_universal, embedding_dim) * embedding_dim ** -0.5)
        if language_specific:
            self.embed = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
            nn.init.normal_(self.embed.weight, mean=0.0, std=embedding_dim ** -0.5)
            if padding_idx is not None:
                nn.init.zeros_(self.embed.weight[padding_idx])
        else:
            self.embed = None

    # -- Eq. 5.3 -----------------------------------------------------------------------------------------
    def scores(self, ids: Tensor) -> Tensor:
        """ε_K[u]ᵀ A ε_Q[x] / τ for token ids (N,) → (N, M), float32."""
        q = self.query[ids].float()
        return (q @ self.A.float().t()) @ self.key.float().t() / self.temperature

    def probs(self, ids: Tensor) -> Tensor:
        """q(u | x) for token ids (N,) → (N, M) (one-hots under ``closest_only`` except for zero queries)."""
        s = self.scores(ids)
        p = s.softmax(-1)
        if self.closest_only:
            onehot = F.one_hot(s.argmax(-1), self.num_universal).to(p.dtype)
            has_query = self.query[ids].abs().sum(-1) > 0
            p = torch.where(has_query.unsqueeze(-1), onehot, p)
        return p

    def universal_probs(self, tokens: Tensor) -> Tensor:
        """q(u | x) for every position: tokens (B, T) → (B, T, M) (for inspection; not used by forward)."""
        uniq, inv = torch.unique(tokens, return_inverse=True)
        return self.probs(uniq)[inv]

    # -- Eqs. 5.2 / 5.5 -----------------------------------------------------------------------------------
    def embed_ids(self, ids: Tensor) -> Tensor:
        """ε[x] for distinct token ids (N,) → (N, d)."""
        dtype = self.universal.dtype
        out = self.probs(ids).to(dtype) @ self.universal  # Σ_i ε_U[u_i] q(u_i | x)
        if self.embed is not None:
            out = out + self.embed(ids) * self.alpha[ids].unsqueeze(-1).to(dtype)
        if self.padding_idx is not None:
            out = out.masked_fill((ids == self.padding_idx).unsqueeze(-1), 0.0)
        return out

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, T) long → (B, T, embedding_dim); q is computed once per distinct id of the batch."""
        uniq, inv = torch.unique(tokens, return_inverse=True)
        return self.embed_ids(uniq)[inv]

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, padding_idx={self.padding_idx}, "
                f"M={self.num_universal}, dq={self.query_dim}, tau={self.temperature}, fixed_A={self.fixed_A}, "
                f"language_specific={self.language_specific}, closest_only={self.closest_only}")


# ----------------------------------------------------------------------------------------------- MoLE
class MoLE(nn.Module):
    """Mixture of Language Experts (Eq. 5.6): s' = Σ_k f_k(h) softmax(g(h))_k (+ h with ``residual``).

    ``num_experts`` K (one per auxiliary language), experts Linear(dim→hidden)–ReLU–Linear(hidden→dim)
    (``hidden`` defaults to ``dim``), gate Linear(dim→K).  ``forward(h (T,B,C), lowres (B,) bool)`` →
    (s' (T,B,C), gate logits (T,B,K)); for the ``lowres`` sentences the experts and the gate use detached
    parameters (no gradient reaches MoLE from them; h still gets one).
    """

    def __init__(self, dim: int, num_experts: int, hidden: Optional[int] = None, residual: bool = False):
        super().__init__()
        if num_experts < 1:
            raise ValueError(f"MoLE needs at least one expert, got {num_experts}")
        hidden = hidden or dim
        self.dim, self.num_experts, self.hidden, self.residual = dim, num_experts, hidden, residual
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim)) for _ in range(num_experts))
        self.gate = nn.Linear(dim, num_experts)

    def _mix(self, h: Tensor, detach: bool) -> Tuple[Tensor, Tensor]:
        def p(t: Tensor) -> Tensor:
            return t.detach() if detach else t

        logits = F.linear(h, p(self.gate.weight), p(self.gate.bias))
        outs = []
        for e in self.experts:
            lin1, lin2 = e[0], e[2]
            outs.append(F.linear(F.relu(F.linear(h, p(lin1.weight), p(lin1.bias))), p(lin2.weight), p(lin2.bias)))
        f = torch.stack(outs, dim=-1)  # (..., C, K)
        w = logits.float().softmax(-1).to(f.dtype)
        s = (f * w.unsqueeze(-2)).sum(-1)
        if self.residual:
            s = s + h
        return s, logits

    def forward(self, h: Tensor, lowres: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        if lowres is None or not bool(lowres.any()):
            return self._mix(h, detach=False)
        lowres = lowres.to(device=h.device, dtype=torch.bool)
        if bool(lowres.all()):
            return self._mix(h, detach=True)
        low_idx = lowres.nonzero(as_tuple=True)[0]
        aux_idx = (~lowres).nonzero(as_tuple=True)[0]
        s_aux, g_aux = self._mix(h.index_select(1, aux_idx), detach=False)
        s_low, g_low = self._mix(h.index_select(1, low_idx), detach=True)
        T, B = h.shape[0], h.shape[1]
        s = s_aux.new_zeros(T, B, s_aux.shape[-1]).index_copy(1, aux_idx, s_aux).index_copy(1, low_idx, s_low)
        g = g_aux.new_zeros(T, B, self.num_experts).index_copy(1, aux_idx, g_aux).index_copy(1, low_idx, g_low)
        return s, g

    def extra_repr(self) -> str:
        return f"dim={self.dim}, experts={self.num_experts}, hidden={self.hidden}, residual={self.residual}"


def mole_gate_loss(gate_logits: Tensor, expert: Tensor, padding_mask: Optional[Tensor] = None) -> Tensor:
    """Eq. 5.7, un-normalised: Σ over the tokens of auxiliary sentences of −log softmax(g(h))[expert].

    ``gate_logits`` (T, B, K); ``expert`` (B,) long, the expert (auxiliary language) of each sentence, −1 for
    the low-resource language (no gate loss); ``padding_mask`` (B, T) bool, True at pads (ignored).
    Returns a float32 scalar (the criterion divides by what it normalises with)."""
    T, B, K = gate_logits.shape
    expert = expert.to(gate_logits.device).long()
    if bool((expert >= K).any()):
        raise ValueError(f"expert index out of range for {K} experts: {expert.tolist()}")
    logp = gate_logits.float().log_softmax(-1)
    nll = -logp.gather(-1, expert.clamp(min=0).view(1, B, 1).expand(T, B, 1)).squeeze(-1)  # (T, B)
    valid = (expert >= 0).view(1, B).expand(T, B)
    if padding_mask is not None:
        valid = valid & ~padding_mask.to(gate_logits.device).bool().t()
    return nll.masked_fill(~valid, 0.0).sum()


def load_ulr_arrays(directory: Optional[str], vocab_size: int, num_universal: Optional[int] = None,
                    query_dim: Optional[int] = None) -> Dict[str, Tensor]:
    """``query`` (V, dq) / ``key`` (M, dq) / ``alpha`` (V,) from ``directory`` (``fairseq-ext-ulr project``).
    When the folder is gone (inference from a checkpoint), zero tensors of the recorded shapes
    ``num_universal`` M and ``query_dim`` dq — the checkpoint's buffers replace them. A folder whose rows do not
    match the ``vocab_size`` source symbols is stale: an error, never used."""
    paths = [os.path.join(directory, f) for f in ULR_FILES] if directory else []
    if paths and all(os.path.isfile(p) for p in paths):
        query, key, alpha = (np.load(p) for p in paths)
        if query.shape[0] != vocab_size or alpha.shape[0] != vocab_size:
            raise UserDataError(f"{paths[0]}: {query.shape[0]} query rows for a source dictionary of {vocab_size} "
                             f"symbols: the ULR files are stale (rerun fairseq-ext-ulr project on this data)")
        if key.ndim != 2 or key.shape[1] != query.shape[1]:
            raise UserDataError(f"{paths[1]}: key dimension {key.shape[-1]} != query dimension {query.shape[1]}")
        return {"query": torch.from_numpy(query).float(), "key": torch.from_numpy(key).float(),
                "alpha": torch.from_numpy(alpha).bool()}
    if num_universal and query_dim:
        return {"query": torch.zeros(vocab_size, query_dim), "key": torch.zeros(num_universal, query_dim),
                "alpha": torch.zeros(vocab_size, dtype=torch.bool)}
    missing = [p for p in paths if not os.path.isfile(p)] or [os.path.join("<data>/../ulr", f) for f in ULR_FILES]
    raise FileNotFoundError(f"ULR: missing {', '.join(missing)} (build them with fairseq-ext-ulr embed / seed-dict "
                            f"/ project, or point --ulr-dir at them)")


# ------------------------------------------------------------------------------------------ options
def add_ulr_args(parser) -> None:
    """The ULR options of every model with a ULR source embedding (``universal_rnn``, ``transformer_ulr``),
    declared once; each model adds its own switches. ``--ulr-num-universal`` / ``--ulr-query-dim`` (hidden)
    record the array shapes so that a checkpoint rebuilds without the folder."""
    parser.add_argument("--ulr", action="store_true", default=None,
                        help="the source embedding is the universal lexical representation (Eqs. 5.2-5.5, 6.12)")
    parser.add_argument("--ulr-dir", metavar="DIR",
                        help="query.npy / key.npy (/ alpha.npy) of fairseq-ext-ulr project (default <data>/../ulr)")
    parser.add_argument("--ulr-temperature", type=float, metavar="T", help=f"tau of Eq. 5.3 ({DEFAULT_TEMPERATURE})")
    parser.add_argument("--ulr-num-universal", type=int, metavar="M", help=argparse.SUPPRESS)
    parser.add_argument("--ulr-query-dim", type=int, metavar="D", help=argparse.SUPPRESS)


def ulr_arch_defaults(args) -> None:
    """The defaults of :func:`add_ulr_args`' options (fairseq's architecture convention): ULR off, τ = 0.05."""
    for name, value in (("ulr", False), ("ulr_dir", None), ("ulr_temperature", DEFAULT_TEMPERATURE),
                        ("ulr_num_universal", None), ("ulr_query_dim", None)):
        set_default(args, name, value)

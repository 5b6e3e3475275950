"""Auxiliary Information Fusion (AIF) of Ampomah's multi-level supervision (thesis ch. 4, Sec. 4.2,
Figs. 4.3-4.4).

The *Auxiliary Feature Collector* gathers ``F^a = [f^1 .. f^n]``, the final hidden states
``f^i = H^L_{a_i} in R^{Z x d}`` of the ``n`` auxiliary decoders.  In every layer ``l`` of the
Main-Decoder the AIF module computes

    z^f_l = sum_{i=1}^{n} W_l^{a_i} f^i                                         (Eq. 4.2)

with bias-free ``W_l^{a_i} in R^{d x d}`` (one per main-decoder layer and auxiliary decoder), and
the layer adds it to the output of its masked self-attention sublayer, ``h^l <- h^l + z^f_l``
(Eq. 4.3; see :class:`fairseq_ext.models.multi_supervision.AIFDecoderLayer`).

:class:`AuxiliaryInformationFusion` holds the ``L x n`` matrices as one ``(L*d) x (n*d)`` weight so
that the ``z^f_l`` of all layers come out of a single GEMM per token, ``[f^1; ..; f^n] W^T``.
Block ``(l, i)`` of the weight is ``W_l^{a_i}`` (:meth:`block`); each block is Xavier-uniform
initialised as a separate ``d x d`` matrix would be, or zero (``zero_init``: the
model then starts as MS-l, since ``W = 0`` gives ``z^f = 0``).
Parameters: ``n * L * d^2`` (+0.262M per aux decoder for IWSLT small, +1.57M for base).
"""
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class AuxiliaryInformationFusion(nn.Module):
    def __init__(self, num_aux: int, embed_dim: int, num_layers: int, zero_init: bool = False):
        super().__init__()
        self.num_aux, self.embed_dim, self.num_layers = num_aux, embed_dim, num_layers
        self.weight = nn.Parameter(torch.empty(num_layers * embed_dim, num_aux * embed_dim))
        self.reset_parameters(zero_init)

    def reset_parameters(self, zero_init: bool = False) -> None:
        d = self.embed_dim
        with torch.no_grad():
            if zero_init:
                self.weight.zero_()
                return
            for l in range(self.num_layers):
                for i in range(self.num_aux):
                    nn.init.xavier_uniform_(self.weight[l * d:(l + 1) * d, i * d:(i + 1) * d])

    def block(self, layer: int, aux: int) -> Tensor:
        """``W_layer^{a_aux}`` (0-based indices), a ``d x d`` view of the fused weight."""
        d = self.embed_dim
        return self.weight[layer * d:(layer + 1) * d, aux * d:(aux + 1) * d]

    def forward(self, features: List[Tensor]) -> Tensor:
        """``features``: the ``n`` auxiliary states ``f^i``, each ``B x T x d`` (batch first, as a
        fairseq decoder's ``extract_features`` returns them).  Returns ``z^f`` of Eq. 4.2 for every
        main-decoder layer, ``L x T x B x d`` (time first, as inside the decoder layers)."""
        assert len(features) == self.num_aux, (len(features), self.num_aux)
        x = features[0] if self.num_aux == 1 else torch.cat(features, dim=-1)  # B T n*d
        z = F.linear(x, self.weight)  # B T L*d
        B, T = z.shape[:2]
        return z.view(B, T, self.num_layers, self.embed_dim).permute(2, 1, 0, 3)

    def extra_repr(self) -> str:
        return f"num_aux={self.num_aux}, embed_dim={self.embed_dim}, num_layers={self.num_layers}"

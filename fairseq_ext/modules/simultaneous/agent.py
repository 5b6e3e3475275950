"""The READ/WRITE agent of simultaneous NMT (Gu 2019 §9.3.2, Eq. 9.4; :class:`SimulAgent`) and the running
normalisation of its advantages (§9.4.3; :class:`AdvantageNormalizer`).

o_t = [c_τ^η; z_τ^η; ε_I[y_τ^η]] (context of the candidate step, candidate top-layer decoder state,
decoder input embedding of the candidate word); s_t = GRU(s_{t−1}, o_t); π_θ(a_t | ·) = softmax(W s_t + b)
over {READ, WRITE} (thesis: 512 GRU units); the baseline b_φ(o_t) is an MLP o_t → tanh → 1 (128 units
in the released code). :class:`AdvantageNormalizer` holds the running mean/std of the advantages
(Mnih & Gregor 2014) as buffers, so they are checkpointed with the agent.

References: Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019
(ch. 9); Mnih, Gregor, "Neural Variational Inference and Learning in Belief Networks", ICML 2014.
"""
from typing import Tuple

import torch
import torch.nn as nn
from torch import Tensor

ADV_NORMS = ("running", "batch", "none")


class AdvantageNormalizer(nn.Module):
    """R̃ = (R̂ − b)/√(σ² + e) with a running mean b and variance σ² of the advantages R̂ (§9.4.3; EMA with
    ``momentum``, started at the first batch's statistics); buffers, so they are checkpointed."""

    def __init__(self, momentum: float = 0.99, eps: float = 1e-8):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("var", torch.ones(()))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, adv: Tensor, mask: Tensor, mode: str = "running", update: bool = True) -> Tensor:
        if mode == "none":
            return adv
        values = adv.detach()[mask].double()
        if values.numel() == 0:
            return adv
        mean, var = values.mean(), values.var(unbiased=False)
        if mode == "running":
            if update:
                m = self.momentum if int(self.count) > 0 else 0.0
                self.mean.copy_(m * self.mean.double() + (1 - m) * mean)
                self.var.copy_(m * self.var.double() + (1 - m) * var)
                self.count += 1
            mean, var = self.mean.double(), self.var.double()
        elif mode != "batch":
            raise ValueError(f"advantage normalisation must be one of {ADV_NORMS}, got {mode!r}")
        return ((adv.double() - mean) / torch.sqrt(var + self.eps)).to(adv.dtype)


class SimulAgent(nn.Module):
    """The READ/WRITE agent (Eq. 9.4) and its baseline b_φ (module doc)."""

    def __init__(self, obs_dim: int, hidden_size: int = 512, baseline_hidden: int = 128, adv_momentum: float = 0.99):
        super().__init__()
        self.obs_dim, self.hidden_size = obs_dim, hidden_size
        self.rnn = nn.GRUCell(obs_dim, hidden_size)
        self.out = nn.Linear(hidden_size, 2)
        self.baseline = nn.Sequential(nn.Linear(obs_dim, baseline_hidden), nn.Tanh(), nn.Linear(baseline_hidden, 1))
        self.adv_norm = AdvantageNormalizer(adv_momentum)
        for p in [*self.rnn.parameters(), *self.out.parameters()]:
            p.param_group = "policy"
        for p in self.baseline.parameters():
            p.param_group = "baseline"

    def initial_hidden(self, rows: int, device=None) -> Tensor:
        return torch.zeros(rows, self.hidden_size, device=device)

    def step(self, obs: Tensor, hidden: Tensor) -> Tuple[Tensor, Tensor]:
        """s_t = GRU(s_{t−1}, o_t) and the log-probabilities (R, 2) of (READ, WRITE)."""
        hidden = self.rnn(obs.type_as(hidden), hidden)
        return hidden, torch.log_softmax(self.out(hidden).float(), dim=-1)

    def value(self, obs: Tensor) -> Tensor:
        """b_φ(o_t) (R,)."""
        return self.baseline(obs).squeeze(-1).float()

"""READ/WRITE policies of simultaneous decoding (Gu 2019 ch. 9; :data:`POLICIES`, :func:`build_policy`).

``agent`` (argmax at test, sampled in training), ``wue`` (wait until end: READ to ⟨/s⟩, then WRITE — the
full-sentence greedy decoding of the uni-directional NMT), ``wos`` (wait one step: x_1 is read before the
first decision, then WRITE and READ alternate, g(τ) = min(τ, |X|) — wait-k with k = 1), ``waitk``
(Ma et al. 2019: g(τ) = min(k + τ − 1, |X|)), ``wiw`` / ``wid`` (Cho & Esipova 2016, s0 = 1, δ = 1:
pre-READ x_{η+1}; READ if the probability of the current candidate word drops (WIW) or the most likely
word changes (WID) with it, else WRITE the current candidate).

References: Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019
(ch. 9); Cho, Esipova, "Can neural machine translation do simultaneous translation?", 2016; Ma et al.,
"STACL: Simultaneous Translation with Implicit Anticipation and Controllable Latency using
Prefix-to-Prefix Framework", ACL 2019.
"""
from typing import List

import torch
from torch import Tensor

from fairseq_ext.modules.latency import WRITE
from fairseq_ext.modules.simultaneous.agent import SimulAgent
from fairseq_ext.modules.simultaneous.environment import Candidate, SimulEnvironment
from fairseq_ext.data.errors import UserDataError

POLICIES = ("agent", "wue", "wos", "wiw", "wid", "waitk")


class Policy:
    """``act(env, cand) -> write (R,) bool`` for every row (READ where False)."""

    def act(self, env: SimulEnvironment, cand: Candidate) -> Tensor:
        raise NotImplementedError


class WaitUntilEnd(Policy):
    """WUE: READ until ⟨/s⟩ is read, then WRITE."""

    def act(self, env, cand):
        return env.source_done.clone()


class WaitK(Policy):
    """wait-k (Ma et al. 2019): g(τ) = min(k + τ − 1, |X|); k = 1 is WOS (READ and WRITE alternate)."""

    def __init__(self, k: int = 1):
        if k < 1:
            raise ValueError(f"wait-k needs k >= 1, got {k}")
        self.k = k

    def act(self, env, cand):
        return env.eta.ge(torch.minimum(env.tau + self.k, env.src_len))


class WaitIfWorse(Policy):
    """WIW / WID (Cho & Esipova 2016, s0 = 1, δ = 1): pre-READ x_{η+1}; READ if the candidate word's probability
    drops (``diff=False``) or the most likely word changes (``diff=True``), else WRITE the candidate."""

    def __init__(self, diff: bool = False):
        self.diff = diff

    def act(self, env, cand):
        can_read = ~env.source_done
        peek = env.observe(env.eta + 1)
        if self.diff:
            wait = peek.token.ne(cand.token)
        else:
            wait = peek.lprobs.gather(1, cand.token.unsqueeze(1)).squeeze(1) < cand.score
        return ~(can_read & wait)


class AgentPolicy(Policy):
    """The learned agent (Eq. 9.4): argmax (test) or sampled (``sample``) actions. With ``record`` it keeps,
    per step, log π(a_t), the entropy of π_t and b_φ(o_t) of every row (with gradients)."""

    def __init__(self, agent: SimulAgent, rows: int, device=None, sample: bool = False, record: bool = False):
        self.agent = agent
        self.hidden = agent.initial_hidden(rows, device=device)
        self.sample, self.record = sample, record
        self.log_probs: List[Tensor] = []
        self.entropies: List[Tensor] = []
        self.values: List[Tensor] = []

    def act(self, env, cand):
        active = ~env.done
        hidden, logp = self.agent.step(cand.obs, self.hidden)
        self.hidden = torch.where(active.unsqueeze(1), hidden, self.hidden)
        if self.sample:
            action = torch.multinomial(logp.detach().exp(), 1).squeeze(1)
        else:
            action = logp.detach().argmax(-1)
        if self.record:
            forced_write = env.force_write_at_end & env.source_done
            taken = torch.where(forced_write, torch.full_like(action, WRITE), action)
            self.log_probs.append(logp.gather(1, taken.unsqueeze(1)).squeeze(1))
            self.entropies.append(-(logp.exp() * logp).sum(-1))
            self.values.append(self.agent.value(cand.obs))
        return action.eq(WRITE)


def build_policy(name: str, model=None, rows: int = 0, device=None, waitk: int = 3, sample: bool = False,
                 record: bool = False) -> Policy:
    """A policy of :data:`POLICIES`; ``agent`` needs a model with an ``agent`` (a ``simul_agent`` checkpoint)."""
    if name == "agent":
        agent = getattr(model, "agent", None)
        if agent is None:
            raise UserDataError(f"--simul-policy agent needs a simul_agent model (--path AGENT.pt), got "
                             f"{type(model).__name__}; the baselines wue/wos/wiw/wid/waitk decode a plain NMT")
        return AgentPolicy(agent, rows, device=device, sample=sample, record=record)
    if name == "wue":
        return WaitUntilEnd()
    if name == "wos":
        return WaitK(1)
    if name == "waitk":
        return WaitK(waitk)
    if name in ("wiw", "wid"):
        return WaitIfWorse(diff=name == "wid")
    raise ValueError(f"unknown simultaneous policy {name!r}; expected one of {POLICIES}")

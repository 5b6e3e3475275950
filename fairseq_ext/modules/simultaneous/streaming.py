"""Simultaneous greedy decoding of a source that arrives token by token (Gu 2019 ch. 9, Alg. 4;
:class:`StreamingSimulTranslator`), the core of the SimulEval text agent (:mod:`fairseq_ext.tools.export.simuleval_agent`).
"""
from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor

from fairseq_ext.modules.latency import READ, WRITE
from fairseq_ext.modules.simultaneous.environment import SimulEnvironment, check_environment
from fairseq_ext.modules.simultaneous.policies import build_policy
from fairseq_ext.data.errors import UserDataError


class StreamingSimulTranslator:
    """Simultaneous greedy decoding (Alg. 4) of one sentence whose source arrives token by token — the core of
    a SimulEval text agent (``fairseq_ext/tools/export/simuleval_agent.py``). :meth:`push` source token ids (⟨/s⟩ is
    appended with ``finished``), :meth:`pop` runs the policy until it needs a token that has not arrived
    (a READ is then pending until the next :meth:`push`) or ⟨/s⟩ is written, and returns the words written
    meanwhile. The encoder runs on the tokens read so far (Eq. 9.1: causal, so the states are those of the
    offline environment), and |X| is unknown (no forced WRITE, wait-k without the min) until ``finished``:
    the decisions and words are those of :func:`run_episode` on the whole sentence. ``wiw``/``wid`` pre-read
    a token and are not supported."""

    UNKNOWN_LENGTH = 1 << 30

    def __init__(self, model, policy: str = "agent", waitk: int = 3, max_len: int = 200, min_len: int = 1):
        if policy in ("wiw", "wid"):
            raise UserDataError(f"streaming decoding does not support --simul-policy {policy} (it pre-reads a token)")
        check_environment(model)
        self.model, self.policy_name, self.waitk = model, policy, waitk
        self.max_len, self.min_len = max_len, min_len
        self.eos = model.decoder.dictionary.eos()
        self.reset()

    def reset(self) -> None:
        self.source: List[int] = []
        self.source_finished = False
        self.eta, self.tau = 0, 0
        self.state: Optional[Dict[str, Tensor]] = None
        self.prev = self.eos
        self.tokens: List[int] = []
        self.delays: List[int] = []
        self.actions: List[int] = []
        self.pending_read = False
        self.finished = False
        device = next(self.model.parameters()).device
        self.device = device
        self.policy = build_policy(self.policy_name, self.model, rows=1, device=device, waitk=self.waitk)

    def push(self, tokens: Sequence[int], finished: bool = False) -> None:
        if self.source_finished:
            raise ValueError("the source is already finished")
        self.source.extend(int(t) for t in tokens)
        if finished:
            self.source.append(self.eos)
            self.source_finished = True

    def environment(self) -> SimulEnvironment:
        src = torch.tensor([self.source[: self.eta]], dtype=torch.long, device=self.device)
        env = SimulEnvironment(self.model, src, max_len_a=0.0, max_len_b=self.max_len, min_len=self.min_len,
                               force_write_at_end=False)
        total = len(self.source) if self.source_finished else self.UNKNOWN_LENGTH
        env.src_len = torch.tensor([total], device=self.device)
        env.eta = torch.tensor([self.eta], device=self.device)
        env.tau = torch.tensor([self.tau], device=self.device)
        env.state, env.prev = self.state, torch.tensor([self.prev], device=self.device)
        return env

    @torch.no_grad()
    def pop(self) -> List[int]:
        written: List[int] = []
        while not self.finished:
            if self.eta == 0 or self.pending_read:  # x_1's pre-read, or the READ the policy chose last time
                if self.eta >= len(self.source):
                    self.pending_read = self.eta > 0
                    return written
                self.eta += 1
                self.pending_read = False
                continue
            env = self.environment()
            cand = env.observe()
            write = bool(self.policy.act(env, cand)[0]) or (self.source_finished and self.eta >= len(self.source))
            self.actions.append(WRITE if write else READ)
            if not write:
                self.pending_read = True
                continue
            env.step(torch.ones(1, dtype=torch.bool, device=self.device), cand)
            token = env.tokens[0][0]
            self.state, self.prev, self.tau = env.state, token, self.tau + 1
            self.tokens.append(token)
            self.delays.append(self.eta)
            written.append(token)
            self.finished = token == self.eos or self.tau > self.max_len
        return written

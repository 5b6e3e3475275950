"""Simultaneous decoding (Gu 2019, ch. 9) for ``fairseq-generate`` / ``fairseq-interactive``: the
``simul_greedy`` generator (Alg. 4, batched over the sentences) and the ``simul_beam`` generator
(§9.3.3, one sentence at a time), each driven by a READ/WRITE policy of
:data:`fairseq_ext.modules.simultaneous.policies.POLICIES` on the frozen uni-directional NMT environment
(:class:`fairseq_ext.modules.simultaneous.environment.SimulEnvironment`, ⟨/s⟩ read as the last source token, a WRITE
forced once it has been read):

* ``agent``: the learned agent of a ``simul_agent`` checkpoint, argmax actions;
* ``wue``, ``wos``, ``wiw``, ``wid``, ``waitk`` (k = ``waitk``): the baselines, on a ``simul_agent`` or a
  plain uni-directional ``rnnsearch`` checkpoint.

Every hypothesis is fairseq's dict (``tokens`` ending in ⟨/s⟩, ``score`` = the mean token log-probability,
``positional_scores``, ``attention``/``alignment`` None) plus ``actions`` (the policy's decisions as an
``R``/``W`` string; the pre-read x_1 is no action), ``delays`` (g(τ): source tokens read when y_τ was
written, ⟨/s⟩ included) and ``latency`` (AP, CW, AL, DAL of the sentence, source and target counted in
subwords with ⟨/s⟩). fairseq's length limit is per sentence here: at most min(a·|X| + b, limit − 1)
words before the forced ⟨/s⟩ (|X| the sentence's own length, not the batch's padded width).

References: Gu, Neubig, Cho, Li, "Learning to Translate in Real-time with Neural Machine Translation",
EACL 2017; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019.
"""
from typing import Dict, List

import torch

from fairseq_ext.modules.generation_options import generation_default
from fairseq_ext.modules.latency import (
    action_string,
    average_lagging,
    average_proportion,
    consecutive_wait,
    differentiable_average_lagging,
)
from fairseq_ext.modules.simultaneous.environment import SimulEnvironment
from fairseq_ext.modules.simultaneous.policies import build_policy
from fairseq_ext.modules.simultaneous.search import run_episode, simultaneous_beam_search
from fairseq_ext.data.errors import UserDataError

SIMUL_DECODERS = ("simul_greedy", "simul_beam")


def sentence_latency(result: Dict) -> Dict[str, float]:
    """AP, CW, AL and DAL of one decoded sentence (``delays``, ``actions``, ``src_len``)."""
    d, s = result["delays"], result["src_len"]
    return {"ap": average_proportion(d, s), "cw": consecutive_wait(result["actions"]),
            "al": average_lagging(d, s), "dal": differentiable_average_lagging(d, s)}


class SimultaneousGenerator:
    """``simul_greedy`` (``beam_size`` 1) or ``simul_beam`` with the policy ``policy`` (module doc)."""

    def __init__(self, models, tgt_dict, policy: str = "agent", beam_size: int = 1, waitk: int = 3,
                 max_len_a: float = generation_default("max_len_a"), max_len_b: int = generation_default("max_len_b"),
                 max_len: int = generation_default("max_len"), min_len: int = generation_default("min_len")):
        if len(models) != 1:
            raise NotImplementedError("simultaneous decoding drives a single NMT environment (no ensembles)")
        if beam_size < 1:
            raise UserDataError(f"--simul-beam must be >= 1, got {beam_size}")
        self.model = models[0]
        self.tgt_dict = tgt_dict
        self.eos = tgt_dict.eos()
        self.policy = policy
        self.beam_size = beam_size
        self.waitk = waitk
        self.env_args = dict(max_len_a=max_len_a, max_len_b=max_len_b, max_len=max_len, min_len=min_len,
                             force_write_at_end=True)
        self.symbols_to_strip_from_output = {self.eos}
        build_policy(policy, self.model, rows=1, waitk=waitk)  # fail early (e.g. agent without a simul_agent)

    def cuda(self):
        self.model.cuda()
        return self

    def hypothesis(self, result: Dict) -> Dict:
        tokens, pos = result["tokens"], result["positional_scores"]
        if tokens.numel() == 0 or int(tokens[-1]) != self.eos:  # a cut episode (never at test time)
            tokens = torch.cat([tokens, tokens.new_tensor([self.eos])])
            pos = torch.cat([pos, pos.new_zeros(1)])
            result = dict(result, delays=result["delays"] + [result["src_len"]],
                          actions=list(result["actions"]) + [1])
        return {"tokens": tokens, "score": pos.sum() / max(pos.numel(), 1), "positional_scores": pos,
                "attention": None, "alignment": None, "actions": action_string(result["actions"]),
                "delays": list(result["delays"]), "src_len": result["src_len"], "latency": sentence_latency(result)}

    @torch.no_grad()
    def generate(self, models, sample: Dict, prefix_tokens=None, constraints=None, **kwargs) -> List[List[Dict]]:
        if prefix_tokens is not None or constraints is not None:
            raise NotImplementedError("simultaneous decoding supports neither --prefix-size nor --constraints")
        self.model.eval()
        net = sample["net_input"]
        src, lengths = net["src_tokens"], net.get("src_lengths")
        device = src.device
        if self.beam_size == 1:
            env = SimulEnvironment(self.model, src, lengths, **self.env_args)
            policy = build_policy(self.policy, self.model, rows=src.size(0), device=device, waitk=self.waitk)
            results = run_episode(env, policy)
        else:
            results = []
            for i in range(src.size(0)):
                env = SimulEnvironment(self.model, src[i: i + 1], None if lengths is None else lengths[i: i + 1],
                                       **self.env_args)
                policy = build_policy(self.policy, self.model, rows=1, device=device, waitk=self.waitk)
                results.append(simultaneous_beam_search(env, policy, self.beam_size))
        return [[self.hypothesis(r)] for r in results]

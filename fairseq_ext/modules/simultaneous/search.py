"""Simultaneous decoding of whole sentences (Gu 2019 ch. 9): greedy (Alg. 4, batched over sentences;
:func:`run_episode`) and simultaneous beam search (§9.3.3; :func:`simultaneous_beam_search`).

Both run a :class:`~fairseq_ext.modules.simultaneous.policies.Policy` on a
:class:`~fairseq_ext.modules.simultaneous.environment.SimulEnvironment`. Simultaneous beam search keeps a
beam of K hypotheses inside each run of WRITEs, the policy observing the best one; on READ the best is
committed and the beam collapses to it.

References: Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019
(ch. 9).
"""
import math
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_ext.modules.latency import READ, WRITE
from fairseq_ext.modules.simultaneous.environment import Candidate, SimulEnvironment
from fairseq_ext.modules.simultaneous.policies import Policy
from fairseq_ext.data.errors import UserDataError


def run_episode(env: SimulEnvironment, policy: Policy) -> List[Dict]:
    """Simultaneous greedy decoding (Alg. 4) of every row until all are done; :meth:`SimulEnvironment.results`."""
    while not bool(env.done.all()):
        cand = env.observe()
        env.step(policy.act(env, cand), cand)
    return env.results()


def _select(state: Dict[str, Tensor], index: Tensor) -> Dict[str, Tensor]:
    return {k: v.index_select(0, index) for k, v in state.items()}


@torch.no_grad()
def simultaneous_beam_search(env: SimulEnvironment, policy: Policy, beam_size: int, trace: Optional[List] = None
                             ) -> Dict:
    """Simultaneous beam search (§9.3.3) of a one-row environment. The policy observes the best hypothesis
    (the environment's own state, so the delays are those of greedy decoding with the same actions). On
    WRITE every hypothesis of the beam is extended over the vocabulary with its cumulative −log p and the
    ``beam_size`` best extensions are kept (within a run of WRITEs all hypotheses have the same length, so
    the costs compare); the sentence ends when the best extension is ⟨/s⟩ (other ⟨/s⟩ extensions are
    dropped). On READ the best hypothesis is committed and the beam collapses to it. ``beam_size`` 1 is
    :func:`run_episode`. ``trace`` receives (action, beam size after it) per step. Returns the row's result."""
    if env.rows != 1:
        raise ValueError("simultaneous beam search decodes one sentence at a time")
    if beam_size < 1:
        raise UserDataError(f"--simul-beam must be >= 1, got {beam_size}")
    device = env.device
    one = torch.ones(1, dtype=torch.bool, device=device)
    beam_states: Optional[Dict[str, Tensor]] = None  # decoder states of the hypotheses (best first)
    beam_prev = env.prev.clone()
    beam_tokens: List[List[int]] = [[]]  # each hypothesis's words since the current run of WRITEs began
    beam_scores: List[List[float]] = [[]]
    beam_cost = torch.zeros(1, device=device)
    while not bool(env.done.all()):
        cand = env.observe()  # the best hypothesis's candidate: what the policy sees
        write = policy.act(env, cand).bool() | (env.force_write_at_end & env.source_done)
        if not bool(write.all()):  # READ: commit the best hypothesis, collapse the beam
            env.step(write, cand)
            beam_states, beam_prev = None, env.prev.clone()
            beam_tokens, beam_scores, beam_cost = [[]], [[]], torch.zeros(1, device=device)
            if trace is not None:
                trace.append((READ, 1))
            continue
        k = len(beam_tokens)
        if k == 1:
            lprobs, new_state = cand.lprobs, cand.state
        else:
            ext = env.candidates(beam_states, beam_prev, env.tau.expand(k), env.eta.expand(k),
                                 rows=torch.zeros(k, dtype=torch.long, device=device))
            lprobs, new_state = ext.lprobs, ext.state
        V = lprobs.size(-1)  # the model's vocabulary (fairseq's --post-process may grow the dictionary object)
        total = (beam_cost.unsqueeze(1) - lprobs).view(-1)  # cumulative −log p of every extension
        order = torch.argsort(total, stable=True).tolist()
        if order[0] % V == env.eos or beam_size == 1:
            chosen = order[:1]
        else:
            chosen = [i for i in order[: beam_size + k] if i % V != env.eos and math.isfinite(float(total[i]))]
            chosen = chosen[:beam_size]
        idx = torch.tensor(chosen, dtype=torch.long, device=device)
        parents, words = idx // V, idx % V
        beam_tokens = [beam_tokens[p] + [w] for p, w in zip(parents.tolist(), words.tolist())]
        beam_scores = [beam_scores[p] + [float(lprobs[p, w])] for p, w in zip(parents.tolist(), words.tolist())]
        beam_cost = total[idx]
        beam_states = _select(new_state, parents)
        beam_prev = words
        # the environment follows the best hypothesis; its words of this run replace the ones written so far
        top = parents[:1]
        best = Candidate(words[:1], lprobs[top, words[:1]], lprobs[top], _select(new_state, top), cand.obs, cand.eta)
        env.step(one, best)
        run = len(beam_tokens[0])
        env.tokens[0][-run:] = beam_tokens[0]
        env.scores[0][-run:] = beam_scores[0]
        if trace is not None:
            trace.append((WRITE, len(beam_tokens)))
    return env.results()[0]

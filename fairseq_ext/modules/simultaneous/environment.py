"""The NMT environment of simultaneous translation (Gu 2019 §9.3.1, Eqs. 9.1–9.3; :class:`SimulEnvironment`).

* The source buffer X holds the source tokens *with* ⟨/s⟩ as its last token; x_1 is read before the
  first decision (Alg. 4 line 1), so η (the number of tokens read) starts at 1.
* Eq. 9.1 h_η = f^UNI-ENC(h_{η−1}, x_η): the NMT's encoder must be left-to-right only (``rnnsearch
  --encoder-unidirectional``, arch ``rnnsearch_gu_wmt15_uni``). Such an encoder is causal — h_η depends on
  x_{1:η} only — so the states of every prefix are the first η states of one pass over the whole
  sentence (:meth:`SimulEnvironment.prefix_states`; the tests check it against encoding the prefix
  alone). A bidirectional encoder is refused.
* Eq. 9.2: attention covers the read prefix x_{1:η} only (the unread positions are masked like pads).
  Until the first WRITE the initial decoder state z_0 = φ_INIT(H^η) (the NMT's tanh(W·mean h)) is
  recomputed from the prefix after every READ (Alg. 4 line 11).
* Eq. 9.3: the candidate (y_τ^η, z_τ^η) is the greedy word of one decoder step from (z_{τ−1}, y_{τ−1})
  with the current prefix, recomputed after every READ from the same (z_{τ−1}, y_{τ−1}). fairseq's bans
  hold: ⟨pad⟩ never, ⟨/s⟩ not as the first word (``min_len`` 1), ⟨/s⟩ forced once τ_MAX words are written,
  τ_MAX = min(a·|X| + b, the NMT's limit − 1) per sentence.
* Actions: READ (η ← η + 1; a no-op once ⟨/s⟩ has been read) and WRITE (emit the candidate; τ ← τ + 1;
  the episode ends when ⟨/s⟩ is written, so nothing is ever written past ⟨/s⟩). At test time
  (``force_write_at_end``) a READ after the source end is turned into a WRITE. An episode is cut after
  |X| + τ_MAX + 1 steps (only a training rollout that keeps READing after the end can get there; the
  thesis's code cuts after 1.5·τ_MAX steps).

References: Gu, Neubig, Cho, Li, "Learning to Translate in Real-time with Neural Machine Translation",
EACL 2017; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019 (ch. 9).
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_ext.modules.latency import READ, WRITE
from fairseq_ext.data.errors import UserDataError


def check_environment(nmt) -> None:
    """The NMT must be an ``rnnsearch``-like model with a left-to-right encoder (Eq. 9.1)."""
    enc, dec = nmt.encoder, nmt.decoder
    for name in ("decoder_step", "initial_state", "output_layer", "embed_tokens"):
        if not hasattr(dec, name):
            raise UserDataError(f"the simultaneous environment needs an rnnsearch decoder (no {name} in "
                             f"{type(dec).__name__})")
    rnn = getattr(enc, "rnn", None)
    if getattr(rnn, "directions", None) != 1:
        raise UserDataError("the simultaneous environment needs a uni-directional (left-to-right) encoder: train the "
                         "NMT with --arch rnnsearch_gu_wmt15_uni or --encoder-unidirectional (Eq. 9.1)")


@dataclass
class Candidate:
    """One decoder step from (z_{τ−1}, y_{τ−1}) with the prefix x_{1:η} (Eq. 9.3), for every row."""
    token: Tensor  # (R,) y_τ^η (argmax after the bans)
    score: Tensor  # (R,) its log-probability
    lprobs: Tensor  # (R, V) after the bans
    state: Dict[str, Tensor]  # z_τ^η's decoder state
    obs: Tensor  # (R, C + H + E) o_t
    eta: Tensor  # (R,) the prefix length it was computed with


class SimulEnvironment:
    """The NMT environment of §9.3.1 over R rows (sentences or trajectories; module doc).

    State per row: ``eta`` (source tokens read), ``tau`` (words written), the decoder state and previous
    word, ``done``; the written ``tokens``/``scores``/``delays`` and the ``actions`` taken (Python lists).
    :meth:`observe` computes the candidates, :meth:`step` applies the actions."""

    def __init__(self, nmt, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, *, max_len_a: float = 0.0,
                 max_len_b: int = 200, max_len: int = 0, min_len: int = 1, force_write_at_end: bool = True):
        check_environment(nmt)
        self.nmt = nmt
        self.dec = nmt.decoder
        d = self.dec.dictionary
        self.pad, self.eos = d.pad(), d.eos()
        self.min_len = min_len
        self.force_write_at_end = force_write_at_end
        with torch.no_grad():
            self.encoder_out = nmt.encoder(src_tokens, src_lengths=src_lengths)
        mask = self.encoder_out["encoder_padding_mask"][0]
        self.real = ~mask
        self.rank = torch.cumsum(self.real.long(), 1)  # 1-based index of each real token
        self.src_len = self.real.sum(1)
        R = src_tokens.size(0)
        self.rows = R
        device = src_tokens.device
        self.device = device
        limit = (max_len or nmt.max_decoder_positions()) - 1
        self.tau_max = torch.clamp((max_len_a * self.src_len.double() + max_len_b).long(), max=limit)
        self.step_limit = self.src_len + self.tau_max + 1
        self.eta = torch.ones(R, dtype=torch.long, device=device).minimum(self.src_len)
        self.tau = torch.zeros(R, dtype=torch.long, device=device)
        self.steps = torch.zeros(R, dtype=torch.long, device=device)
        self.done = torch.zeros(R, dtype=torch.bool, device=device)
        self.prev = torch.full((R,), self.eos, dtype=torch.long, device=device)
        self.state: Optional[Dict[str, Tensor]] = None
        self.tokens: List[List[int]] = [[] for _ in range(R)]
        self.scores: List[List[float]] = [[] for _ in range(R)]
        self.delays: List[List[int]] = [[] for _ in range(R)]
        self.actions: List[List[int]] = [[] for _ in range(R)]
        self.history: List[Dict[str, Tensor]] = []  # per step: active, write, forced (R,)

    # ------------------------------------------------------------------ Eqs. 9.1–9.3
    def prefix_encoder_out(self, eta: Tensor, rows: Optional[Tensor] = None) -> Dict[str, List[Tensor]]:
        """The encoder output of the prefixes x_{1:η} (Eq. 9.1): unread positions masked like pads, the final
        state h_η."""
        enc = self.encoder_out
        if rows is not None:
            enc = self.nmt.encoder.reorder_encoder_out(enc, rows)
            real, rank, src_len = self.real[rows], self.rank[rows], self.src_len[rows]
        else:
            real, rank, src_len = self.real, self.rank, self.src_len
        readable = real & (rank <= eta.unsqueeze(1))
        states = enc["encoder_out"][0]  # (S, R, C)
        last = (real & (rank == eta.unsqueeze(1))).long().argmax(1)
        h_eta = states.transpose(0, 1)[torch.arange(states.size(1), device=states.device), last]
        final = torch.where((eta >= src_len).unsqueeze(1), enc["encoder_final"][0], h_eta)
        return dict(enc, encoder_padding_mask=[~readable], encoder_final=[final])

    def prefix_states(self, eta: int) -> List[Tensor]:
        """h_1..h_η of each row (the states the agent's prefix x_{1:η} attends to)."""
        states = self.encoder_out["encoder_out"][0].transpose(0, 1)
        return [states[r][self.real[r] & (self.rank[r] <= eta)] for r in range(self.rows)]

    @torch.no_grad()
    def candidates(self, state: Optional[Dict[str, Tensor]], prev: Tensor, tau: Tensor, eta: Tensor,
                   rows: Optional[Tensor] = None) -> Candidate:
        """The candidate step of Eq. 9.3 for explicit (state, previous word, τ, η) rows (``rows``: the
        environment rows they belong to); rows with τ = 0 start from φ_INIT(H^η) (Alg. 4 line 11)."""
        dec = self.dec
        enc = self.prefix_encoder_out(eta, rows)
        init = dec.initial_state(enc)
        if state is None:
            state = init
        else:
            fresh = tau.eq(0)  # the key projections are per source position: always those of this source
            state = {k: init[k] if k == "proj_keys" else torch.where(fresh.view(-1, *([1] * (v.dim() - 1))), init[k], v)
                     for k, v in state.items()}
        step = int(tau.max()) + 1 if tau.numel() else 1
        state = dec.transform_state(state, step)
        embedded = dec.dropout(dec.embed_tokens(prev))
        features, new_state, attn = dec.decoder_step(embedded, state, enc, step)
        logits = dec.output_layer(features)
        lprobs = self.nmt.get_normalized_probs((logits.unsqueeze(1), None), log_probs=True)[:, 0].float()
        lprobs = self.constrain(lprobs, tau, self.tau_max if rows is None else self.tau_max[rows])
        score, token = lprobs.max(-1)
        if attn is not None:
            ctx = torch.bmm(attn.unsqueeze(1).type_as(features), enc["encoder_out"][0].transpose(0, 1)).squeeze(1)
        else:
            ctx = enc["encoder_final"][0]
        obs = torch.cat([ctx, new_state["hidden"][:, -1], dec.embed_tokens(token)], dim=-1)
        return Candidate(token, score, lprobs, new_state, obs, eta)

    def constrain(self, lprobs: Tensor, tau: Tensor, tau_max: Tensor) -> Tensor:
        """fairseq's bans: no ⟨pad⟩, no ⟨/s⟩ before ``min_len`` words, only ⟨/s⟩ once τ_MAX words are written."""
        lprobs[lprobs != lprobs] = -math.inf
        lprobs[:, self.pad] = -math.inf
        at_max = tau.ge(tau_max)
        if bool(at_max.any()):
            keep = lprobs[at_max, self.eos].clone()
            lprobs[at_max] = -math.inf
            lprobs[at_max, self.eos] = keep
        early = tau.lt(self.min_len) & ~at_max
        if bool(early.any()):
            lprobs[early, self.eos] = -math.inf
        return lprobs

    def observe(self, eta: Optional[Tensor] = None) -> Candidate:
        """Every row's candidate with its current prefix (or ``eta``: a pre-READ for WIW/WID, clamped to |X|)."""
        eta = self.eta if eta is None else torch.minimum(eta, self.src_len)
        return self.candidates(self.state, self.prev, self.tau, eta)

    @property
    def source_done(self) -> Tensor:
        """(R,) whether ⟨/s⟩ has been read."""
        return self.eta.ge(self.src_len)

    def step(self, write: Tensor, cand: Candidate) -> Dict[str, Tensor]:
        """Apply the actions ``write`` (R,) bool (False: READ) of the active rows; returns this step's
        ``active``, ``write`` (after forcing) and ``forced`` masks (also appended to :attr:`history`)."""
        active = ~self.done
        write = write.to(self.device).bool()
        forced = active & ~write & self.force_write_at_end & self.source_done
        write = (write | forced) & active
        read = active & ~write
        if self.state is None:  # first step: rows still at τ = 0 restart from φ_INIT(H^η) in candidates()
            self.state = {k: v.clone() for k, v in cand.state.items()}
        for r in write.nonzero().squeeze(1).tolist():
            self.tokens[r].append(int(cand.token[r]))
            self.scores[r].append(float(cand.score[r]))
            self.delays[r].append(int(self.eta[r]))
        for r in active.nonzero().squeeze(1).tolist():
            self.actions[r].append(WRITE if bool(write[r]) else READ)
        self.state = {k: cand.state[k] if k == "proj_keys" else torch.where(
            write.view(-1, *([1] * (v.dim() - 1))), cand.state[k], v) for k, v in self.state.items()}
        self.prev = torch.where(write, cand.token, self.prev)
        self.tau = self.tau + write.long()
        self.eta = self.eta + (read & ~self.source_done).long()
        self.steps = self.steps + active.long()
        self.done = self.done | (write & cand.token.eq(self.eos)) | self.steps.ge(self.step_limit)
        record = {"active": active, "write": write, "forced": forced}
        self.history.append(record)
        return record

    def results(self) -> List[Dict]:
        """Per row: ``tokens`` (ending in ⟨/s⟩ unless the episode was cut), ``positional_scores``, ``actions``
        (READ/WRITE codes), ``delays`` g(τ), ``src_len``."""
        return [{"tokens": torch.tensor(self.tokens[r], dtype=torch.long, device=self.device),
                 "positional_scores": torch.tensor(self.scores[r], device=self.device),
                 "actions": list(self.actions[r]), "delays": list(self.delays[r]), "src_len": int(self.src_len[r])}
                for r in range(self.rows)]

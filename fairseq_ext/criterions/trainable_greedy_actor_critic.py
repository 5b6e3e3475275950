"""``trainable_greedy_actor_critic``: critic-aware actor learning of trainable greedy decoding (Gu 2019 §7.3,
Alg. 3) on a ``trainable_greedy`` model (frozen NMT θ, actor φ, critic ψ;
:mod:`fairseq_ext.models.trainable_greedy`), with the ``trainable_greedy_decoding`` task.

* **Alternation** (§7.4.1): ``--critic-updates`` N_c critic updates, then ``--actor-updates`` N_a actor
  updates, as a function of the update number (so a resumed run takes the same steps); only the phase's
  parameters get gradients.
* **DECODE(S, X, Y, c)** (Alg. 3): S noisy greedy rollouts per sentence (Eq. 7.4, ``--tg-noise-std``;
  ``--tg-critic-samples``, ``--tg-actor-samples``), plus the reference trajectory in the critic step;
  rewards ``--tg-objective bleu|perplexity``.
* **Losses**: critic (Eq. 7.2) Σ_k (r^c_k − r_k)²; actor (Eqs. 7.3/7.5) −Σ_k w̃_k r^c_k with
  w̃_k ∝ exp(−(r^c_k − r_k)²/τ) (``--tg-tau``, ``--tg-weight-norm``; ``--tg-uniform-weights`` is the
  ablation of Fig. 7.4).
* **Validation**: deterministic greedy decoding with the actor; loss = −mean R (§7.4.1).

References: Gu, Cho, Li, "Trainable Greedy Decoding for Neural Machine Translation", EMNLP 2017; Gu,
"Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019 (ch. 7).
"""
import contextlib
from dataclasses import dataclass, field
from typing import Dict, List

import torch
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics
from torch import Tensor

from fairseq_ext.modules.actor_critic import (OBJECTIVES, critic_aware_weights, critic_value, mean_log_prob,
                                              sentence_bleu_plus1)
from fairseq_ext.data.errors import UserDataError

WEIGHT_NORMS = ("sentence", "batch")


@dataclass
class ActorCriticConfig(FairseqDataclass):
    tg_objective: ChoiceEnum(OBJECTIVES) = field(
        default="bleu", metadata={"help": "decoding objective R: sentence BLEU+1, or negative perplexity"})
    critic_updates: int = field(default=10, metadata={"help": "N_c: critic updates before each actor phase"})
    actor_updates: int = field(default=1, metadata={"help": "N_a: actor updates per phase"})
    tg_critic_samples: int = field(default=4, metadata={"help": "S_c: noisy rollouts per sentence (critic step)"})
    tg_actor_samples: int = field(default=4, metadata={"help": "S_a: noisy rollouts per sentence (actor step)"})
    tg_noise_std: float = field(default=0.1, metadata={"help": "sigma of the exploration noise on a_t (Eq. 7.4)"})
    tg_tau: float = field(default=0.01, metadata={"help": "tau of the critic-aware weights exp(-(r^c - r)^2/tau)"})
    tg_weight_norm: ChoiceEnum(WEIGHT_NORMS) = field(
        default="sentence", metadata={"help": "normalise the critic-aware weights over each sentence's samples "
                                              "or over the whole batch"})
    tg_uniform_weights: bool = field(
        default=False, metadata={"help": "uniform weights 1/S instead of critic-aware ones (Fig. 7.4 ablation)"})
    tg_max_len_a: float = field(default=1.5, metadata={"help": "rollouts: at most a*|X| + b tokens"})
    tg_max_len_b: int = field(default=10, metadata={"help": "rollouts: at most a*|X| + b tokens"})


@contextlib.contextmanager
def frozen(module):
    """``module``'s parameters out of the autograd graph for the block (their ``requires_grad`` restored)."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def pad_right(seqs: List[Tensor], pad: int, width: int = 0):
    """(N, T) right-padded tokens and their (N,) lengths."""
    lengths = torch.tensor([s.numel() for s in seqs], device=seqs[0].device)
    out = seqs[0].new_full((len(seqs), max(width, int(lengths.max()))), pad)
    for i, s in enumerate(seqs):
        out[i, : s.numel()] = s
    return out, lengths


def shift_right(tokens: Tensor, eos: int, pad: int) -> Tensor:
    """Decoder inputs [⟨eos⟩, y_1, ..., y_{T−1}] of right-padded targets (pads stay pads)."""
    prev = torch.cat([tokens.new_full((tokens.size(0), 1), eos), tokens[:, :-1]], 1)
    return prev.masked_fill(tokens.eq(pad), pad)


@register_criterion("trainable_greedy_actor_critic", dataclass=ActorCriticConfig)
class ActorCriticCriterion(FairseqCriterion):
    """Alg. 3 of Gu (2019) on a ``trainable_greedy`` model (module doc)."""

    def __init__(self, task, tg_objective="bleu", critic_updates=10, actor_updates=1, tg_critic_samples=4,
                 tg_actor_samples=4, tg_noise_std=0.1, tg_tau=0.01, tg_weight_norm="sentence",
                 tg_uniform_weights=False, tg_max_len_a=1.5, tg_max_len_b=10):
        super().__init__(task)
        if critic_updates < 0 or actor_updates < 0 or critic_updates + actor_updates < 1:
            raise UserDataError("--critic-updates and --actor-updates must be >= 0 and not both 0")
        if min(tg_critic_samples, tg_actor_samples) < 1:
            raise UserDataError("--tg-critic-samples and --tg-actor-samples must be >= 1")
        if tg_tau <= 0 and not tg_uniform_weights:
            raise UserDataError(f"--tg-tau must be > 0, got {tg_tau}")
        if not hasattr(task, "greedy_rollouts"):
            raise UserDataError("criterion trainable_greedy_actor_critic needs --task trainable_greedy_decoding")
        self.objective = str(tg_objective)
        self.critic_updates, self.actor_updates = critic_updates, actor_updates
        self.samples = {"critic": tg_critic_samples, "actor": tg_actor_samples}
        self.noise_std = tg_noise_std
        self.tau = tg_tau
        self.weight_norm = str(tg_weight_norm)
        self.uniform = tg_uniform_weights
        self.max_len_a, self.max_len_b = tg_max_len_a, tg_max_len_b
        d = task.target_dictionary
        self.pad, self.eos = d.pad(), d.eos()

    def phase(self, num_updates: int) -> str:
        """"critic" or "actor" for the update after ``num_updates`` updates (module doc)."""
        return "critic" if num_updates % (self.critic_updates + self.actor_updates) < self.critic_updates \
            else "actor"

    # ------------------------------------------------------------------ Alg. 3's pieces
    def rewards(self, model, encoder_out, tokens: Tensor, lengths: Tensor, refs: Tensor) -> Tensor:
        """R(Y, Ŷ) (N,) of hypotheses ``tokens`` (N, T, ending in ⟨eos⟩) against ``refs`` (N, T'), no gradient."""
        with torch.no_grad():
            if self.objective == "bleu":
                ref_len = refs.ne(self.pad).sum(1)
                return sentence_bleu_plus1(tokens, lengths - 1, refs, ref_len - 1)
            lprobs = model.nmt_log_probs(encoder_out, shift_right(tokens, self.eos, self.pad))
            return mean_log_prob(lprobs, tokens, tokens.ne(self.pad))

    def decode(self, model, sample, phase: str) -> Dict[str, Tensor]:
        """DECODE(S, X, Y, c) of Alg. 3 (module doc): ``r``, ``rc`` (N,) and ``group`` (N,) the sentence of each
        row (the reference trajectories last, in the critic phase), plus the rollouts' ``tokens``/``lengths``."""
        net = sample["net_input"]
        src, src_lengths, target = net["src_tokens"], net["src_lengths"], sample["target"]
        B, S = src.size(0), self.samples[phase]
        grad = phase == "actor"
        with torch.no_grad():
            enc = model.encoder(src, src_lengths=src_lengths)
        group = torch.arange(B, device=src.device).repeat_interleave(S)
        enc_n = model.encoder.reorder_encoder_out(enc, group)
        steps = int(self.max_len_a * src.size(1) + self.max_len_b) + 1
        noise = torch.randn(B * S, steps, model.state_dim, device=src.device) * self.noise_std
        enc_n = model.with_action_noise(enc_n, noise)
        with torch.no_grad():
            hyps = self.task.greedy_rollouts(model, enc_n, src, B * S, self.max_len_a, self.max_len_b)
        tokens, lengths = pad_right(hyps, self.pad)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            states = model.trajectory(enc_n, shift_right(tokens, self.eos, self.pad))
        r = self.rewards(model, enc_n, tokens, lengths, target.index_select(0, group))
        rows_states, rows_tokens, rows_lengths, rows_group, rows_r = [states], [tokens], [lengths], [group], [r]
        if phase == "critic":  # the reference trajectory: Y force-fed to the NMT without the actor
            prev = shift_right(target, self.eos, self.pad)
            with torch.no_grad(), model.actor_disabled():
                ref_states = model.trajectory(enc, prev)
            rows_states.append(ref_states)
            rows_tokens.append(target)
            rows_lengths.append(target.ne(self.pad).sum(1))
            rows_group.append(torch.arange(B, device=src.device))
            rows_r.append(self.rewards(model, enc, target, rows_lengths[-1], target))
        T = max(s.size(1) for s in rows_states)
        states = torch.cat([torch.nn.functional.pad(s, (0, 0, 0, T - s.size(1))) for s in rows_states], 0)
        all_tokens = torch.cat([torch.nn.functional.pad(t, (0, T - t.size(1)), value=self.pad)
                                for t in rows_tokens], 0)
        all_lengths, all_group, r = torch.cat(rows_lengths), torch.cat(rows_group), torch.cat(rows_r)
        critic = model.critic
        with (frozen(critic) if phase == "actor" else contextlib.nullcontext()):
            memory = critic.encode(target)
            rc = critic_value(critic(memory, all_group, states, all_tokens, all_lengths), self.objective)
        return {"r": r, "rc": rc, "group": all_group, "tokens": tokens, "lengths": lengths}

    def actor_weights(self, rc: Tensor, r: Tensor, group: Tensor) -> Tensor:
        """w̃ of Alg. 3 lines 12–13 with this criterion's τ, normalisation and ablation switch."""
        return critic_aware_weights(rc, r, self.tau, group if self.weight_norm == "sentence" else None,
                                    uniform=self.uniform)

    # ------------------------------------------------------------------ fairseq interface
    def forward(self, model, sample, reduce=True):
        B = sample["target"].size(0)
        log = {"ntokens": sample["ntokens"], "nsentences": B, "sample_size": B}
        if not model.training:
            return self.validate(model, sample, log)
        phase = self.phase(getattr(model, "num_updates", 0))
        out = self.decode(model, sample, phase)
        r, rc, group = out["r"], out["rc"], out["group"]
        err = (rc - r).pow(2)
        n_samples = out["tokens"].size(0)
        if phase == "critic":
            loss = err.sum() / (self.samples["critic"] + 1)
            log["critic_loss"] = utils.item(loss.data)
        else:
            w = self.actor_weights(rc, r, group)
            scale = 1.0 if self.weight_norm == "sentence" or self.uniform else float(B)
            objective = (w * rc).sum() * scale
            loss = -objective
            log["actor_obj"] = utils.item(objective.data)
        log.update({"loss": utils.item(loss.data), "reward": utils.item(r[:n_samples].sum()),
                    "reward_n": n_samples, "critic_err": utils.item(err.detach().sum()), "critic_n": err.numel(),
                    "actor_step": int(phase == "actor"), "steps": 1})
        return loss, B, log

    def validate(self, model, sample, log):
        """Deterministic greedy decoding with the actor: loss = −Σ R (module doc)."""
        net = sample["net_input"]
        src, target = net["src_tokens"], sample["target"]
        B = src.size(0)
        enc = model.encoder(src, src_lengths=net["src_lengths"])
        hyps = self.task.greedy_rollouts(model, enc, src, B, self.max_len_a, self.max_len_b)
        tokens, lengths = pad_right(hyps, self.pad)
        r = self.rewards(model, enc, tokens, lengths, target)
        states = model.trajectory(enc, shift_right(tokens, self.eos, self.pad))
        rc = critic_value(model.critic(model.critic.encode(target), torch.arange(B, device=src.device), states,
                                       tokens, lengths), self.objective)
        loss = -r.sum()
        log.update({"loss": utils.item(loss.data), "reward": utils.item(r.sum()), "reward_n": B,
                    "critic_err": utils.item((rc - r).pow(2).sum()), "critic_n": B})
        return loss, B, log

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size") or 1
        metrics.log_scalar("loss", total("loss") / sample_size, sample_size, round=4)
        for key, weight in (("reward", "reward_n"), ("critic_mse", "critic_n")):
            n = total(weight)
            if n:
                val = total("critic_err" if key == "critic_mse" else key)
                metrics.log_scalar(key, val / n, n, round=4)
        actor_steps = total("actor_step")
        steps = total("steps")
        if steps:
            metrics.log_scalar("actor_step", actor_steps / steps, steps, round=2)
        for key in ("critic_loss", "actor_obj"):
            if any(key in log for log in logging_outputs):
                n = sum(log.get("sample_size", 0) for log in logging_outputs if key in log) or 1
                metrics.log_scalar(key, total(key) / n, n, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

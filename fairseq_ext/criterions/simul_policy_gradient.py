"""``simul_policy_gradient``: learning the READ/WRITE agent of simultaneous NMT with policy gradient (Gu 2019
§9.4.3, Alg. 5) on a ``simul_agent`` model (frozen uni-directional NMT + agent;
:mod:`fairseq_ext.models.simul_agent`), with the ``simul_rl_translation`` task.

* **Rollouts** (Alg. 5 line 5): every sentence is repeated ``--traj-per-sent`` times and decoded on the
  frozen environment (:class:`fairseq_ext.modules.simultaneous.environment.SimulEnvironment`) with actions
  sampled from the agent; ``--train-force-write`` forces a WRITE after the source end.
* **Rewards** (lines 7-8, :func:`fairseq_ext.modules.simultaneous.rewards.trajectory_rewards`):
  r_t = r^Q_t + r^D_t, quality from the smoothed sentence BLEU (Eq. 9.6, ``--quality-reward``), delay of one
  type (``--delay-type ap|cw``; CW as Eq. 9.9; ``--delay-alpha``, ``--delay-beta``, ``--target-ap``,
  ``--target-cw``).
* **Update** (lines 9-13): returns-to-go R_t, advantage R_t − b_φ(o_t) normalised (``--adv-norm``), and the
  loss Σ_t −log π_θ(a_t) R̃_t − κ Σ_t 𝓗(π_θ(·|t)) + c_b Σ_t (R_t − b_φ(o_t))² (Eqs. 9.10-9.11;
  ``--entropy-coef`` κ, ``--baseline-coef`` c_b).
* **Validation**: argmax actions; logs ``bleu``, ``ap``, ``cw`` and ``bleu_over_ap`` (the thesis's model
  selection ratio).

References: Gu, Neubig, Cho, Li, "Learning to Translate in Real-time with Neural Machine Translation",
EACL 2017; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019 (ch. 9);
Williams, "Simple Statistical Gradient-Following Algorithms for Connectionist Reinforcement Learning", 1992.
"""
from dataclasses import dataclass, field
from typing import Dict, List

import torch
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics

from fairseq_ext.modules.simultaneous.agent import ADV_NORMS
from fairseq_ext.modules.simultaneous.environment import SimulEnvironment
from fairseq_ext.modules.simultaneous.policies import AgentPolicy
from fairseq_ext.modules.simultaneous.rewards import (
    CW_PENALTIES,
    DELAY_TYPES,
    QUALITY_REWARDS,
    REWARD_BPE,
    RewardConfig,
    UnitMapper,
    prefix_bleu,
    returns_to_go,
    trajectory_rewards,
)
from fairseq_ext.modules.simultaneous.search import run_episode
from fairseq_ext.data.errors import UserDataError


@dataclass
class SimulPolicyGradientConfig(FairseqDataclass):
    delay_type: ChoiceEnum(DELAY_TYPES) = field(
        default="ap", metadata={"help": "the one delay reward: ap (average proportion, Eq. 9.7) or cw (consecutive "
                                        "wait, Eq. 9.8)"})
    target_ap: float = field(default=0.5, metadata={"help": "d*: the AP target (thesis: 0.3, 0.5, 0.7)"})
    target_cw: float = field(default=5.0, metadata={"help": "c*: the CW target (thesis: 2, 5, 8)"})
    delay_alpha: float = field(default=-0.03, metadata={"help": "alpha <= 0 of the CW term of Eq. 9.9"})
    delay_beta: float = field(default=-1.0, metadata={"help": "beta <= 0 of the AP term of Eq. 9.9"})
    cw_penalty: ChoiceEnum(CW_PENALTIES) = field(
        default="thesis", metadata={"help": "thesis: alpha*(sgn(c_t - c*) + 1) (Eq. 9.9); linear: "
                                            "alpha*max(c_t - c*, 0) (released code)"})
    quality_reward: ChoiceEnum(QUALITY_REWARDS) = field(
        default="telescoping", metadata={"help": "telescoping: BLEU0 increments + the brevity penalty at the end "
                                                 "(sum = sentence BLEU); literal: r_T = BLEU as Eq. 9.6 is printed"})
    reward_bpe: ChoiceEnum(REWARD_BPE) = field(
        default="none", metadata={"help": "sentence BLEU of the rewards on subwords (none) or on words after "
                                          "merging this BPE"})
    entropy_coef: float = field(default=0.001, metadata={"help": "kappa: weight of the entropy bonus"})
    baseline_coef: float = field(default=1.0, metadata={"help": "weight of the baseline regression (Eq. 9.11)"})
    traj_per_sent: int = field(default=5, metadata={"help": "sampled trajectories per sentence (Alg. 5)"})
    adv_norm: ChoiceEnum(ADV_NORMS) = field(
        default="running", metadata={"help": "advantage normalisation: running mean/std (thesis), per batch "
                                             "(released code) or none"})
    simul_max_len_a: float = field(default=1.5, metadata={"help": "rollouts: at most a*|X| + b words"})
    simul_max_len_b: int = field(default=10, metadata={"help": "rollouts: at most a*|X| + b words"})
    train_force_write: bool = field(
        default=False, metadata={"help": "force a WRITE after the source end in training rollouts too"})


@register_criterion("simul_policy_gradient", dataclass=SimulPolicyGradientConfig)
class SimulPolicyGradientCriterion(FairseqCriterion):
    """Alg. 5 of Gu (2019) on a ``simul_agent`` model (module doc)."""

    def __init__(self, task, delay_type="ap", target_ap=0.5, target_cw=5.0, delay_alpha=-0.03, delay_beta=-1.0,
                 cw_penalty="thesis", quality_reward="telescoping", reward_bpe="none", entropy_coef=0.001,
                 baseline_coef=1.0, traj_per_sent=5, adv_norm="running", simul_max_len_a=1.5, simul_max_len_b=10,
                 train_force_write=False):
        super().__init__(task)
        if traj_per_sent < 1:
            raise UserDataError(f"--traj-per-sent must be >= 1, got {traj_per_sent}")
        self.reward_cfg = RewardConfig(str(delay_type), target_ap, target_cw, delay_alpha, delay_beta,
                                       str(cw_penalty), str(quality_reward))
        self.units = UnitMapper(task.target_dictionary, str(reward_bpe))
        self.entropy_coef, self.baseline_coef = entropy_coef, baseline_coef
        self.traj_per_sent = traj_per_sent
        self.adv_norm = str(adv_norm)
        self.max_len_a, self.max_len_b = simul_max_len_a, simul_max_len_b
        self.train_force_write = train_force_write

    # ------------------------------------------------------------------ Alg. 5's pieces
    def rollouts(self, model, sample, training: bool):
        """Simultaneous decoding of every sentence ``traj_per_sent`` times (sampled; once, argmax, when not
        ``training``): ``(env, policy, index)``, ``index`` (R,) the sentence of each trajectory."""
        if getattr(model, "agent", None) is None:
            raise UserDataError("criterion simul_policy_gradient needs --arch simul_agent (the agent on a frozen NMT)")
        net = sample["net_input"]
        src, lengths = net["src_tokens"], net["src_lengths"]
        K = self.traj_per_sent if training else 1
        index = torch.arange(src.size(0), device=src.device).repeat_interleave(K)
        env = SimulEnvironment(model, src.index_select(0, index), lengths.index_select(0, index),
                               max_len_a=self.max_len_a, max_len_b=self.max_len_b,
                               force_write_at_end=self.train_force_write or not training)
        policy = AgentPolicy(model.agent, env.rows, device=src.device, sample=training, record=training)
        run_episode(env, policy)
        return env, policy, index

    def rewards(self, env: SimulEnvironment, target, index) -> List[Dict]:
        """:func:`trajectory_rewards` of every trajectory against its sentence's target, plus its ``bleu``."""
        refs = [self.units.units(target[int(i)].tolist()) for i in index]
        prefixes = [self.units.prefixes(toks) for toks in env.tokens]
        b0, final = prefix_bleu(prefixes, refs)
        out = []
        for r in range(env.rows):
            rew = trajectory_rewards(env.actions[r], b0[r], final[r], int(env.src_len[r]), self.reward_cfg)
            rew["bleu"] = final[r]
            out.append(rew)
        return out

    # ------------------------------------------------------------------ fairseq interface
    def forward(self, model, sample, reduce=True):
        training = model.training
        env, policy, index = self.rollouts(model, sample, training)
        rews = self.rewards(env, sample["target"], index)
        R = env.rows
        totals = [sum(r["rewards"]) for r in rews]
        log = {"ntokens": sample["ntokens"], "nsentences": sample["target"].size(0), "sample_size": R,
               "reward": sum(totals), "bleu": 100 * sum(r["bleu"] for r in rews), "ap": sum(r["ap"] for r in rews),
               "cw": sum(r["cw"] for r in rews), "traj": R,
               "writes": sum(sum(a) for a in env.actions), "steps": sum(len(a) for a in env.actions)}
        if not training:
            loss = torch.tensor(-sum(totals), device=sample["target"].device)
            log["loss"] = utils.item(loss.data)
            return loss, R, log
        T = len(env.history)
        device = sample["target"].device
        active = torch.stack([h["active"] for h in env.history], 1)  # (R, T)
        forced = torch.stack([h["forced"] for h in env.history], 1)
        rewards = torch.zeros(R, T, device=device)
        for r, rew in enumerate(rews):
            steps = active[r].nonzero().squeeze(1)  # a trajectory's steps are its first len(actions) steps
            rewards[r, steps] = torch.tensor(rew["rewards"], device=device)
        returns = returns_to_go(rewards, active)
        log_probs = torch.stack(policy.log_probs, 1)
        entropy = torch.stack(policy.entropies, 1)
        values = torch.stack(policy.values, 1)
        adv = model.agent.adv_norm((returns - values).detach(), active, mode=self.adv_norm, update=True)
        chosen = active & ~forced
        pg = -(log_probs * adv * chosen).sum()
        ent = (entropy * chosen).sum()
        base = ((returns - values).pow(2) * active).sum()
        loss = pg - self.entropy_coef * ent + self.baseline_coef * base
        n_chosen = int(chosen.sum())
        log.update({"loss": utils.item(loss.data), "pg_loss": utils.item(pg.data), "entropy": utils.item(ent.data),
                    "entropy_n": n_chosen, "baseline_mse": utils.item(base.data), "baseline_n": int(active.sum())})
        return loss, R, log

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size") or 1
        metrics.log_scalar("loss", total("loss") / sample_size, sample_size, round=4)
        n = total("traj")
        if n:
            for key in ("reward", "bleu", "ap", "cw"):
                metrics.log_scalar(key, total(key) / n, n, round=4)
            ap = total("ap")
            metrics.log_scalar("bleu_over_ap", total("bleu") / ap if ap > 0 else 0.0, n, round=4)
        steps = total("steps")
        if steps:
            metrics.log_scalar("write_rate", total("writes") / steps, steps, round=3)
        for key, weight in (("entropy", "entropy_n"), ("baseline_mse", "baseline_n")):
            w = total(weight)
            if w:
                metrics.log_scalar(key, total(key) / w, w, round=4)
        if any("pg_loss" in log for log in logging_outputs):
            metrics.log_scalar("pg_loss", total("pg_loss") / sample_size, sample_size, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

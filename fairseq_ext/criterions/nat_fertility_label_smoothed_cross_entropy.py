"""``nat_fertility_label_smoothed_cross_entropy`` (earlier ``nat_fertility_loss``):
training and fine-tuning losses of the fertility NAT (Gu's thesis, §8.4;
references in :mod:`fairseq_ext.models.nat_fertility`).

**Supervised training** (Eq. 8.9), with the external fertilities f ~ q::

    L_KD = −Σ_t log p(y_t | x_1{f_1}, …, x_{T'}{f_{T'}}) − Σ_{t'} log p_F(f_{t'} | x_{1:T'})       (8.9)

two terms of fairseq's ``nat_loss`` (``--fertility-loss-factor``, ``--label-smoothing``).

**Fine-tuning** (``--finetune``; Eq. 8.11, with Eq. 8.10 written as a loss)::

    L_RKL(f) = −Σ_t Σ_y p_NA(y | x, f) · log p_AR(y | ŷ_{<t}, x),   ŷ = G(x, f)          (8.10, as a loss)
    L_FT = λ·( E_{f∼p_F}[L_RKL(f) − L_RKL(f̄)]  +  E_{f∼q}[L_RKL(f)] ) + (1 − λ)·L_KD      (8.11)

L_RKL distils from the frozen AR teacher (``--teacher-path``); the first term (L_RL) is REINFORCE on the
fertility predictor with the average fertility f̄ (Eq. 8.6) as baseline (``--ft-rl-center``,
``--ft-rl-scale``), the second (L_BP) backpropagates under q; ``--ft-lambda`` λ, ``--ft-terms`` for the
ablations of Table 8.3.

The pure functions (:func:`translation_loss`, :func:`fertility_loss`, :func:`reverse_kl`,
:func:`reinforce_loss`, :func:`finetune_loss`) are the equations. ``sample_size`` is 1, as in ``nat_loss``.
"""
import math
from dataclasses import dataclass, field
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.nat_loss import (LabelSmoothedDualImitationCriterion,
                                         LabelSmoothedDualImitationCriterionConfig)
from fairseq.logging import metrics
from torch import Tensor

from fairseq_ext.modules.nat_fertility import predict_fertility, teacher_log_probs
from fairseq_ext.data.errors import UserDataError

FT_TERMS = ("rl", "bp", "kd")


# ----------------------------------------------------------------------------------------------- equations
def nat_loss_term(outputs: Tensor, targets: Tensor, mask: Tensor, label_smoothing: float = 0.0
                  ) -> Tuple[Tensor, Tensor]:
    """(loss, nll) of one output of fairseq's ``nat_loss``: the mean over the ``mask``ed positions of
    −log softmax(outputs)[target], label-smoothed with ε as (1 − ε)·nll − ε·mean log p.

    Computed by fairseq's ``LabelSmoothedDualImitationCriterion._compute_loss``, called unbound since it
    reads no state of its criterion; the outputs are cast to float first (the log-softmax in fp32 under
    mixed precision).  Only an all-masked batch is handled here: fairseq then returns the integer
    ``torch.tensor(0)``, which has no graph, where a differentiable float zero is needed."""
    if not bool(mask.any()):
        zero = outputs.sum() * 0.0
        return zero, zero
    out = LabelSmoothedDualImitationCriterion._compute_loss(None, outputs.float(), targets, mask, label_smoothing)
    return out["loss"], out["nll_loss"]


def translation_loss(logits: Tensor, target: Tensor, mask: Tensor, label_smoothing: float = 0.0
                     ) -> Tuple[Tensor, Tensor]:
    """(loss, nll): mean over the masked positions of −log p(y_t | x, f) (Eq. 8.9, translation term);
    with label smoothing ε, loss = (1 − ε)·nll − ε·mean_y log p(y) (:func:`nat_loss_term`)."""
    return nat_loss_term(logits, target, mask, label_smoothing)


def fertility_loss(fertility_logits: Tensor, fertility: Tensor, mask: Tensor) -> Tensor:
    """Mean over the source words of −log p_F(f_{t'} | x) (Eq. 8.9, fertility term); targets are clamped
    to the largest class L−1 (:func:`nat_loss_term`)."""
    L = fertility_logits.size(-1)
    return nat_loss_term(fertility_logits, fertility.long().clamp(0, L - 1), mask)[0]


def reverse_kl(student_logits: Tensor, teacher_lprobs: Tensor, mask: Tensor) -> Tensor:
    """Per position (B, T): −Σ_y p_NA(y) · log p_AR(y) (Eq. 8.10 with the sign of a loss);
    ``teacher_lprobs`` is treated as a constant; 0 at masked positions."""
    p = F.softmax(student_logits.float(), -1)
    return -(p * teacher_lprobs.detach().float()).sum(-1).masked_fill(~mask, 0.0)


def reinforce_loss(logp_sample: Tensor, cost_sample: Tensor, cost_baseline: Tensor, scale: float = 1.0,
                   center: bool = False) -> Tensor:
    """REINFORCE surrogate of L_RL = E_{f∼p_F}[cost(f) − cost(f̄)] (Eq. 8.11): mean over sentences of
    scale · A · log p_F(f), A = cost(f) − cost(f̄) (detached; minus its batch mean with ``center``)."""
    adv = (cost_sample - cost_baseline).detach().float()
    if center:
        adv = adv - adv.mean()
    return (scale * adv * logp_sample).mean()


def finetune_loss(l_rl: Tensor, l_bp: Tensor, l_kd: Tensor, lam: float = 0.25, terms=FT_TERMS) -> Tensor:
    """L_FT = λ(L_RL + L_BP) + (1 − λ)L_KD (Eq. 8.11), with the terms outside ``terms`` dropped."""
    zero = l_kd * 0.0
    rl = l_rl if "rl" in terms else zero
    bp = l_bp if "bp" in terms else zero
    kd = l_kd if "kd" in terms else zero
    return lam * (rl + bp) + (1 - lam) * kd


# ----------------------------------------------------------------------------------------------- criterion
@dataclass
class NATFertilityLossConfig(LabelSmoothedDualImitationCriterionConfig):
    """``nat_loss``'s options (``--label-smoothing``, of the translation loss: the thesis uses none) and
    this criterion's."""

    fertility_loss_factor: float = field(
        default=1.0, metadata={"help": "weight of the fertility loss in L_KD (Eq. 8.9: 1)"})
    finetune: bool = field(
        default=False,
        metadata={"help": "fine-tune with Eq. 8.11 (needs the task's --teacher-path)"})
    ft_lambda: float = field(default=0.25, metadata={"help": "λ of Eq. 8.11 (0.25 in the thesis)"})
    ft_terms: str = field(
        default="rl,bp,kd", metadata={"help": "comma-separated subset of rl,bp,kd (ablations of Table 8.3)"})
    ft_rl_scale: float = field(
        default=1.0, metadata={"help": "scale of the REINFORCE advantage (the authors' released code: 0.1)"})
    ft_rl_center: bool = field(
        default=False,
        metadata={"help": "subtract the batch mean from the REINFORCE advantage (as the authors' released code does)"})
    ft_rl_temperature: float = field(
        default=1.0, metadata={"help": "temperature of p_F when sampling the REINFORCE fertilities"})


@register_criterion("nat_fertility_label_smoothed_cross_entropy", dataclass=NATFertilityLossConfig)
class NATFertilityLoss(LabelSmoothedDualImitationCriterion):
    """Eq. 8.9 (supervised) or Eq. 8.11 (``--finetune``); see the module docstring.

    fairseq's ``nat_loss`` plus a fertility term and the fine-tuning terms: its options
    (``--label-smoothing``) and its per-output loss (``_compute_loss``, through :func:`nat_loss_term`) are
    fairseq's; ``forward`` (fairseq's expects ``prev_target`` and sums every output of the model) and
    ``reduce_metrics`` (which logs the fertility and fine-tuning terms) are this family's."""

    def __init__(self, task, label_smoothing=0.0, fertility_loss_factor=1.0, finetune=False, ft_lambda=0.25,
                 ft_terms="rl,bp,kd", ft_rl_scale=1.0, ft_rl_center=False, ft_rl_temperature=1.0):
        super().__init__(task, label_smoothing)
        self.fertility_loss_factor = fertility_loss_factor
        self.finetune = finetune
        self.ft_lambda = ft_lambda
        self.ft_terms = tuple(t.strip() for t in ft_terms.split(",") if t.strip())
        unknown = set(self.ft_terms) - set(FT_TERMS)
        if unknown:
            raise UserDataError(f"--ft-terms: unknown {sorted(unknown)}; expected a subset of {FT_TERMS}")
        self.ft_rl_scale = ft_rl_scale
        self.ft_rl_center = ft_rl_center
        self.ft_rl_temperature = ft_rl_temperature

    # -- pieces --------------------------------------------------------------------------------
    def _teacher(self, device):
        return self.task.teacher(device)

    def _sequence_cost(self, model, teacher, encoder_out, src_tokens, src_lengths, fertility) -> Tensor:
        """Length-normalised L_RKL(f) of G(x, f) per sentence (B,), without gradients."""
        with torch.no_grad():
            logits, mask = model.decode(encoder_out, src_tokens, fertility=fertility)
            yhat = logits.argmax(-1).masked_fill(~mask, self.padding_idx)
            t_lp = teacher_log_probs(teacher, src_tokens, src_lengths, yhat, mask)[:, : mask.size(1)]
            rkl = reverse_kl(logits, t_lp, mask)
            return rkl.sum(1) / mask.sum(1).clamp(min=1)

    def forward(self, model, sample, reduce=True):
        net = sample["net_input"]
        src_tokens, src_lengths = net["src_tokens"], net["src_lengths"]
        target = sample["target"]
        fertility = sample.get("fertility")
        if fertility is None and model.decoder_input_mode == "copy-fertility":
            raise UserDataError("nat_fertility_label_smoothed_cross_entropy needs fertilities: run python -m fairseq_ext.tools.corpora.fertility "
                             "on the data folder (task translation_fertility)")
        out = model(src_tokens, src_lengths, fertility=fertility, tgt_tokens=target)
        word, fert = out["word_ins"], out["fertility"]
        trans, nll = translation_loss(word["out"], word["tgt"], word["mask"], self.label_smoothing)
        f_loss = fertility_loss(fert["out"], fert["tgt"], fert["mask"]) if fert["tgt"] is not None \
            else trans * 0.0
        l_kd = trans + self.fertility_loss_factor * f_loss
        log: Dict[str, float] = {}
        if not self.finetune:
            loss = l_kd
        else:
            teacher = self._teacher(src_tokens.device)
            l_bp = l_rl = l_kd * 0.0
            if "bp" in self.ft_terms:
                mask = word["mask"]
                yhat = word["out"].argmax(-1).masked_fill(~mask, self.padding_idx)
                t_lp = teacher_log_probs(teacher, src_tokens, src_lengths, yhat, mask)[:, : mask.size(1)]
                l_bp = reverse_kl(word["out"], t_lp, mask).sum() / mask.sum().clamp(min=1)
            if "rl" in self.ft_terms:
                enc = out["encoder_out"]
                src_mask = fert["mask"]
                cap = getattr(model.decoder, "max_target_positions", None)
                with torch.no_grad():
                    f_sample = predict_fertility(fert["out"].detach(), src_mask, "sample", max_length=cap,
                                                 temperature=self.ft_rl_temperature)
                    f_mean = predict_fertility(fert["out"].detach(), src_mask, "average", max_length=cap)
                cost_s = self._sequence_cost(model, teacher, enc, src_tokens, src_lengths, f_sample)
                cost_b = self._sequence_cost(model, teacher, enc, src_tokens, src_lengths, f_mean)
                L = fert["out"].size(-1)
                logp = F.log_softmax(fert["out"].float(), -1).gather(
                    -1, f_sample.clamp(max=L - 1).unsqueeze(-1)).squeeze(-1)
                logp = logp.masked_fill(~src_mask, 0.0).sum(1)
                l_rl = reinforce_loss(logp, cost_s, cost_b, self.ft_rl_scale, self.ft_rl_center)
                log["rkl_sample"] = utils.item(cost_s.mean().data)
                log["rkl_mean_fert"] = utils.item(cost_b.mean().data)
            loss = finetune_loss(l_rl, l_bp, l_kd, self.ft_lambda, self.ft_terms)
            log["bp"] = utils.item(l_bp.data)
            log["rl"] = utils.item(l_rl.data)
            log["kd"] = utils.item(l_kd.data)
        logging_output = {
            "loss": utils.item(loss.data),
            "nll_loss": utils.item(nll.data),
            "fert_loss": utils.item(f_loss.data),
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": 1,
            **log,
        }
        return loss, 1, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        n = sum(log.get("sample_size", 0) for log in logging_outputs) or 1
        for key in ("loss", "nll_loss", "fert_loss", "kd", "bp", "rl", "rkl_sample", "rkl_mean_fert"):
            if any(key in log for log in logging_outputs):
                val = sum(log.get(key, 0.0) for log in logging_outputs)
                # nats → bits, as fairseq logs losses (the REINFORCE surrogate stays in nats)
                div = 1.0 if key == "rl" else math.log(2)
                metrics.log_scalar(key, val / n / div, n, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))

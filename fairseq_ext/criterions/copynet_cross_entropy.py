"""``copynet_cross_entropy``: CopyNet's marginal likelihood (Gu 2019 §3.2.5: Eq. 2.8 with the mixture of
Eq. 3.1). The loss of a gold token y is −log p(y) = −log [p(y, g) + Σ_{j: x_j = y} p(x_j, c)]: the generate
probability (0 for a copy slot, i.e. a source OOV) plus the copy probability of *every* source position
holding y — no mode labels. The ``copynet`` model's ``get_normalized_probs`` already is this mixture over the
extended vocabulary V + n (:func:`fairseq_ext.modules.copy_attention.copy_mixture`), and the task
``copy_translation`` gives the targets their extended ids, so the loss is the NLL of that distribution.

``--label-smoothing ε`` (default 0: the thesis uses none) mixes in the mean −log p over the ids the sentence
can produce (the finite entries: V and its used copy slots). Logged: ``loss``/``nll_loss`` (base 2), ``ppl``
and ``copy_targets`` (the share of gold tokens that only copying can produce, ids ≥ V).
"""
from dataclasses import dataclass, field

import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.dataclass import FairseqDataclass
from omegaconf import II
from fairseq_ext.data.errors import UserDataError


@dataclass
class CopyNetCriterionConfig(FairseqDataclass):
    label_smoothing: float = field(
        default=0.0, metadata={"help": "epsilon for label smoothing over the producible ids (0: none, the thesis)"})
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("copynet_cross_entropy", dataclass=CopyNetCriterionConfig)
class CopyNetCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """−log of the copy/generate mixture probability of each gold token (module doc); fairseq's
    label-smoothed cross-entropy's metrics, plus ``copy_targets``."""

    def __init__(self, task, label_smoothing=0.0, sentence_avg=False):
        if not 0.0 <= label_smoothing < 1.0:
            raise UserDataError(f"--label-smoothing must be in [0, 1), got {label_smoothing}")
        super().__init__(task, sentence_avg, label_smoothing)
        self.vocab_size = len(task.target_dictionary)

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        target = sample["target"]
        sample_size = target.size(0) if self.sentence_avg else sample["ntokens"]
        real = target.ne(self.padding_idx)
        logging_output = {
            "loss": loss.data, "nll_loss": nll_loss.data, "ntokens": sample["ntokens"],
            "nsentences": target.size(0), "sample_size": sample_size,
            "copy_targets": int((target.ge(self.vocab_size) & real).sum()),
        }
        return loss, sample_size, logging_output

    def compute_loss(self, model, net_output, sample, reduce=True):
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        lprobs = lprobs.view(-1, lprobs.size(-1))
        target = model.get_targets(sample, net_output).view(-1)
        keep = target.ne(self.padding_idx)
        if target.numel() and int(target.max()) >= lprobs.size(-1):
            raise UserDataError(f"target id {int(target.max())} is beyond the model's {lprobs.size(-1)} outputs: copied "
                             "OOV targets (task copy_translation) need a model with copy slots (copynet)")
        nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)
        nll = nll.masked_fill(~keep, 0.0)
        loss = nll
        if self.eps > 0:
            finite = torch.isfinite(lprobs)
            smooth = -lprobs.masked_fill(~finite, 0.0).sum(1) / finite.sum(1).clamp(min=1)
            loss = (1.0 - self.eps) * nll + self.eps * smooth.masked_fill(~keep, 0.0)
        if reduce:
            return loss.sum(), nll.sum()
        return loss, nll

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        copied = sum(log.get("copy_targets", 0) for log in logging_outputs)
        metrics.log_scalar("copy_targets", copied / max(ntokens, 1), ntokens, round=4)

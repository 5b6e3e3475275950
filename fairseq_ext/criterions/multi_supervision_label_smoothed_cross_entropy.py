"""``multi_supervision_label_smoothed_cross_entropy`` (earlier ``multi_supervision_label_smoothed``):
the joint objective of Ampomah's encoder-based multi-level
supervision (thesis ch. 4, Eq. 4.1):

    J(Y|X) = L^m(Y|X) + gamma * sum_l L^{a_l}(Y|X)

where every term is fairseq's label-smoothed cross-entropy (``--label-smoothing``, 0.1 in the
thesis) of one decoder over the same target: ``L^m`` of the Main-Decoder and ``L^{a_l}`` of the
auxiliary decoder on encoder layer ``l`` (the logits ``transformer_ms`` returns in
``extra["aux_out"]``).  ``--aux-weight`` is gamma (1 in all the thesis's experiments).  Each term is
a sum over the target tokens, so the total is normalised by the usual ``sample_size``.

Logged: ``loss`` = J (also what ``--best-checkpoint-metric loss`` uses), ``nll_loss``/``ppl`` and
``accuracy`` of the Main-Decoder, and per decoder ``loss_main``, ``nll_loss_main``,
``loss_aux<l>``, ``nll_loss_aux<l>`` (bits per token, like ``loss``/``nll_loss``).  On a model
without auxiliary decoders it is ``label_smoothed_cross_entropy``.
"""
import math
from dataclasses import dataclass, field

from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics


@dataclass
class MultiSupervisionLabelSmoothedConfig(LabelSmoothedCrossEntropyCriterionConfig):
    aux_weight: float = field(
        default=1.0,
        metadata={"help": "gamma of Eq. 4.1: weight of the summed auxiliary-decoder losses "
                          "(1.0 in the thesis; 0 trains the main decoder only)"},
    )


@register_criterion("multi_supervision_label_smoothed_cross_entropy", dataclass=MultiSupervisionLabelSmoothedConfig)
class MultiSupervisionLabelSmoothedCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, aux_weight=1.0):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        self.aux_weight = aux_weight

    def forward(self, model, sample, reduce=True):
        """Eq. 4.1 over one batch; returns ``(J, sample_size, logging_output)``."""
        net_output = model(**sample["net_input"])
        main_loss, main_nll = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        extra = net_output[1] if isinstance(net_output[1], dict) else {}
        aux_out = extra.get("aux_out") or []
        names = extra.get("aux_layers") or list(range(1, len(aux_out) + 1))
        logging_output = {
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        loss = main_loss
        if len(aux_out) > 0:
            logging_output["loss_main"] = main_loss.data
            logging_output["nll_loss_main"] = main_nll.data
            for layer, logits in zip(names, aux_out):
                aux_loss, aux_nll = self.compute_loss(model, (logits, extra), sample, reduce=reduce)
                loss = loss + self.aux_weight * aux_loss
                logging_output[f"loss_aux{layer}"] = aux_loss.data
                logging_output[f"nll_loss_aux{layer}"] = aux_nll.data
        logging_output["loss"] = loss.data
        logging_output["nll_loss"] = main_nll.data
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = n_correct.item()
            logging_output["total"] = total.item()
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        keys = sorted({k for log in logging_outputs for k in log
                       if k.startswith(("loss_main", "loss_aux", "nll_loss_main", "nll_loss_aux"))})
        for k in keys:
            total = sum(log.get(k, 0) for log in logging_outputs)
            if k.startswith("nll_"):  # per target token, like nll_loss
                metrics.log_scalar(k, total / ntokens / math.log(2), ntokens, round=3)
            else:  # per sample_size unit, like loss
                metrics.log_scalar(k, total / sample_size / math.log(2), sample_size, round=3)

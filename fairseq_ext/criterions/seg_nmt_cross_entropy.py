"""``seg_nmt_cross_entropy``: the likelihood of SEG-NMT's shallow-fusion mixture (Gu 2019 ch. 4, Eq. 4.5 in
the loss of Alg. 2 line 23). The loss of a gold token y_t is −log clip(p(y_t), ``--prob-floor``, 1) with
p(y_t) = ζ_t Σ_{τ: y'_τ = y_t} q_{t,τ} + (1 − ζ_t) p_NMT(y_t) — the negative log of the *mixture*, not a sum
of a copy loss and a generation loss (the authors' ``dl4mt-tm`` code: ``-log(clip(p, 1e-7, 1))``). The model's
``get_normalized_probs`` already is log p of that mixture (``seg_nmt``), so the criterion only gathers the
gold tokens; it works with any model whose ``get_normalized_probs`` is a distribution (an rnnsearch baseline
on the same task gets plain cross-entropy, clipped).

Logged: ``loss`` / ``nll_loss`` (base 2; ``nll_loss`` without the clip), ``ppl`` and, for models that
report it (``extra["tm_gate"]``), ``tm_gate`` = the mean ζ_t over the gold tokens.

References: Gu, Wang, Cho, Li, "Search Engine Guided Neural Machine Translation", AAAI 2018; Gu, "Efficient
Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019.
"""
import math
from dataclasses import dataclass, field

from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.dataclass import FairseqDataclass
from omegaconf import II
from fairseq_ext.data.errors import UserDataError


@dataclass
class SegNMTCriterionConfig(FairseqDataclass):
    prob_floor: float = field(
        default=1e-7,
        metadata={"help": "clip p(y_t) from below at this value before the log (REF-CODE 1e-7; 0: no clip)"})
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("seg_nmt_cross_entropy", dataclass=SegNMTCriterionConfig)
class SegNMTCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """−Σ_t log clip(p(y_t), floor, 1) of the model's (mixture) distribution (module doc); no smoothing,
    fairseq's label-smoothed cross-entropy's metrics, plus ``tm_gate``."""

    def __init__(self, task, prob_floor=1e-7, sentence_avg=False):
        super().__init__(task, sentence_avg, 0.0)
        if not 0.0 <= prob_floor < 1.0:
            raise UserDataError(f"--prob-floor must be in [0, 1), got {prob_floor}")
        self.log_floor = math.log(prob_floor) if prob_floor > 0 else float("-inf")

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        target = sample["target"]
        sample_size = target.size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {"loss": loss.data, "nll_loss": nll_loss.data, "ntokens": sample["ntokens"],
                          "nsentences": target.size(0), "sample_size": sample_size}
        extra = net_output[1] if len(net_output) > 1 and isinstance(net_output[1], dict) else {}
        if extra.get("tm_gate"):
            real = target.ne(self.padding_idx)
            logging_output["tm_gate"] = float(extra["tm_gate"][0].detach().float().masked_fill(~real, 0.0).sum())
        return loss, sample_size, logging_output

    def compute_loss(self, model, net_output, sample, reduce=True):
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        lprobs = lprobs.view(-1, lprobs.size(-1))
        target = model.get_targets(sample, net_output).view(-1)
        keep = target.ne(self.padding_idx)
        gold = lprobs.gather(1, target.unsqueeze(1)).squeeze(1)
        nll = (-gold).masked_fill(~keep, 0.0)
        loss = (-gold.clamp(min=self.log_floor, max=0.0)).masked_fill(~keep, 0.0)
        if reduce:
            return loss.sum(), nll.sum()
        return loss, nll

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        if any("tm_gate" in log for log in logging_outputs):
            gate = sum(log.get("tm_gate", 0) for log in logging_outputs)
            metrics.log_scalar("tm_gate", gate / max(ntokens, 1), ntokens, round=4)

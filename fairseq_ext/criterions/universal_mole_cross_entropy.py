"""``universal_mole_cross_entropy``: the multilingual likelihood (Gu 2019, Eq. 5.1) plus the MoLE gate loss
(Eq. 5.7) — −Σ_t log p(y_t | y_<t, x) + w · Σ_{aux tokens τ} −log softmax(g(h_τ))_k, where k is the
sentence's auxiliary language (one expert per auxiliary language), so "expert f_i is used when training on
a parallel sentence from auxiliary language i"; low-resource sentences and padding add nothing to the
gate term (§5.3.2). Both terms are sums over tokens, divided by fairseq's sample size (target tokens) like
``cross_entropy``; w = ``--gate-loss-weight`` (1.0; the thesis does not give one).

For a model without MoLE (Multi-NMT, +ULR) it is ``cross_entropy``. Logged: ``loss``, ``nll_loss``,
``gate_loss`` (per auxiliary source token) and ``gate_acc`` (share of auxiliary source tokens whose gate
argmax is their language's expert).

Reference: Gu, Hassan, Devlin, Li, "Universal Neural Machine Translation for Extremely Low Resource
Languages", NAACL 2018; Gu, "Efficient Neural Machine Translation", PhD thesis, HKU, 2019, ch. 5.
"""
import math
from dataclasses import dataclass, field

import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterionConfig
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

from fairseq_ext.modules.ulr import mole_gate_loss
from fairseq_ext.data.errors import UserDataError


@dataclass
class UniversalMoLECriterionConfig(CrossEntropyCriterionConfig):
    gate_loss_weight: float = field(default=1.0, metadata={"help": "weight w of the MoLE gate loss (Eq. 5.7)"})


@register_criterion("universal_mole_cross_entropy", dataclass=UniversalMoLECriterionConfig)
class UniversalMoLECrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """NLL + w · MoLE gate loss (module doc): fairseq's label-smoothed cross-entropy with no smoothing (its
    loss is then the NLL exactly), and its metrics, plus the gate's."""

    def __init__(self, task, sentence_avg, gate_loss_weight=1.0):
        super().__init__(task, sentence_avg, 0.0)
        if gate_loss_weight < 0:
            raise UserDataError(f"--gate-loss-weight must be >= 0, got {gate_loss_weight}")
        self.gate_loss_weight = gate_loss_weight

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, _ = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {"loss": loss.data, "nll_loss": loss.data, "ntokens": sample["ntokens"],
                          "nsentences": sample["target"].size(0), "sample_size": sample_size}
        extra = net_output[1] if isinstance(net_output[1], dict) else {}
        if extra.get("mole_gate"):
            gate = extra["mole_gate"][0]  # (S, B, K)
            lang = extra["src_lang"][0]
            experts = gate.size(-1)
            expert = torch.where((lang >= 0) & (lang < experts), lang, torch.full_like(lang, -1))
            pad = extra["encoder_padding_mask"][0]
            gate_sum = mole_gate_loss(gate, expert, pad)
            aux_tok = (~pad & expert.ge(0).unsqueeze(1)).t()  # (S, B)
            hits = (gate.argmax(-1).eq(expert.unsqueeze(0)) & aux_tok).sum()
            loss = loss + self.gate_loss_weight * gate_sum
            logging_output.update(loss=loss.data, gate_loss=gate_sum.data, gate_tokens=int(aux_tok.sum()),
                                  gate_hits=int(hits))
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        """``loss`` (per sample-size unit, base 2), ``nll_loss`` / ``ppl`` from the likelihood term alone
        (per target token), as fairseq's; ``gate_loss`` (per auxiliary source token, base 2) and ``gate_acc``."""
        super().reduce_metrics(logging_outputs)
        n = sum(log.get("gate_tokens", 0) for log in logging_outputs)
        if n:
            g = sum(float(log.get("gate_loss", 0)) for log in logging_outputs)
            metrics.log_scalar("gate_loss", g / n / math.log(2), n, round=3)
            metrics.log_scalar("gate_acc", sum(log.get("gate_hits", 0) for log in logging_outputs) / n, n, round=3)

"""``conversation_cross_entropy``: fairseq's token cross-entropy on a bilingual conversation batch, also
reported per translation direction (Maruf 2019 ch. 5, §5.3.4: the objective is the sum of the En→F and F→En
log-likelihoods; model selection uses the overall dev perplexity, §5.7).

The loss and its gradient are exactly ``cross_entropy``'s; the batch's ``net_input["direction"]`` (0: the
task's first language is the source, 1: the second) splits the summed NLL, logged as
``loss_<src>-<tgt>`` (base 2, per target token of that direction) with ``ppl_<src>-<tgt>``; the direction
names come from the task (``conversation_translation``: ``en-es`` / ``es-en``). Without a ``direction``
key it is plain ``cross_entropy``.

Reference: Maruf, Martins, Haffari, "Contextual Neural Model for Translating Bilingual Multi-Speaker
Conversations", WMT 2018; Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University,
2019, ch. 5.
"""
import math

import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig


@register_criterion("conversation_cross_entropy", dataclass=CrossEntropyCriterionConfig)
class ConversationCrossEntropyCriterion(CrossEntropyCriterion):
    """Cross-entropy with per-direction logging (module doc)."""

    def __init__(self, task, sentence_avg):
        super().__init__(task, sentence_avg)
        self.direction_names = tuple(getattr(task, "direction_names", ("dir0", "dir1")))

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        nll = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), ignore_index=self.padding_idx,
                         reduction="none").view(target.shape)
        per_row = nll.sum(1)
        loss = per_row.sum() if reduce else nll.view(-1)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {"loss": per_row.sum().data, "ntokens": sample["ntokens"],
                          "nsentences": sample["target"].size(0), "sample_size": sample_size}
        direction = sample["net_input"].get("direction")
        if direction is not None:
            tokens = target.ne(self.padding_idx).sum(1)
            for d, name in enumerate(self.direction_names):
                rows = direction.eq(d)
                logging_output[f"dirloss_{name}"] = per_row[rows].sum().data
                logging_output[f"dirntok_{name}"] = int(tokens[rows].sum())
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        CrossEntropyCriterion.reduce_metrics(logging_outputs)
        names = sorted({k[len("dirloss_"):] for log in logging_outputs for k in log if k.startswith("dirloss_")})
        for name in names:
            loss = sum(log.get(f"dirloss_{name}", 0) for log in logging_outputs)
            ntok = sum(log.get(f"dirntok_{name}", 0) for log in logging_outputs)
            if ntok > 0:
                metrics.log_scalar(f"loss_{name}", loss / ntok / math.log(2), ntok, round=3)
                metrics.log_derived(f"ppl_{name}", lambda meters, n=name: utils.get_perplexity(
                    meters[f"loss_{n}"].avg))

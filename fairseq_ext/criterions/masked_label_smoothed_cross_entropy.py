"""Target-vocabulary logit masking and label smoothing over the allowed vocabulary only
(Nguyen 2021, §6.3.1).

"The source and target's input and output embeddings are shared, but we mask out words that are not
in the target's vocabulary at the final output layer before softmax, by setting their logits to −∞."
With a joint dictionary fairseq's ``label_smoothed_cross_entropy`` would then spread smoothing mass
over the −∞ entries and become non-finite, so this module provides

* :func:`allowed_target_vocab` — the allowed set A as a boolean mask over the target dictionary:
  every type on the target side of the binarized ``train`` split (all shards ``train``, ``train1``,
  …, of every ``:``-separated data path), plus ``</s>`` and ``<unk>``; ``<pad>`` and ``<s>`` are never
  allowed. A file (one token per line, first field; a fairseq ``dict.txt`` works) can replace the
  training data, and ``all`` allows every type.
* :func:`mask_logits` — logits of disallowed types set to −1e9 (the reference implementation's
  "−∞"; finite so that 0·(−1e9) stays 0). The plugin's models apply the same mask to their logits
  when built with ``--target-vocab-mask`` (a persistent buffer, so decoding uses it too); both live
  in :mod:`fairseq_ext.modules.vocab_mask`.
* criterion ``masked_label_smoothed_cross_entropy`` — fairseq's label smoothing with the smoothing
  mass spread over A only:

      loss = (1 − ε − ε_A)·(−log p_y) + ε_A · Σ_{v∈A} (−log p_v),   ε_A = ε / (|A| − 1),

  i.e. cross-entropy against q with q_y = 1 − ε, q_v = ε/(|A| − 1) on A∖{y}, q = 0 outside A
  (Σ_A q = 1). With A = the whole dictionary this is exactly fairseq's ``label_smoothed_nll_loss``.
  (The reference implementation writes (1 − ε)·NLL + ε·mean_{v∈A}(−log p_v): the same up to putting
  ε/|A| instead of 0 of the smoothing mass on y.)

A reference token outside A (e.g. a source-only type copied into a dev reference; never a training
token when A comes from the training data) is scored as ``<unk>``: the masked model cannot emit it, and
its NLL against the −1e9 logit (≈1e9) would swamp the validation loss.
"""
import logging
from dataclasses import dataclass, field

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from fairseq_ext.modules.vocab_mask import mask_logits, model_target_vocab_mask, task_allowed_target_vocab
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)


# -------------------------------------------------------------------------------- the criterion
@dataclass
class MaskedLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    target_vocab: str = field(
        default="train",
        metadata={"help": "the allowed target vocabulary A when the model has no --target-vocab-mask: 'train' "
                          "(the target side of the binarized train split), 'all', or a file of tokens"})


def masked_label_smoothed_nll_loss(lprobs, target, epsilon, allowed, ignore_index=None, reduce=True):
    """fairseq's ``label_smoothed_nll_loss`` with the uniform part restricted to ``allowed`` (bool [V]).

    ``lprobs`` [N, V] (disallowed entries finite, e.g. log-softmax of :func:`mask_logits`), ``target`` [N].
    """
    if target.dim() == lprobs.dim() - 1:
        target = target.unsqueeze(-1)
    allowed = allowed.to(lprobs.device)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    smooth_loss = -lprobs.masked_fill(~allowed, 0.0).sum(dim=-1, keepdim=True)
    if ignore_index is not None:
        pad_mask = target.eq(ignore_index)
        nll_loss.masked_fill_(pad_mask, 0.0)
        smooth_loss.masked_fill_(pad_mask, 0.0)
    else:
        nll_loss = nll_loss.squeeze(-1)
        smooth_loss = smooth_loss.squeeze(-1)
    if reduce:
        nll_loss = nll_loss.sum()
        smooth_loss = smooth_loss.sum()
    eps_i = epsilon / max(int(allowed.sum()) - 1, 1)
    loss = (1.0 - epsilon - eps_i) * nll_loss + eps_i * smooth_loss
    return loss, nll_loss


@register_criterion("masked_label_smoothed_cross_entropy", dataclass=MaskedLabelSmoothedCrossEntropyConfig)
class MaskedLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """Label-smoothed cross-entropy with disallowed target types masked out of the softmax and out
    of the smoothing distribution (§6.3.1; see module doc).

    A has one source: the model's ``--target-vocab-mask`` buffer when the model has one; otherwise
    ``--target-vocab`` (``train``, the default, ``all`` or a token file; see
    :func:`fairseq_ext.modules.vocab_mask.allowed_target_vocab`)."""

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, target_vocab="train"):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        allowed = task_allowed_target_vocab(task, target_vocab)
        if allowed is not None:
            logger.info(f"masked label smoothing over {int(allowed.sum())} of {len(allowed)} target types")
        self.register_buffer("allowed", allowed, persistent=False)

    def allowed_for(self, model) -> torch.Tensor:
        model_mask = model_target_vocab_mask(model)
        if model_mask is not None:
            return model_mask
        if self.allowed is None:
            raise UserDataError("masked_label_smoothed_cross_entropy: the allowed vocabulary comes from the "
                             "binarized train split, which was not found (or train a model with "
                             "--target-vocab-mask FILE)")
        return self.allowed

    def get_lprobs_and_target(self, model, net_output, sample):
        """Log-probabilities of the masked logits; targets outside A count as <unk> (see module doc)."""
        allowed = self.allowed_for(model)
        masked = (mask_logits(net_output[0], allowed), *net_output[1:])
        lprobs, target = super().get_lprobs_and_target(model, masked, sample)
        outside = ~allowed.to(target.device)[target] & target.ne(self.padding_idx)
        return lprobs, target.masked_fill(outside, self.task.target_dictionary.unk())

    def compute_loss(self, model, net_output, sample, reduce=True):
        lprobs, target = self.get_lprobs_and_target(model, net_output, sample)
        return masked_label_smoothed_nll_loss(lprobs, target, self.eps, self.allowed_for(model),
                                              ignore_index=self.padding_idx, reduce=reduce)

"""Target-vocabulary logit masking and label smoothing over the allowed vocabulary only
(Nguyen 2021, §6.3.1; spec 002 §1.4).

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
  when built with ``--target-vocab-mask`` (a persistent buffer, so decoding uses it too).
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
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

logger = logging.getLogger(__name__)

MASK_VALUE = -1e9


# ------------------------------------------------------------------------------------ the mask
def _all_tokens(dataset) -> np.ndarray:
    """Every token id of a fairseq indexed dataset, concatenated (no per-sentence loop for mmap)."""
    from fairseq.data import ConcatDataset
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    if isinstance(dataset, ConcatDataset):
        return np.concatenate([_all_tokens(d) for d in dataset.datasets])
    if isinstance(dataset, MMapIndexedDataset):
        return np.frombuffer(dataset._bin_buffer, dtype=dataset._index.dtype).astype(np.int64)
    return torch.cat([dataset[i] for i in range(len(dataset))]).numpy().astype(np.int64)


def split_prefixes(data: str, split: str, src: Optional[str], tgt: str):
    """The binarized ``{split}[k].{src}-{tgt}.{tgt}`` prefixes (either language order) under ``data``."""
    out = []
    for path in str(data).split(os.pathsep):
        k = 0
        while True:
            name = split + (str(k) if k > 0 else "")
            found = None
            for a, b in ((src, tgt), (tgt, src)):
                prefix = os.path.join(path, f"{name}.{a}-{b}.{tgt}")
                if os.path.exists(prefix + ".bin") and os.path.exists(prefix + ".idx"):
                    found = prefix
                    break
            if found is None:
                break
            out.append(found)
            k += 1
    return out


def target_token_counts(dictionary, data: str, src: Optional[str], tgt: str, split: str = "train"):
    """Frequency of every target-dictionary type on the target side of ``split`` (LongTensor [V]);
    ``None`` if the binarized split is not there."""
    from fairseq.data import data_utils

    prefixes = split_prefixes(data, split, src, tgt)
    if not prefixes:
        return None
    counts = np.zeros(len(dictionary), dtype=np.int64)
    for prefix in prefixes:
        ds = data_utils.load_indexed_dataset(prefix, dictionary)
        counts += np.bincount(_all_tokens(ds), minlength=len(dictionary))[: len(dictionary)]
    return torch.from_numpy(counts)


def allowed_from_file(dictionary, path: str) -> torch.Tensor:
    allowed = torch.zeros(len(dictionary), dtype=torch.bool)
    missing = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            idx = dictionary.index(fields[0])
            if idx == dictionary.unk() and fields[0] != dictionary.unk_word:
                missing += 1
            else:
                allowed[idx] = True
    if missing:
        logger.warning(f"{missing} tokens of {path} are not in the target dictionary (ignored)")
    return allowed


def allowed_target_vocab(dictionary, spec: str = "train", data: Optional[str] = None,
                         src: Optional[str] = None, tgt: Optional[str] = None,
                         split: str = "train") -> Optional[torch.Tensor]:
    """The allowed output vocabulary A as a bool mask [V] (see module doc).

    ``spec``: ``train`` (target side of the binarized ``split`` under ``data``), ``all`` (every type,
    including specials: the unmasked model) or the path of a token list. Returns ``None`` when
    ``train`` is asked but the binarized split cannot be found (e.g. decoding without the training
    data: the mask then comes from the checkpoint)."""
    if spec == "all":
        return torch.ones(len(dictionary), dtype=torch.bool)
    if spec == "train":
        if data is None or tgt is None:
            return None
        counts = target_token_counts(dictionary, data, src, tgt, split)
        if counts is None:
            return None
        allowed = counts > 0
    elif os.path.exists(spec):
        allowed = allowed_from_file(dictionary, spec)
    else:
        raise ValueError(f"target vocabulary {spec!r}: expected 'train', 'all' or an existing file")
    allowed[dictionary.eos()] = True
    allowed[dictionary.unk()] = True
    allowed[dictionary.pad()] = False
    allowed[dictionary.bos()] = False
    return allowed


def task_allowed_target_vocab(task, spec: str, dictionary=None) -> Optional[torch.Tensor]:
    """:func:`allowed_target_vocab` for a fairseq translation task (its data path and languages)."""
    dictionary = dictionary if dictionary is not None else task.target_dictionary
    cfg = getattr(task, "cfg", None)
    data = getattr(cfg, "data", None) if cfg is not None else None
    src = getattr(cfg, "source_lang", None) if cfg is not None else None
    tgt = getattr(cfg, "target_lang", None) if cfg is not None else None
    return allowed_target_vocab(dictionary, spec, data=data, src=src, tgt=tgt)


def mask_logits(logits: torch.Tensor, allowed: Optional[torch.Tensor]) -> torch.Tensor:
    """Logits of types outside ``allowed`` (bool [V]) set to −1e9 (the dtype's minimum if larger)."""
    if allowed is None:
        return logits
    value = max(MASK_VALUE, torch.finfo(logits.dtype).min)
    return logits.masked_fill(~allowed.to(logits.device), value)


class TargetVocabMaskMixin:
    """For decoders: a persistent bool buffer ``target_vocab_mask`` [V] built from
    ``--target-vocab-mask {train,FILE}`` (or none), applied by :meth:`apply_target_vocab_mask`."""

    def init_target_vocab_mask(self, spec: Optional[str], task, dictionary):
        if not spec or spec == "none":
            self.target_vocab_mask = None
            return
        allowed = task_allowed_target_vocab(task, spec, dictionary)
        if allowed is None:  # no training data here: the checkpoint's buffer will replace this
            logger.warning("--target-vocab-mask train: binarized train split not found; the mask "
                           "must come from the checkpoint")
            allowed = torch.ones(len(dictionary), dtype=torch.bool)
            allowed[dictionary.pad()] = allowed[dictionary.bos()] = False
        if "target_vocab_mask" in self.__dict__:
            del self.__dict__["target_vocab_mask"]
        self.register_buffer("target_vocab_mask", allowed)

    def apply_target_vocab_mask(self, logits: torch.Tensor) -> torch.Tensor:
        return mask_logits(logits, self.target_vocab_mask)


def model_target_vocab_mask(model) -> Optional[torch.Tensor]:
    return getattr(getattr(model, "decoder", None), "target_vocab_mask", None)


# -------------------------------------------------------------------------------- the criterion
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


@dataclass
class MaskedLabelSmoothedCrossEntropyCriterionConfig(LabelSmoothedCrossEntropyCriterionConfig):
    target_vocab: str = field(
        default="train",
        metadata={"help": "allowed output vocabulary: 'train' (types on the target side of the "
                          "binarized train split, plus </s> and <unk>), 'all' (every type: standard "
                          "label smoothing) or a file with one token per line. Intersected with the "
                          "model's own --target-vocab-mask if it has one"},
    )


@register_criterion("masked_label_smoothed_cross_entropy",
                    dataclass=MaskedLabelSmoothedCrossEntropyCriterionConfig)
class MaskedLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """Label-smoothed cross-entropy with disallowed target types masked out of the softmax and out
    of the smoothing distribution (spec 002 §1.4; see module doc)."""

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, target_vocab="train"):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        allowed = task_allowed_target_vocab(task, target_vocab)
        if allowed is None:
            raise ValueError("masked_label_smoothed_cross_entropy: --target-vocab train needs the "
                             "binarized train split (or pass --target-vocab FILE / all)")
        logger.info(f"masked label smoothing over {int(allowed.sum())} of {len(allowed)} target types")
        self.register_buffer("allowed", allowed, persistent=False)

    def allowed_for(self, model) -> torch.Tensor:
        model_mask = model_target_vocab_mask(model)
        allowed = self.allowed
        if model_mask is not None:
            allowed = allowed.to(model_mask.device) & model_mask
        return allowed

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

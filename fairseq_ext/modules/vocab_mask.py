"""The target-vocabulary mask of Nguyen (2021) §6.3.1: logits of types outside the allowed output
vocabulary A are set to −1e9 before the softmax ("we mask out words that are not in the target's
vocabulary at the final output layer before softmax, by setting their logits to −∞").

* :func:`allowed_target_vocab` — A as a boolean mask over the target dictionary: every type on the
  target side of the binarized ``train`` split (all shards of every ``:``-separated data path), plus
  ``</s>`` and ``<unk>``; ``<pad>`` and ``<s>`` are never allowed. A file (one token per line, first
  field; a fairseq ``dict.txt`` works) can replace the training data, and ``all`` allows every type.
* :func:`mask_logits` — logits outside A set to −1e9 (finite, so that 0·(−1e9) stays 0).
* :class:`TargetVocabMaskMixin` — for decoders: a persistent buffer built from
  ``--target-vocab-mask {train,FILE}``, so decoding uses the training-time mask.

The criterion ``masked_label_smoothed_cross_entropy`` uses the same A for its smoothing mass.
"""
import logging
import os
from typing import Optional

import torch

from fairseq_ext.data.binarized import target_token_counts
from fairseq_ext.modules.arch_utils import set_default
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

MASK_VALUE = -1e9


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
        raise UserDataError(f"target vocabulary {spec!r}: expected 'train', 'all' or an existing file")
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


def add_target_vocab_mask_args(parser):
    """``--target-vocab-mask``: the one option of the mask, for every model that has it."""
    parser.add_argument("--target-vocab-mask", type=str, metavar="{none,train,FILE}",
                        help="mask (logit -1e9) output types outside the target side of the "
                             "binarized train data (train) or outside a token list (FILE); default none")


def set_target_vocab_mask_default(args):
    set_default(args, "target_vocab_mask", None)

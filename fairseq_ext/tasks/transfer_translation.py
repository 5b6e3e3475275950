"""``transfer_translation``: ``translation_ext`` plus what a transferred child model of Nguyen (2021) ch. 3
(transfer across related languages) needs:

* ``--freeze-target-embeddings`` (§3.2, "+freeze"): the decoder's input embedding
  and its output projection (tied or not) get ``requires_grad=False``, so the optimizer never sees
  them. Refused (one clear error) when source and target share one embedding matrix
  (``--share-all-embeddings``), because freezing it would freeze the source embeddings too.
* ``--transfer-parent-data DIR``: the parent's binarized folder; the child's ``dict.<lang>.txt``
  must be identical to the parent's (the joint-BPE vocabulary of
  ``python -m fairseq_ext.tools.corpora.transfer joint-bpe``), else one clear error naming the first
  differing entry. Independently, loading a checkpoint whose embedding matrices do not have the
  child dictionary's sizes fails with a message saying so (e.g. ``--finetune-from-model`` on a
  parent with another vocabulary; remap it with ``transfer remap`` first).

  Parent→child transfer itself is fairseq's: ``--finetune-from-model parent/checkpoint_best.pt``
  (loads every parameter, resets optimizer, LR scheduler, meters and data iterator).

References: T. Q. Nguyen and D. Chiang, "Transfer Learning across Low-Resource, Related Languages for
Neural Machine Translation", IJCNLP 2017; Nguyen's thesis (see :mod:`fairseq_ext.models.twt`).
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.data import Dictionary
from fairseq.tasks import register_task

from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)


@dataclass
class TransferTranslationConfig(TranslationExtConfig):
    freeze_target_embeddings: bool = field(
        default=False,
        metadata={"help": "freeze the decoder's word embeddings and output projection "
                          "(Nguyen & Chiang 2017 'transfer+freeze'); needs untied source/target embeddings"},
    )
    transfer_parent_data: Optional[str] = field(
        default=None,
        metadata={"help": "the parent's binarized data folder: fail unless the child's dictionaries "
                          "are identical to the parent's (shared-vocabulary transfer)"},
    )


def target_embedding_parameters(model) -> list:
    """The decoder's input embedding and output projection weights (each tensor once)."""
    dec = model.decoder
    out = []
    for owner, name in ((getattr(dec, "embed_tokens", None), "weight"),
                        (getattr(dec, "output_projection", None), "weight"),
                        (getattr(dec, "fc_out", None), "weight"),  # fairseq LSTM decoder
                        (dec, "embed_out")):
        p = getattr(owner, name, None) if owner is not None else None
        if isinstance(p, torch.nn.Parameter) and all(p is not q for q in out):
            out.append(p)
    if not out:
        raise UserDataError("--freeze-target-embeddings: the decoder has no embed_tokens / output projection")
    return out


def freeze_target_embeddings(model) -> list:
    """``requires_grad=False`` on the target embeddings (see :func:`target_embedding_parameters`);
    returns the frozen parameters."""
    params = target_embedding_parameters(model)
    enc_emb = getattr(getattr(model, "encoder", None), "embed_tokens", None)
    enc_w = getattr(enc_emb, "weight", None)
    if enc_w is not None and any(p is enc_w for p in params):
        raise UserDataError("--freeze-target-embeddings: source and target share one embedding matrix "
                         "(--share-all-embeddings), so freezing it would freeze the source embeddings "
                         "too; train the child without --share-all-embeddings "
                         "(--share-decoder-input-output-embed is fine)")
    for p in params:
        p.requires_grad_(False)
    logger.info("froze the target embeddings: %s", ", ".join(
        f"{tuple(p.shape)}" for p in params))
    return params


def check_same_dictionaries(child: Dictionary, parent_path: str, what: str) -> None:
    """One clear error unless ``child`` equals the dictionary file ``parent_path``."""
    if not os.path.isfile(parent_path):
        raise UserDataError(f"--transfer-parent-data: missing parent dictionary {parent_path}")
    parent = Dictionary.load(parent_path)
    if len(parent) != len(child):
        raise UserDataError(f"mismatched parent/child vocabulary ({what}): the parent dictionary {parent_path} "
                         f"has {len(parent)} entries, the child's {len(child)}; binarize both with the same "
                         f"joint dictionary (python -m fairseq_ext.tools.corpora.transfer joint-bpe) or remap the "
                         f"parent's embeddings (python -m fairseq_ext.tools.corpora.transfer remap)")
    diff = [i for i in range(len(parent)) if parent[i] != child[i]]
    if diff:
        i = diff[0]
        raise UserDataError(f"mismatched parent/child vocabulary ({what}): entry {i} is {parent[i]!r} in "
                         f"{parent_path} but {child[i]!r} in the child's dictionary ({len(diff)} entries "
                         f"differ); binarize both with the same joint dictionary")


def parent_languages(folder: str) -> tuple:
    """``(src, tgt)`` of a fairseq-preprocess folder, from its ``train.<src>-<tgt>.<src>.idx``."""
    if not os.path.isdir(folder):
        raise UserDataError(f"--transfer-parent-data: missing folder {folder}")
    found = set()
    for name in os.listdir(folder):
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "train" and parts[3] == "idx" and "-" in parts[1]:
            src, _, tgt = parts[1].partition("-")
            if parts[2] == src:
                found.add((src, tgt))
    if len(found) != 1:
        raise UserDataError(f"--transfer-parent-data: {folder} must hold the binarized training data of one "
                         f"language pair (train.<src>-<tgt>.<src>.idx); found {sorted(found) or 'none'}")
    return found.pop()


def _vocab_size_check_hook(model):
    """A load_state_dict pre-hook: embedding matrices in the checkpoint must have the model's rows."""
    expected = {}
    for name, p in model.named_parameters():
        if name.endswith(("embed_tokens.weight", "output_projection.weight", "fc_out.weight", "embed_out")):
            expected[name] = p.shape[0]

    def hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        for name, rows in expected.items():
            t = state_dict.get(prefix + name)
            if t is not None and t.shape[0] != rows:
                raise UserDataError(
                    f"mismatched parent/child vocabulary: the checkpoint's {name} has {t.shape[0]} rows but "
                    f"the child's dictionary has {rows} entries; binarize the child with the parent's "
                    f"dictionary (python -m fairseq_ext.tools.corpora.transfer joint-bpe) or remap the checkpoint "
                    f"(python -m fairseq_ext.tools.corpora.transfer remap)")
    model.register_load_state_dict_pre_hook(hook)


@register_task("transfer_translation", dataclass=TransferTranslationConfig)
class TransferTranslationTask(TranslationExtTask):
    """``translation_ext`` + ``--freeze-target-embeddings`` + parent-vocabulary checks (ch. 3)."""

    cfg: TransferTranslationConfig

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        parent = getattr(cfg, "transfer_parent_data", None)
        if parent:
            psrc, ptgt = parent_languages(parent)
            for side, lang, d in (("source", psrc, task.src_dict), ("target", ptgt, task.tgt_dict)):
                check_same_dictionaries(d, os.path.join(parent, f"dict.{lang}.txt"), f"{side} side")
        return task

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        _vocab_size_check_hook(model)
        if getattr(self.cfg, "freeze_target_embeddings", False):
            freeze_target_embeddings(model)
        return model

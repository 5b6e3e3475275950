"""Warm start of a document model from a sentence-level checkpoint (the two-stage training of Maruf
2019, §3.5 and §4.4.1: "we pre-train the sentence-level NMT model followed by optimising the parameters
of the whole model"; the same sentence checkpoint warm-starts every context-aware model, footnote 14).

A document model lists the parameter-name prefixes that only it has (``DOC_PARAM_PREFIXES``: its
context layers, gates, frozen copies...). :class:`SentenceWarmStartMixin` overrides fairseq's
``load_state_dict``:

* the incoming state has **none** of those keys → it is a sentence checkpoint: every tensor it has is
  copied (names and shapes must match the model's), the document-only tensors keep their
  initialisation (except a document module's alias of a sentence tensor, e.g. a context encoder
  sharing the embeddings, which gets the checkpoint's value), the copy is logged (``warm start from a
  sentence checkpoint: copied N tensors; initialised: ...``) and ``after_sentence_warm_start()`` runs
  (e.g. to fill a frozen copy of the sentence encoder);
* otherwise → fairseq's own (strict) loading.

Any other mismatch (a sentence tensor the checkpoint lacks, a tensor the model does not have, a shape)
is a :class:`WarmStartMismatch` (a :class:`~fairseq_ext.modules.checkpoint.CheckpointError`) naming the
first few keys (ignored with ``strict=False``, as in fairseq); in ``fairseq-train`` it is one
``error: CHECKPOINT: ...`` line. Use:
``fairseq-train --finetune-from-model SENTENCE.pt --arch DOC_ARCH``.

Reference: S. Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University, 2019.
"""
import logging
from collections import OrderedDict
from typing import Dict, List, Tuple

import torch

from fairseq_ext.modules.checkpoint import CheckpointError

logger = logging.getLogger(__name__)


class WarmStartMismatch(CheckpointError, RuntimeError):
    """A sentence checkpoint that does not fit the model (also a ``RuntimeError``, as torch's strict loading)."""


def _first(what: str, items: List[str], n: int = 4) -> str:
    more = f" (+{len(items) - n} more)" if len(items) > n else ""
    return f"{what} {', '.join(items[:n])}{more}"


def mismatch_message(model: str, missing: List[str], unexpected: List[str], shapes: List[str]) -> str:
    """The one line of a sentence checkpoint that does not fit the sentence part of ``model``: the first few
    missing and unexpected keys and shape mismatches (``checkpoint shape vs model shape``)."""
    parts = [_first(w, items) for w, items in (("missing", missing), ("unexpected", unexpected),
                                                 ("size mismatch (checkpoint vs model)", shapes)) if items]
    return (f"warm start from a sentence checkpoint: it does not fit the sentence part of {model} "
            f"(a different architecture shape? give the stage-1 model's --arch and sizes): {'; '.join(parts)}")


def group_by_prefix(keys: List[str], prefixes: Tuple[str, ...]) -> "OrderedDict[str, int]":
    """``{prefix: number of keys}`` (keys matching no prefix are grouped under their own name)."""
    groups: "OrderedDict[str, int]" = OrderedDict()
    for k in keys:
        p = next((p for p in prefixes if k.startswith(p)), k)
        groups[p] = groups.get(p, 0) + 1
    return groups


class SentenceWarmStartMixin:
    """Put before the fairseq model class: ``class M(SentenceWarmStartMixin, TransformerModel)``.

    Subclasses set ``DOC_PARAM_PREFIXES`` (a tuple of state-dict key prefixes, e.g.
    ``("encoder.ctx_layer.", "encoder.ctx_gate.")``; an instance may override it as an attribute when
    the document-only modules depend on the configuration) and may override
    :meth:`after_sentence_warm_start`."""

    DOC_PARAM_PREFIXES: Tuple[str, ...] = ()

    def doc_param_prefixes(self) -> Tuple[str, ...]:
        return tuple(self.DOC_PARAM_PREFIXES)

    def is_doc_key(self, key: str) -> bool:
        prefixes = self.doc_param_prefixes()
        return bool(prefixes) and key.startswith(prefixes)

    def after_sentence_warm_start(self) -> None:
        """Called once after the sentence tensors were copied (nothing by default)."""

    def shared_with_checkpoint(self, state_dict) -> Dict[str, str]:
        """``{key: key of the same tensor in state_dict}`` for the model's keys that are absent from
        ``state_dict`` but name a parameter or buffer it has under another name (shared modules)."""
        names: Dict[int, List[str]] = {}
        for n, t in [*self.named_parameters(remove_duplicate=False),
                     *self.named_buffers(remove_duplicate=False)]:
            names.setdefault(id(t), []).append(n)
        out = {}
        for group in names.values():
            source = next((n for n in group if n in state_dict), None)
            if source is not None:
                out.update({n: source for n in group if n not in state_dict})
        return out

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        prefixes = self.doc_param_prefixes()
        if not prefixes or any(k.startswith(prefixes) for k in state_dict):
            return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

        # A sentence checkpoint. The document-only tensors keep their current values; they are put in
        # first so that fairseq's upgrade of old checkpoints (which rewrites the *modules* of a prefix
        # whose "version" key is absent) sees them as current (it is idempotent on current keys).
        own: Dict = self.state_dict()
        shared = self.shared_with_checkpoint(state_dict)
        merged = OrderedDict(state_dict)
        initialised = []
        for k in own:
            if self.is_doc_key(k) and k not in state_dict:
                if k in shared:  # a document module reusing a sentence tensor (e.g. the embeddings)
                    merged[k] = state_dict[shared[k]]
                else:
                    merged[k] = own[k]
                    initialised.append(k)
        self.upgrade_state_dict(merged)
        unexpected = [k for k in merged if k not in own]
        missing = [k for k in own if k not in merged]
        shapes = [f"{k} {tuple(merged[k].shape)} vs {tuple(own[k].shape)}" for k in own
                  if k in merged and torch.is_tensor(merged[k]) and merged[k].shape != own[k].shape]
        if strict and (unexpected or missing):
            raise WarmStartMismatch(mismatch_message(type(self).__name__, missing, unexpected, shapes))
        try:  # a load pre-hook may still fit a shape (accept_grown_dictionary): torch has the last word
            result = super().load_state_dict(merged, strict=strict, model_cfg=model_cfg, args=args)
        except RuntimeError as exc:
            if shapes and "size mismatch" in str(exc):
                raise WarmStartMismatch(mismatch_message(type(self).__name__, [], [], shapes)) from None
            raise
        init = ", ".join(f"{p}* ({n})" for p, n in group_by_prefix(initialised, prefixes).items())
        copied = len(merged) - len(initialised)
        logger.info(f"warm start from a sentence checkpoint: copied {copied} tensors; "
                    f"initialised: {init or 'nothing'}")
        self.after_sentence_warm_start()
        return result


def accept_grown_dictionary(model, added: int) -> None:
    """Let ``model`` load a checkpoint made before ``added`` symbols were appended to its dictionaries
    (the concatenation baseline's ``<brk>``): every tensor of the incoming state with ``added`` rows fewer
    than the model's and the same trailing shape (the embeddings and the output projection) gets the
    model's own initialised rows appended, and the growth is logged; anything else loads as usual
    (a checkpoint of the grown model is untouched). Use: ``--finetune-from-model SENTENCE.pt``."""
    if added <= 0:
        return

    def grow_rows(state_dict, prefix, *args):
        own = model.state_dict()
        grown = []
        for key, mine in own.items():
            theirs = state_dict.get(key)
            if theirs is None or theirs.dim() == 0 or mine.dim() != theirs.dim():
                continue
            if theirs.size(0) + added == mine.size(0) and theirs.shape[1:] == mine.shape[1:]:
                state_dict[key] = torch.cat([theirs.to(mine.dtype), mine[theirs.size(0):].to(theirs.device)], 0)
                grown.append(key)
        if grown:
            logger.info(f"checkpoint from before the dictionary grew by {added}: appended the new rows "
                        f"(initialised) to {', '.join(grown)}")

    model._register_load_state_dict_pre_hook(grow_rows)

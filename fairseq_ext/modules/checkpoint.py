"""Loading checkpoints: the one helper every model, task and offline tool of the plugin uses.

fairseq's own loaders (``fairseq-generate``, ``fairseq-interactive``, ``--finetune-from-model``) go
through ``checkpoint_utils.load_checkpoint_to_cpu``, which :mod:`fairseq_ext._compat` wraps so that a
corrupt, truncated or unsafe file raises :class:`CheckpointError` ("not a readable fairseq checkpoint:
FILE (why)") instead of torch's advice to switch ``weights_only`` off.  The functions here add what the
plugin's own callers need on top: a missing file named as such, ``arg_overrides`` (e.g. the data
folder of the current run), eval mode with frozen parameters for teachers and scorers, and the device.

:func:`load_ensemble` is the plugin's one model loader: given fairseq-generate's configuration it also
prepares the models as ``fairseq_cli/generate.py`` does (``--fp16``, ``--checkpoint-suffix`` / shards,
``prepare_for_inference_``, hence ``--quantize int8``), so an offline tool that decodes or scores with
fairseq's generation options gets them all, not a shortened copy.
"""
import os
from typing import Dict, List, Optional, Sequence, Tuple
from fairseq_ext.data.errors import UserDataError


class CheckpointError(UserDataError):
    """A checkpoint that cannot be used: missing, unreadable, refused by safe loading."""


def require_checkpoint(path: str) -> str:
    if not path or not os.path.isfile(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    return path


def load_state(path: str) -> Dict:
    """The raw checkpoint dict of ``path`` (``model`` state, ``cfg``, ...) on CPU."""
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(require_checkpoint(path))


def load_ensemble(paths: Sequence[str], arg_overrides: Optional[Dict] = None, task=None,
                  frozen: bool = False, use_cuda: bool = False, generation=None) -> Tuple[List, object, object]:
    """``(models, cfg, task)`` of the checkpoints ``paths`` (fairseq's ``load_model_ensemble_and_task``);
    ``frozen``: eval mode and no gradients (teachers, scorers); ``use_cuda``: on the GPU. ``generation``: the
    configuration of fairseq-generate's options (a ``FairseqConfig``): its checkpoint suffix and shards, then
    per model ``half()`` (``--fp16``), the device, ``prepare_for_inference_`` (``--quantize`` ...) and eval
    mode, as ``fairseq_cli/generate.py``."""
    from fairseq import checkpoint_utils

    for p in paths:
        require_checkpoint(p)
    shards = {}
    if generation is not None:
        ckpt = generation.checkpoint
        shards = dict(suffix=ckpt.checkpoint_suffix, strict=ckpt.checkpoint_shard_count == 1,
                      num_shards=ckpt.checkpoint_shard_count)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        list(paths), arg_overrides=arg_overrides or {}, task=task, **shards)
    for m in models:
        if generation is not None and generation.common.fp16:
            m.half()
        if use_cuda:
            m.cuda()
        if generation is not None:
            m.prepare_for_inference_(generation)
            m.eval()
        if frozen:
            m.eval()
            for p in m.parameters():
                p.requires_grad_(False)
    return models, cfg, task

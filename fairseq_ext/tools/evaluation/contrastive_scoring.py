"""Scoring a contrastive set with any fairseq model (Maruf 2019 ch. 4, as ContraPro, Mueller et al. 2018): each
candidate translation (the reference first, then its variants) is scored by the sum of its target-token
log-probabilities under teacher forcing, an ensemble averaging the probabilities of its models; an instance is
correct when the reference scores strictly above every variant. The model and the split are loaded the way
fairseq-generate loads them (:func:`load_for_scoring`), so every registered task and architecture can be scored.

Shared by the Bible pronoun set (:mod:`fairseq_ext.tools.evaluation.contrastive`) and the published sets
(:mod:`fairseq_ext.tools.evaluation.contrastive_sets`); both report accuracy by antecedent distance in
ContraPro's buckets (:data:`BUCKETS`, :func:`distance_bucket`).
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_ext.tools.common import ToolError

__all__ = ["BUCKETS", "distance_bucket", "encode_candidates", "score_sample", "score_instances",
           "load_for_scoring", "score_candidates"]

BUCKETS: Tuple[str, ...] = ("0", "1", "2", "3", ">3")


def distance_bucket(d: int) -> str:
    return str(d) if d <= 3 else ">3"


def encode_candidates(texts: Sequence[str], tgt_dict, spm_model: Optional[str] = None) -> List[Any]:
    """Token id tensors (``</s>`` appended) of ``texts``: segmented with the sentencepiece model
    ``spm_model`` first, or taken as already segmented (space-separated pieces) when it is ``None``."""
    if spm_model is not None:
        from fairseq_ext.tools.corpora.segment import apply_sentencepiece

        texts = apply_sentencepiece(spm_model, list(texts), threads=1)
    return [tgt_dict.encode_line(t, add_if_not_exist=False, append_eos=True).long() for t in texts]


def _forward_inputs(model, net_input: Mapping[str, Any]) -> Dict[str, Any]:
    """``net_input`` restricted to the keyword arguments ``model.forward`` accepts (all of them when it
    takes ``**kwargs``): a sentence model never sees the context keys of a document dataset."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return dict(net_input)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(net_input)
    return {k: v for k, v in net_input.items() if k in params}


def score_sample(models: Sequence[Any], sample: Mapping[str, Any], pad: int) -> List[float]:
    """Sum of the target-token log-probabilities of each row of a collated ``sample`` (teacher forcing);
    an ensemble averages the probabilities of its models."""
    import torch

    target = sample["target"]
    per_model = []
    with torch.no_grad():
        for m in models:
            net_output = m(**_forward_inputs(m, sample["net_input"]))
            lprobs = m.get_normalized_probs(net_output, log_probs=True, sample=sample).float()
            per_model.append(lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1))
        tok = per_model[0] if len(per_model) == 1 else (
            torch.logsumexp(torch.stack(per_model), dim=0) - math.log(len(per_model)))
        return (tok * target.ne(pad)).sum(-1).tolist()


def _strip(t, pad: int) -> Tuple[int, ...]:
    return tuple(int(x) for x in t.tolist() if int(x) != pad)


def score_instances(instances: Sequence[Mapping[str, Any]], dataset, candidates: Sequence[Sequence[Any]],
                    scorer: Callable[[Mapping[str, Any]], List[float]], pad: int,
                    per_batch: int = 1, move: Optional[Callable[[Any], Any]] = None) -> Tuple[List[List[float]], int]:
    """Scores of every candidate (reference first, then the variants) of each instance.

    ``candidates[k]`` are the encoded token tensors of instance k; its dataset item ``dataset[line]`` is
    copied once per candidate with ``target`` replaced, ``dataset.collater`` builds the batch (``per_batch``
    instances at a time) and ``scorer(sample)`` returns one score per row. Rows are matched back by the
    sample's ``id`` and target tokens (collaters may reorder). Returns (scores, number of instances whose
    encoded reference differs from the dataset's own target)."""
    import torch

    scores: List[List[float]] = [[float("nan")] * len(c) for c in candidates]
    mismatched = 0
    for start in range(0, len(instances), per_batch):
        items, where = [], {}
        for k in range(start, min(start + per_batch, len(instances))):
            line = int(instances[k]["line"])
            if line < 0 or line >= len(dataset):
                raise ToolError(f"instance {k + 1}: line {line} is outside the split ({len(dataset)} items)")
            item = dataset[line]
            own = item.get("target") if isinstance(item, dict) else None
            if own is not None and _strip(own, pad) != _strip(candidates[k][0], pad):
                mismatched += 1
            for c, toks in enumerate(candidates[k]):
                it = dict(item)
                it["target"] = toks
                items.append(it)
                where.setdefault((int(item.get("id", line)), _strip(toks, pad)), []).append((k, c))
        sample = dataset.collater(items)
        if move is not None:
            sample = move(sample)
        row_scores = scorer(sample)
        ids = sample.get("id")
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids) if ids is not None else None
        for r, s in enumerate(row_scores):
            key_tokens = _strip(sample["target"][r], pad)
            if ids is not None:
                slot = where.get((int(ids[r]), key_tokens))
            else:
                slot = None
            if not slot:
                raise ToolError("the collater returned a row that matches no candidate "
                                "(does it keep 'id' and 'target'?)")
            k, c = slot.pop(0)
            scores[k][c] = float(s)
    return scores, mismatched


def _shadow_data(data: str, workdir: str, split: str) -> str:
    """``workdir`` with a link to every file of the (first) data folder except those of ``split``."""
    from fairseq import utils

    first = utils.split_paths(data)[0]
    if not os.path.isdir(first):
        raise ToolError(f"missing data folder: {first}")
    for entry in os.listdir(first):
        if not entry.startswith(split + "."):
            os.symlink(os.path.abspath(os.path.join(first, entry)), os.path.join(workdir, entry))
    return workdir


def load_for_scoring(fairseq_argv: Sequence[str], prepare: Optional[Callable[[Any, str, str], None]] = None,
                     workdir: Optional[str] = None):
    """(cfg, task, models, dataset, use_cuda) the way fairseq-generate loads them (``fairseq_cli/generate.py``):
    the task, the ensemble prepared by :func:`fairseq_ext.modules.checkpoint.load_ensemble` (``--fp16``, the
    device, ``prepare_for_inference_``: ``--quantize int8`` applies), then the split ``--gen-subset``.

    With ``prepare(task, folder, split)`` the split is the caller's: the data folder is replaced by ``workdir``
    (links to every file of the data folder except those of the split), ``prepare`` writes the split there once
    the task and its dictionaries are set up, and the task loads it as any split."""
    import ast

    import torch

    import fairseq_ext  # noqa: F401  (compat fixes before fairseq parses)
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_ext.cli import with_user_dir
    from fairseq_ext.modules.checkpoint import load_ensemble, require_checkpoint

    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, with_user_dir(list(fairseq_argv)))
    if args.path is None:
        raise ToolError("give --path CHECKPOINT (and the data folder) for fairseq")
    if prepare is not None:
        if workdir is None:
            raise ValueError("prepare needs a workdir")
        args.data = _shadow_data(args.data, workdir, args.gen_subset)
        if hasattr(args, "doc_id_pattern"):
            args.doc_id_pattern = "whole"  # the split's ids file names each line's document itself
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    paths = utils.split_paths(cfg.common_eval.path)
    for p in paths:
        require_checkpoint(p)
    task = tasks.setup_task(cfg.task)
    use_cuda = torch.cuda.is_available() and not cfg.common.cpu
    models, saved_cfg, _ = load_ensemble(paths, ast.literal_eval(cfg.common_eval.model_overrides), task=task,
                                         use_cuda=use_cuda, generation=cfg)
    split = cfg.dataset.gen_subset
    if prepare is not None:
        prepare(task, cfg.task.data, split)
    task.load_dataset(split, task_cfg=saved_cfg.task)
    return cfg, task, models, task.dataset(split), use_cuda


def score_candidates(lines: Sequence[int], texts: Sequence[Sequence[str]], dataset, models: Sequence[Any], tgt_dict, *,
                     spm: Optional[str] = None, per_batch: int = 1, use_cuda: bool = False,
                     scorer: Optional[Callable[[Mapping[str, Any]], List[float]]] = None) -> Tuple[List[List[float]], int]:
    """:func:`score_instances` of the candidate translations ``texts[k]`` (reference first) of the item
    ``dataset[lines[k]]``: encoded by :func:`encode_candidates` (``spm``), on CUDA with ``use_cuda``, scored by
    :func:`score_sample` with ``models`` unless ``scorer(sample)`` is given. Returns (scores, mismatched)."""
    flat = encode_candidates([t for c in texts for t in c], tgt_dict, spm)
    candidates, pos = [], 0
    for c in texts:
        candidates.append(flat[pos:pos + len(c)])
        pos += len(c)
    move = None
    if use_cuda:
        from fairseq import utils

        move = utils.move_to_cuda
    pad = tgt_dict.pad()
    if scorer is None:
        def scorer(sample):
            return score_sample(models, sample, pad)
    return score_instances([{"line": n} for n in lines], dataset, candidates, scorer, pad, per_batch, move)

"""What the subcommands of ``fairseq-ext-analysis`` (:mod:`fairseq_ext.tools.analysis.analysis`) share: the
checkpoint (loaded frozen, :func:`fairseq_ext.modules.checkpoint.load_ensemble`) and the teacher-forced batches
of (a sample of) a split, progress on stderr, and the outputs: CSV tables, annotated heatmaps, token strings.
They serve the attention analyses of Ampomah's thesis (Sec. 3.5.3, 4.5.5, 5.6.2).
"""
import argparse
import ast
import csv
import sys
from typing import Any, Dict, List, Optional, Sequence

import torch

from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.tools.analysis.attention_stats import layer_index
from fairseq_ext.tools.common import ToolError, atomic_write


# ============================================================================ loading
def load(args):
    """(model, task, dataset) from ``--path`` / ``--data`` / ``--subset``."""
    from fairseq import utils

    if args.user_dir:
        utils.import_user_module(argparse.Namespace(user_dir=args.user_dir))
    overrides: Dict[str, Any] = {"data": args.data}
    if args.model_overrides:
        try:
            overrides.update(ast.literal_eval(args.model_overrides))
        except (ValueError, SyntaxError):
            raise ToolError(f"--model-overrides is not a Python dict literal: {args.model_overrides!r}") from None
    device = torch.device("cpu" if args.cpu or not torch.cuda.is_available() else "cuda")
    models, cfg, task = load_ensemble([args.path], arg_overrides=overrides, frozen=True,
                                      use_cuda=device.type == "cuda")
    model = models[0]
    task.load_dataset(args.subset, combine=False, epoch=1)
    return model, task, task.dataset(args.subset), device


def batches(dataset, args, device):
    """Yield collated samples of ``--batch-size`` sentences from the first (or, with
    ``--random-sample``, a seeded random) ``--max-sentences`` sentences of the split."""
    from fairseq import utils

    n = len(dataset)
    k = n if not args.max_sentences or args.max_sentences <= 0 else min(args.max_sentences, n)
    if args.random_sample and k < n:
        g = torch.Generator().manual_seed(args.seed)
        idx = sorted(torch.randperm(n, generator=g)[:k].tolist())
    else:
        idx = list(range(k))
    chunks = [idx[i:i + args.batch_size] for i in range(0, len(idx), args.batch_size)]
    for b, chunk in enumerate(chunks):
        sample = dataset.collater([dataset[i] for i in chunk])
        if device.type == "cuda":
            sample = utils.move_to_cuda(sample, device=device)
        yield b, len(chunks), sample


def progress(args, b, total, n_sent):
    print(f"[{args.command}] batch {b + 1}/{total} done ({n_sent} sentences)", file=sys.stderr, flush=True)


# ============================================================================ output helpers
def write_csv(path, rows: List[Dict[str, Any]], fields: Optional[Sequence[str]] = None):
    fields = list(fields or (rows[0].keys() if rows else []))
    with atomic_write(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def heatmap(ax, matrix, title, xlabels, ylabels, fmt="{:.2f}", cmap="viridis"):
    import numpy as np

    m = np.array(matrix, dtype=float)
    im = ax.imshow(np.ma.masked_invalid(m), aspect="auto", cmap=cmap)
    ax.set_xticks(range(len(xlabels)))
    ax.set_xticklabels(xlabels)
    ax.set_yticks(range(len(ylabels)))
    ax.set_yticklabels(ylabels)
    ax.set_title(title, fontsize=9)
    if m.size <= 200:
        for (i, j), v in np.ndenumerate(m):
            if v == v:
                ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=6, color="w")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)


def layers_of(rec_names, prefix):

    return {n: layer_index(n) for n in rec_names if n.startswith(prefix)}


def token_strings(d, toks, strip_pad=True):
    out = []
    for row in toks.tolist():
        out.append([d[t] for t in row if not (strip_pad and t == d.pad())])
    return out

#!/usr/bin/env python
"""Train and evaluate named configurations on the same prepared data under the same budget.

    python recipes/bench/bench.py --data data/bible_es_en/spm8000 --configs transformer,... \
        --budget-min 15 --out runs/bench/JOB [--table recipes/bench/RESULTS.md]

For every configuration (``fairseq_ext/tools/evaluation/bench_configs.py``), one after the other on the same machine:

1. ``fairseq-train --user-dir fairseq_ext`` for ``--budget-min`` minutes of wall-clock training
   (``--stop-time-hours``; fairseq stops at the first update past the budget), keeping the
   checkpoint with the best validation loss;
2. ``fairseq-generate`` of the test split with the configuration's decoding flags;
3. sacreBLEU BLEU + chrF against the reference (and the second reference, when present), paired
   bootstrap against the baseline of the same job, and the measured costs: parameters, training
   target tokens/s (fairseq's ``wps``, subword tokens), decoding sentences/s, each also as a ratio
   to the baseline of the same job.

Where: ``--device cpu`` (default; the configuration's CPU bf16 autocast where the CPU computes bf16 natively) or
``--device cuda`` (``--precision``: fairseq's ``--amp`` where the card has float16 tensor cores).  ``--train-only``
runs one lane of a job; ``recipes/bench/gpu_batch.sh`` runs a lane per configuration at the same time on one GPU.

Results go to ``OUT/<config>/result.json``, ``OUT/summary.json`` and a Markdown table.  With
``--table`` the rows are merged into that file by configuration name (later issues add rows
without touching the others; every row says which job, budget and machine produced it).

Learning-curve mode (``--curve-every N``): fairseq's own validation hook scores the dev set every N
updates (``--eval-bleu``, greedy, sacreBLEU on the detokenised text) next to the dev loss; the best
checkpoint is the best dev BLEU; ``--patience P`` stops a configuration after P validations without
a better dev BLEU (runs to convergence), ``--max-updates U`` at U updates (equal updates),
``--budget-min`` stays a wall-clock cap (0: none).  Each configuration writes ``curve.csv``; the job
writes ``curves.csv`` and ``curves.png`` (dev BLEU vs updates, vs training wall-clock, dev NLL vs
updates) so that equal updates and equal time are both visible, and ``--table`` merges its rows into
the "converged" table (best dev BLEU, test BLEU with paired bootstrap, updates and wall-clock to the
best checkpoint).  An interrupted job resumes: training restarts from each configuration's last
checkpoint (saved at every validation) and its log is appended to; the patience count travels in the
checkpoints (``fairseq_ext/modules/patience_resume.py``), so a resumed configuration stops where an uninterrupted
one would (a checkpoint without it, e.g. from a job without --patience, starts the count at the
resumption).  ``--continue-from JOB`` starts a configuration that has not started yet from the newest
interval checkpoint of the same configuration in another curve job on the same data (e.g. an equal-updates job continued to convergence): its checkpoint,
best checkpoint and log are copied, and fairseq restores the optimiser, scheduler and data iterator.

Stage 2 of a two-stage procedure (the document systems of Maruf ch. 3-4, ``recipes/bench/converged_doc.sh``):
``--finetune-from-model STAGE1.pt`` warm-starts every configuration not yet started from the stage-1 checkpoint
(fairseq's option: an interrupted one resumes its own ``checkpoint_last.pt``) and is pass 0 of the configurations
decoded with ``doc_bcd --bcd-init base_model`` (``--path BEST:STAGE1``); ``--doc-generated-dir DIR`` gives the
stage-1 translations to the configurations that read the generated target context.

    python recipes/bench/bench.py --data data/bible_es_en/spm8000_low5k --configs transformer,jas_m11 \
        --curve-every 200 --patience 5 --budget-min 240 --out runs/converged/es_en_5k --table recipes/bench/RESULTS.md
"""
from fairseq_ext.tools.evaluation.bench_runs import main

if __name__ == "__main__":
    main(description=__doc__)

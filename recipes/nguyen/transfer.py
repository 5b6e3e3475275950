#!/usr/bin/env python
"""Driver of the Nguyen ch. 3 Bible runs (parent -> child transfer; recipes/nguyen/ch3.sh), and the
tiny data slice of the recipes' ``DATA=tiny`` test mode.

    python recipes/nguyen/transfer.py run --parent-src es --child-src it --tgt en_web \\
        --child-train-size 3000 --merges 8000 --budget-min 15 --parent-budget-min 30 \\
        --out runs/nguyen_ch3/es-it
    python recipes/nguyen/transfer.py tiny-data --out runs/nguyen_tiny/data   # prints the spm folder

``run`` does, for each ``--merges K`` (a comma list gives the Fig. 3.1 sweep):

1. raw pairs ``<src>-<tgt>`` of the multilingual Bible (``data/bible_multi/raw``; built when
   missing), or ``--parent-raw`` / ``--child-raw`` folders;
2. the child: ``--child-train-size`` training verses drawn with ``--seed`` (valid/test whole); the
   parent: its full training set minus the child's training verses (``--no-exclude`` keeps them);
3. ``--xlit uroman|uyghur``: the source side of the languages in ``--xlit-langs`` (default: the
   non-Latin ones among the two sources) transliterated to Latin script [T §3.2.1];
4. one joint subword-nmt BPE of K merges on parent+child source+target, one dictionary, both
   pairs binarized with it (``fairseq_ext.tools.corpora.transfer joint-bpe``) [T §3.2.2];
   ``--unk-copy F`` (opt-in; the thesis's BPE systems [T §3.3]): then both pairs' training data
   get the UNK copy of :mod:`fairseq_ext.tools.corpora.unk_copy` (types seen < F times on their side of the
   pair's own BPE'd training set become ``<unk>`` in an appended second copy; F = 5 in ch. 3) and
   are binarized again with the same joint dictionary; the jobs go to ``OUT/bpe<K>_unk<F>``. The thesis
   halves the number of epochs for the doubled data; the Bible runs train for a wall-clock budget
   (``--budget-min``), so there is nothing to halve (the same budget sees each original pair
   about half as often);
5. the parent trained for ``--parent-budget-min`` (``recipes/bench/bench.py``'s ``run_config``; it is
   also decoded and scored on its own test set);
6. the child systems for ``--budget-min`` each, scored with sacreBLEU and paired bootstrap against
   the BPE baseline (``bench.py``'s ``main``, with the configurations below registered in-process;
   job folder ``OUT/bpe<K>/child_<child src>-<tgt>_from_<parent src>_bpe<K>``):
   ``bpe_baseline`` (child only, same vocabulary, random init), ``bpe_transfer`` (every parameter
   from the parent, ``--finetune-from-model``: optimizer, LR schedule and counters reset) and
   ``bpe_transfer_freeze`` (+ ``--freeze-target-embeddings``);
7. Table 3.3: the share of child source types (train; dev) found in the parent's, for raw words and
   for the BPE segmentation (``overlap.json``); ``sweep.tsv`` (+ ``bleu_vs_merges.png`` with more
   than one K) and ``summary.json``.

The model is the bench transformer (3+3, d 256) with separate source and target embeddings
(target input and output tied), because freezing the target embeddings must not freeze the
source ones; the decoding strips the ``@@`` BPE marks (``--post-process subword_nmt``).
"""
import sys

from fairseq_ext.tools.chapters.transfer_pipeline import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__))

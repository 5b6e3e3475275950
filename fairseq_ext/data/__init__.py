"""fairseq_ext.data: what fairseq uses while training or decoding (datasets, batching, file readers).

* :mod:`~fairseq_ext.data.batching` -- Morishita chunked batches and virtual epochs (``translation_ext``);
* :mod:`~fairseq_ext.data.concat_dataset` -- the concatenated pairs of ``concat_translation``;
* :mod:`~fairseq_ext.data.fertility` -- the fertility dataset of ``translation_fertility``;
* :mod:`~fairseq_ext.data.binarized` -- finding and scanning fairseq's binarized splits;
* :mod:`~fairseq_ext.data.lexicon_file` -- the Arthur lexicon file the ``*_arthur`` models read.

Preparing data (corpora, segmentation, distillation, fertilities, lexicons, ...) is offline work:
:mod:`fairseq_ext.tools`.  Nothing here imports the tools.
"""

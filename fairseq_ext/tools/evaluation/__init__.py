"""fairseq_ext.tools.evaluation: score translations (``python -m fairseq_ext.tools.evaluation.<name>``).

=======================  =====================================  ===============================================
module                   console script                         what
=======================  =====================================  ===============================================
``score``                ``fairseq-ext-score``                  reads the files, runs the metrics: BLEU/chrF,
                                                                bootstrap, buckets, OOV, METEOR, d-BLEU ``dbleu``
``bleu``                 —                                      corpus BLEU/chrF of ``score``, ``doc_metrics``
``significance``         (``fairseq-ext-score compare``)        paired bootstrap resampling of BLEU/chrF
``length_buckets``       (``fairseq-ext-score score --src``)    BLEU/chrF by source-length bucket
``oov``                  (``fairseq-ext-score oov``)            recall of the reference's OOV words (copying)
``meteor``               (``fairseq-ext-score meteor``)         METEOR, exact + stem matching only (nltk)
``doc_metrics``          (``fairseq-ext-score dbleu``)          document-level BLEU over joined documents
``contrastive``          ``fairseq-ext-contrastive``            Maruf ch. 4: the Bible pronoun set; scores any
                                                                contrastive set with any model
``contrastive_build``    (``fairseq-ext-contrastive build``)    the instances of the Bible set, by distance
``contrastive_gender``   —                                      gendered pronouns, nouns and names; variants
``contrastive_sets``     (``fairseq-ext-contrastive score       ContraPro (Mueller et al. 2018) and Bawden et al.
                         --format``)                            2018 sets in their own formats
``contrastive_scoring``  —                                      scoring candidates with a fairseq model (teacher
                                                                forcing), distance buckets
``doc_consistency``      ``fairseq-ext-doc-consistency``        Maruf ch. 4: chapter consistency
``simul_latency``        ``fairseq-ext-simul-latency``          Gu ch. 9: AP / CW / AL (both) / LAAL / DAL / AL_CA
                                                                of READ/WRITE actions
``fairseq_log``          —                                      reading fairseq-train / fairseq-generate logs
``runs``                 —                                      what the recipe drivers share to run fairseq's
                                                                command lines and report on them
``bench_configs``        —                                      the benchmark's named configurations: the
                                                                train/generate flags of every system the
                                                                recipes train
``bench_runs``           (``recipes/bench/bench.py``)           train, decode and score bench configurations
                                                                under one budget; the bench tables
``bench_pairs``          (``bench.py --pair``)                  a one-change reference inside a bench job
``verdicts``             —                                      a row's bootstrap, thesis delta and verdict
``update_cost``          —                                      CPU seconds per update of bench configurations
``interleaved``          (``recipes/bench/decode_speed.py``,    costs measured interleaved: decoding time,
                         ``speed.py``, ``cpu_inference.py``)    training steps on fixed batches
=======================  =====================================  ===============================================

``data/`` holds the gendered nouns of ``contrastive_gender`` and the stopwords of ``doc_consistency``.
"""

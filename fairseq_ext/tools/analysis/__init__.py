"""fairseq_ext.tools.analysis: look inside a trained model (``python -m fairseq_ext.tools.analysis.<name>``).

========================  =====================================  ===============================================
module                    console script                         what
========================  =====================================  ===============================================
``analysis``              ``fairseq-ext-analysis``               Ampomah: attention statistics of a checkpoint
``attention_divergence``  (``fairseq-ext-analysis dc-js|aif-kl``)  Ampomah ch. 4-5: DC JS divergence, AIF KL
``analysis_io``           —                                      checkpoint, batches, tables and heatmaps of
                                                                 ``analysis``
``attention_stats``       —                                      the math and hooks behind ``analysis``
``copy_heatmap``          (``python -m``)                        Gu ch. 3: the copy/generate heatmap (Fig. 3.3)
``lexicon``               ``fairseq-ext-lexicon``                Nguyen ch. 5: the lexicon a lexical model learned
``tm_analysis``           (``python -m``)                        Gu ch. 4: the command line of the SEG-NMT analyses
``tm_bleu``               (``tm_analysis fuzzy-bins|k-sweep``)   ... BLEU per fuzzy bin (Fig. 4.3), vs pairs (4.4)
``tm_gate``               (``tm_analysis gate``)                 ... the gate ζ_t of a few sentences (Fig. 4.5)
``tm_split``              (``tm_analysis split-corpus``)         ... the JRC-Acquis dev/test split (§4.5)
``diagnostics``           ``fairseq-ext-diagnostics``            synthetic corpora on which a mechanism must be
                                                                 near-perfect: document context (Maruf)
``diagnostics_copy``      (``fairseq-ext-diagnostics``)          ... copying and retrieval (Gu ch. 3-4)
``diagnostics_multi``     (``fairseq-ext-diagnostics``)          ... the multilingual mechanisms (Gu ch. 5)
``diagnostics_arch``      (``fairseq-ext-diagnostics``)          ... conversations, rare words, positions
``diagnostics_decoding``  (``fairseq-ext-diagnostics``)          ... the decoding mechanisms (Gu ch. 2, 7-8)
``diagnostics_meta``      (``fairseq-ext-diagnostics``)          ... fast adaptation to a new language (Gu ch. 6)
``diagnostics_simul``     (``fairseq-ext-diagnostics``)          ... the simultaneous agent (Gu ch. 9)
``diagnostics_runs``      —                                      what the diagnostics runners of recipes/bench/
                                                                 share: training, decoding, cached rows, options,
                                                                 tables
``diagnostics_systems``   —                                      the systems, shapes and flags of the document-
                                                                 context diagnostic (recipes/bench/diagnostics.py)
========================  =====================================  ===============================================
"""

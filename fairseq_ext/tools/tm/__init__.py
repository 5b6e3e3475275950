"""fairseq_ext.tools.tm: Gu ch. 4's translation memory (``python -m fairseq_ext.tools.tm.<name>``).

=====================  =====================================  ===============================================
module                 console script                         what
=====================  =====================================  ===============================================
``retrieval``          ``fairseq-ext-tm``                     translation-memory index (tantivy BM25), fuzzy
                                                              re-rank, Alg. 1 selection, TM baseline
``tm_engines``         (``fairseq-ext-tm --engine``)          the BM25 candidate engines
=====================  =====================================  ===============================================
"""

"""fairseq_ext.tools.tm: Gu ch. 4's translation memory (``python -m fairseq_ext.tools.tm.<name>``).

=====================  =====================================  ===============================================
module                 console script                         what
=====================  =====================================  ===============================================
``retrieval``          ``fairseq-ext-tm``                     retrieval for every query of a split (BM25, fuzzy
                                                              re-rank, Alg. 1), side files, TM baseline, CLI
``memory_index``       (``fairseq-ext-tm build-index``)       the memory and its stamped tantivy index
``selection``          —                                      Eq. 4.1 fuzzy re-ranking, Alg. 1 adaptive selection
``tm_engines``         (``fairseq-ext-tm --engine``)          the BM25 candidate engines
=====================  =====================================  ===============================================
"""

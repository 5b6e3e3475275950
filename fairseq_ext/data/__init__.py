"""fairseq_ext.data: corpora preparation (``python -m fairseq_ext.data.corpora``) and datasets.

Dataset classes used by tasks live here; the corpus CLI is imported lazily (it needs no torch).
"""

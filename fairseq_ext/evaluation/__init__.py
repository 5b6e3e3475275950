"""fairseq_ext.evaluation: scoring helpers shared by every recipe (sacreBLEU, chrF, bootstrap)."""

"""Analysis tools for Ampomah's thesis (attention distance/entropy, AIF dependency KL, DC JS
divergence, attention export).  Math in :mod:`fairseq_ext.analysis.attention`; command line:
``python -m fairseq_ext.analysis {self-attn,export,dc-js,aif-kl} --path CKPT --data BIN ...``
(``--help`` per subcommand).  BLEU by source length is :func:`fairseq_ext.evaluation.score.bleu_by_length`.
"""
from fairseq_ext.analysis.attention import (  # noqa: F401
    AttentionRecorder,
    distance_sums,
    entropy,
    js_divergence,
    kl,
    mean_distance,
    reduce_heads,
)

__all__ = ["AttentionRecorder", "distance_sums", "entropy", "js_divergence", "kl", "mean_distance",
           "reduce_heads"]

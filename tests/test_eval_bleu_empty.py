"""``--eval-bleu`` when every dev hypothesis is empty: the translation_ext tasks log a dev BLEU of 0.

fairseq's ``TranslationTask.reduce_metrics`` logs ``bleu`` only when the hypotheses have n-grams, so a model that
outputs nothing but empty lines (an untrained model after a few updates) left no ``bleu`` in the validation stats, and
dev-BLEU checkpoint selection (``--best-checkpoint-metric bleu``) stopped ``fairseq-train`` with ``KeyError: 'bleu'``.
"""
from fairseq.data import Dictionary
from fairseq.logging import metrics

from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask


class NoCriterion:
    """A criterion class whose own metrics are not under test."""

    @classmethod
    def reduce_metrics(cls, logging_outputs):
        pass


def bleu_logs(sys_len, counts, totals):
    return [{"ntokens": 10, "nsentences": 2, "sample_size": 10, "_bleu_sys_len": sys_len, "_bleu_ref_len": 12,
             **{f"_bleu_counts_{i}": counts[i] for i in range(4)}, **{f"_bleu_totals_{i}": totals[i] for i in range(4)}}]


def reduced(task, logs):
    with metrics.aggregate(new_root=True) as agg:
        task.reduce_metrics(logs, NoCriterion())
        return agg.get_smoothed_values()


def test_empty_hypotheses_give_a_dev_bleu_of_zero():
    task = TranslationExtTask(TranslationExtConfig(eval_bleu=True), Dictionary(), Dictionary())
    assert reduced(task, bleu_logs(0, [0] * 4, [0] * 4))["bleu"] == 0.0
    # hypotheses with n-grams: fairseq's own BLEU, unchanged
    stats = reduced(task, bleu_logs(8, [6, 3, 1, 0], [8, 6, 4, 2]))
    assert 0 < stats["bleu"] < 100
    # training steps carry no BLEU counts, and --eval-bleu off logs none
    assert "bleu" not in reduced(task, [{"ntokens": 10, "nsentences": 2, "sample_size": 10}])
    off = TranslationExtTask(TranslationExtConfig(eval_bleu=False), Dictionary(), Dictionary())
    assert "bleu" not in reduced(off, bleu_logs(0, [0] * 4, [0] * 4))

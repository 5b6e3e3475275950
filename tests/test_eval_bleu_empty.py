"""``--eval-bleu`` when the dev hypotheses are empty: the translation_ext tasks log a dev BLEU of 0.

fairseq's ``TranslationTask.reduce_metrics`` logs ``bleu`` only when the hypotheses have n-grams, so a model that
outputs nothing but empty lines (an untrained model after a few updates) left no ``bleu`` in the validation stats, and
dev-BLEU checkpoint selection (``--best-checkpoint-metric bleu``) stopped ``fairseq-train`` with ``KeyError: 'bleu'``.
The validations below nest the aggregators as ``fairseq-train`` does (a new root per validation, the persistent
``valid`` aggregator of ``Trainer.valid_step``, one per batch).
"""
from fairseq.data import Dictionary
from fairseq.logging import metrics

from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask


class NoCriterion:
    """A criterion class whose own metrics are not under test."""

    @classmethod
    def reduce_metrics(cls, logging_outputs):
        pass


def batch(sys_len, counts, totals, ref_len=12):
    return [{"ntokens": 10, "nsentences": 2, "sample_size": 10, "_bleu_sys_len": sys_len, "_bleu_ref_len": ref_len,
             **{f"_bleu_counts_{i}": counts[i] for i in range(4)}, **{f"_bleu_totals_{i}": totals[i] for i in range(4)}}]


EMPTY = batch(0, [0] * 4, [0] * 4)
SOME = batch(8, [6, 3, 1, 0], [8, 6, 4, 2])
BOTH = batch(8, [6, 3, 1, 0], [8, 6, 4, 2], ref_len=24)  # EMPTY and SOME as one batch


def validate(task, batches):
    with metrics.aggregate(new_root=True) as agg:
        for logs in batches:
            with metrics.aggregate("valid"), metrics.aggregate():
                task.reduce_metrics(logs, NoCriterion())
        return agg.get_smoothed_values()


def task(eval_bleu=True):
    return TranslationExtTask(TranslationExtConfig(eval_bleu=eval_bleu), Dictionary(), Dictionary())


def test_empty_hypotheses_give_a_dev_bleu_of_zero():
    metrics.reset()
    t = task()
    some = validate(t, [SOME])["bleu"]
    assert 0 < some < 100  # fairseq's own BLEU
    assert validate(t, [EMPTY])["bleu"] == 0.0  # after a validation that had a BLEU (the persistent aggregator)
    assert validate(t, [EMPTY])["bleu"] == 0.0
    assert validate(t, [SOME])["bleu"] == some
    # an empty batch first, then one with n-grams: the BLEU of both together, as fairseq gives for one batch
    assert validate(t, [EMPTY, SOME])["bleu"] == validate(t, [BOTH])["bleu"] < some
    # training steps carry no BLEU counts, and --eval-bleu off logs none
    assert "bleu" not in validate(t, [[{"ntokens": 10, "nsentences": 2, "sample_size": 10}]])
    assert "bleu" not in validate(task(eval_bleu=False), [EMPTY])


def test_empty_first_validation():
    metrics.reset()
    t = task()
    assert validate(t, [EMPTY])["bleu"] == 0.0
    assert 0 < validate(t, [SOME])["bleu"] < 100

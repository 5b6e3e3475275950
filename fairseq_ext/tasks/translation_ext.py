"""``translation_ext``: fairseq's ``translation`` task plus what every fairseq_ext task shares.

The plugin's other tasks (``transfer_translation``, ``concat_translation``, ``translation_fertility``,
...) subclass :class:`TranslationExtTask`
so they inherit:

* ``--cpu-bf16``: forward/backward/inference under ``torch.autocast("cpu", torch.bfloat16)``.
  Master weights, optimizer state and the loss stay float32.
* ``--math-attention``: scaled-dot-product attention through PyTorch's math kernel.  For the short
  sequences of sentence-level MT on CPU its backward beats the fused flash kernel's.
* ``--gnmt-alpha``: decode with the GNMT length penalty (see
  :mod:`fairseq_ext.generators.length_penalty`) instead of fairseq's ``--lenpen``.
* ``--batching {sorted,chunked} --chunk-size 10000``: the training batches. ``sorted`` (default) is
  fairseq's (the whole set sorted by length, batched once, batch order reshuffled every epoch);
  ``chunked`` is Morishita et al.'s, as in Nguyen (2021) (§4.2.2): every epoch the examples are
  shuffled (seed + epoch), cut into chunks of ``--chunk-size`` examples, each chunk is sorted by
  source then target length and packed into ``--max-tokens`` batches, and the batch order is
  shuffled (:func:`fairseq_ext.data.batching.chunked_batches`). Valid/test sets keep fairseq's
  sorted batches.
* ``--updates-per-epoch N``: fixed-size "virtual" epochs (§6.3.1, Table 4.1: 100/600/1500/2000
  updates]; see :class:`TrainBatchingMixin`.
* Over-long inputs at evaluation time: a source or target longer than the model's positions (the smallest of
  the task's ``--max-source/target-positions`` and the models') in ``fairseq-interactive``, ``fairseq-generate``
  or validation is cut to its first max - 1 tokens + ⟨/s⟩ and translated, with one warning naming the input
  line, instead of stopping the run ("Size of sample #i is invalid") or, with
  ``--skip-invalid-size-inputs-valid-test``, going without an output; see :class:`LongInputMixin`. The
  training split keeps fairseq's filter.
* ``--eval-bleu`` with hypotheses that are all empty logs a dev BLEU of 0 (fairseq logs none, so dev-BLEU
  checkpoint selection stopped training); see :class:`EvalBleuMixin`.
"""

import contextlib
import functools
import inspect
import logging
import weakref
from dataclasses import dataclass, field
from typing import List

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from fairseq.data import data_utils, iterators
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from fairseq_ext.data.batching import BATCHING_MODES, VirtualEpochs, chunked_batches
from fairseq_ext.data.truncation import language_pair_of, position_limits, truncate_pairs_
from fairseq_ext.generators.length_penalty import GNMTLengthPenaltySequenceGenerator
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)


@dataclass
class TranslationExtConfig(TranslationConfig):
    cpu_bf16: bool = field(
        default=False,
        metadata={"help": "run the model under torch.autocast('cpu', dtype=bfloat16) "
                          "(float32 master weights); ~1.4x faster on AMX/AVX512-BF16 CPUs"},
    )
    math_attention: bool = field(
        default=False,
        metadata={"help": "use the math kernel of scaled_dot_product_attention (faster than the "
                          "flash kernel for short sentences on CPU)"},
    )
    gnmt_alpha: float = field(
        default=0.0,
        metadata={"help": "if > 0, beam search normalises scores by the GNMT length penalty "
                          "((5+|Y|)/6)^alpha instead of |Y|^lenpen"},
    )
    batching: ChoiceEnum(BATCHING_MODES) = field(
        default="sorted",
        metadata={"help": "training batches: 'sorted' = fairseq's (whole set sorted by length); 'chunked' = "
                          "Morishita et al.: shuffle, chunks of --chunk-size examples each sorted by length, "
                          "packed to --max-tokens, batch order shuffled (new batches every epoch)"},
    )
    chunk_size: int = field(
        default=10000, metadata={"help": "examples per length-sorted chunk of --batching chunked"},
    )
    updates_per_epoch: int = field(
        default=0,
        metadata={"help": "if > 0, an epoch is this many updates (the next batches of an endless stream of "
                          "shuffled passes over the training set), so validation, checkpoints, LR plateau "
                          "steps, --max-epoch and --patience count these virtual epochs"},
    )
    update_freq: List[int] = II("optimization.update_freq")


@functools.lru_cache(maxsize=1)
def native_cpu_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX). Without it torch emulates bf16
    matrix products: on an AVX2-only CPU a 2048x256 by 256x1024 product took 474 ms under bf16
    autocast against 53 ms in float32 (measured), so ``--cpu-bf16`` slows training down there."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = f.read()
    except OSError:
        return torch.backends.cpu.get_cpu_capability() not in ("DEFAULT", "NO AVX", "AVX2")
    return "avx512_bf16" in flags or "amx_bf16" in flags


class AutocastMixin:
    """Runs train/valid/inference steps under CPU bf16 autocast when ``cfg.cpu_bf16`` is set, and
    with the math attention kernel when ``cfg.math_attention`` is set. On a CPU without native bf16
    (:func:`native_cpu_bf16`) ``--cpu-bf16`` still applies, with a warning that it is slower there."""

    def autocast(self):
        stack = contextlib.ExitStack()
        if getattr(self.cfg, "cpu_bf16", False):
            if not native_cpu_bf16() and not getattr(AutocastMixin, "warned", False):
                AutocastMixin.warned = True
                logger.warning("--cpu-bf16: this CPU has no native bf16 (AVX512-BF16/AMX); emulated "
                               "bf16 is several times slower than float32 here")
            stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        if getattr(self.cfg, "math_attention", False):
            stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        return stack

    def train_step(self, *args, **kwargs):
        with self.autocast():
            return super().train_step(*args, **kwargs)

    def valid_step(self, *args, **kwargs):
        with self.autocast():
            return super().valid_step(*args, **kwargs)

    def inference_step(self, *args, **kwargs):
        with self.autocast():
            return super().inference_step(*args, **kwargs)


class EvalBleuMixin:
    """``--eval-bleu`` logs a dev BLEU of 0 when no hypothesis has an n-gram (every one empty, as from a model after a
    few updates): fairseq's ``reduce_metrics`` then logs no counts and no ``bleu``, and ``--best-checkpoint-metric
    bleu`` stopped training with ``KeyError: 'bleu'``.  Here the zero counts are logged as fairseq logs counts, with
    a ``bleu`` derived from the summed counts (fairseq's formula: sacreBLEU's ``compute_bleu``, exp smoothing; 0 while
    they are empty), so a validation whose first batches are empty and later ones are not still gets its BLEU."""

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if not getattr(self.cfg, "eval_bleu", False) or not any("_bleu_totals_0" in log for log in logging_outputs):
            return
        from fairseq.logging import metrics

        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        totals = [total(f"_bleu_totals_{i}") for i in range(4)]
        if max(totals) > 0:  # fairseq logged them
            return
        metrics.log_scalar("_bleu_counts", np.array([total(f"_bleu_counts_{i}") for i in range(4)]))
        metrics.log_scalar("_bleu_totals", np.array(totals))
        metrics.log_scalar("_bleu_sys_len", total("_bleu_sys_len"))
        metrics.log_scalar("_bleu_ref_len", total("_bleu_ref_len"))
        metrics.log_derived("bleu", bleu_from_counts)


def bleu_from_counts(meters) -> float:
    """Corpus BLEU from the summed n-gram counts of ``--eval-bleu`` (as fairseq's ``compute_bleu``); 0 without any."""
    if max(meters["_bleu_totals"].sum) == 0:
        return 0.0
    from sacrebleu.metrics import BLEU

    return round(BLEU.compute_bleu(correct=meters["_bleu_counts"].sum, total=meters["_bleu_totals"].sum,
                                   sys_len=int(meters["_bleu_sys_len"].sum), ref_len=int(meters["_bleu_ref_len"].sum),
                                   smooth_method="exp").score, 2)


class GNMTGeneratorMixin:
    """``build_generator`` that picks the GNMT-length-penalty beam search when asked."""

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        alpha = getattr(self.cfg, "gnmt_alpha", 0.0)
        if alpha and alpha > 0 and seq_gen_cls is None and not getattr(args, "sampling", False):
            seq_gen_cls = GNMTLengthPenaltySequenceGenerator
            extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {}, gnmt_alpha=alpha)
        return super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)


_BATCH_ITERATOR_SIGNATURE = inspect.signature(FairseqTask.get_batch_iterator)


class TrainBatchingMixin:
    """``get_batch_iterator`` for ``--batching chunked`` and ``--updates-per-epoch`` (training set only).

    Both hand fairseq's :class:`~fairseq.data.iterators.EpochBatchIterator` a *callable*
    ``batch_sampler(dataset, epoch)`` (supported by fairseq 0.12), so the batches are rebuilt for
    every epoch as a pure function of ``--seed`` and the epoch: a checkpoint resumes mid-epoch on the
    same batches. Everything else (sharding, the batch-order shuffle, the iterator cache) is fairseq's.

    Virtual epochs (``--updates-per-epoch N``), the choice made here (our choice; the thesis does not say how epochs are cut): each epoch
    takes the next ``N x update_freq x data-parallel workers`` batches, i.e. ``N`` updates, of an endless
    stream of passes (a pass = one shuffled batch list over the whole training set, ``sorted`` or
    ``chunked``, built anew with the pass number as its seed offset) and continues there in the next
    epoch (:class:`fairseq_ext.data.batching.VirtualEpochs`). So fairseq's end-of-epoch machinery
    (validation and ``--eval-bleu``, checkpoint saving, ``reduce_lr_on_plateau`` steps, ``--max-epoch``,
    ``--patience``) runs every ``N`` updates. Mapping ``N`` onto ``--validate-interval-updates`` /
    ``--save-interval-updates`` instead was rejected: validation and ``--patience`` would follow it,
    but LR plateau steps and ``--max-epoch`` would still count real passes.
    """

    def _train_batching(self) -> tuple:
        """``(batching, updates_per_epoch)``; configs from before these options mean fairseq's default."""
        n = int(getattr(self.cfg, "updates_per_epoch", 0) or 0)
        if n < 0:
            raise UserDataError(f"--updates-per-epoch must be >= 0 (0: an epoch is a pass), got {n}")
        return getattr(self.cfg, "batching", "sorted"), n

    def _update_freq(self) -> int:
        """``--update-freq`` (batches per update), through the config's ``optimization.update_freq``."""
        try:
            uf = self.cfg.update_freq
            return int(uf if isinstance(uf, int) else uf[0])
        except Exception:  # unresolvable (a task config built by hand): one batch per update
            return 1

    def bind_batch_iterator(self, dataset, args, kwargs) -> tuple:
        """``(arguments, reuse, cached)``: fairseq's ``get_batch_iterator`` arguments with their defaults,
        whether the epoch iterator may be cached, and the cached one (None if there is none yet)."""
        bound = _BATCH_ITERATOR_SIGNATURE.bind(self, dataset, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        reuse = (not a["disable_iterator_cache"] and not a["update_epoch_batch_itr"]
                 and self.can_reuse_epoch_itr(dataset))
        return a, reuse, self.dataset_to_epoch_iter.get(dataset) if reuse else None

    def get_batch_iterator(self, dataset, *args, **kwargs):
        batching, n_updates = self._train_batching()
        train = self.datasets.get(getattr(self.cfg, "train_subset", "train"))
        if dataset is not train or (batching == "sorted" and n_updates <= 0):
            return super().get_batch_iterator(dataset, *args, **kwargs)
        a, reuse, cached = self.bind_batch_iterator(dataset, args, kwargs)
        if cached is not None:
            return cached
        if batching == "chunked" and self.cfg.chunk_size < 1:
            raise UserDataError(f"--chunk-size must be >= 1, got {self.cfg.chunk_size}")
        dataset.set_epoch(a["epoch"])
        seed = a["seed"]
        pack = dict(max_tokens=a["max_tokens"], max_sentences=a["max_sentences"],
                    required_batch_size_multiple=a["required_batch_size_multiple"])

        def usable(indices):
            if a["max_positions"] is None:
                return indices
            return self.filter_indices_by_size(indices, dataset, a["max_positions"], a["ignore_invalid_inputs"])

        def make_pass(p: int) -> list:
            """One pass over the training set (the batches of epoch p without virtual epochs)."""
            rng = np.random.default_rng([seed, p])
            if batching == "chunked":
                return chunked_batches(dataset, usable(rng.permutation(len(dataset))), rng,
                                       self.cfg.chunk_size, **pack)
            with data_utils.numpy_seed(seed + p):  # fairseq's own batches, in a seeded random order
                indices = dataset.ordered_indices()
            batches = list(dataset.batch_by_size(usable(indices), **pack))
            return [batches[i] for i in rng.permutation(len(batches))]

        if n_updates > 0:
            per_epoch = n_updates * self._update_freq() * a["num_shards"]
            sampler = VirtualEpochs(make_pass, per_epoch)
            logger.info("virtual epochs of %d updates (%d batches), %s batching", n_updates, per_epoch, batching)
        else:
            def sampler(ds, epoch):
                return make_pass(epoch)
            logger.info("Morishita chunked batching, chunks of %d examples", self.cfg.chunk_size)
        epoch_iter = iterators.EpochBatchIterator(
            dataset=dataset, collate_fn=dataset.collater, batch_sampler=sampler, seed=seed,
            num_shards=a["num_shards"], shard_id=a["shard_id"], num_workers=a["num_workers"],
            epoch=a["epoch"], buffer_size=a["data_buffer_size"], skip_remainder_batch=a["skip_remainder_batch"],
            grouped_shuffling=a["grouped_shuffling"], reuse_dataloader=getattr(self.cfg, "reuse_dataloader", True),
            persistent_workers=getattr(self.cfg, "persistent_workers", True))
        if reuse:
            self.dataset_to_epoch_iter[dataset] = epoch_iter
        return epoch_iter


class LongInputMixin:
    """Evaluation inputs longer than the model's positions are cut, not dropped (module doc).

    fairseq's ``get_batch_iterator`` hands :meth:`filter_indices_by_size` the dataset and the positions of the
    task and the models; for an *evaluation input* this cuts the over-long examples of the dataset in place
    (:func:`fairseq_ext.data.truncation.truncate_pairs_`) before fairseq's filter, which then keeps them all.
    Evaluation inputs are

    * a split not loaded for training: any split but ``--train-subset``, and also that one when an evaluation
      command loads it (``fairseq-generate`` / ``fairseq-validate`` pass the checkpoint's ``task_cfg``), e.g.
      ``fairseq-generate --gen-subset train`` for distillation; named ``SPLIT line N (id N-1)``;
    * a dataset of sources without references that is no loaded split: ``fairseq-interactive``'s buffered input
      lines (one dataset per ``--buffer-size`` chunk) or the hub interface's sentences; named ``input line N``,
      counted from 1 across the chunks.

    Anything else (the training split of ``fairseq-train``, a dataset whose wrappers keep sizes of their own)
    keeps fairseq's behaviour: over-long examples are skipped or refused.
    """

    MAX_WARNINGS = 20  # per dataset; the rest are counted in one more warning

    def _evaluation_names(self, dataset):
        """``i -> name of example i`` if ``dataset`` is an evaluation input (class doc), else None."""
        for split, ds in self.datasets.items():
            if ds is dataset:
                training = split == getattr(self.cfg, "train_subset", "train")
                if getattr(self, "_loaded_for_training", {}).get(split, training):
                    return None
                return lambda i: f"{split} line {i + 1} (id {i})"
        pair = language_pair_of(dataset)
        if pair is None or pair.tgt is not None:
            return None
        if not hasattr(self, "_input_first_line"):
            self._input_first_line, self._input_lines = weakref.WeakKeyDictionary(), 0
        first = self._input_first_line.get(dataset)
        if first is None:
            first = self._input_first_line[dataset] = self._input_lines + 1
            self._input_lines += len(dataset)
        return lambda i: f"input line {first + i} (id {first + i - 1})"

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if not hasattr(self, "_loaded_for_training"):
            self._loaded_for_training = {}
        self._loaded_for_training[split] = (split == getattr(self.cfg, "train_subset", "train")
                                            and "task_cfg" not in kwargs)

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        name = None if max_positions is None else self._evaluation_names(dataset)
        pair = None if name is None else language_pair_of(dataset)
        if pair is not None and len(dataset.filter_indices_by_size(indices, max_positions)[1]):
            max_source, max_target = position_limits(max_positions)
            cut = truncate_pairs_(pair, max_source, max_target)
            if cut:
                ignored = set(dataset.filter_indices_by_size(np.asarray(indices), max_positions)[1])
                self._warn_cut([c for c in cut if c.index not in ignored], name, max_source, max_target,
                               ignore_invalid_inputs)
        return super().filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)

    def _warn_cut(self, cut, name, max_source, max_target, skip: bool) -> None:
        instead = "skipped (--skip-invalid-size-inputs-valid-test)" if skip else "refused"
        for c in cut[: self.MAX_WARNINGS]:
            too_long, done = [], []
            if c.source:
                too_long.append(f"{c.source} source tokens (with </s>), more than the {max_source} source positions")
                done.append(f"translated from its first {max_source - 1} tokens + </s>")
            if c.target:
                too_long.append(f"{c.target} target tokens (with </s>), more than the {max_target} target positions")
                done.append(f"its reference cut to its first {max_target - 1} tokens + </s>")
            logger.warning("%s: %s: %s instead of being %s", name(c.index), " and ".join(too_long),
                           "; ".join(done), instead)
        if len(cut) > self.MAX_WARNINGS:
            rest = [name(c.index) for c in cut[self.MAX_WARNINGS:]]
            logger.warning("%d more examples longer than the positions were cut the same way: %s%s",
                           len(rest), ", ".join(rest[:10]), " ..." if len(rest) > 10 else "")


@register_task("translation_ext", dataclass=TranslationExtConfig)
class TranslationExtTask(AutocastMixin, GNMTGeneratorMixin, TrainBatchingMixin, LongInputMixin, EvalBleuMixin,
                         TranslationTask):
    """fairseq ``translation`` + ``--cpu-bf16`` + ``--math-attention`` + ``--gnmt-alpha`` +
    ``--batching`` / ``--chunk-size`` / ``--updates-per-epoch`` + over-long evaluation inputs cut, not dropped
    + a dev BLEU of 0 for empty hypotheses (base of the plugin's tasks)."""

    cfg: TranslationExtConfig

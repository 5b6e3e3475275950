"""``concat_translation``: ``transfer_translation`` plus the data augmentation by concatenation of Nguyen
(2021) ch. 4 (:mod:`fairseq_ext.data.concat_dataset` for the data side)::

    --concat {none,consec,rand}     D_orig ∪ D_new with CONSEC / RAND pairs      (§4.2.1)
    --position-shift {none,sim,uniform} --shift-prob P --shift-max 100             (§4.3, Table 4.4)
    --concat-attn-mask              a segment attends only to itself           [Table 4.5 "mask"]
    --concat-sep-batch              batches never mix D_orig and D_new          [Table 4.5 "sep-batch"]
    --concat-reset-pos              positions restart at 0 in every segment     [Table 4.5 "reset-pos"]
    --concat-resample               redraw RAND pairs and shifts every epoch (default: drawn once)
    --concat-eval {none,consec,rand}  valid/test replaced by their concatenations (Table 4.3)

Batching of every ch. 4 system (§4.2.2, Table 4.1) is inherited from ``translation_ext``
(``--batching chunked``, ``--updates-per-epoch``). Choices where the thesis is silent are documented on the
options. Positions and segment masks are hooks on the model (:mod:`fairseq_ext.modules.concat_hooks`),
installed only when a flag needs them; segment-aware decoding is :mod:`fairseq_ext.generators.segment_aware`.

References: T. Q. Nguyen, K. Murray, D. Chiang, "Data Augmentation by Concatenation for Low-Resource
Translation: A Mystery and a Solution", IWSLT 2021; Nguyen's thesis (see :mod:`fairseq_ext.models.twt`).
"""
import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq.dataclass import ChoiceEnum
from fairseq.sequence_generator import SequenceGenerator
from fairseq.tasks import register_task

from fairseq_ext.data.concat_dataset import (
    CONCAT_MODES, SHIFT_MODES, ConcatPairDataset, build_pairs, sim_shifts, uniform_shifts)
from fairseq_ext.generators.length_penalty import GNMTLengthPenaltySequenceGenerator
from fairseq_ext.generators.segment_aware import segment_aware
from fairseq_ext.modules.concat_hooks import ConcatRuntime, install_concat_hooks
from fairseq_ext.tasks.transfer_translation import TransferTranslationConfig, TransferTranslationTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

DEFAULT_SHIFT_PROB = {"sim": 1.0 / 3.0, "uniform": 0.1}


@dataclass
class ConcatTranslationConfig(TransferTranslationConfig):
    concat: ChoiceEnum(list(CONCAT_MODES)) = field(
        default="none", metadata={"help": "add D_new to the training data: consecutive pairs (consec) "
                                          "or pairs of a random permutation (rand)"})
    concat_seed: int = field(default=1, metadata={"help": "seed of RAND pairs, shifts and --concat-eval rand"})
    concat_resample: bool = field(
        default=False, metadata={"help": "redraw the RAND pairs / position shifts at every epoch "
                                         "(default: drawn once)"})
    concat_sep_batch: bool = field(
        default=False, metadata={"help": "sep-batch ablation: build D_new from length-sorted neighbours "
                                         "and never mix D_orig and D_new in a batch"})
    concat_attn_mask: bool = field(
        default=False, metadata={"help": "mask ablation: each segment attends only to itself (and target "
                                         "segment k to source segment k)"})
    concat_reset_pos: bool = field(
        default=False, metadata={"help": "reset-pos ablation: positions restart at 0 in every segment"})
    position_shift: ChoiceEnum(list(SHIFT_MODES)) = field(
        default="none", metadata={"help": "shift whole training examples' positions: sim (by the lengths "
                                          "of a random pair) or uniform (by U{0..--shift-max})"})
    shift_prob: Optional[float] = field(
        default=None, metadata={"help": "probability of shifting an example (default 1/3 for sim, "
                                        "0.1 for uniform)"})
    shift_max: int = field(default=100, metadata={"help": "largest uniform shift (inclusive)"})
    concat_eval: ChoiceEnum(list(CONCAT_MODES)) = field(
        default="none", metadata={"help": "replace valid/test sets by their consec / rand concatenations "
                                          "(and decode segment-aware)"})
    segment_aware_decoding: bool = field(
        default=False, metadata={"help": "finish a hypothesis at the k-th </s>, k = number of </s> in its "
                                         "source (on by default with --concat-eval)"})


@register_task("concat_translation", dataclass=ConcatTranslationConfig)
class ConcatTranslationTask(TransferTranslationTask):
    """Data augmentation by concatenation (Nguyen 2021 ch. 4); see the module doc for the flags."""

    cfg: ConcatTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if cfg.shift_max < 0:
            raise UserDataError(f"--shift-max must be >= 0, got {cfg.shift_max}")
        if cfg.shift_prob is not None and not 0.0 <= cfg.shift_prob <= 1.0:
            raise UserDataError(f"--shift-prob must be in [0, 1], got {cfg.shift_prob}")
        if cfg.concat_sep_batch and cfg.concat == "none":
            raise UserDataError("--concat-sep-batch needs --concat consec or rand")
        if cfg.concat_resample and cfg.updates_per_epoch > 0:
            raise UserDataError("--concat-resample redraws the data at every epoch, which would change examples "
                             "inside a pass of --updates-per-epoch; use one of the two")
        if src_dict.eos() != tgt_dict.eos() or src_dict.pad() != tgt_dict.pad():
            raise UserDataError("concat_translation needs the same </s> and <pad> ids in both dictionaries")
        self.runtime = ConcatRuntime(src_dict.pad(), src_dict.eos(), cfg.concat_reset_pos, cfg.concat_attn_mask)

    # -- data
    def _shift_prob(self) -> float:
        p = self.cfg.shift_prob
        return DEFAULT_SHIFT_PROB[self.cfg.position_shift] if p is None else p

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        base = self.datasets[split]
        cfg = self.cfg
        seed = cfg.concat_seed
        src_sizes, tgt_sizes = np.asarray(base.src_sizes), base.tgt_sizes
        if split == cfg.train_subset:
            if cfg.concat == "none" and cfg.position_shift == "none":
                return
            mode, sort = cfg.concat, cfg.concat_sep_batch

            def pairs_fn(ep):
                return build_pairs(mode, src_sizes, tgt_sizes, np.random.default_rng([seed, ep, 1]), sort)

            if cfg.position_shift != "none" and tgt_sizes is None:
                raise UserDataError("--position-shift needs target data")
            prob, kind, smax = self._shift_prob() if cfg.position_shift != "none" else 0.0, \
                cfg.position_shift, cfg.shift_max

            def shifts_fn(ep, n):
                rng = np.random.default_rng([seed, ep, 2])
                if kind == "sim":
                    return sim_shifts(n, src_sizes, np.asarray(tgt_sizes), prob, rng)
                return uniform_shifts(n, prob, smax, rng)

            ds = ConcatPairDataset(base, pairs_fn, keep_original=True,
                                   shifts_fn=shifts_fn if kind != "none" else None,
                                   sep_batch=cfg.concat_sep_batch, resample=cfg.concat_resample)
            logger.info("concat_translation %s: %d original + %d %s concatenations%s", split, ds.n_orig,
                        len(ds.pairs), mode, f", {kind}-shift p={prob:.3g}" if kind != "none" else "")
        elif cfg.concat_eval != "none":
            mode = cfg.concat_eval
            ds = ConcatPairDataset(
                base, lambda ep: build_pairs(mode, src_sizes, tgt_sizes, np.random.default_rng([seed, 0, 3])),
                keep_original=False)
            if len(ds) == 0:
                raise UserDataError(f"--concat-eval {mode}: split {split} has fewer than 2 sentences")
            logger.info("concat_translation %s: replaced by its %d %s concatenations", split, len(ds), mode)
        else:
            return
        self.datasets[split] = ds

    # -- model
    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        c = self.cfg
        if c.concat_reset_pos or c.concat_attn_mask or c.position_shift != "none":
            install_concat_hooks(model, self.runtime)
        return model

    def _segment_aware(self) -> bool:
        return self.cfg.concat_eval != "none" or self.cfg.segment_aware_decoding

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        if self._segment_aware() and seq_gen_cls is None and not getattr(args, "sampling", False):
            if self.cfg.concat_attn_mask:
                raise UserDataError("segment-aware decoding of concatenated inputs with --concat-attn-mask is not "
                                 "supported (the masks are applied in teacher-forced passes only); decode "
                                 "single sentences, or drop --concat-eval/--segment-aware-decoding")
            alpha = getattr(self.cfg, "gnmt_alpha", 0.0)
            if alpha and alpha > 0:
                seq_gen_cls = segment_aware(GNMTLengthPenaltySequenceGenerator)
                extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {}, gnmt_alpha=alpha)
            else:
                seq_gen_cls = segment_aware(SequenceGenerator)
        return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                       extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)

    # -- steps: expose the batch's position shifts to the hooks
    def train_step(self, sample, *args, **kwargs):
        self.runtime.shifts = sample.get("concat_shift") if isinstance(sample, dict) else None
        try:
            return super().train_step(sample, *args, **kwargs)
        finally:
            self.runtime.shifts = None

    def valid_step(self, sample, *args, **kwargs):
        self.runtime.shifts = sample.get("concat_shift") if isinstance(sample, dict) else None
        try:
            return super().valid_step(sample, *args, **kwargs)
        finally:
            self.runtime.shifts = None

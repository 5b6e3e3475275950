"""``translation_fertility``: the task of the fertility NAT (Gu 2018 ch. 8, model ``nat_fertility``).

``translation_ext`` (so ``--cpu-bf16``/``--math-attention`` apply) plus:

* data: the usual binarized pairs (normally the distilled corpus of :mod:`fairseq_ext.tools.corpora.distill`) and,
  when present, the fertilities ``{split}.{src}-{tgt}.{--fertility-name}`` of
  :mod:`fairseq_ext.tools.corpora.fertility`; they are checked (Σf = target length) and batched with the source as
  ``sample["fertility"]``.  Targets lose their ⟨eos⟩ (the NAT's T counts words only);
* ``--teacher-path CKPT``: the frozen autoregressive teacher, loaded once on first use, shared by the
  fine-tuning criterion (Eq. 8.10–8.11) and noisy/exact parallel decoding (Eqs. 8.7, 8.8); it is held
  outside every ``nn.Module`` so that it is neither trained nor saved;
* generation (``fairseq-generate --task translation_fertility``), for ``nat_fertility`` checkpoints:
  ``--fertility-decoding argmax|average`` (Eqs. 8.5/8.6), ``--npd-samples s`` (Eq. 8.7: s fertility
  sequences sampled from p_F, decoded in parallel and rescored by the teacher's mean token log-probability),
  ``--fertility-decoding epd --epd-topk K`` (Eq. 8.8: the K most probable fertility sequences instead of
  samples, rescored the same way), ``--rescore-batch N`` (the teacher's vocabulary softmax on N candidates
  at a time: bounded memory, same scores),
  ``--oracle-length`` (uniform/positional models decode with the reference length; copy-fertility models
  with the reference fertilities), ``--max-len-ratio`` (Σf ≤ ratio·T').  Other models fall back to
  ``translation_ext``'s beam search, so the teacher itself can be decoded with this task.
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq import utils
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from fairseq_ext.data.fertility import FertilityLanguagePairDataset, check_fertility
from fairseq_ext.generators.rescoring import RescoreBatchConfig
from fairseq_ext.modules.generation_options import NoisyParallelConfig
from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

FERTILITY_DECODING_CHOICES = ChoiceEnum(["argmax", "average", "epd"])


@dataclass
class TranslationFertilityConfig(TranslationExtConfig, NoisyParallelConfig, RescoreBatchConfig):
    fertility_name: str = field(
        default="fert",
        metadata={"help": "fertilities are read from {split}.{src}-{tgt}.NAME (default fert)"},
    )
    teacher_path: Optional[str] = field(
        default=None,
        metadata={"help": "autoregressive teacher checkpoint (fine-tuning criterion, noisy parallel decoding)"},
    )
    fertility_decoding: FERTILITY_DECODING_CHOICES = field(
        default="argmax",
        metadata={"help": "NAT decoding: argmax (Eq. 8.5) or average (Eq. 8.6) fertility, or exact parallel "
                          "decoding (Eq. 8.8: the --epd-topk most probable fertility sequences, rescored by the "
                          "teacher, --teacher-path)"},
    )
    epd_topk: int = field(
        default=10, metadata={"help": "exact parallel decoding: the number K of fertility sequences"},
    )
    npd_temperature: float = field(
        default=1.0, metadata={"help": "temperature of p_F when sampling NPD fertilities"},
    )
    npd_score_eos: bool = field(
        default=False, metadata={"help": "NPD/EPD: the teacher also scores the final <eos>"},
    )
    npd_no_length_norm: bool = field(
        default=False, metadata={"help": "NPD/EPD: rank by the teacher's total instead of mean log-probability"},
    )
    oracle_length: bool = field(
        default=False,
        metadata={"help": "decode with the reference length (uniform/positional) or the reference "
                          "fertilities (copy-fertility); for the Table 8.3 ablations"},
    )
    max_len_ratio: float = field(
        default=2.0, metadata={"help": "cap the output length at ratio x source length (Σf ≤ 2T' in [C])"},
    )


@register_task("translation_fertility", dataclass=TranslationFertilityConfig)
class TranslationFertilityTask(TranslationExtTask):
    """Translation with fertility supervision for ``nat_fertility`` (see the module docstring)."""

    cfg: TranslationFertilityConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self._teacher = None

    # -- data -----------------------------------------------------------------------------------
    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        base = self.datasets[split]
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        fert = None
        for a, b in ((src, tgt), (tgt, src)):
            prefix = os.path.join(data_path, f"{split}.{a}-{b}.{self.cfg.fertility_name}")
            fert = data_utils.load_indexed_dataset(prefix, None, self.cfg.dataset_impl)
            if fert is not None:
                break
        if fert is not None:
            if not hasattr(base, "src_sizes"):
                raise UserDataError(f"{split}: fertilities need a plain language-pair dataset (no --combine shards)")
            check_fertility(fert, base.src_sizes, base.tgt_sizes, where=f"{prefix}")
            logger.info(f"{split}: {len(fert)} fertility sequences from {prefix}")
        else:
            logger.info(f"{split}: no fertilities ({self.cfg.fertility_name}); decoding only")
        self.datasets[split] = FertilityLanguagePairDataset.wrap(base, fert)

    # -- teacher --------------------------------------------------------------------------------
    def teacher(self, device=None):
        """The frozen AR teacher of ``--teacher-path`` (eval mode, no gradients), on ``device``. It is never a
        registered module: no optimizer sees it."""
        if self._teacher is None:
            if not self.cfg.teacher_path:
                raise UserDataError("this needs an autoregressive teacher: --teacher-path CKPT")
            from fairseq_ext.modules.checkpoint import load_ensemble

            models, _, _ = load_ensemble([self.cfg.teacher_path], arg_overrides={"data": self.cfg.data}, frozen=True)
            teacher = models[0]
            if len(teacher.decoder.dictionary) != len(self.tgt_dict):
                raise UserDataError(f"teacher vocabulary ({len(teacher.decoder.dictionary)}) differs from the "
                                 f"task's ({len(self.tgt_dict)})")
            self._teacher = [teacher]  # a list: never an attribute that a Module would register
            logger.info(f"loaded the AR teacher {self.cfg.teacher_path}")
        teacher = self._teacher[0]
        if device is not None and next(teacher.parameters()).device != device:
            teacher.to(device)
        return teacher

    # -- generation -----------------------------------------------------------------------------
    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        from fairseq_ext.models.nat_fertility import NATFertilityModel

        if not any(isinstance(m, NATFertilityModel) for m in models):
            return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                           extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
        from fairseq_ext.generators.nat_fertility import NATFertilityGenerator

        cfg = self.cfg
        teacher = None
        if cfg.npd_samples > 0 or cfg.fertility_decoding == "epd":
            import torch

            device = next(models[0].parameters()).device if isinstance(models[0], torch.nn.Module) else None
            teacher = self.teacher(device)
        return NATFertilityGenerator(
            self.target_dictionary, fertility_decoding=cfg.fertility_decoding, npd_samples=cfg.npd_samples,
            teacher=teacher, npd_temperature=cfg.npd_temperature, npd_score_eos=cfg.npd_score_eos,
            npd_length_normalize=not cfg.npd_no_length_norm, oracle_length=cfg.oracle_length,
            max_len_ratio=cfg.max_len_ratio, epd_topk=cfg.epd_topk, rescore_batch=cfg.rescore_batch)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        from fairseq.data import LanguagePairDataset

        return FertilityLanguagePairDataset.wrap(
            LanguagePairDataset(src_tokens, src_lengths, self.source_dictionary, tgt_dict=self.target_dictionary,
                                constraints=constraints))

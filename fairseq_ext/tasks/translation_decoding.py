"""``translation_decoding``: ``translation_ext`` whose generator is chosen by ``--decoding-algorithm``, and
which answers bad interactive input with one clear message.

Decoding (Gu 2019 §2.3; :mod:`fairseq_ext.generators.decoding`):

* ``--decoding-algorithm beam`` (default): fairseq's beam search, unchanged (``--beam``, ``--lenpen``,
  ``--gnmt-alpha``, sampling, ...);
* ``greedy``: Eq. 2.10 (equals ``--beam 1``);
* ``shrinking_beam``: the thesis's beam of ``--beam`` K hypotheses that shrinks K → K−1 per finished one,
  final choice by Eq. 2.13 with α = ``--lenpen``;
* ``npd``: noisy parallel decoding (Eq. 2.14), ``--npd-samples`` N (≥ 1) noisy greedy decodes with noise
  N(0, ``--npd-sigma0``²/t²), rescored noise-free by the model (α = ``--lenpen``) in chunks of
  ``--rescore-batch`` candidates (the option of ``translation_fertility``; ``--npd-rescore-batch`` is its
  earlier spelling here, still accepted).

Every mode honours ``--max-len-a/-b``, ``--max-len``, ``--min-len``, ``--nbest`` and ``--unnormalized``.

Input checks (``fairseq-interactive``; each problem gets one warning naming the input line, the line is
still answered):

* a token outside the source vocabulary: the warning lists the tokens; they are translated as ⟨unk⟩;
* a line longer than the source limit (the smallest of ``--max-source-positions`` and the models'):
  translated from its first limit − 1 tokens (+ ⟨eos⟩) instead of failing the whole session;
* an empty line (and, in ``fairseq-generate``, an empty source): its translation is empty (⟨eos⟩ only,
  score 0), the model is not run on it.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, List

import torch
from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from fairseq_ext.modules.generation_options import NoisyParallelConfig, generation_option
from fairseq_ext.generators.decoding import (
    DECODING_ALGORITHMS,
    GreedyGenerator,
    NoisyParallelGenerator,
    ShrinkingBeamGenerator,
    decoding_options,
)
from fairseq_ext.data.samples import subset_sample
from fairseq_ext.generators.rescoring import RescoreBatchConfig
from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)


@dataclass
class TranslationDecodingConfig(TranslationExtConfig, NoisyParallelConfig, RescoreBatchConfig):
    decoding_algorithm: ChoiceEnum(DECODING_ALGORITHMS) = field(
        default="beam",
        metadata={"help": "beam: fairseq's beam search; greedy: Eq. 2.10; shrinking_beam: the beam shrinks by one "
                          "per finished hypothesis, re-ranked by Eq. 2.13 (alpha = --lenpen); npd: noisy "
                          "parallel decoding (Eq. 2.14)"},
    )
    npd_sigma0: float = field(
        default=0.5, metadata={"help": "npd: noise std at step 1; step t gets N(0, sigma0^2/t^2) (0: greedy)"})


@register_task("translation_decoding", dataclass=TranslationDecodingConfig)
class TranslationDecodingTask(TranslationExtTask):
    """``translation_ext`` + ``--decoding-algorithm`` + interactive input checks (module doc)."""

    cfg: TranslationDecodingConfig

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        # the earlier spelling: a second string of the same option (one dest, one default)
        action = parser._option_string_actions["--rescore-batch"]
        action.option_strings.append("--npd-rescore-batch")
        parser._option_string_actions["--npd-rescore-batch"] = action

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.source_limit = cfg.max_source_positions
        self.interactive_lines = 0

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        limits = utils.resolve_max_positions(self.max_positions(), *[m.max_positions() for m in models])
        self.source_limit = limits[0] if isinstance(limits, tuple) else limits
        algorithm = getattr(self.cfg, "decoding_algorithm", "beam")
        if algorithm == "beam" or generation_option(args, "score_reference"):
            return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                           extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
        if generation_option(args, "sampling"):
            raise UserDataError(f"--sampling is fairseq's beam search; it cannot be combined with "
                             f"--decoding-algorithm {algorithm}")
        common = decoding_options(args)
        if algorithm == "greedy":
            return GreedyGenerator(models, self.target_dictionary, **common)
        if algorithm == "shrinking_beam":
            return ShrinkingBeamGenerator(models, self.target_dictionary, beam_size=generation_option(args, "beam"),
                                          **common)
        return NoisyParallelGenerator(models, self.target_dictionary, samples=self.cfg.npd_samples,
                                      sigma0=self.cfg.npd_sigma0, rescore_batch=self.cfg.rescore_batch,
                                      **common)

    def next_input_line(self) -> str:
        """The name of the next interactive input line in warnings: its 1-based line and fairseq's S-/H- id."""
        self.interactive_lines += 1
        return f"{self.interactive_lines} (id {self.interactive_lines - 1})"

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq's encoding of interactive lines, with one warning per problem (module doc)."""
        d = self.source_dictionary
        tokens = []
        for line in lines:
            n = self.next_input_line()
            words = encode_fn(line).split()
            ids = d.encode_line(" ".join(words), add_if_not_exist=False, append_eos=True).long()
            if not words:
                logger.warning("input line %s is empty: its translation is empty", n)
            unknown = [w for w, i in zip(words, ids.tolist()) if i == d.unk() and w != d.unk_word]
            if unknown:
                shown = " ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else "")
                logger.warning("input line %s: %d token(s) outside the source vocabulary, translated as %s: %s",
                               n, len(unknown), d.unk_word, shown)
            limit = self.source_limit
            if limit is not None and ids.numel() > limit:
                logger.warning("input line %s has %d tokens (with </s>), more than the model's source limit of %d "
                               "(--max-source-positions): only its first %d tokens are translated",
                               n, ids.numel(), limit, limit - 1)
                ids = torch.cat([ids[: limit - 1], ids.new_tensor([d.eos()])])
            tokens.append(ids)
        return tokens, [t.numel() for t in tokens]

    def subset_for_inference(self, sample, keep: torch.Tensor):
        """The batch rows ``keep`` of ``sample`` (the non-empty sources; a hook for tasks whose samples
        hold more than per-row tensors)."""
        return subset_sample(sample, keep, sample["net_input"]["src_lengths"].size(0))

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's, except that empty sources (⟨eos⟩ only) get an empty translation without a model run."""
        src_lengths = sample["net_input"]["src_lengths"]
        empty = src_lengths.le(1)
        if not bool(empty.any()):
            return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                          constraints=constraints)
        B = src_lengths.size(0)
        if "id" in sample:  # fairseq-generate (interactive lines were reported when read)
            logger.warning("empty source sentence(s) %s: empty translation", sample["id"][empty].tolist())
        keep = (~empty).nonzero().squeeze(1)
        results: List[List[Dict]] = [None] * B
        if keep.numel() > 0:
            sub = self.subset_for_inference(sample, keep)
            hyps = super().inference_step(
                generator, models, sub,
                prefix_tokens=None if prefix_tokens is None else prefix_tokens.index_select(0, keep),
                constraints=None if constraints is None else constraints.index_select(0, keep))
            for i, h in zip(keep.tolist(), hyps):
                results[i] = h
        eos = self.target_dictionary.eos()
        device = src_lengths.device
        for i in empty.nonzero().squeeze(1).tolist():
            results[i] = [{"tokens": torch.tensor([eos], device=device), "score": torch.tensor(0.0),
                           "positional_scores": torch.zeros(1, device=device), "attention": None,
                           "alignment": None}]
        return results

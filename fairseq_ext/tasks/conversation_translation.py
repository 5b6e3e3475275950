"""``conversation_translation``: bilingual multi-speaker conversation translation (Maruf 2019 ch. 5,
Bi-MSMT; data contract: :mod:`fairseq_ext.data.conversations`).

``translation_ext`` whose data is one pair ``src``/``tgt`` of mixed directions with one joint dictionary,
plus the line-aligned conversation file ``{split}.conv`` (next to the data, or in ``--conv-dir``)::

    --conv-langs en,es                 the two language tags ("English" En->F, "Foreign" F->En)
    --conv-context all                 the history of a sentence, or the evaluation switches of
                                       Tables 5.4-5.5
    --conv-target-history {none,gold,generated}   the translations of the history in training (§5.3;
                                       generated: a base model's output from --conv-generated-dir)
    --conv-allow-monolingual           accept conversations with one language only

Each sentence is translated in its own direction; batches hold whole conversations. Decoding with a
``bimsmt*`` model uses the ``conversation_online`` generator (own translations as target history). A
sentence model trains and decodes on this task too (the conversation keys are removed for models that do
not opt in), the one-model-for-both-directions baseline.
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from fairseq_ext.data.conversations import (
    GOLD,
    HISTORY_CONTEXTS,
    HISTORY_NET_INPUT_KEYS,
    TARGET_HISTORY,
    ConversationDataError,
    ConversationIndex,
    ConversationPairDataset,
    conversation_batches,
    find_conv_file,
    parse_langs,
)
from fairseq_ext.data.context_keys import opts_in, strip_keys
from fairseq_ext.data.documents import read_generated_context
from fairseq_ext.data.group_iterator import group_batch_iterator
from fairseq_ext.modules.generation_options import generation_option
from fairseq_ext.generators.conversation_online import ConversationOnlineGenerator
from fairseq_ext.generators.decoding import decoding_options
from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

SAMPLE_KEYS = ("conv_index", "conv_pos", "hist_id")


def uses_history(obj) -> bool:
    """Whether a model (possibly wrapped) or a generator opts in to the conversation keys."""
    return opts_in(obj, "uses_conversation_history")


def strip_history(sample):
    """A shallow copy of ``sample`` without the conversation keys (for sentence models)."""
    return strip_keys(sample, HISTORY_NET_INPUT_KEYS, SAMPLE_KEYS)


def without_target_history(sample):
    """The sample without the target side of the history (never given to the generator)."""
    return strip_keys(sample, ("hist_tgt_tokens", "hist_tgt_lengths"), ())


@dataclass
class ConversationTranslationConfig(TranslationExtConfig):
    conv_langs: str = field(default="en,es", metadata={"help": "the two language tags of the .conv files: the "
                                                                "first is 'English' (En->F), the second 'Foreign'"})
    conv_dir: Optional[str] = field(default=None, metadata={"help": "folder of {split}.conv when not next to the "
                                                                     "binarized data"})
    conv_context: ChoiceEnum(HISTORY_CONTEXTS) = field(
        default="all", metadata={"help": "the history of a sentence: all earlier sentences, or an evaluation "
                                         "restriction (prev_sent, current_turn, same/other_lang_prev_turns)"})
    conv_target_history: ChoiceEnum(TARGET_HISTORY) = field(
        default="gold", metadata={"help": "translations of the history in training/validation: gold (the "
                                          "references; 'reference' is its earlier spelling), generated "
                                          "(--conv-generated-dir DIR/{split}.tgt) or none"})
    conv_generated_dir: Optional[str] = field(default=None, metadata={"help": "folder of {split}.tgt: a base "
                                                                               "model's translations"})
    conv_allow_monolingual: bool = field(default=False, metadata={"help": "accept one-language conversations"})


@register_task("conversation_translation", dataclass=ConversationTranslationConfig)
class ConversationTranslationTask(TranslationExtTask):
    """Bilingual multi-speaker conversation translation (module doc)."""

    cfg: ConversationTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.langs = parse_langs(cfg.conv_langs)
        self.direction_names = (f"{self.langs[0]}-{self.langs[1]}", f"{self.langs[1]}-{self.langs[0]}")
        if cfg.conv_target_history == "generated" and not cfg.conv_generated_dir:
            raise UserDataError("--conv-target-history generated needs --conv-generated-dir DIR (with {split}.tgt)")

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        base = self.datasets[split]
        cfg = self.cfg
        paths = utils.split_paths(cfg.data)
        data_path = paths[(epoch - 1) % len(paths)] if split == cfg.train_subset else paths[0]
        path = find_conv_file(split, data_path, cfg.conv_dir)
        index = ConversationIndex.from_file(path, self.langs, cfg.conv_allow_monolingual)
        if len(index) != len(base):
            raise ConversationDataError(f"{path} has {len(index)} lines, but the binarized split {split} has "
                                        f"{len(base)} examples: the conversation file must be line-aligned")
        index.check_sources(base.src.sizes, f"{data_path}/{split}")
        target = None
        if cfg.conv_target_history in GOLD and base.tgt is not None:
            target = "gold"
        elif cfg.conv_target_history == "generated":
            target = read_generated_context(os.path.join(cfg.conv_generated_dir, f"{split}.{cfg.target_lang}"),
                                            self.tgt_dict, len(base), f"{data_path}/{split}",
                                            option="--conv-target-history")
        self.datasets[split] = ConversationPairDataset(base, index, cfg.conv_context, target,
                                                       cfg.max_source_positions)
        st = index.stats()
        logger.info("conversation_translation %s: %d conversations, %d sentences (%s %d, %s %d), %.2f turns per "
                    "conversation (max %d), history %s, target history %s", split, st["conversations"],
                    st["sentences"], self.direction_names[0], st["first_lang_sentences"], self.direction_names[1],
                    st["sentences"] - st["first_lang_sentences"], st["mean_turns_per_conversation"],
                    st["max_turns"], cfg.conv_context, target if isinstance(target, str) or target is None
                    else "generated")

    # -- batches: whole conversations
    def get_batch_iterator(self, dataset, *args, **kwargs):
        if not isinstance(dataset, ConversationPairDataset):
            return super().get_batch_iterator(dataset, *args, **kwargs)
        a, reuse, cached = self.bind_batch_iterator(dataset, args, kwargs)
        if cached is not None:
            return cached
        train = dataset is self.datasets.get(getattr(self.cfg, "train_subset", "train"))
        _, n_updates = self._train_batching()
        epoch_iter = group_batch_iterator(self, dataset, a, train, n_updates, conversation_batches,
                                          dataset.index.n_convs, "conversation")
        if reuse:
            self.dataset_to_epoch_iter[dataset] = epoch_iter
        return epoch_iter

    # -- steps
    def train_step(self, sample, model, *args, **kwargs):
        if not uses_history(model):
            sample = strip_history(sample)
        return super().train_step(sample, model, *args, **kwargs)

    def valid_step(self, sample, model, *args, **kwargs):
        if not uses_history(model):
            sample = strip_history(sample)
        return super().valid_step(sample, model, *args, **kwargs)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        if not all(uses_history(m) for m in models) or generation_option(args, "score_reference"):
            if any(uses_history(m) for m in models):
                raise UserDataError("conversation_translation: a bimsmt model decodes with conversation_online only "
                                 "(no --score-reference, no ensembles with sentence models)")
            return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                           extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
        if generation_option(args, "nbest") > 1:
            raise UserDataError("conversation_online returns one translation per sentence (the one its history uses): "
                             "--nbest must be 1")
        return ConversationOnlineGenerator(models, self.target_dictionary,
                                           beam_size=int(generation_option(args, "beam") or 1), **decoding_options(args))

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if isinstance(generator, ConversationOnlineGenerator):
            return generator.generate(models, without_target_history(sample), prefix_tokens=prefix_tokens,
                                      constraints=constraints)
        return super().inference_step(generator, models, strip_history(sample), prefix_tokens=prefix_tokens,
                                      constraints=constraints)

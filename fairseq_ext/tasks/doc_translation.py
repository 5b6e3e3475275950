"""``doc_translation``: document-level translation (Maruf 2019 ch. 3-4; batch contract:
:mod:`fairseq_ext.data.documents`).

``translation_decoding`` whose datasets are wrapped in
:class:`~fairseq_ext.data.documents.DocumentPairDataset`, which adds the document keys to every batch::

    --doc-context-mode {offline,online}      every other sentence (default) / the earlier ones only
    --doc-context-size N                     the N nearest context sentences (0 = all, default)
    --doc-max-context 128                    hard cap K on the context sentences
    --doc-id-pattern auto                    how a line id names its document
    --doc-target-context {none,gold,generated}   add ctx_tgt_tokens (reference / stage-1 translations
                                             from --doc-generated-dir)
    --doc-ids-dir DIR                        read {split}.ids from DIR
    --doc-batching {document,size}           whole documents per batch (default) or fairseq's batches
    --doc-concat-prev N                      concatenation baseline: previous N sources + <brk> each
    --decoding-algorithm doc_bcd             block-coordinate-descent document decoding
                                             (:mod:`fairseq_ext.generators.doc_bcd`)
    --doc-online-decoding                    online decoding in document order, the model's own translations
                                             as target context (:mod:`fairseq_ext.generators.doc_online`)

The ids file ``{split}.ids`` is line-aligned with the split. A batch never exceeds ``--max-tokens`` /
``--batch-size``, in every split: a longer document is cut into chunks and each sentence keeps its
context as extra rows. ``<brk>`` is added to the dictionaries in ``setup_task``; a sentence checkpoint
without it warm-starts the concatenation model
(:func:`fairseq_ext.modules.warm_start.accept_grown_dictionary`).
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq import utils
from fairseq.data import LanguagePairDataset
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from fairseq_ext.data.binarized import split_prefixes
from fairseq_ext.modules.warm_start import accept_grown_dictionary
from fairseq_ext.data.documents import (
    BRK,
    CONTEXT_MODES,
    DOC_BATCHING,
    TARGET_CONTEXT,
    DocumentDataError,
    check_documents,
    doc_id_rule,
    DocumentIndex,
    DocumentPairDataset,
    PrevConcatDataset,
    document_batches,
    find_ids_file,
    has_context,
    log_split_stats,
    read_generated_context,
    read_ids,
    strip_context,
    subset_doc_sample,
    uses_document_context,
)
from fairseq_ext.data.group_iterator import group_batch_iterator
from fairseq_ext.modules.generation_options import generation_option
from fairseq_ext.generators.decoding import DECODING_ALGORITHMS, decoding_options
from fairseq_ext.generators.doc_bcd import BCD_INITS, BCD_UPDATES, DocBCDGenerator
from fairseq_ext.generators.doc_online import DocOnlineGenerator
from fairseq_ext.tasks.translation_decoding import TranslationDecodingConfig, TranslationDecodingTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)


@dataclass
class DocTranslationConfig(TranslationDecodingConfig):
    doc_context_mode: ChoiceEnum(CONTEXT_MODES) = field(
        default="offline",
        metadata={"help": "offline: the context of a sentence is every other sentence of its document; "
                          "online: the earlier sentences only"})
    doc_context_size: int = field(
        default=0, metadata={"help": "keep the N nearest context sentences (ties: the earlier); 0 = all"})
    doc_max_context: int = field(
        default=128, metadata={"help": "hard cap K on the context sentences of a sentence, also when "
                                       "--doc-context-size is 0 (0 = no context). Memory: every batch (training, "
                                       "validation, decoding) holds at most --max-tokens tokens (B x longest "
                                       "sentence; long documents are cut into chunks, their other sentences "
                                       "joining as context rows), and each of its sentences attends to at most K "
                                       "context sentences"})
    doc_target_context: ChoiceEnum(TARGET_CONTEXT) = field(
        default="none",
        metadata={"help": "also give the target side of the context (ctx_tgt_tokens): gold = the references, "
                          "generated = --doc-generated-dir/{split}.{tgt}"})
    doc_generated_dir: Optional[str] = field(
        default=None, metadata={"help": "folder of {split}.{tgt}: the sentence model's translations, one per "
                                        "example in dataset order, in target-dictionary units"})
    doc_ids_dir: Optional[str] = field(
        default=None, metadata={"help": "read {split}.ids from this folder (it wins over the {split}.ids next to the "
                                        "binarized data)"})
    doc_id_pattern: str = field(
        default="auto",
        metadata={"help": "how a line id names its document: auto = the id without a trailing #N, :N or .N "
                          "(Ruth.1.3 -> Ruth.1, help/page#3 -> help/page, doc:7 -> doc; an id without one is the "
                          "document's name, so the name may simply repeat on every line); whole = the whole id; "
                          "or a regular expression whose first group is the document, e.g. '(.+)_[0-9]+'"})
    doc_batching: ChoiceEnum(DOC_BATCHING) = field(
        default="document",
        metadata={"help": "document: batches of whole documents (long training documents cut into chunks); "
                          "size: fairseq's length-sorted batches"})
    doc_concat_prev: int = field(
        default=0, metadata={"help": "concatenation baseline: prepend the N previous source sentences of the "
                                     "document, each followed by <brk> (0 = off)"})
    decoding_algorithm: ChoiceEnum(DECODING_ALGORITHMS + ("doc_bcd",)) = field(
        default="beam",
        metadata={"help": "as translation_decoding, plus doc_bcd: block-coordinate-descent document decoding "
                          "(Maruf 2019 §3.3): greedy pass 0, then --doc-iterations greedy passes with the target "
                          "context built from the previous pass"})
    doc_iterations: int = field(
        default=1, metadata={"help": "doc_bcd: refinement passes K (1 = the thesis's two-pass decoding; 0 = "
                                     "pass 0 only, the sentence model's greedy output)"})
    bcd_update: ChoiceEnum(BCD_UPDATES) = field(
        default="jacobi", metadata={"help": "doc_bcd: jacobi (every sentence sees the previous pass) or "
                                            "gauss_seidel (in place, in document order)"})
    bcd_init: ChoiceEnum(BCD_INITS) = field(
        default="auto", metadata={"help": "doc_bcd pass 0: base_model (the second --path model, DOC.pt:SENT.pt), "
                                          "zero_context (the document model with its memories off), auto (the "
                                          "first when two models are given)"})
    bcd_early_stop: bool = field(
        default=False, metadata={"help": "doc_bcd, jacobi: from pass 2 on, re-decode only the sentences whose own "
                                         "or context translations changed in the previous pass (the others' "
                                         "inputs are unchanged); stop when none is left"})
    doc_online_decoding: bool = field(
        default=False, metadata={"help": "decode each document in order (waves of document positions across the "
                                         "batch), the target context of a sentence being the model's own "
                                         "translations of its earlier sentences; needs --doc-context-mode online and "
                                         "--doc-target-context none; the search is --decoding-algorithm's (fairseq's "
                                         "beam by default)"})


@register_task("doc_translation", dataclass=DocTranslationConfig)
class DocTranslationTask(TranslationDecodingTask):
    """Document-level translation (module doc)."""

    cfg: DocTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        doc_id_rule(cfg.doc_id_pattern)  # a bad pattern fails before any data is read
        for name in ("doc_context_size", "doc_max_context", "doc_concat_prev"):
            if getattr(cfg, name) < 0:
                raise UserDataError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(cfg, name)}")
        if cfg.doc_target_context == "generated" and not cfg.doc_generated_dir:
            raise UserDataError("--doc-target-context generated needs --doc-generated-dir DIR (with {split}.{tgt})")
        if cfg.doc_concat_prev > 0 and cfg.doc_target_context != "none":
            raise UserDataError("--doc-concat-prev is the concatenation baseline (no context keys); it cannot be "
                             "combined with --doc-target-context")
        self.brk = None  # set by setup_task with --doc-concat-prev

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        if cfg.doc_concat_prev > 0:  # before any dataset or model sees the dictionaries
            joined = task.src_dict == task.tgt_dict
            task.brk = task.src_dict.add_symbol(BRK)
            if joined and task.tgt_dict is not task.src_dict:
                task.tgt_dict.add_symbol(BRK)
            logger.info("added %s to the %s dictionary (%d types)", BRK,
                        "source and target" if joined else "source", len(task.src_dict))
        return task

    def build_model(self, cfg, from_checkpoint=False):
        if self.cfg.doc_concat_prev > 0 and getattr(cfg, "share_all_embeddings", False) \
                and self.src_dict != self.tgt_dict:
            raise UserDataError(f"--doc-concat-prev adds {BRK} to the source dictionary; with different source and "
                             f"target dictionaries --share-all-embeddings is impossible (use a joined dictionary, "
                             f"then {BRK} is added to both, or drop --share-all-embeddings)")
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.doc_concat_prev > 0:  # a sentence checkpoint (without <brk>) can warm-start it
            accept_grown_dictionary(model, 1)
        return model

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        if self.cfg.doc_online_decoding and not generation_option(args, "score_reference"):
            return self.build_online_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, **kwargs)
        if self.cfg.decoding_algorithm != "doc_bcd" or generation_option(args, "score_reference"):
            return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                           extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
        if self.cfg.doc_iterations < 0:
            raise UserDataError(f"--doc-iterations must be >= 0, got {self.cfg.doc_iterations}")
        if generation_option(args, "beam") != 1 and generation_option(args, "nbest") > 1:
            raise UserDataError("doc_bcd is greedy (the thesis decodes greedily): --nbest must be 1")
        if self.cfg.doc_target_context == "gold":
            raise UserDataError("doc_bcd decodes the target context itself: --doc-target-context gold would hand it "
                                "the references of the context sentences outside the batch; drop it (or use "
                                "--doc-target-context generated, or --decoding-algorithm greedy for the "
                                "gold-context oracle)")
        return DocBCDGenerator(
            models, self.target_dictionary, iterations=self.cfg.doc_iterations, update=self.cfg.bcd_update,
            init=self.cfg.bcd_init, early_stop=self.cfg.bcd_early_stop, **decoding_options(args))

    def build_online_generator(self, models, args, seq_gen_cls, extra_gen_cls_kwargs, **kwargs):
        cfg = self.cfg
        if cfg.decoding_algorithm == "doc_bcd":
            raise UserDataError("--doc-online-decoding decodes each sentence once, in document order; it cannot be "
                                "combined with --decoding-algorithm doc_bcd (choose one)")
        if cfg.doc_context_mode != "online":
            raise UserDataError("--doc-online-decoding needs --doc-context-mode online (offline context would read "
                                "sentences not translated yet)")
        if cfg.doc_target_context != "none":
            raise UserDataError(f"--doc-online-decoding makes the target context from the model's own translations; "
                                f"drop --doc-target-context {cfg.doc_target_context}")
        inner = super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                        extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
        return DocOnlineGenerator(inner, models, self.target_dictionary, self.src_dict.pad(), cfg.left_pad_source)

    # -- data
    def _data_path(self, split: str, epoch: int) -> str:
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        return paths[(epoch - 1) % len(paths)]

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        base = self.datasets[split]
        cfg = self.cfg
        data_path = self._data_path(split, epoch)
        src, tgt = cfg.source_lang, cfg.target_lang
        prefixes = split_prefixes(data_path, split, src, tgt, lang=src)
        if not combine:
            prefixes = prefixes[:1]
        binarized = " + ".join(p + ".bin" for p in prefixes) or f"{data_path}/{split}.{src}-{tgt}.{src}.bin"
        ids_files = []
        for k in range(max(len(prefixes), 1)):
            name = split + (str(k) if k > 0 else "")
            ids_files.append(find_ids_file(name, data_path, cfg.doc_ids_dir, binarized))
        ids = [line for p in ids_files for line in read_ids(p)]
        index = DocumentIndex.from_ids(ids, source=" + ".join(ids_files), pattern=cfg.doc_id_pattern)
        if len(index) != len(base):
            raise DocumentDataError(f"{' + '.join(ids_files)} has {len(index)} lines, but the binarized split "
                                    f"{binarized} has {len(base)} examples: the ids file must be line-aligned "
                                    f"with the data")
        check_documents(index, cfg.doc_id_pattern)
        if cfg.doc_concat_prev > 0:
            if cfg.num_batch_buckets > 0:
                raise UserDataError("--doc-concat-prev does not support --num-batch-buckets")
            brk = self.brk if self.brk is not None else self.src_dict.index(BRK)
            if brk == self.src_dict.unk():
                raise ValueError(f"--doc-concat-prev: {BRK} is not in the source dictionary (setup_task adds it)")
            src_ds = PrevConcatDataset(base.src, index, cfg.doc_concat_prev, brk, self.src_dict.eos(),
                                       cfg.max_source_positions)
            base = LanguagePairDataset(
                src_ds, src_ds.sizes, self.src_dict, base.tgt, base.tgt_sizes, self.tgt_dict,
                left_pad_source=base.left_pad_source, left_pad_target=base.left_pad_target,
                align_dataset=base.align_dataset, eos=base.eos, shuffle=base.shuffle,
                pad_to_multiple=base.pad_to_multiple)
            ds = DocumentPairDataset(base, index, with_context=False)
            log_split_stats(split, index, cfg.doc_context_mode, cfg.doc_context_size, cfg.doc_max_context,
                            with_context=False)
            logger.info("doc_translation %s: sources = %d previous sentences + %s each, then the sentence "
                        "(mean %.1f tokens)", split, cfg.doc_concat_prev, BRK, float(np.mean(src_ds.sizes))
                        if len(src_ds) else 0.0)
        else:
            target_context = None
            if cfg.doc_target_context == "gold":
                if base.tgt is None:
                    raise DocumentDataError(f"--doc-target-context gold: split {split} ({binarized}) has no "
                                            f"target side")
                target_context = "gold"
            elif cfg.doc_target_context == "generated":
                path = os.path.join(cfg.doc_generated_dir, f"{split}.{tgt}")
                target_context = read_generated_context(path, self.tgt_dict, len(base), binarized)
            ds = DocumentPairDataset(base, index, mode=cfg.doc_context_mode, context_size=cfg.doc_context_size,
                                     max_context=cfg.doc_max_context, target_context=target_context,
                                     max_source_positions=cfg.max_source_positions)
            log_split_stats(split, index, cfg.doc_context_mode, cfg.doc_context_size, cfg.doc_max_context)
        self.datasets[split] = ds

    # -- batches
    def get_batch_iterator(self, dataset, *args, **kwargs):
        if not isinstance(dataset, DocumentPairDataset) or self.cfg.doc_batching == "size":
            return super().get_batch_iterator(dataset, *args, **kwargs)
        a, reuse, cached = self.bind_batch_iterator(dataset, args, kwargs)
        if cached is not None:
            return cached
        train = dataset is self.datasets.get(getattr(self.cfg, "train_subset", "train"))
        batching, n_updates = self._train_batching()
        if train and batching != "sorted":
            raise UserDataError("--batching chunked applies to --doc-batching size only (document batches are "
                             "whole documents)")
        epoch_iter = group_batch_iterator(self, dataset, a, train, n_updates, document_batches,
                                          dataset.index.n_docs, "document", cut_at_inference=True)
        if reuse:
            self.dataset_to_epoch_iter[dataset] = epoch_iter
        return epoch_iter

    # -- steps: context keys only for models that opt in (fairseq_ext.data.documents)
    def train_step(self, sample, model, *args, **kwargs):
        if not uses_document_context(model):
            sample = strip_context(sample)
        return super().train_step(sample, model, *args, **kwargs)

    def valid_step(self, sample, model, *args, **kwargs):
        if not uses_document_context(model):
            sample = strip_context(sample)
        return super().valid_step(sample, model, *args, **kwargs)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if not has_context(sample):
            return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                          constraints=constraints)
        opted = [uses_document_context(m) for m in models]
        if not uses_document_context(generator):
            if not any(opted):
                return super().inference_step(generator, models, strip_context(sample), prefix_tokens=prefix_tokens,
                                              constraints=constraints)
            if not all(opted):
                raise UserDataError("doc_translation: an ensemble of document models (uses_document_context) and "
                                 "sentence models needs a generator that routes the context keys itself")
        return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                      constraints=constraints)

    def subset_for_inference(self, sample, keep: torch.Tensor):
        """The non-empty rows of a document sample; the other batch rows become extra context rows, so every
        kept sentence keeps exactly its context (empty sources get an empty translation, translation_decoding)."""
        if not has_context(sample):
            return super().subset_for_inference(sample, keep)
        return subset_doc_sample(sample, keep, self.cfg.left_pad_source, self.src_dict.pad(), self.src_dict.eos())

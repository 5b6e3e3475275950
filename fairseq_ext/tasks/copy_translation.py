"""``copy_translation``: ``translation_decoding`` (every ``--decoding-algorithm``, the interactive input checks)
with CopyNet's per-sentence extended vocabulary (Gu 2019 §3.2.1, V ∪ {UNK} ∪ V_X) for the ``copynet`` model.

How a source OOV travels from the raw text to the printed hypothesis
=====================================================================
fairseq's binarized data has ⟨unk⟩ where a word is outside the dictionary, so the words themselves come
from the raw (segmented) text the data was binarized from: ``{split}.{src}`` and ``{split}.{tgt}`` in
``--copy-raw-dir`` (default: the data folder; one line per example, the whitespace tokens fairseq-preprocess
read — checked line by line against the binarized lengths). Without these files (a warning says so) the
split is read as binarized: its OOVs cannot be copied.

1. **One OOV table** per run (:class:`OOVTable`) numbers every distinct OOV string it meets; both task
   dictionaries are :class:`ExtendedDictionary` objects that print these *display ids* as the word: a
   source OOV is the source id |src dict| + i, the same word on the target side is V + n + i (n =
   ``--max-source-oovs``; ids V .. V+n−1 are the model's per-sentence copy slots).
2. **Training/generation data** (:class:`CopyPairDataset`): each source ⟨unk⟩ becomes the display id of
   its raw word (the ``copynet`` encoder reads it as ⟨unk⟩ but can copy it); a target ⟨unk⟩ whose raw word
   occurs in the source gets that word's copy slot V + k (the k-th distinct source token without a target
   id, :func:`~fairseq_ext.modules.copy_attention.source_copy_ids` — the very function the model uses), so
   the marginal likelihood can learn to copy it; other target OOVs stay ⟨unk⟩.
3. **fairseq-interactive** keeps only ``src_tokens`` of a batch, so the input words travel inside them:
   :meth:`CopyTranslationTask.get_interactive_tokens_and_lengths` encodes an OOV word as its display id.
4. **Decoding**: every generator searches the V + n outputs (``build_generator`` hands it a dictionary view
   of that size). :meth:`CopyTranslationTask.inference_step` then maps each copy slot V + k of a
   hypothesis (and of ``sample["target"]``) to the display id of the source word owning slot k, so the
   H-/D-/T- lines of fairseq-generate and fairseq-interactive print the copied word, never ⟨unk⟩ (the
   S- lines print the source OOVs too).

Interactive input checks (one warning per problem and line, the line is always answered): an empty line
(empty translation), a line over the source limit (its first limit − 1 tokens are translated), tokens
outside the source vocabulary (listed; the encoder reads them as ⟨unk⟩, CopyNet can copy them), more
distinct copyable OOVs than ``--max-source-oovs`` (the rest cannot be copied).

Baselines (``rnnsearch_*``) train and decode on the same binarized data with ``translation_decoding``.
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, Dictionary
from fairseq.tasks import register_task

from fairseq_ext.modules.copy_attention import source_copy_ids, source_to_target_map
from fairseq_ext.tasks.translation_decoding import TranslationDecodingConfig, TranslationDecodingTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)


@dataclass
class CopyTranslationConfig(TranslationDecodingConfig):
    max_source_oovs: int = field(
        default=50,
        metadata={"help": "copy slots per sentence: the k-th distinct source word outside the target vocabulary "
                          "gets the extended id V+k (k < this); further ones are <unk>"})
    copy_raw_dir: Optional[str] = field(
        default=None,
        metadata={"help": "folder of the raw (segmented) text {split}.{src} / {split}.{tgt} the data was binarized "
                          "from, for the OOV words (default: the data folder)"})


class OOVTable:
    """The distinct OOV strings of a run, numbered in order of arrival."""

    def __init__(self):
        self.words: List[str] = []
        self.index: Dict[str, int] = {}

    def add(self, word: str) -> int:
        i = self.index.get(word)
        if i is None:
            i = self.index[word] = len(self.words)
            self.words.append(word)
        return i

    def __len__(self) -> int:
        return len(self.words)


class ExtendedDictionary(Dictionary):
    """A fairseq dictionary (same symbols, same length) that also prints the OOV table's words: id
    ``display_offset + i`` is the i-th OOV; ids between the symbols and the offset (the copy slots) print as
    ``<copy:k>``."""

    @classmethod
    def wrap(cls, base: Dictionary, table: OOVTable, slots: int = 0) -> "ExtendedDictionary":
        d = cls.__new__(cls)
        d.__dict__.update(base.__dict__)
        d.table, d.slots = table, slots
        return d

    @property
    def display_offset(self) -> int:
        return len(self.symbols) + self.slots

    def __getitem__(self, idx):
        idx = int(idx)
        if idx < len(self.symbols):
            return self.symbols[idx]
        if idx < self.display_offset:
            return f"<copy:{idx - len(self.symbols)}>"
        i = idx - self.display_offset
        return self.table.words[i] if i < len(self.table) else self.unk_word

    def display_id(self, word: str) -> int:
        """The id of ``word``: its symbol, else its display id (added to the table)."""
        i = self.indices.get(word)
        return i if i is not None else self.display_offset + self.table.add(word)

    def output_view(self) -> Dictionary:
        """A plain dictionary of the V symbols + the copy slots (for the generators: the output width)."""
        d = Dictionary.__new__(Dictionary)
        d.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("table", "slots")})
        d.symbols, d.count, d.indices = list(self.symbols), list(self.count), dict(self.indices)
        for k in range(self.slots):
            d.add_symbol(f"<copy:{k}>")
        return d


def read_unk_words(path: str, dictionary: Dictionary, table: OOVTable, sizes: np.ndarray, truncated: bool
                   ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ⟨unk⟩ positions of every line of ``path`` and their words' table ids, as flat arrays + offsets
    (``positions[offsets[i]:offsets[i+1]]``). Checks the line count and lengths against the binarized
    ``sizes`` (with ⟨/s⟩); ``truncated``: longer raw lines are allowed (``--truncate-source``)."""
    positions, words, offsets = [], [], [0]
    n = 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if n > len(sizes):
                raise UserDataError(f"{path}: more lines than the binarized split ({len(sizes)}); "
                                 "--copy-raw-dir must hold the text the data was binarized from")
            tokens = line.split()
            size = int(sizes[n - 1]) - 1
            if len(tokens) != size and not (truncated and len(tokens) > size):
                raise UserDataError(f"{path}:{n}: {len(tokens)} tokens, but the binarized example has {size}; "
                                 "--copy-raw-dir must hold the text the data was binarized from")
            for p, w in enumerate(tokens[:size]):
                if w not in dictionary.indices and w != dictionary.unk_word:
                    positions.append(p)
                    words.append(table.add(w))
            offsets.append(len(positions))
    if n != len(sizes):
        raise UserDataError(f"{path}: {n} lines, but the binarized split has {len(sizes)}")
    return (np.asarray(positions, dtype=np.int64), np.asarray(words, dtype=np.int64),
            np.asarray(offsets, dtype=np.int64))


class CopyPairDataset(BaseWrapperDataset):
    """A LanguagePairDataset whose sources carry display ids for OOV words and whose targets carry copy
    slots for OOV words found in the source (module doc, step 2)."""

    def __init__(self, dataset, task: "CopyTranslationTask", src_unks=None, tgt_unks=None):
        super().__init__(dataset)
        self.task = task
        self.src_unks, self.tgt_unks = src_unks, tgt_unks

    @staticmethod
    def unks(table, index):
        positions, words, offsets = table
        a, b = offsets[index], offsets[index + 1]
        return positions[a:b], words[a:b]

    def __getitem__(self, index):
        item = dict(self.dataset[index])
        task = self.task
        if self.src_unks is not None:
            pos, words = self.unks(self.src_unks, index)
            if len(pos):
                src = item["source"].clone()
                src[torch.from_numpy(pos)] = torch.from_numpy(words) + task.src_dict.display_offset
                item["source"] = src
        if self.tgt_unks is not None and item.get("target") is not None:
            pos, words = self.unks(self.tgt_unks, index)
            if len(pos):
                slots = task.copy_slots(item["source"])
                tgt = item["target"].clone()
                for p, w in zip(pos.tolist(), words.tolist()):
                    k = slots.get(task.table.words[w])
                    if k is not None:
                        tgt[p] = k
                item["target"] = tgt
        return item


@register_task("copy_translation", dataclass=CopyTranslationConfig)
class CopyTranslationTask(TranslationDecodingTask):
    """``translation_decoding`` + CopyNet's extended vocabulary (module doc)."""

    cfg: CopyTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        if cfg.max_source_oovs < 0:
            raise UserDataError(f"--max-source-oovs must be >= 0, got {cfg.max_source_oovs}")
        self.table = OOVTable()
        src_dict = ExtendedDictionary.wrap(src_dict, self.table)
        tgt_dict = ExtendedDictionary.wrap(tgt_dict, self.table, cfg.max_source_oovs)
        super().__init__(cfg, src_dict, tgt_dict)
        self.src_to_tgt = source_to_target_map(src_dict, tgt_dict)

    # ------------------------------------------------------------------ the extended vocabulary
    def source_copy_ids(self, src_tokens: torch.Tensor) -> torch.Tensor:
        """(B, S) extended target ids of the source positions (as the model computes them)."""
        s, t = self.src_dict, self.tgt_dict
        return source_copy_ids(src_tokens, self.src_to_tgt.to(src_tokens.device), self.cfg.max_source_oovs, len(t),
                               s.pad(), s.eos(), t.pad(), t.unk())[0]

    def copy_slots(self, src_row: torch.Tensor) -> Dict[str, int]:
        """{source word: its copy slot id V + k} of one source sentence (1-D ids)."""
        ids = self.source_copy_ids(src_row.unsqueeze(0))[0]
        V = len(self.tgt_dict)
        return {self.src_dict[int(tok)]: int(i) for tok, i in zip(src_row.tolist(), ids.tolist()) if i >= V}

    def slot_display_ids(self, src_row: torch.Tensor) -> torch.Tensor:
        """(V + n + ...) → id map of one sentence: slot V + k → the display id of its source word (⟨unk⟩ for
        an unused slot), as a lookup table over the slots."""
        V, n = len(self.tgt_dict), self.cfg.max_source_oovs
        table = torch.full((n,), self.tgt_dict.unk(), dtype=torch.long)
        for word, i in self.copy_slots(src_row.cpu()).items():
            table[i - V] = self.tgt_dict.display_id(word)
        return table

    def to_display(self, tokens: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        V = len(self.tgt_dict)
        slot = tokens.ge(V) & tokens.lt(V + table.numel())
        if not bool(slot.any()):
            return tokens
        out = tokens.clone()
        out[slot] = table.to(tokens.device)[(tokens[slot] - V).long()].to(tokens.dtype)
        return out

    # ------------------------------------------------------------------ data
    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        base = self.datasets[split]
        raw = self.cfg.copy_raw_dir or self.cfg.data.split(os.pathsep)[0]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        src_path, tgt_path = os.path.join(raw, f"{split}.{src}"), os.path.join(raw, f"{split}.{tgt}")
        if not os.path.isfile(src_path):
            logger.warning("copy_translation: no raw text %s (--copy-raw-dir): the source OOVs of split %r cannot "
                           "be copied", src_path, split)
            src_unks = None
        else:
            src_unks = read_unk_words(src_path, self.src_dict, self.table, base.src_sizes,
                                      truncated=getattr(self.cfg, "truncate_source", False))
        tgt_unks = None
        if base.tgt is not None and src_unks is not None and os.path.isfile(tgt_path):
            tgt_unks = read_unk_words(tgt_path, self.tgt_dict, self.table, base.tgt_sizes, truncated=False)
        logger.info("copy_translation: %s: %d source / %d target OOV tokens from %s", split,
                    0 if src_unks is None else len(src_unks[0]), 0 if tgt_unks is None else len(tgt_unks[0]), raw)
        self.datasets[split] = CopyPairDataset(base, self, src_unks, tgt_unks)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        """The parent's generator, built over the V + n outputs of the model (the output view)."""
        n = self.cfg.max_source_oovs
        for m in models:
            width = getattr(getattr(m, "decoder", None), "output_size", None)
            if width is not None and width != len(self.tgt_dict) + n:
                raise UserDataError(f"the model outputs {width} ids, the task expects {len(self.tgt_dict)} + "
                                 f"--max-source-oovs {n}")
        extended = self.tgt_dict
        self.tgt_dict = extended.output_view()
        try:
            return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                           extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
        finally:
            self.tgt_dict = extended

    # ------------------------------------------------------------------ interactive input
    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """The source ids of interactive lines, OOV words as display ids (module doc, step 3), with one
        warning per problem."""
        d = self.src_dict
        tokens = []
        for line in lines:
            n = self.next_input_line()
            words = encode_fn(line).split()
            if not words:
                logger.warning("input line %s is empty: its translation is empty", n)
            ids = [d.display_id(w) if w != d.unk_word else d.unk() for w in words] + [d.eos()]
            limit = self.source_limit
            if limit is not None and len(ids) > limit:
                logger.warning("input line %s has %d tokens (with </s>), more than the model's source limit of %d "
                               "(--max-source-positions): only its first %d tokens are translated",
                               n, len(ids), limit, limit - 1)
                ids = ids[: limit - 1] + [d.eos()]
            row = torch.tensor(ids, dtype=torch.long)
            unknown = [d[i] for i in ids if i >= len(d)]
            if unknown:
                shown = " ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else "")
                logger.warning("input line %s: %d token(s) outside the source vocabulary (read as %s by the encoder, "
                               "copied as they are when the model copies them): %s", n, len(unknown), d.unk_word,
                               shown)
            slots = len(set(self.source_copy_ids(row.unsqueeze(0))[0].tolist()) - set(range(len(self.tgt_dict))))
            n_copyable = len({w for w, i in zip(words, ids) if i >= len(d) or int(self.src_to_tgt[i]) < 0})
            if n_copyable > slots:
                logger.warning("input line %s: %d distinct words outside the target vocabulary, more than "
                               "--max-source-oovs %d: only the first %d can be copied", n, n_copyable,
                               self.cfg.max_source_oovs, slots)
            tokens.append(row)
        return tokens, [t.numel() for t in tokens]

    # ------------------------------------------------------------------ decoding
    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """The parent's decoding over V + n, then copy slots → display ids in the hypotheses and in
        ``sample["target"]`` (module doc, step 4)."""
        hypos = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                       constraints=constraints)
        src_tokens = sample["net_input"]["src_tokens"]
        target = sample.get("target")
        targets = []
        for i, sent in enumerate(hypos):
            table = self.slot_display_ids(src_tokens[i])
            for h in sent:
                h["tokens"] = self.to_display(h["tokens"], table)
            if target is not None:
                targets.append(self.to_display(target[i], table))
        if target is not None and targets:
            sample["target"] = torch.stack(targets)
        return hypos

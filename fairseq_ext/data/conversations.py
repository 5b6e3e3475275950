"""Bilingual multi-speaker conversations for the ``conversation_translation`` task (Bi-MSMT, Maruf 2019
ch. 5): the conversation file, turns, the history a sentence may see, and the batch contract between the
task, the ``bimsmt_rnn`` model and the ``conversation_online`` generator.

* **File** ``{split}.conv``, line-aligned with the binarized data:
  ``CONVERSATION_ID <TAB> LANG <TAB> SPEAKER [<TAB> LINE_ID]``; ``LANG`` is the source language (one of
  ``--conv-langs``), so a line's direction is its language. Conversations are contiguous.
* **Turns** (:func:`segment_turns`): maximal runs of one language (speaker unused, thesis footnote 9).
* **History** (:meth:`ConversationIndex.history`): every earlier sentence of the conversation, never
  itself or a later one; its target side (§5.3) is the reference (``gold``) or a base model's output
  (``generated``) in training, the generator's own translations at test time. ``context`` selects the
  evaluation switches of Tables 5.4-5.5 (``all``, ``prev_sent``, ``current_turn``,
  ``same_lang_prev_turns``, ``other_lang_prev_turns``).
* **Batches** (:class:`ConversationPairDataset`, :func:`conversation_batches`): fairseq's
  ``LanguagePairDataset`` batch plus the *N-set* (the B batch rows then the E extra history rows):
  ``net_input`` keys ``direction``, ``hist_src_tokens``/``hist_src_lengths``, ``nset_lang``,
  ``nset_turn``, ``hist_index`` (B, K; -1 padding), ``hist_tgt_tokens``/``hist_tgt_lengths``; sample
  keys ``conv_index``, ``conv_pos``, ``hist_id``. Whole conversations are packed (grouping shared with
  the documents, :mod:`fairseq_ext.data.grouped`).
* **Bad input** is one :class:`ConversationDataError` naming the file and line.

Reference: Maruf, Martins, Haffari, "Contextual Neural Model for Translating Bilingual Multi-Speaker
Conversations", WMT 2018; Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash
University, 2019, ch. 5.
"""
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from fairseq_ext.data.documents import TARGET_CONTEXT
from fairseq_ext.data.errors import UserDataError
from fairseq_ext.data.grouped import (GroupedPairDataset, GroupIndex, collate_sources, collate_targets,
                                      contiguous_groups, group_batches, nset_rows, read_lines)

HISTORY_CONTEXTS = ("all", "prev_sent", "current_turn", "same_lang_prev_turns", "other_lang_prev_turns")
# the target side of the history: the values of the documents' --doc-target-context, and "reference", the earlier
# spelling of "gold" (kept so that earlier commands and checkpoints load)
TARGET_HISTORY = TARGET_CONTEXT + ("reference",)
GOLD = ("gold", "reference")

HISTORY_NET_INPUT_KEYS = ("direction", "hist_src_tokens", "hist_src_lengths", "nset_lang", "nset_turn",
                          "hist_index", "hist_tgt_tokens", "hist_tgt_lengths")


class ConversationDataError(UserDataError):
    """Bad conversation data: the message names the file and line."""


def segment_turns(langs: Sequence) -> List[Tuple[int, int]]:
    """Turns of one conversation: ``[(start, end), ...]`` maximal runs of equal language (end exclusive)."""
    turns: List[Tuple[int, int]] = []
    for i, lang in enumerate(langs):
        if turns and langs[turns[-1][0]] == lang:
            turns[-1] = (turns[-1][0], i + 1)
        else:
            turns.append((i, i + 1))
    return turns


def parse_langs(spec) -> Tuple[str, str]:
    """``"en,es"`` -> ("en", "es"): the "English" tag (En->F) and the "Foreign" one (F->En)."""
    langs = tuple(x.strip() for x in (spec.split(",") if isinstance(spec, str) else spec) if x.strip())
    if len(langs) != 2 or langs[0] == langs[1]:
        raise ValueError(f"--conv-langs needs two different language tags, e.g. en,es; got {spec!r}")
    return langs


class ConversationIndex(GroupIndex):
    """Conversation, position, language and turn of every line of a split (module doc)."""

    what = "conversation"

    def __init__(self, conv_names: Sequence[str], lengths: Sequence[int], lang: Sequence[int],
                 speakers: Optional[Sequence[str]] = None, line_ids: Optional[Sequence[str]] = None,
                 source: str = "<conversations>", first_lines: Optional[Sequence[int]] = None,
                 allow_monolingual: bool = False):
        super().__init__(conv_names, lengths, source)
        self.conv_of = self.group_of
        self.lang = np.asarray(lang, dtype=np.int64)
        if len(self.lang) != len(self.conv_of):
            raise ValueError("ConversationIndex: one language per line")
        if ((self.lang < 0) | (self.lang > 1)).any():
            raise ValueError("ConversationIndex: languages are 0 or 1")
        self.speakers = list(speakers) if speakers is not None else [""] * len(self.lang)
        self.line_ids = list(line_ids) if line_ids is not None else [""] * len(self.lang)
        first_lines = list(first_lines) if first_lines is not None else [int(s) + 1 for s in self.starts]
        n = len(self.lang)
        self.turn = np.zeros(n, dtype=np.int64)  # turn number in the split
        self.turn_pos = np.zeros(n, dtype=np.int64)
        self.turn_start = np.zeros(n, dtype=np.int64)  # dataset index of the first sentence of the turn
        self.n_turns = np.zeros(len(self.lengths), dtype=np.int64)
        t = 0
        for c in range(len(self.lengths)):
            s = int(self.starts[c])
            langs = self.lang[s: s + int(self.lengths[c])]
            turns = segment_turns(langs.tolist())
            if len(turns) < 2 and not allow_monolingual:
                raise ConversationDataError(
                    f"{source}:{first_lines[c]}: conversation {self.names[c]!r} has one language only "
                    f"({len(langs)} sentences, all {int(langs[0])}); a bilingual conversation needs both "
                    f"languages (at least two turns)")
            self.n_turns[c] = len(turns)
            for a, b in turns:
                self.turn[s + a: s + b] = t
                self.turn_pos[s + a: s + b] = np.arange(b - a)
                self.turn_start[s + a: s + b] = s + a
                t += 1

    @classmethod
    def from_lines(cls, lines: Sequence[str], langs: Sequence[str], source: str = "<conv>",
                   allow_monolingual: bool = False) -> "ConversationIndex":
        """Parse the lines of a ``.conv`` file (module doc); ``langs`` = (first tag, second tag)."""
        lang, speakers, ids = [], [], []
        tags = {t: i for i, t in enumerate(langs)}

        def conversations():
            for k, raw in enumerate(lines, start=1):
                fields = raw.rstrip("\n").split("\t")
                if len(fields) < 3:
                    raise ConversationDataError(f"{source}:{k}: expected CONVERSATION<TAB>LANG<TAB>SPEAKER[<TAB>ID], "
                                                f"got {raw!r}")
                conv, tag, speaker = fields[0].strip(), fields[1].strip(), fields[2].strip()
                if not conv:
                    raise ConversationDataError(f"{source}:{k}: empty conversation id")
                if tag not in tags:
                    raise ConversationDataError(f"{source}:{k}: unknown language tag {tag!r} (expected one of "
                                                f"{', '.join(langs)}; set them with --conv-langs)")
                lang.append(tags[tag])
                speakers.append(speaker)
                ids.append(fields[3].strip() if len(fields) > 3 else "")
                yield k, conv

        def repeated(k: int, conv: str, start: int, n: int) -> ConversationDataError:
            return ConversationDataError(
                f"{source}:{k}: conversation {conv!r} started at line {start} and another conversation came in "
                f"between; the lines of a conversation must be contiguous")

        names, lengths, firsts = contiguous_groups(conversations(), repeated)
        return cls(names, lengths, lang, speakers, ids, source, firsts, allow_monolingual)

    @classmethod
    def from_file(cls, path: str, langs: Sequence[str], allow_monolingual: bool = False) -> "ConversationIndex":
        return cls.from_lines(read_lines(path, ConversationDataError), langs, path, allow_monolingual)

    def check_sources(self, sizes: Sequence[int], binarized: str = "") -> None:
        """An empty sentence (only EOS) is an empty turn: one error naming the line."""
        sizes = np.asarray(sizes)
        bad = np.nonzero(sizes <= 1)[0]
        if len(bad):
            i = int(bad[0])
            raise ConversationDataError(
                f"{self.source}:{i + 1}: empty source sentence in conversation {self.names[self.conv_of[i]]!r} "
                f"({binarized or 'the source side'}); an empty turn or sentence cannot be translated -- drop the "
                f"line from the corpus")

    @property
    def n_convs(self) -> int:
        return self.n_groups

    def history(self, i: int, context: str = "all") -> List[int]:
        """Dataset indices of what sentence ``i`` may see, in conversation order (module doc)."""
        c = int(self.conv_of[i])
        start = int(self.starts[c])
        if context == "all":
            return list(range(start, i))
        if context == "prev_sent":
            return [i - 1] if i > start else []
        ts = int(self.turn_start[i])
        if context == "current_turn":
            return list(range(ts, i))
        if context in ("same_lang_prev_turns", "other_lang_prev_turns"):
            same = context == "same_lang_prev_turns"
            return [j for j in range(start, ts) if (self.lang[j] == self.lang[i]) == same]
        raise ValueError(f"unknown history context {context!r} ({', '.join(HISTORY_CONTEXTS)})")

    def stats(self) -> dict:
        """Table 5.1 quantities of this split (turn length: mean of per-conversation ratios, §10.37)."""
        n = len(self)
        lengths = self.lengths.astype(float)
        return {"conversations": self.n_convs, "sentences": n,
                "first_lang_sentences": int((self.lang == 0).sum()),
                "mean_sentences_per_conversation": float(lengths.mean()) if n else 0.0,
                "mean_turns_per_conversation": float(self.n_turns.mean()) if n else 0.0,
                "mean_turn_length": float((lengths / np.maximum(self.n_turns, 1)).mean()) if n else 0.0,
                "max_turns": int(self.n_turns.max()) if n else 0}


def find_conv_file(split: str, data_path: str, conv_dir: Optional[str]) -> str:
    tried = [os.path.join(data_path, f"{split}.conv")]
    if conv_dir:
        tried.append(os.path.join(conv_dir, f"{split}.conv"))
    for p in tried:
        if os.path.exists(p):
            return p
    raise ConversationDataError(f"conversation_translation: no conversation file for split {split!r}: looked for "
                                f"{' and '.join(tried)} (python -m fairseq_ext.tools.corpora.conversations writes it)")


# ------------------------------------------------------------------------------------------ dataset
class ConversationPairDataset(GroupedPairDataset):
    """A :class:`~fairseq.data.LanguagePairDataset` whose batches carry the conversation keys (module doc).

    :param target_history: ``None`` (no target history), ``"gold"`` (the dataset's targets; ``"reference"``
        is the earlier spelling) or a list
        of LongTensors (generated translations, one per example, ending in EOS)."""

    def __init__(self, dataset, index: ConversationIndex, context: str = "all", target_history=None,
                 max_source_positions: Optional[int] = None):
        if len(index) != len(dataset):
            raise ConversationDataError(f"{index.source}: {len(index)} lines, but the dataset has {len(dataset)} "
                                        f"examples (the conversation file must be line-aligned with the data)")
        if context not in HISTORY_CONTEXTS:
            raise ValueError(f"unknown --conv-context {context!r} ({', '.join(HISTORY_CONTEXTS)})")
        if isinstance(target_history, str):
            if target_history not in GOLD:
                raise ValueError(f"target_history must be None, 'gold' or a list, got {target_history!r}")
            if getattr(dataset, "tgt", None) is None:
                raise ConversationDataError(f"{index.source}: target history 'gold' but the split has no "
                                            f"target side")
        elif target_history is not None and len(target_history) != len(dataset):
            raise ConversationDataError(f"target history: {len(target_history)} sentences for {len(dataset)} "
                                        f"examples")
        super().__init__(dataset, index, target_history)
        self.context = context
        self.max_source_positions = max_source_positions

    @property
    def target_history(self):
        return self.target_side

    def history(self, i: int) -> List[int]:
        return self.index.history(i, self.context)

    def add_keys(self, res: dict, ids: List[int]) -> dict:
        return add_history_keys(res, ids, self.index, self.history, self.dataset, self.max_source_positions,
                                self.target_of if self.target_side is not None else None)


def add_history_keys(res: dict, ids: List[int], index: ConversationIndex, history, ds,
                     max_source_positions: Optional[int] = None, target=None) -> dict:
    """Add the conversation keys (module doc) to fairseq's batch ``res`` of the dataset rows ``ids``;
    ``history(i)`` gives the visible dataset indices of row i, ``target(i)`` (optional) its translation."""
    extra, hist_index = nset_rows(ids, [history(i) for i in ids])
    nset = ids + extra
    net = res["net_input"]
    net["direction"] = torch.from_numpy(index.lang[ids].copy())
    net["hist_src_tokens"], net["hist_src_lengths"] = collate_sources(ds, extra, max_source_positions)
    net["nset_lang"] = torch.from_numpy(index.lang[nset].copy())
    net["nset_turn"] = torch.from_numpy(index.turn[nset].copy())
    net["hist_index"] = hist_index
    if target is not None:
        net["hist_tgt_tokens"], net["hist_tgt_lengths"] = collate_targets([target(j) for j in nset], ds.tgt_dict)
    res["conv_index"] = torch.from_numpy(index.conv_of[ids].copy())
    res["conv_pos"] = torch.from_numpy(index.pos[ids].copy())
    res["hist_id"] = torch.tensor(extra, dtype=torch.long)
    return res


conversation_batches = group_batches  # whole conversations (module doc; :func:`fairseq_ext.data.grouped.group_batches`)

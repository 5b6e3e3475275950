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
from fairseq.data import BaseWrapperDataset, data_utils

from fairseq_ext.data.documents import TARGET_CONTEXT, DocumentIndex, document_batches
from fairseq_ext.data.errors import UserDataError

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


class ConversationIndex:
    """Conversation, position, language and turn of every line of a split (module doc)."""

    def __init__(self, conv_names: Sequence[str], lengths: Sequence[int], lang: Sequence[int],
                 speakers: Optional[Sequence[str]] = None, line_ids: Optional[Sequence[str]] = None,
                 source: str = "<conversations>", first_lines: Optional[Sequence[int]] = None,
                 allow_monolingual: bool = False):
        self.docs = DocumentIndex(conv_names, lengths, source)
        self.names, self.source = list(conv_names), source
        self.lengths, self.starts = self.docs.lengths, self.docs.starts
        self.conv_of, self.pos = self.docs.doc_of, self.docs.pos
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
        names: List[str] = []
        lengths: List[int] = []
        first_line: dict = {}
        lang, speakers, ids, firsts = [], [], [], []
        tags = {t: i for i, t in enumerate(langs)}
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
            if names and names[-1] == conv:
                lengths[-1] += 1
            else:
                if conv in first_line:
                    raise ConversationDataError(
                        f"{source}:{k}: conversation {conv!r} started at line {first_line[conv]} and another "
                        f"conversation came in between; the lines of a conversation must be contiguous")
                first_line[conv] = k
                firsts.append(k)
                names.append(conv)
                lengths.append(1)
            lang.append(tags[tag])
            speakers.append(speaker)
            ids.append(fields[3].strip() if len(fields) > 3 else "")
        return cls(names, lengths, lang, speakers, ids, source, firsts, allow_monolingual)

    @classmethod
    def from_file(cls, path: str, langs: Sequence[str], allow_monolingual: bool = False) -> "ConversationIndex":
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return cls.from_lines(lines, langs, path, allow_monolingual)

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

    def __len__(self) -> int:
        return len(self.lang)

    @property
    def n_convs(self) -> int:
        return len(self.lengths)

    def sentences(self, c: int) -> range:
        s = int(self.starts[c])
        return range(s, s + int(self.lengths[c]))

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
class ConversationPairDataset(BaseWrapperDataset):
    """A :class:`~fairseq.data.LanguagePairDataset` whose batches carry the conversation keys (module doc).

    :param target_history: ``None`` (no target history), ``"gold"`` (the dataset's targets; ``"reference"``
        is the earlier spelling) or a list
        of LongTensors (generated translations, one per example, ending in EOS)."""

    def __init__(self, dataset, index: ConversationIndex, context: str = "all", target_history=None,
                 max_source_positions: Optional[int] = None):
        super().__init__(dataset)
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
        self.index, self.context = index, context
        self.target_history = target_history
        self.max_source_positions = max_source_positions

    def __getattr__(self, name):
        if name.startswith("__") or name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices)

    def history(self, i: int) -> List[int]:
        return self.index.history(i, self.context)

    def _target(self, i: int) -> torch.Tensor:
        if self.target_history in GOLD:
            return self.dataset[i]["target"]
        return self.target_history[i]

    def collater(self, samples, pad_to_length=None):
        res = self.dataset.collater(samples, pad_to_length=pad_to_length) if pad_to_length is not None \
            else self.dataset.collater(samples)
        if not res:
            return res
        ids = res["id"].tolist()
        return add_history_keys(res, ids, self.index, self.history, self.dataset, self.max_source_positions,
                                self._target if self.target_history is not None else None)


def _truncate(tokens: torch.Tensor, limit: Optional[int], eos: int) -> torch.Tensor:
    if limit is None or tokens.numel() <= limit:
        return tokens
    return torch.cat([tokens[: limit - 1], tokens.new_tensor([eos])])


def add_history_keys(res: dict, ids: List[int], index: ConversationIndex, history, ds,
                     max_source_positions: Optional[int] = None, target=None) -> dict:
    """Add the conversation keys (module doc) to fairseq's batch ``res`` of the dataset rows ``ids``;
    ``history(i)`` gives the visible dataset indices of row i, ``target(i)`` (optional) its translation."""
    B = len(ids)
    row = {i: r for r, i in enumerate(ids)}
    hists = [history(i) for i in ids]
    extra = sorted({j for h in hists for j in h if j not in row})
    for r, j in enumerate(extra):
        row[j] = B + r
    K = max((len(h) for h in hists), default=0)
    hist_index = torch.full((B, K), -1, dtype=torch.long)
    for b, h in enumerate(hists):
        if h:
            hist_index[b, : len(h)] = torch.tensor([row[j] for j in h], dtype=torch.long)
    pad, eos = ds.src_dict.pad(), ds.src_dict.eos()
    if extra:
        sources = [_truncate(ds[j]["source"], max_source_positions, eos) for j in extra]
        hist_src = data_utils.collate_tokens(sources, pad, eos, ds.left_pad_source)
        hist_len = torch.tensor([s.numel() for s in sources], dtype=torch.long)
    else:
        hist_src, hist_len = torch.full((0, 1), pad, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    nset = ids + extra
    net = res["net_input"]
    net["direction"] = torch.from_numpy(index.lang[ids].copy())
    net["hist_src_tokens"], net["hist_src_lengths"] = hist_src, hist_len
    net["nset_lang"] = torch.from_numpy(index.lang[nset].copy())
    net["nset_turn"] = torch.from_numpy(index.turn[nset].copy())
    net["hist_index"] = hist_index
    if target is not None:
        tgt_dict = ds.tgt_dict
        targets = [target(j) for j in nset]
        net["hist_tgt_tokens"] = data_utils.collate_tokens(targets, tgt_dict.pad(), tgt_dict.eos(), False)
        net["hist_tgt_lengths"] = torch.tensor([t.numel() for t in targets], dtype=torch.long)
    res["conv_index"] = torch.from_numpy(index.conv_of[ids].copy())
    res["conv_pos"] = torch.from_numpy(index.pos[ids].copy())
    res["hist_id"] = torch.tensor(extra, dtype=torch.long)
    return res


def conversation_batches(index: ConversationIndex, num_tokens, keep=None, max_tokens=None, max_sentences=None,
                         order=None, cut_long: bool = False) -> List[np.ndarray]:
    """Batches of whole conversations (:func:`fairseq_ext.data.documents.document_batches` on the
    conversation index; module doc)."""
    return document_batches(index.docs, num_tokens, keep, max_tokens=max_tokens, max_sentences=max_sentences,
                            order=order, cut_long=cut_long)

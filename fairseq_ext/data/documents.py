"""Documents for the ``doc_translation`` task (Maruf 2019 ch. 3-4): the batch contract between the task,
the document models and ``doc_bcd``. The grouping of lines, the batching, the N-set and the dataset
wrapper are shared with the conversations (:mod:`fairseq_ext.data.grouped`).

* :class:`DocumentIndex`: the document and position of every line of a split, from the line-aligned
  ``{split}.ids`` (``--doc-id-pattern``, :func:`doc_id_rule`; default: the id without a trailing ``#N``,
  ``:N`` or ``.N``). A document's lines must be contiguous; a split of (almost) only one-sentence
  documents is refused (:func:`check_documents`).
* :func:`context_window`: the context of a sentence, decided here, never by a model: ``offline`` (every
  other sentence) or ``online`` (the earlier ones), the ``size`` nearest, at most ``--doc-max-context``;
  always a contiguous window, never the sentence itself.
* :class:`DocumentPairDataset`: fairseq's ``LanguagePairDataset`` batch plus the *N-set* (the B batch
  sentences, then the E extra context sentences): ``net_input`` keys ``ctx_src_tokens``/``ctx_src_lengths``
  (E rows), ``ctx_index`` and ``ctx_distance`` (B, K; -1 / 0 padding), ``ctx_tgt_tokens``/``ctx_tgt_lengths``
  (N rows, with ``--doc-target-context gold|generated``); sample keys ``doc_index``, ``doc_pos``,
  ``ctx_id``.
* :class:`PrevConcatDataset`: the source of ``--doc-concat-prev N`` (Tiedemann & Scherrer 2017): the N
  previous sentences, each followed by ``<brk>``, then the sentence.
* :func:`document_batches`: whole documents packed to ``--max-tokens`` / ``--batch-size``; a longer
  document is cut into chunks whose other sentences come as extra rows.

Which models get the context keys: :mod:`fairseq_ext.data.context_keys`.
"""
import logging
import os
import re
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from fairseq.data import FairseqDataset

from fairseq_ext.data.context_keys import (  # noqa: F401  (the contract's keys and routing, named here too)
    CONTEXT_NET_INPUT_KEYS, CONTEXT_SAMPLE_KEYS, has_context, strip_context, subset_doc_sample, uses_document_context)
from fairseq_ext.data.errors import UserDataError
from fairseq_ext.data.grouped import (GroupedPairDataset, GroupIndex, collate_sources, collate_targets,
                                      contiguous_groups, group_batches, nset_rows, read_lines)

logger = logging.getLogger(__name__)

CONTEXT_MODES = ("offline", "online")
TARGET_CONTEXT = ("none", "gold", "generated")
DOC_BATCHING = ("document", "size")
BRK = "<brk>"


class DocumentDataError(UserDataError):
    """Bad document data (ids file, generated context file): the message names the file (and line)."""


DOC_ID_PATTERNS = ("auto", "whole")  # or a regular expression whose first group is the document
_AUTO_ID = re.compile(r"(.+)[#:.]([0-9]+)")


def doc_id_rule(pattern: str = "auto"):
    """The function ``line id -> document name`` of ``--doc-id-pattern`` (``None``: the id does not match).

    * ``auto`` (default): a trailing position ``#N``, ``:N`` or ``.N`` (N digits) is cut off, so
      ``Ruth.1.3`` -> ``Ruth.1``, ``help/page-name#3`` -> ``help/page-name``, ``chapter.html#12`` ->
      ``chapter.html``, ``talk12:7`` -> ``talk12``; an id without one is the document name itself (an ids
      file may simply repeat the document's name on every line).
    * ``whole``: the id is the document name (never cut).
    * anything else: a regular expression matched against the whole id; its group ``doc`` (or else its first
      group) is the document name, e.g. ``'(.+)_[0-9]+'`` for ``report_12``."""
    if pattern == "auto":
        def rule(line_id: str) -> Optional[str]:
            m = _AUTO_ID.fullmatch(line_id)
            return m.group(1) if m else line_id
        return rule
    if pattern == "whole":
        return lambda line_id: line_id
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise DocumentDataError(f"--doc-id-pattern {pattern!r} is not a regular expression ({e}); use auto, whole "
                                f"or a pattern with one group, e.g. '(.+)#[0-9]+'") from None
    if rx.groups < 1:
        raise DocumentDataError(f"--doc-id-pattern {pattern!r} has no group: put the document part in "
                                f"parentheses, e.g. '(.+)#[0-9]+'")
    group = "doc" if "doc" in rx.groupindex else 1

    def rule(line_id: str) -> Optional[str]:
        m = rx.fullmatch(line_id)
        return m.group(group) if m else None
    return rule


def document_of(line_id: str, pattern: str = "auto") -> str:
    """The document name of one line id under ``--doc-id-pattern`` (:func:`doc_id_rule`)."""
    doc = doc_id_rule(pattern)(line_id)
    if doc is None:
        raise DocumentDataError(f"id {line_id!r} does not match --doc-id-pattern {pattern!r}")
    return doc


# ------------------------------------------------------------------------------------ DocumentIndex
class DocumentIndex(GroupIndex):
    """Document number (``doc_of``) and position (``pos``) of each line of a split (module doc)."""

    what = "document"

    def __init__(self, names: Sequence[str], lengths: Sequence[int], source: str = "<documents>"):
        super().__init__(names, lengths, source)
        self.doc_of = self.group_of

    @classmethod
    def from_ids(cls, ids: Sequence[str], source: str = "<ids>", pattern: str = "auto") -> "DocumentIndex":
        """From line ids (line i of ``source`` = ids[i]; the document of an id by ``pattern``, see
        :func:`doc_id_rule`); non-contiguous documents are an error."""
        rule = doc_id_rule(pattern)
        current = [""]  # the id of the line read last

        def documents():
            for k, raw in enumerate(ids, start=1):
                line_id = current[0] = raw.strip()
                if not line_id:
                    raise DocumentDataError(f"{source}:{k}: empty id (every line needs an id such as doc#3 or doc.3)")
                doc = rule(line_id)
                if doc is None:
                    raise DocumentDataError(f"{source}:{k}: id {line_id!r} does not match --doc-id-pattern "
                                            f"{pattern!r}")
                yield k, doc

        def repeated(k: int, doc: str, start: int, n: int) -> DocumentDataError:
            return DocumentDataError(
                f"{source}:{k}: line id {current[0]!r} belongs to document {doc!r}, whose lines {start}-"
                f"{start + n - 1} came before another document; the lines of a document must be contiguous "
                f"(--doc-id-pattern {pattern!r} decides the document of an id)")

        names, lengths, _ = contiguous_groups(documents(), repeated)
        return cls(names, lengths, source)

    @classmethod
    def from_file(cls, path: str, pattern: str = "auto") -> "DocumentIndex":
        return cls.from_ids(read_ids(path), source=path, pattern=pattern)

    @classmethod
    def from_lengths(cls, lengths: Sequence[int], source: str = "<synthetic>") -> "DocumentIndex":
        return cls([f"doc{i}" for i in range(len(lengths))], lengths, source)

    @property
    def n_docs(self) -> int:
        return self.n_groups

    def doc_length_of(self, i: int) -> int:
        return int(self.lengths[self.doc_of[i]])


# ---------------------------------------------------------------------------------- context choice
def context_limit(size: int, cap: int) -> float:
    """How many context sentences at most: ``size`` (0 = no limit), then ``cap``."""
    if size < 0 or cap < 0:
        raise ValueError(f"--doc-context-size ({size}) and --doc-max-context ({cap}) must be >= 0")
    return min(size if size > 0 else float("inf"), cap)


def context_window(pos: int, length: int, mode: str = "offline", size: int = 0, cap: int = 128) -> Tuple[int, int]:
    """``(a, b)``: the context of the sentence at ``pos`` of a ``length``-sentence document is positions
    ``pos-a .. pos-1`` and ``pos+1 .. pos+b`` (module doc: nearest first, ties -> earlier)."""
    if mode not in CONTEXT_MODES:
        raise ValueError(f"unknown --doc-context-mode {mode!r} ({', '.join(CONTEXT_MODES)})")
    m = context_limit(size, cap)
    left = pos
    right = 0 if mode == "online" else length - 1 - pos
    if left + right <= m:
        return left, right
    m = int(m)
    if mode == "online":
        return m, 0
    a, b = (m + 1) // 2, m // 2  # -1, +1, -2, +2, ...: the odd one is the earlier
    if a > left:
        a, b = left, b + (a - left)
    elif b > right:
        a, b = a + (b - right), right
    return a, b


def context_positions(pos: int, length: int, mode: str = "offline", size: int = 0, cap: int = 128) -> List[int]:
    """Positions (in document order) of the context of the sentence at ``pos``."""
    a, b = context_window(pos, length, mode, size, cap)
    return list(range(pos - a, pos)) + list(range(pos + 1, pos + 1 + b))


def capped_count(index: DocumentIndex, mode: str, size: int, cap: int) -> int:
    """Number of sentences whose context the cap ``--doc-max-context`` made smaller."""
    avail = index.pos if mode == "online" else index.lengths[index.doc_of] - 1
    if size > 0:
        avail = np.minimum(avail, size)
    return int((avail > cap).sum())


def log_split_stats(split: str, index: DocumentIndex, mode: str, size: int, cap: int,
                    with_context: bool = True) -> None:
    lengths = index.lengths
    msg = (f"doc_translation {split}: {index.n_docs} documents, {len(index)} sentences, "
           f"document length mean {lengths.mean() if len(lengths) else 0:.1f} max {lengths.max() if len(lengths) else 0}")
    if with_context:
        msg += (f"; {mode} context, size {size or 'all'}, cap {cap}: "
                f"{capped_count(index, mode, size, cap)} sentences capped")
    logger.info(msg)


# ----------------------------------------------------------------------------------- dataset wrapper
class DocumentPairDataset(GroupedPairDataset):
    """A :class:`~fairseq.data.LanguagePairDataset` whose batches carry the document keys (module doc).

    :param target_context: ``None``, ``"gold"`` (the dataset's own targets) or a sequence of LongTensors
        (the generated translations, one per example, target dictionary units ending in EOS).
    """

    def __init__(self, dataset, index: DocumentIndex, mode: str = "offline", context_size: int = 0,
                 max_context: int = 128, target_context: Union[None, str, Sequence[torch.Tensor]] = None,
                 with_context: bool = True, max_source_positions: Optional[int] = None):
        if len(index) != len(dataset):
            raise DocumentDataError(f"{index.source}: {len(index)} lines, but the dataset has {len(dataset)} "
                                    f"examples")
        if mode not in CONTEXT_MODES:
            raise ValueError(f"unknown --doc-context-mode {mode!r} ({', '.join(CONTEXT_MODES)})")
        context_limit(context_size, max_context)
        if isinstance(target_context, str):
            if target_context != "gold":
                raise ValueError(f"target_context must be None, 'gold' or a list of tensors, got {target_context!r}")
            if getattr(dataset, "tgt", None) is None:
                raise DocumentDataError("--doc-target-context gold: this split has no target side")
        elif target_context is not None and len(target_context) != len(dataset):
            raise DocumentDataError(f"target context: {len(target_context)} sentences for {len(dataset)} examples")
        super().__init__(dataset, index, target_context)
        self.mode, self.context_size, self.max_context = mode, context_size, max_context
        self.with_context = with_context
        self.max_source_positions = max_source_positions

    @property
    def target_context(self):
        return self.target_side

    # -- context
    def context(self, i: int) -> List[int]:
        """Dataset indices of the context of example ``i``, in document order."""
        d = int(self.index.doc_of[i])
        start = int(self.index.starts[d])
        pos = i - start
        return [start + p for p in context_positions(pos, int(self.index.lengths[d]), self.mode,
                                                     self.context_size, self.max_context)]

    # -- batches
    def add_keys(self, res: dict, ids: List[int]) -> dict:
        res["doc_index"] = torch.from_numpy(self.index.doc_of[ids].copy())
        res["doc_pos"] = torch.from_numpy(self.index.pos[ids].copy())
        if not self.with_context:
            return res
        contexts = [self.context(i) for i in ids]
        extra, ctx_index = nset_rows(ids, contexts)
        ctx_distance = torch.zeros_like(ctx_index)
        pos = self.index.pos
        for b, (i, c) in enumerate(zip(ids, contexts)):
            if c:
                ctx_distance[b, : len(c)] = torch.from_numpy(pos[c] - pos[i])
        ds = self.dataset
        net = res["net_input"]
        net["ctx_src_tokens"], net["ctx_src_lengths"] = collate_sources(
            ds, extra, self.max_source_positions, getattr(ds, "pad_to_multiple", 1))
        net["ctx_index"] = ctx_index
        net["ctx_distance"] = ctx_distance
        if self.target_side is not None:
            net["ctx_tgt_tokens"], net["ctx_tgt_lengths"] = collate_targets(
                [self.target_of(j) for j in ids + extra], ds.tgt_dict)
        res["ctx_id"] = torch.tensor(extra, dtype=torch.long)
        return res


# --------------------------------------------------------------------- concatenation baseline source
class PrevConcatDataset(FairseqDataset):
    """Source of ``--doc-concat-prev N``: ``prev_1 <brk> ... prev_N <brk> sentence`` (module doc)."""

    def __init__(self, src, index: DocumentIndex, n_prev: int, brk: int, eos: int,
                 max_source_positions: Optional[int]):
        if n_prev < 1:
            raise ValueError(f"--doc-concat-prev must be >= 1 here, got {n_prev}")
        if len(index) != len(src):
            raise DocumentDataError(f"{index.source}: {len(index)} lines, but the source has {len(src)} sentences")
        self.src, self.index, self.n_prev = src, index, n_prev
        self.brk, self.eos, self.limit = brk, eos, max_source_positions
        own = np.asarray(src.sizes, dtype=np.int64)
        cum = np.concatenate([[0], np.cumsum(own)])
        n = len(own)
        first = np.maximum(index.starts[index.doc_of], np.arange(n) - n_prev)
        ctx = cum[:n] - cum[first]  # each previous sentence: its tokens, EOS replaced by <brk>
        room = ctx if self.limit is None else np.minimum(ctx, np.maximum(0, self.limit - own))
        self.first = first
        self._sizes = (own + room).astype(np.int64)

    @property
    def sizes(self):
        return self._sizes

    def __len__(self):
        return len(self.src)

    def size(self, index):
        return int(self._sizes[index])

    def num_tokens(self, index):
        return int(self._sizes[index])

    def __getitem__(self, i):
        cur = self.src[i]
        parts = []
        for j in range(int(self.first[i]), i):
            t = self.src[j]
            if t.numel() and int(t[-1]) == self.eos:
                t = t[:-1]
            parts += [t, t.new_tensor([self.brk])]
        if not parts:
            return cur
        ctx = torch.cat(parts)
        room = ctx.numel() if self.limit is None else max(0, min(ctx.numel(), self.limit - cur.numel()))
        return torch.cat([ctx[ctx.numel() - room:], cur]) if room else cur


# --------------------------------------------------------------------------------------- batching
document_batches = group_batches  # whole documents (module doc; :func:`fairseq_ext.data.grouped.group_batches`)


# ------------------------------------------------------------------------------ files of the task
def find_ids_file(split: str, data_path: str, ids_dir: Optional[str], binarized: str) -> str:
    """``--doc-ids-dir/{split}.ids`` when the option is given (it wins over the file next to the data, and a
    missing one is an error, never a silent fall-back), else ``DATA/{split}.ids``; else one error."""
    if ids_dir:
        p = os.path.join(ids_dir, f"{split}.ids")
        if os.path.exists(p):
            beside = os.path.join(data_path, f"{split}.ids")
            if os.path.exists(beside) and os.path.abspath(beside) != os.path.abspath(p):
                logger.info("doc_translation %s: ids from --doc-ids-dir %s (not %s)", split, p, beside)
            return p
        raise DocumentDataError(f"{p}: not found (--doc-ids-dir {ids_dir} is given, so {split}.ids is read there, "
                                f"not from {data_path})")
    p = os.path.join(data_path, f"{split}.ids")
    if os.path.exists(p):
        return p
    raise DocumentDataError(f"{p}: not found ({binarized}): the document task needs one id per line of the split "
                            f"(doc#3, doc.3, doc:3 or the document's name on every line; see --doc-id-pattern), "
                            f"or --doc-ids-dir DIR")


def read_ids(path: str) -> List[str]:
    """The lines of an ids file (a last empty line is no line); invalid UTF-8 is an error naming the line."""
    return read_lines(path, DocumentDataError)


# a split of at least this many lines whose documents are (almost) all one sentence long was misread
SINGLE_SENTENCE_MIN_LINES = 10
SINGLE_SENTENCE_ERROR = 0.9
SINGLE_SENTENCE_WARN = 0.5


def check_documents(index: DocumentIndex, pattern: str = "auto") -> None:
    """Refuse a split whose documents are almost all one sentence long (>= 90% of its documents, with at least
    10 lines): its ids were almost surely misread (a wrong ``--doc-id-pattern``), and a document model would
    silently train as a sentence model. More than half one-sentence documents is a loud warning."""
    n_docs = index.n_docs
    if len(index) < SINGLE_SENTENCE_MIN_LINES or not n_docs:
        return
    single = int((index.lengths == 1).sum())
    share = single / n_docs
    if share < SINGLE_SENTENCE_WARN:
        return
    examples = ", ".join(repr(index.names[d]) for d in range(min(3, n_docs)))
    msg = (f"{index.source}: {single} of the {n_docs} documents have one sentence ({len(index)} lines; documents "
           f"{examples}, ...) under --doc-id-pattern {pattern!r}: the ids are probably misread. The document of an "
           f"id is the id without a trailing #N, :N or .N (auto), the whole id (whole), or the first group of a "
           f"regular expression, e.g. --doc-id-pattern '(.+)_[0-9]+'")
    if share >= SINGLE_SENTENCE_ERROR:
        raise DocumentDataError(msg)
    logger.warning(msg)


def read_generated_context(path: str, tgt_dict, n_expected: int, binarized: str,
                           option: str = "--doc-target-context") -> List[torch.Tensor]:
    """``{doc-generated-dir}/{split}.{tgt}``: one translation per example in target-dictionary units;
    ``option``: the option the messages name (``--conv-target-history`` for the conversations)."""
    if not os.path.exists(path):
        raise DocumentDataError(f"{option} generated: {path} not found (one translation per line "
                                f"of {binarized}, in dataset order; see fairseq-ext-doc-context)")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != n_expected:
        raise DocumentDataError(f"{path}: {len(lines)} lines, but the split {binarized} has {n_expected} examples "
                                f"(the generated context needs one line per example, in dataset order)")
    out, n_tok, n_unk = [], 0, 0
    unk = tgt_dict.unk()
    for line in lines:
        t = tgt_dict.encode_line(line, add_if_not_exist=False, append_eos=True).long()
        n_tok += t.numel() - 1
        n_unk += int(t.eq(unk).sum())
        out.append(t)
    rate = n_unk / max(n_tok, 1)
    (logger.warning if rate > 0.05 else logger.info)(
        "generated target context %s: %d sentences, %.1f%% of the units outside the target dictionary%s",
        path, len(out), 100 * rate, " (were the hypotheses detokenised? the H- field is needed)" if rate > 0.05 else "")
    return out

"""Documents for the ``doc_translation`` task (Maruf 2019 ch. 3-4): the batch contract between the task,
the document models and ``doc_bcd``.

* :class:`DocumentIndex` -- the document and the position of every line of a split, read from the
  line-aligned ``{split}.ids`` file. The document of a line is given by ``--doc-id-pattern``
  (:func:`doc_id_rule`; default: the id without a trailing ``#N``, ``:N`` or ``.N``, so ``Ruth.1.3`` ->
  ``Ruth.1``, ``help/page#3`` -> ``help/page``; an id without one is its own document name, so an ids file
  may also just repeat a document name on every line). Lines of one document must be contiguous, else one
  error ``FILE:LINE: ...``; a one-sentence document is fine, a split of (almost) only one-sentence
  documents is refused (:func:`check_documents`).
* :func:`context_window` -- which sentences of the document are the context of a sentence
  (decided here, never by a model): ``offline`` = every other sentence, ``online`` = the earlier ones;
  then the ``size`` nearest (by ``|distance|``, ties -> the earlier one; 0 = no limit), then the hard
  ``cap`` (``--doc-max-context``, default 128; 0 = no context at all). A sentence is never in its own context. The result is always a contiguous window
  ``[pos - a, pos) + (pos, pos + b]``, computed in O(1) (no |d|^2 tables for long documents).
* :class:`DocumentPairDataset` -- wraps fairseq's :class:`~fairseq.data.LanguagePairDataset` (as built
  by ``load_langpair_dataset``); its ``collater`` is fairseq's plus the document keys of the contract:
  the *N-set* of a batch is its B sentences (rows ``0..B-1``, in fairseq's batch order, i.e. sorted by
  source length) followed by the E *extra* context sentences that are not in the batch (rows
  ``B..N-1``, in dataset order)::

      net_input["ctx_src_tokens"]  (E, Ls)  extra sources, padded like src_tokens (left_pad_source);
                                            E = 0 gives shape (0, 1)
      net_input["ctx_src_lengths"] (E,)
      net_input["ctx_index"]       (B, K)   N-set rows of each sentence's context, document order, -1 pad
      net_input["ctx_distance"]    (B, K)   pos(context) - pos(sentence), never 0; 0 at padding
      net_input["ctx_tgt_tokens"]  (N, Lt)  (--doc-target-context gold|generated only) target side of
                                            every N-set row, fairseq target format (no BOS, EOS last),
                                            right-padded
      net_input["ctx_tgt_lengths"] (N,)
      sample["doc_index"], sample["doc_pos"]  (B,)  document number in the split, position in it
      sample["ctx_id"]             (E,)     dataset index of every extra row (an addition to the
                                            contract: lets a generator such as ``doc_bcd`` map its own
                                            translations onto the N-set rows B..N-1)

  Extra rows longer than ``max_source_positions`` keep their first ``max - 1`` tokens + EOS.
  With ``with_context=False`` (the concatenation baseline) only ``doc_index``/``doc_pos`` are added.
* :class:`PrevConcatDataset` -- the source side of ``--doc-concat-prev N`` (Tiedemann & Scherrer 2017):
  the N previous source sentences of the document, each followed by ``<brk>``, then the sentence,
  truncated from the left to ``max_source_positions`` (the current sentence itself is never cut, so
  fairseq's own size checks see it as they would without context).
* :func:`document_batches` -- the batches of ``--doc-batching document``: whole documents, packed to
  ``--max-tokens`` (fairseq's padded cost ``B x max(src, tgt length)``) and ``--batch-size``; in
  training the document order is shuffled (seed, epoch) and a document larger than one batch is cut
  into consecutive chunks (its other chunks then come as extra rows); at inference the task cuts them too
  (``cut_long``), so no batch exceeds ``--max-tokens`` but for a single over-long sentence.
  ``--required-batch-size-multiple`` does not apply.

**Which models get the context keys.** fairseq's sentence models have fixed ``forward`` arguments
(``TransformerModel.forward(src_tokens, src_lengths, prev_output_tokens, ...)``) and fail on unknown
keyword arguments, so the task gives the context keys only to a model that opts in with the class
attribute ``uses_document_context = True`` (looked up through DDP/proxy wrappers, see
:func:`uses_document_context`); for any other model :func:`strip_context` removes them from
``net_input`` (and ``ctx_id`` from the sample) before ``train_step``/``valid_step``/``inference_step``.
In ``inference_step`` the keys are also kept when the *generator* sets ``uses_document_context = True``
(e.g. ``doc_bcd``, which may run a sentence model next to the document model and routes the keys
itself); a plain generator with a mix of opting-in and sentence models is an error. So any sentence
model trains and decodes on ``doc_translation`` unchanged, and the concatenation baseline needs no
model change at all.
"""
import logging
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, FairseqDataset, data_utils

from fairseq_ext.data.samples import subset_sample
from fairseq_ext.data.errors import UserDataError
from fairseq_ext.data.truncation import truncate_tokens

logger = logging.getLogger(__name__)

CONTEXT_MODES = ("offline", "online")
TARGET_CONTEXT = ("none", "gold", "generated")
DOC_BATCHING = ("document", "size")
BRK = "<brk>"

CONTEXT_NET_INPUT_KEYS = ("ctx_src_tokens", "ctx_src_lengths", "ctx_index", "ctx_distance",
                          "ctx_tgt_tokens", "ctx_tgt_lengths")
CONTEXT_SAMPLE_KEYS = ("ctx_id",)


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
class DocumentIndex:
    """Document number (``doc_of``) and position (``pos``) of each line of a split (module doc)."""

    def __init__(self, names: Sequence[str], lengths: Sequence[int], source: str = "<documents>"):
        lengths = np.asarray(lengths, dtype=np.int64)
        if len(names) != len(lengths):
            raise ValueError("DocumentIndex: one name per document length")
        if (lengths < 1).any():
            raise ValueError(f"{source}: empty document")
        self.names = list(names)
        self.source = source
        self.lengths = lengths
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) \
            else np.zeros(0, dtype=np.int64)
        n = int(lengths.sum())
        self.doc_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        self.pos = np.arange(n, dtype=np.int64) - np.repeat(self.starts, lengths)

    @classmethod
    def from_ids(cls, ids: Sequence[str], source: str = "<ids>", pattern: str = "auto") -> "DocumentIndex":
        """From line ids (line i of ``source`` = ids[i]; the document of an id by ``pattern``, see
        :func:`doc_id_rule`); non-contiguous documents are an error."""
        rule = doc_id_rule(pattern)
        names: List[str] = []
        lengths: List[int] = []
        first_line: Dict[str, Tuple[int, int]] = {}  # name -> (first line, doc number), 1-based lines
        for k, raw in enumerate(ids, start=1):
            line_id = raw.strip()
            if not line_id:
                raise DocumentDataError(f"{source}:{k}: empty id (every line needs an id such as doc#3 or doc.3)")
            doc = rule(line_id)
            if doc is None:
                raise DocumentDataError(f"{source}:{k}: id {line_id!r} does not match --doc-id-pattern {pattern!r}")
            if names and names[-1] == doc:
                lengths[-1] += 1
                continue
            if doc in first_line:
                start, d = first_line[doc]
                end = start + lengths[d] - 1
                raise DocumentDataError(
                    f"{source}:{k}: line id {line_id!r} belongs to document {doc!r}, whose lines {start}-{end} "
                    f"came before another document; the lines of a document must be contiguous (--doc-id-pattern "
                    f"{pattern!r} decides the document of an id)")
            first_line[doc] = (k, len(names))
            names.append(doc)
            lengths.append(1)
        return cls(names, lengths, source)

    @classmethod
    def from_file(cls, path: str, pattern: str = "auto") -> "DocumentIndex":
        return cls.from_ids(read_ids(path), source=path, pattern=pattern)

    @classmethod
    def from_lengths(cls, lengths: Sequence[int], source: str = "<synthetic>") -> "DocumentIndex":
        return cls([f"doc{i}" for i in range(len(lengths))], lengths, source)

    def __len__(self) -> int:
        return int(self.lengths.sum())

    @property
    def n_docs(self) -> int:
        return len(self.lengths)

    def sentences(self, d: int) -> range:
        """Dataset indices of document ``d``."""
        s = int(self.starts[d])
        return range(s, s + int(self.lengths[d]))

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
class DocumentPairDataset(BaseWrapperDataset):
    """A :class:`~fairseq.data.LanguagePairDataset` whose batches carry the document keys (module doc).

    :param target_context: ``None``, ``"gold"`` (the dataset's own targets) or a sequence of LongTensors
        (the generated translations, one per example, target dictionary units ending in EOS).
    """

    def __init__(self, dataset, index: DocumentIndex, mode: str = "offline", context_size: int = 0,
                 max_context: int = 128, target_context: Union[None, str, Sequence[torch.Tensor]] = None,
                 with_context: bool = True, max_source_positions: Optional[int] = None):
        super().__init__(dataset)
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
        self.index = index
        self.mode, self.context_size, self.max_context = mode, context_size, max_context
        self.target_context = target_context
        self.with_context = with_context
        self.max_source_positions = max_source_positions

    def __getattr__(self, name):  # src, tgt, src_sizes, tgt_sizes, left_pad_source, src_dict, ...
        if name.startswith("__") or name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices)

    # -- context
    def context(self, i: int) -> List[int]:
        """Dataset indices of the context of example ``i``, in document order."""
        d = int(self.index.doc_of[i])
        start = int(self.index.starts[d])
        pos = i - start
        return [start + p for p in context_positions(pos, int(self.index.lengths[d]), self.mode,
                                                     self.context_size, self.max_context)]

    def _target(self, i: int) -> torch.Tensor:
        if self.target_context == "gold":
            return self.dataset[i]["target"]
        return self.target_context[i]

    # -- batches
    def collater(self, samples, pad_to_length=None):
        res = self.dataset.collater(samples, pad_to_length=pad_to_length) if pad_to_length is not None \
            else self.dataset.collater(samples)
        if not res:
            return res
        ids = res["id"].tolist()
        B = len(ids)
        res["doc_index"] = torch.from_numpy(self.index.doc_of[ids].copy())
        res["doc_pos"] = torch.from_numpy(self.index.pos[ids].copy())
        if not self.with_context:
            return res
        row = {i: r for r, i in enumerate(ids)}
        contexts = [self.context(i) for i in ids]
        extra = sorted({j for c in contexts for j in c if j not in row})
        for r, j in enumerate(extra):
            row[j] = B + r
        K = max((len(c) for c in contexts), default=0)
        ctx_index = torch.full((B, K), -1, dtype=torch.long)
        ctx_distance = torch.zeros((B, K), dtype=torch.long)
        pos = self.index.pos
        for b, (i, c) in enumerate(zip(ids, contexts)):
            if c:
                ctx_index[b, : len(c)] = torch.tensor([row[j] for j in c], dtype=torch.long)
                ctx_distance[b, : len(c)] = torch.from_numpy(pos[c] - pos[i])
        ds = self.dataset
        pad, eos = ds.src_dict.pad(), ds.eos
        if extra:
            sources = [truncate_tokens(ds[j]["source"], self.max_source_positions, ds.src_dict.eos())
                       for j in extra]
            ctx_src = data_utils.collate_tokens(sources, pad, eos, ds.left_pad_source,
                                                pad_to_multiple=getattr(ds, "pad_to_multiple", 1))
            ctx_src_lengths = torch.tensor([s.numel() for s in sources], dtype=torch.long)
        else:
            ctx_src = torch.full((0, 1), pad, dtype=torch.long)
            ctx_src_lengths = torch.zeros(0, dtype=torch.long)
        net = res["net_input"]
        net["ctx_src_tokens"] = ctx_src
        net["ctx_src_lengths"] = ctx_src_lengths
        net["ctx_index"] = ctx_index
        net["ctx_distance"] = ctx_distance
        if self.target_context is not None:
            tgt_dict = ds.tgt_dict
            targets = [self._target(j) for j in ids + extra]
            net["ctx_tgt_tokens"] = data_utils.collate_tokens(targets, tgt_dict.pad(), tgt_dict.eos(), False)
            net["ctx_tgt_lengths"] = torch.tensor([t.numel() for t in targets], dtype=torch.long)
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
def document_batches(index: DocumentIndex, num_tokens: np.ndarray, keep: Optional[np.ndarray] = None,
                     max_tokens: Optional[int] = None, max_sentences: Optional[int] = None,
                     order: Optional[Sequence[int]] = None, cut_long: bool = False) -> List[np.ndarray]:
    """Batches of whole documents (module doc).

    :param num_tokens: per example, fairseq's ``num_tokens`` (max of source and target length).
    :param keep: boolean mask of the examples to batch (those that passed the size filter); default all.
    :param order: the document order (a permutation, training) or ``None`` (document order).
    :param cut_long: cut a document that does not fit one batch into consecutive chunks (training);
        otherwise such a document is one (oversized) batch.
    """
    num_tokens = np.asarray(num_tokens, dtype=np.int64)
    max_tokens = max_tokens or None
    max_sentences = max_sentences or None

    def fits(n: int, longest: int) -> bool:
        return (max_sentences is None or n <= max_sentences) and (max_tokens is None or n * longest <= max_tokens)

    units: List[np.ndarray] = []
    for d in (range(index.n_docs) if order is None else order):
        s = int(index.starts[d])
        sent = np.arange(s, s + int(index.lengths[d]), dtype=np.int64)
        if keep is not None:
            sent = sent[keep[sent]]
        if not len(sent):
            continue
        if not cut_long or fits(len(sent), int(num_tokens[sent].max())):
            units.append(sent)
            continue
        chunk: List[int] = []
        longest = 0
        for i in sent.tolist():
            if chunk and not fits(len(chunk) + 1, max(longest, int(num_tokens[i]))):
                units.append(np.asarray(chunk, dtype=np.int64))
                chunk, longest = [], 0
            chunk.append(i)
            longest = max(longest, int(num_tokens[i]))
        units.append(np.asarray(chunk, dtype=np.int64))

    batches: List[np.ndarray] = []
    cur: List[np.ndarray] = []
    cur_n, cur_long = 0, 0
    for u in units:
        u_long = int(num_tokens[u].max())
        if cur and not fits(cur_n + len(u), max(cur_long, u_long)):
            batches.append(np.concatenate(cur))
            cur, cur_n, cur_long = [], 0, 0
        cur.append(u)
        cur_n += len(u)
        cur_long = max(cur_long, u_long)
    if cur:
        batches.append(np.concatenate(cur))
    return batches


# ------------------------------------------------------------------------------ task-side helpers
def _unwrap(model):
    seen = 0
    while hasattr(model, "module") and seen < 4:
        model = model.module
        seen += 1
    return model


def uses_document_context(obj) -> bool:
    """Whether a model (possibly DDP/proxy-wrapped) or a generator opts in to the context keys."""
    if obj is None:
        return False
    return bool(getattr(obj, "uses_document_context", False) or getattr(_unwrap(obj), "uses_document_context", False))


def has_context(sample) -> bool:
    return isinstance(sample, dict) and isinstance(sample.get("net_input"), dict) and \
        any(k in sample["net_input"] for k in CONTEXT_NET_INPUT_KEYS)


def strip_context(sample):
    """A shallow copy of ``sample`` without the context keys (for models that do not opt in)."""
    if not has_context(sample):
        return sample
    out = {k: v for k, v in sample.items() if k not in CONTEXT_SAMPLE_KEYS}
    out["net_input"] = {k: v for k, v in sample["net_input"].items() if k not in CONTEXT_NET_INPUT_KEYS}
    return out


def subset_doc_sample(sample, keep: torch.Tensor, left_pad_source: bool, pad: int, eos: int):
    """The batch rows ``keep`` of a document sample; the other batch rows become extra context rows
    (they may be the context of kept rows), so every kept sentence keeps exactly its context."""
    net = sample["net_input"]
    B = net["src_tokens"].size(0)
    E = net["ctx_src_tokens"].size(0)
    keep_l = keep.tolist()
    kept = set(keep_l)
    dropped = [b for b in range(B) if b not in kept]
    order = keep_l + dropped + list(range(B, B + E))  # old N-set rows in their new order
    new_row = torch.empty(B + E, dtype=torch.long)
    new_row[torch.tensor(order, dtype=torch.long)] = torch.arange(B + E)
    rest = strip_context(sample)
    out = subset_sample(rest, keep, B)
    dev = net["src_tokens"].device
    sources = [net["src_tokens"][b][net["src_tokens"][b].ne(pad)] for b in dropped] + \
              [net["ctx_src_tokens"][e][net["ctx_src_tokens"][e].ne(pad)] for e in range(E)]
    onet = out["net_input"]
    if sources:
        onet["ctx_src_tokens"] = data_utils.collate_tokens(sources, pad, eos, left_pad_source)
        onet["ctx_src_lengths"] = torch.tensor([s.numel() for s in sources], dtype=torch.long, device=dev)
    else:
        onet["ctx_src_tokens"] = net["ctx_src_tokens"]
        onet["ctx_src_lengths"] = net["ctx_src_lengths"]
    idx = net["ctx_index"].index_select(0, keep.to(dev))
    dist = net["ctx_distance"].index_select(0, keep.to(dev))
    mapped = torch.where(idx.ge(0), new_row.to(dev)[idx.clamp(min=0)], idx)
    K = int(mapped.ge(0).sum(1).max()) if mapped.numel() else 0
    onet["ctx_index"], onet["ctx_distance"] = mapped[:, :K].contiguous(), dist[:, :K].contiguous()
    if "ctx_tgt_tokens" in net:
        o = torch.tensor(order, dtype=torch.long, device=dev)
        onet["ctx_tgt_tokens"] = net["ctx_tgt_tokens"].index_select(0, o)
        onet["ctx_tgt_lengths"] = net["ctx_tgt_lengths"].index_select(0, o)
    ids = sample["id"]
    old_extra = sample.get("ctx_id", torch.zeros(0, dtype=torch.long))
    out["ctx_id"] = torch.cat([ids[torch.tensor(dropped, dtype=torch.long, device=ids.device)].to(old_extra),
                               old_extra]) if dropped else old_extra
    return out


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
    with open(path, "rb") as f:
        raw = f.read().split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    out = []
    for k, b in enumerate(raw, start=1):
        try:
            out.append(b.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise DocumentDataError(f"{path}:{k}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    return out


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


def read_generated_context(path: str, tgt_dict, n_expected: int, binarized: str) -> List[torch.Tensor]:
    """``{doc-generated-dir}/{split}.{tgt}``: one translation per example in target-dictionary units."""
    if not os.path.exists(path):
        raise DocumentDataError(f"--doc-target-context generated: {path} not found (one translation per line "
                                f"of {binarized}, in dataset order; see python -m fairseq_ext.tools.corpora.doc_context)")
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

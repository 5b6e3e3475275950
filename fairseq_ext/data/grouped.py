"""Sentences grouped into contiguous units -- the documents of ``doc_translation`` (Maruf 2019 ch. 3-4,
:mod:`fairseq_ext.data.documents`) and the conversations of ``conversation_translation`` (ch. 5,
:mod:`fairseq_ext.data.conversations`): what both share.

* :class:`GroupIndex` -- the group number (``group_of``) and position (``pos``) of every line of a split;
  :func:`contiguous_groups` reads the groups off a line-aligned file, one group per contiguous run of lines
  with one name (a name that comes back after another group is one error naming the file and line, worded by
  the caller); :func:`read_lines` reads such a file (``{split}.ids``, ``{split}.conv``).
* :func:`group_batches` -- batches of whole groups packed to ``--max-tokens`` (fairseq's padded cost
  ``B x max(src, tgt length)``) and ``--batch-size``, in a given group order; with ``cut_long`` a group larger
  than one batch is cut into consecutive chunks (its other chunks then reach a sentence as extra rows).
* The *N-set* of a batch (Eq. 3.2's context of every sentence, §5.3's history): the B batch rows followed by
  the E *extra* rows that are some row's context but not in the batch (rows ``B..N-1``, dataset order);
  :func:`nset_rows` maps each row's context onto it, :func:`collate_sources` / :func:`collate_targets` pad the
  extra sources (cut to ``max_source_positions``) and the target side of every N-set row.
* :class:`GroupedPairDataset` -- the wrapper of fairseq's ``LanguagePairDataset`` whose ``collater`` is
  fairseq's plus the keys its subclass adds (:meth:`GroupedPairDataset.add_keys`).
"""
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, data_utils

from fairseq_ext.data.truncation import truncate_tokens


# ------------------------------------------------------------------------------------------ index
class GroupIndex:
    """Group number (``group_of``) and position (``pos``) of each line of a split, groups contiguous."""

    what = "group"  # the word of the messages: "document", "conversation"

    def __init__(self, names: Sequence[str], lengths: Sequence[int], source: str):
        lengths = np.asarray(lengths, dtype=np.int64)
        if len(names) != len(lengths):
            raise ValueError(f"{type(self).__name__}: one name per {self.what} length")
        if (lengths < 1).any():
            raise ValueError(f"{source}: empty {self.what}")
        self.names = list(names)
        self.source = source
        self.lengths = lengths
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) \
            else np.zeros(0, dtype=np.int64)
        n = int(lengths.sum())
        self.group_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        self.pos = np.arange(n, dtype=np.int64) - np.repeat(self.starts, lengths)

    def __len__(self) -> int:
        return int(self.lengths.sum())

    @property
    def n_groups(self) -> int:
        return len(self.lengths)

    def sentences(self, g: int) -> range:
        """Dataset indices of group ``g``."""
        s = int(self.starts[g])
        return range(s, s + int(self.lengths[g]))


def read_lines(path: str, error: Callable[[str], Exception]) -> List[str]:
    """The lines of a line-aligned text file (a last empty line is no line; CRLF ends are line ends); a line that
    is not UTF-8 is ``error("FILE:LINE: invalid UTF-8 ...")``, raised."""
    with open(path, "rb") as f:
        raw = f.read().split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    out = []
    for k, b in enumerate(raw, start=1):
        try:
            out.append(b.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise error(f"{path}:{k}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    return out


def contiguous_groups(lines: Iterable[Tuple[int, str]], repeated: Callable[[int, str, int, int], Exception]
                      ) -> Tuple[List[str], List[int], List[int]]:
    """``(names, lengths, first lines)`` of the groups of ``(line number, group name)`` pairs: one group per run
    of equal names. A name whose group ended before is ``repeated(line, name, first line, lines so far)``,
    raised."""
    names: List[str] = []
    lengths: List[int] = []
    firsts: List[int] = []
    number: Dict[str, int] = {}
    for k, name in lines:
        if names and names[-1] == name:
            lengths[-1] += 1
            continue
        if name in number:
            g = number[name]
            raise repeated(k, name, firsts[g], lengths[g])
        number[name] = len(names)
        names.append(name)
        lengths.append(1)
        firsts.append(k)
    return names, lengths, firsts


# --------------------------------------------------------------------------------------- batching
def group_batches(index: GroupIndex, num_tokens: np.ndarray, keep: Optional[np.ndarray] = None,
                  max_tokens: Optional[int] = None, max_sentences: Optional[int] = None,
                  order: Optional[Sequence[int]] = None, cut_long: bool = False) -> List[np.ndarray]:
    """Batches of whole groups (module doc).

    :param num_tokens: per example, fairseq's ``num_tokens`` (max of source and target length).
    :param keep: boolean mask of the examples to batch (those that passed the size filter); default all.
    :param order: the group order (a permutation, training) or ``None`` (corpus order).
    :param cut_long: cut a group that does not fit one batch into consecutive chunks; otherwise such a group
        is one (oversized) batch.
    """
    num_tokens = np.asarray(num_tokens, dtype=np.int64)
    max_tokens = max_tokens or None
    max_sentences = max_sentences or None

    def fits(n: int, longest: int) -> bool:
        return (max_sentences is None or n <= max_sentences) and (max_tokens is None or n * longest <= max_tokens)

    units: List[np.ndarray] = []
    for g in (range(index.n_groups) if order is None else order):
        s = int(index.starts[g])
        sent = np.arange(s, s + int(index.lengths[g]), dtype=np.int64)
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


# ---------------------------------------------------------------------------------------- N-set
def nset_rows(ids: List[int], contexts: List[List[int]]) -> Tuple[List[int], torch.Tensor]:
    """``(extra, index)``: the dataset indices of the extra rows (the contexts' sentences not in ``ids``, sorted)
    and the ``(B, K)`` N-set rows of each row's context, in the given order, -1 padding."""
    B = len(ids)
    row = {i: r for r, i in enumerate(ids)}
    extra = sorted({j for c in contexts for j in c if j not in row})
    for r, j in enumerate(extra):
        row[j] = B + r
    K = max((len(c) for c in contexts), default=0)
    index = torch.full((B, K), -1, dtype=torch.long)
    for b, c in enumerate(contexts):
        if c:
            index[b, : len(c)] = torch.tensor([row[j] for j in c], dtype=torch.long)
    return extra, index


def collate_sources(ds, rows: List[int], max_source_positions: Optional[int],
                    pad_to_multiple: int = 1) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (E, S), lengths (E,))``: the sources of the dataset rows ``rows`` of the language-pair dataset
    ``ds``, each cut to ``max_source_positions`` (first ``max - 1`` tokens + EOS), padded like its
    ``src_tokens``; no row gives shape ``(0, 1)``."""
    pad, eos = ds.src_dict.pad(), ds.src_dict.eos()
    if not rows:
        return torch.full((0, 1), pad, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    sources = [truncate_tokens(ds[j]["source"], max_source_positions, eos) for j in rows]
    tokens = data_utils.collate_tokens(sources, pad, eos, ds.left_pad_source, pad_to_multiple=pad_to_multiple)
    return tokens, torch.tensor([s.numel() for s in sources], dtype=torch.long)


def collate_targets(targets: List[torch.Tensor], tgt_dict) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (N, Lt), lengths (N,))``: target sentences in fairseq's target format (EOS last), right-padded."""
    tokens = data_utils.collate_tokens(targets, tgt_dict.pad(), tgt_dict.eos(), False)
    return tokens, torch.tensor([t.numel() for t in targets], dtype=torch.long)


# ------------------------------------------------------------------------------------------ dataset
class GroupedPairDataset(BaseWrapperDataset):
    """A :class:`~fairseq.data.LanguagePairDataset` (``dataset``) over the lines of ``index``, whose batches are
    fairseq's plus the keys of :meth:`add_keys`; every other attribute is the wrapped dataset's.

    :param target_side: ``None``, a string (the dataset's own targets) or one LongTensor per example (generated
        translations ending in EOS): what :meth:`target_of` gives."""

    def __init__(self, dataset, index: GroupIndex, target_side=None):
        super().__init__(dataset)
        self.index = index
        self.target_side = target_side

    def __getattr__(self, name):  # src, tgt, src_sizes, tgt_sizes, left_pad_source, src_dict, ...
        if name.startswith("__") or name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices)

    def target_of(self, i: int) -> torch.Tensor:
        """The target side of example ``i``: its reference, or its generated translation."""
        if isinstance(self.target_side, str):
            return self.dataset[i]["target"]
        return self.target_side[i]

    def collater(self, samples, pad_to_length=None):
        res = self.dataset.collater(samples, pad_to_length=pad_to_length) if pad_to_length is not None \
            else self.dataset.collater(samples)
        if not res:
            return res
        return self.add_keys(res, res["id"].tolist())

    def add_keys(self, res: dict, ids: List[int]) -> dict:
        """fairseq's batch ``res`` of the dataset rows ``ids`` with the group keys added."""
        raise NotImplementedError

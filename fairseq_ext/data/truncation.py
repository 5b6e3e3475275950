"""Over-long inputs at evaluation time: cut to the model's positions instead of dropped or refused.

fairseq batches a split or the input lines of ``fairseq-interactive`` through ``filter_indices_by_size``, which
refuses an example longer than the model's positions ("Size of sample #i is invalid") or, with
``--skip-invalid-size-inputs-valid-test``, drops it without an output.  ``translation_ext`` (and every task
derived from it) instead cuts such an example with :func:`truncate_pairs_`: a source (target) longer than the
``max_source`` (``max_target``) positions keeps its first ``limit - 1`` tokens and ⟨/s⟩ -- the item fairseq's
own ``--truncate-source`` builds (``StripTokenDataset``, ``TruncateDataset``, ``AppendTokenDataset``), with the
exact sizes (that composition counts every untouched sentence one token longer) and for the plain lists of
tensors that ``build_dataset_for_inference`` receives, which those datasets cannot wrap.

The cut is made in place on the :class:`~fairseq.data.LanguagePairDataset` found under the batched dataset
(through :class:`~fairseq.data.BaseWrapperDataset` wrappers such as the document dataset of
``doc_translation``), because fairseq's batch iterator already holds the dataset when the positions are known.
"""
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, LanguagePairDataset


def truncate_tokens(tokens: torch.Tensor, limit: Optional[int], eos: int) -> torch.Tensor:
    """``tokens`` if it has at most ``limit`` tokens, else its first ``limit - 1`` tokens and ``eos``."""
    if limit is None or tokens.numel() <= limit:
        return tokens
    return torch.cat([tokens[: limit - 1], tokens.new_tensor([eos])])


class TruncatedTokens(BaseWrapperDataset):
    """The token sequences of ``dataset`` (a dataset or a list of tensors, sizes ``sizes``) cut by
    :func:`truncate_tokens` to ``limit`` tokens."""

    def __init__(self, dataset, sizes, limit: int, eos: int):
        super().__init__(dataset)
        self.limit, self.eos = int(limit), eos
        self._sizes = np.minimum(np.asarray(sizes), self.limit)

    def __getitem__(self, index):
        return truncate_tokens(self.dataset[index], self.limit, self.eos)

    def __len__(self):
        return len(self.dataset)

    @property
    def sizes(self):
        return self._sizes

    def size(self, index):
        return int(self._sizes[index])

    def num_tokens(self, index):
        return int(self._sizes[index])


class Truncated(NamedTuple):
    """An example cut by :func:`truncate_pairs_`: its index and its source and target lengths before (with
    ⟨/s⟩; 0: that side was not cut)."""

    index: int
    source: int
    target: int


def position_limits(max_positions) -> Tuple[Optional[int], Optional[int]]:
    """``(source, target)`` limits of fairseq's ``max_positions`` (a number, a pair or None)."""
    if max_positions is None:
        return None, None
    if isinstance(max_positions, (int, float, np.integer, np.floating)):
        return int(max_positions), int(max_positions)
    src, tgt = max_positions[0], max_positions[1]
    return (None if src is None else int(src)), (None if tgt is None else int(tgt))


def language_pair_of(dataset) -> Optional[LanguagePairDataset]:
    """The :class:`~fairseq.data.LanguagePairDataset` under ``dataset`` (itself or under wrappers that pass
    their sizes through), or None."""
    seen = 0
    while not isinstance(dataset, LanguagePairDataset):
        if not isinstance(dataset, BaseWrapperDataset) or seen > 8:
            return None
        dataset, seen = dataset.dataset, seen + 1
    return dataset


def truncate_pairs_(pair: LanguagePairDataset, max_source: Optional[int], max_target: Optional[int]
                    ) -> Optional[List[Truncated]]:
    """Cut, in place, every source of ``pair`` longer than ``max_source`` and every target longer than
    ``max_target`` (module doc); returns the cut examples in index order (None: ``pair`` cannot be cut, its
    sequences are padded into length buckets)."""
    if getattr(pair, "buckets", None) is not None:
        return None
    n = len(pair.src_sizes)
    src_before = np.zeros(n, dtype=np.int64)
    tgt_before = np.zeros(n, dtype=np.int64)
    if max_source is not None and max_source > 1 and (pair.src_sizes > max_source).any():
        over = pair.src_sizes > max_source
        src_before[over] = pair.src_sizes[over]
        pair.src = TruncatedTokens(pair.src, pair.src_sizes, max_source, pair.src_dict.eos())
        pair.src_sizes = pair.src.sizes
    if (pair.tgt is not None and pair.tgt_sizes is not None and max_target is not None and max_target > 1
            and (pair.tgt_sizes > max_target).any()):
        over = pair.tgt_sizes > max_target
        tgt_before[over] = pair.tgt_sizes[over]
        pair.tgt = TruncatedTokens(pair.tgt, pair.tgt_sizes, max_target, pair.tgt_dict.eos())
        pair.tgt_sizes = pair.tgt.sizes
    pair.sizes = np.vstack((pair.src_sizes, pair.tgt_sizes)).T if pair.tgt_sizes is not None else pair.src_sizes
    return [Truncated(int(i), int(src_before[i]), int(tgt_before[i]))
            for i in np.flatnonzero((src_before > 0) | (tgt_before > 0))]

"""Concatenation augmentation (Nguyen 2021 ch. 4, Nguyen, Murray & Chiang IWSLT 2021), data side.

:class:`ConcatPairDataset` wraps a fairseq :class:`~fairseq.data.LanguagePairDataset` ``D_orig`` and
adds ``D_new``, a list of index pairs ``(a, b)`` whose example is the concatenation of examples
``a`` and ``b`` [T §4.2.1]::

    source          x_a </s> x_b </s>         (each binarized sentence already ends with </s>)
    target          y_a </s> y_b </s>
    decoder input   </s> y_a </s> y_b          (fairseq's collater moves the final </s> to the front;
                                                fairseq's BOS is </s>, so this is the thesis'
                                                "<BOS> y1 <BOS> y2")

Pair builders (all vectorised numpy, seeded with a :class:`numpy.random.Generator`):

* :func:`consec_pairs` -- CONSEC, ``(i, i+1)`` for ``i = 0 .. N-2`` in corpus order;
* :func:`rand_pairs` -- RAND, CONSEC after a random permutation of ``D_orig``;
* :func:`length_sorted_pairs` -- the sep-batch ablation: CONSEC after sorting by (source, target)
  length, so that each new example joins two similar-length sentences.

Position shifting ablations [T §4.3] (one shift per example, for source and target):

* :func:`sim_shifts` -- with probability p (1/3 in the thesis) shift by ``|f_j|`` / ``|e_j|`` of a
  random training pair j (lengths count the final </s>);
* :func:`uniform_shifts` -- with probability p (0.1) shift by ``s, t ~ U{0..max}`` (inclusive,
  independent).

Token-level helpers used by the ``concat_translation`` task's hooks (pure torch, vectorised):

* :func:`segment_ids` -- segment number of every token (-1 on padding): on the source an </s>
  *closes* a segment, on the decoder input an </s> *opens* one;
* :func:`token_positions` -- 0-based position of every token (-1 on padding), continuing across
  segments (the default of plain concatenation), restarting at 0 in every segment (``reset``), and
  offset by a per-example ``shift``;
* :func:`segment_attention_mask` -- the additive (bsz*heads, T, S) mask of the "mask" ablation:
  a query attends only to keys of its own segment.
"""
from typing import Callable, Optional

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

CONCAT_MODES = ("none", "consec", "rand")
SHIFT_MODES = ("none", "sim", "uniform")
SOURCE, TARGET_INPUT = "source", "target_input"


# ----------------------------------------------------------------------------- pair builders
def consec_pairs(n: int) -> np.ndarray:
    """CONSEC: ``[[0, 1], [1, 2], ..., [n-2, n-1]]`` (shape ``(max(n-1, 0), 2)``)."""
    i = np.arange(max(n - 1, 0), dtype=np.int64)
    return np.stack([i, i + 1], axis=1)


def rand_pairs(n: int, rng: np.random.Generator) -> np.ndarray:
    """RAND: CONSEC over a random permutation of ``0..n-1``."""
    perm = rng.permutation(n).astype(np.int64)
    return np.stack([perm[:-1], perm[1:]], axis=1) if n > 1 else np.zeros((0, 2), dtype=np.int64)


def length_sorted_pairs(src_sizes: np.ndarray, tgt_sizes: Optional[np.ndarray],
                        rng: np.random.Generator) -> np.ndarray:
    """sep-batch: CONSEC over the examples sorted by source length, then target length (ties in
    random order), so each pair joins two similar-length sentences."""
    n = len(src_sizes)
    tie = rng.random(n)
    keys = (tie,) if tgt_sizes is None else (tie, np.asarray(tgt_sizes))
    order = np.lexsort(keys + (np.asarray(src_sizes),)).astype(np.int64)  # last key is primary
    return np.stack([order[:-1], order[1:]], axis=1) if n > 1 else np.zeros((0, 2), dtype=np.int64)


def build_pairs(mode: str, src_sizes: np.ndarray, tgt_sizes: Optional[np.ndarray],
                rng: np.random.Generator, sort_by_length: bool = False) -> np.ndarray:
    """The index pairs of ``D_new`` for ``mode`` in :data:`CONCAT_MODES` (``none``: no pairs)."""
    n = len(src_sizes)
    if mode == "none":
        return np.zeros((0, 2), dtype=np.int64)
    if sort_by_length:
        return length_sorted_pairs(src_sizes, tgt_sizes, rng)
    if mode == "consec":
        return consec_pairs(n)
    if mode == "rand":
        return rand_pairs(n, rng)
    raise ValueError(f"unknown concatenation mode {mode!r}; known: {', '.join(CONCAT_MODES)}")


# ----------------------------------------------------------------------------- position shifts
def sim_shifts(n_examples: int, src_sizes: np.ndarray, tgt_sizes: np.ndarray, prob: float,
               rng: np.random.Generator) -> tuple:
    """sim-shift: each example is shifted, with probability ``prob``, by the source / target length
    (with </s>) of a random training pair j; returns ``(src_shift, tgt_shift)`` int64 arrays."""
    hit = rng.random(n_examples) < prob
    j = rng.integers(0, len(src_sizes), n_examples)
    src = np.where(hit, np.asarray(src_sizes)[j], 0).astype(np.int64)
    tgt = np.where(hit, np.asarray(tgt_sizes)[j], 0).astype(np.int64)
    return src, tgt


def uniform_shifts(n_examples: int, prob: float, max_shift: int, rng: np.random.Generator) -> tuple:
    """uniform-shift: with probability ``prob`` shift the source by ``s`` and the target by ``t``,
    ``s, t ~ U{0..max_shift}`` independent; returns ``(src_shift, tgt_shift)``."""
    hit = rng.random(n_examples) < prob
    s = rng.integers(0, max_shift + 1, n_examples)
    t = rng.integers(0, max_shift + 1, n_examples)
    return np.where(hit, s, 0).astype(np.int64), np.where(hit, t, 0).astype(np.int64)


# ----------------------------------------------------------------------------- token helpers
def segment_ids(tokens: torch.Tensor, pad: int, eos: int, side: str) -> torch.Tensor:
    """Segment number (0, 1, ...) of every token of a padded batch ``(B, T)``; -1 on padding.

    ``side="source"``: ``x1 </s> x2 </s>`` -> ``0..0 0 1..1 1`` (</s> closes its segment).
    ``side="target_input"``: ``</s> y1 </s> y2`` -> ``0 0..0 1 1..1`` (</s> opens a segment)."""
    is_eos = tokens.eq(eos).long()
    count = is_eos.cumsum(1)
    if side == SOURCE:
        seg = count - is_eos
    elif side == TARGET_INPUT:
        seg = (count - 1).clamp(min=0)
    else:
        raise ValueError(f"side must be {SOURCE!r} or {TARGET_INPUT!r}, not {side!r}")
    return seg.masked_fill(tokens.eq(pad), -1)


def token_positions(tokens: torch.Tensor, pad: int, eos: int, side: str, reset: bool = False,
                    shift: Optional[torch.Tensor] = None) -> torch.Tensor:
    """0-based position of every token of a padded batch ``(B, T)`` (left or right padding); -1 on
    padding. Positions continue across segments unless ``reset`` (every segment restarts at 0);
    ``shift`` (``(B,)``) is added to every position of its row."""
    nonpad = tokens.ne(pad)
    pos = nonpad.long().cumsum(1) - 1
    if reset:
        is_eos = tokens.eq(eos)
        if side == SOURCE:  # a segment starts right after an </s>
            nxt = torch.where(is_eos, pos + 1, torch.zeros_like(pos))
            start = torch.nn.functional.pad(nxt[:, :-1], (1, 0)).cummax(1).values
        elif side == TARGET_INPUT:  # a segment starts at its </s> (the BOS)
            start = torch.where(is_eos, pos, torch.zeros_like(pos)).cummax(1).values
        else:
            raise ValueError(f"side must be {SOURCE!r} or {TARGET_INPUT!r}, not {side!r}")
        pos = pos - start
    if shift is not None:
        pos = pos + shift.to(pos).view(-1, 1)
    return pos.masked_fill(~nonpad, -1)


def segment_attention_mask(q_seg: torch.Tensor, k_seg: torch.Tensor, num_heads: int,
                           dtype=torch.float32) -> torch.Tensor:
    """Additive mask ``(B*num_heads, T, S)`` (0 allowed, -inf blocked; batch-major head order as
    :func:`torch.nn.functional.multi_head_attention_forward` expects) letting a query attend only
    to keys of the same segment. Padding queries (segment -1) are left unmasked (their keys are
    removed by the key padding mask), and a query whose segment has no key on the other side (a
    segment-count mismatch) is left unmasked rather than given an all -inf row."""
    allowed = q_seg.unsqueeze(2).eq(k_seg.unsqueeze(1)) | q_seg.lt(0).unsqueeze(2)
    real_key = k_seg.ge(0).unsqueeze(1)
    allowed = allowed | ~(allowed & real_key).any(-1, keepdim=True)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=q_seg.device)
    mask = mask.masked_fill(~allowed, float("-inf"))
    return mask.repeat_interleave(num_heads, dim=0)


# ----------------------------------------------------------------------------- dataset
class ConcatPairDataset(FairseqDataset):
    """``D_orig ∪ D_new`` over a :class:`~fairseq.data.LanguagePairDataset` (see module doc).

    Indices ``0 .. N-1`` are the original examples (when ``keep_original``), the next ``len(pairs)``
    the concatenations. ``pairs_fn(epoch)`` and ``shifts_fn(epoch)`` (``None`` or
    ``(src_shift, tgt_shift)`` over all examples) are called once, or at every epoch when
    ``resample``. With ``sep_batch`` no batch mixes original and concatenated examples. Batches
    carry ``sample["concat_shift"] = {"src": (B,), "tgt": (B,)}`` when shifts are set.
    """

    def __init__(self, base, pairs_fn: Callable[[int], np.ndarray], keep_original: bool = True,
                 shifts_fn: Optional[Callable[[int, int], Optional[tuple]]] = None,
                 sep_batch: bool = False, resample: bool = False):
        super().__init__()
        self.base = base
        self.pairs_fn = pairs_fn
        self.shifts_fn = shifts_fn
        self.keep_original = keep_original
        self.sep_batch = sep_batch
        self.resample = resample
        self.n_orig = len(base) if keep_original else 0
        self.base_src = np.asarray(base.src_sizes, dtype=np.int64)
        self.base_tgt = None if base.tgt_sizes is None else np.asarray(base.tgt_sizes, dtype=np.int64)
        self.shuffle = getattr(base, "shuffle", True)
        self.epoch = None
        self._build(1)

    # -- epoch-dependent content
    def _build(self, epoch: int) -> None:
        pairs = np.asarray(self.pairs_fn(epoch), dtype=np.int64).reshape(-1, 2)
        if len(pairs) and (pairs.min() < 0 or pairs.max() >= len(self.base)):
            raise ValueError(f"concatenation pair index out of range 0..{len(self.base) - 1}")
        self.pairs = pairs
        src = self.base_src[pairs].sum(1)
        self.src_sizes = np.concatenate([self.base_src[:self.n_orig], src])
        if self.base_tgt is None:
            self.tgt_sizes = None
        else:
            self.tgt_sizes = np.concatenate([self.base_tgt[:self.n_orig], self.base_tgt[pairs].sum(1)])
        shifts = self.shifts_fn(epoch, len(self)) if self.shifts_fn is not None else None
        self.src_shift, self.tgt_shift = shifts if shifts is not None else (None, None)
        self.epoch = epoch

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        if hasattr(self.base, "set_epoch"):
            self.base.set_epoch(epoch)
        if self.resample and epoch != self.epoch:
            self._build(epoch)

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return not self.resample

    # -- items
    def __len__(self):
        return self.n_orig + len(self.pairs)

    def __getitem__(self, index):
        if index < self.n_orig:
            ex = self.base[index]
            return {"id": index, "source": ex["source"], "target": ex["target"]}
        a, b = self.pairs[index - self.n_orig]
        ea, eb = self.base[int(a)], self.base[int(b)]
        tgt = None if ea["target"] is None else torch.cat([ea["target"], eb["target"]])
        return {"id": index, "source": torch.cat([ea["source"], eb["source"]]), "target": tgt}

    def collater(self, samples, pad_to_length=None):
        batch = self.base.collater(samples, pad_to_length=pad_to_length)
        if self.src_shift is not None and len(samples) > 0:
            ids = batch["id"].numpy()
            batch["concat_shift"] = {"src": torch.from_numpy(self.src_shift[ids]),
                                     "tgt": torch.from_numpy(self.tgt_shift[ids])}
        return batch

    # -- sizes and batching
    @property
    def sizes(self):
        return self.src_sizes if self.tgt_sizes is None else np.vstack((self.src_sizes, self.tgt_sizes)).T

    def num_tokens(self, index):
        return max(self.src_sizes[index], self.tgt_sizes[index] if self.tgt_sizes is not None else 0)

    def num_tokens_vec(self, indices):
        sizes = self.src_sizes[indices]
        return sizes if self.tgt_sizes is None else np.maximum(sizes, self.tgt_sizes[indices])

    def size(self, index):
        return (self.src_sizes[index], self.tgt_sizes[index] if self.tgt_sizes is not None else 0)

    def ordered_indices(self):
        """As :class:`LanguagePairDataset`: shuffled, then sorted by target then source length."""
        n = len(self)
        indices = np.random.permutation(n).astype(np.int64) if self.shuffle else np.arange(n, dtype=np.int64)
        if self.tgt_sizes is not None:
            indices = indices[np.argsort(self.tgt_sizes[indices], kind="mergesort")]
        return indices[np.argsort(self.src_sizes[indices], kind="mergesort")]

    def filter_indices_by_size(self, indices, max_sizes):
        return data_utils.filter_paired_dataset_indices_by_size(self.src_sizes, self.tgt_sizes, indices, max_sizes)

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        """sep-batch: original and concatenated examples are batched separately (the iterator then
        shuffles the order of all batches)."""
        if not self.sep_batch or self.n_orig == 0 or len(self.pairs) == 0:
            return super().batch_by_size(indices, max_tokens, max_sentences, required_batch_size_multiple)
        indices = np.asarray(indices, dtype=np.int64)
        out = []
        for part in (indices[indices < self.n_orig], indices[indices >= self.n_orig]):
            if len(part):
                out += list(super().batch_by_size(part, max_tokens, max_sentences, required_batch_size_multiple))
        return out

    @property
    def supports_prefetch(self):
        return False

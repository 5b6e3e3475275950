"""Training batch orders of Nguyen (2021) ch. 4 and 6: Morishita chunked batching and fixed-size
"virtual" epochs (Morishita et al. 2017). Used by the
``translation_ext`` task family (:class:`fairseq_ext.tasks.translation_ext.TrainBatchingMixin`).

* :func:`chunked_batches` -- Morishita et al. (2017) as used in [T §4.2.2]: "we randomly shuffle
  the training data and read it in chunks of 10k examples. Each chunk is sorted by source length
  before being packed into minibatches of roughly 4096 source/target tokens each." The examples are
  shuffled, cut into chunks of ``chunk_size``, each chunk is sorted by source length then target
  length (ties keep the shuffled order), packed by the dataset's ``batch_by_size`` (fairseq's
  ``data_utils.batch_by_size``, which fairseq_ext's ``_compat`` makes keep the tail batch; datasets
  that batch specially, e.g. ``--concat-sep-batch``, keep doing so within each chunk), and the batch
  order is shuffled. Unlike fairseq's global sort, a batch only mixes examples of one chunk.
* :class:`VirtualEpochs` -- "an epoch is a predefined number of iterations" [T §6.3.1, Table 4.1]:
  epoch ``e`` is batches ``(e-1)*n .. e*n-1`` of the endless stream ``pass(1) + pass(2) + ...``, where
  a pass is one shuffled batch list over the whole training set (built again, with its own seed,
  for every pass). An epoch can thus end inside a pass and the next one continues there. It is a
  callable ``batch_sampler(dataset, epoch)`` for fairseq's ``EpochBatchIterator``, so fairseq's
  end-of-epoch validation, checkpointing, LR plateau steps, ``--max-epoch`` and ``--patience`` all
  count virtual epochs, and a checkpoint resumes at the right place (everything is a pure function
  of the seed and the epoch).
"""
from typing import Callable, List, Optional, Sequence

import numpy as np

BATCHING_MODES = ("sorted", "chunked")


def example_lengths(dataset) -> tuple:
    """``(src_lengths, tgt_lengths or None)`` of a fairseq dataset, as numpy arrays."""
    src = getattr(dataset, "src_sizes", None)
    tgt = getattr(dataset, "tgt_sizes", None)
    if src is None:
        sizes = np.asarray(dataset.sizes)
        src, tgt = (sizes[:, 0], sizes[:, 1]) if sizes.ndim == 2 else (sizes, None)
    return np.asarray(src), None if tgt is None else np.asarray(tgt)


def sort_chunk(chunk: np.ndarray, src: np.ndarray, tgt: Optional[np.ndarray]) -> np.ndarray:
    """``chunk`` (dataset indices) sorted by source length, then target length; stable, so equal
    lengths keep their order in ``chunk``."""
    keys = (src[chunk],) if tgt is None else (tgt[chunk], src[chunk])  # np.lexsort: last key first
    return chunk[np.lexsort(keys)]


def chunked_batches(dataset, indices: Sequence[int], rng: np.random.Generator, chunk_size: int,
                    max_tokens: Optional[int] = None, max_sentences: Optional[int] = None,
                    required_batch_size_multiple: int = 1) -> List[np.ndarray]:
    """Morishita batches of ``indices``, which must already be in random order (see module doc):
    chunks of ``chunk_size`` consecutive indices, each sorted by length and packed into batches of
    ``max_tokens`` / ``max_sentences``; the batch order is shuffled with ``rng``."""
    if chunk_size < 1:
        raise ValueError(f"--chunk-size must be >= 1, got {chunk_size}")
    indices = np.asarray(indices, dtype=np.int64)
    src, tgt = example_lengths(dataset)
    batches: List[np.ndarray] = []
    for start in range(0, len(indices), chunk_size):
        chunk = sort_chunk(indices[start:start + chunk_size], src, tgt)
        batches += [np.asarray(b, dtype=np.int64) for b in dataset.batch_by_size(
            chunk, max_tokens=max_tokens, max_sentences=max_sentences,
            required_batch_size_multiple=required_batch_size_multiple)]
    return [batches[i] for i in rng.permutation(len(batches))]


class VirtualEpochs:
    """Epochs of ``n`` batches cut from the endless stream of passes ``make_pass(1), make_pass(2),
    ...`` (each a list of batches); a callable ``batch_sampler(dataset, epoch)``.

    Pass lengths are remembered, and only the passes the last epoch touched are kept, so an epoch
    costs the passes it spans (resuming at epoch ``e`` rebuilds the passes before it once, to
    count their batches)."""

    def __init__(self, make_pass: Callable[[int], list], n: int):
        if n < 1:
            raise ValueError(f"--updates-per-epoch must be >= 1, got {n}")
        self.make_pass = make_pass
        self.n = n
        self.ends: List[int] = []  # ends[p-1]: stream position after pass p
        self._kept: dict = {}

    def _pass(self, p: int) -> list:
        if p not in self._kept:
            batches = list(self.make_pass(p))
            if not batches:
                raise ValueError("the training set gives no batch (all examples filtered out?)")
            self._kept[p] = batches
            if p == len(self.ends) + 1:
                self.ends.append((self.ends[-1] if self.ends else 0) + len(batches))
        return self._kept[p]

    def batches(self, epoch: int) -> list:
        """The ``n`` batches of ``epoch`` (1-based)."""
        start, stop = (epoch - 1) * self.n, epoch * self.n
        while not self.ends or self.ends[-1] < stop:
            p = len(self.ends) + 1
            self._pass(p)
            if self.ends[-1] <= start:  # wholly before this epoch: only its length matters
                del self._kept[p]
        p = int(np.searchsorted(self.ends, start, side="right")) + 1  # the pass holding position start
        out, pos = [], start
        while pos < stop:
            first = self.ends[p - 2] if p > 1 else 0
            out += self._pass(p)[pos - first:stop - first]
            pos = self.ends[p - 1]
            p += 1
        for q in [q for q in self._kept if self.ends[q - 1] <= stop]:
            del self._kept[q]  # wholly before the next epoch
        return out

    def __call__(self, dataset, epoch: int) -> list:
        return self.batches(epoch)

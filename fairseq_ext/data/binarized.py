"""Finding and scanning fairseq's binarized splits (``{split}[k].{src}-{tgt}.{lang}.bin/.idx``).

The one place that knows fairseq's file naming of a binarized data folder: used by the target
vocabulary mask at training time and by the offline tools that read binarized data.
"""
import os
import re
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch


def split_prefix(data_dir: str, split: str, src: Optional[str], tgt: str, lang: str,
                 shard: int = 0) -> Optional[str]:
    """The prefix ``DIR/{split}[shard].{a}-{b}.{lang}`` of an existing ``.bin``/``.idx`` pair, with the
    language pair in either order (fairseq-preprocess writes ``src-tgt``); ``None`` if absent."""
    name = split + (str(shard) if shard > 0 else "")
    for a, b in ((src, tgt), (tgt, src)):
        prefix = os.path.join(data_dir, f"{name}.{a}-{b}.{lang}")
        if os.path.exists(prefix + ".bin") and os.path.exists(prefix + ".idx"):
            return prefix
    return None


def split_prefixes(data: str, split: str, src: Optional[str], tgt: str,
                   lang: Optional[str] = None) -> List[str]:
    """Every shard's prefix (``train``, ``train1``, ...) of ``split`` on side ``lang`` (default the
    target) under each ``:``-separated folder of ``data``."""
    out = []
    for path in str(data).split(os.pathsep):
        k = 0
        while True:
            found = split_prefix(path, split, src, tgt, lang or tgt, shard=k)
            if found is None:
                break
            out.append(found)
            k += 1
    return out


def all_tokens(dataset) -> np.ndarray:
    """Every token id of a fairseq indexed dataset, concatenated (no per-sentence loop for mmap)."""
    from fairseq.data import ConcatDataset
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    if isinstance(dataset, ConcatDataset):
        return np.concatenate([all_tokens(d) for d in dataset.datasets])
    if isinstance(dataset, MMapIndexedDataset):
        return np.frombuffer(dataset._bin_buffer, dtype=dataset._index.dtype).astype(np.int64)
    return torch.cat([dataset[i] for i in range(len(dataset))]).numpy().astype(np.int64)


def target_token_counts(dictionary, data: str, src: Optional[str], tgt: str, split: str = "train"):
    """Frequency of every target-dictionary type on the target side of ``split`` (LongTensor [V]);
    ``None`` if the binarized split is not there."""
    from fairseq.data import data_utils

    prefixes = split_prefixes(data, split, src, tgt)
    if not prefixes:
        return None
    counts = np.zeros(len(dictionary), dtype=np.int64)
    for prefix in prefixes:
        ds = data_utils.load_indexed_dataset(prefix, dictionary)
        counts += np.bincount(all_tokens(ds), minlength=len(dictionary))[: len(dictionary)]
    return torch.from_numpy(counts)


def language_pairs(data_dir: str) -> List[Tuple[str, str]]:
    """The ``(src, tgt)`` pairs named by the ``{split}.{src}-{tgt}.{lang}.idx`` files of a binarized folder
    (sorted; normally one)."""
    pairs = set()
    if os.path.isdir(data_dir):
        for name in os.listdir(data_dir):
            m = re.match(r"^[^.]+\.([^.-]+)-([^.-]+)\.([^.]+)\.idx$", name)
            if m and m.group(3) in (m.group(1), m.group(2)):
                pairs.add((m.group(1), m.group(2)))
    return sorted(pairs)


def pair_splits(data_dir: str, src: str, tgt: str, splits: Sequence[str] = ("train", "valid", "test")) -> List[str]:
    """The splits of ``splits`` binarized on both sides in ``data_dir``."""
    return [sp for sp in splits
            if split_prefix(data_dir, sp, src, tgt, src) and split_prefix(data_dir, sp, src, tgt, tgt)]


def load_tokens(prefix: str):
    """The indexed dataset (token ids, no dictionary) at ``prefix``; ``FileNotFoundError`` if absent."""
    from fairseq.data import data_utils

    ds = data_utils.load_indexed_dataset(prefix, None)
    if ds is None:
        raise FileNotFoundError(f"no indexed dataset at {prefix}")
    return ds


def flat_view(ds) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(all tokens, element offset of every sequence) of an mmap indexed dataset, else ``None``."""
    index = getattr(ds, "_index", None)
    buf = getattr(ds, "_bin_buffer", None)
    if index is None or buf is None or not hasattr(index, "_pointers"):
        return None
    data = np.frombuffer(buf, dtype=index.dtype)
    return data, index._pointers // np.dtype(index.dtype).itemsize


def sequences(ds, strip_eos: Optional[int] = None) -> List[np.ndarray]:
    """All sequences of an indexed dataset as int arrays (a trailing ``strip_eos`` removed)."""
    flat = flat_view(ds)
    if flat is not None:
        data, offsets = flat
        data = np.array(data)  # a copy: views of the mmap die with the dataset object
        seqs = [data[o:o + n] for o, n in zip(offsets.tolist(), ds.sizes.tolist())]
    else:
        seqs = [ds[i].numpy() for i in range(len(ds))]
    if strip_eos is not None:
        seqs = [s[:-1] if len(s) and s[-1] == strip_eos else s for s in seqs]
    return seqs


def sequence_sums(ds) -> np.ndarray:
    """Σ of every sequence of an indexed dataset (vectorised for mmap datasets)."""
    sizes = np.asarray(ds.sizes, dtype=np.int64)
    flat = flat_view(ds)
    if flat is None:
        return np.array([int(ds[i].sum()) for i in range(len(ds))], dtype=np.int64)
    data, offsets = flat
    sums = np.zeros(len(sizes), dtype=np.int64)
    nz = sizes > 0
    if nz.any():
        sums[nz] = np.add.reduceat(data, offsets[nz], dtype=np.int64)
    return sums

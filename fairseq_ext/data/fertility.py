"""Fertility supervision for the NAT of Gu (2018) ch. 8: word alignment → per-source-word fertilities.

The NAT is trained with a fixed external fertility model q (Eq. 8.9): "the fast_align IBM-2 output".
Here the aligner is **eflomal** (an IBM-1/HMM/fertility Gibbs-sampling aligner, pip ``eflomal``) run on the
(source, target) pairs of a binarized folder — normally the *distilled* corpus of
:mod:`fairseq_ext.data.distill` — or a trivial ``diagonal`` alignment, or precomputed Pharaoh links (e.g.
``fast_align -d -o -v -N`` output, ``--links-dir``).

Fertility f_j = number of target tokens aligned to source token j, so that Σ_j f_j = T (spec 004b §0):

* the forward ("source → target", IBM direction) links are used: every target token has at most one
  source token; a target token aligned to several source tokens (symmetrised links) keeps the first;
* an **unaligned target token** (NULL) is given to the source token of the nearest aligned target token on
  its left, else on its right; a sentence without any link falls back to the diagonal alignment
  (target j → source ⌊(j + ½)·T'/T⌋);
* fertilities are **not clamped** when stored, so Σf = T always holds and the fertility-copy decoder input
  has exactly the target length; the criterion clamps only the classification target to L−1 (49);
* tokens are the binarized subwords, without ⟨eos⟩ (so the sequences are aligned with the binarized source
  minus its final ⟨eos⟩, and the sum is the target length minus ⟨eos⟩).

Storage: a fairseq mmap indexed dataset ``{split}.{src}-{tgt}.fert.{bin,idx}`` (``--name`` changes the
``fert`` part, e.g. ``fert_gt`` for ground-truth alignments) next to the bin files; the
``translation_fertility`` task loads it, checks Σf = T for every pair, and batches it with the source
(padding 0, same left/right padding as ``src_tokens``) as ``sample["fertility"]``.

Usage::

    python -m fairseq_ext.data.fertility data-bin-distill --src es --tgt en [--splits train valid test] \\
        [--aligner eflomal|diagonal] [--links-dir DIR] [--name fert]

All requested splits are aligned jointly (one eflomal run; the released code ran fast_align over
train+dev jointly) and a summary (mean/max fertility, NULL-aligned share, > L−1 count) is printed.
"""
import argparse
import glob
import json
import logging
import os
import re
import sys
import tempfile
import time
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import LanguagePairDataset, data_utils

logger = logging.getLogger("fairseq_ext.data.fertility")

ALIGNERS = ("eflomal", "diagonal", "links")
DEFAULT_NAME = "fert"
MAX_CLASS = 49  # L − 1 with the thesis' L = 50 classes (only reported here)


# ----------------------------------------------------------------------------------------------- links
def parse_links(line: str) -> np.ndarray:
    """Pharaoh ``i-j`` pairs (source i, target j, 0-indexed) → (K, 2) int array."""
    pairs = [tuple(map(int, p.split("-"))) for p in line.split()]
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def diagonal_owner(src_len: int, tgt_len: int) -> np.ndarray:
    """The trivial alignment: target j → source ⌊(j + ½)·T'/T⌋."""
    j = np.arange(tgt_len)
    return np.minimum(((2 * j + 1) * src_len) // (2 * max(tgt_len, 1)), max(src_len - 1, 0))


def fertility_from_links(links: np.ndarray, src_len: int, tgt_len: int) -> np.ndarray:
    """Fertilities (src_len,) from links (K, 2) with Σ f = tgt_len (rules in the module docstring)."""
    if src_len == 0:
        if tgt_len:
            raise ValueError("an empty source cannot generate a non-empty target")
        return np.zeros(0, dtype=np.int64)
    owner = np.full(tgt_len, -1, dtype=np.int64)
    if len(links):
        links = links[(links[:, 0] >= 0) & (links[:, 0] < src_len) & (links[:, 1] >= 0) & (links[:, 1] < tgt_len)]
        # a target token with several links keeps the one with the smallest source index
        links = links[np.lexsort((links[:, 0], links[:, 1]))]
        tj, first = np.unique(links[:, 1], return_index=True)
        owner[tj] = links[first, 0]
    aligned = owner >= 0
    if not aligned.any():
        owner = diagonal_owner(src_len, tgt_len)
    elif not aligned.all():
        pos = np.arange(tgt_len)
        left = np.maximum.accumulate(np.where(aligned, pos, -1))
        right = np.minimum.accumulate(np.where(aligned, pos, tgt_len)[::-1])[::-1]
        take = np.where(left >= 0, left, right)
        owner = owner[take]
    return np.bincount(owner, minlength=src_len).astype(np.int64)


def align_eflomal(src_lines: Sequence[str], tgt_lines: Sequence[str], model: int = 3,
                  seed: Optional[int] = None) -> List[str]:
    """Forward eflomal links (one Pharaoh line per pair) for whitespace-tokenised sentences."""
    try:
        import eflomal
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise SystemExit("eflomal is not installed: PIP_CONSTRAINT=constraints.txt pip install eflomal==2.0.0 "
                         "(or use --aligner diagonal / --links-dir)") from e
    if seed is not None:
        np.random.seed(seed)
    aligner = eflomal.Aligner(model=model)
    with tempfile.TemporaryDirectory() as tmp:
        fwd = os.path.join(tmp, "fwd.links")
        aligner.align(list(src_lines), list(tgt_lines), links_filename_fwd=fwd, quiet=True)
        with open(fwd, encoding="utf-8") as f:
            out = [line.rstrip("\n") for line in f]
    if len(out) != len(src_lines):
        raise RuntimeError(f"eflomal returned {len(out)} alignments for {len(src_lines)} pairs")
    return out


# ----------------------------------------------------------------------------------------------- files
def fertility_prefix(data_dir: str, split: str, src: str, tgt: str, name: str = DEFAULT_NAME) -> str:
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{name}")


def _pair_prefix(data_dir: str, split: str, src: str, tgt: str, lang: str) -> Optional[str]:
    from fairseq.data import indexed_dataset

    for a, b in ((src, tgt), (tgt, src)):
        p = os.path.join(data_dir, f"{split}.{a}-{b}.{lang}")
        if indexed_dataset.dataset_exists(p, impl="mmap") or indexed_dataset.dataset_exists(p, impl="cached"):
            return p
    return None


def infer_pair(data_dir: str) -> Tuple[str, str]:
    """(src, tgt) from the ``{split}.{src}-{tgt}.{lang}.idx`` names of a binarized folder."""
    pairs = set()
    for path in glob.glob(os.path.join(data_dir, "*.idx")):
        m = re.match(r"^[^.]+\.([^.-]+)-([^.-]+)\.([^.]+)\.idx$", os.path.basename(path))
        if m and m.group(3) in (m.group(1), m.group(2)):
            pairs.add((m.group(1), m.group(2)))
    if len(pairs) != 1:
        raise SystemExit(f"cannot infer the language pair of {data_dir} ({sorted(pairs)}); give --src/--tgt")
    return pairs.pop()


def load_token_dataset(prefix: str):
    from fairseq.data import data_utils

    ds = data_utils.load_indexed_dataset(prefix, None)
    if ds is None:
        raise FileNotFoundError(f"no indexed dataset at {prefix}")
    return ds


def sequences(ds, strip_eos: Optional[int] = None) -> List[np.ndarray]:
    """All sequences of an indexed dataset as int arrays (trailing ``strip_eos`` removed)."""
    flat = _flat_view(ds)
    if flat is not None:
        data, offsets = flat
        data = np.array(data)  # a copy: views of the mmap die with the dataset object
        seqs = [data[o:o + n] for o, n in zip(offsets.tolist(), ds.sizes.tolist())]
    else:
        seqs = [ds[i].numpy() for i in range(len(ds))]
    if strip_eos is not None:
        seqs = [s[:-1] if len(s) and s[-1] == strip_eos else s for s in seqs]
    return seqs


def _flat_view(ds):
    """(all tokens, element offset of every sequence) of an mmap indexed dataset, else None."""
    index = getattr(ds, "_index", None)
    buf = getattr(ds, "_bin_buffer", None)
    if index is None or buf is None or not hasattr(index, "_pointers"):
        return None
    data = np.frombuffer(buf, dtype=index.dtype)
    return data, index._pointers // np.dtype(index.dtype).itemsize


def sequence_sums(ds) -> np.ndarray:
    """Σ of every sequence of an indexed dataset (vectorised for mmap datasets)."""
    sizes = np.asarray(ds.sizes, dtype=np.int64)
    flat = _flat_view(ds)
    if flat is None:
        return np.array([int(ds[i].sum()) for i in range(len(ds))], dtype=np.int64)
    data, offsets = flat
    sums = np.zeros(len(sizes), dtype=np.int64)
    nz = sizes > 0
    if nz.any():
        sums[nz] = np.add.reduceat(data, offsets[nz], dtype=np.int64)
    return sums


def write_fertility(prefix: str, fertilities: Iterable[np.ndarray]) -> None:
    """Write an mmap indexed dataset (uint16) of fertility sequences; atomic (temp names + rename)."""
    from fairseq.data import indexed_dataset

    tmp = f"{prefix}.tmp-{os.getpid()}"
    builder = indexed_dataset.MMapIndexedDatasetBuilder(indexed_dataset.data_file_path(tmp), dtype=np.uint16)
    for f in fertilities:
        if len(f) and int(np.max(f)) >= 65535:
            raise ValueError("fertility too large for uint16")
        builder.add_item(torch.from_numpy(np.asarray(f, dtype=np.int64)))
    builder.finalize(indexed_dataset.index_file_path(tmp))
    os.replace(indexed_dataset.data_file_path(tmp), indexed_dataset.data_file_path(prefix))
    os.replace(indexed_dataset.index_file_path(tmp), indexed_dataset.index_file_path(prefix))


def check_fertility(fert_ds, src_sizes: np.ndarray, tgt_sizes: Optional[np.ndarray], where: str = "") -> None:
    """Validate a fertility dataset against the source/target sizes of a language-pair dataset (sizes
    include the final ⟨eos⟩): one entry per pair, one value per source word, Σf = target length."""
    if len(fert_ds) != len(src_sizes):
        raise ValueError(f"{where}: {len(fert_ds)} fertility sequences for {len(src_sizes)} pairs")
    fsz = np.asarray(fert_ds.sizes, dtype=np.int64)
    ssz = np.asarray(src_sizes, dtype=np.int64)
    bad = np.flatnonzero((fsz != ssz - 1) & (fsz != ssz))
    if len(bad):
        raise ValueError(f"{where}: fertility lengths differ from the source lengths for {len(bad)} pairs "
                         f"(first: {bad[:5].tolist()})")
    if tgt_sizes is not None:
        sums = sequence_sums(fert_ds)
        bad = np.flatnonzero(sums != np.asarray(tgt_sizes, dtype=np.int64) - 1)
        if len(bad):
            raise ValueError(f"{where}: Σ fertility ≠ target length for {len(bad)} pairs (first: "
                             f"{bad[:5].tolist()}); were the fertilities computed on these targets?")


# ----------------------------------------------------------------------------------------------- dataset
class FertilityLanguagePairDataset(LanguagePairDataset):
    """fairseq's ``LanguagePairDataset`` + fertilities, for the NAT (spec 004b §0 "fertility loader").

    * ``sample["fertility"]`` (B, S) long: the q-fertility of each source position, padded with 0 exactly
      like ``net_input.src_tokens`` (left or right), 0 at the source ⟨eos⟩;
    * targets have no ⟨eos⟩ (the NAT's T = Σf counts only words, spec §3.9.10), and no
      ``prev_output_tokens`` are built.
    """

    @classmethod
    def wrap(cls, base, fertility=None, strip_target_eos: bool = True):
        """The dataset with the state of the ``LanguagePairDataset`` ``base`` (as built by fairseq's
        ``load_langpair_dataset``) plus ``fertility`` (an indexed dataset or None)."""
        obj = cls.__new__(cls)
        obj.__dict__.update(base.__dict__)
        obj.fertility = fertility
        obj.strip_target_eos = strip_target_eos
        obj.input_feeding = False
        return obj

    def __getitem__(self, index):
        ex = super().__getitem__(index)
        tgt = ex.get("target")
        if self.strip_target_eos and tgt is not None and len(tgt) and int(tgt[-1]) == self.eos:
            ex["target"] = tgt[:-1]
        if self.fertility is not None:
            f = self.fertility[index].long()
            n = len(ex["source"])
            if len(f) < n:
                f = torch.cat([f, f.new_zeros(n - len(f))])
            elif len(f) > n:
                raise ValueError(f"pair {index}: {len(f)} fertilities for {n} source tokens")
            ex["fertility"] = f
        return ex

    def collater(self, samples, pad_to_length=None):
        res = super().collater(samples, pad_to_length)
        if not samples or not res or self.fertility is None:
            return res
        by_id = {int(s["id"]): s["fertility"] for s in samples}
        src = res["net_input"]["src_tokens"]
        res["fertility"] = data_utils.collate_tokens(
            [by_id[int(i)] for i in res["id"]], pad_idx=0, left_pad=self.left_pad_source,
            pad_to_length=src.size(1))
        return res

    @property
    def supports_prefetch(self):
        return super().supports_prefetch and (self.fertility is None or getattr(self.fertility, "supports_prefetch", False))

    def prefetch(self, indices):
        super().prefetch(indices)
        if self.fertility is not None:
            self.fertility.prefetch(indices)


# ----------------------------------------------------------------------------------------------- CLI
def compute_fertilities(data_dir: str, src: str, tgt: str, splits: Sequence[str], aligner: str = "eflomal",
                        links_dir: Optional[str] = None, name: str = DEFAULT_NAME, eflomal_model: int = 3,
                        seed: Optional[int] = 1, log=print) -> dict:
    """Align the splits of ``data_dir`` (jointly), write ``{split}.{src}-{tgt}.{name}`` and return stats."""
    from fairseq.data import Dictionary

    t0 = time.time()
    dict_path = os.path.join(data_dir, f"dict.{tgt}.txt")
    eos = Dictionary.load(dict_path).eos() if os.path.exists(dict_path) else 2
    data = {}
    for split in splits:
        sp, tp = _pair_prefix(data_dir, split, src, tgt, src), _pair_prefix(data_dir, split, src, tgt, tgt)
        if sp is None or tp is None:
            raise SystemExit(f"{data_dir}: no binarized {split}.{src}-{tgt} source and target")
        s, t = sequences(load_token_dataset(sp), eos), sequences(load_token_dataset(tp), eos)
        if len(s) != len(t):
            raise SystemExit(f"{split}: {len(s)} sources vs {len(t)} targets")
        data[split] = (s, t)
    n_total = sum(len(s) for s, _ in data.values())
    log(f"[fertility] {n_total} pairs ({', '.join(f'{k} {len(v[0])}' for k, v in data.items())}); aligner {aligner}")

    links = {}
    if aligner == "eflomal":
        src_lines = [" ".join(map(str, x)) for sp in splits for x in data[sp][0]]
        tgt_lines = [" ".join(map(str, x)) for sp in splits for x in data[sp][1]]
        # eflomal cannot read an empty sentence: give such pairs the diagonal fallback
        empty = [i for i, (a, b) in enumerate(zip(src_lines, tgt_lines)) if not a or not b]
        for i in empty:
            src_lines[i] = src_lines[i] or "0"
            tgt_lines[i] = tgt_lines[i] or "0"
        all_links = align_eflomal(src_lines, tgt_lines, model=eflomal_model, seed=seed)
        for i in empty:
            all_links[i] = ""
        k = 0
        for sp in splits:
            n = len(data[sp][0])
            links[sp] = all_links[k:k + n]
            k += n
        log(f"[fertility] eflomal aligned {n_total} pairs in {time.time() - t0:.1f}s")
    elif aligner == "links":
        if not links_dir:
            raise SystemExit("--aligner links needs --links-dir with {split}.links (Pharaoh i-j lines)")
        for sp in splits:
            with open(os.path.join(links_dir, f"{sp}.links"), encoding="utf-8") as f:
                links[sp] = [line.rstrip("\n") for line in f]
            if len(links[sp]) != len(data[sp][0]):
                raise SystemExit(f"{sp}.links: {len(links[sp])} lines for {len(data[sp][0])} pairs")
    elif aligner != "diagonal":
        raise SystemExit(f"unknown aligner {aligner!r}")

    stats = {"aligner": aligner, "name": name, "splits": {}}
    for sp in splits:
        srcs, tgts = data[sp]
        ferts, null, ntgt = [], 0, 0
        for i, (s, t) in enumerate(zip(srcs, tgts)):
            lk = parse_links(links[sp][i]) if sp in links else np.zeros((0, 2), dtype=np.int64)
            if sp in links:
                aligned = np.unique(lk[:, 1][(lk[:, 1] < len(t)) & (lk[:, 0] < len(s))]) if len(lk) else []
                null += len(t) - len(aligned)
            ntgt += len(t)
            f = fertility_from_links(lk, len(s), len(t))
            assert f.sum() == len(t)
            ferts.append(f)
        write_fertility(fertility_prefix(data_dir, sp, src, tgt, name), ferts)
        allf = np.concatenate(ferts) if ferts else np.zeros(0)
        stats["splits"][sp] = {
            "pairs": len(ferts), "source_words": int(allf.size), "target_tokens": ntgt,
            "mean_fertility": round(float(allf.mean()), 4) if allf.size else 0.0,
            "max_fertility": int(allf.max()) if allf.size else 0,
            "zero_fertility_share": round(float((allf == 0).mean()), 4) if allf.size else 0.0,
            "null_aligned_target_share": round(null / max(ntgt, 1), 4) if sp in links else None,
            f"above_{MAX_CLASS}": int((allf > MAX_CLASS).sum()),
        }
        log(f"[fertility] {sp}: {json.dumps(stats['splits'][sp])} -> {fertility_prefix(data_dir, sp, src, tgt, name)}")
    with open(os.path.join(data_dir, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1)
    return stats


def _splits_present(data_dir: str, src: str, tgt: str) -> List[str]:
    found = []
    for split in ("train", "valid", "test"):
        if _pair_prefix(data_dir, split, src, tgt, src) and _pair_prefix(data_dir, split, src, tgt, tgt):
            found.append(split)
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fairseq_ext.data.fertility",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="binarized folder (fairseq-preprocess output, e.g. the distilled corpus)")
    ap.add_argument("--src", help="source language (inferred from the file names if omitted)")
    ap.add_argument("--tgt", help="target language")
    ap.add_argument("--splits", nargs="+", help="splits to align (default: every split with both sides)")
    ap.add_argument("--aligner", choices=ALIGNERS, default="eflomal",
                    help="eflomal (default), diagonal (trivial), links (read --links-dir/{split}.links)")
    ap.add_argument("--links-dir", help="folder of precomputed Pharaoh links {split}.links (source-target)")
    ap.add_argument("--name", default=DEFAULT_NAME, help="dataset name: {split}.{src}-{tgt}.NAME (default fert)")
    ap.add_argument("--eflomal-model", type=int, choices=(1, 2, 3), default=3,
                    help="eflomal model: 1 IBM1, 2 +HMM, 3 +fertility (default)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    src, tgt = (a.src, a.tgt) if a.src and a.tgt else infer_pair(a.data)
    splits = a.splits or _splits_present(a.data, src, tgt)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    compute_fertilities(a.data, src, tgt, splits, a.aligner, a.links_dir, a.name, a.eflomal_model, a.seed, log=log)
    return 0


if __name__ == "__main__":
    sys.exit(main())

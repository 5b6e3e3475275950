"""Fertility supervision of the NAT of Gu (2018) ch. 8 at training time: the fertility dataset.

Fertility f_j = number of target tokens aligned to source token j, with Σ_j f_j = T; the
offline tool :mod:`fairseq_ext.tools.corpora.fertility` computes them (eflomal / diagonal / given links) and writes
them as a fairseq mmap indexed dataset ``{split}.{src}-{tgt}.fert.{bin,idx}`` (:func:`fertility_prefix`;
another ``name`` than ``fert``, e.g. ``fert_gt``, for other alignments) next to the bin files.  The
``translation_fertility`` task loads it, checks it (:func:`check_fertility`: one value per source word,
Σf = target length) and batches it with the source (:class:`FertilityLanguagePairDataset`).
"""
import os
from typing import Optional

import numpy as np
import torch
from fairseq.data import LanguagePairDataset, data_utils

from fairseq_ext.data.binarized import sequence_sums

DEFAULT_NAME = "fert"


def fertility_prefix(data_dir: str, split: str, src: str, tgt: str, name: str = DEFAULT_NAME) -> str:
    """``DIR/{split}.{src}-{tgt}.{name}``: where the fertilities of a split live."""
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{name}")


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
    """fairseq's ``LanguagePairDataset`` + fertilities, for the NAT.

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

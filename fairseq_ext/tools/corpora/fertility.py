"""Fertilities for the NAT of Gu (2018) ch. 8 (offline): word alignment → per-source-word fertilities.

The NAT is trained with a fixed external fertility model q (Eq. 8.9): "the fast_align IBM-2 output".
Here the aligner is **eflomal** (an IBM-1/HMM/fertility Gibbs-sampling aligner, pip ``eflomal``) run on the
(source, target) pairs of a binarized folder — normally the *distilled* corpus of
:mod:`fairseq_ext.tools.corpora.distill` — or a trivial ``diagonal`` alignment, or precomputed Pharaoh links (e.g.
``fast_align -d -o -v -N`` output, ``--links-dir``).

Fertility f_j = number of target tokens aligned to source token j, so that Σ_j f_j = T:

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
``translation_fertility`` task loads it with :mod:`fairseq_ext.data.fertility` (the training-time half),
checks Σf = T for every pair, and batches it with the source (padding 0, same left/right padding as
``src_tokens``) as ``sample["fertility"]``.

Usage::

    python -m fairseq_ext.tools.corpora.fertility data-bin-distill --src es --tgt en [--splits train valid test] \\
        [--aligner eflomal|diagonal] [--links-dir DIR] [--name fert]

All requested splits are aligned jointly (one eflomal run; the released code ran fast_align over
train+dev jointly) and a summary (mean/max fertility, NULL-aligned share, > L−1 count) is printed.
"""
import os
import tempfile
import time
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fairseq_ext.data.binarized import language_pairs, load_tokens, pair_splits, sequences, split_prefix
from fairseq_ext.data.fertility import DEFAULT_NAME, fertility_prefix
from fairseq_ext.tools.common import ArgumentParser, ToolError, json_line, log, read_lines, run_cli, write_json

ALIGNERS = ("eflomal", "diagonal", "links")
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
        raise ToolError("eflomal is not installed: PIP_CONSTRAINT=constraints.txt pip install eflomal==2.0.0 "
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
def infer_pair(data_dir: str) -> Tuple[str, str]:
    """(src, tgt) from the ``{split}.{src}-{tgt}.{lang}.idx`` names of a binarized folder."""
    if not os.path.isdir(data_dir):
        raise ToolError(f"missing input folder: {data_dir}")
    pairs = language_pairs(data_dir)
    if len(pairs) != 1:
        raise ToolError(f"cannot infer the language pair ({pairs}); give --src/--tgt", data_dir)
    return pairs[0]


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


# ----------------------------------------------------------------------------------------------- CLI
def compute_fertilities(data_dir: str, src: str, tgt: str, splits: Sequence[str], aligner: str = "eflomal",
                        links_dir: Optional[str] = None, name: str = DEFAULT_NAME, eflomal_model: int = 3,
                        seed: Optional[int] = 1, log=log) -> dict:
    """Align the splits of ``data_dir`` (jointly), write ``{split}.{src}-{tgt}.{name}`` and return stats."""
    from fairseq.data import Dictionary

    t0 = time.time()
    dict_path = os.path.join(data_dir, f"dict.{tgt}.txt")
    eos = Dictionary.load(dict_path).eos() if os.path.exists(dict_path) else 2
    data = {}
    for split in splits:
        sp, tp = split_prefix(data_dir, split, src, tgt, src), split_prefix(data_dir, split, src, tgt, tgt)
        if sp is None or tp is None:
            raise ToolError(f"no binarized {split}.{src}-{tgt} source and target", data_dir)
        s, t = sequences(load_tokens(sp), eos), sequences(load_tokens(tp), eos)
        if len(s) != len(t):
            raise ToolError(f"{len(s)} sources but {tp} has {len(t)} targets", sp)
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
            raise ToolError("--aligner links needs --links-dir with {split}.links (Pharaoh i-j lines)")
        for sp in splits:
            path = os.path.join(links_dir, f"{sp}.links")
            links[sp] = read_lines(path)
            if len(links[sp]) != len(data[sp][0]):
                raise ToolError(f"{len(links[sp])} lines for {len(data[sp][0])} pairs", path)
    elif aligner != "diagonal":
        raise ToolError(f"unknown aligner {aligner!r}; known: {', '.join(ALIGNERS)}")

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
        log(f"[fertility] {sp}: {json_line(stats['splits'][sp])} -> {fertility_prefix(data_dir, sp, src, tgt, name)}")
    write_json(os.path.join(data_dir, f"{name}.json"), stats)
    return stats


def main(argv=None) -> int:
    ap = ArgumentParser(prog="fairseq-ext-fertility", description=__doc__.split("\n\n")[0])
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
    src, tgt = (a.src, a.tgt) if a.src and a.tgt else infer_pair(a.data)
    splits = a.splits or pair_splits(a.data, src, tgt)
    compute_fertilities(a.data, src, tgt, splits, a.aligner, a.links_dir, a.name, a.eflomal_model, a.seed)
    return 0


def cli_main(argv=None) -> None:
    """Console script ``fairseq-ext-fertility``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

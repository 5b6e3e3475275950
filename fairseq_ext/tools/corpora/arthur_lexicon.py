"""Discrete translation lexicon p_l(e | f) for the Arthur et al. (2016) baseline of Nguyen (2021) ch. 5
(thesis §5.5.2): the ``auto`` lexicon of Arthur et al., estimated from word alignments of
the training data and integrated by the model as the bias log(L_f a_t + ε)
(``--arthur-lexicon``, :class:`fairseq_ext.modules.lexical.DiscreteLexiconBias`).

The thesis used GIZA++; GIZA++ is not on PyPI, so the alignments come from **eflomal** (a documented
substitute — a deviation), run through :func:`fairseq_ext.tools.corpora.fertility.align_eflomal`
on the segmented training pairs, or from any precomputed Pharaoh file (``--links``: GIZA++ or fast_align
output over the same tokens, one ``i-j`` line per pair, source index first).

Estimate: p_l(e | f) = count(f, e) / count(f), the relative frequency of the alignment links, where
count(f, e) counts links between source type f and target type e and count(f) = Σ_e count(f, e) the
links of f (unaligned words add nothing). Each row keeps its top-k entries (``--topk``, default 100;
ties by target id) without renormalising, so Σ_e p_l(e | f) ≤ 1. The sentence ends are linked to each
other (one </s>–</s> link per pair, so p_l(</s> | </s>) = 1; ``--no-eos-link`` to leave </s> out).
Types are the fairseq dictionary entries (tokens outside the dictionary count as <unk>).

Input (``--data``):

* a binarized folder (fairseq-preprocess mmap/cached output): ``{split}.{src}-{tgt}.{lang}.{bin,idx}``
  and ``dict.{lang}.txt``;
* a ``--dataset-impl raw`` folder: the text files ``{split}.{src}-{tgt}.{lang}`` and ``dict.{lang}.txt``;
* a segmented folder (``corpora bpe`` output): ``{split}.{lang}``, with the dictionaries in
  ``--dict-dir`` (default: the folder itself, else its ``bin`` subfolder).

Output (``torch.save``; read with :func:`load_lexicon`): ``indices`` (2, nnz) long (f, e), ``values``
(nnz,) float, ``shape`` (|V_f|, |V_e|), the SHA-256 of both dictionaries' symbol lists (a model built on
other dictionaries refuses the file with a clear error) and how it was built.

Usage::

    python -m fairseq_ext.tools.corpora.arthur_lexicon --data data-bin --src es --tgt en --out lex.pt \\
        [--topk 100] [--split train] [--links train.links] [--dict-dir DIR] [--eflomal-model 3]

Bad input (missing files, line-count mismatch, malformed or out-of-range links, invalid UTF-8, empty
segments) is one ``error: file:line: …`` line and exit status 2.
"""
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from fairseq_ext.data.binarized import language_pairs, load_tokens, sequences, split_prefix
from fairseq_ext.data.lexicon_file import FORMAT, LexiconMismatchError, dictionary_sha256, load_lexicon
from fairseq_ext.tools.common import ArgumentParser, ToolError, atomic_write, log, read_lines, require_file, run_cli
from fairseq_ext.tools.corpora.folder_checks import check_parallel, resolve_pair
from fairseq_ext.tools.corpora.fertility import align_eflomal, parse_links

__all__ = ["FORMAT", "LexiconMismatchError", "build_lexicon", "dictionary_sha256", "estimate_lexicon",
           "load_lexicon", "main", "save_lexicon"]

DEFAULT_TOPK = 100


# ------------------------------------------------------------------------------------- estimate
def estimate_lexicon(src_seqs: Sequence[np.ndarray], tgt_seqs: Sequence[np.ndarray], links: Sequence[str],
                     n_src: int, n_tgt: int, topk: int = DEFAULT_TOPK, eos: Optional[Tuple[int, int]] = None,
                     links_name: str = "links") -> Tuple[torch.Tensor, torch.Tensor]:
    """p_l(e | f) = count(f, e) / Σ_e' count(f, e') from the Pharaoh ``links`` of the id sequences (no
    </s>), top-``topk`` per f. ``eos`` = (source </s>, target </s>) adds one link between them per pair.
    Returns the COO ``indices`` (2, nnz) and ``values`` (nnz,), rows sorted by f then decreasing p."""
    if topk < 1:
        raise ToolError(f"--topk must be at least 1 (got {topk})")
    fs, es = [], []
    for i, (s, t, line) in enumerate(zip(src_seqs, tgt_seqs, links), 1):
        try:
            lk = parse_links(line)
        except ValueError:
            raise ToolError(f"not Pharaoh links (i-j pairs): {line[:80]!r}", links_name, i) from None
        if len(lk) and (lk.min() < 0 or lk[:, 0].max() >= len(s) or lk[:, 1].max() >= len(t)):
            raise ToolError(f"link outside the {len(s)}x{len(t)} sentence pair ({line[:80]!r})", links_name, i)
        fs.append(np.asarray(s, dtype=np.int64)[lk[:, 0]])
        es.append(np.asarray(t, dtype=np.int64)[lk[:, 1]])
    f = np.concatenate(fs) if fs else np.zeros(0, dtype=np.int64)
    e = np.concatenate(es) if es else np.zeros(0, dtype=np.int64)
    if eos is not None and len(src_seqs):
        f = np.concatenate([f, np.full(len(src_seqs), eos[0], dtype=np.int64)])
        e = np.concatenate([e, np.full(len(src_seqs), eos[1], dtype=np.int64)])
    pairs, counts = np.unique(f * n_tgt + e, return_counts=True)
    f, e = pairs // n_tgt, pairs % n_tgt
    p = counts / np.bincount(f, weights=counts, minlength=n_src)[f]
    order = np.lexsort((e, -p, f))
    f, e, p = f[order], e[order], p[order]
    first = np.searchsorted(f, f)  # start of each f's run
    keep = (np.arange(len(f)) - first) < topk
    indices = torch.from_numpy(np.stack([f[keep], e[keep]]))
    return indices, torch.from_numpy(p[keep]).float()


# ------------------------------------------------------------------------------------- files
def save_lexicon(path: str, indices: torch.Tensor, values: torch.Tensor, src_dict, tgt_dict, **meta) -> None:
    obj = {"format": FORMAT, "indices": indices.long(), "values": values.float(),
           "shape": (len(src_dict), len(tgt_dict)),
           "src_dict_sha256": dictionary_sha256(src_dict), "tgt_dict_sha256": dictionary_sha256(tgt_dict)}
    obj.update(meta)
    with atomic_write(path, "wb", encoding=None) as f:
        torch.save(obj, f)


def load_dictionary(path: str):
    from fairseq.data import Dictionary

    require_file(path, "dictionary")
    try:
        return Dictionary.load(path)
    except (ValueError, RuntimeError) as e:
        raise ToolError(f"not a fairseq dictionary ({e})", path) from None


def text_ids(path: str, d) -> List[np.ndarray]:
    return [d.encode_line(line, add_if_not_exist=False, append_eos=False).numpy().astype(np.int64)
            for line in read_lines(path)]


def read_pairs(data: str, src: Optional[str], tgt: Optional[str], split: str = "train",
               dict_dir: Optional[str] = None):
    """(src, tgt, source sequences, target sequences, eflomal source lines, eflomal target lines,
    source dictionary, target dictionary) of one split of a binarized, raw or segmented folder."""
    if not os.path.isdir(data):
        raise ToolError(f"missing input folder: {data}")
    if not (src and tgt):
        pairs = language_pairs(data)
        src, tgt = pairs[0] if len(pairs) == 1 else resolve_pair(data, src, tgt)
    sp, tp = split_prefix(data, split, src, tgt, src), split_prefix(data, split, src, tgt, tgt)
    if sp and tp:  # binarized: the eflomal tokens are the ids
        src_dict = load_dictionary(os.path.join(data, f"dict.{src}.txt"))
        tgt_dict = load_dictionary(os.path.join(data, f"dict.{tgt}.txt"))
        s = sequences(load_tokens(sp), src_dict.eos())
        t = sequences(load_tokens(tp), tgt_dict.eos())
        if len(s) != len(t):
            raise ToolError(f"{len(s)} sentences but {tp} has {len(t)}", sp)
        return (src, tgt, s, t, [" ".join(map(str, x)) for x in s], [" ".join(map(str, x)) for x in t],
                src_dict, tgt_dict)
    raw = [os.path.join(data, f"{split}.{a}-{b}") for a, b in ((src, tgt), (tgt, src))]
    raw = [p for p in raw if os.path.isfile(f"{p}.{src}") and os.path.isfile(f"{p}.{tgt}")]
    if raw:  # fairseq-preprocess --dataset-impl raw
        paths, dict_dir = [f"{raw[0]}.{src}", f"{raw[0]}.{tgt}"], data
    else:
        paths = [os.path.join(data, f"{split}.{lang}") for lang in (src, tgt)]
        for p in paths:
            require_file(p, f"{split} file (binarized, raw or segmented)")
        if dict_dir is None:
            dict_dir = data if os.path.isfile(os.path.join(data, f"dict.{src}.txt")) else os.path.join(data, "bin")
    check_parallel(paths, max_len=None)
    src_dict = load_dictionary(os.path.join(dict_dir, f"dict.{src}.txt"))
    tgt_dict = load_dictionary(os.path.join(dict_dir, f"dict.{tgt}.txt"))
    return (src, tgt, text_ids(paths[0], src_dict), text_ids(paths[1], tgt_dict),
            read_lines(paths[0]), read_lines(paths[1]), src_dict, tgt_dict)


def align(src_lines: List[str], tgt_lines: List[str], links: Optional[str] = None, eflomal_model: int = 3,
          seed: int = 1) -> List[str]:
    """Forward (source→target) Pharaoh links, one line per pair: from the ``links`` file or eflomal."""
    if links:
        out = read_lines(links)
        if len(out) != len(src_lines):
            raise ToolError(f"{len(out)} lines for {len(src_lines)} sentence pairs", links)
        return out
    keep = [i for i, (a, b) in enumerate(zip(src_lines, tgt_lines)) if a.strip() and b.strip()]
    out = [""] * len(src_lines)  # eflomal cannot read empty sentences: they get no links
    if keep:
        aligned = align_eflomal([src_lines[i] for i in keep], [tgt_lines[i] for i in keep],
                                model=eflomal_model, seed=seed)
        for i, line in zip(keep, aligned):
            out[i] = line
    return out


def build_lexicon(data: str, out: str, src: Optional[str] = None, tgt: Optional[str] = None,
                  topk: int = DEFAULT_TOPK, split: str = "train", links: Optional[str] = None,
                  dict_dir: Optional[str] = None, eflomal_model: int = 3, seed: int = 1,
                  eos_link: bool = True) -> dict:
    """Align ``split`` of ``data``, estimate p_l(e | f), write ``out``; returns a summary."""
    src, tgt, s, t, s_lines, t_lines, src_dict, tgt_dict = read_pairs(data, src, tgt, split, dict_dir)
    log(f"[arthur_lexicon] {len(s)} {split} pairs {src}-{tgt}; aligner {'links' if links else 'eflomal'}")
    pharaoh = align(s_lines, t_lines, links, eflomal_model, seed)
    indices, values = estimate_lexicon(s, t, pharaoh, len(src_dict), len(tgt_dict), topk,
                                       (src_dict.eos(), tgt_dict.eos()) if eos_link else None,
                                       links_name=links or "eflomal links")
    summary = {"src": src, "tgt": tgt, "split": split, "pairs": len(s), "topk": topk,
               "aligner": f"links:{os.path.basename(links)}" if links else f"eflomal-{eflomal_model}",
               "links": int(sum(len(x.split()) for x in pharaoh)), "eos_link": eos_link,
               "entries": int(values.numel()), "source_types": int(torch.unique(indices[0]).numel())}
    save_lexicon(out, indices, values, src_dict, tgt_dict, **summary)
    log(f"[arthur_lexicon] {summary['links']} links -> {summary['entries']} entries for "
        f"{summary['source_types']} source types (top {topk}) -> {out}")
    return summary


# ------------------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="fairseq-ext-arthur-lexicon", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="binarized, raw or segmented folder of the training data")
    ap.add_argument("--src", help="source language (inferred from the folder when possible)")
    ap.add_argument("--tgt", help="target language")
    ap.add_argument("--out", required=True, help="output lexicon file (.pt) for --arthur-lexicon")
    ap.add_argument("--topk", type=int, default=DEFAULT_TOPK,
                    help=f"entries kept per source type (default {DEFAULT_TOPK})")
    ap.add_argument("--split", default="train", help="split to align (default train)")
    ap.add_argument("--links", help="precomputed Pharaoh links (source-target, one line per pair of the "
                                    "split, over the same tokens) instead of eflomal")
    ap.add_argument("--dict-dir", help="folder of dict.{src,tgt}.txt for a segmented --data")
    ap.add_argument("--eflomal-model", type=int, choices=(1, 2, 3), default=3,
                    help="eflomal model: 1 IBM1, 2 +HMM, 3 +fertility (default)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-eos-link", dest="eos_link", action="store_false",
                    help="do not link the sentence ends (</s> gets no lexicon entry)")
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    build_lexicon(a.data, a.out, a.src, a.tgt, a.topk, a.split, a.links, a.dict_dir, a.eflomal_model,
                  a.seed, a.eos_link)
    return 0


def cli_main(argv=None) -> None:
    """Console script ``fairseq-ext-arthur-lexicon``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

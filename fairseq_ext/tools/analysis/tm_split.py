r"""The dev/test split of a sentence-aligned corpus with SEG-NMT's length limits (Gu thesis ch. 4, §4.5; the
JRC-Acquis setting of Table 4.1).

:func:`split_corpus` drops the pairs with a side without a word character, samples ``--dev`` and ``--test``
pairs (seeded), keeps the rest for training, then drops the pairs longer than ``--max-len-train`` (training)
or ``--max-len-test`` (dev and test) tokens, optionally after Moses tokenisation (sacremoses). It writes
``OUT/raw/{split}.{lang}`` and ``{split}.ids`` (``OUT/tok/`` too with ``--tokenize moses``) and
``OUT/split.json`` with the counts. ``python -m fairseq_ext.tools.analysis.tm_analysis split-corpus`` runs it.
"""
from __future__ import annotations

import os
import random
import re
from typing import Any, Sequence

from fairseq_ext.tools.common import OutputSet, ToolError, log, read_lines

__all__ = ["split_corpus"]

_HAS_WORD = re.compile(r"\w")


def _moses(lang: str):
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise ToolError("--tokenize moses needs sacremoses (pip install sacremoses)") from None
    tok = MosesTokenizer(lang=lang)
    return lambda s: tok.tokenize(s, return_str=True, escape=True)


def split_corpus(prefix: str, langs: Sequence[str], out: str, *, dev: int = 3000, test: int = 3000,
                 max_len_train: int = 80, max_len_test: int = 100, seed: int = 1,
                 tokenize: str = "none") -> dict:
    """The §4.5 split of a sentence-aligned corpus (module doc); returns the counts (also ``OUT/split.json``)."""
    a, b = langs
    sides = {x: read_lines(f"{prefix}.{x}") for x in langs}
    if len(sides[a]) != len(sides[b]):
        raise ToolError(f"{len(sides[a])} lines but {prefix}.{b} has {len(sides[b])}", f"{prefix}.{a}")
    n_in = len(sides[a])
    keep = [i for i in range(n_in) if all(_HAS_WORD.search(sides[x][i]) for x in langs)]
    if dev + test > len(keep):
        raise ToolError(f"--dev {dev} + --test {test} is more than the {len(keep)} usable pairs", f"{prefix}.{a}")
    rng = random.Random(seed)
    picked = rng.sample(keep, dev + test)
    chosen = {"valid": sorted(picked[:dev]), "test": sorted(picked[dev:])}
    taken = set(picked)
    chosen["train"] = [i for i in keep if i not in taken]
    tok = {x: (_moses(x) if tokenize == "moses" else None) for x in langs}
    limit = {"train": max_len_train, "valid": max_len_test, "test": max_len_test}
    stats: dict[str, Any] = {"input_pairs": n_in, "special_or_empty_dropped": n_in - len(keep), "seed": seed,
                             "tokenize": tokenize, "max_len": limit, "splits": {}}
    for sub in ("raw", "tok") if tokenize == "moses" else ("raw",):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    with OutputSet(out) as o:
        for split in ("train", "valid", "test"):
            kept = 0
            for i in chosen[split]:
                toks = {x: tok[x](sides[x][i]) if tok[x] else sides[x][i] for x in langs}
                if any(len(toks[x].split()) > limit[split] for x in langs):
                    continue
                kept += 1
                for x in langs:
                    o.open(f"raw/{split}.{x}").write(sides[x][i] + "\n")
                    if tok[x]:
                        o.open(f"tok/{split}.{x}").write(toks[x] + "\n")
                o.open(f"raw/{split}.ids").write(f"line{i + 1}\n")
                if tokenize == "moses":
                    o.open(f"tok/{split}.ids").write(f"line{i + 1}\n")
            stats["splits"][split] = {"sampled": len(chosen[split]), "kept": kept,
                                      "over_length": len(chosen[split]) - kept}
            log(f"[split] {split}: {len(chosen[split])} pairs, {kept} within {limit[split]} tokens")
        o.write_json("split.json", stats)
    return stats

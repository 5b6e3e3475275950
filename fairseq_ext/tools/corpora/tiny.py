"""Regenerate the committed test slice ``tests/data/bible_tiny`` from a full ``corpora sword`` build.

    python -m fairseq_ext.tools.corpora.tiny [--raw data/bible_es_en/raw] [--out tests/data/bible_tiny]
    (same as: python -m fairseq_ext.tools.corpora.corpora tiny ...)

Whole chapters (documents) are taken from each split, so the slice's ``docs.jsonl`` are complete
chapters and its valid/test books stay held out. Chapters are drawn in a seeded random order among
those whose verses are short enough for the size budget (``--max-bytes`` for all files together),
until each split reaches about its target number of verses. Deterministic for a given input and seed.
"""
from __future__ import annotations

import os
import random

from fairseq_ext.tools.common import (ArgumentParser, OutputSet, ToolError, check_folder, json_line, log,
                                      read_jsonl, require_file, run_cli)

LANGS = ("es", "en", "kjv")
DEFAULTS = {"train": 220, "valid": 40, "test": 40, "max_bytes": 195_000, "seed": 1}


def _doc_bytes(d: dict) -> int:
    flat = sum(len((s + "\n").encode("utf-8")) for x in LANGS + ("ids",) for s in d[x])
    return flat + len((json_line(d) + "\n").encode("utf-8"))


def _per_verse(d: dict) -> float:
    return _doc_bytes(d) / len(d["ids"])


def _quantile(docs: list[dict], q: float) -> float:
    per = sorted(_per_verse(d) for d in docs)
    return per[min(len(per) - 1, int(q * len(per)))] if per else 0.0


def pick_chapters(docs: list[dict], target: int, budget: int, rng: random.Random) -> list[dict]:
    """Whole chapters, about ``target`` verses (90-115%) in at most ``budget`` bytes, in corpus order.

    Candidates are the chapters no longer than ``target`` verses whose bytes per verse fit the
    budget's share per verse (long-verse chapters would eat the budget); they are tried in a seeded
    random order."""
    per_verse = budget / target
    state = rng.getstate()
    best: list = []
    for max_doc in (max(1, target // 2), target):  # prefer several shorter chapters
        rng.setstate(state)
        cands = [(i, d) for i, d in enumerate(docs) if _per_verse(d) <= per_verse and len(d["ids"]) <= max_doc]
        rng.shuffle(cands)
        chosen, n, size = [], 0, 0
        for i, d in cands:
            k, b = len(d["ids"]), _doc_bytes(d)
            if n + k <= target * 1.15 and size + b <= budget:
                chosen.append((i, d))
                n += k
                size += b
            if n >= target * 0.9:
                break
        if sum(len(d["ids"]) for _, d in chosen) > sum(len(d["ids"]) for _, d in best):
            best = chosen
        if n >= target * 0.9:
            break
    return [d for _, d in sorted(best, key=lambda x: x[0])]


def make_tiny(raw: str, out: str, train: int = DEFAULTS["train"], valid: int = DEFAULTS["valid"],
              test: int = DEFAULTS["test"], max_bytes: int = DEFAULTS["max_bytes"],
              seed: int = DEFAULTS["seed"]) -> dict:
    targets = {"valid": valid, "test": test, "train": train}  # the small held-out splits first
    rng = random.Random(seed)
    counts = {}
    all_docs = {}
    for sp in targets:
        path = os.path.join(raw, f"{sp}.docs.jsonl")
        require_file(path)
        all_docs[sp] = read_jsonl(path)
        for x in LANGS:
            if all_docs[sp] and x not in all_docs[sp][0]:
                raise ToolError(f"documents have no {x!r} list (need a `corpora sword` build)", path, 1)
    # held-out splits get target x their median bytes per verse; train gets what is left
    left_bytes = max_bytes - 2000  # README.txt
    with OutputSet(out) as o:
        for sp, target in targets.items():
            path = os.path.join(raw, f"{sp}.docs.jsonl")
            budget = left_bytes if sp == "train" else int(target * _quantile(all_docs[sp], 0.5))
            chosen = pick_chapters(all_docs[sp], target, budget, rng)
            left_bytes -= sum(_doc_bytes(d) for d in chosen)
            if not chosen:
                raise ToolError(f"{path}: no chapter fits {target} verses in the byte budget")
            for x in LANGS + ("ids",):
                o.write_lines(f"{sp}.{x}", [s for d in chosen for s in d[x]])
            o.write_jsonl(f"{sp}.docs.jsonl", [{k: d[k] for k in ("doc_id", "ids") + LANGS} for d in chosen])
            counts[sp] = {"verses": sum(len(d["ids"]) for d in chosen), "docs": len(chosen),
                          "doc_ids": [d["doc_id"] for d in chosen]}
        o.write_text("README.txt", (
            "Test slice of the es-en(-kjv) Bible corpus (RV1909 / World English Bible / KJV, public domain),\n"
            "whole chapters from the train/valid/test splits of a full `corpora sword` build.\n"
            f"Regenerate: python -m fairseq_ext.tools.corpora.tiny --raw {raw} --out {out} --seed {seed}\n"
            + "".join(f"{sp}: {c['verses']} verses, {c['docs']} chapters: {' '.join(c['doc_ids'])}\n"
                      for sp, c in counts.items())))
    check_folder(out, "es", "en")
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    log(f"[tiny] wrote {out}: " + ", ".join(f"{sp} {c['verses']} verses / {c['docs']} docs"
                                           for sp, c in counts.items()) + f"; {size} bytes")
    if size > max_bytes:
        raise ToolError(f"{out}: {size} bytes, over --max-bytes {max_bytes}")
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="fairseq-ext-tiny", description=__doc__)
    ap.add_argument("--raw", default="data/bible_es_en/raw")
    ap.add_argument("--out", default="tests/data/bible_tiny")
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v, help="default %(default)s")
    a = ap.parse_args(argv)
    make_tiny(a.raw, a.out, a.train, a.valid, a.test, a.max_bytes, a.seed)
    return 0


def cli_main(argv: list[str] | None = None) -> None:
    """Console script ``fairseq-ext-tiny``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

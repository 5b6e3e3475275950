"""Translation-memory side files: the pairs retrieved for every example of a split (Gu ch. 4, SEG-NMT).

The offline retrieval tool (``fairseq-ext-tm retrieve``) writes them into the binarized data folder; the
task ``seg_translation`` reads them.  The memory is the *training split* itself, so a retrieved pair is a
line index into the binarized training data and nothing is binarized twice.

``{split}.tm.jsonl`` -- one JSON object per line of the split, in the split's order::

    {"ids": [3, 17, ...],        # training-line indices, best first (fuzzy score, then BM25, then index)
     "fuzzy": [0.83, 0.5, ...],  # S_fuzzy of each (Eq. 4.1), same length as ids
     "adaptive": [3, 9]}         # the pairs Algorithm 1 selects (union erratum), a subset of the candidates

``{split}.tm.meta.json`` -- what the lines were computed from::

    {"split": "test", "split_lines": 1494, "memory_lines": 28717, "exclude_self": false, ...}

The task refuses a side file whose line count or memory size differs from the data it is used with (a
stale file, built on other data), or whose ids fall outside the memory, naming the file and line.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from fairseq_ext.data.errors import UserDataError

FORMAT_VERSION = 1


def tm_paths(data_dir: str, split: str) -> tuple[str, str]:
    """``(jsonl, meta)`` paths of a split's side files."""
    return (os.path.join(data_dir, f"{split}.tm.jsonl"), os.path.join(data_dir, f"{split}.tm.meta.json"))


@dataclass
class TMEntry:
    """The retrieved pairs of one example."""
    ids: list = field(default_factory=list)
    fuzzy: list = field(default_factory=list)
    adaptive: list = field(default_factory=list)

    def select(self, selection: str, k: int) -> list:
        """Training-line indices of the pairs to use: the ``k`` best (``topk``) or Algorithm 1's (``adaptive``)."""
        if selection == "topk":
            return self.ids[:k]
        if selection == "adaptive":
            return self.adaptive
        raise ValueError(f"unknown translation-memory selection {selection!r} (topk, adaptive)")


class TMFormatError(UserDataError):
    """A missing, malformed or stale translation-memory side file (the message names the file and line)."""


def write_tm(data_dir: str, split: str, entries, meta: dict) -> tuple[str, str]:
    """Write ``{split}.tm.jsonl`` and its meta file (each atomically: a temporary file renamed)."""
    jsonl, meta_path = tm_paths(data_dir, split)
    os.makedirs(data_dir, exist_ok=True)
    n = 0
    tmp = f"{jsonl}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for e in entries:
            f.write(json.dumps({"ids": list(map(int, e.ids)), "fuzzy": [round(float(s), 6) for s in e.fuzzy],
                                "adaptive": list(map(int, e.adaptive))}) + "\n")
            n += 1
    os.replace(tmp, jsonl)
    meta = dict(meta, split=split, split_lines=n, format=FORMAT_VERSION)
    with open(f"{meta_path}.tmp-{os.getpid()}", "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    os.replace(f"{meta_path}.tmp-{os.getpid()}", meta_path)
    return jsonl, meta_path


def read_tm(data_dir: str, split: str, split_lines: int | None = None,
            memory_lines: int | None = None) -> tuple[list, dict]:
    """``(entries, meta)`` of a split, checked against the split's and the memory's sizes when given."""
    jsonl, meta_path = tm_paths(data_dir, split)
    for p in (jsonl, meta_path):
        if not os.path.isfile(p):
            raise TMFormatError(f"{p}: missing translation-memory side file (run `fairseq-ext-tm retrieve` "
                                f"for split {split!r} first)")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except json.JSONDecodeError as e:
        raise TMFormatError(f"{meta_path}:{e.lineno}: not JSON ({e.msg})") from None
    if meta.get("format") != FORMAT_VERSION:
        raise TMFormatError(f"{meta_path}: format {meta.get('format')!r}, expected {FORMAT_VERSION} (re-run retrieve)")
    mem = meta.get("memory_lines")
    if memory_lines is not None and mem != memory_lines:
        raise TMFormatError(f"{meta_path}: stale: retrieved from a memory of {mem} lines, but the training "
                            f"split here has {memory_lines} (re-run retrieve on this data)")
    entries = []
    with open(jsonl, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                e = TMEntry(list(r["ids"]), list(r["fuzzy"]), list(r.get("adaptive", [])))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise TMFormatError(f"{jsonl}:{i}: not a translation-memory record ({exc})") from None
            if len(e.ids) != len(e.fuzzy):
                raise TMFormatError(f"{jsonl}:{i}: {len(e.ids)} ids but {len(e.fuzzy)} scores")
            if mem is not None and any(not 0 <= j < mem for j in e.ids + e.adaptive):
                raise TMFormatError(f"{jsonl}:{i}: a retrieved id is outside the memory of {mem} lines")
            entries.append(e)
    if meta.get("split_lines") != len(entries):
        raise TMFormatError(f"{jsonl}: {len(entries)} lines, its meta file says {meta.get('split_lines')}")
    if split_lines is not None and len(entries) != split_lines:
        raise TMFormatError(f"{jsonl}: stale: {len(entries)} lines for a split of {split_lines} examples "
                            f"(re-run retrieve on this data)")
    return entries, meta

"""The checks of a parallel folder ``{split}.{lang}`` (+ ``{split}.ids``, ``{split}.docs.jsonl``), the input and
output of every corpus step (``fairseq-ext-data check``): all files UTF-8 and line-aligned, no empty segment and
none over ``--max-len`` whitespace tokens, unique ids not shared by two splits, documents that concatenate to
the flat files; and which languages a folder holds (its ``train.<lang>`` files, a ``segment.json``, a
``<src>-<tgt>`` name). Every violation is one :class:`~fairseq_ext.tools.common.ToolError` naming the file
and line.
"""
from __future__ import annotations

import json
import os
from typing import Iterable

from fairseq_ext.tools.common import SPLITS, ToolError, read_lines, require_file

DEFAULT_MAX_LEN = 1024
# file suffixes in a parallel folder that are not languages
NON_LANG_SUFFIXES = {"ids", "jsonl", "json", "tsv", "model", "vocab", "codes", "log", "txt", "rule"}


def count_lines(path: str) -> int:
    require_file(path)
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (0 if last == b"\n" else 1)


def check_lines(path: str, lines: list[str], max_len: int | None = DEFAULT_MAX_LEN,
                allow_empty: bool = False) -> None:
    """Empty segments and segments over ``max_len`` whitespace tokens, as ``file:line`` errors."""
    for i, line in enumerate(lines, 1):
        if not allow_empty and not line.strip():
            raise ToolError("empty segment", path, i)
        if max_len:
            n = len(line.split())
            if n > max_len:
                raise ToolError(f"segment has {n} whitespace tokens, more than --max-len {max_len}", path, i)


def check_parallel(paths: list[str], max_len: int | None = DEFAULT_MAX_LEN,
                   allow_empty: bool = False) -> int:
    """Validate line-aligned files (all UTF-8, same line count, no empty / over-long segment).

    ``.ids`` files are checked for UTF-8 and line count (and emptiness) but not for length.
    Returns the common number of lines.
    """
    for p in paths:
        require_file(p)
    n_ref, p_ref = None, None
    for p in paths:
        n = count_lines(p)
        if n_ref is None:
            n_ref, p_ref = n, p
        elif n != n_ref:
            raise ToolError(f"line counts differ: {p_ref} has {n_ref} lines but {p} has {n} lines")
    for p in paths:
        lines = read_lines(p)
        check_lines(p, lines, None if p.endswith(".ids") else max_len, allow_empty)
    return n_ref or 0


def folder_languages(folder: str) -> list[str]:
    """Language suffixes of ``train.<lang>`` files in a folder (sorted)."""
    if not os.path.isdir(folder):
        raise ToolError(f"missing input folder: {folder}")
    langs = set()
    for name in os.listdir(folder):
        parts = name.split(".")
        if len(parts) == 2 and parts[0] == "train" and parts[1] not in NON_LANG_SUFFIXES \
                and "-" not in parts[1] and not name.endswith((".tmp",)):
            langs.add(parts[1])
    return sorted(langs)


def resolve_langs(folder: str, src: str | None, tgt: str | None) -> list[str]:
    """The languages to use in ``folder``: ``[src, tgt]`` when given (each must exist), else all."""
    avail = folder_languages(folder)
    if not avail:
        raise ToolError(f"missing input file: {os.path.join(folder, 'train.<lang>')} "
                          f"(no train.<lang> file in {folder})")
    wanted = [x for x in (src, tgt) if x]
    for lang in wanted:
        if lang not in avail:
            raise ToolError(f"unknown language code {lang!r} for {folder}: "
                              f"known codes are {', '.join(avail)}")
    if src and tgt and src == tgt:
        raise ToolError(f"unknown language pair {src}-{tgt}: source and target are the same")
    return wanted or avail


def resolve_pair(folder: str, src: str | None, tgt: str | None) -> tuple[str, str]:
    """Source and target codes for ``folder``: the given ones, else those recorded in its
    ``segment.json``, else its name when that is ``<src>-<tgt>`` (multi pair folders)."""
    if not (src and tgt):
        seg = os.path.join(folder, "segment.json")
        if os.path.isfile(seg):
            try:
                with open(seg, encoding="utf-8") as f:
                    info = json.load(f)
                src, tgt = src or info.get("src"), tgt or info.get("tgt")
            except (OSError, json.JSONDecodeError):
                pass
    if not (src and tgt):
        avail = folder_languages(folder)
        parts = os.path.basename(os.path.normpath(folder)).split("-")
        if len(parts) == 2 and all(x in avail for x in parts):
            src, tgt = src or parts[0], tgt or parts[1]
        else:
            resolve_langs(folder, src, tgt)  # errors for a missing folder / unknown code first
            raise ToolError(f"give --src and --tgt (languages here: {', '.join(avail)})", folder)
    langs = resolve_langs(folder, src, tgt)
    return langs[0], langs[1]


def check_docs(path: str, flat: dict[str, list[str]] | None, langs: list[str]) -> int:
    """``{split}.docs.jsonl``: one JSON object per line with ``doc_id``, ``ids`` and one list per
    language, all of the same length; concatenated in order they must equal the flat files."""
    require_file(path)
    pos = 0
    n_docs = 0
    seen = set()
    for i, line in enumerate(read_lines(path), 1):
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise ToolError(f"invalid JSON ({e.msg})", path, i) from None
        if not isinstance(d, dict) or "doc_id" not in d or "ids" not in d:
            raise ToolError("a document needs the keys doc_id and ids", path, i)
        if d["doc_id"] in seen:
            raise ToolError(f"duplicate doc_id {d['doc_id']!r}", path, i)
        seen.add(d["doc_id"])
        n = len(d["ids"])
        if n == 0:
            raise ToolError(f"empty document {d['doc_id']!r}", path, i)
        for lang in langs:
            if lang not in d:
                raise ToolError(f"document {d['doc_id']!r} has no {lang!r} list", path, i)
            if len(d[lang]) != n:
                raise ToolError(f"document {d['doc_id']!r} has {n} ids but {len(d[lang])} {lang!r} segments",
                                path, i)
        if flat is not None:
            for key, lines in flat.items():
                if d[key] != lines[pos:pos + n]:
                    for j, seg in enumerate(d[key]):
                        if pos + j >= len(lines) or lines[pos + j] != seg:
                            raise ToolError(f"document {d['doc_id']!r} segment {j + 1} ({key}) differs "
                                            f"from line {pos + j + 1} of the flat .{key} file", path, i)
        pos += n
        n_docs += 1
    if flat is not None:
        total = len(next(iter(flat.values()))) if flat else pos
        if pos != total:
            raise ToolError(f"documents hold {pos} segments but the flat files have {total} lines", path)
    return n_docs


def check_folder(folder: str, src: str | None = None, tgt: str | None = None,
                 max_len: int | None = DEFAULT_MAX_LEN, splits: Iterable[str] = SPLITS) -> dict:
    """Validate a parallel folder ``{split}.{lang}`` (+ ``{split}.ids``, ``{split}.docs.jsonl`` when
    present). ``train`` must exist; ``valid``/``test`` are checked when any of their files exists.
    Also checks that ids are unique and that no id occurs in two splits. Returns a summary dict."""
    langs = resolve_langs(folder, src, tgt)
    report: dict = {"folder": folder, "langs": langs, "splits": {}}
    owner: dict[str, str] = {}
    for split in splits:
        paths = [os.path.join(folder, f"{split}.{lang}") for lang in langs]
        ids_path = os.path.join(folder, f"{split}.ids")
        docs_path = os.path.join(folder, f"{split}.docs.jsonl")
        present = [p for p in paths + [ids_path] if os.path.exists(p)]
        if split != "train" and not present:
            continue
        if os.path.exists(ids_path):
            paths.append(ids_path)
        n = check_parallel(paths, max_len)
        rep = {"lines": n}
        for lang in langs:
            rep[f"{lang}_tokens"] = sum(len(x.split()) for x in read_lines(os.path.join(folder, f"{split}.{lang}")))
        if os.path.exists(ids_path):
            for i, vid in enumerate(read_lines(ids_path), 1):
                if vid in owner:
                    where = owner[vid]
                    raise ToolError(f"id {vid!r} already used in {where}", ids_path, i)
                owner[vid] = f"{ids_path}:{i}"
        if os.path.exists(docs_path):
            flat = {lang: read_lines(os.path.join(folder, f"{split}.{lang}")) for lang in langs}
            if os.path.exists(ids_path):
                flat["ids"] = read_lines(ids_path)
            with open(docs_path, "rb") as f:
                first = f.readline()
            doc_langs = langs
            try:  # only check the languages the docs file carries (bpe folders have raw docs: none)
                keys = set(json.loads(first)) if first.strip() else set()
                doc_langs = [lang for lang in langs if lang in keys]
                flat = {k: v for k, v in flat.items() if k in keys}
            except json.JSONDecodeError:
                pass
            rep["docs"] = check_docs(docs_path, flat, doc_langs)
        report["splits"][split] = rep
    return report

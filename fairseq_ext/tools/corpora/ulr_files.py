"""The files of the Universal Lexical Representation (Gu 2019 thesis ch. 5, §5.3.1) in a data folder DIR of
``fairseq-ext-data universal``: where they are (``DIR/spm``, ``DIR/ulr``), which source languages DIR holds,
and the formats the ULR steps read and write: word2vec text embeddings (``emb.<lang>.vec``), seed dictionaries
(``seed.<lang>.tsv``: src, English, count, source) and the marked source dictionary (``<piece>__<lang>``).

Used by :mod:`fairseq_ext.tools.corpora.ulr` (``fairseq-ext-ulr``) and its steps.
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from fairseq_ext.tools.common import ToolError, read_json, read_lines, require_file, sha256_file

WORD_START = "\u2581"  # sentencepiece's "▁"
SUFFIX = "__"
ENGLISH = "en"
SPM_SPECIALS = {"<unk>", "<s>", "</s>", "<pad>"}
DEFAULT_TEMPERATURE = 0.05
MODELS = ("fasttext", "word2vec")


# =========================================================================== the folder
def spm_path(data: str, name: str) -> str:
    return os.path.join(data, "spm", name)


def ulr_dir(data: str) -> str:
    return os.path.join(data, "ulr")


def require_data(data: str) -> None:
    if not os.path.isdir(data):
        raise ToolError(f"missing data folder: {data}")


def manifest_langs(data: str) -> Optional[list[str]]:
    """The source languages recorded in DIR/manifest.json (``langs``, else ``aux`` + ``lowres``)."""
    path = os.path.join(data, "manifest.json")
    if not os.path.isfile(path):
        return None
    m = read_json(path)
    if not isinstance(m, dict):
        return None
    langs = m.get("langs")
    if not langs:
        langs = list(m.get("aux") or []) + ([m["lowres"]] if m.get("lowres") else [])
    return [x for x in langs if x != ENGLISH] or None


def text_langs(data: str) -> list[str]:
    """Languages with a DIR/spm/text.<lang> file (English excluded)."""
    folder = os.path.join(data, "spm")
    if not os.path.isdir(folder):
        return []
    return sorted(n[len("text."):] for n in os.listdir(folder)
                  if n.startswith("text.") and "." not in n[len("text."):] and n != f"text.{ENGLISH}")


def source_langs(data: str, langs_arg: Optional[str], needs: str) -> list[str]:
    """The source languages to work on: ``--langs`` (each must have ``DIR/spm/<needs>``, e.g.
    ``text.{lang}``), else the manifest's, else every language with such a file."""
    if langs_arg:
        langs = [x.strip() for x in langs_arg.split(",") if x.strip()]
    else:
        langs = manifest_langs(data) or text_langs(data)
    if not langs:
        raise ToolError(f"no source language: give --langs (no manifest.json and no {spm_path(data, 'text.<lang>')})")
    known = manifest_langs(data) or text_langs(data)
    for lang in langs:
        path = spm_path(data, needs.format(lang=lang))
        if not os.path.isfile(path):
            if lang in known:
                raise ToolError(f"missing input file for language {lang!r}: {path}")
            raise ToolError(f"unknown language code {lang!r}: no {path} (languages here: "
                            f"{', '.join(known) or 'none'})")
    return list(dict.fromkeys(langs))


def fingerprint(paths: list[str]) -> dict[str, str]:
    return {os.path.basename(p): sha256_file(p)[:16] for p in paths if os.path.isfile(p)}


# =========================================================================== embeddings (.vec)
def read_vec(path: str) -> tuple[list[str], np.ndarray]:
    """A word2vec text file → (words, (n, d) float32)."""
    require_file(path, "embeddings file")
    lines = read_lines(path)
    if not lines:
        raise ToolError("empty embeddings file", path)
    head = lines[0].split()
    try:
        n, d = int(head[0]), int(head[1])
    except (ValueError, IndexError):
        raise ToolError("the first line of a word2vec text file is '<count> <dim>'", path, 1) from None
    words, rows = [], []
    for i, line in enumerate(lines[1:], 2):
        parts = line.rstrip(" ").split(" ")
        if len(parts) != d + 1:
            raise ToolError(f"expected a word and {d} numbers, got {len(parts) - 1} numbers", path, i)
        words.append(parts[0])
        rows.append(parts[1:])
    if len(words) != n:
        raise ToolError(f"the header says {n} vectors but the file has {len(words)}", path)
    vecs = np.asarray(rows, dtype=np.float32).reshape(len(words), d)
    return words, vecs


def write_vec(f, words: list[str], vecs: np.ndarray) -> None:
    f.write(f"{len(words)} {vecs.shape[1]}\n")
    for w, v in zip(words, vecs):
        f.write(w + " " + " ".join(f"{x:.6f}" for x in v) + "\n")


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to norm 1 (zero rows stay zero)."""
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(n > 0, n, 1.0)).astype(np.float32)


def read_seed(path: str) -> list[tuple[str, str, int, str]]:
    require_file(path, "seed dictionary")
    out = []
    for i, line in enumerate(read_lines(path), 1):
        parts = line.split("\t")
        if len(parts) != 4:
            raise ToolError("a seed line is src<TAB>en<TAB>count<TAB>source", path, i)
        try:
            out.append((parts[0], parts[1], int(parts[2]), parts[3]))
        except ValueError:
            raise ToolError(f"count is not an integer: {parts[2]!r}", path, i) from None
    return out


def load_src_dict(path: str, known: Optional[list[str]]) -> tuple[list[str], list[Optional[tuple[str, str]]]]:
    """The symbols of a fairseq source dictionary (fairseq's indices) and, per index, (piece, lang) or None
    (specials, ``madeupword`` padding)."""
    from fairseq.data import Dictionary

    require_file(path, "source dictionary")
    d = Dictionary.load(path)
    symbols = list(d.symbols)
    marks: list[Optional[tuple[str, str]]] = []
    for i, sym in enumerate(symbols):
        if i < d.nspecial or (sym.startswith("madeupword") and sym[len("madeupword"):].isdigit()):
            marks.append(None)
            continue
        piece, sep, lang = sym.rpartition(SUFFIX)
        line = i - d.nspecial + 1
        if not sep or not piece or not lang:
            raise ToolError(f"symbol {sym!r} has no language suffix {SUFFIX}<lang>", path, line)
        if known is not None and lang not in known:
            raise ToolError(f"unknown language code {lang!r} in symbol {sym!r} (the manifest's languages: "
                            f"{', '.join(known)})", path, line)
        marks.append((piece, lang))
    return symbols, marks

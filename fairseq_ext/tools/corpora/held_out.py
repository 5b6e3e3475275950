r"""Held-out training books (``fairseq-ext-data prepare --exclude-books``): whole books of the training split
set aside before any subsampling, so a model trained on the prepared folder never sees them, and written as a
fourth split ``heldout`` (``heldout.{src,tgt,ids}``, ``heldout.docs.jsonl``) that ``bpe`` segments and
``binarize`` binarizes with the training dictionary like ``test``. The validation and test splits are
unchanged. Its use: more evaluation verses for the contrastive pronoun set of Maruf (2019) ch. 4 (Table 4.4)
than the test books hold, with the whole chapter as document context
(``fairseq-ext-contrastive build --split heldout``, scored with ``--gen-subset heldout``).

A verse id is ``Book.chapter.verse`` (``Revelation_of_John.3.4``); a book name is its part before the last two
dots, spelled as in ``train.ids``.
"""
from __future__ import annotations

import hashlib
import os

from fairseq_ext.tools.common import ToolError, read_lines

__all__ = ["HELDOUT", "book_of", "parse_books", "held_out_lines", "held_out_tag"]

HELDOUT = "heldout"  # the split of the held-out books


def book_of(verse_id: str) -> str:
    """``Revelation_of_John.3.4`` → ``Revelation_of_John``."""
    return verse_id.rsplit(".", 2)[0]


def parse_books(text: str | None) -> tuple[str, ...]:
    """``"Jeremiah, Proverbs,Jeremiah"`` → ``("Jeremiah", "Proverbs")`` (first spelling order, no repeats)."""
    out: list[str] = []
    for b in (text or "").split(","):
        b = b.strip()
        if b and b not in out:
            out.append(b)
    return tuple(out)


def held_out_lines(raw: str, books: tuple[str, ...] | list[str]) -> list[int]:
    """The line numbers of ``raw``'s training split that belong to ``books``, in file order. A name that is
    not a training book is one error listing the training books (and naming the split that holds it)."""
    path = os.path.join(raw, "train.ids")
    if not os.path.isfile(path):
        raise ToolError(f"missing {path}: --exclude-books needs the verse ids (Book.chapter.verse) of the "
                        f"training lines")
    ids = read_lines(path)
    of_line = [book_of(v) for v in ids]
    known = list(dict.fromkeys(of_line))
    for b in books:
        if b in known:
            continue
        where = ""
        for sp in ("valid", "test"):
            other = os.path.join(raw, f"{sp}.ids")
            if os.path.isfile(other) and b in {book_of(v) for v in read_lines(other)}:
                where = f" (it is a {sp} book already)"
        raise ToolError(f"--exclude-books: {b!r} is not a training book{where}; the training books: "
                        f"{', '.join(known)}", path)
    chosen = set(books)
    return [i for i, b in enumerate(of_line) if b in chosen]


def held_out_tag(books: tuple[str, ...] | list[str]) -> str:
    """The folder-name part that records the held-out books: ``-heldout<K>-<hash>`` (the same set of books
    in any order gives the same name; another set another name, so a stale folder is never reused)."""
    key = ",".join(sorted(books))
    return f"-heldout{len(books)}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:8]}"

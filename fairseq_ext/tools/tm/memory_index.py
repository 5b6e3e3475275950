r"""The translation memory of the SEG-NMT retrieval stage (Gu thesis ch. 4, §4.2.1) and its index folder.

:class:`Memory` is the source side of the memory (the training split): its lines, word tokens, an
equality-preserving code of the tokens for the fast edit distance of Eq. 4.1, and its identity (size, line
count, SHA-1). :func:`build_index` indexes it once with tantivy (:mod:`fairseq_ext.tools.tm.tm_engines`),
built in a sibling folder and moved into place, and stamps the folder with the memory's identity and the
SHA-1 of every file; :func:`open_index` checks the stamp before it returns a retriever, so a stale (other
data, other version) or corrupt index is refused with one error line naming the folder, never used
(``fairseq-ext-tm build-index --force`` rebuilds it).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from typing import Dict, List, Optional, Sequence, Union

from fairseq_ext.tools.common import (
    ToolError, log, progress, read_json, read_lines, require_file, stamp_path, write_stamp,
)
from fairseq_ext.tools.tm.tm_engines import (
    DEFAULT_ENGINE, ENGINE, ENGINES, TOKENIZER, NumpyRetriever, Retriever, TantivyRetriever, tokenize,
)

__all__ = ["INDEX_FORMAT", "STAMP_STEP", "sha1_file", "Memory", "open_index", "build_index"]

INDEX_FORMAT = 1
STAMP_STEP = "tm-index"


def _sha1_bytes(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def sha1_file(path: str) -> str:
    """The SHA-1 of a file's bytes (hex)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha1").hexdigest()


_MAX_CODE = 0x10FFFF - 0x800       # code points left when the surrogates are skipped
_MAX_STR_TYPES = 1_000_000         # more token types than this: integer lists instead of strings


def _chars(ids: Sequence[int]) -> str:
    """Token ids as a string of one code point each (the surrogate block skipped)."""
    return "".join([chr(i) if i < 0xD800 else chr(i + 0x800) for i in ids])


class Memory:
    """The source side of the translation memory (a text file, one sentence a line): its lines, word
    tokens, a code of the tokens (for the fast edit distance) and identity (size, lines, SHA-1)."""

    def __init__(self, path: str) -> None:
        require_file(path, "memory source file")
        self.path = path
        with open(path, "rb") as f:
            data = f.read()
        self.size = len(data)
        self.sha1 = _sha1_bytes(data)
        self.lines = read_lines(path)
        self.tokens = [tokenize(s) for s in self.lines]
        self._vocab: Optional[Dict[str, int]] = None
        self._codes: Optional[list] = None
        self._by_tokens: Optional[Dict[tuple, List[int]]] = None
        self._as_str = True

    def __len__(self) -> int:
        return len(self.lines)

    def info(self) -> dict:
        """What identifies the memory (the parameters of the index stamp)."""
        return {"memory_lines": len(self.lines), "memory_size": self.size, "memory_sha1": self.sha1}

    @property
    def codes(self) -> List[Union[str, List[int]]]:
        """Every memory line's tokens in an equality-preserving code, one code per distinct token string:
        a ``str`` with one character per token (rapidfuzz's edit distance is twice as fast on strings as on
        lists), or a list of ints when the memory has too many token types for Unicode."""
        if self._codes is None:
            vocab: Dict[str, int] = {}
            ids = [[vocab.setdefault(t, len(vocab)) for t in toks] for toks in self.tokens]
            self._vocab = vocab
            self._as_str = len(vocab) < _MAX_STR_TYPES
            self._codes = [_chars(x) for x in ids] if self._as_str else ids
        return self._codes

    def encode(self, tokens: Sequence[str]) -> Union[str, List[int]]:
        """``tokens`` in the code of :attr:`codes`; a token absent from the memory gets a code of its own
        (equal tokens, equal codes), so edit distances and coverage are those of the token strings."""
        self.codes  # noqa: B018 - builds the vocabulary
        vocab = self._vocab
        base = len(vocab)
        unk: Dict[str, int] = {}
        ids = [vocab[t] if t in vocab else base + unk.setdefault(t, len(unk)) for t in tokens]
        if not self._as_str:
            return ids
        if base + len(unk) > _MAX_CODE:
            raise ToolError(f"a query with {len(unk)} distinct unknown tokens is too long to encode")
        return _chars(ids)

    def identical(self, tokens: Sequence[str]) -> List[int]:
        """Memory lines whose tokens equal ``tokens``."""
        if self._by_tokens is None:
            by: Dict[tuple, List[int]] = {}
            for i, toks in enumerate(self.tokens):
                by.setdefault(tuple(toks), []).append(i)
            self._by_tokens = by
        return self._by_tokens.get(tuple(tokens), [])


# --------------------------------------------------------------------------------------------- index folder
def _index_files(folder: str) -> List[str]:
    """The files of a built index (tantivy's lock files and our stamp left out)."""
    return sorted(n for n in os.listdir(folder)
                  if os.path.isfile(os.path.join(folder, n)) and not n.startswith(".tantivy-")
                  and not n.startswith(".stamp."))


def _index_params(memory: Memory) -> dict:
    return dict(memory.info(), format=INDEX_FORMAT, engine=ENGINE, tokenizer=TOKENIZER)


def _describe(params: dict) -> str:
    return (f"{params.get('memory_lines')} lines, {params.get('memory_size')} bytes, "
            f"sha1 {str(params.get('memory_sha1'))[:12]}")


def _check_index(folder: str, memory: Memory) -> dict:
    """The stamp of a usable index of ``memory`` in ``folder``; a :class:`ToolError` naming the folder when
    it is missing, stale (built on other data or by another version) or corrupt."""
    if not os.path.isdir(folder):
        raise ToolError("no translation-memory index here (run `fairseq-ext-tm build-index` first)", folder)
    sp = stamp_path(folder, STAMP_STEP)
    if not os.path.isfile(sp):
        raise ToolError("not a complete translation-memory index: no stamp file "
                        f"{os.path.basename(sp)} (an interrupted build or another folder); "
                        "rebuild it with `fairseq-ext-tm build-index --force`", folder)
    try:
        stamp = read_json(sp)
    except (ToolError, OSError, UnicodeDecodeError) as e:
        raise ToolError(f"corrupt index: unreadable stamp ({e}); rebuild it with build-index --force",
                        folder) from None
    if not isinstance(stamp, dict) or not isinstance(stamp.get("params"), dict) \
            or not isinstance(stamp.get("files"), dict):
        raise ToolError("corrupt index: malformed stamp; rebuild it with build-index --force", folder)
    want = _index_params(memory)
    have = stamp["params"]
    if any(have.get(k) != want[k] for k in ("memory_lines", "memory_size", "memory_sha1")):
        raise ToolError(f"stale index: built on other data ({stamp.get('memory_src', '?')}: {_describe(have)}), "
                        f"not on {memory.path} ({_describe(want)}); rebuild it with build-index --force",
                        folder)
    if have != want:
        diff = ", ".join(k for k in sorted(set(want) | set(have)) if have.get(k) != want.get(k))
        raise ToolError(f"stale index: built by another version of the tool (differs in {diff}); "
                        f"rebuild it with build-index --force", folder)
    for name, rec in sorted(stamp["files"].items()):
        p = os.path.join(folder, name)
        if not os.path.isfile(p):
            raise ToolError(f"corrupt index: file {name} is missing; rebuild it with build-index --force",
                            folder)
        if os.path.getsize(p) != rec.get("size") or sha1_file(p) != rec.get("sha1"):
            raise ToolError(f"corrupt index: file {name} changed since the build; rebuild it with "
                            f"build-index --force", folder)
    return stamp


def open_index(folder: str, memory: Memory, engine: str = DEFAULT_ENGINE) -> Retriever:
    """The retriever of the index in ``folder``, after checking that it was built on ``memory`` and that
    its files are intact (else a :class:`ToolError` naming the folder; never silently used). ``engine``
    ``tantivy`` searches the index itself; ``numpy`` (the same BM25) holds the memory's postings in arrays,
    built from ``memory`` -- the index is checked all the same, so both engines refuse the same folders."""
    if engine not in ENGINES:
        raise ToolError(f"unknown engine {engine!r} (choose from {', '.join(sorted(ENGINES))})")
    _check_index(folder, memory)
    if engine == NumpyRetriever.name:
        return NumpyRetriever(memory.tokens)
    try:
        retriever = TantivyRetriever(folder)
    except ToolError:
        raise
    except Exception as e:  # tantivy raises ValueError/OSError/its own errors on a damaged index
        raise ToolError(f"corrupt index: tantivy cannot open it ({e}); rebuild it with build-index --force",
                        folder) from None
    if len(retriever) != len(memory):
        raise ToolError(f"corrupt index: {len(retriever)} documents for a memory of {len(memory)} lines; "
                        f"rebuild it with build-index --force", folder)
    return retriever


def _removable(folder: str) -> bool:
    """Only an index (ours or tantivy's) or an empty folder is ever deleted by ``--force``."""
    names = os.listdir(folder)
    return not names or os.path.isfile(stamp_path(folder, STAMP_STEP)) or "meta.json" in names


def build_index(memory_src: str, folder: str, force: bool = False, memory: Optional[Memory] = None) -> dict:
    """Build (or reuse) the index of ``memory_src`` in ``folder``. Returns ``{"reused": bool, "seconds",
    "docs", ...}``. An existing index of the same memory is reused; a stale or corrupt one is an error
    unless ``force`` (then rebuilt). The new index is built in a sibling folder and moved into place when
    complete, so a failed build never destroys the old index."""
    t0 = time.perf_counter()
    memory = memory or Memory(memory_src)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ToolError("exists and is not a folder", folder)
    if os.path.isdir(folder):
        try:
            _check_index(folder, memory)
            TantivyRetriever(folder)  # opens
            log(f"[tm] index {folder} is up to date (memory {memory.path}: {_describe(memory.info())}); "
                f"reused (--force rebuilds it)")
            return {"reused": True, "seconds": time.perf_counter() - t0, "docs": len(memory), "index": folder}
        except ToolError as e:
            if not force:
                raise
            if os.listdir(folder) and not _removable(folder):
                raise ToolError("exists and is not a translation-memory index; not deleting it "
                                "(choose another --index folder)", folder) from None
            log(f"[tm] --force: rebuilding {folder} ({e.message})")
        except Exception as e:  # noqa: BLE001 - tantivy cannot open it
            if not force:
                raise ToolError(f"corrupt index: tantivy cannot open it ({e}); rebuild it with "
                                f"build-index --force", folder) from None
            log(f"[tm] --force: rebuilding {folder} (tantivy cannot open it: {e})")
    parent = os.path.dirname(os.path.abspath(folder))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(folder))}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        t_idx = time.perf_counter()
        docs = TantivyRetriever.build(tmp, progress(memory.tokens, desc="index", unit="line"))
        index_seconds = time.perf_counter() - t_idx
        files = {name: {"size": os.path.getsize(os.path.join(tmp, name)),
                        "sha1": sha1_file(os.path.join(tmp, name))} for name in _index_files(tmp)}
        seconds = time.perf_counter() - t0
        write_stamp(tmp, STAMP_STEP, _index_params(memory), list(files),
                    extra={"memory_src": os.path.abspath(memory.path), "files": files, "docs": docs,
                           "build_seconds": round(seconds, 3)})
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"[tm] indexed {docs} memory lines of {memory.path} into {folder} in {seconds:.2f}s "
        f"(tantivy {index_seconds:.2f}s; {ENGINE})")
    return {"reused": False, "seconds": seconds, "index_seconds": index_seconds, "docs": docs, "index": folder}

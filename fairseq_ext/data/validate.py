"""Input validation, atomic output and step stamps for the corpus CLI (:mod:`fairseq_ext.data.corpora`).

Standard library only (no torch/fairseq), so that the CLI starts fast.

* :class:`CorpusError` -- the one exception type for bad input. Its message names the file (and the line,
  1-based, where there is one); the CLI prints ``error: <message>`` and exits with status 2.
* :func:`read_lines` -- strict UTF-8 line reader (``file:line`` on a decoding error).
* :func:`check_parallel` / :func:`check_folder` -- the checks behind ``corpora check``.
* :class:`OutputSet` / :func:`atomic_write` -- write to ``<name>.tmp-<pid>`` and rename only on success,
  so a failure never destroys outputs written before.
* :func:`stamp_ok` / :func:`write_stamp` -- a step is skipped when its stamp file records the same
  parameters and its outputs are still there with the recorded sizes.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from typing import Iterable, Iterator

SPLITS = ("train", "valid", "test")
DEFAULT_MAX_LEN = 1024
# file suffixes in a parallel folder that are not languages
NON_LANG_SUFFIXES = {"ids", "jsonl", "json", "tsv", "model", "vocab", "codes", "log", "txt"}


class CorpusError(ValueError):
    """Invalid corpus input or configuration. The message names the file (and line) at fault."""


def run_cli(main, argv=None) -> None:
    """Console entry point of the data CLIs: a :class:`CorpusError` becomes one line
    ``error: <message>`` on stderr and exit status 2 (no traceback)."""
    import sys

    try:
        rc = main(argv)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc)


# --------------------------------------------------------------------------- logging / progress
def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def progress(iterable: Iterable, desc: str = "", total: int | None = None, unit: str = "it") -> Iterable:
    """tqdm on stderr when it is installed and stderr is a terminal; the plain iterable otherwise."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return iterable
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, disable=None,
                leave=False, mininterval=0.5)


class Timer:
    def __init__(self) -> None:
        self.t0 = time.time()

    def seconds(self) -> float:
        return time.time() - self.t0

    def __str__(self) -> str:
        return f"{self.seconds():.1f}s"


# --------------------------------------------------------------------------- reading
def require_file(path: str, what: str = "input file") -> None:
    if not os.path.isfile(path):
        raise CorpusError(f"missing {what}: {path}")


def read_lines(path: str) -> list[str]:
    """All lines of a UTF-8 text file without their ``\\n``.

    Only ``\\n`` separates lines (not the other Unicode line breaks); a final newline is optional;
    a ``\\r`` stays part of the text. Invalid UTF-8 raises :class:`CorpusError` with ``file:line``.
    """
    require_file(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise CorpusError(f"{path}:{line}: invalid UTF-8 (byte 0x{data[e.start]:02x} at column {col})") from None
    if not text:
        return []
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n")


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
            raise CorpusError(f"{path}:{i}: empty segment")
        if max_len:
            n = len(line.split())
            if n > max_len:
                raise CorpusError(f"{path}:{i}: segment has {n} whitespace tokens, more than --max-len {max_len}")


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
            raise CorpusError(f"line counts differ: {p_ref} has {n_ref} lines but {p} has {n} lines")
    for p in paths:
        lines = read_lines(p)
        check_lines(p, lines, None if p.endswith(".ids") else max_len, allow_empty)
    return n_ref or 0


# --------------------------------------------------------------------------- parallel folders
def folder_languages(folder: str) -> list[str]:
    """Language suffixes of ``train.<lang>`` files in a folder (sorted)."""
    if not os.path.isdir(folder):
        raise CorpusError(f"missing input folder: {folder}")
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
        raise CorpusError(f"missing input file: {os.path.join(folder, 'train.<lang>')} "
                          f"(no train.<lang> file in {folder})")
    wanted = [x for x in (src, tgt) if x]
    for lang in wanted:
        if lang not in avail:
            raise CorpusError(f"unknown language code {lang!r} for {folder}: "
                              f"known codes are {', '.join(avail)}")
    if src and tgt and src == tgt:
        raise CorpusError(f"unknown language pair {src}-{tgt}: source and target are the same")
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
            raise CorpusError(f"{folder}: give --src and --tgt (languages here: {', '.join(avail)})")
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
            raise CorpusError(f"{path}:{i}: invalid JSON ({e.msg})") from None
        if not isinstance(d, dict) or "doc_id" not in d or "ids" not in d:
            raise CorpusError(f"{path}:{i}: a document needs the keys doc_id and ids")
        if d["doc_id"] in seen:
            raise CorpusError(f"{path}:{i}: duplicate doc_id {d['doc_id']!r}")
        seen.add(d["doc_id"])
        n = len(d["ids"])
        if n == 0:
            raise CorpusError(f"{path}:{i}: empty document {d['doc_id']!r}")
        for lang in langs:
            if lang not in d:
                raise CorpusError(f"{path}:{i}: document {d['doc_id']!r} has no {lang!r} list")
            if len(d[lang]) != n:
                raise CorpusError(f"{path}:{i}: document {d['doc_id']!r} has {n} ids but "
                                  f"{len(d[lang])} {lang!r} segments")
        if flat is not None:
            for key, lines in flat.items():
                if d[key] != lines[pos:pos + n]:
                    for j, seg in enumerate(d[key]):
                        if pos + j >= len(lines) or lines[pos + j] != seg:
                            raise CorpusError(
                                f"{path}:{i}: document {d['doc_id']!r} segment {j + 1} ({key}) differs "
                                f"from line {pos + j + 1} of the flat .{key} file")
        pos += n
        n_docs += 1
    if flat is not None:
        total = len(next(iter(flat.values()))) if flat else pos
        if pos != total:
            raise CorpusError(f"{path}: documents hold {pos} segments but the flat files have {total} lines")
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
                    raise CorpusError(f"{ids_path}:{i}: id {vid!r} already used in {where}")
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


# --------------------------------------------------------------------------- atomic output
def _tmp_name(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str | None = "utf-8") -> Iterator:
    """Write ``path`` through ``path.tmp-<pid>``; renamed into place only when the block succeeds."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = _tmp_name(path)
    kw = {"encoding": encoding} if "b" not in mode else {}
    try:
        with open(tmp, mode, **kw) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


class OutputSet:
    """Several output files that appear together: each is written to a temp name and all are renamed
    into place by :meth:`commit` (used as a context manager: commit on success, clean up on error)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.handles: dict[str, object] = {}
        self.tmp_paths: dict[str, str] = {}
        os.makedirs(folder, exist_ok=True)

    def path(self, name: str) -> str:
        """A temp path for ``name`` (for tools that write files themselves)."""
        final = os.path.join(self.folder, name)
        self.tmp_paths.setdefault(name, _tmp_name(final))
        return self.tmp_paths[name]

    def open(self, name: str, mode: str = "w"):
        if name not in self.handles:
            kw = {"encoding": "utf-8"} if "b" not in mode else {}
            self.handles[name] = open(self.path(name), mode, **kw)
        return self.handles[name]

    def write_text(self, name: str, text: str) -> None:
        self.open(name).write(text)

    def write_lines(self, name: str, lines: Iterable[str]) -> None:
        f = self.open(name)
        for line in lines:
            f.write(line + "\n")

    def copy(self, src: str, name: str) -> None:
        shutil.copyfile(src, self.path(name))

    def _close(self) -> None:
        for f in self.handles.values():
            f.close()
        self.handles = {}

    def commit(self) -> list[str]:
        self._close()
        done = []
        for name, tmp in self.tmp_paths.items():
            final = os.path.join(self.folder, name)
            os.replace(tmp, final)
            done.append(final)
        self.tmp_paths = {}
        return done

    def abort(self) -> None:
        self._close()
        for tmp in self.tmp_paths.values():
            with contextlib.suppress(OSError):
                os.remove(tmp)
        self.tmp_paths = {}

    def __enter__(self) -> "OutputSet":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False


# --------------------------------------------------------------------------- stamps
def stamp_path(folder: str, step: str) -> str:
    return os.path.join(folder, f".stamp.{step}.json")


def _outputs_state(folder: str, outputs: Iterable[str]) -> dict[str, int]:
    state = {}
    for rel in outputs:
        p = os.path.join(folder, rel)
        state[rel] = os.path.getsize(p) if os.path.isfile(p) else -1
    return state


def stamp_ok(folder: str, step: str, params: dict) -> bool:
    """True when ``folder`` holds a stamp for ``step`` with exactly ``params`` and every output the
    stamp lists still exists with the recorded size."""
    sp = stamp_path(folder, step)
    if not os.path.isfile(sp):
        return False
    try:
        with open(sp, encoding="utf-8") as f:
            st = json.load(f)
    except (OSError, json.JSONDecodeError):
        return False
    if st.get("params") != json.loads(json.dumps(params)):
        return False
    recorded = st.get("outputs", {})
    return bool(recorded) and _outputs_state(folder, recorded) == recorded


def write_stamp(folder: str, step: str, params: dict, outputs: Iterable[str], extra: dict | None = None) -> None:
    st = {"step": step, "params": params, "outputs": _outputs_state(folder, outputs),
          "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if extra:
        st.update(extra)
    with atomic_write(stamp_path(folder, step)) as f:
        json.dump(st, f, indent=1, ensure_ascii=False)
        f.write("\n")


def clear_stamp(folder: str, step: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(stamp_path(folder, step))


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

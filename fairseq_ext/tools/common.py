"""The one command-line convention of the offline tools, and what they share.

Every tool ``fairseq_ext.tools.X`` is a module with

* ``main(argv=None) -> int`` -- parses ``argv`` (with :class:`ArgumentParser`), does the work and returns
  the exit status; bad input raises :class:`ToolError` (so Python callers and tests get the exception);
* ``cli_main(argv=None)`` -- the console script ``fairseq-ext-X`` and ``python -m fairseq_ext.tools.X``:
  ``run_cli(main, argv)``, i.e. :class:`ToolError` (and a missing/unreadable file or checkpoint) becomes
  one line ``error: FILE:LINE: message`` on stderr and exit status 2, with no traceback;
* progress and log lines on stderr (:func:`log`, :func:`progress`), results on stdout or in files.

Shared helpers: :func:`read_lines` (strict UTF-8; only ``\\n`` ends a line), the JSON / JSON Lines
readers and writers (UTF-8, ``ensure_ascii=False``, atomic), :func:`atomic_write` / :class:`OutputSet`
(write to ``<name>.tmp-<pid>``, rename on success, so a failure never destroys earlier outputs), the
checks of a parallel folder (:func:`check_parallel`, :func:`check_folder`) and step stamps
(:func:`stamp_ok` / :func:`write_stamp`: a step is skipped when its stamp records the same parameters
and its outputs are still there with the recorded sizes).

Standard library only (no torch/fairseq at import time).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import time
from typing import Any, Callable, Iterable, Iterator, NoReturn, Optional, Sequence

SPLITS = ("train", "valid", "test")
DEFAULT_MAX_LEN = 1024
# file suffixes in a parallel folder that are not languages
NON_LANG_SUFFIXES = {"ids", "jsonl", "json", "tsv", "model", "vocab", "codes", "log", "txt", "rule"}


# --------------------------------------------------------------------------- errors and the entry point
class ToolError(ValueError):
    """Bad input or configuration of an offline tool: the one error type of :mod:`fairseq_ext.tools`.

    ``ToolError(message, path=None, line=None)``; ``str()`` is ``path:line: message`` (or ``path: message``,
    or the message alone), what the command line prints after ``error: ``.
    """

    def __init__(self, message: str, path: Optional[str] = None, line: Optional[int] = None) -> None:
        self.message, self.path, self.line = message, path, line
        where = f"{path}:{line}: " if path is not None and line is not None else (f"{path}: " if path else "")
        super().__init__(where + message)


CorpusError = ToolError  # the name the corpus tools used before; the same class


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the tools' error convention: a usage error is one line ``error: prog: message``
    on stderr and exit status 2 (subcommand parsers inherit it). The description is printed as written."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(2, f"error: {self.prog}: {message}\n")


def positive_int(s: str) -> int:
    """argparse type: an integer > 0."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {s}")
    return v


def _checkpoint_errors() -> tuple:
    """``(CheckpointError,)`` once the checkpoint helpers are loaded (only they raise it), else ``()``: a tool
    that reads no checkpoint does not import them (and with them torch and fairseq)."""
    mod = sys.modules.get("fairseq_ext.modules.checkpoint")
    return (mod.CheckpointError,) if mod is not None else ()


def _error_message(e: BaseException) -> str:
    if isinstance(e, (ToolError, *_checkpoint_errors())):
        text = str(e)
    elif isinstance(e, OSError) and e.filename is not None:
        text = f"{e.filename}: {e.strerror or e}"
    else:
        text = str(e) or e.__class__.__name__
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def cli_status(main: Callable[[Optional[Sequence[str]]], Optional[int]],
               argv: Optional[Sequence[str]] = None) -> int:
    """Run ``main(argv)`` the command-line way and return the exit status (``None`` counts as 0): a
    :class:`ToolError`, a :class:`~fairseq_ext.modules.checkpoint.CheckpointError` or an ``OSError``
    becomes one line ``error: <message>`` on stderr and status 2; Ctrl-C is ``error: interrupted``, 130.
    Usage errors of :class:`ArgumentParser` exit (status 2) from inside ``main``."""
    try:
        rc = main(None if argv is None else list(argv))
    except (ToolError, OSError, *_checkpoint_errors()) as e:
        sys.stdout.flush()
        print(f"error: {_error_message(e)}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr, flush=True)
        return 130
    return int(rc or 0)


def run_cli(main: Callable[[Optional[Sequence[str]]], Optional[int]],
            argv: Optional[Sequence[str]] = None) -> NoReturn:
    """The shared entry point of every tool (``cli_main``): ``sys.exit(cli_status(main, argv))``."""
    sys.exit(cli_status(main, argv))


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
        raise ToolError(f"missing {what}: {path}")


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a UTF-8 text file without their ``\\n`` (the one line reader of the tools).

    Only ``\\n`` separates lines (not ``\\r`` nor the other Unicode line breaks, so a lone ``\\r`` inside
    a segment does not split it); only the newline is stripped; a final newline is optional; empty lines
    are kept. Invalid UTF-8 raises :class:`ToolError` with ``file:line``.
    """
    path = os.fspath(path)
    require_file(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ToolError(f"invalid UTF-8 (byte 0x{data[e.start]:02x} at column {col})", path, line) from None
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


# --------------------------------------------------------------------------- parallel folders
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


# --------------------------------------------------------------------------- atomic output
def _tmp_name(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator:
    """Write ``path`` through ``path.tmp-<pid>``; renamed into place only when the block succeeds."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = _tmp_name(path)
    kw = {"encoding": encoding, "newline": newline} if "b" not in mode else {}
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

    def write_json(self, name: str, obj: Any, indent: int | None = 1) -> None:
        self.write_text(name, json_text(obj, indent))

    def write_jsonl(self, name: str, records: Iterable[Any]) -> None:
        self.write_lines(name, (json_line(r) for r in records))

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
    write_json(stamp_path(folder, step), st)


def clear_stamp(folder: str, step: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(stamp_path(folder, step))


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- JSON / JSON Lines
def json_safe(obj: Any) -> Any:
    """``obj`` with NaN/inf floats as ``None`` (valid JSON), tuples as lists and keys as strings."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def json_text(obj: Any, indent: int | None = 1) -> str:
    """``obj`` as a JSON document (UTF-8 text kept as is, NaN/inf as null) ending in a newline."""
    return json.dumps(json_safe(obj), indent=indent, ensure_ascii=False) + "\n"


def json_line(obj: Any) -> str:
    """One JSON Lines record (UTF-8 text kept as is, no newline)."""
    return json.dumps(json_safe(obj), ensure_ascii=False)


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file; invalid JSON is a :class:`ToolError` naming the file and line."""
    path = os.fspath(path)
    require_file(path)
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ToolError(f"invalid JSON ({e.msg})", path, e.lineno) from None


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> str:
    """Write ``obj`` as UTF-8 JSON (``ensure_ascii=False``, NaN/inf as null), atomically."""
    path = os.fspath(path)
    with atomic_write(path) as f:
        f.write(json_text(obj, indent))
    return path


def read_jsonl(path: str | os.PathLike) -> list:
    """The records of a JSON Lines file, one per line; a line that is not JSON (a blank one too) is a
    ``file:line`` error."""
    path = os.fspath(path)
    out = []
    for i, line in enumerate(read_lines(path), 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ToolError(f"invalid JSON ({e.msg})", path, i) from None
    return out


def write_jsonl(path: str | os.PathLike, records: Iterable[Any]) -> str:
    """Write one JSON record per line (UTF-8, ``ensure_ascii=False``), atomically."""
    path = os.fspath(path)
    with atomic_write(path) as f:
        for r in records:
            f.write(json_line(r) + "\n")
    return path

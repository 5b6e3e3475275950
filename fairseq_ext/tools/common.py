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
(write to ``<name>.tmp-<pid>``, rename on success, so a failure never destroys earlier outputs) and step stamps
(:func:`stamp_ok` / :func:`write_stamp`: a step is skipped when its stamp records the same parameters
and its outputs are still there with the recorded sizes). The checks of a parallel folder are
:mod:`fairseq_ext.tools.corpora.folder_checks`.

Standard library only (no torch/fairseq at import time).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import re
import shutil
import sys
import time
from typing import Any, Callable, Iterable, Iterator, NoReturn, Optional, Sequence

SPLITS = ("train", "valid", "test")


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


# --------------------------------------------------------------------------- the machine
def cpu_name() -> str:
    """The CPU's model name and the widest matrix ISA it exposes (AMX, AVX512-BF16, AVX512, AVX2), for the
    machine line of a measured table."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read()
        model = re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
        flags = re.search(r"flags\s*:\s*(.*)", text).group(1).split()
        isa = "AMX" if "amx_tile" in flags else "AVX512-BF16" if "avx512_bf16" in flags else \
            "AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
        return f"{model} ({isa})" if isa else model
    except (OSError, AttributeError):
        return platform.processor() or platform.machine() or "CPU"

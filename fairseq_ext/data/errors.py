"""Errors in a user's input files, reported as one line.

Every plugin task raises a subclass of :class:`UserDataError` when a file the user gave is wrong (an ids file,
a translation memory, a conversation file, a lexicon, a generated-context file, a checkpoint): its message names
the file and, where there is one, the line (``data/mine/bin/train.ids:12: ...``). Raised inside
``fairseq-train``/``fairseq-generate``/``fairseq-interactive`` and not caught, it is printed as
``error: MESSAGE`` on stderr without a Python traceback (the style of the offline tools,
:mod:`fairseq_ext.tools.common`) and the process exits with status 2; any other exception keeps Python's
traceback. Code that calls the plugin catches the exception as usual (it is a ``ValueError``).
"""
import sys


class UserDataError(ValueError):
    """A file the user gave is wrong; the message names the file (and line)."""


_previous_hook = None


def _hook(exc_type, exc, tb):
    if isinstance(exc, UserDataError):
        sys.stderr.write(f"error: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(2)
    (_previous_hook or sys.__excepthook__)(exc_type, exc, tb)


def install_excepthook() -> None:
    """Make an uncaught :class:`UserDataError` one ``error:`` line (idempotent; chains to the hook before it)."""
    global _previous_hook
    if sys.excepthook is not _hook:
        _previous_hook = sys.excepthook
        sys.excepthook = _hook


install_excepthook()

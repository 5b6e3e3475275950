"""Console scripts that run fairseq's own CLIs with this plugin loaded.

``fairseq-ext-train ARGS`` is ``fairseq-train --user-dir <installed fairseq_ext> ARGS`` (likewise
``-generate`` and ``-interactive``): fairseq has no entry-point plugin discovery, so the stock
commands need ``--user-dir`` on every call, including generation from a plugin checkpoint.
"""
from __future__ import annotations

import os
import sys

USER_DIR = os.path.dirname(os.path.abspath(__file__))


def with_user_dir(argv: list[str]) -> list[str]:
    """Add ``--user-dir`` pointing at this package unless the caller already gave one."""
    if any(a == "--user-dir" or a.startswith("--user-dir=") for a in argv):
        return list(argv)
    return ["--user-dir", USER_DIR] + list(argv)


def _run(module: str, prog: str) -> None:
    import importlib

    # registers when fairseq_cli.X imports fairseq, so after fairseq_cli.X set logging up (its format, INFO)
    # and before fairseq builds its parsers (the compat layer's --quantize)
    import fairseq_ext  # noqa: F401

    sys.argv = [prog] + with_user_dir(sys.argv[1:])
    importlib.import_module(module).cli_main()


def train_main() -> None:
    _run("fairseq_cli.train", "fairseq-train")


def generate_main() -> None:
    _run("fairseq_cli.generate", "fairseq-generate")


def interactive_main() -> None:
    _run("fairseq_cli.interactive", "fairseq-interactive")


def user_dir() -> None:
    """``python -m fairseq_ext.cli`` prints the path to pass to ``--user-dir``."""
    print(USER_DIR)


if __name__ == "__main__":
    user_dir()

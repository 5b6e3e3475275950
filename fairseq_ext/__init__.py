"""fairseq_ext — a fairseq plugin for the systems of five NMT theses.

``fairseq-train --user-dir fairseq_ext`` (from the repo root) or ``--user-dir $(python -m
fairseq_ext.cli)`` (installed package) imports this module, which applies the torch-2.13 / numpy-2
fixes once (:mod:`fairseq_ext._compat`) and imports the registered layers so that every architecture,
criterion, task, generator and LR scheduler registers (fairseq's ``import_user_module`` auto-imports
only ``models/`` and ``tasks/``).

The layout, and the one rule of imports (``tests/test_layout.py`` enforces it)
==============================================================================
* **Registered** (what ``--user-dir`` imports): ``models/``, ``criterions/``, ``tasks/``,
  ``generators/``, ``optim/``.
* **Shared below them**: ``modules/`` (layers and model-side helpers: arch presets, the target
  vocabulary mask, word dropout, decoding helpers, checkpoint loading), ``data/`` (datasets and
  batching used while training or decoding) and the compat layer ``_compat.py``.
* **Offline tools**: ``tools/`` (corpora, segmentation, alignment, distillation, lexicons,
  scoring, analysis), each a ``python -m fairseq_ext.tools.X`` module and a ``fairseq-ext-*`` console
  script with one command-line convention (:mod:`fairseq_ext.tools.common`).

**What is registered depends only on** ``modules/``, ``data/`` **and the compat layer — never on
another registered package, except a task or generator using a model's public interface and a task
building its generator, and never on the offline tools.**  ``modules/`` and ``data/`` import neither the registered packages nor the
tools; the tools may import anything.  No module imports a private (``_x``) name of another.
"""
import logging

# fairseq's speech task logs "Please install tensorboardX" at import; not relevant to text MT.
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)

from . import _compat  # noqa: E402

_compat.apply()

from . import criterions, data, generators, models, modules, optim, tasks  # noqa: E402,F401  (registration)

__version__ = "0.1.0"

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

When the plugin registers
=========================
Registering means importing torch and fairseq (seconds); the offline tools mostly need neither.  So
``import fairseq_ext`` itself is light and the plugin registers (:func:`register`: the compat fixes, then
every registered layer) at the first of

* ``import fairseq_ext`` when torch or fairseq is already imported (``fairseq-train --user-dir``,
  ``fairseq-generate``, ``fairseq-interactive`` import fairseq before the user dir);
* the end of the first import of fairseq, or of torch outside fairseq's own import (a small import hook,
  :class:`_RegisterOnImport`: ``import fairseq_ext`` followed by fairseq or by ``torch.load`` of a checkpoint
  gets everything registered and the safe-globals allow-list);
* the import of a registered or shared layer (``fairseq_ext.models``, ``.data``, ``._compat`` ...): the plugin
  registers before that package runs, so no layer ever sees another one half imported.

A tool that touches neither (``fairseq-ext-tm --help``, ``fairseq-ext-score``) never pays for them.
"""
import importlib.abc
import logging
import sys
import warnings

__version__ = "0.1.0"

# fairseq's speech task logs "Please install tensorboardX" at import; not relevant to text MT.
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)

# Hydra's deprecation notices about how fairseq calls it (every fairseq-train/-generate prints them); the
# messages start with a newline, hence ``\s*``.  Only these three: any other warning still shows.
for _notice in (r"\s*The strict flag in the compose API is deprecated",
                r"\s*The version_base parameter is not specified",
                r"\s*'config' is validated against ConfigStore schema with the same name"):
    warnings.filterwarnings("ignore", message=_notice, category=UserWarning)

#: what the plugin adapts: registration follows their first import
_TRIGGERS = ("torch", "fairseq")
#: the registered and shared layer packages: importing one registers the plugin before its body runs
_LAYERS = tuple(f"{__name__}.{n}" for n in ("criterions", "data", "generators", "models", "modules", "optim", "tasks"))
#: the compat layer registers the plugin after its body (``register`` needs it complete)
_COMPAT = f"{__name__}._compat"
_state = {"registered": False, "registering": False, "loading": 0}


def register() -> None:
    """Apply the torch/numpy compat fixes and import every registered layer, once (see the module doc)."""
    if _state["registered"] or _state["registering"]:
        return
    _state["registering"] = True
    try:
        from . import _compat

        _compat.apply()
        from . import criterions, data, generators, models, modules, optim, tasks  # noqa: F401  (registration)

        _state["registered"] = True
    finally:
        _state["registering"] = False
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader that the other finders give torch, fairseq and the plugin's
    layers, so that :func:`register` runs before a layer package's body, after the compat layer's, and after
    torch's or fairseq's unless a layer is loading (it registers itself) or fairseq is (torch imported by
    fairseq's own import: registration waits until fairseq is complete)."""

    def find_spec(self, name, path=None, target=None):
        if _state["registered"] or name not in _TRIGGERS + _LAYERS + (_COMPAT,):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_body = loader.exec_module  # a loader object of this spec alone: patch the instance only
        layer = name in _LAYERS or name == _COMPAT

        def exec_module(module):
            try:
                if name in _LAYERS:
                    register()
                _state["loading"] += layer
                try:
                    run_body(module)
                finally:
                    _state["loading"] -= layer
            finally:
                del loader.exec_module
            if name == _COMPAT or (name in _TRIGGERS and not _state["loading"]
                                   and (name == "fairseq" or "fairseq" not in sys.modules)):
                register()

        loader.exec_module = exec_module
        return spec


_HOOK = _RegisterOnImport()
if any(m in sys.modules for m in _TRIGGERS):
    register()
else:
    sys.meta_path.insert(0, _HOOK)

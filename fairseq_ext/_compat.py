"""The one place where fairseq-fixed 0.12.3.1 is adapted to torch 2.13 / numpy 2.x.

Everything here is applied once, by ``import fairseq_ext`` (which ``--user-dir fairseq_ext`` does):

1. Checkpoints load with ``weights_only=True``: the globals a fairseq checkpoint holds
   (``argparse.Namespace``, numpy scalars in ``extra_state``) are allow-listed with
   :func:`torch.serialization.add_safe_globals`; unknown globals still fail.
2. The numpy aliases ``np.float`` / ``np.int`` / ``np.compat.long`` that fairseq still uses.
3. No sentence is dropped by batching: :func:`_complete_batches` wraps ``data_utils.batch_by_size`` so
   that a final batch smaller than ``--required-batch-size-multiple`` comes back.
4. CPU distributed training under torchrun (:func:`patch_distributed`: device id from ``LOCAL_RANK``
   without a GPU; gloo backend).
5. An unreadable checkpoint is one ``error:`` line (:func:`patch_checkpoint_loading` raises
   :class:`fairseq_ext.modules.checkpoint.CheckpointError`); safe loading is never advised off.
6. A run that stops mid-epoch exits cleanly (:func:`patch_background_loader` stops the prefetching
   thread between batches).
7. Harmless per-command warnings are quieted.
10. A finished epoch's DataLoader workers end when fairseq builds a new epoch iterator
    (:func:`patch_train_iterator_workers`).
12. ``--help`` lists the options of the named task, architecture and criterion (:func:`patch_help`).
13. A failed validation keeps the trained weights: :func:`patch_validation_save` saves
    ``checkpoint_last.pt`` before the error goes on.

(8, 9 and 11 are features of the plugin, each in its own module: ``--quantize int8`` in
:mod:`fairseq_ext.modules.fast_inference`, the fold of frozen weights under CPU bf16 autocast in
:mod:`fairseq_ext.modules.frozen_linear`, early-stopping state across a resumption in
:mod:`fairseq_ext.modules.patience_resume`.)
"""
from __future__ import annotations

import argparse
import functools
import logging
import sys
import warnings

import numpy as np
import torch

logger = logging.getLogger(__name__)

_APPLIED = False


def apply_numpy_aliases() -> None:
    """``np.float``/``np.int`` were removed in numpy 1.24 and ``np.compat`` in 2.0; fairseq still uses them."""
    for name, typ in (("float", float), ("int", int)):
        if name not in np.__dict__:
            setattr(np, name, typ)
    if "compat" not in np.__dict__:
        import types

        np.compat = types.SimpleNamespace(long=int)  # numpy < 2: np.compat.long is int on Python 3


def safe_globals() -> list:
    """The allow-list of non-tensor globals found in fairseq (and fairseq_ext) checkpoints."""
    out: list = [argparse.Namespace]  # the legacy ``args`` of every fairseq checkpoint
    # numpy scalars/arrays appear in extra_state (e.g. best metric values, train iterator state).
    out += [np.dtype, np.ndarray]
    try:  # numpy >= 2 moved the private module; both spellings reach the same reconstruct function
        from numpy._core.multiarray import _reconstruct, scalar

        out += [_reconstruct, scalar]
    except ImportError:  # pragma: no cover - numpy 1.x
        pass
    for name in ("Float64DType", "Float32DType", "Int64DType", "Int32DType", "BoolDType"):
        dt = getattr(np.dtypes, name, None)
        if dt is not None:
            out.append(dt)
    out += [np.float64, np.float32, np.int64, np.int32, np.bool_]
    return [g for g in out if g is not None]


def register_safe_globals(extra: list | None = None) -> None:
    """Allow-list the globals fairseq pickles; later issues may add their own with ``extra``."""
    torch.serialization.add_safe_globals(safe_globals() + list(extra or []))


def _complete_batches(batch_by_size):
    def wrapper(indices, *args, **kwargs):
        batches = batch_by_size(indices, *args, **kwargs)
        seen = sum(len(b) for b in batches)
        n = len(indices)
        if seen == n:
            return batches
        covered = np.zeros(0, dtype=np.int64) if not batches else np.concatenate(
            [np.asarray(b, dtype=np.int64) for b in batches])
        idx = np.asarray(indices, dtype=np.int64)
        missing = idx[~np.isin(idx, covered)]
        if len(missing):
            logger.info("fairseq_ext: batcher dropped %d of %d indices; adding them as a final batch",
                        len(missing), n)
            batches = list(batches) + [missing]
        return batches

    wrapper.__wrapped__ = batch_by_size
    wrapper._fairseq_ext_complete = True
    return wrapper


def patch_batching() -> None:
    from fairseq.data import data_utils

    if not getattr(data_utils.batch_by_size, "_fairseq_ext_complete", False):
        data_utils.batch_by_size = _complete_batches(data_utils.batch_by_size)


def patch_distributed() -> None:
    import os

    from fairseq.distributed import utils as dist_utils
    from fairseq.models import distributed_fairseq_model as dfm

    orig_infer = dist_utils._infer_torch_distributed_launch_init
    if getattr(orig_infer, "_fairseq_ext", False):
        return

    def infer_launch_init(cfg):
        if torch.cuda.device_count() > 0:
            return orig_infer(cfg)
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.device_id = 0  # no CUDA device to select; ranks are told apart by RANK
        cfg.distributed_no_spawn = True

    infer_launch_init._fairseq_ext = True
    dist_utils._infer_torch_distributed_launch_init = infer_launch_init

    ddp = dfm.DistributedDataParallel

    class CPUAwareDDP(ddp):
        def __init__(self, module, *args, device_ids=None, output_device=None, **kwargs):
            if next(module.parameters()).device.type == "cpu":
                device_ids, output_device = None, None
            super().__init__(module, *args, device_ids=device_ids, output_device=output_device, **kwargs)

    dfm.DistributedDataParallel = CPUAwareDDP


def patch_training_time() -> None:
    """``--stop-time-hours`` must count the new run's time after ``--finetune-from-model`` / ``--reset-meters``.

    ``Trainer.load_checkpoint`` restores ``previous_training_time`` from the checkpoint's extra state
    even when the meters are reset, which is what ``--finetune-from-model`` asks for: a child model
    fine-tuned from a parent trained for 20 minutes stopped after one update under a 10-minute
    budget (measured).  With ``reset_meters`` the clock starts at zero, as the other meters do.
    """
    import inspect
    import time

    from fairseq import trainer as trainer_mod

    orig = trainer_mod.Trainer.load_checkpoint
    if getattr(orig, "_fairseq_ext", False):
        return
    sig = inspect.signature(orig)

    def load_checkpoint(self, *args, **kwargs):
        try:
            extra_state = orig(self, *args, **kwargs)
        except Exception as exc:
            # fairseq re-raises any failure to load the weights as a bare Exception naming the file ("please
            # ensure that the architectures match"); a plugin's UserDataError behind it (a warm start that does
            # not fit) is what the user should read, as its one line, with the file
            from fairseq_ext.data.errors import UserDataError

            cause = exc.__context__
            if isinstance(cause, UserDataError) and not isinstance(exc, UserDataError):
                filename = sig.bind(self, *args, **kwargs).arguments.get("filename")
                raise type(cause)(f"{filename}: {cause}") from None
            raise
        if sig.bind(self, *args, **kwargs).arguments.get("reset_meters", False):
            self._previous_training_time = 0
            self._start_time = time.time()
        return extra_state

    load_checkpoint._fairseq_ext = True
    load_checkpoint.__wrapped__ = orig
    trainer_mod.Trainer.load_checkpoint = load_checkpoint


def _checkpoint_reason(exc: BaseException) -> str:
    """A short reason for a failed ``torch.load`` that does not repeat torch's advice."""
    import pickle
    import re

    msg = str(exc)
    m = re.search(r"Unsupported global: GLOBAL ([\w.]+)", msg)
    if m:
        return f"it holds {m.group(1)}, which safe loading (weights_only=True) does not allow"
    if isinstance(exc, (EOFError, pickle.UnpicklingError)) or "PytorchStreamReader" in msg \
            or "zip archive" in msg or "central directory" in msg:
        return "corrupt or truncated file"
    first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
    return first.split(" Please ")[0][:200]


def patch_checkpoint_loading() -> None:
    from fairseq import checkpoint_utils

    from fairseq_ext.modules.checkpoint import CheckpointError

    orig = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(orig, "_fairseq_ext", False):
        return

    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return orig(path, *args, **kwargs)
        except FileNotFoundError:
            raise
        except (RuntimeError, EOFError, ValueError, OSError, ImportError, AttributeError) as exc:
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(f"not a readable fairseq checkpoint: {path} "
                                  f"({_checkpoint_reason(exc)})") from None
        except Exception as exc:  # pickle.UnpicklingError and friends
            if type(exc).__module__.startswith("pickle") or "Unpickl" in type(exc).__name__:
                raise CheckpointError(f"not a readable fairseq checkpoint: {path} "
                                      f"({_checkpoint_reason(exc)})") from None
            raise

    load_checkpoint_to_cpu._fairseq_ext = True
    load_checkpoint_to_cpu.__wrapped__ = orig
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu


def patch_background_loader() -> None:
    """Stop fairseq's prefetch threads at interpreter exit (fix 6)."""
    import atexit
    import queue
    import threading
    import weakref

    from fairseq.data import iterators

    base = iterators.BackgroundConsumer
    if getattr(base, "_fairseq_ext", False):
        return
    stopping = threading.Event()
    live: weakref.WeakSet = weakref.WeakSet()

    def put(q: queue.Queue, item) -> bool:
        """``q.put(item)`` unless the process is exiting; False if it is."""
        while not stopping.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    class StoppableConsumer(base):
        _fairseq_ext = True

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            live.add(self)

        def run(self):
            if self.cuda_device is not None:
                torch.cuda.set_device(self.cuda_device)
            try:
                for item in self._source:
                    if not put(self._queue, item):
                        return
                    self.count += 1
                    if self._max_len is not None and self.count >= self._max_len:
                        break
                    if stopping.is_set():
                        return
                put(self._queue, iterators._sentinel)
            except Exception as e:  # handed to the consumer, as fairseq does
                put(self._queue, e)

    def stop_all() -> None:
        stopping.set()
        for thread in list(live):
            if thread.is_alive():
                thread.join(timeout=60)

    atexit.register(stop_all)
    iterators.BackgroundConsumer = StoppableConsumer


def quiet_warnings() -> None:
    """Harmless per-command warnings of the base (fix 7); Hydra's three deprecation notices are filtered in
    ``fairseq_ext/__init__.py``, before fairseq is imported. ``(?s)``: some messages start with a newline."""
    for pattern in (
        r"(?s).*hydra.experimental.*", r"(?s).*deprecated keyword in package header.*",
        r"(?s).*pin_memory.*", r"(?s).*torch.cuda.amp.autocast.*", r"(?s).*torch.jit.script.*",
        r"(?s).*mismatched key_padding_mask and attn_mask.*",
    ):
        warnings.filterwarnings("ignore", message=pattern)


# ------------------------------------------------------------------------------------ fix 10
def release_finished_train_iterator(trainer, itr) -> None:
    """Remember ``itr`` as ``trainer``'s training iterator; if another one was handed out before, its epoch is over:
    shut its persistent DataLoader workers down (fix 10). ``itr`` None releases the last one."""
    prev = getattr(trainer, "_fairseq_ext_train_itr", None)
    if prev is not None and prev is not itr:
        for start in ("dataloader", "_cur_epoch_itr", "_next_epoch_itr"):
            for workers in _worker_iterators(getattr(prev, start, None)):
                workers._shutdown_workers()
        prev.dataloader = prev._cur_epoch_itr = prev._next_epoch_itr = None
    trainer._fairseq_ext_train_itr = itr


def _worker_iterators(obj, depth: int = 0):
    """The multi-process DataLoader iterators behind an epoch iterator's wrappers (fairseq's CountingIterator
    ``_itr``, BufferedIterator ``_iterable``, a reused DataLoader's persistent ``_iterator``)."""
    if obj is None or depth > 4:
        return
    if hasattr(obj, "_shutdown_workers"):
        yield obj
        return
    if isinstance(obj, torch.utils.data.DataLoader):
        yield from _worker_iterators(getattr(obj, "_iterator", None), depth + 1)
        obj._iterator = None
        return
    for name in ("_itr", "_iterable"):
        yield from _worker_iterators(getattr(obj, name, None), depth + 1)


def patch_train_iterator_workers() -> None:
    """Wrap ``Trainer.get_train_iterator`` with :func:`release_finished_train_iterator` (fix 10)."""
    import functools

    from fairseq.trainer import Trainer

    orig = Trainer.get_train_iterator
    if getattr(orig, "_fairseq_ext", False):
        return

    @functools.wraps(orig)
    def get_train_iterator(self, *args, **kwargs):
        itr = orig(self, *args, **kwargs)
        release_finished_train_iterator(self, itr)
        return itr

    get_train_iterator._fairseq_ext = True
    Trainer.get_train_iterator = get_train_iterator
# ------------------------------------------------------------------------------------ end of fix 10


# ------------------------------------------------------------------------------------ fix 12
def first_parse_without_help(parser: argparse.ArgumentParser) -> None:
    """Make the next ``parser.parse_known_args`` -- fairseq's first pass -- ignore ``-h``/``--help`` and the
    required arguments (fix 12); the passes after it are argparse's own again."""
    if "parse_known_args" in vars(parser):  # already prepared (an outer call, suppress_defaults)
        return
    helps = {s for a in parser._actions if isinstance(a, argparse._HelpAction) for s in a.option_strings}
    orig = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        del parser.parse_known_args
        argv = sys.argv[1:] if args is None else list(args)
        end = argv.index("--") if "--" in argv else len(argv)  # after "--" nothing is an option
        if not helps.intersection(argv[:end]):
            return orig(args, namespace)
        required = [a for a in parser._actions if a.required]
        for a in required:
            a.required = False
        try:
            known, extra = orig([a for a in argv[:end] if a not in helps] + argv[end:], namespace)
        finally:
            for a in required:
                a.required = True
        if getattr(known, "arch", "") is None:  # no --arch: no model options to list (and none to look up)
            del known.arch
        return known, extra

    parser.parse_known_args = parse_known_args


def patch_help() -> None:
    """Wrap ``options.parse_args_and_arch`` with :func:`first_parse_without_help`, and prepare the parser of a
    call in progress that is importing the plugin (fix 12)."""
    from fairseq import options

    orig = options.parse_args_and_arch
    if getattr(orig, "_fairseq_ext", False):
        return
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not orig.__code__:
        frame = frame.f_back
    if frame is not None and isinstance(frame.f_locals.get("parser"), argparse.ArgumentParser):
        first_parse_without_help(frame.f_locals["parser"])  # its first parse is still to come
    del frame

    @functools.wraps(orig)
    def parse_args_and_arch(parser, *args, **kwargs):
        first_parse_without_help(parser)
        try:
            return orig(parser, *args, **kwargs)
        finally:
            vars(parser).pop("parse_known_args", None)

    parse_args_and_arch._fairseq_ext = True
    options.parse_args_and_arch = parse_args_and_arch
# ------------------------------------------------------------------------------------ end of fix 12


# ------------------------------------------------------------------------------------ fix 13
def patch_validation_save() -> None:
    """Save ``checkpoint_last.pt`` before an exception in ``fairseq_cli.train.validate`` propagates (fix 13)."""
    import os

    train = sys.modules.get("fairseq_cli.train")
    orig = getattr(train, "validate", None)
    if orig is None or getattr(orig, "_fairseq_ext", False):
        return

    @functools.wraps(orig)
    def validate(cfg, trainer, task, epoch_itr, subsets, *args, **kwargs):
        try:
            return orig(cfg, trainer, task, epoch_itr, subsets, *args, **kwargs)
        except BaseException as exc:
            if cfg.checkpoint.no_save or not trainer.should_save_checkpoint_on_current_rank:
                raise
            path = os.path.join(cfg.checkpoint.save_dir, "checkpoint_last.pt")
            try:  # as fairseq's checkpoint_utils.save_checkpoint does, without a validation loss
                from fairseq import checkpoint_utils

                trainer.consolidate_optimizer()
                extra = {"train_iterator": epoch_itr.state_dict(), "val_loss": None}
                if hasattr(checkpoint_utils.save_checkpoint, "best"):
                    extra["best"] = checkpoint_utils.save_checkpoint.best
                trainer.save_checkpoint(path, extra)
            except Exception as save_exc:  # the original error matters more
                logger.error("validation failed (%s) and saving %s failed too (%s)", type(exc).__name__, path,
                             save_exc)
                raise exc
            logger.error("validation failed (%s: %s); the weights after %d updates were saved to %s first: "
                         "the same command resumes from them", type(exc).__name__, str(exc).splitlines()[0][:200]
                         if str(exc) else "", trainer.get_num_updates(), path)
            raise

    validate._fairseq_ext = True
    train.validate = validate
# ------------------------------------------------------------------------------------ end of fix 13


def apply() -> None:
    """Apply every fix, once.  Called by ``fairseq_ext/__init__.py``."""
    global _APPLIED
    if _APPLIED:
        return
    quiet_warnings()
    apply_numpy_aliases()
    register_safe_globals()
    patch_batching()
    patch_distributed()
    patch_training_time()
    patch_checkpoint_loading()
    patch_background_loader()
    patch_train_iterator_workers()  # fix 10
    patch_help()  # fix 12
    patch_validation_save()  # fix 13
    _APPLIED = True

"""Binarize a segmented parallel folder with fairseq's preprocessing (``fairseq-ext-data binarize``): the
result is ``<out>/bin`` with the ``{split}.ids`` and ``segment.json`` of the input copied next to it, redone only
when an input changed (a stamp of the inputs' fingerprints). The inputs are checked first with the same
length limit ``bpe`` checks (:func:`fairseq_ext.tools.corpora.segment.validate_inputs`), so a violation is
one ``error: FILE:LINE: message``; the new ``bin/`` replaces the old one only once complete.

Used by :mod:`fairseq_ext.tools.corpora.corpora` (``binarize``, ``prepare``),
:mod:`fairseq_ext.tools.corpora.universal_data` and :mod:`fairseq_ext.tools.corpora.transfer`;
:func:`run_preprocess` (fairseq-preprocess in this process) serves every tool that binarizes.
This module imports fairseq only when it runs.
"""
from __future__ import annotations

import logging
import os
import shutil

from fairseq_ext.tools.common import Timer, ToolError, log, read_json, stamp_ok, write_stamp
from fairseq_ext.tools.corpora.folder_checks import DEFAULT_MAX_LEN, resolve_pair
from fairseq_ext.tools.corpora.segment import fingerprint, validate_inputs

__all__ = ["binarize", "run_preprocess", "swap_in"]


def run_preprocess(argv: list[str]) -> None:
    """fairseq-preprocess with the command line ``argv``, in this process; arguments it rejects are one
    :class:`~fairseq_ext.tools.common.ToolError`, and the log file handler each call adds is removed again."""
    from fairseq import options
    from fairseq_cli import preprocess

    plog = logging.getLogger("fairseq_cli.preprocess")
    handlers = list(plog.handlers)
    try:
        try:
            args = options.get_preprocessing_parser().parse_args(argv)
        except SystemExit:
            raise ToolError(f"fairseq-preprocess rejected the arguments {' '.join(argv)}") from None
        preprocess.main(args)
    finally:
        for h in plog.handlers[:]:  # preprocess.main adds a FileHandler (preprocess.log) per call
            if h not in handlers:
                plog.removeHandler(h)
                h.close()


def swap_in(tmp: str, final: str) -> None:
    """Replace the folder ``final`` by ``tmp`` (the old one is removed only once the new one is there)."""
    old = f"{final}.old-{os.getpid()}"
    if os.path.exists(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def binarize(inp: str, out: str | None = None, src: str | None = None, tgt: str | None = None,
             joined: bool = True, workers: int = 1, max_len: int | None = DEFAULT_MAX_LEN,
             force: bool = False, extra_args: list[str] | None = None) -> str:
    """Run fairseq's preprocessing on the segmented folder ``inp``; the result is ``<out>/bin``
    (``out`` defaults to ``inp``). ``{split}.ids`` and ``segment.json`` are copied next to it."""
    out = out or inp
    s, t_ = resolve_pair(inp, src, tgt)
    langs = [s, t_]
    log(f"[binarize] validating {inp} ({s}-{t_})")
    counts = validate_inputs(inp, langs, max_len)
    splits = list(counts)
    bin_dir = os.path.join(out, "bin")
    names = [f"{sp}.{x}" for sp in splits for x in langs + ["ids"]]
    params = {"version": 1, "src": s, "tgt": t_, "joined": joined, "splits": splits,
              "extra_args": extra_args or [], "inputs": fingerprint(inp, names)}
    if not force and stamp_ok(bin_dir, "binarize", params):
        log(f"[binarize] {bin_dir} is up to date; skipping (--force redoes it)")
        return bin_dir
    t0 = Timer()
    log(f"[binarize] fairseq preprocess {inp} -> {bin_dir} ({', '.join(f'{k} {v}' for k, v in counts.items())})")
    tmp = f"{bin_dir}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    argv = ["--source-lang", s, "--target-lang", t_, "--destdir", tmp, "--workers", str(max(1, workers))]
    for sp in ("train", "valid"):
        if sp in splits:
            argv += [f"--{sp}pref", os.path.join(inp, sp)]
    tests = [sp for sp in splits if sp not in ("train", "valid")]  # test, then the held-out books' split
    if tests:
        argv += ["--testpref", ",".join(os.path.join(inp, sp) for sp in tests)]
    if joined:
        argv.append("--joined-dictionary")
    seg_info = os.path.join(inp, "segment.json")
    if os.path.exists(seg_info) and not any(a.startswith("--nwords") for a in extra_args or []):
        info = read_json(seg_info)
        if info.get("method") == "word":  # word level: the --vocab-size most frequent types
            argv += ["--nwordssrc", str(info["vocab_size"]), "--nwordstgt", str(info["vocab_size"])]
    argv += extra_args or []
    try:
        run_preprocess(argv)
        for k, sp in enumerate(tests):  # fairseq names the k-th test prefix test, test1, test2, ...
            named = "test" if k == 0 else f"test{k}"
            if named != sp:
                for f in os.listdir(tmp):
                    if f.startswith(named + "."):
                        os.replace(os.path.join(tmp, f), os.path.join(tmp, sp + f[len(named):]))
        outputs = []
        for sp in splits:
            ids = os.path.join(inp, f"{sp}.ids")
            if os.path.exists(ids):
                shutil.copyfile(ids, os.path.join(tmp, f"{sp}.ids"))
        if os.path.exists(os.path.join(inp, "segment.json")):
            shutil.copyfile(os.path.join(inp, "segment.json"), os.path.join(tmp, "segment.json"))
        for name in sorted(os.listdir(tmp)):
            if not name.startswith(".") and name != "preprocess.log":
                outputs.append(name)
        write_stamp(tmp, "binarize", params, outputs)
        swap_in(tmp, bin_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"[binarize] wrote {bin_dir} in {t0}")
    return bin_dir

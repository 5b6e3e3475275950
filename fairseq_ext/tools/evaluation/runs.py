"""What the recipe drivers (``recipes/**/*.py``) share to run fairseq's command lines and report on them:

* :func:`run_logged`: a command with its stdout+stderr written to a log file, progress lines echoed, one error
  line with the log's tail when it fails;
* :func:`logger`: a ``[tag HH:MM:SS] message`` printer on stderr;
* :func:`post_process`, :func:`raw_folder`: a prepared data folder's detokenisation and its raw (reference)
  folder, from the ``segment.json`` that ``fairseq-ext-data`` / ``corpora prepare`` wrote;
* :func:`fmt`: a table cell of a number that may be missing;
* :data:`PACKAGE`, :data:`ROOT`: the plugin's folder (``--user-dir``) and the checkout holding it.

What two recipes share lives in the package (here or beside it): no recipe is loaded by its path.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2]  # the plugin (fairseq_ext/): --user-dir
ROOT = PACKAGE.parent  # the checkout: the recipes' default folders, where their commands run

# the lines of a run's log echoed while it runs: epoch summaries and validations, the end, decoding's summary,
# the offline tools' milestones, errors
PROGRESS = re.compile(r"\| (valid|train) \| epoch|Translated|done training|\[distill\].*(done|sentences\)|empty)|"
                      r"eflomal aligned|\[latency|Error|error:")


def logger(tag: str):
    """A function printing ``[tag HH:MM:SS] msg`` on stderr."""
    def log(msg: str) -> None:
        print(f"[{tag} {datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)
    return log


def run_logged(cmd, logfile: Path, threads: int, append: bool = False, *, log=None, env=None, cwd=None,
               tail: int = 30) -> float:
    """Run ``cmd`` writing stdout+stderr to ``logfile`` (appended to with ``append``) with ``threads`` OpenMP/MKL
    threads (and the variables of ``env``); echo its :data:`PROGRESS` lines; return its wall seconds.  A failed
    command stops the caller with one ``error:`` line and the log's last ``tail`` lines."""
    log = log or logger("run")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **(env or {}))
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd))
    t0 = time.time()
    logfile = Path(logfile)
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "a" if append else "w") as f:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
        for line in p.stdout:
            f.write(line)
            f.flush()
            if PROGRESS.search(line):
                print("    " + line.rstrip()[:220], file=sys.stderr, flush=True)
        rc = p.wait()
    if rc != 0:
        last = logfile.read_text().splitlines()[-tail:]
        raise SystemExit(f"error: command failed ({rc}); see {logfile}\n" + "\n".join(last))
    return time.time() - t0


def _segment(data: Path) -> dict:
    seg = Path(data) / "segment.json"
    return json.loads(seg.read_text()) if seg.exists() else {}


def post_process(data: Path) -> str:
    """How fairseq-generate detokenises the data of the folder ``data``: its segment.json's ``post_process``."""
    return _segment(data).get("post_process", "sentencepiece")


def raw_folder(data: Path) -> Path:
    """The raw (untokenised) folder of the prepared folder ``data``: segment.json's ``raw``; when that path is not
    there (the folder was copied to another machine or checkout), the folder of the same name next to ``data``;
    failing both, ``data``'s own ``raw`` (a ``fairseq-ext-data universal`` folder keeps its raw text inside it)."""
    data = Path(data)
    raw = Path(_segment(data).get("raw", data.parent / "raw"))
    if not raw.is_dir() and (data.parent / raw.name).is_dir():
        return data.parent / raw.name
    if not raw.is_dir() and (data / "raw").is_dir():
        return data / "raw"
    return raw


def fmt(x, spec: str = ".2f", missing: str = "–") -> str:
    """``x`` formatted with ``spec`` (``format(x, spec)``), or ``missing`` (an en dash) when it is None or NaN."""
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

"""What the diagnostics runners (``recipes/bench/diagnostics*.py``) share: each trains small systems on a synthetic
corpus of this package (:mod:`fairseq_ext.tools.analysis.diagnostics` and its siblings), scores them against the
bound the task sets by construction, caches one ``OUT/TASK/SYSTEM/result.json`` per row and rewrites its table of
``recipes/bench/RESULTS.md``.

* running: :func:`run` (a command, its output appended to a log), :func:`fairseq_train` (resumable, cached by a
  marker file, with the learning curve's checkpoints), :func:`fairseq_generate` (cached ``generate-test.txt``),
  :func:`adam` (the optimiser every runner trains with), :data:`RUN`, :data:`LANGS`, :data:`RNNSEARCH_SHAPE`;
* the row loop: :func:`selected` (``--systems``), :func:`cached` / :func:`save_row` (``result.json``),
  :func:`pending` (the selected rows not cached yet), :func:`run_tasks` / :func:`cached_rows` (every row run so
  far), :func:`curve_checkpoints`, :func:`read_probes`;
* the command line: :func:`parser` (the options every runner has, around the runner's own);
* the table: :func:`fmt`, :func:`pass_cell`, :func:`cpu_line`, :func:`write_table`, :func:`report`;
* the consistency task's cue corpus (:func:`cue_synonym`, :func:`cue_corpus`): the pass 0 of the document runner's
  BCD check (Maruf ch. 4), inconsistent by construction.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional

from fairseq_ext.tools.analysis.diagnostics import AMB, AMB_TGT
from fairseq_ext.tools.common import cpu_name
from fairseq_ext.tools.evaluation import runs
from fairseq_ext.tools.evaluation.runs import PACKAGE, ROOT

BIN = Path(sys.executable).parent
RESULTS = ROOT / "recipes" / "bench" / "RESULTS.md"  # the default --table
# the fairseq-train flags of every diagnostic training: CPU, seed 1, no validation, the last checkpoint only
RUN = ["--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple", "--log-interval", "100",
       "--no-epoch-checkpoints", "--disable-validation"]
LANGS = ["--source-lang", "src", "--target-lang", "tgt"]  # the language pair of the word-level corpora
# the small RNNsearch (bi-GRU 2x64, plain GRU decoder 64, embeddings 64 shared, dropout 0.1) of the copying,
# retrieval and search rows
RNNSEARCH_SHAPE = ["--encoder-embed-dim", "64", "--decoder-embed-dim", "64", "--decoder-out-embed-dim", "64",
                   "--encoder-hidden-size", "64", "--decoder-hidden-size", "64", "--attention-dim", "64",
                   "--decoder-variant", "plain", "--dropout", "0.1", "--share-all-embeddings"]


# ------------------------------------------------------------------------------------------------ running
def env(threads: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")


def run(cmd, log_path: Path, threads: int) -> float:
    """Run a command (in :data:`ROOT`) with its output appended to ``log_path``; returns the wall seconds; a failed
    command stops the runner with one ``error:`` line and the log's tail."""
    t0 = time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write("+ " + " ".join(map(str, cmd)) + "\n")
        log.flush()
        p = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env(threads), stdout=log, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = Path(log_path).read_text(encoding="utf-8")[-3000:]
        raise SystemExit(f"error: command failed ({p.returncode}), see {log_path}:\n{tail}")
    return time.time() - t0


def adam(lr) -> list:
    """Adam (0.9, 0.98) at peak ``lr``, inverse-sqrt warm-up over 100 updates, gradient norm clipped at 1."""
    return ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", str(lr), "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", "100", "--clip-norm", "1.0"]


def _seconds(marker: Path) -> float:
    try:
        return float(marker.read_text() or 0)
    except ValueError:  # a marker without the seconds
        return 0.0


def fairseq_train(data: Path, save: Path, flags: list, updates: int, threads: int, *, curve_every: int = 0,
                  warm=None, marker: str = "train.done") -> float:
    """fairseq-train ``flags`` (+ :data:`RUN`) on ``data`` into ``save`` up to ``updates``; returns the wall seconds.
    Skipped when ``save/marker`` and ``checkpoint_last.pt`` exist (the seconds recorded then); a later call with more
    updates and another marker resumes from ``checkpoint_last.pt`` (optimizer and schedule included).
    ``curve_every``: keep a checkpoint every N updates (the learning curve); ``warm``: ``--finetune-from-model``."""
    done = save / marker
    if done.exists() and (save / "checkpoint_last.pt").exists():
        return _seconds(done)
    save.mkdir(parents=True, exist_ok=True)
    cmd = [BIN / "fairseq-train", data, "--user-dir", PACKAGE, *flags, *RUN, "--max-update", str(updates),
           "--save-dir", save]
    if curve_every:
        cmd += ["--save-interval-updates", str(curve_every), "--keep-interval-updates", "-1"]
    if warm is not None:
        cmd += ["--finetune-from-model", warm]
    secs = run(cmd, save / "train.log", threads)
    done.write_text(f"{secs:.1f}")
    return secs


def fairseq_generate(data: Path, path, flags: list, out: Path, threads: int) -> Path:
    """fairseq-generate ``flags`` with the checkpoint(s) ``path`` (``a.pt:b.pt`` for an ensemble) on the CPU into the
    folder ``out`` (skipped when its ``generate-test.txt`` exists); returns that file."""
    gen = out / "generate-test.txt"
    if not gen.exists():
        out.mkdir(parents=True, exist_ok=True)
        cmd = [BIN / "fairseq-generate", data, "--user-dir", PACKAGE, *flags, "--path", path, "--cpu",
               "--results-path", out]
        run(cmd, out / "generate.log", threads)
    return gen


# ------------------------------------------------------------------------------------------------ the row loop
def read_probes(folder: Path) -> list:
    """The test probes (``raw/test.probes.jsonl``) of a corpus folder of the copying, retrieval or decoding tasks."""
    return [json.loads(x) for x in (Path(folder) / "raw" / "test.probes.jsonl").read_text().splitlines()]


def selected(systems: Iterable, args) -> Iterator:
    """The entries of a task's system list (each a tuple, its name first) that ``--systems`` selects."""
    return (s for s in systems if not args.systems or s[0] in args.systems)


def cached(save: Path, args) -> Optional[dict]:
    """The row ``save/result.json`` holds; None when it is missing or with ``--force``."""
    result = save / "result.json"
    return json.loads(result.read_text()) if result.exists() and not args.force else None


def pending(systems: Iterable, out: Path, args, rows: list) -> Iterator[tuple]:
    """``(save folder, *entry)`` of each entry of ``systems`` that ``--systems`` selects and that has no cached row
    (:func:`cached`); the cached rows of the others are appended to ``rows`` as they come, in order."""
    for entry in selected(systems, args):
        save = Path(out) / entry[0]
        row = cached(save, args)
        if row is None:
            yield (save, *entry)
        else:
            rows.append(row)


def save_row(save: Path, row: dict) -> dict:
    (save / "result.json").write_text(json.dumps(row, indent=1))
    return row


def cached_rows(out, systems: dict) -> List[dict]:
    """Every row run so far under ``out`` (``OUT/TASK/SYSTEM/result.json``), in the order of ``systems``
    (task -> entries, each its name first)."""
    return [json.loads(p.read_text()) for task in systems for name, *_ in systems[task]
            for p in [Path(out) / task / name / "result.json"] if p.exists()]


def run_tasks(args, run_task: Callable, systems: dict) -> List[dict]:
    """``run_task(task, args)`` for each of ``--tasks``; returns every row run so far (:func:`cached_rows`)."""
    for task in args.tasks:
        run_task(task, args)
    return cached_rows(args.out, systems)


def curve_checkpoints(save: Path) -> list:
    """``[(updates, path)]`` of the interval checkpoints ``checkpoint_E_U.pt`` in ``save``, by updates."""
    found = [(int(c.stem.rsplit("_", 1)[1]), c) for c in save.glob("checkpoint_*_*.pt")]
    return sorted(found)


# ------------------------------------------------------------------------------------------------ command line
def parser(doc: str, tasks, out: str, table: str, own: Optional[Callable] = None,
           systems: Optional[str] = "only these systems (default: all of each task)") -> argparse.ArgumentParser:
    """The runner's parser (its description: the first paragraph of ``doc``): ``--tasks`` (of ``tasks``, all by
    default), ``--systems`` (unless ``systems`` is None; its help), ``--out`` (default ``out``), ``--seed``, the
    runner's own options (``own(parser)``), ``--pass-at``, ``--threads``, ``--table`` (the RESULTS.md whose
    ``table`` is rewritten) and ``--force``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(tasks), choices=list(tasks))
    if systems is not None:
        ap.add_argument("--systems", nargs="+", help=systems)
    ap.add_argument("--out", default=out)
    ap.add_argument("--seed", type=int, default=1)
    if own is not None:
        own(ap)
    ap.add_argument("--pass-at", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--table", default=str(RESULTS),
                    help=f"the RESULTS.md whose {table} is rewritten ('' = print only)")
    ap.add_argument("--force", action="store_true", help="score again and rewrite the results (training is kept)")
    return ap


# ------------------------------------------------------------------------------------------------ table
def cpu_line(threads: int, tail: str = "") -> str:
    """The table's last line: ``CPU: NAME (ISA), N torch thread(s) per run`` and ``tail``."""
    return f"CPU: {cpu_name()}, {threads} torch thread(s) per run{tail}."


def fmt(x) -> str:
    """A score cell: three decimals, an en dash when missing."""
    return runs.fmt(x, ".3f")


def pass_cell(ok: bool) -> str:
    return "pass" if ok else "**FAIL**"


def write_table(path: Path, text: str, start: str, end: str, title: str) -> None:
    """Replace the table between the markers ``start``/``end`` of ``path``; without them, append a section ``title``
    holding it."""
    doc = path.read_text(encoding="utf-8")
    block = f"{start}\n{text}\n{end}"
    if start in doc and end in doc:
        doc = doc[:doc.index(start)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + f"\n\n## {title}\n\n" + block + "\n"
    path.write_text(doc, encoding="utf-8")


def report(rows: list, text: str, args, start: str, end: str, title: str) -> int:
    """Print the table ``text``, write it into ``--table`` (unless ''); the exit status: 1 when a row fails."""
    print(text)
    if args.table:
        write_table(Path(args.table), text, start, end, title)
    return 0 if all(r["pass"] for r in rows) else 1


# ------------------------------------------------------------------------------------------------ cue corpus
def cue_synonym(src_words: list) -> str:
    """The synonym of the cue corpus: set by the sentence itself (the parity of its first filler word), so it is
    independent of the other sentences of the document."""
    first = next(w for w in src_words if w.lstrip("\u2581") != AMB)
    return AMB_TGT["f" if int(first.lstrip("\u2581")[1:]) % 2 == 0 else "m"]


def cue_corpus(data: Path, out: Path) -> Path:
    """The consistency training set (binarized in ``data``) with every sentence's synonym re-drawn by
    :func:`cue_synonym`, binarized under ``out/data/bin`` with the corpus's dictionaries (so its models decode the
    real test set): a sentence model trained on it is a pass 0 that is inconsistent by construction (a document's
    occurrences agree by chance only)."""
    bin_dir = out / "data" / "bin"
    if (bin_dir / "train.ids").exists():
        return bin_dir
    word = data.parent  # the segmented word-level files beside bin/
    raw = out / "data" / "word"
    raw.mkdir(parents=True, exist_ok=True)
    src = (word / "train.src").read_text(encoding="utf-8").splitlines()
    tgt = (word / "train.tgt").read_text(encoding="utf-8").splitlines()
    synonyms = {"\u2581" + w for w in AMB_TGT.values()}
    new = []
    for s_line, t_line in zip(src, tgt):
        s_words = s_line.split()
        if "\u2581" + AMB in s_words:
            cue = "\u2581" + cue_synonym(s_words)
            t_line = " ".join(cue if w in synonyms else w for w in t_line.split())
        new.append(t_line)
    (raw / "train.src").write_text("\n".join(src) + "\n", encoding="utf-8")
    (raw / "train.tgt").write_text("\n".join(new) + "\n", encoding="utf-8")
    tmp = out / "data" / "bin.tmp"
    run([BIN / "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", raw / "train",
         "--validpref", word / "valid", "--srcdict", data / "dict.src.txt", "--tgtdict", data / "dict.tgt.txt",
         "--destdir", tmp, "--workers", "1"], out / "preprocess.log", 1)
    for split in ("train", "valid"):
        (tmp / f"{split}.ids").write_text((data / f"{split}.ids").read_text(encoding="utf-8"), encoding="utf-8")
    tmp.rename(bin_dir)
    return bin_dir

r"""Diagnostic corpora of simultaneous translation (Gu 2019 ch. 9, the READ/WRITE agent of Eq. 9.4 trained by
Alg. 5): a task that needs no delay and a task that needs a known delay, so that an agent whose delay follows the
task is told from a fixed wait-k policy (``fairseq-ext-diagnostics generate monotone|reorder``; the other
diagnostics are :mod:`fairseq_ext.tools.analysis.diagnostics`).

Both tasks are word level: the source is n·r words drawn uniformly and independently from ``--fillers`` F (16)
words ``wK`` (n = ``--spans`` 2-3 spans of ``--span`` r = 3 words), each translated one to one into ``vK``.

``monotone``
    The target is the translation in source order: y_i = v(x_i). Target word i depends on source word i only,
    so the **needed delay** is g(τ) = τ (wait-1, with x_1 read before the first decision as in Alg. 4): AL = 1.
``reorder``
    The target translates every span of r source words in reverse order: y_{br+j} = v(x_{br+r+1-j}) (j = 1..r,
    span b). The first word of a span needs the span's last source word: the **needed delay** is g(τ) =
    ⌈τ/r⌉·r (READ a span, WRITE it), AL = (r+1)/2 + O(1/|Y|) (1.86 for n = 2, r = 3; ⟨/s⟩ counted).

**Bound** (information argument): a source word not yet read is independent of everything read (the words are
drawn independently and uniformly), so a target word written before its source word is read is right with
probability 1/F at most, whatever the model. wait-k writes y_τ after reading min(k + τ − 1, |X|) words (Ma et al.
2019): on ``reorder``, position j of a span is written too early exactly when k < r − 2j + 2, so every k < r
leaves at least the first word of each span at chance (exact match ≤ F^(−n)); on ``monotone`` wait-1 already
reads everything it needs, and a larger k only adds delay (AL = k). No fixed k is right on both: k < r fails
``reorder``'s quality, k ≥ r is r − 1 words later than ``monotone`` needs. An agent that reads what the
task needs has AL 1 on ``monotone`` and ≈ (r+1)/2 on ``reorder``, at the full-sentence model's quality.

Output (``generate TASK --out DIR``): ``DIR/raw/{split}.{src,tgt}``, ``DIR/raw/{split}.probes.jsonl``
(``{"line", "source", "needed"}``: per target word, ⟨/s⟩ included, the source position it translates and the
needed delay g*(τ)), ``DIR/dict.txt`` (joint),
``DIR/bin/`` (fairseq-preprocess) and ``DIR/diagnostics.json``.
"""
from __future__ import annotations

import math
import os
import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fairseq_ext.tools.common import OutputSet, ToolError, log, positive_int, write_json

__all__ = ["SIMUL_TASKS", "DEFAULTS", "BOUND", "source_positions", "needed_delays", "chance_positions",
           "generate_split", "generate", "exact_scores", "chance", "exact_bound", "add_generate_arguments",
           "run_generate"]

SIMUL_TASKS = ("monotone", "reorder")
SRC, TGT = "src", "tgt"
VERSION = 2
DEFAULTS = {"seed": 1, "fillers": 16, "n_train": 6000, "n_valid": 200, "n_test": 400, "span": 3, "spans": (2, 3)}
BOUND = {"monotone": "needed delay wait-1 (AL 1): y_i needs x_i only; writing y_i before x_i is read is right "
                     "with p <= 1/F",
         "reorder": "needed delay: read each span of r before writing it (AL ~(r+1)/2); wait-k with k < r writes "
                    "the first word of every span at chance (p <= 1/F)"}


def source_positions(task: str, n_words: int, span: int) -> List[int]:
    """The 1-based source position of the word each target word translates, τ = 1..n_words + 1 (⟨/s⟩ last, at
    n_words + 1: the source end is known only when ⟨/s⟩ is read)."""
    if task == "monotone":
        pos = list(range(1, n_words + 1))
    else:
        pos = [s + span - j for s in range(0, n_words, span) for j in range(span)]
    return pos + [n_words + 1]


def needed_delays(task: str, n_words: int, span: int) -> List[int]:
    """g*(τ), the smallest delays (non-decreasing: source words are read in order) that read every target word's
    source word before it is written: the running maximum of :func:`source_positions`."""
    out, top = [], 0
    for p in source_positions(task, n_words, span):
        top = max(top, p)
        out.append(top)
    return out


def chance_positions(sources: Sequence[int], k: int, src_len: int) -> List[int]:
    """The 0-based target positions that wait-k (g(τ) = min(k + τ − 1, |X|)) writes before their source word
    (``sources``, :func:`source_positions`) is read: at chance by the bound (module doc)."""
    return [t for t, p in enumerate(sources) if min(k + t, src_len) < p]


def generate_split(task: str, split: str, n: int, *, seed: int = 1, fillers: int = DEFAULTS["fillers"],
                   span: int = DEFAULTS["span"], spans: Tuple[int, int] = DEFAULTS["spans"]) -> Dict[str, Any]:
    """``{"src", "tgt", "probes"}`` of one split (module doc); the source words of ``monotone`` and ``reorder``
    are the same for the same seed and split."""
    if task not in SIMUL_TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(SIMUL_TASKS)}")
    if span < 2:
        raise ToolError(f"--span {span}: need r >= 2 (r = 1 is the monotone task)")
    lo, hi = spans
    if not 1 <= lo <= hi:
        raise ToolError(f"--spans {lo} {hi}: need 1 <= MIN <= MAX")
    if fillers < 2:
        raise ToolError(f"--fillers {fillers}: need F >= 2")
    rng = random.Random(f"diagnostics_simul:{seed}:{split}")  # not the task: both tasks share their sources
    out: Dict[str, Any] = {"src": [], "tgt": [], "probes": []}
    for i in range(n):
        words = [rng.randrange(fillers) for _ in range(span * rng.randint(lo, hi))]
        sources = source_positions(task, len(words), span)
        out["src"].append(" ".join(f"w{k}" for k in words))
        out["tgt"].append(" ".join(f"v{words[p - 1]}" for p in sources[:-1]))
        out["probes"].append({"line": i, "source": sources, "needed": needed_delays(task, len(words), span)})
    return out


def generate(task: str, out: str, *, seed: int = 1, n_train: Optional[int] = None, n_valid: Optional[int] = None,
             n_test: Optional[int] = None, binarize: bool = True, force: bool = False,
             fillers: int = DEFAULTS["fillers"], span: int = DEFAULTS["span"],
             spans: Tuple[int, int] = DEFAULTS["spans"]) -> Dict[str, Any]:
    """Write the corpus of ``task`` under ``out`` (module doc); returns the ``diagnostics.json`` record (skips the
    work when it exists with the same parameters)."""
    from fairseq_ext.tools.analysis.diagnostics_copy import dictionary_lines, preprocess_joint, up_to_date

    if task not in SIMUL_TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(SIMUL_TASKS)}")
    sizes = {k: v if v is not None else DEFAULTS[f"n_{k}"]
             for k, v in (("train", n_train), ("valid", n_valid), ("test", n_test))}
    layout = {"fillers": fillers, "span": span, "spans": list(spans)}
    info: Dict[str, Any] = {"version": VERSION, "task": task, "seed": seed, "sizes": sizes, "layout": layout,
                            "bound": BOUND[task], "src": SRC, "tgt": TGT, "binarized": binarize}
    old = None if force else up_to_date(out, info)
    if old is not None:
        return old
    data = {s: generate_split(task, s, n, seed=seed, fillers=fillers, span=span, spans=tuple(spans))
            for s, n in sizes.items()}
    raw = os.path.join(out, "raw")
    with OutputSet(raw) as o:
        for name, d in ((f"{split}.{{}}", d) for split, d in data.items()):
            for side in (SRC, TGT):
                o.write_lines(name.format(side), d[side])
            o.write_jsonl(name.format("probes.jsonl"), d["probes"])
    every = [" ".join(f"{p}{k}" for p in "wv" for k in range(fillers))]  # every word, seen or not
    with OutputSet(out) as o:
        o.write_lines("dict.txt", dictionary_lines([x for d in data.values() for side in ("src", "tgt")
                                                    for x in d[side]] + every, lambda w: True))
    info["splits"] = {s: {"lines": len(d["src"]), "words": sum(len(x.split()) for x in d["src"])}
                      for s, d in data.items()}
    log(f"[diagnostics] {task}: " + "; ".join(f"{s} {v['lines']} lines" for s, v in info["splits"].items()))
    if binarize:
        bin_dir = os.path.join(out, "bin")
        preprocess_joint(os.path.join(out, "dict.txt"), bin_dir, {s: os.path.join(raw, s) for s in sizes})
        info["bin"] = bin_dir
    write_json(os.path.join(out, "diagnostics.json"), info, indent=1)
    return info


# --------------------------------------------------------------------------------------------- scoring
def exact_scores(probes: Sequence[Dict[str, Any]], hyps: Dict[int, str], refs: Dict[int, str],
                 delays: Optional[Dict[int, Sequence[int]]] = None) -> Dict[str, Any]:
    """``exact`` = hypotheses equal to their reference; ``word_acc`` = target words right at their position;
    with the systems' ``delays`` (g(τ) of every written word, ⟨/s⟩ included): ``early`` = the share of the
    reference's words written before their source word was read, and ``early_acc`` / ``ontime_acc`` the
    word accuracy on those / on the others (the bound: early_acc <= 1/F in expectation)."""
    from fairseq_ext.tools.analysis.diagnostics_decoding import exact_scores as sentence_scores

    res = {k: v for k, v in sentence_scores(probes, hyps, refs).items() if k in ("sentences", "exact")}
    words = right = 0
    early = [0, 0]
    ontime = [0, 0]
    for p in probes:
        h, r = hyps[int(p["line"])].split(), refs[int(p["line"])].split()
        words += len(r)
        g = delays.get(int(p["line"])) if delays is not None else None
        for t, w in enumerate(r):
            ok = t < len(h) and h[t] == w
            right += ok
            if g is not None:
                bucket = early if t < len(g) and g[t] < p["source"][t] else ontime
                bucket[0] += ok
                bucket[1] += 1
    res["word_acc"] = right / words if words else None
    if delays is not None:
        res.update(early=early[1] / words if words else None, early_acc=early[0] / early[1] if early[1] else None,
                   ontime_acc=ontime[0] / ontime[1] if ontime[1] else None)
    return res


def chance(fillers: int) -> float:
    """The bound's per-word accuracy of a word written before its source word is read: 1/F."""
    return 1.0 / fillers


def exact_bound(task: str, k: int, span: int, spans: Tuple[int, int], fillers: int) -> float:
    """The largest exact match wait-k can reach (module doc): F^(−m), m the fewest early positions over the
    lengths of ``spans``."""
    m = min(len(chance_positions(source_positions(task, n * span, span), k, n * span + 1))
            for n in range(spans[0], spans[1] + 1))
    return math.pow(fillers, -m)


# ----------------------------------------------------------------------------------------- CLI (through diagnostics)
def add_generate_arguments(g) -> None:
    """The options of these tasks on ``fairseq-ext-diagnostics generate`` (its --out/--seed/--n-*/--fillers are
    shared)."""
    m = g.add_argument_group("simultaneous tasks (monotone, reorder)")
    m.add_argument("--span", type=positive_int, default=DEFAULTS["span"],
                   help="monotone, reorder: r, the words of a reversed span (default %(default)s)")
    m.add_argument("--spans", type=int, nargs=2, metavar=("MIN", "MAX"), default=DEFAULTS["spans"],
                   help="monotone, reorder: spans per sentence (default %(default)s)")


def run_generate(args) -> int:
    """``fairseq-ext-diagnostics generate TASK`` for a task of this module."""
    info = generate(args.task, args.out, seed=args.seed, n_train=args.n_train, n_valid=args.n_valid,
                    n_test=args.n_test, binarize=not args.no_binarize, force=args.force, fillers=args.fillers,
                    span=args.span, spans=tuple(args.spans))
    print(f"{args.task}: bound {info['bound']}; data {info.get('bin', args.out)}")
    return 0

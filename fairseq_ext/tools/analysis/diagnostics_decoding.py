r"""Diagnostic corpora of the decoding mechanisms of Gu (2019): synthetic tasks on which the baseline decoder is
limited *by construction* and the mechanism is not (``fairseq-ext-diagnostics generate search|fertility``; the
document-context tasks are :mod:`fairseq_ext.tools.analysis.diagnostics`).

Both tasks are word level, fillers ``wK`` → ``vK`` one to one.

``search`` (greedy Eq. 2.10 vs the beam Eqs. 2.11-2.13, NPD Eq. 2.14, the trainable greedy actor of ch. 7)
    The source is L = 2-4 fillers. Its training target is, at random per sentence, with probability
    ``--major`` p (0.6): ``A`` followed by L words drawn uniformly from ``--suffix-types`` M (4) words ``rK``
    (high entropy); otherwise (1 − p = 0.4): ``B`` followed by the filler translation (one fixed sequence).
    The sequence-level mode is the ``B`` sentence: P(B Y) = 1 − p = 0.4 > P(A Z) = p / M^L ≤ 0.6/16 for
    every ``A`` sentence. The ``test`` references are that mode (``valid`` is drawn as ``train``).
    **Bound** (greedy): a model that has learned the first-word marginal (P(A) = p > 1 − p) writes ``A``
    first under Eq. 2.10, so its exact match with the mode is **0**, exactly, whatever follows. A beam of
    K >= 2 keeps ``B`` (its continuation, 0.4, beats every ``A`` continuation, p/M) and returns the mode.
    The same greedy-poor model is the frozen NMT of the trainable greedy actor: BLEU+1 against a training
    reference is in expectation highest for the mode (1 − p on ``B`` references) and about p/M^L for an
    ``A`` sentence, so the actor is rewarded for steering greedy to ``B``.
``fertility`` (the NAT of ch. 8: fertility copy vs uniform copy, Eqs. 8.4, §8.3)
    ``--fertility-types`` F (12) source words ``fK`` with a fixed fertility k(fK) = 1 + K mod 3; the target
    repeats the translation ``gK`` k times, in order; L = 2-5 source words. The gold fertilities are written
    as Pharaoh links (``raw/{split}.links``) and stored by ``fairseq_ext.tools.corpora.fertility --aligner
    links``. With fertility inputs decoder position t holds the source word it must translate; uniform copy
    gives position t the word Round(T'·t/T), which is that word only where the fertilities are uniform
    (**no bound by construction**: its decoder may still recover the alignment by attention; the comparison
    is measured at equal updates).

Output (``generate TASK --out DIR``): ``DIR/raw/{split}.{src,tgt}``, ``DIR/raw/{split}.probes.jsonl``
(search: ``{"line", "mode", "major"}`` the mode and the more frequent first word; fertility: ``{"line",
"fertility"}``), fertility: ``DIR/raw/{split}.links``; ``DIR/dict.txt`` (joint), ``DIR/bin/``
(fairseq-preprocess; fertility: + ``{split}.src-tgt.fert``) and ``DIR/diagnostics.json``.
"""
from __future__ import annotations

import os
import random
from typing import Any, Dict, Optional, Sequence, Tuple

from fairseq_ext.tools.common import OutputSet, ToolError, log, positive_int, write_json

__all__ = ["DECODING_TASKS", "DEFAULTS", "BOUND", "generate_split", "generate", "exact_scores",
           "add_generate_arguments", "run_generate"]

DECODING_TASKS = ("search", "fertility")
SRC, TGT = "src", "tgt"
VERSION = 1
A, B = "A", "B"
DEFAULTS = {"seed": 1, "fillers": 16,
            "search": {"n_train": 6000, "n_valid": 200, "n_test": 400, "sent_len": (2, 4), "major": 0.6,
                       "suffix_types": 4},
            "fertility": {"n_train": 6000, "n_valid": 200, "n_test": 400, "sent_len": (2, 5),
                          "fertility_types": 12}}
BOUND = {"search": "0 exactly (greedy): a model with the data's first-word marginal writes A first, the mode "
                   "starts with B",
         "fertility": "none by construction (uniform copy): its decoder may recover the alignment by attention; "
                      "measured at equal updates"}


def fertility_of(word: str) -> int:
    """k(fK) = 1 + K mod 3."""
    return 1 + int(word[1:]) % 3


def generate_split(task: str, split: str, n: int, *, seed: int = 1, fillers: int = DEFAULTS["fillers"],
                   sent_len: Optional[Tuple[int, int]] = None, major: float = 0.6, suffix_types: int = 4,
                   fertility_types: int = 12) -> Dict[str, Any]:
    """``{"src", "tgt", "probes"}`` (lines) of one split (module doc); fertility adds ``links``."""
    if task not in DECODING_TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(DECODING_TASKS)}")
    lo, hi = sent_len or DEFAULTS[task]["sent_len"]
    if not (2 if task == "search" else 1) <= lo <= hi:
        raise ToolError(f"--sent-len {lo} {hi}: need {2 if task == 'search' else 1} <= MIN <= MAX")
    if task == "search" and not 0.5 < major < 1:
        raise ToolError(f"--major {major}: need 0.5 < p < 1 (A must be the more frequent first word)")
    if task == "search" and major / suffix_types ** lo >= 1 - major:
        raise ToolError(f"--major {major}, --suffix-types {suffix_types}: the B sentence is not the mode "
                        f"(need p / M^MIN < 1 - p)")
    rng = random.Random(f"diagnostics_decoding:{task}:{seed}:{split}")
    out: Dict[str, Any] = {"src": [], "tgt": [], "probes": [], "links": []}
    for i in range(n):
        if task == "search":
            words = [f"w{rng.randrange(fillers)}" for _ in range(rng.randint(lo, hi))]
            mode = [B] + ["v" + w[1:] for w in words]
            if split == "test" or rng.random() >= major:
                tgt = mode
            else:
                tgt = [A] + [f"r{rng.randrange(suffix_types)}" for _ in words]
            out["probes"].append({"line": i, "mode": " ".join(mode), "major": A})
        else:
            words = [f"f{rng.randrange(fertility_types)}" for _ in range(rng.randint(lo, hi))]
            tgt, links = [], []
            for j, w in enumerate(words):
                for _ in range(fertility_of(w)):
                    links.append(f"{j}-{len(tgt)}")
                    tgt.append("g" + w[1:])
            out["links"].append(" ".join(links))
            out["probes"].append({"line": i, "fertility": [fertility_of(w) for w in words]})
        out["src"].append(" ".join(words))
        out["tgt"].append(" ".join(tgt))
    return out


def generate(task: str, out: str, *, seed: int = 1, n_train: Optional[int] = None, n_valid: Optional[int] = None,
             n_test: Optional[int] = None, binarize: bool = True, force: bool = False,
             fillers: int = DEFAULTS["fillers"], **params) -> Dict[str, Any]:
    """Write the corpus of ``task`` under ``out`` (module doc); returns the ``diagnostics.json`` record (skips the
    work when it exists with the same parameters)."""
    from fairseq_ext.tools.analysis.diagnostics_copy import (dictionary_lines, preprocess_joint, up_to_date,
                                                              write_raw_splits)

    if task not in DECODING_TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(DECODING_TASKS)}")
    unknown = set(params) - set(DEFAULTS[task])
    if unknown:
        raise ToolError(f"options {', '.join(sorted(unknown))} do not apply to the {task} task")
    sizes = {k: v if v is not None else DEFAULTS[task][f"n_{k}"]
             for k, v in (("train", n_train), ("valid", n_valid), ("test", n_test))}
    layout = {k: params.get(k, v) for k, v in DEFAULTS[task].items() if not k.startswith("n_")}
    layout["sent_len"] = list(layout["sent_len"])
    info: Dict[str, Any] = {"version": VERSION, "task": task, "seed": seed, "sizes": sizes,
                            "layout": dict(layout, fillers=fillers), "bound": BOUND[task], "src": SRC, "tgt": TGT,
                            "binarized": binarize}
    old = None if force else up_to_date(out, info)
    if old is not None:
        return old
    kw = dict(layout, sent_len=tuple(layout["sent_len"]))
    data = {s: generate_split(task, s, n, seed=seed, fillers=fillers, **kw) for s, n in sizes.items()}
    raw = os.path.join(out, "raw")
    write_raw_splits(raw, data, {f"{s}.links": d["links"] for s, d in data.items()} if task == "fertility" else {})
    dict_path = os.path.join(out, "dict.txt")
    extra = [A, B, *(f"r{k}" for k in range(layout.get("suffix_types", 0)))]  # every word of the task, seen or not
    with OutputSet(out) as o:
        lines = [x for d in data.values() for side in ("src", "tgt") for x in d[side]]
        o.write_lines("dict.txt", dictionary_lines(lines + (extra if task == "search" else []), lambda w: True))
    if task == "search":
        info["splits"] = {s: {"lines": len(d["src"]), "major_share": sum(t.startswith(A + " ") for t in d["tgt"])
                              / len(d["tgt"])} for s, d in data.items()}
    else:
        info["splits"] = {s: {"lines": len(d["src"]), "mean_fertility": sum(map(sum, (p["fertility"] for p in
                              d["probes"]))) / max(1, sum(len(p["fertility"]) for p in d["probes"]))}
                          for s, d in data.items()}
    log(f"[diagnostics] {task}: " + "; ".join(f"{s} {v['lines']} lines" for s, v in info["splits"].items()))
    if binarize:
        bin_dir = os.path.join(out, "bin")
        preprocess_joint(dict_path, bin_dir, {s: os.path.join(raw, s) for s in sizes})
        if task == "fertility":
            from fairseq_ext.tools.corpora.fertility import main as fertility_main

            fertility_main([bin_dir, "--src", SRC, "--tgt", TGT, "--aligner", "links", "--links-dir", raw])
        info["bin"] = bin_dir
    write_json(os.path.join(out, "diagnostics.json"), info, indent=1)
    return info


# --------------------------------------------------------------------------------------------- scoring
def exact_scores(probes: Sequence[Dict[str, Any]], hyps: Dict[int, str], refs: Dict[int, str]) -> Dict[str, Any]:
    """``exact`` = hypotheses equal to their reference (search: the mode); ``major_first`` = hypotheses that
    start with the more frequent first word (search); ``length_ok`` = hypotheses of the reference's length."""
    exact = major = length = 0
    for p in probes:
        line = int(p["line"])
        if line not in hyps:
            raise ToolError(f"no hypothesis for line {line}")
        h, r = hyps[line].split(), refs[line].split()
        exact += h == r
        length += len(h) == len(r)
        major += bool(h) and h[0] == p.get("major")
    n = len(probes)
    return {"sentences": n, "exact": exact / n if n else None, "major_first": major / n if n else None,
            "length_ok": length / n if n else None}


# ----------------------------------------------------------------------------------------- CLI (through diagnostics)
def add_generate_arguments(g) -> None:
    """The options of these tasks on ``fairseq-ext-diagnostics generate`` (its --out/--seed/--n-* are shared)."""
    m = g.add_argument_group("decoding tasks (search, fertility)")
    m.add_argument("--major", type=float, default=DEFAULTS["search"]["major"],
                   help="search: probability p of the first word A (default %(default)s)")
    m.add_argument("--suffix-types", type=positive_int, default=DEFAULTS["search"]["suffix_types"],
                   help="search: M, the words of the random suffix after A (default %(default)s)")
    m.add_argument("--fertility-types", type=positive_int, default=DEFAULTS["fertility"]["fertility_types"],
                   help="fertility: source word types (default %(default)s)")


def run_generate(args) -> int:
    """``fairseq-ext-diagnostics generate TASK`` for a task of this module."""
    params = {"search": dict(major=args.major, suffix_types=args.suffix_types),
              "fertility": dict(fertility_types=args.fertility_types)}[args.task]
    info = generate(args.task, args.out, seed=args.seed, n_train=args.n_train, n_valid=args.n_valid,
                    n_test=args.n_test, binarize=not args.no_binarize, force=args.force, fillers=args.fillers,
                    **params)
    print(f"{args.task}: bound {info['bound']}; data {info.get('bin', args.out)}")
    return 0

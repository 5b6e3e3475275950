r"""Diagnostic corpora of three architecture mechanisms: Bi-MSMT's conversation context (Maruf 2019 ch. 5), the
lexical translation module (Nguyen 2021 ch. 5, Eq. 5.1 with the lexical term of §5.4) and untied positional
attention (Nguyen 2021 ch. 7, Eq. 7.6) (``fairseq-ext-diagnostics generate conv_register|rare_lex|position_perm``;
the document-context tasks are :mod:`fairseq_ext.tools.analysis.diagnostics`).

Every task is word level and translates word by word:

* ``conv_register``: a pronoun's form follows the register set in an earlier turn of the other language;
  twin test conversations bound a model without context to <= 0.5 of the probes, exactly.
* ``rare_lex``: rare words seen in 1, 2 or 4 training sentences; no clean bound, the diagnostic is the gap
  in rare-word accuracy at equal updates.
* ``position_perm``: the translation is a fixed permutation of the words; a position-blind model is bounded
  (the exact value is written to ``diagnostics.json``).

Output (``generate TASK --out DIR``): ``DIR/raw/``, ``DIR/dict.txt``, ``DIR/bin/`` and ``DIR/diagnostics.json``
(task, parameters, bound, the probes of the test lines).
"""
from __future__ import annotations

import os
import random
import shutil
from collections import Counter
from typing import Any, Dict, List, Tuple

from fairseq_ext.tools.analysis.diagnostics_multi import write_lines
from fairseq_ext.tools.common import ToolError, log, positive_int, read_json, write_json

__all__ = ["TASKS", "DEFAULTS", "BOUND", "build_task", "generate", "add_generate_arguments", "run_generate",
           "probe_scores"]

TASKS = ("conv_register", "rare_lex", "position_perm")
VERSION = 1  # of the generator: a change regenerates existing corpora
RARE_COUNTS = (1, 2, 4)
DEFAULTS = {
    "conv_register": {"n_train": 3000, "n_valid": 100, "n_test": 200, "concepts": 20, "sent_len": (1, 3),
                      "gap": (0, 1)},
    "rare_lex": {"n_train": 3000, "n_valid": 100, "n_test": 240, "concepts": 40, "rare": 120, "sent_len": (3, 7)},
    "position_perm": {"n_train": 3000, "n_valid": 100, "n_test": 300, "concepts": 20, "length": 6},
}
BOUND = {"conv_register": "0.500 of the probes, exactly (test twins): the sentence model sees the same probe "
                          "sentence under both registers",
         "rare_lex": "none by construction: a model without the lexical module can learn a rare word from the same "
                     "k examples; the gap at equal updates is measured",
         "position_perm": "mean max-count/L (a position-blind encoder sees the multiset only); the tied and the "
                          "untied models both carry absolute positions: the task does not separate them"}
LANGS = ("en", "es")
WORD = {"en": "e", "es": "s"}


def _sentence(rng: random.Random, lang: str, concepts: int, sent_len: Tuple[int, int]) -> List[int]:
    return [rng.randrange(concepts) for _ in range(rng.randint(*sent_len))]


def _words(lang: str, ks: List[int]) -> List[str]:
    return [f"{WORD[lang]}{k}" for k in ks]


def _conv_split(rng: random.Random, n: int, concepts: int, sent_len, gap, twins: bool) -> Dict[str, list]:
    """``n`` conversations (twins: 2n, each once per register). Lines: src, tgt, conv (``id\tlang\tspeaker``),
    probes: [{"line", "expect", "wrong", "pair", "register", "distance"}]."""
    d: Dict[str, list] = {"src": [], "tgt": [], "conv": [], "probes": []}
    for i in range(n):
        a = rng.choice(LANGS)
        b = LANGS[1 - LANGS.index(a)]
        first = _sentence(rng, a, concepts, sent_len)
        at = rng.randrange(len(first) + 1)
        fillers = [_sentence(rng, a, concepts, sent_len) for _ in range(rng.randint(*gap))]
        probe = _sentence(rng, b, concepts, sent_len)
        pat = rng.randrange(len(probe) + 1)
        for reg in (("T", "V") if twins else (rng.choice("TV"),)):
            cid = f"c{i}{reg if twins else ''}"
            lines = [(a, "A", _words(a, first[:at]) + [f"{WORD[a]}{reg}"] + _words(a, first[at:]),
                      _words(b, first[:at]) + [f"{WORD[b]}{reg}"] + _words(b, first[at:]))]
            lines += [(a, "A", _words(a, f), _words(b, f)) for f in fillers]
            you_src, you_tgt = f"{WORD[b]}YOU", f"{WORD[a]}YOU_{reg}"
            lines.append((b, "B", _words(b, probe[:pat]) + [you_src] + _words(b, probe[pat:]),
                          _words(a, probe[:pat]) + [you_tgt] + _words(a, probe[pat:])))
            for lang, spk, src, tgt in lines:
                d["src"].append(" ".join(src))
                d["tgt"].append(" ".join(tgt))
                d["conv"].append(f"{cid}\t{lang}\t{spk}")
            d["probes"].append({"line": len(d["src"]) - 1, "expect": you_tgt,
                                "wrong": f"{WORD[a]}YOU_{'V' if reg == 'T' else 'T'}", "pair": i, "register": reg,
                                "distance": len(fillers) + 1})
    return d


def _rare_split(rng: random.Random, split: str, n: int, concepts: int, rare: int, sent_len) -> Dict[str, list]:
    d: Dict[str, list] = {"src": [], "tgt": [], "probes": []}

    def add(src: List[str], probe=None) -> None:
        d["src"].append(" ".join(src))
        d["tgt"].append(" ".join(w.upper() for w in src))
        if probe is not None:
            d["probes"].append(dict(probe, line=len(d["src"]) - 1))

    if split == "train":
        slots = [(f"r{k}", RARE_COUNTS[k % len(RARE_COUNTS)]) for k in range(rare)]
        uses = [w for w, c in slots for _ in range(c)]
        if len(uses) > n:
            raise ToolError(f"--n-train {n}: rare_lex needs at least {len(uses)} training sentences "
                            f"(one rare occurrence per sentence)")
        at = dict(zip(rng.sample(range(n), len(uses)), uses))
        for i in range(n):
            src = [f"f{k}" for k in _sentence(rng, "", concepts, sent_len)]
            if i in at:
                src.insert(rng.randrange(len(src) + 1), at[i])
            add(src)
        return d
    for i in range(n):
        src = [f"f{k}" for k in _sentence(rng, "", concepts, sent_len)]
        k = i % rare if split == "test" else rng.randrange(rare)
        pos = rng.randrange(len(src) + 1)
        src.insert(pos, f"r{k}")
        add(src, {"position": pos, "expect": f"R{k}", "count": RARE_COUNTS[k % len(RARE_COUNTS)]})
    return d


def _perm_split(rng: random.Random, n: int, concepts: int, perm: List[int]) -> Dict[str, list]:
    d: Dict[str, list] = {"src": [], "tgt": [], "probes": []}
    for _ in range(n):
        ks = [rng.randrange(concepts) for _ in perm]
        d["src"].append(" ".join(f"w{k}" for k in ks))
        d["tgt"].append(" ".join(f"t{ks[perm[i]]}" for i in range(len(perm))))
        d["probes"].append({"line": len(d["src"]) - 1, "blind": max(Counter(ks).values()) / len(ks)})
    return d


def build_task(task: str, *, seed: int = 1, n_train: int = None, n_valid: int = None, n_test: int = None,
               **layout) -> Dict[str, Any]:
    """Every split of ``task`` in memory: {"splits": {split: {"src", "tgt"[, "conv"], "probes"}}, "layout"}."""
    if task not in TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(TASKS)}")
    p = dict(DEFAULTS[task])
    p.update({k: v for k, v in dict(n_train=n_train, n_valid=n_valid, n_test=n_test, **layout).items()
              if v is not None and k in p})
    for k in ("sent_len", "gap"):
        if k in p:
            lo, hi = p[k] = tuple(p[k])
            if not 0 <= lo <= hi or (k == "sent_len" and lo < 1):
                raise ToolError(f"--{k.replace('_', '-')} {lo} {hi}: need {1 if k == 'sent_len' else 0} <= MIN <= MAX")
    if p["concepts"] < 2:
        raise ToolError(f"--concepts must be >= 2, got {p['concepts']}")
    if task == "position_perm" and p["length"] < 2:
        raise ToolError(f"--length must be >= 2, got {p['length']}")
    splits = {}
    struct = random.Random(f"diagnostics_arch:{task}:{seed}:structure")
    perm = None
    if task == "position_perm":
        while True:
            perm = list(range(p["length"]))
            struct.shuffle(perm)
            if all(perm[i] != i for i in perm):
                break
    for split in ("train", "valid", "test"):
        rng = random.Random(f"diagnostics_arch:{task}:{seed}:{split}")
        n = p[f"n_{split}"]
        if task == "conv_register":
            splits[split] = _conv_split(rng, n, p["concepts"], p["sent_len"], p["gap"], twins=split == "test")
        elif task == "rare_lex":
            splits[split] = _rare_split(rng, split, n, p["concepts"], p["rare"], p["sent_len"])
        else:
            splits[split] = _perm_split(rng, n, p["concepts"], perm)
    return {"task": task, "layout": p, "splits": splits, "perm": perm}


# --------------------------------------------------------------------------------------------- the folder
def generate(task: str, out: str, *, seed: int = 1, force: bool = False, binarize: bool = True,
             **layout) -> Dict[str, Any]:
    """Write the corpus of ``task`` under ``out`` (module doc); returns the ``diagnostics.json`` record."""
    t = build_task(task, seed=seed, **layout)
    params = {k: list(v) if isinstance(v, tuple) else v for k, v in t["layout"].items()}
    info: Dict[str, Any] = {"version": VERSION, "task": task, "seed": seed, "layout": params, "binarized": binarize}
    meta = os.path.join(out, "diagnostics.json")
    keys = ("version", "task", "seed", "layout", "binarized")
    if not force and os.path.isfile(meta):
        old = read_json(meta)
        if {k: old.get(k) for k in keys} == {k: info[k] for k in keys}:
            log(f"[diagnostics] {out} is up to date ({task}); skipping (--force redoes it)")
            return old
    raw = os.path.join(out, "raw")
    os.makedirs(raw, exist_ok=True)
    counts: Counter = Counter()
    for split, d in t["splits"].items():
        write_lines(os.path.join(raw, f"{split}.src"), d["src"])
        write_lines(os.path.join(raw, f"{split}.tgt"), d["tgt"])
        if "conv" in d:
            write_lines(os.path.join(raw, f"{split}.conv"), d["conv"])
        for line in d["src"] + d["tgt"]:
            counts.update(line.split())
    dict_path = os.path.join(out, "dict.txt")
    write_lines(dict_path, (f"{w} {c}" for w, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))))
    if binarize:
        from fairseq_ext.tools.corpora.binarize import run_preprocess

        bin_dir = os.path.join(out, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        pref = {s: os.path.join(raw, s) for s in ("train", "valid", "test")}
        run_preprocess(["--source-lang", "src", "--target-lang", "tgt", "--trainpref", pref["train"], "--validpref",
                        pref["valid"], "--testpref", pref["test"], "--srcdict", dict_path, "--joined-dictionary",
                        "--destdir", bin_dir, "--workers", "1"])
        if task == "conv_register":
            for split in ("train", "valid", "test"):
                shutil.copyfile(os.path.join(raw, f"{split}.conv"), os.path.join(bin_dir, f"{split}.conv"))
        info["bin"] = bin_dir
    probes = t["splits"]["test"]["probes"]
    info.update(bound=BOUND[task], perm=t["perm"], probes=probes,
                splits={s: len(d["src"]) for s, d in t["splits"].items()})
    if task == "position_perm":
        info["blind_bound"] = round(sum(p["blind"] for p in probes) / len(probes), 4)
    write_json(meta, info, indent=None)
    log(f"[diagnostics] {task}: " + "; ".join(f"{s} {n} lines" for s, n in info["splits"].items()))
    return info


# --------------------------------------------------------------------------------------------- scoring
def probe_scores(task: str, info: Dict[str, Any], hyps: Dict[int, str], refs: List[str]) -> Dict[str, Any]:
    """Accuracy of decoded test lines ``hyps`` {line: text}: ``conv_register``: the probe line holds the right
    pronoun form and not the other (overall and by distance); ``rare_lex``: the rare word's translation at its
    position (overall and by training count ``k<n>``) and the other words; ``position_perm``: target words at
    their position."""
    acc: Dict[str, List[int]] = {}

    def add(key: str, ok: bool) -> None:
        c = acc.setdefault(key, [0, 0])
        c[0] += int(ok)
        c[1] += 1

    for p in info["probes"]:
        hyp = hyps.get(p["line"], "").split()
        if task == "conv_register":
            ok = p["expect"] in hyp and p["wrong"] not in hyp
            add("all", ok)
            add(f"d{p['distance']}", ok)
        elif task == "rare_lex":
            ref = refs[p["line"]].split()
            pos = p["position"]
            ok = pos < len(hyp) and hyp[pos] == p["expect"]
            add("all", ok)
            add(f"k{p['count']}", ok)
            for j, w in enumerate(ref):
                if j != pos:
                    add("frequent", j < len(hyp) and hyp[j] == w)
        else:
            for j, w in enumerate(refs[p["line"]].split()):
                add("all", j < len(hyp) and hyp[j] == w)
    return {k: round(c / n, 4) for k, (c, n) in sorted(acc.items())}


# --------------------------------------------------------------------------------------------- CLI (through diagnostics)
def add_generate_arguments(g) -> None:
    """The options of these tasks on ``fairseq-ext-diagnostics generate`` (its --out/--seed/--n-*/--sent-len are
    shared; --concepts is the multilingual tasks' option)."""
    m = g.add_argument_group("architecture tasks (conv_register, rare_lex, position_perm)")
    m.add_argument("--rare", type=positive_int, help=f"rare_lex: rare word types (default "
                                                     f"{DEFAULTS['rare_lex']['rare']})")
    m.add_argument("--length", type=positive_int, help=f"position_perm: words per sentence (default "
                                                       f"{DEFAULTS['position_perm']['length']})")
    m.add_argument("--gap", type=int, nargs=2, metavar=("MIN", "MAX"),
                   help="conv_register: filler sentences after the register marker in the first turn (default 0 1)")


def run_generate(args) -> int:
    """``fairseq-ext-diagnostics generate TASK`` for a task of this module."""
    layout = {k: getattr(args, k, None) for k in ("n_train", "n_valid", "n_test", "rare", "length", "gap")}
    if getattr(args, "concepts", None) not in (None, 300):  # the multilingual tasks' default is not ours
        layout["concepts"] = args.concepts
    if args.task != "position_perm" and getattr(args, "sent_len", None) not in (None, [2, 5], (2, 5)):  # the shared option's default
        layout["sent_len"] = tuple(args.sent_len)
    info = generate(args.task, args.out, seed=args.seed, binarize=not args.no_binarize, force=args.force, **layout)
    print(f"{args.task}: bound {info['bound']}; test {info['splits']['test']} lines; data {info.get('bin', args.out)}")
    return 0

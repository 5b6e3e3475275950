r"""Diagnostic corpora of the copying and retrieval mechanisms (Gu 2019 ch. 3 CopyNet, ch. 4 SEG-NMT): synthetic
tasks on which a plain NMT model is limited *by construction* and the mechanism should be near-perfect
(``fairseq-ext-diagnostics generate copy|retrieval``; the document-context tasks are in
:mod:`fairseq_ext.tools.analysis.diagnostics`).

* ``copy`` (CopyNet, Eqs. 3.1-3.6): out-of-vocabulary names that translate as themselves; a model without a
  copy path gets name accuracy 0, exactly.
* ``retrieval`` (SEG-NMT, Eqs. 4.2-4.7; the COPYNET-over-Y' baseline of Table 4.2): a key's value is given
  only by the retrieved neighbours; on the test tuplets a model that does not read them is right on at
  most 1/``--values``, exactly. ``bin_test_random`` and ``bin_test_swapped`` are control memories.

Output (``generate TASK --out DIR``): ``DIR/raw/`` (texts and ``{split}.probes.jsonl``), ``DIR/dict.txt``,
``DIR/bin/``, ``DIR/bin_test{,_random,_swapped}/`` (retrieval) and ``DIR/diagnostics.json``.
:func:`name_scores` and :func:`value_scores` score fairseq-generate output against the probes.
"""
from __future__ import annotations

import logging
import os
import random
import shutil
import string
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fairseq_ext.tools.common import OutputSet, ToolError, log, read_json, write_json

__all__ = ["COPY_TASKS", "DEFAULTS", "BOUND", "generate_copy_split", "generate_retrieval", "generate", "up_to_date",
           "dictionary_lines", "preprocess_joint", "name_scores", "value_scores"]

COPY_TASKS = ("copy", "retrieval")
SRC, TGT = "src", "tgt"
VERSION = 1
DEFAULTS = {"seed": 1, "fillers": 16, "sent_len": (2, 5),
            "copy": {"n_train": 4000, "n_valid": 200, "n_test": 500, "train_names": 3000, "test_names": 400},
            "retrieval": {"n_train": 3000, "n_valid": 150, "n_test": 600, "keys": 8, "values": 4, "cluster": 3,
                          "tm_pairs": 2}}
BOUND = {"copy": "0%: the names are outside the target dictionary (any model without a copy path)",
         "retrieval": "1/V exactly: the V members of a test tuplet share their source (any model that does not "
                      "read the retrieved pairs)"}


def _name(rng: random.Random) -> str:
    return "N" + "".join(rng.choice(string.ascii_lowercase) for _ in range(5))


def name_pools(seed: int, sizes: Sequence[int]) -> List[List[str]]:
    """Disjoint pools of distinct names (train, valid, test), one random stream."""
    rng = random.Random(f"diagnostics_copy:{seed}:names")
    seen: set = set()
    pools = []
    for n in sizes:
        pool = []
        while len(pool) < n:
            w = _name(rng)
            if w not in seen:
                seen.add(w)
                pool.append(w)
        pools.append(pool)
    return pools


def _fillers(rng: random.Random, fillers: int, sent_len: Tuple[int, int]) -> List[str]:
    return [f"w{rng.randrange(fillers)}" for _ in range(rng.randint(*sent_len))]


def _translate(word: str) -> str:
    return "v" + word[1:] if word.startswith("w") else word


def _check_layout(fillers: int, sent_len: Tuple[int, int]) -> None:
    if not 1 <= sent_len[0] <= sent_len[1]:
        raise ToolError(f"--sent-len {sent_len[0]} {sent_len[1]}: need 1 <= MIN <= MAX")
    if fillers < 2:
        raise ToolError("--fillers must be >= 2")


# --------------------------------------------------------------------------------------------- copy
def generate_copy_split(split: str, n_sentences: int, pool: Sequence[str], *, seed: int = 1,
                        fillers: int = DEFAULTS["fillers"], sent_len: Tuple[int, int] = DEFAULTS["sent_len"]
                        ) -> Dict[str, Any]:
    """``{"src", "tgt", "probes"}`` of one split: fillers with 1-2 names of ``pool`` at random positions."""
    _check_layout(fillers, sent_len)
    rng = random.Random(f"diagnostics_copy:copy:{seed}:{split}")
    out: Dict[str, Any] = {"src": [], "tgt": [], "probes": []}
    for i in range(n_sentences):
        words = _fillers(rng, fillers, sent_len)
        names = rng.sample(list(pool), rng.randint(1, 2)) if len(pool) > 1 else list(pool)
        for n in names:
            words.insert(rng.randrange(len(words) + 1), n)
        out["src"].append(" ".join(words))
        out["tgt"].append(" ".join(_translate(w) for w in words))
        out["probes"].append({"line": i, "names": [w for w in words if w in names]})
    return out


# --------------------------------------------------------------------------------------------- retrieval
class _Retrieval:
    """The clusters of the training memory and the test tuplets (module doc)."""

    def __init__(self, seed: int, fillers: int, sent_len: Tuple[int, int], keys: int, values: int):
        self.rng = random.Random(f"diagnostics_copy:retrieval:{seed}")
        self.fillers, self.sent_len, self.keys, self.values = fillers, sent_len, keys, values

    def structure(self) -> Tuple[List[str], int, str]:
        words = _fillers(self.rng, self.fillers, self.sent_len)
        at = self.rng.randrange(len(words) + 1)
        return words, at, f"k{self.rng.randrange(self.keys)}"

    def neighbour(self, words: List[str]) -> List[str]:
        """A near-duplicate: one filler redrawn (to another filler)."""
        out = list(words)
        j = self.rng.randrange(len(out))
        out[j] = self.rng.choice([f"w{f}" for f in range(self.fillers) if f"w{f}" != out[j]])
        return out

    @staticmethod
    def pair(words: List[str], at: int, key: str, value: str) -> Tuple[str, str]:
        src = words[:at] + [key] + words[at:]
        tgt = [_translate(w) for w in words[:at]] + [value] + [_translate(w) for w in words[at:]]
        return " ".join(src), " ".join(tgt)


def _fuzzy(a: str, b: str) -> float:
    from fairseq_ext.tools.tm.selection import fuzzy_score

    return round(fuzzy_score(a.split(), b.split()), 6)


def generate_retrieval(*, seed: int = 1, n_train: int = 3000, n_valid: int = 150, n_test: int = 600,
                       fillers: int = DEFAULTS["fillers"], sent_len: Tuple[int, int] = DEFAULTS["sent_len"],
                       keys: int = 8, values: int = 4, cluster: int = 3, tm_pairs: int = 2) -> Dict[str, Any]:
    """The retrieval corpus in memory: ``train``/``valid``/``test`` ``{"src", "tgt"}``, ``memory`` (the test
    memory: the training lines, then the test pairs), the retrieved lines of every split (``tm``: training
    and valid into the training lines; ``test``, ``test_random``, ``test_swapped`` into the test memory) and
    the test ``probes``."""
    _check_layout(fillers, sent_len)
    if values < 2 or keys < 1 or cluster < 2 or tm_pairs < 1:
        raise ToolError("need --values >= 2, --keys >= 1, --cluster >= 2, --tm-pairs >= 1")
    g = _Retrieval(seed, fillers, sent_len, keys, values)
    vals = [f"u{i}" for i in range(values)]
    train: Dict[str, list] = {"src": [], "tgt": [], "cluster": []}
    clusters: List[List[int]] = []
    while len(train["src"]) < n_train:
        words, at, key = g.structure()
        value = g.rng.choice(vals)
        members = []
        for m in range(cluster):
            s, t = g.pair(words if m == 0 else g.neighbour(words), at, key, value)
            members.append(len(train["src"]))
            train["src"].append(s)
            train["tgt"].append(t)
        clusters.append(members)
    tm: Dict[str, list] = {"train": [], "valid": []}
    for members in clusters:
        for i in members:
            tm["train"].append([j for j in members if j != i])
    valid: Dict[str, list] = {"src": [], "tgt": []}
    for _ in range(n_valid):  # a further member of a training cluster: its pairs = the cluster
        members = g.rng.choice(clusters)
        words = train["src"][members[0]].split()
        value = next(w for w in train["tgt"][members[0]].split() if w in vals)
        at = next(p for p, w in enumerate(words) if w.startswith("k"))
        rest = words[:at] + words[at + 1:]
        s, t = g.pair(g.neighbour(rest), at, words[at], value)
        valid["src"].append(s)
        valid["tgt"].append(t)
        tm["valid"].append(list(members))
    memory = {"src": list(train["src"]), "tgt": list(train["tgt"])}
    test: Dict[str, list] = {"src": [], "tgt": []}
    probes, tm["test"] = [], []
    n_tuplets = max(1, -(-n_test // values))
    for u in range(n_tuplets):
        words, at, key = g.structure()
        order = list(vals)
        g.rng.shuffle(order)
        pairs_of = []
        for value in order:
            lines = []
            for _ in range(tm_pairs):
                s, t = g.pair(g.neighbour(words), at, key, value)
                lines.append(len(memory["src"]))
                memory["src"].append(s)
                memory["tgt"].append(t)
            pairs_of.append(lines)
        for m, value in enumerate(order):
            s, t = g.pair(words, at, key, value)
            probes.append({"line": len(test["src"]), "tuplet": u, "member": m, "key": key, "position": at,
                           "correct": value, "candidates": vals, "swapped": order[(m + 1) % values]})
            test["src"].append(s)
            test["tgt"].append(t)
            tm["test"].append(pairs_of[m])
    tm["test_swapped"] = [tm["test"][p["line"] - p["member"] + (p["member"] + 1) % values] for p in probes]
    rnd = random.Random(f"diagnostics_copy:retrieval:{seed}:random")
    tm["test_random"] = [rnd.sample(range(len(train["src"])), tm_pairs) for _ in probes]
    return {"train": train, "valid": valid, "test": test, "memory": memory, "tm": tm, "probes": probes,
            "clusters": len(clusters), "tuplets": n_tuplets}


# --------------------------------------------------------------------------------------------- files
def dictionary_lines(lines: Sequence[str], keep) -> List[str]:
    """fairseq dictionary lines ``word count`` of the words of ``lines`` that ``keep`` accepts, most frequent
    first (ties by word)."""
    from collections import Counter

    c = Counter(w for line in lines for w in line.split() if keep(w))
    return [f"{w} {n}" for w, n in sorted(c.items(), key=lambda x: (-x[1], x[0]))]


def preprocess_joint(dict_path: str, dest: str, prefs: Dict[str, str]) -> None:
    """fairseq-preprocess (in process) of ``prefs`` ({"train": prefix, ...}) with the one joint dictionary."""
    from fairseq import options
    from fairseq_cli import preprocess

    tmp = f"{dest}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    argv = ["--source-lang", SRC, "--target-lang", TGT, "--destdir", tmp, "--srcdict", dict_path,
            "--joined-dictionary", "--workers", "1"]
    for split, prefix in prefs.items():
        argv += [f"--{split}pref", prefix]
    plog = logging.getLogger("fairseq_cli.preprocess")
    handlers = list(plog.handlers)
    try:
        preprocess.main(options.get_preprocessing_parser().parse_args(argv))
    finally:
        for h in list(plog.handlers):
            if h not in handlers:
                plog.removeHandler(h)
                h.close()
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def _write_side(folder: str, split: str, lines: Sequence[Sequence[int]], queries: Sequence[str],
                memory_src: Sequence[str], exclude_self: bool, note: str) -> None:
    from fairseq_ext.data.translation_memory import TMEntry, write_tm

    entries = [TMEntry(list(ids), [_fuzzy(q, memory_src[j]) for j in ids], list(ids))
               for q, ids in zip(queries, lines)]
    write_tm(folder, split, entries, {"memory_lines": len(memory_src), "exclude_self": exclude_self,
                                      "source": f"fairseq_ext.tools.analysis.diagnostics_copy ({note})"})


def _link_test_memory(base: str, dest: str) -> None:
    """``dest`` = ``base``'s data files as symbolic links (its own test.tm.jsonl is written next)."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for name in os.listdir(base):
        if not name.startswith("test.tm."):
            os.symlink(os.path.relpath(os.path.join(base, name), dest), os.path.join(dest, name))


def up_to_date(out: str, info: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The ``diagnostics.json`` record of ``out`` when it was written with the parameters of ``info`` (version,
    task, seed, sizes, layout, binarized), else None."""
    meta = os.path.join(out, "diagnostics.json")
    if not os.path.isfile(meta):
        return None
    old = read_json(meta)
    keys = ("version", "task", "seed", "sizes", "layout", "binarized")
    if {k: old.get(k) for k in keys} != {k: info[k] for k in keys}:
        return None
    log(f"[diagnostics] {out} is up to date ({info['task']}); skipping (--force redoes it)")
    return old


def write_raw_splits(raw: str, data: Dict[str, Dict[str, Any]], extra: Dict[str, Sequence[str]]) -> None:
    """``raw/{split}.{SRC,TGT}`` and ``raw/{split}.probes.jsonl`` of each split, plus the ``extra`` files
    (name -> lines), written as one set."""
    with OutputSet(raw) as o:
        for split, d in data.items():
            o.write_lines(f"{split}.{SRC}", d["src"])
            o.write_lines(f"{split}.{TGT}", d["tgt"])
            o.write_jsonl(f"{split}.probes.jsonl", d["probes"])
        for name, lines in extra.items():
            o.write_lines(name, lines)


def generate(task: str, out: str, *, seed: int = 1, n_train: Optional[int] = None, n_valid: Optional[int] = None,
             n_test: Optional[int] = None, binarize: bool = True, force: bool = False,
             fillers: int = DEFAULTS["fillers"], sent_len: Tuple[int, int] = DEFAULTS["sent_len"],
             **params) -> Dict[str, Any]:
    """Write the corpus of ``task`` (``copy`` or ``retrieval``) under ``out`` (module doc); returns the
    ``diagnostics.json`` record (skips the work when it exists with the same parameters)."""
    if task not in COPY_TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(COPY_TASKS)}")
    sizes = {"train": n_train, "valid": n_valid, "test": n_test}
    sizes = {k: v if v is not None else DEFAULTS[task][f"n_{k}"] for k, v in sizes.items()}
    unknown = set(params) - set(DEFAULTS[task])
    if unknown:
        raise ToolError(f"options {', '.join(sorted(unknown))} do not apply to the {task} task")
    layout = {k: params.get(k, v) for k, v in DEFAULTS[task].items() if not k.startswith("n_")}
    info: Dict[str, Any] = {"version": VERSION, "task": task, "seed": seed, "sizes": sizes,
                            "layout": dict(layout, fillers=fillers, sent_len=list(sent_len)), "bound": BOUND[task],
                            "src": SRC, "tgt": TGT, "binarized": binarize}
    meta = os.path.join(out, "diagnostics.json")
    old = None if force else up_to_date(out, info)
    if old is not None:
        return old
    raw = os.path.join(out, "raw")
    if task == "copy":
        pools = name_pools(seed, [layout["train_names"], max(50, sizes["valid"] // 4), layout["test_names"]])
        data = {split: generate_copy_split(split, n, pool, seed=seed, fillers=fillers, sent_len=sent_len)
                for (split, n), pool in zip(sizes.items(), pools)}
        keep = lambda w: not w.startswith("N")  # noqa: E731  the names stay out of the dictionary
        info["splits"] = {s: {"lines": len(d["src"]), "names": sum(len(p["names"]) for p in d["probes"])}
                          for s, d in data.items()}
        info["name_pools"] = {s: len(p) for s, p in zip(sizes, pools)}
    else:
        r = generate_retrieval(seed=seed, n_train=sizes["train"], n_valid=sizes["valid"], n_test=sizes["test"],
                               fillers=fillers, sent_len=sent_len, **layout)
        data = {s: dict(r[s], probes=r["probes"] if s == "test" else []) for s in ("train", "valid", "test")}
        keep = lambda w: True  # noqa: E731
        info["splits"] = {s: {"lines": len(d["src"])} for s, d in data.items()}
        info["splits"]["test"].update(tuplets=r["tuplets"], probes=len(r["probes"]))
        info["memory_lines"] = {"train": len(r["train"]["src"]), "test": len(r["memory"]["src"])}
        info["clusters"] = r["clusters"]
    write_raw_splits(raw, data, {f"memory.{SRC}": r["memory"]["src"], f"memory.{TGT}": r["memory"]["tgt"]}
                     if task == "retrieval" else {})
    dict_path = os.path.join(out, "dict.txt")
    with OutputSet(out) as o:
        o.write_lines("dict.txt", dictionary_lines([x for d in data.values() for side in ("src", "tgt")
                                                    for x in d[side]], keep))
    log(f"[diagnostics] {task}: " + "; ".join(f"{s} {v['lines']} lines" for s, v in info["splits"].items()))
    if binarize:
        bin_dir = os.path.join(out, "bin")
        pref = lambda s: os.path.join(raw, s)  # noqa: E731
        preprocess_joint(dict_path, bin_dir, {"train": pref("train"), "valid": pref("valid"),
                                              **({"test": pref("test")} if task == "copy" else {})})
        info["bin"] = bin_dir
        if task == "retrieval":
            _write_side(bin_dir, "train", r["tm"]["train"], r["train"]["src"], r["train"]["src"], True, "cluster")
            _write_side(bin_dir, "valid", r["tm"]["valid"], r["valid"]["src"], r["train"]["src"], False, "cluster")
            test_dir = os.path.join(out, "bin_test")
            preprocess_joint(dict_path, test_dir, {"train": pref("memory"), "test": pref("test")})
            info["bin_test"] = {}
            for variant in ("test", "test_random", "test_swapped"):
                folder = test_dir if variant == "test" else f"{test_dir}{variant[4:]}"
                if folder != test_dir:
                    _link_test_memory(test_dir, folder)
                _write_side(folder, "test", r["tm"][variant], r["test"]["src"], r["memory"]["src"], False, variant)
                info["bin_test"][variant] = folder
    write_json(meta, info, indent=1)
    return info


# --------------------------------------------------------------------------------------------- scoring
def name_scores(probes: Sequence[Dict[str, Any]], hyps: Dict[int, str]) -> Dict[str, Any]:
    """Copy task: ``name_accuracy`` = reference names written (per name occurrence, each hypothesis word used
    once), ``exact`` = hypotheses equal to the reference's names in order (the names only), ``unk`` = share
    of hypotheses with an ⟨unk⟩."""
    total = hit = exact = unk = 0
    for p in probes:
        line = int(p["line"])
        if line not in hyps:
            raise ToolError(f"no hypothesis for line {line}")
        words = hyps[line].split()
        pool = list(words)
        for n in p["names"]:
            total += 1
            if n in pool:
                hit += 1
                pool.remove(n)
        exact += [w for w in words if w.startswith("N")] == list(p["names"])
        unk += "<unk>" in words
    n = len(probes)
    return {"sentences": n, "names": total, "name_accuracy": hit / total if total else None,
            "exact_names": exact / n if n else None, "unk": unk / n if n else None}


def value_scores(probes: Sequence[Dict[str, Any]], hyps: Dict[int, str]) -> Dict[str, Any]:
    """Retrieval task: ``accuracy`` = hypotheses with the correct value and no other candidate; ``swapped`` =
    those with the value the swapped memory gives (and no other); ``missing`` = no candidate at all."""
    correct = swapped = missing = 0
    for p in probes:
        line = int(p["line"])
        if line not in hyps:
            raise ToolError(f"no hypothesis for line {line}")
        written = {w for w in hyps[line].split() if w in p["candidates"]}
        correct += written == {p["correct"]}
        swapped += written == {p["swapped"]}
        missing += not written
    n = len(probes)
    return {"probes": n, "accuracy": correct / n if n else None, "swapped": swapped / n if n else None,
            "missing": missing / n if n else None}

r"""Diagnostic corpora of the multilingual mechanisms of Gu (2019) ch. 5: synthetic many-to-English tasks on
which the multilingual baseline is limited *by construction* and the mechanism is not (``fairseq-ext-diagnostics
generate ulr_cipher|mole_shared``; the document-context tasks are :mod:`fairseq_ext.tools.analysis.diagnostics`).

Every task is word level and monotone; the folder has the layout of ``fairseq-ext-data universal``, and
the ULR arrays are made by ``fairseq-ext-ulr project`` (Eq. 5.4) from the monolingual vectors (random
rotations of shared concept vectors plus noise) and seed dictionaries written here.

* ``ulr_cipher`` (ULR, §5.3.1): a zero-resource language that is a cipher of an auxiliary one, with no
  parallel sentence; Multi-NMT (Eq. 5.1) is at chance (≈ 1/C), ULR reaches it through the universal tokens.
* ``mole_shared`` (MoLE, §5.3.2): two languages sharing word forms with other meanings, told apart only by a
  marker word; a model that does not know the language is right on at most half of each twin pair.

Output (``generate TASK --out DIR``): ``DIR/raw/``, ``DIR/spm/``, ``DIR/ulr/``, ``DIR/bin/``,
``DIR/manifest.json`` and ``DIR/diagnostics.json`` (task, parameters, bound, roles of the test lines).
"""
from __future__ import annotations

import os
import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_ext.tools.common import ToolError, log, positive_int, read_json, write_json

__all__ = ["TASKS", "DEFAULTS", "LANGS", "BOUND", "build_task", "generate", "write_universal_files",
           "add_generate_arguments", "run_generate"]

TASKS = ("ulr_cipher", "mole_shared")
TGT = "en"
VERSION = 1  # of the generator: a change regenerates existing corpora
LANGS = {"ulr_cipher": {"aux": ["sa"], "lowres": "zc"}, "mole_shared": {"aux": ["la", "lb"], "lowres": "lc"}}
MARKERS = {"la": ("ma", "ta"), "lb": ("mb", "tb")}  # mole_shared: language -> (marker word, its translation)
DEFAULTS = {"seed": 1, "concepts": 300, "seed_pairs": 150, "dim": 32, "noise": 0.3, "sent_len": (3, 7),
            "n_train": 20000, "n_valid": 200, "n_test": 400}
BOUND = {"ulr_cipher": "1/C in expectation (Multi-NMT): no cipher symbol is ever trained, its embedding is its "
                       "random initialisation",
         "mole_shared": "0.5 of the content words, exactly (test twins): a model that does not know the language "
                        "is right on at most one twin of a pair"}


def english(c: int) -> str:
    return f"e{c}"


def derangement(n: int, rng: random.Random) -> List[int]:
    """A permutation of range(n) without a fixed point."""
    while True:
        p = list(range(n))
        rng.shuffle(p)
        if all(p[i] != i for i in range(n)):
            return p


def rotation(dim: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    return q * np.sign(np.diag(r))


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


# --------------------------------------------------------------------------------------------- the task in memory
def build_task(task: str, *, seed: int = 1, n_train: int = DEFAULTS["n_train"], n_valid: int = DEFAULTS["n_valid"],
               n_test: int = DEFAULTS["n_test"], concepts: int = DEFAULTS["concepts"],
               seed_pairs: int = DEFAULTS["seed_pairs"], dim: int = DEFAULTS["dim"], noise: float = DEFAULTS["noise"],
               sent_len: Tuple[int, int] = DEFAULTS["sent_len"]) -> Dict[str, Any]:
    """Everything of a task in memory: ``splits`` {split: {"src", "en", "lang", "role"}} (lines; ``role``: per
    test line the twin pair and what it tests), ``lexicon`` {lang: {word: concept}} (the translation of a source
    word is ``e<concept>``; markers map to their own English word), ``vectors`` {lang or "en": (words, (n, dim))},
    ``seeds`` {lang: [(word, english)]}, ``seed_concepts`` {lang: [concept]}."""
    if task not in TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(TASKS)}")
    if not 1 <= sent_len[0] <= sent_len[1]:
        raise ToolError(f"--sent-len {sent_len[0]} {sent_len[1]}: need 1 <= MIN <= MAX")
    if concepts < 2:
        raise ToolError(f"--concepts must be >= 2, got {concepts}")
    if not dim <= seed_pairs <= concepts:
        raise ToolError(f"--seed-pairs {seed_pairs}: need --dim ({dim}) <= pairs <= --concepts ({concepts}) "
                        f"(Procrustes needs at least as many pairs as dimensions)")
    if noise < 0:
        raise ToolError(f"--noise must be >= 0, got {noise}")
    struct = random.Random(f"diagnostics_multi:{task}:{seed}:structure")
    nprng = np.random.default_rng([seed, len(task), TASKS.index(task)])
    aux, lowres = LANGS[task]["aux"], LANGS[task]["lowres"]
    extra = [t for _, t in MARKERS.values()] if task == "mole_shared" else []
    # concept vectors: the C concepts, then the markers' English words
    E = _unit(nprng.standard_normal((concepts + len(extra), dim)))
    sigma = noise / np.sqrt(dim)
    en_words = [english(c) for c in range(concepts)] + extra
    vectors = {TGT: (en_words, _unit(E + sigma * nprng.standard_normal(E.shape)))}
    lexicon: Dict[str, Dict[str, int]] = {}
    out_of: Dict[str, Dict[str, str]] = {}  # lang -> word -> English word
    if task == "ulr_cipher":
        relabel = list(range(concepts))
        struct.shuffle(relabel)
        cipher = list(range(concepts))
        struct.shuffle(cipher)
        lexicon["sa"] = {f"s{relabel[c]}": c for c in range(concepts)}
        lexicon["zc"] = {f"z{cipher[relabel[c]]}": c for c in range(concepts)}  # a relabelling of sa's types
    else:
        pi = derangement(concepts, struct)
        lexicon["la"] = {f"w{k}": k for k in range(concepts)}
        lexicon["lb"] = {f"w{k}": pi[k] for k in range(concepts)}
    for lang, lex in lexicon.items():
        out_of[lang] = {w: english(c) for w, c in lex.items()}
    if task == "mole_shared":
        for lang, (marker, tgt) in MARKERS.items():
            out_of[lang][marker] = tgt
    # monolingual vectors and seed dictionaries
    seeds: Dict[str, List[Tuple[str, str]]] = {}
    seed_concepts: Dict[str, List[int]] = {}
    if task == "ulr_cipher":
        for lang in ("sa", "zc"):
            R = rotation(dim, nprng)
            words = sorted(lexicon[lang], key=lambda w: lexicon[lang][w])
            base = E[[lexicon[lang][w] for w in words]]
            vectors[lang] = (words, _unit((base + sigma * nprng.standard_normal(base.shape)) @ R))
            chosen = sorted(struct.sample(range(concepts), seed_pairs))
            seed_concepts[lang] = chosen
            by_c = {c: w for w, c in lexicon[lang].items()}
            # zc: cipher -> sa word pairs composed with sa's translation (cipher -> English, the tool's format)
            seeds[lang] = [(by_c[c], english(c)) for c in chosen]
    else:
        R = rotation(dim, nprng)
        words = [f"w{k}" for k in range(concepts)] + ["ma", "mb"]
        base = E[list(range(concepts)) + [concepts, concepts + 1]]
        vecs = _unit((base + sigma * nprng.standard_normal(base.shape)) @ R)
        chosen = sorted(struct.sample(range(concepts), seed_pairs))
        for lang in ("la", "lb"):  # false friends: lb's vectors and seed pairs are la's
            keep = [i for i, w in enumerate(words) if w in out_of[lang]]
            vectors[lang] = ([words[i] for i in keep], vecs[keep])
            seeds[lang] = [(f"w{k}", english(k)) for k in chosen]  # the same rotation: identical w<k> rows
            seed_concepts[lang] = chosen
    # sentences
    splits: Dict[str, Dict[str, List[Any]]] = {}
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        rng = random.Random(f"diagnostics_multi:{task}:{seed}:{split}")
        lines = splits[split] = {"src": [], "en": [], "lang": [], "role": []}
        blind = splits.setdefault("test_blind", {"src": [], "en": [], "lang": [], "role": []}) \
            if task == "mole_shared" and split == "test" else None
        for i in range(n):
            words = [rng.randrange(concepts) for _ in range(rng.randint(*sent_len))]
            if task == "ulr_cipher":
                langs = ["sa"] if split == "train" else (["zc"] if split == "valid" else ["sa", "zc"])
            else:
                langs = [rng.choice(aux)] if split == "train" else list(aux)
            at = rng.randrange(len(words) + 1)
            for lang in langs:
                if task == "ulr_cipher":
                    by_c = {c: w for w, c in lexicon[lang].items()}
                    src = [by_c[c] for c in words]
                else:
                    src = [f"w{k}" for k in words]
                tgt = [out_of[lang][w] for w in src]
                if blind is not None:
                    blind["src"].append(" ".join(src))
                    blind["en"].append(" ".join(tgt))
                    blind["lang"].append(lang)
                    blind["role"].append({"pair": i, "marker": None})
                marker = None
                if task == "mole_shared":
                    src = src[:at] + [MARKERS[lang][0]] + src[at:]
                    tgt = tgt[:at] + [MARKERS[lang][1]] + tgt[at:]
                    marker = at
                lines["src"].append(" ".join(src))
                lines["en"].append(" ".join(tgt))
                lines["lang"].append(lang)
                lines["role"].append({"pair": i, "marker": marker})
    return {"task": task, "aux": aux, "lowres": lowres, "concepts": concepts, "splits": splits,
            "lexicon": lexicon, "translation": out_of, "vectors": vectors, "seeds": seeds,
            "seed_concepts": seed_concepts, "english": en_words}


# --------------------------------------------------------------------------------------------- the folder
def write_lines(path: str, lines) -> None:
    """``lines`` to ``path``, one a line, under a temporary name renamed when complete."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    os.replace(tmp, path)


def _mark(line: str, lang: str) -> str:
    return " ".join(f"{w}__{lang}" for w in line.split())


def write_universal_files(out: str, t: Dict[str, Any]) -> None:
    """The text side of a universal data folder from a task in memory (``splits``, ``lexicon``, ``vectors``,
    ``seeds``): ``raw/`` and marked ``spm/`` lines of every split (with ``.lang``), ``spm/text.*`` (the training
    sentences of each language) and ``ulr/emb.*.vec`` / ``ulr/seed.*.tsv`` (what ``fairseq-ext-ulr project`` reads)."""
    from fairseq_ext.tools.corpora.ulr_files import write_vec

    raw, spm, ulr = (os.path.join(out, d) for d in ("raw", "spm", "ulr"))
    for d in (raw, spm, ulr):
        os.makedirs(d, exist_ok=True)
    for split, d in t["splits"].items():
        write_lines(os.path.join(raw, f"{split}.src"), d["src"])
        write_lines(os.path.join(raw, f"{split}.{TGT}"), d["en"])
        write_lines(os.path.join(raw, f"{split}.lang"), d["lang"])
        write_lines(os.path.join(spm, f"{split}.src"), (_mark(s, g) for s, g in zip(d["src"], d["lang"])))
        write_lines(os.path.join(spm, f"{split}.{TGT}"), d["en"])
    write_lines(os.path.join(spm, f"text.{TGT}"), t["splits"]["train"]["en"])
    for lang in t["lexicon"]:
        write_lines(os.path.join(spm, f"text.{lang}"), [s for s, g in zip(t["splits"]["train"]["src"],
                                                                          t["splits"]["train"]["lang"]) if g == lang])
    for lang, (words, vecs) in t["vectors"].items():
        tmp = os.path.join(ulr, f"emb.{lang}.vec.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            write_vec(f, words, vecs)
        os.replace(tmp, os.path.join(ulr, f"emb.{lang}.vec"))
    for lang, pairs in t["seeds"].items():
        write_lines(os.path.join(ulr, f"seed.{lang}.tsv"), (f"{a}\t{b}\t1\tdiagnostic" for a, b in pairs))


def generate(task: str, out: str, *, seed: int = 1, n_train: int = DEFAULTS["n_train"],
             n_valid: int = DEFAULTS["n_valid"], n_test: int = DEFAULTS["n_test"], force: bool = False,
             binarize: bool = True, **layout) -> Dict[str, Any]:
    """Write the corpus of ``task`` under ``out`` (module doc); returns the ``diagnostics.json`` record."""
    params = dict({k: v for k, v in DEFAULTS.items() if k not in ("seed", "n_train", "n_valid", "n_test")}, **layout)
    params["sent_len"] = list(params["sent_len"])
    info: Dict[str, Any] = {"version": VERSION, "task": task, "seed": seed,
                            "sizes": {"train": n_train, "valid": n_valid, "test": n_test}, "layout": params,
                            "binarized": binarize}
    meta = os.path.join(out, "diagnostics.json")
    keys = ("version", "task", "seed", "sizes", "layout", "binarized")
    if not force and os.path.isfile(meta):
        old = read_json(meta)
        if {k: old.get(k) for k in keys} == {k: info[k] for k in keys}:
            log(f"[diagnostics] {out} is up to date ({task}); skipping (--force redoes it)")
            return old
    t = build_task(task, seed=seed, n_train=n_train, n_valid=n_valid, n_test=n_test,
                   **{k: (tuple(v) if k == "sent_len" else v) for k, v in params.items()})
    write_universal_files(out, t)
    spm, ulr = os.path.join(out, "spm"), os.path.join(out, "ulr")
    langs = t["aux"] + [t["lowres"]]
    write_json(os.path.join(out, "manifest.json"), {"aux": t["aux"], "lowres": t["lowres"], "langs": langs,
                                                    "diagnostic": task}, indent=1)
    # the dictionaries: every marked word of every language (the cipher's too), then English
    counts: Dict[str, int] = {}
    for s, g in zip(t["splits"]["train"]["src"], t["splits"]["train"]["lang"]):
        for w in s.split():
            counts[f"{w}__{g}"] = counts.get(f"{w}__{g}", 0) + 1
    src_syms = [f"{w}__{lang}" for lang in t["lexicon"] for w in t["translation"][lang]]
    bin_dir = os.path.join(out, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    dicts = os.path.join(spm, "dict.src.txt"), os.path.join(spm, f"dict.{TGT}.txt")
    write_lines(dicts[0], (f"{s} {max(counts.get(s, 0), 1)}" for s in src_syms))
    en_counts: Dict[str, int] = {}
    for line in t["splits"]["train"]["en"]:
        for w in line.split():
            en_counts[w] = en_counts.get(w, 0) + 1
    write_lines(dicts[1], (f"{w} {max(en_counts.get(w, 0), 1)}" for w in t["english"]))
    tests = ["test", "test_blind"] if "test_blind" in t["splits"] else ["test"]
    if binarize:
        from fairseq_ext.tools.corpora.binarize import run_preprocess

        run_preprocess(["--source-lang", "src", "--target-lang", TGT, "--trainpref", os.path.join(spm, "train"),
                        "--validpref", os.path.join(spm, "valid"),
                        "--testpref", ",".join(os.path.join(spm, s) for s in tests),
                        "--srcdict", dicts[0], "--tgtdict", dicts[1], "--destdir", bin_dir, "--workers", "1"])
        names = {"train": "train", "valid": "valid", "test": "test", "test_blind": "test1"}
        for split in t["splits"]:
            write_lines(os.path.join(bin_dir, f"{names[split]}.lang"), t["splits"][split]["lang"])
        from fairseq_ext.tools.corpora.ulr import main as ulr_main

        ulr_main(["project", "--data", out, "--num-universal", str(len(t["english"])), "--force"])
        info["ulr"] = read_json(os.path.join(ulr, "manifest.json"))
        info["ulr"]["nearest_key"] = nearest_key_share(out, t["translation"])
        info["bin"] = bin_dir
    info.update(bound=BOUND[task], aux=t["aux"], lowres=t["lowres"], langs=langs,
                lexicon=t["lexicon"], translation=t["translation"], seed_concepts=t["seed_concepts"],
                splits={s: {"lines": len(d["src"]), "langs": {g: d["lang"].count(g) for g in sorted(set(d["lang"]))}}
                        for s, d in t["splits"].items()},
                roles={s: t["splits"][s]["role"] for s in tests}, test_splits={"test": "test", "test_blind": "test1"})
    write_json(meta, info, indent=None)
    log(f"[diagnostics] {task}: " + "; ".join(f"{s} {v['lines']} lines {v['langs']}" for s, v in info["splits"].items()))
    return info


def nearest_key_share(out: str, translation: Dict[str, Dict[str, str]]) -> Dict[str, float]:
    """Per language: the share of its words whose projected query's closest universal key (the argmax of
    Eq. 5.3 with A = I) is the word's own translation -- what the projection alone gets right, seed words or not
    (``mole_shared``'s ``lb``: its false friends point at ``la``'s meanings, by construction)."""
    from fairseq.data import Dictionary

    query = np.load(os.path.join(out, "ulr", "query.npy"))
    key = np.load(os.path.join(out, "ulr", "key.npy"))
    with open(os.path.join(out, "ulr", "universal.txt"), encoding="utf-8") as f:
        universal = f.read().split()
    d = Dictionary.load(os.path.join(out, "bin", "dict.src.txt"))
    share = {}
    for lang, lex in translation.items():
        words = sorted(lex)
        nearest = (query[[d.index(f"{w}__{lang}") for w in words]] @ key.T).argmax(1)
        share[lang] = round(float(np.mean([universal[n] == lex[w] for n, w in zip(nearest, words)])), 4)
    return share


# --------------------------------------------------------------------------------------------- CLI (through diagnostics)
def add_generate_arguments(g) -> None:
    """The options of these tasks on ``fairseq-ext-diagnostics generate`` (its --out/--seed/--n-* are shared)."""
    m = g.add_argument_group("multilingual tasks (ulr_cipher, mole_shared)")
    m.add_argument("--concepts", type=positive_int, default=DEFAULTS["concepts"],
                   help="word types per language (default %(default)s)")
    m.add_argument("--seed-pairs", type=positive_int, default=DEFAULTS["seed_pairs"],
                   help="seed dictionary pairs per language (default %(default)s)")
    m.add_argument("--dim", type=positive_int, default=DEFAULTS["dim"],
                   help="monolingual vector dimension (default %(default)s)")
    m.add_argument("--noise", type=float, default=DEFAULTS["noise"],
                   help="norm of the noise of each language's vectors (default %(default)s)")


def run_generate(args) -> int:
    """``fairseq-ext-diagnostics generate TASK`` for a task of this module."""
    n = {k: getattr(args, k, None) or DEFAULTS[k] for k in ("n_train", "n_valid", "n_test")}
    info = generate(args.task, args.out, seed=args.seed, **n,
                    binarize=not args.no_binarize, force=args.force, concepts=args.concepts,
                    seed_pairs=args.seed_pairs, dim=args.dim, noise=args.noise)
    print(f"{args.task}: bound {info['bound']}; test {info['splits']['test']['lines']} lines; "
          f"data {info.get('bin', args.out)}")
    return 0

r"""Diagnostic corpus of MetaNMT's fast adaptation (Gu 2019 ch. 6): a K-shot task on which a start can reach a new
language's words only through the K examples, so that what fine-tuning from each start makes of them is measured
(``fairseq-ext-diagnostics generate meta_cipher``; the ch. 5 tasks are :mod:`fairseq_ext.tools.analysis.diagnostics_multi`).

``meta_cipher``: C concepts, English word ``e<c>``; a *base* language and, from it, several *cipher* languages, each
a random permutation of the base word types (its own marked vocabulary ``<word>__<lang>``): the training languages
``m1 .. mN`` with parallel sentences, and a held-out new language ``zn`` with only a pool of K-shot sentences
(nested draws ``k<K>``: the first K of the pool), a validation and a test set. A sentence is 3-6 concepts drawn
uniformly, translated word by word (monotone).

The ULR arrays (Eq. 5.3's ε_Q, ε_K; Procrustes of Eq. 5.4 by the real ``fairseq-ext-ulr project``) come from
synthetic monolingual vectors (per language a random rotation of noisy concept vectors) in which a share
``--wrong-share`` of every language's words is *misplaced*: the vector of the word of concept c is the vector of
concept σ(c) (σ a derangement of the misplaced set, drawn per language), while the seed dictionary holds right
words only. So the projection puts every right word next to its own translation's key and every misplaced word next
to the key of another concept: through the universal embedding (ε^0 of Eq. 6.12) a misplaced word means σ(c); only
the language-specific change Δε^k (Eq. 6.12) can carry its meaning, and it is learned from examples.

Bound (``bounds()``): a start without fine-tuning translates the misplaced words of ``zn`` by their projected
meaning, which is wrong: at most the share of right tokens of the test set plus chance on the others. After
fine-tuning on K examples, a misplaced word that none of the K sentences contains carries no information about its
meaning (its Δε row gets no gradient, its universal embedding points elsewhere): the test ceiling at K is
1 − the share of test tokens that are misplaced and unseen in the K examples (plus chance on them).

Output (``generate meta_cipher --out DIR``): ``DIR/raw/``, ``DIR/spm/``, ``DIR/ulr/``, ``DIR/bin/`` (splits
``train`` = the training languages, ``valid`` and ``test`` = ``zn``, ``k<K>`` = ``zn``'s K-shot draws, each with
its ``.lang``), ``DIR/manifest.json`` and ``DIR/diagnostics.json`` (parameters, lexicon, misplaced sets, bounds).
"""
from __future__ import annotations

import os
import random
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from fairseq_ext.tools.analysis.diagnostics_copy import up_to_date
from fairseq_ext.tools.analysis.diagnostics_multi import (
    derangement, english, rotation, write_lines, write_universal_files,
)
from fairseq_ext.tools.common import ToolError, log, positive_int, read_json, write_json

__all__ = ["TASKS", "DEFAULTS", "BOUND", "NEW_LANG", "build_task", "bounds", "generate", "add_generate_arguments",
           "run_generate", "token_accuracy"]

TASKS = ("meta_cipher",)
TGT = "en"
NEW_LANG = "zn"
VERSION = 1  # of the generator: a change regenerates existing corpora
DEFAULTS = {"seed": 1, "concepts": 40, "train_langs": 4, "wrong_share": 0.25, "seed_pairs": 24, "dim": 16,
            "noise": 0.3, "sent_len": (3, 6), "n_train": 1000, "n_valid": 50, "n_test": 300, "shots": (4, 8, 16)}
BOUND = ("zero-shot: the right tokens' share + chance on the misplaced ones (their projection points at another "
         "concept); after K shots: 1 - the share of test tokens misplaced and unseen in the K examples (+ chance)")


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def train_langs(n: int) -> List[str]:
    return [f"m{i + 1}" for i in range(n)]


# --------------------------------------------------------------------------------------------- the task in memory
def build_task(*, seed: int = 1, n_train: int = DEFAULTS["n_train"], n_valid: int = DEFAULTS["n_valid"],
               n_test: int = DEFAULTS["n_test"], concepts: int = DEFAULTS["concepts"],
               train_langs_n: int = DEFAULTS["train_langs"], wrong_share: float = DEFAULTS["wrong_share"],
               seed_pairs: int = DEFAULTS["seed_pairs"], dim: int = DEFAULTS["dim"], noise: float = DEFAULTS["noise"],
               sent_len: Tuple[int, int] = DEFAULTS["sent_len"],
               shots: Sequence[int] = DEFAULTS["shots"]) -> Dict[str, Any]:
    """Everything of ``meta_cipher`` in memory: ``splits`` {split: {"src", "en", "lang"}} (``train``, ``valid``,
    ``test``, ``k<K>``), ``lexicon`` {lang: {word: concept}}, ``misplaced`` {lang: {concept: σ(concept)}},
    ``vectors`` {lang or "en": (words, (n, dim))}, ``seeds`` {lang: [(word, english)]}."""
    if not 1 <= sent_len[0] <= sent_len[1]:
        raise ToolError(f"--sent-len {sent_len[0]} {sent_len[1]}: need 1 <= MIN <= MAX")
    if concepts < 4:
        raise ToolError(f"--concepts must be >= 4, got {concepts}")
    if not 0 <= wrong_share < 1:
        raise ToolError(f"--wrong-share must be in [0, 1), got {wrong_share}")
    n_wrong = int(round(wrong_share * concepts))
    if n_wrong == 1:
        raise ToolError(f"--wrong-share {wrong_share}: one misplaced word cannot be deranged; give 0 or >= 2 words")
    if not dim <= seed_pairs <= concepts - n_wrong:
        raise ToolError(f"--seed-pairs {seed_pairs}: need --dim ({dim}) <= pairs <= the right words "
                        f"({concepts - n_wrong}) (Procrustes needs at least as many pairs as dimensions)")
    if not shots or min(shots) < 1:
        raise ToolError(f"--shots must be positive, got {list(shots)}")
    struct = random.Random(f"diagnostics_meta:{seed}:structure")
    nprng = np.random.default_rng([seed, 6])
    langs = train_langs(train_langs_n) + [NEW_LANG]
    E = _unit_rows(nprng.standard_normal((concepts, dim)))
    sigma = noise / np.sqrt(dim)
    en_words = [english(c) for c in range(concepts)]
    vectors = {TGT: (en_words, _unit_rows(E + sigma * nprng.standard_normal(E.shape)))}
    base = list(range(concepts))
    struct.shuffle(base)  # the base language: concept c is word type base[c]
    lexicon: Dict[str, Dict[str, int]] = {}
    misplaced: Dict[str, Dict[int, int]] = {}
    seeds: Dict[str, List[Tuple[str, str]]] = {}
    for lang in langs:
        perm = list(range(concepts))
        struct.shuffle(perm)  # the cipher: a permutation of the base word types
        lexicon[lang] = {f"w{perm[base[c]]}": c for c in range(concepts)}
        wrong = sorted(struct.sample(range(concepts), n_wrong))
        d = derangement(len(wrong), struct) if wrong else []
        misplaced[lang] = {c: wrong[d[i]] for i, c in enumerate(wrong)}
        words = sorted(lexicon[lang], key=lambda w: lexicon[lang][w])  # by concept
        meaning = [misplaced[lang].get(c, c) for c in range(concepts)]  # what the vector says
        R = rotation(dim, nprng)
        vecs = E[meaning] + sigma * nprng.standard_normal((concepts, dim))
        vectors[lang] = (words, _unit_rows(vecs @ R))
        right = [c for c in range(concepts) if c not in misplaced[lang]]
        seeds[lang] = [(words[c], english(c)) for c in sorted(struct.sample(right, seed_pairs))]
    splits: Dict[str, Dict[str, List[str]]] = {}
    pool = max(shots)
    plan = [("train", lang, n_train) for lang in langs[:-1]] + [("pool", NEW_LANG, pool), ("valid", NEW_LANG, n_valid),
                                                                   ("test", NEW_LANG, n_test)]
    for split, lang, n in plan:
        rng = random.Random(f"diagnostics_meta:{seed}:{split}:{lang}")
        by_c = {c: w for w, c in lexicon[lang].items()}
        lines = splits.setdefault(split, {"src": [], "en": [], "lang": []})
        for _ in range(n):
            cs = [rng.randrange(concepts) for _ in range(rng.randint(*sent_len))]
            lines["src"].append(" ".join(by_c[c] for c in cs))
            lines["en"].append(" ".join(english(c) for c in cs))
            lines["lang"].append(lang)
    pool_lines = splits.pop("pool")
    for k in sorted(set(shots)):
        splits[f"k{k}"] = {key: v[:k] for key, v in pool_lines.items()}
    return {"langs": langs, "train_langs": langs[:-1], "new": NEW_LANG, "concepts": concepts, "splits": splits,
            "lexicon": lexicon, "misplaced": misplaced, "vectors": vectors, "seeds": seeds, "english": en_words,
            "shots": sorted(set(shots))}


def bounds(lexicon: Dict[str, int], misplaced: Dict[int, int], test_src: Sequence[str],
           shot_src: Dict[int, Sequence[str]]) -> Dict[str, Any]:
    """The bounds of the module doc on a test set of the new language: ``right_share`` (zero-shot ceiling, chance on
    the rest aside), per K ``ceiling`` (1 − misplaced-and-unseen share) and the token shares by kind."""
    tokens = [w for line in test_src for w in line.split()]
    wrong = {w for w, c in lexicon.items() if c in misplaced}
    n = max(len(tokens), 1)
    out: Dict[str, Any] = {"tokens": len(tokens), "right_share": round(sum(w not in wrong for w in tokens) / n, 4),
                           "misplaced_types": len(wrong), "shots": {}}
    for k, lines in sorted(shot_src.items()):
        seen = {w for line in lines for w in line.split()}
        unseen = sum(w in wrong and w not in seen for w in tokens) / n
        out["shots"][str(k)] = {"ceiling": round(1 - unseen, 4), "unseen_misplaced_share": round(unseen, 4),
                                "seen_misplaced_types": len(wrong & seen)}
    return out


def token_accuracy(hyps: Dict[int, List[str]], refs: Sequence[str], srcs: Sequence[str], lexicon: Dict[str, int],
                   misplaced: Dict[int, int], seen: Sequence[str] = ()) -> Dict[str, float]:
    """Scores of hypotheses {line: [words]} against references: ``all`` (the share of reference words reproduced at
    their position), ``exact`` (whole lines), and ``all`` split by source word kind: ``right``, ``misplaced``, and
    with ``seen`` (the K-shot source lines) ``misplaced_seen`` / ``misplaced_unseen``."""
    wrong = {w for w, c in lexicon.items() if c in misplaced}
    seen_words = {w for line in seen for w in line.split()}
    acc: Dict[str, List[int]] = {}
    exact = 0
    for i, (ref, src) in enumerate(zip(refs, srcs)):
        hyp, ref_w, src_w = hyps.get(i, []), ref.split(), src.split()
        exact += int(hyp == ref_w)
        for j, (w, s) in enumerate(zip(ref_w, src_w)):
            ok = int(j < len(hyp) and hyp[j] == w)
            keys = ["all", "misplaced" if s in wrong else "right"]
            if s in wrong and seen:
                keys.append("misplaced_seen" if s in seen_words else "misplaced_unseen")
            for key in keys:
                c = acc.setdefault(key, [0, 0])
                c[0] += ok
                c[1] += 1
    out = {k: round(c / n, 4) for k, (c, n) in sorted(acc.items())}
    out["exact"] = round(exact / max(len(refs), 1), 4)
    return out


# --------------------------------------------------------------------------------------------- the folder
def generate(task: str, out: str, *, seed: int = 1, n_train: int = DEFAULTS["n_train"],
             n_valid: int = DEFAULTS["n_valid"], n_test: int = DEFAULTS["n_test"], force: bool = False,
             binarize: bool = True, **layout) -> Dict[str, Any]:
    """Write the ``meta_cipher`` corpus under ``out`` (module doc); returns the ``diagnostics.json`` record."""
    if task not in TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(TASKS)}")
    params = dict({k: v for k, v in DEFAULTS.items() if k not in ("seed", "n_train", "n_valid", "n_test")}, **layout)
    params["sent_len"], params["shots"] = list(params["sent_len"]), sorted(set(params["shots"]))
    info: Dict[str, Any] = {"version": VERSION, "task": task, "seed": seed,
                            "sizes": {"train": n_train, "valid": n_valid, "test": n_test}, "layout": params,
                            "binarized": binarize}
    old = None if force else up_to_date(out, info)
    if old is not None:
        return old
    t = build_task(seed=seed, n_train=n_train, n_valid=n_valid, n_test=n_test, concepts=params["concepts"],
                   train_langs_n=params["train_langs"], wrong_share=params["wrong_share"],
                   seed_pairs=params["seed_pairs"], dim=params["dim"], noise=params["noise"],
                   sent_len=tuple(params["sent_len"]), shots=params["shots"])
    write_universal_files(out, t)
    write_json(os.path.join(out, "manifest.json"), {"aux": t["train_langs"], "lowres": t["new"], "langs": t["langs"],
                                                    "diagnostic": task}, indent=1)
    shots = [f"k{k}" for k in t["shots"]]
    if binarize:
        _binarize(out, t, shots)
        from fairseq_ext.tools.corpora.ulr import main as ulr_main
        from fairseq_ext.tools.analysis.diagnostics_multi import nearest_key_share

        ulr_main(["project", "--data", out, "--num-universal", str(len(t["english"])), "--force"])
        info["ulr"] = read_json(os.path.join(out, "ulr", "manifest.json"))
        info["ulr"]["nearest_key"] = nearest_key_share(
            out, {g: {w: english(c) for w, c in lex.items()} for g, lex in t["lexicon"].items()})
        info["bin"] = os.path.join(out, "bin")
    new = t["new"]
    info.update(bound=BOUND, langs=t["langs"], train_langs=t["train_langs"], new=new, shots=t["shots"],
                lexicon=t["lexicon"], misplaced={g: {str(c): s for c, s in m.items()} for g, m in t["misplaced"].items()},
                bounds=bounds(t["lexicon"][new], t["misplaced"][new], t["splits"]["test"]["src"],
                              {k: t["splits"][f"k{k}"]["src"] for k in t["shots"]}),
                splits={s: {"lines": len(d["src"]), "langs": {g: d["lang"].count(g) for g in sorted(set(d["lang"]))}}
                        for s, d in t["splits"].items()})
    write_json(os.path.join(out, "diagnostics.json"), info, indent=None)
    log(f"[diagnostics] {task}: " + "; ".join(f"{s} {v['lines']} lines" for s, v in info["splits"].items()))
    return info


def _binarize(out: str, t: Dict[str, Any], shots: List[str]) -> None:
    """The marked dictionaries and fairseq-preprocess of every split; the K-shot draws are preprocessed as extra
    test sets and renamed ``k<K>``."""
    from fairseq_ext.tools.corpora.binarize import run_preprocess

    spm, bin_dir = os.path.join(out, "spm"), os.path.join(out, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    counts: Dict[str, int] = {}
    for s, g in zip(t["splits"]["train"]["src"], t["splits"]["train"]["lang"]):
        for w in s.split():
            counts[f"{w}__{g}"] = counts.get(f"{w}__{g}", 0) + 1
    src_syms = [f"{w}__{lang}" for lang in t["langs"] for w in sorted(t["lexicon"][lang], key=t["lexicon"][lang].get)]
    dicts = os.path.join(spm, "dict.src.txt"), os.path.join(spm, f"dict.{TGT}.txt")
    write_lines(dicts[0], (f"{s} {max(counts.get(s, 0), 1)}" for s in src_syms))
    write_lines(dicts[1], (f"{w} 1" for w in t["english"]))
    run_preprocess(["--source-lang", "src", "--target-lang", TGT, "--trainpref", os.path.join(spm, "train"),
                    "--validpref", os.path.join(spm, "valid"),
                    "--testpref", ",".join(os.path.join(spm, s) for s in ["test"] + shots),
                    "--srcdict", dicts[0], "--tgtdict", dicts[1], "--destdir", bin_dir, "--workers", "1"])
    for i, name in enumerate(shots, start=1):
        for side in ("src", TGT):
            for ext in ("bin", "idx"):
                os.replace(os.path.join(bin_dir, f"test{i}.src-{TGT}.{side}.{ext}"),
                           os.path.join(bin_dir, f"{name}.src-{TGT}.{side}.{ext}"))
    for split in t["splits"]:
        write_lines(os.path.join(bin_dir, f"{split}.lang"), t["splits"][split]["lang"])


# --------------------------------------------------------------------------------------------- CLI (through diagnostics)
def add_generate_arguments(g) -> None:
    """The options of ``meta_cipher`` on ``fairseq-ext-diagnostics generate`` (--n-* are shared; the multilingual
    tasks' --concepts, --seed-pairs, --dim and --noise do not apply: this task keeps :data:`DEFAULTS`)."""
    m = g.add_argument_group("fast adaptation (meta_cipher)")
    m.add_argument("--train-langs", type=positive_int, default=DEFAULTS["train_langs"],
                   help="training cipher languages (default %(default)s)")
    m.add_argument("--wrong-share", type=float, default=DEFAULTS["wrong_share"],
                   help="share of every language's words with a misplaced vector (default %(default)s)")
    m.add_argument("--shots", type=positive_int, nargs="+", default=list(DEFAULTS["shots"]),
                   help="K of the new language's K-shot draws (default %(default)s)")


def run_generate(args) -> int:
    """``fairseq-ext-diagnostics generate meta_cipher``."""
    n = {k: getattr(args, k, None) or DEFAULTS[k] for k in ("n_train", "n_valid", "n_test")}
    layout = {"train_langs": args.train_langs, "wrong_share": args.wrong_share, "shots": args.shots}
    info = generate(args.task, args.out, seed=args.seed, binarize=not args.no_binarize, force=args.force, **n,
                    **layout)
    b = info["bounds"]
    print(f"{args.task}: test {b['tokens']} tokens, right share {b['right_share']:.3f} (zero-shot ceiling); "
          + "; ".join(f"K={k}: ceiling {v['ceiling']:.3f}" for k, v in b["shots"].items())
          + f"; data {info.get('bin', args.out)}")
    return 0

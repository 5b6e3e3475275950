r"""Building the contrastive pronoun set of a Bible into English (Maruf 2019 ch. 4, Table 4.4; in the style of
ContraPro, Müller et al. 2018) from raw ``{split}.{src}``, ``{split}.{ref}`` and ``{split}.ids``: the es-en
Bible, or any source language of the multilingual Bibles with pronoun lists
(:data:`~fairseq_ext.tools.evaluation.contrastive_gender.SOURCE_PRONOUNS`).

A verse is an instance when its source holds a gender-ambiguous pronoun of its language (Spanish
:data:`ES_AMBIGUOUS`), its reference holds gendered pronouns of one gender only, and an antecedent of that
gender (a noun of the gender lexicon or a derived name, :mod:`fairseq_ext.tools.evaluation.contrastive_gender`)
is found in the same chapter, in the verse itself or before it (``min_distance`` 1: before it only, so the
verse alone cannot decide). Its distance (verses back, buckets ``0``-``3``, ``>3``) is that of Table 4.4; its
variants swap every gendered pronoun. :func:`sample_per_bucket` draws a seeded sample
per distance bucket (``--max-per-distance``, ``--balance-gender``); :func:`build_set` writes one JSON object a
line. ``fairseq-ext-contrastive build`` (:mod:`fairseq_ext.tools.evaluation.contrastive`) runs it.
"""
from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_ext.tools.common import ToolError, read_lines, require_file, write_jsonl
from fairseq_ext.tools.evaluation.contrastive_gender import (DEFAULT_LEXICON, EN_PRONOUNS, ES_AMBIGUOUS,
                                                               ES_GENDERED, GENDERS, derive_names,
                                                               load_gender_lexicon, source_pronouns,
                                                               swap_variants, tokens)
from fairseq_ext.tools.evaluation.contrastive_scoring import BUCKETS, distance_bucket

__all__ = ["chapter_of", "build_instances", "sample_per_bucket", "set_stats", "format_stats", "build_set"]


def chapter_of(verse_id: str) -> str:
    """``Ruth.1.3`` → ``Ruth.1`` (book names may contain spaces and dots only before the last two)."""
    return verse_id.rsplit(".", 1)[0] if "." in verse_id else verse_id


def _chapters(ids: Sequence[str], path: str) -> List[Tuple[str, List[int]]]:
    """Contiguous runs of verses of one chapter, in file order; a chapter split in two runs is an error."""
    out: List[Tuple[str, List[int]]] = []
    done = set()
    for i, vid in enumerate(ids):
        ch = chapter_of(vid)
        if out and out[-1][0] == ch:
            out[-1][1].append(i)
            continue
        if ch in done:
            raise ToolError(f"chapter {ch!r} is not contiguous (its verses must follow each other)", path, i + 1)
        done.add(ch)
        out.append((ch, [i]))
    return out


def _mentions(text: str, lexicon: Mapping[str, str], names: Mapping[str, Mapping[str, Any]],
              gender: str) -> List[str]:
    out = []
    for w, _, _ in tokens(text):
        g = lexicon.get(w.lower())
        if g is None and w[:1].isupper() and w in names:
            g = names[w]["gender"]
        if g == gender:
            out.append(w)
    return out


def build_instances(src: Sequence[str], ref: Sequence[str], ids: Sequence[str], lexicon: Mapping[str, str],
                    names: Mapping[str, Mapping[str, Any]], *, src_pronouns: Sequence[str] = ES_AMBIGUOUS,
                    gendered_pronouns: Sequence[str] = ES_GENDERED, exclude_gendered_source: bool = False,
                    min_distance: int = 0, max_her: int = 3,
                    ids_path: str = "ids") -> Tuple[List[Dict[str, Any]], Dict[str, int]]:
    """All instances of a split (in split order) and the counts of skipped verses by reason. An antecedent
    nearer than ``min_distance`` verses (0: in the verse itself) skips the verse (``antecedent_too_near``)."""
    if not (len(src) == len(ref) == len(ids)):
        raise ToolError(f"source, reference and ids differ in length ({len(src)}, {len(ref)}, {len(ids)})")
    amb = {w.lower() for w in src_pronouns}
    gendered = {w.lower() for w in gendered_pronouns}
    skipped = Counter()
    out = []
    for ch, lines in _chapters(ids, ids_path):
        for pos, i in enumerate(lines):
            src_words = [w.lower() for w, _, _ in tokens(src[i])]
            found = [w for w in src_words if w in amb]
            if not found:
                skipped["no_ambiguous_source_pronoun"] += 1
                continue
            gendered_src = any(w in gendered for w in src_words)
            if gendered_src and exclude_gendered_source:
                skipped["gendered_source_pronoun"] += 1
                continue
            prons = [w.lower() for w, _, _ in tokens(ref[i]) if w.lower() in EN_PRONOUNS]
            genders = {EN_PRONOUNS[p] for p in prons}
            if not genders:
                skipped["no_gendered_target_pronoun"] += 1
                continue
            if len(genders) > 1:
                skipped["both_genders"] += 1
                continue
            g = genders.pop()
            antecedent = None
            for d in range(pos + 1):
                j = lines[pos - d]
                ms = _mentions(ref[j], lexicon, names, g)
                if ms:
                    antecedent = (d, ms[0] if d == 0 else ms[-1], j)
                    break
            if antecedent is None:
                skipped["no_antecedent"] += 1
                continue
            d, word, j = antecedent
            if d < min_distance:
                skipped["antecedent_too_near"] += 1
                continue
            variants = swap_variants(ref[i], max_her)
            out.append({
                "line": i, "id": ids[i], "doc": ch, "distance": d, "bucket": distance_bucket(d), "gender": g,
                "pronouns": prons, "source_pronouns": found, "source_gendered": gendered_src,
                "antecedent": {"word": word, "line": j, "id": ids[j]},
                "reference": ref[i], "variants": variants,
            })
    return out, dict(sorted(skipped.items()))


def sample_per_bucket(instances: List[Dict[str, Any]], n: Optional[int], seed: int = 1,
                      balance_gender: bool = False) -> List[Dict[str, Any]]:
    """At most ``n`` instances per distance bucket (a seeded random choice), kept in split order. With
    ``balance_gender`` every bucket keeps as many masculine as feminine instances (the smaller count, and
    at most ``n // 2`` of each with ``n``)."""
    if not n and not balance_gender:
        return list(instances)
    keep = set()
    rng = random.Random(seed)
    for b in BUCKETS:
        if balance_gender:
            idx = {g: [k for k, x in enumerate(instances) if x["bucket"] == b and x["gender"] == g]
                   for g in GENDERS}
            m = min(len(v) for v in idx.values())
            if n:
                m = min(m, n // 2)
            for g in GENDERS:
                keep.update(idx[g] if len(idx[g]) <= m else rng.sample(idx[g], m))
            continue
        idx_b = [k for k, x in enumerate(instances) if x["bucket"] == b]
        keep.update(idx_b if len(idx_b) <= n else rng.sample(idx_b, n))
    return [x for k, x in enumerate(instances) if k in keep]


def set_stats(instances: Sequence[Mapping[str, Any]], skipped: Optional[Mapping[str, int]] = None,
              **extra) -> Dict[str, Any]:
    table = {b: {g: 0 for g in GENDERS} for b in BUCKETS}
    for x in instances:
        table[x["bucket"]][x["gender"]] += 1
    st: Dict[str, Any] = {
        "instances": len(instances),
        "by_distance": {b: sum(table[b].values()) for b in BUCKETS},
        "by_gender": {g: sum(table[b][g] for b in BUCKETS) for g in GENDERS},
        "by_distance_gender": table,
        "variants": sum(len(x["variants"]) for x in instances),
        "source_gendered": sum(bool(x.get("source_gendered")) for x in instances),
    }
    if skipped is not None:
        st["skipped"] = dict(skipped)
    st.update(extra)
    return st


def format_stats(st: Mapping[str, Any]) -> str:
    head = "| gender | " + " | ".join(BUCKETS) + " | all |"
    lines = [head, "|" + "---|" * (len(BUCKETS) + 2)]
    names = {"m": "masculine (he/him/his)", "f": "feminine (she/her/hers)"}
    for g in GENDERS:
        row = [st["by_distance_gender"][b][g] for b in BUCKETS]
        lines.append(f"| {names[g]} | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
    lines.append("| all | " + " | ".join(str(st["by_distance"][b]) for b in BUCKETS) + f" | {st['instances']} |")
    lines.append("")
    lines.append(f"{st['instances']} instances, {st['variants']} contrastive variants; "
                 f"{st['source_gendered']} with a gendered source pronoun "
                 f"({'/'.join(st.get('gendered_pronouns', ES_GENDERED)) or 'none in the language'})")
    if st.get("skipped"):
        lines.append("skipped verses: " + ", ".join(f"{k} {v}" for k, v in st["skipped"].items()))
    if "names" in st:
        lines.append(f"derived names: {st['names']['m']} masculine, {st['names']['f']} feminine")
    return "\n".join(lines)


def build_set(raw: str, split: str = "test", out: Optional[str] = None, *, src_lang: str = "es",
              ref_lang: str = "en", lexicon_path: str = DEFAULT_LEXICON,
              name_corpus: Optional[Sequence[str]] = None, names_out: Optional[str] = None,
              src_pronouns: Optional[Sequence[str]] = None, exclude_gendered_source: bool = False,
              min_distance: int = 0, max_per_distance: Optional[int] = None, seed: int = 1, max_her: int = 3,
              name_min_verses: int = 3, balance_gender: bool = False) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Build the set from a raw folder; write it to ``out`` (JSON lines) when given; (instances, stats).
    ``src_pronouns`` None: the ambiguous pronouns of ``src_lang``
    (:func:`~fairseq_ext.tools.evaluation.contrastive_gender.source_pronouns`)."""
    if not os.path.isdir(raw):
        raise ToolError(f"missing input folder: {raw}")
    paths = {k: os.path.join(raw, f"{split}.{k}") for k in (src_lang, ref_lang, "ids")}
    for p in paths.values():
        require_file(p)
    if src_pronouns is None:
        src_pronouns, gendered_pronouns = source_pronouns(src_lang, paths[src_lang])
    else:
        try:
            gendered_pronouns = source_pronouns(src_lang)[1]
        except ToolError:  # a language without lists: the given pronouns, nothing flagged as gendered
            gendered_pronouns = ()
    src, ref, ids = (read_lines(paths[k]) for k in (src_lang, ref_lang, "ids"))
    for k, lines in ((ref_lang, ref), ("ids", ids)):
        if len(lines) != len(src):  # the first line that has no counterpart
            raise ToolError(f"{len(lines)} lines but {paths[src_lang]} has {len(src)}", paths[k],
                            min(len(lines), len(src)) + 1)
    lexicon = load_gender_lexicon(lexicon_path)
    if name_corpus is None:
        name_corpus = [os.path.join(raw, f"train.{ref_lang}")] if split != "train" else []
        name_corpus = [p for p in name_corpus if os.path.isfile(p)] + [paths[ref_lang]]
    corpus_lines: List[str] = []
    for p in name_corpus:
        corpus_lines += ref if os.path.abspath(p) == os.path.abspath(paths[ref_lang]) else read_lines(p)
    names = derive_names(corpus_lines, lexicon, min_verses=name_min_verses)
    if names_out:
        from fairseq_ext.tools.common import atomic_write

        with atomic_write(names_out) as f:
            cols = ["gender", "verses", "apposition_m", "apposition_f", "near_m", "near_f"]
            f.write("name\t" + "\t".join(cols) + "\n")
            for w, r in names.items():
                f.write(w + "".join(f"\t{r[c]}" for c in cols) + "\n")
    instances, skipped = build_instances(src, ref, ids, lexicon, names, src_pronouns=src_pronouns,
                                         gendered_pronouns=gendered_pronouns,
                                         exclude_gendered_source=exclude_gendered_source,
                                         min_distance=min_distance, max_her=max_her, ids_path=paths["ids"])
    n_all = len(instances)
    instances = sample_per_bucket(instances, max_per_distance, seed, balance_gender)
    n_names = Counter(r["gender"] for r in names.values())
    st = set_stats(instances, skipped, split=split, verses=len(src), candidates=n_all,
                   max_per_distance=max_per_distance, balance_gender=balance_gender, seed=seed,
                   src_lang=src_lang, ref_lang=ref_lang, src_pronouns=list(src_pronouns),
                   gendered_pronouns=list(gendered_pronouns), exclude_gendered_source=exclude_gendered_source,
                   min_distance=min_distance,
                   names={g: n_names.get(g, 0) for g in GENDERS},
                   name_corpus=[str(p) for p in name_corpus], lexicon=str(lexicon_path))
    if out:
        write_jsonl(out, instances)
    return instances, st

r"""Contrastive pronoun evaluation in the style of ContraPro (Müller et al. 2018) on the es-en Bible, for
the document-level models of Maruf (2019) ch. 4 (Table 4.4).

A model is right on an instance when it scores the reference above every variant with the English
pronouns of the other gender; Spanish possessives, datives and reflexives (``su``, ``le``, ``se``, ...)
carry no natural gender, so *his*/*her* must come from the antecedent.

``build`` (from raw ``{split}.{src}``, ``{split}.{ref}``, ``{split}.ids``): a verse is an instance when
its source holds a gender-ambiguous pronoun (:data:`ES_AMBIGUOUS`), its reference holds gendered
pronouns of one gender only, and an antecedent of that gender (a noun of
``fairseq_ext/tools/evaluation/data/gender_en.tsv`` or a name derived from the English text) is found in
the same chapter. Its distance (verses back, buckets ``0``-``3``, ``>3``) is that of Table 4.4. Variants
swap every gendered pronoun (2^k choices for k ambiguous ``her``). Output: one JSON object a line;
``--max-per-distance``, ``--balance-gender`` sample the set.

``score``: every other option goes to fairseq's generation parser (data folder, ``--path``, task as for
``fairseq-generate``); each instance is scored by teacher forcing (log P(target | source, context));
accuracy overall, by distance (Table 4.4 layout) and by gender, and the gender-balanced accuracy.
``--format contrapro|bawden`` scores the published sets (:mod:`fairseq_ext.tools.evaluation.contrastive_sets`)::

    python -m fairseq_ext.tools.evaluation.contrastive build --raw data/bible_es_en/raw --split test \
        --out contrastive.test.jsonl [--max-per-distance 500 --seed 1] [--balance-gender]
    python -m fairseq_ext.tools.evaluation.contrastive score --set contrastive.test.jsonl \
        --spm data/bible_es_en/spm8000/spm.model data/bible_es_en/spm8000/bin --path ckpt.pt --task translation

(installed: ``fairseq-ext-contrastive``). Bad input prints one ``error: FILE:LINE: ...`` line, exit 2.
"""
from __future__ import annotations

import itertools
import os
import random
import re
import sys
from collections import Counter
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from fairseq_ext.tools.common import (
    ArgumentParser, ToolError, log, positive_int, read_jsonl, read_lines, require_file, run_cli, write_json,
    write_jsonl,
)
from fairseq_ext.tools.evaluation.contrastive_scoring import (BUCKETS, distance_bucket, load_for_scoring,
                                                              score_candidates)

__all__ = [
    "ES_AMBIGUOUS", "ES_GENDERED", "EN_PRONOUNS", "BUCKETS", "DEFAULT_LEXICON",
    "load_gender_lexicon", "derive_names", "swap_variants", "distance_bucket", "build_instances",
    "build_set", "format_stats", "contrastive_accuracy", "format_accuracy", "score_set", "main", "cli_main",
]

# --------------------------------------------------------------------------------------------- lexicons
ES_AMBIGUOUS: Tuple[str, ...] = ("su", "sus", "suyo", "suya", "suyos", "suyas", "le", "les", "se", "sí",
                                 "consigo")
ES_GENDERED: Tuple[str, ...] = ("él", "ella")
EN_PRONOUNS: Dict[str, str] = {"he": "m", "him": "m", "his": "m", "himself": "m",
                               "she": "f", "her": "f", "hers": "f", "herself": "f"}
GENDERS: Tuple[str, ...] = ("m", "f")
DEFAULT_LEXICON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "gender_en.tsv")
PLACE_PREPS = frozenset("in at into toward towards within throughout near unto".split())
DETERMINERS = frozenset("his her their the a an my your our thy".split())

# words (letters, hyphenated compounds as one token: "he-goat", "mother-in-law"); apostrophes split
WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")
_SENT_END = set(".!?:;“‘\"«(¿¡")


def tokens(text: str) -> List[Tuple[str, int, int]]:
    """``(word, start, end)`` of every word of ``text`` (see :data:`WORD`)."""
    return [(m.group(0), m.start(), m.end()) for m in WORD.finditer(text)]


def _initial(text: str, start: int) -> bool:
    """Is the word at ``start`` sentence-initial (start of the verse or after . ! ? : ; or an opening
    quote/bracket, spaces skipped)?"""
    j = start - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    return j < 0 or text[j] in _SENT_END


def load_gender_lexicon(path: str = DEFAULT_LEXICON) -> Dict[str, str]:
    """``{word (lowercase): 'm'|'f'}`` from a ``WORD<TAB>m|f`` file (``#`` comments, blank lines)."""
    out: Dict[str, str] = {}
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2 or parts[1].strip() not in GENDERS or not parts[0].strip():
            raise ToolError("expected WORD<TAB>m|f", path, i)
        out[parts[0].strip().lower()] = parts[1].strip()
    if not out:
        raise ToolError("empty gender lexicon", path)
    return out


def derive_names(lines: Iterable[str], lexicon: Mapping[str, str], *, min_verses: int = 3,
                 max_lower: float = 0.1, max_place: float = 0.25, window: int = 8,
                 apposition_weight: int = 3, min_evidence: int = 2,
                 male_ratio: float = 2.0) -> Dict[str, Dict[str, Any]]:
    """Gendered names from English verses (module doc). Returns ``{name: {gender, verses, apposition_m,
    apposition_f, near_m, near_f}}`` for the names given a gender, sorted by name."""
    cap, low, noninit, place, the, nv = Counter(), Counter(), Counter(), Counter(), Counter(), Counter()
    app = {g: Counter() for g in GENDERS}
    near = {g: Counter() for g in GENDERS}
    for text in lines:
        toks = tokens(text)
        lows = [w.lower() for w, _, _ in toks]
        seen = set()
        for k, (w, s, e) in enumerate(toks):
            lw = lows[k]
            if lw in EN_PRONOUNS or lw in lexicon:
                continue
            if not w[0].isupper():
                low[lw] += 1
                continue
            cap[w] += 1
            seen.add(w)
            if not _initial(text, s):
                noninit[w] += 1
                if k > 0 and lows[k - 1] in PLACE_PREPS:
                    place[w] += 1
                if k > 0 and lows[k - 1] == "the":
                    the[w] += 1
            # apposition: "NAME[,] his wife", "NAME the son of" / "his wife[,] NAME", "king NAME"
            if k + 2 < len(toks) and lows[k + 1] in DETERMINERS and lows[k + 2] in lexicon \
                    and text[e:toks[k + 1][1]].strip() in ("", ","):
                app[lexicon[lows[k + 2]]][w] += 1
            if k > 0 and lows[k - 1] in lexicon and text[toks[k - 1][2]:s].strip() in ("", ","):
                app[lexicon[lows[k - 1]]][w] += 1
            # the first gendered pronoun after the name (not one that opens an apposition: "his wife")
            for j in range(k + 1, min(len(toks), k + 1 + window)):
                if lows[j] in EN_PRONOUNS:
                    if j + 1 < len(toks) and lows[j + 1] in lexicon:
                        continue
                    near[EN_PRONOUNS[lows[j]]][w] += 1
                    break
        for w in seen:
            nv[w] += 1
    names: Dict[str, Dict[str, Any]] = {}
    for w in sorted(cap):
        if len(w) < 2 or noninit[w] == 0 or nv[w] < min_verses:  # "I", "O"
            continue
        if low[w.lower()] > max_lower * (cap[w] + low[w.lower()]):
            continue
        if place[w] > max_place * noninit[w]:
            continue
        if the[w] > 0.5 * noninit[w]:  # "the Pharisees", "the Sabbath", "the Almighty": not a name
            continue
        ev = {g: apposition_weight * app[g][w] + near[g][w] for g in GENDERS}
        if ev["f"] >= min_evidence and ev["f"] > ev["m"]:
            g = "f"
        elif ev["m"] >= min_evidence and ev["m"] > male_ratio * ev["f"]:
            g = "m"
        else:
            continue
        names[w] = {"gender": g, "verses": nv[w], "apposition_m": app["m"][w], "apposition_f": app["f"][w],
                    "near_m": near["m"][w], "near_f": near["f"][w]}
    return names


# --------------------------------------------------------------------------------------------- variants
def _case_like(word: str, model: str) -> str:
    if len(model) > 1 and model.isupper():
        return word.upper()
    if model[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _stands_alone(text: str, end: int) -> bool:
    """Is the word ending at ``end`` followed (spaces skipped) by punctuation or the end of the text?"""
    rest = text[end:].lstrip()
    return not rest or not (rest[0].isalnum())


_M2F = {"he": "she", "him": "her", "himself": "herself"}
_F2M = {"she": "he", "hers": "his", "herself": "himself"}


def swap_variants(text: str, max_her: int = 3) -> List[str]:
    """The reference with every gendered 3rd-person singular pronoun swapped to the other gender (module
    doc): ``her`` gives both ``his`` and ``him`` (all 2^k combinations for k <= ``max_her`` ``her`` tokens,
    else the two uniform ones). Returns the distinct variants in a fixed order (none without a pronoun)."""
    toks = [(w, s, e) for w, s, e in tokens(text) if w.lower() in EN_PRONOUNS]
    if not toks:
        return []
    fixed: List[Optional[str]] = []
    hers = []
    for i, (w, s, e) in enumerate(toks):
        lw = w.lower()
        if lw in _M2F:
            fixed.append(_M2F[lw])
        elif lw == "his":
            fixed.append("hers" if _stands_alone(text, e) else "her")
        elif lw in _F2M:
            fixed.append(_F2M[lw])
        else:  # her
            fixed.append(None)
            hers.append(i)
    if len(hers) <= max_her:
        choices = list(itertools.product(("his", "him"), repeat=len(hers)))
    else:
        choices = [("his",) * len(hers), ("him",) * len(hers)]
    out: List[str] = []
    for choice in choices:
        repl = list(fixed)
        for i, c in zip(hers, choice):
            repl[i] = c
        pieces, pos = [], 0
        for (w, s, e), r in zip(toks, repl):
            pieces += [text[pos:s], _case_like(r, w)]
            pos = e
        pieces.append(text[pos:])
        v = "".join(pieces)
        if v != text and v not in out:
            out.append(v)
    return out


# --------------------------------------------------------------------------------------------- build
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
                    names: Mapping[str, Mapping[str, Any]], *, es_pronouns: Sequence[str] = ES_AMBIGUOUS,
                    exclude_gendered_source: bool = False, max_her: int = 3,
                    ids_path: str = "ids") -> Tuple[List[Dict[str, Any]], Dict[str, int]]:
    """All instances of a split (in split order) and the counts of skipped verses by reason."""
    if not (len(src) == len(ref) == len(ids)):
        raise ToolError(f"source, reference and ids differ in length ({len(src)}, {len(ref)}, {len(ids)})")
    amb = {w.lower() for w in es_pronouns}
    skipped = Counter()
    out = []
    for ch, lines in _chapters(ids, ids_path):
        for pos, i in enumerate(lines):
            es_words = [w.lower() for w, _, _ in tokens(src[i])]
            found = [w for w in es_words if w in amb]
            if not found:
                skipped["no_ambiguous_source_pronoun"] += 1
                continue
            gendered_src = any(w in ES_GENDERED for w in es_words)
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
                 f"{st['source_gendered']} with él/ella in the source")
    if st.get("skipped"):
        lines.append("skipped verses: " + ", ".join(f"{k} {v}" for k, v in st["skipped"].items()))
    if "names" in st:
        lines.append(f"derived names: {st['names']['m']} masculine, {st['names']['f']} feminine")
    return "\n".join(lines)


def build_set(raw: str, split: str = "test", out: Optional[str] = None, *, src_lang: str = "es",
              ref_lang: str = "en", lexicon_path: str = DEFAULT_LEXICON,
              name_corpus: Optional[Sequence[str]] = None, names_out: Optional[str] = None,
              es_pronouns: Sequence[str] = ES_AMBIGUOUS, exclude_gendered_source: bool = False,
              max_per_distance: Optional[int] = None, seed: int = 1, max_her: int = 3,
              name_min_verses: int = 3, balance_gender: bool = False) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Build the set from a raw folder; write it to ``out`` (JSON lines) when given; (instances, stats)."""
    if not os.path.isdir(raw):
        raise ToolError(f"missing input folder: {raw}")
    paths = {k: os.path.join(raw, f"{split}.{k}") for k in (src_lang, ref_lang, "ids")}
    for p in paths.values():
        require_file(p)
    src, ref, ids = (read_lines(paths[k]) for k in (src_lang, ref_lang, "ids"))
    for k, lines in ((ref_lang, ref), ("ids", ids)):
        if len(lines) != len(src):
            raise ToolError(f"{len(lines)} lines but {paths[src_lang]} has {len(src)}", paths[k])
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
    instances, skipped = build_instances(src, ref, ids, lexicon, names, es_pronouns=es_pronouns,
                                         exclude_gendered_source=exclude_gendered_source, max_her=max_her,
                                         ids_path=paths["ids"])
    n_all = len(instances)
    instances = sample_per_bucket(instances, max_per_distance, seed, balance_gender)
    n_names = Counter(r["gender"] for r in names.values())
    st = set_stats(instances, skipped, split=split, verses=len(src), candidates=n_all,
                   max_per_distance=max_per_distance, balance_gender=balance_gender, seed=seed,
                   es_pronouns=list(es_pronouns),
                   exclude_gendered_source=exclude_gendered_source,
                   names={g: n_names.get(g, 0) for g in GENDERS},
                   name_corpus=[str(p) for p in name_corpus], lexicon=str(lexicon_path))
    if out:
        write_jsonl(out, instances)
    return instances, st


def contrastive_accuracy(instances: Sequence[Mapping[str, Any]],
                         scores: Sequence[Sequence[float]]) -> Dict[str, Any]:
    """Accuracy (reference strictly above every variant) overall, by distance bucket and by gender."""
    if len(instances) != len(scores):
        raise ToolError(f"{len(scores)} score lists for {len(instances)} instances")

    def acc(c, n):
        return {"correct": c, "total": n, "accuracy": (c / n) if n else None}

    tot = [0, 0]
    by_b = {b: [0, 0] for b in BUCKETS}
    by_g = {g: [0, 0] for g in GENDERS}
    by_bg = {b: {g: [0, 0] for g in GENDERS} for b in BUCKETS}
    for x, s in zip(instances, scores):
        if len(s) != 1 + len(x["variants"]):
            raise ToolError(f"instance {x.get('id')}: {len(s)} scores for 1 + {len(x['variants'])} candidates")
        ok = int(len(s) > 1 and all(s[0] > v for v in s[1:]))
        b = x.get("bucket") or distance_bucket(int(x["distance"]))
        g = x["gender"]
        for cell in (tot, by_b[b], by_g[g], by_bg[b][g]):
            cell[0] += ok
            cell[1] += 1
    def balanced(cells):
        return sum(c / n for c, n in cells) / len(cells) if all(n for _, n in cells) else None

    return {
        "overall": acc(*tot),
        "by_distance": {b: acc(*by_b[b]) for b in BUCKETS},
        "by_gender": {g: acc(*by_g[g]) for g in GENDERS},
        "by_distance_gender": {b: {g: acc(*by_bg[b][g]) for g in GENDERS} for b in BUCKETS},
        # the mean of the masculine and feminine accuracies (None unless both genders have instances):
        # a model that always prefers one gender gets 0.5 however unbalanced the set is
        "balanced": {"overall": balanced([by_g[g] for g in GENDERS]),
                     "by_distance": {b: balanced([by_bg[b][g] for g in GENDERS]) for b in BUCKETS}},
    }


def _fmt_acc(cell: Mapping[str, Any]) -> str:
    return "–" if cell["accuracy"] is None else f"{cell['accuracy']:.3f}"


def format_accuracy(res: Mapping[str, Any], name: str = "model") -> str:
    """Table 4.4 layout (accuracy by antecedent distance), counts, and accuracy by gender."""
    lines = ["| Model | " + " | ".join(BUCKETS) + " | all |", "|---|" + "---|" * (len(BUCKETS) + 1)]
    lines.append(f"| {name} | " + " | ".join(_fmt_acc(res["by_distance"][b]) for b in BUCKETS)
                 + f" | {_fmt_acc(res['overall'])} |")
    if "balanced" in res:
        bal = res["balanced"]
        lines.append(f"| {name} (mean of m/f) | " + " | ".join(
            _fmt_acc({"accuracy": bal["by_distance"][b]}) for b in BUCKETS)
            + f" | {_fmt_acc({'accuracy': bal['overall']})} |")
    lines.append("| *instances* | " + " | ".join(str(res["by_distance"][b]["total"]) for b in BUCKETS)
                 + f" | {res['overall']['total']} |")
    lines.append("")
    lines.append("| gender | " + " | ".join(BUCKETS) + " | all |")
    lines.append("|---|" + "---|" * (len(BUCKETS) + 1))
    for g, label in (("m", "masculine"), ("f", "feminine")):
        lines.append(f"| {label} | " + " | ".join(_fmt_acc(res["by_distance_gender"][b][g]) for b in BUCKETS)
                     + f" | {_fmt_acc(res['by_gender'][g])} |")
    return "\n".join(lines)


def score_set(set_path: str, fairseq_argv: Sequence[str], *, spm: Optional[str] = None,
              segmented: bool = False, per_batch: int = 1, name: Optional[str] = None,
              details: Optional[str] = None) -> Dict[str, Any]:
    """Load model and data (fairseq-generate options), score the set, return accuracies (+ metadata)."""
    if (spm is None) == (not segmented):
        raise ToolError("give either --spm MODEL (raw English in the set) or --segmented")
    if spm is not None:
        require_file(spm, "sentencepiece model")
    instances = read_jsonl(set_path)
    for i, x in enumerate(instances, 1):
        if not isinstance(x, dict) or not {"line", "reference", "variants", "gender"} <= set(x) \
                or ("distance" not in x and "bucket" not in x):
            raise ToolError("an instance needs line, reference, variants, gender and distance", set_path, i)
        if not x["variants"]:
            raise ToolError("an instance without variants", set_path, i)
    if not instances:
        raise ToolError("empty contrastive set", set_path)
    cfg, task, models, dataset, use_cuda = load_for_scoring(fairseq_argv)
    cands = [[x["reference"]] + list(x["variants"]) for x in instances]
    log(f"[contrastive] scoring {len(instances)} instances ({sum(map(len, cands))} candidates) on "
        f"{cfg.dataset.gen_subset} with {cfg.common_eval.path}")
    scores, mismatched = score_candidates([int(x["line"]) for x in instances], cands, dataset, models,
                                          task.target_dictionary, spm=spm, per_batch=per_batch, use_cuda=use_cuda)
    if mismatched == len(instances):
        raise ToolError(f"no reference of the set matches the target of its line in split "
                        f"{cfg.dataset.gen_subset!r} (wrong --gen-subset, --spm or reference language?)",
                        set_path)
    if mismatched:
        log(f"[contrastive] warning: {mismatched} of {len(instances)} references differ from the split's "
            f"targets after encoding")
    res = contrastive_accuracy(instances, scores)
    res.update(model=name or str(cfg.common_eval.path), set=str(set_path), split=cfg.dataset.gen_subset,
               task=cfg.task._name, reference_mismatches=mismatched,
               criterion="reference log-probability > every variant's (sum over target tokens)")
    if details:
        write_jsonl(details, ({"line": x["line"], "id": x.get("id"), "bucket": x.get("bucket"),
                               "gender": x["gender"], "reference_score": s[0], "variant_scores": s[1:],
                               "correct": all(s[0] > v for v in s[1:])}
                              for x, s in zip(instances, scores)))
    return res


# --------------------------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="fairseq-ext-contrastive",
                        description="ContraPro-style contrastive pronoun set (es-en Bible): build and score.",
                        allow_abbrev=False)
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the contrastive set from a raw folder", allow_abbrev=False)
    b.add_argument("--raw", required=True, help="raw folder with {split}.{src,ref,ids}")
    b.add_argument("--split", default="test")
    b.add_argument("--out", required=True, help="output JSON lines file")
    b.add_argument("--src", default="es", help="source language suffix (default es)")
    b.add_argument("--ref", default="en", help="reference language suffix (default en)")
    b.add_argument("--lexicon", default=DEFAULT_LEXICON, help="gendered common nouns (WORD<TAB>m|f)")
    b.add_argument("--name-corpus", action="append", metavar="FILE",
                   help="English text to derive the names from (repeat; default train.REF + SPLIT.REF)")
    b.add_argument("--name-min-verses", type=positive_int, default=3)
    b.add_argument("--names-out", metavar="TSV", help="write the derived name lexicon here")
    b.add_argument("--es-pronouns", default=",".join(ES_AMBIGUOUS),
                   help="comma-separated ambiguous Spanish pronouns (default %(default)s)")
    b.add_argument("--exclude-gendered-source", action="store_true",
                   help="skip verses whose source also has él/ella")
    b.add_argument("--max-per-distance", type=positive_int, default=None,
                   help="keep a seeded random sample of at most N instances per distance bucket")
    b.add_argument("--balance-gender", action="store_true",
                   help="keep as many masculine as feminine instances in every distance bucket (seeded)")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--max-her", type=int, default=3,
                   help="all his/him combinations up to this many 'her' tokens (default 3)")
    b.add_argument("--stats-json", metavar="FILE", help="also write the counts as JSON")
    s = sub.add_parser("score", allow_abbrev=False,
                       help="accuracy of a model on the set; other options go to fairseq's generation parser",
                       description="Accuracy of a model on a contrastive set. Every option not listed here "
                                   "goes to fairseq's generation parser, as for fairseq-generate: DATA --path "
                                   "CHECKPOINT [--task TASK and its options] [--gen-subset SPLIT] [--cpu] ...")
    s.add_argument("--set", dest="set_path", help="the set: JSON lines of `build`, contrapro.json, anaphora.json ...")
    from fairseq_ext.tools.evaluation.contrastive_sets import add_set_arguments

    add_set_arguments(s)
    s.add_argument("--spm", help="sentencepiece model of the data (segments reference and variants)")
    s.add_argument("--segmented", action="store_true", help="the set's texts are already segmented")
    s.add_argument("--instances-per-batch", type=positive_int, default=1,
                   help="instances collated into one batch (default 1: each instance with its variants "
                        "alone, so a document model's batch never mixes instances)")
    s.add_argument("--name", help="model name in the table (default: the checkpoint path)")
    s.add_argument("--json", metavar="FILE", help="also write the accuracies as JSON")
    s.add_argument("--details", metavar="FILE", help="per-instance scores (JSON lines)")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    if argv and argv[0] == "score":
        args, rest = ap.parse_known_args(argv)
    else:
        args, rest = ap.parse_args(argv), []
    if args.command == "build":
        pron = [w.strip() for w in args.es_pronouns.split(",") if w.strip()]
        if not pron:
            raise ToolError("--es-pronouns is empty")
        _, st = build_set(args.raw, args.split, args.out, src_lang=args.src, ref_lang=args.ref,
                          lexicon_path=args.lexicon, name_corpus=args.name_corpus, names_out=args.names_out,
                          es_pronouns=pron, exclude_gendered_source=args.exclude_gendered_source,
                          max_per_distance=args.max_per_distance, seed=args.seed, max_her=args.max_her,
                          name_min_verses=args.name_min_verses, balance_gender=args.balance_gender)
        print(format_stats(st))
        log(f"[contrastive] {st['instances']} instances -> {args.out}")
        if args.stats_json:
            write_json(args.stats_json, st, indent=2)
        return 0
    if not rest:
        raise ToolError("score needs fairseq's arguments: DATA --path CHECKPOINT [--task ...]")
    if args.set_format != "jsonl":  # a published set (ContraPro, Bawden et al.) with its own context
        from fairseq_ext.tools.evaluation.contrastive_sets import score_from_args

        res = score_from_args(args, rest)
    else:
        if args.set_path is None:
            raise ToolError("give the set (--set)")
        res = score_set(args.set_path, rest, spm=args.spm, segmented=args.segmented,
                        per_batch=args.instances_per_batch, name=args.name, details=args.details)
        print(format_accuracy(res, res["model"]))
    if args.json:
        write_json(args.json, res, indent=2)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-contrastive`` / ``python -m fairseq_ext.tools.evaluation.contrastive``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

r"""Document-level lexical consistency of a translation (Maruf 2019, ch. 3 "lexical consistency",
automated): the share of source names/terms repeated in a chapter that are translated the same way
every time.

A term is a source word type in at least two verses of one chapter: a **name** (capitalised away from
sentence starts) or a **content term** (lowercased, not a stopword of
``fairseq_ext/tools/evaluation/data/stopwords_es.tsv``, at least 3 letters). A (chapter, term) group is
**consistent** when one target word is aligned to every occurrence; the share is also given among fully
aligned groups (``share_aligned``), and for the reference as the human level. Alignment: **eflomal**
(:func:`fairseq_ext.tools.corpora.arthur_lexicon.align`), trained on the training bitext plus the split's
pairs (``--seed``).

Usage::

    python -m fairseq_ext.tools.evaluation.doc_consistency --src data/bible_es_en/raw/test.es \
        --hyp gen.out [--remove-bpe sentencepiece] --ref data/bible_es_en/raw/test.en \
        --ids data/bible_es_en/raw/test.ids --train-src data/bible_es_en/raw/train.es \
        --train-tgt data/bible_es_en/raw/train.en [--json out.json] [--details groups.jsonl]

(installed: ``fairseq-ext-doc-consistency``). Bad input prints one ``error: FILE:LINE: ...`` line, exit 2.
"""
from __future__ import annotations

import os
import re
from collections import Counter, OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_ext.tools.common import (
    ArgumentParser, ToolError, log, read_lines, run_cli, write_json, write_jsonl,
)
from fairseq_ext.tools.hypotheses import REMOVE_BPE_CHOICES, align_to_references, load_hypotheses

__all__ = ["DEFAULT_STOPWORDS", "KINDS", "tokenize", "load_stopwords", "name_types", "find_terms",
           "occurrence_translations", "consistency", "measure", "format_report", "main", "cli_main"]

DEFAULT_STOPWORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "stopwords_es.tsv")
KINDS = ("names", "content", "all")
TOKEN = re.compile(r"['’]s\b|[^\W\d_]+|\d+|[^\w\s]")
_SENT_END = set(".!?:;“‘\"«(¿¡")

Aligner = Callable[[List[str], List[str]], List[str]]


def tokenize(text: str) -> List[str]:
    """Words, numbers and punctuation marks (each its own token; an English possessive ``’s`` is one
    non-word token)."""
    return TOKEN.findall(text)


def _is_word(tok: str) -> bool:
    return tok[:1].isalpha()


def _initial(toks: Sequence[str], k: int) -> bool:
    return k == 0 or toks[k - 1] in _SENT_END


def load_stopwords(path: str = DEFAULT_STOPWORDS) -> frozenset:
    words = [w.strip().lower() for w in read_lines(path) if w.strip() and not w.lstrip().startswith("#")]
    if not words:
        raise ToolError("empty stopword list", path)
    return frozenset(words)


def chapter_of(verse_id: str) -> str:
    return verse_id.rsplit(".", 1)[0] if "." in verse_id else verse_id


def name_types(token_lines: Sequence[Sequence[str]], max_lower: float = 0.1) -> frozenset:
    """Capitalised word types seen capitalised in a non-initial position whose lowercase form makes at
    most ``max_lower`` of their occurrences."""
    cap, low, noninit = Counter(), Counter(), Counter()
    for toks in token_lines:
        for k, t in enumerate(toks):
            if not _is_word(t):
                continue
            if t[0].isupper():
                cap[t] += 1
                if not _initial(toks, k):
                    noninit[t] += 1
            else:
                low[t] += 1
    return frozenset(w for w in noninit if low[w.lower()] <= max_lower * (cap[w] + low[w.lower()]))


def find_terms(src_tokens: Sequence[Sequence[str]], ids: Sequence[str], names: frozenset,
               stopwords: frozenset, min_letters: int = 3) -> List[Dict[str, Any]]:
    """The (chapter, term) groups: ``{doc, kind, term, occurrences: [(line, token index), ...]}``, for
    terms in >= 2 verses of the chapter; in order of first occurrence."""
    groups: "OrderedDict[Tuple[str, str, str], List[Tuple[int, int]]]" = OrderedDict()
    for i, toks in enumerate(src_tokens):
        doc = chapter_of(ids[i])
        for k, t in enumerate(toks):
            if not _is_word(t):
                continue
            if t[0].isupper() and t in names:
                key = (doc, "names", t)
            else:
                lw = t.lower()
                if lw in stopwords or len(lw) < min_letters:
                    continue
                key = (doc, "content", lw)
            groups.setdefault(key, []).append((i, k))
    out = []
    for (doc, kind, term), occ in groups.items():
        if len({i for i, _ in occ}) >= 2:
            out.append({"doc": doc, "kind": kind, "term": term, "occurrences": occ})
    return out


def parse_pharaoh(line: str, n_src: int, n_tgt: int, name: str = "links", lineno: Optional[int] = None
                  ) -> List[Tuple[int, int]]:
    out = []
    for pair in line.split():
        a, sep, b = pair.partition("-")
        if not sep or not a.isdigit() or not b.isdigit():
            raise ToolError(f"not a Pharaoh link: {pair!r}", name, lineno)
        i, j = int(a), int(b)
        if i >= n_src or j >= n_tgt:
            raise ToolError(f"link {pair} outside the {n_src}x{n_tgt} sentence pair", name, lineno)
        out.append((i, j))
    return out


def occurrence_translations(src_tokens: Sequence[Sequence[str]], tgt_tokens: Sequence[Sequence[str]],
                            links: Sequence[str], name: str = "links") -> List[Dict[int, str]]:
    """Per line, ``{source token index: translation}`` (aligned target words, lowercased, in target order,
    joined by a space; punctuation dropped). Unaligned source tokens are absent."""
    out = []
    for n, (s, t, line) in enumerate(zip(src_tokens, tgt_tokens, links), 1):
        by_src: Dict[int, List[int]] = {}
        for i, j in parse_pharaoh(line, len(s), len(t), name, n):
            if _is_word(t[j]):
                by_src.setdefault(i, []).append(j)
        out.append({i: " ".join(t[j].lower() for j in sorted(set(js))) for i, js in by_src.items()})
    return out


def consistency(groups: Sequence[Mapping[str, Any]], translations: Sequence[Mapping[int, str]]
                ) -> Tuple[Dict[str, Dict[str, Any]], List[Dict[str, Any]]]:
    """Summary by kind and per-group details. A group is consistent when one target word is aligned to
    every occurrence (the intersection of the occurrences' aligned word sets is not empty; an unaligned
    occurrence makes the group inconsistent); ``word`` is that word (the first in sorted order if
    several)."""
    summary = {k: {"groups": 0, "consistent": 0, "occurrences": 0, "unaligned": 0, "aligned_groups": 0}
               for k in KINDS}
    details = []
    for g in groups:
        tr = [translations[i].get(k, "") for i, k in g["occurrences"]]
        common = set(tr[0].split())
        for x in tr[1:]:
            common &= set(x.split())
        ok = bool(common)
        for kind in (g["kind"], "all"):
            s = summary[kind]
            s["groups"] += 1
            s["consistent"] += ok
            s["occurrences"] += len(tr)
            s["unaligned"] += sum(1 for x in tr if not x)
            s["aligned_groups"] += all(tr)
        details.append({"doc": g["doc"], "kind": g["kind"], "term": g["term"], "consistent": ok,
                        "word": min(common) if common else None, "translations": tr,
                        "lines": [i for i, _ in g["occurrences"]]})
    for s in summary.values():
        s["share"] = s["consistent"] / s["groups"] if s["groups"] else None
        s["share_aligned"] = s["consistent"] / s["aligned_groups"] if s["aligned_groups"] else None
    return summary, details


def eflomal_aligner(train_src: Sequence[str], train_tgt: Sequence[str], seed: int = 1,
                    model: int = 3) -> Callable[[List[str], List[str]], List[str]]:
    """An aligner for tokenised, lowercased lines: eflomal trained on the training pairs plus the pairs
    to align, in one run (:func:`fairseq_ext.tools.corpora.arthur_lexicon.align`); returns the links of the
    pairs to align."""
    def align(src: List[str], tgt: List[str]) -> List[str]:
        from fairseq_ext.tools.corpora.arthur_lexicon import align as run_eflomal

        links = run_eflomal(list(train_src) + list(src), list(train_tgt) + list(tgt), None, model, seed)
        return links[len(train_src):]
    return align


def _aligner_input(token_lines: Sequence[Sequence[str]]) -> List[str]:
    return [" ".join(t.lower() for t in toks) for toks in token_lines]


def measure(src: Sequence[str], targets: Mapping[str, Sequence[str]], ids: Sequence[str],
            aligner: Aligner, *, name_corpus: Sequence[str] = (), stopwords: Optional[frozenset] = None
            ) -> Dict[str, Any]:
    """Consistency of each target text (e.g. ``{"hypothesis": hyps, "reference": refs}``) for the same
    source. ``aligner(src_lines, tgt_lines)`` gets tokenised lowercased lines (all targets' pairs in one
    call) and returns forward Pharaoh links, one line per pair."""
    n = len(src)
    if len(ids) != n:
        raise ToolError(f"{len(ids)} ids for {n} source lines")
    for k, t in targets.items():
        if len(t) != n:
            raise ToolError(f"{k}: {len(t)} lines for {n} source lines")
    stopwords = load_stopwords() if stopwords is None else stopwords
    src_tok = [tokenize(x) for x in src]
    names = name_types(src_tok + [tokenize(x) for x in name_corpus])
    groups = find_terms(src_tok, ids, names, stopwords)
    tgt_tok = {k: [tokenize(x) for x in t] for k, t in targets.items()}
    a_src, a_tgt = [], []
    for k in targets:
        a_src += _aligner_input(src_tok)
        a_tgt += _aligner_input(tgt_tok[k])
    links = aligner(a_src, a_tgt)
    if len(links) != len(a_src):
        raise ToolError(f"the aligner returned {len(links)} lines for {len(a_src)} pairs")
    res: Dict[str, Any] = {"texts": {}, "name_types": len(names), "groups": len(groups)}
    details = {}
    for m, k in enumerate(targets):
        tr = occurrence_translations(src_tok, tgt_tok[k], links[m * n:(m + 1) * n], name=f"{k} links")
        res["texts"][k], details[k] = consistency(groups, tr)
    res["details"] = details
    return res


def format_report(res: Mapping[str, Any]) -> str:
    def pct(x):
        return "–" if x is None else f"{100 * x:.1f}%"

    lines = ["| text | terms | groups | occurrences | unaligned | consistent | share | fully aligned groups "
             "| share of those |", "|---|---|---|---|---|---|---|---|---|"]
    for text, summ in res["texts"].items():
        for kind in KINDS:
            s = summ[kind]
            lines.append(f"| {text} | {kind} | {s['groups']} | {s['occurrences']} | {s['unaligned']} | "
                         f"{s['consistent']} | {pct(s['share'])} | {s['aligned_groups']} | "
                         f"{pct(s['share_aligned'])} |")
    lines.append("")
    lines.append("group = a source term repeated in >= 2 verses of a chapter; consistent = one (lowercased) "
                 "target word aligned (eflomal) to every occurrence; the last column leaves out the groups "
                 "with an unaligned occurrence (a dropped or untranslatable word), i.e. consistency apart "
                 "from adequacy")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="fairseq-ext-doc-consistency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", help="raw folder: default --src/--ref/--ids/--train-* from {split}.{lang}")
    ap.add_argument("--split", default="test")
    ap.add_argument("--src-lang", default="es")
    ap.add_argument("--tgt-lang", default="en")
    ap.add_argument("--src", help="source text of the split, one verse a line")
    ap.add_argument("--hyp", required=True, help="fairseq-generate output or hypotheses, one a line")
    ap.add_argument("--ref", help="reference of the split (measured too, for comparison)")
    ap.add_argument("--no-ref", action="store_true", help="do not measure the reference")
    ap.add_argument("--ids", help="verse ids of the split (Book.chapter.verse)")
    ap.add_argument("--train-src", help="training source text for the aligner")
    ap.add_argument("--train-tgt", help="training target text for the aligner")
    ap.add_argument("--field", choices=("D", "H"), default="D", help="fairseq-generate line (default D)")
    ap.add_argument("--remove-bpe", choices=REMOVE_BPE_CHOICES, default=None)
    ap.add_argument("--stopwords", default=DEFAULT_STOPWORDS, help="Spanish stopword list (one a line)")
    ap.add_argument("--eflomal-model", type=int, choices=(1, 2, 3), default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="FILE", help="write the numbers as JSON")
    ap.add_argument("--details", metavar="FILE", help="one JSON line per (text, chapter, term) group")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)

    def default(value, split, lang):
        if value or not a.raw:
            return value
        return os.path.join(a.raw, f"{split}.{lang}")

    src_p = default(a.src, a.split, a.src_lang)
    ref_p = None if a.no_ref else default(a.ref, a.split, a.tgt_lang)
    ids_p = default(a.ids, a.split, "ids")
    tr_src, tr_tgt = default(a.train_src, "train", a.src_lang), default(a.train_tgt, "train", a.tgt_lang)
    if not src_p or not ids_p:
        raise ToolError("give --src and --ids (or --raw)")
    if bool(tr_src) != bool(tr_tgt):
        raise ToolError("give both --train-src and --train-tgt (or neither)")
    src, ids = read_lines(src_p), read_lines(ids_p)
    if len(ids) != len(src):
        raise ToolError(f"{len(ids)} lines but {src_p} has {len(src)}", ids_p)
    hyps = align_to_references(load_hypotheses(a.hyp, None, field=a.field, remove_bpe_kind=a.remove_bpe),
                               len(src), source=a.hyp)
    targets: Dict[str, List[str]] = {"hypothesis": hyps}
    if ref_p:
        ref = read_lines(ref_p)
        if len(ref) != len(src):
            raise ToolError(f"{len(ref)} lines but {src_p} has {len(src)}", ref_p)
        targets["reference"] = ref
    train_s: List[str] = []
    train_t: List[str] = []
    if tr_src:
        train_s, train_t = read_lines(tr_src), read_lines(tr_tgt)
        if len(train_s) != len(train_t):
            raise ToolError(f"{len(train_t)} lines but {tr_src} has {len(train_s)}", tr_tgt)
    aligner = eflomal_aligner(_aligner_input([tokenize(x) for x in train_s]),
                              _aligner_input([tokenize(x) for x in train_t]), a.seed, a.eflomal_model)
    log(f"[doc_consistency] aligning {len(src)} x {len(targets)} pairs with eflomal "
        f"(+ {len(train_s)} training pairs)")
    res = measure(src, targets, ids, aligner, name_corpus=train_s, stopwords=load_stopwords(a.stopwords))
    details = res.pop("details")
    res.update(src=src_p, hyp=a.hyp, ref=ref_p, ids=ids_p, train_src=tr_src, train_tgt=tr_tgt,
               aligner=f"eflomal-{a.eflomal_model}", seed=a.seed)
    print(format_report(res))
    if a.json:
        write_json(a.json, res, indent=2)
    if a.details:
        write_jsonl(a.details, ({"text": k, **d} for k, ds in details.items() for d in ds))
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-doc-consistency`` / ``python -m fairseq_ext.tools.evaluation.doc_consistency``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

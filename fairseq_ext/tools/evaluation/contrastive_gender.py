r"""The English side of the contrastive pronoun set (Maruf 2019 ch. 4, Table 4.4; in the style of ContraPro,
Müller et al. 2018): gendered pronouns, the gender of nouns and names, and the contrastive variants.

* :data:`ES_AMBIGUOUS`: Spanish possessives, datives and reflexives (``su``, ``le``, ``se``, ...) that carry
  no natural gender, so *his*/*her* must come from the antecedent; :data:`EN_PRONOUNS` the English ones.
  :data:`SOURCE_PRONOUNS` gives the same two lists (ambiguous, gendered) for the other source languages of the
  multilingual Bibles (:func:`source_pronouns`); a language that marks the gender of every 3rd-person pronoun
  (Arabic) has none.
* :func:`load_gender_lexicon` reads the gendered common nouns (``data/gender_en.tsv``, ``WORD<TAB>m|f``);
  :func:`derive_names` finds gendered names in English verses (capitalised mid-sentence, rarely lowercase
  or after a place preposition, with evidence from appositions such as "NAME his wife" and from the first
  gendered pronoun after the name).
* :func:`swap_variants` swaps every gendered pronoun of a reference to the other gender (``her`` gives both
  ``his`` and ``him``: 2^k choices for k of them).

:mod:`fairseq_ext.tools.evaluation.contrastive_build` builds the set with them.
"""
from __future__ import annotations

import itertools
import os
import re
import unicodedata
from collections import Counter
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from fairseq_ext.tools.common import ToolError, read_lines

__all__ = ["ES_AMBIGUOUS", "ES_GENDERED", "SOURCE_PRONOUNS", "EN_PRONOUNS", "GENDERS", "DEFAULT_LEXICON",
           "tokens", "source_pronouns", "load_gender_lexicon", "derive_names", "swap_variants"]

ES_AMBIGUOUS: Tuple[str, ...] = ("su", "sus", "suyo", "suya", "suyos", "suyas", "le", "les", "se", "sí",
                                 "consigo")
ES_GENDERED: Tuple[str, ...] = ("él", "ella")
# (ambiguous, gendered) 3rd-person singular forms by source language: the ambiguous ones leave his/her to the
# context (possessives agreeing with the possessed noun, reflexives, datives, genderless pronouns); a verse
# holding a gendered one is flagged (``source_gendered``). Verb agreement is not looked at: Russian past
# tenses and Hindi verbs mark the subject's gender, Spanish, Italian and French participles sometimes do.
SOURCE_PRONOUNS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "es": (ES_AMBIGUOUS, ES_GENDERED),
    "fr": (("son", "sa", "ses", "lui", "se", "s", "soi"), ("il", "elle", "lui-même", "elle-même")),
    "it": (("suo", "sua", "suoi", "sue", "si", "sé", "se", "seco"),
           ("egli", "ella", "esso", "essa", "lui", "lei", "ei", "costui", "costei", "colui", "colei")),
    "ru": (("свой", "своя", "своё", "свое", "свои", "своего", "своей", "своему", "своим", "своих", "своими",
            "свою", "своею", "своем", "своём", "себя", "себе", "собой", "собою"),
           ("он", "она", "его", "её", "ее", "ему", "ей", "него", "неё", "нее", "нему", "ней", "нею", "ею",
            "ним", "нём", "нем")),
    "fa": (("او", "وی", "خود", "خویش", "خویشتن", "اش"), ()),
    "tl": (("siya", "siyang", "niya", "niyang", "kaniya", "kaniyang", "kanya", "kanyang", "sarili", "sariling"),
           ()),
    "vi": (("người", "mình", "nó", "ngài", "va"), ("nàng", "bà", "ông", "chàng", "hắn")),
    "hi": (("वह", "उस", "उसका", "उसकी", "उसके", "उसे", "उसको", "उसने", "उससे", "उसमें", "उसपर", "उसी", "अपना",
            "अपनी", "अपने", "स्वयं"), ()),
}
EN_PRONOUNS: Dict[str, str] = {"he": "m", "him": "m", "his": "m", "himself": "m",
                               "she": "f", "her": "f", "hers": "f", "herself": "f"}
GENDERS: Tuple[str, ...] = ("m", "f")
DEFAULT_LEXICON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "gender_en.tsv")
PLACE_PREPS = frozenset("in at into toward towards within throughout near unto".split())
DETERMINERS = frozenset("his her their the a an my your our thy".split())

# words (letters and their combining marks, so Devanagari vowel signs stay inside the word; hyphenated
# compounds as one token: "he-goat", "mother-in-law"); apostrophes split
_MARKS = "".join(chr(c) for c in range(0x300, 0x10000) if unicodedata.category(chr(c)).startswith("M"))
_LETTER = r"(?:[^\W\d_]|[" + re.escape(_MARKS) + "])"
WORD = re.compile(_LETTER + "+(?:-" + _LETTER + "+)*")
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


def source_pronouns(lang: str, path: Optional[str] = None) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(ambiguous, gendered) pronouns of a source language code or corpus label (``es``, ``fr_darby``,
    ``tl_ulb``: the part before ``_``); an unknown one is a :class:`ToolError` naming ``path``."""
    base = lang.split("_", 1)[0]
    if base not in SOURCE_PRONOUNS:
        why = " (it marks the gender of its 3rd-person pronouns)" if base == "ar" else ""
        raise ToolError(f"no contrastive pronoun lists for source language {lang!r}{why}; known: "
                        f"{', '.join(SOURCE_PRONOUNS)} (or give --src-pronouns)", path)
    return SOURCE_PRONOUNS[base]


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

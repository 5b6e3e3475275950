"""Transliteration into a shared (Latin) script, for transfer across related languages (Nguyen 2021
ch. 3, Nguyen & Chiang 2017 §3.2.1).

Two methods:

* **table** (the thesis' method): a *string homomorphism*, each character replaced by a fixed string
  independent of context, so ``t(ab) = t(a) t(b)``. Built in: ``uyghur`` -- Uyghur Arabic script
  (UEY) to ASCII Latin after the ULY (Uyghur Latin Yéziqi) correspondences, ASCII-fied
  (ۆ o', ۈ u', ې e'; ch, gh, ng, sh, zh clusters; the hamza carrier ئ dropped;
  ، ؛ ؟ to , ; ?; Arabic-Indic digits to 0-9). The exact table of the tool the thesis used is not
  published; ``table --dump`` writes the built-in table as a TSV that can be edited and passed back
  with ``--table FILE.tsv`` (``<source chars>\\t<replacement>`` per line; ``#`` comments; an empty
  replacement deletes). Applied with :meth:`str.translate` (C speed). Text is NFKC-normalised first
  (Arabic presentation forms become base letters), tatweel is removed. Characters not in the table
  pass through unchanged.
  :func:`reverse_uyghur` maps ULY-ASCII back to Arabic script (longest match, hamza carrier restored
  before a syllable-initial vowel); it inverts :func:`transliterate` on ordinary Uyghur words (the
  homomorphism itself is not injective, e.g. "n"+"g" vs "ng").
* **uroman** (any script): the ``uroman`` package (Hermjakob et al. 2018, Python port, tested with
  ``uroman==1.3.1.1``), with an optional ISO 639-3 ``--lcode``.

Command line (``python -m fairseq_ext.tools.corpora.transliterate``, ``fairseq-ext-transliterate``)::

    file    --scheme uyghur|uroman|FILE.tsv [--lcode uig] [-i IN] [-o OUT]   (stdin/stdout by default)
    folder  RAW OUT --lang ug --scheme ...   transliterate {split}.{lang} (and the lang's entries in
            {split}.docs.jsonl) of a parallel folder, copy everything else: OUT is a parallel folder
            for ``corpora bpe`` / ``transfer joint-bpe``
    table   [--dump FILE]                    print / write the built-in tables
    reverse -i IN -o OUT                     ULY-ASCII -> Uyghur Arabic script

Bad input is one :class:`~fairseq_ext.tools.common.ToolError` (``error: ...``, exit status 2):
an unknown scheme, a malformed table file, a missing uroman package, or input that contains no
character of the table's script at all (the wrong ``--scheme`` for the text); ``--strict`` also
rejects letters left untransliterated (``file:line``).
"""
from __future__ import annotations

import os
import re
import sys
import unicodedata
from typing import Iterable

from fairseq_ext.tools.common import (SPLITS, ArgumentParser, OutputSet, ToolError, json_line, log, read_jsonl,
                                      read_lines, run_cli)

# --------------------------------------------------------------------------- the Uyghur table
# (Arabic letter, ULY-ASCII); the order is the Uyghur alphabet.
UYGHUR_LETTERS = [
    ("\u0627", "a"),   # ا
    ("\u06d5", "e"),   # ە
    ("\u0628", "b"),   # ب
    ("\u067e", "p"),   # پ
    ("\u062a", "t"),   # ت
    ("\u062c", "j"),   # ج
    ("\u0686", "ch"),  # چ
    ("\u062e", "x"),   # خ
    ("\u062f", "d"),   # د
    ("\u0631", "r"),   # ر
    ("\u0632", "z"),   # ز
    ("\u0698", "zh"),  # ژ
    ("\u0633", "s"),   # س
    ("\u0634", "sh"),  # ش
    ("\u063a", "gh"),  # غ
    ("\u0641", "f"),   # ف
    ("\u0642", "q"),   # ق
    ("\u0643", "k"),   # ك
    ("\u06af", "g"),   # گ
    ("\u06ad", "ng"),  # ڭ
    ("\u0644", "l"),   # ل
    ("\u0645", "m"),   # م
    ("\u0646", "n"),   # ن
    ("\u06be", "h"),   # ھ
    ("\u0648", "o"),   # و
    ("\u06c7", "u"),   # ۇ
    ("\u06c6", "o'"),  # ۆ
    ("\u06c8", "u'"),  # ۈ
    ("\u06cb", "w"),   # ۋ
    ("\u06d0", "e'"),  # ې
    ("\u0649", "i"),   # ى
    ("\u064a", "y"),   # ي
    ("\u0626", ""),    # ئ hamza carrier (marks a syllable-initial vowel): dropped
]
UYGHUR_EXTRA = [
    ("\u06a9", "k"),   # ک keheh, a common variant of ك
    ("\u0647", "e"),   # ه heh, written for ە in some legacy encodings
    ("\u06cc", "y"),   # ی farsi yeh
    ("\u0621", ""),    # ء bare hamza
    ("\u060c", ","),   # ،
    ("\u061b", ";"),   # ؛
    ("\u061f", "?"),   # ؟
    ("\u066a", "%"),   # ٪
    ("\u0640", ""),    # ـ tatweel
    *[(chr(0x0660 + d), str(d)) for d in range(10)],  # Arabic-Indic digits
    *[(chr(0x06F0 + d), str(d)) for d in range(10)],  # extended Arabic-Indic digits
]
UYGHUR_TABLE = dict(UYGHUR_LETTERS + UYGHUR_EXTRA)
TABLES = {"uyghur": UYGHUR_TABLE}
ALIASES = {"uyghur_arabic_to_latin": "uyghur", "ug": "uyghur", "uig": "uyghur"}
SCHEMES = (*TABLES, "uroman")
UROMAN_HINT = "pip install uroman (tested with uroman==1.3.1.1)"


def _script_letters(table: dict) -> set:
    """The letters of a table (its non-punctuation, non-digit sources): one must occur in the input."""
    return {c for c, r in table.items() if unicodedata.category(c).startswith("L")}


_UESC = re.compile(r"\\u([0-9a-fA-F]{4})")


def load_table(path: str) -> dict:
    """A ``<chars>\\t<replacement>`` TSV (``#`` comments, ``\\uXXXX`` escapes allowed) as a table."""
    table = {}
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise ToolError(f"expected '<character>\\t<replacement>', got {line!r}", path, i)
        src, rep = (_UESC.sub(lambda m: chr(int(m.group(1), 16)), x) for x in parts)
        if len(src) != 1:
            raise ToolError(f"the source must be exactly one character, got {src!r}", path, i)
        if src in table:
            raise ToolError(f"character {src!r} (U+{ord(src):04X}) is mapped twice", path, i)
        table[src] = rep
    if not table:
        raise ToolError(f"{path}: the transliteration table is empty")
    return table


def dump_table(table: dict) -> str:
    lines = ["# character<TAB>replacement (empty = delete); one character per line",
             "# built-in Uyghur Arabic -> ULY-ASCII table of fairseq_ext.tools.corpora.transliterate"]
    for c, r in table.items():
        lines.append(f"# U+{ord(c):04X} {unicodedata.name(c, '?')}")
        lines.append(f"{c}\t{r}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- transliterators
class Transliterator:
    """``scheme``: a built-in table name, ``uroman``, or a TSV table path (see module doc)."""

    def __init__(self, scheme: str, lcode: str | None = None, normalize: bool = True):
        name = ALIASES.get(scheme, scheme)
        self.scheme = name
        self.lcode = lcode
        self.normalize = normalize
        self._uroman = None
        if name in TABLES:
            self.table = TABLES[name]
        elif name == "uroman":
            self.table = None
            try:
                import uroman
            except ImportError:
                raise ToolError(f"--scheme uroman needs the uroman package: {UROMAN_HINT}") from None
            self._uroman = uroman.Uroman()
        elif os.path.isfile(scheme) or scheme.endswith((".tsv", ".txt")):
            self.table = load_table(scheme)
        else:
            raise ToolError(f"unknown transliteration scheme {scheme!r}; known: {', '.join(SCHEMES)} "
                              f"or a TSV table file (see 'table --dump')")
        if self.table is not None:
            self._trans = str.maketrans(self.table)
            self.letters = _script_letters(self.table)
            self._letters_re = re.compile("[" + re.escape("".join(sorted(self.letters))) + "]") \
                if self.letters else None

    def __call__(self, text: str) -> str:
        if self.normalize:
            text = unicodedata.normalize("NFKC", text)
        if self._uroman is not None:
            return self._uroman.romanize_string(text, lcode=self.lcode)
        return text.translate(self._trans)

    def lines(self, lines: list[str], path: str = "<input>", strict: bool = False) -> list[str]:
        """Transliterate lines; error if no line has a character of the table's script (wrong scheme),
        and with ``strict`` on the first letter left outside ASCII."""
        out = [self(s) for s in lines]
        if self.table is not None and self._letters_re is not None and lines:
            text = "\n".join(unicodedata.normalize("NFKC", s) if self.normalize else s for s in lines)
            if not self._letters_re.search(text):
                sample = next((c for c in text if c.isalpha() and not c.isascii()), None)
                found = f" (it has e.g. {sample!r}, {unicodedata.name(sample, '?')})" if sample else ""
                raise ToolError(f"{path}: no character of the {self.scheme!r} table's script in the input"
                                  f"{found}; wrong --scheme for this text? (uroman handles any script)")
        if strict:
            for i, s in enumerate(out, 1):
                bad = next((c for c in s if c.isalpha() and not c.isascii()), None)
                if bad is not None:
                    raise ToolError(f"{path}:{i}: {bad!r} (U+{ord(bad):04X} {unicodedata.name(bad, '?')}) "
                                      f"was left untransliterated by --scheme {self.scheme}")
        return out


def transliterate(text: str, scheme: str = "uyghur") -> str:
    return Transliterator(scheme)(text)


# --------------------------------------------------------------------------- reverse (ULY-ASCII -> Arabic)
_REV_UNITS = sorted({r: c for c, r in UYGHUR_LETTERS if r}.items(), key=lambda kv: -len(kv[0]))
_REV = dict(_REV_UNITS)
_REV_PUNCT = {",": "\u060c", ";": "\u061b", "?": "\u061f"}
_VOWELS = {"a", "e", "i", "o", "u", "o'", "u'", "e'"}
_UNIT_RE = re.compile("|".join(re.escape(k) for k, _ in _REV_UNITS) + r"|.", re.S)


def reverse_uyghur(text: str) -> str:
    """ULY-ASCII -> Uyghur Arabic script: longest-match letters, with the hamza carrier ئ written
    before a vowel that starts a syllable (word-initially or after another vowel)."""
    out = []
    prev_vowel, word_start = False, True
    for unit in _UNIT_RE.findall(text.lower()):
        if unit in _REV:
            is_vowel = unit in _VOWELS
            if is_vowel and (word_start or prev_vowel):
                out.append("\u0626")
            out.append(_REV[unit])
            prev_vowel, word_start = is_vowel, False
        else:
            out.append(_REV_PUNCT.get(unit, unit))
            prev_vowel, word_start = False, True
    return "".join(out)


# --------------------------------------------------------------------------- files and folders
def _write(path: str, lines: Iterable[str]) -> None:
    d = os.path.dirname(os.path.abspath(path))
    with OutputSet(d) as o:
        o.write_lines(os.path.basename(path), list(lines))


def transliterate_folder(raw: str, out: str, lang: str, scheme: str, lcode: str | None = None,
                         strict: bool = False) -> dict:
    """Copy the parallel folder ``raw`` to ``out`` with ``{split}.{lang}`` (and the ``lang`` lists of
    ``{split}.docs.jsonl``) transliterated. Returns ``{split: lines}``."""
    if os.path.abspath(raw) == os.path.abspath(out):
        raise ToolError(f"the output folder must differ from the input folder: {out}")
    if not os.path.isdir(raw):
        raise ToolError(f"missing input folder: {raw}")
    present = [sp for sp in SPLITS if os.path.isfile(os.path.join(raw, f"{sp}.{lang}"))]
    if not present:
        raise ToolError(f"{raw}: no {{train,valid,test}}.{lang} file (is --lang right?)")
    t = Transliterator(scheme, lcode)
    counts = {}
    with OutputSet(out) as o:
        for name in sorted(os.listdir(raw)):
            p = os.path.join(raw, name)
            if not os.path.isfile(p) or name.startswith("."):
                continue
            sp, _, suffix = name.partition(".")
            if sp in SPLITS and suffix == lang:
                res = t.lines(read_lines(p), p, strict)
                o.write_lines(name, res)
                counts[sp] = len(res)
            elif sp in SPLITS and suffix == "docs.jsonl":
                docs = read_jsonl(p)
                for i, d in enumerate(docs, 1):
                    if lang in d:
                        d[lang] = t.lines(d[lang], f"{p}:{i}", strict)
                o.write_jsonl(name, docs)
            else:
                o.copy(p, name)
        o.write_json("transliterate.json", {"raw": os.path.abspath(raw), "lang": lang, "scheme": t.scheme,
                                            "lcode": lcode, "lines": counts})
    log(f"[transliterate] {raw} -> {out}: {lang} with {t.scheme} ({', '.join(f'{k} {v}' for k, v in counts.items())})")
    return counts


# --------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-transliterate",
                                description="Transliterate text into Latin script (table-driven or uroman).")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="SUBCOMMAND")

    def scheme(sp):
        sp.add_argument("--scheme", default="uyghur",
                        help=f"built-in table ({', '.join(TABLES)}), uroman, or a TSV table file")
        sp.add_argument("--lcode", help="ISO 639-3 language code passed to uroman (e.g. uig, rus, fas)")
        sp.add_argument("--strict", action="store_true", help="error on letters left untransliterated")

    f = sub.add_parser("file", help="transliterate one file (stdin/stdout by default)")
    f.add_argument("-i", "--input", default="-")
    f.add_argument("-o", "--output", default="-")
    scheme(f)
    d = sub.add_parser("folder", help="transliterate one language of a parallel folder")
    d.add_argument("raw")
    d.add_argument("out")
    d.add_argument("--lang", required=True, help="the file suffix to transliterate (e.g. ug, fa, ru)")
    scheme(d)
    t = sub.add_parser("table", help="print the built-in tables, or write one as an editable TSV")
    t.add_argument("--name", default="uyghur", choices=list(TABLES))
    t.add_argument("--dump", help="write the table to this TSV file")
    r = sub.add_parser("reverse", help="ULY-ASCII back to Uyghur Arabic script")
    r.add_argument("-i", "--input", default="-")
    r.add_argument("-o", "--output", default="-")
    return p


def _read_input(path: str) -> list[str]:
    if path == "-":
        text = sys.stdin.read()
        return text[:-1].split("\n") if text.endswith("\n") else (text.split("\n") if text else [])
    return read_lines(path)


def _emit(path: str, lines: list[str]) -> None:
    if path == "-":
        sys.stdout.write("".join(s + "\n" for s in lines))
    else:
        _write(path, lines)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.cmd == "file":
        t = Transliterator(a.scheme, a.lcode)
        name = "<stdin>" if a.input == "-" else a.input
        _emit(a.output, t.lines(_read_input(a.input), name, a.strict))
    elif a.cmd == "folder":
        print(json_line(transliterate_folder(a.raw, a.out, a.lang, a.scheme, a.lcode, a.strict)))
    elif a.cmd == "table":
        text = dump_table(TABLES[a.name])
        if a.dump:
            _write(a.dump, text.rstrip("\n").split("\n"))
        else:
            sys.stdout.write(text)
    elif a.cmd == "reverse":
        _emit(a.output, [reverse_uyghur(s) for s in _read_input(a.input)])
    return 0


def cli_main(argv: list[str] | None = None) -> None:
    """Console script ``fairseq-ext-transliterate``: ``error: FILE:LINE: message`` and exit status 2."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

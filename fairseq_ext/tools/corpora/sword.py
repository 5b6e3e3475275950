"""Spanish (Reina-Valera 1909) -- English (World English Bible, + KJV) verse pairs from Debian's SWORD modules.

Source: the Debian bookworm packages ``sword-text-sparv`` (``spaRV1909eb``), ``sword-text-web``
(``engWEB2015eb``) and ``sword-text-kjv`` (``engKJV2006eb``), all public domain; ``libsword-utils``
provides ``mod2imp``, which dumps a module as ``$$$<Book> <ch>:<v>`` headers followed by the verse's OSIS
XML. The pure-Python reader ``pysword`` (``--reader pysword``) reads the same module files without
libsword (same output; its dumps are cached too).

Cleaning and alignment (ported from the project's reference extraction script):

1. OSIS is stripped: notes are dropped without gluing words, non-canonical titles / speaker labels are
   dropped, canonical Psalm superscriptions are kept, stray USFM markers and pilcrows are removed.
2. RV1909 ``<w>``/``<transChange>`` joins get a space back, except enclitics on verb stems.
3. RV1909 chapter-initial capitals ("Y ACONTECIÓ") are recased from the corpus' own casing statistics;
   epistle subscriptions (RV1909) and the WEB glossary after Rev 22:21 are removed.
4. Alignment check: es-vs-KJV Strong's Jaccard >= 0.2, no neighbouring verse matching better (Strong's
   for es/KJV, lexical overlap for WEB/KJV), and sane length ratios.
5. Whole books are held out: :data:`VALID_BOOKS`, :data:`TEST_BOOKS`.

Expected counts: train 28,717 / valid 645 / test 1,494 verse pairs (1,095 / 32 / 58 chapters).
"""
from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from collections import OrderedDict

from fairseq_ext.tools.common import OutputSet, Timer, ToolError, log, read_json, stamp_ok, write_stamp

VERSION = 1  # bump when the extraction logic changes (invalidates stamps)

VALID_BOOKS = ["Esther", "Joel", "Habakkuk", "Philippians", "Colossians", "I John", "Titus"]
TEST_BOOKS = ["Ruth", "Ecclesiastes", "Jonah", "Micah", "Mark", "Ephesians", "James", "I Peter"]
SRC_MODULE, TGT_MODULE, REF2_MODULE = "spaRV1909eb", "engWEB2015eb", "engKJV2006eb"
LANGS = ("es", "en", "kjv")  # file suffixes: RV1909, WEB, KJV
MODULE_PACKAGES = {SRC_MODULE: "sword-text-sparv", TGT_MODULE: "sword-text-web", REF2_MODULE: "sword-text-kjv"}
APT_PACKAGES = ["libsword-utils", "sword-text-sparv", "sword-text-web", "sword-text-kjv"]
OUTPUT_FILES = ([f"{sp}.{x}" for sp in ("train", "valid", "test") for x in LANGS + ("ids",)]
                + [f"{sp}.docs.jsonl" for sp in ("train", "valid", "test")] + ["all.tsv", "stats.json"])

HDR = re.compile(r"^\$\$\$(.+?) (\d+):(\d+)$")
NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.S)
NONCANON_TITLE = re.compile(r"<title\b(?![^>]*canonical=\"true\")[^>]*>.*?</title>", re.S)
SPEAKER = re.compile(r"<speaker\b[^>]*>.*?</speaker>", re.S)
STRONG = re.compile(r'lemma="([^"]*)"')
TAG = re.compile(r"<[^>]+>")
BLOCK_TAG = re.compile(r"<(?:lb|l|lg|div|p|chapter|milestone|item|list)\b[^>]*/?>")
SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?’”»)\]])")
SPACE_AFTER_OPEN = re.compile(r"([“‘«(\[¿¡])\s+")
WS = re.compile(r"\s+")
GAP = "\x00"  # placeholder where a note was removed
USFM = re.compile(r"\\\+?[a-z]+[0-9]?\*?\s?")  # stray USFM markers such as "\\nd " in the KJV
SUBSCRIPTION = re.compile(r"(Amén\.)\s+[^.]*\b(?:[Ee]scrita|enviada|[Ee]scribió)\b.*$")
CLITICS = {"lo", "la", "le", "los", "las", "les", "me", "te", "se", "nos", "os"}
SHORT_IMPER = {"di", "dí", "haz", "ve", "pon", "ten", "sal", "id", "sed", "he"}
GLUE = re.compile(r"(\w+)((?:</w>|</transChange>)(?:<w\b[^>]*>|<transChange\b[^>]*>))(\w+)")
EN_STOP = set("the and of to in that he shall unto for his a i is with not they him be all them it was "
              "you your thou thee thy ye are have were which from this my but as on by their me will "
              "said who there when so at then also up out what an has had".split())


# --------------------------------------------------------------------------- OSIS cleaning
def _glue(m: re.Match) -> str:
    """Re-insert a space at "ASÍ</w><transChange>nosotros", keep enclitics joined ("sáca"+"lo")."""
    left, tags, right = m.groups()
    verbish = (left[0].islower() or m.start() == 0) and (
        left.endswith(("r", "d")) or left.lower() in SHORT_IMPER
        or any(ch in "áéíóú" for ch in left.lower()))
    sep = "" if (right in CLITICS and verbish) else " "
    return left + tags + sep + right


def strip_osis(s: str) -> str:
    s = GLUE.sub(_glue, s)
    s = NOTE.sub(GAP, s)
    s = NONCANON_TITLE.sub(" ", s)
    s = SPEAKER.sub(" ", s)
    s = BLOCK_TAG.sub(" ", s)  # block-level milestones become spaces, inline tags vanish
    s = TAG.sub("", s)
    s = html.unescape(s)
    s = USFM.sub("", s).replace("¶", " ")
    s = re.sub(r"(\w)" + GAP + r"(\w)", r"\1 \2", s)  # a removed note must not glue two words
    s = s.replace(GAP, "")
    s = WS.sub(" ", s).strip()
    s = SPACE_BEFORE_PUNCT.sub(r"\1", s)
    s = SPACE_AFTER_OPEN.sub(r"\1", s)
    return s


def strongs(s: str) -> set[str]:
    out = set()
    for lem in STRONG.findall(NOTE.sub(" ", s)):
        for part in lem.split():
            if part.startswith("strong:"):
                m = re.match(r"([GH])0*(\d+)", part[7:])
                if m:
                    out.add(m.group(1) + m.group(2))
    return out


def en_toks(s: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", s.lower()) if w not in EN_STOP and len(w) > 2}


def osis_id(book: str, ch: int, v: int) -> str:
    return f"{book.replace(' ', '_')}.{ch}.{v}"


def split_of(book: str) -> str:
    return "test" if book in TEST_BOOKS else "valid" if book in VALID_BOOKS else "train"


# --------------------------------------------------------------------------- tools / install
def sword_path() -> str:
    return os.environ.get("SWORD_PATH", "/usr/share/sword")


def module_installed(module: str) -> bool:
    """A module is installed when ``mods.d`` has its ``.conf`` (file names vary in case)."""
    d = os.path.join(sword_path(), "mods.d")
    try:
        names = {n.lower() for n in os.listdir(d)}
    except OSError:
        return False
    return module.lower() + ".conf" in names


def _pysword_available() -> bool:
    try:
        import pysword  # noqa: F401
    except ImportError:
        return False
    return True


def ensure_sword(modules: list[str], reader: str, install: bool = True) -> None:
    """Make sure the SWORD modules (and ``mod2imp`` for ``reader='mod2imp'``) are there; installs
    them with apt-get when running as root on a system that has it, else raises one clear error."""
    need = []
    if reader == "mod2imp" and shutil.which("mod2imp") is None:
        need.append("libsword-utils")
    need += [MODULE_PACKAGES.get(m, m) for m in modules if not module_installed(m)]
    if reader == "pysword" and not _pysword_available():
        raise ToolError("--reader pysword needs the Python package pysword (pip install pysword)")
    if not need:
        return
    cmd = "apt-get install -y --no-install-recommends " + " ".join(need)
    can_apt = install and shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0
    if can_apt:
        log(f"[sword] installing {' '.join(need)} with apt-get (about 30 s)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for c in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends"] + need):
            r = subprocess.run(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                tail = (r.stderr or "").strip().splitlines()[-1:] or [""]
                raise ToolError(f"`{' '.join(c)}` failed (exit {r.returncode}): {tail[0]}")
        still = [m for m in modules if not module_installed(m)]
        if still or (reader == "mod2imp" and shutil.which("mod2imp") is None):
            raise ToolError(f"SWORD modules still missing after apt-get install under {sword_path()}: "
                              f"{', '.join(still) or 'mod2imp'}")
        return
    hint = ""
    if reader == "mod2imp" and _pysword_available() and need == ["libsword-utils"]:
        hint = " (or use --reader pysword, which needs only the sword-text-* data packages)"
    elif reader == "mod2imp" and _pysword_available():
        hint = " (--reader pysword avoids libsword-utils but still needs the sword-text-* packages)"
    why = "not root" if install and shutil.which("apt-get") else (
        "apt-get not available" if install else "--no-install given")
    raise ToolError(f"SWORD tools missing: {', '.join(need)} ({why}); install them with "
                      f"`{cmd}`{hint}")


# --------------------------------------------------------------------------- reading modules
def _dump_mod2imp(module: str, path: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            r = subprocess.run(["mod2imp", module], stdout=f, stderr=subprocess.PIPE)
        if r.returncode != 0:
            raise ToolError(f"mod2imp {module} failed (exit {r.returncode}): "
                              f"{r.stderr.decode(errors='replace').strip()[:200]}")
        if os.path.getsize(tmp) < 1000:
            raise ToolError(f"mod2imp {module} wrote an (almost) empty dump; is {module} installed "
                              f"under {sword_path()}?")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _dump_pysword(module: str, path: str) -> None:
    """Write the same ``$$$Book ch:v`` dump format as mod2imp, read with pysword."""
    from pysword.modules import SwordModules
    mods = SwordModules(sword_path())
    mods.parse_modules()
    bible = mods.get_bible_from_module(module)
    books = bible.get_structure().get_books()
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for book in books.get("ot", []) + books.get("nt", []):
                keys = [(c + 1, v + 1) for c, n in enumerate(book.chapter_lengths) for v in range(n)]
                for (c, v), raw in zip(keys, bible.get_iter(books=[book.osis_name], clean=False)):
                    f.write(f"$$${book.name} {c}:{v}\n{raw}\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def dump_path(module: str, cache_dir: str, reader: str) -> str:
    return os.path.join(cache_dir, module + (".imp" if reader == "mod2imp" else ".pysword.imp"))


def read_module(module: str, cache_dir: str, reader: str = "mod2imp") -> "OrderedDict[tuple, tuple]":
    """``(book, ch, v) -> (clean text, Strong's set)`` from a cached dump (made on first use)."""
    path = dump_path(module, cache_dir, reader)
    if not os.path.exists(path):
        t = Timer()
        log(f"[sword] dumping {module} with {reader} -> {path}")
        os.makedirs(cache_dir, exist_ok=True)
        (_dump_mod2imp if reader == "mod2imp" else _dump_pysword)(module, path)
        log(f"[sword]   done in {t}")
    verses: OrderedDict = OrderedDict()
    key, buf = None, []

    def flush() -> None:
        if key is not None and key[1] > 0 and key[2] > 0:
            raw = "".join(buf)
            verses[key] = (strip_osis(raw), strongs(raw))

    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("$$$"):
                flush()
                m = HDR.match(line.rstrip("\n"))
                key = (m.group(1), int(m.group(2)), int(m.group(3))) if m else None
                buf = []
            else:
                buf.append(line)
    flush()
    return verses


# --------------------------------------------------------------------------- cleaning + alignment
def _fix_texts(src: dict, tgt: dict) -> int:
    last_of_book = {}
    for key in src:
        last_of_book[key[0]] = key
    for key in last_of_book.values():  # RV1909 epistle subscriptions
        txt, st = src[key]
        src[key] = (SUBSCRIPTION.sub(r"\1", txt), st)
    casing: dict[str, dict[str, int]] = {}
    for txt, _ in src.values():
        for w in re.findall(r"\w+", txt):
            if not w.isupper():
                casing.setdefault(w.lower(), {}).setdefault(w, 0)
                casing[w.lower()][w] += 1

    def recase(m: re.Match) -> str:
        w = m.group(2)
        forms = casing.get(w.lower())
        new = max(forms, key=forms.get) if forms else w.capitalize()
        if m.group(1) == "" or m.group(1).endswith((". ", "¡", "¿")):
            new = new[0].upper() + new[1:]
        return m.group(1) + new

    n_recased = 0
    for key, (txt, st) in list(src.items()):
        if key[2] == 1:
            new = re.sub(r"^((?:.*?(?:\. |¡|¿))?(?:[A-ZÁÉÍÓÚ] )?)([A-ZÁÉÍÓÚÑ]{2,})\b", recase, txt, count=1)
            if new != txt:
                n_recased += 1
                src[key] = (new, st)
    glossary = " The following words used in the World English Bible"
    for key, (txt, st) in list(tgt.items()):
        if glossary.strip() in txt:
            tgt[key] = (txt.split(glossary)[0], st)
    return n_recased


def _jac(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if (a | b) else 1.0


def align(src: dict, tgt: dict, ref2: dict, min_jaccard: float = 0.2, shift_margin: float = 0.15):
    """Pairs ``(key, es, en, kjv, jaccard)`` that pass the alignment checks, and the drop counts."""
    align_ref = ref2 if ref2 else tgt
    rows = []
    drop = {"empty_one_side": 0, "low_strongs": 0, "shifted": 0, "len_ratio": 0}
    for key, (s_txt, s_str) in src.items():
        if key not in tgt:
            continue
        t_txt, _ = tgt[key]
        if not s_txt or not t_txt:
            drop["empty_one_side"] += 1
            continue
        r_txt, _ = ref2.get(key, ("", set()))
        j = _jac(s_str, align_ref.get(key, ("", set()))[1])
        if min_jaccard and j < min_jaccard:
            drop["low_strongs"] += 1
            continue
        b, c, v = key
        nb = [_jac(s_str, align_ref[k][1]) for k in ((b, c, v - 1), (b, c, v + 1)) if k in align_ref]
        if nb and max(nb) > j + shift_margin:
            drop["shifted"] += 1
            continue
        if r_txt:  # WEB vs KJV: lexical overlap must not prefer a neighbour
            kt = en_toks(r_txt)
            jw = _jac(kt, en_toks(t_txt))
            nbw = [_jac(kt, en_toks(tgt[k][0])) for k in ((b, c, v - 1), (b, c, v + 1))
                   if k in tgt and tgt[k][0]]
            if nbw and max(nbw) > jw + 0.3:
                drop["shifted"] += 1
                continue
        r1 = len(s_txt) / len(t_txt)
        r2 = len(t_txt) / len(r_txt) if r_txt else 1.0
        r3 = len(s_txt) / len(r_txt) if r_txt else 1.0
        if not (0.4 <= r1 <= 2.5) or not (0.35 <= r2 <= 2.5) or not (0.5 <= r3 <= 2.0):
            drop["len_ratio"] += 1
            continue
        rows.append((key, s_txt, t_txt, r_txt, j))
    return rows, drop


# --------------------------------------------------------------------------- the step
def build(out: str, cache: str = "data/cache/sword", reader: str = "mod2imp", min_jaccard: float = 0.2,
          shift_margin: float = 0.15, force: bool = False, install: bool = True) -> dict:
    """Write the es-en(-kjv) parallel folder ``out``; returns the stats dict."""
    params = {"version": VERSION, "modules": [SRC_MODULE, TGT_MODULE, REF2_MODULE],
              "min_jaccard": min_jaccard, "shift_margin": shift_margin}
    if not force and stamp_ok(out, "sword", params):
        log(f"[sword] {out} is up to date (same parameters); skipping (--force redoes it)")
        return read_json(os.path.join(out, "stats.json"))
    t0 = Timer()
    modules = [SRC_MODULE, TGT_MODULE, REF2_MODULE]
    missing_dumps = [m for m in modules if not os.path.exists(dump_path(m, cache, reader))]
    if missing_dumps:
        ensure_sword(missing_dumps, reader, install)
    log(f"[sword] reading {', '.join(modules)} ({reader}, cache {cache})")
    src = read_module(SRC_MODULE, cache, reader)
    tgt = read_module(TGT_MODULE, cache, reader)
    ref2 = read_module(REF2_MODULE, cache, reader)
    t_read = t0.seconds()
    n_recased = _fix_texts(src, tgt)
    stats: dict = {"src_nonempty": sum(1 for v in src.values() if v[0]),
                   "tgt_nonempty": sum(1 for v in tgt.values() if v[0]),
                   "ref2_nonempty": sum(1 for v in ref2.values() if v[0])}
    rows, drop = align(src, tgt, ref2, min_jaccard, shift_margin)
    log(f"[sword] {len(rows)} verse pairs kept; dropped {drop}")
    stats.update({"pairs": len(rows), "es_chapter_initial_caps_recased": n_recased, "dropped": drop,
                  "tgt_only_keys_nonempty": sum(1 for k, v in tgt.items() if v[0] and k not in src)})
    splits = ("train", "valid", "test")
    counts = {sp: {"verses": 0, "es_tok": 0, "en_tok": 0, "kjv_tok": 0, "books": set(), "chapters": set()}
              for sp in splits}
    docs: dict = {sp: OrderedDict() for sp in splits}
    with OutputSet(out) as o:
        tsv = o.open("all.tsv")
        tsv.write("id\tes\ten_web\ten_kjv\tstrongs_jaccard_es_kjv\n")
        for key, s, t, r, j in rows:
            vid = osis_id(*key)
            tsv.write(f"{vid}\t{s}\t{t}\t{r}\t{j:.3f}\n")
            sp = split_of(key[0])
            for ext, txt in zip(LANGS + ("ids",), (s, t, r, vid)):
                o.open(f"{sp}.{ext}").write(txt + "\n")
            c = counts[sp]
            c["verses"] += 1
            c["es_tok"] += len(s.split())
            c["en_tok"] += len(t.split())
            c["kjv_tok"] += len(r.split())
            c["books"].add(key[0])
            c["chapters"].add(key[:2])
            d = docs[sp].setdefault(key[:2], {"doc_id": f"{key[0].replace(' ', '_')}.{key[1]}",
                                              "ids": [], "es": [], "en": [], "kjv": []})
            d["ids"].append(vid)
            d["es"].append(s)
            d["en"].append(t)
            d["kjv"].append(r)
        for sp in splits:
            o.write_jsonl(f"{sp}.docs.jsonl", docs[sp].values())
            for ext in LANGS + ("ids",):
                o.open(f"{sp}.{ext}")  # exists even when a split is empty
            c = counts[sp]
            c["books"] = len(c["books"])
            c["chapters"] = len(c["chapters"])
        stats.update({"splits": counts, "valid_books": VALID_BOOKS, "test_books": TEST_BOOKS,
                      "kjv_missing_for_pairs": sum(1 for r in rows if not r[3]), "reader": reader,
                      "seconds_read_modules": round(t_read, 2), "seconds_total": round(t0.seconds(), 2)})
        o.write_json("stats.json", stats)
    write_stamp(out, "sword", params, OUTPUT_FILES)
    log(f"[sword] wrote {out} in {t0}: " + ", ".join(f"{sp} {counts[sp]['verses']}" for sp in splits))
    return stats

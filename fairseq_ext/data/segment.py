"""Subword segmentation of a parallel folder (``corpora bpe``).

Two methods, both trained on the *train* split only (source + target together by default = joint):

* ``sentencepiece`` (the ``sentencepiece`` package; ``--sp-type unigram|bpe``): model ``spm.model``
  (joint) or ``spm.<lang>.model`` (``--no-joint``); segmented text is space-separated pieces with ``▁``
  marking word starts. Undo with fairseq's ``--post-process sentencepiece``.
* ``subword-nmt`` (``subword_nmt.learn_bpe`` / ``apply_bpe``): codes ``bpe.codes`` (joint) or
  ``bpe.<lang>.codes``. ``--vocab-size`` is the total symbol budget (merges + characters, subword-nmt's
  ``--total-symbols``). The text is split on whitespace only (no Moses tokenisation), so removing
  ``"@@ "`` restores the input exactly. Undo with ``--post-process subword_nmt``.

The output folder holds ``{split}.{lang}`` (segmented), ``{split}.ids`` (copied), the model files and
``segment.json`` (method, models, the fairseq ``post_process`` value, the raw folder).
"""
from __future__ import annotations

import io
import json
import os
import random
from collections import Counter

from .validate import (SPLITS, CorpusError, OutputSet, Timer, check_parallel, log, progress,
                       read_lines, resolve_pair, sha256_file, stamp_ok, write_stamp)

VERSION = 1
METHODS = ("sentencepiece", "subword-nmt")
SP_TYPES = ("unigram", "bpe")


def present_splits(folder: str, langs: list[str]) -> list[str]:
    """``train`` plus every other split with at least one file for ``langs``."""
    out = []
    for sp in SPLITS:
        if sp == "train" or any(os.path.exists(os.path.join(folder, f"{sp}.{x}")) for x in langs):
            out.append(sp)
    return out


def validate_inputs(folder: str, langs: list[str], max_len: int | None) -> dict[str, int]:
    """Check every split's ``{split}.{lang}`` (+ ``.ids``) and return the line count per split."""
    counts = {}
    for sp in present_splits(folder, langs):
        paths = [os.path.join(folder, f"{sp}.{x}") for x in langs]
        ids = os.path.join(folder, f"{sp}.ids")
        if os.path.exists(ids):
            paths.append(ids)
        counts[sp] = check_parallel(paths, max_len)
    return counts


def fingerprint(folder: str, names: list[str]) -> dict[str, str]:
    """Content hash of the input files (so a changed input redoes a step)."""
    out = {}
    for n in names:
        p = os.path.join(folder, n)
        if os.path.isfile(p):
            out[n] = sha256_file(p)[:16]
    return out


# --------------------------------------------------------------------------- sentencepiece
def _train_sentencepiece(files: list[str], model_path: str, vocab_path: str, vocab_size: int, sp_type: str,
                         seed: int, threads: int) -> None:
    import sentencepiece as spm
    if hasattr(spm, "set_random_generator_seed"):
        spm.set_random_generator_seed(seed)
    sentences = [line for f in files for line in read_lines(f)]
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
            model_type=sp_type, character_coverage=1.0, hard_vocab_limit=False, num_threads=threads,
            shuffle_input_sentence=False, input_sentence_size=0, max_sentence_length=1 << 16,
            minloglevel=2, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1)
    except RuntimeError as e:
        msg = str(e).strip().splitlines()
        raise CorpusError(f"sentencepiece training on {', '.join(files)} failed: {msg[-1] if msg else e}") from None
    with open(model_path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    with open(vocab_path, "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n")


def _apply_sentencepiece(model_path: str, lines: list[str], threads: int) -> list[str]:
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


def _apply_subword_nmt(codes_path: str, lines: list[str]) -> list[str]:
    from subword_nmt.apply_bpe import BPE
    with open(codes_path, encoding="utf-8") as f:
        bpe = BPE(f)
    return [bpe.segment(line) for line in progress(lines, desc="apply bpe", unit="line")]


# --------------------------------------------------------------------------- the step
def segment(raw: str, out: str, src: str | None = None, tgt: str | None = None,
            method: str = "sentencepiece", vocab_size: int = 8000, joint: bool = True,
            sp_type: str = "unigram", max_len: int | None = 1024, force: bool = False, seed: int = 1,
            threads: int = 1) -> dict:
    """Learn a subword model on ``raw``'s train split and segment every split into ``out``."""
    if method not in METHODS:
        raise CorpusError(f"unknown segmentation method {method!r}; known: {', '.join(METHODS)}")
    if sp_type not in SP_TYPES:
        raise CorpusError(f"unknown sentencepiece type {sp_type!r}; known: {', '.join(SP_TYPES)}")
    if vocab_size < 10:
        raise CorpusError(f"--vocab-size {vocab_size} is too small")
    if os.path.abspath(raw) == os.path.abspath(out):
        raise CorpusError(f"the output folder must differ from the input folder: {out}")
    langs = list(resolve_pair(raw, src, tgt))
    t0 = Timer()
    log(f"[bpe] validating {raw} ({'-'.join(langs)})")
    counts = validate_inputs(raw, langs, max_len)
    splits = list(counts)
    inputs = [f"{sp}.{x}" for sp in splits for x in langs + ["ids"]]
    params = {"version": VERSION, "method": method, "vocab_size": vocab_size, "joint": joint,
              "sp_type": sp_type if method == "sentencepiece" else None, "langs": langs, "seed": seed,
              "inputs": fingerprint(raw, inputs)}
    if not force and stamp_ok(out, "bpe", params):
        log(f"[bpe] {out} is up to date (same parameters and inputs); skipping (--force redoes it)")
        with open(os.path.join(out, "segment.json"), encoding="utf-8") as f:
            return json.load(f)
    random.seed(seed)
    groups = [langs] if joint else [[x] for x in langs]
    models: dict[str, str] = {}
    outputs: list[str] = []
    with OutputSet(out) as o:
        for group in groups:
            train_files = [os.path.join(raw, f"train.{x}") for x in group]
            tag = "" if joint else f".{group[0]}"
            t = Timer()
            if method == "sentencepiece":
                name = f"spm{tag}"
                log(f"[bpe] training sentencepiece {sp_type} ({vocab_size}) on {', '.join(train_files)}")
                _train_sentencepiece(train_files, o.path(name + ".model"), o.path(name + ".vocab"),
                                     vocab_size, sp_type, seed, threads)
                model_file = name + ".model"
                outputs += [name + ".model", name + ".vocab"]
            else:
                model_file = f"bpe{tag}.codes"
                log(f"[bpe] learning subword-nmt BPE ({vocab_size} symbols) on {', '.join(train_files)}")
                _train_subword_nmt(train_files, o.path(model_file), vocab_size)
                outputs.append(model_file)
            log(f"[bpe]   trained in {t}")
            for x in group:
                models[x] = model_file
        for sp in splits:
            for x in langs:
                lines = read_lines(os.path.join(raw, f"{sp}.{x}"))
                mpath = o.path(models[x])
                seg = (_apply_sentencepiece(mpath, lines, threads) if method == "sentencepiece"
                       else _apply_subword_nmt(mpath, lines))
                for i, s in enumerate(seg, 1):
                    if not s.strip():
                        raise CorpusError(f"{os.path.join(raw, f'{sp}.{x}')}:{i}: segment is empty after "
                                          f"{method} segmentation")
                o.write_lines(f"{sp}.{x}", seg)
                outputs.append(f"{sp}.{x}")
                n_tok = sum(len(s.split()) for s in seg)
                log(f"[bpe] {sp}.{x}: {len(seg)} lines, {n_tok} subword tokens")
            ids = os.path.join(raw, f"{sp}.ids")
            if os.path.exists(ids):
                o.copy(ids, f"{sp}.ids")
                outputs.append(f"{sp}.ids")
        info = {"method": method, "sp_type": params["sp_type"], "vocab_size": vocab_size, "joint": joint,
                "src": langs[0], "tgt": langs[1], "models": models, "raw": os.path.abspath(raw),
                "post_process": "sentencepiece" if method == "sentencepiece" else "subword_nmt",
                "lines": counts}
        o.write_text("segment.json", json.dumps(info, indent=1) + "\n")
        outputs.append("segment.json")
    write_stamp(out, "bpe", params, outputs)
    log(f"[bpe] wrote {out} in {t0}")
    return info

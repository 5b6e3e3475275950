r"""Translate raw text with a model exported by ``fairseq-ext-export`` (``fairseq-ext-translate``).

One command from raw source lines to detokenised output, decoded by CTranslate2 (the optional extra
``ctranslate2``) with the segmentation the training data was prepared with, which the export copied into
the model folder (:func:`fairseq_ext.tools.export.export.find_segmentation`)::

    fairseq-ext-translate --model ct2_int8 < raw.es > out.en
    fairseq-ext-translate --model ct2_int8 --input raw.es [--beam 5] [--batch-size 32] [--threads 1] \
        [--max-len-a 0] [--max-len-b 200] > out.en

Each input line (UTF-8, standard input by default; only ``\n`` ends a line) is segmented with the recorded
method of :mod:`fairseq_ext.tools.corpora.segment` (the sentencepiece model, the subword-nmt codes, or the word units
of :func:`~fairseq_ext.tools.corpora.segment.words`), translated, and the output pieces are joined back as fairseq's
``--post-process`` of that method does (sentencepiece: spaces dropped, ``▁`` becomes a space; subword_nmt:
``@@ `` continuations joined).  Exactly one output line per input line, in input order: an empty (or blank)
line gives an empty output line and is not sent to the model.

Decoding takes ``fairseq-interactive``'s defaults and meaning: beam 5; at least one token; at most
``max_len_a * (n + 1) + max_len_b`` tokens, with ``n`` the source pieces of the batch's longest line (``+ 1``:
its end of sentence), as fairseq's ``SequenceGenerator`` counts; sources over CTranslate2's 1,024 pieces
are cut there (a note names the line).  With ``--beam 1`` the output is the greedy output of
``fairseq-interactive`` on the same checkpoint (``tests/test_ct2_translate.py``); a wider beam is
CTranslate2's beam search (length-normalised scores, as fairseq's ``--lenpen 1``), which may pick another
hypothesis than fairseq's where finished hypotheses score nearly alike.  The input is read in
blocks of 16 batches, sorted by length within a block so that batches hold similar lengths; each block's
output is written and flushed before the next block is read (memory stays bounded, output streams).  Progress
lines go to stderr every 10 seconds, and a summary at the end.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Iterator, Optional, Sequence

from fairseq_ext.tools.common import ArgumentParser, Timer, ToolError, log, positive_int, read_json, require_file, run_cli
from fairseq_ext.tools.export.export import RECORD
from fairseq_ext.tools.hypotheses import remove_bpe
from fairseq_ext.tools.corpora.segment import words

BATCHES_PER_BLOCK = 16
MAX_INPUT_LENGTH = 1024  # CTranslate2's default max_input_length (fairseq's default --max-source-positions)
PROGRESS_SECONDS = 10.0


class Segmenter:
    """The source segmentation of an exported model (its record's ``segmentation``) and its undoing."""

    def __init__(self, model_dir: str, seg: dict) -> None:
        self.method = seg.get("method")
        self.post_process = seg.get("post_process") or ("subword_nmt" if self.method == "subword-nmt"
                                                        else "sentencepiece")
        path = os.path.join(model_dir, seg["model"]) if seg.get("model") else None
        if self.method in ("sentencepiece", "subword-nmt"):
            if path is None:
                raise ToolError(f"the {self.method} segmentation names no model file", os.path.join(model_dir, RECORD))
            require_file(path, "segmentation model")
        if self.method == "sentencepiece":
            import sentencepiece as spm

            self._sp = spm.SentencePieceProcessor(model_file=path)
        elif self.method == "subword-nmt":
            from subword_nmt.apply_bpe import BPE

            with open(path, encoding="utf-8") as f:
                self._bpe = BPE(f)
        elif self.method != "word":
            raise ToolError(f"unknown segmentation method {self.method!r}", os.path.join(model_dir, RECORD))

    def encode(self, lines: list[str]) -> list[list[str]]:
        """The source pieces of each line (as ``fairseq-ext-data bpe`` segmented the training data)."""
        if self.method == "sentencepiece":
            return self._sp.encode(lines, out_type=str)
        if self.method == "subword-nmt":
            return [self._bpe.segment(line).split() for line in lines]
        return [words(line).split() for line in lines]

    def decode(self, pieces: list[str]) -> str:
        """Output pieces joined back into text, as fairseq's ``--post-process`` of the method."""
        if self.post_process == "subword_nmt":
            return remove_bpe(" ".join(pieces), "subword_nmt")
        return "".join(pieces).replace("\u2581", " ").strip()


def load_export(model_dir: str) -> dict:
    """The provenance record of an exported model folder; it must carry a segmentation."""
    if not os.path.isdir(model_dir):
        raise ToolError(f"missing model folder: {model_dir}")
    path = os.path.join(model_dir, RECORD)
    if not os.path.isfile(path):
        raise ToolError(f"not a folder written by fairseq-ext-export (no {RECORD})", model_dir)
    record = read_json(path)
    if not record.get("segmentation"):
        raise ToolError("the export carries no segmentation model, so raw text cannot be segmented: export "
                        "again with --segmentation DIR (the folder fairseq-ext-data bpe wrote)", path)
    return record


def read_input(path: str) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 file (``-``: standard input), one line at a time; only ``\\n`` ends
    a line; invalid UTF-8 is a :class:`ToolError` naming the line."""
    name = "<stdin>" if path == "-" else path
    if path != "-":
        require_file(path)
    f = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for i, raw in enumerate(f, 1):
            raw = raw[:-1] if raw.endswith(b"\n") else raw
            try:
                yield i, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ToolError(f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})", name, i) from None
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def translate_pieces(translator, pieces: list[list[str]], beam: int, batch_size: int, max_len_a: float,
                     max_len_b: int) -> list[list[str]]:
    """The best hypothesis of each source, batches of ``batch_size`` sources of similar length."""
    order = sorted(range(len(pieces)), key=lambda i: len(pieces[i]))
    out: list[list[str]] = [[] for _ in pieces]
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        batch = [pieces[i] for i in idx]
        longest = min(max(len(p) for p in batch), MAX_INPUT_LENGTH)
        results = translator.translate_batch(
            batch, beam_size=beam, max_decoding_length=max(1, int(max_len_a * (longest + 1) + max_len_b)),
            min_decoding_length=1, max_input_length=MAX_INPUT_LENGTH)
        for i, r in zip(idx, results):
            out[i] = r.hypotheses[0]
    return out


def translate_lines(translator, segmenter: Segmenter, lines: list[tuple[int, str]], source: str, beam: int,
                    batch_size: int, max_len_a: float, max_len_b: int) -> list[str]:
    """One output line per ``(line number, text)``: empty for a blank line, else the detokenised translation."""
    todo = [(k, i, text) for k, (i, text) in enumerate(lines) if text.strip()]
    pieces = segmenter.encode([text for _, _, text in todo]) if todo else []
    keep = [(k, i, p) for (k, i, _), p in zip(todo, pieces) if p]
    for _, i, p in keep:
        if len(p) > MAX_INPUT_LENGTH:
            log(f"[translate] note: {source}:{i}: {len(p)} source pieces, cut to the first {MAX_INPUT_LENGTH}")
    hyps = translate_pieces(translator, [p for _, _, p in keep], beam, batch_size, max_len_a, max_len_b)
    out = [""] * len(lines)
    for (k, _, _), h in zip(keep, hyps):
        out[k] = segmenter.decode(h)
    return out


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-translate", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, metavar="DIR", help="model folder written by fairseq-ext-export")
    p.add_argument("--input", default="-", metavar="FILE", help="raw source text, one segment a line "
                                                                "(default: standard input)")
    p.add_argument("--beam", type=positive_int, default=5, help="beam size (default 5; 1: greedy)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences per batch (default 32)")
    p.add_argument("--threads", type=positive_int, default=1, help="CPU threads of CTranslate2 (default 1)")
    p.add_argument("--max-len-a", type=float, default=0.0,
                   help="at most max_len_a * source length + max_len_b output tokens (default 0, as fairseq)")
    p.add_argument("--max-len-b", type=positive_int, default=200, help="see --max-len-a (default 200, as fairseq)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    record = load_export(a.model)
    segmenter = Segmenter(a.model, record["segmentation"])
    try:
        import ctranslate2
    except ImportError:
        raise ToolError("ctranslate2 is not installed: pip install 'fairseq_ext[ctranslate2]'") from None
    translator = ctranslate2.Translator(a.model, device="cpu", intra_threads=a.threads, inter_threads=1)
    source = "<stdin>" if a.input == "-" else a.input
    log(f"[translate] {source} -> stdout: {a.model} ({record.get('source_lang')}-{record.get('target_lang')}, "
        f"{record['segmentation']['method']}, beam {a.beam}, batch {a.batch_size}, {a.threads} thread(s))")
    timer, last, n, n_empty = Timer(), time.time(), 0, 0
    block: list[tuple[int, str]] = []
    inputs = read_input(a.input)
    while True:
        line = next(inputs, None)
        if line is not None:
            block.append(line)
        if block and (line is None or len(block) == a.batch_size * BATCHES_PER_BLOCK):
            for out in translate_lines(translator, segmenter, block, source, a.beam, a.batch_size, a.max_len_a,
                                       a.max_len_b):
                sys.stdout.write(out + "\n")
            sys.stdout.flush()
            n += len(block)
            n_empty += sum(1 for _, text in block if not text.strip())
            block = []
            if time.time() - last >= PROGRESS_SECONDS:
                last = time.time()
                log(f"[translate] {n} lines, {n / max(timer.seconds(), 1e-9):.1f} lines/s")
        if line is None:
            break
    log(f"[translate] {n} lines ({n_empty} blank) in {timer} ({n / max(timer.seconds(), 1e-9):.1f} lines/s)")
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main(sys.argv[1:])

"""UNK-copy augmentation (Nguyen 2021 [T §3.3, §5.6.6]):
``python -m fairseq_ext.tools.corpora.unk_copy IN_DIR OUT_DIR --src SRC --tgt TGT --min-freq K``
(``fairseq-ext-unk-copy``).

BPE systems use the full vocabulary; "to ensure the model still learns how to deal with unknown
words, we trained on two copies of the training data: one unchanged, and one in which all rare words
(whose frequency is less than 5) were replaced with _UNK" [T §3.3] (ch. 5: "all types that appear
once", i.e. ``--min-freq 2``).

``IN_DIR`` is a segmented parallel folder (``corpora bpe`` or ``transfer joint-bpe`` output). The
type frequencies are counted on the segmented (BPE) tokens of its own training set, separately for
each side, and the replacement applies to both sides: a token whose
type occurs fewer than ``K`` times on its side becomes fairseq's ``<unk>``. ``OUT_DIR`` gets

* ``train.SRC`` / ``train.TGT``: the original lines, then the UNK'd copy (2N lines);
* ``train.ids``: the ids, then the same ids with the suffix ``+unk`` (ids stay unique);
* everything else (valid/test, model files) copied unchanged, except ``train.docs.jsonl`` (it
  would no longer match the flat files) and the ``train`` files of other languages;
* ``segment.json`` with an ``unk_copy`` record (and relative model paths made absolute when the
  model file is not next to it); ``unk_copy.json`` with the counts.

``python -m fairseq_ext.tools.corpora.corpora binarize OUT_DIR`` then binarizes it (with the original
dictionary: ``--fairseq-args "--srcdict DICT"``; ``<unk>`` maps to fairseq's unknown symbol).
Length filtering, if any, must come before. The thesis halves the number of
epochs to compensate for the doubled data.

Bad input is one :class:`~fairseq_ext.tools.common.ToolError` naming the file (and line); the CLI
prints ``error: ...`` and exits with status 2. The step is skipped when its stamp matches.
"""
from __future__ import annotations

import json
import os
from collections import Counter

from fairseq_ext.tools.common import (ArgumentParser, OutputSet, Timer, ToolError, log, read_json, read_lines,
                                      run_cli, stamp_ok, write_stamp)
from fairseq_ext.tools.corpora.folder_checks import DEFAULT_MAX_LEN, resolve_pair
from fairseq_ext.tools.corpora.segment import fingerprint, validate_inputs

VERSION = 1
UNK = "<unk>"
ID_SUFFIX = "+unk"


def rare_types(lines: list[str], min_freq: int) -> set[str]:
    """Types (whitespace tokens) occurring fewer than ``min_freq`` times in ``lines``."""
    counts: Counter = Counter()
    for line in lines:
        counts.update(line.split())
    return {w for w, c in counts.items() if c < min_freq}


def replace_rare(lines: list[str], rare: set[str], unk: str = UNK) -> list[str]:
    """``lines`` with every token in ``rare`` replaced by ``unk`` (tokens re-joined by one space)."""
    return [" ".join(unk if w in rare else w for w in line.split()) for line in lines]


def segment_info(inp: str, copied: list[str], info: dict, record: dict) -> dict:
    """``segment.json`` of the output: relative model paths other than the ``copied`` file names
    made absolute (e.g. joint-bpe's ``../bpe.codes``)."""
    info = dict(info)
    models = info.get("models")
    if isinstance(models, dict):
        fixed = {}
        for lang, m in models.items():
            if isinstance(m, str) and not os.path.isabs(m) and m not in copied:
                m = os.path.abspath(os.path.join(inp, m))
            fixed[lang] = m
        info["models"] = fixed
    if isinstance(info.get("lines"), dict) and "train" in info["lines"]:
        info["lines"] = dict(info["lines"], train=record["lines"]["train"])
    info["unk_copy"] = record
    return info


def unk_copy(inp: str, out: str, src: str | None = None, tgt: str | None = None, min_freq: int = 5,
             max_len: int | None = DEFAULT_MAX_LEN, force: bool = False) -> dict:
    """Write ``out`` = ``inp`` with the UNK copy appended to its training data (module doc);
    returns the ``unk_copy`` record (counts per side)."""
    if min_freq < 2:
        raise ToolError(f"--min-freq must be >= 2 (types seen fewer than K times become {UNK}; "
                          f"K={min_freq} would replace nothing)")
    if os.path.abspath(inp) == os.path.abspath(out):
        raise ToolError(f"the output folder must differ from the input folder: {out}")
    s, t = resolve_pair(inp, src, tgt)
    langs = [s, t]
    seg_path = os.path.join(inp, "segment.json")
    info = {}
    if os.path.isfile(seg_path):
        info = read_json(seg_path)
        if not isinstance(info, dict):
            raise ToolError("expected a JSON object", seg_path, 1)
    if "unk_copy" in info or os.path.isfile(os.path.join(inp, "unk_copy.json")):
        raise ToolError(f"{os.path.join(inp, 'unk_copy.json')}: {inp} already holds an UNK copy; "
                          f"start from the folder it was made from")
    t0 = Timer()
    log(f"[unk-copy] validating {inp} ({s}-{t})")
    counts = validate_inputs(inp, langs, max_len)
    names = [f"{sp}.{x}" for sp in counts for x in langs + ["ids"]]
    params = {"version": VERSION, "min_freq": min_freq, "src": s, "tgt": t, "inputs": fingerprint(inp, names)}
    record_path = os.path.join(out, "unk_copy.json")
    if not force and stamp_ok(out, "unk-copy", params) and os.path.isfile(record_path):
        log(f"[unk-copy] {out} is up to date; skipping (--force redoes it)")
        return read_json(record_path)
    n = counts["train"]
    record: dict = {"min_freq": min_freq, "from": os.path.abspath(inp), "src": s, "tgt": t,
                    "lines": {"train": 2 * n, "original": n}, "rare_types": {}, "types": {},
                    "replaced_tokens": {}, "tokens": {}}
    outputs: list[str] = []
    with OutputSet(out) as o:
        for x in langs:
            lines = read_lines(os.path.join(inp, f"train.{x}"))
            rare = rare_types(lines, min_freq)
            copy = replace_rare(lines, rare)
            o.write_lines(f"train.{x}", lines + copy)
            outputs.append(f"train.{x}")
            record["types"][x] = len({w for line in lines for w in line.split()})
            record["rare_types"][x] = len(rare)
            record["tokens"][x] = sum(len(line.split()) for line in lines)
            record["replaced_tokens"][x] = sum(w == UNK for line in copy for w in line.split()) - \
                sum(w == UNK for line in lines for w in line.split())
            log(f"[unk-copy] train.{x}: {len(rare)} of {record['types'][x]} types seen < {min_freq} times -> "
                f"{record['replaced_tokens'][x]} of {record['tokens'][x]} tokens {UNK} in the copy")
        ids = os.path.join(inp, "train.ids")
        if os.path.exists(ids):
            lines = read_lines(ids)
            o.write_lines("train.ids", lines + [v + ID_SUFFIX for v in lines])
            outputs.append("train.ids")
        for name in sorted(os.listdir(inp)):
            p = os.path.join(inp, name)
            if name.startswith((".", "train.")) or name == "segment.json" or ".tmp-" in name \
                    or not os.path.isfile(p):
                continue  # (train.docs.jsonl and train.<other language> would have N lines next to 2N)
            o.copy(p, name)
            outputs.append(name)
        if info:
            o.write_json("segment.json", segment_info(inp, outputs, info, record))
            outputs.append("segment.json")
        o.write_json("unk_copy.json", record)
        outputs.append("unk_copy.json")
    write_stamp(out, "unk-copy", params, outputs)
    log(f"[unk-copy] wrote {out} ({2 * n} training lines) in {t0}")
    return record


# --------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-unk-copy",
                                description="Append a copy of the training data with rare types replaced by "
                                            "<unk> (Nguyen 2021 UNK-copy augmentation).")
    p.add_argument("inp", help="segmented parallel folder (train.SRC, train.TGT, valid/test, segment.json)")
    p.add_argument("out", help="output folder")
    p.add_argument("--src", help="default: from the folder's segment.json")
    p.add_argument("--tgt")
    p.add_argument("--min-freq", type=int, default=5,
                   help="types seen fewer than K times on their side become <unk> in the copy "
                        "(5: ch. 3 BPE; 2 = hapaxes: ch. 5 BPE; default %(default)s)")
    p.add_argument("--max-len", type=int, default=DEFAULT_MAX_LEN,
                   help="refuse segments over this many tokens (default %(default)s; 0: no limit)")
    p.add_argument("--force", action="store_true", help="redo even when the stamp matches")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    rec = unk_copy(a.inp, a.out, a.src, a.tgt, min_freq=a.min_freq, max_len=a.max_len or None, force=a.force)
    print(json.dumps({k: rec[k] for k in ("lines", "rare_types", "replaced_tokens")}))
    return 0


def cli_main(argv: list[str] | None = None) -> None:
    """Console script ``fairseq-ext-unk-copy``: ``error: FILE:LINE: message`` and exit status 2 on bad input."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

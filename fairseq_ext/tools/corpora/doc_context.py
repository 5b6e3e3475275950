"""The generated target context of ``doc_translation`` (Maruf 2019 §3.2: the target memory is built from the
stage-1 sentence model's translations of the training documents, not from the references).

Turns ``fairseq-generate`` output on a split into the file ``--doc-generated-dir DIR`` expects::

    fairseq-generate DATA --user-dir fairseq_ext --task doc_translation --path stage1.pt \\
        --gen-subset train --decoding-algorithm greedy > gen.train.txt
    python -m fairseq_ext.tools.corpora.doc_context gen.train.txt --data DATA --split train --out DIR

writes ``DIR/{split}.{tgt}``: line i = the H- field (the hypothesis in target-dictionary units, so run
fairseq-generate *without* ``--post-process``/``--remove-bpe``) of sentence id i, for every example of the
binarized split, in dataset order. A missing or duplicated id is an error naming the file; the share of
units outside the target dictionary is reported (a high share means detokenised hypotheses).
"""
import os
from typing import Optional

from fairseq_ext.tools.common import ArgumentParser, ToolError, atomic_write, log, run_cli
from fairseq_ext.tools.hypotheses import format_ids, parse_generate_output


def split_languages(data: str, split: str, src: Optional[str], tgt: Optional[str]) -> tuple:
    """``(src, tgt)``: given, or read from the binarized file names ``{split}.{src}-{tgt}.*.bin``."""
    if src and tgt:
        return src, tgt
    pairs = set()
    for name in os.listdir(data):
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == split and parts[3] == "bin" and "-" in parts[1]:
            pairs.add(tuple(parts[1].split("-", 1)))
    if len(pairs) != 1:
        raise ToolError(f"cannot tell the language pair of split {split!r} ({len(pairs)} candidates); "
                        f"give --src and --tgt", path=data)
    a, b = pairs.pop()
    return src or a, tgt or b


def split_size(data: str, split: str, src: str, tgt: str) -> tuple:
    """``(number of examples, path)`` of the binarized target side of ``split``."""
    from fairseq.data import data_utils

    from fairseq_ext.data.binarized import split_prefix

    prefix = split_prefix(data, split, src, tgt, tgt) or split_prefix(data, split, src, tgt, src)
    if prefix is None:
        raise ToolError(f"no binarized split {split}.{src}-{tgt}.* (.bin/.idx)", path=data)
    ds = data_utils.load_indexed_dataset(prefix, None)
    if ds is None:
        raise ToolError("unreadable binarized data", path=prefix + ".bin")
    return len(ds), prefix + ".bin"


def generated_lines(gen_out: str, n: int, binarized: str = "the split") -> list:
    """The H- hypothesis of every sentence id ``0..n-1`` of ``gen_out`` (errors name the file)."""
    entries = parse_generate_output(gen_out)  # duplicated S-/T- lines, missing H- lines: ToolError
    beyond = [i for i in entries if i >= n]
    if beyond:
        raise ToolError(f"sentence ids {format_ids(beyond)} are beyond the {n} examples of {binarized} "
                        f"(output of another split?)", path=gen_out)
    missing = [i for i in range(n) if i not in entries]
    if missing:
        raise ToolError(f"no hypothesis for sentence ids {format_ids(missing)} of the {n} examples of {binarized} "
                        f"(was the whole split decoded, with --gen-subset and no --skip-invalid-size-inputs?)",
                        path=gen_out)
    return [entries[i].hypothesis("H") for i in range(n)]


def main(argv=None) -> int:
    ap = ArgumentParser(prog="fairseq-ext-doc-context", description=__doc__.split("\n\n")[0])
    ap.add_argument("generate_output", help="fairseq-generate stdout for the split (S-/T-/H- lines)")
    ap.add_argument("--data", required=True, help="the binarized folder (counts the split's examples)")
    ap.add_argument("--split", default="train", help="split that was decoded (--gen-subset; default train)")
    ap.add_argument("--src", default=None, help="source language (default: from the file names)")
    ap.add_argument("--tgt", default=None, help="target language (default: from the file names)")
    ap.add_argument("--out", required=True, help="the --doc-generated-dir folder; writes OUT/{split}.{tgt}")
    a = ap.parse_args(argv)
    if not os.path.isfile(a.generate_output):
        raise ToolError("no such file", path=a.generate_output)
    src, tgt = split_languages(a.data, a.split, a.src, a.tgt)
    n, binarized = split_size(a.data, a.split, src, tgt)
    lines = generated_lines(a.generate_output, n, binarized)
    bad = [i for i, h in enumerate(lines) if "\n" in h or "\r" in h]
    if bad:
        raise ToolError(f"hypotheses of ids {format_ids(bad)} contain line breaks", path=a.generate_output)
    vocab = set()
    dict_path = os.path.join(a.data, f"dict.{tgt}.txt")
    if os.path.exists(dict_path):
        with open(dict_path, encoding="utf-8") as f:
            vocab = {ln.rsplit(" ", 1)[0] for ln in f if ln.strip()}
    os.makedirs(a.out, exist_ok=True)
    out = os.path.join(a.out, f"{a.split}.{tgt}")
    with atomic_write(out) as f:
        for h in lines:
            f.write(h + "\n")
    msg = f"[doc_context] {n} translations -> {out}"
    if vocab:
        units = [u for h in lines for u in h.split()]
        oov = sum(1 for u in units if u not in vocab)
        msg += f" ({100 * oov / max(len(units), 1):.1f}% of {len(units)} units outside {dict_path})"
    log(msg)
    return 0


def cli_main(argv=None) -> None:
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

"""Extract and inspect the lexicon learned by the lexical module of Nguyen (2021) ch. 5 (§5.6.5, Table 5.8).

"One byproduct of lex is the lexicon, which we can extract and examine simply by feeding each source
word embedding to the FFNN module and calculating p^ℓ(y) = softmax(W^ℓ h^ℓ + b^ℓ)." With all attention on
one source word f, f^ℓ = tanh(f) and h^ℓ = FIXNORM_r(tanh(W f^ℓ) + f^ℓ); the model's target-vocabulary
mask, if it has one, is applied before the softmax.

Usage (any checkpoint of ``transformer_lex`` or ``lstm_luong`` trained with ``--lexical``)::

    python -m fairseq_ext.tools.analysis.lexicon --path ckpt/checkpoint_best.pt --data data-bin \\
        [--words befektetéseinek kutatás-fejlesztésre | --words-file words.txt | --limit 50] \\
        [--topk 5] [--format table|tsv|json] [--output lexicon.tsv]

Without ``--words``/``--words-file`` every source type is listed (dictionary order, i.e. by training
frequency; specials and fairseq's padding symbols skipped), or the first ``--limit`` of them.
``table`` prints ``word → translation (p), …`` as in Table 5.8; ``tsv`` one ``src tgt p rank`` row per
entry; ``json`` one object per source word.
"""
import sys
from typing import Dict, List, Sequence, Tuple

import torch

from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.tools.common import ArgumentParser, ToolError, atomic_write, json_line, log, read_lines, run_cli


def load_model(path: str, data: str, cpu: bool = True, overrides: Dict = None):
    """(model, task) from a checkpoint (frozen, eval mode), with the data folder of the dictionaries."""
    arg_overrides = {"data": data}
    arg_overrides.update(overrides or {})
    models, _cfg, task = load_ensemble([path], arg_overrides=arg_overrides, frozen=True,
                                       use_cuda=not cpu and torch.cuda.is_available())
    return models[0], task


def source_ids(src_dict, words: Sequence[str] = None, limit: int = None) -> Tuple[List[int], List[str]]:
    """Dictionary ids of ``words`` (unknown words reported and skipped), or of all regular types."""
    if words:
        ids, missing = [], []
        for w in words:
            i = src_dict.index(w)
            if i == src_dict.unk() and w != src_dict.unk_word:
                missing.append(w)
            else:
                ids.append(i)
        if missing:
            log(f"[lexicon] not in the source dictionary: {' '.join(missing)}")
    else:
        ids = [i for i in range(src_dict.nspecial, len(src_dict))
               if not src_dict[i].startswith("madeupword")]
        if limit:
            ids = ids[:limit]
    return ids, [src_dict[i] for i in ids]


@torch.no_grad()
def extract_lexicon(model, src_dict, tgt_dict, ids: Sequence[int], topk: int = 5, chunk: int = 512):
    """``[(source word, [(target word, p), …]), …]``: the top-k of p^ℓ(· | f) for each id."""
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(ids), chunk):
        part = torch.tensor(ids[start:start + chunk], dtype=torch.long, device=device)
        probs = model.lexicon_log_probs(part).exp()
        p, idx = probs.topk(min(topk, probs.size(-1)), dim=-1)
        for row, src_id in enumerate(part.tolist()):
            cands = [(tgt_dict[j], float(q)) for j, q in zip(idx[row].tolist(), p[row].tolist())]
            out.append((src_dict[src_id], cands))
    return out


def format_lexicon(entries, fmt: str = "table") -> str:
    lines = []
    for src, cands in entries:
        if fmt == "table":
            lines.append(f"{src}\t" + ", ".join(f"{t} ({p:.3f})" for t, p in cands))
        elif fmt == "tsv":
            lines += [f"{src}\t{t}\t{p:.6g}\t{r}" for r, (t, p) in enumerate(cands, 1)]
        elif fmt == "json":
            obj = {"source": src, "translations": [{"target": t, "p": p} for t, p in cands]}
            lines.append(json_line(obj))
        else:
            raise ValueError(f"unknown format {fmt!r}")
    return "\n".join(lines) + ("\n" if lines else "")


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="fairseq-ext-lexicon", description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", required=True, help="checkpoint of a model with a lexical module")
    ap.add_argument("--data", required=True, help="binarized data folder (for the dictionaries)")
    ap.add_argument("--words", nargs="+", help="source words to look up")
    ap.add_argument("--words-file", help="file with one source word per line (first field)")
    ap.add_argument("--limit", type=int, help="without --words: only the first N (most frequent) types")
    ap.add_argument("--topk", type=int, default=5, help="translations per source word (default 5)")
    ap.add_argument("--format", choices=("table", "tsv", "json"), default="table")
    ap.add_argument("--output", help="write here instead of stdout")
    ap.add_argument("--source-lang", help="override the checkpoint's source language")
    ap.add_argument("--target-lang", help="override the checkpoint's target language")
    ap.add_argument("--gpu", action="store_true", help="run on CUDA if available")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)

    overrides = {k: v for k, v in (("source_lang", args.source_lang), ("target_lang", args.target_lang)) if v}
    model, task = load_model(args.path, args.data, cpu=not args.gpu, overrides=overrides)
    if not hasattr(model, "lexicon_log_probs") or getattr(model.decoder, "lexical", None) is None:
        raise ToolError("the model has no lexical module (train transformer_lex / lstm_luong with --lexical)",
                        args.path)
    words = list(args.words or [])
    if args.words_file:
        words += [line.split()[0] for line in read_lines(args.words_file) if line.split()]
    ids, _ = source_ids(task.source_dictionary, words or None, args.limit)
    entries = extract_lexicon(model, task.source_dictionary, task.target_dictionary, ids, args.topk)
    text = format_lexicon(entries, args.format)
    if args.output:
        with atomic_write(args.output) as f:
            f.write(text)
        log(f"[lexicon] {len(entries)} source words -> {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def cli_main(argv=None) -> None:
    """Console script ``fairseq-ext-lexicon``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

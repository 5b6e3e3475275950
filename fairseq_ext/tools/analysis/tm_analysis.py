r"""SEG-NMT analyses (Gu thesis ch. 4) as an offline tool: BLEU per fuzzy-score bin of the top-1 retrieved pair
(Fig. 4.3), BLEU against the number of retrieved pairs (Fig. 4.4), the gate ζ_t of a few translations
(Fig. 4.5), and the JRC-Acquis dev/test split with its length limits (§4.5, Table 4.1).

Usage::

    python -m fairseq_ext.tools.analysis.tm_analysis fuzzy-bins --side BIN/test.tm.jsonl --ref test.en \
        --hyp NMT=nmt/generate-test.txt --hyp SEG-NMT=seg/generate-test.txt [--bins 0,0.3,0.5,0.7,1.0]
    python -m fairseq_ext.tools.analysis.tm_analysis k-sweep --side BIN/test.tm.jsonl --ref test.en \
        --hyp 1=k1/generate-test.txt ... --hyp adaptive=adaptive/... [--baseline NMT=nmt/generate-test.txt]
    python -m fairseq_ext.tools.analysis.tm_analysis gate --export zeta.jsonl [--n 3 | --ids 4,17]
    python -m fairseq_ext.tools.analysis.tm_analysis split-corpus --prefix JRC/en-fr/all --langs en fr \
        --out JRC/en-fr [--dev 3000] [--test 3000] [--max-len-train 80] [--max-len-test 100]

``fuzzy-bins`` bins examples by the fuzzy score (Eq. 4.1) of their top-1 pair and scores each bin with
sacreBLEU; ``k-sweep`` compares decodings with ``--tm-topk K`` and the adaptive selection; ``gate`` reads the
``--tm-export`` file of ``fairseq-generate``; ``split-corpus`` samples dev/test, then applies the length
limits. Bad input prints one ``error: ...`` line, exit status 2; matplotlib only when a plot is asked for.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

from fairseq_ext.tools.analysis.tm_bleu import (DEFAULT_FUZZY_EDGES, format_fuzzy_bins, format_k_sweep, fuzzy_bins,
                                                k_of, k_sweep, plot_fuzzy_bins, plot_k_sweep)
from fairseq_ext.tools.analysis.tm_gate import format_gate, gate_examples
from fairseq_ext.tools.analysis.tm_split import split_corpus
from fairseq_ext.tools.common import (
    ArgumentParser, ToolError, atomic_write, json_text, log, positive_int, read_jsonl, read_lines, run_cli, write_json,
)

__all__ = ["build_parser", "main", "cli_main"]


def _named(specs: Sequence[str], what: str) -> list[tuple[str, str]]:
    out, seen = [], set()
    for s in specs:
        name, sep, path = s.partition("=")
        if not sep or not name or not path:
            raise ToolError(f"{what} {s!r}: expected NAME=FILE")
        if name in seen:
            raise ToolError(f"{what} {name!r} is given twice")
        seen.add(name)
        out.append((name, path))
    return out


def _load_refs(paths: Sequence[str]) -> list[list[str]]:
    from fairseq_ext.tools.evaluation.bleu import load_references

    return load_references(list(paths))


def _load_hyps(path: str, n: int, tokenised: bool, remove_bpe: Optional[str]) -> list[str]:
    from fairseq_ext.tools.hypotheses import align_to_references, load_hypotheses

    hyps = load_hypotheses(path, field="H" if tokenised else "D", remove_bpe_kind=remove_bpe)
    return align_to_references(hyps, n, source=str(path))


def _check_lengths(entries, streams, side: str, ref: str) -> None:
    if len(entries) != len(streams[0]):
        raise ToolError(f"{len(entries)} examples in the side file but {len(streams[0])} reference lines in {ref} "
                        f"(another split?)", side)


# ------------------------------------------------------------------------------------------ CLI
def _add_scoring(p: ArgumentParser) -> None:
    p.add_argument("--side", required=True, help="the split's {split}.tm.jsonl side file")
    p.add_argument("--ref", action="append", required=True, metavar="FILE",
                   help="reference file, one sentence a line (repeat for several references)")
    p.add_argument("--tokenised", "--tokenized", action="store_true",
                   help="multi-bleu style BLEU on whitespace tokens (reads the H- lines)")
    p.add_argument("--lowercase", "-lc", action="store_true", help="case-insensitive scores")
    p.add_argument("--remove-bpe", choices=("sentencepiece", "subword_nmt"), default=None,
                   help="strip subword markers from the hypotheses first")
    p.add_argument("--json", metavar="FILE", help="also write all numbers as JSON")
    p.add_argument("--md", metavar="FILE", help="also write the Markdown table here")
    p.add_argument("--plot", metavar="PNG", help="draw the figure (matplotlib)")
    p.add_argument("--title", help="plot title")


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m fairseq_ext.tools.analysis.tm_analysis", allow_abbrev=False,
                        description="SEG-NMT analyses (Gu ch. 4): BLEU per fuzzy bin (Fig. 4.3), BLEU vs the "
                                    "number of retrieved pairs (Fig. 4.4), the gate of a few sentences (Fig. 4.5), "
                                    "the JRC-Acquis split (§4.5).")
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fuzzy-bins", allow_abbrev=False, help="BLEU per top-1 fuzzy-score bin (Fig. 4.3)")
    _add_scoring(f)
    f.add_argument("--hyp", action="append", required=True, metavar="NAME=FILE",
                   help="a system's hypotheses (repeat; the first is the reference point of the differences)")
    f.add_argument("--bins", default=",".join(f"{e:g}" for e in DEFAULT_FUZZY_EDGES),
                   help="bin edges (default 0,0.3,0.5,0.7,1; [a,b), the last [a,b])")
    f.add_argument("--n-bootstrap", type=int, default=0, metavar="N",
                   help="paired bootstrap (N resamples) of every system against the first inside each bin (0: off)")
    k = sub.add_parser("k-sweep", allow_abbrev=False, help="BLEU vs the number of retrieved pairs (Fig. 4.4)")
    _add_scoring(k)
    k.add_argument("--hyp", action="append", required=True, metavar="K=FILE",
                   help="hypotheses decoded with --tm-topk K (name: K) or --tm-selection adaptive (name: adaptive)")
    k.add_argument("--baseline", metavar="NAME=FILE", help="a system without memory (horizontal line, Δ column)")
    k.add_argument("--max-k", type=positive_int, default=16, help="the task's --tm-max-k (default 16)")
    g = sub.add_parser("gate", allow_abbrev=False, help="ζ_t per output token of a few sentences (Fig. 4.5)")
    g.add_argument("--export", required=True, help="the --tm-export file of fairseq-generate (JSON lines)")
    g.add_argument("--ids", help="comma-separated sentence ids (default: the --n with the highest top-1 fuzzy)")
    g.add_argument("--n", type=positive_int, default=3, help="sentences to show (default 3)")
    g.add_argument("--ref", help="reference file (shown)")
    g.add_argument("--memory-tgt", help="the memory's target side (the retrieved target is shown)")
    g.add_argument("--threshold", type=float, default=0.5, help="ζ shown in bold from here (default 0.5)")
    g.add_argument("--md", metavar="FILE", help="also write the Markdown here")
    g.add_argument("--json", metavar="FILE", help="also write the chosen records as JSON")
    s = sub.add_parser("split-corpus", allow_abbrev=False,
                       help="dev/test sampling and length limits of an aligned corpus (§4.5)")
    s.add_argument("--prefix", required=True, help="the corpus is PREFIX.{a} and PREFIX.{b}, line-aligned")
    s.add_argument("--langs", nargs=2, required=True, metavar=("A", "B"))
    s.add_argument("--out", required=True, help="writes OUT/raw/ (and OUT/tok/ with --tokenize moses)")
    s.add_argument("--dev", type=positive_int, default=3000)
    s.add_argument("--test", type=positive_int, default=3000)
    s.add_argument("--max-len-train", type=positive_int, default=80)
    s.add_argument("--max-len-test", type=positive_int, default=100)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--tokenize", choices=("none", "moses"), default="none")
    return ap


def _write_md(path: Optional[str], text: str) -> None:
    if path:
        with atomic_write(path) as fh:
            fh.write(text + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "split-corpus":
        st = split_corpus(args.prefix, args.langs, args.out, dev=args.dev, test=args.test,
                          max_len_train=args.max_len_train, max_len_test=args.max_len_test, seed=args.seed,
                          tokenize=args.tokenize)
        sys.stdout.write(json_text(st, indent=1))
        return 0
    if args.command == "gate":
        records = read_jsonl(args.export)
        ids = None
        if args.ids:
            try:
                ids = [int(x) for x in args.ids.split(",") if x.strip()]
            except ValueError:
                raise ToolError(f"--ids: not a comma-separated list of integers: {args.ids!r}") from None
        ex = gate_examples(records, ids, args.n)
        text = format_gate(ex, read_lines(args.ref) if args.ref else None,
                           read_lines(args.memory_tgt) if args.memory_tgt else None, args.threshold)
        print(text)
        _write_md(args.md, text)
        if args.json:
            write_json(args.json, ex)
        return 0
    from fairseq_ext.tools.tm.retrieval import load_side, parse_bins

    entries, _ = load_side(args.side)
    streams = _load_refs(args.ref)
    _check_lengths(entries, streams, args.side, args.ref[0])
    n = len(streams[0])

    def load(path):
        return _load_hyps(path, n, args.tokenised, args.remove_bpe)

    if args.command == "fuzzy-bins":
        systems = {name: load(path) for name, path in _named(args.hyp, "--hyp")}
        res = fuzzy_bins(entries, streams, systems, parse_bins(args.bins), tokenised=args.tokenised,
                         lowercase=args.lowercase, n_bootstrap=args.n_bootstrap)
        text = format_fuzzy_bins(res)
        if args.plot:
            res["plot"] = plot_fuzzy_bins(res, args.plot, args.title)
    else:
        points = {name: load(path) for name, path in _named(args.hyp, "--hyp")}
        for name in points:
            k_of(name)
        base = None
        if args.baseline:
            (bname, bpath), = _named([args.baseline], "--baseline")
            base = (bname, load(bpath))
        res = k_sweep(entries, streams, points, base, max_k=args.max_k, tokenised=args.tokenised,
                      lowercase=args.lowercase)
        text = format_k_sweep(res)
        if args.plot:
            res["plot"] = plot_k_sweep(res, args.plot, args.title)
    res.update(side=args.side, ref_files=list(args.ref), hyp_files=dict(_named(args.hyp, "--hyp")))
    print(text)
    _write_md(args.md, text)
    if args.json:
        write_json(args.json, res)
    if args.plot:
        log(f"[tm_analysis] plot -> {args.plot}")
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m fairseq_ext.tools.analysis.tm_analysis``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

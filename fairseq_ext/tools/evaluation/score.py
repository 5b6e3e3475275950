r"""``fairseq-ext-score``: corpus BLEU / chrF of hypothesis files, paired bootstrap, BLEU by source length, OOV
recall, METEOR and d-BLEU, via sacreBLEU 2.6.

This module reads the files (fairseq-generate output or plain hypotheses, aligned to the references by sentence
id) and runs the metrics of its neighbours in :mod:`fairseq_ext.tools.evaluation`: ``bleu`` (corpus BLEU/chrF),
``significance`` (paired bootstrap), ``length_buckets``, ``oov``, ``meteor`` and ``doc_metrics``. Python API:
``score_files``, ``compare_files``, ``oov_files``, ``meteor_files``. CLI::

    python -m fairseq_ext.tools.evaluation.score score --hyp gen.out --ref test.en [--ref test.kjv] \
        [--src test.es] [--ids test.ids] [--tokenised] [--remove-bpe sentencepiece|subword_nmt] [--json out.json]
    python -m fairseq_ext.tools.evaluation.score compare --baseline gen_base.out --system gen_a.out --ref test.en
    python -m fairseq_ext.tools.evaluation.score oov --hyp gen.out --ref test.en --dict bin/dict.en.txt
    python -m fairseq_ext.tools.evaluation.score meteor --hyp gen.out --ref test.en
    python -m fairseq_ext.tools.evaluation.score dbleu --hyp gen.out --ref test.en --ids test.ids

``dbleu`` is document-level BLEU (:mod:`fairseq_ext.tools.evaluation.doc_metrics`); ``meteor`` is nltk's METEOR
with exact and stem matching only, labelled ``METEOR (exact+stem, nltk; not comparable to METEOR 1.5)``;
``--tokenised`` is the theses' ``multi-bleu.perl`` setting (``tokenize='none'``). Installed:
``fairseq-ext-score``. Bad input prints one ``error: ...`` line, exit status 2. Imports neither torch nor
fairseq.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Optional, Sequence, Union

from fairseq_ext.tools.common import ArgumentParser, ToolError, read_lines, run_cli, write_json
from fairseq_ext.tools.evaluation.bleu import load_references, score_corpus
from fairseq_ext.tools.evaluation.length_buckets import bleu_by_length, edge_str, format_buckets, parse_edges
from fairseq_ext.tools.evaluation.meteor import meteor_corpus
from fairseq_ext.tools.evaluation.oov import format_oov, oov_recall, read_dictionary_words
from fairseq_ext.tools.evaluation.significance import (DEFAULT_N_BOOTSTRAP, DEFAULT_SEED, format_comparison,
                                                       paired_bootstrap)
from fairseq_ext.tools.hypotheses import (
    REMOVE_BPE_CHOICES,
    ScoringError,
    align_to_references,
    load_hypotheses,
    read_ids,
    remove_bpe,
)

__all__ = [
    "ScoringError",
    "ToolError",
    "load_hypotheses",
    "load_references",
    "score_corpus",
    "score_files",
    "compare_files",
    "oov_files",
    "meteor_files",
    "format_score",
    "remove_bpe",
    "build_parser",
    "cli_main",
    "main",
]


def format_score(result: Mapping[str, Any], name: Optional[str] = None) -> str:
    """The human-readable block ``score`` prints."""
    lines = []
    if name:
        refs = result.get("ref_files")
        ref_part = f", {result['n_refs']} reference(s)" + (f": {', '.join(refs)}" if refs else "")
        lines.append(f"{name} ({result['n_sentences']} sentences{ref_part})")
    lines.append(result["bleu_str"])
    lines.append(result["chrf_str"])
    lines.append(f"{result['bleu_label']} signature: {result['bleu_signature']}")
    lines.append(f"{result['chrf_label']} signature: {result['chrf_signature']}")
    return "\n".join(lines)


# ------------------------------------------------------------------------ file-level helpers
def _references(
    refs: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
) -> tuple[list[Union[str, os.PathLike]], list[list[str]]]:
    """The reference paths (one or several) and their streams, one list of lines per file."""
    ref_paths = [refs] if isinstance(refs, (str, os.PathLike)) else list(refs)
    return ref_paths, load_references(ref_paths)


def _aligned_hyps(
    path: Union[str, os.PathLike],
    n_refs: int,
    ids: Optional[Union[str, os.PathLike]],
    tokenised: bool,
    remove_bpe_kind: Optional[str],
    field: str,
    fmt: str,
) -> list[str]:
    id_list = read_ids(ids)
    if field == "auto":
        field = "H" if tokenised else "D"
    hyps = load_hypotheses(path, id_list, fmt=fmt, field=field, remove_bpe_kind=remove_bpe_kind)
    return align_to_references(hyps, n_refs, id_list, source=str(path))


def score_files(
    hyp: Union[str, os.PathLike],
    refs: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
    *,
    src: Optional[Union[str, os.PathLike]] = None,
    ids: Optional[Union[str, os.PathLike]] = None,
    tokenised: bool = False,
    lowercase: bool = False,
    remove_bpe: Optional[str] = None,
    field: str = "auto",
    fmt: str = "auto",
    chrf_word_order: int = 0,
    edges: Union[str, Sequence[float], None] = None,
    plot: Optional[Union[str, os.PathLike]] = None,
    plot_title: Optional[str] = None,
) -> dict[str, Any]:
    """:func:`score_corpus` from files; with ``src`` (and ``edges``) also :func:`bleu_by_length`
    (key ``buckets``); with ``plot`` the bucket PNG (needs ``src``)."""
    ref_paths, streams = _references(refs)
    hyps = _aligned_hyps(hyp, len(streams[0]), ids, tokenised, remove_bpe, field, fmt)
    res = score_corpus(hyps, streams, tokenised, lowercase=lowercase, chrf_word_order=chrf_word_order)
    res.update(hyp_file=str(hyp), ref_files=[str(p) for p in ref_paths], remove_bpe=remove_bpe)
    if (edges is not None or plot is not None) and src is None:
        raise ToolError("BLEU by source length (--buckets/--plot) needs --src")
    if src is not None:
        src_lines = read_lines(src)
        if len(src_lines) != len(hyps):
            raise ToolError(f"{src}: {len(src_lines)} lines but the reference has {len(hyps)}")
        edges_f = parse_edges(edges)
        rows = bleu_by_length(
            src_lines, hyps, streams, edges_f,
            tokenised=tokenised, lowercase=lowercase, chrf_word_order=chrf_word_order,
        )
        res.update(src_file=str(src), bucket_edges=[edge_str(e) for e in edges_f], buckets=rows)
        if plot is not None:
            from fairseq_ext.tools.plots import plot_length_buckets

            plot_length_buckets(
                rows, plot, title=plot_title or os.path.basename(str(hyp)),
                bleu_label=res["bleu_label"], chrf_label=res["chrf_label"],
            )
            res["plot"] = str(plot)
    return res


def compare_files(
    baseline: Union[str, os.PathLike],
    systems: Sequence[Union[str, os.PathLike]],
    refs: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
    *,
    ids: Optional[Union[str, os.PathLike]] = None,
    tokenised: bool = False,
    lowercase: bool = False,
    remove_bpe: Optional[str] = None,
    field: str = "auto",
    fmt: str = "auto",
    chrf_word_order: int = 0,
    n: int = DEFAULT_N_BOOTSTRAP,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """:func:`paired_bootstrap` from files; systems are named by their paths."""
    ref_paths, streams = _references(refs)
    n_ref = len(streams[0])
    base = _aligned_hyps(baseline, n_ref, ids, tokenised, remove_bpe, field, fmt)
    named: dict[str, list[str]] = {}
    for p in systems:
        key = str(p)
        if key in named or key == str(baseline):
            raise ToolError(f"{p}: given more than once")
        named[key] = _aligned_hyps(p, n_ref, ids, tokenised, remove_bpe, field, fmt)
    res = paired_bootstrap(
        base, named, streams, n=n, seed=seed, tokenised=tokenised, lowercase=lowercase,
        chrf_word_order=chrf_word_order, baseline_name=str(baseline),
    )
    res.update(ref_files=[str(p) for p in ref_paths], remove_bpe=remove_bpe)
    return res


def oov_files(
    hyps: Sequence[Union[str, os.PathLike]],
    ref: Union[str, os.PathLike],
    dictionary: Union[str, os.PathLike],
    *,
    src: Optional[Union[str, os.PathLike]] = None,
    ids: Optional[Union[str, os.PathLike]] = None,
    field: str = "D",
    fmt: str = "auto",
) -> dict[str, Any]:
    """:func:`oov_recall` for each hypothesis file against one reference file and a fairseq dictionary."""
    refs = load_references([ref])[0]
    srcs = None
    if src is not None:
        srcs = read_lines(src)
        if len(srcs) != len(refs):
            raise ToolError(f"{src}: {len(srcs)} lines but {ref} has {len(refs)}")
    vocab = read_dictionary_words(dictionary)
    systems = {}
    for p in hyps:
        aligned = _aligned_hyps(p, len(refs), ids, False, None, field, fmt)
        systems[str(p)] = oov_recall(aligned, refs, vocab, srcs)
    return {"ref_file": str(ref), "dict": str(dictionary), "src_file": None if src is None else str(src),
            "systems": systems}


def meteor_files(
    hyp: Union[str, os.PathLike],
    refs: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
    *,
    ids: Optional[Union[str, os.PathLike]] = None,
    tokenised: bool = False,
    remove_bpe: Optional[str] = None,
    field: str = "auto",
    fmt: str = "auto",
) -> dict[str, Any]:
    """:func:`meteor_corpus` from files (hypotheses aligned by sentence id as for ``score``)."""
    ref_paths, streams = _references(refs)
    hyps = _aligned_hyps(hyp, len(streams[0]), ids, tokenised, remove_bpe, field, fmt)
    res = meteor_corpus(hyps, streams, tokenised)
    res.update(hyp_file=str(hyp), ref_files=[str(p) for p in ref_paths], remove_bpe=remove_bpe)
    return res


# ------------------------------------------------------------------------------------- CLI
def _common(p: ArgumentParser) -> None:
    p.add_argument("--ref", action="append", required=True, metavar="FILE",
                   help="reference file, one sentence a line; repeat for several references")
    p.add_argument("--ids", metavar="FILE",
                   help="line i = id of sentence i (e.g. verse ids); maps fairseq's numeric ids")
    p.add_argument("--tokenised", "--tokenized", action="store_true",
                   help="multi-bleu.perl style BLEU on whitespace tokens (tokenize=none); "
                        "reads H- lines of fairseq-generate output")
    p.add_argument("--lowercase", "-lc", action="store_true", help="case-insensitive scores")
    p.add_argument("--remove-bpe", choices=REMOVE_BPE_CHOICES, default=None,
                   help="strip subword markers from the hypotheses first")
    p.add_argument("--field", choices=("auto", "D", "H"), default="auto",
                   help="fairseq-generate line to score (auto: D, or H with --tokenised)")
    p.add_argument("--format", dest="fmt", choices=("auto", "fairseq", "text"), default="auto",
                   help="hypothesis file format (auto-detected from H-/D- lines)")
    p.add_argument("--chrf-word-order", type=int, default=0, help="2 gives chrF++ (default 0)")
    p.add_argument("--json", metavar="FILE", help="also write all numbers as JSON")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="fairseq-ext-score",
        description="sacreBLEU BLEU/chrF, paired bootstrap and BLEU by source length "
                    "for fairseq-generate output or plain hypothesis files.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="corpus BLEU and chrF (optionally by source length)")
    s.add_argument("--hyp", required=True, metavar="FILE",
                   help="fairseq-generate output or hypotheses, one a line")
    _common(s)
    s.add_argument("--src", metavar="FILE", help="source file: BLEU by source-length bucket")
    s.add_argument("--buckets", metavar="EDGES", default=None,
                   help="bucket edges of source length, default 0,10,20,30,40,50,inf")
    s.add_argument("--plot", metavar="PNG", help="bar plot of BLEU/chrF per bucket (needs --src)")
    s.add_argument("--plot-title", default=None)
    c = sub.add_parser("compare", help="paired bootstrap: baseline vs system(s)")
    c.add_argument("--baseline", required=True, metavar="FILE")
    c.add_argument("--system", action="append", required=True, metavar="FILE",
                   help="system output; repeat for several")
    _common(c)
    c.add_argument("--n-bootstrap", type=int, default=DEFAULT_N_BOOTSTRAP,
                   help=f"bootstrap resamples (default {DEFAULT_N_BOOTSTRAP})")
    c.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"default {DEFAULT_SEED}")
    o = sub.add_parser("oov", help="recall of the reference's out-of-vocabulary words (copying)")
    o.add_argument("--hyp", action="append", required=True, metavar="FILE",
                   help="fairseq-generate output or hypotheses (detokenised D- lines); repeat for several")
    o.add_argument("--ref", required=True, metavar="FILE", help="reference, whitespace tokens")
    o.add_argument("--dict", required=True, metavar="FILE",
                   help="the model's target dictionary (fairseq dict.*.txt): OOV = not in it")
    o.add_argument("--src", metavar="FILE", help="source: also the recall of OOVs that occur in it")
    o.add_argument("--ids", metavar="FILE", help="as for score")
    o.add_argument("--field", choices=("D", "H"), default="D")
    o.add_argument("--json", metavar="FILE", help="also write all numbers as JSON")
    m = sub.add_parser("meteor", help="METEOR, exact + stem matching only (nltk; not METEOR 1.5)")
    m.add_argument("--hyp", action="append", required=True, metavar="FILE",
                   help="fairseq-generate output or hypotheses, one a line; repeat for several systems")
    m.add_argument("--ref", action="append", required=True, metavar="FILE",
                   help="reference file; repeat for several references (best per sentence)")
    m.add_argument("--ids", metavar="FILE", help="as for score")
    m.add_argument("--tokenised", "--tokenized", action="store_true",
                   help="split on whitespace (reads H- lines) instead of sacreBLEU's 13a tokenizer")
    m.add_argument("--remove-bpe", choices=REMOVE_BPE_CHOICES, default=None)
    m.add_argument("--field", choices=("auto", "D", "H"), default="auto")
    m.add_argument("--format", dest="fmt", choices=("auto", "fairseq", "text"), default="auto")
    m.add_argument("--json", metavar="FILE", help="also write the score (and sentence scores) as JSON")
    d = sub.add_parser("dbleu", help="document-level BLEU: BLEU of the joined documents "
                                     "(fairseq_ext.tools.evaluation.doc_metrics)")
    d.add_argument("--hyp", required=True, metavar="FILE", help="fairseq-generate output or hypotheses, one a line")
    _common(d)
    d.add_argument("--doc-id-pattern", default=None, metavar="P",
                   help="how a line id names its document, as doc_translation's --doc-id-pattern "
                        "(default: its default)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``fairseq-ext-score [score|compare|oov|meteor|dbleu] ...``; bad input raises :class:`ToolError`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("score", "compare", "oov", "meteor", "dbleu", "-h", "--help"):
        argv.insert(0, "score")  # `fairseq-ext-score --hyp ... --ref ...` means `score`
    args = build_parser().parse_args(argv)
    if args.command == "score":
        res = score_files(
            args.hyp, args.ref, src=args.src, ids=args.ids, tokenised=args.tokenised,
            lowercase=args.lowercase, remove_bpe=args.remove_bpe, field=args.field,
            fmt=args.fmt, chrf_word_order=args.chrf_word_order, edges=args.buckets,
            plot=args.plot, plot_title=args.plot_title,
        )
        print(format_score(res, name=args.hyp))
        if "buckets" in res:
            print(f"\nby source length ({res['src_file']}, whitespace tokens):")
            print(format_buckets(res["buckets"], res["chrf_label"]))
        if "plot" in res:
            print(f"plot: {res['plot']}")
    elif args.command == "oov":
        res = oov_files(args.hyp, args.ref, args.dict, src=args.src, ids=args.ids, field=args.field)
        print(format_oov(res))
    elif args.command == "meteor":
        if len(set(args.hyp)) != len(args.hyp):
            raise ToolError("meteor: a --hyp file is given more than once")
        systems = {}
        for hyp in args.hyp:
            r = meteor_files(hyp, args.ref, ids=args.ids, tokenised=args.tokenised,
                             remove_bpe=args.remove_bpe, field=args.field, fmt=args.fmt)
            print(f"{hyp}: " * (len(args.hyp) > 1) + r["meteor_str"] + f" (mean of {r['n_sentences']} sentence "
                  f"scores, {r['n_refs']} reference(s), tokenizer {r['tokenizer']})")
            systems[hyp] = r
        res = systems[args.hyp[0]] if len(args.hyp) == 1 else {"systems": systems}
    elif args.command == "dbleu":
        from fairseq_ext.tools.evaluation.doc_metrics import dbleu_files, format_dbleu

        res = dbleu_files(args.hyp, args.ref, args.ids, tokenised=args.tokenised, lowercase=args.lowercase,
                          remove_bpe=args.remove_bpe, field=args.field, fmt=args.fmt, pattern=args.doc_id_pattern)
        print(format_dbleu(res))
    else:
        res = compare_files(
            args.baseline, args.system, args.ref, ids=args.ids, tokenised=args.tokenised,
            lowercase=args.lowercase, remove_bpe=args.remove_bpe, field=args.field,
            fmt=args.fmt, chrf_word_order=args.chrf_word_order, n=args.n_bootstrap,
            seed=args.seed,
        )
        print(format_comparison(res))
    if args.json:
        write_json(args.json, res, indent=2)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-score`` / ``python -m fairseq_ext.tools.evaluation.score``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

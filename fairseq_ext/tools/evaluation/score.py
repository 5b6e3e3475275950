r"""Corpus BLEU / chrF, paired bootstrap significance and BLEU by source length, via sacreBLEU 2.6.

Every number comes from sacreBLEU's own API (``sacrebleu.metrics.BLEU`` / ``CHRF`` and
``sacrebleu.significance.PairedTest``); nothing here re-implements BLEU, chrF or the bootstrap. Python API:
``load_hypotheses``, ``score_corpus``, ``paired_bootstrap``, ``bleu_by_length``, ``score_files`` /
``compare_files`` and ``oov_recall``. CLI::

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

import math
import os
import sys
from contextlib import contextmanager
from typing import Any, Mapping, Optional, Sequence, Union

from fairseq_ext.tools.common import ArgumentParser, ToolError, read_lines, run_cli, write_json
from fairseq_ext.tools.evaluation.bleu import (TOKENISED_LABEL, Refs, load_references, reference_streams,
                                               sacrebleu_metrics, score_corpus)
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
    "paired_bootstrap",
    "bleu_by_length",
    "parse_edges",
    "score_files",
    "compare_files",
    "oov_recall",
    "oov_files",
    "meteor_corpus",
    "meteor_files",
    "meteor_sentence",
    "METEOR_LABEL",
    "format_score",
    "format_buckets",
    "format_comparison",
    "remove_bpe",
    "DEFAULT_EDGES",
    "build_parser",
    "cli_main",
    "main",
]

DEFAULT_EDGES: tuple[float, ...] = (0, 10, 20, 30, 40, 50, math.inf)
DEFAULT_SEED = 12345
DEFAULT_N_BOOTSTRAP = 1000
ALPHA = 0.05

# --------------------------------------------------------------------------------- metrics
# ------------------------------------------------------------------------------- bootstrap
@contextmanager
def _sacrebleu_seed(seed: int):
    """sacreBLEU's PairedTest reads its RNG seed from $SACREBLEU_SEED; set it for the call."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old


def paired_bootstrap(
    baseline: Sequence[str],
    systems: Union[Mapping[str, Sequence[str]], Sequence[Sequence[str]]],
    refs: Refs,
    n: int = DEFAULT_N_BOOTSTRAP,
    seed: int = DEFAULT_SEED,
    *,
    tokenised: bool = False,
    lowercase: bool = False,
    chrf_word_order: int = 0,
    baseline_name: str = "baseline",
) -> dict[str, Any]:
    """Paired bootstrap resampling (Koehn 2004) of each system against the baseline.

    Runs ``sacrebleu.significance.PairedTest(test_type='bs')`` for BLEU and chrF with a fixed
    seed.  ``systems`` is ``{name: hyps}`` or a list of hypothesis lists (named ``system1``...).

    :return: ``{"n_bootstrap", "seed", "alpha", "metrics": [BLEU-name, chrF-name],
        "signatures": {metric: str}, "baseline": {"name", metric: {score, mean, ci, ci_low,
        ci_high}}, "systems": [{"name", metric: {score, mean, ci, ci_low, ci_high, delta,
        p_value, significant}}]}`` where ``ci`` is the half width of the 95% interval around
        the bootstrap mean.

    A system whose corpus score equals the baseline's (e.g. identical output) gets p = 1:
    sacreBLEU's statistic ``count(centred |delta*| > |delta|)`` degenerates to 1/(n+1) when
    every resampled difference is 0, and an observed difference of 0 is no evidence of one.
    """
    from sacrebleu.significance import PairedTest  # imports numpy; only needed here

    if int(n) < 1:
        raise ToolError(f"number of bootstrap resamples must be >= 1, got {n}")
    if int(seed) <= 0:
        # sacreBLEU treats a seed of 0 as "no seed" (entropy from the OS): not reproducible.
        raise ToolError(f"seed must be a positive integer, got {seed}")
    if isinstance(systems, Mapping):
        named = [(str(k), list(v)) for k, v in systems.items()]
    else:
        named = [(f"system{i + 1}", list(v)) for i, v in enumerate(systems)]
    if not named:
        raise ToolError("no system to compare with the baseline")
    baseline = list(baseline)
    streams = reference_streams(refs, len(baseline), "baseline hypotheses")
    for name, hyps in named:
        if len(hyps) != len(baseline):
            raise ToolError(
                f"{name}: {len(hyps)} hypotheses but the baseline has {len(baseline)}"
            )
    bleu_m, chrf_m = sacrebleu_metrics(tokenised, lowercase, chrf_word_order)
    with _sacrebleu_seed(int(seed)):
        test = PairedTest(
            [(baseline_name, baseline)] + named,
            {"BLEU": bleu_m, "chrF": chrf_m},
            references=streams,
            test_type="bs",
            n_samples=int(n),
            n_jobs=1,
        )
        signatures, scores = test()
    metric_names = [k for k in scores if k != "System"]

    def _entry(res: Any) -> dict[str, Any]:
        mean = float(res.mean) if res.mean is not None else None
        ci = float(res.ci) if res.ci is not None else None
        return {
            "score": float(res.score),
            "mean": mean,
            "ci": ci,
            "ci_low": None if mean is None or ci is None else mean - ci,
            "ci_high": None if mean is None or ci is None else mean + ci,
        }

    base: dict[str, Any] = {"name": baseline_name}
    for m in metric_names:
        base[m] = _entry(scores[m][0])
    out_systems = []
    for i, (name, _) in enumerate(named, start=1):
        row: dict[str, Any] = {"name": name}
        for m in metric_names:
            res = scores[m][i]
            e = _entry(res)
            delta = e["score"] - base[m]["score"]
            p = 1.0 if delta == 0.0 else float(res.p_value)
            e.update(delta=delta, p_value=p, significant=p < ALPHA)
            row[m] = e
        out_systems.append(row)
    return {
        "test": "paired bootstrap resampling",
        "n_bootstrap": int(n),
        "seed": int(seed),
        "alpha": ALPHA,
        "metrics": metric_names,
        "labels": {m: (TOKENISED_LABEL if (m == "BLEU" and tokenised) else m) for m in metric_names},
        "signatures": {m: str(s) for m, s in signatures.items()},
        "baseline": base,
        "systems": out_systems,
        "n_sentences": len(baseline),
        "n_refs": len(streams),
    }


# ------------------------------------------------------------------------- length buckets
def parse_edges(spec: Union[str, Sequence[Union[int, float, str]], None]) -> list[float]:
    """``'0,10,20,inf'`` (or a sequence) -> increasing bucket edges; buckets are ``[lo, hi)``."""
    if spec is None:
        return list(DEFAULT_EDGES)
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    try:
        edges = [float(str(x).strip()) for x in items if str(x).strip() != ""]
    except ValueError:
        raise ToolError(f"bucket edges must be numbers or 'inf', got {spec!r}") from None
    if any(math.isnan(e) for e in edges):
        raise ToolError(f"bucket edges must be numbers or 'inf', got {spec!r}")
    if len(edges) < 2:
        raise ToolError(f"need at least two bucket edges, got {spec!r}")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ToolError(f"bucket edges must be strictly increasing, got {spec!r}")
    return edges


def _edge_str(x: float) -> str:
    return "inf" if math.isinf(x) else (str(int(x)) if float(x).is_integer() else str(x))


def _bucket_label(lo: float, hi: float) -> str:
    if math.isinf(hi):
        return f"{_edge_str(lo)}+"
    if float(lo).is_integer() and float(hi).is_integer():
        return f"{int(lo)}-{int(hi) - 1}"
    return f"[{_edge_str(lo)},{_edge_str(hi)})"


def bleu_by_length(
    src: Sequence[str],
    hyps: Sequence[str],
    refs: Refs,
    edges: Union[str, Sequence[float], None] = DEFAULT_EDGES,
    *,
    tokenised: bool = False,
    lowercase: bool = False,
    chrf_word_order: int = 0,
) -> list[dict[str, Any]]:
    """Corpus BLEU and chrF per bucket of source length (whitespace tokens), ``[lo, hi)``.

    Each row: ``bucket`` (label such as ``'10-19'``, ``'50+'``), ``lo``, ``hi`` (``None`` for
    infinity), ``count``, ``src_tokens``, ``bleu``, ``chrf``, ``bp`` (``None`` when empty).
    Every sentence must fall in a bucket (end the edges with ``inf``); counts sum to the total.
    """
    edges_f = parse_edges(edges)
    src, hyps = list(src), list(hyps)
    if len(src) != len(hyps):
        raise ToolError(f"source has {len(src)} sentences but there are {len(hyps)} hypotheses")
    streams = reference_streams(refs, len(hyps))
    lengths = [len(s.split()) for s in src]
    outside = [i for i, n in enumerate(lengths) if not (edges_f[0] <= n < edges_f[-1])]
    if outside:
        raise ToolError(
            f"{len(outside)} source sentences lie outside the buckets "
            f"[{_edge_str(edges_f[0])}, {_edge_str(edges_f[-1])}) (e.g. sentence {outside[0]} "
            f"with {lengths[outside[0]]} tokens); end the edges with inf"
        )
    rows = []
    for lo, hi in zip(edges_f, edges_f[1:]):
        idx = [i for i, n in enumerate(lengths) if lo <= n < hi]
        row: dict[str, Any] = {
            "bucket": _bucket_label(lo, hi),
            "lo": lo,
            "hi": None if math.isinf(hi) else hi,
            "count": len(idx),
            "src_tokens": sum(lengths[i] for i in idx),
            "bleu": None,
            "chrf": None,
            "bp": None,
        }
        if idx:
            bleu_m, chrf_m = sacrebleu_metrics(tokenised, lowercase, chrf_word_order)
            h = [hyps[i] for i in idx]
            r = [[s[i] for i in idx] for s in streams]
            b = bleu_m.corpus_score(h, r)
            row.update(bleu=b.score, bp=b.bp, chrf=chrf_m.corpus_score(h, r).score)
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------ formatting
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


def format_buckets(rows: Sequence[Mapping[str, Any]], chrf_label: str = "chrF2") -> str:
    """Table of :func:`bleu_by_length` rows, with a total line."""
    head = f"{'src length':>10}  {'count':>6}  {'BLEU':>6}  {chrf_label:>6}  {'BP':>5}"
    out = [head, "-" * len(head)]
    for r in rows:
        f = (lambda v, w, p: f"{v:>{w}.{p}f}" if v is not None else f"{'-':>{w}}")
        out.append(
            f"{r['bucket']:>10}  {r['count']:>6d}  {f(r['bleu'], 6, 2)}  "
            f"{f(r['chrf'], 6, 2)}  {f(r['bp'], 5, 3)}"
        )
    out.append(f"{'total':>10}  {sum(r['count'] for r in rows):>6d}")
    return "\n".join(out)


def format_comparison(result: Mapping[str, Any]) -> str:
    """Table of :func:`paired_bootstrap` results: score (mean ± 95% CI) and p per metric."""
    metrics = result["metrics"]
    names = [f"baseline: {result['baseline']['name']}"] + [s["name"] for s in result["systems"]]
    wn = max(len("System"), *(len(n) for n in names))
    cols = [f"{result['labels'].get(m, m)} (mean ± 95% CI)" for m in metrics]
    wc = max(24, *(len(c) for c in cols))

    def cell(e: Mapping[str, Any]) -> str:
        if e.get("mean") is None:
            return f"{e['score']:.2f}"
        return f"{e['score']:.2f} ({e['mean']:.2f} ± {e['ci']:.2f})"

    def pcell(e: Mapping[str, Any]) -> str:
        if "p_value" not in e:
            return "-"
        return f"{e['p_value']:.4f}{'*' if e['significant'] else ' '}"

    lines = [
        f"{result['test']}: {result['n_bootstrap']} resamples, seed {result['seed']}, "
        f"{result['n_sentences']} sentences, {result['n_refs']} reference(s); "
        f"p vs baseline, * = p < {result['alpha']}",
        f"{'System':<{wn}}  " + "  ".join(f"{c:<{wc}}  {'p':>7} " for c in cols),
    ]
    rows = [result["baseline"]] + list(result["systems"])
    for n, row in zip(names, rows):
        lines.append(
            f"{n:<{wn}}  " + "  ".join(f"{cell(row[m]):<{wc}}  {pcell(row[m]):>8}" for m in metrics)
        )
    for m in metrics:
        lines.append(f"{result['labels'].get(m, m)} signature: {result['signatures'][m]}")
    return "\n".join(lines)


# ------------------------------------------------------------------------ file-level helpers
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
    ref_paths = [refs] if isinstance(refs, (str, os.PathLike)) else list(refs)
    streams = load_references(ref_paths)
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
        res.update(src_file=str(src), bucket_edges=[_edge_str(e) for e in edges_f], buckets=rows)
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
    ref_paths = [refs] if isinstance(refs, (str, os.PathLike)) else list(refs)
    streams = load_references(ref_paths)
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


def read_dictionary_words(path: Union[str, os.PathLike]) -> set[str]:
    """The words of a fairseq ``dict.*.txt`` (first field of each line)."""
    words = set()
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip():
            raise ToolError(f"{path}:{i}: empty line in a fairseq dictionary")
        words.add(line.split(" ", 1)[0])
    return words


def oov_recall(
    hyps: Sequence[str],
    refs: Sequence[str],
    vocab: set[str],
    srcs: Optional[Sequence[str]] = None,
) -> dict[str, Any]:
    """Recall of the reference's out-of-vocabulary whitespace tokens (those not in ``vocab``).

    A reference OOV token counts as produced when the hypothesis of the same sentence contains it,
    clipped by count (a word twice in the reference needs it twice in the hypothesis). With ``srcs``
    also the recall restricted to OOV tokens that occur in the source sentence (the copyable ones).
    """
    if len(hyps) != len(refs) or (srcs is not None and len(srcs) != len(refs)):
        raise ToolError(f"oov recall: {len(hyps)} hypotheses, {len(refs)} references"
                        + (f", {len(srcs)} sources" if srcs is not None else ""))
    from collections import Counter

    total = hit = c_total = c_hit = unk = 0
    for i, (h, r) in enumerate(zip(hyps, refs)):
        hc = Counter(h.split())
        unk += hc.get("<unk>", 0)
        rc = Counter(w for w in r.split() if w not in vocab)
        sw = set(srcs[i].split()) if srcs is not None else set()
        for w, n in rc.items():
            got = min(n, hc.get(w, 0))
            total += n
            hit += got
            if w in sw:
                c_total += n
                c_hit += got
    res: dict[str, Any] = {
        "ref_oov_tokens": total, "produced": hit,
        "recall": 100.0 * hit / total if total else float("nan"), "hyp_unk_tokens": unk,
    }
    if srcs is not None:
        res.update(copyable_oov_tokens=c_total, copyable_produced=c_hit,
                   copyable_recall=100.0 * c_hit / c_total if c_total else float("nan"))
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


def format_oov(result: Mapping[str, Any]) -> str:
    copy = result.get("src_file") is not None
    head = "| system | reference OOV tokens | produced | recall % |" + (
        " copyable (in source) | produced | recall % |" if copy else "") + " <unk> in output |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in result["systems"].items():
        row = f"| {name} | {r['ref_oov_tokens']} | {r['produced']} | {r['recall']:.1f} |"
        if copy:
            row += f" {r['copyable_oov_tokens']} | {r['copyable_produced']} | {r['copyable_recall']:.1f} |"
        lines.append(row + f" {r['hyp_unk_tokens']} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- METEOR
METEOR_LABEL = "METEOR (exact+stem, nltk; not comparable to METEOR 1.5)"


class _NoSynonyms:
    """A WordNet stand-in without synonyms: nltk's METEOR then matches exact and Porter-stem only and
    never loads (or downloads) WordNet."""

    def synsets(self, *args: Any, **kwargs: Any) -> list:
        return []


def _meteor_tokens(text: str, tokenised: bool) -> list[str]:
    if tokenised:
        return text.split()
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()(text).split()


def meteor_sentence(hyp: str, refs: Sequence[str], tokenised: bool = False) -> float:
    """nltk METEOR (exact + stem) of one hypothesis against its references (the best one counts)."""
    from nltk.stem.porter import PorterStemmer
    from nltk.translate.meteor_score import meteor_score

    return float(meteor_score([_meteor_tokens(r, tokenised) for r in refs], _meteor_tokens(hyp, tokenised),
                              stemmer=PorterStemmer(), wordnet=_NoSynonyms()))


def meteor_corpus(hyps: Sequence[str], refs: Refs, tokenised: bool = False) -> dict[str, Any]:
    """Mean sentence METEOR (exact + stem, nltk) over the corpus, x100, with its label and settings."""
    try:
        import nltk
        from nltk.stem.porter import PorterStemmer
        from nltk.translate.meteor_score import meteor_score
    except ImportError:
        raise ToolError("METEOR needs nltk: pip install nltk==3.9.1") from None
    hyps = list(hyps)
    streams = reference_streams(refs, len(hyps))
    stemmer, wn = PorterStemmer(), _NoSynonyms()
    scores = []
    for i, h in enumerate(hyps):
        rs = [_meteor_tokens(s[i], tokenised) for s in streams]
        scores.append(float(meteor_score(rs, _meteor_tokens(h, tokenised), stemmer=stemmer, wordnet=wn)))
    mean = 100.0 * sum(scores) / len(scores)
    return {
        "meteor": mean,
        "meteor_label": METEOR_LABEL,
        "meteor_str": f"{METEOR_LABEL} = {mean:.2f}",
        "sentence_scores": scores,
        "corpus": "mean of sentence scores",
        "matching": "exact + Porter stem (no WordNet synonyms, no paraphrases)",
        "params": {"alpha": 0.9, "beta": 3.0, "gamma": 0.5, "lowercase": True},
        "tokenizer": "whitespace" if tokenised else "13a",
        "nltk_version": nltk.__version__,
        "n_sentences": len(hyps),
        "n_refs": len(streams),
    }


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
    ref_paths = [refs] if isinstance(refs, (str, os.PathLike)) else list(refs)
    streams = load_references(ref_paths)
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

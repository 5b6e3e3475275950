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

import math
import os
import random
import re
import sys
from typing import Any, Optional, Sequence

from fairseq_ext.tools.common import (
    ArgumentParser, OutputSet, ToolError, atomic_write, json_text, log, positive_int, read_jsonl, read_lines,
    run_cli, write_json,
)

__all__ = ["DEFAULT_FUZZY_EDGES", "parse_edges", "bin_of", "top1_fuzzy", "fuzzy_bins", "pairs_used", "k_sweep",
           "gate_examples", "split_corpus", "format_fuzzy_bins", "format_k_sweep", "format_gate",
           "plot_fuzzy_bins", "plot_k_sweep", "build_parser", "main", "cli_main"]

DEFAULT_FUZZY_EDGES = (0.0, 0.3, 0.5, 0.7, 1.0)
ADAPTIVE = "adaptive"
_HAS_WORD = re.compile(r"\w")


# ------------------------------------------------------------------------------------------ shared
def parse_edges(text: str) -> list[float]:
    """``"0,0.3,0.5,0.7,1"`` -> increasing bin edges (at least two)."""
    try:
        edges = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ToolError(f"--bins: not a comma-separated list of numbers: {text!r}") from None
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ToolError(f"--bins: need at least two increasing edges: {text!r}")
    return edges


def bin_of(score: float, edges: Sequence[float]) -> Optional[int]:
    """Index of the bin ``[a, b)`` (the last one ``[a, b]``) that holds ``score``; None outside the edges."""
    for j in range(len(edges) - 1):
        if edges[j] <= score < edges[j + 1] or (j == len(edges) - 2 and score == edges[j + 1]):
            return j
    return None


def _label(lo: float, hi: float, last: bool) -> str:
    return f"[{lo:g},{hi:g}{']' if last else ')'}"


def top1_fuzzy(entries) -> list[float]:
    """The fuzzy score of each example's best retrieved pair (0 without a candidate)."""
    return [float(e.fuzzy[0]) if e.ids and e.fuzzy else 0.0 for e in entries]


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


def _load_side(path: str):
    from fairseq_ext.tools.tm.retrieval import load_side

    return load_side(path)


def _load_refs(paths: Sequence[str]) -> list[list[str]]:
    from fairseq_ext.tools.evaluation.score import load_references

    return load_references(list(paths))


def _load_hyps(path: str, n: int, tokenised: bool, remove_bpe: Optional[str]) -> list[str]:
    from fairseq_ext.tools.hypotheses import align_to_references, load_hypotheses

    hyps = load_hypotheses(path, field="H" if tokenised else "D", remove_bpe_kind=remove_bpe)
    return align_to_references(hyps, n, source=str(path))


def _score(hyps: Sequence[str], streams: Sequence[Sequence[str]], idx: Sequence[int], tokenised: bool,
           lowercase: bool) -> dict:
    from fairseq_ext.tools.evaluation.score import score_corpus

    return score_corpus([hyps[i] for i in idx], [[s[i] for i in idx] for s in streams], tokenised,
                        lowercase=lowercase)


def _check_lengths(entries, streams, side: str, ref: str) -> None:
    if len(entries) != len(streams[0]):
        raise ToolError(f"{len(entries)} examples in the side file but {len(streams[0])} reference lines in {ref} "
                        f"(another split?)", side)


def _fmt(v: Optional[float], signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:+.2f}" if signed else f"{v:.2f}"


# ------------------------------------------------------------------------------------------ Fig. 4.3
def fuzzy_bins(entries, streams: Sequence[Sequence[str]], systems: dict[str, list[str]],
               edges: Sequence[float] = DEFAULT_FUZZY_EDGES, *, tokenised: bool = False,
               lowercase: bool = False) -> dict:
    """BLEU / chrF of every system on the sentences of each top-1 fuzzy bin (module doc).

    :param entries: the side file's entries (one per reference sentence)
    :param streams: reference streams (lists of sentences)
    :param systems: ``{name: hypotheses in reference order}``
    """
    edges = [float(e) for e in edges]
    top = top1_fuzzy(entries)
    where = [bin_of(s, edges) for s in top]
    outside = [i for i, b in enumerate(where) if b is None]
    if outside:
        raise ToolError(f"{len(outside)} examples have a top-1 fuzzy score outside the bins [{edges[0]:g}, "
                        f"{edges[-1]:g}] (e.g. example {outside[0]}: {top[outside[0]]:g})")
    n = len(top)
    bins = []
    for j in range(len(edges) - 1):
        idx = [i for i in range(n) if where[i] == j]
        row: dict[str, Any] = {"bin": _label(edges[j], edges[j + 1], j == len(edges) - 2), "lo": edges[j],
                               "hi": edges[j + 1], "n": len(idx),
                               "mean_fuzzy": sum(top[i] for i in idx) / len(idx) if idx else None,
                               "systems": {}}
        for name, hyps in systems.items():
            if idx:
                r = _score(hyps, streams, idx, tokenised, lowercase)
                row["systems"][name] = {"bleu": r["bleu"], "chrf": r["chrf"], "bp": r["bp"]}
            else:
                row["systems"][name] = {"bleu": None, "chrf": None, "bp": None}
        bins.append(row)
    all_idx = list(range(n))
    overall, sig = {}, {}
    for name, hyps in systems.items():
        r = _score(hyps, streams, all_idx, tokenised, lowercase)
        overall[name] = {"bleu": r["bleu"], "chrf": r["chrf"], "bp": r["bp"]}
        sig = {"bleu_label": r["bleu_label"], "bleu_signature": r["bleu_signature"],
               "chrf_label": r["chrf_label"], "chrf_signature": r["chrf_signature"]}
    return {"edges": edges, "n_sentences": n, "n_refs": len(streams), "systems": list(systems), "bins": bins,
            "all": overall, "examples_without_candidate": sum(1 for e in entries if not e.ids), **sig}


def format_fuzzy_bins(res: dict) -> str:
    """Markdown table of :func:`fuzzy_bins`: BLEU per bin and system, and the differences to the first."""
    names = res["systems"]
    first = names[0]
    head = ["top-1 fuzzy", "n"] + [f"{s} {res['bleu_label']}" for s in names]
    head += [f"Δ {s} − {first}" for s in names[1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def row(label, n, cells):
        b = [cells[s]["bleu"] for s in names]
        d = [None if b[0] is None or x is None else x - b[0] for x in b[1:]]
        return "| " + " | ".join([label, str(n)] + [_fmt(x) for x in b] + [_fmt(x, True) for x in d]) + " |"

    for r in res["bins"]:
        lines.append(row(r["bin"], r["n"], r["systems"]))
    lines.append(row("all", res["n_sentences"], res["all"]))
    lines.append("")
    lines.append(f"{res['bleu_label']} signature: {res['bleu_signature']}; bins of the top-1 retrieved pair's fuzzy "
                 f"score (Eq. 4.1), [a,b) but the last [a,b]; {res['examples_without_candidate']} examples without "
                 f"a candidate count as 0")
    return "\n".join(lines)


def plot_fuzzy_bins(res: dict, path: str, title: Optional[str] = None) -> str:
    """Grouped bars: BLEU per fuzzy bin, one colour per system (Fig. 4.3)."""
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    bins, names = res["bins"], res["systems"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(bins) + 2), 4.2))
    try:
        x = list(range(len(bins)))
        width = 0.8 / len(names)
        top = 0.0
        for j, name in enumerate(names):
            vals = [r["systems"][name]["bleu"] for r in bins]
            vals = [float("nan") if v is None else v for v in vals]
            pos = [xi - 0.4 + width * (j + 0.5) for xi in x]
            bars = ax.bar(pos, vals, width=width, label=name)
            for b, v in zip(bars, vals):
                if v == v:
                    ax.annotate(f"{v:.1f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
                    top = max(top, v)
        ax.set_xticks(x)
        ax.set_xticklabels([f"{r['bin']}\n(n={r['n']})" for r in bins])
        ax.set_xlim(-0.6, len(bins) - 0.4)
        ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
        ax.set_xlabel("fuzzy score of the top-1 retrieved pair (Eq. 4.1)")
        ax.set_ylabel(res["bleu_label"])
        ax.legend(loc="best", fontsize=8)
        ax.set_title(title or f"{res['bleu_label']} by fuzzy score (Fig. 4.3)")
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=150, format="png")
    finally:
        plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------ Fig. 4.4
def _k_of(name: str) -> Optional[int]:
    """K of a sweep point's name (``"4"``, ``"K=4"``, ``"k4"``), None for ``adaptive``."""
    if name.lower() == ADAPTIVE:
        return None
    m = re.fullmatch(r"(?:[kK]=?)?(\d+)", name)
    if not m or int(m.group(1)) < 1:
        raise ToolError(f"--hyp {name!r}: name a sweep point by its K (1, 2, 4, ...) or 'adaptive'")
    return int(m.group(1))


def pairs_used(entries, k: Optional[int], max_k: int = 16) -> float:
    """The average number of pairs an example gets: ``ids[:K]`` (top-K) or ``adaptive`` (k None), at most
    ``max_k`` (the rule of the task ``seg_translation``)."""
    if not entries:
        return 0.0
    if k is None:
        return sum(min(len(e.adaptive), max_k) for e in entries) / len(entries)
    return sum(min(len(e.ids), k, max_k) for e in entries) / len(entries)


def k_sweep(entries, streams: Sequence[Sequence[str]], points: dict[str, list[str]],
            baseline: Optional[tuple[str, list[str]]] = None, *, max_k: int = 16, tokenised: bool = False,
            lowercase: bool = False) -> dict:
    """BLEU / chrF of each sweep point (``{name: hypotheses}``, names = K or ``adaptive``) and the
    average number of pairs of its selection (module doc)."""
    idx = list(range(len(streams[0])))
    rows = []
    for name, hyps in points.items():
        k = _k_of(name)
        r = _score(hyps, streams, idx, tokenised, lowercase)
        rows.append({"name": name, "k": k, "selection": ADAPTIVE if k is None else "topk",
                     "avg_pairs": pairs_used(entries, k, max_k), "bleu": r["bleu"], "chrf": r["chrf"],
                     "bp": r["bp"]})
        sig = {"bleu_label": r["bleu_label"], "bleu_signature": r["bleu_signature"],
               "chrf_label": r["chrf_label"]}
    rows.sort(key=lambda r: (r["k"] is None, r["k"] or 0))
    res: dict[str, Any] = {"n_sentences": len(idx), "max_k": max_k, "points": rows, **sig}
    if baseline is not None:
        r = _score(baseline[1], streams, idx, tokenised, lowercase)
        res["baseline"] = {"name": baseline[0], "bleu": r["bleu"], "chrf": r["chrf"]}
        for row in rows:
            row["delta_bleu"] = row["bleu"] - r["bleu"]
    topk = [r for r in rows if r["k"] is not None]
    if topk:
        best = max(topk, key=lambda r: r["bleu"])
        res["best_topk"] = best["name"]
    return res


def format_k_sweep(res: dict) -> str:
    base = res.get("baseline")
    head = ["retrieved pairs", "avg pairs used", res["bleu_label"], res["chrf_label"]]
    if base:
        head.append(f"Δ {res['bleu_label']} vs {base['name']}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["points"]:
        name = "adaptive (Alg. 1)" if r["k"] is None else f"K = {r['k']}"
        cells = [name, f"{r['avg_pairs']:.3f}", _fmt(r["bleu"]), _fmt(r["chrf"])]
        if base:
            cells.append(_fmt(r["delta_bleu"], True))
        lines.append("| " + " | ".join(cells) + " |")
    if base:
        lines.append(f"| {base['name']} (no memory) | 0 | {_fmt(base['bleu'])} | {_fmt(base['chrf'])} | |")
    lines.append("")
    lines.append(f"{res['bleu_label']} signature: {res['bleu_signature']}; {res['n_sentences']} sentences; avg pairs "
                 f"used = the selection's pairs per example (at most {res['max_k']})")
    return "\n".join(lines)


def plot_k_sweep(res: dict, path: str, title: Optional[str] = None) -> str:
    """BLEU against the number of retrieved pairs (log2 axis), the adaptive point marked (Fig. 4.4)."""
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    try:
        topk = [r for r in res["points"] if r["k"] is not None]
        adaptive = [r for r in res["points"] if r["k"] is None]
        if topk:
            ax.plot([r["k"] for r in topk], [r["bleu"] for r in topk], marker="o", color="tab:blue",
                    label="top-K")
            for r in topk:
                ax.annotate(f"{r['bleu']:.1f}", (r["k"], r["bleu"]), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=7)
        for r in adaptive:
            x = max(r["avg_pairs"], 0.5)
            ax.plot([x], [r["bleu"]], marker="*", markersize=14, color="tab:red", linestyle="none",
                    label=f"adaptive ({r['avg_pairs']:.2f} pairs on average)")
            ax.annotate(f"{r['bleu']:.1f}", (x, r["bleu"]), textcoords="offset points", xytext=(0, 8),
                        ha="center", fontsize=7, color="tab:red")
        if res.get("baseline"):
            ax.axhline(res["baseline"]["bleu"], color="gray", linestyle="--",
                       label=f"{res['baseline']['name']} ({res['baseline']['bleu']:.1f})")
        ax.set_xscale("log", base=2)
        ks = sorted({r["k"] for r in topk})
        if ks:
            ax.set_xticks(ks)
            ax.set_xticklabels([str(k) for k in ks])
        ax.set_xlabel("number of retrieved pairs")
        ax.set_ylabel(res["bleu_label"])
        ax.legend(loc="best", fontsize=8)
        ax.set_title(title or f"{res['bleu_label']} vs retrieved pairs (Fig. 4.4)")
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=150, format="png")
    finally:
        plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------ Fig. 4.5
def gate_examples(records: Sequence[dict], ids: Optional[Sequence[int]] = None, n: int = 3) -> list[dict]:
    """The best hypothesis (rank 0) of the sentences ``ids``, or of the ``n`` with the highest top-1 fuzzy
    score (ties: lower id), from ``--tm-export`` records."""
    best = {}
    for r in records:
        if r.get("rank", 0) == 0 and r["id"] not in best:
            best[r["id"]] = r
    if ids is not None:
        missing = [i for i in ids if i not in best]
        if missing:
            raise ToolError(f"no exported hypothesis for sentence(s) {', '.join(map(str, missing))}")
        return [best[i] for i in ids]

    def fz(r):
        f = r.get("tm_fuzzy") or []
        return f[0] if f and f[0] is not None else -1.0

    return sorted(best.values(), key=lambda r: (-fz(r), r["id"]))[:n]


def format_gate(examples: Sequence[dict], refs: Optional[Sequence[str]] = None,
                memory_tgt: Optional[Sequence[str]] = None, threshold: float = 0.5) -> str:
    out = []
    for r in examples:
        gate = r["gate"]
        fz = (r.get("tm_fuzzy") or [None])[0] if r.get("tm_lines") else None
        mean = sum(gate) / len(gate) if gate else 0.0
        out.append(f"**sentence {r['id']}** (top-1 fuzzy {_fmt(fz)}; {len(r.get('tm_lines') or [])} pairs; "
                   f"mean ζ {mean:.3f})")
        out.append("")
        if memory_tgt is not None and r.get("tm_lines"):
            out.append(f"- retrieved target (line {r['tm_lines'][0]}): {memory_tgt[r['tm_lines'][0]]}")
        if refs is not None and 0 <= r["id"] < len(refs):
            out.append(f"- reference: {refs[r['id']]}")
        toks = []
        for t, g, st in zip(r["tokens"], gate, r.get("slot_token") or [None] * len(gate)):
            cell = f"{t}({g:.2f})"
            if g >= threshold:
                cell = f"**{cell}**" + (f"←{st}" if st is not None else "")
            toks.append(cell)
        out.append(f"- ζ_t per output token (bold: ζ ≥ {threshold:g}, ← the memory token of the argmax slot): "
                   + " ".join(toks))
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ §4.5 split
def _moses(lang: str):
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise ToolError("--tokenize moses needs sacremoses (pip install sacremoses)") from None
    tok = MosesTokenizer(lang=lang)
    return lambda s: tok.tokenize(s, return_str=True, escape=True)


def split_corpus(prefix: str, langs: Sequence[str], out: str, *, dev: int = 3000, test: int = 3000,
                 max_len_train: int = 80, max_len_test: int = 100, seed: int = 1,
                 tokenize: str = "none") -> dict:
    """The §4.5 split of a sentence-aligned corpus (module doc); returns the counts (also ``OUT/split.json``)."""
    a, b = langs
    sides = {x: read_lines(f"{prefix}.{x}") for x in langs}
    if len(sides[a]) != len(sides[b]):
        raise ToolError(f"{len(sides[a])} lines but {prefix}.{b} has {len(sides[b])}", f"{prefix}.{a}")
    n_in = len(sides[a])
    keep = [i for i in range(n_in) if all(_HAS_WORD.search(sides[x][i]) for x in langs)]
    if dev + test > len(keep):
        raise ToolError(f"--dev {dev} + --test {test} is more than the {len(keep)} usable pairs", f"{prefix}.{a}")
    rng = random.Random(seed)
    picked = rng.sample(keep, dev + test)
    chosen = {"valid": sorted(picked[:dev]), "test": sorted(picked[dev:])}
    taken = set(picked)
    chosen["train"] = [i for i in keep if i not in taken]
    tok = {x: (_moses(x) if tokenize == "moses" else None) for x in langs}
    limit = {"train": max_len_train, "valid": max_len_test, "test": max_len_test}
    stats: dict[str, Any] = {"input_pairs": n_in, "special_or_empty_dropped": n_in - len(keep), "seed": seed,
                             "tokenize": tokenize, "max_len": limit, "splits": {}}
    for sub in ("raw", "tok") if tokenize == "moses" else ("raw",):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    with OutputSet(out) as o:
        for split in ("train", "valid", "test"):
            kept = 0
            for i in chosen[split]:
                toks = {x: tok[x](sides[x][i]) if tok[x] else sides[x][i] for x in langs}
                if any(len(toks[x].split()) > limit[split] for x in langs):
                    continue
                kept += 1
                for x in langs:
                    o.open(f"raw/{split}.{x}").write(sides[x][i] + "\n")
                    if tok[x]:
                        o.open(f"tok/{split}.{x}").write(toks[x] + "\n")
                o.open(f"raw/{split}.ids").write(f"line{i + 1}\n")
                if tokenize == "moses":
                    o.open(f"tok/{split}.ids").write(f"line{i + 1}\n")
            stats["splits"][split] = {"sampled": len(chosen[split]), "kept": kept,
                                      "over_length": len(chosen[split]) - kept}
            log(f"[split] {split}: {len(chosen[split])} pairs, {kept} within {limit[split]} tokens")
        o.write_json("split.json", stats)
    return stats


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
    entries, _ = _load_side(args.side)
    streams = _load_refs(args.ref)
    _check_lengths(entries, streams, args.side, args.ref[0])
    n = len(streams[0])

    def load(path):
        return _load_hyps(path, n, args.tokenised, args.remove_bpe)

    if args.command == "fuzzy-bins":
        systems = {name: load(path) for name, path in _named(args.hyp, "--hyp")}
        res = fuzzy_bins(entries, streams, systems, parse_edges(args.bins), tokenised=args.tokenised,
                         lowercase=args.lowercase)
        text = format_fuzzy_bins(res)
        if args.plot:
            res["plot"] = plot_fuzzy_bins(res, args.plot, args.title)
    else:
        points = {name: load(path) for name, path in _named(args.hyp, "--hyp")}
        for name in points:
            _k_of(name)
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

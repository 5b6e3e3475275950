r"""SEG-NMT's BLEU against its retrieval (Gu thesis ch. 4): BLEU per bin of the top-1 retrieved pair's fuzzy
score (Fig. 4.3) and BLEU against the number of retrieved pairs (Fig. 4.4), as tables and plots.

:func:`fuzzy_bins` bins the examples by the fuzzy score (Eq. 4.1) of their best retrieved pair (bins ``[a, b)``,
the last one ``[a, b]``; an example without a candidate counts as 0) and scores each bin of each system with
sacreBLEU (:mod:`fairseq_ext.tools.evaluation.bleu`), with ``n_bootstrap`` also each system's paired bootstrap
against the first on the bin's sentences (:mod:`fairseq_ext.tools.evaluation.significance`). :func:`k_sweep`
scores decodings with ``--tm-topk K`` and the adaptive selection (Algorithm 1), with the average number of pairs
each selection gives an example (:func:`pairs_used`, at most the task's ``--tm-max-k``). ``python -m
fairseq_ext.tools.analysis.tm_analysis fuzzy-bins | k-sweep`` runs them on files; matplotlib is imported only when a
plot is drawn.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any, Optional, Sequence

from fairseq_ext.tools.common import ToolError

__all__ = ["DEFAULT_FUZZY_EDGES", "ADAPTIVE", "bin_of", "top1_fuzzy", "fmt_score", "fuzzy_bins", "format_fuzzy_bins",
           "plot_fuzzy_bins", "k_of", "pairs_used", "k_sweep", "format_k_sweep", "plot_k_sweep"]

DEFAULT_FUZZY_EDGES = (0.0, 0.3, 0.5, 0.7, 1.0)
ADAPTIVE = "adaptive"


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


def _score(hyps: Sequence[str], streams: Sequence[Sequence[str]], idx: Sequence[int], tokenised: bool,
           lowercase: bool) -> dict:
    from fairseq_ext.tools.evaluation.bleu import score_corpus

    return score_corpus([hyps[i] for i in idx], [[s[i] for i in idx] for s in streams], tokenised,
                        lowercase=lowercase)


def fmt_score(v: Optional[float], signed: bool = False) -> str:
    """``v`` with two decimals (a sign with ``signed``); ``-`` for None or NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:+.2f}" if signed else f"{v:.2f}"


# ------------------------------------------------------------------------------------------ Fig. 4.3
def fuzzy_bins(entries, streams: Sequence[Sequence[str]], systems: dict[str, list[str]],
               edges: Sequence[float] = DEFAULT_FUZZY_EDGES, *, tokenised: bool = False,
               lowercase: bool = False, n_bootstrap: int = 0) -> dict:
    """BLEU / chrF of every system on the sentences of each top-1 fuzzy bin (module doc).

    :param entries: the side file's entries (one per reference sentence)
    :param streams: reference streams (lists of sentences)
    :param systems: ``{name: hypotheses in reference order}``
    :param n_bootstrap: > 0: every other system's paired bootstrap against the first inside each bin and on all
        sentences (``bleu_p`` / ``chrf_p`` next to its scores; :func:`~fairseq_ext.tools.evaluation.significance.
        paired_bootstrap`, resampling the bin's sentences)
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
    if n_bootstrap > 0 and len(systems) > 1:
        for idx, cells in [([i for i in range(n) if where[i] == j], b["systems"]) for j, b in enumerate(bins)] + \
                [(all_idx, overall)]:
            _bootstrap_cells(cells, systems, streams, idx, n_bootstrap, tokenised, lowercase)
    return {"edges": edges, "n_sentences": n, "n_refs": len(streams), "systems": list(systems), "bins": bins,
            "all": overall, "examples_without_candidate": sum(1 for e in entries if not e.ids),
            **({"n_bootstrap": n_bootstrap} if n_bootstrap > 0 else {}), **sig}


def _bootstrap_cells(cells: dict, systems: dict[str, list[str]], streams: Sequence[Sequence[str]],
                     idx: Sequence[int], n_bootstrap: int, tokenised: bool, lowercase: bool) -> None:
    """``bleu_p`` / ``chrf_p`` of every system but the first against it on the sentences ``idx`` (None without
    sentences), into ``cells`` (``{name: {bleu, chrf, bp}}``)."""
    from fairseq_ext.tools.evaluation.significance import paired_bootstrap

    first, *others = systems
    if not idx:
        for name in others:
            cells[name].update(bleu_p=None, chrf_p=None)
        return
    res = paired_bootstrap([systems[first][i] for i in idx], {o: [systems[o][i] for i in idx] for o in others},
                           [[s[i] for i in idx] for s in streams], n=n_bootstrap, tokenised=tokenised,
                           lowercase=lowercase, baseline_name=first)
    bleu_m, chrf_m = res["metrics"]
    for r in res["systems"]:
        cells[r["name"]].update(bleu_p=r[bleu_m]["p_value"], chrf_p=r[chrf_m]["p_value"])


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
        p = [cells[s].get("bleu_p") for s in names[1:]]
        delta = [fmt_score(x, True) + ("" if q is None else f" (p {q:.3f})") for x, q in zip(d, p)]
        return "| " + " | ".join([label, str(n)] + [fmt_score(x) for x in b] + delta) + " |"

    for r in res["bins"]:
        lines.append(row(r["bin"], r["n"], r["systems"]))
    lines.append(row("all", res["n_sentences"], res["all"]))
    lines.append("")
    lines.append(f"{res['bleu_label']} signature: {res['bleu_signature']}; bins of the top-1 retrieved pair's fuzzy "
                 f"score (Eq. 4.1), [a,b) but the last [a,b]; {res['examples_without_candidate']} examples without "
                 f"a candidate count as 0"
                 + (f"; p: paired bootstrap against {first} on the bin's sentences ({res['n_bootstrap']} resamples)"
                    if res.get("n_bootstrap") else ""))
    return "\n".join(lines)


def _plot(draw, path: str, ylabel: str, title: str, figsize: tuple) -> str:
    """A figure of ``figsize`` drawn by ``draw(ax)``, then labelled, titled and written to ``path`` (PNG)."""
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=figsize)
    try:
        draw(ax)
        ax.set_ylabel(ylabel)
        ax.legend(loc="best", fontsize=8)
        ax.set_title(title)
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=150, format="png")
    finally:
        plt.close(fig)
    return path


def plot_fuzzy_bins(res: dict, path: str, title: Optional[str] = None) -> str:
    """Grouped bars: BLEU per fuzzy bin, one colour per system (Fig. 4.3)."""
    bins, names = res["bins"], res["systems"]

    def draw(ax):
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

    return _plot(draw, path, res["bleu_label"], title or f"{res['bleu_label']} by fuzzy score (Fig. 4.3)",
                 (max(6.0, 1.3 * len(bins) + 2), 4.2))


# ------------------------------------------------------------------------------------------ Fig. 4.4
def k_of(name: str) -> Optional[int]:
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
        k = k_of(name)
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
        cells = [name, f"{r['avg_pairs']:.3f}", fmt_score(r["bleu"]), fmt_score(r["chrf"])]
        if base:
            cells.append(fmt_score(r["delta_bleu"], True))
        lines.append("| " + " | ".join(cells) + " |")
    if base:
        lines.append(f"| {base['name']} (no memory) | 0 | {fmt_score(base['bleu'])} | {fmt_score(base['chrf'])} | |")
    lines.append("")
    lines.append(f"{res['bleu_label']} signature: {res['bleu_signature']}; {res['n_sentences']} sentences; avg pairs "
                 f"used = the selection's pairs per example (at most {res['max_k']})")
    return "\n".join(lines)


def plot_k_sweep(res: dict, path: str, title: Optional[str] = None) -> str:
    """BLEU against the number of retrieved pairs (log2 axis), the adaptive point marked (Fig. 4.4)."""

    def draw(ax):
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

    return _plot(draw, path, res["bleu_label"], title or f"{res['bleu_label']} vs retrieved pairs (Fig. 4.4)",
                 (6.0, 4.0))

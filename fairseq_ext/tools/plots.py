"""Plots of the offline tools (matplotlib, Agg backend; imported only when a plot is asked for).

:func:`pyplot` is the one way the tools get matplotlib (scores, attention analysis, transfer sweeps).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Mapping, Optional, Sequence, Union

__all__ = ["plot_length_buckets", "pyplot"]

Rows = Sequence[Mapping[str, Any]]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display), without matplotlib's debug chatter."""
    # importing fairseq sets the root logger to DEBUG; keep matplotlib's font-search chatter
    # out of the CLI output unless someone configured the matplotlib logger on purpose.
    mpl_logger = logging.getLogger("matplotlib")
    if mpl_logger.level == logging.NOTSET:
        mpl_logger.setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg", force=True)  # no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_length_buckets(
    rows: Union[Rows, Mapping[str, Rows]],
    out_path: Union[str, "os.PathLike[str]"],
    *,
    title: Optional[str] = None,
    bleu_label: str = "BLEU",
    chrf_label: str = "chrF2",
    dpi: int = 150,
) -> str:
    """Bar plot of BLEU per source-length bucket, from :func:`score.bleu_by_length` rows.

    ``rows`` is one system's rows (bars = BLEU, line = chrF, same 0-100 axis) or
    ``{system name: rows}`` (grouped BLEU bars, one colour per system; the buckets must match).
    Tick labels carry the sentence count per bucket.  Empty buckets are drawn as gaps.
    Writes a PNG to ``out_path`` (parent folders created) and returns the path.
    """
    systems: dict[str, Rows] = dict(rows) if isinstance(rows, Mapping) else {"": rows}
    if not systems:
        raise ValueError("nothing to plot")
    first = next(iter(systems.values()))
    buckets = [r["bucket"] for r in first]
    for name, rs in systems.items():
        if [r["bucket"] for r in rs] != buckets:
            raise ValueError(f"system {name!r} has different buckets")
    counts = [r["count"] for r in first]

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(buckets) + 2), 4.2))
    try:
        x = list(range(len(buckets)))
        k = len(systems)
        width = 0.8 / k
        for j, (name, rs) in enumerate(systems.items()):
            vals = [r["bleu"] if r["bleu"] is not None else float("nan") for r in rs]
            pos = [xi - 0.4 + width * (j + 0.5) for xi in x]
            bars = ax.bar(pos, vals, width=width, label=(name or bleu_label))
            for b, v in zip(bars, vals):
                if v == v:  # not NaN
                    ax.annotate(f"{v:.1f}", (b.get_x() + b.get_width() / 2, v),
                                ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x)
        ax.set_xticklabels([f"{b}\n(n={c})" for b, c in zip(buckets, counts)])
        ax.set_xlim(-0.6, len(buckets) - 0.4)  # keep empty buckets visible
        ax.set_xlabel("source length (whitespace tokens)")
        top = [r.get("bleu") for rs in systems.values() for r in rs]
        if k == 1:
            # BLEU and chrF are both 0-100: one axis, chrF as a line over the bars
            chrf = [r["chrf"] if r.get("chrf") is not None else float("nan") for r in first]
            ax.plot(x, chrf, color="tab:red", marker="o", label=chrf_label)
            top += [r.get("chrf") for r in first]
            ax.set_ylabel(f"{bleu_label} / {chrf_label}")
        else:
            ax.set_ylabel(bleu_label)
        vals_top = [v for v in top if v is not None]
        ax.set_ylim(0, max(vals_top) * 1.15 if vals_top and max(vals_top) > 0 else 1.0)
        ax.legend(loc="upper right", fontsize=8)
        ax.set_title(title or f"{bleu_label} by source length")
        fig.tight_layout()
        out = os.fspath(out_path)
        parent = os.path.dirname(os.path.abspath(out))
        os.makedirs(parent, exist_ok=True)
        fig.savefig(out, dpi=dpi, format="png")
    finally:
        plt.close(fig)
    return out

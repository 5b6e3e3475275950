"""Reading fairseq's logs: one parser for what the recipes measure from ``fairseq-train --log-format simple``
and ``fairseq-generate``.

A training log line of the simple format is ``DATE TIME | LEVEL | KIND | cells`` (or ``LEVEL:KIND:cells`` where
logging was configured before fairseq set its format), where KIND is

* ``train_inner``: an interval of ``--log-interval`` updates, ``epoch 001:     25 / 119 loss=12.009, ...,
  num_updates=25, lr=..., train_wall=111, wall=115`` (``key=value`` cells);
* ``train``: the summary of an epoch, ``epoch 001 | loss 9.645 | ... | num_updates 119 | ... | wall 782``;
* ``valid`` (the subset's name): a validation, ``epoch 002 | valid on 'valid' subset | loss 7.786 | nll_loss 7.027 | ... |
  bleu 0.82 | ... | num_updates 200 | best_bleu 2.87`` (``key value`` cells).

:func:`records` turns every such line into ``{"kind", "epoch", "subset", "time", "stats"}``; the rest reads those:
:func:`validations` and :func:`intervals` (the validations, the training intervals with their update counts),
:func:`parse_train_log` (parameters, training tokens/s, updates, epochs, the validations' losses and BLEU),
:func:`train_cost` (seconds per update from the epoch summaries), :func:`parse_curve` (the learning curve of a
run validated with ``--eval-bleu``: dev loss and BLEU against updates, training and elapsed wall-clock, resumed
runs included), :func:`stop_reason` (why the last run stopped) and :func:`parse_generate_log` (fairseq-generate's
"Translated N sentences" summary).  :func:`write_curve_csv`, :func:`write_curves_csv` and :func:`plot_curves` write curves.
"""
from __future__ import annotations

import csv
import datetime
import re
from pathlib import Path

KINDS = ("train_inner", "train", "valid")
# fairseq's format (``DATE TIME | INFO | tag | ...``) or Python's default one (``INFO:tag:...``, where logging was
# configured before fairseq_cli set its format)
_KIND = re.compile(r"(?:\| ([\w.-]+) \| |^[A-Z]+:([\w.-]+):)(epoch \d+.*)$")
_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^-?(?:inf|nan)$")
_INNER_PREFIX = re.compile(r"^epoch (\d+):\s+\d+\s*/\s*\d+\s+")
_CELL = re.compile(r"^\s*([A-Za-z_]\w*)[ =](\S+)\s*$")


def timestamp(line: str):
    """Seconds since the epoch of a log line's ``YYYY-MM-DD HH:MM:SS`` prefix (None without one)."""
    try:
        return datetime.datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None


def stats(cells: str) -> dict:
    """The numeric ``key value`` / ``key=value`` cells of a fairseq log line's text after its KIND
    (``| `` or ``, `` separated); a ``train_inner`` line's ``epoch E:  i / n`` prefix gives ``epoch``."""
    out = {}
    m = _INNER_PREFIX.match(cells)
    if m:
        out["epoch"] = float(m.group(1))
        cells = cells[m.end():]
    for cell in re.split(r" \| |, ", cells):
        m = _CELL.match(cell)
        if m and _NUMBER.match(m.group(2)):
            out[m.group(1)] = float(m.group(2))
    return out


def records(text: str):
    """Every ``train_inner`` / ``train`` / ``valid`` line of a fairseq-train log, in order, as
    ``{"kind", "epoch" (int or None), "subset" (valid lines), "time" (seconds or None), "stats"}``."""
    for line in text.splitlines():
        m = _KIND.search(line)
        if not m:
            continue
        tag, rest = m.group(1) or m.group(2), m.group(3)
        sub = re.search(r"valid on '([^']+)' subset", rest)
        kind = "valid" if sub else tag  # a validation's tag is its subset's name (valid, valid_tl, ...)
        if kind not in KINDS:
            continue
        st = stats(rest)
        ep = re.match(r"epoch (\d+)", rest)
        yield {"kind": kind, "epoch": int(ep.group(1)) if ep else None, "subset": sub.group(1) if sub else None,
               "time": timestamp(line), "stats": st}


def validations(text: str) -> list:
    """Every validation of a fairseq-train log: its cells with ``subset`` and ``epoch`` (``loss``, ``nll_loss``,
    ``bleu``, ``num_updates``, ... as the criterion and ``--eval-bleu`` log them)."""
    return [{**r["stats"], "subset": r["subset"], "epoch": r["epoch"]}
            for r in records(text) if r["kind"] == "valid" and r["subset"] is not None]


def intervals(text: str, kind: str = "train_inner") -> list:
    """The ``train_inner`` intervals (or, with ``kind="train"``, the epoch summaries) of a fairseq-train log that
    log ``num_updates``: their cells plus ``updates``, the updates in the interval (a resumed run restarts the
    count at its checkpoint's update, so an interval that goes back counts from 0)."""
    out, prev = [], 0
    for r in records(text):
        if r["kind"] != kind or "num_updates" not in r["stats"]:
            continue
        upd = int(r["stats"]["num_updates"])
        out.append({**r["stats"], "updates": upd - prev if upd > prev else upd})
        prev = upd
    return out


def parse_train_log(text: str) -> dict:
    """What a fairseq-train log says about a run: ``params`` (``num. model params``), ``train_tokens_per_s`` (mean
    ``wps`` of the logged intervals, the first one skipped: the data loader's warm-up; the epoch summaries when
    fewer than two intervals were logged), ``updates`` and ``epochs`` (the last logged), and ``valid_loss`` /
    ``valid_bleu`` (every validation's)."""
    recs = list(records(text))
    params = re.search(r"num\. (?:shared )?model params: ([\d,]+)", text)
    wps = [r["stats"]["wps"] for r in recs if r["kind"] == "train_inner" and "wps" in r["stats"]]
    if len(wps) < 2:  # too short a run for interval logs: the per-epoch summaries (none: None)
        wps = [r["stats"]["wps"] for r in recs if r["kind"] == "train" and "wps" in r["stats"]]
        wps = [0.0] + wps if wps else []
    upd = [r["stats"]["num_updates"] for r in recs if "num_updates" in r["stats"]]
    epochs = [r["epoch"] for r in recs if r["kind"] == "train" and r["epoch"] is not None]
    valid = [r["stats"] for r in recs if r["kind"] == "valid"]
    return {
        "params": int(params.group(1).replace(",", "")) if params else None,
        "train_tokens_per_s": (sum(wps[1:]) / len(wps[1:])) if len(wps) > 1 else (wps[0] if wps else None),
        "updates": int(upd[-1]) if upd else 0,
        "epochs": epochs[-1] if epochs else 0,
        "valid_loss": [v["loss"] for v in valid if "loss" in v],
        "valid_bleu": [v["bleu"] for v in valid if "bleu" in v],
    }


def train_losses(text: str) -> list:
    """The training loss of every logged ``train_inner`` interval."""
    return [r["stats"]["loss"] for r in records(text) if r["kind"] == "train_inner" and "loss" in r["stats"]]


def train_cost(text: str) -> dict:
    """Seconds per update of a fairseq-train log: the ``train_wall`` of its epoch summaries summed (training steps
    only) and the last ``wall`` (validation and start-up included), each over the last ``num_updates``; {} when no
    epoch summary has updates."""
    train_wall, wall, updates = 0.0, None, None
    for r in records(text):
        if r["kind"] != "train":
            continue
        st = r["stats"]
        updates = int(st["num_updates"]) if "num_updates" in st else updates
        wall = st.get("wall", wall)
        train_wall += st.get("train_wall", 0.0)
    if not updates:
        return {}
    return {"train_wall_s": train_wall, "wall_s": wall, "updates": updates,
            "s_per_update": round(train_wall / updates, 3),
            "wall_s_per_update": round(wall / updates, 3) if wall is not None else None}


def stop_reason(log_text: str, patience: int, max_updates: int, last_updates: int) -> str:
    """Why the last fairseq-train run of a (possibly appended, resumed) log stopped: "patience", "max-updates" or
    "budget". Only the last run's lines count: a run resumed after an early stop keeps the earlier run's "early
    stop" line in the same log."""
    runs = log_text.split("done training in")
    last = runs[-2] if len(runs) > 1 else log_text
    if patience and "early stop since valid performance hasn't improved" in last:
        return "patience"
    return "max-updates" if max_updates and last_updates >= max_updates else "budget"


CURVE_FIELDS = ("updates", "epoch", "train_wall_s", "wall_s", "dev_loss", "dev_nll_loss", "dev_bleu",
                "train_loss", "train_nll_loss")


def parse_curve(text: str) -> list:
    """The learning curve of a fairseq-train log with ``--eval-bleu``: one row per validation (dev loss, dev
    BLEU) with the training wall-clock (the sum of the ``train_inner`` intervals' train_wall: optimisation
    only) and the elapsed wall-clock (from the log's timestamps, validations included) at that update, and the
    training loss of the last ``train_inner`` interval before it (fairseq's mean over --log-interval updates:
    dev loss falling behind a baseline's with training loss level is overfitting; both behind, slower fitting).  A
    resumed run (an appended log: fairseq's "Loaded checkpoint ... (epoch E @ U updates)") restarts at update U:
    both clocks go back to the validation at U (the work logged after it was lost, and the time between the
    runs is not counted), and the repeated updates' later rows win.  (fairseq's own ``wall`` reads 0 after a
    resumption, so it is not used.)"""
    rows, train_wall, wall0, seg_start, train = {}, 0.0, 0.0, None, {}
    for line in text.splitlines():
        ts = timestamp(line)
        if ts is None:
            continue
        resumed = re.search(r"Loaded checkpoint .*\(epoch \d+ @ (\d+) updates\)", line)
        if resumed:  # back to the checkpoint's update: the work logged after it was lost
            done = [u for u in rows if u <= int(resumed.group(1))]
            train_wall, wall0 = (rows[max(done)]["train_wall_s"], rows[max(done)]["wall_s"]) if done else (0.0, 0.0)
            seg_start, train = ts, {}
        elif "No existing checkpoint found" in line or seg_start is None:
            seg_start = ts
        rec = next(records(line), None)
        if rec is None:
            continue
        st = rec["stats"]
        if rec["kind"] == "train_inner":
            train_wall += st.get("train_wall", 0.0)
            train = st
        elif rec["kind"] == "valid" and rec["subset"] is not None and "num_updates" in st:
            u = int(st["num_updates"])
            rows[u] = {"updates": u, "epoch": rec["epoch"], "train_wall_s": round(train_wall, 1),
                       "wall_s": round(wall0 + (ts - seg_start), 1), "dev_loss": st.get("loss"),
                       "dev_nll_loss": st.get("nll_loss"), "dev_bleu": st.get("bleu"),
                       "train_loss": train.get("loss"), "train_nll_loss": train.get("nll_loss")}
    return [rows[u] for u in sorted(rows)]


def best_point(rows: list):
    """The validation with the best dev BLEU (the first of equals: fairseq keeps the earlier checkpoint)."""
    pts = [r for r in rows if r["dev_bleu"] is not None]
    if not pts:
        return None
    best = max(r["dev_bleu"] for r in pts)
    return next(r for r in pts if r["dev_bleu"] == best)


def curve_points(curve: list) -> dict:
    """The converged table's numbers of a curve: its best dev BLEU point and its last point."""
    best = best_point(curve)
    return {"points": len(curve), "best_dev_bleu": best["dev_bleu"], "best_updates": best["updates"],
            "best_train_wall_s": best["train_wall_s"], "best_wall_s": best["wall_s"],
            "last_updates": curve[-1]["updates"], "last_train_wall_s": curve[-1]["train_wall_s"]}


def write_curve_csv(path: Path, rows: list) -> None:
    """One configuration's curve as CSV (:data:`CURVE_FIELDS`)."""
    _write_csv(path, CURVE_FIELDS, rows)


def write_curves_csv(path: Path, curves: dict) -> None:
    """The curves of a job, ``{config: curve}``, as one CSV with a ``config`` column."""
    _write_csv(path, ("config",) + CURVE_FIELDS, [{"config": n, **r} for n, rows in curves.items() for r in rows])


def _write_csv(path: Path, fields: tuple, rows: list) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


LINE_STYLES = ("-", "--", ":", "-.")


def line_style(i: int) -> dict:
    """Colour and dash of the i-th configuration's line: the 10 colours of matplotlib's cycle, then the same
    colours dashed, dotted, ... (matplotlib's default cycle would give the 11th line the 1st one's colour)."""
    return {"color": f"C{i % 10}", "linestyle": LINE_STYLES[(i // 10) % len(LINE_STYLES)]}


def plot_curves(curves: dict, path: Path, title: str) -> None:
    """Dev BLEU vs updates, dev BLEU vs training wall-clock (minutes), dev NLL and training NLL vs updates; a line
    per config."""
    from fairseq_ext.tools.plots import pyplot
    plt = pyplot()  # Agg, without matplotlib's font-search debug lines in the job log

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    for i, (name, rows) in enumerate(curves.items()):
        kw = dict(marker=".", label=name, **line_style(i))
        pts = [r for r in rows if r["dev_bleu"] is not None]
        axes[0].plot([r["updates"] for r in pts], [r["dev_bleu"] for r in pts], **kw)
        axes[1].plot([r["train_wall_s"] / 60 for r in pts], [r["dev_bleu"] for r in pts], **kw)
        # the NLL, not the criterion's loss: label smoothing and auxiliary terms (MS-12's extra decoders) make
        # losses incomparable across configurations; criteria without nll_loss log the NLL as their loss
        for ax, split in ((axes[2], "dev"), (axes[3], "train")):
            pts = [(r["updates"], r.get(f"{split}_nll_loss") if r.get(f"{split}_nll_loss") is not None
                    else r.get(f"{split}_loss")) for r in rows]
            pts = [p for p in pts if p[1] is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], **kw)
    for ax, xl, yl in zip(axes, ("updates", "training wall-clock (min, validation excluded)", "updates", "updates"),
                          ("dev BLEU (greedy)", "dev BLEU (greedy)", "dev NLL (base 2; main decoder)",
                           "training NLL (base 2; last log interval)")):
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_generate_log(text: str) -> dict:
    """fairseq-generate's summary line: sentences translated, decoding seconds, sentences/s and tokens/s."""
    m = re.search(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s, "
                  r"([\d.]+) tokens/s\)", text)
    if not m:
        return {}
    return {"n_translated": int(m.group(1).replace(",", "")), "decode_s": float(m.group(3)),
            "decode_sent_per_s": float(m.group(4)), "decode_tokens_per_s": float(m.group(5))}

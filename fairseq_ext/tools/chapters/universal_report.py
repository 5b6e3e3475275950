"""The report of Gu (2019) ch. 5, universal NMT: ULR + MoLE (``recipes/gu/ch5.sh``; ``python
examples/universal_nmt/report.py``): Table 5.4, Fig. 5.5, Fig. 5.8, cost.

Reads the recipe's output folder OUT (``runs/gu_ch5/<lowres>/<budget>min`` or ``runs/gu_ch5_tiny``)::

    OUT/<tag>/scores.json            `python -m fairseq_ext.tools.evaluation.score compare --json` of the tag's systems
                                     against multi (baseline; systems named by their generate-test.txt paths,
                                     OUT/<tag>/<system>/test/generate-test.txt)
    OUT/<tag>/<system>/data_dir      the data folder the system was trained on (its manifest.json gives the
                                     English tokens of the low-resource training pairs)
    OUT/<tag>/<system>/train.log     fairseq-train's log (the cost line)
    OUT/<tag>/vanilla/no_data        optional marker: vanilla has no data at this size (zero-resource), drawn
                                     at BLEU 0 in Fig. 5.5 (never assumed without it)

(tags: 0k, 16k, full, or whatever ``tag_of`` of the recipe names the sizes) and writes

* ``OUT/table5_4.md``: Table 5.4's ladder at the ``--main`` tag, rows in the thesis order (Vanilla, Multi-NMT,
  Closest Uni-Token Only, + ULR (A=I), + ULR, + ULR + MoLE; a system that was not run is left out), sacreBLEU
  BLEU / chrF, ΔBLEU against Multi-NMT with the paired-bootstrap p, the thesis's BLEU (Ro-En 6k, aux Es Fr It Pt)
  beside; the other tags in the same layout; the training speed of each system relative to Multi-NMT (fairseq's
  ``wps``; separate runs, so load-dependent);
* ``OUT/fig5_5.png`` + ``OUT/fig5_5.md``: BLEU against the low-resource size (English tokens of the low-resource
  training pairs, from each data folder's manifest) for vanilla / multi / ulr;
* ``OUT/fig5_8_gates.png`` (+ ``.jsonl``, ``_summary.json``): when ``OUT/<main>/ulr_mole/checkpoint_best.pt``
  exists, the MoLE gate of 3 test sentences (``python -m fairseq_ext.tools.corpora.ulr gates``) and its summary over the
  first GATE_SUMMARY_SENTENCES test sentences (mean gate per expert, saturated share, entropy); the same as
  ``fig5_8_gates_<system>.*`` for each MoLE diagnostic system (ulr_mole_res, ulr_mole_gw0) that was trained;
* ``OUT/report.json``: every number above.

The table is printed on stdout.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import subprocess
import sys

from fairseq_ext.tools.evaluation import fairseq_log
from fairseq_ext.tools.common import ToolError, log, run_cli
from fairseq_ext.tools.evaluation.runs import fmt

# the repository (the data folders of a manifest are relative to it; the gates tool runs there)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Table 5.4's rows (the thesis order) and labels
SYSTEMS = [("vanilla", "Vanilla"), ("multi", "Multi-NMT"), ("closest", "Closest Uni-Token Only"),
           ("ulr_a_i", "Multi-NMT + ULR (A=I)"), ("ulr", "Multi-NMT + ULR"), ("multi_bt", "Multi-NMT + BT"),
           ("ulr_bt", "Multi-NMT + ULR + BT"), ("ulr_mole", "Multi-NMT + ULR + MoLE"),
           ("ulr_mole_bt", "Multi-NMT + ULR + MoLE + BT"),
           ("ulr_mole_res", "Multi-NMT + ULR + MoLE, residual (diagnostic)"),
           ("ulr_mole_gw0", "Multi-NMT + ULR + MoLE, unsupervised gate (diagnostic)")]
LABELS = dict(SYSTEMS)
# Thesis Table 5.4 (spec 004a §5.8): Ro-En test BLEU, 6k Ro-En pairs, aux Es Fr It Pt
THESIS_BLEU = {"vanilla": 1.21, "multi": 14.94, "closest": 5.83, "ulr_a_i": 18.61, "ulr": 20.01, "multi_bt": 17.91,
               "ulr_bt": 22.35, "ulr_mole": 20.51, "ulr_mole_bt": 22.92}
FIG55_SYSTEMS = ("vanilla", "multi", "ulr")
BASELINE = "multi"
NO_DATA = "no_data"
GATE_SENTENCES = 3
GATE_SUMMARY_SENTENCES = 300
MOLE_SYSTEMS = ("ulr_mole", "ulr_mole_res", "ulr_mole_gw0")   # the systems whose gate the report exports


def label(system: str) -> str:
    """The table label of a system: Table 5.4's, "<... + BT> (real pairs ×K)" for ch5.sh's *_btK systems, else the
    folder name."""
    m = re.fullmatch(r"(.+_bt)(\d+)", system)
    if m and m.group(1) in LABELS:
        return f"{LABELS[m.group(1)]} (real pairs ×{m.group(2)})"
    return LABELS.get(system, system)



# --------------------------------------------------------------------------- reading
def system_of(path: str) -> str:
    """The system of a hypothesis path OUT/<tag>/<system>/test/generate-test.txt (or any path with a known system
    folder in it)."""
    parts = os.path.normpath(path).split(os.sep)
    if len(parts) >= 3 and parts[-2] == "test":
        return parts[-3]
    known = [p for p in parts if p in LABELS]
    return known[-1] if known else os.path.basename(os.path.dirname(path)) or path


def read_scores(path: str) -> dict:
    """``{system: {bleu, chrf, d_bleu, p_bleu, d_chrf, p_chrf}}`` (the baseline with deltas None) of one
    ``score compare --json`` file, plus ``_meta`` (metric labels, signatures, bootstrap settings)."""
    with open(path, encoding="utf-8") as f:
        res = json.load(f)
    try:
        bleu_m, chrf_m = res["metrics"][:2]
        out = {system_of(res["baseline"]["name"]): {"bleu": res["baseline"][bleu_m]["score"],
                                                     "chrf": res["baseline"][chrf_m]["score"],
                                                     "d_bleu": None, "p_bleu": None, "d_chrf": None, "p_chrf": None,
                                                     "baseline": True}}
        for s in res["systems"]:
            out[system_of(s["name"])] = {"bleu": s[bleu_m]["score"], "chrf": s[chrf_m]["score"],
                                         "d_bleu": s[bleu_m]["delta"], "p_bleu": s[bleu_m]["p_value"],
                                         "d_chrf": s[chrf_m]["delta"], "p_chrf": s[chrf_m]["p_value"],
                                         "baseline": False}
        out["_meta"] = {"labels": [res.get("labels", {}).get(m, m) for m in (bleu_m, chrf_m)],
                        "signatures": res.get("signatures", {}), "n_bootstrap": res.get("n_bootstrap"),
                        "n_sentences": res.get("n_sentences"), "baseline": system_of(res["baseline"]["name"])}
    except (KeyError, ValueError, TypeError) as e:
        raise ToolError(f"not the JSON of `fairseq_ext.tools.evaluation.score compare --json` ({e!r})", path) from None
    return out


def tag_dirs(out: str) -> list[str]:
    """The tags of OUT: its sub-folders that hold a scores.json or a system folder (with data_dir / train.log)."""
    tags = []
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        if not os.path.isdir(d) or name in ("data",):
            continue
        if os.path.isfile(os.path.join(d, "scores.json")) or any(
                os.path.isfile(os.path.join(d, s, f)) for s in os.listdir(d) for f in ("data_dir", NO_DATA)
                if os.path.isdir(os.path.join(d, s))):
            tags.append(name)
    return tags


def tokens_of_tag(tag: str):
    """The budget a tag names (0k -> 0, 16k -> 16000, 300 -> 300), None for 'full' or anything else."""
    m = re.fullmatch(r"(\d+)(k?)", tag)
    return None if not m else int(m.group(1)) * (1000 if m.group(2) else 1)


def manifest_of(system_dir: str):
    """The manifest.json of the data folder named by ``system_dir/data_dir``, None if there is none."""
    p = os.path.join(system_dir, "data_dir")
    if not os.path.isfile(p):
        return None
    with open(p, encoding="utf-8") as f:
        d = f.read().strip()
    if not os.path.isabs(d):
        d = os.path.join(ROOT, d) if not os.path.isdir(d) else d
    mp = os.path.join(d, "manifest.json")
    if not os.path.isfile(mp):
        return None
    with open(mp, encoding="utf-8") as f:
        return json.load(f)


def lowres_tokens(out: str, tag: str, system: str):
    """x of Fig. 5.5: English tokens of the low-resource training pairs of (tag, system) — its data folder's
    manifest (``lowres_train_en_tokens``), else multi's of the same tag, else the tag's own number."""
    for s in (system, BASELINE):
        m = manifest_of(os.path.join(out, tag, s))
        if m and m.get("lowres_train_en_tokens") is not None:
            return int(m["lowres_train_en_tokens"])
    return tokens_of_tag(tag)


def words_per_second(log_path: str):
    """Training words per second of a fairseq-train log: Σ words / Σ seconds over the ``train | epoch`` summary
    lines (words = wpb × updates of the epoch, seconds = words / wps), or over the ``train_inner`` lines when no
    epoch ended; None when the log has neither."""
    if not os.path.isfile(log_path):
        return None
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    for kind in ("train", "train_inner"):
        done = [r for r in fairseq_log.intervals(text, kind) if r.get("wps", 0) > 0 and r["updates"] > 0 and "wpb" in r]
        words = sum(r["wpb"] * r["updates"] for r in done)
        secs = sum(r["wpb"] * r["updates"] / r["wps"] for r in done)
        if secs > 0:
            return words / secs
    return None


# --------------------------------------------------------------------------- formatting
_f = functools.partial(fmt, missing="—")  # a table cell: an em dash where the number is missing


def ordered(systems) -> list[str]:
    known = [s for s, _ in SYSTEMS if s in systems]
    return known + sorted(s for s in systems if s not in LABELS and not s.startswith("_"))


def ladder_table(scores: dict, thesis: bool = True) -> list[str]:
    meta = scores["_meta"]
    bl, cl = meta["labels"]
    head = f"| System | {bl} | {cl} | Δ{bl} vs Multi-NMT (p) | Δ{cl} (p) |"
    head += " Thesis BLEU (Ro-En 6k) |" if thesis else ""
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for s in ordered(scores):
        r = scores[s]
        d = "—" if r["baseline"] else f"{r['d_bleu']:+.2f} ({r['p_bleu']:.3f}{'*' if r['p_bleu'] < 0.05 else ''})"
        dc = "—" if r["baseline"] else f"{r['d_chrf']:+.2f} ({r['p_chrf']:.3f}{'*' if r['p_chrf'] < 0.05 else ''})"
        row = f"| {label(s)} | {r['bleu']:.2f} | {r['chrf']:.2f} | {d} | {dc} |"
        if thesis:
            row += f" {_f(THESIS_BLEU.get(s))} |"
        lines.append(row)
    return lines


# --------------------------------------------------------------------------- figures
def fig5_5_points(out: str, tags: list[str], scores: dict) -> dict:
    """``{system: [(x, bleu, tag, no_data)]}`` sorted by x, for the systems of Fig. 5.5."""
    pts: dict = {s: [] for s in FIG55_SYSTEMS}
    for tag in tags:
        sc = scores.get(tag, {})
        for s in FIG55_SYSTEMS:
            if s in sc:
                x = lowres_tokens(out, tag, s)
                if x is None:
                    log(f"[ch5 report] {tag}/{s}: no manifest and no size in the tag name: left out of Fig. 5.5")
                    continue
                pts[s].append((x, sc[s]["bleu"], tag, False))
            elif os.path.isfile(os.path.join(out, tag, s, NO_DATA)):
                x = lowres_tokens(out, tag, s)
                if x is not None:
                    pts[s].append((x, 0.0, tag, True))
    return {s: sorted(v) for s, v in pts.items() if v}


def plot_fig5_5(pts: dict, path: str, lowres: str) -> None:
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    try:
        style = {"vanilla": ("tab:gray", "s"), "multi": ("tab:blue", "o"), "ulr": ("tab:red", "^")}
        xs = sorted({p[0] for v in pts.values() for p in v})
        for s, v in pts.items():
            color, marker = style.get(s, (None, "o"))
            ax.plot([p[0] for p in v], [p[1] for p in v], marker=marker, color=color, label=label(s))
            for x, y, _, no_data in v:
                if no_data:
                    ax.annotate("no data", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                                color=color)
        pos = [x for x in xs if x > 0]
        if pos and max(pos) / min(pos) > 20:
            ax.set_xscale("symlog", linthresh=min(pos))
        tags = {}
        for v in pts.values():
            for x, _, tag, _ in v:
                tags.setdefault(x, tag)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{tags[x]}\n{x:,}" for x in xs], fontsize=7)
        ax.set_xlabel(f"English tokens of the {lowres}-en training pairs")
        ax.set_ylabel("BLEU (sacreBLEU, test)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.set_title("Fig. 5.5: BLEU vs low-resource corpus size")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def run_gates(out: str, main_tag: str, n: int = GATE_SENTENCES, system: str = "ulr_mole"):
    """``python -m fairseq_ext.tools.corpora.ulr gates`` on OUT/<main>/<system>'s best checkpoint -> OUT/fig5_8_gates.png
    (``fig5_8_gates_<system>.png`` for another system than ulr_mole; the first ``n`` sentences plotted, the summary
    over GATE_SUMMARY_SENTENCES); (PNG path, summary dict), or None when there is no such checkpoint."""
    sysdir = os.path.join(out, main_tag, system)
    ckpt = os.path.join(sysdir, "checkpoint_best.pt")
    if not os.path.isfile(ckpt):
        return None
    data = None
    for s in (system, BASELINE):
        p = os.path.join(out, main_tag, s, "data_dir")
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                data = f.read().strip()
            break
    if not data:
        raise ToolError(f"{ckpt} exists but no data_dir file names its data folder", sysdir)
    stem = os.path.join(out, "fig5_8_gates" + ("" if system == "ulr_mole" else f"_{system}"))
    png, jsonl, summary = stem + ".png", stem + ".jsonl", stem + "_summary.json"
    cmd = [sys.executable, "-m", "fairseq_ext.tools.corpora.ulr", "gates", "--path", ckpt, "--data", os.path.join(data, "bin"),
           "--split", "test", "--n", str(max(n, GATE_SUMMARY_SENTENCES)), "--plot-n", str(n), "--json", jsonl,
           "--plot", png, "--summary", summary]
    log("[ch5 report] " + " ".join(cmd))
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        raise ToolError(f"the gates subcommand failed ({p.returncode}):\n{p.stderr[-2000:]}")
    with open(summary, encoding="utf-8") as f:
        return png, json.load(f)


def gate_line(system: str, png: str, summ: dict) -> str:
    """One line of table5_4.md on a MoLE system's gate (its PNG and the summary of ``ulr gates --summary``)."""
    experts = list(summ["mean_gate"])
    return (f"Fig. 5.8, {label(system)}: {os.path.basename(png)} (the gate of {GATE_SENTENCES} test "
            f"sentences). Over {summ['pieces']:,} pieces of {summ['sentences']} test sentences: mean gate "
            + ", ".join(f"{e} {summ['mean_gate'][e]:.3f}" for e in experts) + "; top expert "
            + ", ".join(f"{e} {summ['top_share'][e]:.3f}" for e in experts)
            + f"; saturated (max > 0.99) {summ['saturated_share']:.3f}; mean entropy {summ['mean_entropy']:.3f} nats "
            f"(uniform {math.log(len(experts)):.3f}).")


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="examples/universal_nmt/report.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the recipe's output folder (OUT)")
    ap.add_argument("--main", required=True, help="the tag of Table 5.4's size (e.g. 16k)")
    ap.add_argument("--no-gates", action="store_true", help="skip Fig. 5.8 even if the ulr_mole checkpoint exists")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.out):
        raise ToolError(f"no such folder: {a.out}")
    tags = tag_dirs(a.out)
    scores = {t: read_scores(os.path.join(a.out, t, "scores.json")) for t in tags
              if os.path.isfile(os.path.join(a.out, t, "scores.json"))}
    if not scores:
        raise ToolError(f"no <tag>/scores.json in {a.out} (the recipe scores a size once its multi system is decoded)")
    man = manifest_of(os.path.join(a.out, a.main, BASELINE)) or {}
    lowres = man.get("lowres", "low-resource")
    aux = ", ".join(man.get("aux") or []) or "?"

    md = [f"# Gu ch. 5, universal NMT: {lowres}→en test ({a.out})", ""]
    report = {"main": a.main, "lowres": lowres, "aux": man.get("aux"), "tags": {}, "thesis_bleu": THESIS_BLEU}
    for t, sc in scores.items():
        report["tags"][t] = {s: v for s, v in sc.items() if not s.startswith("_")}
        report["tags"][t]["_x"] = {s: lowres_tokens(a.out, t, s) for s in sc if not s.startswith("_")}
    if a.main in scores:
        sc = scores[a.main]
        meta = sc["_meta"]
        x = lowres_tokens(a.out, a.main, BASELINE)
        md += [f"## Table 5.4 at {a.main} ({_f(x, ',')} English tokens of {lowres}-en pairs; aux {aux})", "",
               *ladder_table(sc), "",
               f"sacreBLEU on {meta['n_sentences']} test sentences; paired bootstrap ({meta['n_bootstrap']} "
               f"resamples) against Multi-NMT, * = p < 0.05. Thesis column: Table 5.4 (Ro-En 6k, aux Es Fr It Pt, "
               f"7.8M auxiliary pairs; not the same data). Systems not run are left out.", ""]
        for m, sig in meta["signatures"].items():
            md.append(f"- {m} signature: `{sig}`")
        md.append("")
    else:
        md += [f"## Table 5.4 at {a.main}", "", f"(no {a.main}/scores.json: Multi-NMT was not decoded at this size)",
               ""]
    for t in sorted(scores, key=lambda t: (tokens_of_tag(t) is None, tokens_of_tag(t) or 0, t)):
        if t == a.main:
            continue
        x = lowres_tokens(a.out, t, BASELINE)
        md += [f"## Size {t} ({_f(x, ',')} English tokens of {lowres}-en pairs)", "",
               *ladder_table(scores[t], thesis=False), ""]

    # cost: training words per second of each system at the main size, relative to multi
    speed = {s: words_per_second(os.path.join(a.out, a.main, s, "train.log"))
             for s in ordered(set(scores.get(a.main, {})) | {s for s, _ in SYSTEMS
                                                             if os.path.isdir(os.path.join(a.out, a.main, s))})}
    speed = {s: v for s, v in speed.items() if v is not None}
    report["train_wps"] = speed
    if speed:
        base = speed.get(BASELINE)
        cells = [f"{label(s)} {v:,.0f}" + (f" ({v / base:.2f}× Multi-NMT)" if base else "")
                 for s, v in speed.items()]
        md += [f"Cost (training words/s at {a.main}, fairseq's wps; from separate runs, load-dependent): "
               + "; ".join(cells) + ".", ""]

    # cost measured interleaved (recipes/bench/speed.py, the recipe's cost stage): the number to quote
    cost_json = os.path.join(a.out, "cost", "speed.json")
    if os.path.isfile(cost_json):
        with open(cost_json, encoding="utf-8") as f:
            cost = json.load(f)
        conf = cost.get("configs") or {}
        if "gu5_multi" not in conf:
            raise ToolError(f"{cost_json}: no gu5_multi configuration (written by recipes/bench/speed.py "
                            "--baseline gu5_multi?)")
        names = {"gu5_multi": "multi", "gu5_ulr": "ulr", "gu5_ulr_mole": "ulr_mole"}
        cells = [f"{label(names.get(c, c))} {v['median_ratio']:.2f}× (range "
                 f"{min(v['ratios']):.2f}–{max(v['ratios']):.2f}; {v['params'] / 1e6:.2f}M parameters)"
                 for c, v in conf.items() if c != "gu5_multi"]
        report["cost_interleaved"] = {c: {"median_ratio": v["median_ratio"], "ratios": v["ratios"],
                                          "params": v["params"], "ms_per_step": v["ms_per_step"]}
                                      for c, v in conf.items()}
        md += [f"Cost, interleaved (training time per target word vs Multi-NMT "
               f"{conf['gu5_multi']['params'] / 1e6:.2f}M parameters, {conf['gu5_multi']['ms_per_step']:.0f} ms "
               f"per step; median over {cost['rounds']} rounds x {cost['steps']} steps of the same batches, one "
               f"process): " + "; ".join(cells) + ".", ""]

    # Fig. 5.5
    pts = fig5_5_points(a.out, tags, scores)
    report["fig5_5"] = {s: [{"x": x, "bleu": b, "tag": t, "no_data": nd} for x, b, t, nd in v] for s, v in pts.items()}
    if pts:
        png = os.path.join(a.out, "fig5_5.png")
        plot_fig5_5(pts, png, lowres)
        xs = sorted({p[0] for v in pts.values() for p in v})
        f55 = ["# Fig. 5.5: BLEU vs low-resource size", "",
               "| size (tag) | " + " | ".join(LABELS[s] for s in FIG55_SYSTEMS) + " |", "|---" * 4 + "|"]
        for x in xs:
            tag = next(p[2] for v in pts.values() for p in v if p[0] == x)
            cells = []
            for s in FIG55_SYSTEMS:
                p = next((p for p in pts.get(s, []) if p[0] == x), None)
                cells.append("—" if p is None else ("0 (no data)" if p[3] else f"{p[1]:.2f}"))
            f55.append(f"| {x:,} ({tag}) | " + " | ".join(cells) + " |")
        f55 += ["", f"x: English whitespace tokens of the {lowres}-en training pairs (each data folder's manifest). "
                "A system without a score at a size is left out (vanilla at 0 only with an explicit "
                f"`<tag>/vanilla/{NO_DATA}` marker, drawn at 0)."]
        with open(os.path.join(a.out, "fig5_5.md"), "w", encoding="utf-8") as f:
            f.write("\n".join(f55) + "\n")
        md += ["Fig. 5.5: fig5_5.png / fig5_5.md", ""]

    # Fig. 5.8
    if not a.no_gates:
        for system in MOLE_SYSTEMS:
            got = run_gates(a.out, a.main, system=system)
            if got:
                png, summ = got
                md += [gate_line(system, png, summ), ""]
                report["fig5_8" if system == "ulr_mole" else f"fig5_8_{system}"] = png
                report.setdefault("gate_summary", {})[system] = summ

    with open(os.path.join(a.out, "table5_4.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md))
    with open(os.path.join(a.out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    run_cli(main)

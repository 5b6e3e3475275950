"""The report of Gu (2019) ch. 6, MetaNMT (``recipes/gu/ch6.sh``; ``python examples/meta_nmt/report.py``):
Table 6.2 / Fig. 6.3 layout, cost ratio, and the recipe's helpers.

Three subcommands (``report`` is the default, so ``report.py --out OUT`` is the report):

``splits --data DIR --meta-langs es,fr,ru,ar --valid-langs tl``
    the binarized splits MetaNMT needs next to a ``fairseq-ext-data universal`` folder DIR
    (:mod:`fairseq_ext.tools.chapters.meta_splits`): ``train_multi``, ``train_meta_<V>``, ``valid_<V>``.

``concat --ref REF --out HYP.txt --ref-out REF.txt GEN...``
    The detokenised hypotheses of several ``fairseq-generate`` outputs (or plain files) of the same test
    set, in reference order, one after the other (the fine-tuning draws of one system), and the reference
    repeated as many times: the paired bootstrap of MetaNMT vs transfer on the concatenation of the draws
    (sentence *i* of draw *k* of both systems forms one pair: both systems fine-tune on the same draws).

``report --out OUT``
    Reads the recipe's output folder::

        OUT/settings.json                       the recipe's settings (languages, budgets, decoding)
        OUT/zero/<sys>/score.json               `fairseq_ext.tools.evaluation.score score --json` of the zero-shot decode
        OUT/ft/<sys>/<strategy>/d<k>/score.json the same, fine-tuned with <strategy> on draw k
        OUT/ft/<sys>/<strategy>/d<k>/train.log  its fairseq-train log (pairs drawn, updates, best valid loss)
        OUT/compare/<col>.json                  `score compare --json` (baseline multi, system meta) per
                                                column (zero, all, emb+enc, emb), on the concatenation
        OUT/cost/r<k>/{meta,multi}.log          the --measure-cost runs (fairseq-train logs)
        OUT/{meta,multi}/train.log              the two joint-phase runs

    (<sys>: ``meta`` = MetaNMT, ``multi`` = multilingual transfer) and writes ``OUT/table6_2.md`` (the
    Table 6.2 / Fig. 6.3 layout: BLEU mean ± std over the draws, paired bootstrap per column, per-draw
    BLEU, chrF, the thesis's Ro-En numbers beside, the cost ratio), ``OUT/fig6_3.png`` (bars with std
    error bars) and ``OUT/report.json``. The table is printed on stdout.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import sys

from fairseq_ext.tools.evaluation import fairseq_log
from fairseq_ext.tools.common import ToolError, log, read_json, read_lines, run_cli
from fairseq_ext.tools.chapters.meta_splits import SPLIT_DIR, build_splits, write_lines
from fairseq_ext.tools.evaluation.runs import fmt

SYSTEMS = [("meta", "MetaNMT"), ("multi", "Multilingual transfer")]
LABELS = dict(SYSTEMS)
BASELINE = "multi"
STRATEGIES = ("all", "emb+enc", "emb")
COLUMNS = [("zero", "zero-shot"), ("all", "fine-tuned: all"), ("emb+enc", "fine-tuned: emb+enc"),
           ("emb", "fine-tuned: emb")]
COLUMN_LABELS = dict(COLUMNS)

# Thesis Table 6.2 (spec 004a §6.5), Ro-En column: (zero, finetune mean, finetune std) per meta-training set;
# "finetune" = 16k English tokens, mean ± std over 5 draws (the strategy is not stated; Fig. 6.3: emb+enc best)
THESIS_RO = {"Es": (9.20, 15.71, 0.22), "Es Fr": (12.35, 17.46, 0.41), "Es Fr It Pt": (13.88, 18.54, 0.19),
             "De Ru": (10.60, 16.05, 0.31), "Es Fr It Pt De Ru": (15.93, 20.00, 0.27), "All": (18.12, 22.04, 0.23)}
THESIS_ROW = "Es Fr It Pt De Ru"   # the six source tasks of Fig. 6.3
THESIS_FULL_RO = 31.76              # Table 6.1 / 6.2: full supervised Ro-En

PAIRS_RE = re.compile(r"ulr_finetune_translation: training on (\d+) (\S+) pairs \((\d+) target tokens"
                      r"(?:, budget (\d+), draw (\d+))?\)")


# =========================================================================== concat
def concat_hypotheses(ref: str, gens: list[str], out: str, ref_out: str) -> int:
    """Write the hypotheses of ``gens`` (each aligned to ``ref``) one after the other to ``out`` and ``ref``
    repeated ``len(gens)`` times to ``ref_out``; returns the number of lines."""
    from fairseq_ext.tools.hypotheses import align_to_references, load_hypotheses

    refs = read_lines(ref)
    if not refs:
        raise ToolError(f"{ref}: empty reference file")
    if not gens:
        raise ToolError("concat: no hypothesis file")
    hyps = []
    for g in gens:
        hyps += align_to_references(load_hypotheses(g, field="D"), len(refs), source=str(g))
    for path, lines in ((out, hyps), (ref_out, refs * len(gens))):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_lines(path, (x.replace("\n", " ") for x in lines))
    return len(hyps)


# =========================================================================== reading the runs
def read_score(path: str):
    """(BLEU, chrF) of a `score score --json` file, None when it does not exist."""
    if not os.path.isfile(path):
        return None
    res = read_json(path)
    try:
        return float(res["bleu"]), float(res["chrf"])
    except (KeyError, TypeError, ValueError):
        raise ToolError("not the JSON of `fairseq_ext.tools.evaluation.score score --json`", path) from None


def read_compare(path: str):
    """``{delta, p, bleu_meta, bleu_multi, delta_chrf, p_chrf, n_sentences, n_bootstrap, signature}`` of a
    `score compare --json` file whose baseline is the transfer system and whose one system is MetaNMT."""
    if not os.path.isfile(path):
        return None
    res = read_json(path)
    try:
        bleu_m, chrf_m = res["metrics"][:2]
        s = res["systems"][0]
        return {"bleu_meta": s[bleu_m]["score"], "bleu_multi": res["baseline"][bleu_m]["score"],
                "delta": s[bleu_m]["delta"], "p": s[bleu_m]["p_value"], "delta_chrf": s[chrf_m]["delta"],
                "p_chrf": s[chrf_m]["p_value"], "n_sentences": res.get("n_sentences"),
                "n_bootstrap": res.get("n_bootstrap"), "baseline": res["baseline"]["name"], "system": s["name"],
                "signature": res.get("signatures", {}).get(bleu_m)}
    except (KeyError, IndexError, TypeError, ValueError):
        raise ToolError("not the JSON of `fairseq_ext.tools.evaluation.score compare --json`", path) from None


def _read_text(path: str) -> str:
    if not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _updates(text: str) -> list:
    return [int(r["stats"]["num_updates"]) for r in fairseq_log.records(text) if "num_updates" in r["stats"]]


def _valid_losses(text: str) -> list:
    """``[(subset, loss, update)]`` of the validations of a log."""
    return [(v["subset"], v["loss"], int(v["num_updates"])) for v in fairseq_log.validations(text)
            if "loss" in v and "num_updates" in v]


def finetune_info(log_path: str) -> dict:
    """What a fine-tuning log says: pairs and target tokens of the draw, updates run, best valid loss and
    its update."""
    text = _read_text(log_path)
    info: dict = {}
    m = PAIRS_RE.search(text)
    if m:
        info.update(pairs=int(m.group(1)), target_tokens=int(m.group(3)))
    upd = _updates(text)
    if upd:
        info["updates"] = max(upd)
    valid = [(loss, u) for _, loss, u in _valid_losses(text)]
    if valid:
        best = min(valid)
        info.update(best_valid_loss=best[0], best_update=best[1], validations=len(valid))
    return info


def train_info(log_path: str) -> dict:
    """Updates done and validation curve (subset, loss, update) of a joint-phase log."""
    text = _read_text(log_path)
    upd = _updates(text)
    valid = _valid_losses(text)
    out: dict = {"updates": max(upd) if upd else None, "valid": valid}
    if valid:
        best = min(valid, key=lambda v: v[1])
        out.update(best_valid_loss=best[1], best_update=best[2], valid_subset=best[0])
    return out


def inner_intervals(log_path: str) -> list[dict]:
    """The ``train_inner`` lines of a fairseq-train log (--log-format simple) as intervals: ``{updates (in the
    interval), wpb, train_wall, ups}``."""
    keys = ("updates", "wpb", "train_wall", "ups")
    return [{k: r[k] for k in keys} for r in fairseq_log.intervals(_read_text(log_path)) if all(k in r for k in keys)]


def seconds_per_update(log_path: str, skip: int = 1):
    """Seconds per update of a fairseq-train log over its ``train_inner`` intervals after the first ``skip``
    ones (the first holds the start-up): ``{train_wall: Σ train_wall / Σ updates (None when fairseq's
    whole-second train_wall sums to 0, e.g. tiny models), wall: Σ (updates / ups) / Σ updates (wall clock
    of the interval, data loading included), wpb: mean words per batch, updates}``; None when no interval
    is left."""
    ivals = [r for r in inner_intervals(log_path)[skip:] if r["updates"] > 0]
    n = sum(r["updates"] for r in ivals)
    if n <= 0:
        return None
    tw = sum(r["train_wall"] for r in ivals)
    wall = sum(r["updates"] / r["ups"] for r in ivals if r["ups"] > 0)
    return {"train_wall": tw / n if tw > 0 else None, "wall": wall / n if wall > 0 else None,
            "wpb": sum(r["wpb"] * r["updates"] for r in ivals) / n, "updates": n}


def cost_rounds(out: str) -> list[dict]:
    """Per --measure-cost round (OUT/cost/r<k>/{meta,multi}.log): seconds per update of each and their ratio,
    on fairseq's ``train_wall`` (time inside the updates) when both have it, else on the interval wall clock
    (``basis`` says which)."""
    root = os.path.join(out, "cost")
    rounds = []
    if not os.path.isdir(root):
        return rounds
    for name in sorted(os.listdir(root), key=lambda n: (len(n), n)):
        if not re.fullmatch(r"r\d+", name):
            continue
        m = seconds_per_update(os.path.join(root, name, "meta.log"))
        b = seconds_per_update(os.path.join(root, name, "multi.log"))
        if not m or not b:
            continue
        basis = "train_wall" if m["train_wall"] and b["train_wall"] else "wall"
        if not m[basis] or not b[basis]:
            continue
        rounds.append({"round": name, "basis": basis, "meta_spu": m[basis], "multi_spu": b[basis],
                       "ratio": m[basis] / b[basis], "meta_wpb": m["wpb"], "multi_wpb": b["wpb"],
                       "meta_updates": m["updates"], "multi_updates": b["updates"],
                       "wall_ratio": m["wall"] / b["wall"] if m["wall"] and b["wall"] else None})
    return rounds


def draws_of(out: str, system: str, strategy: str) -> dict:
    """``{k: {bleu, chrf, **finetune_info}}`` of the scored draws of (system, strategy)."""
    root = os.path.join(out, "ft", system, strategy)
    res = {}
    if not os.path.isdir(root):
        return res
    for name in os.listdir(root):
        m = re.fullmatch(r"d(\d+)", name)
        if not m:
            continue
        sc = read_score(os.path.join(root, name, "score.json"))
        if sc is None:
            continue
        res[int(m.group(1))] = {"bleu": sc[0], "chrf": sc[1], **finetune_info(os.path.join(root, name, "train.log"))}
    return dict(sorted(res.items()))


def mean_std(xs: list[float]):
    """(mean, sample standard deviation (n − 1; 0 for one value), n); (None, None, 0) for none."""
    if not xs:
        return None, None, 0
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0), len(xs)


# =========================================================================== formatting
_f = functools.partial(fmt, missing="—")  # a table cell: an em dash where the number is missing


def _ms(cell: dict | None, key: str = "bleu") -> str:
    if not cell or not cell.get("n"):
        return "—"
    if cell.get("zero"):
        return f"{cell[key]:.2f}"
    return f"{cell[key]:.2f} ± {cell[key + '_std']:.2f} (n={cell['n']})"


def _p(x) -> str:
    return "—" if x is None else f"{x:.3f}{'*' if x < 0.05 else ''}"


def collect(out: str) -> dict:
    """``{system: {column: cell}}``; a cell: bleu/chrf (+ _std), n, draws (per-draw numbers) or zero=True."""
    table: dict = {}
    for s, _ in SYSTEMS:
        row = {}
        z = read_score(os.path.join(out, "zero", s, "score.json"))
        if z:
            row["zero"] = {"bleu": z[0], "chrf": z[1], "n": 1, "zero": True}
        for st in STRATEGIES:
            d = draws_of(out, s, st)
            if not d:
                continue
            b, bs, n = mean_std([v["bleu"] for v in d.values()])
            c, cs, _ = mean_std([v["chrf"] for v in d.values()])
            row[st] = {"bleu": b, "bleu_std": bs, "chrf": c, "chrf_std": cs, "n": n, "draws": d}
        table[s] = row
    return table


def plot_fig6_3(table: dict, path: str, title: str) -> None:
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        cols = [c for c, _ in COLUMNS]
        width = 0.38
        colors = {"meta": "tab:red", "multi": "tab:blue"}
        for j, (s, label) in enumerate(SYSTEMS):
            xs, ys, es = [], [], []
            for i, c in enumerate(cols):
                cell = table.get(s, {}).get(c)
                if cell:
                    xs.append(i + (j - 0.5) * width)
                    ys.append(cell["bleu"])
                    es.append(0.0 if cell.get("zero") else cell["bleu_std"])
            if xs:
                ax.bar(xs, ys, width, yerr=es, capsize=3, color=colors[s], label=label, alpha=0.85)
                for x, y in zip(xs, ys):
                    ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 3), ha="center",
                                fontsize=7)
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels(["zero-shot", "all", "emb+enc", "emb"])
        ax.set_ylabel("BLEU (sacreBLEU, test)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def report(out: str) -> int:
    if not os.path.isdir(out):
        raise ToolError(f"no such folder: {out}")
    settings = read_json(os.path.join(out, "settings.json")) if os.path.isfile(os.path.join(out, "settings.json")) \
        else {}
    table = collect(out)
    if not any(table.values()):
        raise ToolError(f"no score in {out} (zero/<sys>/score.json, ft/<sys>/<strategy>/d<k>/score.json): the "
                        f"recipe scores each decode as it finishes")
    target = settings.get("target", "target")
    meta_langs = ", ".join(settings.get("meta_langs") or []) or "?"
    valid = settings.get("valid_lang", "?")
    tokens = settings.get("target_tokens")
    compares = {c: read_compare(os.path.join(out, "compare", f"{c}.json")) for c, _ in COLUMNS}

    md = [f"# Gu ch. 6, MetaNMT vs multilingual transfer: {target}→en test ({out})", "",
          f"Meta-training / joint-training languages {meta_langs}; validation task {valid} (meta-validation: "
          f"a copy fine-tuned on {valid} then scored on {valid}'s dev set); target {target}, fine-tuned on "
          f"draws of at most {_f(tokens, ',')} English subword tokens of {target}-en pairs "
          f"(`--target-token-budget`).", ""]

    # Table 6.2 / Fig. 6.3 layout
    md += ["## Table 6.2 / Fig. 6.3 layout: BLEU, mean ± std over the fine-tuning draws", "",
           "| System | " + " | ".join(lab for _, lab in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for s, label in SYSTEMS:
        row = table.get(s, {})
        md.append(f"| {label} | " + " | ".join(_ms(row.get(c)) for c, _ in COLUMNS) + " |")
    z, ft, sd = THESIS_RO[THESIS_ROW]
    md.append(f"| Thesis MetaNMT, Ro-En ({THESIS_ROW}) | {z:.2f} | — | {ft:.2f} ± {sd:.2f} (n=5)¹ | — |")
    md.append("| Thesis multilingual transfer, Ro-En | —² | —² | —² | —² |")
    md += ["", "¹ Table 6.2's \"finetune\" column (16k English tokens, 5 draws); the thesis does not say which "
               "strategy that column uses (Fig. 6.3 finds emb+enc best for both approaches). "
               "² Fig. 6.3 (meta vs multilingual transfer × all / emb+enc / emb, validation Ro or Lv) gives its "
               "numbers only as bars: there is no printed number to copy. "
               f"Full-data supervised Ro-En: {THESIS_FULL_RO} (Table 6.1). The thesis's data (Europarl, WMT, 18 "
               "source tasks, ulr_transformer_base) is not this recipe's: compare the direction of the "
               "differences, not the values.",
           "", "Std: sample standard deviation (n − 1) over the draws; zero-shot is one decode (no draw).", ""]

    # paired bootstrap per column
    md += ["## Paired bootstrap: MetaNMT − multilingual transfer", "",
           "| Column | MetaNMT BLEU | transfer BLEU | ΔBLEU (p) | ΔchrF (p) | sentences |", "|---" * 6 + "|"]
    sig = None
    for c, lab in COLUMNS:
        r = compares.get(c)
        if not r:
            md.append(f"| {lab} | — | — | — | — | — |")
            continue
        sig = sig or r.get("signature")
        md.append(f"| {lab} | {r['bleu_meta']:.2f} | {r['bleu_multi']:.2f} | {r['delta']:+.2f} ({_p(r['p'])}) | "
                  f"{r['delta_chrf']:+.2f} ({_p(r['p_chrf'])}) | {_f(r['n_sentences'], ',')} |")
    nb = next((r["n_bootstrap"] for r in compares.values() if r), None)
    md += ["", f"sacreBLEU paired bootstrap ({_f(nb, '')} resamples), * = p < 0.05. Fine-tuned columns: on the "
               "**concatenation of the draws** both systems have (draw k of MetaNMT paired with draw k of "
               "transfer: the same training pairs), so each resample draws (draw, sentence) pairs; the BLEU here "
               "is the corpus BLEU of that concatenation, not the mean of the table above. Zero-shot: the one "
               "decode of each system."]
    if sig:
        md.append(f"BLEU signature: `{sig}`")
    md.append("")

    # per draw
    draws = sorted({k for s, _ in SYSTEMS for st in STRATEGIES for k in table.get(s, {}).get(st, {}).get("draws", {})})
    if draws:
        md += ["## Per draw: BLEU (chrF)", "",
               "| System | strategy | " + " | ".join(f"draw {k}" for k in draws) + " | training pairs (tokens) |",
               "|---" * (len(draws) + 3) + "|"]
        for s, label in SYSTEMS:
            for st in STRATEGIES:
                cell = table.get(s, {}).get(st)
                if not cell:
                    continue
                d = cell["draws"]
                cells = [f"{d[k]['bleu']:.2f} ({d[k]['chrf']:.1f})" if k in d else "—" for k in draws]
                pairs = [f"{d[k]['pairs']} ({d[k]['target_tokens']})" for k in draws if k in d and "pairs" in d[k]]
                md.append(f"| {label} | {st} | " + " | ".join(cells) + f" | {', '.join(pairs) or '—'} |")
        md.append("")
        ups = [(s, st, k, v) for s, _ in SYSTEMS for st in STRATEGIES
               for k, v in table.get(s, {}).get(st, {}).get("draws", {}).items() if "updates" in v]
        if ups:
            n_upd = [v["updates"] for *_, v in ups]
            best = [v["best_update"] for *_, v in ups if "best_update" in v]
            md += [f"Fine-tuning runs: {len(ups)}, updates run {min(n_upd)}–{max(n_upd)} (early stopping on the "
                   f"{target} dev loss), best checkpoint at update {min(best) if best else '—'}–"
                   f"{max(best) if best else '—'}.", ""]

    # cost
    rounds = cost_rounds(out)
    cost = None
    if rounds:
        ratios = [r["ratio"] for r in rounds]
        cost = {"ratio_median": statistics.median(ratios), "rounds": rounds}
        bases = sorted({r["basis"] for r in rounds})
        basis_text = {
            "train_wall": "fairseq's `train_wall` (the time inside the updates: a meta-iteration = an inner Adam step "
                          "on D + forward/backward on D′ + the meta step; a multilingual update = one "
                          "forward/backward + step)",
            "wall": "the wall clock of each log interval (updates / fairseq's `ups`; data loading included) -- "
                    "fairseq's whole-second `train_wall` summed to 0 s here (too few or too small updates)"}
        md += ["## Cost: one meta-iteration vs one multilingual update", "",
               f"**One meta-iteration = {cost['ratio_median']:.2f}× one multilingual update** (median over "
               f"{len(rounds)} rounds; per round: " + ", ".join(f"{r['ratio']:.2f}" for r in rounds) + ").", "",
               "Measured in one run of the recipe (its cost stage): rounds of two fairseq-train calls back to back "
               "(meta_translation and universal_translation, the order alternating between rounds), the same "
               "model, data and --max-tokens (D and D′ each that size), from scratch, without validation; seconds "
               "per update = " + "; ".join(basis_text[x] for x in bases) + ", summed over the train_inner "
               "intervals after the first (start-up) one and divided by their updates.", "",
               "| round | basis | meta s/update (words/batch) | multilingual s/update (words/batch) | ratio | "
               "wall-clock ratio |", "|---|---|---|---|---|---|"]
        for r in rounds:
            md.append(f"| {r['round']} | {r['basis']} | {r['meta_spu']:.3f} ({r['meta_wpb']:.0f}) | "
                      f"{r['multi_spu']:.3f} ({r['multi_wpb']:.0f}) | {r['ratio']:.2f} | {_f(r['wall_ratio'])} |")
        md.append("")
    joint = {s: train_info(os.path.join(out, s, "train.log")) for s, _ in SYSTEMS}
    if any(v["updates"] for v in joint.values()):
        cells = []
        for s, label in SYSTEMS:
            v = joint[s]
            if v["updates"]:
                cells.append(f"{label} {v['updates']:,} updates" + (
                    f" (best {v['valid_subset']} loss {v['best_valid_loss']:.3f} at {v['best_update']:,})"
                    if "best_update" in v else ""))
        md += [f"Joint phase ({_f(settings.get('meta_budget_min'), 'g')} min each, side by side): "
               + "; ".join(cells) + ". MetaNMT's valid loss is after fine-tuning a copy on the validation task, "
               "transfer's is zero-shot on it: not comparable with each other.", ""]

    png = os.path.join(out, "fig6_3.png")
    plot_fig6_3(table, png, f"Fig. 6.3 layout: {target}→en, meta-train {meta_langs}, validation {valid}; "
                            f"error bars = std over draws")
    md += [f"Fig. 6.3: {os.path.basename(png)}", ""]
    md += ["## Thesis Table 6.2, Ro-En column (for reference)", "", "| Meta-Train | zero | finetune |", "|---|---|---|"]
    md += [f"| {k} | {v[0]:.2f} | {v[1]:.2f} ± {v[2]:.2f} |" for k, v in THESIS_RO.items()]
    md += [f"| Full Supervised | {THESIS_FULL_RO} | |", ""]

    res = {"settings": settings, "table": table, "compare": compares, "cost": cost, "joint": joint,
           "thesis_ro": THESIS_RO, "thesis_row": THESIS_ROW}
    with open(os.path.join(out, "table6_2.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, default=str)
    print("\n".join(md))
    return 0


# =========================================================================== CLI
def _langs(s: str) -> list[str]:
    return [x.strip() for x in (s or "").split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="examples/meta_nmt/report.py",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="the Table 6.2 / Fig. 6.3 report of OUT")
    r.add_argument("--out", required=True, help="the recipe's output folder (OUT)")
    s = sub.add_parser("splits", help="train_multi / train_meta_<V> / valid_<V> next to a universal data folder")
    s.add_argument("--data", required=True, help="a `fairseq-ext-data universal` folder")
    s.add_argument("--meta-langs", required=True, help="comma-separated meta-training (and joint-training) languages")
    s.add_argument("--valid-langs", required=True, help="comma-separated validation languages (dev sets built)")
    s.add_argument("--name", default=SPLIT_DIR, help="output folder inside DATA (default %(default)s)")
    s.add_argument("--force", action="store_true")
    c = sub.add_parser("concat", help="hypotheses of several decodes one after the other (+ the reference repeated)")
    c.add_argument("--ref", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--ref-out", required=True)
    c.add_argument("gens", nargs="+")
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("report", "splits", "concat", "-h", "--help"):
        argv.insert(0, "report")
    a = build_parser().parse_args(argv)
    if a.cmd == "splits":
        build_splits(a.data, _langs(a.meta_langs), _langs(a.valid_langs), a.name, a.force)
        return 0
    if a.cmd == "concat":
        n = concat_hypotheses(a.ref, a.gens, a.out, a.ref_out)
        log(f"[ch6 concat] {len(a.gens)} decodes, {n} lines -> {a.out}")
        return 0
    return report(a.out)


if __name__ == "__main__":
    run_cli(main)

"""The report of Gu (2019) ch. 9, simultaneous NMT with a learned READ/WRITE agent (``recipes/gu/ch9.sh``;
``python examples/simultaneous/report.py`` or ``python -m fairseq_ext.tools.chapters.simul_report``).

Two subcommands:

``filter``  the evaluation set of "sentences under 50 subwords": keeps the pairs of a split whose segmented source
            AND target have fewer than ``--max-len`` subword tokens (the pairs the NMT and the agents train on:
            fairseq's ``--max-source-positions 50 --max-target-positions 50`` count ⟨/s⟩, so a side of <= 49
            subwords fits) -- at most ``--max-pairs`` of them, evenly spaced -- and writes ``OUT/test.{src,tgt}``
            (segmented, for fairseq-preprocess ``--testpref OUT/test``),
            ``OUT/ref.txt`` / ``OUT/src.txt`` (the raw target / source lines of the kept pairs: the sacreBLEU
            references) and ``OUT/lines.txt`` (their 0-based line numbers in the split).

``report``  reads every decode ``DECODE_DIR/<system>.<greedy|beam>/`` (``generate-<subset>.txt``, whose D-lines are
            merged with ``--remove-bpe`` and optionally Moses-detokenised (``--detok moses``), and ``actions.jsonl``
            of ``--simul-actions-out``): the learned agents (``--agent NAME[=TRAIN_LOG]``),
            the baselines ``wue``, ``wos``, ``wiw``, ``wid`` and the wait-k reading ``wait<k>`` of the same
            environment. Per system: sacreBLEU BLEU / chrF (fairseq_ext.tools.evaluation.score) and the corpus AP, CW, AL,
            LAAL, DAL (fairseq_ext.tools.evaluation.simul_latency: means over the sentences; CW = the mean length of the READ
            runs that end in a WRITE; AL as Ma et al. 2019 define it, the rate from the hypothesis
            length; LAAL, Papi et al. 2022, the rate from max(hypothesis, reference) length, the reference
            length from the decode's T- lines in subwords + ⟨/s⟩, so an over-long output cannot lower it). Writes ``OUT/results.md`` + ``results.json`` and the plots
            ``fig9_5_bleu_ap.png`` (Fig. 9.5: AP vs BLEU, every agent as a greedy/beam pair, the baselines and the
            wait-k curve), ``fig9_6_bleu_cw.png`` (Fig. 9.6: CW vs BLEU), ``bleu_al.png`` and ``bleu_laal.png`` (AL, LAAL vs BLEU beside the
            wait-k curve) and, from the agents' training logs, ``fig9_4_curves.png`` (Fig. 9.4: validation BLEU,
            AP, CW against updates).

Dominance ("the agent's curve should dominate WIW/WID"), per delay measure (AP, CW, AL) and per search of the
agents (greedy, beam) against the greedy WIW / WID points: a baseline point (d_b, B_b) is *dominated* when an agent
point has d <= d_b and BLEU >= B_b (one of them strictly); otherwise it is *under the agents' curve* when the
piecewise-linear Pareto front of the agent points, read at d_b, is >= B_b; otherwise it is *above the curve* (the
agents do not dominate it there) or *outside the agents' delay range* (no agent reaches so low / high a delay:
not dominated, the curve does not reach it). The agents are also read against the wait-k curve at their own AL.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_ext.tools.evaluation import fairseq_log
from fairseq_ext.tools.common import ToolError, log, read_jsonl, read_lines, run_cli

SEARCHES = ("greedy", "beam")
BASELINES = ("wue", "wos", "wiw", "wid")
DELAYS = ("ap", "cw", "al")
DELAY_LABEL = {"ap": "AP", "cw": "CW", "al": "AL", "laal": "LAAL", "dal": "DAL"}
WAITK_RE = re.compile(r"^wait(\d+)$")
Point = Tuple[float, float, str]  # (delay, BLEU, label)


# ============================================================================================ filter
def filter_split(seg_prefix: str, raw_prefix: str, src: str, tgt: str, out: str, max_len: int = 50,
                 max_pairs: Optional[int] = None) -> Dict:
    """Keep the pairs of ``{seg,raw}_prefix.{src,tgt}`` whose segmented sides both have < ``max_len`` tokens
    (module doc) and, with ``max_pairs``, at most that many of them, evenly spaced over the split (every book
    keeps its share); returns ``{"kept", "under_max_len", "total", "max_len"}``."""
    seg = {lang: read_lines(f"{seg_prefix}.{lang}") for lang in (src, tgt)}
    raw = {lang: read_lines(f"{raw_prefix}.{lang}") for lang in (src, tgt)}
    n = len(seg[src])
    for name, lines in ((f"{seg_prefix}.{tgt}", seg[tgt]), (f"{raw_prefix}.{src}", raw[src]),
                        (f"{raw_prefix}.{tgt}", raw[tgt])):
        if len(lines) != n:
            raise ToolError(f"{len(lines)} lines but {seg_prefix}.{src} has {n}", name)
    keep = [i for i in range(n) if len(seg[src][i].split()) < max_len and len(seg[tgt][i].split()) < max_len]
    if not keep:
        raise ToolError(f"no pair of {seg_prefix}.{{{src},{tgt}}} has both sides under {max_len} subwords")
    under = len(keep)
    if max_pairs is not None and max_pairs < under:
        keep = [keep[(j * under) // max_pairs] for j in range(max_pairs)]
    os.makedirs(out, exist_ok=True)
    files = {f"test.{src}": [seg[src][i] for i in keep], f"test.{tgt}": [seg[tgt][i] for i in keep],
             "src.txt": [raw[src][i] for i in keep], "ref.txt": [raw[tgt][i] for i in keep],
             "lines.txt": [str(i) for i in keep]}
    for name, lines in files.items():
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        os.replace(tmp, os.path.join(out, name))
    return {"kept": len(keep), "under_max_len": under, "total": n, "max_len": max_len}


# ============================================================================================ systems
def system_kind(name: str, agents: Sequence[str]) -> str:
    """``agent`` | ``baseline`` | ``waitk`` (a ValueError for any other name)."""
    if name in agents:
        return "agent"
    if name in BASELINES:
        return "baseline"
    if WAITK_RE.match(name):
        return "waitk"
    raise ValueError(f"unknown system {name!r}: an --agent name, one of {', '.join(BASELINES)} or wait<k>")


def discover(decode_dir: str, subset: str) -> List[Tuple[str, str, str]]:
    """[(name, search, folder)] of the finished decodes (both files present; .tmp folders ignored)."""
    found = []
    if not os.path.isdir(decode_dir):
        raise ToolError("missing decode folder", decode_dir)
    for entry in sorted(os.listdir(decode_dir)):
        if entry.endswith(".tmp") or "." not in entry:
            continue
        name, search = entry.rsplit(".", 1)
        d = os.path.join(decode_dir, entry)
        if search in SEARCHES and os.path.isfile(os.path.join(d, f"generate-{subset}.txt")) \
                and os.path.isfile(os.path.join(d, "actions.jsonl")):
            found.append((name, search, d))
    return found


def detokenizer(kind: Optional[str], lang: Optional[str]):
    """``str -> str`` after the subword merge: identity, or Moses detokenisation (sacremoses) in ``lang``."""
    if kind in (None, "none"):
        return lambda line: line
    if kind != "moses":
        raise ToolError(f"unknown --detok {kind!r} (none, moses)")
    try:
        from sacremoses import MosesDetokenizer
    except ImportError:
        raise ToolError("--detok moses needs sacremoses: pip install sacremoses") from None
    md = MosesDetokenizer(lang=lang or "en")
    return lambda line: md.detokenize(line.split())


def score_system(folder: str, subset: str, ref: str, remove_bpe: Optional[str] = None, detok=None) -> Dict:
    """sacreBLEU of the D-lines of the fairseq-generate output (subwords merged with ``remove_bpe``, then
    ``detok``) + the corpus latency of one decode. The decodes are written without fairseq's --post-process,
    which re-encodes every hypothesis into the target dictionary (growing it while decoding)."""
    from fairseq_ext.tools.hypotheses import load_hypotheses
    from fairseq_ext.tools.evaluation.score import load_references, score_corpus
    from fairseq_ext.tools.evaluation.simul_latency import corpus_latency, reference_lengths

    gen = os.path.join(folder, f"generate-{subset}.txt")
    acts = os.path.join(folder, "actions.jsonl")
    refs = load_references([ref])
    hyps = load_hypotheses(gen, None, fmt="fairseq", field="D", remove_bpe_kind=remove_bpe)
    n = len(refs[0])
    if sorted(hyps) != list(range(n)):
        raise ToolError(f"the hypotheses cover {len(hyps)} sentences, the references {n}", gen)
    detok = detok or (lambda line: line)
    s = score_corpus([detok(hyps[i]) for i in range(n)], refs)
    records = read_jsonl(acts)
    lat = corpus_latency(records, acts, reference_lengths(gen))
    if lat["sentences"] != s["n_sentences"]:
        raise ToolError(f"{lat['sentences']} action lines for {s['n_sentences']} hypotheses", acts)
    # AL: Ma et al.'s rate |Y|/|X| (the hypothesis), the AL of the runs reported so far; LAAL: max(|Y|, |Y*|)/|X|
    return {"bleu": s["bleu"], "chrf": s["chrf"], "bleu_signature": s["bleu_signature"], "al": lat["al_hyp"],
            **{k: lat[k] for k in ("ap", "cw", "laal", "dal", "cw_pooled", "sentences")}}


# ============================================================================================ dominance
def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """(delay, BLEU) ``a`` dominates ``b``: no more delay, no less BLEU, and better in one of them."""
    return a[0] <= b[0] and a[1] >= b[1] and (a[0] < b[0] or a[1] > b[1])


def pareto_front(points: Sequence[Point]) -> List[Point]:
    """The non-dominated points (lower delay, higher BLEU), by increasing delay."""
    front = [p for p in points if not any(dominates(q, p) for q in points)]
    return sorted(set(front), key=lambda p: (p[0], p[1]))


def interpolate(curve: Sequence[Sequence[float]], x: float) -> Optional[float]:
    """Piecewise-linear y of ``curve`` (points (x, y, ...) in any order) at ``x``; None outside its x-range."""
    pts = sorted((float(p[0]), float(p[1])) for p in curve)
    if not pts or x < pts[0][0] or x > pts[-1][0]:
        return None
    best = None
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            y = y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
            best = y if best is None else max(best, y)  # a vertical step: the higher end
    return best if best is not None else pts[0][1]


def dominance(agent_points: Sequence[Point], baseline: Point, delay: str = "ap") -> Dict:
    """Where the agents stand against one baseline point (module doc): ``verdict`` is ``dominated``,
    ``under_curve``, ``above_curve`` or ``outside_range``; ``agents_win`` is True for the first two."""
    lab = DELAY_LABEL.get(delay, delay)
    by = [p[2] for p in agent_points if dominates(p, baseline)]
    front = pareto_front(agent_points)
    curve = interpolate(front, baseline[0]) if front else None
    out = {"baseline": baseline[2], "delay": delay, "baseline_delay": baseline[0], "baseline_bleu": baseline[1],
           "dominated_by": by, "curve_bleu": curve}
    if by:
        out.update(verdict="dominated", agents_win=True,
                   text=f"dominated by {', '.join(by)} (BLEU >= {baseline[1]:.2f} at {lab} <= {baseline[0]:.3f})")
    elif curve is not None and curve >= baseline[1]:
        out.update(verdict="under_curve", agents_win=True,
                   text=f"under the agents' curve (curve BLEU {curve:.2f} >= {baseline[1]:.2f} at {lab} "
                        f"{baseline[0]:.3f})")
    elif curve is not None:
        out.update(verdict="above_curve", agents_win=False,
                   text=f"NOT dominated: above the agents' curve (curve BLEU {curve:.2f} < {baseline[1]:.2f} at "
                        f"{lab} {baseline[0]:.3f})")
    else:
        lo = min(p[0] for p in agent_points) if agent_points else float("nan")
        hi = max(p[0] for p in agent_points) if agent_points else float("nan")
        out.update(verdict="outside_range", agents_win=False,
                   text=f"NOT dominated: {lab} {baseline[0]:.3f} is outside the agents' {lab} range "
                        f"[{lo:.3f}, {hi:.3f}] and no agent point dominates it")
    return out


def dominance_table(rows: Sequence[Dict], targets: Sequence[str] = ("wiw", "wid")) -> List[Dict]:
    """Every (delay measure, agent search, baseline in ``targets``) reading of :func:`dominance`; the
    baselines' greedy points (their beam points too, as ``wiw+beam``, when decoded)."""
    out = []
    for delay in DELAYS:
        for search in SEARCHES:
            agents = [(r[delay], r["bleu"], f"{r['name']} {search}") for r in rows
                      if r["kind"] == "agent" and r["search"] == search]
            if not agents:
                continue
            for r in rows:
                if r["kind"] == "baseline" and r["name"] in targets:
                    b = (r[delay], r["bleu"], r["name"] + ("" if r["search"] == "greedy" else "+beam"))
                    out.append({"agent_search": search, **dominance(agents, b, delay)})
    return out


def waitk_readings(rows: Sequence[Dict]) -> List[Dict]:
    """Each agent point against the wait-k curve (greedy) at its own AL: the curve's BLEU there and the gap."""
    curve = [(r["al"], r["bleu"]) for r in rows if r["kind"] == "waitk" and r["search"] == "greedy"]
    out = []
    for r in rows:
        if r["kind"] != "agent":
            continue
        c = interpolate(curve, r["al"]) if curve else None
        out.append({"name": r["name"], "search": r["search"], "al": r["al"], "bleu": r["bleu"], "waitk_bleu": c,
                    "gap": None if c is None else r["bleu"] - c})
    return out


# ============================================================================================ logs, table
def validation_curve(path: str) -> List[Dict]:
    """[{num_updates, bleu, ap, cw, ...}] of the ``valid on 'valid' subset`` lines of a fairseq-train log of the
    simul_policy_gradient criterion."""
    with open(path, encoding="utf-8") as f:
        pts = [v for v in fairseq_log.validations(f.read()) if v["subset"] == "valid" and "num_updates" in v]
    for v in pts:
        v["num_updates"] = int(v["num_updates"])
        del v["subset"]
    return pts


def format_table(rows: Sequence[Dict]) -> str:
    order = {"agent": 0, "baseline": 1, "waitk": 2}

    def key(r):
        m = WAITK_RE.match(r["name"])
        return (order[r["kind"]], int(m.group(1)) if m else 0, r["name"], SEARCHES.index(r["search"]))

    lines = ["| system | kind | search | BLEU | chrF | AP | CW | AL | LAAL | DAL |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=key):
        laal = "–" if r.get("laal") is None else f"{r['laal']:.2f}"
        lines.append(f"| {r['name']} | {r['kind']} | {r['search']} | {r['bleu']:.2f} | {r['chrf']:.2f} | "
                     f"{r['ap']:.3f} | {r['cw']:.2f} | {r['al']:.2f} | {laal} | {r['dal']:.2f} |")
    return "\n".join(lines)


# ============================================================================================ plots
MARKERS = {"wue": ("s", "tab:green"), "wos": ("v", "tab:red"), "wiw": ("D", "tab:purple"), "wid": ("P", "tab:brown")}


def plot_tradeoff(rows: Sequence[Dict], delay: str, path: str, title: str) -> None:
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    agents = sorted({r["name"] for r in rows if r["kind"] == "agent"})
    for search, mk in (("greedy", "o"), ("beam", "s")):
        pts = sorted((r[delay], r["bleu"], r["name"]) for r in rows if r["kind"] == "agent" and r["search"] == search)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=mk, color="tab:blue",
                    ls="-" if search == "greedy" else "--", mfc="tab:blue" if search == "greedy" else "none",
                    label=f"agents ({search})")
            for x, y, n in pts:
                ax.annotate(n, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color="tab:blue")
    for n in agents:  # greedy -> beam pairs
        pair = {r["search"]: r for r in rows if r["name"] == n}
        if len(pair) == 2:
            ax.plot([pair["greedy"][delay], pair["beam"][delay]], [pair["greedy"]["bleu"], pair["beam"]["bleu"]],
                    color="tab:blue", lw=0.6, ls=":")
    wk = sorted((r[delay], r["bleu"], r["name"]) for r in rows if r["kind"] == "waitk" and r["search"] == "greedy")
    if wk:
        ax.plot([p[0] for p in wk], [p[1] for p in wk], marker="x", color="tab:orange", label="wait-k")
        for x, y, n in wk:
            ax.annotate(n.replace("wait", "k="), (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7,
                        color="tab:orange")
    for r in rows:
        if r["kind"] == "baseline":
            mk, col = MARKERS[r["name"]]
            ax.scatter([r[delay]], [r["bleu"]], marker=mk, color=col if r["search"] == "greedy" else "none",
                       edgecolors=col, s=50, zorder=3, label=r["name"].upper() + ("" if r["search"] == "greedy"
                                                                                 else " beam"))
    ax.set_xlabel({"ap": "average proportion (AP)", "cw": "consecutive wait (CW)",
                   "al": "average lagging (AL, subwords)",
                   "laal": "length-adaptive average lagging (LAAL, subwords)"}[delay])
    ax.set_ylabel("BLEU")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curves(curves: Dict[str, List[Dict]], path: str) -> None:
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, key, lab in zip(axes, ("bleu", "ap", "cw"), ("validation BLEU (x100)", "validation AP", "validation CW")):
        for n, pts in curves.items():
            pts = [p for p in pts if key in p]
            if pts:
                ax.plot([p["num_updates"] for p in pts], [p[key] for p in pts], marker="o", ms=3, label=n)
        ax.set_xlabel("updates")
        ax.set_ylabel(lab)
    axes[0].legend(fontsize=7)
    fig.suptitle("Fig. 9.4: validation learning curves of the agents (argmax actions)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ============================================================================================ main
def report(a) -> int:
    agents: Dict[str, Optional[str]] = {}
    for spec in a.agent:
        name, _, logp = spec.partition("=")
        agents[name] = logp or None
    detok = detokenizer(a.detok, a.detok_lang)
    rows = []
    for name, search, folder in discover(a.decode_dir, a.subset):
        try:
            kind = system_kind(name, list(agents))
        except ValueError as e:
            raise ToolError(str(e), folder) from None
        log(f"[ch9] scoring {name} {search}")
        rows.append({"name": name, "search": search, "kind": kind,
                     **score_system(folder, a.subset, a.ref, a.remove_bpe, detok)})
    if not rows:
        raise ToolError(f"no finished decode (NAME.greedy|beam/ with generate-{a.subset}.txt and actions.jsonl)",
                        a.decode_dir)
    os.makedirs(a.out, exist_ok=True)
    title = a.title or "simultaneous NMT"
    plot_tradeoff(rows, "ap", os.path.join(a.out, "fig9_5_bleu_ap.png"), f"Fig. 9.5 layout: BLEU vs AP ({title})")
    plot_tradeoff(rows, "cw", os.path.join(a.out, "fig9_6_bleu_cw.png"), f"Fig. 9.6 layout: BLEU vs CW ({title})")
    plot_tradeoff(rows, "al", os.path.join(a.out, "bleu_al.png"), f"BLEU vs AL beside wait-k ({title})")
    if all(r.get("laal") is not None for r in rows):  # LAAL (Papi et al. 2022) needs the reference lengths
        plot_tradeoff(rows, "laal", os.path.join(a.out, "bleu_laal.png"), f"BLEU vs LAAL beside wait-k ({title})")
    curves = {n: validation_curve(p) for n, p in agents.items() if p and os.path.exists(p)}
    if any(curves.values()):
        plot_curves(curves, os.path.join(a.out, "fig9_4_curves.png"))
    dom = dominance_table(rows)
    wk = waitk_readings(rows)

    md = [f"# Gu ch. 9, simultaneous NMT: {title}", "",
          f"Decodes: `{a.decode_dir}` (subset {a.subset}); references `{a.ref}`. BLEU / chrF: sacreBLEU "
          f"({rows[0]['bleu_signature']}); AP, CW, AL, LAAL, DAL: means over the sentences of the actions files "
          "(subwords, ⟨/s⟩ included; CW = mean length of the READ runs that end in a WRITE; AL with the rate "
          "|Y|/|X| of the hypothesis, Ma et al. 2019; LAAL with max(|Y|, |Y*|)/|X|, the reference length from the "
          "T- lines, Papi et al. 2022).", "",
          "## Systems", "", format_table(rows), "",
          "Plots: fig9_5_bleu_ap.png (BLEU vs AP), fig9_6_bleu_cw.png (BLEU vs CW), bleu_al.png (BLEU vs AL, wait-k "
          "curve)" + (", fig9_4_curves.png (validation curves)." if any(curves.values()) else "."), "",
          "## Do the agents dominate WIW / WID?", ""]
    if not dom:
        md.append("(no agent or no WIW/WID decode)")
    for delay in DELAYS:
        for search in SEARCHES:
            sel = [d for d in dom if d["delay"] == delay and d["agent_search"] == search]
            if not sel:
                continue
            wins = [d["baseline"] for d in sel if d["agents_win"]]
            losses = [d["baseline"] for d in sel if not d["agents_win"]]
            head = (f"agents ({search}) on {DELAY_LABEL[delay]}: "
                    + (f"dominate {', '.join(wins)}" if wins else "dominate none")
                    + (f"; do NOT dominate {', '.join(losses)}" if losses else ""))
            md.append(f"- {head}")
            for d in sel:
                md.append(f"  - {d['baseline']}: {d['text']}")
    if wk:
        md += ["", "## Agents against the wait-k curve at the same AL", "",
               "| agent | search | AL | BLEU | wait-k BLEU at that AL | gap |", "|---|---|---|---|---|---|"]
        for r in wk:
            c = "outside the wait-k AL range" if r["waitk_bleu"] is None else f"{r['waitk_bleu']:.2f}"
            g = "" if r["gap"] is None else f"{r['gap']:+.2f}"
            md.append(f"| {r['name']} | {r['search']} | {r['al']:.2f} | {r['bleu']:.2f} | {c} | {g} |")
    if any(curves.values()):
        md += ["", "## Fig. 9.4: validation curves (BLEU x100 / AP / CW at each validation)", ""]
        for n, pts in curves.items():
            md.append(f"- {n}: " + ", ".join(f"{p['num_updates']}: {p.get('bleu', float('nan')):.2f} / "
                                             f"{p.get('ap', float('nan')):.3f} / {p.get('cw', float('nan')):.2f}"
                                             for p in pts))
    with open(os.path.join(a.out, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"systems": rows, "dominance": dom, "waitk": wk, "curves": curves}, f, indent=1)
    print("\n".join(md))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="examples/simultaneous/report.py",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("filter", help="the evaluation pairs with both sides under --max-len subwords")
    f.add_argument("--seg-prefix", required=True, help="segmented split prefix (e.g. SEG/test)")
    f.add_argument("--raw-prefix", required=True, help="raw split prefix (e.g. RAW/test)")
    f.add_argument("--src", required=True)
    f.add_argument("--tgt", required=True)
    f.add_argument("--max-len", type=int, default=50)
    f.add_argument("--max-pairs", type=int, default=None,
                   help="keep at most N of those pairs, evenly spaced over the split")
    f.add_argument("--out", required=True)
    r = sub.add_parser("report", help="scores, latency, plots and the dominance check")
    r.add_argument("--decode-dir", required=True, help="folder of NAME.SEARCH/ decodes")
    r.add_argument("--ref", required=True, help="raw references of the decoded set")
    r.add_argument("--out", required=True)
    r.add_argument("--subset", default="test", help="the --gen-subset of the decodes (default test)")
    r.add_argument("--agent", action="append", default=[], metavar="NAME[=TRAIN_LOG]",
                   help="a learned agent's decode name (and its training log for Fig. 9.4); repeat")
    r.add_argument("--remove-bpe", choices=("sentencepiece", "subword_nmt"), default=None,
                   help="merge the subwords of the D-lines first")
    r.add_argument("--detok", choices=("none", "moses"), default="none",
                   help="then detokenise (moses: sacremoses, for Moses-tokenised data)")
    r.add_argument("--detok-lang", default=None, help="language of --detok moses")
    r.add_argument("--title", default=None)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    if a.command == "filter":
        res = filter_split(a.seg_prefix, a.raw_prefix, a.src, a.tgt, a.out, a.max_len, a.max_pairs)
        print(f"{res['under_max_len']} of {res['total']} pairs have both sides < {res['max_len']} subwords; kept "
              f"{res['kept']} -> {a.out}")
        return 0
    return report(a)


if __name__ == "__main__":
    sys.exit(run_cli(main))

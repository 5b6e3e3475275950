"""Diagnostics of the decoding mechanisms (Gu 2019 ch. 2 shrinking beam and noisy parallel decoding, ch. 7 trainable
greedy decoding, ch. 8 the NAT with fertility): each mechanism beside its baseline on a synthetic task where the
baseline is limited by construction (:mod:`fairseq_ext.tools.analysis.diagnostics_decoding`: ``search``,
``fertility``); the **decoding** table of ``recipes/bench/RESULTS.md`` is rewritten from the results::

    .venv/bin/python recipes/bench/diagnostics_decoding.py [--tasks search fertility] [--out runs/diagnostics_decoding]
        [--updates 1000] [--actor-updates 300] [--nat-updates 1500] [--table recipes/bench/RESULTS.md]

Rows:

* ``search``: one small RNNsearch (the shape of recipes/bench/diagnostics_copy.py) trained ``--updates`` updates
  (task ``translation_decoding``, cross-entropy), decoded on the test set (whose references are the mode) with
  greedy (Eq. 2.10, the baseline: exact match 0 by construction once it has learned P(A) > P(B)), fairseq's beam
  (K = 4), the shrinking beam (K = 4, Eqs. 2.11-2.13) and NPD (Eq. 2.14, N = 8 noisy greedy decodes, σ0 = 0.5, 1.0
  and 4.0); then a trainable greedy actor (``trainable_greedy_tiny``, ``actor_critic``, BLEU objective) trained
  ``--actor-updates`` updates on that frozen model and decoded greedily with its actor and with ``--tg-actor
  off`` (the mechanism switched off: the plain greedy row again).
* ``fertility``: the tiny NAT (``nat_fertility_tiny``) with fertility-copy decoder inputs (gold fertilities in
  training) and with uniform copy (the baseline), ``--nat-updates`` updates each, decoded with predicted
  fertilities / length (argmax, Eq. 8.5) and with the reference ones (``--oracle-length``); ``--max-len-ratio 3``
  (the task's largest fertility; the default cap 2·T' would cut a third of the references).

Scores (``exact_scores``): exact match with the reference, the share that starts with ``A`` (search), the share of the
reference's length, and the mean sentence score fairseq-generate prints (search: the model's length-normalised
log-probability). A mechanism **passes** when it reaches ``--pass-at`` (0.9) exact match (beam, shrinking beam,
fertility copy) or closes at least half of greedy's gap to the beam (NPD, the actor); a baseline passes when it stays
at its bound (greedy <= 0.05; uniform copy: reported, no bound by construction). Results are cached per row
(``OUT/TASK/ROW/result.json``); ``--force`` rescores. Exit status 1 when a row fails.
"""
import json
import re
import sys
from pathlib import Path

from fairseq_ext.tools.analysis.diagnostics_decoding import exact_scores, generate
from fairseq_ext.tools.analysis.diagnostics_runs import (
    LANGS, RNNSEARCH_SHAPE, adam, cpu_line, fairseq_generate, fairseq_train, fmt, parser, pass_cell, read_probes,
    report,
)

DEC = ["--task", "translation_decoding"]
# search rows: (row, decoding flags, note)
SEARCH = [
    ("greedy", [*DEC, "--decoding-algorithm", "greedy"], "greedy (Eq. 2.10): the baseline"),
    ("beam", [*DEC, "--beam", "4"], "fairseq beam, K = 4"),
    ("shrinking_beam", [*DEC, "--decoding-algorithm", "shrinking_beam", "--beam", "4"], "shrinking beam, K = 4"),
    ("npd_0.5", [*DEC, "--decoding-algorithm", "npd", "--npd-samples", "8", "--npd-sigma0", "0.5", "--seed", "1"],
     "NPD, N = 8, σ0 = 0.5"),
    ("npd_1.0", [*DEC, "--decoding-algorithm", "npd", "--npd-samples", "8", "--npd-sigma0", "1.0", "--seed", "1"],
     "NPD, N = 8, σ0 = 1.0"),
    ("npd_4.0", [*DEC, "--decoding-algorithm", "npd", "--npd-samples", "8", "--npd-sigma0", "4.0", "--seed", "1"],
     "NPD, N = 8, σ0 = 4.0"),
]
TG = ["--task", "trainable_greedy_decoding", "--decoding-algorithm", "greedy"]
ACTOR = ["--arch", "trainable_greedy_tiny", "--task", "trainable_greedy_decoding", "--criterion", "actor_critic",
         "--critic-updates", "10", "--actor-updates", "1", "--tg-critic-samples", "4", "--tg-actor-samples", "4",
         "--tg-noise-std", "0.5", "--tg-tau", "0.01", "--tg-objective", "bleu", "--optimizer", "rmsprop",
         "--lr", "1e-3", "--group-lr", "actor:1e-3,critic:1e-3", "--lr-scheduler", "fixed", "--batch-size", "32"]
NAT = ["--arch", "nat_fertility_tiny", "--task", "translation_fertility", "--criterion", "nat_fertility_loss",
       "--max-tokens", "1024", *adam(2e-3)]
# fertility rows: (row, decoder input, decoding flags, note)
FERTILITY = [
    ("uniform", "uniform", [], "uniform copy, predicted length: the baseline"),
    ("uniform_oracle", "uniform", ["--oracle-length"], "uniform copy, reference length"),
    ("fertility", "copy-fertility", [], "fertility copy, predicted fertilities (argmax, Eq. 8.5)"),
    ("fertility_gold", "copy-fertility", ["--oracle-length"], "fertility copy, reference fertilities"),
]
START, END = "<!-- diagnostics-decoding:table -->", "<!-- /diagnostics-decoding:table -->"
TITLE = "Diagnostics: decoding (recipes/bench/diagnostics_decoding.py)"


def train(data: Path, save: Path, flags: list, updates: int, threads: int) -> float:
    """fairseq-train ``flags`` into ``save`` (:func:`fairseq_train`); returns the wall seconds."""
    return fairseq_train(data, save, [*LANGS, *flags], updates, threads)


def decode(data: Path, ckpt: Path, flags: list, out: Path, threads: int):
    """fairseq-generate of the test split into ``out``: ``({line: hypothesis}, {line: reference}, mean score)``."""
    gen = fairseq_generate(data, ckpt, [*LANGS, *flags, "--gen-subset", "test", "--max-len-a", "1", "--max-len-b", "5",
                                        "--batch-size", "128"], out, threads)
    hyps, refs, scores = {}, {}, []
    for line in gen.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([HT])-(\d+)\t(.*)$", line)
        if not m:
            continue
        if m.group(1) == "T":
            refs[int(m.group(2))] = m.group(3)
        elif int(m.group(2)) not in hyps:  # the first of an n-best list
            score, _, text = m.group(3).partition("\t")
            hyps[int(m.group(2))] = text
            scores.append(float(score))
    return hyps, refs, (sum(scores) / len(scores) if scores else None)


def scored(info: dict, ckpt: Path, flags: list, out: Path, threads: int) -> dict:
    probes = read_probes(Path(info["bin"]).parent)
    hyps, refs, score = decode(Path(info["bin"]), ckpt, flags, out, threads)
    return dict(exact_scores(probes, hyps, refs), score=score)


def row(task, name, note, res, baseline, ok, secs, updates, bound) -> dict:
    return {"task": task, "system": name, "note": note, "result": res, "exact": res["exact"], "baseline": baseline,
            "pass": bool(ok), "seconds": round(secs, 1), "updates": updates, "bound": bound}


def run_search(args) -> list:
    out = Path(args.out) / "search"
    info = generate("search", str(out / "data"), seed=args.seed)
    nmt = out / "rnnsearch"
    flags = ["--arch", "rnnsearch_tiny", *DEC, "--criterion", "cross_entropy", *RNNSEARCH_SHAPE, *adam(args.lr),
             "--batch-size", "64"]
    secs = train(Path(info["bin"]), nmt, flags, args.updates, args.threads)
    res = {name: scored(info, nmt / "checkpoint_last.pt", flags, nmt / f"test.{name}", args.threads)
           for name, flags, _ in SEARCH}
    greedy, beam = res["greedy"]["exact"], res["beam"]["exact"]
    half = (greedy + beam) / 2
    rows = []
    for name, _, note in SEARCH:
        ok = (res[name]["exact"] <= 0.05 if name == "greedy" else
              res[name]["exact"] >= args.pass_at if "beam" in name else res[name]["exact"] >= half)
        rows.append(row("search", name, note, res[name], name == "greedy", ok, secs, args.updates, info["bound"]))
    actor = out / "actor"
    asecs = train(Path(info["bin"]), actor, [*ACTOR, "--nmt-path", nmt / "checkpoint_last.pt"], args.actor_updates,
                  args.threads)
    on = scored(info, actor / "checkpoint_last.pt", TG, actor / "test.on", args.threads)
    off = scored(info, actor / "checkpoint_last.pt", TG + ["--tg-actor", "off"], actor / "test.off", args.threads)
    rows.append(row("search", "actor_off", "trainable greedy, --tg-actor off (the frozen NMT's greedy)", off, True,
                    off["exact"] <= 0.05, asecs, args.actor_updates, info["bound"]))
    rows.append(row("search", "actor", "trainable greedy actor (BLEU objective), greedy", on, False,
                    on["exact"] >= half, asecs, args.actor_updates, info["bound"]))
    return rows


def run_fertility(args) -> list:
    out = Path(args.out) / "fertility"
    info = generate("fertility", str(out / "data"), seed=args.seed)
    rows = []
    for name, mode, flags, note in FERTILITY:
        save = out / mode
        secs = train(Path(info["bin"]), save, [*NAT, "--decoder-input", mode], args.nat_updates, args.threads)
        res = scored(info, save / "checkpoint_last.pt", ["--task", "translation_fertility", "--max-len-ratio", "3",
                                                          *flags], save / f"test.{name}", args.threads)
        baseline = mode == "uniform"
        rows.append(row("fertility", name, note, res, baseline, True if baseline else res["exact"] >= args.pass_at,
                        secs, args.nat_updates, info["bound"]))
    return rows


# ------------------------------------------------------------------------------------------------ table
def table(rows: list, threads: int) -> str:
    lines = ["| task | bound | system | exact match | starts with A | reference length | mean score | pass | budget |",
             "|---|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        res = r["result"]
        verdict = pass_cell(r["pass"]) + (" (baseline)" if r["baseline"] else "")
        lines.append(f"| {r['task']} | {r['bound']} | {r['system']}: {r['note']} | {fmt(res['exact'])} | "
                     f"{fmt(res['major_first']) if r['task'] == 'search' else '–'} | {fmt(res['length_ok'])} | "
                     f"{fmt(res['score'])} | {verdict} | {r['updates']} updates; {r['seconds'] / 60:.1f} min |")
    lines += ["", cpu_line(threads, ", a shared, heavily loaded machine (minutes are wall-clock)")]
    return "\n".join(lines)


def options(ap) -> None:
    ap.add_argument("--updates", type=int, default=1000, help="MLE updates of the search task's RNNsearch")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--actor-updates", type=int, default=300, help="actor-critic updates of the trainable greedy actor")
    ap.add_argument("--nat-updates", type=int, default=1500, help="updates of each NAT")


def main(argv=None) -> int:
    args = parser(__doc__, ["search", "fertility"], "runs/diagnostics_decoding", "decoding table", options,
                  systems=None).parse_args(argv)
    rows = []
    for task in args.tasks:
        cache = Path(args.out) / task / "result.json"
        if cache.exists() and not args.force:
            rows += json.loads(cache.read_text())
            continue
        if args.force:
            for g in (Path(args.out) / task).glob("*/test.*/generate-test.txt"):
                g.unlink()
        got = run_search(args) if task == "search" else run_fertility(args)
        cache.write_text(json.dumps(got, indent=1))
        rows += got
    return report(rows, table(rows, args.threads), args, START, END, TITLE)


if __name__ == "__main__":
    sys.exit(main())

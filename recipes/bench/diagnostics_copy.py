"""Diagnostics of the copying and retrieval mechanisms (Gu 2019 ch. 3 CopyNet, ch. 4 SEG-NMT): each mechanism trained
beside its plain rnnsearch baseline on a synthetic task where the baseline is limited by construction
(:mod:`fairseq_ext.tools.analysis.diagnostics_copy`: ``copy``, ``retrieval``), then decoded greedily on the test set; the
**copying and retrieval** table of ``recipes/bench/RESULTS.md`` is rewritten from the results::

    .venv/bin/python recipes/bench/diagnostics_copy.py [--tasks copy retrieval] [--systems NAME ...]
        [--out runs/diagnostics_copy] [--updates 2000] [--curve-every 500] [--table recipes/bench/RESULTS.md]

Every system is a small RNNsearch (bi-GRU 2x64, plain GRU decoder 64, emb 64 shared, dropout 0.1) trained from
scratch for ``--updates`` updates of 64 sentences (Adam, inverse-sqrt warm-up 100, clip 1); the copy/retrieval
systems add their mechanism to the same shape. Rows:

* ``copy``: rnnsearch (task ``translation_decoding``) and CopyNet (``copy_translation``, ``copynet_cross_entropy``),
  scored by the share of the test names written (``name_scores``); CopyNet once more with its copy mode switched
  off (``--model-overrides "{'no_copy': True}"``): it must fall to the bound (0).
* ``retrieval``: rnnsearch, SEG-NMT (``seg_nmt``, shallow fusion, K = 2) and COPYNET over the top-1 retrieved
  target (``seg_copynet``), task ``seg_translation``, scored by the value accuracy (``value_scores``). Each memory
  model is decoded with its retrieved pairs, with none (``--tm-topk 0``: the bound, exactly), with random training
  pairs (``bin_test_random``) and with the pairs of another member of the tuplet (``bin_test_swapped``: "follows"
  = the share that writes that member's value). SEG-NMT's gate ζ_t comes from ``--tm-export`` (Fig. 4.5): its mean
  at the value token and at the other tokens, and how often the argmax memory slot holds the written value; λ
  (the coverage weight of Eq. 4.6) is read from the checkpoint.
* ``seg_nmt_warm``: SEG-NMT warm-started (``--finetune-from-model``) from the rnnsearch row's checkpoint, the
  thesis's two-stage protocol, for ``--updates`` more updates.

The checkpoints every ``--curve-every`` updates are decoded too (the learning curve). A mechanism **passes** when it
reaches ``--pass-at`` (0.9) with its memory/copy path and its switch-off rows (copy off; pairs withheld) stay at or
below the bound; a baseline passes when it stays at or below the bound. Results are cached per system
(``OUT/TASK/SYSTEM/result.json``); ``--force`` rescores. Exit status 1 when a row fails.
"""
import json
import sys
from pathlib import Path

from fairseq_ext.tools.analysis.diagnostics import read_hypotheses
from fairseq_ext.tools.analysis.diagnostics_copy import generate, name_scores, value_scores
from fairseq_ext.tools.analysis.diagnostics_runs import (
    LANGS, RNNSEARCH_SHAPE, adam, cpu_line, curve_checkpoints, fairseq_generate, fairseq_train, fmt, parser, pass_cell,
    pending, read_probes, report, run_tasks, save_row,
)

BASE = (["--task", "translation_decoding"], ["--criterion", "cross_entropy"])
SEG = ["--task", "seg_translation", "--tm-topk", "2"]
GREEDY = ["--gen-subset", "test", "--beam", "1", "--max-len-a", "1", "--max-len-b", "5", "--batch-size", "128"]
# task -> [(system, arch, task flags, criterion flags, warm start from, note)]
SYSTEMS = {
    "copy": [
        ("rnnsearch", "rnnsearch_tiny", *BASE, None, "rnnsearch (no copy path)"),
        ("copynet", "copynet_tiny", ["--task", "copy_translation"], ["--criterion", "copynet_cross_entropy"], None,
         "CopyNet (copy slots for source OOVs)"),
    ],
    "retrieval": [
        ("rnnsearch", "rnnsearch_tiny", *BASE, None, "rnnsearch (no memory)"),
        ("seg_nmt", "seg_nmt_tiny", SEG, ["--criterion", "seg_nmt_cross_entropy"], None,
         "SEG-NMT, shallow fusion, K = 2, from scratch"),
        ("seg_nmt_warm", "seg_nmt_tiny", SEG, ["--criterion", "seg_nmt_cross_entropy"], "rnnsearch",
         "SEG-NMT warm-started from the rnnsearch row"),
        ("seg_copynet", "seg_copynet_tiny", SEG, ["--criterion", "copynet_cross_entropy"], None,
         "COPYNET over the top-1 retrieved target"),
    ],
}
START, END = "<!-- diagnostics-copy:table -->", "<!-- /diagnostics-copy:table -->"
TITLE = "Diagnostics: copying and retrieval (recipes/bench/diagnostics_copy.py)"


def train(data: Path, save: Path, flags: list, updates: int, lr: float, threads: int, curve_every: int,
          warm=None) -> float:
    """A training of the shared shape (:func:`fairseq_train`): ``flags`` (arch, task, criterion) at peak ``lr``."""
    flags = [*LANGS, *flags, *RNNSEARCH_SHAPE, *adam(lr), "--batch-size", "64"]
    return fairseq_train(data, save, flags, updates, threads, curve_every=curve_every, warm=warm)


def decode(data: Path, ckpt: Path, flags: list, out: Path, threads: int) -> dict:
    """Greedy fairseq-generate of the test split into ``out``; returns ``{line: hypothesis}``."""
    return read_hypotheses(str(fairseq_generate(data, ckpt, [*LANGS, *flags, *GREEDY], out, threads)))


def gate_stats(path: Path, probes: list) -> dict:
    """SEG-NMT's exported ζ_t (``--tm-export``): mean at the written value token and at the other tokens, and
    the share of value tokens whose argmax memory slot holds the token written."""
    by_line = {p["line"]: p for p in probes}
    at_value, other, slot_hits, n_values = [], [], 0, 0
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["rank"] != 0:
            continue
        cands = set(by_line[r["id"]]["candidates"])
        for tok, g, st in zip(r["tokens"], r["gate"], r["slot_token"]):
            if tok in cands:
                at_value.append(g)
                n_values += 1
                slot_hits += st == tok
            else:
                other.append(g)
    mean = lambda v: round(sum(v) / len(v), 4) if v else None  # noqa: E731
    return {"gate_at_value": mean(at_value), "gate_elsewhere": mean(other),
            "slot_holds_value": round(slot_hits / n_values, 4) if n_values else None}


def coverage_weight(ckpt: Path):
    """λ of Eq. 4.6 (``decoder.tm_coverage_weight``) in a SEG-NMT checkpoint (None without coverage)."""
    import torch

    state = torch.load(ckpt, map_location="cpu", weights_only=False)["model"]
    w = state.get("decoder.tm_coverage_weight")
    return None if w is None else round(float(w), 4)


def scored(task: str, info: dict, ckpt: Path, tflags: list, out: Path, threads: int, variant: str = "test",
           extra=None, export: bool = False) -> dict:
    """Decode the test split with one memory variant / switch and score it (``export``: SEG-NMT's gate too)."""
    if task == "copy":
        data = Path(info["bin"])
        flags = tflags + (["--copy-raw-dir", str(Path(info["bin"]).parent / "raw")] if "copy_translation" in tflags
                          else [])
        probes = read_probes(Path(info["bin"]).parent)
        return name_scores(probes, decode(data, ckpt, flags + (extra or []), out, threads))
    data = Path(info["bin_test"][variant])
    probes = read_probes(Path(info["bin"]).parent)
    export = ["--tm-export", str(out / "tm_export.jsonl")] if export else []
    res = value_scores(probes, decode(data, ckpt, tflags + (extra or []) + export, out, threads))
    if export:
        res.update(gate_stats(out / "tm_export.jsonl", probes))
    return res


def run_task(task: str, args) -> list:
    out = Path(args.out) / task
    info = generate(task, str(out / "data"), seed=args.seed)
    bound = 0.0 if task == "copy" else 1.0 / info["layout"]["values"]
    metric = "name_accuracy" if task == "copy" else "accuracy"
    rows = []
    for save, name, arch, tflags, crit, warm, note in pending(SYSTEMS[task], out, args, rows):
        raw = ["--copy-raw-dir", str(out / "data" / "raw")] if "copy_translation" in tflags else []
        warm_ckpt = None if warm is None else out / warm / "checkpoint_last.pt"
        if warm_ckpt is not None and not warm_ckpt.exists():
            raise SystemExit(f"error: {name} warm-starts from {warm_ckpt}: run the {warm} row first")
        secs = train(Path(info["bin"]), save, ["--arch", arch, *tflags, *crit, *raw], args.updates, args.lr,
                     args.threads, args.curve_every, warm=warm_ckpt)
        ckpt = save / "checkpoint_last.pt"
        baseline = arch == "rnnsearch_tiny"
        main = scored(task, info, ckpt, tflags, save / "test", args.threads, export=arch == "seg_nmt_tiny")
        curve = {args.updates: main[metric]}
        for upd, c in [] if baseline else curve_checkpoints(save):
            if upd < args.updates:
                curve[upd] = scored(task, info, c, tflags, save / f"test.{upd}", args.threads)[metric]
        row = {"task": task, "system": name, "note": note, "bound": bound, "updates": args.updates,
               "seconds": round(secs, 1), "result": main, "accuracy": main[metric],
               "curve": dict(sorted(curve.items())), "baseline": baseline, "off": {}}
        if task == "copy" and not baseline:
            row["off"]["copy off"] = scored(task, info, ckpt, tflags, save / "test.copy_off", args.threads,
                                            extra=["--model-overrides", "{'no_copy': True}"])
        if task == "retrieval" and not baseline:
            row["off"]["pairs withheld"] = scored(task, info, ckpt, tflags, save / "test.withheld", args.threads,
                                                  extra=["--tm-topk", "0"])
            row["off"]["random pairs"] = scored(task, info, ckpt, tflags, save / "test.random", args.threads,
                                                variant="test_random")
            row["off"]["swapped pairs"] = scored(task, info, ckpt, tflags, save / "test.swapped", args.threads,
                                                 variant="test_swapped")
            if arch == "seg_nmt_tiny":
                row["coverage_weight"] = coverage_weight(ckpt)
        switch = [v for k, v in row["off"].items() if k in ("copy off", "pairs withheld")]
        if row["baseline"]:
            row["pass"] = row["accuracy"] <= bound + 1e-9
        else:
            row["pass"] = row["accuracy"] >= args.pass_at and all(v[metric] <= bound + 1e-9 for v in switch)
        row["passes_at"] = next((u for u, a in row["curve"].items() if a >= args.pass_at), None)
        rows.append(save_row(save, row))
    return rows


# ------------------------------------------------------------------------------------------------ table
def table(rows: list, threads: int) -> str:
    lines = ["| task | bound | system | accuracy | switch-off rows | pass | curve (updates: accuracy) | budget |",
             "|---|---|---|---:|---|---|---|---|"]
    for r in rows:
        metric = "name_accuracy" if r["task"] == "copy" else "accuracy"
        off = "; ".join(f"{k} {fmt(v[metric])}" + (f" (follows {fmt(v['swapped'])})" if k == "swapped pairs" else "")
                        for k, v in r["off"].items()) or "–"
        curve = ", ".join(f"{u}: {a:.2f}" for u, a in r["curve"].items()) if len(r["curve"]) > 1 else "–"
        bound = "0 (names outside the dictionary)" if r["task"] == "copy" else f"{r['bound']:.3f} (1/V, exact)"
        lines.append(f"| {r['task']} | {bound} | {r['system']}: {r['note']} | {fmt(r['accuracy'])} | {off} "
                     f"| {pass_cell(r['pass'])} | {curve} | {r['updates']} updates; {r['seconds'] / 60:.1f} min |")
    gates = [r for r in rows if "gate_at_value" in r["result"]]
    if gates:
        lines += ["", "| SEG-NMT (test, with its pairs) | mean ζ at the value token | mean ζ elsewhere | argmax slot holds "
                  "the value written | λ (coverage weight) |", "|---|---:|---:|---:|---:|"]
        for r in gates:
            g = r["result"]
            lines.append(f"| {r['system']} | {fmt(g['gate_at_value'])} | {fmt(g['gate_elsewhere'])} | "
                         f"{fmt(g['slot_holds_value'])} | {fmt(r.get('coverage_weight'))} |")
    lines += ["", cpu_line(threads, ", a shared machine (minutes are wall-clock)")]
    return "\n".join(lines)


def options(ap) -> None:
    ap.add_argument("--updates", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--curve-every", type=int, default=500, help="keep and decode a checkpoint every N updates (0 = off)")


def main(argv=None) -> int:
    args = parser(__doc__, SYSTEMS, "runs/diagnostics_copy", "copying-and-retrieval table", options).parse_args(argv)
    rows = run_tasks(args, run_task, SYSTEMS)
    return report(rows, table(rows, args.threads), args, START, END, TITLE)


if __name__ == "__main__":
    sys.exit(main())

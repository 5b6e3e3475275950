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
import argparse
import json
import sys
from pathlib import Path

from fairseq_ext.tools.analysis.diagnostics import read_hypotheses
from fairseq_ext.tools.analysis.diagnostics_copy import generate, name_scores, value_scores
from fairseq_ext.tools.evaluation.runs import load_script

_doc_runner = load_script(Path(__file__).resolve().parent / "diagnostics.py")  # the document-context runner's helpers
BIN, ROOT, cpu_name, run, write_table = (_doc_runner.BIN, _doc_runner.ROOT, _doc_runner.cpu_name, _doc_runner.run,
                                         _doc_runner.write_table)

SHAPE = ["--encoder-embed-dim", "64", "--decoder-embed-dim", "64", "--decoder-out-embed-dim", "64",
         "--encoder-hidden-size", "64", "--decoder-hidden-size", "64", "--attention-dim", "64",
         "--decoder-variant", "plain", "--dropout", "0.1", "--share-all-embeddings"]
LANGS = ["--source-lang", "src", "--target-lang", "tgt"]
BASE = (["--task", "translation_decoding"], ["--criterion", "cross_entropy"])
SEG = ["--task", "seg_translation", "--tm-topk", "2"]
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
RUN = ["--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple", "--log-interval", "100",
       "--no-epoch-checkpoints", "--disable-validation"]
START, END = "<!-- diagnostics-copy:table -->", "<!-- /diagnostics-copy:table -->"


def train(data: Path, save: Path, flags: list, updates: int, lr: float, threads: int, curve_every: int,
          warm=None) -> float:
    """fairseq-train into ``save`` (skipped when ``train.done`` exists); returns the wall seconds."""
    done = save / "train.done"
    if done.exists() and (save / "checkpoint_last.pt").exists():
        return float(done.read_text() or 0)
    save.mkdir(parents=True, exist_ok=True)
    cmd = [BIN / "fairseq-train", data, "--user-dir", ROOT / "fairseq_ext", *LANGS, *flags, *SHAPE,
           "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", str(lr), "--lr-scheduler", "inverse_sqrt",
           "--warmup-updates", "100", "--clip-norm", "1.0", "--batch-size", "64", *RUN, "--max-update", str(updates),
           "--save-dir", save]
    if curve_every:
        cmd += ["--save-interval-updates", str(curve_every), "--keep-interval-updates", "-1"]
    if warm is not None:
        cmd += ["--finetune-from-model", warm]
    secs = run(cmd, save / "train.log", threads)
    done.write_text(f"{secs:.1f}")
    return secs


def decode(data: Path, ckpt: Path, flags: list, out: Path, threads: int) -> dict:
    """Greedy fairseq-generate of the test split into ``out``; returns ``{line: hypothesis}``."""
    gen = out / "generate-test.txt"
    if not gen.exists():
        out.mkdir(parents=True, exist_ok=True)
        cmd = [BIN / "fairseq-generate", data, "--user-dir", ROOT / "fairseq_ext", *LANGS, *flags, "--path", ckpt,
               "--gen-subset", "test", "--beam", "1", "--max-len-a", "1", "--max-len-b", "5", "--batch-size", "128",
               "--cpu", "--results-path", out]
        run(cmd, out / "generate.log", threads)
    return read_hypotheses(str(gen))


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


def read_probes(folder: Path) -> list:
    return [json.loads(x) for x in (folder / "raw" / "test.probes.jsonl").read_text().splitlines()]


def run_task(task: str, args) -> list:
    out = Path(args.out) / task
    info = generate(task, str(out / "data"), seed=args.seed)
    bound = 0.0 if task == "copy" else 1.0 / info["layout"]["values"]
    metric = "name_accuracy" if task == "copy" else "accuracy"
    rows = []
    for name, arch, tflags, crit, warm, note in SYSTEMS[task]:
        if args.systems and name not in args.systems:
            continue
        save = out / name
        result = save / "result.json"
        if result.exists() and not args.force:
            rows.append(json.loads(result.read_text()))
            continue
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
        for c in [] if baseline else sorted(save.glob("checkpoint_*_*.pt")):
            upd = int(c.stem.rsplit("_", 1)[1])
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
        result.write_text(json.dumps(row, indent=1))
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------ table
def fmt(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def table(rows: list, threads: int) -> str:
    lines = ["| task | bound | system | accuracy | switch-off rows | pass | curve (updates: accuracy) | budget |",
             "|---|---|---|---:|---|---|---|---|"]
    for r in rows:
        metric = "name_accuracy" if r["task"] == "copy" else "accuracy"
        off = "; ".join(f"{k} {fmt(v[metric])}" + (f" (follows {fmt(v['swapped'])})" if k == "swapped pairs" else "")
                        for k, v in r["off"].items()) or "–"
        curve = ", ".join(f"{u}: {a:.2f}" for u, a in r["curve"].items()) if len(r["curve"]) > 1 else "–"
        bound = "0 (names outside the dictionary)" if r["task"] == "copy" else f"{r['bound']:.3f} (1/V, exact)"
        verdict = "pass" if r["pass"] else "**FAIL**"
        lines.append(f"| {r['task']} | {bound} | {r['system']}: {r['note']} | {fmt(r['accuracy'])} | {off} | {verdict} "
                     f"| {curve} | {r['updates']} updates; {r['seconds'] / 60:.1f} min |")
    gates = [r for r in rows if "gate_at_value" in r["result"]]
    if gates:
        lines += ["", "| SEG-NMT (test, with its pairs) | mean ζ at the value token | mean ζ elsewhere | argmax slot holds "
                  "the value written | λ (coverage weight) |", "|---|---:|---:|---:|---:|"]
        for r in gates:
            g = r["result"]
            lines.append(f"| {r['system']} | {fmt(g['gate_at_value'])} | {fmt(g['gate_elsewhere'])} | "
                         f"{fmt(g['slot_holds_value'])} | {fmt(r.get('coverage_weight'))} |")
    lines += ["", f"CPU: {cpu_name()}, {threads} torch thread(s) per run, a shared machine (minutes are wall-clock)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    ap.add_argument("--systems", nargs="+", help="only these systems (default: all of each task)")
    ap.add_argument("--out", default="runs/diagnostics_copy")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--updates", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--curve-every", type=int, default=500, help="keep and decode a checkpoint every N updates (0 = off)")
    ap.add_argument("--pass-at", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--table", default=str(ROOT / "recipes" / "bench" / "RESULTS.md"),
                    help="the RESULTS.md whose copying-and-retrieval table is rewritten ('' = print only)")
    ap.add_argument("--force", action="store_true", help="score again and rewrite the results (training is kept)")
    args = ap.parse_args(argv)
    for task in args.tasks:
        run_task(task, args)
    rows = [json.loads(p.read_text()) for task in SYSTEMS for name, *_ in SYSTEMS[task]
            for p in [Path(args.out) / task / name / "result.json"] if p.exists()]
    text = table(rows, args.threads)
    print(text)
    if args.table:
        write_table(Path(args.table), text, START, END,
                    "Diagnostics: copying and retrieval (recipes/bench/diagnostics_copy.py)")
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

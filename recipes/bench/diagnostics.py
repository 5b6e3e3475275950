"""Diagnostics of the document-context mechanisms (Maruf 2019 ch. 3-4): each mechanism trained beside its
sentence baseline on a synthetic task where the baseline is limited by construction
(:mod:`fairseq_ext.tools.analysis.diagnostics`: ``antecedent``, ``cataphor``, ``consistency``), then scored by
contrastive accuracy (overall and by distance) with ``fairseq-ext-contrastive score``; the
**Diagnostics** table of ``recipes/bench/RESULTS.md`` is rewritten from the results::

    .venv/bin/python recipes/bench/diagnostics.py [--tasks antecedent cataphor consistency] [--systems NAME ...]
        [--out runs/diagnostics] [--stage1-updates 1000] [--stage2-updates 2000] [--curve-every 500]
        [--extend-failing 5000] [--table recipes/bench/RESULTS.md]

Per task: the corpus (``fairseq-ext-diagnostics generate``), then per model family (a small transformer
for the ch. 4 models, a small RNNsearch for the ch. 3 memory networks) a stage-1 sentence model trained
from scratch, then every stage-2 system warm-started from it (``--finetune-from-model``, as
recipes/maruf/ch3.sh and ch4.sh do) for the same updates on document batches; the family's
``sentence`` system is the stage-1 model trained on for those updates (the fair baseline). Every
system is scored on the test twins with its context and, for the document systems, once more with its
context switched off (``--doc-max-context 0``: no context sentence at all) -- that row must fall to the
bound. Besides the accuracy, the mean *margin* log P(reference) - log P(variant) is reported: over the twins it
is exactly 0 for a model the context does not reach, whatever its bias. Stage-2 checkpoints are scored every
``--curve-every`` updates (the learning curve); a mechanism that fails at ``--stage2-updates`` is trained on to
``--extend-failing`` updates and scored on the way (its verdict stays the one at ``--stage2-updates``). The
consistency task also decodes the test set greedily with the sentence model and with
``doc_bcd`` (pass 0 = the sentence model) and counts the documents whose repeated word got one synonym.

A system **passes** when its accuracy on the buckets its context can resolve is >= ``--pass-at`` (0.9) and
on the others <= the bound (0.5: the test twins make that exact); a baseline or context-off row passes when
it stays <= 0.5 everywhere. Results are cached per system (``OUT/TASK/SYSTEM/result.json``, the scores in
``contrastive*.json``): a rerun only does what is missing (``--force`` rebuilds the rows and the table from them).
Exit status 1 when a row fails.
"""
import json
import sys
from pathlib import Path

from fairseq_ext.tools.analysis.diagnostics import BUCKETS, DEFAULTS, decoded_scores, generate, read_hypotheses
from fairseq_ext.tools.analysis.diagnostics_runs import (
    adam, cached, cpu_line, cue_corpus, curve_checkpoints, fairseq_generate, fairseq_train, fmt,
    parser, pass_cell, report, run, run_tasks, save_row, selected,
)
from fairseq_ext.tools.analysis.diagnostics_systems import (  # the tables (tests read them too)
    BCD, FAMILIES, LR, SHAPES, SYSTEMS, TASK_FLAGS,
)
from fairseq_ext.tools.evaluation import bench_configs

START, END = "<!-- diagnostics:table -->", "<!-- /diagnostics:table -->"
TITLE = "Diagnostics: document context (recipes/bench/diagnostics.py)"


def optim(lr: float) -> list:
    return [*adam(lr), "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--max-tokens", "1024"]


def train(data: Path, save: Path, flags: list, updates: int, lr: float, threads: int, warm=None,
          curve_every: int = 0, marker: str = "train.done") -> float:
    """A document-task training of ``flags`` at peak ``lr`` (:func:`fairseq_train`); a stage-1 model (no ``warm``)
    is batched by size, a stage-2 one warm-starts from ``warm``."""
    flags = [*TASK_FLAGS, *flags, *optim(lr)] + (["--doc-batching", "size"] if warm is None else [])
    return fairseq_train(data, save, flags, updates, threads, curve_every=curve_every, warm=warm, marker=marker)


def task_flags(flags) -> list:
    """The task options among a system's flags (needed again to score and decode)."""
    out, keep = [], {"--doc-concat-prev", "--doc-context-mode", "--doc-target-context"}
    flags = flags or []
    for i, f in enumerate(flags):
        if f in keep:
            out += [f, flags[i + 1]]
    return out


def score(data: Path, ckpt: Path, flags: list, out_json: Path, name: str, threads: int) -> dict:
    """``fairseq-ext-contrastive score`` of the test set; adds ``margin``: per bucket (and ``all``) the mean of
    log P(reference) - log P(variant). Over twin documents a model whose output does not depend on the
    context has a mean margin of exactly 0 whatever its bias towards one class, so the margin measures the
    context's effect where the thresholded accuracy hides a weak one."""
    details = out_json.with_suffix(".details.jsonl")
    if not out_json.exists():
        cmd = [sys.executable, "-m", "fairseq_ext.tools.evaluation.contrastive", "score", "--set", data / "test.contrastive.jsonl",
               "--segmented", "--instances-per-batch", "64", "--name", name, "--json", out_json, "--details", details,
               data, "--path", ckpt, *TASK_FLAGS, *flags, "--gen-subset", "test", "--cpu"]
        run(cmd, out_json.with_suffix(".log"), threads)
    res = json.loads(out_json.read_text())
    margins: dict = {}
    for line in details.read_text().splitlines():
        x = json.loads(line)
        m = x["reference_score"] - max(x["variant_scores"])
        margins.setdefault(x["bucket"], []).append(m)
        margins.setdefault("all", []).append(m)
    res["margin"] = {b: sum(v) / len(v) for b, v in margins.items()}
    return res


def decode(data: Path, paths: str, flags: list, out: Path, threads: int) -> Path:
    return fairseq_generate(data, paths, [*TASK_FLAGS, *flags, "--beam", "1", *bench_configs.DECODE_LEN,
                                          "--batch-size", "64"], out, threads)


def accuracy_by_bucket(res: dict) -> dict:
    return {b: res["by_distance"][b]["accuracy"] for b in BUCKETS if res["by_distance"][b]["total"]}


def margin_of(res: dict, buckets: list) -> float:
    """Mean margin over ``buckets`` (all when empty), weighting the buckets equally."""
    vals = [res["margin"][b] for b in (buckets or BUCKETS) if b in res["margin"]]
    return round(sum(vals) / len(vals), 4) if vals else None


def verdict(acc: dict, resolvable: list, pass_at: float) -> bool:
    """>= ``pass_at`` on every resolvable bucket, <= the bound (0.5) on every other one."""
    ok = all(acc[b] >= pass_at for b in resolvable if b in acc)
    return ok and all(acc[b] <= 0.5 for b in BUCKETS if b in acc and b not in resolvable)


def run_task(task: str, args) -> list:
    out = Path(args.out) / task
    info = generate(task, str(out / "data"), seed=args.seed, n_train=args.n_train, n_valid=args.n_valid,
                    n_test=args.n_test)
    data = Path(info["bin"])
    systems = list(selected(SYSTEMS[task], args))
    stage1 = {}
    for fam in sorted({s[1] for s in systems}):
        save = out / f"stage1_{fam}"
        secs = train(data, save, FAMILIES[fam] + SHAPES[fam], args.stage1_updates, LR[fam][0], args.threads)
        stage1[fam] = (save / "checkpoint_last.pt", secs)
    rows = []
    for name, fam, flags, resolvable, note in systems:
        save = out / name
        row = cached(save, args)
        if row is not None:
            if task == "consistency" and name in BCD and "decoded_cue" not in row:
                row["decoded_cue"] = decoded_cue(data, out, name, fam, stage1[fam][0], args)
                save_row(save, row)
            rows.append(row)
            continue
        train_flags = (flags if flags is not None else FAMILIES[fam]) + SHAPES[fam]
        secs = train(data, save, train_flags, args.stage2_updates, LR[fam][1], args.threads, warm=stage1[fam][0],
                     curve_every=args.curve_every if flags is not None else 0)
        ckpt = save / "checkpoint_last.pt"
        tflags = task_flags(flags)
        res = score(data, ckpt, tflags, save / "contrastive.json", name, args.threads)
        curve = {args.stage2_updates: dict(accuracy_by_bucket(res), margin=margin_of(res, resolvable))}
        ok = verdict(curve[args.stage2_updates], resolvable, args.pass_at)
        if flags is not None and not ok and args.extend_failing > args.stage2_updates:
            # a failing mechanism trains on (resumed): the learning curve says whether it is a slow learner
            train(data, save, train_flags, args.extend_failing, LR[fam][1], args.threads, curve_every=args.curve_every,
                  marker=f"extend{args.extend_failing}.done")
        for upd, c in curve_checkpoints(save):
            if upd != args.stage2_updates and upd <= max(args.extend_failing, args.stage2_updates):
                r = score(data, c, tflags, save / f"contrastive.{upd}.json", f"{name} @{upd}", args.threads)
                curve[upd] = dict(accuracy_by_bucket(r), margin=margin_of(r, resolvable))
        curve = dict(sorted(curve.items()))
        row = {"task": task, "system": name, "family": fam, "note": note, "resolvable": resolvable,
               "stage1_updates": args.stage1_updates, "stage2_updates": args.stage2_updates,
               "stage1_seconds": round(stage1[fam][1], 1), "stage2_seconds": round(secs, 1),
               "accuracy": res["overall"]["accuracy"], "by_bucket": accuracy_by_bucket(res),
               "margin": margin_of(res, resolvable), "margin_by_bucket": res["margin"],
               "instances": res["overall"]["total"], "baseline": flags is None, "curve": curve,
               "passes_at": next((u for u, a in curve.items() if verdict(a, resolvable, args.pass_at)), None)}
        if flags is not None and "--doc-concat-prev" not in flags:
            off = score(data, ckpt, tflags + ["--doc-max-context", "0"], save / "contrastive.off.json",
                        name + " (context off)", args.threads)
            row["context_off"] = {"accuracy": off["overall"]["accuracy"], "by_bucket": accuracy_by_bucket(off),
                                  "margin": margin_of(off, resolvable)}
        row["pass"] = verdict(row["by_bucket"], resolvable, args.pass_at) and \
            ("context_off" not in row or verdict(row["context_off"]["by_bucket"], [], args.pass_at))
        if task == "consistency" and (name in BCD or flags is None):
            row["decoded"] = decoded(task, data, out, name, fam, flags, args)
        if task == "consistency" and name in BCD:
            row["decoded_cue"] = decoded_cue(data, out, name, fam, stage1[fam][0], args)
        rows.append(save_row(save, row))
    return rows


def decoded(task: str, data: Path, out: Path, name: str, fam: str, flags, args) -> dict:
    """Greedy decoding (sentence models) or doc_bcd K = 1, 2 (pass 0 = the family's sentence system)."""
    instances = [json.loads(x) for x in (data / "test.contrastive.jsonl").read_text().splitlines()]
    ckpt = out / name / "checkpoint_last.pt"
    res = {}
    if flags is None:
        gen = decode(data, str(ckpt), ["--decoding-algorithm", "greedy"], out / name / "greedy", args.threads)
        res["greedy"] = decoded_scores(instances, read_hypotheses(str(gen)))
        return res
    sent = out / BCD[name] / "checkpoint_last.pt"
    if not sent.exists():  # the stage-2 sentence system was not run: its stage-1 model
        sent = out / f"stage1_{fam}" / "checkpoint_last.pt"
    for k in (1, 2):
        gen = decode(data, f"{ckpt}:{sent}", ["--decoding-algorithm", "doc_bcd", "--doc-iterations", str(k),
                                              "--bcd-init", "base_model"], out / name / f"bcd{k}", args.threads)
        res[f"bcd{k}"] = decoded_scores(instances, read_hypotheses(str(gen)))
    return res


def decoded_cue(data: Path, out: Path, name: str, fam: str, stage1: Path, args) -> dict:
    """BCD from a pass 0 that is inconsistent by construction: the family's sentence model trained on the cue
    corpus (:func:`cue_corpus`; warm-started from stage 1, stage-2 updates) is pass 0; then ``doc_bcd`` K = 1, 2
    (Jacobi) and K = 2 Gauss-Seidel with the document model ``name``."""
    instances = [json.loads(x) for x in (data / "test.contrastive.jsonl").read_text().splitlines()]
    cue_dir = out / f"pass0_cue_{fam}"
    cue_bin = cue_corpus(data, cue_dir)
    train(cue_bin, cue_dir, FAMILIES[fam] + SHAPES[fam], args.stage2_updates, LR[fam][1], args.threads, warm=stage1)
    sent = cue_dir / "checkpoint_last.pt"
    res = {"pass 0 (cue model, greedy)": decoded_scores(instances, read_hypotheses(str(
        decode(data, str(sent), ["--decoding-algorithm", "greedy"], cue_dir / "greedy", args.threads))))}
    ckpt = out / name / "checkpoint_last.pt"
    for k, update in ((1, "jacobi"), (2, "jacobi"), (2, "gauss_seidel")):
        gen = decode(data, f"{ckpt}:{sent}", ["--decoding-algorithm", "doc_bcd", "--doc-iterations", str(k),
                                              "--bcd-init", "base_model", "--bcd-update", update],
                     out / name / f"cue_bcd{k}_{update}", args.threads)
        res[f"BCD K={k} {update.replace('_', '-')} from the cue pass 0"] = decoded_scores(
            instances, read_hypotheses(str(gen)))
    return res


# ------------------------------------------------------------------------------------------------ table
def curve_text(r: dict) -> str:
    """Mean accuracy over the resolvable buckets (all buckets when none) at each scored stage-2 update."""
    keys = r["resolvable"] or list(BUCKETS)
    out = []
    for upd, acc in sorted(((int(k), v) for k, v in r.get("curve", {}).items())):
        vals = [acc[b] for b in keys if b in acc]
        margin = "" if acc.get("margin") is None else f" ({acc['margin']:+.2f})"
        out.append(f"{upd}: {sum(vals) / len(vals):.2f}{margin}" if vals else f"{upd}: –")
    return ", ".join(out) if len(out) > 1 else "–"


def status(r: dict) -> str:
    if r["pass"]:
        return pass_cell(True)
    later = r.get("passes_at")
    return f"**FAIL** (passes at {later} updates)" if later and later > r["stage2_updates"] else "**FAIL**"


def table(rows: list, threads: int) -> str:
    lines = ["| task | bound | system | resolvable d | accuracy (all) | by d: " + " / ".join(BUCKETS)
             + " | margin | context off (all; margin) | pass | stage-2 curve (accuracy on resolvable d (margin)) "
             "| budget (stage 1 + 2 updates; stage-2 s) |",
             "|---|---|---|---|---:|---|---:|---|---|---|---|"]
    for r in rows:
        by = " / ".join(fmt(r["by_bucket"].get(b)) for b in BUCKETS)
        off = (f"{fmt(r['context_off']['accuracy'])}; {r['context_off']['margin']:+.3f}" if "context_off" in r
               else "–")
        margin = "–" if r.get("margin") is None else f"{r['margin']:+.3f}"
        lines.append(f"| {r['task']} | 0.500 | {r['system']}: {r['note']} | {','.join(r['resolvable']) or 'none'} "
                     f"| {fmt(r['accuracy'])} | {by} | {margin} | {off} | {status(r)} | {curve_text(r)} "
                     f"| {r['stage1_updates']} + {r['stage2_updates']}; {r['stage2_seconds']:.0f} s |")
    dec = [r for r in rows if "decoded" in r]
    if dec:
        lines += ["", "| consistency, decoded test set | decoding | probes correct | documents with one synonym |",
                  "|---|---|---:|---:|"]
        for r in dec:
            for how, d in {**r["decoded"], **r.get("decoded_cue", {})}.items():
                lines.append(f"| {r['system']} | {how} | {fmt(d['accuracy'])} | {d['consistent_docs']}/{d['documents']}"
                             f" ({fmt(d['consistency'])}) |")
    lines += ["", cpu_line(threads)]
    return "\n".join(lines)


def options(ap) -> None:
    ap.add_argument("--n-train", type=int, default=DEFAULTS["n_train"])
    ap.add_argument("--n-valid", type=int, default=DEFAULTS["n_valid"])
    ap.add_argument("--n-test", type=int, default=DEFAULTS["n_test"])
    ap.add_argument("--stage1-updates", type=int, default=1000)
    ap.add_argument("--stage2-updates", type=int, default=2000)
    ap.add_argument("--curve-every", type=int, default=500,
                    help="also score the stage-2 checkpoints every N updates (the learning curve; 0 = off)")
    ap.add_argument("--extend-failing", type=int, default=5000,
                    help="train a mechanism that fails at --stage2-updates on to N updates (scored every --curve-every; "
                         "the verdict stays the one at --stage2-updates)")


def main(argv=None) -> int:
    args = parser(__doc__, SYSTEMS, "runs/diagnostics", "Diagnostics table", options,
                  systems="only these systems (default: all of each task; name the baselines sentence / rnn_sentence "
                          "too to have them)").parse_args(argv)
    rows = run_tasks(args, run_task, SYSTEMS)  # every task run so far
    return report(rows, table(rows, args.threads), args, START, END, TITLE)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Gu (2018) ch. 8 end to end on prepared data: teacher → distillation → fertilities → NAT → fine-tuning →
decoding (argmax / average / NPD [/ EPD]) → sacreBLEU + paired bootstrap vs the teacher → latency (Table 8.2,
Fig. 8.6).  Called by ``recipes/gu/ch8.sh``; every stage is a real command line (fairseq-train, the
plugin's CLIs) except decoding/timing, which :mod:`fairseq_ext.tools.chapters.nat_latency` does in one process
per run.

    python -m fairseq_ext.tools.chapters.nat_pipeline --data data/bible_es_en/spm8000 --out runs/gu_ch8 \\
        (--teacher runs/bench/JOB/transformer/checkpoint_best.pt | --teacher-max-update N) \\
        [--size small|tiny] [--budget-min 15] [--ft-fraction 0.33] [--max-update N] [--ft-max-update N] \\
        [--npd 10,100] [--epd 10] [--threads 1] [--b1-max-sentences N] [--force] \\
        [--patience P --validate-every N]   # the NAT to convergence on dev BLEU (resumable)

Stages (each skipped when its ``done.json`` / output exists, unless ``--force``), under ``--out``:

1. ``teacher/``   only without ``--teacher``: train the AR teacher with the bench's ``transformer`` flags
                  (``bench_configs``; ``--size tiny``: the tests' 2+2 d32 shape, same optimiser);
2. ``kd/``        ``python -m fairseq_ext.tools.corpora.distill --splits train --beam 1 --fertility eflomal``:
                  greedy sequence-level KD of the training set (thesis §8.4.1; ``--distill-beam 4`` for the
                  ablation), dev/test keep the real references; eflomal fertilities on every split;
3. ``nat/``       ``fairseq-train --task translation_fertility --arch nat_fertility_{size}
                  --criterion nat_fertility_loss --init-encoder-from TEACHER`` (Eq. 8.9, no label
                  smoothing, the bench's optimiser) for ``--budget-min`` minutes (and/or ``--max-update``);
                  the checkpoint with the best dev BLEU (argmax decoding, real references) is kept; with
                  ``--patience P`` it trains until P validations (every ``--validate-every`` updates) bring no
                  better dev BLEU (the budgets become caps), resumes when interrupted, and writes curve.csv/.png;
4. ``ft/``        ``--finetune-from-model nat/checkpoint_best.pt --finetune --teacher-path TEACHER``
                  (Eq. 8.11, λ = 0.25, REINFORCE centred and ×0.1 as [C]; constant lr ``--ft-lr``, thesis
                  2e-5) for ``--ft-fraction`` × the NAT budget; best dev BLEU kept;
5. ``decode/``    ``nat_latency``: every system on the test set at batch 64 (translations) and
                  batch 1 (per-sentence latency): ar_b4 (thesis reference 1.00×), ar_b1, nat, nat_avg,
                  nat_ft, nat_ft_avg, nat_ft_npd{s} for every s in ``--npd`` and, only when asked,
                  nat_ft_epd{K} (exact parallel decoding, Eq. 8.8) for every K in ``--epd`` (default none),
                  and ``--fastest-ar`` (default: the teacher in CTranslate2 int8, beam 4, when CTranslate2 is
                  installed: the NAT's speed-ups are also given against the fastest autoregressive decoder);
                  with ``--ar2 CKPT`` also a second autoregressive model of the same data (e.g. the 6+1 deep
                  encoder / shallow decoder of Kasai et al. 2021) as ar2_b4 and ar2_<fastest-ar>, the NAT's
                  speed-ups given against that one too;
6. ``results.{json,md}``: sacreBLEU BLEU/chrF vs the reference, BLEU(T) vs the teacher's greedy output,
                  paired bootstrap (1000 samples) of every system vs ar_b4, latency and speed-ups, and the
                  acceptance targets (≥10× at batch 1, ≥2× at batch 64, BLEU gap ≤ 2 with NPD) checked.
"""
import argparse
from argparse import Namespace
import datetime
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from fairseq_ext.tools.evaluation import bench_configs, fairseq_log, runs
from fairseq_ext.tools.evaluation.runs import fmt, logger

# the plugin (fairseq's --user-dir) and the repository (the commands run there)
PLUGIN = Path(__file__).resolve().parents[2]
ROOT = PLUGIN.parent

BIN = Path(sys.executable).parent

# the tests' tiny shape (tests/harness.py TINY_TRANSFORMER): the encoder of nat_fertility_tiny
TINY_TRANSFORMER = [
    "--arch", "transformer", "--encoder-layers", "2", "--decoder-layers", "2",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--share-all-embeddings",
]


log = logger("gu-ch8")


def run_logged(cmd, logfile: Path, threads: int, append: bool = False) -> float:
    return runs.run_logged(cmd, logfile, threads, append, log=log, env={"PYTHONWARNINGS": "ignore"}, cwd=ROOT, tail=40)


def without(flags, *names):
    """``flags`` minus each ``--name value`` pair in ``names``."""
    out, skip = [], False
    for f in flags:
        if skip:
            skip = False
            continue
        if f in names:
            skip = True
            continue
        out.append(f)
    return out


def stop_flags(budget_min, max_update, patience=0):
    flags = ["--max-epoch", "100000"]
    if budget_min:
        flags += ["--stop-time-hours", f"{budget_min / 60:.6f}"]
    if max_update:
        flags += ["--max-update", str(max_update)]
    if patience:
        flags += ["--patience", str(patience)]
    if not budget_min and not max_update and not patience:
        raise SystemExit("error: give a time budget (--budget-min), an update count (--max-update) or --patience")
    return flags


def common_train(save_dir: Path, seed: int):
    return ["--cpu", "--seed", str(seed), "--save-dir", save_dir, "--no-epoch-checkpoints", "--no-progress-bar",
            "--log-format", "simple", "--log-interval", "25", "--skip-invalid-size-inputs-valid-test"]


def parse_train_log(text: str) -> dict:
    t = fairseq_log.parse_train_log(text)
    return {"updates": t["updates"], "valid_bleu": t["valid_bleu"], "valid_loss": t["valid_loss"],
            "params": t["params"]}


def done(stage_dir: Path, force: bool):
    f = stage_dir / "done.json"
    if f.exists() and not force:
        log(f"{stage_dir.name}: reusing ({f})")
        return json.loads(f.read_text())
    return None


def mark_done(stage_dir: Path, info: dict) -> dict:
    (stage_dir / "done.json").write_text(json.dumps(info, indent=1, default=str))
    return info


# ------------------------------------------------------------------------------------------- stages
def stage_teacher(args, data_bin: Path) -> Path:
    if args.teacher:
        p = Path(args.teacher)
        if not p.exists():
            raise SystemExit(f"error: --teacher {p} not found")
        return p
    d = args.out / "teacher"
    if not done(d, args.force):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        model = TINY_TRANSFORMER if args.size == "tiny" else bench_configs.TRANSFORMER_SMALL
        cmd = [BIN / "fairseq-train", data_bin, "--user-dir", PLUGIN, "--task", "translation_ext",
               *model, *bench_configs.OPTIM, *stop_flags(args.teacher_budget_min, args.teacher_max_update),
               *common_train(d, args.seed)]
        wall = run_logged(cmd, d / "train.log", args.threads)
        (d / "checkpoint_last.pt").unlink(missing_ok=True)
        mark_done(d, {"wall_s": wall, **parse_train_log((d / "train.log").read_text())})
    return d / "checkpoint_best.pt"


def stage_distill(args, data_bin: Path, teacher: Path) -> Path:
    kd = args.out / "kd"
    if done(kd, args.force):
        return kd
    cmd = [sys.executable, "-m", "fairseq_ext.tools.corpora.distill", "--path", teacher, "--data", data_bin, "--out", kd,
           "--splits", "train", "--beam", str(args.distill_beam), *bench_configs.DECODE_LEN,
           "--max-tokens", "8000", "--fertility", "eflomal"]
    if args.force:
        cmd.append("--force")
    wall = run_logged(cmd, args.out / "logs" / "distill.log", args.threads)
    info = json.loads((kd / "distill.json").read_text())
    mark_done(kd, {"wall_s": wall, **info})
    return kd


def nat_train_flags(args):
    # the bench's optimiser and batch (bench_configs SCHEDULE) without label smoothing (thesis)
    return without(bench_configs.SCHEDULE, "--label-smoothing")


def eval_bleu_flags(post_process: str):
    return ["--eval-bleu", "--eval-bleu-remove-bpe", post_process or "sentencepiece",
            "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]


def validation_flags(every: int):
    """Dev BLEU (and a checkpoint) every ``every`` updates instead of every epoch (0: every epoch)."""
    if not every:
        return []
    return ["--validate-interval-updates", str(every), "--validate-interval", "1000000",
            "--save-interval-updates", str(every), "--keep-interval-updates", "1", "--save-interval", "1000000"]


def stage_nat(args, kd: Path, teacher: Path, post_process: str) -> Path:
    """NAT training (Eq. 8.9); with --patience, to convergence on dev BLEU.  An interrupted run (its
    checkpoint_last.pt is there, no done.json) resumes and its log is appended to; nat/curve.csv and
    nat/curve.png hold the dev BLEU / NLL curve."""
    d = args.out / "nat"
    if not done(d, args.force):
        resume = (d / "checkpoint_last.pt").exists() and not args.force
        if d.exists() and not resume:
            shutil.rmtree(d)
        d.mkdir(parents=True, exist_ok=True)
        cmd = [BIN / "fairseq-train", kd, "--user-dir", PLUGIN, "--task", "translation_fertility",
               "--arch", f"nat_fertility_{args.size}", "--criterion", "nat_fertility_loss",
               "--init-encoder-from", teacher.resolve(), *nat_train_flags(args),
               *eval_bleu_flags(post_process), *stop_flags(args.budget_min, args.max_update, args.patience),
               *validation_flags(args.validate_every), *common_train(d, args.seed)]
        if resume:
            log(f"nat: resuming {d / 'checkpoint_last.pt'}")
        wall = run_logged(cmd, d / "train.log", args.threads, append=resume)
        (d / "checkpoint_last.pt").unlink(missing_ok=True)
        text = (d / "train.log").read_text()
        info = {"wall_s": wall, **parse_train_log(text)}
        curve = fairseq_log.parse_curve(text)
        if curve and fairseq_log.best_point(curve):
            fairseq_log.write_curve_csv(d / "curve.csv", curve)
            fairseq_log.plot_curves({"nat": curve}, d / "curve.png", f"NAT (Eq. 8.9) on {kd.name}: dev every "
                                     f"{args.validate_every or 'epoch'}")
            info["curve"] = {**fairseq_log.curve_points(curve), "patience": args.patience,
                             "stopped": "patience" if "early stop since valid performance" in text else "limit"}
        mark_done(d, info)
    return d / "checkpoint_best.pt"


def stage_ft(args, kd: Path, teacher: Path, nat: Path, post_process: str) -> Path:
    d = args.out / "ft"
    if not done(d, args.force):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        flags = without(nat_train_flags(args), "--lr", "--lr-scheduler", "--warmup-updates", "--warmup-init-lr")
        budget = args.budget_min * args.ft_fraction if args.budget_min else None
        cmd = [BIN / "fairseq-train", kd, "--user-dir", PLUGIN, "--task", "translation_fertility",
               "--arch", f"nat_fertility_{args.size}", "--criterion", "nat_fertility_loss",
               "--finetune-from-model", nat.resolve(), "--finetune", "--teacher-path", teacher.resolve(),
               "--ft-lambda", "0.25", "--ft-rl-center", "--ft-rl-scale", "0.1",
               *flags, "--lr", str(args.ft_lr), "--lr-scheduler", "fixed",
               *eval_bleu_flags(post_process), *stop_flags(budget, args.ft_max_update),
               *common_train(d, args.seed)]
        if args.ft_validate_interval_updates:
            cmd += ["--validate-interval-updates", str(args.ft_validate_interval_updates)]
        wall = run_logged(cmd, d / "train.log", args.threads)
        (d / "checkpoint_last.pt").unlink(missing_ok=True)
        mark_done(d, {"wall_s": wall, **parse_train_log((d / "train.log").read_text())})
    return d / "checkpoint_best.pt"


def fastest_systems(args) -> list:
    """The fastest-AR systems the table has speed-up columns for: the teacher's, then the second AR model's."""
    fastest = getattr(args, "fastest_ar", "")
    if not fastest:
        return []
    return [fastest] + ([f"ar2_{fastest}"] if getattr(args, "ar2", None) else [])


def systems(args):
    ar2 = ["ar2_b4"] if getattr(args, "ar2", None) else []
    return (["ar_b4", "ar_b1", "nat", "nat_avg", "nat_ft", "nat_ft_avg"] + [f"nat_ft_npd{s}" for s in args.npd]
            + [f"nat_ft_epd{k}" for k in getattr(args, "epd", [])] + ar2 + fastest_systems(args))


def stage_decode(args, kd: Path, teacher: Path, nat: Path, ft: Path, post_process: str) -> dict:
    d = args.out / "decode"
    info = done(d, args.force)
    if info and set(systems(args)) <= set(info.get("systems", {})):
        return info
    if info:
        log("decode: the systems changed; decoding again")
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "fairseq_ext.tools.chapters.nat_latency", "--data", kd, "--teacher", teacher, "--nat", nat, "--ft", ft,
           *(["--ar2", os.path.abspath(args.ar2)] if getattr(args, "ar2", None) else []),
           "--systems", ",".join(systems(args)), "--batch-sizes", "1", str(args.batch_size), "--out", d,
           "--hyp-dir", d / "hyps", "--post-process", post_process or "none", "--threads", str(args.threads),
           "--seed", str(args.seed), "--b1-max-sentences", str(args.b1_max_sentences),
           "--plot-systems", ",".join(["ar_b4", "ar_b1", "nat_ft"] + [f"nat_ft_npd{s}" for s in args.npd]
                                      + [f"nat_ft_epd{k}" for k in args.epd]),
           "--title", f"Fig. 8.6: latency vs source length, batch 1 ({args.size}, {args.threads} thread(s))"]
    wall = run_logged(cmd, args.out / "logs" / "latency.log", args.threads)
    return mark_done(d, {"wall_s": wall, **json.loads((d / "latency.json").read_text())})


ROW_NAMES = {"ar_b4": "Autoregressive (b=4)", "ar_b1": "Autoregressive (b=1)", "nat": "NAT",
             "nat_avg": "NAT (average fertility)", "nat_ft": "NAT (+FT)", "nat_ft_avg": "NAT (+FT, average)"}


def row_name(system: str, ar2_name: str = "6+1") -> str:
    """Table 8.2's row name: "NAT (+FT + NPD s=10)", "NAT (+FT + EPD K=10)", "Autoregressive, CTranslate2 int8
    (b=4)"."""
    if system in ROW_NAMES:
        return ROW_NAMES[system]
    if system.startswith("ar2_"):
        return row_name(system[4:]).replace("Autoregressive", f"Autoregressive {ar2_name}", 1)
    if system.startswith("ct2_"):
        _, q, b = system.split("_")
        return f"Autoregressive, CTranslate2 {q} (b={b[1:]})"
    if system.startswith("b") and system[1:].isdigit():   # ar2_bK
        return f"Autoregressive (b={system[1:]})"
    if "_npd" in system:
        return "NAT (+FT + NPD s=" + system.split("npd")[1] + ")"
    return "NAT (+FT + EPD K=" + system.split("epd")[1] + ")"


def stage_score(args, raw: Path, src: str, tgt: str, lat: dict, stages: dict) -> dict:
    from fairseq_ext.tools.evaluation import score as ev
    from fairseq_ext.tools.hypotheses import load_hypotheses

    hyp_dir = args.out / "decode" / "hyps"
    names = systems(args)
    ref = raw / f"test.{tgt}"
    res = {}
    # BLEU(T): agreement with the teacher's greedy translation (the distillation decode) of the test set
    teacher_ref = args.out / "decode" / "teacher_b1.txt"
    t_hyps = load_hypotheses(hyp_dir / "ar_b1.out")
    teacher_ref.write_text("".join(t_hyps[k] + "\n" for k in sorted(t_hyps, key=int)))
    for n in names:
        sc = ev.score_files(hyp_dir / f"{n}.out", [ref])
        sct = ev.score_files(hyp_dir / f"{n}.out", [teacher_ref])
        res[n] = {"bleu": sc["bleu"], "chrf": sc["chrf"], "bleu_str": sc["bleu_str"],
                  "bleu_signature": sc["bleu_signature"], "chrf_signature": sc["chrf_signature"],
                  "bleu_t": sct["bleu"], "latency": lat["systems"][n]}
    others = [hyp_dir / f"{n}.out" for n in names if n != "ar_b4"]
    cmp = ev.compare_files(hyp_dir / "ar_b4.out", others, [ref], n=args.n_bootstrap)
    by_path = {s["name"]: s for s in cmp["systems"]}
    bleu_m, chrf_m = cmp["metrics"]
    for n in names:
        if n == "ar_b4":
            continue
        s = by_path[str(hyp_dir / f"{n}.out")]
        res[n]["bleu_p"] = s[bleu_m]["p_value"]
        res[n]["chrf_p"] = s[chrf_m]["p_value"]
    comparison = ev.format_comparison(cmp)

    bs = args.batch_size
    base = res["ar_b4"]["bleu"]
    npd = [n for n in names if "_npd" in n]
    epd = [n for n in names if "_epd" in n]
    sp1 = lat["systems"]["nat_ft"]["b1"].get("speedup_vs_ar_b4")
    spb = lat["systems"]["nat_ft"][f"b{bs}"].get("speedup_vs_ar_b4")
    gaps = {n: base - res[n]["bleu"] for n in npd}
    targets = {
        "speedup_b1_nat_ft_vs_ar_b4": sp1, "target_b1": 10.0, "met_b1": bool(sp1 and sp1 >= 10.0),
        f"speedup_b{bs}_nat_ft_vs_ar_b4": spb, f"target_b{bs}": 2.0, f"met_b{bs}": bool(spb and spb >= 2.0),
        "bleu_gap_npd": gaps, "target_gap": 2.0, "met_gap": bool(gaps) and min(gaps.values()) <= 2.0,
    }
    if epd:  # reported, not a target
        targets["bleu_gap_epd"] = {n: base - res[n]["bleu"] for n in epd}
    summary = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "args": vars(args),
               "machine": lat["machine"], "threads": lat["threads"], "test_sentences": lat["n_sentences"],
               "b1_sentences": lat["b1_sentences"], "stages": stages, "systems": res, "targets": targets,
               "comparison": comparison, "ref": str(ref)}
    (args.out / "results.json").write_text(json.dumps(summary, indent=1, default=str))
    md = results_markdown(summary, names, bs)
    (args.out / "results.md").write_text(md)
    print(comparison)
    print(md)
    return summary


def results_markdown(summary: dict, names, bs: int) -> str:
    res = summary["systems"]
    base = res["ar_b4"]["bleu"]
    fastest = fastest_systems(Namespace(**summary["args"]))
    extra = ("".join(f" speed-up b=1 vs {f} | speed-up b={bs} vs {f} |" for f in fastest), "---|---|" * len(fastest))
    lines = [f"| system | BLEU | chrF | ΔBLEU vs AR b=4 (bootstrap p) | BLEU(T) | ms/sent b=1 | speed-up b=1 "
             f"| ms/sent b={bs} | speed-up b={bs} |{extra[0]}", "|---|---|---|---|---|---|---|---|---|" + extra[1]]
    for n in names:
        r = res[n]
        lat = r["latency"]
        name = row_name(n, summary["args"].get("ar2_name") or "6+1")
        p = r.get("bleu_p")
        delta = "–" if n == "ar_b4" else f"{r['bleu'] - base:+.2f} (p={p:.3f})" if p is not None else \
            f"{r['bleu'] - base:+.2f}"
        lines.append(f"| {name} | {r['bleu']:.2f} | {r['chrf']:.2f} | {delta} | {r['bleu_t']:.2f} | "
                     f"{fmt(lat['b1']['ms_per_sentence'], '.1f')} | {fmt(lat['b1'].get('speedup_vs_ar_b4'))}× | "
                     f"{fmt(lat[f'b{bs}']['ms_per_sentence'], '.2f')} | "
                     f"{fmt(lat[f'b{bs}'].get('speedup_vs_ar_b4'))}× |"
                     + "".join(f" {fmt(lat['b1'].get(f'speedup_vs_{f}'))}× | "
                               f"{fmt(lat[f'b{bs}'].get(f'speedup_vs_{f}'))}× |" for f in fastest))
    t = summary["targets"]
    gaps = ", ".join(f"s={k.split('npd')[1]}: {v:.2f}" for k, v in t["bleu_gap_npd"].items()) or "–"
    epd = "".join(f" BLEU gap with EPD K={k.split('epd')[1]}: {v:.2f}." for k, v in t.get("bleu_gap_epd", {}).items())
    ok = {True: "met", False: "NOT met"}
    a = summary["args"]
    st = summary["stages"]
    lines += [
        "",
        f"Targets (NAT+FT argmax vs AR b=4): speed-up at batch 1 {fmt(t['speedup_b1_nat_ft_vs_ar_b4'])}× "
        f"(≥10×: {ok[t['met_b1']]}); at batch {bs} {fmt(t[f'speedup_b{bs}_nat_ft_vs_ar_b4'])}× "
        f"(≥2×: {ok[t[f'met_b{bs}']]}); BLEU gap with NPD {gaps} (≤2: {ok[t['met_gap']]}).{epd}",
        "",
        f"One run, {summary['date']}, {summary['machine']}, {summary['threads']} thread(s); test "
        f"{summary['test_sentences']} sentences (batch-1 latency over {summary['b1_sentences']}); sacreBLEU "
        f"`{res['ar_b4']['bleu_signature']}` vs `{Path(summary['ref']).name}`; BLEU(T) vs the teacher's greedy "
        f"output; paired bootstrap {a['n_bootstrap']}× vs AR b=4. NAT {st.get('nat', {}).get('updates', '?')} "
        f"updates ({_stop_text(a, st.get('nat', {}))}), FT "
        f"{st.get('ft', {}).get('updates', '?')} updates "
        f"(lr {a['ft_lr']:g}); teacher `{st.get('teacher_path')}`; size {a['size']}.",
    ]
    return "\n".join(lines) + "\n"


def _stop_text(a: dict, nat: dict) -> str:
    """How the NAT stage stopped: at convergence (patience, with its best dev BLEU point) or at its budget."""
    c = nat.get("curve")
    if a.get("patience") and c:
        how = f"stopped by {c['stopped']}" if c.get("stopped") == "patience" else "stopped by its cap, not converged"
        return (f"patience {a['patience']} validations, {how}; best dev BLEU {c['best_dev_bleu']} at "
                f"{c['best_updates']:,} updates, {c['best_train_wall_s'] / 60:.1f} min of training; "
                f"curve nat/curve.png")
    return f"{fmt(a['budget_min'], 'g')} min budget" if a.get("budget_min") else "update budget"


# ------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--data", type=Path, required=True,
                    help="segmented folder with bin/ and segment.json (fairseq_ext.tools.corpora.corpora prepare), or bin/")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--teacher", help="AR teacher checkpoint (e.g. the bench's transformer checkpoint_best.pt)")
    ap.add_argument("--teacher-budget-min", type=float, default=0.0, help="without --teacher: training minutes")
    ap.add_argument("--teacher-max-update", type=int, default=0, help="without --teacher: training updates")
    ap.add_argument("--size", choices=("small", "tiny"), default="small",
                    help="small: the bench shape (nat_fertility_bench); tiny: 2+2 d32 (tests)")
    ap.add_argument("--budget-min", type=float, default=15.0, help="NAT training minutes (0: --max-update only)")
    ap.add_argument("--max-update", type=int, default=0, help="cap the NAT updates (0: none)")
    ap.add_argument("--patience", type=int, default=0, metavar="P",
                    help="NAT to convergence: stop after P validations without a better dev BLEU (then "
                         "--budget-min / --max-update are caps; 0: off)")
    ap.add_argument("--validate-every", type=int, default=0, metavar="N",
                    help="NAT dev BLEU and checkpoint every N updates (0: every epoch)")
    ap.add_argument("--ft-fraction", type=float, default=1 / 3, help="fine-tuning minutes = this x --budget-min")
    ap.add_argument("--ft-max-update", type=int, default=0)
    ap.add_argument("--ft-lr", type=float, default=2e-5, help="constant fine-tuning lr (thesis 2e-5)")
    ap.add_argument("--ft-validate-interval-updates", type=int, default=0,
                    help="dev BLEU every N fine-tuning updates (thesis: 100; 0 = each epoch and at the end)")
    ap.add_argument("--distill-beam", type=int, default=1, help="1 = greedy (thesis), 4 = the ablation")
    ap.add_argument("--npd", default="10,100", help="NPD sample sizes")
    ap.add_argument("--epd", default="", help="EPD sizes K (exact parallel decoding, e.g. 10; default: none)")
    ap.add_argument("--batch-size", type=int, default=64, help="the batched latency setting (and decoding)")
    ap.add_argument("--fastest-ar", default="auto",
                    help="the fastest autoregressive decoder, a latency.py CTranslate2 system (e.g. ct2_int8_b4), "
                         "decoded beside the others: speed-ups are also given against it; 'auto' = ct2_int8_b4 "
                         "when CTranslate2 is installed, 'none' = not decoded")
    ap.add_argument("--ar2", help="a second autoregressive checkpoint of the same data (e.g. the bench's "
                                  "transformer_6_1): decoded as ar2_b4 and ar2_<fastest-ar>, speed-ups against it too")
    ap.add_argument("--ar2-name", default="6+1", help="the second AR model's name in the table's rows")
    ap.add_argument("--b1-max-sentences", type=int, default=0, help="batch-1 latency on a subset (0 = all)")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="redo every stage")
    args = ap.parse_args(argv)
    args.npd = [int(s) for s in str(args.npd).split(",") if s]
    args.epd = [int(k) for k in str(args.epd).split(",") if k]
    if args.fastest_ar == "auto":
        import importlib.util
        args.fastest_ar = "ct2_int8_b4" if importlib.util.find_spec("ctranslate2") else ""
    elif args.fastest_ar == "none":
        args.fastest_ar = ""
    elif not args.fastest_ar.startswith("ct2_"):
        raise SystemExit(f"error: --fastest-ar {args.fastest_ar}: a CTranslate2 system (ct2_int8_bK, ct2_fp32_bK)")
    if args.ar2 and not os.path.isfile(args.ar2):
        raise SystemExit(f"error: --ar2 {args.ar2}: no such checkpoint")
    args.out = args.out.resolve()
    data_bin = args.data / "bin" if (args.data / "bin").is_dir() else args.data
    seg_file = next((p for p in (args.data / "segment.json", data_bin / "segment.json") if p.exists()), None)
    if seg_file is None:
        raise SystemExit(f"error: no segment.json in {args.data} (prepare the data with fairseq_ext.tools.corpora.corpora)")
    seg = json.loads(seg_file.read_text())
    raw = Path(seg.get("raw", args.data.parent / "raw"))
    src, tgt, post = seg.get("src", "es"), seg.get("tgt", "en"), seg.get("post_process", "sentencepiece")
    if not (raw / f"test.{tgt}").exists():
        raise SystemExit(f"error: reference {raw / f'test.{tgt}'} missing")
    if not args.teacher and not (args.teacher_budget_min or args.teacher_max_update):
        raise SystemExit("error: give --teacher CKPT, or --teacher-budget-min/--teacher-max-update to train one")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    log(f"data {data_bin} ({src}->{tgt}), out {args.out}, size {args.size}, NAT budget {args.budget_min:g} min "
        f"(max-update {args.max_update or '-'}), FT x{args.ft_fraction:.2f}, {args.threads} thread(s), "
        f"{platform.machine()}")
    teacher = stage_teacher(args, data_bin)
    kd = stage_distill(args, data_bin, teacher)
    nat = stage_nat(args, kd, teacher, post)
    ft = stage_ft(args, kd, teacher, nat, post)
    lat = stage_decode(args, kd, teacher, nat, ft, post)
    stages = {"teacher_path": str(teacher)}
    for name in ("teacher", "kd", "nat", "ft"):
        f = args.out / name / "done.json"
        if f.exists():
            info = json.loads(f.read_text())
            stages[name] = {k: v for k, v in info.items() if k in ("wall_s", "updates", "valid_bleu", "valid_loss",
                                                                    "params", "splits", "seconds", "curve")}
    stage_score(args, raw, src, tgt, lat, stages)
    log(f"done in {(time.time() - t0) / 60:.1f} min -> {args.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

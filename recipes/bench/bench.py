#!/usr/bin/env python
"""Train and evaluate named configurations on the same prepared data under the same budget.

    python recipes/bench/bench.py --data data/bible_es_en/spm8000 --configs transformer,... \
        --budget-min 15 --out runs/bench/JOB [--table recipes/bench/RESULTS.md]

For every configuration (``recipes/bench/configs.py``), one after the other on the same machine:

1. ``fairseq-train --user-dir fairseq_ext`` for ``--budget-min`` minutes of wall-clock training
   (``--stop-time-hours``; fairseq stops at the first update past the budget), keeping the
   checkpoint with the best validation loss;
2. ``fairseq-generate`` of the test split with the configuration's decoding flags;
3. sacreBLEU BLEU + chrF against the reference (and the second reference, when present), paired
   bootstrap against the baseline of the same job, and the measured costs: parameters, training
   target tokens/s (fairseq's ``wps``, subword tokens), decoding sentences/s, each also as a ratio
   to the baseline of the same job.

Results go to ``OUT/<config>/result.json``, ``OUT/summary.json`` and a Markdown table.  With
``--table`` the rows are merged into that file by configuration name (later issues add rows
without touching the others; every row says which job, budget and machine produced it).
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import configs as bench_configs  # noqa: E402

from fairseq_ext.tools import score as ev  # noqa: E402

BIN = Path(sys.executable).parent


def log(msg: str) -> None:
    print(f"[bench {datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def run_logged(cmd, logfile: Path, threads: int) -> float:
    """Run ``cmd`` writing stdout+stderr to ``logfile``; show progress lines; return wall seconds."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    log("$ " + " ".join(str(c) for c in cmd))
    t0 = time.time()
    with open(logfile, "w") as f:
        p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=env, cwd=ROOT)
        for line in p.stdout:
            f.write(line)
            f.flush()
            if re.search(r"\| (valid|train) \| epoch|Translated|done training|Error|error:", line):
                print("    " + line.rstrip()[:200], file=sys.stderr, flush=True)
        rc = p.wait()
    if rc != 0:
        tail = Path(logfile).read_text().splitlines()[-30:]
        raise SystemExit(f"error: command failed ({rc}); see {logfile}\n" + "\n".join(tail))
    return time.time() - t0


def parse_train_log(text: str) -> dict:
    params = re.search(r"num\. (?:shared )?model params: ([\d,]+)", text)
    wps = [float(x) for x in re.findall(r"train_inner \|.*?wps=([\d.]+)", text)]
    if len(wps) < 2:  # too short a run for interval logs: use the per-epoch summaries
        wps = [0.0] + [float(x) for x in re.findall(r"\| train \| epoch .*?\| wps ([\d.]+)", text)]
    upd = re.findall(r"num_updates[= ](\d+)", text)
    epochs = re.findall(r"\| train \| epoch (\d+)", text)
    vloss = re.findall(r"\| valid \|.*?\| loss ([\d.]+)", text)
    return {
        "params": int(params.group(1).replace(",", "")) if params else None,
        # mean of the logged intervals, skipping the first (warm-up of the data loader)
        "train_tokens_per_s": (sum(wps[1:]) / len(wps[1:])) if len(wps) > 1 else (wps[0] if wps else None),
        "updates": int(upd[-1]) if upd else 0,
        "epochs": int(epochs[-1]) if epochs else 0,
        "valid_loss": [float(v) for v in vloss],
    }


def parse_generate_log(text: str) -> dict:
    m = re.search(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s, "
                  r"([\d.]+) tokens/s\)", text)
    if not m:
        return {}
    return {"n_translated": int(m.group(1).replace(",", "")), "decode_s": float(m.group(3)),
            "decode_sent_per_s": float(m.group(4)), "decode_tokens_per_s": float(m.group(5))}


def post_process(data: Path) -> str:
    """How fairseq-generate detokenises this data: the ``post_process`` of its segment.json."""
    seg = json.loads((data / "segment.json").read_text()) if (data / "segment.json").exists() else {}
    return seg.get("post_process", "sentencepiece")


def raw_folder(data: Path) -> Path:
    seg = json.loads((data / "segment.json").read_text()) if (data / "segment.json").exists() else {}
    return Path(seg.get("raw", data.parent / "raw"))


def run_config(name: str, args, out: Path) -> dict:
    cfg = bench_configs.get(name)
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    data_bin = args.data / "bin"
    res_file = d / "result.json"
    if res_file.exists() and not args.force:
        log(f"{name}: reusing {res_file}")
        return json.loads(res_file.read_text())
    ckpt = d / "checkpoint_best.pt"
    train_cmd = [BIN / "fairseq-train", data_bin, "--user-dir", ROOT / "fairseq_ext", "--task", cfg["task"],
                 *cfg["train"], "--cpu", "--seed", str(args.seed),
                 "--stop-time-hours", f"{args.budget_min / 60:.5f}", "--max-epoch", "1000",
                 "--save-dir", d, "--no-epoch-checkpoints", "--no-progress-bar", "--log-format", "simple",
                 "--log-interval", "25", "--skip-invalid-size-inputs-valid-test"]
    train_wall = run_logged(train_cmd, d / "train.log", args.threads)
    tr = parse_train_log((d / "train.log").read_text())
    gen_cmd = [BIN / "fairseq-generate", data_bin, "--user-dir", ROOT / "fairseq_ext", "--task", cfg["task"],
               "--path", ckpt, "--gen-subset", "test", "--cpu", *cfg["generate"]]
    if "--post-process" not in cfg["generate"]:
        gen_cmd += ["--post-process", post_process(args.data)]
    gen_cmd += [f for f in ("--cpu-bf16", "--math-attention") if f in cfg["train"]]
    gen_wall = run_logged(gen_cmd, d / "generate.out", args.threads)
    ge = parse_generate_log((d / "generate.out").read_text())
    raw = raw_folder(args.data)
    tgt = args.tgt
    refs = [raw / f"test.{tgt}"] + ([raw / f"test.{args.ref2}"] if args.ref2 and (raw / f"test.{args.ref2}").exists() else [])
    sc = ev.score_files(d / "generate.out", refs[:1], src=raw / f"test.{args.src}",
                        plot=d / "bleu_by_length.png", plot_title=name)
    sc2 = ev.score_files(d / "generate.out", refs) if len(refs) > 1 else None
    result = {
        "name": name, "desc": cfg["desc"], "budget_min": args.budget_min, "train_wall_s": train_wall,
        "generate_wall_s": gen_wall, **tr, **ge,
        "bleu": sc["bleu"], "chrf": sc["chrf"], "bleu_signature": sc["bleu_signature"],
        "chrf_signature": sc["chrf_signature"], "bleu_str": sc["bleu_str"],
        "bleu_2refs": sc2["bleu"] if sc2 else None, "buckets": sc.get("buckets"),
        "hyp_file": str(d / "generate.out"),
    }
    res_file.write_text(json.dumps(result, indent=1, default=str))
    for f in d.glob("checkpoint_last.pt"):
        f.unlink()  # keep the best only
    log(f"{name}: {sc['bleu_str']}")
    log(f"{name}: {sc['chrf_str']}")
    log(f"  signature: {sc['bleu_signature']}")
    log(f"  signature: {sc['chrf_signature']}")
    return result


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def fmt(x, spec=".2f"):
    return "–" if x is None else format(x, spec)


def table_rows(results: dict, job: str, args) -> dict:
    base = results.get(bench_configs.BASELINE)
    rows = {}
    for name, r in results.items():
        sig = r.get("significance") or {}
        p = sig.get("bleu_p")
        row = (f"| {name} | {r['desc']} | {fmt(r['bleu'])} | {fmt(r['chrf'])} | "
               f"{fmt(r['bleu'] - base['bleu'], '+.2f') if base else '–'}"
               f"{'' if p is None else f' (p={p:.3f})'} | "
               f"{fmt(r.get('params') / 1e6 if r.get('params') else None)}M | "
               f"{fmt(r.get('train_tokens_per_s'), '.0f')} | "
               f"{fmt(ratio(r.get('train_tokens_per_s'), base and base.get('train_tokens_per_s')))} | "
               f"{fmt(r.get('decode_sent_per_s'), '.1f')} | "
               f"{fmt(ratio(r.get('decode_sent_per_s'), base and base.get('decode_sent_per_s')))} | "
               f"{r.get('updates')} / {r.get('epochs')} | {args.budget_min:g} min | {job} |")
        rows[name] = row
    return rows


HEADER = ("| config | system | BLEU | chrF | ΔBLEU vs baseline (bootstrap p) | params | train tok/s | "
          "train ×base | decode sent/s | decode ×base | updates / epochs | budget | job |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def _row_key(line: str):
    """``(config, job)`` of a table row: rows of different jobs never replace each other."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return (cells[0], cells[-1])


def merge_table(path: Path, rows: dict, job_note: str) -> None:
    """Merge this job's rows into the Markdown table in ``path`` (a row per configuration and job;
    re-running a job replaces its rows); keep everything else in the file."""
    text = path.read_text() if path.exists() else ""
    start, end = "<!-- bench:table -->", "<!-- /bench:table -->"
    existing = {}
    if start in text:
        body = text.split(start, 1)[1].split(end, 1)[0]
        for line in body.splitlines():
            if line.startswith("| ") and not line.startswith("| config") and not line.startswith("|---"):
                existing[_row_key(line)] = line
    for line in rows.values():
        existing[_row_key(line)] = line
    jobs = sorted({job for _, job in existing})
    ordered = []
    for job in jobs:  # per job: its baseline first, then the systems
        keys = sorted((k for k in existing if k[1] == job), key=lambda k: (k[0] != bench_configs.BASELINE, k[0]))
        ordered += [existing[k] for k in keys]
    block = "\n".join([start, HEADER] + ordered + [end])
    if start in text:
        text = text.split(start, 1)[0] + block + text.split(end, 1)[1]
    else:
        text = text + ("\n" if text else "") + block + "\n"
    jobs_start = "<!-- bench:jobs -->"
    if jobs_start in text and job_note not in text:
        text = text.replace(jobs_start, jobs_start + "\n" + job_note)
    path.write_text(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT / "data" / "bible_es_en" / "spm8000",
                    help="segmented folder with bin/ and segment.json (fairseq_ext.tools.corpora prepare)")
    ap.add_argument("--baseline", default=bench_configs.BASELINE,
                    help="configuration the others are compared with (default %(default)s)")
    ap.add_argument("--configs", default=bench_configs.BASELINE,
                    help=f"comma-separated names from configs.py (known: {', '.join(bench_configs.CONFIGS)})")
    ap.add_argument("--budget-min", type=float, default=15.0, help="training wall-clock budget per config")
    ap.add_argument("--out", type=Path, default=None, help="job folder (default runs/bench/<timestamp>)")
    ap.add_argument("--table", type=Path, default=None, help="merge the rows into this Markdown file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--src", default="es")
    ap.add_argument("--tgt", default="en")
    ap.add_argument("--ref2", default="kjv", help="second reference suffix in the raw folder ('' for none)")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--force", action="store_true", help="re-run configurations that have a result")
    args = ap.parse_args(argv)
    bench_configs.BASELINE = args.baseline  # ratios, bootstrap and table order follow it
    if not (args.data / "bin").is_dir():
        raise SystemExit(f"error: {args.data / 'bin'} missing; run: python -m fairseq_ext.tools.corpora prepare")
    names = [n for n in args.configs.split(",") if n]
    for n in names:
        bench_configs.get(n)
    if bench_configs.BASELINE not in names:
        names.insert(0, bench_configs.BASELINE)  # ratios need the baseline of the same job
    job = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    out = args.out or ROOT / "runs" / "bench" / job
    out.mkdir(parents=True, exist_ok=True)
    results = {n: run_config(n, args, out) for n in names}
    base = results[bench_configs.BASELINE]
    others = {n: r["hyp_file"] for n, r in results.items() if n != bench_configs.BASELINE}
    if others:
        raw = raw_folder(args.data)
        cmp = ev.compare_files(base["hyp_file"], list(others.values()), raw / f"test.{args.tgt}",
                               n=args.n_bootstrap)
        print(ev.format_comparison(cmp))
        by_path = {s["name"]: s for s in cmp["systems"]}
        bleu_m, chrf_m = cmp["metrics"]
        for n, path in others.items():
            s = by_path[str(path)]
            results[n]["significance"] = {"bleu_p": s[bleu_m]["p_value"], "chrf_p": s[chrf_m]["p_value"]}
    (out / "summary.json").write_text(json.dumps(results, indent=1, default=str))
    rows = table_rows(results, out.name, args)
    print(HEADER)
    for r in rows.values():
        print(r)
    if args.table:
        note = (f"- job `{out.name}`: {', '.join(names)}; {args.budget_min:g} min training each, "
                f"{args.threads} threads, {platform.processor() or platform.machine()}, data `{args.data}`")
        merge_table(args.table, rows, note)
        log(f"rows merged into {args.table}")


if __name__ == "__main__":
    main()

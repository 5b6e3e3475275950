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
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
from fairseq_ext.tools.analysis.diagnostics import (
    AMB, AMB_TGT, BUCKETS, DEFAULTS, decoded_scores, generate, read_hypotheses,
)
from fairseq_ext.tools.evaluation import bench_configs

TRANSFORMER = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64",
               "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
               "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0.1"]
RNN = ["--encoder-embed-dim", "64", "--encoder-hidden-size", "64", "--decoder-layers", "2",
       "--decoder-variant", "plain", "--dropout", "0.1"]
SHAPES = {"transformer": TRANSFORMER, "rnn": RNN}  # every system of a family has its shape
LR = {"transformer": (2e-3, 1e-3), "rnn": (5e-3, 2e-3)}  # Adam peak learning rate of stage 1, stage 2
FAMILIES = {"transformer": ["--arch", "transformer_maruf_base_bench"], "rnn": ["--arch", "rnnsearch_tiny"]}  # stage 1
GOLD = ["--doc-target-context", "gold"]
ALL = list(BUCKETS)

# task -> [(system, family, stage-2 flags (arch + task flags, also used to score), resolvable buckets, note)]
# "sentence": the family's stage-1 model trained on (no flags). Resolvable = what its context can decide.
SYSTEMS = {
    "antecedent": [
        ("sentence", "transformer", None, [], "transformer_maruf_base_bench"),
        ("concat", "transformer", ["--arch", "transformer_maruf_base_bench", "--doc-concat-prev", "1"], ["1"],
         "2-to-1 concatenation (previous sentence + <brk>)"),
        ("hatt_enc", "transformer", ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench", "--doc-context-mode",
                                     "offline"], ["1", "2", "3"], "H-attention sparse-soft, encoder, offline"),
        ("zhang_enc", "transformer", ["--arch", "transformer_zhang2018_bench", "--ctx-integration", "encoder",
                                      "--doc-context-mode", "online"], ["1", "2"],
         "Zhang et al. 2018 (2 previous sentences, sentence parameters frozen)"),
        ("rnn_sentence", "rnn", None, [], "rnnsearch (2-layer plain GRU decoder)"),
        ("m2c_src", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2c", "--doc-memories", "src"],
         ["1", "2", "3"], "memory network, source memory, Memory-to-Context"),
        ("m2o_src", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2o", "--doc-memories", "src"],
         ["1", "2", "3"], "memory network, source memory, Memory-to-Output"),
        ("jean2017", "rnn", ["--arch", "docmem_tiny", "--doc-context", "jean2017"], ["1"],
         "Jean et al. 2017 (attention over the previous source sentence)"),
    ],
    "cataphor": [
        ("sentence", "transformer", None, [], "transformer_maruf_base_bench"),
        ("hatt_enc_off", "transformer", ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench", "--doc-context-mode",
                                         "offline"], ["1", "2", "3"], "H-attention, encoder, offline"),
        ("hatt_enc_on", "transformer", ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench", "--doc-context-mode",
                                        "online"], [], "H-attention, encoder, online (must stay at the bound)"),
        ("rnn_sentence", "rnn", None, [], "rnnsearch"),
        ("m2o_src_off", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2o", "--doc-memories", "src",
                                "--doc-context-mode", "offline"], ["1", "2", "3"],
         "memory network, source memory, M2O, offline"),
        ("m2o_src_on", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2o", "--doc-memories", "src",
                               "--doc-context-mode", "online"], [],
         "memory network, source memory, M2O, online (must stay at the bound)"),
    ],
    "consistency": [
        ("sentence", "transformer", None, [], "transformer_maruf_base_bench"),
        ("hatt_enc", "transformer", ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench"], [],
         "H-attention, encoder (source context: must stay at the bound)"),
        ("hatt_dec", "transformer", ["--arch", "transformer_selattn_dec_hier_sparsesoft_bench", *GOLD], ALL,
         "H-attention sparse-soft, decoder, gold target context"),
        ("rnn_sentence", "rnn", None, [], "rnnsearch"),
        ("m2c_tgt", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2c", "--doc-memories", "tgt",
                            *GOLD], ALL, "memory network, target memory, M2C, gold target context"),
        ("m2o_tgt", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2o", "--doc-memories", "tgt",
                            *GOLD], ALL, "memory network, target memory, M2O, gold target context"),
    ],
}
BCD = {"hatt_dec": "sentence", "m2c_tgt": "rnn_sentence", "m2o_tgt": "rnn_sentence"}  # doc model -> pass 0
TASK_FLAGS = ["--task", "doc_translation", "--source-lang", "src", "--target-lang", "tgt"]
RUN = ["--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple", "--log-interval", "100",
       "--no-epoch-checkpoints", "--disable-validation"]
START, END = "<!-- diagnostics:table -->", "<!-- /diagnostics:table -->"


def env(threads: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")


def run(cmd, log_path: Path, threads: int) -> float:
    """Run a command with its output in ``log_path``; returns the wall seconds; exits on failure."""
    t0 = time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write("+ " + " ".join(map(str, cmd)) + "\n")
        log.flush()
        p = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env(threads), stdout=log, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = Path(log_path).read_text(encoding="utf-8")[-3000:]
        raise SystemExit(f"error: command failed ({p.returncode}), see {log_path}:\n{tail}")
    return time.time() - t0


def optim(lr: float) -> list:
    return ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", str(lr), "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", "100", "--clip-norm", "1.0", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--max-tokens", "1024"]


def train(data: Path, save: Path, flags: list, updates: int, lr: float, threads: int, warm=None,
          curve_every: int = 0, marker: str = "train.done") -> float:
    """fairseq-train into ``save`` up to ``updates`` (skipped when ``marker`` exists). A later call with more
    updates and another marker resumes from ``checkpoint_last.pt`` (optimizer and schedule included)."""
    ckpt = save / "checkpoint_last.pt"
    done = save / marker
    if done.exists() and ckpt.exists():
        return float(done.read_text() or 0)
    save.mkdir(parents=True, exist_ok=True)
    cmd = [BIN / "fairseq-train", data, "--user-dir", ROOT / "fairseq_ext", *TASK_FLAGS, *flags, *optim(lr), *RUN,
           "--max-update", str(updates), "--save-dir", save]
    if curve_every:
        cmd += ["--save-interval-updates", str(curve_every), "--keep-interval-updates", "-1"]
    if warm is not None:
        cmd += ["--finetune-from-model", warm]
    else:
        cmd += ["--doc-batching", "size"]
    secs = run(cmd, save / "train.log", threads)
    done.write_text(f"{secs:.1f}")
    return secs


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
    gen = out / "generate-test.txt"
    if not gen.exists():
        out.mkdir(parents=True, exist_ok=True)
        cmd = [BIN / "fairseq-generate", data, "--user-dir", ROOT / "fairseq_ext", *TASK_FLAGS, *flags,
               "--path", paths, "--beam", "1", *bench_configs.DECODE_LEN, "--batch-size", "64",
               "--cpu", "--results-path", out]
        run(cmd, out / "generate.log", threads)
    return gen


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
    systems = [s for s in SYSTEMS[task] if not args.systems or s[0] in args.systems]
    stage1 = {}
    for fam in sorted({s[1] for s in systems}):
        save = out / f"stage1_{fam}"
        secs = train(data, save, FAMILIES[fam] + SHAPES[fam], args.stage1_updates, LR[fam][0], args.threads)
        stage1[fam] = (save / "checkpoint_last.pt", secs)
    rows = []
    for name, fam, flags, resolvable, note in systems:
        save = out / name
        result = save / "result.json"
        if result.exists() and not args.force:
            row = json.loads(result.read_text())
            if task == "consistency" and name in BCD and "decoded_cue" not in row:
                row["decoded_cue"] = decoded_cue(data, out, name, fam, stage1[fam][0], args)
                result.write_text(json.dumps(row, indent=1))
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
        for c in save.glob("checkpoint_*_*.pt"):
            upd = int(c.stem.rsplit("_", 1)[1])
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
        result.write_text(json.dumps(row, indent=1))
        rows.append(row)
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


def cue_synonym(src_words: list) -> str:
    """The synonym of the cue corpus: set by the sentence itself (the parity of its first filler word), so it is
    independent of the other sentences of the document."""
    first = next(w for w in src_words if w.lstrip("\u2581") != AMB)
    return AMB_TGT["f" if int(first.lstrip("\u2581")[1:]) % 2 == 0 else "m"]


def cue_corpus(data: Path, out: Path) -> Path:
    """The consistency training set with every sentence's synonym re-drawn by :func:`cue_synonym`, binarized with
    the corpus's dictionaries (so its models decode the real test set): a sentence model trained on it is a
    pass 0 that is inconsistent by construction (a document's occurrences agree by chance only)."""
    bin_dir = out / "data" / "bin"
    if (bin_dir / "train.ids").exists():
        return bin_dir
    word = data.parent  # the segmented word-level files beside bin/
    raw = out / "data" / "word"
    raw.mkdir(parents=True, exist_ok=True)
    src = (word / "train.src").read_text(encoding="utf-8").splitlines()
    tgt = (word / "train.tgt").read_text(encoding="utf-8").splitlines()
    synonyms = {"\u2581" + w for w in AMB_TGT.values()}
    new = []
    for s_line, t_line in zip(src, tgt):
        s_words = s_line.split()
        if "\u2581" + AMB in s_words:
            cue = "\u2581" + cue_synonym(s_words)
            t_line = " ".join(cue if w in synonyms else w for w in t_line.split())
        new.append(t_line)
    (raw / "train.src").write_text("\n".join(src) + "\n", encoding="utf-8")
    (raw / "train.tgt").write_text("\n".join(new) + "\n", encoding="utf-8")
    tmp = out / "data" / "bin.tmp"
    run([BIN / "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", raw / "train",
         "--validpref", word / "valid", "--srcdict", data / "dict.src.txt", "--tgtdict", data / "dict.tgt.txt",
         "--destdir", tmp, "--workers", "1"], out / "preprocess.log", 1)
    for split in ("train", "valid"):
        (tmp / f"{split}.ids").write_text((data / f"{split}.ids").read_text(encoding="utf-8"), encoding="utf-8")
    tmp.rename(bin_dir)
    return bin_dir


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
def cpu_name() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
        flags = re.search(r"flags\s*:\s*(.*)", text).group(1).split()
        isa = "AMX" if "amx_tile" in flags else "AVX512-BF16" if "avx512_bf16" in flags else \
            "AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
        return f"{model} ({isa})" if isa else model
    except (OSError, AttributeError):
        return platform.processor() or "CPU"


def fmt(x) -> str:
    return "–" if x is None else f"{x:.3f}"


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
        return "pass"
    later = r.get("passes_at")
    return f"**FAIL** (passes at {later} updates)" if later and later > r["stage2_updates"] else "**FAIL**"


def table(rows: list, threads: int) -> str:
    cpu = cpu_name()
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
    lines += ["", f"CPU: {cpu}, {threads} torch thread(s) per run."]
    return "\n".join(lines)


def write_table(path: Path, text: str, start: str = START, end: str = END,
                title: str = "Diagnostics: document context (recipes/bench/diagnostics.py)") -> None:
    """Replace the table between the markers ``start``/``end`` of ``path``; without them, append a section ``title``
    holding it (the family runners share this)."""
    doc = path.read_text(encoding="utf-8")
    block = f"{start}\n{text}\n{end}"
    if start in doc and end in doc:
        doc = doc[:doc.index(start)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + f"\n\n## {title}\n\n" + block + "\n"
    path.write_text(doc, encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    ap.add_argument("--systems", nargs="+", help="only these systems (default: all of each task; name the baselines "
                                                 "sentence / rnn_sentence too to have them)")
    ap.add_argument("--out", default="runs/diagnostics")
    ap.add_argument("--seed", type=int, default=1)
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
    ap.add_argument("--pass-at", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--table", default=str(ROOT / "recipes" / "bench" / "RESULTS.md"),
                    help="the RESULTS.md whose Diagnostics table is rewritten ('' = print only)")
    ap.add_argument("--force", action="store_true", help="score again and rewrite the results (training is kept)")
    args = ap.parse_args(argv)
    for task in args.tasks:
        run_task(task, args)
    rows = [json.loads(p.read_text()) for task in SYSTEMS for name, *_ in SYSTEMS[task]
            for p in [Path(args.out) / task / name / "result.json"] if p.exists()]  # every task run so far
    text = table(rows, args.threads)
    print(text)
    if args.table:
        write_table(Path(args.table), text)
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""CPU inference speed and quality of one checkpoint: fairseq-generate float32, ``--cpu-bf16``, the
plugin's fast path ``--quantize int8``, and CTranslate2 float32 / int8 (``fairseq-ext-export``), measured
*interleaved* on one thread.

    .venv/bin/python recipes/bench/cpu_inference.py --checkpoint runs/gu_ch2/transformer_30/checkpoint_best.pt \\
        --data data/bible_es_en/spm8000 --rounds 3 --out runs/cpu_inference/job1 [--limit 256] [--profile]

* **Throughput** (beam 5, batch 64, the length limit ``DECODE_LEN``: the bench's ``GENERATE``): every
  round runs each system once, in an order rotated by one per round (:mod:`fairseq_ext.tools.evaluation.interleaved`);
  a fairseq system is one ``fairseq-generate`` process timed by its own "Translated N sentences ... in S s"
  line (decoding only; ``interleaved.time_generate``), a CTranslate2 system is ``Translator.translate_batch`` in
  this process (``intra_threads=1``, ``max_batch_size=64``, the same source pieces read from the
  binarized test split, ``max_decoding_length`` = 1.2 x the longest source + 10), timed around the call
  (model loading excluded for both).  The table gives sentences/s (median over rounds), the time ratio to
  fairseq float32 (median of per-round ratios, ``interleaved.summarise``) and the throughput ratio to
  CTranslate2 int8 (median of per-round ratios).
* **Latency**: ms per sentence at batch 1 (beam 5) on the first ``--latency-sentences`` test sentences,
  every system in this process (fairseq: ``task.inference_step`` on one-sentence batches of a model loaded
  and prepared exactly as fairseq-generate does it, so ``--quantize int8`` goes through the same hook),
  interleaved per round the same way.
* **Quality**: sacreBLEU (``fairseq_ext.tools.evaluation.score``) of each system's first-round output against the raw
  reference, and paired bootstrap (sacreBLEU's, 1,000 resamples) of every system against fairseq float32.
* ``--profile``: cProfile of one fast-path decode of two batches -> ``profile_fast.txt``: where the time of
  ``SequenceGenerator._generate`` goes (the network against the beam search around it: cache reordering,
  candidate selection, its Python loop; :func:`profile_breakdown`), then the top 30 by own time; the raw
  profile in ``profile_fast.prof``.

``--limit N`` decodes the first N test sentences only (a binarized subset is written under ``--out``);
``uptime`` load averages before and after are recorded: on the shared 2-core machine only the ratios
measured within one interleaved run mean anything.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

from fairseq_ext.tools.evaluation import bench_configs, score as ev
from fairseq_ext.tools.hypotheses import align_to_references, load_hypotheses
from fairseq_ext.tools.evaluation.interleaved import rotated, summarise, time_generate
from fairseq_ext.tools.evaluation.runs import PACKAGE, logger, post_process, raw_folder

FAIRSEQ_SYSTEMS = {"fairseq_fp32": [], "fairseq_bf16": ["--cpu-bf16"], "fast_int8": ["--quantize", "int8"]}
CT2_SYSTEMS = {"ct2_fp32": "float32", "ct2_int8": "int8"}
BASE, TARGET = "fairseq_fp32", "ct2_int8"


log = logger("cpu_inference")


def loadavg() -> list:
    return [round(x, 2) for x in os.getloadavg()]


# ----------------------------------------------------------------------------------------- data
def subset_bin(bin_dir: Path, src: str, tgt: str, n: int, out: Path) -> Path:
    """A copy of ``bin_dir`` whose test split holds the first ``n`` sentences (dictionaries shared)."""
    import shutil

    from fairseq.data import data_utils, indexed_dataset

    out.mkdir(parents=True, exist_ok=True)
    for lang in (src, tgt):
        shutil.copyfile(bin_dir / f"dict.{lang}.txt", out / f"dict.{lang}.txt")
        prefix = f"test.{src}-{tgt}.{lang}"
        ds = data_utils.load_indexed_dataset(str(bin_dir / prefix), None)
        builder = indexed_dataset.make_builder(str(out / f"{prefix}.bin"), impl="mmap",
                                               vocab_size=sum(1 for _ in open(bin_dir / f"dict.{lang}.txt")) + 4)
        for i in range(min(n, len(ds))):
            builder.add_item(ds[i])
        builder.finalize(str(out / f"{prefix}.idx"))
    return out


def test_pieces(bin_dir: Path, src: str, tgt: str) -> tuple[list, list]:
    """Source pieces (no EOS) and the target dictionary's symbols of the test split, by sentence id."""
    from fairseq.data import Dictionary, data_utils

    sd = Dictionary.load(str(bin_dir / f"dict.{src}.txt"))
    ds = data_utils.load_indexed_dataset(str(bin_dir / f"test.{src}-{tgt}.{src}"), None)
    return [[sd[t] for t in ds[i].tolist()[:-1]] for i in range(len(ds))], sd


def detok(pieces: list, kind: str) -> str:
    from fairseq.data.data_utils import post_process

    return post_process(" ".join(pieces), kind)


# ----------------------------------------------------------------------------------- throughput
def generate_args(ckpt: Path, bin_dir: Path, post: str, flags: list) -> list:
    return [str(bin_dir), "--user-dir", str(PACKAGE), "--task", "translation_ext",
            "--path", str(ckpt), "--gen-subset", "test", "--cpu", *bench_configs.GENERATE,
            "--post-process", post, *flags]


def run_ct2(translator, pieces: list, max_len: int) -> tuple[dict, list]:
    t0 = time.perf_counter()
    res = translator.translate_batch(pieces, beam_size=5, max_batch_size=64, batch_type="examples",
                                     max_decoding_length=max_len, length_penalty=1.0)
    secs = time.perf_counter() - t0
    hyps = [r.hypotheses[0] for r in res]
    return {"sentences": len(hyps), "tokens": sum(len(h) + 1 for h in hyps), "seconds": round(secs, 2)}, hyps


# -------------------------------------------------------------------------------------- latency
def fairseq_system(ckpt: Path, bin_dir: Path, flags: list):
    """``(task, models, generator)`` loaded and prepared as fairseq-generate does it (batch 1)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_ext.modules.checkpoint import load_ensemble

    argv = generate_args(ckpt, bin_dir, "sentencepiece", flags)
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_generation_parser(), argv))
    task = tasks.setup_task(cfg.task)
    models, _, _ = load_ensemble([str(ckpt)], task=task, generation=cfg)  # --quantize int8 applies, as in generate
    task.load_dataset("test")
    return task, models, task.build_generator(models, cfg.generation)


def time_fairseq_batch1(system, ids: list) -> float:
    task, models, gen = system
    ds = task.dataset("test")
    t0 = time.perf_counter()
    for i in ids:
        task.inference_step(gen, models, ds.collater([ds[i]]))
    return 1000 * (time.perf_counter() - t0) / len(ids)


def time_ct2_batch1(translator, pieces: list, ids: list) -> float:
    t0 = time.perf_counter()
    for i in ids:
        translator.translate_batch([pieces[i]], beam_size=5, max_decoding_length=int(1.2 * len(pieces[i]) + 10))
    return 1000 * (time.perf_counter() - t0) / len(ids)


def profile_fast(ckpt: Path, bin_dir: Path, out: Path) -> None:
    task, models, gen = fairseq_system(ckpt, bin_dir, FAIRSEQ_SYSTEMS["fast_int8"])
    ds = task.dataset("test")
    itr = task.get_batch_iterator(dataset=ds, max_sentences=64).next_epoch_itr(shuffle=False)
    batches = [b for _, b in zip(range(2), itr)]
    task.inference_step(gen, models, batches[0])  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    for b in batches:
        task.inference_step(gen, models, b)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    buf.write(profile_breakdown(stats) + "\n\n")
    stats.sort_stats("tottime").print_stats(30)
    out.write_text(buf.getvalue(), encoding="utf-8")
    stats.dump_stats(str(out.with_suffix(".prof")))


#: (share, what): the parts of one fairseq decode, each the cumulative time of fairseq functions -- (file end,
#: function name) -- or the own time of built-ins whose name contains the given text
PROFILE_PARTS = [
    ("network: encoder", [("sequence_generator.py", "forward_encoder")]),
    ("network: decoder steps (incl. log_softmax of the logits)", [("sequence_generator.py", "forward_decoder")]),
    ("beam search: cache reordering (index_select of every layer's keys/values)",
     [("sequence_generator.py", "reorder_incremental_state"), ("sequence_generator.py", "reorder_encoder_out")]),
    ("beam search: candidate selection (BeamSearch.step: topk)", [("search.py", "step")]),
    ("beam search: finished hypotheses (finalize_hypos)", [("sequence_generator.py", "finalize_hypos")]),
]
BUILTINS = [("int8 kernels (torch.ops.quantized, cumulative)", None),
            ("float linear kernels", "torch._C._nn.linear"), ("bmm (attention)", "torch.bmm"),
            ("softmax / log_softmax", "softmax"), ("topk", "topk"), ("index_select (cache reordering)", "index_select"),
            ("cat (cache growth)", "torch.cat")]


def profile_breakdown(stats: "pstats.Stats") -> str:
    """Where one decode's time goes: the network (encoder, decoder steps) against fairseq's beam search
    around it (cache reordering, candidate selection, finished hypotheses and the rest of
    ``SequenceGenerator._generate``: its Python loop and the tensor bookkeeping it runs itself)."""
    raw = stats.stats  # (file, line, name) -> (calls, primitive calls, own time, cumulative time, callers)

    def cumulative(file_end, name):
        return sum(v[3] for (f, _, n), v in raw.items() if f.endswith(file_end) and n == name)

    total = cumulative("sequence_generator.py", "_generate")
    lines = [f"Breakdown of {total:.2f} s in SequenceGenerator._generate (cProfile; its overhead inflates the Python "
             f"parts):", "", "| part | s | share |", "|---|---|---|"]
    accounted = 0.0
    for what, keys in PROFILE_PARTS:
        t = sum(cumulative(*k) for k in keys)
        accounted += t
        lines.append(f"| {what} | {t:.2f} | {t / total:.1%} |")
    rest = total - accounted
    lines.append(f"| beam search: the rest of _generate (Python loop, masks, scores, index bookkeeping) | {rest:.2f} | "
                 f"{rest / total:.1%} |")
    for what, text in BUILTINS:  # the kernels, wherever called
        t = (cumulative("_ops.py", "__call__") if text is None
             else sum(v[2] for (f, _, n), v in raw.items() if f == "~" and text in n))
        lines.append(f"| (all parts) {what} | {t:.2f} | {t / total:.1%} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=Path("data/bible_es_en/spm8000"), help="segmented folder (with bin/)")
    ap.add_argument("--src", default="es")
    ap.add_argument("--tgt", default="en")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-sentences", type=int, default=100, help="0: no batch-1 latency")
    ap.add_argument("--latency-rounds", type=int, default=None, help="default: --rounds")
    ap.add_argument("--limit", type=int, default=0, help="decode the first N test sentences only (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--systems", default=",".join([*FAIRSEQ_SYSTEMS, *CT2_SYSTEMS]))
    ap.add_argument("--once", default="fairseq_bf16",
                    help="systems timed in the first round only (emulated bf16 is ~4x slower than float32 "
                         "on a CPU without native bf16; its ratio is then the first round's)")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    import torch

    torch.set_num_threads(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import ctranslate2

    import fairseq_ext  # noqa: F401
    from fairseq_ext.tasks.translation_ext import native_cpu_bf16
    from fairseq_ext.tools.export.export import export

    names = [s for s in a.systems.split(",") if s]
    unknown = [s for s in names if s not in FAIRSEQ_SYSTEMS and s not in CT2_SYSTEMS]
    if unknown or BASE not in names:
        raise SystemExit(f"error: --systems: unknown {unknown} or no {BASE}")
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    load_before = loadavg()
    bin_dir = a.data / "bin"
    if a.limit:
        bin_dir = subset_bin(bin_dir, a.src, a.tgt, a.limit, out / f"bin_first{a.limit}")
    post = post_process(a.data)
    refs = ev.load_references([raw_folder(a.data) / f"test.{a.tgt}"])
    pieces, _ = test_pieces(bin_dir, a.src, a.tgt)
    refs = [r[: len(pieces)] for r in refs]
    max_len = int(1.2 * max(len(p) + 1 for p in pieces) + 10)
    log(f"{len(pieces)} test sentences; systems {', '.join(names)}; load {load_before}")

    translators = {}
    for name in names:
        if name in CT2_SYSTEMS:
            d = out / name
            if not (d / "model.bin").exists():
                export(str(a.checkpoint), str(d), data=str(a.data / "bin"), quantization=CT2_SYSTEMS[name], force=True)
            translators[name] = ctranslate2.Translator(str(d), device="cpu", intra_threads=a.threads, inter_threads=1)

    once = {s for s in a.once.split(",") if s}
    runs = {n: [] for n in names}
    hyps: dict = {}
    for r in range(a.rounds):
        for name in rotated(names, r):
            if r > 0 and name in once:
                continue
            if name in FAIRSEQ_SYSTEMS:
                save = out / f"{name}.generate.out" if r == 0 else None
                res = time_generate(generate_args(a.checkpoint, bin_dir, post, FAIRSEQ_SYSTEMS[name]), a.threads, save)
                if r == 0:
                    hyps[name] = align_to_references(load_hypotheses(save, field="D"), len(pieces), source=str(save))
            else:
                res, out_pieces = run_ct2(translators[name], pieces, max_len)
                if r == 0:
                    hyps[name] = [detok(h, post) for h in out_pieces]
                    (out / f"{name}.hyp").write_text("\n".join(hyps[name]) + "\n", encoding="utf-8")
            runs[name].append(res)
            log(f"round {r + 1}/{a.rounds} {name}: {res['seconds']:.1f}s, "
                f"{res['sentences'] / res['seconds']:.1f} sent/s")
        counts = {n: runs[n][-1]["sentences"] for n in names if runs[n]}
        if len(set(counts.values())) != 1:
            raise SystemExit(f"error: the systems translated different numbers of sentences: {counts}")

    summary = summarise(names, runs)
    for n in names:
        summary[n]["sent_per_s_median"] = round(statistics.median(x["sentences"] / x["seconds"] for x in runs[n]), 2)
        if TARGET in names:
            summary[n]["throughput_x_ct2_int8"] = round(statistics.median(
                t["seconds"] / x["seconds"] for x, t in zip(runs[n], runs[TARGET])), 3)

    latency = {n: [] for n in names}
    if a.latency_sentences:
        ids = list(range(min(a.latency_sentences, len(pieces))))
        systems = {n: fairseq_system(a.checkpoint, bin_dir, FAIRSEQ_SYSTEMS[n]) for n in names if n in FAIRSEQ_SYSTEMS}
        for n in names:  # warm-up (first calls allocate)
            _ = time_fairseq_batch1(systems[n], ids[:3]) if n in systems else time_ct2_batch1(translators[n], pieces, ids[:3])
        for r in range(a.latency_rounds or a.rounds):
            for n in rotated(names, r):
                if r > 0 and n in once:
                    continue
                ms = time_fairseq_batch1(systems[n], ids) if n in systems else time_ct2_batch1(translators[n], pieces, ids)
                latency[n].append(round(ms, 2))
            log(f"latency round {r + 1}: " + ", ".join(f"{n} {latency[n][-1]:.0f} ms" for n in names if latency[n]))
        for n in names:
            summary[n]["ms_per_sentence_batch1"] = round(statistics.median(latency[n]), 1)
        del systems

    quality = {n: ev.score_corpus(hyps[n], refs) for n in names}
    boot = ev.paired_bootstrap(hyps[BASE], {n: hyps[n] for n in names if n != BASE}, refs,
                               n=a.n_bootstrap, baseline_name=BASE)
    pvals = {s["name"]: s["BLEU"] for s in boot["systems"]}
    for n in names:
        summary[n]["bleu"] = round(quality[n]["bleu"], 2)
        summary[n]["chrf"] = round(quality[n]["chrf"], 2)
        if n in pvals:
            summary[n]["bleu_delta"] = round(pvals[n]["delta"], 2)
            summary[n]["bleu_p"] = round(pvals[n]["p_value"], 4)

    if a.profile:
        profile_fast(a.checkpoint, bin_dir, out / "profile_fast.txt")
        log(f"profile of the fast path: {out / 'profile_fast.txt'}")

    load_after = loadavg()
    table = markdown(names, summary, a, len(pieces), load_before, load_after)
    result = {"checkpoint": str(a.checkpoint), "data": str(bin_dir), "sentences": len(pieces),
              "rounds": a.rounds, "threads": a.threads, "machine": platform.processor() or platform.machine(),
              "native_cpu_bf16": native_cpu_bf16(), "torch": torch.__version__,
              "ctranslate2": ctranslate2.__version__, "date": datetime.now().isoformat(timespec="minutes"),
              "load_before": load_before, "load_after": load_after, "runs": runs, "latency_ms": latency,
              "summary": summary, "bootstrap": boot,
              "bleu_signature": quality[BASE]["bleu_signature"]}
    (out / "cpu_inference.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    (out / "cpu_inference.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


def markdown(names, summary, a, n_sent, load_before, load_after) -> str:
    lines = [f"| system | sent/s (batch 64, beam 5) | time × {BASE} | × {TARGET} throughput | "
             f"ms/sent (batch 1) | BLEU | ΔBLEU vs {BASE} (p) |", "|---|---|---|---|---|---|---|"]
    for n in names:
        s = summary[n]
        delta = f"{s['bleu_delta']:+.2f} ({s['bleu_p']:.3f})" if "bleu_delta" in s else "—"
        lines.append(f"| {n} | {s['sent_per_s_median']} | {s['ratio_median']:.2f} ({s['ratio_min']:.2f}–{s['ratio_max']:.2f}) | "
                     f"{s.get('throughput_x_ct2_int8', float('nan')):.2f} | {s.get('ms_per_sentence_batch1', '—')} | "
                     f"{s['bleu']:.2f} | {delta} |")
    lines.append("")
    lines.append(f"{n_sent} test sentences, {a.rounds} interleaved rounds ({a.once or 'none'}: first round only), "
                 f"{a.threads} thread(s); batch-1 latency on "
                 f"the first {min(a.latency_sentences, n_sent)}; medians over rounds; paired bootstrap "
                 f"{a.n_bootstrap} resamples; load average before {load_before}, after {load_after}.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

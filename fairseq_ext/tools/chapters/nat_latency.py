#!/usr/bin/env python
"""Decoding latency of the autoregressive teacher vs the fertility NAT (Gu 2018 ch. 8, Table 8.2, Fig. 8.6).

    python -m fairseq_ext.tools.chapters.nat_latency --data runs/gu_ch8/kd --teacher T.pt --nat NAT.pt \\
        [--ft FT.pt] --systems ar_b4,ar_b1,nat,nat_ft,nat_ft_npd10,nat_ft_npd100 --batch-sizes 1 64 --out DIR \\
        [--hyp-dir DIR --post-process sentencepiece] [--b1-max-sentences N] [--threads 1] [--seed 1]
    ... --systems ct2_int8_b4,ct2_int8_b1,nat_ft,nat_ft_npd10 --reference ct2_int8_b4 [--ct2-dir DIR]
        # the NAT against the fastest autoregressive decoder (the teacher in CTranslate2)
    ... --ar2 DEEP_SHALLOW.pt --systems ar_b4,ar2_b4,ct2_int8_b4,ar2_ct2_int8_b4,nat_ft
        # also a second AR model (e.g. Kasai et al.'s 6+1 deep encoder / shallow decoder)

Systems (names parsed, any K / s):

* ``ar_bK``: the AR teacher, fairseq's beam search with beam K (K = 1 greedy), lenpen 1, max length 1.2·T' + 10;
* ``ct2_int8_bK`` / ``ct2_fp32_bK``: the teacher exported to CTranslate2 (``fairseq-ext-export``, the optional
  extra, once into ``--ct2-dir``) decoded by ``Translator.translate_batch`` with beam K, the same length limit and
  batch sizes: the fastest autoregressive decoder on a CPU (``--reference ct2_int8_b4`` restates the speed-ups);
* ``ar2_bK`` / ``ar2_ct2_int8_bK`` / ``ar2_ct2_fp32_bK``: the same for a second autoregressive model (``--ar2``,
  same dictionaries: e.g. Kasai et al. 2021's deep-encoder / shallow-decoder variant of the teacher);
* ``nat`` / ``nat_ft``: the NAT / the fine-tuned NAT with argmax fertilities (Eq. 8.5); suffix ``_avg`` for
  average fertilities (Eq. 8.6), ``_npdS`` for noisy parallel decoding with S sampled fertility sequences
  rescored by the teacher (Eq. 8.7), ``_epdK`` for exact parallel decoding with the K most probable
  fertility sequences rescored by the teacher (Eq. 8.8; optional, not in the default ``--systems``).

What is timed (thesis §8.5: "time to decode one sentence without minibatching, averaged over the test set"): one
``generator.generate`` call per batch (encoder, fertilities, decoder and, for NPD/EPD, the teacher's rescoring;
for the AR teacher the whole beam search), batches collated before the clock starts; ``torch.no_grad``, fp32,
``--threads`` intra-op threads, a few untimed warm-up batches, NPD reseeded per system (``--seed``).

* **batch 1**: every sentence alone, in test order (``--b1-max-sentences N``: a seeded random subset of N,
  the same for every system); per-sentence (id, source length, output length, ms) are kept for the plot;
* **batch B > 1**: the test set sorted by source length in batches of B, as ms per sentence; NPD/EPD's B·s
  (B·K) candidates are split into sub-batches of at most ``--max-candidate-tokens`` candidate tokens.

Outputs in ``--out``: ``latency.json`` (with per-sentence rows), ``latency.md`` (ms/sentence and speed-up vs
``--reference`` (default ar_b4, the thesis' 1.00×) and vs ar_b1 at every batch size) and
``latency_vs_length.png`` (Fig. 8.6: batch-1 latency vs source length, every sentence and the mean per length
bin).  With ``--hyp-dir``, the translations of the largest batch size are written as ``{system}.out`` in
fairseq-generate's format (``--post-process`` removed), for sacreBLEU.
"""
import argparse
import json
import math
import os
import re
import sys
import time
from argparse import Namespace
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

from fairseq_ext.tools.common import cpu_name
from fairseq_ext.tools.evaluation import bench_configs
from fairseq_ext.tools.evaluation.runs import fmt, logger

SYSTEM_RE = re.compile(r"^(?:(?P<ar2>ar2_)?(?:ar_b(?P<beam>\d+)|b(?P<beam2>\d+)|ct2_(?P<ct2>int8|fp32)_b(?P<ct2beam>\d+))"
                       r"|nat(?P<ft>_ft)?(?:_(?P<mode>avg|npd(?P<s>\d+)|epd(?P<k>\d+)))?)$")
CT2_COMPUTE = {"int8": "int8", "fp32": "float32"}


log = logger("latency")


# ------------------------------------------------------------------------------------------- systems
def parse_system(name: str) -> Dict:
    m = SYSTEM_RE.match(name)
    # the teacher's fairseq systems are ar_bK, the second AR model's ar2_bK (never ar2_ar_bK), the teacher's
    # CTranslate2 systems ct2_*, the second model's ar2_ct2_*
    if not m or (m.group("ar2") and m.group("beam")) or (not m.group("ar2") and m.group("beam2")):
        raise ValueError(f"unknown system {name!r}: expected ar_bK, ct2_int8_bK, ct2_fp32_bK, ar2_bK, "
                         f"ar2_ct2_int8_bK, ar2_ct2_fp32_bK, nat[_ft][_avg|_npdS|_epdK]")
    ckpt, who = ("ar2", "second autoregressive model") if m.group("ar2") else ("teacher", "autoregressive teacher")
    if m.group("ct2"):
        k = int(m.group("ct2beam"))
        if k < 1:
            raise ValueError(f"{name}: beam must be >= 1")
        return {"name": name, "kind": "ct2", "beam": k, "ckpt": ckpt, "quantization": CT2_COMPUTE[m.group("ct2")],
                "desc": f"{who} in CTranslate2 {m.group('ct2')} ({'greedy' if k == 1 else f'beam {k}'})"}
    if m.group("beam") or m.group("beam2"):
        k = int(m.group("beam") or m.group("beam2"))
        if k < 1:
            raise ValueError(f"{name}: beam must be >= 1")
        return {"name": name, "kind": "ar", "beam": k, "ckpt": ckpt,
                "desc": f"{who} ({'greedy' if k == 1 else f'beam {k}'})"}
    mode, s, k = m.group("mode"), m.group("s"), m.group("k")
    ckpt = "ft" if m.group("ft") else "nat"
    desc = "NAT" + (" +FT" if ckpt == "ft" else "")
    sys_ = {"name": name, "kind": "nat", "ckpt": ckpt, "decoding": "argmax", "npd": 0, "epd": 0}
    if mode == "avg":
        sys_["decoding"] = "average"
        desc += " (average fertility)"
    elif s:
        sys_["npd"] = int(s)
        if sys_["npd"] < 1:
            raise ValueError(f"{name}: NPD needs s >= 1")
        desc += f" +NPD s={s}"
    elif k:
        sys_["decoding"], sys_["epd"] = "epd", int(k)
        if sys_["epd"] < 1:
            raise ValueError(f"{name}: EPD needs K >= 1")
        desc += f" +EPD K={k}"
    else:
        desc += " (argmax fertility)"
    sys_["desc"] = desc
    return sys_


def load_models(data: str, teacher: Optional[str], nat: Optional[str], ft: Optional[str], need: set,
                ar2: Optional[str] = None):
    """({role: model}, task): models in eval mode on CPU; the task (for the test set) is the NAT's
    ``translation_fertility`` when a NAT is loaded, else the teacher's."""
    import fairseq_ext  # noqa: F401  (registers the plugin)
    from fairseq_ext.modules.checkpoint import load_ensemble

    paths = {"teacher": teacher, "nat": nat, "ft": ft, "ar2": ar2}
    models, task = {}, None
    for role in ("nat", "ft", "teacher", "ar2"):
        if role not in need:
            continue
        if not paths[role]:
            raise SystemExit(f"error: a system needs the {role} checkpoint (--{role})")
        # a NAT checkpoint may name --init-encoder-from / --teacher-path: harmless, the weights are its own
        ms, _cfg, t = load_ensemble([paths[role]], arg_overrides={"data": data}, frozen=True)
        models[role] = ms[0]
        if task is None:  # nat/ft first: their translation_fertility task batches the test set
            task = t
    return models, task


class CT2Generator:
    """fairseq's ``generate([model], sample)`` interface over a CTranslate2 ``Translator``: the batch's source
    ids become pieces, ``translate_batch`` decodes them with beam K and fairseq's length limit (1.2 x the
    batch's longest source + 10), the output pieces become target ids + EOS. The id <-> piece mapping is timed
    with the decode, as fairseq's own Python bookkeeping is."""

    def __init__(self, translator, beam: int, src_dict, tgt_dict):
        self.translator, self.beam, self.src_dict, self.tgt_dict = translator, beam, src_dict, tgt_dict

    def generate(self, models, sample: Dict, **kwargs) -> List[List[Dict]]:
        src = sample["net_input"]["src_tokens"]
        drop = {self.src_dict.pad(), self.src_dict.eos()}
        pieces = [[self.src_dict[t] for t in row if t not in drop] for row in src.tolist()]
        res = self.translator.translate_batch(pieces, beam_size=self.beam, max_batch_size=len(pieces),
                                              max_decoding_length=int(1.2 * src.size(1) + 10),
                                              length_penalty=1.0, return_scores=True)
        eos = self.tgt_dict.eos()
        return [[{"tokens": torch.tensor([self.tgt_dict.index(p) for p in r.hypotheses[0]] + [eos]),
                  "score": float(r.scores[0])}] for r in res]


def ct2_translators(systems: List[Dict], teacher: Optional[str], data: str, ct2_dir: Path, threads: int,
                    ar2: Optional[str] = None) -> Dict:
    """{(role, quantization): ctranslate2.Translator} for the ct2_* systems: the teacher (the second AR model)
    exported once per quantization into ``ct2_dir/<quantization>`` (``ct2_dir/ar2_<quantization>``), reused when
    its provenance names the same checkpoint and is newer than it (a retrained checkpoint at the same path is
    exported again)."""
    wanted = sorted({(s["ckpt"], s["quantization"]) for s in systems if s["kind"] == "ct2"})
    if not wanted:
        return {}
    try:
        import ctranslate2
    except ImportError:
        raise SystemExit("error: ct2_* systems need CTranslate2: pip install 'fairseq_ext[ctranslate2]'") from None
    from fairseq_ext.tools.export.export import export

    out = {}
    for role, q in wanted:
        ckpt = teacher if role == "teacher" else ar2
        if not ckpt:
            raise SystemExit(f"error: a ct2 system needs the {role} checkpoint (--{role})")
        d = ct2_dir / (q if role == "teacher" else f"{role}_{q}")
        rec = d / "fairseq_ext_export.json"
        same = (rec.exists() and json.loads(rec.read_text()).get("checkpoint") == os.path.abspath(ckpt)
                and rec.stat().st_mtime >= os.path.getmtime(ckpt))
        if not same:
            export(ckpt, str(d), data=data, quantization=q, force=True)
        out[role, q] = ctranslate2.Translator(str(d), device="cpu", compute_type=q, intra_threads=threads,
                                              inter_threads=1)
    return out


def build_generator(system: Dict, models: Dict, task, translators: Optional[Dict] = None):
    if system["kind"] == "ct2":
        return (CT2Generator(translators[system["ckpt"], system["quantization"]], system["beam"],
                             task.source_dictionary,
                             task.target_dictionary), None)
    if system["kind"] == "ar":
        gen_args = Namespace(beam=system["beam"], lenpen=1.0, **bench_configs.DECODE_LIMITS, min_len=1,
                             unkpen=0, sampling=False, nbest=1)
        return task.build_generator([models[system["ckpt"]]], gen_args), models[system["ckpt"]]
    from fairseq_ext.generators.nat_fertility import NATFertilityGenerator

    return NATFertilityGenerator(task.target_dictionary, fertility_decoding=system["decoding"],
                                 npd_samples=system["npd"], teacher=models["teacher"] if rescored(system) else None,
                                 npd_temperature=task.cfg.npd_temperature,
                                 epd_topk=system.get("epd") or task.cfg.epd_topk), models[system["ckpt"]]


def rescored(system: Dict) -> int:
    """Candidates per sentence that the teacher rescores: s (NPD), K (EPD), 0 otherwise."""
    return system.get("npd", 0) or system.get("epd", 0)


# ------------------------------------------------------------------------------------------- batches
def make_batches(ds, ids: List[int], batch_size: int, gpu: bool = False) -> List[Dict]:
    """Collated batches: batch 1 in the given order, larger batches sorted by source length."""
    if batch_size > 1:
        sizes = np.asarray(ds.src_sizes)
        ids = sorted(ids, key=lambda i: (int(sizes[i]), i))
    batches = [ds.collater([ds[i] for i in ids[k:k + batch_size]]) for k in range(0, len(ids), batch_size)]
    if gpu:
        from fairseq import utils

        batches = [utils.move_to_cuda(b) for b in batches]
    return batches


def npd_chunk(system: Dict, sample: Dict, max_candidate_tokens: int) -> int:
    """Sentences per sub-batch so that s · B_sub · 2T'max ≤ max_candidate_tokens (≥ 1); K for EPD."""
    n = rescored(system)
    if n <= 0:
        return sample["net_input"]["src_tokens"].size(0)
    tmax = int(sample["net_input"]["src_tokens"].size(1))
    return max(1, max_candidate_tokens // (n * 2 * max(tmax, 1)))


def sub_batches(sample: Dict, k: int) -> List[Dict]:
    B = sample["net_input"]["src_tokens"].size(0)
    if k >= B:
        return [sample]
    out = []
    for a in range(0, B, k):
        sl = slice(a, a + k)
        sub = {"id": sample["id"][sl], "nsentences": min(k, B - a),
               "net_input": {"src_tokens": sample["net_input"]["src_tokens"][sl],
                             "src_lengths": sample["net_input"]["src_lengths"][sl]}}
        for key in ("target", "fertility"):
            if sample.get(key) is not None:
                sub[key] = sample[key][sl]
        out.append(sub)
    return out


def _sync(gpu: bool) -> None:
    if gpu:
        torch.cuda.synchronize()


@torch.no_grad()
def decode_batches(gen, model, system: Dict, batches: List[Dict], max_candidate_tokens: int, warmup: int,
                   seed: int, gpu: bool = False):
    """(seconds per batch, {id: hypothesis dict}, largest sub-batch): every batch timed on its own
    (on a GPU, synchronised before the clock starts and before it stops)."""
    for sample in batches[:warmup]:  # untimed
        for sub in sub_batches(sample, npd_chunk(system, sample, max_candidate_tokens)):
            gen.generate([model], sub)
    torch.manual_seed(seed)
    times, hyps, chunk = [], {}, 0
    for sample in batches:
        k = npd_chunk(system, sample, max_candidate_tokens)
        subs = sub_batches(sample, k)
        chunk = max(chunk, min(k, sample["net_input"]["src_tokens"].size(0)))
        _sync(gpu)
        t0 = time.perf_counter()
        outs = [gen.generate([model], sub) for sub in subs]
        _sync(gpu)
        times.append(time.perf_counter() - t0)
        for sub, out in zip(subs, outs):
            for sid, h in zip(sub["id"].tolist(), out):
                hyps[sid] = h[0]
    return times, hyps, chunk


def write_hyps(path: Path, hyps: Dict, ds, tgt_dict, src_dict, post_process: Optional[str]) -> None:
    """fairseq-generate-style S-/H-/D- lines (ids in order)."""
    with open(path, "w", encoding="utf-8") as f:
        for sid in sorted(hyps):
            h = hyps[sid]
            src = src_dict.string(ds[sid]["source"], post_process)
            hyp = tgt_dict.string(h["tokens"].int().cpu(), post_process)
            score = h["score"]
            score = float(score.item() if torch.is_tensor(score) else score)
            f.write(f"S-{sid}\t{src}\nH-{sid}\t{score:.4f}\t{hyp}\nD-{sid}\t{score:.4f}\t{hyp}\n")


# ------------------------------------------------------------------------------------------- report
def _speedup(ref: Optional[float], x: Optional[float]) -> Optional[float]:
    return None if ref is None or not x else ref / x


def summarise(result: Dict, reference: str) -> None:
    """Adds speed-ups vs ``reference``, vs ar_b1 and vs every CTranslate2 system at every batch size."""
    systems = result["systems"]
    for bs in result["batch_sizes"]:
        key = f"b{bs}"
        for name, s in systems.items():
            if key not in s:
                continue
            for ref in dict.fromkeys([reference, "ar_b1", *(n for n in systems if "ct2_" in n)]):
                if ref in systems and key in systems[ref]:
                    s[key][f"speedup_vs_{ref}"] = _speedup(systems[ref][key]["ms_per_sentence"],
                                                          s[key]["ms_per_sentence"])




def markdown(result: Dict, reference: str) -> str:
    bss = result["batch_sizes"]
    head = "| system |" + "".join(f" ms/sent b={b} | ×{reference} b={b} | ×ar_b1 b={b} |" for b in bss)
    sep = "|---|" + "---|---|---|" * len(bss)
    rows = [head, sep]
    for name, s in result["systems"].items():
        row = f"| {name} |"
        for b in bss:
            r = s.get(f"b{b}", {})
            row += (f" {fmt(r.get('ms_per_sentence'), '.2f')} | {fmt(r.get(f'speedup_vs_{reference}'), '.2f')} |"
                    f" {fmt(r.get('speedup_vs_ar_b1'), '.2f')} |")
        rows.append(row)
    note = (f"\nMeasured {result['date']} on {result['machine']}, {result['threads']} thread(s), torch "
            f"{result['torch']}, split {result['split']} ({result['n_sentences']} sentences; batch 1 over "
            f"{result['b1_sentences']}).\n")
    return "\n".join(rows) + "\n" + note


def plot(result: Dict, out: Path, title: Optional[str] = None, bin_width: int = 0,
         systems: Optional[List[str]] = None) -> Path:
    """Fig. 8.6: batch-1 latency vs source length (scatter + mean per length bin), one colour per system
    (``systems``: which, in this order; default every system measured at batch 1)."""
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    try:
        per = result["per_sentence"]
        if systems:
            per = {n: per[n] for n in systems if n in per}
        lengths = [row[1] for rows in per.values() for row in rows]
        if not lengths:
            raise ValueError("no batch-1 measurements to plot")
        width = bin_width or max(1, int(math.ceil(max(lengths) / 12)))
        for name, rows in per.items():
            x = np.array([r[1] for r in rows], dtype=float)
            y = np.array([r[3] for r in rows], dtype=float)
            pts = ax.scatter(x, y, s=4, alpha=0.15)
            bins = (x // width).astype(int)
            xs, ys = [], []
            for b in sorted(set(bins.tolist())):
                sel = bins == b
                xs.append(float(x[sel].mean()))
                ys.append(float(y[sel].mean()))
            ax.plot(xs, ys, marker="o", ms=3, color=pts.get_facecolor()[0][:3],
                    label=f"{name} ({result['systems'][name]['b1']['ms_per_sentence']:.1f} ms)")
        ax.set_xlabel("source length (subword tokens)")
        ax.set_ylabel("latency per sentence, batch 1 (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        ax.set_title(title or f"decoding latency vs length ({result['machine']}, {result['threads']} thread(s))",
                     fontsize=9)
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=150, format="png")
    finally:
        plt.close(fig)
    return out


# ------------------------------------------------------------------------------------------- main
def measure(args) -> Dict:
    torch.set_num_threads(args.threads)
    if args.gpu and not torch.cuda.is_available():
        raise SystemExit("error: --gpu but CUDA is not available")
    systems = [parse_system(n) for n in args.systems.split(",") if n]
    need = {s["ckpt"] for s in systems} | ({"teacher"} if any(rescored(s) for s in systems) else set())
    models, task = load_models(str(args.data), args.teacher, args.nat, args.ft, need, args.ar2)
    if args.gpu:
        models = {k: m.cuda() for k, m in models.items()}
    task.load_dataset(args.split)
    ds = task.dataset(args.split)
    n = len(ds)
    ids = list(range(n))
    b1_ids = ids
    if args.b1_max_sentences and args.b1_max_sentences < n:
        rng = np.random.default_rng(args.seed)
        b1_ids = sorted(rng.choice(n, args.b1_max_sentences, replace=False).tolist())
    hyp_bs = max(args.batch_sizes)
    machine = f"{cpu_name()}, {os.cpu_count()} vCPU"
    if args.gpu:
        machine = f"{torch.cuda.get_device_name()} ({machine})"
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine, "threads": args.threads,
              "torch": torch.__version__, "split": args.split, "n_sentences": n, "b1_sentences": len(b1_ids),
              "batch_sizes": args.batch_sizes, "reference": args.reference, "seed": args.seed,
              "max_candidate_tokens": args.max_candidate_tokens,
              "checkpoints": {"teacher": args.teacher, "nat": args.nat, "ft": args.ft, "ar2": args.ar2},
              "systems": {}, "per_sentence": {}}
    src_sizes = np.asarray(ds.src_sizes)
    translators = ct2_translators(systems, args.teacher, str(args.data), args.ct2_dir or args.out / "ct2_teacher",
                                  args.threads, args.ar2)
    for bs in args.batch_sizes:
        batches = make_batches(ds, b1_ids if bs == 1 else ids, bs, args.gpu)
        warmup = min(args.warmup if bs == 1 else 1, len(batches))
        for system in systems:
            gen, model = build_generator(system, models, task, translators)
            t0 = time.time()
            times, hyps, chunk = decode_batches(gen, model, system, batches, args.max_candidate_tokens, warmup,
                                                args.seed, args.gpu)
            nsent = len(hyps)
            entry = result["systems"].setdefault(system["name"], {"desc": system["desc"]})
            entry[f"b{bs}"] = {"sentences": nsent, "total_s": sum(times),
                               "ms_per_sentence": 1000.0 * sum(times) / max(nsent, 1),
                               "sent_per_s": nsent / max(sum(times), 1e-12)}
            if rescored(system) and bs > 1:
                entry[f"b{bs}"]["epd_sub_batch" if system.get("epd") else "npd_sub_batch"] = chunk
            if bs == 1:
                ms = [1000.0 * t for t in times]
                entry["b1"]["median_ms"] = float(np.median(ms))
                result["per_sentence"][system["name"]] = [
                    [sid, int(src_sizes[sid]) - 1, int(len(hyps[sid]["tokens"])) - 1, m]
                    for sid, m in zip(b1_ids, ms)]
            log(f"{system['name']:>16} batch {bs:>3}: {entry[f'b{bs}']['ms_per_sentence']:8.2f} ms/sentence "
                f"({nsent} sentences, {time.time() - t0:.1f}s wall)")
            if args.hyp_dir and bs == hyp_bs:
                args.hyp_dir.mkdir(parents=True, exist_ok=True)
                write_hyps(args.hyp_dir / f"{system['name']}.out", hyps, ds, task.target_dictionary,
                           task.source_dictionary, args.post_process)
    summarise(result, args.reference)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--data", type=Path, required=True, help="binarized folder (the distilled one: same dicts)")
    ap.add_argument("--teacher", help="autoregressive teacher checkpoint (ar_bK systems, NPD and EPD)")
    ap.add_argument("--nat", help="NAT checkpoint (nat, nat_avg, nat_npdS, nat_epdK)")
    ap.add_argument("--ft", help="fine-tuned NAT checkpoint (nat_ft, nat_ft_avg, nat_ft_npdS, nat_ft_epdK)")
    ap.add_argument("--ar2", help="a second autoregressive checkpoint with the same dictionaries (ar2_bK, "
                                  "ar2_ct2_int8_bK, ar2_ct2_fp32_bK), e.g. the 6+1 deep-encoder/shallow-decoder model")
    ap.add_argument("--systems", default="ar_b4,ar_b1,nat,nat_ft,nat_ft_npd10,nat_ft_npd100")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--split", default="test")
    ap.add_argument("--reference", default="ar_b4", help="speed-ups are relative to this system (thesis: AR b=4)")
    ap.add_argument("--b1-max-sentences", type=int, default=0, help="batch 1 on a seeded subset (0 = all)")
    ap.add_argument("--max-candidate-tokens", type=int, default=20000,
                    help="NPD/EPD: split a batch so that s (K) x sentences x 2T'max stays below this")
    ap.add_argument("--warmup", type=int, default=3, help="untimed warm-up batches at batch 1 (1 at larger)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--hyp-dir", type=Path, help="write the translations of the largest batch size here")
    ap.add_argument("--ct2-dir", type=Path, help="the teacher's CTranslate2 exports (default: OUT/ct2_teacher)")
    ap.add_argument("--post-process", default="sentencepiece", help="subword marker to remove ('none': keep)")
    ap.add_argument("--title", help="plot title")
    ap.add_argument("--plot-systems", help="systems drawn in the plot (default: all), e.g. ar_b4,nat_ft,nat_ft_npd10")
    ap.add_argument("--gpu", action="store_true", help="decode on CUDA (timers synchronised); untested here")
    args = ap.parse_args(argv)
    if args.post_process in ("", "none"):
        args.post_process = None
    for s in args.systems.split(","):
        parse_system(s)
    result = measure(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latency.json").write_text(json.dumps(result, indent=1))
    md = markdown(result, args.reference)
    (args.out / "latency.md").write_text(md)
    if 1 in args.batch_sizes:
        plot(result, args.out / "latency_vs_length.png", args.title,
             systems=args.plot_systems.split(",") if args.plot_systems else None)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

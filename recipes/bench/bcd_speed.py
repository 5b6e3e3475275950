"""Decoding cost of doc_bcd (Maruf 2019 ch. 3, block coordinate descent) against the sentence model, measured in
one process and interleaved: every round decodes the test set's batches with every system in turn (the order
rotated by one per round), each BCD system a fresh ``DocBCDGenerator`` (as one fairseq-generate run: what it keeps
across batches starts empty). The ratio of a system in a round is its time over the sentence model's greedy time
of that round; the report gives the median over rounds and the range, and whether the hypotheses equal those of
the reference computation (``--ref``: the previous default, memory states teacher-forced in every pass).

    .venv/bin/python recipes/bench/bcd_speed.py --data D/bin --doc DOC.pt --sent SENT.pt --rounds 7 \\
        --batching size --target-context gold --out runs/bcd/speed.json

``--batching`` / ``--target-context`` override the checkpoint's ``--doc-batching`` / ``--doc-target-context``
(``gold`` gives the extra rows their references, as a task built with it does; fairseq-generate with doc_bcd
needs ``none``). ``--profile`` adds, per system, the seconds spent in pass 0 (batch rows), pass 0 of the extra
rows, the document encoder, the memory states and the document passes' decoding.
"""
import argparse
import json
import statistics
import sys
import time
from argparse import Namespace
from collections import defaultdict

from fairseq_ext.tools.evaluation.bench_configs import DECODE_LEN


def build_systems(doc, sent, d, lim, DocBCDGenerator, GreedyGenerator, with_ref):
    systems = {"sentence": (lambda: GreedyGenerator([sent], d, **lim), None)}
    for K in (1, 2):
        for init in ("base_model", "zero_context"):
            models = [doc, sent] if init == "base_model" else [doc]
            name = f"K{K}_{init}"
            if with_ref:
                systems[f"{name}_ref"] = (lambda m=models, K=K, i=init: DocBCDGenerator(
                    m, d, iterations=K, init=i, reuse_states=False, **lim), None)
            systems[f"{name}_new"] = (lambda m=models, K=K, i=init: DocBCDGenerator(m, d, iterations=K, init=i, **lim),
                                      f"{name}_ref")
            if K > 1:
                systems[f"{name}_new_es"] = (lambda m=models, K=K, i=init: DocBCDGenerator(
                    m, d, iterations=K, init=i, early_stop=True, **lim), f"{name}_ref")
    return systems


def instrument(gen, seconds):
    """Accumulate the seconds of the generator's parts in ``seconds`` (``--profile``)."""
    def timed(name, fn):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                seconds[name] += time.perf_counter() - t
        return wrapper

    decode = gen.decode

    def decode_by_stage(stage, sample):
        extra = stage == "init" and sample.get("id", 0) is None  # rows_as_batch: the extra rows
        return timed("pass0_extra" if extra else ("pass0" if stage == "init" else "doc_pass"), decode)(stage, sample)

    gen.decode = decode_by_stage
    gen.doc_greedy.encode = timed("doc_encode", gen.doc_greedy.encode)
    gen.memory.states = timed("memory_states", gen.memory.states)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--doc", required=True, help="the docmem checkpoint")
    ap.add_argument("--sent", required=True, help="the sentence model's checkpoint (pass 0 of base_model)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batching", choices=("size", "document"))
    ap.add_argument("--target-context", choices=("none", "gold"))
    ap.add_argument("--no-ref", action="store_true", help="skip the reference systems")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()

    import torch
    from fairseq import checkpoint_utils, utils

    torch.set_num_threads(1)
    utils.import_user_module(Namespace(user_dir="fairseq_ext"))
    from fairseq_ext.generators.decoding import GreedyGenerator
    from fairseq_ext.generators.doc_bcd import DocBCDGenerator

    over = {"data": a.data}
    if a.batching:
        over["doc_batching"] = a.batching
    if a.target_context:
        over["doc_target_context"] = a.target_context
    (doc, sent), _cfg, task = checkpoint_utils.load_model_ensemble_and_task([a.doc, a.sent], arg_overrides=over)
    for m in (doc, sent):
        m.eval()
    task.load_dataset("test")
    batches = list(task.get_batch_iterator(dataset=task.dataset("test"), max_sentences=a.batch_size,
                                           max_positions=None).next_epoch_itr(shuffle=False))
    extra = [b["net_input"]["ctx_src_tokens"].size(0) for b in batches]
    setting = {"batches": len(batches), "batch_rows": sum(b["net_input"]["src_tokens"].size(0) for b in batches),
               "extra_rows": sum(extra), "doc_batching": str(task.cfg.doc_batching),
               "doc_target_context": str(task.cfg.doc_target_context)}
    print(f"[bcd_speed] {setting}", file=sys.stderr, flush=True)
    lim = dict(max_len_a=float(DECODE_LEN[1]), max_len_b=int(DECODE_LEN[3]))  # bench_configs' limit
    systems = build_systems(doc, sent, task.target_dictionary, lim, DocBCDGenerator, GreedyGenerator, not a.no_ref)
    names = list(systems)
    times = {n: [] for n in names}
    parts = {n: defaultdict(float) for n in names}
    outputs = {}

    def run(name):
        gen = systems[name][0]()
        if a.profile and name != "sentence":
            instrument(gen, parts[name])
        out = []
        t = time.perf_counter()
        with torch.no_grad():
            for s in batches:
                if name == "sentence":
                    s = dict(s, net_input={k: s["net_input"][k] for k in ("src_tokens", "src_lengths")})
                    out.append(gen.generate([sent], s))
                else:
                    out.append(gen.generate(gen.models, s))
        return time.perf_counter() - t, out

    for r in range(a.rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            sec, out = run(n)
            times[n].append(sec)
            outputs[n] = out
        print(f"[bcd_speed] round {r + 1}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in names),
              file=sys.stderr, flush=True)

    def compare(x, y):
        hx = [h[0] for batch in x for h in batch]
        hy = [h[0] for batch in y for h in batch]
        tokens = sum(not torch.equal(p["tokens"], q["tokens"]) for p, q in zip(hx, hy))
        diff = max((float((p["positional_scores"] - q["positional_scores"]).abs().max())
                    for p, q in zip(hx, hy) if torch.equal(p["tokens"], q["tokens"])), default=0.0)
        return {"sentences_with_other_tokens": tokens, "max_score_diff": diff}

    summary = {}
    for n in names:
        ratios = [t / b for t, b in zip(times[n], times["sentence"])]
        summary[n] = {"median_ratio": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                      "max": round(max(ratios), 3), "median_s": round(statistics.median(times[n]), 4)}
        ref = systems[n][1]
        if ref in outputs:
            summary[n]["vs_" + ref] = compare(outputs[n], outputs[ref])
        if a.profile and parts[n]:
            summary[n]["seconds_per_round"] = {k: round(v / a.rounds, 4) for k, v in parts[n].items()}
    report = {"setting": setting, "summary": summary, "times": times}
    print(json.dumps({"setting": setting, "summary": summary}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

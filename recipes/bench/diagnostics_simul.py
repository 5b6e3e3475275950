"""Diagnostic of the simultaneous agent (Gu 2019 ch. 9): does the READ/WRITE agent's delay follow the delay the task
needs, at the quality of the full-sentence model, where one fixed wait-k cannot be right on both tasks?
(:mod:`fairseq_ext.tools.analysis.diagnostics_simul`: ``monotone`` needs wait-1, ``reorder`` needs each span of r = 3
words read before it is written.) The **simultaneous agent** table of ``recipes/bench/RESULTS.md`` is rewritten::

    .venv/bin/python recipes/bench/diagnostics_simul.py [--tasks monotone reorder] [--out runs/diag_simul]
        [--nmt-updates 3000] [--agent-updates 1000] [--waitk 1 2 3 4] [--target-ap 0.5] [--delay-beta -1]

Per task: the environment, a small ``rnnsearch_tiny --encoder-unidirectional`` (embeddings 64, GRU 64, plain
decoder; the full-sentence model, MLE, ``--nmt-updates``), decoded on the test set by fairseq-generate
(``--task simul_rl_translation``) with wait-until-end (the full-sentence model's quality: the target), wait-k for
``--waitk`` and the agent (``simul_agent``, GRU 64, trained ``--agent-updates`` updates by
``simul_policy_gradient``: BLEU⁰ increments + the AP delay reward of Eq. 9.9, target ``--target-ap`` d*, weight
``--delay-beta`` β, 10 sentences x 5 trajectories, Adam ``--agent-lr``); plus, in this process, wait-k that READs
instead of writing ⟨/s⟩ before the source end is read (``defer``; a common guard of wait-k decoders: a
full-sentence model ends a prefix with ⟨/s⟩). The ``needed`` row is the task's needed delays (no model).

Scores: exact match, word accuracy, the share of reference words written before their source word was read and the
accuracy on them (the bound: 1/F), AP / AL (SimulEval's, |Y*| the reference) / CW (``fairseq_ext.modules.latency``),
the share of outputs that wrote ⟨/s⟩ before the source end was read, and the agent's objective on the test set:
``return`` = sentence BLEU + β·[AP − d*]_+ (the sum of its rewards, Eqs. 9.6, 9.9). **Pass**: the full-sentence
model reaches ``--pass-at`` (0.9) exact match; the agent is within 0.1 of it on both tasks and its AL on reorder
exceeds its AL on monotone by at least half the needed difference; a wait-k row passes when it respects the bound
(k < r on reorder: exact match at most the bound + 0.05). Results are cached per row (``OUT/TASK/ROW/result.json``);
``--force`` rescores. Exit status 1 when a row fails.
"""
import json
import re
import sys
from pathlib import Path

from fairseq_ext.tools.analysis.diagnostics_runs import (
    LANGS, RNNSEARCH_SHAPE, adam, cpu_line, fairseq_generate, fairseq_train, fmt, parser, pass_cell, read_probes,
    report,
)
from fairseq_ext.tools.analysis.diagnostics_simul import SIMUL_TASKS, exact_bound, exact_scores, generate

NMT = ["--arch", "rnnsearch_tiny", "--encoder-unidirectional", "--task", "translation_decoding",
       "--criterion", "cross_entropy", *RNNSEARCH_SHAPE, *adam(3e-3), "--batch-size", "64"]
SIMUL = ["--task", "simul_rl_translation", "--max-len-a", "1", "--max-len-b", "5", "--batch-size", "128"]
START, END = "<!-- diagnostics-simul:table -->", "<!-- /diagnostics-simul:table -->"
TITLE = "Diagnostics: simultaneous agent (recipes/bench/diagnostics_simul.py)"


def agent_flags(args, nmt: Path) -> list:
    return ["--task", "simul_rl_translation", "--arch", "simul_agent", "--agent-hidden-size", "64",
            "--agent-baseline-dim", "32", "--nmt-path", nmt, "--criterion", "simul_policy_gradient",
            "--delay-type", "ap", "--target-ap", str(args.target_ap), "--delay-beta", str(args.delay_beta),
            "--traj-per-sent", "5", "--simul-max-len-a", "1", "--simul-max-len-b", "2", "--train-force-write",
            "--optimizer", "adam",
            "--lr", str(args.agent_lr), "--clip-norm", "1.0", "--lr-scheduler", "fixed", "--batch-size", "10",
            "--required-batch-size-multiple", "1"]


# ------------------------------------------------------------------------------------------------ decoding
def read_generate(gen: Path):
    """``({line: hypothesis}, {line: reference})`` of a generate-test.txt."""
    hyps, refs = {}, {}
    for line in gen.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([HT])-(\d+)\t(.*)$", line)
        if m and m.group(1) == "T":
            refs[int(m.group(2))] = m.group(3)
        elif m:
            hyps[int(m.group(2))] = m.group(3).partition("\t")[2]
    return hyps, refs


def generate_policy(data: Path, ckpt: Path, flags: list, out: Path, threads: int):
    """fairseq-generate with a simultaneous policy: (hyps, refs, {line: actions record})."""
    gen = fairseq_generate(data, ckpt, [*LANGS, *SIMUL, *flags, "--simul-actions-out", out / "actions.jsonl"], out,
                           threads)
    hyps, refs = read_generate(gen)
    records = {r["id"]: r for r in map(json.loads, (out / "actions.jsonl").read_text().splitlines())}
    return hyps, refs, records


def decode_deferring(data: Path, ckpt: Path, k: int, refs: dict):
    """wait-k that READs instead of writing ⟨/s⟩ before the source end is read, in this process on the
    environment of the package (:class:`SimulEnvironment`); (hyps, refs, records) as :func:`generate_policy`."""
    import torch

    from fairseq_ext.modules.simultaneous.environment import SimulEnvironment
    from fairseq_ext.modules.simultaneous.policies import Policy, WaitK
    from fairseq_ext.modules.simultaneous.search import run_episode

    class Deferring(Policy):
        def __init__(self, k):
            self.inner = WaitK(k)

        def act(self, env, cand):
            return self.inner.act(env, cand) & ~(cand.token.eq(env.eos) & ~env.source_done)

    nmt, task = load_environment(data, ckpt)
    hyps, records = {}, {}
    with torch.no_grad():
        for ids, toks in batches(data, task):
            env = SimulEnvironment(nmt, toks, torch.full((len(ids),), toks.size(1)), max_len_a=1, max_len_b=5)
            for i, res in zip(ids, run_episode(env, Deferring(k))):
                hyps[i] = task.target_dictionary.string(res["tokens"])
                records[i] = {"id": i, "src_len": res["src_len"], "delays": res["delays"],
                              "actions": "".join("W" if a else "R" for a in res["actions"])}
    return hyps, dict(refs), records


def load_environment(data: Path, ckpt: Path):
    """(NMT, task) of a checkpoint, in this process."""
    from argparse import Namespace

    from fairseq import utils

    from fairseq_ext.modules.checkpoint import load_ensemble
    from fairseq_ext.tools.evaluation.runs import PACKAGE

    utils.import_user_module(Namespace(user_dir=str(PACKAGE)))
    models, _, task = load_ensemble([str(ckpt)], arg_overrides={"data": str(data)}, frozen=True)
    return models[0], task


def batches(data: Path, task, split: str = "test"):
    """``(line ids, source tokens)`` of the sentences of each length (no padding)."""
    import torch

    src = (data.parent / "raw" / f"{split}.src").read_text(encoding="utf-8").splitlines()
    by_len: dict = {}
    for i, line in enumerate(src):
        by_len.setdefault(len(line.split()), []).append(i)
    d = task.source_dictionary
    for ids in by_len.values():
        yield ids, torch.stack([d.encode_line(src[i], add_if_not_exist=False, append_eos=True).long() for i in ids])


def forced_candidates(data: Path, ckpt: Path, k: int, refs: dict, oracle_init: bool = False) -> dict:
    """The environment's candidate (Eq. 9.3) under wait-k with the *reference* history (each WRITE emits the
    reference word, so no error propagates): over the target words written before the source end is read, the
    share of candidates equal to the reference word and the share that are ⟨/s⟩; and the same after the source
    end. What the full-sentence model proposes on prefixes, whatever the policy learns. ``oracle_init``: z_0 from
    the whole source (φ_INIT(H^|X|)) instead of the prefix read at the first WRITE (Alg. 4 line 11), a probe of
    what the prefix's z_0 does."""
    import torch

    from fairseq_ext.modules.simultaneous.environment import Candidate, SimulEnvironment
    from fairseq_ext.modules.simultaneous.policies import WaitK

    nmt, task = load_environment(data, ckpt)
    t = task.target_dictionary
    count = {"prefix": [0, 0, 0], "full": [0, 0, 0]}  # right, ⟨/s⟩, total
    with torch.no_grad():
        for ids, toks in batches(data, task):
            gold = torch.stack([t.encode_line(refs[i], add_if_not_exist=False, append_eos=True).long() for i in ids])
            env = SimulEnvironment(nmt, toks, torch.full((len(ids),), toks.size(1)), max_len_a=1, max_len_b=5)
            if oracle_init:
                whole = env.encoder_out
                init = type(nmt.decoder).initial_state
                nmt.decoder.initial_state = lambda enc, whole=whole: init(nmt.decoder, whole)
            policy = WaitK(k)
            while not bool(env.done.all()):
                cand = env.observe()
                write = policy.act(env, cand) | env.source_done
                tau = env.tau.clamp(max=gold.size(1) - 1)
                ref = gold.gather(1, tau.unsqueeze(1)).squeeze(1)
                for r in (write & ~env.done).nonzero().squeeze(1).tolist():
                    c = count["full" if bool(env.source_done[r]) else "prefix"]
                    c[0] += int(cand.token[r] == ref[r])
                    c[1] += int(cand.token[r] == env.eos)
                    c[2] += 1
                env.step(write, Candidate(ref, cand.score, cand.lprobs, cand.state, cand.obs, cand.eta))
    if oracle_init:
        del nmt.decoder.initial_state
    return {f"{where}_{key}": (c[j] / c[2] if c[2] else None) for where, c in count.items()
            for j, key in enumerate(("right", "eos"))} | {f"{w}_words": c[2] for w, c in count.items()}


def scores(probes, hyps, refs, records, args) -> dict:
    """The row's scores (module doc)."""
    from fairseq_ext.modules.simultaneous.rewards import prefix_bleu
    from fairseq_ext.tools.evaluation.simul_latency import corpus_latency

    res = exact_scores(probes, hyps, refs, {i: r["delays"] for i, r in records.items()})
    recs = [records[p["line"]] for p in probes]
    lat = corpus_latency(recs, ref_lens={p["line"]: len(refs[p["line"]].split()) + 1 for p in probes})
    vocab: dict = {}
    returns = []
    for p, r in zip(probes, recs):
        h, t = ([vocab.setdefault(w, len(vocab)) for w in s.split()] for s in (hyps[p["line"]], refs[p["line"]]))
        bleu = prefix_bleu([[h]], [t])[1][0] if h else 0.0
        ap = sum(r["delays"]) / (r["src_len"] * len(r["delays"]))
        returns.append(bleu + args.delay_beta * max(ap - args.target_ap, 0.0))
    early_end = sum(r["delays"][-1] < r["src_len"] for r in recs) / len(recs)
    return dict(res, ap=lat["ap"], al=lat["al"], cw=lat["cw"], early_end=early_end, ret=sum(returns) / len(returns))


def needed_row(probes, args) -> dict:
    recs = {p["line"]: {"id": p["line"], "src_len": p["needed"][-1], "delays": p["needed"],
                        "actions": "".join("R" * (b - a) + "W" for a, b in zip([1] + p["needed"], p["needed"]))}
            for p in probes}
    refs = {p["line"]: " ".join(f"t{i}" for i in range(len(p["needed"]) - 1)) for p in probes}
    return scores(probes, refs, refs, recs, args)


# ------------------------------------------------------------------------------------------------ rows
def row(task, system, note, res, secs, budget, ok, baseline=True) -> dict:
    return {"task": task, "system": system, "note": note, "result": res, "exact": res["exact"], "al": res["al"],
            "seconds": round(secs, 1), "budget": budget, "pass": bool(ok), "baseline": baseline}


def task_rows(task: str, args) -> list:
    """The rows of ``task``: cached in ``OUT/TASK/result.json`` (``--force``: decoded and scored again, the training
    kept)."""
    cache = Path(args.out) / task / "result.json"
    if cache.exists() and not args.force:
        return json.loads(cache.read_text())
    for gen in (Path(args.out) / task).glob("*/test.*/generate-test.txt") if args.force else ():
        gen.unlink()
    return run_task(task, args)


def run_task(task: str, args) -> list:
    out = Path(args.out) / task
    info = generate(task, str(out / "data"), seed=args.seed)
    data = Path(info["bin"])
    probes = read_probes(out / "data")
    layout = info["layout"]
    nmt = out / "nmt"
    secs = fairseq_train(data, nmt, [*LANGS, *NMT], args.nmt_updates, args.threads)
    ckpt = nmt / "checkpoint_last.pt"
    budget = f"NMT {args.nmt_updates} updates"
    rows = [row(task, "needed", "the task's needed delays (no model)", needed_row(probes, args), 0.0, "–", True)]
    hyps, refs, recs = generate_policy(data, ckpt, ["--simul-policy", "wue"], nmt / "test.wue", args.threads)
    full = scores(probes, hyps, refs, recs, args)
    rows.append(row(task, "full", "full-sentence model (wait until end)", full, secs, budget,
                    full["exact"] >= args.pass_at))
    for k in args.waitk:
        bound = exact_bound(task, k, layout["span"], tuple(layout["spans"]), layout["fillers"])
        for defer in (False, True):
            if defer:
                res = scores(probes, *decode_deferring(data, ckpt, k, refs), args)
            else:
                res = scores(probes, *generate_policy(data, ckpt, ["--simul-policy", "waitk", "--simul-waitk",
                                                                   str(k)], nmt / f"test.wait{k}", args.threads),
                             args)
            name = f"wait{k}" + ("_defer" if defer else "")
            note = f"wait-{k}" + (", ⟨/s⟩ deferred to the source end" if defer else "") + f" (exact bound {bound:.3g})"
            rows.append(row(task, name, note, res, secs, budget, res["exact"] <= bound + 0.05 if bound < 1 else True))
    for k in args.waitk:
        for oracle in (False, True):
            rows.append({"task": task, "system": f"forced{k}" + ("_oracle_init" if oracle else ""), "k": k,
                         "oracle_init": oracle, "probe": forced_candidates(data, ckpt, k, refs, oracle), "pass": True})
    asave = out / "agent"
    asecs = fairseq_train(data, asave, [*LANGS, *agent_flags(args, ckpt.resolve())], args.agent_updates, args.threads)
    res = scores(probes, *generate_policy(data, asave / "checkpoint_last.pt", ["--simul-policy", "agent"],
                                          asave / "test.agent", args.threads), args)
    rows.append(row(task, "agent", f"the agent (AP d* {args.target_ap}, β {args.delay_beta})", res, asecs,
                    f"agent {args.agent_updates} updates", res["exact"] >= full["exact"] - 0.1, baseline=False))
    (out / "result.json").write_text(json.dumps(rows, indent=1))
    return rows


def verdict(rows: list) -> list:
    """The cross-task checks: the agent's AL follows the needed difference; which wait-k matches both tasks."""
    by = {(r["task"], r["system"]): r for r in rows}
    lines = []
    if all((t, s) in by for t in SIMUL_TASKS for s in ("agent", "needed", "full")):
        need = by[("reorder", "needed")]["al"] - by[("monotone", "needed")]["al"]
        got = by[("reorder", "agent")]["al"] - by[("monotone", "agent")]["al"]
        ok = got >= need / 2
        lines.append(f"agent: AL reorder − AL monotone = {got:.2f} (needed {need:.2f}; pass at ≥ {need / 2:.2f}): "
                     f"{pass_cell(ok)}")
        rows.append({"task": "both", "system": "agent delay", "pass": ok})
        matches = []
        for name in sorted({s for t, s in by if s.startswith("wait")}):
            fits = all((t, name) in by and by[(t, name)]["exact"] >= by[(t, "full")]["exact"] - 0.1 and
                       by[(t, name)]["al"] <= by[(t, "needed")]["al"] + 0.5 for t in SIMUL_TASKS)
            if fits:
                matches.append(name)
        lines.append("fixed wait-k right on both tasks (exact within 0.1 of the full-sentence model, AL within 0.5 of "
                     f"the needed): {', '.join(matches) or 'none'}")
    return lines


def table(rows: list, args) -> str:
    lines = ["| task | system | exact | word acc | early words (acc) | AP | AL | CW | ⟨/s⟩ before source end | "
             "return | pass | budget |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        if "result" not in r or "note" not in r:
            continue
        x = r["result"]
        early = f"{fmt(x.get('early'))} ({fmt(x.get('early_acc'))})"
        verdict_cell = pass_cell(r["pass"]) + (" (baseline)" if r["baseline"] else "")
        lines.append(f"| {r['task']} | {r['system']}: {r['note']} | {fmt(x['exact'])} | {fmt(x['word_acc'])} | "
                     f"{early} | {fmt(x['ap'])} | {fmt(x['al'])} | {fmt(x['cw'])} | {fmt(x['early_end'])} | "
                     f"{fmt(x['ret'])} | {verdict_cell} | {r['budget']}; {r['seconds'] / 60:.1f} min |")
    lines += [""] + verdict(rows)
    lines += ["", "The environment's candidate (Eq. 9.3) under wait-k with the reference history (no error propagates): "
              "words written before the source end is read, and after it.", "",
              "| task | k | z_0 | before the end: right | before the end: ⟨/s⟩ | after the end: right |",
              "|---|---:|---|---:|---:|---:|"]
    for r in rows:
        if "probe" in r:
            x = r["probe"]
            z0 = "whole source (probe)" if r["oracle_init"] else "prefix at the first WRITE (Alg. 4)"
            lines.append(f"| {r['task']} | {r['k']} | {z0} | {fmt(x['prefix_right'])} | {fmt(x['prefix_eos'])} | "
                         f"{fmt(x['full_right'])} |")
    lines += ["", cpu_line(args.threads, ", a shared, heavily loaded machine (2 cores, up to 8 jobs; minutes are "
                                         "wall-clock)")]
    return "\n".join(lines)


def own(ap) -> None:
    ap.add_argument("--nmt-updates", type=int, default=3000, help="MLE updates of each full-sentence model")
    ap.add_argument("--agent-updates", type=int, default=1000, help="policy-gradient updates of each agent")
    ap.add_argument("--agent-lr", type=float, default=1e-3)
    ap.add_argument("--target-ap", type=float, default=0.5, help="d* of the AP delay reward (Eq. 9.9)")
    ap.add_argument("--delay-beta", type=float, default=-1.0, help="β of the AP delay reward (Eq. 9.9)")
    ap.add_argument("--waitk", type=int, nargs="+", default=[1, 2, 3, 4])


def main(argv=None) -> int:
    args = parser(__doc__, SIMUL_TASKS, "runs/diag_simul", "simultaneous agent table", own, systems=None).parse_args(
        argv)
    rows = [r for task in args.tasks for r in task_rows(task, args)]
    return report(rows, table(rows, args), args, START, END, TITLE)


if __name__ == "__main__":
    sys.exit(main())

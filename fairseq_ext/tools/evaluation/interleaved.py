"""Costs of systems measured *interleaved*: the systems take turns, round after round, in an order rotated by one
per round, so that a load change of the shared machine hits all of them and cancels out of the per-round ratios.
What ``recipes/bench/decode_speed.py`` (decoding time), ``recipes/bench/cpu_inference.py`` (CPU inference) and
``recipes/bench/speed.py`` (training cost per target token) measure with:

* decoding: :func:`time_generate` (one ``fairseq-generate`` run timed by its own "Translated N sentences (M tokens)
  in S s" line, :data:`DONE`: decoding only, not start-up or checkpoint loading), :func:`summarise` (per system the
  median ratio over rounds to the baseline's time of the same round, its range, the median seconds and tokens/s),
  :func:`markdown`, :func:`parse_system` (``NAME=fairseq-generate arguments``);
* decoding per batch (``decode_speed.py --per-batch``): :func:`load_decoder` (a system's task, models, generator
  and batches, built once in this process from its fairseq-generate arguments), :func:`time_batches` (every batch
  decoded by every system in turn, the order rotated per batch; per-round records for :func:`summarise`);
* training: :func:`build` (task, model, criterion and optimizer of a bench configuration, from its exact flags, in
  this process), :func:`fixed_batches` (the same real batches for every configuration), :func:`train_steps`;
* :func:`rotated`: the order of a round.
"""
from __future__ import annotations

import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fairseq_ext.tools.evaluation import bench_configs
from fairseq_ext.tools.evaluation.runs import PACKAGE, ROOT

DONE = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")


def rotated(items: list, r: int) -> list:
    """The order of round ``r`` (from 0): ``items`` rotated by ``r``."""
    return items[r % len(items):] + items[:r % len(items)]


# ------------------------------------------------------------------------------------------------ decoding
def parse_system(spec: str) -> tuple:
    """``NAME=ARGS`` -> ``(NAME, [fairseq-generate arguments])``."""
    if "=" not in spec:
        raise SystemExit(f"error: --system {spec!r}: expected NAME=ARGS")
    name, args = spec.split("=", 1)
    return name.strip(), shlex.split(args)


def time_generate(args: list, threads: int, save: Path = None) -> dict:
    """One ``fairseq-generate`` run (in the checkout, ``threads`` OpenMP/MKL threads): sentences, tokens and seconds
    from its summary line, and the run's wall seconds; its output written to ``save`` when given."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    exe = Path(sys.executable).parent / "fairseq-generate"
    t0 = time.time()
    p = subprocess.run([str(exe), *args], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    m = DONE.search(p.stderr + p.stdout)
    if p.returncode != 0 or m is None:
        tail = (p.stderr or p.stdout)[-2000:]
        raise SystemExit(f"error: fairseq-generate failed ({p.returncode}): {' '.join(args)}\n{tail}")
    if save is not None:
        save.write_text(p.stdout, encoding="utf-8")
    return {"sentences": int(m.group(1).replace(",", "")), "tokens": int(m.group(2).replace(",", "")),
            "seconds": float(m.group(3)), "wall": round(wall, 2)}


def summarise(names: list, runs: dict) -> dict:
    """Per system (``names[0]`` the baseline): the median, least and largest per-round time ratio to the baseline,
    the median seconds and target tokens/s, the sentences translated."""
    base = names[0]
    out = {}
    for n in names:
        ratios = [r["seconds"] / b["seconds"] for r, b in zip(runs[n], runs[base])]
        secs = [r["seconds"] for r in runs[n]]
        toks = [r["tokens"] / r["seconds"] for r in runs[n]]
        out[n] = {"ratio_median": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
                  "ratio_max": round(max(ratios), 3), "seconds_median": round(statistics.median(secs), 2),
                  "tokens_per_s_median": round(statistics.median(toks), 1),
                  "sentences": runs[n][0]["sentences"]}
    return out


def markdown(summary: dict, rounds: int) -> str:
    lines = [f"| system | decode s (median of {rounds}) | target tok/s | time × {next(iter(summary))} (range) |",
             "|---|---|---|---|"]
    for n, s in summary.items():
        lines.append(f"| {n} | {s['seconds_median']} | {s['tokens_per_s_median']} | "
                     f"{s['ratio_median']:.2f} ({s['ratio_min']:.2f}–{s['ratio_max']:.2f}) |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ training
def build(name: str, data: Path, generated_dir=None):
    """Task, model, criterion and fairseq optimizer of a bench configuration (its exact flags), the gradient
    clipping norm and the number of parameters."""
    from fairseq import optim, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = bench_configs.get(name)
    if cfg["task"] not in ("translation_ext", "translation", "translation_decoding", "doc_translation",
                           "universal_translation", "conversation_translation"):
        raise SystemExit(f"error: configuration '{name}' uses task {cfg['task']}; speed.py times "
                         f"plain translation configurations only")
    if cfg.get("prepare"):
        raise SystemExit(f"error: configuration '{name}' needs files made from its job's data before training "
                         f"({', '.join(p for p, _ in cfg['prepare'])}); speed.py does not make them")
    extra = []
    if cfg["task"] == "doc_translation":
        generated = bench_configs.reads_generated(cfg["train"])
        if generated and not generated_dir:
            raise SystemExit(f"error: configuration '{name}' reads the generated target context: give "
                             f"--doc-generated-dir (the folder of the sentence model's {{split}}.{{tgt}})")
        extra = bench_configs.doc_data_flags(data, generated_dir)
        if generated_dir and not generated:
            extra += ["--doc-target-context", "generated"]
    argv = [str(data), "--user-dir", str(PACKAGE), "--task", cfg["task"], "--cpu",
            "--seed", "1", *extra, *cfg["train"]]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    fcfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(fcfg.task)
    model = task.build_model(fcfg.model)
    criterion = task.build_criterion(fcfg.criterion)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = optim.build_optimizer(fcfg.optimizer, params)
    n_params = sum(p.numel() for p in model.parameters())
    return task, model, criterion, optimizer, float(fcfg.optimization.clip_norm), n_params


def fixed_batches(task, n: int, max_tokens: int, seed: int):
    """The first ``n`` batches of the seeded training epoch (the bench's --max-tokens)."""
    task.load_dataset("train")
    it = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=max_tokens,
                                 max_positions=(1024, 1024), ignore_invalid_inputs=True,
                                 seed=seed).next_epoch_itr(shuffle=True)
    out = []
    for sample in it:
        out.append(sample)
        if len(out) == n:
            break
    return out


def train_steps(system, batches, update_num: int) -> float:
    """Seconds for one full training step per batch (fairseq's task.train_step + clip + step)."""
    task, model, criterion, optimizer, clip, _ = system
    model.train()
    t0 = time.perf_counter()
    for i, sample in enumerate(batches):
        optimizer.zero_grad()
        task.train_step(sample, model, criterion, optimizer, update_num + i)
        optimizer.clip_grad_norm(clip)
        optimizer.step()
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------------ decoding per batch
def load_decoder(args: list) -> dict:
    """One system of :func:`time_batches`, built in this process as ``fairseq-generate ARGS`` builds it (greedy,
    ``--beam 1``, unless ``args`` give ``--beam``): its task, models (loaded once), generator and the batches of its
    ``--gen-subset`` (built once, in fairseq-generate's order)."""
    import ast

    import torch
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_ext.modules.checkpoint import load_ensemble

    if "--beam" not in args:
        args = [*args, "--beam", "1"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_generation_parser(), args))
    utils.import_user_module(cfg.common)
    if cfg.dataset.max_tokens is None and cfg.dataset.batch_size is None:
        cfg.dataset.max_tokens = 12000  # fairseq-generate's default
    cuda = torch.cuda.is_available() and not cfg.common.cpu
    task = tasks.setup_task(cfg.task)
    models, saved, _ = load_ensemble(utils.split_paths(cfg.common_eval.path), task=task, use_cuda=cuda,
                                     arg_overrides=ast.literal_eval(cfg.common_eval.model_overrides), generation=cfg)
    task.load_dataset(cfg.dataset.gen_subset, task_cfg=saved.task)
    itr = task.get_batch_iterator(
        dataset=task.dataset(cfg.dataset.gen_subset), max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models]),
        ignore_invalid_inputs=cfg.dataset.skip_invalid_size_inputs_valid_test,
        required_batch_size_multiple=cfg.dataset.required_batch_size_multiple, seed=cfg.common.seed,
    ).next_epoch_itr(shuffle=False)
    batches = [utils.move_to_cuda(s) if cuda else s for s in itr if "net_input" in s]
    return {"task": task, "models": models, "generator": task.build_generator(models, cfg.generation),
            "batches": batches, "prefix_size": cfg.generation.prefix_size, "cuda": cuda}


def time_batches(systems: list, rounds: int, picks: list = None, log=None) -> dict:
    """Per-batch interleaving, finer than whole runs for a loaded machine: ``systems`` is ``[(NAME, load_decoder
    result)]``; in each of ``rounds`` rounds every batch (those numbered ``picks``, default all) is decoded by every
    system in turn, the order rotated by one per batch.  Returns per system one record per round (sentences,
    generated tokens, seconds summed over the batches), as :func:`time_generate`'s, for :func:`summarise`."""
    import torch

    sizes = {n: [len(b["id"]) for b in s["batches"]] for n, s in systems}
    if len({tuple(v) for v in sizes.values()}) != 1:
        raise SystemExit("error: the systems' batches hold different numbers of sentences: "
                         + ", ".join(f"{n}: {len(v)} batches, {sum(v)} sentences" for n, v in sizes.items()))
    n_batches = len(next(iter(sizes.values())))
    picks = list(range(n_batches)) if picks is None else picks
    if not picks or any(not 0 <= b < n_batches for b in picks):
        raise SystemExit(f"error: --batches {picks}: batch numbers must lie in 0..{n_batches - 1}")
    runs = {n: [] for n, _ in systems}
    for r in range(rounds):
        acc = {n: {"sentences": 0, "tokens": 0, "seconds": 0.0} for n, _ in systems}
        for j, b in enumerate(picks):
            for name, s in rotated(systems, r * len(picks) + j):
                sample = s["batches"][b]
                prefix = sample["target"][:, :s["prefix_size"]] if s["prefix_size"] > 0 else None
                t0 = time.perf_counter()
                with torch.no_grad():
                    hyps = s["task"].inference_step(s["generator"], s["models"], sample, prefix_tokens=prefix)
                if s["cuda"]:
                    torch.cuda.synchronize()
                acc[name]["seconds"] += time.perf_counter() - t0
                acc[name]["sentences"] += len(hyps)
                acc[name]["tokens"] += sum(len(h[0]["tokens"]) for h in hyps)
        for n, a in acc.items():
            runs[n].append(a)
        if log:
            log(r, {n: v[-1] for n, v in runs.items()})
    return runs

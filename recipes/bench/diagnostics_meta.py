"""Diagnostic of MetaNMT's fast adaptation (Gu 2019 ch. 6): the multilingual start (Eq. 6.11) and the MetaNMT start
(first-order MAML, Eqs. 6.4-6.6, 6.10) are trained for the same number of updates on the training cipher languages
of :mod:`fairseq_ext.tools.analysis.diagnostics_meta` (``meta_cipher``), then each is fine-tuned on K examples of
the held-out new language for the same steps and scored on its test set; the **Diagnostics: fast adaptation**
table of ``recipes/bench/RESULTS.md`` is rewritten::

    .venv/bin/python recipes/bench/diagnostics_meta.py [--out runs/diag_meta] [--updates 1000] [--shots 4 8 16]
        [--steps 1 5 10 20] [--ft-lr 1e-3] [--table recipes/bench/RESULTS.md]

Both starts are ``transformer_ulr_tiny`` (2+2 layers, d 32) with the ULR source embedding plus Δε (Eq. 6.12),
Adam 3e-3, inverse-sqrt warm-up 100: ``multi`` = ``universal_translation`` (languages drawn uniformly, Δε frozen at
0, 1,024-token batches); ``meta`` = ``meta_translation`` (one episode an update: a language, D and D′ of 512 tokens
each, one inner Adam step at the meta learning rate, first-order meta-gradient). Fine-tuning
(``ulr_finetune_translation``, ``--finetune-strategy emb+enc`` (the thesis's best), Adam ``--ft-lr`` constant) on
``k<K>`` (one batch: every step sees the K examples), with fairseq's ``Trainer`` in this process, scored after each
of ``--steps``: greedy decoding, token accuracy at position on ``zn``'s test (and exact match), split into right,
misplaced-and-seen and misplaced-and-unseen source words (the generator's bounds). A K passes when the meta start is
ahead of the multilingual one (all tokens) at the last of ``--steps``. Each start's row (pretraining, zero-shot,
every K's curve, the inner-step probe of :func:`inner_step_probe`) is cached in ``OUT/meta_cipher/START``.
"""
import sys
from pathlib import Path

from fairseq_ext.tools.analysis.diagnostics_meta import generate, token_accuracy
from fairseq_ext.tools.analysis.diagnostics_runs import (
    PACKAGE, adam, cached, cached_rows, cpu_line, fairseq_train, fmt, parser, pass_cell, report, save_row,
)

SHAPE = ["--arch", "transformer_ulr_tiny", "--ulr"]
STARTS = {
    "multi": ["--task", "universal_translation", "--lang-temperature", "0", "--ulr-freeze-delta", "--criterion",
              "cross_entropy", "--max-tokens", "1024"],
    "meta": ["--task", "meta_translation", "--inner-steps", "1", "--inner-optimizer", "adam", "--meta-gradient",
             "first_order", "--criterion", "metanmt_cross_entropy", "--max-tokens", "512"],
}
NOTES = {"multi": "multilingual start (Eq. 6.11, Δε frozen)", "meta": "MetaNMT start (first-order MAML)"}
SYSTEMS = {"meta_cipher": [(name, STARTS[name], "start", NOTES[name]) for name in STARTS]}
START, END = "<!-- diagnostics_meta:table -->", "<!-- /diagnostics_meta:table -->"
TITLE = "Diagnostics: fast adaptation (recipes/bench/diagnostics_meta.py)"


def final_lr(args) -> float:
    """The learning rate at the last pretraining update (inverse-sqrt after 100 warm-up updates): the inner step's."""
    return args.lr * min(1.0, (100 / max(args.updates, 1)) ** 0.5)


def pretrain(data: Path, save: Path, name: str, info: dict, args) -> float:
    flags = [*SHAPE, *STARTS[name], *adam(args.lr)]
    if name == "meta":
        flags += ["--meta-langs", ",".join(info["train_langs"])]
    return fairseq_train(data, save, flags, args.updates, args.threads)


def finetune_curve(data: Path, start: Path, k: int, info: dict, args) -> dict:
    """Fine-tune ``start`` on ``k<K>`` (``ulr_finetune_translation``, fairseq's :class:`~fairseq.trainer.Trainer` in
    this process: the update of fairseq-train, without a process start per curve point) and score it after each of
    ``--steps``: {"curve": {steps: scores}, "seconds": training seconds}."""
    import time

    import numpy as np
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    flags = [*SHAPE, "--task", "ulr_finetune_translation", "--train-subset", f"k{k}", "--finetune-strategy",
             args.strategy, "--criterion", "metanmt_cross_entropy", "--optimizer", "adam", "--adam-betas",
             "(0.9,0.98)", "--lr", str(args.ft_lr), "--lr-scheduler", "fixed", "--max-tokens", "1024", "--cpu",
             "--seed", "1"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(
        options.get_training_parser(), [str(data), "--user-dir", str(PACKAGE), *flags]))
    np.random.seed(1)
    utils.set_torch_seed(1)
    task = tasks.setup_task(cfg.task)
    trainer = Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))
    trainer.load_checkpoint(str(start), reset_optimizer=True, reset_lr_scheduler=True, reset_meters=True)
    epoch_itr = trainer.get_train_iterator(epoch=1, load_dataset=True)
    curve, secs, last = {}, 0.0, max(args.steps)
    while trainer.get_num_updates() < last:
        itr = epoch_itr.next_epoch_itr(shuffle=True)
        trainer.begin_epoch(epoch_itr.epoch)
        for sample in itr:
            t0 = time.time()
            trainer.train_step([sample])
            secs += time.time() - t0
            steps = trainer.get_num_updates()
            if steps in args.steps:
                curve[str(steps)] = score_model(trainer.get_model(), task, info, k)
            if steps >= last:
                break
        epoch_itr = trainer.get_train_iterator(epoch_itr.next_epoch_idx, load_dataset=False)
    return {"curve": curve, "seconds": round(secs, 1)}


def decode(models, task) -> dict:
    """Greedy translations {test line: [words]} of the new language's test set."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    if "test" not in task.datasets:
        task.load_dataset("test")
    tgt = task.target_dictionary
    gen = SequenceGenerator(models, tgt, beam_size=1, max_len_a=1, max_len_b=2)
    itr = task.get_batch_iterator(task.dataset("test"), max_tokens=4096,
                                  max_positions=(1024, 1024)).next_epoch_itr(shuffle=False)
    hyps = {}
    with torch.no_grad():
        for sample in itr:
            for i, out in zip(sample["id"].tolist(), gen.generate(models, sample)):
                toks = out[0]["tokens"]
                hyps[i] = tgt.string(toks[toks != tgt.eos()]).split()
    return hyps


def score_model(model, task, info: dict, k: int = 0) -> dict:
    """:func:`fairseq_ext.tools.analysis.diagnostics_meta.token_accuracy` of ``model`` on the test set (split by the
    words ``k<K>`` shows when ``k``); the model is left in training mode."""
    raw = Path(info["bin"]).parent / "raw"
    refs, srcs = (raw / "test.en").read_text().splitlines(), (raw / "test.src").read_text().splitlines()
    seen = (raw / f"k{k}.src").read_text().splitlines() if k else ()
    new = info["new"]
    model.eval()
    try:
        hyps = decode([model], task)
    finally:
        model.train()
    misplaced = {int(c): s for c, s in info["misplaced"][new].items()}
    return token_accuracy(hyps, refs, srcs, info["lexicon"][new], misplaced, seen)


def zero_shot(ckpt: Path, info: dict) -> dict:
    from fairseq_ext.modules.checkpoint import load_ensemble

    models, _cfg, task = load_ensemble([str(ckpt)], arg_overrides={"data": info["bin"]}, frozen=True)
    return score_model(models[0], task, info)


def inner_step_probe(ckpt: Path, info: dict, lr: float, episodes: int = 16, sentences: int = 90) -> dict:
    """What one episode's language-specific learning (a fresh inner Adam step at ``lr`` on D over the fast
    parameters, Eq. 6.5, :func:`fairseq_ext.modules.meta_learning.language_specific_learning`) does at this start on
    the training languages: the D′ NLL (bits a token) of the right and the misplaced-and-seen-in-D source words before
    it, after it, and after the same step on Δε alone; and the mean norm of the step on the Δε rows of D's words
    against the norm of their ε^0 rows."""
    import numpy as np
    import torch
    from fairseq_ext.modules.checkpoint import load_ensemble
    from fairseq_ext.modules.meta_learning import ParameterPartition, language_specific_learning, model_partition

    models, _cfg, task = load_ensemble([str(ckpt)], arg_overrides={"data": info["bin"]}, frozen=False)
    model = models[0]
    for p in model.parameters():
        p.requires_grad_(True)
    model.train()
    task.load_dataset("train")
    ds, langs = task.datasets["train"], task.lang_ids["train"]
    ds = getattr(ds, "dataset", ds)
    src, pad = task.source_dictionary, task.target_dictionary.pad()
    wrong = {src.index(f"{w}__{g}") for g in info["train_langs"] for w, c in info["lexicon"][g].items()
             if str(c) in info["misplaced"][g]}
    part, emb = model_partition(model), model.encoder.embed_tokens
    delta_only = ParameterPartition(part.params, list(part.reset), part.meta, list(part.reset))
    rng = np.random.default_rng(1)
    sums = {"right": [0.0, 0.0, 0.0, 0], "misplaced_seen": [0.0, 0.0, 0.0, 0]}
    step, norm = [], []

    def nll(batch):
        lp = model.get_normalized_probs(model(**batch["net_input"]), log_probs=True)
        return -lp.gather(-1, batch["target"].unsqueeze(-1)).squeeze(-1)

    def loss_fn(batch):
        mask = batch["target"].ne(pad)
        return (nll(batch) * mask).sum(), mask.sum(), {}

    for ep in range(episodes):
        ids = np.flatnonzero(langs == ep % len(info["train_langs"]))
        d, d2 = (ds.collater([ds[int(i)] for i in rng.choice(ids, sentences, replace=False)]) for _ in range(2))
        seen = set(d["net_input"]["src_tokens"].flatten().tolist())
        kinds = [[("misplaced_seen" if t in seen else None) if t in wrong else "right" for t in row.tolist()
                  if t not in (src.pad(), src.eos())] for row in d2["net_input"]["src_tokens"]]
        theta = [p.detach().clone() for p in part.tensors("fast")]
        with torch.no_grad():
            before = nll(d2)
        after = []
        for which in (part, delta_only):
            with torch.no_grad():
                for p in part.tensors("reset"):
                    p.zero_()
            language_specific_learning(loss_fn, d, which, lr, 1, "adam")
            with torch.no_grad():
                after.append(nll(d2))
                rows = sorted(seen - {src.pad(), src.eos()})
                if which is part:
                    step.append(float(emb.delta.weight[rows].norm(dim=-1).mean()))
                    norm.append(float(emb.ulr(torch.tensor(rows)).norm(dim=-1).mean()))
                for p, t in zip(part.tensors("fast"), theta):
                    p.copy_(t)
                for p in part.tensors("reset"):
                    p.zero_()
        for i, row in enumerate(kinds):
            for j, kind in enumerate(row):
                if kind is not None:
                    c = sums[kind]
                    for m, x in enumerate((before, *after)):
                        c[m] += float(x[i, j])
                    c[3] += 1
    out = {k: [round(x / c[3] / np.log(2), 3) for x in c[:3]] for k, c in sums.items() if c[3]}
    return dict(out, lr=lr, delta_step_norm=round(float(np.mean(step)), 4), eps0_norm=round(float(np.mean(norm)), 3))


def run_task(task: str, args) -> list:
    out = Path(args.out) / task
    info = generate(task, str(out / "data"), seed=args.seed, shots=args.shots)
    data = Path(info["bin"])
    rows = []
    for name, *_ in SYSTEMS[task]:
        if args.systems and name not in args.systems:
            continue
        save = out / name
        row = cached(save, args)
        if row is not None:
            if "inner_step" not in row:  # a row cached before the probe
                row["inner_step"] = inner_step_probe(save / "checkpoint_last.pt", info, final_lr(args))
                save_row(save, row)
            rows.append(row)
            continue
        secs = pretrain(data, save, name, info, args)
        start = save / "checkpoint_last.pt"
        row = {"task": task, "system": name, "role": "start", "note": NOTES[name], "updates": args.updates,
               "seconds": round(secs, 1), "lr": args.lr, "zero_shot": zero_shot(start, info), "shots": {},
               "ft": {"lr": args.ft_lr, "strategy": args.strategy, "steps": args.steps}}
        for k in args.shots:
            row["shots"][str(k)] = finetune_curve(data, start, k, info, args)
        row["inner_step"] = inner_step_probe(start, info, final_lr(args))
        rows.append(save_row(save, row))
    return rows


# ------------------------------------------------------------------------------------------------ verdict, table
def verdicts(rows: list) -> dict:
    """K -> whether the meta start is ahead of the multilingual one (all-token accuracy) at the last step."""
    by = {r["system"]: r for r in rows}
    if not {"meta", "multi"} <= set(by):
        return {}
    out = {}
    for k, res in by["meta"]["shots"].items():
        last = str(max(int(s) for s in res["curve"]))
        base = by["multi"]["shots"].get(k, {}).get("curve", {}).get(last)
        out[k] = base is not None and res["curve"][last]["all"] > base["all"]
    return out


def cell(acc: dict) -> str:
    parts = [f"{fmt(acc['all'])} (exact {fmt(acc['exact'])}; right {fmt(acc.get('right'))}"]
    if "misplaced_seen" in acc or "misplaced_unseen" in acc:
        parts.append(f"misplaced seen {fmt(acc.get('misplaced_seen'))} / unseen {fmt(acc.get('misplaced_unseen'))})")
    else:
        parts.append(f"misplaced {fmt(acc.get('misplaced'))})")
    return "; ".join(parts)


def table(rows: list, info: dict, threads: int) -> str:
    b = info["bounds"]
    ok = verdicts(rows)
    lines = ["| K | ceiling (zero-shot: right share) | start | pretraining (updates; s) | test token accuracy after "
             "fine-tuning steps: 0 / ... | meta ahead at the last step |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| 0 | {fmt(b['right_share'])} | {r['system']}: {r['note']} | {r['updates']}; "
                     f"{r['seconds']:.0f} s | 0: {cell(r['zero_shot'])} | – |")
    for k in sorted({k for r in rows for k in r["shots"]}, key=int):
        for r in rows:
            res = r["shots"].get(k)
            if res is None:
                continue
            curve = "; ".join(f"{s}: {cell(a)}" for s, a in sorted(res["curve"].items(), key=lambda x: int(x[0])))
            verdict = pass_cell(ok[k]) if r["system"] == "meta" and k in ok else "–"
            lines.append(f"| {k} | {fmt(b['shots'][k]['ceiling'])} | {r['system']} | {r['updates']} | {curve} "
                         f"| {verdict} |")
    lines += ["", "One inner step (fresh Adam at the last pretraining lr, on D of 90 sentences of a training language; "
              "16 episodes): D′ NLL in bits a token before / after it / after the same step on Δε alone; the step's "
              "norm on Δε rows against ‖ε^0‖.", "",
              "| start | right words | misplaced words seen in D | ‖Δε step‖ / ‖ε^0‖ |", "|---|---|---|---|"]
    for r in rows:
        p = r.get("inner_step")
        if p:
            lines.append(f"| {r['system']} | {' / '.join(map(str, p['right']))} | "
                         f"{' / '.join(map(str, p['misplaced_seen']))} | {p['delta_step_norm']} / {p['eps0_norm']} |")
    ft = rows[0]["ft"] if rows else {}
    lines += ["", f"Fine-tuning: {ft.get('strategy')}, Adam {ft.get('lr')} constant, all K examples in every step. "
              + cpu_line(threads, ", shared machine (2 cores, several agents)")]
    return "\n".join(lines)


def options(ap) -> None:
    ap.add_argument("--updates", type=int, default=1000, help="pretraining updates of each start (default %(default)s)")
    ap.add_argument("--lr", type=float, default=3e-3, help="pretraining peak learning rate (default %(default)s)")
    ap.add_argument("--shots", type=int, nargs="+", default=[4, 8, 16], help="K (default %(default)s)")
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 5, 10, 20],
                    help="fine-tuning steps scored (default %(default)s)")
    ap.add_argument("--ft-lr", type=float, default=1e-3, help="fine-tuning learning rate (default %(default)s)")
    ap.add_argument("--strategy", default="emb+enc", choices=["all", "emb+enc", "emb"],
                    help="fine-tuning strategy (default %(default)s)")


def main(argv=None) -> int:
    args = parser(__doc__, SYSTEMS, "runs/diag_meta", "table", options).parse_args(argv)
    info = None
    for task in args.tasks:
        run_task(task, args)
        info = generate(task, str(Path(args.out) / task / "data"), seed=args.seed, shots=args.shots)
    rows = cached_rows(args.out, SYSTEMS)
    ok = verdicts(rows)
    for r in rows:
        r["pass"] = all(ok.values()) if ok else False
    return report(rows, table(rows, info, args.threads), args, START, END, TITLE)


if __name__ == "__main__":
    sys.exit(main())

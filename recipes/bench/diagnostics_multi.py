"""Diagnostics of the multilingual mechanisms of Gu (2019) ch. 5 (ULR, MoLE): each system trained on a synthetic
task of :mod:`fairseq_ext.tools.analysis.diagnostics_multi` (``ulr_cipher``, ``mole_shared``) beside the baseline the task
limits by construction, then decoded greedily and scored by word accuracy; the **Diagnostics: multilingual**
table of ``recipes/bench/RESULTS.md`` is rewritten from the results::

    .venv/bin/python recipes/bench/diagnostics_multi.py [--tasks ulr_cipher mole_shared] [--systems NAME ...]
        [--out runs/diagnostics_multi] [--updates 3000] [--curve-every 500] [--extend-failing 0]
        [--table recipes/bench/RESULTS.md]

Every system is a small ``universal_rnn`` (bi-LSTM encoder 64, 2-layer LSTM decoder 64, attention 64, no
dropout) trained from scratch with ``universal_translation`` for ``--updates`` updates (Adam 3e-3, inverse-sqrt
warm-up 100, ≤ 1,024 tokens, one torch thread). Scoring (in this process, fairseq's SequenceGenerator, beam 1):
the share of reference words reproduced at their position (the translation is word by word and monotone), per
source language, on the content words (``mole_shared``: the marker's position left out).

* ``ulr_cipher``: ``multi`` (Multi-NMT, Eq. 5.1), ``ulr`` (pure ULR, Eq. 5.2: ``--ulr-no-language-specific``),
  ``ulr_a`` (Eq. 5.5: α(x)·ε_E[x] + ULR). The zero-resource cipher ``zc`` is scored overall and on the words
  outside / inside its seed dictionary. Switch-off (every ULR row): the cipher's query rows set to zero at test
  time (q uniform: the universal part carries nothing), which must fall to the bound.
* ``mole_shared`` (every row pure ULR): ``ulr`` (no MoLE), ``ulr_mole`` (+ MoLE, gate loss weight 1),
  ``ulr_mole_gw0`` (+ MoLE without the gate loss of Eq. 5.7). Scored on
  the test twins and on the marker-free twins (``test1``: every row must stay ≤ 0.5, exactly); for MoLE also
  the gate's top expert per language (its own expert's share of the content tokens) and the switch-off: one
  expert forced for every token at test time (each expert in turn).

A row passes when it is on its side of the line: a mechanism ≥ ``--pass-at`` (0.9) with its switch-off at the
bound (cipher ≤ 0.02 = 6/C; ``mole_shared`` ≤ 0.5), a baseline at the bound. Results are cached per system
(``OUT/TASK/SYSTEM/result.json``); ``--force`` rescores. A mechanism that fails at ``--updates`` is trained on to
``--extend-failing`` updates (resumed) and scored on the way: the learning curve; its verdict stays the one at
``--updates``. Exit status 1 when a row fails.
"""
import sys
from pathlib import Path

from fairseq_ext.tools.analysis.diagnostics_multi import DEFAULTS, generate
from fairseq_ext.tools.analysis.diagnostics_runs import (
    adam, cpu_line, curve_checkpoints, fairseq_train, fmt, parser, pass_cell, pending, report, run_tasks, save_row,
)

SHAPE = ["--arch", "universal_rnn_tiny", "--encoder-embed-dim", "64", "--encoder-hidden-size", "64",
         "--attention-dim", "64", "--decoder-embed-dim", "64", "--decoder-hidden-size", "64",
         "--decoder-out-embed-dim", "64", "--dropout", "0.0"]
CE = ["--criterion", "cross_entropy"]
MOLE = ["--mole", "--criterion", "universal_mole_cross_entropy"]
PURE = ["--ulr", "--ulr-no-language-specific"]
# task -> [(system, flags, role, note)]; role: "baseline" (must stay at the bound), "mechanism" or "variant"
SYSTEMS = {
    "ulr_cipher": [
        ("multi", CE, "baseline", "Multi-NMT (Eq. 5.1), marked vocabulary"),
        ("ulr", PURE + CE, "mechanism", "ULR, pure (Eq. 5.2)"),
        ("ulr_a", ["--ulr"] + CE, "mechanism", "ULR + language-specific embedding (Eq. 5.5, α = top 500)"),
    ],
    "mole_shared": [
        ("ulr", PURE + CE, "baseline", "pure ULR, no MoLE"),
        ("ulr_mole", PURE + MOLE, "mechanism", "pure ULR + MoLE (Eqs. 5.6-5.7)"),
        ("ulr_mole_gw0", PURE + MOLE + ["--gate-loss-weight", "0"], "variant",
         "pure ULR + MoLE, gate loss weight 0 (no language supervision)"),
    ],
}
TASK_FLAGS = ["--task", "universal_translation", "--source-lang", "src", "--target-lang", "en"]
OPTIM = [*adam(3e-3), "--max-tokens", "1024"]
CIPHER_BOUND = 0.02  # 6/C at C = 300: the cipher rows of a model that carries no meaning of a cipher word
START, END = "<!-- diagnostics_multi:table -->", "<!-- /diagnostics_multi:table -->"


def train(data: Path, save: Path, flags: list, updates: int, threads: int, curve_every: int,
          marker: str = "train.done") -> float:
    """fairseq-train the shared shape with ``flags`` into ``save`` up to ``updates`` (:func:`fairseq_train`:
    skipped when ``marker`` exists, resumed by a later call with more updates and another marker)."""
    return fairseq_train(data, save, [*TASK_FLAGS, *SHAPE, *flags, *OPTIM], updates, threads, curve_every=curve_every,
                         marker=marker)


# ------------------------------------------------------------------------------------------------ scoring
def load(ckpt: Path, data: Path):
    from fairseq_ext.modules.checkpoint import load_ensemble

    models, _cfg, task = load_ensemble([str(ckpt)], arg_overrides={"data": str(data)}, frozen=True)
    return models[0], task


def cipher_off(model, task) -> None:
    """The universal part of the low-resource language switched off: its query rows zero (q uniform)."""
    emb = model.encoder.embed_tokens
    rows = (task.token_lang == task.lowres_index).nonzero(as_tuple=True)[0]
    emb.query[rows] = 0.0


def force_expert(k: int):
    def patch(model, task) -> None:
        gate = model.encoder.mole.gate
        gate.weight.data.zero_()
        gate.bias.data.fill_(-1e4)
        gate.bias.data[k] = 1e4
    return patch


def decode(model, task, split: str, gates: bool = False) -> dict:
    """Greedy hypotheses {line: [words]} of a split (and, with ``gates``, the gate's top expert of every source
    token: {line: [expert]}, padding and </s> left out)."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    task.load_dataset(split)
    ds = task.dataset(split)
    tgt = task.target_dictionary
    gen = SequenceGenerator([model], tgt, beam_size=1, max_len_a=1, max_len_b=2)
    itr = task.get_batch_iterator(ds, max_tokens=4096, max_positions=(1024, 1024)).next_epoch_itr(shuffle=False)
    hyps, tops = {}, {}
    with torch.no_grad():
        for sample in itr:
            out = gen.generate([model], sample)
            for i, sid in enumerate(sample["id"].tolist()):
                toks = out[i][0]["tokens"]
                hyps[sid] = tgt.string(toks[toks != tgt.eos()]).split()
            if gates:
                net = sample["net_input"]
                enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
                top = enc["mole_gate"][0].argmax(-1).t()  # (B, S)
                src = net["src_tokens"]
                keep = src.ne(task.source_dictionary.pad()) & src.ne(task.source_dictionary.eos())
                for i, sid in enumerate(sample["id"].tolist()):
                    tops[sid] = top[i][keep[i]].tolist()
    return {"hyps": hyps, "gates": tops}


def word_accuracy(hyps: dict, info: dict, split: str, raw: str) -> dict:
    """Per source language (and ``all``): the share of content reference words reproduced at their position;
    also by seed / non-seed word of each language's seed dictionary."""
    refs = Path(info["bin"]).parent.joinpath("raw", f"{raw}.en").read_text().splitlines()
    langs = Path(info["bin"]).joinpath(f"{split}.lang").read_text().splitlines()
    roles = info["roles"].get(raw) or [{"marker": None}] * len(refs)
    seed = {lang: {f"e{c}" for c in cs} for lang, cs in info["seed_concepts"].items()}
    acc: dict = {}
    for i, (ref, lang) in enumerate(zip(refs, langs)):
        hyp, ref = hyps[i], ref.split()
        for j, w in enumerate(ref):
            if j == roles[i]["marker"]:
                continue
            ok = int(j < len(hyp) and hyp[j] == w)
            keys = ["all", lang]
            if lang in seed:
                keys.append(f"{lang}:{'seed' if w in seed[lang] else 'non-seed'}")
            for k in keys:
                c = acc.setdefault(k, [0, 0])
                c[0] += ok
                c[1] += 1
    return {k: round(c / n, 4) for k, (c, n) in sorted(acc.items())}


def gate_usage(tops: dict, info: dict, split: str) -> dict:
    """Per auxiliary language: the share of its source tokens whose top gate is its own expert."""
    langs = Path(info["bin"]).joinpath(f"{split}.lang").read_text().splitlines()
    out: dict = {}
    for i, experts in tops.items():
        lang = langs[i]
        k = info["aux"].index(lang)
        c = out.setdefault(lang, [0, 0])
        c[0] += sum(e == k for e in experts)
        c[1] += len(experts)
    return {lang: round(c / n, 4) for lang, (c, n) in sorted(out.items())}


def score(ckpt: Path, info: dict, split: str, raw: str, patch=None, gates: bool = False) -> dict:
    model, task = load(ckpt, Path(info["bin"]))
    if patch is not None:
        patch(model, task)
    d = decode(model, task, split, gates=gates)
    res = {"accuracy": word_accuracy(d["hyps"], info, split, raw)}
    if gates:
        res["gate_own_expert"] = gate_usage(d["gates"], info, split)
    return res


def task_scores(task: str, name: str, flags: list, ckpt: Path, info: dict) -> dict:
    """Every score a row of ``task`` reports for one checkpoint."""
    mole = "--mole" in flags
    res = {"test": score(ckpt, info, "test", "test", gates=mole)}
    if task == "ulr_cipher" and "--ulr" in flags:
        res["switch_off"] = score(ckpt, info, "test", "test", patch=cipher_off)
    if task == "mole_shared":
        res["blind"] = score(ckpt, info, "test1", "test_blind")
        if mole:
            res["forced"] = {lang: score(ckpt, info, "test", "test", patch=force_expert(k))
                             for k, lang in enumerate(info["aux"])}
    return res


def verdict(task: str, role: str, res: dict, pass_at: float) -> bool:
    acc = res["test"]["accuracy"]
    if task == "ulr_cipher":
        if role == "baseline":
            return acc["zc"] <= CIPHER_BOUND
        return acc["zc"] >= pass_at and res["switch_off"]["accuracy"]["zc"] <= CIPHER_BOUND
    blind_ok = res["blind"]["accuracy"]["all"] <= 0.5  # over the twins: a blind model may favour one language
    if role == "baseline":
        return blind_ok
    if role == "variant":  # no gate supervision: translation only
        return blind_ok and all(v >= pass_at for v in acc.values())
    forced = res.get("forced", {})
    sep = all(f["accuracy"][lang] >= pass_at and all(v <= 0.5 for g, v in f["accuracy"].items() if g != lang)
              for lang, f in forced.items())
    return blind_ok and sep and all(v >= pass_at for v in acc.values()) and \
        all(v >= pass_at for v in res["test"].get("gate_own_expert", {}).values())


def run_task(task: str, args) -> list:
    out = Path(args.out) / task
    info = generate(task, str(out / "data"), seed=args.seed, n_train=args.n_train, n_valid=args.n_valid,
                    n_test=args.n_test)
    data = Path(info["bin"])
    rows = []
    for save, name, flags, role, note in pending(SYSTEMS[task], out, args, rows):
        secs = train(data, save, flags, args.updates, args.threads, args.curve_every)
        ckpt = save / "checkpoint_last.pt"
        if (save / f"extend{args.extend_failing}.done").exists():  # trained on earlier: its update-N checkpoint
            ckpt = next(save.glob(f"checkpoint_*_{args.updates}.pt"))
        res = task_scores(task, name, flags, ckpt, info)
        if role != "baseline" and not verdict(task, role, res, args.pass_at) and args.extend_failing > args.updates:
            # a failing mechanism trains on (resumed): the learning curve says whether it is a slow learner
            train(data, save, flags, args.extend_failing, args.threads, args.curve_every,
                  marker=f"extend{args.extend_failing}.done")
        extended = None
        if (save / f"extend{args.extend_failing}.done").exists():  # every score again at the curve's end
            extended = dict(updates=args.extend_failing, **task_scores(task, name, flags, save / "checkpoint_last.pt",
                                                                       info))
        curve = {}
        for upd, c in curve_checkpoints(save):
            if upd != args.updates and upd <= max(args.updates, args.extend_failing):
                curve[upd] = score(c, info, "test", "test")["accuracy"]
        curve[args.updates] = res["test"]["accuracy"]
        curve = dict(sorted(curve.items()))
        row = {"task": task, "system": name, "role": role, "note": note, "flags": flags, "updates": args.updates,
               "seconds": round(secs, 1), "bound": info["bound"], "ulr": {k: info["ulr"].get(k) for k in
                                                                          ("seed_pairs", "seed_p_at_1", "M")},
               **res, "curve": curve}
        if extended:
            row["extended"] = extended
        row["pass"] = verdict(task, role, res, args.pass_at)
        rows.append(save_row(save, row))
    return rows


# ------------------------------------------------------------------------------------------------ table
def row_cells(r: dict) -> tuple:
    """(accuracy, switch-off, gate) cells of a row; a row trained on past its verdict adds its scores there."""
    cells = _cells(r)
    if "extended" not in r:
        return cells
    at = _cells(dict(r, **r["extended"]))
    return tuple(c if a == "–" else f"{c}; at {r['extended']['updates']}: {a}" for c, a in zip(cells, at))


def _cells(r: dict) -> tuple:
    acc = r["test"]["accuracy"]
    if r["task"] == "ulr_cipher":
        main = f"zc {fmt(acc.get('zc'))} (non-seed {fmt(acc.get('zc:non-seed'))}, seed {fmt(acc.get('zc:seed'))}); " \
               f"sa {fmt(acc.get('sa'))}"
        off = f"zc {fmt(r['switch_off']['accuracy'].get('zc'))}" if "switch_off" in r else "–"
        return main, off, "–"
    blind = r["blind"]["accuracy"]
    main = f"la {fmt(acc.get('la'))} / lb {fmt(acc.get('lb'))}; marker-free twins: {fmt(blind.get('all'))} " \
           f"(la {fmt(blind.get('la'))} / lb {fmt(blind.get('lb'))})"
    off = "; ".join(f"{lang}'s expert forced: la {fmt(f['accuracy'].get('la'))} / lb {fmt(f['accuracy'].get('lb'))}"
                    for lang, f in r.get("forced", {}).items()) or "–"
    gates = r["test"].get("gate_own_expert")
    extra = " / ".join(f"{k} {v:.3f}" for k, v in gates.items()) if gates else "–"
    return main, off, extra


def curve_text(r: dict) -> str:
    key = "zc" if r["task"] == "ulr_cipher" else None
    out = []
    for upd, acc in sorted((int(k), v) for k, v in r["curve"].items()):
        vals = [acc[key]] if key else [acc[k] for k in ("la", "lb") if k in acc]
        out.append(f"{upd}: {sum(vals) / len(vals):.2f}")
    return ", ".join(out) if len(out) > 1 else "–"


def table(rows: list, threads: int) -> str:
    lines = ["| task | bound | system | role | word accuracy (test) | switch-off | gate: own expert's share | pass "
             "| curve (zc / mean la, lb) | budget (updates; s) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    bounds = {"ulr_cipher": f"≈ 1/300 = 0.003 (zc; line {CIPHER_BOUND})", "mole_shared": "0.500 (exact, twins)"}
    for r in rows:
        main, off, extra = row_cells(r)
        lines.append(f"| {r['task']} | {bounds[r['task']]} | {r['system']}: {r['note']} | {r['role']} | {main} "
                     f"| {off} | {extra} | {pass_cell(r['pass'])} | {curve_text(r)} "
                     f"| {r['updates']}; {r['seconds']:.0f} s |")
    lines += ["", cpu_line(threads, ", shared machine")]
    return "\n".join(lines)


TITLE = "Diagnostics: multilingual (recipes/bench/diagnostics_multi.py)"


def options(ap) -> None:
    ap.add_argument("--n-train", type=int, default=DEFAULTS["n_train"])
    ap.add_argument("--n-valid", type=int, default=DEFAULTS["n_valid"])
    ap.add_argument("--n-test", type=int, default=DEFAULTS["n_test"])
    ap.add_argument("--updates", type=int, default=3000)
    ap.add_argument("--curve-every", type=int, default=500, help="also score every N updates (0 = off)")
    ap.add_argument("--extend-failing", type=int, default=0,
                    help="train a failing mechanism on to N updates, scored every --curve-every (the verdict stays the "
                         "one at --updates)")


def main(argv=None) -> int:
    args = parser(__doc__, SYSTEMS, "runs/diagnostics_multi", "multilingual diagnostics table",
                  options).parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    rows = run_tasks(args, run_task, SYSTEMS)
    for r in rows:  # the verdict of the current criteria
        r["pass"] = verdict(r["task"], r["role"], r, args.pass_at)
    return report(rows, table(rows, args.threads), args, START, END, TITLE)


if __name__ == "__main__":
    sys.exit(main())

"""Diagnostics of three architecture mechanisms: Bi-MSMT's conversation context (Maruf ch. 5), the lexical module
(Nguyen ch. 5) and untied positions (Nguyen ch. 7): each system trained on a synthetic task of
:mod:`fairseq_ext.tools.analysis.diagnostics_arch` (``conv_register``, ``rare_lex``, ``position_perm``) beside the
baseline the task limits, decoded greedily with fairseq-generate and scored on the task's probes; the
**Diagnostics: conversations, rare words, positions** table of ``recipes/bench/RESULTS.md`` is rewritten::

    .venv/bin/python recipes/bench/diagnostics_arch.py [--tasks conv_register rare_lex position_perm]
        [--systems NAME ...] [--out runs/diagnostics_arch] [--updates N] [--table recipes/bench/RESULTS.md]

* ``conv_register``: ``bimsmt_tiny`` (emb/hidden 32, Lang-Specific Sentence-Attention source context, InitDec,
  NMT-encoder sentence vectors) trained with its context (``bimsmt``) and with ``--zero-context`` (``sentence``:
  the two base models); the context model is also decoded with ``--zero-context`` (switch-off). Probe: the
  pronoun form of the second turn. Bound 0.500 (twins).
* ``rare_lex``: ``transformer_lex`` (2+2 layers, d 64, 2 heads) with ``--lexical`` (``lex``) and ``--no-lexical``
  (``nolex``). Rare-word accuracy by training count k ∈ {1, 2, 4}. No clean bound: the row compares.
* ``position_perm``: ``transformer_twt`` (sinusoidal positions added to the input, ``tied``),
  ``transformer_untied_pos`` (``untied``, Eq. 7.6) and ``transformer_twt --no-token-positional-embeddings``
  (``blind``, the bound's model). Word accuracy at position.

Optimisation: Adam 1e-2 (the transformers 1e-3), inverse-sqrt warm-up 100, ≤ 1,024 tokens (Bi-MSMT 256), one torch thread,
``--updates`` updates per task (defaults in ``UPDATES``). A mechanism passes at ≥ ``--pass-at`` (0.9; ``rare_lex``:
rare-word accuracy above the baseline's) with its switch-off or baseline at the bound (≤ 0.5 + 0.02; position:
≤ the blind bound + 0.05). Results are cached per system (``OUT/TASK/SYSTEM/result.json``); ``--force`` rescores.
"""
import re
import sys
from pathlib import Path

from fairseq_ext.tools.analysis.diagnostics_arch import generate, probe_scores
from fairseq_ext.tools.analysis.diagnostics_runs import (
    BIN, PACKAGE, adam, cpu_line, fairseq_train, fmt, parser, pass_cell, pending, report, run, run_tasks, save_row,
)

CONV = ["--task", "conversation_translation", "--arch", "bimsmt_tiny", "--encoder-embed-dim", "32",
        "--encoder-hidden-size", "32", "--attention-dim", "32", "--criterion", "conversation_cross_entropy"]
TRANSFORMER = ["--task", "translation", "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64",
               "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
               "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0.0",
               "--share-all-embeddings", "--criterion", "cross_entropy"]
LSTM = ["--task", "translation", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64", "--encoder-hidden-size",
        "64", "--decoder-hidden-size", "64", "--decoder-out-embed-dim", "64", "--dropout", "0.0", "--criterion",
        "cross_entropy"]
# task -> [(system, train flags, role, note)]; role: "baseline" (must stay at the bound), "mechanism", "compare"
SYSTEMS = {
    "conv_register": [
        ("sentence", CONV + ["--zero-context"], "baseline", "Bi-MSMT with --zero-context (the two base models)"),
        ("bimsmt", CONV, "mechanism", "Bi-MSMT, Lang-Specific Sentence-Attention source context (lang_sent_attn) + InitDec"),
    ],
    "rare_lex": [
        ("nolex", TRANSFORMER + ["--arch", "transformer_lex", "--no-lexical"], "compare", "transformer, no lexical module"),
        ("lex", TRANSFORMER + ["--arch", "transformer_lex"], "mechanism", "transformer + lexical module (§5.4)"),
        ("lstm_nolex", LSTM + ["--arch", "lstm_luong_fixnorm"], "compare",
         "Luong LSTM, fixnorm (2 x 64), no lexical module"),
        ("lstm_lex", LSTM + ["--arch", "lstm_luong_fixnorm_lex"], "mechanism",
         "Luong LSTM, fixnorm + lexical module (§5.5.3)"),
    ],
    "position_perm": [
        ("blind", TRANSFORMER + ["--arch", "transformer_twt", "--no-token-positional-embeddings"], "baseline",
         "transformer without positions"),
        ("tied", TRANSFORMER + ["--arch", "transformer_twt"], "mechanism", "transformer, sinusoidal positions at the input"),
        ("untied", TRANSFORMER + ["--arch", "transformer_untied_pos"], "mechanism", "untied positions (Eq. 7.6)"),
    ],
}
COMPARED_WITH = {"lstm_lex": "lstm_nolex"}  # rare_lex: a mechanism row -> its baseline row (default nolex)
UPDATES = {"conv_register": 1000, "rare_lex": 800, "position_perm": 800}
LR = {"conv_register": 1e-2, "rare_lex": 1e-3, "position_perm": 1e-3}
MAX_TOKENS = {"conv_register": 256, "rare_lex": 1024, "position_perm": 1024}  # Bi-MSMT: small batches, more updates
START, END = "<!-- diagnostics_arch:table -->", "<!-- /diagnostics_arch:table -->"
TITLE = "Diagnostics: conversations, rare words, positions (recipes/bench/diagnostics_arch.py)"


def train(data: Path, save: Path, flags: list, updates: int, lr: float, threads: int, max_tokens: int) -> float:
    """fairseq-train into ``save`` (:func:`fairseq_train`: skipped when ``train.done`` exists); returns fairseq's
    training seconds."""
    fairseq_train(data, save, [*flags, *adam(lr), "--max-tokens", str(max_tokens)], updates, threads)
    m = re.findall(r"done training in ([\d.]+) seconds", (save / "train.log").read_text(errors="replace"))
    return float(m[-1]) if m else 0.0


def decode(data: Path, ckpt: Path, flags: list, out: Path, threads: int, extra=()) -> dict:
    """Greedy fairseq-generate of the test split: {line id: hypothesis}."""
    task = flags[flags.index("--task") + 1]
    cmd = [BIN / "fairseq-generate", data, "--user-dir", PACKAGE, "--task", task, "--path", ckpt,
           "--gen-subset", "test", "--beam", "1", "--max-len-a", "1", "--max-len-b", "4", "--batch-size", "64",
           "--cpu", *extra]
    if out.exists():
        out.unlink()
    run(cmd, out, threads)
    hyps = {}
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith("H-"):
            head, _, text = line.split("\t", 2)
            hyps[int(head[2:])] = text
    return hyps


def scores(task: str, info: dict, data: Path, ckpt: Path, flags: list, out: Path, threads: int, extra=()) -> dict:
    refs = (Path(info["bin"]).parent / "raw" / "test.tgt").read_text().splitlines()
    return probe_scores(task, info, decode(data, ckpt, flags, out, threads, extra), refs)


def verdict(task: str, role: str, res: dict, rows: dict, pass_at: float, info: dict) -> bool:
    acc = res["test"]["all"]
    if task == "conv_register":
        if role == "baseline":
            return acc <= 0.52
        return acc >= pass_at and res["switch_off"]["all"] <= 0.52
    if task == "rare_lex":
        base = rows.get(COMPARED_WITH.get(res.get("system"), "nolex"))
        return role == "compare" or (base is not None and acc > base["test"]["all"])
    line = info["blind_bound"] + 0.05
    return acc <= line if role == "baseline" else acc >= pass_at


def run_task(task: str, args) -> list:
    out = Path(args.out) / task
    info = generate(task, str(out / "data"), seed=args.seed)
    data = Path(info["bin"])
    updates = args.updates or UPDATES[task]
    rows = []
    for save, name, flags, role, note in pending(SYSTEMS[task], out, args, rows):
        secs = train(data, save, flags, updates, LR[task], args.threads, MAX_TOKENS[task])
        ckpt = save / "checkpoint_last.pt"
        res = {"test": scores(task, info, data, ckpt, flags, save / "test.gen", args.threads)}
        if task == "conv_register" and role == "mechanism":  # the context switched off at test time
            res["switch_off"] = scores(task, info, data, ckpt, flags, save / "test_off.gen", args.threads,
                                       ["--model-overrides", "{'zero_context': True}"])
        row = {"task": task, "system": name, "role": role, "note": note, "flags": flags, "updates": updates,
               "seconds": round(secs, 1), "bound": info["bound"], "blind_bound": info.get("blind_bound"), **res}
        rows.append(save_row(save, row))
    return rows


# ------------------------------------------------------------------------------------------------ table
BOUND_CELL = {"conv_register": "0.500 (exact, twins)", "rare_lex": "none (measured gap)"}


def cells(r: dict) -> tuple:
    t = r["test"]
    if r["task"] == "conv_register":
        by = " / ".join(f"{k} {fmt(v)}" for k, v in t.items() if k != "all")
        off = f"{fmt(r['switch_off']['all'])}" if "switch_off" in r else "–"
        return f"{fmt(t['all'])} ({by})", off
    if r["task"] == "rare_lex":
        by = " / ".join(f"{k} {fmt(t.get(k))}" for k in ("k1", "k2", "k4"))
        return f"rare {fmt(t['all'])} ({by}); frequent {fmt(t.get('frequent'))}", "–"
    return fmt(t["all"]), "–"


def table(rows: list, threads: int) -> str:
    lines = ["| task | bound | system | role | accuracy (test) | context off at test time | pass | budget (updates; s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        main, off = cells(r)
        bound = BOUND_CELL.get(r["task"]) or f"{fmt(r['blind_bound'])} (position-blind)"
        lines.append(f"| {r['task']} | {bound} | {r['system']}: {r['note']} | {r['role']} | {main} | {off} "
                     f"| {pass_cell(r['pass'])} | {r['updates']}; {r['seconds']:.0f} s |")
    lines += ["", cpu_line(threads, ", shared machine")]
    return "\n".join(lines)


def options(ap) -> None:
    ap.add_argument("--updates", type=int, default=0, help="updates per system (default: the task's, UPDATES)")


def main(argv=None) -> int:
    args = parser(__doc__, SYSTEMS, "runs/diagnostics_arch", "table", options).parse_args(argv)
    rows = run_tasks(args, run_task, SYSTEMS)
    by_name = {(r["task"], r["system"]): r for r in rows}
    for r in rows:  # the verdict of the current criteria
        info = {"blind_bound": r.get("blind_bound")}
        r["pass"] = verdict(r["task"], r["role"], r, {s: x for (t, s), x in by_name.items() if t == r["task"]},
                            args.pass_at, info)
    return report(rows, table(rows, args.threads), args, START, END, TITLE)


if __name__ == "__main__":
    sys.exit(main())

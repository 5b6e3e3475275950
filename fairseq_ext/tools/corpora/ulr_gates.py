"""``fairseq-ext-ulr gates``: the mixture-of-language-experts gate of a ``universal_rnn --mole`` checkpoint
(Gu 2019 thesis ch. 5, Eq. 5.6, Fig. 5.8): softmax_k(g(h)) of every source piece of some test sentences over
the K auxiliary languages, as JSON Lines, one heatmap per sentence, and a summary (mean gate, top-expert
share, saturation, entropy).
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Optional

import numpy as np

from fairseq_ext.tools.common import ToolError, atomic_write, log, read_lines
from fairseq_ext.tools.corpora.ulr_files import SUFFIX, WORD_START, require_data


def _gate_sentences(data: str, split: str, n: Optional[int], ids_arg: Optional[str],
                    size: int) -> list[tuple[int, str]]:
    """[(index in the split, verse id)]: the first ``n`` sentences, or those of the verse ids ``ids_arg``
    (DIR/raw/<split>.ids, else DIR/bin/<split>.ids; an id matches with or without its ``lang:`` prefix)."""
    root = os.path.dirname(os.path.abspath(data))
    ids_path = next((p for p in (os.path.join(root, "raw", f"{split}.ids"), os.path.join(data, f"{split}.ids"))
                     if os.path.isfile(p)), None)
    verse_ids = read_lines(ids_path) if ids_path else []
    if verse_ids and len(verse_ids) != size:
        raise ToolError(f"{len(verse_ids)} ids but the binarized {split} split has {size} sentences", ids_path)
    name = (lambda i: verse_ids[i]) if verse_ids else str
    if not ids_arg:
        if n > size:
            log(f"[ulr gates] --n {n}: the {split} split has only {size} sentences")
        return [(i, name(i)) for i in range(min(n, size))]
    if not verse_ids:
        raise ToolError(f"--ids needs the verse ids of the {split} split: no "
                        f"{os.path.join(root, 'raw', split + '.ids')} (nor {os.path.join(data, split + '.ids')})")
    index: dict[str, int] = {}
    for i, v in enumerate(verse_ids):
        index.setdefault(v, i)
        index.setdefault(v.split(":", 1)[-1], i)
    out = []
    for v in (x.strip() for x in ids_arg.split(",")):
        if not v:
            continue
        if v not in index:
            raise ToolError(f"verse id {v!r} is not in the {split} split", ids_path)
        out.append((index[v], verse_ids[index[v]]))
    if not out:
        raise ToolError("--ids names no verse")
    return out


def mole_gates(model, task, split: str, indices: list[int]) -> list[dict]:
    """Per sentence (in ``indices`` order): the source pieces (padding and </s> dropped), the sentence language
    and softmax_k(g(h)) of every piece over the K experts (the auxiliary languages) — Eq. 5.6's gate."""
    import torch

    ds = task.dataset(split)
    sample = ds.collater([ds[i] for i in indices])
    src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    with torch.no_grad():
        enc = model.encoder(src_tokens, src_lengths=src_lengths)
    gate = torch.softmax(enc["mole_gate"][0].float(), dim=-1).transpose(0, 1)  # (B, S, K)
    langs = enc["src_lang"][0].tolist()
    d = task.source_dictionary
    rows = {}
    for b, sid in enumerate(sample["id"].tolist()):
        keep = [j for j, t in enumerate(src_tokens[b].tolist()) if t not in (d.pad(), d.eos())]
        symbols = [d[src_tokens[b, j]] for j in keep]
        lang = task.langs[langs[b]] if 0 <= langs[b] < len(task.langs) else None
        rows[sid] = {"lang": lang, "symbols": symbols,
                     "pieces": [s.rpartition(SUFFIX)[0] if SUFFIX in s else s for s in symbols],
                     "gates": gate[b, keep].tolist()}
    return [rows[i] for i in indices]


def plot_gates(path: str, records: list[dict], experts: list[str]) -> None:
    """One heatmap per sentence (experts × source pieces, softmax of the gate in [0, 1]) stacked in one PNG."""
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    widest = max(len(r["pieces"]) for r in records)
    K = len(experts)
    fig, axes = plt.subplots(len(records), 1, squeeze=False, layout="constrained",
                             figsize=(max(5.0, 0.32 * widest + 2.5), len(records) * (0.35 * K + 1.9) + 0.6))
    try:
        im = None
        for ax, r in zip(axes[:, 0], records):
            g = np.asarray(r["gates"], dtype=np.float32).reshape(-1, K).T  # (K, T)
            im = ax.imshow(g, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_yticks(range(K))
            ax.set_yticklabels(experts, fontsize=8)
            ax.set_xticks(range(len(r["pieces"])))
            ax.set_xticklabels(r["pieces"], rotation=90, fontsize=7)
            ax.set_title(f"{r['id']} ({r['lang'] or '?'})", fontsize=9)
        fig.colorbar(im, ax=axes[:, 0].tolist(), fraction=0.02, label="softmax(g(h))")
        fig.suptitle("MoLE gate activations per source piece (Fig. 5.8)", fontsize=10)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def cmd_gates(a) -> None:
    import argparse
    import json

    from fairseq import utils

    import fairseq_ext
    from fairseq_ext.modules.checkpoint import load_ensemble

    require_data(a.data)
    utils.import_user_module(argparse.Namespace(user_dir=os.path.dirname(os.path.abspath(fairseq_ext.__file__))))
    models, _cfg, task = load_ensemble([a.path], arg_overrides={"data": a.data}, frozen=True)
    model = models[0]
    if getattr(getattr(model, "encoder", None), "mole", None) is None:
        raise ToolError("not a universal_rnn checkpoint with MoLE (trained without --mole): it has no gate to "
                        "export", a.path)
    experts = list(task.aux_langs)
    if model.encoder.num_experts != len(experts):
        raise ToolError(f"the checkpoint has {model.encoder.num_experts} experts but the task names "
                        f"{len(experts)} auxiliary languages ({', '.join(experts)}): another data folder?", a.path)
    task.load_dataset(a.split)
    picked = _gate_sentences(a.data, a.split, a.n, a.ids, len(task.dataset(a.split)))
    records = []
    for (i, vid), r in zip(picked, mole_gates(model, task, a.split, [i for i, _ in picked])):
        records.append({"index": i, "id": vid, "lang": r["lang"], "experts": experts,
                        "src": "".join(r["pieces"]).replace(WORD_START, " ").strip(),
                        "tokens": [{"piece": p, "symbol": s, "gate": [round(x, 6) for x in g],
                                    "top": experts[int(np.argmax(g))]}
                                   for p, s, g in zip(r["pieces"], r["symbols"], r["gates"])]})
    with atomic_write(a.json) as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    shown = records if a.plot_n is None else records[:a.plot_n]
    plot_gates(a.plot, [{"id": r["id"], "lang": r["lang"], "pieces": [t["piece"] for t in r["tokens"]],
                         "gates": [t["gate"] for t in r["tokens"]]} for r in shown], experts)
    summary = gate_summary(records, experts)
    if a.summary:
        with atomic_write(a.summary) as f:
            f.write(json.dumps(summary, indent=1) + "\n")
    for rec in records:
        share = Counter(t["top"] for t in rec["tokens"])
        log(f"[ulr gates] {rec['id']} ({rec['lang']}): {len(rec['tokens'])} pieces, top expert per piece "
            + ", ".join(f"{e} {share.get(e, 0)}" for e in experts))
    log(f"[ulr gates] {len(records)} sentences of {a.split} -> {a.json}, {a.plot}"
        + (f" (the first {len(shown)})" if len(shown) < len(records) else ""))
    log(f"[ulr gates] over {summary['pieces']} pieces: mean gate "
        + ", ".join(f"{e} {summary['mean_gate'][e]:.3f}" for e in experts) + "; top expert "
        + ", ".join(f"{e} {summary['top_share'][e]:.3f}" for e in experts)
        + f"; max gate > 0.99 for {summary['saturated_share']:.3f}; mean entropy {summary['mean_entropy']:.3f} nats")


def gate_summary(records: list[dict], experts: list[str]) -> dict:
    """Over every piece of ``records`` (cmd_gates's): the mean gate per expert, the share of pieces whose top expert
    it is, the share of saturated pieces (max gate > 0.99) and the mean gate entropy (nats; ln K = uniform)."""
    g = np.asarray([t["gate"] for r in records for t in r["tokens"]], dtype=np.float64).reshape(-1, len(experts))
    if not len(g):
        raise ToolError("no source piece in the chosen sentences: nothing to summarise")
    top = g.argmax(1)
    return {"sentences": len(records), "pieces": int(len(g)),
            "mean_gate": {e: float(g[:, k].mean()) for k, e in enumerate(experts)},
            "top_share": {e: float((top == k).mean()) for k, e in enumerate(experts)},
            "saturated_share": float((g.max(1) > 0.99).mean()),
            "mean_entropy": float(-(g * np.log(np.clip(g, 1e-12, None))).sum(1).mean())}

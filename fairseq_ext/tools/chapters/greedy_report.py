"""The report of Gu (2019) ch. 7, trainable greedy decoding (``recipes/gu/ch7.sh``; ``python
examples/trainable_greedy/report.py``): Fig. 7.3, Fig. 7.4, Fig. 7.5, cost.

Reads the test decodes ``DECODE_DIR/<system>.<greedy|beam>/generate-test.txt`` (sentencepiece pieces in the
H-lines; ``plain`` = the frozen NMT without an actor), the actors' training logs and the decode-time table, and
writes ``OUT/results.md`` (+ ``results.json``, ``fig7_3_deltas.png``, ``fig7_4_curves.png``, ``influence.md``):

* Fig. 7.3 layout: per actor and search (greedy, beam), BLEU / chrF (sacreBLEU) with the paired bootstrap against
  the plain decoder of the same search, and the perplexity of the output under the frozen NMT,
  ppl = exp(−mean_s r_s) with r_s = (1/|Ŷ_s|) Σ_t log p_θ(ŷ_t | ŷ_<t, X_s) (⟨eos⟩ included: the criterion's
  ``perplexity`` objective), with a paired bootstrap of the difference of mean r (same resampling scheme as
  sacreBLEU's: p = (1 + #{|δ* − δ̄*| ≥ |δ|}) / (1 + n));
* Fig. 7.4: validation BLEU+1 (the criterion's validation reward: greedy with the actor on the valid verses the
  training keeps) against updates, for every BLEU-objective actor, beside the plain greedy NMT's value on the same
  verses (computed here with the actor switched off);
* Fig. 7.5: the tokens of the bleu actor's greedy test outputs whose influence KL exceeds the threshold (counts and
  the most influenced words, three example sentences);
* the decode-time table of ``recipes/bench/decode_speed.py``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter

import numpy as np
import torch

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.tools.evaluation import fairseq_log
from fairseq_ext.tools.common import ToolError, log, run_cli
from fairseq_ext.tools.hypotheses import parse_generate_output, remove_bpe
from fairseq_ext.tools.plots import pyplot
from fairseq_ext.tools.evaluation.score import load_references, paired_bootstrap

SEARCHES = ("greedy", "beam")


def read_decode(path: str) -> dict[int, str]:
    """``{id: sentencepiece pieces of the best hypothesis}`` of a fairseq-generate output."""
    return {i: (e.hypo_tok or "") for i, e in parse_generate_output(path).items()}


def detok(pieces: str) -> str:
    return remove_bpe(pieces, "sentencepiece") if "\u2581" in pieces else pieces.strip()


@torch.no_grad()
def sentence_log_probs(model, task, split: str, hyps: dict[int, str], batch: int = 64) -> np.ndarray:
    """(N,) r_s = (1/|Ŷ_s|) Σ_t log p(ŷ_t | ŷ_<t, X_s) of every hypothesis (⟨eos⟩ included) under ``model``,
    in id order; the sources are the binarized ``split`` of ``task``."""
    ds = task.dataset(split)
    d = task.target_dictionary
    out = np.zeros(len(hyps))
    ids = sorted(hyps)
    if ids != list(range(len(ds))):
        raise ToolError(f"the decodes cover {len(ids)} sentences, the {split} split has {len(ds)}")
    for k in range(0, len(ids), batch):
        items = []
        for i in ids[k:k + batch]:
            item = dict(ds[i])
            item["target"] = d.encode_line(hyps[i], add_if_not_exist=False, append_eos=True).long()
            items.append(item)
        sample = ds.collater(items)
        net = sample["net_input"]
        lp = model.get_normalized_probs(model(**net), log_probs=True)
        tgt = sample["target"]
        mask = tgt.ne(d.pad())
        tok = lp.float().gather(-1, tgt.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0.0)
        r = tok.sum(1) / mask.sum(1).clamp(min=1)
        for j, sid in enumerate(sample["id"].tolist()):
            out[sid] = float(r[j])
    return out


def paired_bootstrap_mean(base: np.ndarray, system: np.ndarray, n: int, seed: int = 12345) -> dict:
    """Paired bootstrap of mean(system) − mean(base) over sentences (Koehn 2004, sacreBLEU's p-value)."""
    rng = np.random.default_rng(seed)
    N = len(base)
    delta = float(system.mean() - base.mean())
    idx = rng.integers(0, N, size=(n, N))
    deltas = system[idx].mean(1) - base[idx].mean(1)
    centred = deltas - deltas.mean()
    p = (1 + int((np.abs(centred) >= abs(delta)).sum())) / (1 + n) if delta != 0 else 1.0
    return {"delta": delta, "p_value": p, "ci95": [float(np.percentile(deltas, 2.5)),
                                                   float(np.percentile(deltas, 97.5))]}


def validation_curve(log_path: str) -> list[tuple[int, float]]:
    """[(num_updates, validation reward)] from a fairseq-train log of the actor_critic criterion."""
    with open(log_path, encoding="utf-8") as f:
        return [(int(v["num_updates"]), v["reward"]) for v in fairseq_log.validations(f.read())
                if v["subset"] == "valid" and "reward" in v and "num_updates" in v]


@torch.no_grad()
def plain_validation_reward(actor_ckpt: str, batch: int = 64) -> float:
    """The criterion's validation reward of the frozen NMT alone (the actor switched off) on the valid verses the
    actor's training kept: the flat line of Fig. 7.4 (the value an actor has at update 0, its output layer being
    zero-initialised)."""
    models, cfg, task = load_ensemble([actor_ckpt], frozen=True)
    model = models[0]
    model.set_actor_enabled(False)
    criterion = task.build_criterion(cfg.criterion)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    itr = task.get_batch_iterator(ds, max_sentences=batch, max_positions=(cfg.task.max_source_positions,
                                                                             cfg.task.max_target_positions),
                                  ignore_invalid_inputs=True, seed=1).next_epoch_itr(shuffle=False)
    total, n = 0.0, 0
    for sample in itr:
        _, _, out = criterion(model, sample)
        total += out["reward"]
        n += out["reward_n"]
    return total / max(n, 1)


def influence_summary(path: str, hyps: dict[int, str], n_examples: int = 3) -> str:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            sid, pos, tok, kl, flag = line.rstrip("\n").split("\t")
            rows.append((int(sid), int(pos), tok, float(kl), flag == "1"))
    if not rows:
        return "(no influence lines)\n"
    flagged = [r for r in rows if r[4]]
    kls = np.array([r[3] for r in rows])
    top = Counter(r[2] for r in flagged).most_common(15)
    per_sent = Counter(r[0] for r in flagged)
    lines = [f"{len(flagged)} of {len(rows)} output tokens ({100 * len(flagged) / len(rows):.1f}%) have KL > the "
             f"threshold; KL median {np.median(kls):.2e}, 99th percentile {np.percentile(kls, 99):.2e}, "
             f"max {kls.max():.2e}.", "",
             "Most often influenced tokens: " + (", ".join(f"`{t}` ({c})" for t, c in top) or "none"), ""]
    by_sent: dict[int, list] = {}
    for r in rows:
        by_sent.setdefault(r[0], []).append(r)
    for sid, _ in per_sent.most_common(n_examples):
        toks = sorted(by_sent[sid], key=lambda r: r[1])
        marked = " ".join(f"**{t}**" if fl else t for _, _, t, _, fl in toks)
        lines.append(f"- id {sid}: {marked}")
    return "\n".join(lines) + "\n"


def plot_deltas(table: list[dict], path: str) -> None:
    plt = pyplot()
    actors = sorted({r["actor"] for r in table})
    fig, axes = plt.subplots(2, 2, figsize=(9, 6))
    for col, search in enumerate(SEARCHES):
        for row, (key, label) in enumerate((("d_bleu", "ΔBLEU"), ("d_neg_ppl", "Δ(−perplexity)"))):
            ax = axes[row][col]
            vals = []
            for a in actors:
                r = next((x for x in table if x["actor"] == a and x["search"] == search), None)
                vals.append(r[key] if r else float("nan"))
            bars = ax.bar(range(len(actors)), vals, color=["tab:blue", "tab:orange", "tab:green"][:len(actors)])
            for b, a in zip(bars, actors):
                r = next((x for x in table if x["actor"] == a and x["search"] == search), None)
                p = r["p_bleu" if key == "d_bleu" else "p_ppl"] if r else 1.0
                if p < 0.05:
                    ax.text(b.get_x() + b.get_width() / 2, b.get_height(), "*", ha="center", color="red")
            ax.axhline(0, color="black", lw=0.8)
            ax.set_xticks(range(len(actors)), actors)
            ax.set_title(f"{label}, {search}")
    fig.suptitle("Trainable greedy decoding vs the plain decoder (es→en test; * p < 0.05)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curves(curves: dict[str, list], plain: float | None, path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, pts in curves.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    if plain is not None:
        ax.axhline(plain, color="gray", ls="--", label="plain greedy")
    ax.set_xlabel("updates (10 critic + 1 actor per phase)")
    ax.set_ylabel("validation BLEU+1 (greedy with the actor)")
    ax.legend()
    ax.set_title("Fig. 7.4: critic-aware vs uniform weights")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="examples/trainable_greedy/report.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--data", required=True, help="the binarized data folder (for the test sources)")
    p.add_argument("--nmt", required=True, help="the frozen NMT checkpoint")
    p.add_argument("--ref", required=True, help="the test references (raw text)")
    p.add_argument("--decode-dir", required=True)
    p.add_argument("--actor", action="append", default=[], metavar="NAME=TRAIN_LOG")
    p.add_argument("--n-bootstrap", type=int, default=1000)
    p.add_argument("--influence", default=None)
    p.add_argument("--speed", default=None, help="decode_speed.py's markdown table")
    a = p.parse_args(argv)
    actors = dict(x.split("=", 1) for x in a.actor)
    refs = load_references([a.ref])
    models, _, task = load_ensemble([a.nmt], arg_overrides={"data": a.data}, frozen=True)
    task.load_dataset("test")
    nmt = models[0]

    systems = {}
    for name in ["plain", *actors]:
        for search in SEARCHES:
            path = os.path.join(a.decode_dir, f"{name}.{search}", "generate-test.txt")
            if os.path.exists(path):
                systems[(name, search)] = read_decode(path)
    for search in SEARCHES:
        if ("plain", search) not in systems:
            raise ToolError(f"missing the plain {search} decode", os.path.join(a.decode_dir, f"plain.{search}"))
    texts, logp = {}, {}
    for key, hyps in systems.items():
        log(f"[ch7] scoring {key[0]} {key[1]} under the frozen NMT")
        texts[key] = [detok(hyps[i]) for i in sorted(hyps)]
        logp[key] = sentence_log_probs(nmt, task, "test", hyps)

    table, plain_rows = [], []
    for search in SEARCHES:
        base = ("plain", search)
        others = {n: texts[(n, search)] for n in actors if (n, search) in texts}
        boot = paired_bootstrap(texts[base], others, refs, n=a.n_bootstrap, baseline_name="plain") if others else None
        bm = boot["metrics"] if boot else None
        plain_bleu = boot["baseline"][bm[0]]["score"] if boot else None
        plain_chrf = boot["baseline"][bm[1]]["score"] if boot else None
        ppl0 = math.exp(-logp[base].mean())
        plain_rows.append({"search": search, "bleu": plain_bleu, "chrf": plain_chrf, "ppl": ppl0})
        for s in (boot["systems"] if boot else []):
            n = s["name"]
            pb = paired_bootstrap_mean(logp[base], logp[(n, search)], a.n_bootstrap)
            ppl = math.exp(-logp[(n, search)].mean())
            table.append({"actor": n, "search": search, "bleu": s[bm[0]]["score"], "d_bleu": s[bm[0]]["delta"],
                          "p_bleu": s[bm[0]]["p_value"], "chrf": s[bm[1]]["score"], "d_chrf": s[bm[1]]["delta"],
                          "p_chrf": s[bm[1]]["p_value"], "ppl": ppl, "d_ppl": ppl - ppl0,
                          "d_neg_ppl": -(ppl - ppl0), "d_mean_logp": pb["delta"], "p_ppl": pb["p_value"]})
    os.makedirs(a.out, exist_ok=True)
    plot_deltas(table, os.path.join(a.out, "fig7_3_deltas.png"))

    curves = {n: validation_curve(path) for n, path in actors.items() if os.path.exists(path)}
    bleu_actors = [n for n in actors if n.startswith("bleu")]
    plain_valid = None
    if bleu_actors:
        ckpt = os.path.join(os.path.dirname(actors[bleu_actors[0]]), bleu_actors[0], "checkpoint_best.pt")
        if os.path.exists(ckpt):
            log("[ch7] plain greedy validation reward (actor off)")
            plain_valid = plain_validation_reward(ckpt)
    plot_curves({n: curves[n] for n in bleu_actors if n in curves}, plain_valid,
                os.path.join(a.out, "fig7_4_curves.png"))

    md = ["# Gu ch. 7, trainable greedy decoding: es→en test", "",
          f"Frozen NMT: `{a.nmt}`. Scores: sacreBLEU BLEU / chrF, paired bootstrap ({a.n_bootstrap} resamples) "
          "against the plain decoder of the same search; perplexity = exp(−mean per-sentence (1/|Y|) Σ log p) of "
          "the outputs under the frozen NMT (⟨eos⟩ included), bootstrap p of the difference of mean log p.", "",
          "## Plain decoders", "", "| search | BLEU | chrF | perplexity |", "|---|---|---|---|"]
    for r in plain_rows:
        md.append(f"| {r['search']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['ppl']:.3f} |")
    md += ["", "## Fig. 7.3: actors vs the plain decoder (fig7_3_deltas.png)", "",
           "| actor | search | BLEU | ΔBLEU (p) | chrF | ΔchrF (p) | perplexity | Δperplexity (p) |",
           "|---|---|---|---|---|---|---|---|"]
    for r in table:
        md.append(f"| {r['actor']} | {r['search']} | {r['bleu']:.2f} | {r['d_bleu']:+.2f} ({r['p_bleu']:.3f}) | "
                  f"{r['chrf']:.2f} | {r['d_chrf']:+.2f} ({r['p_chrf']:.3f}) | {r['ppl']:.3f} | "
                  f"{r['d_ppl']:+.3f} ({r['p_ppl']:.3f}) |")
    md += ["", "## Fig. 7.4: validation BLEU+1 of the greedy actor (fig7_4_curves.png)", ""]
    if plain_valid is not None:
        md.append(f"Plain greedy (actor off) on the same valid verses: {plain_valid:.4f}.")
        md.append("")
    for n, pts in curves.items():
        md.append(f"- {n}: " + ", ".join(f"{u}: {v:.4f}" for u, v in pts))
    if a.influence and os.path.exists(a.influence):
        md += ["", "## Fig. 7.5: influence of the bleu actor (greedy, test)", ""]
        bleu_greedy = systems.get(("bleu", "greedy"), {})
        md.append(influence_summary(a.influence, bleu_greedy))
    if a.speed and os.path.exists(a.speed):
        md += ["", "## Decoding time, actor greedy / plain greedy", ""]
        with open(a.speed, encoding="utf-8") as f:
            md.append(f.read())
    with open(os.path.join(a.out, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"plain": plain_rows, "actors": table, "curves": curves, "plain_valid_reward": plain_valid},
                  f, indent=1)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))

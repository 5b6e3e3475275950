"""``python -m fairseq_ext.tools.analysis.copy_heatmap --path CKPT --data BIN [--copy-raw-dir RAW] [--split test]
[--index 0] [--reference] --out fig.png``: CopyNet's copy vs generate probabilities per decoding step (Gu 2019
Fig. 3.3, and the highlighting of Figs. 3.4/3.5).

Decodes one sentence of a split greedily with a ``copynet`` checkpoint (``--reference``: teacher-forces the
gold target instead), then re-runs the decoder on that output and records, for every step t and output
token y_t, the two modes of Eq. 3.1 under their shared normaliser:

* ``p_gen`` = p(y_t, g) (0 for a copied OOV), ``p_copy`` = p(y_t, c) = Σ_{j: x_j = y_t} p(x_j, c), ``mode`` =
  ``copy`` where p_copy > p_gen (the thesis's highlighting), ``gen_mass`` / ``copy_mass`` = the total
  probability of each mode at that step (Σ_v p(v, g), Σ_j p(x_j, c); they sum to 1);
* the per-position copy probabilities p(x_j, c) — the heatmap (source positions × steps).

Writes ``--out`` (PNG, matplotlib Agg: the heatmap above a bar chart of p_gen / p_copy per step) and
``--tsv`` (default: ``--out`` with ``.tsv``): one row per step with the columns above, then one column per
source position (``j:word``). Paths go to stdout.
"""
import argparse
import os
from typing import List, Optional, Sequence

import torch

from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.tools.common import ArgumentParser, ToolError, atomic_write, log, run_cli
from fairseq_ext.tools.plots import pyplot


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-copy-heatmap", description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="a copynet checkpoint")
    p.add_argument("--data", required=True, help="the binarized data folder")
    p.add_argument("--copy-raw-dir", default=None, help="raw text of the split (task copy_translation's option)")
    p.add_argument("--split", default="test")
    p.add_argument("--index", type=int, default=0, help="the sentence (its id in the split)")
    p.add_argument("--reference", action="store_true", help="teacher-force the gold target instead of decoding")
    p.add_argument("--max-len", type=int, default=100, help="greedy decoding: the most tokens")
    p.add_argument("--out", required=True, help="PNG file")
    p.add_argument("--tsv", default=None, help="TSV file (default: --out with .tsv)")
    return p


@torch.no_grad()
def greedy(model, src_tokens, src_lengths, eos: int, max_len: int) -> torch.Tensor:
    prev = torch.tensor([[eos]])
    for _ in range(max_len):
        lprobs = model.get_normalized_probs(model(src_tokens, src_lengths, prev), log_probs=True)[0, -1]
        lprobs[model.decoder.dictionary.pad()] = float("-inf")
        y = int(lprobs.argmax())
        prev = torch.cat([prev, prev.new_tensor([[y]])], 1)
        if y == eos:
            break
    if int(prev[0, -1]) != eos:
        prev = torch.cat([prev, prev.new_tensor([[eos]])], 1)
    return prev[0, 1:]


@torch.no_grad()
def copy_table(model, src_tokens, src_lengths, output: torch.Tensor):
    """Per step: p_gen, p_copy of the output token, the mode masses, the per-position copy probabilities."""
    eos = model.decoder.dictionary.eos()
    prev = torch.cat([output.new_tensor([eos]), output[:-1]]).unsqueeze(0)
    enc = model.encoder(src_tokens, src_lengths=src_lengths)
    feats, _ = model.decoder(prev, encoder_out=enc, features_only=True)
    V = model.decoder.vocab_size
    gen, copy = feats[0, :, :V].float().exp(), feats[0, :, V:].float().exp()  # (T, V), (T, S)
    ids = enc["src_copy_ids"][0][0]
    rows = []
    for t, y in enumerate(output.tolist()):
        p_gen = float(gen[t, y]) if y < V else 0.0
        p_copy = float(copy[t][ids.eq(y)].sum())
        rows.append({"p_gen": p_gen, "p_copy": p_copy, "gen_mass": float(gen[t].sum()),
                     "copy_mass": float(copy[t].sum())})
    return rows, copy


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    overrides = {"data": a.data}
    if a.copy_raw_dir:
        overrides["copy_raw_dir"] = a.copy_raw_dir
    models, cfg, task = load_ensemble([a.path], arg_overrides=overrides, frozen=True)
    model = models[0]
    if not hasattr(model.decoder, "copy_scorer") or not hasattr(task, "slot_display_ids"):
        raise ToolError("not a copynet checkpoint trained with task copy_translation", a.path)
    task.load_dataset(a.split)
    dataset = task.dataset(a.split)
    if not 0 <= a.index < len(dataset):
        raise ToolError(f"--index {a.index} is outside the split ({len(dataset)} sentences)")
    sample = dataset.collater([dataset[a.index]])
    src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    tgt_dict, src_dict = task.target_dictionary, task.source_dictionary
    if a.reference:
        if sample.get("target") is None:
            raise ToolError(f"split {a.split} has no targets (--reference)")
        output = sample["target"][0]
        output = output[output.ne(tgt_dict.pad())]
    else:
        output = greedy(model, src_tokens, src_lengths, tgt_dict.eos(), a.max_len)
    rows, copy = copy_table(model, src_tokens, src_lengths, output)
    display = task.slot_display_ids(src_tokens[0])
    words = [tgt_dict[i] for i in task.to_display(output, display).tolist()]
    keep = src_tokens[0].ne(src_dict.pad()).nonzero().squeeze(1)
    src_words = [src_dict[int(i)] for i in src_tokens[0, keep]]
    copy = copy[:, keep]  # (T, S') without the left pads

    tsv = a.tsv or os.path.splitext(a.out)[0] + ".tsv"
    with atomic_write(tsv) as f:
        f.write("\t".join(["step", "token", "p_gen", "p_copy", "mode", "gen_mass", "copy_mass"]
                          + [f"{j}:{w}" for j, w in enumerate(src_words)]) + "\n")
        for t, (w, r) in enumerate(zip(words, rows), start=1):
            mode = "copy" if r["p_copy"] > r["p_gen"] else "gen"
            f.write("\t".join([str(t), w] + [f"{r[k]:.6g}" for k in ("p_gen", "p_copy")] + [mode]
                              + [f"{r[k]:.6g}" for k in ("gen_mass", "copy_mass")]
                              + [f"{float(p):.6g}" for p in copy[t - 1]]) + "\n")
    plot(a.out, src_words, words, rows, copy)
    log(f"sentence {a.index}: {len(words)} steps, copy wins at {sum(r['p_copy'] > r['p_gen'] for r in rows)}")
    print(a.out)
    print(tsv)
    return 0


def plot(path: str, src_words: List[str], out_words: List[str], rows, copy: torch.Tensor) -> None:
    plt = pyplot()
    T, S = len(out_words), len(src_words)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(4.0, 0.45 * T + 2), max(4.0, 0.3 * S + 3)),
                                      gridspec_kw={"height_ratios": [max(S, 2), 3]}, sharex=True)
    im = top.imshow(copy.t().numpy(), aspect="auto", cmap="Blues", vmin=0.0, vmax=1.0)
    top.set_yticks(range(S))
    top.set_yticklabels(src_words, fontsize=7)
    top.set_ylabel("source position")
    top.set_title("copy probability p(x_j, c) per decoding step")
    fig.colorbar(im, ax=top, fraction=0.03)
    steps = range(T)
    bottom.bar(steps, [r["p_gen"] for r in rows], color="tab:orange", label="p(y_t, g)")
    bottom.bar(steps, [r["p_copy"] for r in rows], bottom=[r["p_gen"] for r in rows], color="tab:blue",
               label="p(y_t, c)")
    bottom.set_ylim(0, 1)
    bottom.set_ylabel("p(y_t)")
    bottom.legend(fontsize=7, loc="upper right")
    bottom.set_xticks(list(steps))
    bottom.set_xticklabels([("*" if r["p_copy"] > r["p_gen"] else "") + w for w, r in zip(out_words, rows)],
                           rotation=90, fontsize=7)
    bottom.set_xlabel("output token (* = copy mode wins)")
    fig.tight_layout()
    with atomic_write(path, mode="wb", encoding=None) as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

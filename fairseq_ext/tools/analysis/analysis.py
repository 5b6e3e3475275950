"""``python -m fairseq_ext.tools.analysis.analysis SUBCOMMAND --path CKPT --data BIN [options]``
(``fairseq-ext-analysis``)

Analysis tools for Ampomah's thesis (attention distance/entropy, AIF dependency KL, DC JS divergence,
attention export); the math is in :mod:`fairseq_ext.tools.analysis.attention_stats`, ``dc-js`` and ``aif-kl`` in
:mod:`~fairseq_ext.tools.analysis.attention_divergence`, the loading and outputs they share in
:mod:`~fairseq_ext.tools.analysis.analysis_io`.

Loads a trained checkpoint (:func:`fairseq_ext.modules.checkpoint.load_ensemble`, frozen), runs teacher-forced forward passes over (a sample of) a split, records attention with
hooks (:class:`~fairseq_ext.tools.analysis.attention_stats.AttentionRecorder`; no model code is changed) and
writes tables (CSV + JSON) and figures (PNG, matplotlib Agg) under ``--out``:

* ``self-attn`` — encoder self-attention mean distance and entropy per layer and head
  (thesis Sec. 3.5.3, Figs. 3.8-3.12): ``self_attn.csv``, ``self_attn.json``, ``self_attn.png``.
  Both windows are computed (``full``: all keys, ``|i-j|``; ``causal``: the thesis' literal
  ``j <= i``); ``--window`` picks the one plotted (default ``causal``, the thesis formula).
  In DC layers the FI_g / FI_l maps are analysed instead (kinds ``fi_g``, ``fi_l``).
* ``export`` — attention weights per batch (``attn_00000.pt`` or ``.npz``): encoder self-attention,
  decoder self- and encoder-decoder attention (per head, per layer; also the aux decoders of MS
  models), MLMHA's full per-layer maps, DC ``fi_l`` / ``fi_g``; with ids, tokens and lengths.
* ``dc-js`` — JS divergence between the DC module's ``alpha_g`` and ``alpha_l`` per layer
  (``dv^l``) and the encoder mean ``E_d`` (Sec. 5.6.2, Fig. 5.4): ``dc_js.csv/.json/.png``.
* ``aif-kl`` — AIF dependency (Sec. 4.5.5, Eqs. 4.4-4.7, Figs. 4.7-4.8): greedy decoding with the
  main decoder (``--prefix greedy``, the thesis' setup; or the reference), then teacher-forced
  main (AIF on) vs ind-decoder (AIF weights 0) passes: per-sentence output KL ``D_Y``, per-token
  ``D_{y_t}``, per-layer/head encoder-decoder attention KL ``D_h^l`` / ``D^l``, and the output KL
  between the main decoder and each aux decoder: ``aif_kl_sentences.csv``, ``aif_kl_attention.csv``,
  ``aif_kl_tokens.jsonl``, ``aif_kl.json``, ``aif_kl.png``.

Progress (batches done) goes to stderr; the output paths and a summary to stdout.
BLEU by source length: ``python -m fairseq_ext.tools.evaluation.score`` (``bleu_by_length``).
SentEval probing (Tables 4.8, 5.5) is not part of this tool.
"""
import argparse
import os
from typing import Optional, Sequence

import torch

from fairseq_ext.tools.analysis.analysis_io import (batches, heatmap, layers_of, load, progress, token_strings,
                                                    write_csv)
from fairseq_ext.tools.analysis.attention_divergence import cmd_aif_kl, cmd_dc_js
from fairseq_ext.tools.analysis.attention_stats import AttentionRecorder, SelfAttentionStats, attention_modules
from fairseq_ext.tools.common import ArgumentParser, ToolError, run_cli, write_json
from fairseq_ext.tools.plots import pyplot

SUBCOMMANDS = ("self-attn", "export", "dc-js", "aif-kl")


# ============================================================================ self-attn
def cmd_self_attn(args, model, task, dataset, device):

    mods = attention_modules(model, ["encoder.layers."])
    mods = {n: m for n, m in mods.items() if n.endswith(".self_attn")}
    if not mods:
        raise ToolError("self-attn: the model has no encoder self-attention modules")
    pad = task.source_dictionary.pad()
    stats = SelfAttentionStats()
    n_sent = 0
    with AttentionRecorder(mods) as rec, torch.no_grad():
        for b, total, sample in batches(dataset, args, device):
            ni = sample["net_input"]
            model.encoder(ni["src_tokens"], src_lengths=ni["src_lengths"])
            src_mask = ni["src_tokens"].ne(pad)
            for name, recs in rec.pop().items():
                layer = layers_of([name], "encoder.layers.")[name]
                a = recs[0]
                if isinstance(a, dict):  # DC layer: its two FI maps
                    for kind in ("fi_g", "fi_l"):
                        stats.add(layer, kind, a[kind], src_mask)
                else:
                    stats.add(layer, "self", a, src_mask)
            n_sent += sample["nsentences"]
            progress(args, b, total, n_sent)
    rows = stats.rows()
    base = os.path.join(args.out, "self_attn")
    write_csv(base + ".csv", rows, ["layer", "kind", "head", "distance_causal", "entropy_causal",
                                    "distance_full", "entropy_full", "tokens"])
    write_json(base + ".json", {"checkpoint": args.path, "subset": args.subset, "sentences": n_sent,
                                "window_plotted": args.window, "rows": rows})
    plot_self_attn(rows, base + ".png", args.window)
    print(f"self-attn: {n_sent} sentences -> {base}.csv, {base}.json, {base}.png")
    for r in rows:
        if r["head"] == "mean":
            print(f"  layer {r['layer']} {r['kind']}: distance {r['distance_' + args.window]:.3f}  "
                  f"entropy {r['entropy_' + args.window]:.4f}")
    return rows


def plot_self_attn(rows, path, window):
    kinds = sorted({r["kind"] for r in rows}, key=lambda k: ("self", "fi_g", "fi_l").index(k))
    n_rows = sum(len({r["layer"] for r in rows if r["kind"] == k}) for k in kinds)
    heads = sorted({r["head"] for r in rows if r["head"] != "mean"})
    plt = pyplot()
    fig, axes = plt.subplots(len(kinds), 2, figsize=(10, 0.6 * n_rows + 2.2 * len(kinds)),
                             squeeze=False)
    try:
        for k, kind in enumerate(kinds):
            layers = sorted({r["layer"] for r in rows if r["kind"] == kind})
            for c, metric in enumerate(("distance", "entropy")):
                m = [[float("nan")] * (len(heads) + 1) for _ in layers]
                for r in rows:
                    if r["kind"] != kind:
                        continue
                    j = len(heads) if r["head"] == "mean" else heads.index(r["head"])
                    m[layers.index(r["layer"])][j] = r[f"{metric}_{window}"]
                name = "self-attention" if kind == "self" else f"DC {kind}"
                heatmap(axes[k][c], m, f"encoder {name}: mean {metric} ({window} window)",
                         [str(h) for h in heads] + ["mean"], [f"L{l}" for l in layers],
                         fmt="{:.2f}" if metric == "distance" else "{:.3f}")
                axes[k][c].set_xlabel("head")
                axes[k][c].set_ylabel("layer")
        fig.tight_layout()
        fig.savefig(path, dpi=130, format="png")
    finally:
        plt.close(fig)


# ============================================================================ export
def _to_numpy_tree(obj, prefix, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _to_numpy_tree(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _to_numpy_tree(v, f"{prefix}.{i}", out)
    elif torch.is_tensor(obj):
        out[prefix] = obj.cpu().numpy()
    elif obj is not None:
        import numpy as np

        out[prefix] = np.asarray(obj)


def cmd_export(args, model, task, dataset, device):

    mods = attention_modules(model)
    kinds = set(args.what.split(","))
    keep = {}
    for n, m in mods.items():
        is_export = hasattr(m, "export_attn")
        if n.startswith("encoder."):
            k = "dc" if is_export else "enc-self"
        elif n.endswith("encoder_attn"):
            k = "mlmha" if is_export else "cross"
        else:
            k = "dc" if is_export else "dec-self"
        if k in kinds:
            keep[n] = m
    if not keep:
        raise ToolError(f"export: no attention modules of kinds {sorted(kinds)} in this model")
    n_sent, files = 0, []
    with AttentionRecorder(keep) as rec, torch.no_grad():
        for b, total, sample in batches(dataset, args, device):
            ni = sample["net_input"]
            model(**ni)
            maps = {}
            for name, recs in rec.pop().items():
                maps[name] = recs[0] if len(recs) == 1 else recs
            item = {
                "ids": sample["id"].cpu(),
                "src_tokens": ni["src_tokens"].cpu(), "src_lengths": ni["src_lengths"].cpu(),
                "prev_output_tokens": ni["prev_output_tokens"].cpu(),
                "target": sample["target"].cpu() if sample.get("target") is not None else None,
                "src_words": token_strings(task.source_dictionary, ni["src_tokens"]),
                "tgt_words": token_strings(task.target_dictionary, sample["target"])
                if sample.get("target") is not None else None,
                "attn": {n: _cpu(v) for n, v in maps.items()},
                "layout": "attention B x H x T(query) x S(key); MLMHA U0=1: B x n x H x T x S; "
                          "DC: {fi_l, fi_g}; source left-padded (fairseq default), pad id "
                          f"{task.source_dictionary.pad()}",
            }
            path = os.path.join(args.out, f"attn_{b:05d}.{args.format}")
            if args.format == "pt":
                torch.save(item, path)
            else:
                import numpy as np

                flat = {}
                _to_numpy_tree({k: v for k, v in item.items()
                                if k not in ("src_words", "tgt_words", "layout")}, "", flat)
                np.savez_compressed(path, **flat)
            files.append(path)
            n_sent += sample["nsentences"]
            progress(args, b, total, n_sent)
    write_json(os.path.join(args.out, "export_index.json"),
               {"checkpoint": args.path, "subset": args.subset, "sentences": n_sent,
                "modules": sorted(keep), "files": [os.path.basename(f) for f in files]})
    print(f"export: {n_sent} sentences, {len(keep)} modules -> {len(files)} files in {args.out}")
    return files


def _cpu(v):
    if isinstance(v, dict):
        return {k: _cpu(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_cpu(x) for x in v]
    return v.cpu() if torch.is_tensor(v) else v


# ============================================================================ CLI
def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-analysis",
                       description=__doc__.split("\n\n")[1])
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("--path", required=True, help="checkpoint (.pt)")
        sp.add_argument("--data", required=True, help="binarized data folder (fairseq-preprocess)")
        sp.add_argument("--user-dir", default=None, help="an extra fairseq plugin to import")
        sp.add_argument("--subset", default="test", help="split (default test)")
        sp.add_argument("--max-sentences", type=int, default=0,
                        help="analyse at most N sentences (default: all; the thesis uses 1,500 / 1k)")
        sp.add_argument("--random-sample", action="store_true",
                        help="take a seeded random sample of --max-sentences instead of the first N")
        sp.add_argument("--seed", type=int, default=1, help="seed of --random-sample (default 1)")
        sp.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default 32)")
        sp.add_argument("--model-overrides", default="", help="dict of model/task options to override, "
                        "as fairseq-generate's, e.g. \"{'jas_mask_layers': '1'}\"")
        sp.add_argument("--cpu", action="store_true", help="run on CPU even if CUDA is available")
        sp.add_argument("--out", required=True, help="output folder")

    s = sub.add_parser("self-attn", help="encoder self-attention mean distance and entropy per layer/head")
    common(s)
    s.add_argument("--window", choices=("causal", "full"), default="causal",
                   help="window plotted: causal (j <= i, the thesis' literal formula) or full (all j, "
                        "|i-j|); both are in the CSV/JSON")
    s = sub.add_parser("export", help="export attention weights per batch")
    common(s)
    s.add_argument("--format", choices=("pt", "npz"), default="pt")
    s.add_argument("--what", default="enc-self,cross,mlmha,dc",
                   help="comma list of enc-self, dec-self, cross, mlmha, dc (default: all but dec-self)")
    s = sub.add_parser("dc-js", help="JS divergence between the DC module's FI_g and FI_l maps per layer")
    common(s)
    s.add_argument("--head-reduce", choices=("max", "peak", "mean"), default="max",
                   help="how heads become one map: element-wise max + renormalise (default), the head "
                        "with the largest peak weight, or the head mean")
    s = sub.add_parser("aif-kl", help="AIF dependency: KL main vs ind-decoder (outputs, attention) and vs aux")
    common(s)
    s.add_argument("--prefix", choices=("greedy", "reference"), default="greedy",
                   help="target prefix of the teacher-forced passes: the main decoder's greedy output "
                        "(thesis) or the reference")
    s.add_argument("--max-len-a", type=float, default=0.0, help="greedy max length a*src_len+b")
    s.add_argument("--max-len-b", type=int, default=200)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    model, task, dataset, device = load(args)
    cmd = {"self-attn": cmd_self_attn, "export": cmd_export, "dc-js": cmd_dc_js,
           "aif-kl": cmd_aif_kl}[args.command]
    cmd(args, model, task, dataset, device)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-analysis``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

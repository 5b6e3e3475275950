"""``python -m fairseq_ext.tools.analysis.analysis SUBCOMMAND --path CKPT --data BIN [options]``
(``fairseq-ext-analysis``)

Analysis tools for Ampomah's thesis (attention distance/entropy, AIF dependency KL, DC JS divergence,
attention export); the math is in :mod:`fairseq_ext.tools.analysis.attention_stats`.

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
import ast
import csv
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

import torch

from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.tools.analysis.attention_stats import (AIFDependency, AttentionRecorder, DCDivergence,
                                                        SelfAttentionStats, attention_modules, layer_index)
from fairseq_ext.tools.common import ArgumentParser, ToolError, atomic_write, run_cli, write_json, write_jsonl
from fairseq_ext.tools.plots import pyplot

SUBCOMMANDS = ("self-attn", "export", "dc-js", "aif-kl")


# ============================================================================ loading


def load(args):
    """(model, task, dataset) from ``--path`` / ``--data`` / ``--subset``."""
    from fairseq import utils

    if args.user_dir:
        utils.import_user_module(argparse.Namespace(user_dir=args.user_dir))
    overrides: Dict[str, Any] = {"data": args.data}
    if args.model_overrides:
        try:
            overrides.update(ast.literal_eval(args.model_overrides))
        except (ValueError, SyntaxError):
            raise ToolError(f"--model-overrides is not a Python dict literal: {args.model_overrides!r}") from None
    device = torch.device("cpu" if args.cpu or not torch.cuda.is_available() else "cuda")
    models, cfg, task = load_ensemble([args.path], arg_overrides=overrides, frozen=True,
                                      use_cuda=device.type == "cuda")
    model = models[0]
    task.load_dataset(args.subset, combine=False, epoch=1)
    return model, task, task.dataset(args.subset), device


def batches(dataset, args, device):
    """Yield collated samples of ``--batch-size`` sentences from the first (or, with
    ``--random-sample``, a seeded random) ``--max-sentences`` sentences of the split."""
    from fairseq import utils

    n = len(dataset)
    k = n if not args.max_sentences or args.max_sentences <= 0 else min(args.max_sentences, n)
    if args.random_sample and k < n:
        g = torch.Generator().manual_seed(args.seed)
        idx = sorted(torch.randperm(n, generator=g)[:k].tolist())
    else:
        idx = list(range(k))
    chunks = [idx[i:i + args.batch_size] for i in range(0, len(idx), args.batch_size)]
    for b, chunk in enumerate(chunks):
        sample = dataset.collater([dataset[i] for i in chunk])
        if device.type == "cuda":
            sample = utils.move_to_cuda(sample, device=device)
        yield b, len(chunks), sample


def progress(args, b, total, n_sent):
    print(f"[{args.command}] batch {b + 1}/{total} done ({n_sent} sentences)", file=sys.stderr, flush=True)


# ============================================================================ output helpers


def write_csv(path, rows: List[Dict[str, Any]], fields: Optional[Sequence[str]] = None):
    fields = list(fields or (rows[0].keys() if rows else []))
    with atomic_write(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def _heatmap(ax, matrix, title, xlabels, ylabels, fmt="{:.2f}", cmap="viridis"):
    import numpy as np

    m = np.array(matrix, dtype=float)
    im = ax.imshow(np.ma.masked_invalid(m), aspect="auto", cmap=cmap)
    ax.set_xticks(range(len(xlabels)))
    ax.set_xticklabels(xlabels)
    ax.set_yticks(range(len(ylabels)))
    ax.set_yticklabels(ylabels)
    ax.set_title(title, fontsize=9)
    if m.size <= 200:
        for (i, j), v in np.ndenumerate(m):
            if v == v:
                ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=6, color="w")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)


def _layers_of(rec_names, prefix):

    return {n: layer_index(n) for n in rec_names if n.startswith(prefix)}


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
                layer = _layers_of([name], "encoder.layers.")[name]
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
                _heatmap(axes[k][c], m, f"encoder {name}: mean {metric} ({window} window)",
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


def _strings(d, toks, strip_pad=True):
    out = []
    for row in toks.tolist():
        out.append([d[t] for t in row if not (strip_pad and t == d.pad())])
    return out


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
                "src_words": _strings(task.source_dictionary, ni["src_tokens"]),
                "tgt_words": _strings(task.target_dictionary, sample["target"])
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


# ============================================================================ dc-js


def cmd_dc_js(args, model, task, dataset, device):
    from fairseq_ext.modules.dual_contextual import DualContextual

    mods = {n: m for n, m in attention_modules(model).items() if isinstance(m, DualContextual)}
    if not mods:
        raise ToolError("dc-js: the model has no Dual Contextual modules (a transformer_dc checkpoint?)")
    pad_s, pad_t = task.source_dictionary.pad(), task.target_dictionary.pad()
    acc = DCDivergence(args.head_reduce)
    n_sent = 0
    with AttentionRecorder(mods) as rec, torch.no_grad():
        for b, total, sample in batches(dataset, args, device):
            ni = sample["net_input"]
            model(**ni)
            src = ni["src_tokens"].ne(pad_s)
            tgt = ni["prev_output_tokens"].ne(pad_t)
            for name, recs in rec.pop().items():
                side = "encoder" if name.startswith("encoder.") else "decoder"
                m = src if side == "encoder" else tgt
                a = recs[0]
                acc.add(side, layer_index(name), a["fi_g"], a["fi_l"], m, m)
            n_sent += sample["nsentences"]
            progress(args, b, total, n_sent)
    res = acc.result()
    base = os.path.join(args.out, "dc_js")
    rows = [{"side": r["side"], "layer": r["layer"], "js": r["js"],
             **{f"js_head{h + 1}": v for h, v in enumerate(r["js_per_head"])}} for r in res["layers"]]
    write_csv(base + ".csv", rows)
    write_json(base + ".json", {"checkpoint": args.path, "subset": args.subset, "sentences": n_sent,
                                **res})
    plot_dc_js(res, base + ".png")
    print(f"dc-js: {n_sent} sentences -> {base}.csv, {base}.json, {base}.png")
    for r in res["layers"]:
        print(f"  {r['side']} layer {r['layer']}: dv = {r['js']:.4f}")
    if res["E_d"] is not None:
        print(f"  E_d = {res['E_d']:.4f}")
    return res


def plot_dc_js(res, path):
    sides = sorted({r["side"] for r in res["layers"]})
    plt = pyplot()
    fig, axes = plt.subplots(1, len(sides), figsize=(5.5 * len(sides), 3.8), squeeze=False)
    try:
        for ax, side in zip(axes[0], sides):
            rs = [r for r in res["layers"] if r["side"] == side]
            x = list(range(len(rs)))
            ax.bar(x, [r["js"] for r in rs], color="tab:blue",
                   label=f"dv^l (heads: {res['head_reduce']})")
            H = len(rs[0]["js_per_head"])
            for h in range(H):
                ax.plot(x, [r["js_per_head"][h] for r in rs], marker=".", lw=0.8, alpha=0.7,
                        label=f"head {h + 1} pair")
            if side == "encoder" and res["E_d"] is not None:
                ax.axhline(res["E_d"], color="tab:red", ls="--", label=f"E_d = {res['E_d']:.3f}")
            ax.set_xticks(x)
            ax.set_xticklabels([f"L{r['layer']}" for r in rs])
            ax.set_ylabel("JS(alpha_g || alpha_l) [nats]")
            ax.set_title(f"{side} DC: JS divergence of FI_g vs FI_l", fontsize=9)
            ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(path, dpi=130, format="png")
    finally:
        plt.close(fig)


# ============================================================================ aif-kl


def cmd_aif_kl(args, model, task, dataset, device):
    from fairseq import utils
    from fairseq.data import data_utils
    from fairseq.sequence_generator import SequenceGenerator


    dec = model.decoder
    if not hasattr(dec, "ind_decoder"):
        raise ToolError("aif-kl: needs a transformer_ms checkpoint (a decoder with ind_decoder())")
    if getattr(dec, "aif", None) is None:
        print("aif-kl: warning: the model has no AIF weights (MS-l without --aif); the main and "
              "ind-decoder are identical and their KL is 0", file=sys.stderr)
    tgt_dict = task.target_dictionary
    pad, eos = tgt_dict.pad(), tgt_dict.eos()
    mods = {f"decoder.layers.{i}.encoder_attn": layer.encoder_attn
            for i, layer in enumerate(dec.layers) if getattr(layer, "encoder_attn", None) is not None}
    generator = None
    if args.prefix == "greedy":
        generator = SequenceGenerator([model], tgt_dict, beam_size=1, max_len_a=args.max_len_a,
                                      max_len_b=args.max_len_b)
    acc = AIFDependency()
    n_sent = 0
    with torch.no_grad():
        for b, total, sample in batches(dataset, args, device):
            ni = sample["net_input"]
            if generator is not None:  # greedy output of the main decoder (AIF on)
                hyps = generator.generate([model], sample)
                seqs = [h[0]["tokens"] for h in hyps]
                target = data_utils.collate_tokens(seqs, pad, eos, left_pad=False)
                prev = data_utils.collate_tokens(seqs, pad, eos, left_pad=False,
                                                 move_eos_to_beginning=True)
            else:
                target, prev = sample["target"], ni["prev_output_tokens"]
            target, prev = target.to(device), prev.to(device)
            enc = model.encoder(ni["src_tokens"], src_lengths=ni["src_lengths"])
            with AttentionRecorder(mods) as rec:
                logits, extra = dec(prev, encoder_out=enc, src_lengths=ni["src_lengths"])
                attn_main = rec.pop()
                with dec.ind_decoder():
                    logits_ind, _ = dec(prev, encoder_out=enc, src_lengths=ni["src_lengths"])
                attn_ind = rec.pop()
            lp_main = utils.log_softmax(logits.float(), dim=-1)
            lp_ind = utils.log_softmax(logits_ind.float(), dim=-1)
            lp_aux = {}
            for layer, a in zip(extra.get("aux_layers", []), extra.get("aux_out", [])):
                lp_aux[f"aux{layer}"] = utils.log_softmax(a.float(), dim=-1)
            am = {layer_index(n): v[0] for n, v in attn_main.items()}
            ai = {layer_index(n): v[0] for n, v in attn_ind.items()}
            acc.add(sample["id"], target.ne(pad), lp_main, lp_ind, am, ai, lp_aux,
                    tokens=_strings(tgt_dict, target), src_lengths=ni["src_lengths"])
            n_sent += sample["nsentences"]
            progress(args, b, total, n_sent)
    res = acc.result()
    base = os.path.join(args.out, "aif_kl")
    sent_rows = [{k: v for k, v in r.items() if k not in ("kl_tokens", "tokens")} for r in res["sentences"]]
    write_csv(base + "_sentences.csv", sent_rows)
    attn_rows = []
    for layer, d in res["attention"].items():
        for h, v in enumerate(d["heads"]):
            attn_rows.append({"layer": layer, "head": h + 1, "kl": v})
        attn_rows.append({"layer": layer, "head": "mean", "kl": d["mean"]})
    write_csv(base + "_attention.csv", attn_rows, ["layer", "head", "kl"])
    write_jsonl(base + "_tokens.jsonl", ({"id": r["id"], "tokens": r.get("tokens"), "kl": r["kl_tokens"]}
                                         for r in res["sentences"]))
    summary = {"checkpoint": args.path, "subset": args.subset, "prefix": args.prefix,
               "sentences": res["n_sentences"], "mean": res["mean"],
               "attention": {str(k): v for k, v in res["attention"].items()}}
    write_json(base + ".json", summary)
    plot_aif_kl(res, base + ".png")
    print(f"aif-kl: {n_sent} sentences ({args.prefix} prefix) -> {base}.json, {base}_sentences.csv, "
          f"{base}_attention.csv, {base}_tokens.jsonl, {base}.png")
    for k, v in res["mean"].items():
        print(f"  mean {k} = {v:.5f}")
    for layer, d in res["attention"].items():
        print(f"  decoder layer {layer}: attention KL D^l = {d['mean']:.5f}")
    return res


def plot_aif_kl(res, path):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    try:
        ax = axes[0]
        s = res["sentences"]
        keys = [k for k in (s[0] if s else {}) if k.startswith("kl_main_")]
        for k in keys:
            vals = [r[k] for r in s]
            ax.hist(vals, bins=min(30, max(5, len(vals) // 3)), alpha=0.6,
                    label=f"{k[3:].replace('_', ' vs ')} (mean {sum(vals) / max(1, len(vals)):.3f})")
        ax.set_xlabel("per-sentence KL D_Y [nats]")
        ax.set_ylabel("sentences")
        ax.set_title("output dependency (Eq. 4.5)", fontsize=9)
        ax.legend(fontsize=7)
        layers = sorted(res["attention"])
        if layers:
            H = len(res["attention"][layers[0]]["heads"])
            m = [res["attention"][l]["heads"] + [res["attention"][l]["mean"]] for l in layers]
            _heatmap(axes[1], m, "encoder-decoder attention KL(main || ind) (Eqs. 4.6-4.7)",
                     [str(h + 1) for h in range(H)] + ["mean"], [f"L{l}" for l in layers], fmt="{:.3f}")
            axes[1].set_xlabel("head")
            axes[1].set_ylabel("decoder layer")
        fig.tight_layout()
        fig.savefig(path, dpi=130, format="png")
    finally:
        plt.close(fig)


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

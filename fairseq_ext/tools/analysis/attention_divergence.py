"""The context-divergence analyses of ``fairseq-ext-analysis`` (Ampomah's thesis):

* ``dc-js`` — JS divergence between the Dual Contextual module's ``alpha_g`` and ``alpha_l`` per layer
  (``dv^l``) and the encoder mean ``E_d`` (Sec. 5.6.2, Fig. 5.4);
* ``aif-kl`` — AIF dependency (Sec. 4.5.5, Eqs. 4.4-4.7, Figs. 4.7-4.8): main (AIF on) vs ind-decoder (AIF
  weights 0) teacher-forced passes, output KL per sentence and token, encoder-decoder attention KL per
  layer/head, and the output KL between the main decoder and each aux decoder.

The math is in :mod:`fairseq_ext.tools.analysis.attention_stats`; the command line in
:mod:`fairseq_ext.tools.analysis.analysis`.
"""
import os
import sys

import torch

from fairseq_ext.tools.analysis.analysis_io import batches, heatmap, progress, token_strings, write_csv
from fairseq_ext.tools.analysis.attention_stats import (AIFDependency, AttentionRecorder, DCDivergence,
                                                        attention_modules, layer_index)
from fairseq_ext.tools.common import ToolError, write_json, write_jsonl
from fairseq_ext.tools.plots import pyplot


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
                    tokens=token_strings(tgt_dict, target), src_lengths=ni["src_lengths"])
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
            heatmap(axes[1], m, "encoder-decoder attention KL(main || ind) (Eqs. 4.6-4.7)",
                     [str(h + 1) for h in range(H)] + ["mean"], [f"L{l}" for l in layers], fmt="{:.3f}")
            axes[1].set_xlabel("head")
            axes[1].set_ylabel("decoder layer")
        fig.tight_layout()
        fig.savefig(path, dpi=130, format="png")
    finally:
        plt.close(fig)

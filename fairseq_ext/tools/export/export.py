r"""Export a checkpoint to a CTranslate2 model (``fairseq-ext-export``), or say why it cannot be.

The conversion is CTranslate2's own ``FairseqConverter`` with ``--user-dir`` pointing at this plugin; this
tool first decides whether the architecture is one CTranslate2 can represent and refuses the others with
one line ``error: CHECKPOINT: architecture 'X' (model Y) cannot be exported to CTranslate2: why``, exit 2.

What converts: every architecture of fairseq's ``transformer`` model (PostNorm or PreNorm, learned or
sinusoidal positions, shared or separate embeddings), and Nguyen's Transformers without Tears
(``transformer_twt*``) by folding ScaleNorm into RMSNorm and FixNorm into the weights
(:data:`FOLDED_MODELS`, :mod:`fairseq_ext.tools.export.export_twt`). What does not
(:data:`UNSUPPORTED_MODELS`, ``--list-archs``): the plugin's other families; they decode fast with
``fairseq-generate --quantize int8`` (:mod:`fairseq_ext.modules.fast_inference`)::

    fairseq-ext-export runs/quickstart/quickstart/checkpoint_best.pt --out ct2_int8 \
        [--data data/bible_es_en/spm8000/bin] [--segmentation data/bible_es_en/spm8000] [--quantization int8]
    fairseq-ext-export --list-archs
    fairseq-ext-translate --model ct2_int8 < raw.es > out.en      # fairseq_ext.tools.export.translate

The dictionaries of ``--data`` (default: the checkpoint's data folder) become the vocabularies; the
segmentation (``segment.json`` of ``fairseq-ext-data bpe``) travels with the model, and
``fairseq_ext_export.json`` records the source checkpoint, architecture, quantization and versions.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Optional, Sequence

from fairseq_ext.tools.common import ArgumentParser, ToolError, log, read_json, run_cli, write_json
from fairseq_ext.tools.corpora.segment import METHODS

#: the provenance record of an exported model folder (read by :mod:`fairseq_ext.tools.export.translate`)
RECORD = "fairseq_ext_export.json"

#: fairseq model names CTranslate2's converter represents (the plugin registers only "transformer" ones).
SUPPORTED_MODELS = ("transformer",)

#: the plugin's model families folded into CTranslate2's Transformer spec by :mod:`fairseq_ext.tools.export.export_twt`
#: (ScaleNorm = RMSNorm with γ = g/√d, FixNorm rows normalised in the exported weights).
FOLDED_MODELS = ("transformer_twt",)

#: why each other model family of the plugin cannot be represented by CTranslate2's Transformer spec.
UNSUPPORTED_MODELS = {
    "transformer_untied_pos": "untied positional attention adds a position-position term to every "
                              "attention score (its ScaleNorm/FixNorm would fold into RMSNorm, as for "
                              "transformer_twt; the attention does not)",
    "transformer_jas": "joint attention over several encoder layers (multi-layer multi-head attention)",
    "transformer_dc": "dual contextual encoder (a second, context encoder and its gate)",
    "transformer_lex": "lexical model: a second output distribution from a lexicon mixed into the softmax",
    "lstm_luong": "an LSTM encoder-decoder (CTranslate2 converts Transformers only)",
    "nat_fertility": "non-autoregressive decoding with a fertility predictor",
    "rnnsearch": "an RNN encoder-decoder (CTranslate2 converts Transformers only)",
    "copynet": "a copy mechanism (a pointer distribution over source words mixed into the output)",
    "seg_copynet": "a copy mechanism over source segments",
    "seg_nmt": "retrieval-guided decoding with translation-memory segments",
    "docmem": "document memory networks (extra memory attention over the document)",
    "transformer_selattn": "document context through hierarchical selective attention",
    "transformer_zhang2018": "a document-context encoder attended by every layer",
    "transformer_han": "document context through a hierarchical attention network over the previous sentences",
    "docmem_wang2017": "an RNN encoder-decoder with a hierarchical-RNN summary of the previous sentences",
    "transformer_ms": "multi-level supervision: auxiliary decoders (and AIF fusion) beside the main decoder",
    "trainable_greedy": "an actor network that changes the decoder state at every step",
    "bimsmt": "two RNN direction models (one per language) with conversation-history context (turn RNNs, "
              "context attention, InitDec/AddDec); CTranslate2 converts Transformers only",
    "universal": "an RNN encoder-decoder whose source embedding is the universal lexical representation "
                     "(attention over universal tokens) and a mixture of language experts after the encoder",
    "transformer_ulr": "the source embedding is the universal lexical representation (a softmax over universal "
                       "tokens from frozen query/key arrays) plus a language-specific delta, not a lookup table",
    "simul_agent": "simultaneous decoding: a READ/WRITE agent (GRU policy) driving a frozen RNN encoder-decoder",
}

#: fairseq transformer options CTranslate2's converter does not check and cannot represent.
UNSUPPORTED_OPTIONS = (
    ("cross_self_attention", "--cross-self-attention"),
    ("adaptive_softmax_cutoff", "--adaptive-softmax-cutoff"),
    ("encoder_layers_to_keep", "--encoder-layers-to-keep"),
    ("decoder_layers_to_keep", "--decoder-layers-to-keep"),
    ("adaptive_input", "--adaptive-input"),
)

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "int8_float16", "bfloat16",
                 "int8_bfloat16")


def model_args(state: dict):
    """The model configuration of a checkpoint dict (legacy ``args`` or ``cfg['model']``)."""
    args = state.get("args") or (state.get("cfg") or {}).get("model")
    if args is None:
        raise ToolError("the checkpoint holds no model configuration (args / cfg.model)")
    return args


def _get(args, name, default=None):
    if isinstance(args, argparse.Namespace):
        return getattr(args, name, default)
    try:
        v = args.get(name, default)
    except AttributeError:
        v = getattr(args, name, default)
    return default if v is None and default is not None else v


def arch_of(args) -> str:
    return _get(args, "arch") or _get(args, "_name")


def unsupported_reason(arch: str, args=None) -> Optional[str]:
    """``None`` when CTranslate2 can represent ``arch`` (with the options ``args``), else why not."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    model = ARCH_MODEL_NAME_REGISTRY.get(arch)
    if model is None:
        return "not a registered architecture (is the plugin's --user-dir loaded?)"
    if model not in SUPPORTED_MODELS and model not in FOLDED_MODELS:
        why = UNSUPPORTED_MODELS.get(model, "CTranslate2 converts fairseq's transformer model only")
        return f"(model {model}) {why}"
    if args is None:
        return None
    if model in FOLDED_MODELS:
        norm = _get(args, "norm_type", "layernorm")
        if norm != "layernorm" and _get(args, "layernorm_embedding"):
            return (f"(model {model}) --layernorm-embedding with --norm-type {norm}: a LayerNorm beside "
                    f"RMSNorm-folded norms (CTranslate2 has one norm kind per model)")
        if _get(args, "no_cross_attention"):
            return f"(model {model}) --no-cross-attention (a decoder without encoder attention)"
    for name, flag in UNSUPPORTED_OPTIONS:
        if _get(args, name):
            return f"option {flag} is not representable"
    pre_enc, pre_dec = bool(_get(args, "encoder_normalize_before")), bool(_get(args, "decoder_normalize_before"))
    if pre_enc != pre_dec:
        return "--encoder-normalize-before and --decoder-normalize-before differ (one norm placement only)"
    if pre_dec and _get(args, "no_decoder_final_norm"):
        return "--no-decoder-final-norm with PreNorm (CTranslate2 always applies the final LayerNorm)"
    d = _get(args, "decoder_embed_dim")
    for name in ("decoder_input_dim", "decoder_output_dim"):
        v = _get(args, name)
        if v is not None and d is not None and v != d:
            return f"--{name.replace('_', '-')} {v} differs from --decoder-embed-dim {d} (projections)"
    if _get(args, "encoder_attention_heads") != _get(args, "decoder_attention_heads"):
        return "encoder and decoder attention heads differ"
    if _get(args, "no_token_positional_embeddings"):
        return "option --no-token-positional-embeddings is not representable"
    act = _get(args, "activation_fn", "relu")
    if act not in ("relu", "gelu", "gelu_accurate", "gelu_fast", "swish"):
        return f"activation {act!r} is not one of CTranslate2's"
    return None


def list_archs() -> list[tuple[str, str, Optional[str]]]:
    """``(arch, model, reason or None)`` of every architecture of fairseq's ``transformer`` model and
    of the plugin's model families (fairseq's other models are not listed: none converts)."""
    import fairseq_ext

    fairseq_ext.register()  # the plugin's architectures
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    return [(a, m, unsupported_reason(a)) for a, m in sorted(ARCH_MODEL_NAME_REGISTRY.items())
            if m in SUPPORTED_MODELS or m in FOLDED_MODELS or m in UNSUPPORTED_MODELS]


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(p.strip(" -") for p in text.splitlines() if p.strip(" -"))


#: the keys of ``segment.json`` the export record keeps (what translating needs, and what it was)
SEGMENTATION_KEYS = ("method", "sp_type", "vocab_size", "joint", "src", "tgt", "post_process")


def find_segmentation(data: str, source_lang: Optional[str], folder: Optional[str] = None) -> tuple:
    """``(segment.json record, path of the source language's model file or None, why not)`` for the data the
    model was trained on: from ``folder`` when given (an unusable one is a :class:`ToolError`), else from the
    first of ``data`` and its parent whose ``segment.json`` names a model file that exists there."""
    candidates = [folder] if folder else [data, os.path.dirname(os.path.abspath(data))]
    why = f"no segment.json in {' or '.join(candidates)}"
    for d in candidates:
        path = os.path.join(d, "segment.json")
        if not os.path.isfile(path):
            continue
        info = read_json(path)
        lang = source_lang or info.get("src")
        model = (info.get("models") or {}).get(lang)
        if info.get("marker"):
            problem = "language-marked sources (one model per source language) are not supported"
        elif info.get("method") not in METHODS:
            problem = f"unknown segmentation method {info.get('method')!r}"
        elif info.get("method") == "word":
            return info, None, None
        elif not model:
            problem = f"no segmentation model for source language {lang!r}"
        elif not os.path.isfile(os.path.join(d, model)):
            problem = f"missing segmentation model {os.path.join(d, model)}"
        else:
            return info, os.path.join(d, model), None
        if folder:
            raise ToolError(problem, path)
        why = f"{path}: {problem}"
    if folder:
        raise ToolError(f"missing {os.path.join(folder, 'segment.json')} (the folder fairseq-ext-data bpe wrote)")
    return None, None, why


def export(checkpoint: str, out: str, data: Optional[str] = None, quantization: str = "float32",
           source_lang: Optional[str] = None, target_lang: Optional[str] = None,
           user_dir: Optional[str] = None, force: bool = False, segmentation: Optional[str] = None) -> dict:
    """Convert ``checkpoint`` to a CTranslate2 model folder ``out`` with the source segmentation model
    (:func:`find_segmentation`); returns the provenance record."""
    import fairseq_ext

    fairseq_ext.register()  # compat fixes and registrations before the checkpoint is read
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from fairseq_ext.modules.checkpoint import load_state

    state = load_state(checkpoint)
    args = model_args(state)
    arch = arch_of(args)
    reason = unsupported_reason(arch, args)
    if reason:
        raise ToolError(f"architecture '{arch}' cannot be exported to CTranslate2: {reason}; "
                        f"decode it with fairseq-generate --quantize int8 instead", checkpoint)
    task_cfg = (state.get("cfg") or {}).get("task")
    if data is None:
        data = _get(task_cfg, "data") if task_cfg is not None else _get(args, "data")
        if not data:
            raise ToolError("give --data (the checkpoint records no data folder)", checkpoint)
    if not os.path.isdir(data):
        raise ToolError(f"missing data folder: {data}")
    source_lang = source_lang or (_get(task_cfg, "source_lang") if task_cfg is not None else None)
    target_lang = target_lang or (_get(task_cfg, "target_lang") if task_cfg is not None else None)
    seg_info, seg_model, seg_why = find_segmentation(data, source_lang, segmentation)
    if os.path.exists(out) and os.listdir(out) and not force:
        raise ToolError(f"output folder exists and is not empty: {out} (--force to overwrite)")
    try:
        import ctranslate2
        from ctranslate2.converters import FairseqConverter
    except ImportError:
        raise ToolError("ctranslate2 is not installed: pip install 'fairseq_ext[ctranslate2]'") from None
    del state
    user_dir = user_dir or os.path.dirname(os.path.abspath(fairseq_ext.__file__))
    folded = ARCH_MODEL_NAME_REGISTRY[arch] in FOLDED_MODELS
    if folded:
        from fairseq_ext.tools.export.export_twt import TwtConverter

        converter = TwtConverter(checkpoint, data, source_lang=source_lang, target_lang=target_lang)
    else:
        converter = FairseqConverter(checkpoint, data, source_lang=source_lang, target_lang=target_lang,
                                     user_dir=user_dir)
    log(f"[export] {checkpoint} ({arch}) -> {out} ({quantization}, ctranslate2 {ctranslate2.__version__})")
    try:
        converter.convert(out, quantization=quantization, force=True)
    except (ValueError, RuntimeError, KeyError, AttributeError) as e:  # the converter's checks and spec errors
        raise ToolError(f"CTranslate2 could not convert architecture '{arch}': {_one_line(e)}",
                        checkpoint) from None
    record = {"checkpoint": os.path.abspath(checkpoint), "arch": arch, "data": os.path.abspath(data),
              "quantization": quantization, "ctranslate2": ctranslate2.__version__,
              "converter": ("fairseq_ext.tools.export.export_twt.TwtConverter" if folded
                            else "ctranslate2.converters.FairseqConverter"),
              "source_lang": source_lang or (seg_info or {}).get("src"),
              "target_lang": target_lang or (seg_info or {}).get("tgt"), "segmentation": None}
    if seg_info is None:
        log(f"[export] note: {seg_why}; the model takes segmented input only (give --segmentation DIR, the "
            f"folder fairseq-ext-data bpe wrote, for fairseq-ext-translate to read raw text)")
    else:
        seg = {k: seg_info[k] for k in SEGMENTATION_KEYS if k in seg_info}
        seg["model"] = os.path.basename(seg_model) if seg_model else None
        if seg_model:
            shutil.copyfile(seg_model, os.path.join(out, seg["model"]))
        record["segmentation"] = seg
        log(f"[export] segmentation: {seg['method']} {seg_model or ''} (post-process {seg.get('post_process')}); "
            f"translate raw text with: fairseq-ext-translate --model {out}")
    write_json(os.path.join(out, RECORD), record)
    return record


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-export", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", nargs="?", help="fairseq checkpoint (.pt)")
    p.add_argument("--out", help="CTranslate2 model folder to write")
    p.add_argument("--data", help="binarized data folder with the dictionaries "
                                  "(default: the one recorded in the checkpoint)")
    p.add_argument("--quantization", default="float32", choices=QUANTIZATIONS,
                   help="weight type of the exported model (default float32; int8 for the fastest CPU model)")
    p.add_argument("--segmentation", metavar="DIR",
                   help="folder with the segment.json (and model) of fairseq-ext-data bpe, copied into --out for "
                        "fairseq-ext-translate (default: the data folder or its parent, when either has one)")
    p.add_argument("--source-lang")
    p.add_argument("--target-lang")
    p.add_argument("--user-dir", help="plugin folder (default: this fairseq_ext)")
    p.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    p.add_argument("--list-archs", action="store_true",
                   help="print every registered architecture and whether it exports, then exit")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    if a.list_archs:
        for arch, model, reason in list_archs():
            print(f"{arch}\t{model}\t{'yes' if reason is None else 'no: ' + reason}")
        return 0
    if not a.checkpoint or not a.out:
        raise ToolError("give a CHECKPOINT and --out (or --list-archs)")
    export(a.checkpoint, a.out, data=a.data, quantization=a.quantization, source_lang=a.source_lang,
           target_lang=a.target_lang, user_dir=a.user_dir, force=a.force, segmentation=a.segmentation)
    print(a.out)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main(sys.argv[1:])

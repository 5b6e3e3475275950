"""Nguyen's ch. 6 Transformers without Tears (``transformer_twt``, ``twt_*``) as a CTranslate2 Transformer.

CTranslate2's encoder-decoder specification (:class:`ctranslate2.specs.TransformerSpec`) has one norm kind per
model: LayerNorm, or RMSNorm ``γ_i · x_i / sqrt(mean(x²) + ε)`` (``rms_norm=True``, as its T5 converter uses it),
in PreNorm (Eq. 6.3, with the final norm of each stack) or PostNorm (Eq. 6.2) placement, both sides alike. The
ch. 6 changes fold into it exactly, up to where ε sits:

* SCALENORM(x; g) = g · x / max(‖x‖, ε) (Eq. 6.5; learned or fixed g, Table 6.7) is an RMSNorm with every
  γ_i = g/√d: γ_i x_i / sqrt(‖x‖²/d + ε') = g x_i / sqrt(‖x‖² + dε'), so with ε' = ε²/d the two differ only
  in sqrt(‖x‖² + ε²) against max(‖x‖, ε), a relative ε²/(2‖x‖²) (≈ 1e-10 / ‖x‖²: below float32's resolution
  for any ‖x‖ ≳ 1e-3);
* the plugin's RMSNorm (§6.4.2, Table 6.7) is CTranslate2's with γ = its per-unit gains, the same ε';
* FIXNORM (§6.2.3) reparameterises the embedding and output-projection rows as r · w/‖w‖: the exported
  embeddings and projection are those normalised rows (the √d input scale stays CTranslate2's
  ``scale_embeddings``), so Eq. 6.6's logits g·(ŵ·x/‖x‖) + b come from the output norm's γ, the normalised
  rows and the output bias b (the projection's bias);
* ``--norm-type layernorm`` (Table 6.3 rows (1)-(3)) keeps fairseq's LayerNorm: ``rms_norm=False``.

The weights of the attention and feed-forward sublayers, the positions and the vocabularies are set with
CTranslate2's own fairseq converter functions (:mod:`ctranslate2.converters.fairseq`); only the norms, the
embeddings and the output projection are folded here. What does not fold is refused before this module runs
(:func:`fairseq_ext.tools.export.export.unsupported_reason`): a LayerNorm after the embeddings
(``--layernorm-embedding``) in an RMSNorm/ScaleNorm model (one norm kind per CTranslate2 model), a decoder
without cross-attention, and the families built on this model that change more than the norms
(``transformer_untied_pos``).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from ctranslate2.converters import fairseq as ct2_fairseq
from ctranslate2.converters.converter import Converter
from ctranslate2.specs import transformer_spec

from fairseq_ext.modules.norms import FixNormEmbedding, RMSNorm, ScaleNorm, fixnorm


def rms_epsilon(eps: float, dim: int) -> float:
    """CTranslate2's RMSNorm ε' that puts the plugin's ε (on ‖x‖) at the same place: ε'·d = ε²."""
    return eps * eps / dim


def rms_gamma(norm: torch.nn.Module) -> np.ndarray:
    """The per-unit γ of CTranslate2's RMSNorm equal to ``norm`` (ScaleNorm: g/√d everywhere)."""
    if isinstance(norm, ScaleNorm):
        return np.full(norm.dim, float(norm.g.detach()) / math.sqrt(norm.dim), dtype=np.float32)
    if isinstance(norm, RMSNorm):
        return norm.weight.detach().float().numpy()
    raise TypeError(f"{type(norm).__name__} is not a ScaleNorm or RMSNorm")


def folded_embedding(emb: torch.nn.Embedding) -> np.ndarray:
    """The looked-up rows as the model sees them: FIXNORM's r·w/‖w‖ for a :class:`FixNormEmbedding`."""
    w = emb.weight.detach().float()
    return (fixnorm(w, emb.radius) if isinstance(emb, FixNormEmbedding) else w).numpy()


def _set_norm(spec, norm, rms: bool) -> None:
    if rms:
        spec.gamma = rms_gamma(norm)
    else:
        ct2_fairseq.set_layer_norm(spec, norm)


def _set_layers(spec, stack, rms: bool, decoder: bool) -> None:
    for ls, layer in zip(spec.layer, stack.layers):
        ct2_fairseq.set_multi_head_attention(ls.self_attention, layer.self_attn, self_attention=True)
        _set_norm(ls.self_attention.layer_norm, layer.self_attn_layer_norm, rms)
        if decoder:
            ct2_fairseq.set_multi_head_attention(ls.attention, layer.encoder_attn)
            _set_norm(ls.attention.layer_norm, layer.encoder_attn_layer_norm, rms)
        _set_norm(ls.ffn.layer_norm, layer.final_layer_norm, rms)
        ct2_fairseq.set_linear(ls.ffn.linear_0, layer.fc1)
        ct2_fairseq.set_linear(ls.ffn.linear_1, layer.fc2)
    if stack.layer_norm is not None:
        _set_norm(spec.layer_norm, stack.layer_norm, rms)
    if getattr(stack, "layernorm_embedding", None) is not None:
        ct2_fairseq.set_layer_norm(spec.layernorm_embedding, stack.layernorm_embedding)


def twt_spec(model, task) -> transformer_spec.TransformerSpec:
    """The CTranslate2 specification of a loaded ``transformer_twt`` model (eval mode), weights folded."""
    cfg = model.cfg if hasattr(model, "cfg") else model.args
    rms = cfg.norm_type != "layernorm"
    enc, dec = model.encoder, model.decoder
    spec = transformer_spec.TransformerSpec.from_config(
        (len(enc.layers), len(dec.layers)), cfg.encoder_attention_heads,
        pre_norm=bool(cfg.encoder_normalize_before),
        activation=ct2_fairseq._SUPPORTED_ACTIVATIONS[cfg.activation_fn],
        alignment_layer=-1, alignment_heads=0, layernorm_embedding=bool(getattr(cfg, "layernorm_embedding", False)),
        rms_norm=rms)
    with torch.no_grad():
        for side, stack in (("encoder", enc), ("decoder", dec)):
            s = getattr(spec, side)
            ct2_fairseq.set_input_layers(s, stack)  # positions, embed_scale (√d), raw embeddings
            (s.embeddings[0] if isinstance(s.embeddings, list) else s.embeddings).weight = \
                folded_embedding(stack.embed_tokens)
            _set_layers(s, stack, rms, decoder=side == "decoder")
        w = dec.output_projection.weight.detach().float()
        spec.decoder.projection.weight = (fixnorm(w, dec.fixnorm_radius) if dec.fixnorm else w).numpy()
        if dec.output_bias is not None:
            spec.decoder.projection.bias = dec.output_bias.detach().float().numpy()
    if rms:
        eps = {m.eps for m in model.modules() if isinstance(m, (ScaleNorm, RMSNorm))}
        spec.config.layer_norm_epsilon = rms_epsilon(max(eps), dec.embed_dim)
    spec.register_source_vocabulary(ct2_fairseq._get_vocab(task.source_dictionary))
    spec.register_target_vocabulary(ct2_fairseq._get_vocab(task.target_dictionary))
    spec.config.decoder_start_token = spec.config.eos_token  # as CTranslate2's fairseq converter
    spec.config.add_source_eos = True
    return spec


class TwtConverter(Converter):
    """``Converter.convert(out, quantization=...)`` for a ``transformer_twt`` checkpoint: the model is loaded by
    the plugin (:func:`fairseq_ext.modules.checkpoint.load_ensemble`, data folder ``data``), then folded."""

    def __init__(self, checkpoint: str, data: str, source_lang: Optional[str] = None,
                 target_lang: Optional[str] = None):
        self.checkpoint, self.data = checkpoint, data
        self.source_lang, self.target_lang = source_lang, target_lang

    def _load(self):
        from fairseq_ext.modules.checkpoint import load_ensemble

        overrides = {"data": self.data}
        overrides.update({k: v for k, v in (("source_lang", self.source_lang),
                                            ("target_lang", self.target_lang)) if v})
        models, _, task = load_ensemble([self.checkpoint], arg_overrides=overrides, frozen=True)
        return twt_spec(models[0], task)

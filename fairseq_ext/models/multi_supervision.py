"""Encoder-based Multi-level Supervision (MS-l) and Auxiliary Information Fusion (AIF) — Ampomah,
thesis ch. 4 (Sec. 4.2, Figs. 4.2-4.4; spec ``000-001-ampomah.md`` §3 B1/B2).

Model ``transformer_ms``: the fairseq transformer plus one *Aux-Decoder l* per lower encoder layer
``l`` in ``--aux-layers`` (alias ``--aux-decoder-layers``; ``"1"`` = MS-1, ``"1,2,3"`` = MS-123;
``1 <= l < L``).  Each auxiliary decoder has the Main-Decoder's structure (same layers, d, d_ff,
heads), attends to ``H_e^l`` (the output of encoder layer ``l``; with PreNorm passed through the
encoder's final LayerNorm, shared, as ``H_e^L`` is) and shares the token embedding, the positional
embedding and the output projection with the Main-Decoder, which attends to ``H_e^L`` (Fig. 4.2).
All decoders read the same shifted target; the criterion
:mod:`fairseq_ext.criterions.multi_supervision` trains them jointly with
``J = L^m + gamma * sum_l L^{a_l}`` (Eq. 4.1).

``--aif`` (archs ``transformer_ms_aif_*``; MS-l+AIF, Figs. 4.3-4.4) adds the Auxiliary Feature
Collector ``F^a = [f^1 .. f^n]`` (the aux decoders' final states) and, in every Main-Decoder layer,
``z^f = sum_i W_l^{a_i} f^i`` (Eq. 4.2) added to the masked-self-attention sublayer output
``h^l <- h^l + z^f`` (Eq. 4.3; after that sublayer's residual + LayerNorm in PostNorm, after its
residual in PreNorm), before the encoder-decoder attention.  Gradients flow from the Main-Decoder
into the aux decoders (no detach).  In beam search the aux decoders then run incrementally on the
main hypothesis prefix, with their own (uniquely keyed) incremental states, reordered with the main
decoder's.  Without AIF the aux decoders are skipped at inference (decoding cost = baseline).

Inference switches (``fairseq-generate --model-overrides "{...}"``):

* ``{'generate_from': 'aux2'}`` (also ``aux:2``): generate with Aux-Decoder 2 alone (Table 4.7 "AD",
  Table 4.5 ``y^{a_l}``); ``'main'`` (default) uses the Main-Decoder.
* ``{'aif_disable': True}``: the *ind-decoder* of Sec. 4.5.5 — the Main-Decoder with every
  ``W_l^{a_i} = 0`` (no fusion; aux decoders not run).  :meth:`MSDecoder.ind_decoder` toggles it in
  Python (the dependency analysis, Eqs. 4.4-4.7, compares both on the same prefix).

With no aux layers the model *is* the fairseq transformer (same parameters, names and outputs).

Architectures (``--aux-layers`` default ``1``): ``transformer_ms_{bench,iwslt_small,wmt_en_de}``
(MS-l) and ``transformer_ms_aif_{bench,iwslt_small,wmt_en_de}`` (MS-l+AIF), on the dims of
:mod:`fairseq_ext.models.joint_attention` (``bench`` = the repo's 3+3 d256 PreNorm benchmark
transformer; ``iwslt_small`` 4+4 256/1024/4; ``wmt_en_de`` base), all with three-way tied embeddings.
Parameter counts (spec §3): each aux decoder adds ``L_dec`` decoder layers (+4.21M small, +25.2M
base; PreNorm adds its final LayerNorm), AIF adds ``n * L_dec * d^2``.
"""
import contextlib
import re
from typing import Any, Dict, List, Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from fairseq_ext.models.joint_attention import BASES, parse_layer_set, wrap_layer
from fairseq_ext.modules.aif import AuxiliaryInformationFusion
from fairseq_ext.modules.arch_utils import set_default


def parse_generate_from(spec, aux_layers: List[int]) -> Optional[int]:
    """``"main"``/None/"" -> None; ``"aux2"``, ``"aux:2"``, ``"aux_2"``, ``"aux-2"`` -> the index of
    the aux decoder attached to encoder layer 2 (which must be one of ``aux_layers``)."""
    if spec is None:
        return None
    s = str(spec).strip().lower()
    if s in ("", "main", "none"):
        return None
    m = re.fullmatch(r"aux[:_\-]?(\d+)", s)
    if m is None:
        raise ValueError(f"--generate-from {spec!r}: expected 'main' or 'aux<l>' (e.g. aux2)")
    layer = int(m.group(1))
    if layer not in aux_layers:
        raise ValueError(f"--generate-from {spec!r}: no auxiliary decoder on encoder layer {layer} "
                         f"(--aux-layers {','.join(map(str, aux_layers)) or 'none'})")
    return aux_layers.index(layer)


class MSEncoder(TransformerEncoderBase):
    """fairseq's encoder that also returns ``encoder_out["aux_encoder_out"] = [H_e^l for l in
    aux_layers]`` (Fig. 4.2), the inputs of the auxiliary decoders."""

    def __init__(self, cfg, dictionary, embed_tokens):
        super().__init__(cfg, dictionary, embed_tokens)
        self.aux_layers = parse_layer_set(getattr(cfg, "aux_layers", None), self.num_layers - 1,
                                          "--aux-layers")

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None,
                return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None):
        if not self.aux_layers:
            return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out = super().forward(src_tokens, src_lengths, True, token_embeddings)
        states = out["encoder_states"]
        assert len(states) == self.num_layers + 1, "encoder layerdrop is not supported with aux layers"
        ln = self.layer_norm  # PreNorm: lower layers get the final LayerNorm too (shared), like H_e^L
        out["aux_encoder_out"] = [states[l] if ln is None else ln(states[l]) for l in self.aux_layers]
        if not return_all_hiddens:
            out["encoder_states"] = []
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        new = super().reorder_encoder_out(encoder_out, new_order)
        aux = encoder_out.get("aux_encoder_out", [])
        if len(aux) > 0:
            new["aux_encoder_out"] = [a.index_select(1, new_order) for a in aux]
        return new


class AIFDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with the AIF update of Eq. 4.3: ``forward(..., aif=z^f)`` adds
    ``z^f`` (``T x B x d``, Eq. 4.2) to the output of the masked self-attention sublayer, which is
    then the query and the residual of the encoder-decoder attention (Fig. 4.4).  Without ``aif``
    it computes exactly what :class:`TransformerDecoderLayerBase` does (no new parameters)."""

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        if self.cross_self_attention:
            raise NotImplementedError("AIF with --cross-self-attention is not supported")

    def forward(self, x, encoder_out: Optional[Tensor] = None,
                encoder_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                prev_self_attn_state: Optional[List[Tensor]] = None,
                prev_attn_state: Optional[List[Tensor]] = None,
                self_attn_mask: Optional[Tensor] = None,
                self_attn_padding_mask: Optional[Tensor] = None,
                need_attn: bool = False, need_head_weights: bool = False,
                aif: Optional[Tensor] = None):
        # a copy of TransformerDecoderLayerBase.forward (fairseq 0.12.3) with the Eq. 4.3 update
        assert prev_self_attn_state is None and prev_attn_state is None and not self.onnx_trace
        if need_head_weights:
            need_attn = True

        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, attn = self.self_attn(query=x, key=x, value=x, key_padding_mask=self_attn_padding_mask,
                                 incremental_state=incremental_state, need_weights=False,
                                 attn_mask=self_attn_mask)
        if self.c_attn is not None:
            tgt_len, bsz = x.size(0), x.size(1)
            x = x.view(tgt_len, bsz, self.nh, self.head_dim)
            x = torch.einsum("tbhd,h->tbhd", x, self.c_attn)
            x = x.reshape(tgt_len, bsz, self.embed_dim)
        if self.attn_ln is not None:
            x = self.attn_ln(x)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if aif is not None:  # Eq. 4.3: h^l <- h^l + z^f
            x = x + aif

        if self.encoder_attn is not None and encoder_out is not None:
            residual = x
            if self.normalize_before:
                x = self.encoder_attn_layer_norm(x)
            x, attn = self.encoder_attn(
                query=x, key=encoder_out, value=encoder_out, key_padding_mask=encoder_padding_mask,
                incremental_state=incremental_state, static_kv=True,
                need_weights=need_attn or (not self.training and self.need_attn),
                need_head_weights=need_head_weights)
            x = self.dropout_module(x)
            x = self.residual_connection(x, residual)
            if not self.normalize_before:
                x = self.encoder_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        if self.ffn_layernorm is not None:
            x = self.ffn_layernorm(x)
        x = self.fc2(x)
        x = self.dropout_module(x)
        if self.w_resid is not None:
            residual = torch.mul(self.w_resid, residual)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, attn, None


class MSDecoder(TransformerDecoderBase):
    """The Main-Decoder, holding the auxiliary decoders (``aux_decoders[i]`` attends to
    ``H_e^{aux_layers[i]}``) and, with AIF, the fusion weights (``aif``, Eq. 4.2).

    ``forward`` returns the Main-Decoder's output; a full (non-incremental) pass also returns
    ``extra["aux_out"]`` (each aux decoder's logits, ``B x T x V``) and ``extra["aux_layers"]`` for
    the criterion.  Incremental decoding runs the aux decoders only when AIF is active, on the same
    prefix; ``generate_from`` (an aux index) makes the whole decoder that aux decoder."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        L = cfg.encoder.layers
        self.aux_layers = parse_layer_set(getattr(cfg, "aux_layers", None), L - 1, "--aux-layers")
        self.has_aif = bool(getattr(cfg, "aif", False)) and len(self.aux_layers) > 0
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        if self.aux_layers and self.adaptive_softmax is not None:
            raise NotImplementedError("auxiliary decoders with an adaptive softmax are not supported")
        self.aux_decoders = nn.ModuleList()
        for _ in self.aux_layers:  # identical structure; shared embeddings and output projection
            aux = TransformerDecoderBase(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                                         output_projection=self.output_projection)
            aux.embed_positions = self.embed_positions
            self.aux_decoders.append(aux)
        self.aif: Optional[AuxiliaryInformationFusion] = None
        if self.has_aif:
            self.aif = AuxiliaryInformationFusion(len(self.aux_layers), self.embed_dim, self.num_layers,
                                                  zero_init=bool(getattr(cfg, "aif_zero_init", False)))
        self.aif_disabled = bool(getattr(cfg, "aif_disable", False))
        self.generate_from = parse_generate_from(getattr(cfg, "generate_from", None), self.aux_layers)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        if not self.has_aif:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return wrap_layer(cfg, AIFDecoderLayer(cfg, no_encoder_attn))

    @property
    def fuses(self) -> bool:
        """AIF active: built with ``--aif`` and not switched off (ind-decoder)."""
        return self.aif is not None and not self.aif_disabled

    @contextlib.contextmanager
    def ind_decoder(self):
        """Within the block the Main-Decoder is the *ind-decoder* of Sec. 4.5.5 (all W^{a_i} = 0)."""
        old, self.aif_disabled = self.aif_disabled, True
        try:
            yield self
        finally:
            self.aif_disabled = old

    @staticmethod
    def aux_encoder_out(encoder_out: Optional[Dict[str, List[Tensor]]], i: int):
        """The encoder output Aux-Decoder ``i`` attends to: ``H_e^{l_i}`` with the source mask."""
        if encoder_out is None:
            return None
        return {"encoder_out": [encoder_out["aux_encoder_out"][i]],
                "encoder_padding_mask": encoder_out["encoder_padding_mask"]}

    def forward(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                features_only: bool = False, full_context_alignment: bool = False,
                alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None,
                src_lengths: Optional[Any] = None, return_all_hiddens: bool = False):
        if self.generate_from is not None:  # Aux-Decoder l alone (Table 4.7 "AD")
            k = self.generate_from
            return self.aux_decoders[k](
                prev_output_tokens, self.aux_encoder_out(encoder_out, k), incremental_state,
                features_only, full_context_alignment, alignment_layer, alignment_heads)
        x, extra = self.extract_features(
            prev_output_tokens, encoder_out=encoder_out, incremental_state=incremental_state,
            full_context_alignment=full_context_alignment, alignment_layer=alignment_layer,
            alignment_heads=alignment_heads)
        if not features_only:
            x = self.output_layer(x)
            if "aux_features" in extra:
                extra["aux_out"] = [self.output_layer(f) for f in extra["aux_features"]]
                extra["aux_layers"] = list(self.aux_layers)
        return x, extra

    def extract_features_scriptable(
        self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        """fairseq's ``extract_features_scriptable`` (0.12.3) with the Auxiliary Feature Collector
        (``F^a``, run first on the same prefix) and ``z^f_l`` (Eq. 4.2) passed to layer ``l``.
        ``extra["aux_features"]`` holds ``F^a`` (``B x T x d`` each) after a full pass."""
        run_aux = len(self.aux_decoders) > 0 and (self.fuses or incremental_state is None)
        feats: List[Tensor] = []
        if run_aux:
            for i, aux in enumerate(self.aux_decoders):
                f, _ = aux.extract_features(prev_output_tokens, self.aux_encoder_out(encoder_out, i),
                                            incremental_state, full_context_alignment)
                feats.append(f)
        z: Optional[Tensor] = self.aif(feats) if (run_aux and self.fuses) else None  # L T B d

        if alignment_layer is None:
            alignment_layer = self.num_layers - 1
        enc: Optional[Tensor] = None
        padding_mask: Optional[Tensor] = None
        if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
            enc = encoder_out["encoder_out"][0]
        if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
            padding_mask = encoder_out["encoder_padding_mask"][0]

        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        prev_output_tokens = prev_output_tokens.contiguous()
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x += positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        self_attn_padding_mask: Optional[Tensor] = None
        if self.cross_self_attention or prev_output_tokens.eq(self.padding_idx).any():
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)

        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        for idx, layer in enumerate(self.layers):
            if incremental_state is None and not full_context_alignment:
                self_attn_mask = self.buffered_future_mask(x)
            else:
                self_attn_mask = None
            kwargs = dict(self_attn_mask=self_attn_mask, self_attn_padding_mask=self_attn_padding_mask,
                          need_attn=bool(idx == alignment_layer),
                          need_head_weights=bool(idx == alignment_layer))
            if z is not None:
                kwargs["aif"] = z[idx]
            x, layer_attn, _ = layer(x, enc, padding_mask, incremental_state, **kwargs)
            inner_states.append(x)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)

        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]
            attn = attn.mean(dim=0)  # average probabilities over heads
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)  # T x B x C -> B x T x C
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        extra: Dict[str, Any] = {"attn": [attn], "inner_states": inner_states}
        if run_aux and incremental_state is None:
            extra["aux_features"] = feats
        return x, extra


@register_model("transformer_ms")
class TransformerMSModel(TransformerModel):
    """Transformer with encoder-based multi-level supervision (+ optional AIF), thesis ch. 4."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        # no defaults here: the architecture functions set them (fairseq's legacy convention)
        parser.add_argument("--aux-layers", "--aux-decoder-layers", dest="aux_layers", type=str,
                            metavar="L1,L2",
                            help="attach an auxiliary decoder to each of these 1-based encoder layers "
                                 "(< encoder layers): '1' = MS-1, '1,2,3' = MS-123; 'none' = baseline")
        parser.add_argument("--aif", action="store_true", default=None,
                            help="Auxiliary Information Fusion into every main-decoder layer "
                                 "(Eqs. 4.2-4.3; MS-l+AIF)")
        parser.add_argument("--aif-zero-init", action="store_true", default=None,
                            help="initialise the AIF weights W_l^{a_i} to zero (start as MS-l)")
        parser.add_argument("--aif-disable", action="store_true", default=None,
                            help="ind-decoder (Sec. 4.5.5): main decoder without fusion (W = 0); "
                                 "an inference switch for --model-overrides")
        parser.add_argument("--generate-from", type=str, metavar="main|aux<l>",
                            help="decoder used for the output: main (default) or the aux decoder on "
                                 "encoder layer l, e.g. aux2 (an inference switch for --model-overrides)")

    @classmethod
    def build_model(cls, args, task):
        ms_defaults(args)
        L = int(getattr(args, "encoder_layers", 6) or 6)
        aux = parse_layer_set(args.aux_layers, L - 1, "--aux-layers")
        parse_generate_from(args.generate_from, aux)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return MSEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return MSDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


_default = set_default


def ms_defaults(args, aif: bool = False) -> None:
    _default(args, "aux_layers", "1")
    _default(args, "aif", aif)
    _default(args, "aif_zero_init", False)
    _default(args, "aif_disable", False)
    _default(args, "generate_from", "main")


@register_model_architecture("transformer_ms", "transformer_ms")
def transformer_ms(args):
    """fairseq base dims, MS-1 without AIF unless given."""
    ms_defaults(args)
    base_architecture(args)


def _ms_arch(aif, base):
    def arch(args):
        ms_defaults(args, aif)
        base(args)

    return arch


for _b, _base in BASES.items():  # bench, iwslt_small, wmt_en_de
    register_model_architecture("transformer_ms", f"transformer_ms_{_b}")(_ms_arch(False, _base))
    register_model_architecture("transformer_ms", f"transformer_ms_aif_{_b}")(_ms_arch(True, _base))

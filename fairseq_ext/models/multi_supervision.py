"""Encoder-based Multi-level Supervision (MS-l) and Auxiliary Information Fusion (AIF) — Ampomah,
thesis ch. 4 (Sec. 4.2, Figs. 4.2-4.4).

Model ``transformer_ms``: the fairseq transformer plus one *Aux-Decoder l* per lower encoder layer ``l`` in
``--aux-layers`` (alias ``--aux-decoder-layers``; ``"1"`` = MS-1, ``"1,2,3"`` = MS-123). Each auxiliary
decoder has the Main-Decoder's structure, attends to ``H_e^l`` and shares the embeddings and the output
projection with the Main-Decoder (Fig. 4.2); the criterion
:mod:`fairseq_ext.criterions.multi_supervision_label_smoothed_cross_entropy` trains them jointly
(``J = L^m + gamma * sum_l L^{a_l}``, Eq. 4.1).

``--aif`` (archs ``transformer_ms_aif_*``; Figs. 4.3-4.4) collects the aux decoders' final states
``F^a`` and adds ``z^f = sum_i W_l^{a_i} f^i`` (Eq. 4.2) to the masked-self-attention sublayer output of
every Main-Decoder layer (Eq. 4.3). In beam search the aux decoders then run incrementally on the main
prefix; without AIF they are skipped at inference.

Inference switches (``fairseq-generate --model-overrides "{...}"``): ``{'generate_from': 'aux2'}``
(Table 4.7 "AD", Table 4.5 ``y^{a_l}``) and ``{'aif_disable': True}`` (the *ind-decoder* of Sec. 4.5.5;
:meth:`MSDecoder.ind_decoder`, used by the dependency analysis of Eqs. 4.4-4.7). With no aux layers the
model *is* the fairseq transformer.

Architectures: ``transformer_ms_{bench,iwslt_small,wmt_en_de}`` (MS-l) and
``transformer_ms_aif_{bench,iwslt_small,wmt_en_de}`` (MS-l+AIF), on the dims of
:mod:`fairseq_ext.modules.arch_utils`, all with three-way tied embeddings. Each aux decoder adds ``L_dec``
decoder layers; AIF adds ``n * L_dec * d^2`` parameters.
"""
import contextlib
import functools
import re
from typing import Any, Dict, List, Optional

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

from fairseq_ext.modules.arch_utils import SHAPES, parse_layer_set, register_shaped, set_default, wrap_layer
from fairseq_ext.modules.aif import AuxiliaryInformationFusion
from fairseq_ext.data.errors import UserDataError


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
        raise UserDataError(f"--generate-from {spec!r}: expected 'main' or 'aux<l>' (e.g. aux2)")
    layer = int(m.group(1))
    if layer not in aux_layers:
        raise UserDataError(f"--generate-from {spec!r}: no auxiliary decoder on encoder layer {layer} "
                         f"(--aux-layers {','.join(map(str, aux_layers)) or 'none'})")
    return aux_layers.index(layer)


class MSEncoder(TransformerEncoderBase):
    """fairseq's encoder that also returns ``encoder_out["aux_encoder_out"] = [H_e^l for l in
    aux_layers]`` (Fig. 4.2), the inputs of the auxiliary decoders."""

    def __init__(self, cfg, dictionary, embed_tokens):
        super().__init__(cfg, dictionary, embed_tokens)
        self.aux_layers = parse_layer_set(getattr(cfg, "aux_layers", None), self.num_layers - 1,
                                          "--aux-layers")
        if self.aux_layers and self.encoder_layerdrop > 0:
            raise UserDataError(f"--encoder-layerdrop {self.encoder_layerdrop} is not supported with --aux-layers "
                                "(an auxiliary decoder reads a fixed encoder layer)")

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None,
                return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None):
        if not self.aux_layers:
            return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out = super().forward(src_tokens, src_lengths, True, token_embeddings)
        states = out["encoder_states"]
        assert len(states) == self.num_layers + 1, "encoder layerdrop is not supported with --aux-layers"
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
    it computes exactly what :class:`TransformerDecoderLayerBase` does (no new parameters).

    fairseq's ``forward`` runs unchanged; the addition happens in two of its hooks, at the one point
    where the self-attention sublayer's output is formed: PreNorm, ``residual_connection`` (its first
    call, the self-attention residual); PostNorm, the output of ``self_attn_layer_norm`` (called once,
    after that residual)."""

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        if self.cross_self_attention:
            raise NotImplementedError("AIF with --cross-self-attention is not supported")
        self.pending_aif: Optional[Tensor] = None  # z^f during one forward, until it is added
        if not self.normalize_before:
            self.self_attn_layer_norm.register_forward_hook(self.add_aif_after_norm)

    def forward(self, x, *args, aif: Optional[Tensor] = None, **kwargs):
        self.pending_aif = aif
        try:
            out = super().forward(x, *args, **kwargs)
            if self.pending_aif is not None:  # e.g. self_attn_layer_norm replaced after __init__
                raise RuntimeError("AIFDecoderLayer: the AIF term was not added")
            return out
        finally:
            self.pending_aif = None

    def add_pending_aif(self, x: Tensor) -> Tensor:
        """``h^l + z^f`` (Eq. 4.3), once per forward."""
        z, self.pending_aif = self.pending_aif, None
        return x if z is None else x + z

    def residual_connection(self, x, residual):
        x = super().residual_connection(x, residual)
        return self.add_pending_aif(x) if self.normalize_before else x

    def add_aif_after_norm(self, module, inputs, output):
        """Forward hook of ``self_attn_layer_norm`` (PostNorm only)."""
        return self.add_pending_aif(output)


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
        self.has_aif = bool(cfg.aif) and len(self.aux_layers) > 0
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
                                                  zero_init=bool(cfg.aif_zero_init))
        self.aif_disabled = bool(cfg.aif_disable)
        self.generate_from = parse_generate_from(getattr(cfg, "generate_from", None), self.aux_layers)
        self.aif_terms: Optional[Tensor] = None  # z^f (L T B d) while the layers run
        if self.has_aif:
            for idx, layer in enumerate(self.layers):
                layer.register_forward_pre_hook(functools.partial(self.pass_aif, idx), with_kwargs=True)

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

    def pass_aif(self, idx: int, layer: nn.Module, args, kwargs):
        """Forward pre-hook of Main-Decoder layer ``idx``: fairseq's layer loop calls the layers with
        fixed arguments; this adds ``aif=z^f_idx`` (Eq. 4.2) while :meth:`extract_features_scriptable`
        runs.  A keyword argument (not an attribute read inside the layer), so that activation
        checkpointing recomputes the layer with it and differentiates through it."""
        if self.aif_terms is None or "aif" in kwargs:
            return None
        return args, {**kwargs, "aif": self.aif_terms[idx]}

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
        x, extra = super().forward(prev_output_tokens, encoder_out, incremental_state, features_only,
                                   full_context_alignment, alignment_layer, alignment_heads,
                                   src_lengths, return_all_hiddens)
        if not features_only and "aux_features" in extra:
            extra["aux_out"] = [self.output_layer(f) for f in extra["aux_features"]]
            extra["aux_layers"] = list(self.aux_layers)
        return x, extra

    def extract_features_scriptable(
        self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        """fairseq's ``extract_features_scriptable``, preceded by the Auxiliary Feature Collector
        (``F^a``: the aux decoders on the same prefix) and with ``z^f_l`` (Eq. 4.2) passed to layer
        ``l`` (:meth:`pass_aif`).  ``extra["aux_features"]`` holds ``F^a`` (``B x T x d`` each) after
        a full pass."""
        run_aux = len(self.aux_decoders) > 0 and (self.fuses or incremental_state is None)
        feats: List[Tensor] = []
        if run_aux:
            for i, aux in enumerate(self.aux_decoders):
                f, _ = aux.extract_features(prev_output_tokens, self.aux_encoder_out(encoder_out, i),
                                            incremental_state, full_context_alignment)
                feats.append(f)
        self.aif_terms = self.aif(feats) if (run_aux and self.fuses) else None  # L T B d
        try:
            x, extra = super().extract_features_scriptable(
                prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
                alignment_layer, alignment_heads)
        finally:
            self.aif_terms = None
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


def ms_defaults(args, aif: bool = False) -> None:
    set_default(args, "aux_layers", "1")
    set_default(args, "aif", aif)
    set_default(args, "aif_zero_init", False)
    set_default(args, "aif_disable", False)
    set_default(args, "generate_from", "main")


@register_model_architecture("transformer_ms", "transformer_ms")
def transformer_ms(args):
    """fairseq base dims, MS-1 without AIF unless given."""
    ms_defaults(args)
    base_architecture(args)


def ms_arch(aif):
    def arch(args):
        """MS-l (with AIF when ``aif``) on fairseq's transformer."""
        ms_defaults(args, aif)
        base_architecture(args)

    return arch


# transformer_ms[_aif]_{bench,iwslt_small,wmt_en_de}
register_shaped("transformer_ms", "transformer_ms", ms_arch(False), shapes=tuple(SHAPES))
register_shaped("transformer_ms", "transformer_ms_aif", ms_arch(True), shapes=tuple(SHAPES))

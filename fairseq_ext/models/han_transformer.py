"""``transformer_han``: the HAN encoder and HAN decoder of Miculicich et al. (2018), the online baseline of Maruf
(2019) ch. 4 (Table 4.3, footnotes 18-19; Tables 4.4-4.5), as a variant of ``transformer_selattn``
(:mod:`fairseq_ext.models.selattn_transformer`) through its hooks: the Document-level Context Layer and its gate
are replaced by the HAN context layer and gate (:mod:`fairseq_ext.modules.han_attention`), everything else -- the
document keys, the sentence-set encodings, the decoder's cached context, the warm start from a stage-1
``transformer`` checkpoint, two-pass decoding -- is the selective-attention model's.

* ``--ctx-integration encoder`` (HAN encoder, footnote 18): the query is the encoder's output h_t of the current
  word, the context the encoder outputs of the previous ``--ctx-prev-sentences`` (3) source sentences; the gate
  acts on the encoder's output.
* ``--ctx-integration decoder`` (HAN decoder, footnote 19): the query is the decoder's output of the current
  target word (not the source-attention output of ``transformer_selattn``), the keys and values the decoder outputs
  of the previous 3 target sentences (``ctx_tgt_tokens``: the references in training with ``--doc-target-context
  gold``, the stage-1 translations with ``generated``; decoding in document order with ``--decoding-algorithm
  doc_bcd --bcd-update gauss_seidel --doc-iterations 1`` reads the model's own translations of the previous
  sentences, as HAN decodes); the gate acts on the decoder's output.
* Only the sentences at distance −1 … −k are read, whatever context ``doc_translation`` gives
  (:func:`~fairseq_ext.modules.local_context.previous_rows`); the context states come from the model itself,
  without gradient (``--ctx-rep-model current``, the authors' code); a sentence without previous sentences gets
  the sentence model's output unchanged (``--empty-context identity``, our choice).

Not built: the joint HAN (encoder and decoder; the thesis compares the two separately, and the ch. 4 model takes
its context on one side, footnote 8). Architectures: ``transformer_han_enc``, ``transformer_han_dec`` at the size
of Maruf's ch. 4 Transformer (4+4, 512/2048/8, dropout 0.2), each also ``…_bench``.

References: L. Miculicich, D. Ram, N. Pappas and J. Henderson, "Document-Level Neural Machine Translation with
Hierarchical Attention Networks", EMNLP 2018; S. Maruf, "Document-wide Neural Machine Translation", PhD thesis,
Monash University, 2019 (ch. 4).
"""
import contextlib
from typing import Dict, Optional

import torch
from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from torch import Tensor

from fairseq_ext.models.selattn_transformer import (
    SelAttnDecoder,
    SelAttnEncoder,
    SelAttnTransformerModel,
    TapDecoder,
    context_args,
    decoder_inputs,
    selattn_transformer,
)
from fairseq_ext.modules.arch_utils import register_presets, register_shaped, set_default
from fairseq_ext.modules.doc_attention import DocContext, word_mask_of
from fairseq_ext.modules.doc_transformer import maruf_sizes
from fairseq_ext.modules.han_attention import HANContextLayer, HANGate
from fairseq_ext.modules.local_context import add_prev_sentences_arg, previous_rows


def use_han_layer_(module, cfg, side: str) -> None:
    """Replace the selective-attention context layer and gate of ``module`` (built on ``side``) by HAN's."""
    if getattr(module, "ctx_layer", None) is not None:
        module.ctx_layer = HANContextLayer(**context_args(cfg, side))
        module.ctx_gate = HANGate(getattr(cfg, side).embed_dim)


class HANEncoder(SelAttnEncoder):
    """selattn's encoder with HAN's layer and gate, reading the previous k sentences only."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        use_han_layer_(self, cfg, "encoder")
        self.prev_sentences = cfg.ctx_prev_sentences
        self.context_off = False  # HANTransformerModel.memory_disabled

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, ctx_index: Optional[Tensor] = None,
                ctx_distance: Optional[Tensor] = None, **ctx):
        if self.context_off:
            ctx_index = ctx_distance = None
        if ctx_index is not None and ctx_distance is not None:
            ctx_index = previous_rows(ctx_index, ctx_distance, self.prev_sentences)
            ctx_distance = torch.arange(-self.prev_sentences, 0, device=ctx_index.device).expand_as(ctx_index)
        return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings, ctx_index=ctx_index,
                               ctx_distance=ctx_distance, **ctx)


class HANDecoder(SelAttnDecoder):
    """selattn's decoder with HAN's layer and gate; the query is the decoder's output and the context memory the
    decoder outputs of the context translations."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        use_han_layer_(self, cfg, "decoder")
        self._query: Optional[Tensor] = None

    def extract_features_scriptable(self, *args, **kwargs):
        x, extra = super().extract_features_scriptable(*args, **kwargs)
        self._query = x  # h_t: what the context layer reads next (last_source_attention)
        return x, extra

    def last_source_attention(self) -> Tensor:
        """HAN's query: the decoder's output of the latest forward (the source-attention tap is dropped)."""
        super().last_source_attention()
        query, self._query = self._query, None
        return query

    def context_memory(self, encoder_out) -> Optional[Dict[str, Tensor]]:
        """The decoder outputs of the context translations (keys = values), without gradient."""
        if "ctx_nset_out" not in encoder_out:
            return None
        prev = decoder_inputs(encoder_out["ctx_tgt_tokens"][0], self.padding_idx, self.dictionary.eos())
        nset_out = {"encoder_out": encoder_out["ctx_nset_out"],
                    "encoder_padding_mask": encoder_out["ctx_nset_padding_mask"]}
        rep = self.ctx_rep_decoder if self.ctx_rep_decoder is not None else self
        with torch.no_grad():
            states, _ = TransformerDecoderBase.extract_features_scriptable(rep, prev, nset_out)
            TapDecoder.last_source_attention(rep)  # forget the tap of this pass
        return self.ctx_layer.prepare(DocContext(states, word_mask_of(prev, self.dictionary),
                                                 encoder_out["ctx_index"][0]))


@register_model("transformer_han")
class HANTransformerModel(SelAttnTransformerModel):
    """The HAN encoder / decoder of Miculicich et al. (2018) on the ch. 4 document Transformer (module doc)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_prev_sentences_arg(parser, 3)

    @classmethod
    def build_model(cls, args, task):
        han_defaults(args)
        return super().build_model(args, task)

    @contextlib.contextmanager
    def memory_disabled(self):
        """No context is read inside the block (with ``--empty-context identity``: the sentence model exactly):
        pass 0 of ``doc_bcd`` (``--bcd-init zero_context``)."""
        saved = self.encoder.context_off
        self.encoder.context_off = True
        try:
            yield self
        finally:
            self.encoder.context_off = saved

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return HANEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return HANDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


def han_defaults(args):
    """Three previous sentences, context states from the model itself, the sentence model's output for a sentence
    without previous sentences; selattn's other defaults."""
    set_default(args, "ctx_prev_sentences", 3)
    set_default(args, "ctx_rep_model", "current")
    set_default(args, "empty_context", "identity")
    selattn_transformer(args)


def han_preset(integration: str, thesis_size: bool):
    def arch(args):
        set_default(args, "ctx_integration", integration)
        if thesis_size:
            maruf_sizes(args, 0.2)
        han_defaults(args)

    arch.__doc__ = (f"Miculicich et al. (2018), HAN {integration} (3 previous sentences)"
                    + (" at the size of Maruf's ch. 4 Transformer." if thesis_size else "."))
    return arch


# Thesis system -> --ctx-integration: Table 4.3's "Miculicich et al. (2018)" rows (encoder, decoder); each also at the
# bench shape (``…_bench``).
HAN_PRESETS = {"transformer_han_enc": ("encoder",), "transformer_han_dec": ("decoder",)}
register_presets("transformer_han", lambda integration: han_preset(integration, thesis_size=True), HAN_PRESETS)
for _name, _spec in HAN_PRESETS.items():
    register_shaped("transformer_han", _name, han_preset(*_spec, thesis_size=False))

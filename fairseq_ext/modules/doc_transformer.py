"""The document Transformer shared by the context-aware models of Maruf (2019) ch. 4: the model base class
that hands the document keys of a batch to the encoder, the ch. 4 model size (§4.4.1) and the choice of
the integrating side.

* :class:`DocTransformerModel` -- fairseq's ``TransformerModel`` + :class:`~fairseq_ext.modules.warm_start.
  SentenceWarmStartMixin`; its forward passes the ``ctx_*`` keys of ``net_input`` (the batch contract of
  ``doc_translation``) to the encoder. Subclasses: ``transformer_selattn`` (H-attention, ch. 4) and
  ``transformer_zhang2018`` (the Zhang et al. 2018 baseline).
* :func:`maruf_sizes` -- 4+4 layers, 512/2048, 8 heads, separate source/target embeddings, decoder
  input/output tied (§4.4.1).
* :data:`CTX_INTEGRATIONS` -- where the context enters: ``encoder`` or ``decoder`` (footnote 8).
"""
from typing import List, Optional

from fairseq.models.transformer import TransformerModel

from fairseq_ext.modules.arch_utils import set_default
from fairseq_ext.modules.warm_start import SentenceWarmStartMixin

CTX_INTEGRATIONS = ("encoder", "decoder")


class DocTransformerModel(SentenceWarmStartMixin, TransformerModel):
    """fairseq's TransformerModel whose forward passes the document keys of ``net_input`` (the batch
    contract of ``doc_translation``, which gives them only to models with ``uses_document_context``)
    to the encoder."""

    uses_document_context = True

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, **ctx):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths,
                                   return_all_hiddens=return_all_hiddens, **ctx)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)

    def sentence_parameter_names(self) -> List[str]:
        return [n for n, _ in self.named_parameters() if not self.is_doc_key(n)]

    def doc_parameter_names(self) -> List[str]:
        return [n for n, _ in self.named_parameters() if self.is_doc_key(n)]


def maruf_sizes(args, dropout: float):
    """The ch. 4 Transformer (§4.4.1): 4+4 layers, 512/2048, 8 heads, separate source/target
    embeddings with the decoder's input and output embeddings tied ([code]), all four dropouts
    ``dropout`` (0.1 for the sentence model, 0.2 for the context-aware model)."""
    for side in ("encoder", "decoder"):
        set_default(args, f"{side}_layers", 4)
        set_default(args, f"{side}_embed_dim", 512)
        set_default(args, f"{side}_ffn_embed_dim", 2048)
        set_default(args, f"{side}_attention_heads", 8)
    set_default(args, "share_decoder_input_output_embed", True)
    set_default(args, "dropout", dropout)
    set_default(args, "attention_dropout", args.dropout)
    set_default(args, "activation_dropout", args.dropout)

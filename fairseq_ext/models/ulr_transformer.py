"""``transformer_ulr``: fairseq's transformer whose source token embedding is the universal lexical
representation plus a language-specific change, the model of MetaNMT (Gu 2019 ch. 6, §6.3.3)::

    (6.12)  ε^k[x] = ε^0[x] + Δε^k[x],      ε^0[x] = Σ_i ε_U[u_i] q(u_i | x)  (Eq. 5.2),
            q(u | x) = softmax_u( ε_K[u]ᵀ · A · ε_Q[x] / τ )                  (Eq. 5.3)

* ε^0 is :class:`fairseq_ext.modules.ulr.ULREmbedding` (pure ULR): ε_U and A trained, ε_Q and ε_K frozen
  buffers read from ``--ulr-dir``.
* Δε is one zero-initialised embedding over the marked union vocabulary ``<piece>__<lang>`` (so it is the
  Δε^k of every language); ``--ulr-freeze-delta`` keeps it zero (the multilingual-transfer baseline,
  Eq. 6.11).
* The sum is the encoder's ``embed_tokens(x)``, scaled and positioned by fairseq as usual.

The MetaNMT parameter roles come from ``meta_partition_names()`` (:mod:`fairseq_ext.modules.meta_learning`).
Without ``--ulr`` the model is fairseq's ``transformer``. The ULR options are
:func:`fairseq_ext.modules.ulr.add_ulr_args`.

Architectures (:data:`PRESETS`): ``transformer_ulr_base`` (§6.4.2), ``transformer_ulr_bench`` (the CPU bench
shape, untied embeddings) and ``transformer_ulr_tiny`` (tests).

References: J. Gu, Y. Wang, Y. Chen, K. Cho, V. O. K. Li, "Meta-Learning for Low-Resource Neural Machine
Translation", EMNLP 2018; J. Gu, "Efficient Neural Machine Translation", PhD thesis, HKU, 2019, ch. 5-6.
"""
from typing import Dict, List

import torch.nn as nn
from torch import Tensor
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel, base_architecture

from fairseq_ext.models.universal_rnn import ulr_arrays_for
from fairseq_ext.modules.arch_utils import SHAPES, apply_defaults, register_presets, set_default
from fairseq_ext.modules.ulr import DEFAULT_TEMPERATURE, ULREmbedding, add_ulr_args, ulr_arch_defaults
from fairseq_ext.data.errors import UserDataError


class ULRDeltaEmbedding(nn.Module):
    """ε^0[x] + Δε[x] (Eq. 6.12): ``ulr`` a pure :class:`ULREmbedding` (ε_U, A trained; ε_Q, ε_K buffers),
    ``delta`` a zero-initialised (V, d) embedding. Looks like an ``nn.Embedding`` to fairseq's encoder
    (``embedding_dim``, ``padding_idx``, ``num_embeddings``); the pad row stays zero."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int, query, key,
                 temperature: float = DEFAULT_TEMPERATURE):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.ulr = ULREmbedding(num_embeddings, embedding_dim, padding_idx, query, key, temperature=temperature,
                                language_specific=False)
        self.delta = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
        nn.init.zeros_(self.delta.weight)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.ulr(tokens) + self.delta(tokens)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, padding_idx={self.padding_idx}"


@register_model("transformer_ulr")
class ULRTransformerModel(TransformerModel):
    """fairseq transformer + ULR/Δε source embedding (module doc)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_ulr_args(parser)
        parser.add_argument("--ulr-freeze-delta", action="store_true", default=None,
                            help="keep the language-specific change at zero in plain training (the joint phase "
                                 "of the multilingual-transfer baseline)")

    @classmethod
    def build_model(cls, args, task):
        ulr_transformer(args)  # fills what an older checkpoint lacks
        if args.ulr and args.share_all_embeddings:
            raise UserDataError("transformer_ulr --ulr: --share-all-embeddings is impossible (the source embedding is "
                             "the universal lexical representation of a marked vocabulary)")
        model = super().build_model(args, task)
        if args.ulr:
            src_dict = task.source_dictionary
            arrays = ulr_arrays_for(args, task, src_dict)
            emb = ULRDeltaEmbedding(len(src_dict), args.encoder_embed_dim, src_dict.pad(), arrays["query"],
                                    arrays["key"], temperature=args.ulr_temperature)
            if args.ulr_freeze_delta:
                emb.delta.weight.requires_grad_(False)
            model.encoder.embed_tokens = emb
        return model

    def meta_partition_names(self) -> Dict[str, List[str]]:
        """MetaNMT roles (§6.3.3): ε_U, A fixed in language-specific learning; Δε fixed in the meta update and
        zero at every episode start. Without ``--ulr``: none (plain FOMAML over every parameter)."""
        emb = self.encoder.embed_tokens
        if not isinstance(emb, ULRDeltaEmbedding):
            return {}
        prefix = "encoder.embed_tokens."
        ulr = [f"{prefix}ulr.{n}" for n, _ in emb.ulr.named_parameters()]  # universal (ε_U), A
        delta = [f"{prefix}delta.weight"]
        return {"learn_frozen": ulr, "meta_frozen": delta, "reset": delta}


@register_model_architecture("transformer_ulr", "transformer_ulr")
def ulr_transformer(args):
    """fairseq's ``transformer`` defaults; ULR off (≡ fairseq), τ = 0.05."""
    ulr_arch_defaults(args)
    set_default(args, "ulr_freeze_delta", False)
    base_architecture(args)


def _preset(spec: dict):
    def arch(args):
        apply_defaults(args, spec)
        ulr_transformer(args)

    arch.__doc__ = f"transformer_ulr with {spec}."
    return arch


_BENCH = {k: v for k, v in SHAPES["bench"].items() if k != "share_all_embeddings"}
# arch -> defaults (keys of arch_utils.PER_SIDE apply to the encoder and the decoder)
PRESETS = {
    # §6.4.2: d_model = d_hidden = 512, n_layer = 6, n_head = 8; dropout 0.1 (REC)
    "transformer_ulr_base": {"layers": 6, "embed_dim": 512, "ffn_embed_dim": 512, "attention_heads": 8,
                             "dropout": 0.1},
    # the CPU bench shape (3+3, 256/1024/4, PreNorm, dropout 0.1), untied embeddings
    "transformer_ulr_bench": dict(_BENCH, share_all_embeddings=False),
    # unit and command-line tests
    "transformer_ulr_tiny": {"layers": 2, "embed_dim": 32, "ffn_embed_dim": 64, "attention_heads": 4,
                             "dropout": 0.0},
}
register_presets("transformer_ulr", _preset, {name: (spec,) for name, spec in PRESETS.items()})

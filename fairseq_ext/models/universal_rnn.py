"""``universal`` (earlier ``universal_rnn``): the many-to-English recurrent NMT of Gu (2019) ch. 5 with the Universal Lexical
Representation (ULR, §5.3.1) and the Mixture of Language Experts (MoLE, §5.3.2) — an ``rnnsearch`` whose
source embedding and encoder output are swapped through the family's hooks.

* ``--ulr``: the source embedding is :class:`fairseq_ext.modules.ulr.ULREmbedding` — ε[x] = α(x)·ε_E[x] +
  Σ_i ε_U[u_i] q(u_i|x) with q(u|x) = softmax_u(ε_K[u]ᵀ A ε_Q[x] / τ) (Eqs. 5.2, 5.3, 5.5). ε_Q (projected
  query embeddings, one row per marked source symbol), ε_K (universal-token keys) and α come from
  ``--ulr-dir`` (``fairseq-ext-ulr project`` writes them; default ``<data>/../ulr``) and are frozen buffers
  saved in the checkpoint; ε_U and A (initialised to I) are trained. ``--ulr-temperature`` τ (0.05),
  ``--ulr-fixed-A`` (the "+ULR (A=I)" row of Table 5.4), ``--ulr-closest-only`` (each source token is
  its single closest universal token: "Closest Uni-Token Only"), ``--ulr-no-language-specific`` (no ε_E
  term: α ≡ 0).
* ``--mole``: K−1 experts (one per auxiliary language, in ``--aux-langs`` order) and a gate after the
  encoder, s' = Σ_k f_k(h) softmax(g(h))_k replacing the encoder states (Eq. 5.6); the gate is trained
  towards the sentence's auxiliary language by the criterion ``universal_mole_cross_entropy`` (Eq. 5.7),
  and low-resource sentences run MoLE with detached parameters, so "we do not update the MoLE module for
  training on a sentence from the low-resource language" (§5.3.2) while the rest of the model learns
  from them. The gate logits are ``extra["mole_gate"]`` (S, B, K) of the model's output; the language
  of each sentence (from its marked tokens) is ``extra["src_lang"]`` (B,).

Without ``--ulr`` and ``--mole`` the model is ``rnnsearch`` (the Multi-NMT baseline of Eq. 5.1 with the
marked union vocabulary): same parameters, same outputs for a seed (a test says so).

Architectures: ``universal_512`` (§5.4.1: 1-layer bi-LSTM encoder, 2-layer attention LSTM decoder,
512 units, emb 512, universal embeddings 512, dropout 0.4), ``universal_bench`` (the CPU size: 256 /
256, dropout 0.2) and ``universal_tiny`` (tests).

Reference: Gu, Hassan, Devlin, Li, "Universal Neural Machine Translation for Extremely Low Resource
Languages", NAACL 2018 (ch. 5 of Gu, "Efficient Neural Machine Translation", PhD thesis, HKU, 2019).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional

import torch
from torch import Tensor
from fairseq import utils
from fairseq.models import ARCH_CONFIG_REGISTRY, register_model, register_model_architecture

from fairseq_ext.data.universal import sentence_languages
from fairseq_ext.models.rnnsearch import (
    RNNSearchDecoder,
    RNNSearchEncoder,
    RNNSearchModel,
    embedding,
    rnnsearch,
)
from fairseq_ext.modules.arch_utils import register_presets, set_default
from fairseq_ext.modules.ulr import (MoLE, ULREmbedding, add_ulr_args, alpha_with_missing, load_ulr_arrays,
                                    ulr_arch_defaults)
from fairseq_ext.data.errors import UserDataError

class UniversalEncoder(RNNSearchEncoder):
    """``rnnsearch`` encoder + optional MoLE over its states (Eq. 5.6) + the sentence languages."""

    def __init__(self, cfg, dictionary, embed_tokens, token_lang: Tensor, num_langs: int, num_experts: int):
        super().__init__(cfg, dictionary, embed_tokens)
        self.register_buffer("token_lang", token_lang.clone(), persistent=False)
        self.num_langs = num_langs
        self.num_experts = num_experts  # the auxiliary languages are 0 .. K-2, the low-resource one K-1
        self.mole = None
        if cfg.mole:
            self.mole = MoLE(self.output_dim, num_experts, hidden=cfg.mole_hidden_dim or self.output_dim,
                             residual=cfg.mole_residual)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **kwargs) -> Dict[str, List[Tensor]]:
        out = super().forward(src_tokens, src_lengths)
        lang = sentence_languages(src_tokens, self.token_lang, self.num_langs)
        out["src_lang"] = [lang]
        if self.mole is not None:
            states = out["encoder_out"][0]
            lowres = lang.ge(self.num_experts) | lang.lt(0)  # the low-resource language (or unknown)
            mixed, gate = self.mole(states, lowres)
            mixed = mixed.masked_fill(out["encoder_padding_mask"][0].t().unsqueeze(-1), 0.0)
            out["encoder_out"] = [mixed]
            out["mole_gate"] = [gate]
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        dims = {"encoder_out": 1, "mole_gate": 1}
        return {k: [t.index_select(dims.get(k, 0), new_order) for t in v] for k, v in encoder_out.items()}


def ulr_arrays_for(args, task, src_dict) -> Dict[str, Tensor]:
    """The ULR arrays of ``--ulr-dir`` (default ``<data>/../ulr``); records their shapes in ``args`` so that a
    checkpoint rebuilds without the folder."""
    if not args.ulr_dir and getattr(getattr(task, "cfg", None), "data", None):
        data = utils.split_paths(task.cfg.data)[0]
        args.ulr_dir = os.path.join(os.path.dirname(os.path.abspath(data)), "ulr")
    arrays = load_ulr_arrays(args.ulr_dir, len(src_dict), getattr(args, "ulr_num_universal", None),
                             getattr(args, "ulr_query_dim", None))
    args.ulr_num_universal, args.ulr_query_dim = int(arrays["key"].shape[0]), int(arrays["key"].shape[1])
    return arrays


@register_model("universal")
class UniversalRNNModel(RNNSearchModel):
    """RNNsearch + ULR source embeddings + MoLE (module doc)."""

    @staticmethod
    def add_args(parser):
        RNNSearchModel.add_args(parser)
        add_ulr_args(parser)
        parser.add_argument("--ulr-fixed-A", action="store_true", default=None,
                            help="keep A = I (the '+ULR (A=I)' ablation)")
        parser.add_argument("--ulr-closest-only", action="store_true", default=None,
                            help="each token is its closest universal token ('Closest Uni-Token Only')")
        parser.add_argument("--ulr-no-language-specific", action="store_true", default=None,
                            help="drop the language-specific embedding term of Eq. 5.5 (alpha = 0)")
        parser.add_argument("--mole", action="store_true", default=None,
                            help="mixture of language experts after the encoder (Eq. 5.6)")
        parser.add_argument("--mole-hidden-size", "--mole-hidden-dim", dest="mole_hidden_dim", type=int, metavar="N",
                            help="expert hidden size (default: the encoder output size; --mole-hidden-dim is its "
                                 "earlier spelling)")
        parser.add_argument("--mole-residual", action="store_true", default=None,
                            help="s' = h + MoLE(h) instead of MoLE(h)")

    @classmethod
    def build_model(cls, args, task):
        universal_rnn(args)
        langs = getattr(task, "langs", None)
        if not langs:
            raise UserDataError("universal needs a task that knows the source languages (--task "
                             "universal_translation)")
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        if args.share_all_embeddings:
            raise UserDataError("universal: --share-all-embeddings is impossible (marked source vocabulary)")
        if args.ulr:
            arrays = ulr_arrays_for(args, task, src_dict)
            alpha = arrays["alpha"]
            if args.ulr_no_language_specific:
                alpha = torch.zeros_like(alpha)
            else:
                alpha = alpha_with_missing(alpha, arrays["query"])
            enc_emb = ULREmbedding(len(src_dict), args.encoder_embed_dim, src_dict.pad(), arrays["query"],
                                   arrays["key"], alpha, temperature=args.ulr_temperature,
                                   fixed_A=args.ulr_fixed_A, language_specific=not args.ulr_no_language_specific,
                                   closest_only=args.ulr_closest_only)
        else:
            enc_emb = embedding(len(src_dict), args.encoder_embed_dim, src_dict.pad())
        dec_emb = embedding(len(tgt_dict), args.decoder_embed_dim, tgt_dict.pad())
        encoder = UniversalEncoder(args, src_dict, enc_emb, task.token_lang, len(langs), len(task.aux_langs))
        decoder = RNNSearchDecoder(args, tgt_dict, dec_emb, encoder.output_dim)
        return cls(encoder, decoder)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, **kwargs)
        x, extra = self.decoder(prev_output_tokens, encoder_out=encoder_out, **kwargs)
        extra["src_lang"] = encoder_out["src_lang"]
        if "mole_gate" in encoder_out:
            extra["mole_gate"] = encoder_out["mole_gate"]
            extra["encoder_padding_mask"] = encoder_out["encoder_padding_mask"]
        return x, extra


@register_model_architecture("universal", "universal")
def universal_rnn(args):
    """``rnnsearch`` defaults plus ULR / MoLE off, τ = 0.05."""
    ulr_arch_defaults(args)
    set_default(args, "ulr_fixed_A", False)
    set_default(args, "ulr_closest_only", False)
    set_default(args, "ulr_no_language_specific", False)
    set_default(args, "mole", False)
    set_default(args, "mole_hidden_dim", None)
    set_default(args, "mole_residual", False)
    rnnsearch(args)


def _preset(units: int, dropout: float):
    def arch(args):
        """The §5.4.1 shape — ``rnnsearch``'s ``rnnsearch_uninmt`` preset: a 1-layer bi-LSTM encoder, a 2-layer
        attention LSTM decoder (Bahdanau MLP attention, no input feeding) — at a width (see :data:`PRESETS`)."""
        for name in ("encoder_embed_dim", "encoder_hidden_size", "attention_dim"):
            set_default(args, name, units)
        set_default(args, "dropout", dropout)
        ARCH_CONFIG_REGISTRY["rnnsearch_uninmt"](args)
        universal_rnn(args)

    return arch


# arch -> (units of embeddings, LSTMs and attention; dropout)
PRESETS = {
    "universal_512": (512, 0.4),  # §5.4.1: 512 units, embeddings 512 (= universal embeddings), dropout 0.4
    "universal_bench": (256, 0.2),  # the CPU size of recipes/gu/ch5.sh
    "universal_tiny": (16, 0.0),  # unit and command-line tests
}
register_presets("universal", _preset, PRESETS)

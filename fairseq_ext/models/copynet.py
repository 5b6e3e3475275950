"""``copynet``: CopyNet (Gu, Lu, Li, Li, "Incorporating Copying Mechanism in Sequence-to-Sequence Learning",
ACL 2016; Gu 2019 §3.2, Eqs. 3.1–3.6), an extension of ``rnnsearch`` (:mod:`fairseq_ext.models.rnnsearch`)
through its documented hooks; the math is in :mod:`fairseq_ext.modules.copy_attention`.

* **Output** (Eqs. 3.1–3.5): p(y_t) = p(y_t, g) + p(y_t, c) under one normaliser
  Z = Σ_{v∈V} e^{ψ_g(v)} + Σ_j e^{ψ_c(x_j)}: ψ_g is rnnsearch's readout + output projection (so with the copy
  scores at −∞ the distribution over V is exactly rnnsearch's softmax); ψ_c(x_j) = tanh(h_j^T W_c) · z_t with
  z_t the top decoder state. The decoder returns log p over the extended vocabulary V + n, n = the task's
  ``--max-source-oovs`` copy slots (0 with a task that has none): source words outside the target vocabulary
  have generate probability 0 and the copy mass of repeated source words is summed onto their id.
* **Selective read** (Eq. 3.6): the decoder input is [ε_I[y_{t−1}]; ζ(y_{t−1})] (the ``step_input`` hook),
  ζ = Σ_τ ρ_tτ h_τ with ρ the previous step's copy probabilities of the positions holding y_{t−1},
  renormalised (0 if y_{t−1} is not in the source). The per-position copy probabilities of the last step
  are kept in the incremental state (``copy_probs``, with ``copy_keys`` = tanh(h W_c)), so beam search's
  ``reorder_incremental_state`` keeps them with their hypotheses.
* **Extended ids**: a target-side id ≥ V (a copied source OOV) is embedded as ⟨unk⟩; a source id ≥ |source
  dictionary| (an OOV word, numbered by the ``copy_translation`` task) is read by the encoder as ⟨unk⟩ and
  is copyable into its own slot (:func:`~fairseq_ext.modules.copy_attention.source_copy_ids`). The encoder
  output adds ``src_copy_ids`` / ``src_copy_mask`` (B, S).
* ``decoder(..., features_only=True)`` returns, per step, [log p(v, g) for v ∈ V; log p(x_j, c) for every
  source position] (B, T, V + S) — the two modes before the scatter (``tools/analysis/copy_heatmap``).
* Copy positions: every source token except ⟨pad⟩ and ⟨/s⟩.
* ``--no-copy`` (e.g. at inference: ``fairseq-generate --model-overrides "{'no_copy': True}"``): the copy scores
  are −∞, so p(y) is the generate mode alone (the copy slots get probability 0, the selective read is 0).

Training: ``--criterion copynet_cross_entropy`` (the marginal likelihood, Eq. 2.8 with Eq. 3.1) with task
``copy_translation`` (the extended per-sentence vocabulary from the raw text). Archs: ``copynet`` (rnnsearch's
defaults with the plain Bahdanau decoder, no dropout), ``copynet_tiny`` (tests), ``copynet_syn`` (§3.3.1/§3.3.3
synthetic and dialogue: GRU, emb 150, hidden 300, = ``rnnsearch_copynet_syn``), ``copynet_lcsts`` (§3.3.2:
emb 350, hidden 500, = ``rnnsearch_lcsts``) and ``copynet_bench`` (the sizes of ``rnnsearch_bench``).
"""
from typing import Dict, List, Optional, Tuple

import torch
from fairseq.models import register_model, register_model_architecture
from torch import Tensor

from fairseq_ext.models.rnnsearch import (
    RNNSearchDecoder,
    RNNSearchEncoder,
    RNNSearchModel,
    rnnsearch,
    rnnsearch_bench,
)
from fairseq_ext.modules.arch_utils import register_presets, set_default
from fairseq_ext.modules.copy_attention import (
    CopyScorer,
    copy_mixture,
    selective_read,
    source_copy_ids,
    source_to_target_map,
)


class CopyNetEncoder(RNNSearchEncoder):
    """rnnsearch's encoder reading source ids ≥ |dictionary| as ⟨unk⟩, plus the copy ids of the positions."""

    def __init__(self, cfg, dictionary, embed_tokens, src_to_tgt: Tensor, tgt_dict, num_slots: int):
        super().__init__(cfg, dictionary, embed_tokens)
        self.register_buffer("src_to_tgt", src_to_tgt, persistent=False)
        self.num_slots = num_slots
        self.tgt_vocab_size, self.tgt_pad, self.tgt_unk = len(tgt_dict), tgt_dict.pad(), tgt_dict.unk()

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **kwargs) -> Dict[str, List[Tensor]]:
        known = src_tokens.lt(self.embed_tokens.num_embeddings)
        out = super().forward(src_tokens.masked_fill(~known, self.dictionary.unk()), src_lengths)
        ids, mask = source_copy_ids(src_tokens, self.src_to_tgt, self.num_slots, self.tgt_vocab_size,
                                    self.padding_idx, self.dictionary.eos(), self.tgt_pad, self.tgt_unk)
        out["src_tokens"] = [src_tokens]
        out["src_copy_ids"] = [ids]
        out["src_copy_mask"] = [mask]
        return out


class CopyNetDecoder(RNNSearchDecoder):
    """rnnsearch's decoder + copy mode + selective read (module doc)."""

    def __init__(self, cfg, dictionary, embed_tokens, context_dim: int, num_slots: int = 0):
        super().__init__(cfg, dictionary, embed_tokens, context_dim)
        self.num_slots = num_slots
        self.vocab_size = len(dictionary)
        self.copy_scorer = CopyScorer(context_dim, self.hidden_size)
        self.no_copy = bool(getattr(cfg, "no_copy", False))  # --no-copy: the generate mode alone
        self.step_tokens: Optional[Tensor] = None  # y_{t-1} of the steps extract_features is running
        self.first_step = 1

    @property
    def output_size(self) -> int:
        """Width of the output distribution: V + the copy slots."""
        return self.vocab_size + self.num_slots

    # ------------------------------------------------------------------ rnnsearch hooks
    def step_input_dim(self, embed_dim: int) -> int:
        return embed_dim + self.context_dim  # [ε_I[y_{t-1}]; ζ(y_{t-1})]

    def initial_state(self, encoder_out):
        state = super().initial_state(encoder_out)
        states = encoder_out["encoder_out"][0].transpose(0, 1)
        state["copy_keys"] = self.copy_scorer.keys(states)
        state["copy_probs"] = states.new_zeros(states.shape[:2])  # no copy before step 1: ζ(y_0) = 0
        return state

    def step_input(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int) -> Tensor:
        prev = self.step_tokens[:, step - self.first_step]
        zeta = selective_read(state["copy_probs"], encoder_out["src_copy_ids"][0], encoder_out["src_copy_mask"][0],
                              prev, encoder_out["encoder_out"][0].transpose(0, 1))
        return torch.cat([embedded, zeta.type_as(embedded)], dim=-1)

    def copy_scores(self, state: Dict[str, Tensor], encoder_out) -> Tensor:
        """ψ_c (B, S) of the step that produced ``state`` (z_t = the top layer's state); −∞ where not copyable
        (everywhere with ``--no-copy``)."""
        mask = encoder_out["src_copy_mask"][0]
        return self.copy_scorer(state["copy_keys"], state["hidden"][:, -1], mask & ~mask if self.no_copy else mask)

    def decoder_step(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int
                     ) -> Tuple[Tensor, Dict[str, Tensor], Optional[Tensor]]:
        """rnnsearch's step, then both modes under one normaliser: returns [log p(v, g); log p(x_j, c)]
        (B, V + S) and the state with this step's per-position copy probabilities."""
        features, state, weights = super().decoder_step(embedded, state, encoder_out, step)
        gen = self.output_projection(self.dropout(features)).float()
        scores = torch.cat([gen, self.copy_scores(state, encoder_out)], dim=-1)
        lprobs = torch.log_softmax(scores, dim=-1)
        state = dict(state, copy_probs=lprobs[:, self.vocab_size:].exp().type_as(state["hidden"]))
        return lprobs, state, weights

    # ------------------------------------------------------------------ fairseq interface
    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        """rnnsearch's pass (ids ≥ V embedded as ⟨unk⟩), keeping the raw y_{t−1} for the selective read;
        the "features" are the per-step log-probabilities of both modes (B, T, V + S)."""
        resumed = (incremental_state is not None
                   and self.get_incremental_state(incremental_state, "state") is not None)
        self.step_tokens = prev_output_tokens[:, -1:] if resumed else prev_output_tokens
        self.first_step = prev_output_tokens.size(1) if resumed else 1
        tokens = prev_output_tokens.masked_fill(prev_output_tokens.ge(self.vocab_size), self.dictionary.unk())
        try:
            return super().extract_features(tokens, encoder_out, incremental_state)
        finally:
            self.step_tokens = None

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False, **kwargs):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x, encoder_out)
        return x, extra

    def output_layer(self, features: Tensor, encoder_out=None) -> Tensor:
        """log p(y) over V + n (Eq. 3.1) from the per-step modes of :meth:`extract_features`."""
        V = self.vocab_size
        return copy_mixture(features[..., :V], features[..., V:], encoder_out["src_copy_ids"][0], self.num_slots)

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None) -> Tensor:
        lprobs = net_output[0].float()
        return lprobs if log_probs else lprobs.exp()


@register_model("copynet")
class CopyNetModel(RNNSearchModel):
    """CopyNet (module doc); rnnsearch's options and ``--no-copy``, the copy slots from the task's
    ``--max-source-oovs``."""

    @staticmethod
    def add_args(parser):
        RNNSearchModel.add_args(parser)
        parser.add_argument("--no-copy", action="store_true", default=None,
                            help="switch the copy mode off (copy scores -inf: the generate mode alone), e.g. at "
                                 "inference with --model-overrides \"{'no_copy': True}\"")

    @classmethod
    def build_model(cls, args, task):
        copynet(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        num_slots = int(getattr(getattr(task, "cfg", None), "max_source_oovs", 0) or 0)
        enc_emb, dec_emb = cls.build_embeddings(args, src_dict, tgt_dict)
        encoder = CopyNetEncoder(args, src_dict, enc_emb, source_to_target_map(src_dict, tgt_dict), tgt_dict,
                                 num_slots)
        decoder = CopyNetDecoder(args, tgt_dict, dec_emb, encoder.output_dim, num_slots)
        return cls(encoder, decoder)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return self.decoder.get_normalized_probs(net_output, log_probs, sample)


@register_model_architecture("copynet", "copynet")
def copynet(args):
    """rnnsearch's defaults with the Bahdanau (plain) decoder of CopyNet and no dropout (as in the authors' released code)."""
    set_default(args, "decoder_variant", "plain")
    set_default(args, "dropout", 0.0)
    rnnsearch(args)


@register_model_architecture("copynet", "copynet_tiny")
def copynet_tiny(args):
    """Unit and command-line tests: emb 16, hidden 16, attention 16."""
    set_default(args, "encoder_embed_dim", 16)
    set_default(args, "encoder_hidden_size", 16)
    copynet(args)


def _thesis(emb: int, hid: int):
    def arch(args):
        """A thesis setting of CopyNet: bi-GRU encoder, plain GRU decoder, no dropout (§3.3)."""
        set_default(args, "rnn_type", "gru")
        set_default(args, "encoder_embed_dim", emb)
        set_default(args, "encoder_hidden_size", hid)
        set_default(args, "attention_dim", hid)
        copynet(args)

    return arch


# Thesis setting -> (embedding, hidden size)
THESIS_PRESETS = {
    "copynet_syn": (150, 300),  # Gu §3.3.1 / §3.3.3: synthetic rules and dialogue, every model (Tables 3.2, 3.5)
    "copynet_lcsts": (350, 500),  # Gu §3.3.2: LCSTS (Table 3.4)
}
register_presets("copynet", _thesis, THESIS_PRESETS)


@register_model_architecture("copynet", "copynet_bench")
def copynet_bench(args):
    """The CPU benchmark's sizes (``rnnsearch_bench``: conditional GRU, emb 256, encoder 2x288, decoder 576,
    attention 288, all embeddings shared, dropout 0.2) with the copy mechanism."""
    rnnsearch_bench(args)

"""``seg_nmt``: the translation stage of SEG-NMT, search-engine guided non-parametric NMT (Gu 2019 ch. 4,
§4.2.2, Eqs. 4.2-4.7, Algorithm 2), an extension of ``rnnsearch`` (:mod:`fairseq_ext.models.rnnsearch`)
through its hooks; the memory math is in :mod:`fairseq_ext.modules.tm_memory`. The retrieved pairs arrive
in ``net_input`` as the ``seg_translation`` task gives them.

* **Key-value memory** (Eqs. 4.2-4.3, Alg. 2 lines 6-12): the same encoder and decoder run teacher-forced
  over every retrieved pair; the step predicting y'_τ gives the key c'_τ and the value (z'_τ, y'_τ).
* **Matching** (Eq. 4.6, ``--tm-metric diagonal|full``) with **coverage** (Eq. 4.7; ``--no-tm-coverage``).
* **Gate** ζ_t (``--gate-hidden-size``); an example without a retrieved pair has ζ = 0: rnnsearch exactly.
* **Fusion**: ``--fusion shallow`` (Eq. 4.5, the main model) or ``deep`` (Eq. 4.4).
* **Decoding**: the memory is built once per sentence, before the beam expands (:meth:`SegNMTDecoder.memory_pass`
  skips each pair's steps after its last token), and stays one row per sentence (only ``tm_row`` follows the
  beam); Eq. 4.5 mixes only the slots' words, whose first slots (``tm_first``) are found with the memory; the
  step reads c_t from rnnsearch's attention.

:meth:`SegNMTModel.tm_trace` gives ζ_t per output token and the slot it points at (Fig. 4.5, the task's
``--tm-export``). Training: ``--criterion seg_nmt_cross_entropy``; an rnnsearch checkpoint of the same
size warm-starts the model (``--finetune-from-model``, :class:`SentenceWarmStartMixin`).

Archs: ``seg_nmt`` (= ``seg_nmt_jrc``, the thesis's setting), ``seg_nmt_bench``, ``seg_nmt_tiny``. The
COPYNET baseline of Table 4.2 is ``seg_copynet`` (:mod:`fairseq_ext.models.seg_copynet`).

References: Gu, Wang, Cho, Li, "Search Engine Guided Neural Machine Translation", AAAI 2018; Gu, "Efficient
Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019.
"""
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from fairseq.models import ARCH_CONFIG_REGISTRY, register_model, register_model_architecture
from torch import Tensor

from fairseq_ext.models.rnnsearch import RNNSearchDecoder, RNNSearchEncoder, RNNSearchModel, rnnsearch_tiny
from fairseq_ext.modules.arch_utils import set_default
from fairseq_ext.modules.tm_memory import (
    TM_METRICS,
    BilinearMetric,
    TMGate,
    gate_log_probs,
    gather_slots,
    memory_log_attention,
    reorder_shared,
    shallow_fusion,
    shared_read,
    shared_scores,
    slot_first,
)
from fairseq_ext.modules.warm_start import SentenceWarmStartMixin
from fairseq_ext.data.errors import UserDataError

FUSIONS = ("shallow", "deep")

#: the memory-only parameters (absent from a sentence checkpoint): M, λ, the gate
TM_PARAM_PREFIXES = ("decoder.tm_",)

#: the memory tables a sentence's beam hypotheses share (one row per sentence, indexed by ``tm_row``)
SHARED_MEMORY = ("tm_keys", "tm_values")

#: the ``net_input`` keys of the ``seg_translation`` task
TM_INPUT_KEYS = ("tm_src_tokens", "tm_src_lengths", "tm_prev_output_tokens", "tm_tgt_tokens", "tm_index")


def memory_rows(tm_index: Optional[Tensor], batch_size: int, device) -> Tensor:
    """``tm_index`` (B, K), or (B, 0) when the batch has none (interactive input: no memory)."""
    if tm_index is None:
        return torch.zeros(batch_size, 0, dtype=torch.long, device=device)
    return tm_index


class SegNMTEncoder(RNNSearchEncoder):
    """rnnsearch's encoder + the translation memory of the batch (module doc): ``memory_builder`` is the
    decoder's :meth:`SegNMTDecoder.build_memory`, set by the model (a method, not a sub-module)."""

    def __init__(self, cfg, dictionary, embed_tokens):
        super().__init__(cfg, dictionary, embed_tokens)
        self.memory_builder = None

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None,
                tm_src_tokens: Optional[Tensor] = None, tm_src_lengths: Optional[Tensor] = None,
                tm_prev_output_tokens: Optional[Tensor] = None, tm_tgt_tokens: Optional[Tensor] = None,
                tm_index: Optional[Tensor] = None, **kwargs) -> Dict[str, List[Tensor]]:
        out = super().forward(src_tokens, src_lengths)
        tm_index = memory_rows(tm_index, src_tokens.size(0), src_tokens.device)
        tm_out = None
        if tm_src_tokens is not None and tm_src_tokens.size(0) > 0 and bool(tm_index.ge(0).any()):
            tm_out = super().forward(tm_src_tokens, tm_src_lengths)
        out.update(self.memory_builder(tm_out, tm_prev_output_tokens, tm_tgt_tokens, tm_index))
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """rnnsearch's reordering, except for the big memory tables (``tm_keys``, ``tm_values``: (S, M, ·)),
        which stay one row per sentence: only ``tm_row`` (N,), the row each hypothesis reads, follows the beam
        (rows of finished sentences are dropped). Re-indexing the tables at every step was a quarter of
        SEG-NMT's beam-search time."""
        shared = {k: encoder_out[k][0] for k in SHARED_MEMORY if k in encoder_out}
        out = super().reorder_encoder_out(
            {k: v for k, v in encoder_out.items() if k not in SHARED_MEMORY and k != "tm_row"}, new_order)
        if shared:
            row, shared = reorder_shared(encoder_out["tm_row"][0] if "tm_row" in encoder_out else None, shared,
                                         new_order)
            out.update({k: [t] for k, t in shared.items()})
            out["tm_row"] = [row]
        return out


class SegNMTDecoder(RNNSearchDecoder):
    """rnnsearch's decoder + the memory read, the gate, coverage and fusion (module doc)."""

    def __init__(self, cfg, dictionary, embed_tokens, context_dim: int):
        super().__init__(cfg, dictionary, embed_tokens, context_dim)
        if cfg.fusion not in FUSIONS:
            raise UserDataError(f"unknown --fusion {cfg.fusion!r} ({', '.join(FUSIONS)})")
        H = self.hidden_size
        self.fusion = cfg.fusion
        self.out_dim = cfg.decoder_out_embed_dim
        self.use_coverage = not cfg.no_tm_coverage
        self.tm_metric = BilinearMetric(context_dim, cfg.tm_metric)  # M (Eq. 4.6), init I
        if self.use_coverage:
            self.tm_coverage_weight = torch.nn.Parameter(torch.zeros(()))  # λ (Eq. 4.6), init 0
        self.tm_gate = TMGate(context_dim + 2 * H, cfg.gate_hidden_dim)  # f_gate([c_t; z_t; z̃_t])
        self.transition.register_forward_hook(self._keep_context)

    def _keep_context(self, module, inputs, output) -> None:
        """c_t of the step being taken, as rnnsearch's attention computed it (read by :meth:`decoder_step`)."""
        self.__dict__["_step_context"] = output[2]

    # ------------------------------------------------------------------ the memory (Eqs. 4.2–4.3)
    def build_memory(self, tm_encoder_out, tm_prev_output_tokens: Optional[Tensor], tm_tgt_tokens: Optional[Tensor],
                     tm_index: Tensor) -> Dict[str, List[Tensor]]:
        """The ``encoder_out`` entries of the memory (module doc) from the retrieved pairs' encoder output
        (None: no pair in the batch), their decoder inputs / targets (R, L) and ``tm_index`` (B, K)."""
        pad = self.dictionary.pad()
        if tm_encoder_out is None:
            C, device = self.context_dim, tm_index.device
            dtype = self.tm_metric.weight.dtype
            rows = {"keys": torch.zeros(0, 0, C, device=device, dtype=dtype),
                    "values": torch.zeros(0, 0, self.hidden_size, device=device, dtype=dtype),
                    "tokens": torch.zeros(0, 0, dtype=torch.long, device=device)}
            slot_mask = torch.zeros(0, 0, dtype=torch.bool, device=device)
        else:
            # the memory is the translation model's own pass: no decoding-time noise or actor (NPD, Eq. 2.14)
            hooks = [h for h in ("state_perturbation", "state_action", "output_action") if getattr(self, h, None)]
            saved = {h: self.__dict__.get(h) for h in hooks}
            for h in hooks:
                setattr(self, h, None)
            try:
                attn, states = self.memory_pass(tm_encoder_out, tm_prev_output_tokens, tm_tgt_tokens)
            finally:
                for h in hooks:
                    if saved[h] is None:
                        del self.__dict__[h]  # back to the class default
                    else:
                        setattr(self, h, saved[h])
            if attn is None:  # Enc-Dec: the fixed context
                keys = tm_encoder_out["encoder_final"][0].unsqueeze(1).expand(-1, states.size(1), -1)
            else:  # c'_τ = Σ α'_τ h' (the context that predicts y'_τ)
                keys = torch.bmm(attn, tm_encoder_out["encoder_out"][0].transpose(0, 1))
            rows = {"keys": keys, "values": states, "tokens": tm_tgt_tokens}
            slot_mask = tm_tgt_tokens.ne(pad)
        mem = gather_slots(rows, slot_mask, tm_index)
        padding = mem["padding_mask"]
        tokens = mem["tokens"].masked_fill(padding, pad)
        return {"tm_keys": [mem["keys"]], "tm_values": [mem["values"]],
                "tm_tokens": [tokens], "tm_first": [slot_first(tokens)], "tm_padding_mask": [padding],
                "tm_pair": [mem["pair"]], "tm_position": [mem["position"]]}

    def memory_pass(self, tm_encoder_out, prev: Tensor, tgt: Tensor):
        """(α' (R, L, S') or None, z' (R, L, H)): rnnsearch's teacher-forced pass over the retrieved pairs. At
        inference the pairs run longest first and step t computes only the pairs whose target is longer than t
        (leading rows: views, no copies); the steps after a pair's last token, which no slot reads, are skipped
        (zeros there). In training: :meth:`extract_features` itself."""
        if self.training:
            _, extra = self.extract_features(prev, tm_encoder_out)
            return extra["attn"][0], extra["states"][0]
        R, L = tgt.shape
        lengths = tgt.ne(self.dictionary.pad()).sum(1)
        order = lengths.argsort(descending=True, stable=True)
        active = lengths.index_select(0, order).unsqueeze(0).gt(torch.arange(L, device=tgt.device).unsqueeze(1))
        active = active.sum(1).tolist()  # rows in step t + 1, non-increasing
        states_first = tm_encoder_out["encoder_out"][0].transpose(0, 1).index_select(0, order)  # (R, S', C)
        rows = {k: v[0].index_select(0, order) for k, v in tm_encoder_out.items() if k != "encoder_out"}

        def leading(n: int):
            return dict({k: [v[:n]] for k, v in rows.items()}, encoder_out=[states_first[:n].transpose(0, 1)])

        enc = leading(R)
        state = self.initial_state(enc)
        embedded = self.dropout(self.embed_tokens(prev.index_select(0, order)))
        states = embedded.new_zeros(R, L, self.hidden_size)
        attn = None if self.attention is None else embedded.new_zeros(R, L, states_first.size(1))
        for t, n in enumerate(active):
            if n == 0:
                break
            if n < state["hidden"].size(0):
                state, enc = {k: v[:n] for k, v in state.items()}, leading(n)
            state = self.transform_state(state, t + 1)
            _, state, weights = self.decoder_step(embedded[:n, t], state, enc, t + 1)
            states[:n, t] = state["hidden"][:, -1]
            if attn is not None:
                attn[:n, t] = weights
        back = torch.empty_like(order)
        back[order] = torch.arange(R, device=order.device)
        return None if attn is None else attn.index_select(0, back), states.index_select(0, back)

    # ------------------------------------------------------------------ rnnsearch hooks
    def initial_state(self, encoder_out):
        state = super().initial_state(encoder_out)
        if self.use_coverage and "tm_keys" in encoder_out:
            pad = encoder_out["tm_padding_mask"][0]
            state["tm_coverage"] = state["hidden"].new_zeros(pad.shape)  # β_0 = 0 (Alg. 2 line 11)
        return state

    def decoder_step(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int):
        """rnnsearch's step; with a memory in ``encoder_out`` the features are [o_t; log ζ_t; log(1 − ζ_t);
        log q_t] and the state carries β_t (module doc). Without (the memory pass itself) rnnsearch's."""
        features, new_state, weights = super().decoder_step(embedded, state, encoder_out, step)
        ctx = self.__dict__.pop("_step_context")  # c_t (the fixed context without attention)
        if "tm_keys" not in encoder_out:
            return features, new_state, weights
        z = new_state["hidden"][:, -1]
        padding = encoder_out["tm_padding_mask"][0]
        row = encoder_out["tm_row"][0] if "tm_row" in encoder_out else None  # the memory row of each hypothesis
        scores = shared_scores(self.tm_metric, ctx, encoder_out["tm_keys"][0].type_as(ctx), row)  # c_tᵀ M c'_τ
        coverage = state.get("tm_coverage")
        log_q = memory_log_attention(scores, padding, coverage, getattr(self, "tm_coverage_weight", None))
        q = log_q.exp()
        z_tilde = shared_read(q.type_as(z), encoder_out["tm_values"][0].type_as(z), row)  # Eq. 4.3
        log_zeta, log_rest = gate_log_probs(self.tm_gate(torch.cat([ctx, z, z_tilde], dim=-1)), padding.all(1))
        zeta = log_zeta.exp()
        if coverage is not None:
            new_state["tm_coverage"] = coverage + (q * zeta.unsqueeze(1)).type_as(coverage)  # Eq. 4.7
        if self.fusion == "deep":  # Eq. 4.4, in the readout only
            z_fusion = zeta.unsqueeze(1).type_as(z) * z_tilde + log_rest.exp().unsqueeze(1).type_as(z) * z
            features = torch.tanh(self.readout(torch.cat([z_fusion, embedded, ctx], dim=-1)))
        extra = torch.stack([log_zeta, log_rest], dim=-1)
        return torch.cat([features.float(), extra, log_q], dim=-1), new_state, weights

    # ------------------------------------------------------------------ fairseq interface
    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False, **kwargs):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if encoder_out is not None and "tm_keys" in encoder_out:
            O = self.out_dim
            extra["tm_gate"] = [x[..., O].exp()]
            extra["tm_attn"] = [x[..., O + 2:].exp()]
            if not features_only:
                x = self.output_layer(x, encoder_out)
        elif not features_only:
            x = self.output_layer(x)
        return x, extra

    def output_layer(self, features: Tensor, encoder_out=None) -> Tensor:
        """log p (B, T, V) from the per-step features: Eq. 4.5 (shallow) or rnnsearch's softmax of the fused
        readout (deep); without a memory (``encoder_out`` None): rnnsearch's logits."""
        if encoder_out is None or "tm_keys" not in encoder_out:
            return super().output_layer(features)
        O = self.out_dim
        nmt = F.log_softmax(super().output_layer(features[..., :O].type_as(self.output_projection.weight)).float(),
                            dim=-1)
        if self.fusion == "deep":
            return nmt
        first = encoder_out["tm_first"][0] if "tm_first" in encoder_out else None
        return shallow_fusion(nmt, features[..., O + 2:], features[..., O], features[..., O + 1],
                              encoder_out["tm_tokens"][0], first)

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None) -> Tensor:
        lprobs = net_output[0].float()
        return lprobs if log_probs else lprobs.exp()


@register_model("seg_nmt")
class SegNMTModel(SentenceWarmStartMixin, RNNSearchModel):
    """SEG-NMT (module doc)."""

    DOC_PARAM_PREFIXES = TM_PARAM_PREFIXES
    #: the ``seg_translation`` task passes the retrieved pairs (``tm_*``) to this model
    uses_translation_memory = True

    def __init__(self, encoder, decoder):
        super().__init__(encoder, decoder)
        encoder.memory_builder = decoder.build_memory

    @staticmethod
    def add_args(parser):
        RNNSearchModel.add_args(parser)
        parser.add_argument("--fusion", choices=FUSIONS,
                            help="shallow: p = zeta p_copy + (1 - zeta) p_NMT (Eq. 4.5); deep: the readout reads "
                                 "zeta z~ + (1 - zeta) z (Eq. 4.4)")
        parser.add_argument("--tm-metric", choices=TM_METRICS,
                            help="the matching matrix M of c_t^T M c'_tau: diagonal or full (both start as I)")
        parser.add_argument("--no-tm-coverage", action="store_true", default=None,
                            help="no coverage term (-lambda beta, Eqs. 4.6-4.7): Eq. 4.2's plain softmax")
        parser.add_argument("--gate-hidden-size", "--gate-hidden-dim", dest="gate_hidden_dim", type=int, metavar="N",
                            help="hidden units of the gate MLP f_gate (0: linear; default: the decoder's hidden size; "
                                 "--gate-hidden-dim is its earlier spelling)")

    @classmethod
    def build_model(cls, args, task):
        seg_nmt_defaults(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        enc_emb, dec_emb = cls.build_embeddings(args, src_dict, tgt_dict)
        encoder = SegNMTEncoder(args, src_dict, enc_emb)
        decoder = SegNMTDecoder(args, tgt_dict, dec_emb, encoder.output_dim)
        return cls(encoder, decoder)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return self.decoder.get_normalized_probs(net_output, log_probs, sample)

    @torch.no_grad()
    def tm_trace(self, net_input: Dict[str, Tensor], rows: Tensor, tokens: Tensor) -> Dict[str, Tensor]:
        """ζ_t and the argmax memory slot of every token of the hypotheses ``tokens`` (N, T) (right-padded,
        ending in EOS) of the batch rows ``rows`` (N,), teacher-forced (= the incremental values). Returns
        ``gate`` (N, T), ``slot_prob`` (N, T) = max_τ q_{t,τ}, ``pair`` (N, T) (k of the slot's pair, −1:
        no memory), ``position`` (N, T) (τ in Y'_k), ``slot_token`` (N, T) (y'_τ; pad without memory)."""
        encoder_out = self.encoder(**{k: v for k, v in net_input.items() if k != "prev_output_tokens"})
        encoder_out = self.encoder.reorder_encoder_out(encoder_out, rows)
        pad, eos = self.decoder.dictionary.pad(), self.decoder.dictionary.eos()
        prev = torch.cat([tokens.new_full((tokens.size(0), 1), eos), tokens[:, :-1]], dim=1)
        prev = prev.masked_fill(prev.eq(pad) | tokens.eq(pad), pad)
        _, extra = self.decoder(prev, encoder_out=encoder_out, features_only=True)
        gate, q = extra["tm_gate"][0], extra["tm_attn"][0]
        N, T = tokens.shape
        if q.size(-1) == 0:
            none = tokens.new_full((N, T), -1)
            return {"gate": gate, "slot_prob": gate.new_zeros(N, T), "pair": none, "position": none,
                    "slot_token": tokens.new_full((N, T), pad)}
        prob, slot = q.max(dim=-1)
        empty = encoder_out["tm_padding_mask"][0].all(1, keepdim=True).expand(N, T)
        pick = lambda name: encoder_out[name][0].gather(1, slot)  # noqa: E731
        return {"gate": gate, "slot_prob": prob, "pair": pick("tm_pair").masked_fill(empty, -1),
                "position": pick("tm_position").masked_fill(empty, -1),
                "slot_token": pick("tm_tokens").masked_fill(empty, pad)}


def seg_nmt_defaults(args):
    """The SEG-NMT options' defaults (the thesis: shallow fusion, diagonal M, coverage, gate hidden = H)."""
    set_default(args, "fusion", "shallow")
    set_default(args, "tm_metric", "diagonal")
    set_default(args, "no_tm_coverage", False)
    ARCH_CONFIG_REGISTRY["rnnsearch_jrc"](args)
    set_default(args, "gate_hidden_dim", args.decoder_hidden_size)


@register_model_architecture("seg_nmt", "seg_nmt")
def seg_nmt(args):
    """The thesis's SEG-NMT (§4.3.1): ``rnnsearch_jrc`` (bi-GRU 1024, conditional GRU 1024, emb 512, no
    dropout), shallow fusion, diagonal metric, coverage, gate hidden = decoder hidden."""
    seg_nmt_defaults(args)


@register_model_architecture("seg_nmt", "seg_nmt_jrc")
def seg_nmt_jrc(args):
    """JRC-Acquis (Table 4.2): the thesis preset, = ``seg_nmt``."""
    seg_nmt_defaults(args)


@register_model_architecture("seg_nmt", "seg_nmt_bench")
def seg_nmt_bench(args):
    """``rnnsearch_bench``'s sizes (a ``rnnsearch_bench`` checkpoint warm-starts it)."""
    ARCH_CONFIG_REGISTRY["rnnsearch_bench"](args)
    seg_nmt_defaults(args)


@register_model_architecture("seg_nmt", "seg_nmt_tiny")
def seg_nmt_tiny(args):
    """Unit and command-line tests: ``rnnsearch_tiny`` (emb 16, hidden 16, no dropout)."""
    rnnsearch_tiny(args)
    seg_nmt_defaults(args)

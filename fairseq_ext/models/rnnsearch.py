"""``rnnsearch``: the attention-based RNN encoder–decoder of Gu (2019) §2.1 (RNNsearch) and its no-attention
Enc-Dec baseline, one model for every thesis that builds on it.

* Encoder (Eq. 2.6): bidirectional (or ``--encoder-unidirectional``) GRU/LSTM layers
  (:class:`fairseq_ext.modules.rnn.BiRNNEncoderStack`).
* Attention (Eq. 2.7): Bahdanau MLP attention; ``--no-attention`` gives the "Enc-Dec" row of Table 3.2.
* Decoder (Eq. 2.5): z_0 = tanh(W_init · mean h); ``--decoder-variant plain|conditional`` (the dl4mt
  conditional GRU) in the first layer, plain layers above; readout, then the softmax of Eq. 2.3.
* Incremental decoding runs the same per-step code as the teacher-forced pass.

Extension points (CopyNet, the trainable-greedy actor of ch. 7, document context):
:meth:`RNNSearchDecoder.transform_state` (with ``decoder.state_perturbation`` for the noise of Eq. 2.14),
``decoder.state_action`` / ``decoder.output_action`` (the actor's two sites),
:meth:`RNNSearchDecoder.initial_state`, :meth:`RNNSearchDecoder.initial_preactivation` (InitDec),
:meth:`RNNSearchDecoder.step_input` (e.g. Eq. 3.6), :meth:`RNNSearchDecoder.decoder_step` and fairseq's
``output_layer`` / ``get_normalized_probs``.

Architectures: ``rnnsearch`` (dl4mt-like defaults: conditional GRU, emb 512, hidden 1024), ``rnnsearch_tiny``
(tests), ``rnnsearch_bench`` (the CPU benchmark size) and one preset per thesis setting
(:data:`THESIS_PRESETS`).

References: Bahdanau, Cho, Bengio, "Neural Machine Translation by Jointly Learning to Align and
Translate", ICLR 2015; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong
Kong, 2019; Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University, 2019.
"""
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)

from fairseq_ext.modules.arch_utils import register_presets, set_default
from fairseq_ext.modules.rnn import (
    DECODER_VARIANTS,
    RNN_TYPES,
    AttentionalTransition,
    BahdanauAttention,
    BiRNNEncoderStack,
    make_cell,
    run_cell,
)
from fairseq_ext.data.errors import UserDataError

DEFAULT_MAX_POSITIONS = 1024


def embedding(num_embeddings: int, dim: int, padding_idx: int) -> nn.Embedding:
    emb = nn.Embedding(num_embeddings, dim, padding_idx=padding_idx)
    nn.init.uniform_(emb.weight, -0.1, 0.1)
    nn.init.constant_(emb.weight[padding_idx], 0.0)
    return emb


class RNNSearchEncoder(FairseqEncoder):
    """Embeddings + (bi)directional RNN stack (Eq. 2.6).

    ``encoder_out`` (fairseq's dict-of-lists convention): ``encoder_out`` [(S, B, C) states h_τ, zero at
    pads], ``encoder_padding_mask`` [(B, S)], ``encoder_final`` [(B, C) = [→h_{T'}; ←h_1]], ``src_tokens``
    [(B, S)], ``src_lengths`` [(B,)]; positions are those of ``src_tokens`` (left padding kept)."""

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        self.padding_idx = dictionary.pad()
        self.dropout = nn.Dropout(cfg.dropout)
        self.rnn = BiRNNEncoderStack(cfg.rnn_type, embed_tokens.embedding_dim, cfg.encoder_hidden_size,
                                     cfg.encoder_layers, not cfg.encoder_unidirectional, cfg.dropout)
        self.output_dim = self.rnn.output_dim
        self.max_source_positions = cfg.max_source_positions

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **kwargs) -> Dict[str, List[Tensor]]:
        mask = src_tokens.eq(self.padding_idx)
        x = self.dropout(self.embed_tokens(src_tokens))
        states, final = self.rnn(x, mask)
        states = self.dropout(states)
        if src_lengths is None:
            src_lengths = (~mask).sum(1)
        return {"encoder_out": [states.transpose(0, 1)], "encoder_padding_mask": [mask],
                "encoder_final": [final], "src_tokens": [src_tokens], "src_lengths": [src_lengths]}

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        dims = {"encoder_out": 1}
        return {k: [t.index_select(dims.get(k, 0), new_order) for t in v] for k, v in encoder_out.items()}

    def max_positions(self) -> int:
        return self.max_source_positions


class RNNSearchDecoder(FairseqIncrementalDecoder):
    """The attentional RNN decoder (Eqs. 2.3, 2.5, 2.7) with the per-step hooks of the module doc."""

    #: ``(hidden (B, L, H), step) -> hidden``, set by a generator for one decode (NPD's noise, Eq. 2.14)
    #: and cleared afterwards; None: no perturbation.
    state_perturbation: Optional[Callable[[Tensor, int], Tensor]] = None
    #: the actor sites of the module doc (``(z, c_t, step, encoder_out) -> z'``); None: no action.
    state_action: Optional[Callable] = None
    output_action: Optional[Callable] = None

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding, context_dim: int):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        E, H, L = embed_tokens.embedding_dim, cfg.decoder_hidden_size, cfg.decoder_layers
        self.rnn_type = cfg.rnn_type
        self.hidden_size, self.num_layers, self.context_dim = H, L, context_dim
        self.dropout = nn.Dropout(cfg.dropout)
        attention = None if cfg.no_attention else BahdanauAttention(H, context_dim, cfg.attention_dim)
        self.transition = AttentionalTransition(cfg.rnn_type, cfg.decoder_variant, self.step_input_dim(E),
                                                context_dim, H, attention)
        self.layers = nn.ModuleList([make_cell(cfg.rnn_type, H, H) for _ in range(L - 1)])
        self.init_proj = nn.Linear(context_dim, L * H)
        out_dim = cfg.decoder_out_embed_dim
        self.readout = nn.Linear(H + E + context_dim, out_dim)  # W_z z + W_e ε_I[y] + W_c c + b
        if cfg.share_decoder_input_output_embed:
            if out_dim != E:
                raise UserDataError(f"--share-decoder-input-output-embed needs --decoder-out-embed-dim ({out_dim}) "
                                 f"= --decoder-embed-dim ({E})")
            self.output_projection = nn.Linear(out_dim, len(dictionary))
            self.output_projection.weight = embed_tokens.weight
        else:
            self.output_projection = nn.Linear(out_dim, len(dictionary))
            nn.init.uniform_(self.output_projection.weight, -0.1, 0.1)
        nn.init.zeros_(self.output_projection.bias)
        self.max_target_positions = cfg.max_target_positions

    @property
    def attention(self) -> Optional[BahdanauAttention]:
        return self.transition.attention

    # ------------------------------------------------------------------ hooks for subclasses
    def step_input_dim(self, embed_dim: int) -> int:
        """Size of the transition's input x_t (:meth:`step_input`)."""
        return embed_dim

    def step_input(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int) -> Tensor:
        """x_t from ε_I[y_{t−1}] (B, E) and z_{t−1}'s state: the embedding itself."""
        return embedded

    def initial_preactivation(self, encoder_out: Dict[str, List[Tensor]]) -> Tensor:
        """(B, L·H) W_init · mean_τ h_τ + b (the fixed context without attention): z_0 before its tanh, where a
        subclass adds its own terms (e.g. Maruf's InitDec context, Eq. 5.5)."""
        if self.attention is None:
            summary = encoder_out["encoder_final"][0]
        else:
            states = encoder_out["encoder_out"][0].transpose(0, 1)  # (B, S, C)
            real = (~encoder_out["encoder_padding_mask"][0]).unsqueeze(-1).type_as(states)
            summary = (states * real).sum(1) / real.sum(1).clamp(min=1.0)
        return self.init_proj(summary)

    def initial_state(self, encoder_out: Dict[str, List[Tensor]]) -> Dict[str, Tensor]:
        """The state before step 1, batch-first: ``hidden`` (B, L, H) = tanh(:meth:`initial_preactivation`),
        ``cell`` (B, L, H) zeros (LSTM), ``proj_keys`` (B, S, A) = U h + b."""
        states = encoder_out["encoder_out"][0].transpose(0, 1)  # (B, S, C)
        B = states.size(0)
        hidden = torch.tanh(self.initial_preactivation(encoder_out)).view(B, self.num_layers, self.hidden_size)
        state = {"hidden": hidden}
        if self.rnn_type == "lstm":
            state["cell"] = torch.zeros_like(hidden)
        if self.attention is not None:
            state["proj_keys"] = self.attention.project_keys(states)
        return state

    def transform_state(self, state: Dict[str, Tensor], step: int, incremental_state=None) -> Dict[str, Tensor]:
        """The per-step hook on z_{t−1} before the transition of step ``step`` (t ≥ 1); returns a (new) state
        dict, never modifies ``state`` in place. Default: identity, or ``state_perturbation`` applied to
        ``hidden`` (Eq. 2.14's z_{t−1} + n_t; an LSTM's memory cells are left alone). Called in the
        teacher-forced pass (``incremental_state`` None) and in incremental decoding alike."""
        if self.state_perturbation is not None:
            state = dict(state, hidden=self.state_perturbation(state["hidden"], step))
        return state

    def decoder_step(self, embedded: Tensor, state: Dict[str, Tensor], encoder_out, step: int
                     ) -> Tuple[Tensor, Dict[str, Tensor], Optional[Tensor]]:
        """One step t: (ε_I[y_{t−1}] (B, E), z_{t−1}'s state) → (readout o_t (B, O), z_t's state, α_t (B, S))."""
        x = self.step_input(embedded, state, encoder_out, step)
        memory = {"values": encoder_out["encoder_out"][0].transpose(0, 1),
                  "padding_mask": encoder_out["encoder_padding_mask"][0], "proj_keys": state.get("proj_keys")}
        hidden, cells = state["hidden"], state.get("cell")
        c0 = cells[:, 0] if cells is not None else None
        act = self.state_action
        h, c, ctx, weights = self.transition(x, hidden[:, 0], c0, memory, encoder_out["encoder_final"][0],
                                             None if act is None else (lambda z, ct: act(z, ct, step, encoder_out)))
        new_h, new_c = [h], [c]
        for i, cell in enumerate(self.layers, start=1):
            h, c = run_cell(cell, self.dropout(h), hidden[:, i], cells[:, i] if cells is not None else None)
            new_h.append(h)
            new_c.append(c)
        if self.output_action is not None:
            h = new_h[-1] = self.output_action(h, ctx, step, encoder_out)
        new_state = dict(state, hidden=torch.stack(new_h, 1))
        if cells is not None:
            new_state["cell"] = torch.stack(new_c, 1)
        features = torch.tanh(self.readout(torch.cat([h, embedded, ctx], dim=-1)))
        return features, new_state, weights

    # ------------------------------------------------------------------ fairseq interface
    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False, **kwargs):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        """Teacher-forced pass over ``prev_output_tokens`` (B, T), or — with ``incremental_state`` — the
        steps not yet taken (the last token once the state exists). Returns the readouts (B, T, O) and
        {"attn": [α (B, T, S) or None], "states": [top-layer z_t (B, T, H)]}."""
        state = None
        if incremental_state is not None:
            state = self.get_incremental_state(incremental_state, "state")
        if state is None:
            state, first = self.initial_state(encoder_out), 1
            tokens = prev_output_tokens
        else:
            first = prev_output_tokens.size(1)
            tokens = prev_output_tokens[:, -1:]
        embedded = self.dropout(self.embed_tokens(tokens))
        feats, tops, attns = [], [], []
        for i in range(tokens.size(1)):
            state = self.transform_state(state, first + i, incremental_state)
            f, state, a = self.decoder_step(embedded[:, i], state, encoder_out, first + i)
            feats.append(f)
            tops.append(state["hidden"][:, -1])
            attns.append(a)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "state", state)
        attn = torch.stack(attns, 1) if self.attention is not None else None
        return torch.stack(feats, 1), {"attn": [attn], "states": [torch.stack(tops, 1)]}

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(self.dropout(features))

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        state = self.get_incremental_state(incremental_state, "state")
        if state is not None:
            self.set_incremental_state(incremental_state, "state",
                                       {k: v.index_select(0, new_order) for k, v in state.items()})

    def max_positions(self) -> int:
        return self.max_target_positions


@register_model("rnnsearch")
class RNNSearchModel(FairseqEncoderDecoderModel):
    """RNNsearch / Enc-Dec (see module doc)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--rnn-type", choices=RNN_TYPES, help="recurrent unit of encoder and decoder")
        parser.add_argument("--decoder-variant", choices=DECODER_VARIANTS,
                            help="first decoder layer: plain (Bahdanau: attend from z_{t-1}) or conditional "
                                 "(dl4mt conditional GRU: RNN on the word, attend, RNN on the context)")
        parser.add_argument("--no-attention", action="store_true", default=None,
                            help="Enc-Dec baseline: a fixed context [fwd h_T'; bwd h_1] instead of attention")
        parser.add_argument("--encoder-embed-dim", type=int, metavar="N")
        parser.add_argument("--encoder-hidden-size", type=int, metavar="N", help="units per direction")
        parser.add_argument("--encoder-layers", type=int, metavar="N")
        parser.add_argument("--encoder-unidirectional", action="store_true", default=None,
                            help="left-to-right encoder only (the simultaneous-translation environment)")
        parser.add_argument("--decoder-embed-dim", type=int, metavar="N")
        parser.add_argument("--decoder-hidden-size", type=int, metavar="N")
        parser.add_argument("--decoder-layers", type=int, metavar="N",
                            help="decoder depth; the context enters the first layer only")
        parser.add_argument("--decoder-out-embed-dim", type=int, metavar="N", help="readout size")
        parser.add_argument("--attention-dim", type=int, metavar="N", help="size of the attention MLP")
        parser.add_argument("--dropout", type=float, metavar="D",
                            help="dropout on embeddings, encoder states, between decoder layers, readout")
        parser.add_argument("--share-decoder-input-output-embed", action="store_true", default=None,
                            help="tie the output projection to the decoder embeddings")
        parser.add_argument("--share-all-embeddings", action="store_true", default=None,
                            help="one embedding matrix for source, target and output (joined dictionary)")
        parser.add_argument("--max-source-positions", type=int, metavar="N")
        parser.add_argument("--max-target-positions", type=int, metavar="N")

    @classmethod
    def build_model(cls, args, task):
        rnnsearch(args)  # fills what an older checkpoint or a hand-built namespace lacks
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        enc_emb, dec_emb = cls.build_embeddings(args, src_dict, tgt_dict)
        encoder = RNNSearchEncoder(args, src_dict, enc_emb)
        decoder = RNNSearchDecoder(args, tgt_dict, dec_emb, encoder.output_dim)
        return cls(encoder, decoder)

    @staticmethod
    def build_embeddings(args, src_dict, tgt_dict) -> Tuple[nn.Embedding, nn.Embedding]:
        """Source and target embeddings; one matrix with ``--share-all-embeddings`` (which also ties the
        output projection)."""
        enc_emb = embedding(len(src_dict), args.encoder_embed_dim, src_dict.pad())
        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise UserDataError("--share-all-embeddings requires a joined dictionary")
            if args.encoder_embed_dim != args.decoder_embed_dim:
                raise UserDataError("--share-all-embeddings requires --encoder-embed-dim = --decoder-embed-dim")
            dec_emb = enc_emb
            args.share_decoder_input_output_embed = True
        else:
            dec_emb = embedding(len(tgt_dict), args.decoder_embed_dim, tgt_dict.pad())
        return enc_emb, dec_emb

    def max_positions(self):
        return self.encoder.max_positions(), self.decoder.max_positions()


_default = set_default


@register_model_architecture("rnnsearch", "rnnsearch")
def rnnsearch(args):
    """dl4mt-like defaults: bidirectional GRU encoder, conditional GRU decoder, emb 512, hidden 1024."""
    _default(args, "rnn_type", "gru")
    _default(args, "decoder_variant", "conditional")
    _default(args, "no_attention", False)
    _default(args, "encoder_embed_dim", 512)
    _default(args, "encoder_hidden_size", 1024)
    _default(args, "encoder_layers", 1)
    _default(args, "encoder_unidirectional", False)
    _default(args, "decoder_embed_dim", args.encoder_embed_dim)
    _default(args, "decoder_hidden_size", args.encoder_hidden_size)
    _default(args, "decoder_layers", 1)
    _default(args, "decoder_out_embed_dim", args.decoder_embed_dim)
    _default(args, "attention_dim", args.decoder_hidden_size)
    _default(args, "dropout", 0.1)
    _default(args, "share_all_embeddings", False)
    _default(args, "share_decoder_input_output_embed", False)
    _default(args, "max_source_positions", DEFAULT_MAX_POSITIONS)
    _default(args, "max_target_positions", DEFAULT_MAX_POSITIONS)


@register_model_architecture("rnnsearch", "rnnsearch_tiny")
def rnnsearch_tiny(args):
    """Unit and command-line tests: emb 16, hidden 16, attention 16, no dropout."""
    _default(args, "encoder_embed_dim", 16)
    _default(args, "encoder_hidden_size", 16)
    _default(args, "dropout", 0.0)
    rnnsearch(args)


@register_model_architecture("rnnsearch", "rnnsearch_bench")
def rnnsearch_bench(args):
    """The CPU benchmark's RNNsearch (bench_configs ``rnnsearch``), the parameters of the bench
    transformer on the 8k joined Bible vocabulary (7.46M vs 7.58M): conditional GRU, emb 256, encoder
    2x288, decoder 576, attention 288, all embeddings shared, dropout 0.2."""
    _default(args, "encoder_embed_dim", 256)
    _default(args, "encoder_hidden_size", 288)
    _default(args, "decoder_hidden_size", 576)
    _default(args, "attention_dim", 288)
    _default(args, "share_all_embeddings", True)
    _default(args, "dropout", 0.2)
    rnnsearch(args)


def _thesis_preset(rnn_type, variant, attention, bidirectional, enc_layers, dec_layers, emb, hid, att, dropout):
    def arch(args):
        """A thesis setting of RNNsearch (see :data:`THESIS_PRESETS`)."""
        _default(args, "rnn_type", rnn_type)
        _default(args, "decoder_variant", variant)
        _default(args, "no_attention", not attention)
        _default(args, "encoder_unidirectional", not bidirectional)
        _default(args, "encoder_layers", enc_layers)
        _default(args, "decoder_layers", dec_layers)
        _default(args, "encoder_embed_dim", emb)
        _default(args, "encoder_hidden_size", hid)
        _default(args, "attention_dim", att)
        _default(args, "dropout", dropout)
        rnnsearch(args)

    return arch


# Thesis setting → arch: (rnn, first decoder layer, attention, bidirectional encoder, encoder layers,
# decoder layers, embedding, hidden (per encoder direction and decoder), attention MLP size, dropout).
THESIS_PRESETS = {
    # Gu §3.3: synthetic copy rules and dialogue, every model emb 150 / hidden 300 (Table 3.2, 3.5)
    "rnnsearch_copynet_syn": ("gru", "plain", True, True, 1, 1, 150, 300, 300, 0.0),
    "rnnsearch_encdec_copynet_syn": ("gru", "plain", False, True, 1, 1, 150, 300, 300, 0.0),  # Table 3.2 "Enc-Dec"
    # Gu §3.3.2: LCSTS summarisation, emb 350 / hidden 500
    "rnnsearch_lcsts": ("gru", "plain", True, True, 1, 1, 350, 500, 500, 0.0),
    # Gu ch. 4: the SEG-NMT base model, GRU 1024, emb 512 (dl4mt conditional GRU)
    "rnnsearch_jrc": ("gru", "conditional", True, True, 1, 1, 512, 1024, 1024, 0.0),
    # Gu §5.4.1: one-layer bi-LSTM encoder, two-layer attention LSTM decoder, 512 units, dropout 0.4
    "rnnsearch_uninmt": ("lstm", "plain", True, True, 1, 2, 512, 512, 512, 0.4),
    # Gu §7.4.1: the trainable-greedy-decoding NMT, 1028 GRU units, emb 512, no dropout
    "rnnsearch_gu_wmt15": ("gru", "conditional", True, True, 1, 1, 512, 1028, 1028, 0.0),
    # Gu §9.3.1: the same with a left-to-right encoder (simultaneous translation environment, Eq. 9.1)
    "rnnsearch_gu_wmt15_uni": ("gru", "conditional", True, False, 1, 1, 512, 1028, 1028, 0.0),
    # Maruf §2.1.1.2 (ch. 3/4 sentence model): bi-GRU encoder, two-layer GRU decoder, 512, alignment 256
    "rnnsearch_maruf": ("gru", "plain", True, True, 1, 2, 512, 512, 256, 0.0),
    # Maruf ch. 5 base: 256 / 256, alignment 128
    "rnnsearch_maruf_small": ("gru", "plain", True, True, 1, 2, 256, 256, 128, 0.0),
}
register_presets("rnnsearch", _thesis_preset, THESIS_PRESETS)

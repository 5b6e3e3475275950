"""Nguyen (2021) ch. 5 (Nguyen & Chiang, NAACL 2018): fixnorm and the lexical translation module,
for the Transformer (``transformer_lex``) and for Luong's global-attention LSTM (``lstm_luong``).

Output layer (Eq. 5.1) p(e_t | e_<t, f) = softmax(W^o h̃_t + b^o), written
p(e) ∝ exp(‖W_e‖ ‖h̃‖ cos θ + b_e) (§5.3). **fixnorm**: W_e = r·v_e/‖v_e‖ (target embeddings tied with
W^o) and h̃_t replaced by r·h̃_t/‖h̃_t‖. **lex** (§5.4, :class:`fairseq_ext.modules.lexical.LexicalTranslation`):
softmax(W^o h̃_t + b^o + W^ℓ h^ℓ_t + b^ℓ) with f^ℓ_t = tanh Σ_s a_t(s) f_s and h^ℓ_t = tanh(W f^ℓ_t) + f^ℓ_t,
h^ℓ and the rows of W^ℓ normalised to r, W^ℓ untied.

``transformer_lex`` — the ch. 6 TwT transformer (``transformer_twt``: ``--norm-type``, ``--fixnorm``,
``--twt-init``; there the fixnorm of Eq. 5.1 is FixNorm embeddings + a ScaleNorm output norm, Eq. 6.6)
plus ``--lexical``: a_t(s) are the cross-attention weights of the last decoder layer averaged over
heads (fairseq's alignment attention; the thesis' model has a single attention), f_s the source word
embedding lookups (FixNorm-ed when ``--fixnorm``, without the √d scale and positions). ``--lex-radius``
defaults to d^¼, so that the lexical logits span [−√d, √d] like the main logits g·cos θ at the ScaleNorm
init g = √d. Archs: ``transformer_lex`` (fairseq base sizes), ``transformer_lex_small`` (the bench's
3+3 d256 PreNorm model); both with ``--lexical`` on (``--no-lexical`` gives ``transformer_twt``).

``lstm_luong`` — fairseq's ``lstm`` pieces (LSTM encoder, LSTM-cell decoder with input feeding and
its ``AttentionLayer``: score (W_a h_t)·h_s, Luong "general"; h̃_t = tanh(W_c[c_t; h_t])), decoder
initialised from the final encoder state, plus [T §5.5.3, spec 002 §5.1–5.3]:

* ``--reverse-source``: the encoder reads each source sentence backwards (Luong/Sutskever); its
  outputs are put back in source order, so attention (and ``--replace-unk`` alignments) index the
  source as given. On by default in the ``lstm_luong*`` archs.
* ``--fixnorm --fixnorm-radius r`` (target embeddings / W^o rows at norm r) and
  ``--no-fixnorm-hidden`` (Table 5.1 ablation "don't normalize h̃_t"); with fixnorm the source
  embeddings are initialised at norm r and left free [RI].
* ``--lexical`` (+ ``--lex-radius``, default r; ``--lex-dropout``, default ``--dropout``;
  ``--lex-ffn-bias``).
* an output bias b^o also when W^o is tied (Eq. 5.1); all parameters initialised
  U[−0.01, 0.01] (``--init-uniform``); dropout 0.2 on non-recurrent connections (fairseq's
  dropout-in/-out); embedding size = hidden size.
* ``--word-dropout p``: source and decoder-input tokens replaced by <unk> w.p. p in training (§6.3.1).
* ``--target-vocab-mask {train,FILE}``: logits of types outside the target training vocabulary set
  to −1e9 in training and decoding (see :mod:`fairseq_ext.criterions.masked_label_smoothing`).

Archs (thesis systems, Table 5.4): ``lstm_luong`` (= **untied**; 2×512), ``lstm_luong_tied``
(**tied**), ``lstm_luong_fixnorm`` (**fixnorm**, r = 5), ``lstm_luong_fixnorm_lex`` (**fixnorm+lex**,
r = 3.5), ``lstm_luong_arthur`` (**Arthur**: tied + the discrete-lexicon bias below). Sizes per
Table 5.3 via ``--encoder-layers/--decoder-layers`` and ``--*-embed-dim`` (hidden sizes follow the
embedding size).

**Arthur et al. (2016) baseline** [T §5.5.2; Arthur et al. 2016 Eq. 9], both model families:
``--arthur-lexicon lex.pt`` (built by :mod:`fairseq_ext.data.arthur_lexicon`) and ``--arthur-eps``
(ε, default 0.001) add log(L_f a_t + ε) to the logits
(:class:`fairseq_ext.modules.lexical.DiscreteLexiconBias`), with a_t the attention the lexical module
uses: the Luong attention of the LSTM, the head-averaged cross-attention of the last decoder layer of
``transformer_lex``. The lexicon is a buffer of the model (saved in checkpoints: decoding does not
need the file). Archs ``lstm_luong_arthur`` and ``transformer_arthur`` (``transformer_lex`` sizes,
no lexical module) require the flag; the other ``lstm_luong*`` / ``transformer_lex*`` archs accept it.
"""
import logging
import math
import os
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.lstm import LSTMDecoder, LSTMEncoder, LSTMModel
from torch import Tensor

from fairseq_ext.criterions.masked_label_smoothing import TargetVocabMaskMixin
from fairseq_ext.models.twt import (
    TwtDecoder, TwtEncoder, TwtTransformerModel, _default, transformer_twt, transformer_twt_small,
)
from fairseq_ext.modules.lexical import (
    DiscreteLexiconBias, LexicalTranslation, WordDropoutMixin, add_word_dropout_args,
)
from fairseq_ext.modules.norms import FixNormEmbedding, fixnorm

logger = logging.getLogger(__name__)

ARTHUR_ARCHS = ("lstm_luong_arthur", "transformer_arthur")


# ------------------------------------------------------------------------------- shared pieces
def add_lexical_args(parser):
    parser.add_argument("--lexical", dest="lexical", action="store_true",
                        help="add the lexical translation module (thesis §5.4)")
    parser.add_argument("--no-lexical", dest="lexical", action="store_false",
                        help="no lexical module")
    parser.add_argument("--lex-radius", type=float, metavar="R",
                        help="norm r of h^l and of the rows of W^l (0: unnormalised)")
    parser.add_argument("--lex-dropout", type=float, metavar="D",
                        help="dropout on the attended source embeddings and on h^l (default --dropout)")
    parser.add_argument("--lex-ffn-bias", action="store_true",
                        help="a bias in the lexical FFNN W (not in the thesis equation)")


def add_common_args(parser):
    parser.add_argument("--target-vocab-mask", type=str, metavar="{none,train,FILE}",
                        help="mask (logit -1e9) output types outside the target side of the "
                             "binarized train data (train) or outside a token list (FILE)")


def add_arthur_args(parser):
    parser.add_argument("--arthur-lexicon", type=str, metavar="PATH",
                        help="Arthur et al. (2016) baseline: add log(L_f a_t + eps) to the logits, with "
                             "the discrete lexicon PATH (python -m fairseq_ext.data.arthur_lexicon)")
    parser.add_argument("--arthur-eps", type=float, metavar="EPS",
                        help="epsilon of the Arthur bias (default 0.001)")


def build_arthur_bias(args, src_dict, tgt_dict) -> Optional[DiscreteLexiconBias]:
    """The Arthur bias of ``--arthur-lexicon`` (None without it). A missing file is accepted (with a
    warning) so that a checkpoint, which carries its lexicon, decodes without it."""
    path = getattr(args, "arthur_lexicon", None)
    if not path:
        if getattr(args, "arch", None) in ARTHUR_ARCHS:
            raise ValueError(f"--arch {args.arch} needs --arthur-lexicon PATH "
                             "(build it with python -m fairseq_ext.data.arthur_lexicon)")
        return None
    from fairseq_ext.data.arthur_lexicon import load_lexicon

    bias = DiscreteLexiconBias(len(src_dict), len(tgt_dict), eps=args.arthur_eps)
    if os.path.exists(path):
        lex = load_lexicon(path, src_dict, tgt_dict)
        bias.set_lexicon(lex["indices"], lex["values"])
    else:
        logger.warning("--arthur-lexicon %s not found: the lexicon must come from a checkpoint", path)
    return bias


class LexiconMixin:
    """What the lexicon extraction tool (:mod:`fairseq_ext.data.lexicon`) needs from a model."""

    def lexicon_log_probs(self, src_ids: Tensor) -> Tensor:
        """log p^ℓ(y | f) for single source words ``src_ids`` (N,) → (N, V) (§5.6.5)."""
        lex = self.decoder.lexical
        if lex is None:
            raise ValueError("this model has no lexical module (train with --lexical)")
        logits = self.decoder.apply_target_vocab_mask(
            lex.lexicon_logits(self.encoder.embed_tokens(src_ids)).float())
        return F.log_softmax(logits, dim=-1)


# ------------------------------------------------------------------------------- Transformer
class LexTransformerDecoder(TargetVocabMaskMixin, TwtDecoder):
    """TwT decoder whose logits add the lexical module's W^ℓ h^ℓ + b^ℓ (§5.4) and are masked to the
    target vocabulary."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.target_vocab_mask = None
        self.arthur = None  # DiscreteLexiconBias (set by build_model)
        src_dim = cfg.encoder.embed_dim
        self.src_embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(src_dim)
        self.lexical = (LexicalTranslation(src_dim, len(dictionary), radius=cfg.lex_radius,
                                           dropout=cfg.lex_dropout, ffn_bias=cfg.lex_ffn_bias)
                        if cfg.lexical else None)

    def lexical_logits(self, attn: Tensor, encoder_out: Dict[str, List[Tensor]]) -> Tensor:
        """W^ℓ h^ℓ + b^ℓ from attention (B,T,S) over the source embeddings f_s of ``encoder_out``."""
        src_embed = encoder_out["encoder_embedding"][0] / self.src_embed_scale  # f_s (B,S,d)
        pad = encoder_out["encoder_padding_mask"]
        return self.lexical(attn, src_embed, pad[0] if len(pad) > 0 else None)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                features_only: bool = False, full_context_alignment: bool = False,
                alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None,
                src_lengths=None, return_all_hiddens: bool = False):
        x, extra = self.extract_features(
            prev_output_tokens, encoder_out=encoder_out, incremental_state=incremental_state,
            full_context_alignment=full_context_alignment, alignment_layer=alignment_layer,
            alignment_heads=alignment_heads)
        if features_only:
            return x, extra
        logits = self.output_layer(x)
        if self.lexical is not None and encoder_out is not None:
            logits = logits + self.lexical_logits(extra["attn"][0], encoder_out).to(logits.dtype)
        if self.arthur is not None and encoder_out is not None:
            logits = logits + self.arthur(extra["attn"][0], encoder_out["src_tokens"][0]).to(logits.dtype)
        return self.apply_target_vocab_mask(logits), extra


class SourceTokensEncoder(TwtEncoder):
    """TwT encoder whose output also carries ``src_tokens`` (fairseq leaves the list empty; its
    ``reorder_encoder_out`` reorders it), for the Arthur bias's L_f."""

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None):
        out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out["src_tokens"] = [src_tokens]
        return out


def resolve_lex_args(args, embed_dim: int, default_radius: float):
    if getattr(args, "lex_radius", None) is None:
        args.lex_radius = default_radius
    if getattr(args, "lex_dropout", None) is None:
        args.lex_dropout = args.dropout
    return args


@register_model("transformer_lex")
class LexTransformerModel(LexiconMixin, TwtTransformerModel):
    """``transformer_twt`` (with its word dropout) + lexical module (§5.4), Arthur bias (§5.5.2) and
    target-vocabulary mask."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_lexical_args(parser)
        add_common_args(parser)
        add_arthur_args(parser)

    @classmethod
    def build_model(cls, args, task):
        transformer_lex(args)
        resolve_lex_args(args, args.encoder_embed_dim, args.encoder_embed_dim ** 0.25)
        model = super().build_model(args, task)
        model.decoder.arthur = build_arthur_bias(args, task.source_dictionary, task.target_dictionary)
        model.decoder.init_target_vocab_mask(args.target_vocab_mask, task, task.target_dictionary)
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return SourceTokensEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return LexTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


def _lex_defaults(args, lexical=True):
    _default(args, "lexical", lexical)
    _default(args, "lex_ffn_bias", False)
    _default(args, "word_dropout", 0.0)
    _default(args, "target_vocab_mask", None)


def _lex_model_defaults(args, lexical=True):
    """:func:`_lex_defaults` + the Arthur bias's (off without a lexicon; ε = 0.001)."""
    _lex_defaults(args, lexical)
    _default(args, "arthur_lexicon", None)
    _default(args, "arthur_eps", 1e-3)


@register_model_architecture("transformer_lex", "transformer_lex")
def transformer_lex(args):
    """fairseq ``transformer`` sizes (via ``transformer_twt``) + the lexical module."""
    _lex_model_defaults(args)
    transformer_twt(args)


@register_model_architecture("transformer_lex", "transformer_lex_small")
def transformer_lex_small(args):
    """The bench model (3+3, d 256, FFN 1024, 4 heads, shared embeddings, PreNorm) + lexical module."""
    _lex_model_defaults(args)
    transformer_twt_small(args)


@register_model_architecture("transformer_lex", "transformer_arthur")
def transformer_arthur(args):
    """fairseq ``transformer`` sizes + the Arthur et al. bias (§5.5.2; needs ``--arthur-lexicon``),
    no lexical module."""
    _lex_model_defaults(args, lexical=False)
    transformer_twt(args)


# ------------------------------------------------------------------------------------- LSTM
def reverse_padded(tokens_or_states: Tensor, lengths: Tensor, dim: int) -> Tensor:
    """Reverse the first ``lengths[b]`` entries of each right-padded sequence along ``dim``
    (batch along the other of dims 0/1); padding stays in place. An involution."""
    seq_len = tokens_or_states.size(dim)
    ar = torch.arange(seq_len, device=lengths.device).unsqueeze(0)  # (1,S)
    idx = torch.where(ar < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - ar, ar)  # (B,S)
    if dim == 0:
        idx = idx.t()
    while idx.dim() < tokens_or_states.dim():
        idx = idx.unsqueeze(-1)
    return tokens_or_states.gather(dim, idx.expand_as(tokens_or_states))


class LuongLSTMEncoder(LSTMEncoder):
    """fairseq's LSTM encoder, optionally reading the source backwards (outputs in source order), and
    also returning the source word embeddings f_s for the lexical module and the (right-padded) source
    tokens for the Arthur bias: ``(outs, h, c, pad mask, f_s, src_tokens)``, all time-major."""

    def __init__(self, dictionary, reverse_source=False, **kwargs):
        super().__init__(dictionary, **kwargs)
        self.reverse_source = reverse_source

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, enforce_sorted: bool = False):
        if self.left_pad:  # pack_padded_sequence needs right padding
            src_tokens = utils.convert_padding_direction(
                src_tokens, torch.zeros_like(src_tokens).fill_(self.padding_idx), left_to_right=True)
        bsz, seqlen = src_tokens.size()
        pad_mask = src_tokens.eq(self.padding_idx)  # (B,S)
        lengths = (~pad_mask).long().sum(1)
        emb = self.embed_tokens(src_tokens)  # f_s in source order (B,S,C)
        x = reverse_padded(emb, lengths, dim=1) if self.reverse_source else emb
        x = self.dropout_in_module(x).transpose(0, 1)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), enforce_sorted=enforce_sorted)
        n_dir = 2 if self.bidirectional else 1
        h0 = x.new_zeros(n_dir * self.num_layers, bsz, self.hidden_size)
        packed_outs, (final_h, final_c) = self.lstm(packed, (h0, h0.clone()))
        x, _ = nn.utils.rnn.pad_packed_sequence(packed_outs, padding_value=0.0, total_length=seqlen)
        x = self.dropout_out_module(x)  # (S,B,H)
        if self.reverse_source:
            x = reverse_padded(x, lengths, dim=0)
        if self.bidirectional:
            final_h = self.combine_bidir(final_h, bsz)
            final_c = self.combine_bidir(final_c, bsz)
        return (x, final_h, final_c, pad_mask.t(), emb.transpose(0, 1), src_tokens.t())

    def reorder_encoder_out(self, encoder_out, new_order):
        return tuple(t.index_select(1, new_order) for t in encoder_out)


class LuongLSTMDecoder(TargetVocabMaskMixin, LSTMDecoder):
    """fairseq's LSTM decoder (input feeding, general attention) with fixnorm on W^o / h̃ (§5.3), an
    output bias, the lexical module (§5.4), the Arthur bias (§5.5.2) and the target-vocabulary mask.
    The attention weights of every step are kept (also in training) for the lexical module and the
    Arthur bias."""

    def __init__(self, dictionary, fixnorm_radius=0.0, fixnorm_hidden=True, lexical=None, **kwargs):
        super().__init__(dictionary, **kwargs)
        self.target_vocab_mask = None
        self.fixnorm_radius = float(fixnorm_radius or 0.0)
        self.fixnorm_hidden = fixnorm_hidden
        self.output_bias = (nn.Parameter(torch.zeros(len(dictionary)))
                            if self.share_input_output_embed else None)  # b^o (fc_out has its own)
        self.lexical = lexical
        self.arthur = None  # DiscreteLexiconBias (set by build_model)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None):
        """h̃_t for every step (B,T,H) and the attention weights a_t(s) (B,T,S)."""
        enc_outs, enc_h, enc_c, enc_mask = encoder_out[:4]
        if incremental_state is not None and len(incremental_state) > 0:
            prev_output_tokens = prev_output_tokens[:, -1:]
        bsz, seqlen = prev_output_tokens.size()
        x = self.dropout_in_module(self.embed_tokens(prev_output_tokens)).transpose(0, 1)
        cached = (self.get_incremental_state(incremental_state, "cached_state")
                  if incremental_state is not None else None)
        if cached is not None:
            prev_hiddens, prev_cells, input_feed = self.get_cached_state(incremental_state)
        else:
            prev_hiddens = [enc_h[i] for i in range(self.num_layers)]
            prev_cells = [enc_c[i] for i in range(self.num_layers)]
            if self.encoder_hidden_proj is not None:
                prev_hiddens = [self.encoder_hidden_proj(y) for y in prev_hiddens]
                prev_cells = [self.encoder_cell_proj(y) for y in prev_cells]
            input_feed = x.new_zeros(bsz, self.hidden_size)
        outs, attns = [], []
        for j in range(seqlen):  # input feeding makes the decoder sequential
            inp = torch.cat((x[j], input_feed), dim=1)
            for i, rnn in enumerate(self.layers):
                hidden, cell = rnn(inp, (prev_hiddens[i], prev_cells[i]))
                inp = self.dropout_out_module(hidden)
                prev_hiddens[i], prev_cells[i] = hidden, cell
            out, a = self.attention(hidden, enc_outs, enc_mask)  # h̃_t, a_t (S,B)
            out = self.dropout_out_module(out)
            input_feed = out
            outs.append(out)
            attns.append(a)
        self.set_incremental_state(incremental_state, "cached_state", {
            "prev_hiddens": torch.stack(prev_hiddens), "prev_cells": torch.stack(prev_cells),
            "input_feed": input_feed})
        x = torch.stack(outs, dim=1)  # (B,T,H)
        attn = torch.stack(attns, dim=0).permute(2, 0, 1)  # (T,S,B) -> (B,T,S)
        if hasattr(self, "additional_fc"):
            x = self.dropout_out_module(self.additional_fc(x))
        return x, attn

    def output_layer(self, x):
        """W^o h̃ + b^o (Eq. 5.1); fixnorm: rows of W^o and (unless ``--no-fixnorm-hidden``) h̃ at norm r."""
        r = self.fixnorm_radius
        if r > 0 and self.fixnorm_hidden:
            x = fixnorm(x, r)
        if self.share_input_output_embed:
            weight, bias = self.embed_tokens.weight, self.output_bias
        else:
            weight, bias = self.fc_out.weight, self.fc_out.bias
        if r > 0:
            weight = fixnorm(weight, r)
        return F.linear(x, weight, bias)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, src_lengths=None):
        x, attn = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        logits = self.output_layer(x)
        if self.lexical is not None:
            src_embed = encoder_out[4].transpose(0, 1)  # f_s (B,S,C)
            logits = logits + self.lexical(attn, src_embed, encoder_out[3].t())
        if self.arthur is not None:
            logits = logits + self.arthur(attn, encoder_out[5].t()).to(logits.dtype)
        logits = self.apply_target_vocab_mask(logits)
        return logits, (attn if not self.training and self.need_attn else None)


@register_model("lstm_luong")
class LuongLSTMModel(LexiconMixin, WordDropoutMixin, LSTMModel):
    """Luong global attention ("general" score, input feeding) LSTM of thesis ch. 5 (see module doc)."""

    @staticmethod
    def add_args(parser):
        LSTMModel.add_args(parser)
        parser.add_argument("--reverse-source", dest="reverse_source", action="store_true",
                            help="the encoder reads the source backwards (default in lstm_luong archs)")
        parser.add_argument("--no-reverse-source", dest="reverse_source", action="store_false")
        parser.add_argument("--fixnorm", action="store_true",
                            help="fix the norm of the target embeddings / W^o rows and of h~ to r")
        parser.add_argument("--fixnorm-radius", type=float, metavar="R", help="fixnorm r (default 5)")
        parser.add_argument("--no-fixnorm-hidden", dest="fixnorm_hidden", action="store_false",
                            help="with --fixnorm, leave h~ unnormalised (Table 5.1 ablation)")
        parser.add_argument("--init-uniform", type=float, metavar="A",
                            help="initialise every parameter U[-A, A] (default 0.01)")
        add_lexical_args(parser)
        add_word_dropout_args(parser)
        add_common_args(parser)
        add_arthur_args(parser)

    @classmethod
    def build_model(cls, args, task):
        lstm_luong(args)
        r = args.fixnorm_radius if args.fixnorm else 0.0
        resolve_lex_args(args, args.encoder_embed_dim, r)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        tied = bool(args.share_decoder_input_output_embed or args.share_all_embeddings)
        if args.encoder_layers != args.decoder_layers:  # the decoder starts from the encoder's final states
            raise ValueError("lstm_luong: --encoder-layers must match --decoder-layers")

        def embedding(dictionary, dim, normalised):
            if normalised:
                return FixNormEmbedding(len(dictionary), dim, dictionary.pad(), r)
            return nn.Embedding(len(dictionary), dim, padding_idx=dictionary.pad())

        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError("--share-all-embeddings requires a joined dictionary")
            if args.encoder_embed_dim != args.decoder_embed_dim:
                raise ValueError("--share-all-embeddings requires equal encoder/decoder embed dims")
            enc_emb = dec_emb = embedding(src_dict, args.encoder_embed_dim, args.fixnorm)
        else:
            enc_emb = embedding(src_dict, args.encoder_embed_dim, False)
            dec_emb = embedding(tgt_dict, args.decoder_embed_dim, args.fixnorm and tied)
        if tied and args.decoder_embed_dim != args.decoder_out_embed_dim:
            raise ValueError("tied embeddings need --decoder-embed-dim == --decoder-out-embed-dim")

        encoder = LuongLSTMEncoder(
            src_dict, reverse_source=args.reverse_source, embed_dim=args.encoder_embed_dim,
            hidden_size=args.encoder_hidden_size, num_layers=args.encoder_layers,
            dropout_in=args.encoder_dropout_in, dropout_out=args.encoder_dropout_out,
            bidirectional=args.encoder_bidirectional, pretrained_embed=enc_emb,
            max_source_positions=getattr(args, "max_source_positions", 1e5))
        lexical = (LexicalTranslation(args.encoder_embed_dim, len(tgt_dict), radius=args.lex_radius,
                                      dropout=args.lex_dropout, ffn_bias=args.lex_ffn_bias)
                   if args.lexical else None)
        decoder = LuongLSTMDecoder(
            tgt_dict, fixnorm_radius=r, fixnorm_hidden=args.fixnorm_hidden, lexical=lexical,
            embed_dim=args.decoder_embed_dim, hidden_size=args.decoder_hidden_size,
            out_embed_dim=args.decoder_out_embed_dim, num_layers=args.decoder_layers,
            dropout_in=args.decoder_dropout_in, dropout_out=args.decoder_dropout_out,
            attention=utils.eval_bool(args.decoder_attention), encoder_output_units=encoder.output_units,
            pretrained_embed=dec_emb, share_input_output_embed=tied,
            max_target_positions=getattr(args, "max_target_positions", 1e5))
        model = cls(encoder, decoder)
        model.init_uniform_(args.init_uniform, r if args.fixnorm and not args.share_all_embeddings else 0.0)
        model.word_dropout_p = args.word_dropout
        decoder.arthur = build_arthur_bias(args, src_dict, tgt_dict)
        decoder.init_target_vocab_mask(args.target_vocab_mask, task, tgt_dict)
        return model

    def init_uniform_(self, a: float, src_radius: float = 0.0):
        """Every parameter U[−a, a] [T §5.5.3]; padding rows 0; with fixnorm the (untied) source
        embeddings start at norm r [RI]."""
        if a and a > 0:
            with torch.no_grad():
                for p in self.parameters():
                    p.uniform_(-a, a)
        with torch.no_grad():
            for emb in {id(m): m for m in (self.encoder.embed_tokens, self.decoder.embed_tokens)}.values():
                emb.weight[emb.padding_idx].zero_()
            if src_radius > 0:
                w = self.encoder.embed_tokens.weight
                w.copy_(fixnorm(w, src_radius))


@register_model_architecture("lstm_luong", "lstm_luong")
def lstm_luong(args):
    """**untied** [T §5.5.2]: 2 layers × 512, embedding = hidden size, general attention, input feeding,
    reversed source, dropout 0.2, U[−0.01, 0.01] init."""
    _default(args, "dropout", 0.2)
    _default(args, "encoder_embed_dim", 512)
    _default(args, "encoder_hidden_size", args.encoder_embed_dim)
    _default(args, "encoder_layers", 2)
    _default(args, "encoder_bidirectional", False)
    _default(args, "decoder_embed_dim", args.encoder_embed_dim)
    _default(args, "decoder_hidden_size", args.decoder_embed_dim)
    _default(args, "decoder_layers", args.encoder_layers)
    _default(args, "decoder_out_embed_dim", args.decoder_hidden_size)
    _default(args, "decoder_attention", "1")
    for name in ("encoder_dropout_in", "encoder_dropout_out", "decoder_dropout_in", "decoder_dropout_out"):
        _default(args, name, args.dropout)
    _default(args, "encoder_embed_path", None)
    _default(args, "decoder_embed_path", None)
    _default(args, "encoder_freeze_embed", False)
    _default(args, "decoder_freeze_embed", False)
    _default(args, "share_decoder_input_output_embed", False)
    _default(args, "share_all_embeddings", False)
    _default(args, "adaptive_softmax_cutoff", None)
    _default(args, "reverse_source", True)
    _default(args, "fixnorm", False)
    _default(args, "fixnorm_radius", 5.0)
    _default(args, "fixnorm_hidden", True)
    _default(args, "init_uniform", 0.01)
    _lex_model_defaults(args, lexical=False)


@register_model_architecture("lstm_luong", "lstm_luong_tied")
def lstm_luong_tied(args):
    """**tied**: target embeddings tied with W^o."""
    args.share_decoder_input_output_embed = True
    lstm_luong(args)


@register_model_architecture("lstm_luong", "lstm_luong_fixnorm")
def lstm_luong_fixnorm(args):
    """**fixnorm**: tied, target embeddings and h̃ at norm r = 5 (best r, §5.5.3)."""
    _default(args, "fixnorm", True)
    _default(args, "fixnorm_radius", 5.0)
    lstm_luong_tied(args)


@register_model_architecture("lstm_luong", "lstm_luong_fixnorm_lex")
def lstm_luong_fixnorm_lex(args):
    """**fixnorm+lex**: fixnorm with r = 3.5 (best r with lex, §5.5.3) + the lexical module."""
    _default(args, "fixnorm", True)
    _default(args, "fixnorm_radius", 3.5)
    _default(args, "lexical", True)
    lstm_luong_tied(args)


@register_model_architecture("lstm_luong", "lstm_luong_arthur")
def lstm_luong_arthur(args):
    """**Arthur** [T §5.5.2]: tied + the discrete-lexicon bias log(L_f a_t + ε) of Arthur et al. (2016)
    (needs ``--arthur-lexicon``; ε = ``--arthur-eps``, 0.001)."""
    lstm_luong_tied(args)

"""Nguyen (2021) ch. 5 (Nguyen & Chiang, NAACL 2018): fixnorm and the lexical translation module, for the
Transformer (``transformer_lex``) and for Luong's global-attention LSTM (``lstm_luong``).

Output layer (Eq. 5.1) p(e_t | e_<t, f) = softmax(W^o h̃_t + b^o). **fixnorm** (§5.3): target embeddings
(tied with W^o) and h̃_t normalised to radius r. **lex** (§5.4,
:class:`fairseq_ext.modules.lexical.LexicalTranslation`): softmax(W^o h̃_t + b^o + W^ℓ h^ℓ_t + b^ℓ) with
f^ℓ_t = tanh Σ_s a_t(s) f_s and h^ℓ_t = tanh(W f^ℓ_t) + f^ℓ_t.

``transformer_lex``: the ch. 6 TwT transformer (``transformer_twt``) plus ``--lexical``, a_t(s) the last
decoder layer's cross-attention averaged over heads; ``--lex-radius`` defaults to d^¼. Archs
``transformer_lex``, ``transformer_lex_bench``.

``lstm_luong``: fairseq's ``lstm`` pieces (Luong "general" attention, input feeding) plus (§5.5.3)
``--reverse-source``, ``--fixnorm --fixnorm-radius r``, ``--no-fixnorm-hidden`` (Table 5.1 ablation),
``--lexical``, an output bias also when W^o is tied, U[−0.01, 0.01] initialisation, ``--word-dropout``
(§6.3.1) and ``--target-vocab-mask``. Archs (Table 5.4): ``lstm_luong`` (untied), ``lstm_luong_tied``,
``lstm_luong_fixnorm``, ``lstm_luong_fixnorm_lex``, ``lstm_luong_arthur``; sizes per Table 5.3.

**Arthur et al. (2016) baseline** (§5.5.2; their Eq. 9), both families: ``--arthur-lexicon lex.pt``
(:mod:`fairseq_ext.tools.corpora.arthur_lexicon`) and ``--arthur-eps`` add log(L_f a_t + ε) to the logits
(:class:`fairseq_ext.modules.lexical.DiscreteLexiconBias`); archs ``lstm_luong_arthur`` and
``transformer_lex_arthur``.

References: T. Q. Nguyen and D. Chiang, "Improving Lexical Choice in Neural Machine Translation",
NAACL 2018; P. Arthur, G. Neubig, S. Nakamura, "Incorporating Discrete Translation Lexicons into
Neural Machine Translation", EMNLP 2016; Nguyen's thesis (see :mod:`fairseq_ext.models.twt`).
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

from fairseq_ext.modules.vocab_mask import TargetVocabMaskMixin
from fairseq_ext.models.twt import TwtDecoder, TwtEncoder, TwtTransformerModel, transformer_twt
from fairseq_ext.modules.arch_utils import canonical_arch, register_shaped, set_default
from fairseq_ext.modules.fast_inference import frozen_derived
from fairseq_ext.modules.lexical import DiscreteLexiconBias, LexicalTranslation
from fairseq_ext.modules.norms import FixNormEmbedding, add_fixnorm_args, fixnorm
from fairseq_ext.modules.vocab_mask import add_target_vocab_mask_args, set_target_vocab_mask_default
from fairseq_ext.modules.word_dropout import WordDropoutMixin, add_word_dropout_args, set_word_dropout_default
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

ARTHUR_ARCHS = ("lstm_luong_arthur", "transformer_lex_arthur")


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


def add_arthur_args(parser):
    parser.add_argument("--arthur-lexicon", type=str, metavar="PATH",
                        help="Arthur et al. (2016) baseline: add log(L_f a_t + eps) to the logits, with "
                             "the discrete lexicon PATH (python -m fairseq_ext.tools.corpora.arthur_lexicon)")
    parser.add_argument("--arthur-eps", type=float, metavar="EPS",
                        help="epsilon of the Arthur bias (default 0.001)")


def build_arthur_bias(args, src_dict, tgt_dict) -> Optional[DiscreteLexiconBias]:
    """The Arthur bias of ``--arthur-lexicon`` (None without it). A missing file is accepted (with a
    warning) so that a checkpoint, which carries its lexicon, decodes without it."""
    path = getattr(args, "arthur_lexicon", None)
    if not path:
        if canonical_arch(getattr(args, "arch", None)) in ARTHUR_ARCHS:
            raise UserDataError(f"--arch {args.arch} needs --arthur-lexicon PATH "
                             "(build it with python -m fairseq_ext.tools.corpora.arthur_lexicon)")
        return None
    from fairseq_ext.data.lexicon_file import load_lexicon

    bias = DiscreteLexiconBias(len(src_dict), len(tgt_dict), eps=args.arthur_eps)
    if os.path.exists(path):
        lex = load_lexicon(path, src_dict, tgt_dict)
        bias.set_lexicon(lex["indices"], lex["values"])
    else:
        logger.warning("--arthur-lexicon %s not found: the lexicon must come from a checkpoint", path)
    return bias


class LexiconMixin:
    """What the lexicon extraction tool (:mod:`fairseq_ext.tools.analysis.lexicon`) needs from a model."""

    def lexicon_log_probs(self, src_ids: Tensor) -> Tensor:
        """log p^ℓ(y | f) for single source words ``src_ids`` (N,) → (N, V) (§5.6.5)."""
        lex = self.decoder.lexical
        if lex is None:
            raise UserDataError("this model has no lexical module (train with --lexical)")
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
        """fairseq's ``forward`` + the lexical logits and the Arthur bias (from the last layer's
        head-averaged cross-attention), then the target-vocabulary mask."""
        logits, extra = super().forward(prev_output_tokens, encoder_out, incremental_state, features_only,
                                        full_context_alignment, alignment_layer, alignment_heads,
                                        src_lengths, return_all_hiddens)
        if features_only:
            return logits, extra
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
        add_target_vocab_mask_args(parser)
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


def lex_defaults(args, lexical=True):
    """Defaults of the lexical module (§5.4), the Arthur bias (§5.5.2; off without a lexicon,
    ε = 0.001), the target-vocabulary mask and word dropout."""
    set_default(args, "lexical", lexical)
    set_default(args, "lex_ffn_bias", False)
    set_default(args, "arthur_lexicon", None)
    set_default(args, "arthur_eps", 1e-3)
    set_word_dropout_default(args)
    set_target_vocab_mask_default(args)


@register_model_architecture("transformer_lex", "transformer_lex")
def transformer_lex(args):
    """fairseq ``transformer`` sizes (via ``transformer_twt``) + the lexical module."""
    lex_defaults(args)
    transformer_twt(args)


# transformer_lex_bench (earlier transformer_lex_small): the bench shape + the lexical module.
register_shaped("transformer_lex", "transformer_lex", transformer_lex, legacy=True)


@register_model_architecture("transformer_lex", "transformer_lex_arthur")
def transformer_arthur(args):
    """fairseq ``transformer`` sizes + the Arthur et al. bias (§5.5.2; needs ``--arthur-lexicon``),
    no lexical module."""
    lex_defaults(args, lexical=False)
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
        """fairseq's ``forward`` on the right-padded, optionally reversed source; its outputs are put
        back in source order.  Columns of padding only are left out of fairseq's pass (its packed LSTM
        returns the longest sentence's length) and padded back."""
        if self.left_pad:  # fairseq's conversion, done here as the reversal needs right padding
            src_tokens = utils.convert_padding_direction(src_tokens, self.padding_idx, left_to_right=True)
        pad_mask = src_tokens.eq(self.padding_idx)  # (B,S)
        lengths = (~pad_mask).long().sum(1)
        tokens = reverse_padded(src_tokens, lengths, dim=1) if self.reverse_source else src_tokens
        seqlen, longest = src_tokens.size(1), int(lengths.max())
        x, final_h, final_c, _ = super().forward(tokens[:, :longest], lengths, enforce_sorted=enforce_sorted)
        if longest < seqlen:
            x = F.pad(x, (0, 0, 0, 0, 0, seqlen - longest), value=float(self.padding_idx))
        if self.reverse_source:
            x = reverse_padded(x, lengths, dim=0)
        f_s = self.embed_tokens(src_tokens)  # source order, before dropout
        return (x, final_h, final_c, pad_mask.t(), f_s.transpose(0, 1), src_tokens.t())

    def reorder_encoder_out(self, encoder_out, new_order):
        return tuple(t.index_select(1, new_order) for t in encoder_out)


class LuongLSTMDecoder(TargetVocabMaskMixin, LSTMDecoder):
    """fairseq's LSTM decoder (input feeding, general attention) with fixnorm on W^o / h̃ (§5.3), an
    output bias, the lexical module (§5.4), the Arthur bias (§5.5.2) and the target-vocabulary mask.

    The attention weights of every step are needed also in training (for the lexical module and the
    Arthur bias), where fairseq's ``extract_features`` drops them: a forward hook on ``self.attention``
    records them while :meth:`extract_features` runs fairseq's loop, unchanged (residuals, the
    no-encoder branch and the other fairseq options keep working)."""

    def __init__(self, dictionary, fixnorm_radius=0.0, fixnorm_hidden=True, lexical=None, **kwargs):
        super().__init__(dictionary, **kwargs)
        self.target_vocab_mask = None
        self.fixnorm_radius = float(fixnorm_radius or 0.0)
        self.fixnorm_hidden = fixnorm_hidden
        self.output_bias = (nn.Parameter(torch.zeros(len(dictionary)))
                            if self.share_input_output_embed else None)  # b^o (fc_out has its own)
        self.lexical = lexical
        self.arthur = None  # DiscreteLexiconBias (set by build_model)
        self.attention_steps: Optional[List[Tensor]] = None  # a_t (S,B) of each step, while recording
        if self.attention is not None:
            self.attention.register_forward_hook(self.record_attention)

    def record_attention(self, module, inputs, output):
        """Forward hook of ``self.attention``: keep a_t (S,B)."""
        if self.attention_steps is not None:
            self.attention_steps.append(output[1])

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None):
        """fairseq's features h̃_t for every step (B,T,H) and the attention weights a_t(s) (B,T,S), in
        training too (None without attention)."""
        self.attention_steps = []
        try:
            x, _ = super().extract_features(prev_output_tokens, encoder_out, incremental_state)
            steps = self.attention_steps
        finally:
            self.attention_steps = None
        attn = torch.stack(steps, dim=0).permute(2, 0, 1) if steps else None  # (T,S,B) -> (B,T,S)
        return x, attn

    def output_layer(self, x):
        """W^o h̃ + b^o (Eq. 5.1); fixnorm: rows of W^o and (unless ``--no-fixnorm-hidden``) h̃ at norm r.
        With fairseq's adaptive softmax, the features (fairseq's behaviour)."""
        if self.adaptive_softmax is not None:
            return super().output_layer(x)
        r = self.fixnorm_radius
        if r > 0 and self.fixnorm_hidden:
            x = fixnorm(x, r)
        if self.share_input_output_embed:
            weight, bias = self.embed_tokens.weight, self.output_bias
        else:
            weight, bias = self.fc_out.weight, self.fc_out.bias
        if r > 0:  # computed once per weight version under --quantize int8 (then an int8 matrix)
            weight = frozen_derived(fixnorm, weight, r)
        return F.linear(x, weight, bias)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, src_lengths=None):
        """fairseq's ``forward`` (logits of :meth:`output_layer`) + the lexical logits and the Arthur
        bias from the attention of every step, then the target-vocabulary mask."""
        logits, attn = super().forward(prev_output_tokens, encoder_out, incremental_state, src_lengths)
        if self.lexical is not None and encoder_out is not None:
            src_embed = encoder_out[4].transpose(0, 1)  # f_s (B,S,C)
            logits = logits + self.lexical(attn, src_embed, encoder_out[3].t())
        if self.arthur is not None and encoder_out is not None:
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
        add_fixnorm_args(parser)
        parser.add_argument("--no-fixnorm-hidden", dest="fixnorm_hidden", action="store_false",
                            help="with --fixnorm, leave h~ unnormalised (Table 5.1 ablation)")
        parser.add_argument("--init-uniform", type=float, metavar="A",
                            help="initialise every parameter U[-A, A] (default 0.01)")
        add_lexical_args(parser)
        add_word_dropout_args(parser)
        add_target_vocab_mask_args(parser)
        add_arthur_args(parser)

    @classmethod
    def build_model(cls, args, task):
        lstm_luong(args)
        r = args.fixnorm_radius if args.fixnorm else 0.0
        resolve_lex_args(args, args.encoder_embed_dim, r)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        tied = bool(args.share_decoder_input_output_embed or args.share_all_embeddings)
        if args.encoder_layers != args.decoder_layers:  # the decoder starts from the encoder's final states
            raise UserDataError("lstm_luong: --encoder-layers must match --decoder-layers")

        def embedding(dictionary, dim, normalised):
            if normalised:
                return FixNormEmbedding(len(dictionary), dim, dictionary.pad(), r)
            return nn.Embedding(len(dictionary), dim, padding_idx=dictionary.pad())

        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise UserDataError("--share-all-embeddings requires a joined dictionary")
            if args.encoder_embed_dim != args.decoder_embed_dim:
                raise UserDataError("--share-all-embeddings requires equal encoder/decoder embed dims")
            enc_emb = dec_emb = embedding(src_dict, args.encoder_embed_dim, args.fixnorm)
        else:
            enc_emb = embedding(src_dict, args.encoder_embed_dim, False)
            dec_emb = embedding(tgt_dict, args.decoder_embed_dim, args.fixnorm and tied)
        if tied and args.decoder_embed_dim != args.decoder_out_embed_dim:
            raise UserDataError("tied embeddings need --decoder-embed-dim == --decoder-out-embed-dim")

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
        """Every parameter U[−a, a] (§5.5.3); padding rows 0; with fixnorm the (untied) source
        embeddings start at norm r (as in the reference implementation)."""
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
    """**untied** (§5.5.2): 2 layers × 512, embedding = hidden size, general attention, input feeding,
    reversed source, dropout 0.2, U[−0.01, 0.01] init."""
    set_default(args, "dropout", 0.2)
    set_default(args, "encoder_embed_dim", 512)
    set_default(args, "encoder_hidden_size", args.encoder_embed_dim)
    set_default(args, "encoder_layers", 2)
    set_default(args, "encoder_bidirectional", False)
    set_default(args, "decoder_embed_dim", args.encoder_embed_dim)
    set_default(args, "decoder_hidden_size", args.decoder_embed_dim)
    set_default(args, "decoder_layers", args.encoder_layers)
    set_default(args, "decoder_out_embed_dim", args.decoder_hidden_size)
    set_default(args, "decoder_attention", "1")
    for name in ("encoder_dropout_in", "encoder_dropout_out", "decoder_dropout_in", "decoder_dropout_out"):
        set_default(args, name, args.dropout)
    set_default(args, "encoder_embed_path", None)
    set_default(args, "decoder_embed_path", None)
    set_default(args, "encoder_freeze_embed", False)
    set_default(args, "decoder_freeze_embed", False)
    set_default(args, "share_decoder_input_output_embed", False)
    set_default(args, "share_all_embeddings", False)
    set_default(args, "adaptive_softmax_cutoff", None)
    set_default(args, "reverse_source", True)
    set_default(args, "fixnorm", False)
    set_default(args, "fixnorm_radius", 5.0)
    set_default(args, "fixnorm_hidden", True)
    set_default(args, "init_uniform", 0.01)
    lex_defaults(args, lexical=False)


@register_model_architecture("lstm_luong", "lstm_luong_tied")
def lstm_luong_tied(args):
    """**tied**: target embeddings tied with W^o."""
    args.share_decoder_input_output_embed = True
    lstm_luong(args)


@register_model_architecture("lstm_luong", "lstm_luong_fixnorm")
def lstm_luong_fixnorm(args):
    """**fixnorm**: tied, target embeddings and h̃ at norm r = 5 (best r, §5.5.3)."""
    set_default(args, "fixnorm", True)
    set_default(args, "fixnorm_radius", 5.0)
    lstm_luong_tied(args)


@register_model_architecture("lstm_luong", "lstm_luong_fixnorm_lex")
def lstm_luong_fixnorm_lex(args):
    """**fixnorm+lex**: fixnorm with r = 3.5 (best r with lex, §5.5.3) + the lexical module."""
    set_default(args, "fixnorm", True)
    set_default(args, "fixnorm_radius", 3.5)
    set_default(args, "lexical", True)
    lstm_luong_tied(args)


@register_model_architecture("lstm_luong", "lstm_luong_arthur")
def lstm_luong_arthur(args):
    """**Arthur** (§5.5.2): tied + the discrete-lexicon bias log(L_f a_t + ε) of Arthur et al. (2016)
    (needs ``--arthur-lexicon``; ε = ``--arthur-eps``, 0.001)."""
    lstm_luong_tied(args)

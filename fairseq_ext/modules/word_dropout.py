"""Token-level word dropout of Nguyen (2021) §6.3.1: "instead of zeroing the word embeddings, we
randomly replace tokens with UNK" (p = 0.1 in the thesis). One option, ``--word-dropout P``, default 0
(:func:`set_word_dropout_default`), for every model that mixes in :class:`WordDropoutMixin`.
"""
import torch

from fairseq_ext.modules.arch_utils import set_default


def word_dropout(tokens: torch.Tensor, p: float, unk: int, nspecial: int, training: bool = True,
                 generator=None) -> torch.Tensor:
    """Replace each non-special token by ``unk`` with probability ``p`` (training only) — the word
    dropout of §6.3.1 ("instead of zeroing the word embeddings, we randomly replace tokens with
    UNK"). Specials (ids < ``nspecial``: <s>, <pad>, </s>, <unk>) are never replaced."""
    if not training or p <= 0:
        return tokens
    drop = torch.rand(tokens.shape, device=tokens.device, generator=generator) < p
    return tokens.masked_fill(drop & tokens.ge(nspecial), unk)


def add_word_dropout_args(parser):
    parser.add_argument("--word-dropout", type=float, metavar="P",
                        help="replace source and decoder-input tokens by <unk> with probability P "
                             "in training (specials kept; default 0)")


def set_word_dropout_default(args):
    set_default(args, "word_dropout", 0.0)


class WordDropoutMixin:
    """``forward`` that applies :func:`word_dropout` to the source and decoder-input tokens (never the
    targets) in training, with ``self.word_dropout_p`` (set by the model's ``build_model``)."""

    def forward(self, src_tokens, src_lengths, prev_output_tokens, *args, **kwargs):
        p = getattr(self, "word_dropout_p", 0.0) or 0.0
        if self.training and p > 0:
            sd, td = self.encoder.dictionary, self.decoder.dictionary
            src_tokens = word_dropout(src_tokens, p, sd.unk(), sd.nspecial)
            prev_output_tokens = word_dropout(prev_output_tokens, p, td.unk(), td.nspecial)
        return super().forward(src_tokens, src_lengths, prev_output_tokens, *args, **kwargs)

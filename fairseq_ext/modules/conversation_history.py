"""The history side of the Bi-MSMT model (Maruf 2019 ch. 5): the source sentence vectors of the N-set, the
target vectors s^{|y|} of the history's translations (§5.3) and the history tensors the context layers read
(:class:`fairseq_ext.modules.bimsmt.History`). :class:`ConversationHistoryMixin` holds them as methods of
``bimsmt`` (:mod:`fairseq_ext.models.bimsmt`), the public interface the task and the ``conversation_online``
generator call.

Reference: Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University, 2019, ch. 5.
"""
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_ext.modules.bimsmt import History, encode_history
from fairseq_ext.modules.memnet import decoder_inputs, last_states


def trim_columns(tokens: Tensor, pad: int) -> Tensor:
    """Drop the columns that are padding in every row (a row subset of a padded batch)."""
    if tokens.numel() == 0:
        return tokens
    keep = tokens.ne(pad).any(0)
    return tokens[:, keep] if not bool(keep.all()) else tokens


class _NoTurns(nn.Module):
    """Stand-in Turn-RNN when no source context is used (only the target history is assembled)."""

    def __init__(self, dim: int):
        super().__init__()
        self.output_dim = dim

    def forward(self, vectors: Tensor, lengths: Tensor):
        n, L, _ = vectors.shape
        return vectors.new_zeros(n, L, self.output_dim), vectors.new_zeros(n, self.output_dim)


class ConversationHistoryMixin:
    """The history methods of ``BiMSMTModel`` (its ``directions``, ``turn_rnns``, ``sent_encoders``,
    ``frozen_base``, ``dictionary`` and ``args``)."""

    def sentence_vectors(self, tokens: Tensor, lang: int, encoder_final: Optional[Tensor] = None) -> Tensor:
        """Source sentence vectors (R, Ds) of sentences of language ``lang`` (gradient stopped)."""
        if self.sent_encoders is not None:
            return self.sent_encoders[lang](tokens)
        if encoder_final is None:
            tokens = trim_columns(tokens, self.dictionary.pad())
            with torch.no_grad():
                encoder_final = self.directions[lang].encoder(tokens, tokens.ne(self.dictionary.pad()).sum(1))[
                    "encoder_final"][0]
        return encoder_final.detach()

    def target_vectors(self, lang: int, src_tokens: Tensor, tgt_tokens: Tensor, tgt_lengths: Optional[Tensor] = None
                       ) -> Tensor:
        """s^{|y|} (R, H): translations ``tgt_tokens`` (fairseq target format, EOS last) of sources of language
        ``lang``, teacher-forced through that direction's sentence path (context 0, eval, no gradient); with
        ``--tgt-vectors frozen_base``, in training, through the frozen base copy instead."""
        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        frozen = getattr(self, "frozen_base", None)
        model = frozen[lang] if frozen is not None and self.training else self.directions[lang]
        if tgt_lengths is None:
            tgt_lengths = tgt_tokens.ne(pad).sum(1)
        src_tokens = trim_columns(src_tokens, pad)
        prev = decoder_inputs(tgt_tokens, tgt_lengths, eos, pad)[:, : max(int(tgt_lengths.max()), 1)]
        was_training, was_zero = model.training, model.decoder.zero_context
        model.eval()
        model.decoder.zero_context = True
        try:
            with torch.no_grad():
                enc = model.encoder(src_tokens, src_tokens.ne(pad).sum(1))
                _, extra = model.decoder(prev, encoder_out=enc, features_only=True)
        finally:
            model.decoder.zero_context = was_zero
            model.train(was_training)
        return last_states(extra["states"][0], tgt_lengths)

    def nset_sentence_vectors(self, nset_tokens: List[Tensor], nset_lang: Tensor,
                              finals: Optional[Dict[int, Tensor]] = None) -> Tensor:
        """Sentence vectors of the N-set: ``nset_tokens`` = [batch sources, extra sources] (each padded),
        ``finals`` {row: encoder_final} known already (the batch rows' own encoders)."""
        rows_of = []
        offset = 0
        for t in nset_tokens:
            rows_of.append(range(offset, offset + t.size(0)))
            offset += t.size(0)
        N = offset
        out: Optional[Tensor] = None
        langs = nset_lang.tolist()
        for part, rows in zip(nset_tokens, rows_of):
            for lang in (0, 1):
                local = [k for k, r in enumerate(rows) if langs[r] == lang]
                if not local:
                    continue
                idx = torch.tensor(local, dtype=torch.long, device=part.device)
                final = None
                if finals is not None and all(rows[k] in finals for k in local):
                    final = torch.stack([finals[rows[k]] for k in local])
                vec = self.sentence_vectors(part.index_select(0, idx), lang, final)
                if out is None:
                    out = vec.new_zeros(N, vec.size(-1))
                out[torch.tensor([rows[k] for k in local], device=vec.device)] = vec
        return out

    def encode_history(self, sent_vectors: Tensor, nset_lang: Tensor, nset_turn: Tensor, hist_index: Tensor,
                       tgt_vectors: Optional[Tensor] = None) -> History:
        dim = 2 * self.args.encoder_hidden_size
        turn_rnns = self.turn_rnns if self.turn_rnns is not None else [_NoTurns(dim)] * 2
        return encode_history(turn_rnns, sent_vectors, nset_lang, nset_turn, hist_index, tgt_vectors,
                              self.args.decoder_hidden_size)

    def history_target_vectors(self, nset_src: List[Tensor], nset_lang: Tensor, hist_index: Tensor,
                               hist_tgt_tokens: Tensor, hist_tgt_lengths: Optional[Tensor]) -> Tensor:
        """Target vectors (N, H) of the N-set rows used as history (zeros elsewhere)."""
        N = nset_lang.size(0)
        out = None
        used = torch.unique(hist_index[hist_index.ge(0)])
        pad = self.dictionary.pad()
        if hist_tgt_lengths is None:
            hist_tgt_lengths = hist_tgt_tokens.ne(pad).sum(1)
        B = nset_src[0].size(0)
        for lang in (0, 1):
            rows = used[nset_lang[used].eq(lang)]
            if rows.numel() == 0:
                continue
            srcs = []
            for r in rows.tolist():
                t = nset_src[0][r] if r < B else nset_src[1][r - B]
                srcs.append(t[t.ne(pad)])
            src = nn.utils.rnn.pad_sequence([s.flip(0) for s in srcs], batch_first=True, padding_value=pad).flip(1)
            vec = self.target_vectors(lang, src, hist_tgt_tokens[rows], hist_tgt_lengths[rows])
            if out is None:
                out = vec.new_zeros(N, vec.size(-1))
            out[rows] = vec
        if out is None:
            out = hist_tgt_tokens.new_zeros(N, self.args.decoder_hidden_size).float()
        return out

"""Segment-aware beam search for concatenated inputs (Nguyen 2021 ch. 4, ``concat_translation
--concat-eval`` / ``--segment-aware-decoding``; Table 4.3): a hypothesis ends at the k-th ``</s>``,
k = the number of ``</s>`` in its source.

Internally the first k-1 ``</s>`` are emitted as the unused ``<s>`` symbol (the model is fed ``</s>`` in
their place and the scores are unchanged), so fairseq's beam search does not finalise them; the returned
hypotheses carry ``</s>`` again, i.e. exactly the target format ``y1 </s> y2 </s>``, and fairseq's strings
(and BLEU) drop them like every ``</s>``.

:func:`segment_aware` turns any fairseq :class:`~fairseq.sequence_generator.SequenceGenerator` (fairseq's
own, or the GNMT length penalty's) into its segment-aware subclass.
"""
import torch
from fairseq.sequence_generator import EnsembleModel
from fairseq_ext.data.errors import UserDataError


SEPARATOR_PENALTY = -1e4  # log-prob of a too-early final </s> (finite, so forced endings still finish)


class SegmentAwareEnsemble(EnsembleModel):
    """:class:`EnsembleModel` whose hypotheses end at the k-th ``</s>`` (k = ``</s>`` in the source).

    The first k-1 ``</s>`` are emitted as ``sep`` (the unused ``<s>``); the models are fed ``</s>``
    in their place and the probability of ``</s>`` moves to ``sep`` unchanged. As fairseq's
    ``--min-len 1`` does for a whole hypothesis, no segment may be empty (no ``</s>``/``sep`` right
    after another). A final ``</s>`` that would come too early gets the log-probability
    :data:`SEPARATOR_PENALTY` (finite, so a hypothesis forced to end at the length limit still ends)."""

    def __init__(self, models, eos: int, sep: int):
        super().__init__(models)
        self.eos, self.sep = eos, sep

    def forward_encoder(self, net_input):
        outs = super().forward_encoder(net_input)
        if outs is not None:
            for o in outs:  # keep the source tokens in the (beam-reordered) encoder output
                if isinstance(o, dict) and len(o.get("src_tokens", [])) == 0:
                    o["src_tokens"] = [net_input["src_tokens"]]
        return outs

    def forward_decoder(self, tokens, encoder_outs, incremental_states, temperature: float = 1.0):
        is_sep = tokens.eq(self.sep)
        lprobs, attn = super().forward_decoder(tokens.masked_fill(is_sep, self.eos), encoder_outs,
                                               incremental_states, temperature)
        k = None
        if encoder_outs:
            src = encoder_outs[0].get("src_tokens", []) if isinstance(encoder_outs[0], dict) else []
            if len(src) and src[0].size(0) == tokens.size(0):
                k = src[0].eq(self.eos).sum(1)
        if k is None:
            k = torch.ones(tokens.size(0), dtype=torch.long, device=tokens.device)
        more = is_sep[:, 1:].sum(1) < (k - 1)
        empty = tokens[:, -1].eq(self.eos) | tokens[:, -1].eq(self.sep)  # no segment is left empty
        eos_lp = lprobs[:, self.eos].clone()
        lprobs[:, self.sep] = torch.where(more & ~empty, eos_lp, torch.full_like(eos_lp, float("-inf")))
        lprobs[:, self.eos] = torch.where(more | empty, torch.full_like(eos_lp, SEPARATOR_PENALTY), eos_lp)
        return lprobs, attn


class SegmentAwareMixin:
    def __init__(self, models, tgt_dict, **kwargs):
        eos = kwargs.get("eos") or tgt_dict.eos()
        self.separator = tgt_dict.bos()
        if self.separator in (eos, tgt_dict.pad(), tgt_dict.unk()):
            raise UserDataError("segment-aware decoding needs a <s> symbol distinct from </s>, <pad> and <unk>")
        if not isinstance(models, EnsembleModel):
            models = SegmentAwareEnsemble(models, eos, self.separator)
        super().__init__(models, tgt_dict, **kwargs)

    def _generate(self, sample, *args, **kwargs):
        out = super()._generate(sample, *args, **kwargs)
        for hyps in out:
            for h in hyps:
                h["tokens"] = h["tokens"].masked_fill(h["tokens"].eq(self.separator), self.eos)
        return out


_SEGMENT_AWARE_CLASSES = {}


def segment_aware(cls):
    """``cls`` (a :class:`SequenceGenerator`) with segment-aware ends (cached subclass)."""
    if cls not in _SEGMENT_AWARE_CLASSES:
        _SEGMENT_AWARE_CLASSES[cls] = type(f"SegmentAware{cls.__name__}", (SegmentAwareMixin, cls), {})
    return _SEGMENT_AWARE_CLASSES[cls]

"""Decoding the fertility NAT (Gu 2018 §8.3.4): argmax, average, noisy and exact parallel decoding.

Given fertilities f̂ the translation factorises, so decoding is one parallel decoder pass and a per-position
argmax, Ŷ = G(x_{1:T'}, f̂_{1:T'}; θ).  The fertilities come from

* **argmax** (Eq. 8.5): f̂_{t'} = argmax_f p_F(f_{t'} | x_{1:T'});
* **average** (Eq. 8.6): f̂_{t'} = Round(Σ_f p_F(f_{t'} | x_{1:T'})·f) (classes 0..L−1);
* **noisy parallel decoding, NPD** (Eq. 8.7): Ŷ_NPD = G(x, argmax_{f∼p_F} p_AR(G(x, f) | X)) — s
  fertility sequences are sampled from p_F, all s·B candidates are decoded in one batch, and the frozen
  autoregressive teacher scores them in one teacher-forced pass (mean token log-probability by default,
  spec §3.9.14; ``--npd-score-eos`` adds ⟨eos⟩, ``--npd-no-length-norm`` ranks by the total); the best
  candidate of each sentence is kept.  s counts sampled sequences only (the argmax one is not added).
  Sampling uses torch's global RNG, so ``fairseq-generate --seed`` makes NPD reproducible;
* **exact parallel decoding, EPD** (Eq. 8.8): Ŷ_EPD = G(x, argmax_{f ∈ argsort^K p_F} p_AR(G(x, f) | X)) —
  the K most probable fertility sequences under the factorised p_F (heap search, duplicates after the
  length cap removed: :func:`~fairseq_ext.models.nat_fertility.topk_fertility`; the argmax sequence comes
  first, so K = 1 is argmax decoding) instead of samples, then the same batched decoding and teacher
  rescoring as NPD.  Deterministic.

The teacher's rescoring keeps only the candidates' own tokens' log-probabilities; the vocabulary
log-softmax runs on ``rescore_batch`` candidates at a time (0: all at once), which bounds its memory and
does not change the scores.

In every mode Σf̂ is capped at ``max_len_ratio``·T' and an all-zero f̂ gets one word (spec §3.9.9); models
trained with ``--decoder-input uniform|positional`` use Σf̂ as the output length unless ``oracle_length``.

Used through ``task.build_generator`` of ``translation_fertility`` (so ``fairseq-generate`` works unchanged);
hypotheses carry ``tokens`` (+⟨eos⟩), the student's mean log-probability as ``score``, per-token
``positional_scores``, the ``fertility`` used and, with NPD/EPD, the teacher's ``teacher_score`` and the
number of ``candidates`` it chose from.
"""
import logging
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_ext.models.nat_fertility import predict_fertility, teacher_sequence_scores, topk_fertility

logger = logging.getLogger(__name__)

DECODING = ("argmax", "average", "epd")


def best_per_sentence(scores: Tensor, index: Tensor, n_sentences: int) -> Tensor:
    """(n_sentences,) the row of the highest score among the rows ``index`` assigns to each sentence (the
    first of equal scores; NaN counts as −inf); every sentence needs at least one row."""
    scores = torch.nan_to_num(scores, nan=float("-inf"))
    rows = torch.arange(scores.numel(), device=scores.device)
    best = scores.new_full((n_sentences,), float("-inf")).scatter_reduce(0, index, scores, "amax")
    top = rows.masked_fill(scores.ne(best[index]), scores.numel())
    return rows.new_full((n_sentences,), scores.numel()).scatter_reduce(0, index, top, "amin")


class NATFertilityGenerator:
    """fairseq-style generator (``generate(models, sample)``) for ``nat_fertility`` models."""

    def __init__(self, tgt_dict, fertility_decoding: str = "argmax", npd_samples: int = 0, teacher=None,
                 npd_temperature: float = 1.0, npd_score_eos: bool = False, npd_length_normalize: bool = True,
                 oracle_length: bool = False, max_len_ratio: float = 2.0, epd_topk: int = 10,
                 rescore_batch: int = 0):
        if fertility_decoding not in DECODING:
            raise ValueError(f"fertility decoding {fertility_decoding!r}: expected one of {DECODING}")
        if npd_samples > 0 and fertility_decoding == "epd":
            raise ValueError("choose noisy (--npd-samples) or exact (--fertility-decoding epd) parallel decoding")
        if fertility_decoding == "epd" and epd_topk < 1:
            raise ValueError(f"exact parallel decoding needs --epd-topk >= 1, got {epd_topk}")
        if (npd_samples > 0 or fertility_decoding == "epd") and teacher is None:
            raise ValueError("noisy/exact parallel decoding needs the autoregressive teacher (--teacher-path)")
        self.tgt_dict = tgt_dict
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.fertility_decoding = fertility_decoding
        self.npd_samples = npd_samples
        self.teacher = teacher
        self.npd_temperature = npd_temperature
        self.npd_score_eos = npd_score_eos
        self.npd_length_normalize = npd_length_normalize
        self.oracle_length = oracle_length
        self.max_len_ratio = max_len_ratio
        self.epd_topk = epd_topk
        self.rescore_batch = rescore_batch
        self.symbols_to_strip_from_output = {tgt_dict.bos(), tgt_dict.eos()}

    def _cap(self, model) -> Optional[int]:
        return getattr(model.decoder, "max_target_positions", None)

    def _oracle(self, model, sample, src_mask):
        """(fertility, lengths) from the reference for ``oracle_length``."""
        if model.decoder_input_mode == "copy-fertility":
            if sample.get("fertility") is None:
                raise ValueError("--oracle-length with a copy-fertility model needs the split's fertilities")
            return sample["fertility"].masked_fill(~src_mask, 0), None
        if sample.get("target") is None:
            raise ValueError("--oracle-length needs references")
        return None, sample["target"].ne(self.pad).sum(1)

    def score_candidates(self, src_tokens: Tensor, src_lengths: Tensor, tokens: Tensor, mask: Tensor,
                         index: Tensor) -> Tensor:
        """The teacher's score of every candidate (N,); row n translates source ``index[n]``."""
        teacher = self.teacher
        if next(teacher.parameters()).device != tokens.device:
            teacher.to(tokens.device)
        return teacher_sequence_scores(teacher, src_tokens, src_lengths, tokens, mask, index=index,
                                       eos=self.eos if self.npd_score_eos else None,
                                       length_normalize=self.npd_length_normalize, chunk=self.rescore_batch)

    def rescore(self, model, encoder_out, src_tokens: Tensor, src_lengths: Tensor, fertility: Tensor,
                index: Tensor):
        """NPD/EPD (Eqs. 8.7, 8.8): decode every candidate fertility sequence (row n for source
        ``index[n]``) in one NAT pass, let the teacher score all of them, keep each sentence's best.
        Returns (tokens, student log-probs, mask, fertility, teacher score, candidates) of the kept rows."""
        B = src_tokens.size(0)
        enc = model.encoder.reorder_encoder_out(encoder_out, index)
        logits, mask = model.decode(enc, src_tokens[index], fertility=fertility)
        scores, tokens = torch.log_softmax(logits.float(), -1).max(-1)
        tokens = tokens.masked_fill(~mask, self.pad)
        t_scores = self.score_candidates(src_tokens, src_lengths, tokens, mask, index)
        chosen = best_per_sentence(t_scores, index, B)
        candidates = torch.bincount(index, minlength=B)
        return tokens[chosen], scores[chosen], mask[chosen], fertility[chosen], t_scores[chosen], candidates

    @torch.no_grad()
    def generate(self, models, sample: Dict, prefix_tokens=None, constraints=None, **kwargs) -> List[List[Dict]]:
        if len(models) != 1:
            raise NotImplementedError("nat_fertility decoding supports a single model (no ensembles)")
        model = models[0]
        model.eval()
        src_tokens = sample["net_input"]["src_tokens"]
        src_lengths = sample["net_input"]["src_lengths"]
        B = src_tokens.size(0)
        encoder_out = model.encoder(src_tokens, src_lengths=src_lengths)
        fert_logits = model.fertility_logits(encoder_out)
        src_mask = model.source_mask(src_tokens)
        cap = self._cap(model)
        teacher_score = candidates = None

        if self.npd_samples > 0 or self.fertility_decoding == "epd":
            if self.npd_samples > 0:  # Eq. 8.7: s sampled sequences per sentence
                index = torch.arange(B, device=src_tokens.device).repeat_interleave(self.npd_samples)
                fertility = predict_fertility(fert_logits[index], src_mask[index], "sample", self.max_len_ratio,
                                              cap, temperature=self.npd_temperature)
            else:  # Eq. 8.8: the K most probable sequences per sentence
                fertility, index = topk_fertility(fert_logits, src_mask, self.epd_topk, self.max_len_ratio, cap)
            tokens, scores, mask, fertility, teacher_score, candidates = self.rescore(
                model, encoder_out, src_tokens, src_lengths, fertility, index)
        else:
            lengths = None
            if self.oracle_length:
                fertility, lengths = self._oracle(model, sample, src_mask)
                if fertility is None:
                    fertility = predict_fertility(fert_logits, src_mask, self.fertility_decoding,
                                                  self.max_len_ratio, cap)
            else:
                fertility = predict_fertility(fert_logits, src_mask, self.fertility_decoding, self.max_len_ratio, cap)
            logits, mask = model.decode(encoder_out, src_tokens, fertility=fertility, lengths=lengths)
            scores, tokens = torch.log_softmax(logits.float(), -1).max(-1)

        hypos = []
        for i in range(B):
            m = mask[i]
            toks = torch.cat([tokens[i][m], tokens.new_tensor([self.eos])])
            pos = torch.cat([scores[i][m], scores.new_zeros(1)])
            hypo = {
                "tokens": toks,
                "score": float(scores[i][m].mean()) if bool(m.any()) else 0.0,
                "positional_scores": pos,
                "attention": None,
                "alignment": None,
                "fertility": fertility[i][src_mask[i]].cpu(),
            }
            if teacher_score is not None:
                hypo["teacher_score"] = float(teacher_score[i])
                hypo["candidates"] = int(candidates[i])
            hypos.append([hypo])
        return hypos

"""Decoding the fertility NAT (Gu 2018 §8.3.4): argmax, average and noisy parallel decoding.

Given fertilities f̂ the translation factorises, so decoding is one parallel decoder pass and a per-position
argmax, Ŷ = G(x_{1:T'}, f̂_{1:T'}; θ).  The fertilities come from

* **argmax** (Eq. 8.5): f̂_{t'} = argmax_f p_F(f_{t'} | x_{1:T'});
* **average** (Eq. 8.6): f̂_{t'} = Round(Σ_f p_F(f_{t'} | x_{1:T'})·f) (classes 0..L−1);
* **noisy parallel decoding, NPD** (Eq. 8.7): Ŷ_NPD = G(x, argmax_{f∼p_F} p_AR(G(x, f) | X)) — s
  fertility sequences are sampled from p_F, all s·B candidates are decoded in one batch, and the frozen
  autoregressive teacher scores them in one teacher-forced pass (mean token log-probability by default,
  spec §3.9.14; ``--npd-score-eos`` adds ⟨eos⟩, ``--npd-no-length-norm`` ranks by the total); the best
  candidate of each sentence is kept.  s counts sampled sequences only (the argmax one is not added).
  Sampling uses torch's global RNG, so ``fairseq-generate --seed`` makes NPD reproducible.

In every mode Σf̂ is capped at ``max_len_ratio``·T' and an all-zero f̂ gets one word (spec §3.9.9); models
trained with ``--decoder-input uniform|positional`` use Σf̂ as the output length unless ``oracle_length``.

Used through ``task.build_generator`` of ``translation_fertility`` (so ``fairseq-generate`` works unchanged);
hypotheses carry ``tokens`` (+⟨eos⟩), the student's mean log-probability as ``score``, per-token
``positional_scores``, the ``fertility`` used and, with NPD, the teacher's ``teacher_score``.
"""
import logging
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_ext.models.nat_fertility import predict_fertility, sequence_scores, teacher_log_probs

logger = logging.getLogger(__name__)


class NATFertilityGenerator:
    """fairseq-style generator (``generate(models, sample)``) for ``nat_fertility`` models."""

    def __init__(self, tgt_dict, fertility_decoding: str = "argmax", npd_samples: int = 0, teacher=None,
                 npd_temperature: float = 1.0, npd_score_eos: bool = False, npd_length_normalize: bool = True,
                 oracle_length: bool = False, max_len_ratio: float = 2.0):
        if fertility_decoding not in ("argmax", "average"):
            raise ValueError(f"fertility decoding {fertility_decoding!r}: expected argmax or average")
        if npd_samples > 0 and teacher is None:
            raise ValueError("noisy parallel decoding needs the autoregressive teacher (--teacher-path)")
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
        lprobs = teacher_log_probs(teacher, src_tokens, src_lengths, tokens, mask, index=index)
        return sequence_scores(lprobs, tokens, mask, eos=self.eos if self.npd_score_eos else None,
                               length_normalize=self.npd_length_normalize)

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
        teacher_score = None

        if self.npd_samples > 0:
            s = self.npd_samples
            index = torch.arange(B, device=src_tokens.device).repeat_interleave(s)
            fertility = predict_fertility(fert_logits[index], src_mask[index], "sample", self.max_len_ratio, cap,
                                          temperature=self.npd_temperature)
            enc = model.encoder.reorder_encoder_out(encoder_out, index)
            logits, mask = model.decode(enc, src_tokens[index], fertility=fertility)
            lprobs = torch.log_softmax(logits.float(), -1)
            scores, tokens = lprobs.max(-1)
            tokens = tokens.masked_fill(~mask, self.pad)
            t_scores = self.score_candidates(src_tokens, src_lengths, tokens, mask, index)
            best = t_scores.view(B, s).argmax(1)
            chosen = torch.arange(B, device=best.device) * s + best
            tokens, scores, mask, fertility = tokens[chosen], scores[chosen], mask[chosen], fertility[chosen]
            teacher_score = t_scores[chosen]
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
            hypos.append([hypo])
        return hypos

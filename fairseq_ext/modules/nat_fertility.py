"""Helpers shared by the fertility NAT's criterion and generator: choosing fertilities from p_F, and scoring
NAT outputs with the frozen autoregressive teacher (Gu's thesis, ch. 8; references in
:mod:`fairseq_ext.models.nat_fertility`).

* :func:`predict_fertility` — fertilities f̂ from the fertility predictor's logits: argmax (Eq. 8.5),
  average (Eq. 8.6) or a sample (noisy parallel decoding, Eq. 8.7; the REINFORCE term of Eq. 8.11), made
  decodable by :func:`constrain_fertility` (no empty output, Σf ≤ ``max_len_ratio``·T');
* :func:`teacher_features` / :func:`teacher_output_log_probs` / :func:`teacher_log_probs` — the teacher
  forced on the NAT outputs ŷ, giving log p_AR(· | ŷ_{<t}, X): the reverse-KL terms of fine-tuning
  (Eqs. 8.10, 8.11) and the rescoring of noisy / exact parallel decoding (Eqs. 8.7, 8.8).

These are plain functions of tensors (and of the teacher, a fairseq encoder-decoder model); the NAT model
itself is not needed here.
"""
from typing import Optional

import torch
from torch import Tensor

FERTILITY_DECODING = ("argmax", "average", "sample")


# ----------------------------------------------------------------------------------------------- fertilities
def predict_fertility(fertility_logits: Tensor, src_mask: Tensor, how: str = "argmax",
                      max_len_ratio: float = 2.0, max_length: Optional[int] = None,
                      temperature: float = 1.0, generator: Optional[torch.Generator] = None) -> Tensor:
    """Fertilities f̂ (B, S) from p_F (logits (B, S, L)); 0 at padding/⟨eos⟩.

    ``argmax`` (Eq. 8.5): f̂ = argmax_f p_F(f); ``average`` (Eq. 8.6): f̂ = Round(Σ_f p_F(f)·f), the sum
    running over the classes 0..L−1 that the predictor has, rounded half up; ``sample``: f ~ p_F^(1/temperature)
    (noisy parallel decoding, Eq. 8.7; the REINFORCE term of Eq. 8.11).  Then :func:`constrain_fertility`
    (no empty output, Σf ≤ ``max_len_ratio``·T')."""
    logits = fertility_logits.float()
    B, S, L = logits.shape
    if how == "argmax":
        f = logits.argmax(-1)
    elif how == "average":
        p = logits.softmax(-1)
        mean = (p * torch.arange(L, device=p.device, dtype=p.dtype)).sum(-1)
        f = torch.floor(mean + 0.5).long()
    elif how == "sample":
        p = (logits / temperature).softmax(-1).reshape(-1, L)
        f = torch.multinomial(p, 1, generator=generator).view(B, S)
    else:
        raise ValueError(f"unknown fertility decoding {how!r}; expected one of {FERTILITY_DECODING}")
    return constrain_fertility(f, logits, src_mask, max_len_ratio, max_length)


def constrain_fertility(fertility: Tensor, fertility_logits: Tensor, src_mask: Tensor, max_len_ratio: float = 2.0,
                        max_length: Optional[int] = None) -> Tensor:
    """The decodable version of chosen fertilities (B, S): 0 outside ``src_mask``; (i) an all-zero row gets
    f = 1 at the word with the largest p_F(f ≥ 1), so that no output is empty (a choice: the thesis does not
    say); (ii) the cumulative fertility is truncated at max(1, ⌊max_len_ratio·T'⌋) (and ``max_length``), the
    cap Σf ≤ 2·T' of the authors' released code."""
    B, S = fertility.shape
    f = fertility.long().masked_fill(~src_mask, 0)
    # (i) never an empty output
    empty = f.sum(1).eq(0)
    if bool(empty.any()):
        p_ge1 = 1.0 - fertility_logits.float().softmax(-1)[..., 0]
        p_ge1 = p_ge1.masked_fill(~src_mask, -1.0)
        j = p_ge1.argmax(1)
        one_hot = torch.arange(S, device=f.device).unsqueeze(0).eq(j.unsqueeze(1))
        f = f + (one_hot & empty.unsqueeze(1)).long()
    # (ii) length cap
    cap = fertility_cap(src_mask, max_len_ratio, max_length)
    cum = torch.minimum(f.cumsum(1), cap.unsqueeze(1))
    return torch.diff(cum, dim=1, prepend=cum.new_zeros(B, 1))


def fertility_cap(src_mask: Tensor, max_len_ratio: float = 2.0, max_length: Optional[int] = None) -> Tensor:
    """(B,) the output-length cap max(1, ⌊max_len_ratio·T'⌋), at most ``max_length`` (the released code
    caps Σf at 2·T')."""
    cap = torch.floor(src_mask.long().sum(1).float() * max_len_ratio).long().clamp(min=1)
    return cap if max_length is None else cap.clamp(max=max_length)


# ----------------------------------------------------------------------------------------------- the teacher
@torch.no_grad()
def teacher_features(teacher, src_tokens: Tensor, src_lengths: Tensor, hyp_tokens: Tensor, hyp_mask: Tensor,
                     index: Optional[Tensor] = None):
    """The frozen autoregressive teacher's decoder features (N, T+1, C) (and its ``extra``), teacher-forced
    on the NAT outputs ŷ.

    ``hyp_tokens`` (N, T) right-padded (``hyp_mask`` marks real tokens); ``index`` (N,) maps each row to
    its source sentence in ``src_tokens`` (the teacher's encoder runs once per source, as in noisy / exact
    parallel decoding where N = B·s).  The teacher's decoder input is ⟨eos⟩ ŷ_1 … ŷ_T (fairseq's BOS
    convention): feature t < T predicts ŷ_{t+1}, feature len(ŷ) predicts ⟨eos⟩."""
    pad = teacher.decoder.dictionary.pad()
    eos = teacher.decoder.dictionary.eos()
    hyp = hyp_tokens.masked_fill(~hyp_mask, pad)
    enc = teacher.encoder(src_tokens, src_lengths=src_lengths)
    if index is not None:
        enc = teacher.encoder.reorder_encoder_out(enc, index)
    prev = torch.cat([hyp.new_full((hyp.size(0), 1), eos), hyp], 1)
    return teacher.decoder(prev, encoder_out=enc, features_only=True)


def teacher_output_log_probs(teacher, features: Tensor, extra) -> Tensor:
    """Float log-probabilities over the vocabulary from (a slice of) :func:`teacher_features`' output: the
    teacher's output layer and its ``get_normalized_probs``."""
    return teacher.get_normalized_probs((teacher.decoder.output_layer(features), extra), log_probs=True).float()


@torch.no_grad()
def teacher_log_probs(teacher, src_tokens: Tensor, src_lengths: Tensor, hyp_tokens: Tensor,
                      hyp_mask: Tensor, index: Optional[Tensor] = None) -> Tensor:
    """log p_AR(· | ŷ_{<t}, X) of the frozen teacher on the NAT outputs ŷ (see :func:`teacher_features`):
    (N, T+1, V) float log-probabilities, row t < T predicts ŷ_{t+1}, row len(ŷ) predicts ⟨eos⟩."""
    features, extra = teacher_features(teacher, src_tokens, src_lengths, hyp_tokens, hyp_mask, index)
    return teacher_output_log_probs(teacher, features, extra)

"""Rescoring candidate translations with a scorer model: the second half of noisy parallel decoding.

Noisy parallel decoding (Gu 2019, Eq. 2.14 for autoregressive models; Eq. 8.7 for the non-autoregressive
Transformer) is "sample candidates, then let a model score them noise-free and keep the best". This module
is the scoring half, shared by every sampler:

    scores = score_candidates(scorer, src_tokens, src_lengths, candidates, index)

teacher-forces each candidate Y (a 1-D tensor of target ids, row n translating source ``index[n]``)
through any fairseq encoder–decoder ``scorer`` and returns its log-probability
log p(Y | X) = Σ_t log p(y_t | y_{<t}, X), divided by |Y|^α (Eq. 2.13; α = 1: the mean token
log-probability, α = 0: the plain sum). The encoder runs once per source; the decoder, the output layer
and the vocabulary log-softmax run on ``chunk`` candidates at a time (peak memory chunk·T·V floats), which
does not change any score. :func:`best_per_group` then picks each sentence's winner.

The scorer is used as it is: put it in eval mode and clear any decoding-time perturbation first.

References: Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019;
Cho, Esipova, "Noisy Parallel Approximate Decoding for Conditional Recurrent Language Model", 2016.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import torch
from fairseq.dataclass import FairseqDataclass
from torch import Tensor

#: candidates per noise-free rescoring pass (``--rescore-batch``; 0: all at once): it bounds the scorer's memory
#: and changes no score
RESCORE_BATCH = 64


@dataclass
class RescoreBatchConfig(FairseqDataclass):
    """``--rescore-batch`` (earlier ``--npd-rescore-batch``) of every task whose decoding rescores candidates."""
    rescore_batch: int = field(
        default=RESCORE_BATCH,
        metadata={"help": "NPD/EPD: the scorer's decoder and output softmax over the vocabulary run on this many "
                          "candidates at a time (bounds memory, same scores); 0 = all at once"},
    )


@dataclass
class CandidateScores:
    """``scores`` (N,) length-normalised log-probabilities (−inf for an empty candidate);
    ``positional`` the per-token log-probabilities of each scored candidate; ``tokens`` the scored
    candidates (with ⟨eos⟩ appended where asked)."""
    scores: Tensor
    positional: List[Tensor]
    tokens: List[Tensor]


def _with_eos(c: Tensor, eos: int) -> Tensor:
    if c.numel() and int(c[-1]) == eos:
        return c
    return torch.cat([c, c.new_tensor([eos])])


@torch.no_grad()
def score_candidates(scorer, src_tokens: Tensor, src_lengths: Tensor, candidates: Sequence[Tensor],
                     index: Optional[Tensor] = None, *, eos: int, pad: int, alpha: float = 1.0,
                     append_eos: bool = True, chunk: int = RESCORE_BATCH, encoder_out=None) -> CandidateScores:
    """Score every candidate with ``scorer`` (see module doc).

    ``index`` (N,) source row of each candidate (default: candidate n translates source n);
    ``append_eos``: score ⟨eos⟩ after a candidate that lacks it (the full log p(Y|X) of Eq. 2.1), else
    score the given tokens only; ``chunk`` ≤ 0: all candidates at once; ``encoder_out``: the scorer's
    encoder output for ``src_tokens`` if already computed."""
    N = len(candidates)
    device = src_tokens.device
    if index is None:
        if N != src_tokens.size(0):
            raise ValueError(f"{N} candidates for {src_tokens.size(0)} sources: give their source index")
        index = torch.arange(N, device=device)
    cands = [(_with_eos(c, eos) if append_eos else c).to(device) for c in candidates]
    if encoder_out is None:
        encoder_out = scorer.encoder(src_tokens, src_lengths=src_lengths)
    step = chunk if chunk and chunk > 0 else max(N, 1)
    # every chunk is padded to the longest candidate of all, so that a row meets the same shapes (and
    # the same floating-point summation order) whatever the chunking
    T = max((c.numel() for c in cands), default=0)
    scores = torch.full((N,), float("-inf"), device=device)
    positional: List[Tensor] = [torch.zeros(0, device=device) for _ in range(N)]
    for a in range(0, N, step):
        rows = [n for n in range(a, min(a + step, N)) if cands[n].numel() > 0]
        if not rows:
            continue
        lengths = [cands[n].numel() for n in rows]
        target = src_tokens.new_full((len(rows), T), pad)
        prev = src_tokens.new_full((len(rows), T), pad)
        prev[:, 0] = eos
        for i, n in enumerate(rows):
            target[i, :lengths[i]] = cands[n]
            prev[i, 1:lengths[i]] = cands[n][:-1]
        rows_t = torch.tensor(rows, device=device)
        enc = scorer.encoder.reorder_encoder_out(encoder_out, index[rows_t])
        out = scorer.decoder(prev, encoder_out=enc)
        lprobs = scorer.get_normalized_probs(out, log_probs=True).float()
        tok = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        for i, n in enumerate(rows):
            positional[n] = tok[i, :lengths[i]]
            scores[n] = positional[n].sum() / (lengths[i] ** alpha)
    return CandidateScores(scores, positional, cands)


def best_per_group(scores: Tensor, group: Tensor, n_groups: int) -> Tensor:
    """(n_groups,) the index of the highest score among the rows of each group (the first of equal
    scores; NaN counts as −inf); every group needs at least one row."""
    scores = torch.nan_to_num(scores.float(), nan=float("-inf"))
    rows = torch.arange(scores.numel(), device=scores.device)
    best = scores.new_full((n_groups,), float("-inf")).scatter_reduce(0, group, scores, "amax")
    top = rows.masked_fill(scores.ne(best[group]), scores.numel())
    return rows.new_full((n_groups,), scores.numel()).scatter_reduce(0, group, top, "amin")

"""Decoding the fertility NAT (Gu's thesis, §8.3.4; references in :mod:`fairseq_ext.models.nat_fertility`):
argmax, average, noisy and exact parallel decoding.

Given fertilities f̂, decoding is one parallel decoder pass and a per-position argmax,
Ŷ = G(x_{1:T'}, f̂_{1:T'}; θ). The fertilities come from

* **argmax** (Eq. 8.5) or **average** (Eq. 8.6) of p_F;
* **noisy parallel decoding, NPD** (Eq. 8.7): s sampled fertility sequences, all candidates decoded in one
  batch and rescored by the frozen autoregressive teacher (length-normalised by default);
* **exact parallel decoding, EPD** (Eq. 8.8): the K most probable fertility sequences
  (:func:`topk_fertility`), then the same rescoring.

:meth:`NATFertilityGenerator.generate` uses the model's public interface, the fertility search of
:mod:`fairseq_ext.modules.nat_fertility`, ``model.decode`` and, with NPD/EPD, the shared rescorer
:func:`teacher_sequence_scores` / :func:`~fairseq_ext.generators.rescoring.best_per_group`
(``--rescore-batch`` bounds its memory). Σf̂ is capped at ``max_len_ratio``·T'.

Used through ``task.build_generator`` of ``translation_fertility``, so ``fairseq-generate`` works unchanged;
hypotheses also carry the ``fertility`` used and, with NPD/EPD, the ``teacher_score``.
"""
import heapq
import itertools
import logging
import math
from typing import Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor

from fairseq_ext.generators.rescoring import RESCORE_BATCH, best_per_group, score_candidates
from fairseq_ext.modules.generation_options import NPD_SAMPLES
from fairseq_ext.modules.nat_fertility import constrain_fertility, fertility_cap, predict_fertility
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

DECODING = ("argmax", "average", "epd")


# ----------------------------------------------------------------------------------------------- EPD search
def fertility_sequences_by_probability(log_probs: Tensor, cap: Optional[int] = None
                                       ) -> Iterator[Tuple[float, Tuple[int, ...]]]:
    """Every fertility sequence f_{1:T'} with its log p_F(f_{1:T'}) = Σ_{t'} log p_F(f_{t'}), in order of
    non-increasing probability — the argsort of Eq. 8.8 over the factorised p_F, enumerated lazily.

    ``log_probs`` (T', L): per-word log p_F over the classes 0..L−1.  Heap-based search over the per-word
    fertilities sorted by log-probability (as ``topK_search`` of the authors' released code): a state holds
    one rank per word, the root is all ranks 0 (the argmax sequence, Eq. 8.5, ties to the smaller fertility as
    ``argmax``), and a state's successors raise one rank at or after the last raised word — every rank vector
    then has exactly one parent (lower its last non-zero rank), so no sequence is generated twice and no
    duplicate check is needed, and a successor is never more probable than its parent, so the heap pops in
    probability order. Sums are in float64; equal probabilities come out in push order.

    With ``cap`` (the output-length cap Σf ≤ cap), sequences that the cap makes identical to a more probable
    one already yielded are skipped where that is cheap to see: a state's descendants only change words at
    or after its last raised one, so none is raised at a word whose predecessors already sum to ≥ cap (every
    such descendant truncates to the state's own sequence).  The rest are yielded."""
    lp = log_probs.detach().double().cpu()
    n = lp.size(0)
    if n == 0:
        yield 0.0, ()
        return
    sorted_lp, order = lp.sort(dim=-1, descending=True, stable=True)
    vals, classes = sorted_lp.tolist(), order.tolist()
    L = len(vals[0])
    root = (0,) * n
    heap = [(-sum(v[0] for v in vals), 0, root, 0)]  # (−log p, push counter, ranks, first raisable word)
    pushed = 1
    while heap:
        neg, _, ranks, start = heapq.heappop(heap)
        f = tuple(c[r] for c, r in zip(classes, ranks))
        yield -neg, f
        before = sum(f[:start])  # Σ of the words before j
        for j in range(start, n):
            if cap is not None and before >= cap:
                break
            r = ranks[j] + 1
            if r < L:
                heapq.heappush(heap, (neg + vals[j][r - 1] - vals[j][r], pushed, ranks[:j] + (r,) + ranks[j + 1:], j))
                pushed += 1
            before += f[j]


def topk_fertility(fertility_logits: Tensor, src_mask: Tensor, k: int, max_len_ratio: float = 2.0,
                   max_length: Optional[int] = None, max_examined: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Exact parallel decoding's candidates (Eq. 8.8): the K most probable fertility sequences of every
    sentence under the factorised p_F (logits (B, S, L)), as decodable sequences.

    Sequences come from :func:`fertility_sequences_by_probability` over the real words (``src_mask``) and
    go through :func:`constrain_fertility` (Σf ≤ ``max_len_ratio``·T', no empty output), after which
    duplicates are removed: two sequences that differ only beyond the length cap decode identically, so
    only the more probable one is kept and the search goes on to the next (the search itself skips most
    such sequences).  The first candidate of each sentence is therefore the argmax one (Eq. 8.5, what
    ``predict_fertility(.., "argmax")`` returns).  At most ``max_examined`` (default 100·K) sequences are
    examined per sentence, so a sentence may get fewer than K candidates (e.g. a one-word source under
    the cap Σf ≤ 2 has only two).

    Returns ``fertility`` (N, S) and ``index`` (N,), the sentence of every candidate, in sentence order
    and, within a sentence, in order of decreasing probability."""
    if k < 1:
        raise ValueError(f"EPD needs K >= 1, got {k}")
    budget = max_examined or 100 * k
    logits = fertility_logits.detach().float().cpu()
    mask = src_mask.cpu()
    log_probs = logits.double().log_softmax(-1)  # float64: no ties that the float logits do not have
    B, S, _ = logits.shape
    rows, index = [], []
    caps = fertility_cap(mask, max_len_ratio, max_length).tolist()
    for b in range(B):
        words = mask[b].nonzero().flatten()
        sequences = fertility_sequences_by_probability(log_probs[b, words], cap=caps[b])
        seen, examined = set(), 0
        while len(seen) < k and examined < budget:
            raw = [f for _, f in itertools.islice(sequences, min(k, budget - examined))]
            if not raw:
                break
            examined += len(raw)
            f = torch.zeros(len(raw), S, dtype=torch.long)
            f[:, words] = torch.tensor(raw, dtype=torch.long).view(len(raw), -1)
            f = constrain_fertility(f, logits[b].expand(len(raw), -1, -1), mask[b].expand(len(raw), -1),
                                    max_len_ratio, max_length)
            for row in f.tolist():
                key = tuple(row)
                if key not in seen and len(seen) < k:
                    seen.add(key)
                    rows.append(row)
                    index.append(b)
    device = fertility_logits.device
    return (torch.tensor(rows, dtype=torch.long, device=device).view(-1, S),
            torch.tensor(index, dtype=torch.long, device=device))


# ----------------------------------------------------------------------------------------------- rescoring
def hypothesis_log_probs(token_lprobs: Tensor, hyp_tokens: Tensor, hyp_mask: Tensor,
                         eos: Optional[int] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """(log p(ŷ_t) (N, T), 0 at padding; log p(⟨eos⟩ | ŷ) (N,) with ``eos``, else None) gathered from
    (N, ≥T+1, V) log-probs laid out as :func:`~fairseq_ext.modules.nat_fertility.teacher_log_probs`'."""
    T = hyp_tokens.size(1)
    tok = token_lprobs[:, :T].gather(-1, hyp_tokens.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    tok = tok.masked_fill(~hyp_mask, 0.0)
    eos_lp = None
    if eos is not None:
        rows = torch.arange(hyp_tokens.size(0), device=hyp_tokens.device)
        eos_lp = token_lprobs[rows, hyp_mask.sum(1), eos]
    return tok, eos_lp


def _combine_scores(tok: Tensor, hyp_mask: Tensor, eos_lp: Optional[Tensor], length_normalize: bool) -> Tensor:
    total = tok.sum(1)
    n = hyp_mask.sum(1).float()
    if eos_lp is not None:
        total = total + eos_lp
        n = n + 1
    return total / n.clamp(min=1) if length_normalize else total


def sequence_scores(token_lprobs: Tensor, hyp_tokens: Tensor, hyp_mask: Tensor, eos: Optional[int] = None,
                    length_normalize: bool = True) -> Tensor:
    """Σ_t log p(ŷ_t) (÷ length when ``length_normalize``, the NPD/EPD default) from (N, T+1, V) teacher
    log-probs; with ``eos`` the ⟨eos⟩ after the last token is scored too.  The unchunked reference of
    :func:`teacher_sequence_scores`."""
    tok, eos_lp = hypothesis_log_probs(token_lprobs, hyp_tokens, hyp_mask, eos)
    return _combine_scores(tok, hyp_mask, eos_lp, length_normalize)


@torch.no_grad()
def teacher_sequence_scores(teacher, src_tokens: Tensor, src_lengths: Tensor, hyp_tokens: Tensor,
                            hyp_mask: Tensor, index: Optional[Tensor] = None, eos: Optional[int] = None,
                            length_normalize: bool = True, chunk: int = 0) -> Tensor:
    """The teacher's score p_AR(ŷ | X) of every candidate (N,) — the rescoring of NPD (Eq. 8.7) and EPD
    (Eq. 8.8), i.e. :func:`sequence_scores` on
    :func:`~fairseq_ext.modules.nat_fertility.teacher_log_probs` — computed by the rescorer every noisy
    decoder shares (:func:`fairseq_ext.generators.rescoring.score_candidates`): a sentence's candidates
    are the rows with the same ``index``; ``eos`` given: the ⟨eos⟩ after each candidate is scored too;
    ``length_normalize``: divided by the number of scored tokens; ``chunk`` candidates at a time (0: all),
    which does not change a row's value.  A candidate with no token and no ⟨eos⟩ scores −inf."""
    dictionary = teacher.decoder.dictionary
    candidates = [hyp_tokens[n][hyp_mask[n]] for n in range(hyp_tokens.size(0))]
    return score_candidates(teacher, src_tokens, src_lengths, candidates, index, eos=dictionary.eos(),
                            pad=dictionary.pad(), alpha=1.0 if length_normalize else 0.0,
                            append_eos=eos is not None, chunk=chunk).scores


# ----------------------------------------------------------------------------------------------- generator
class NATFertilityGenerator:
    """fairseq-style generator (``generate(models, sample)``) for ``nat_fertility`` models; see the module
    docstring.  It calls only the model's public methods; the model never calls back."""

    def __init__(self, tgt_dict, *, npd_temperature: float, epd_topk: int, fertility_decoding: str = "argmax",
                 npd_samples: int = NPD_SAMPLES, teacher=None, npd_score_eos: bool = False,
                 npd_length_normalize: bool = True, oracle_length: bool = False, max_len_ratio: float = 2.0,
                 rescore_batch: int = RESCORE_BATCH):
        if fertility_decoding not in DECODING:
            raise UserDataError(f"fertility decoding {fertility_decoding!r}: expected one of {DECODING}")
        if npd_samples > 0 and fertility_decoding == "epd":
            raise UserDataError("choose noisy (--npd-samples) or exact (--fertility-decoding epd) parallel decoding")
        if fertility_decoding == "epd" and epd_topk < 1:
            raise UserDataError(f"exact parallel decoding needs --epd-topk >= 1, got {epd_topk}")
        if (npd_samples > 0 or fertility_decoding == "epd") and teacher is None:
            raise UserDataError("noisy/exact parallel decoding needs the autoregressive teacher (--teacher-path)")
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
        self.banned = torch.tensor(sorted({tgt_dict.pad(), tgt_dict.bos(), tgt_dict.eos()}), dtype=torch.long)

    @property
    def rescores(self) -> bool:
        """Noisy (Eq. 8.7) or exact (Eq. 8.8) parallel decoding: several candidates, rescored by the teacher."""
        return self.npd_samples > 0 or self.fertility_decoding == "epd"

    # -- fertility search ------------------------------------------------------------------------
    def fertility(self, fert_logits: Tensor, src_mask: Tensor, cap: Optional[int]) -> Tensor:
        """One fertility sequence per sentence (B, S): argmax (Eq. 8.5) or average (Eq. 8.6)."""
        return predict_fertility(fert_logits, src_mask, self.fertility_decoding, self.max_len_ratio, cap)

    def candidate_fertilities(self, fert_logits: Tensor, src_mask: Tensor, cap: Optional[int]
                              ) -> Tuple[Tensor, Tensor]:
        """(fertility (N, S), index (N,)): the candidate fertility sequences and the sentence of each — s
        samples per sentence (NPD, Eq. 8.7) or the K most probable sequences (EPD, Eq. 8.8)."""
        if self.npd_samples > 0:
            B = fert_logits.size(0)
            index = torch.arange(B, device=fert_logits.device).repeat_interleave(self.npd_samples)
            fertility = predict_fertility(fert_logits[index], src_mask[index], "sample", self.max_len_ratio, cap,
                                          temperature=self.npd_temperature)
            return fertility, index
        return topk_fertility(fert_logits, src_mask, self.epd_topk, self.max_len_ratio, cap)

    def _oracle(self, model, sample, src_mask):
        """(fertility, lengths) from the reference for ``oracle_length``."""
        if model.decoder_input_mode == "copy-fertility":
            if sample.get("fertility") is None:
                raise UserDataError("--oracle-length with a copy-fertility model needs the split's fertilities")
            return sample["fertility"].masked_fill(~src_mask, 0), None
        if sample.get("target") is None:
            raise UserDataError("--oracle-length needs references")
        return None, sample["target"].ne(self.pad).sum(1)

    # -- rescoring -------------------------------------------------------------------------------
    def score_candidates(self, src_tokens: Tensor, src_lengths: Tensor, tokens: Tensor, mask: Tensor,
                         index: Tensor) -> Tensor:
        """The teacher's score of every candidate (N,); row n translates source ``index[n]``
        (:func:`teacher_sequence_scores` with this generator's settings)."""
        teacher = self.teacher
        if next(teacher.parameters()).device != tokens.device:
            teacher.to(tokens.device)
        return teacher_sequence_scores(teacher, src_tokens, src_lengths, tokens, mask, index=index,
                                       eos=self.eos if self.npd_score_eos else None,
                                       length_normalize=self.npd_length_normalize, chunk=self.rescore_batch)

    def token_argmax(self, logits: Tensor) -> Tuple[Tensor, Tensor]:
        """Ŷ = G(x, f) (Eq. 8.5's translation step): per position the most probable token that can stand inside a
        translation -- ⟨pad⟩, ⟨s⟩ and ⟨/s⟩ are never chosen (the output length is the fertilities' sum, and the
        output would otherwise lose the stripped symbols: one position, one output token) -- and its
        log-probability under the full softmax."""
        lprobs = torch.log_softmax(logits.float(), -1)
        return lprobs.index_fill(-1, self.banned.to(lprobs.device), -math.inf).max(-1)

    def rescore(self, model, encoder_out, src_tokens: Tensor, src_lengths: Tensor, fertility: Tensor,
                index: Tensor):
        """NPD/EPD (Eqs. 8.7, 8.8): decode every candidate fertility sequence (row n for source
        ``index[n]``) in one NAT pass, let the teacher score all of them, keep each sentence's best.
        Returns (tokens, student log-probs, mask, fertility, teacher score, candidates) of the kept rows."""
        B = src_tokens.size(0)
        enc = model.encoder.reorder_encoder_out(encoder_out, index)
        logits, mask = model.decode(enc, src_tokens[index], fertility=fertility)
        scores, tokens = self.token_argmax(logits)
        tokens = tokens.masked_fill(~mask, self.pad)
        t_scores = self.score_candidates(src_tokens, src_lengths, tokens, mask, index)
        chosen = best_per_group(t_scores, index, B)
        candidates = torch.bincount(index, minlength=B)
        return tokens[chosen], scores[chosen], mask[chosen], fertility[chosen], t_scores[chosen], candidates

    # -- decoding --------------------------------------------------------------------------------
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
        cap = getattr(model.decoder, "max_target_positions", None)
        teacher_score = candidates = None

        if self.rescores:
            fertility, index = self.candidate_fertilities(fert_logits, src_mask, cap)
            tokens, scores, mask, fertility, teacher_score, candidates = self.rescore(
                model, encoder_out, src_tokens, src_lengths, fertility, index)
        else:
            fertility = lengths = None
            if self.oracle_length:
                fertility, lengths = self._oracle(model, sample, src_mask)
            if fertility is None:
                fertility = self.fertility(fert_logits, src_mask, cap)
            logits, mask = model.decode(encoder_out, src_tokens, fertility=fertility, lengths=lengths)
            scores, tokens = self.token_argmax(logits)

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

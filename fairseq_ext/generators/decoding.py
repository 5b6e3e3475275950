"""Decoding algorithms of Gu (2019) §2.3 for autoregressive encoder–decoders: greedy, the shrinking beam and
noisy parallel decoding.

All three drive a fairseq model through its public incremental interface only (``encoder``,
``decoder(prefix, encoder_out, incremental_state)``, ``get_normalized_probs``,
``encoder.reorder_encoder_out``, ``decoder.reorder_incremental_state_scripting``), so they decode the
plugin's ``rnnsearch`` and fairseq's transformers alike, and they follow fairseq's conventions: the
decoder starts from ⟨eos⟩, ⟨pad⟩ is never produced, ⟨eos⟩ is banned before ``min_len`` tokens and forced
after max_len = min(a·|X| + b, max_len, model limit − 1) tokens (|X| the batch's padded source width),
and a hypothesis is a dict with ``tokens`` (ending in ⟨eos⟩), ``score``, ``positional_scores``,
``attention`` (None) and ``alignment`` (None), so ``fairseq-generate`` / ``fairseq-interactive`` print
them unchanged.

* :class:`GreedyGenerator` — ŷ_t = argmax_y log p(y | ŷ_{<t}, X) (Eq. 2.10); finished rows leave the
  batch. Equals fairseq's ``--beam 1``.
* :class:`ShrinkingBeamGenerator` — the thesis's beam (Eqs. 2.11–2.12): K live hypotheses ranked by their
  summed log-probability; a hypothesis that ends in ⟨eos⟩ leaves the beam, which shrinks from K to K−1;
  when all K have ended, the finished set is re-ranked by (1/|Y|)^α · log p(Y|X) (Eq. 2.13, α =
  ``--lenpen``, |Y| counting ⟨eos⟩). fairseq's beam instead keeps K live hypotheses until K have
  finished. K = 1 is greedy decoding.
* :class:`NoisyParallelGenerator` — noisy parallel decoding (Eq. 2.14): the batch is repeated N times
  and decoded greedily in one pass while Gaussian noise n_t ~ N(0, σ0²/t²) (t = 1, 2, ... the decoding
  step) perturbs the decoder: for decoders with a ``state_perturbation`` hook (``rnnsearch``) it is added
  to the previous state z_{t−1} before the transition; for fairseq transformers (no recurrent state) to
  the last decoder layer's output. The N candidates are rescored noise-free by the same model
  (:func:`fairseq_ext.generators.rescoring.score_candidates`, Eq. 2.13's normalisation, α = ``--lenpen``)
  and the best is returned first (all distinct candidates follow, best first). Noise comes from torch's
  global RNG (``--seed`` makes it reproducible); σ0 = 0 returns greedy decoding exactly.

References: Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019;
Cho, Esipova, "Noisy Parallel Approximate Decoding for Conditional Recurrent Language Model", 2016.
"""
import math
from typing import Callable, Dict, List, Optional

import torch
from torch import Tensor

from fairseq_ext.modules.generation_options import generation_default, generation_option
from fairseq_ext.generators.rescoring import RESCORE_BATCH, best_per_group, score_candidates
from fairseq_ext.data.errors import UserDataError

DECODING_ALGORITHMS = ("beam", "greedy", "shrinking_beam", "npd")
#: fairseq's output length options (``--max-len-a/-b``, ``--min-len``; ``max_len`` SequenceGenerator's keyword)
LENGTH_OPTIONS = ("max_len_a", "max_len_b", "max_len", "min_len")


def length_limits(args) -> Dict:
    """The length keywords of the plugin's generators from fairseq's options ``args`` (fairseq's defaults where
    ``args`` lacks one)."""
    return {name: generation_option(args, name) for name in LENGTH_OPTIONS}


def decoding_options(args) -> Dict:
    """The keywords of :class:`AutoregressiveGenerator` from fairseq's options ``args``: the length limits,
    ``--lenpen`` and ``--unnormalized`` (fairseq's defaults where ``args`` lacks one)."""
    return dict(length_limits(args), lenpen=generation_option(args, "lenpen"),
                normalize_scores=not generation_option(args, "unnormalized"))


class IncrementalStepper:
    """One decoder step at a time over a batch of rows that can be dropped or re-ordered between steps."""

    def __init__(self, model, encoder_out):
        self.model = model
        self.encoder_out = encoder_out
        self.incremental_state: Dict[str, Dict[str, Optional[Tensor]]] = {}

    def log_probs(self, prefix: Tensor) -> Tensor:
        """(R, V) float log p(· | prefix) for every row's prefix (R, t)."""
        out = self.model.decoder(prefix, encoder_out=self.encoder_out, incremental_state=self.incremental_state)
        last = (out[0][:, -1:, :], out[1] if prefix.size(1) > 1 else None)
        return self.model.get_normalized_probs(last, log_probs=True)[:, -1, :].float()

    def reorder(self, new_order: Tensor) -> None:
        self.encoder_out = self.model.encoder.reorder_encoder_out(self.encoder_out, new_order)
        self.model.decoder.reorder_incremental_state_scripting(self.incremental_state, new_order)


class AutoregressiveGenerator:
    """What the three generators share: fairseq's length limits and bans, and the hypothesis format."""

    def __init__(self, models, tgt_dict, max_len_a: float = generation_default("max_len_a"),
                 max_len_b: int = generation_default("max_len_b"), max_len: int = generation_default("max_len"),
                 min_len: int = generation_default("min_len"), lenpen: float = generation_default("lenpen"),
                 normalize_scores: bool = not generation_default("unnormalized")):
        if len(models) != 1:
            raise NotImplementedError(f"{type(self).__name__} decodes with a single model (no ensembles)")
        self.model = models[0]
        self.tgt_dict = tgt_dict
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.vocab_size = len(tgt_dict)
        self.max_len_a, self.max_len_b = max_len_a, max_len_b
        self.max_len = max_len or self.model.max_decoder_positions()
        self.min_len = min_len
        self.lenpen = lenpen
        self.normalize_scores = normalize_scores
        self.symbols_to_strip_from_output = {self.eos}

    def cuda(self):
        self.model.cuda()
        return self

    def device(self) -> torch.device:
        """The model's device (CPU for a model without parameters, e.g. a hand-built test model)."""
        p = next(self.model.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def decode_limit(self, src_tokens: Tensor) -> int:
        """The most tokens before the forced ⟨eos⟩ (fairseq's rule)."""
        return min(int(self.max_len_a * src_tokens.size(1) + self.max_len_b), self.max_len - 1)

    def constrain(self, lprobs: Tensor, step: int, max_len: int) -> Tensor:
        """fairseq's bans on the step-``step`` log-probs (step 0 predicts the first token)."""
        lprobs[lprobs != lprobs] = -math.inf
        lprobs[:, self.pad] = -math.inf
        if step >= max_len:
            lprobs[:, : self.eos] = -math.inf
            lprobs[:, self.eos + 1:] = -math.inf
        elif step < self.min_len:
            lprobs[:, self.eos] = -math.inf
        return lprobs

    def final_score(self, positional: Tensor) -> Tensor:
        total = positional.sum()
        return total / positional.numel() ** self.lenpen if self.normalize_scores else total

    def hypothesis(self, tokens: Tensor, positional: Tensor, **extra) -> Dict:
        return {"tokens": tokens, "score": self.final_score(positional), "positional_scores": positional,
                "attention": None, "alignment": None, **extra}

    def check_request(self, prefix_tokens, constraints) -> None:
        if prefix_tokens is not None:
            raise NotImplementedError(f"{type(self).__name__} does not support --prefix-size")
        if constraints is not None:
            raise NotImplementedError(f"{type(self).__name__} does not support --constraints")

    def encode(self, sample: Dict):
        """The encoder on every ``net_input`` key but ``prev_output_tokens``, as fairseq's own generators call
        it (a document model's context keys reach it; a task strips them for models that do not take them)."""
        self.model.eval()
        return self.model.encoder(**{k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"})

    def greedy(self, encoder_out, n_rows: int, max_len: int,
               before_step: Optional[Callable[[int], None]] = None) -> List[Dict]:
        """Greedy decoding of ``n_rows`` rows of ``encoder_out`` (Eq. 2.10): a list of (tokens, positional
        scores) dicts. ``before_step(t)`` runs before decoding step t = 1, 2, ... (NPD's noise clock)."""
        model = self.model
        device = self.device()
        stepper = IncrementalStepper(model, encoder_out)
        tokens = torch.full((n_rows, max_len + 2), self.pad, dtype=torch.long, device=device)
        tokens[:, 0] = self.eos
        scores = torch.zeros(n_rows, max_len + 1, device=device)
        lengths = torch.zeros(n_rows, dtype=torch.long, device=device)
        active = torch.arange(n_rows, device=device)
        for step in range(max_len + 1):
            if before_step is not None:
                before_step(step + 1)
            lprobs = self.constrain(stepper.log_probs(tokens[active, : step + 1]), step, max_len)
            best, word = lprobs.max(-1)
            tokens[active, step + 1] = word
            scores[active, step] = best
            done = word.eq(self.eos)
            lengths[active[done]] = step + 1
            if bool(done.all()):
                break
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(1)
                stepper.reorder(keep)
                active = active[keep]
        return [{"tokens": tokens[r, 1: lengths[r] + 1], "positional_scores": scores[r, : lengths[r]]}
                for r in range(n_rows)]


class GreedyGenerator(AutoregressiveGenerator):
    """Greedy decoding, Eq. 2.10 (see module doc)."""

    @torch.no_grad()
    def generate(self, models, sample: Dict, prefix_tokens=None, constraints=None, **kwargs) -> List[List[Dict]]:
        self.check_request(prefix_tokens, constraints)
        src_tokens = sample["net_input"]["src_tokens"]
        hyps = self.greedy(self.encode(sample), src_tokens.size(0), self.decode_limit(src_tokens))
        return [[self.hypothesis(h["tokens"], h["positional_scores"])] for h in hyps]


class ShrinkingBeamGenerator(AutoregressiveGenerator):
    """The thesis's beam search, K → K−1 per finished hypothesis, re-ranked by Eq. 2.13 (module doc)."""

    def __init__(self, models, tgt_dict, beam_size: int = generation_default("beam"), **kwargs):
        super().__init__(models, tgt_dict, **kwargs)
        if beam_size < 1:
            raise UserDataError(f"--beam must be >= 1, got {beam_size}")
        self.beam_size = beam_size

    @torch.no_grad()
    def generate(self, models, sample: Dict, prefix_tokens=None, constraints=None, **kwargs) -> List[List[Dict]]:
        self.check_request(prefix_tokens, constraints)
        src_tokens = sample["net_input"]["src_tokens"]
        return self.beam(self.encode(sample), src_tokens.size(0), self.decode_limit(src_tokens))

    def beam(self, encoder_out, n_rows: int, max_len: int) -> List[List[Dict]]:
        """The shrinking beam over ``n_rows`` rows of ``encoder_out``: per row its finished hypotheses (fairseq's
        dicts), best first by Eq. 2.13."""
        B, K, V = n_rows, self.beam_size, self.vocab_size
        device = self.device()
        stepper = IncrementalStepper(self.model, encoder_out)
        # live rows, grouped by sentence in sentence order: their sentence, prefix, per-token scores
        sent = torch.arange(B, device=device)
        prefix = torch.full((B, 1), self.eos, dtype=torch.long, device=device)
        pos = torch.zeros(B, 0, device=device)
        budget = [K] * B  # live hypotheses each sentence may still keep (K minus finished, minus dead)
        finished: List[List[Dict]] = [[] for _ in range(B)]
        for step in range(max_len + 1):
            lprobs = self.constrain(stepper.log_probs(prefix), step, max_len)
            total = pos.sum(1, keepdim=True) + lprobs  # Eq. 2.12's cumulative score of every extension
            keep_rows, keep_words = [], []
            for b in torch.unique_consecutive(sent).tolist():
                rows = (sent == b).nonzero().squeeze(1)
                flat = total[rows].reshape(-1)
                top = flat.topk(min(budget[b], flat.numel()))
                for value, i in zip(top.values.tolist(), top.indices.tolist()):
                    r, w = int(rows[i // V]), i % V
                    if value == -math.inf:  # fewer possible extensions than the budget: the beam shrinks
                        budget[b] -= 1
                    elif w == self.eos:
                        budget[b] -= 1
                        finished[b].append({"tokens": torch.cat([prefix[r, 1:], prefix.new_tensor([w])]),
                                            "positional_scores": torch.cat([pos[r], lprobs[r, w:w + 1]])})
                    else:
                        keep_rows.append(r)
                        keep_words.append(w)
            if not keep_rows:
                break
            rows = torch.tensor(keep_rows, device=device)
            words = torch.tensor(keep_words, device=device)
            stepper.reorder(rows)
            sent = sent[rows]
            pos = torch.cat([pos[rows], lprobs[rows, words].unsqueeze(1)], 1)
            prefix = torch.cat([prefix[rows], words.unsqueeze(1)], 1)
        out = []
        for b in range(B):
            hyps = [self.hypothesis(h["tokens"], h["positional_scores"]) for h in finished[b]]
            hyps.sort(key=lambda h: float(self.rerank_score(h["positional_scores"])), reverse=True)
            out.append(hyps)
        return out

    def rerank_score(self, positional: Tensor) -> Tensor:
        """Eq. 2.13: (1/|Y|)^α · log p(Y|X)."""
        return positional.sum() / positional.numel() ** self.lenpen


class GaussianStateNoise:
    """n_t ~ N(0, σ0²/t²) added to a tensor at decoding step t (Eq. 2.14)."""

    def __init__(self, sigma0: float):
        self.sigma0 = float(sigma0)
        self.step = 1  # the clock for perturbations that are not told their step (transformer layers)

    def __call__(self, x: Tensor, step: Optional[int] = None) -> Tensor:
        t = self.step if step is None else step
        if self.sigma0 == 0.0:
            return x
        return x + torch.randn_like(x) * (self.sigma0 / max(t, 1))


class NoisyParallelGenerator(AutoregressiveGenerator):
    """Noisy parallel decoding, Eq. 2.14 (module doc): N noisy greedy decodes, noise-free rescoring."""

    def __init__(self, models, tgt_dict, samples: int, sigma0: float, rescore_batch: int = RESCORE_BATCH,
                 **kwargs):
        super().__init__(models, tgt_dict, **kwargs)
        if samples < 1:
            raise UserDataError(f"--decoding-algorithm npd needs --npd-samples N >= 1 noisy decodes per sentence, "
                                f"got {samples} (0, the default, is off)")
        if sigma0 < 0:
            raise UserDataError(f"--npd-sigma0 must be >= 0, got {sigma0}")
        self.samples = samples
        self.sigma0 = sigma0
        self.rescore_batch = rescore_batch

    def install_noise(self, noise: GaussianStateNoise) -> Callable[[], None]:
        """Put ``noise`` into the decoder; returns the function that takes it out again."""
        decoder = self.model.decoder
        if hasattr(decoder, "state_perturbation"):  # recurrent decoders: z_{t-1} + n_t before the transition
            decoder.state_perturbation = noise

            def remove():
                decoder.state_perturbation = None
            return remove
        layers = getattr(decoder, "layers", None)
        if layers is not None and len(layers) > 0:  # transformers: the last decoder layer's output

            def hook(module, inputs, output):
                if isinstance(output, tuple):
                    return (noise(output[0]),) + tuple(output[1:])
                return noise(output)
            return layers[-1].register_forward_hook(hook).remove
        raise NotImplementedError(f"noisy parallel decoding does not know where to add noise in "
                                  f"{type(decoder).__name__} (no state_perturbation hook, no layers)")

    @torch.no_grad()
    def generate(self, models, sample: Dict, prefix_tokens=None, constraints=None, **kwargs) -> List[List[Dict]]:
        self.check_request(prefix_tokens, constraints)
        net_input = sample["net_input"]
        src_tokens, src_lengths = net_input["src_tokens"], net_input["src_lengths"]
        B, N = src_tokens.size(0), self.samples
        encoder_out = self.encode(sample)
        index = torch.arange(B, device=src_tokens.device).repeat_interleave(N)  # N copies of each sentence
        noise = GaussianStateNoise(self.sigma0)
        remove = self.install_noise(noise)
        try:
            samples = self.greedy(self.model.encoder.reorder_encoder_out(encoder_out, index), B * N,
                                  self.decode_limit(src_tokens), before_step=lambda t: setattr(noise, "step", t))
        finally:
            remove()
        rescored = score_candidates(self.model, src_tokens, src_lengths, [s["tokens"] for s in samples], index,
                                    eos=self.eos, pad=self.pad, alpha=self.lenpen, chunk=self.rescore_batch,
                                    encoder_out=encoder_out)
        best = best_per_group(rescored.scores, index, B).tolist()
        out = []
        for b in range(B):
            rows = sorted(range(b * N, (b + 1) * N), key=lambda r: (r != best[b], -float(rescored.scores[r])))
            hyps, seen = [], set()
            for r in rows:
                key = tuple(rescored.tokens[r].tolist())
                if key not in seen:
                    seen.add(key)
                    hyps.append(self.hypothesis(rescored.tokens[r], rescored.positional[r], candidates=N))
            out.append(hyps)
        return out

"""Gu (2018) ch. 8: fertility NAT, decoding: the generator (argmax / average lengths, special symbols), noisy
parallel decoding with teacher rescoring, and exact parallel decoding (Eq. 8.8) against brute force."""
import math

import numpy as np
import pytest
import torch

import fairseq_ext  # noqa: F401
from fairseq_ext.generators.rescoring import best_per_group as best_per_sentence
from fairseq_ext.generators.nat_fertility import (
    NATFertilityGenerator,
    fertility_sequences_by_probability,
    sequence_scores,
    teacher_sequence_scores,
    topk_fertility,
)
from fairseq_ext.modules.nat_fertility import constrain_fertility, predict_fertility, teacher_log_probs
from fairseq_ext.tasks.translation_fertility import TranslationFertilityConfig
from harness import build_model, make_dictionary
from nat_toys import EOS, PAD, fertility_batch, fertility_sample


def nat_generator(d, **kw):
    """The generator with the task's defaults (--npd-temperature, --epd-topk) where ``kw`` gives none."""
    cfg = TranslationFertilityConfig()
    return NATFertilityGenerator(d, **{"npd_temperature": cfg.npd_temperature, "epd_topk": cfg.epd_topk, **kw})


# ============================================================================ decoding
def test_generator_argmax_and_average_lengths_follow_fertility():
    model = build_model("nat_fertility_tiny")
    d = make_dictionary(60)
    sample = fertility_sample()
    for how in ("argmax", "average"):
        hyps = nat_generator(d, fertility_decoding=how).generate([model], sample)
        assert len(hyps) == 2
        for h in hyps:
            assert len(h[0]["tokens"]) == int(h[0]["fertility"].sum()) + 1  # + <eos>
            assert h[0]["tokens"][-1].item() == EOS
    # oracle fertilities
    hyps = nat_generator(d, oracle_length=True).generate([model], sample)
    assert [len(h[0]["tokens"]) - 1 for h in hyps] == [4, 6]


def test_generator_tokens_are_the_decoders_argmax():
    """The hypothesis is the argmax of model.decode on the unmasked positions (+ </s>), for the argmax
    fertilities (Eq. 8.5) and for the oracle ones; positional scores are the argmax log-probabilities."""
    model = build_model("nat_fertility_tiny")
    d = make_dictionary(60)
    sample = fertility_sample()
    src, lengths, oracle, _ = fertility_batch()
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        src_mask = model.source_mask(src)
        cap = model.decoder.max_target_positions
        argmax_f = predict_fertility(model.fertility_logits(enc), src_mask, "argmax", max_length=cap)
    for gen, f in ((nat_generator(d), argmax_f), (nat_generator(d, oracle_length=True), oracle)):
        hyps = gen.generate([model], sample)
        with torch.no_grad():
            logits, mask = model.decode(enc, src, fertility=f)
        lprobs = torch.log_softmax(logits.float(), -1)
        allowed = lprobs.clone()
        allowed[..., [d.pad(), d.bos(), d.eos()]] = -math.inf   # never inside a translation
        for b in range(2):
            h = hyps[b][0]
            m = mask[b]
            assert int(m.sum()) == int(f[b].sum())
            assert h["tokens"].tolist() == allowed[b][m].argmax(-1).tolist() + [EOS]
            assert torch.allclose(h["positional_scores"][:-1], allowed[b][m].max(-1).values, atol=1e-6)
            assert h["fertility"].tolist() == f[b][src_mask[b]].tolist()


def test_generator_never_outputs_special_symbols():
    """A position whose most probable token is </s>, <s> or <pad> gets the best ordinary token instead (with its
    full-softmax log-probability): one output token per position, none stripped from the printed translation."""
    model = build_model("nat_fertility_tiny")
    d = make_dictionary(60)
    sample = fertility_sample()
    gen = nat_generator(d, oracle_length=True)
    plain = gen.generate([model], sample)
    decode = model.decode

    def prefer_specials(*a, **k):
        logits, mask = decode(*a, **k)
        logits = logits.clone()
        logits[:, 0::3, d.eos()] = 1e4
        logits[:, 1::3, d.bos()] = 1e4
        logits[:, 2::3, d.pad()] = 1e4
        return logits, mask

    model.decode = prefer_specials
    hyps = gen.generate([model], sample)
    for h, p in zip(hyps, plain):
        toks = h[0]["tokens"].tolist()
        assert toks[-1] == EOS and not {d.pad(), d.bos(), d.eos()} & set(toks[:-1])
        assert len(toks) == len(p[0]["tokens"])                       # the oracle length, unchanged
        assert toks == p[0]["tokens"].tolist()                        # the same ordinary tokens win
        assert bool((h[0]["positional_scores"][:-1] < -1e3).all())    # their real (tiny) probabilities


def _spy_on_rescoring(gen):
    """Records the candidates the generator's teacher scores (tokens, mask, index, scores)."""
    seen = {}
    orig = gen.score_candidates

    def spy(src_tokens, src_lengths, tokens, mask, index):
        scores = orig(src_tokens, src_lengths, tokens, mask, index)
        seen.update(tokens=tokens.clone(), mask=mask.clone(), index=index.clone(), scores=scores.clone())
        return scores

    gen.score_candidates = spy
    return seen


def test_npd_picks_the_teacher_best_candidate():
    torch.manual_seed(0)
    model = build_model("nat_fertility_tiny")
    teacher = build_model("transformer_tiny", seed=3)
    d = make_dictionary(60)
    gen = nat_generator(d, npd_samples=6, teacher=teacher)
    seen = _spy_on_rescoring(gen)
    sample = fertility_sample()
    torch.manual_seed(1)
    hyps = gen.generate([model], sample)
    src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    assert seen["tokens"].size(0) == 2 * 6
    for b in range(2):
        rows = (seen["index"] == b).nonzero().flatten().tolist()
        # recompute every candidate's teacher score on its own (batch of one): the batched scores agree
        own = []
        for r in rows:
            m = seen["mask"][r: r + 1]
            t = seen["tokens"][r: r + 1, : int(m.sum())]
            lp = teacher_log_probs(teacher, src[b: b + 1], lengths[b: b + 1], t, m[:, : t.size(1)])
            own.append(sequence_scores(lp, t, m[:, : t.size(1)]).item())
        assert np.allclose(own, seen["scores"][rows].numpy(), atol=1e-5)
        best = rows[int(np.argmax(own))]
        chosen = seen["tokens"][best][seen["mask"][best]].tolist() + [EOS]
        assert hyps[b][0]["tokens"].tolist() == chosen
        assert math.isclose(hyps[b][0]["teacher_score"], max(own), rel_tol=1e-5)


# ============================================================================ exact parallel decoding (Eq. 8.8)
def _brute_force(log_probs):
    """Every fertility sequence of a (T', L) table with its log-probability, most probable first."""
    import itertools

    n, L = log_probs.shape
    seqs = [(float(sum(log_probs[j, f[j]] for j in range(n))), f) for f in itertools.product(range(L), repeat=n)]
    return sorted(seqs, key=lambda x: -x[0])


def test_fertility_enumeration_equals_brute_force():
    torch.manual_seed(0)
    for n, L in ((1, 5), (3, 4), (4, 3)):
        lp = torch.randn(n, L, dtype=torch.float64).log_softmax(-1)
        brute = _brute_force(lp)
        heap = list(fertility_sequences_by_probability(lp))
        assert len(heap) == L ** n == len(set(f for _, f in heap))  # every sequence once
        assert [f for _, f in heap] == [f for _, f in brute]  # continuous log-probs: no ties
        assert np.allclose([x for x, _ in heap], [x for x, _ in brute], atol=1e-12)
        assert heap[0][1] == tuple(lp.argmax(-1).tolist())
    # ties: the probabilities agree (the order among equal ones is free); argmax first, ties to class 0
    lp = torch.tensor([[0.5, 0.5], [0.25, 0.75], [0.5, 0.5]]).log()
    heap = list(fertility_sequences_by_probability(lp))
    assert np.allclose([x for x, _ in heap], [x for x, _ in _brute_force(lp.double())])
    assert heap[0][1] == (0, 1, 0)
    assert list(fertility_sequences_by_probability(torch.zeros(0, 3))) == [(0.0, ())]


def test_topk_fertility_is_the_capped_brute_force_top_k():
    torch.manual_seed(1)
    src_mask = torch.tensor([[False, True, True, True, False], [True, True, False, False, False]])
    logits = torch.randn(2, 5, 4) * 2
    for ratio, k in ((10.0, 12), (1.0, 6), (0.5, 5)):
        fert, index = topk_fertility(logits, src_mask, k, max_len_ratio=ratio)
        argmax = predict_fertility(logits, src_mask, "argmax", max_len_ratio=ratio)
        for b in range(2):
            rows = fert[index == b]
            words = src_mask[b].nonzero().flatten()
            # brute force: every sequence by probability, constrained as decoding does, first of each kept
            want = []
            for _, f in _brute_force(logits[b, words].double().log_softmax(-1)):
                full = torch.zeros(1, 5, dtype=torch.long)
                full[0, words] = torch.tensor(f)
                row = constrain_fertility(full, logits[b: b + 1], src_mask[b: b + 1], ratio)[0].tolist()
                if row not in want:
                    want.append(row)
            assert rows.tolist() == want[:k]
            assert len({tuple(r) for r in rows.tolist()}) == len(rows)  # distinct
            assert torch.equal(rows[0], argmax[b])  # the argmax sequence first
            cap = max(1, int(len(words) * ratio))
            assert (rows.sum(1) <= cap).all() and (rows.sum(1) >= 1).all()
            assert (rows[:, ~src_mask[b]] == 0).all()
    assert index.tolist() == sorted(index.tolist())
    # one word under the cap Σf ≤ 2: only two decodable sequences (f = 1, 2) whatever K
    fert, index = topk_fertility(torch.randn(1, 2, 50), torch.tensor([[True, False]]), 10)
    assert sorted(fert[:, 0].tolist()) == [1, 2] and index.tolist() == [0, 0]
    with pytest.raises(ValueError):
        topk_fertility(logits, src_mask, 0)


def test_best_per_sentence_ragged_groups():
    scores = torch.tensor([0.1, 0.5, 0.5, -1.0, 2.0, 0.0])
    index = torch.tensor([0, 0, 0, 1, 2, 2])
    assert best_per_sentence(scores, index, 3).tolist() == [1, 3, 4]  # ties: the first
    # the NPD layout (s rows per sentence) gives view(B, s).argmax(1)
    scores = torch.randn(12)
    assert torch.equal(best_per_sentence(scores, torch.arange(3).repeat_interleave(4), 3),
                       scores.view(3, 4).argmax(1) + torch.arange(3) * 4)


def test_chunked_teacher_rescoring_equals_unchunked():
    torch.manual_seed(0)
    teacher = build_model("transformer_tiny", seed=3)
    src, lengths, _, _ = fertility_batch()
    index = torch.tensor([0, 0, 1, 1, 1, 0, 1])
    hyp_lengths = torch.tensor([3, 1, 6, 2, 5, 4, 6])
    mask = torch.arange(6).unsqueeze(0) < hyp_lengths.unsqueeze(1)
    tokens = torch.randint(4, 60, (7, 6)).masked_fill(~mask, PAD)
    for eos in (None, EOS):
        for norm in (True, False):
            full = sequence_scores(teacher_log_probs(teacher, src, lengths, tokens, mask, index=index), tokens, mask,
                                   eos=eos, length_normalize=norm)
            unchunked = teacher_sequence_scores(teacher, src, lengths, tokens, mask, index=index, eos=eos,
                                                length_normalize=norm)
            # the shared rescorer sums a candidate's log-probabilities in one pass (the reference adds the
            # ⟨eos⟩ term last): equal up to float32 rounding of a sum (1 ulp of ~30 is 3.8e-6)
            assert torch.allclose(unchunked, full, atol=1e-6, rtol=1e-6)
            for chunk in (1, 2, 3, 7, 100):
                chunked = teacher_sequence_scores(teacher, src, lengths, tokens, mask, index=index, eos=eos,
                                                  length_normalize=norm, chunk=chunk)
                assert torch.allclose(chunked, unchunked, atol=1e-6, rtol=0)


def test_epd_with_k1_is_argmax_decoding():
    model = build_model("nat_fertility_tiny")
    teacher = build_model("transformer_tiny", seed=3)
    d = make_dictionary(60)
    sample = fertility_sample()
    argmax = nat_generator(d).generate([model], sample)
    epd = nat_generator(d, fertility_decoding="epd", epd_topk=1, teacher=teacher).generate([model], sample)
    for a, e in zip(argmax, epd):
        assert torch.equal(a[0]["tokens"], e[0]["tokens"]) and torch.equal(a[0]["fertility"], e[0]["fertility"])
        assert e[0]["candidates"] == 1 and "teacher_score" in e[0]
    with pytest.raises(ValueError, match="teacher"):
        nat_generator(d, fertility_decoding="epd")
    with pytest.raises(ValueError):
        nat_generator(d, fertility_decoding="epd", npd_samples=2, teacher=teacher)


def test_epd_picks_the_teacher_best_of_the_top_k():
    model = build_model("nat_fertility_tiny")
    teacher = build_model("transformer_tiny", seed=3)
    d = make_dictionary(60)
    gen = nat_generator(d, fertility_decoding="epd", epd_topk=5, teacher=teacher, rescore_batch=2)
    seen = _spy_on_rescoring(gen)
    sample = fertility_sample()
    hyps = gen.generate([model], sample)
    src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    enc = model.encoder(src, src_lengths=lengths)
    fert, index = topk_fertility(model.fertility_logits(enc), model.source_mask(src), 5)
    assert torch.equal(seen["index"], index) and index.bincount().tolist() == [5, 5]
    for b in range(2):
        rows = (index == b).nonzero().flatten().tolist()
        best = rows[int(seen["scores"][rows].argmax())]
        assert torch.equal(hyps[b][0]["fertility"], fert[best][model.source_mask(src)[b]])
        assert hyps[b][0]["tokens"].tolist() == seen["tokens"][best][seen["mask"][best]].tolist() + [EOS]
        assert hyps[b][0]["teacher_score"] == pytest.approx(float(seen["scores"][rows].max()))
        assert hyps[b][0]["candidates"] == 5
    # deterministic, and the chunked rescoring chooses as the unchunked one does
    again = nat_generator(d, fertility_decoding="epd", epd_topk=5, teacher=teacher).generate([model], sample)
    assert all(torch.equal(h[0]["tokens"], g[0]["tokens"]) for h, g in zip(hyps, again))

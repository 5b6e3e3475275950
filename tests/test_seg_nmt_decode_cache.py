"""SEG-NMT (Gu 2019 ch. 4) decoding with the per-sentence cache: the memory (Eqs. 4.2-4.3) is built once per
sentence before the beam expands, with the first slot of every memory word (``tm_first``) that the shallow
fusion (Eq. 4.5) mixes on; the decoder step reads c_t from rnnsearch's attention instead of recomputing it; the
memory's teacher-forced pass skips the steps after each pair's last token. Beam search with the cache gives the
hypotheses and scores of the previous computation (c_t recomputed from α_t, Eq. 4.5 over the whole vocabulary by
``copy_mixture``, the pass over every padded step) -- bit for bit with the whole pass, within float rounding
(1e-6) with the shortened one -- and a wrong cache is caught."""
import pytest
import torch
import torch.nn.functional as F

import fairseq_ext  # noqa: F401  (registrations)
import fairseq_ext.models.seg_nmt as seg_mod
from fairseq_ext.modules.copy_attention import copy_mixture
from fairseq_ext.modules.tm_memory import shallow_fusion, slot_first
from harness import make_dictionary
from seg_toys import V, seg, toy


def previous_fusion(nmt_lprobs, log_q, log_zeta, log_rest, slot_tokens, first=None):
    """Eq. 4.5 as computed before the cache: a log-space scatter over the whole vocabulary."""
    return copy_mixture(nmt_lprobs + log_rest.unsqueeze(-1), log_q + log_zeta.unsqueeze(-1), slot_tokens, 0)


def model_and_sample(fusion="shallow", seed=3):
    model = seg(fusion=fusion, seed=seed)
    with torch.no_grad():
        model.decoder.tm_coverage_weight.fill_(2.0)
        model.decoder.tm_gate.out.bias.fill_(1.0)  # a gate that uses the memory
    src, lengths, _, tm = toy()
    return model, {"net_input": dict(src_tokens=src, src_lengths=lengths, **tm)}


def decode(model, sample, beam=4):
    from fairseq.sequence_generator import SequenceGenerator

    gen = SequenceGenerator([model], make_dictionary(V), beam_size=beam, max_len_b=30)
    with torch.no_grad():
        return gen.generate([model], sample)


def same(hypos, ref, atol: float = 0.0) -> bool:
    def close(a, b):
        return torch.equal(a, b) if atol == 0 else torch.allclose(a, b, atol=atol, rtol=0)
    return all([h["tokens"].tolist() for h in hs] == [h["tokens"].tolist() for h in rs]
               and all(close(h["positional_scores"], r["positional_scores"])
                       and close(torch.as_tensor(h["score"]), torch.as_tensor(r["score"])) for h, r in zip(hs, rs))
               for hs, rs in zip(hypos, ref))


def whole_pass(self, tm_encoder_out, prev, tgt):
    """The memory's teacher-forced pass as before: rnnsearch's extract_features over every padded step."""
    _, extra = self.extract_features(prev, tm_encoder_out)
    return extra["attn"][0], extra["states"][0]


@pytest.fixture
def recomputed_context(monkeypatch):
    """The previous decoder step: c_t recomputed from α_t and the encoder states (checked against the kept one)."""
    real = seg_mod.RNNSearchDecoder.decoder_step
    steps = []

    def step(self, embedded, state, encoder_out, t):
        features, new_state, weights = real(self, embedded, state, encoder_out, t)
        kept = self.__dict__["_step_context"]
        ctx = torch.bmm(weights.unsqueeze(1), encoder_out["encoder_out"][0].transpose(0, 1)).squeeze(1)
        steps.append(torch.equal(kept, ctx))
        self.__dict__["_step_context"] = ctx
        return features, new_state, weights

    monkeypatch.setattr(seg_mod.RNNSearchDecoder, "decoder_step", step)
    return steps


@pytest.mark.parametrize("fusion,shortened", [("shallow", False), ("deep", False), ("shallow", True),
                                              ("deep", True)])
def test_cached_decoding_equals_the_previous_computation(fusion, shortened, monkeypatch, recomputed_context):
    model, sample = model_and_sample(fusion)
    if not shortened:
        monkeypatch.setattr(seg_mod.SegNMTDecoder, "memory_pass", whole_pass)
    built = []
    builder = model.encoder.memory_builder

    def spy(tm_out, prev, tgt, tm_index):
        built.append(tm_index.size(0))
        return builder(tm_out, prev, tgt, tm_index)

    monkeypatch.setattr(model.encoder, "memory_builder", spy)
    cached = decode(model, sample)
    assert built == [3]   # once, for the 3 sentences, before the beam expands
    monkeypatch.setattr(seg_mod, "shallow_fusion", previous_fusion)
    monkeypatch.setattr(model.decoder, "_keep_context", lambda *a: None)
    monkeypatch.setattr(seg_mod.SegNMTDecoder, "memory_pass", whole_pass)
    previous = decode(model, sample)
    assert recomputed_context and all(recomputed_context)   # the kept c_t is the recomputed one, bit for bit
    assert same(cached, previous, atol=1e-6 if shortened else 0.0)
    if fusion == "shallow":   # the toy's slots repeat a word (9) and hold </s>: the mixture is exercised
        assert any(h["tokens"].numel() < 31 for hs in cached for h in hs)


@pytest.mark.parametrize("wrong", ["every slot its own word", "another sentence's slots"])
def test_a_wrong_cache_changes_the_output(wrong, monkeypatch):
    """The comparison above is sensitive: a cache of first slots that is wrong gives other scores."""
    model, sample = model_and_sample()
    right = decode(model, sample)
    if wrong == "every slot its own word":
        bad = lambda tokens: torch.arange(tokens.size(-1)).expand_as(tokens).clone()  # noqa: E731
    else:
        bad = lambda tokens: slot_first(tokens).roll(1, 0)  # noqa: E731
    monkeypatch.setattr(seg_mod, "slot_first", bad)
    assert not same(decode(model, sample), right)


def test_fusion_on_the_slots_equals_the_whole_vocabulary_mixture_with_its_gradients():
    """Eq. 4.5 on the slots' words (with or without the cached first slots) equals the vocabulary-wide
    log-space scatter, values and gradients, with repeated words, padding slots and rows without memory."""
    g = torch.Generator().manual_seed(0)
    B, T, W, M = 4, 3, 50, 12
    for _ in range(5):
        nmt0 = torch.log_softmax(torch.randn(B, T, W, generator=g) * 5, -1)
        log_q0 = torch.log_softmax(torch.randn(B, T, M, generator=g) * 3, -1)
        log_q0[1, :, 6:] = float("-inf")
        log_q0[3] = float("-inf")
        logit0 = torch.randn(B, T, generator=g)
        tokens = torch.randint(0, 8, (B, M), generator=g)
        w = torch.randn(B, T, W, generator=g)
        outs = []
        for fuse in (previous_fusion, shallow_fusion, lambda *a: shallow_fusion(*a, slot_first(tokens))):
            nmt, log_q, logit = (t.clone().requires_grad_() for t in (nmt0, log_q0, logit0))
            out = fuse(nmt, log_q, F.logsigmoid(logit), F.logsigmoid(-logit), tokens)
            grads = torch.autograd.grad((out.clamp(min=-1e4) * w).sum(), [nmt, log_q, logit])
            outs.append((out.detach(), grads))
        for out, grads in outs[1:]:
            assert torch.equal(out, outs[0][0])
            assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, outs[0][1]))
    assert slot_first(torch.tensor([[4, 9, 4, 1, 9, 1]])).tolist() == [[0, 1, 0, 3, 1, 3]]
    assert slot_first(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0)


def test_the_shortened_memory_pass_equals_the_whole_pass():
    """At inference the pass over the retrieved pairs (of different lengths) computes only the steps inside
    each pair's target; the keys' attention and the values there equal the whole pass's; in training the
    pass is rnnsearch's extract_features itself."""
    from seg_toys import tm_inputs

    model, _ = model_and_sample()
    pairs = [([5, 6, 7, 8], [9, 10, 11]), ([12, 13], [14, 9, 15, 16, 17, 18, 19]), ([18, 19, 20], [21]),
             ([5, 7], [9, 22, 23, 9])]
    tm = tm_inputs(pairs, [[0, 1], [2, 3]])
    with torch.no_grad():
        tm_out = seg_mod.RNNSearchEncoder.forward(model.encoder, tm["tm_src_tokens"], tm["tm_src_lengths"])
        prev, tgt = tm["tm_prev_output_tokens"], tm["tm_tgt_tokens"]
        attn, states = model.decoder.memory_pass(tm_out, prev, tgt)
        ref_attn, ref_states = whole_pass(model.decoder, tm_out, prev, tgt)
    real = tgt.ne(1)
    assert torch.allclose(states[real], ref_states[real], atol=1e-6)
    assert torch.allclose(attn[real], ref_attn[real], atol=1e-6)
    assert torch.equal(states[~real], torch.zeros_like(states[~real]))   # skipped steps: never read
    model.train()
    calls = []
    monkeypatch = pytest.MonkeyPatch()
    real_extract = seg_mod.SegNMTDecoder.extract_features
    monkeypatch.setattr(seg_mod.SegNMTDecoder, "extract_features",
                        lambda self, *a, **k: calls.append(1) or real_extract(self, *a, **k))
    try:
        model.decoder.memory_pass(tm_out, prev, tgt)
    finally:
        monkeypatch.undo()
    assert calls == [1]

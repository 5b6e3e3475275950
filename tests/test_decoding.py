"""Decoding algorithms of Gu (2019) §2.3 (fairseq_ext.generators.decoding / rescoring): greedy, the
shrinking beam, noisy parallel decoding and the candidate rescorer, on small models in-process."""
import math

import pytest
import torch
import torch.nn.functional as F
from fairseq.models import FairseqEncoder, FairseqEncoderDecoderModel, FairseqIncrementalDecoder
from fairseq.sequence_generator import SequenceGenerator

from harness import build_model, make_dictionary, toy_batch
from fairseq_ext.generators.decoding import GreedyGenerator, NoisyParallelGenerator, ShrinkingBeamGenerator
from fairseq_ext.generators.rescoring import best_per_group, score_candidates

TINY_TRANSFORMER = dict(encoder_layers=1, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
                        encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
                        decoder_attention_heads=2, dropout=0.0)


def sample_of(src, lengths):
    return {"net_input": {"src_tokens": src, "src_lengths": lengths}}


def rnn_model(seed=0, **kw):
    return build_model("rnnsearch_tiny", seed=seed, **kw)


def tokens_of(hyps):
    return [h[0]["tokens"].tolist() for h in hyps]


@pytest.fixture(scope="module")
def batch():
    src, lengths, _ = toy_batch(bsz=4, src_len=7)
    return sample_of(src, lengths)


# ------------------------------------------------------------------------------------------ greedy
def test_greedy_equals_fairseq_beam_one(batch):
    model = rnn_model()
    d = model.decoder.dictionary
    ours = GreedyGenerator([model], d, max_len_b=12).generate([model], batch)
    ref = SequenceGenerator([model], d, beam_size=1, max_len_b=12).generate([model], batch)
    assert tokens_of(ours) == tokens_of(ref)
    for o, r in zip(ours, ref):
        assert torch.allclose(o[0]["positional_scores"], r[0]["positional_scores"], atol=1e-5)
        assert math.isclose(float(o[0]["score"]), float(r[0]["score"]), abs_tol=1e-5)


def test_greedy_respects_length_limits(batch):
    model = rnn_model()
    hyps = GreedyGenerator([model], model.decoder.dictionary, max_len_b=3, min_len=2).generate([model], batch)
    eos = model.decoder.dictionary.eos()
    for h in hyps:
        toks = h[0]["tokens"].tolist()
        assert toks[-1] == eos and eos not in toks[:-1] and 3 <= len(toks) <= 4  # min 2 words, at most 3


# ------------------------------------------------------------------------------------------ NPD
@pytest.mark.parametrize("arch", ["rnnsearch", "transformer"])
def test_npd_with_zero_noise_is_greedy(batch, arch):
    """σ0 = 0: the N copies are N greedy decodes, so NPD returns greedy decoding exactly."""
    model = rnn_model(seed=3) if arch == "rnnsearch" else build_model("transformer", seed=3, **TINY_TRANSFORMER)
    d = model.decoder.dictionary
    greedy = GreedyGenerator([model], d, max_len_b=10).generate([model], batch)
    npd = NoisyParallelGenerator([model], d, samples=4, sigma0=0.0, max_len_b=10).generate([model], batch)
    assert tokens_of(npd) == tokens_of(greedy)
    for n, g in zip(npd, greedy):
        assert len(n) == 1  # the 4 identical candidates collapse to one
        assert torch.allclose(n[0]["positional_scores"], g[0]["positional_scores"], atol=1e-5)


@pytest.mark.parametrize("arch", ["rnnsearch", "transformer"])
def test_npd_returns_the_best_rescored_candidate_and_clears_the_noise(batch, arch):
    model = rnn_model(seed=3) if arch == "rnnsearch" else build_model("transformer", seed=3, **TINY_TRANSFORMER)
    d = model.decoder.dictionary
    torch.manual_seed(0)
    gen = NoisyParallelGenerator([model], d, samples=6, sigma0=3.0, max_len_b=10)
    hyps = gen.generate([model], batch)
    assert any(len(h) > 1 for h in hyps)  # the noise produced different candidates
    src, lengths = batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"]
    for b, h in enumerate(hyps):
        scores = [float(x["score"]) for x in h]
        assert scores == sorted(scores, reverse=True) and h[0]["candidates"] == 6
        again = score_candidates(model, src[b:b + 1], lengths[b:b + 1], [h[0]["tokens"]], eos=d.eos(), pad=d.pad())
        assert math.isclose(float(again.scores[0]), scores[0], abs_tol=1e-5)  # noise-free, length-normalised
    if arch == "rnnsearch":
        assert model.decoder.state_perturbation is None
    else:
        assert not model.decoder.layers[-1]._forward_hooks
    assert tokens_of(GreedyGenerator([model], d, max_len_b=10).generate([model], batch)) == \
        tokens_of(NoisyParallelGenerator([model], d, samples=2, sigma0=0.0, max_len_b=10).generate([model], batch))


def test_npd_removes_the_noise_after_an_error(batch, monkeypatch):
    model = rnn_model()
    gen = NoisyParallelGenerator([model], model.decoder.dictionary, samples=2, sigma0=1.0)

    def boom(*a, **k):
        assert model.decoder.state_perturbation is not None
        raise RuntimeError("boom")
    monkeypatch.setattr(gen, "greedy", boom)
    with pytest.raises(RuntimeError):
        gen.generate([model], batch)
    assert model.decoder.state_perturbation is None


def test_npd_noise_scale_is_sigma0_over_t(batch):
    """Eq. 2.14: the perturbation the decoder sees at step t has std σ0/t."""
    model = rnn_model()
    seen = {}
    gen = NoisyParallelGenerator([model], model.decoder.dictionary, samples=200, sigma0=2.0, max_len_b=3, min_len=4)
    original = model.decoder.transform_state

    def spy(state, step, incremental_state=None):
        new = original(state, step, incremental_state)
        key = "decode" if incremental_state is not None else "rescore"
        seen.setdefault((key, step), []).append((new["hidden"] - state["hidden"]).flatten())
        return new
    model.decoder.transform_state = spy
    gen.generate([model], batch)
    del model.decoder.transform_state
    for t in (1, 2, 3, 4):  # every candidate has 3 words + </s> (min_len 4 > max_len 3)
        noise = torch.cat(seen["decode", t])
        assert abs(float(noise.std()) - 2.0 / t) < 0.05 * 2.0 / t
    rescoring = [torch.cat(v) for (k, t), v in seen.items() if k == "rescore"]
    assert rescoring and all(float(v.abs().max()) == 0.0 for v in rescoring)  # noise-free rescoring


# ------------------------------------------------------------------------------------------ shrinking beam
def test_shrinking_beam_with_k1_is_greedy(batch):
    model = rnn_model(seed=5)
    d = model.decoder.dictionary
    greedy = GreedyGenerator([model], d, max_len_b=10).generate([model], batch)
    beam = ShrinkingBeamGenerator([model], d, beam_size=1, max_len_b=10).generate([model], batch)
    assert tokens_of(beam) == tokens_of(greedy)


def test_shrinking_beam_returns_k_finished_sorted_by_eq_2_13(batch):
    model = rnn_model(seed=5)
    d = model.decoder.dictionary
    hyps = ShrinkingBeamGenerator([model], d, beam_size=4, max_len_b=6, lenpen=0.6).generate([model], batch)
    for h in hyps:
        assert len(h) == 4
        ranked = [float(x["positional_scores"].sum()) / len(x["tokens"]) ** 0.6 for x in h]
        assert ranked == sorted(ranked, reverse=True)
        assert all(x["tokens"][-1] == d.eos() for x in h)


class TableEncoder(FairseqEncoder):
    def forward(self, src_tokens, src_lengths=None, **kwargs):
        return {"src_tokens": [src_tokens]}

    def reorder_encoder_out(self, encoder_out, new_order):
        return {"src_tokens": [encoder_out["src_tokens"][0].index_select(0, new_order)]}


class TableDecoder(FairseqIncrementalDecoder):
    """p(y_t | y_{t-1}) from a fixed table: log-probs depend on the previous token only."""

    def __init__(self, dictionary, table):
        super().__init__(dictionary)
        self.table = table

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        return self.table[prev_output_tokens], {"attn": [None]}

    def max_positions(self):
        return 100


def table_model():
    """Vocabulary <s> <pad> </s> <unk> a b c; p(·|start) = a .5, b .4, c .1; p(·|a) = </s> .6, a .1, b .1,
    c .2; p(·|b) = </s> .45, c .55; p(·|c) = </s> 1."""
    d = make_dictionary(7)
    a, b, c, eos = 4, 5, 6, 2
    p = torch.zeros(7, 7)
    p[eos, [a, b, c]] = torch.tensor([0.5, 0.4, 0.1])
    p[a, [eos, a, b, c]] = torch.tensor([0.6, 0.1, 0.1, 0.2])
    p[b, [eos, c]] = torch.tensor([0.45, 0.55])
    p[c, eos] = 1.0
    p[[0, 1, 3]] = 1.0 / 7
    model = FairseqEncoderDecoderModel(TableEncoder(d), TableDecoder(d, p.log()))
    return model.eval(), d


def test_shrinking_beam_finished_set_on_a_hand_built_model():
    """K = 2. Step 1 keeps {a, b}. Step 2's best extensions are "a </s>" (.5·.6 = .30), "b </s>" (.4·.45 = .18)
    and "b c" (.4·.55 = .22): "a </s>" finishes and the beam shrinks to one, so only "b c" lives ("b </s>" and
    "a c" (.10) are dropped, though a fixed-width beam would keep one of them). Step 3 finishes "b c </s>" (.22).
    Finished set {a </s>, b c </s>}; Eq. 2.13 with α = 0 prefers "a </s>" (log .30 > log .22), with α = 1
    "b c </s>" (log(.22)/3 = −0.505 > log(.30)/2 = −0.602)."""
    model, d = table_model()
    a, b, c, eos = 4, 5, 6, 2
    sample = sample_of(torch.tensor([[a, eos]]), torch.tensor([2]))
    for alpha, first in [(0.0, [a, eos]), (1.0, [b, c, eos])]:
        hyps = ShrinkingBeamGenerator([model], d, beam_size=2, max_len_b=10, lenpen=alpha).generate([model], sample)[0]
        assert sorted(h["tokens"].tolist() for h in hyps) == [[a, eos], [b, c, eos]]
        assert hyps[0]["tokens"].tolist() == first
        by_tokens = {tuple(h["tokens"].tolist()): h for h in hyps}
        assert torch.allclose(by_tokens[(a, eos)]["positional_scores"], torch.tensor([0.5, 0.6]).log())
        assert torch.allclose(by_tokens[(b, c, eos)]["positional_scores"], torch.tensor([0.4, 0.55, 1.0]).log())
    k3 = ShrinkingBeamGenerator([model], d, beam_size=3, max_len_b=10, lenpen=1.0).generate([model], sample)[0]
    # K = 3: step 2 keeps a </s> (.30), b c (.22), b </s> (.18); step 3 finishes b c </s>
    assert sorted(h["tokens"].tolist() for h in k3) == [[a, eos], [b, eos], [b, c, eos]]


# ------------------------------------------------------------------------------------------ rescoring
def test_rescorer_scores_are_teacher_forced_log_probs_in_any_chunking():
    model = rnn_model(seed=2)
    d = model.decoder.dictionary
    src, lengths, _ = toy_batch(bsz=2, src_len=6)
    g = torch.Generator().manual_seed(0)
    cands = [torch.randint(4, 60, (n,), generator=g) for n in (3, 5, 1, 4)]
    index = torch.tensor([0, 1, 1, 0])
    ref = []
    for cand, i in zip(cands, index.tolist()):  # by hand: one teacher-forced pass per candidate
        target = torch.cat([cand, torch.tensor([d.eos()])]).unsqueeze(0)
        prev = torch.cat([torch.tensor([[d.eos()]]), target[:, :-1]], 1)
        with torch.no_grad():
            logits = model(src[i:i + 1], lengths[i:i + 1], prev)[0]
        ref.append(F.log_softmax(logits.float(), -1).gather(-1, target.unsqueeze(-1)).squeeze())
    for chunk in (0, 1, 3):
        out = score_candidates(model, src, lengths, cands, index, eos=d.eos(), pad=d.pad(), alpha=1.0, chunk=chunk)
        for n, r in enumerate(ref):
            assert torch.allclose(out.positional[n], r, atol=1e-5)
            assert math.isclose(float(out.scores[n]), float(r.mean()), abs_tol=1e-5)
    total = score_candidates(model, src, lengths, cands, index, eos=d.eos(), pad=d.pad(), alpha=0.0)
    assert torch.allclose(total.scores, torch.stack([r.sum() for r in ref]), atol=1e-5)
    raw = score_candidates(model, src, lengths, [cands[0], cands[0][:0]], index[:2], eos=d.eos(), pad=d.pad(),
                           append_eos=False)
    assert raw.positional[0].numel() == 3 and raw.scores[1] == float("-inf")
    assert best_per_group(torch.tensor([1.0, 3.0, 3.0, float("nan"), -2.0]), torch.tensor([0, 0, 0, 1, 1]),
                          2).tolist() == [1, 4]

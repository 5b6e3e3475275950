"""Gu (2018) ch. 8: fertility NAT — data (alignment → fertility, distillation), model, losses, decoding, CLI."""
import math
import shutil
import types

import numpy as np
import pytest
import torch

import fairseq_ext  # noqa: F401
from fairseq_ext.criterions.nat_fertility_label_smoothed_cross_entropy import (NATFertilityLoss, finetune_loss, fertility_loss,
                                                  reinforce_loss, reverse_kl, translation_loss)
from fairseq_ext.generators.rescoring import best_per_group as best_per_sentence
from fairseq_ext.generators.nat_fertility import (NATFertilityGenerator,
                                                  fertility_sequences_by_probability, sequence_scores,
                                                  teacher_sequence_scores, topk_fertility)
from fairseq_ext.models.nat_fertility import (DIAGONAL_MASK_VALUE, fertility_copy_index, self_attention_mask,
                                              uniform_copy_index)
from fairseq_ext.modules.nat_fertility import constrain_fertility, predict_fertility, teacher_log_probs
from fairseq_ext.tools.corpora.fertility import fertility_from_links, parse_links
from harness import (TINY_TRANSFORMER, build_model, fairseq, generate, hypotheses, make_dictionary, n_lines,
                     run, train)

PAD, EOS = 1, 2


# ============================================================================ registration
def test_registrations():
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    assert "nat_fertility" in MODEL_REGISTRY
    for arch in ("nat_fertility", "nat_fertility_iwslt16", "nat_fertility_bench", "nat_fertility_tiny"):
        assert arch in ARCH_MODEL_REGISTRY
    assert "translation_fertility" in TASK_REGISTRY
    assert "nat_fertility_loss" in CRITERION_REGISTRY


# ============================================================================ alignment → fertility
def test_fertility_from_links_hand_examples():
    # target 2 is NULL-aligned: it goes to the source of its left neighbour (target 1 → source 1)
    f = fertility_from_links(parse_links("0-0 1-1 2-3 3-4"), 4, 5)
    assert f.tolist() == [1, 2, 1, 1]
    # a leading NULL target takes the source of the first aligned target on its right
    assert fertility_from_links(parse_links("1-1"), 2, 2).tolist() == [0, 2]
    # no link at all: diagonal, target j -> source floor((j + 1/2) T'/T)
    assert fertility_from_links(parse_links(""), 2, 4).tolist() == [2, 2]
    assert fertility_from_links(parse_links(""), 3, 2).tolist() == [1, 0, 1]
    # a target with two links keeps the smallest source index; out-of-range links are ignored
    assert fertility_from_links(parse_links("1-0 0-0 9-1"), 2, 2).tolist() == [2, 0]
    # fertilities above L-1 are stored unclamped so that the sum stays T
    assert fertility_from_links(parse_links(" ".join(f"0-{j}" for j in range(60))), 2, 60).tolist() == [60, 0]


def test_fertilities_sum_to_target_length_random_links():
    rng = np.random.default_rng(0)
    for _ in range(200):
        S, T = int(rng.integers(1, 12)), int(rng.integers(1, 30))
        k = int(rng.integers(0, 2 * T))
        links = np.stack([rng.integers(0, S, k), rng.integers(0, T, k)], 1)
        f = fertility_from_links(links, S, T)
        assert len(f) == S and f.sum() == T and (f >= 0).all()


# ============================================================================ decoder inputs
def test_fertility_copy_index_hand_example():
    # left padding (2 pads), words a b c with fertilities 2 1 0, then <eos>: a a b
    f = torch.tensor([[0, 0, 2, 1, 0, 0], [1, 0, 3, 0, 1, 0]])
    index, mask = fertility_copy_index(f)
    assert mask.tolist() == [[True, True, True, False, False], [True] * 5]
    assert index[0, :3].tolist() == [2, 2, 3]
    assert index[1].tolist() == [0, 2, 2, 2, 4]


def test_uniform_copy_index_thesis_formula():
    # T' = 3, T = 5: Round(3t/5), t = 1..5 -> 1 1 2 2 3 (1-indexed); one left pad
    src_mask = torch.tensor([[False, True, True, True, False]])
    index, mask = uniform_copy_index(src_mask, torch.tensor([5]))
    assert (index - 1).tolist() == [[0, 0, 1, 1, 2]] and mask.all()
    # Round(1.5) = 2 (half up): T' = 3, T = 2 -> 2 3
    index, _ = uniform_copy_index(torch.tensor([[True, True, True, False]]), torch.tensor([2]))
    assert index.tolist() == [[1, 2]]
    # T' = 4, T = 2 -> 2 4; batch with different lengths
    index, mask = uniform_copy_index(torch.tensor([[True] * 4 + [False], [False, False, True, True, False]]),
                                     torch.tensor([2, 3]))
    assert index[0, :2].tolist() == [1, 3] and mask[0].tolist() == [True, True, False]
    assert index[1].tolist() == [2, 2, 3]  # T' = 2, T = 3: Round(2/3), Round(4/3), Round(2) = 1 1 2; offset 2


def _batch():
    # two sentences, left-padded, <eos> at the end; fertilities sum to the target lengths 4 and 6
    src = torch.tensor([[PAD, PAD, 10, 11, 12, EOS], [13, 14, 15, 16, 17, EOS]])
    fert = torch.tensor([[0, 0, 1, 2, 1, 0], [1, 0, 3, 1, 1, 0]])
    tgt = torch.tensor([[20, 21, 22, 23, PAD, PAD], [20, 21, 22, 23, 24, 25]])
    return src, torch.tensor([4, 6]), fert, tgt


def test_copy_construction_matches_fertility_slots():
    """Decoder input i = the source embedding of the token whose fertility slot covers i."""
    model = build_model("nat_fertility_tiny")
    src, lengths, fert, _ = _batch()
    enc = model.encoder(src, src_lengths=lengths)
    x, mask = model.decoder_inputs(enc, src, fertility=fert)
    emb = enc["encoder_embedding"][0]
    for b in range(src.size(0)):
        slots = [j for j in range(src.size(1)) for _ in range(int(fert[b, j]))]
        assert int(mask[b].sum()) == len(slots) == int(fert[b].sum())
        for i, j in enumerate(slots):
            assert torch.equal(x[b, i], emb[b, j])
    # positional-only: no copied input, length from the target lengths
    model = build_model("nat_fertility_tiny", nat_decoder_input="positional")
    x, mask = model.decoder_inputs(enc, src, lengths=torch.tensor([2, 3]))
    assert x is None and mask.sum(1).tolist() == [2, 3]
    # uniform: thesis formula on the real words (T' = 3 and 5)
    model = build_model("nat_fertility_tiny", nat_decoder_input="uniform")
    x, mask = model.decoder_inputs(enc, src, lengths=torch.tensor([5, 2]))
    assert torch.equal(x[0, 0], emb[0, 2]) and torch.equal(x[0, 4], emb[0, 4])
    assert torch.equal(x[1, 0], emb[1, 2]) and torch.equal(x[1, 1], emb[1, 4])  # Round(2.5)=3, Round(5)=5


# ============================================================================ masks
def test_self_attention_mask_is_diagonal_only():
    m = self_attention_mask(4)
    assert (m.diagonal() == DIAGONAL_MASK_VALUE).all()
    off = m.masked_select(~torch.eye(4, dtype=torch.bool))
    assert (off == 0).all()  # no causal mask: the future is visible
    assert self_attention_mask(4, mask_diagonal=False) is None


def test_decoder_masks_diagonal_and_sees_the_future():
    model = build_model("nat_fertility_tiny")
    src, lengths, fert, _ = _batch()
    captured = []
    attn = model.decoder.layers[0].self_attn
    handle = attn.register_forward_pre_hook(lambda mod, args, kwargs: captured.append(kwargs), with_kwargs=True)
    enc = model.encoder(src, src_lengths=lengths)
    x, mask = model.decoder_inputs(enc, src, fertility=fert)
    model.decoder(enc, x, mask)
    handle.remove()
    kw = captured[0]
    am = kw["attn_mask"]
    assert am.shape == (6, 6) and (am.diagonal() == DIAGONAL_MASK_VALUE).all()
    assert (am.masked_select(~torch.eye(6, dtype=torch.bool)) == 0).all()
    # the attention weights of that call: nothing on the diagonal, something above it (non-causal)
    _, w = attn(query=kw["query"], key=kw["key"], value=kw["value"], key_padding_mask=kw["key_padding_mask"],
                attn_mask=am, need_weights=True)
    w = w[1] if w.dim() == 3 else w[:, 1]  # sentence 2 (no padding): ([heads x] T x T)
    assert w.diagonal(dim1=-2, dim2=-1).abs().max() < 1e-6
    assert (w.triu(1) > 0).any()
    # non-causal: changing the last decoder input changes the first output
    out1 = model.decoder(enc, x, mask)
    x2 = x.clone()
    x2[1, 5] += 1.0
    out2 = model.decoder(enc, x2, mask)
    assert not torch.allclose(out1[1, 0], out2[1, 0])
    # positional attention: query = key = the same sinusoidal encodings
    captured.clear()
    h = model.decoder.layers[0].pos_attn.register_forward_pre_hook(
        lambda mod, args, kwargs: captured.append(kwargs), with_kwargs=True)
    model.decoder(enc, x, mask)
    h.remove()
    assert captured[0]["query"] is captured[0]["key"] and captured[0]["attn_mask"] is None


def test_length_one_output_in_a_padded_batch_is_finite():
    model = build_model("nat_fertility_tiny")
    src, lengths, _, _ = _batch()
    fert = torch.tensor([[0, 0, 0, 1, 0, 0], [1, 0, 3, 1, 1, 0]])
    enc = model.encoder(src, src_lengths=lengths)
    logits, mask = model.decode(enc, src, fertility=fert)
    assert mask.sum(1).tolist() == [1, 6] and torch.isfinite(logits).all()


# ============================================================================ fertility prediction
def test_predict_fertility_argmax_average_cap_and_empty():
    src_mask = torch.tensor([[False, True, True, False]])
    inf = float("inf")
    logits = torch.tensor([[[0.0, -inf, -inf], [0.2, 0.3, 0.5], [0.0, 0.0, -inf], [0.0, -inf, -inf]]])
    logits[0, 1] = logits[0, 1].log()
    assert predict_fertility(logits, src_mask, "argmax").tolist() == [[0, 2, 0, 0]]  # ties -> first max
    # average: 1.3 -> 1, 0.5 -> 1 (Round half up)
    assert predict_fertility(logits, src_mask, "average").tolist() == [[0, 1, 1, 0]]
    # cap Σf ≤ ratio·T' = 1·2
    big = torch.full((1, 4, 10), -10.0)
    big[..., 9] = 10.0
    assert predict_fertility(big, src_mask, "argmax", max_len_ratio=1.0).tolist() == [[0, 2, 0, 0]]
    # all-zero fertilities: one word at the position with the largest p(f ≥ 1)
    z = torch.tensor([[[0.0, -9, -9], [0.0, -1, -9], [0.0, -3, -9], [0.0, 5, 5]]])
    assert predict_fertility(z, src_mask, "argmax").tolist() == [[0, 1, 0, 0]]
    # sampling respects the mask and the support
    s = predict_fertility(logits.expand(50, -1, -1), src_mask.expand(50, -1), "sample")
    assert (s[:, [0, 3]] == 0).all() and (s[:, 2] <= 1).all() and (s.sum(1) >= 1).all()
    assert set(s[:, 1].tolist()) == {0, 1, 2}


# ============================================================================ losses (hand-computed)
def test_translation_and_fertility_loss_hand_computed():
    logits = torch.tensor([[[0.0, 0.0, 0.0], [0.0, math.log(2), 0.0], [5.0, 5.0, 5.0]]])
    target = torch.tensor([[0, 1, 2]])
    mask = torch.tensor([[True, True, False]])
    loss, nll = translation_loss(logits, target, mask)
    expect = (math.log(3) + math.log(2)) / 2
    assert math.isclose(nll.item(), expect, rel_tol=1e-6) and math.isclose(loss.item(), expect, rel_tol=1e-6)
    loss, _ = translation_loss(logits, target, mask, label_smoothing=0.1)
    mean_lp = (3 * -math.log(3) + 2 * math.log(0.25) + math.log(0.5)) / 6
    assert math.isclose(loss.item(), 0.9 * expect - 0.1 * mean_lp, rel_tol=1e-6)
    # fertility: uniform over 3 classes; the target 5 is clamped to class 2
    fl = torch.zeros(1, 3, 3)
    fl[0, 1] = torch.tensor([0.0, 0.0, math.log(2)])
    f = torch.tensor([[5, 2, 0]])
    fm = torch.tensor([[True, True, False]])
    assert math.isclose(fertility_loss(fl, f, fm).item(), (math.log(3) + math.log(2)) / 2, rel_tol=1e-6)


def test_reverse_kl_hand_computed():
    student = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)], [1.0, 2.0]]])  # p = (1/4, 3/4)
    teacher = torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.5, 0.5]]]).log()
    mask = torch.tensor([[True, True, False]])
    r = reverse_kl(student, teacher, mask)
    assert math.isclose(r[0, 0].item(), math.log(2), rel_tol=1e-6)
    assert math.isclose(r[0, 1].item(), -(0.25 * math.log(0.9) + 0.75 * math.log(0.1)), rel_tol=1e-6)
    assert r[0, 2].item() == 0.0
    # gradients reach the student only
    s = student.clone().requires_grad_(True)
    t = teacher.clone().requires_grad_(True)
    reverse_kl(s, t, mask).sum().backward()
    assert s.grad.abs().sum() > 0 and t.grad is None


def test_reinforce_loss_hand_computed():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss = reinforce_loss(logp, torch.tensor([3.0, 1.0]), torch.tensor([2.0, 2.0]))
    assert math.isclose(loss.item(), (1 * -1 + -1 * -2) / 2)  # advantages +1, -1
    loss.backward()
    assert logp.grad.tolist() == [0.5, -0.5]  # a worse-than-baseline sample becomes less likely
    # centring and scaling: advantages (1, 3) -> (-1, 1), x0.1
    loss = reinforce_loss(torch.tensor([-1.0, -2.0]), torch.tensor([3.0, 5.0]), torch.tensor([2.0, 2.0]),
                          scale=0.1, center=True)
    assert math.isclose(loss.item(), 0.1 * (1 + -2) / 2, rel_tol=1e-6)


def test_finetune_loss_weights():
    rl, bp, kd = torch.tensor(1.0), torch.tensor(2.0), torch.tensor(4.0)
    assert math.isclose(finetune_loss(rl, bp, kd, 0.25).item(), 0.25 * 3 + 0.75 * 4)
    assert math.isclose(finetune_loss(rl, bp, kd, 0.25, ("bp", "kd")).item(), 0.25 * 2 + 0.75 * 4)
    assert math.isclose(finetune_loss(rl, bp, kd, 0.25, ("rl",)).item(), 0.25)


def _sample():
    src, lengths, fert, tgt = _batch()
    return {"net_input": {"src_tokens": src, "src_lengths": lengths}, "fertility": fert, "target": tgt,
            "ntokens": int(tgt.ne(PAD).sum()), "nsentences": 2, "id": torch.arange(2)}


def _fake_task(teacher=None):
    d = make_dictionary(60)
    return types.SimpleNamespace(target_dictionary=d, source_dictionary=d, teacher=lambda device=None: teacher)


@pytest.mark.parametrize("factor", [1.0, 0.3, 2.5])
def test_criterion_supervised_is_translation_plus_factor_times_fertility(factor):
    """L_KD = mean_t −log p(y_t) + factor · mean_{t'} −log p_F(f_t'), recomputed here with plain torch
    ops from the model's outputs (the translation term over the real target tokens, the fertility term
    over the source words, i.e. not padding or </s>, with targets clamped to the largest class L−1)."""
    model = build_model("nat_fertility_tiny")
    src, lengths, fert, tgt = _batch()
    crit = NATFertilityLoss(_fake_task(), fertility_loss_factor=factor)
    loss, sample_size, log = crit(model, _sample())
    assert sample_size == 1
    with torch.no_grad():
        out = model(src, lengths, fertility=fert, tgt_tokens=tgt)
    logits, mask = out["word_ins"]["out"], out["word_ins"]["mask"]
    assert torch.equal(mask, tgt.ne(PAD))  # one decoder position per target token (Σf = target length)
    token_nll = -torch.log_softmax(logits.float(), -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    trans = token_nll[tgt.ne(PAD)].mean().item()
    fert_logits = out["fertility"]["out"].float()
    L = fert_logits.size(-1)
    words = src.ne(PAD) & src.ne(EOS)
    fert_nll = -torch.log_softmax(fert_logits, -1).gather(-1, fert.clamp(max=L - 1).unsqueeze(-1)).squeeze(-1)
    f_loss = fert_nll[words].mean().item()
    assert trans > 0 and f_loss > 0
    assert math.isclose(log["nll_loss"], trans, rel_tol=1e-5)
    assert math.isclose(log["fert_loss"], f_loss, rel_tol=1e-5)
    assert math.isclose(loss.item(), trans + factor * f_loss, rel_tol=1e-5), (loss.item(), trans, f_loss)


def test_criterion_finetune_terms_and_gradient_paths():
    torch.manual_seed(0)
    model = build_model("nat_fertility_tiny").train()
    teacher = build_model("transformer_tiny", seed=1)
    task = _fake_task(teacher)
    crit = NATFertilityLoss(task, finetune=True, ft_lambda=0.25)
    loss, _, log = crit(model, _sample())
    assert math.isclose(loss.item(), 0.25 * (log["rl"] + log["bp"]) + 0.75 * log["kd"], rel_tol=1e-5)
    assert log["rkl_sample"] > 0 and log["rkl_mean_fert"] > 0
    # L_BP alone: gradients reach the decoder, not the fertility predictor
    model.zero_grad()
    NATFertilityLoss(task, finetune=True, ft_terms="bp")(model, _sample())[0].backward()
    assert model.decoder.layers[0].fc1.weight.grad.abs().sum() > 0
    assert model.fertility_proj.weight.grad is None or model.fertility_proj.weight.grad.abs().sum() == 0
    # L_RL alone: gradients reach only the fertility predictor (and the encoder under it)
    model.zero_grad()
    NATFertilityLoss(task, finetune=True, ft_terms="rl")(model, _sample())[0].backward()
    g = model.decoder.layers[0].fc1.weight.grad
    assert g is None or g.abs().sum() == 0
    assert model.fertility_proj.weight.grad.abs().sum() > 0
    # the teacher never receives a gradient from the fine-tuning loss
    assert all(p.grad is None for p in teacher.parameters())
    # the BP term is the token-mean reverse KL against the teacher on the argmax output
    model.eval()
    out = model(*_batch()[:2], fertility=_batch()[2], tgt_tokens=_batch()[3])
    m = out["word_ins"]["mask"]
    yhat = out["word_ins"]["out"].argmax(-1).masked_fill(~m, PAD)
    t_lp = teacher_log_probs(teacher, _batch()[0], _batch()[1], yhat, m)[:, : m.size(1)]
    bp = reverse_kl(out["word_ins"]["out"], t_lp, m).sum() / m.sum()
    _, _, log = NATFertilityLoss(task, finetune=True, ft_terms="bp,kd")(model, _sample())
    assert math.isclose(log["bp"], bp.item(), rel_tol=1e-5)


# ============================================================================ decoding
def test_generator_argmax_and_average_lengths_follow_fertility():
    model = build_model("nat_fertility_tiny")
    d = make_dictionary(60)
    sample = _sample()
    for how in ("argmax", "average"):
        hyps = NATFertilityGenerator(d, fertility_decoding=how).generate([model], sample)
        assert len(hyps) == 2
        for h in hyps:
            assert len(h[0]["tokens"]) == int(h[0]["fertility"].sum()) + 1  # + <eos>
            assert h[0]["tokens"][-1].item() == EOS
    # oracle fertilities
    hyps = NATFertilityGenerator(d, oracle_length=True).generate([model], sample)
    assert [len(h[0]["tokens"]) - 1 for h in hyps] == [4, 6]


def test_generator_tokens_are_the_decoders_argmax():
    """The hypothesis is the argmax of model.decode on the unmasked positions (+ </s>), for the argmax
    fertilities (Eq. 8.5) and for the oracle ones; positional scores are the argmax log-probabilities."""
    model = build_model("nat_fertility_tiny")
    d = make_dictionary(60)
    sample = _sample()
    src, lengths, oracle, _ = _batch()
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        src_mask = model.source_mask(src)
        cap = model.decoder.max_target_positions
        argmax_f = predict_fertility(model.fertility_logits(enc), src_mask, "argmax", max_length=cap)
    for gen, f in ((NATFertilityGenerator(d), argmax_f), (NATFertilityGenerator(d, oracle_length=True), oracle)):
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
    sample = _sample()
    gen = NATFertilityGenerator(d, oracle_length=True)
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
    gen = NATFertilityGenerator(d, npd_samples=6, teacher=teacher)
    seen = _spy_on_rescoring(gen)
    sample = _sample()
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
    src, lengths, _, _ = _batch()
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
    sample = _sample()
    argmax = NATFertilityGenerator(d).generate([model], sample)
    epd = NATFertilityGenerator(d, fertility_decoding="epd", epd_topk=1, teacher=teacher).generate([model], sample)
    for a, e in zip(argmax, epd):
        assert torch.equal(a[0]["tokens"], e[0]["tokens"]) and torch.equal(a[0]["fertility"], e[0]["fertility"])
        assert e[0]["candidates"] == 1 and "teacher_score" in e[0]
    with pytest.raises(ValueError, match="teacher"):
        NATFertilityGenerator(d, fertility_decoding="epd")
    with pytest.raises(ValueError):
        NATFertilityGenerator(d, fertility_decoding="epd", npd_samples=2, teacher=teacher)


def test_epd_picks_the_teacher_best_of_the_top_k():
    model = build_model("nat_fertility_tiny")
    teacher = build_model("transformer_tiny", seed=3)
    d = make_dictionary(60)
    gen = NATFertilityGenerator(d, fertility_decoding="epd", epd_topk=5, teacher=teacher, rescore_batch=2)
    seen = _spy_on_rescoring(gen)
    sample = _sample()
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
    again = NATFertilityGenerator(d, fertility_decoding="epd", epd_topk=5, teacher=teacher).generate([model], sample)
    assert all(torch.equal(h[0]["tokens"], g[0]["tokens"]) for h, g in zip(hyps, again))


# ============================================================================ data: dataset + task
def test_task_batches_fertility_with_the_source(fert_bin):
    from fairseq.tasks import TASK_REGISTRY
    from fairseq_ext.tasks.translation_fertility import TranslationFertilityConfig

    cfg = TranslationFertilityConfig(data=str(fert_bin), source_lang="es", target_lang="en", dataset_impl="mmap",
                                     train_subset="train", required_seq_len_multiple=1, num_batch_buckets=0)
    task = TASK_REGISTRY["translation_fertility"].setup_task(cfg)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(len(ds))])
    src, fert, tgt = batch["net_input"]["src_tokens"], batch["fertility"], batch["target"]
    assert fert.shape == src.shape
    words = src.ne(task.src_dict.pad()) & src.ne(task.src_dict.eos())
    assert (fert[~words] == 0).all()
    assert torch.equal(fert.sum(1), tgt.ne(task.tgt_dict.pad()).sum(1))  # Σf = T
    assert not tgt.eq(task.tgt_dict.eos()).any()  # NAT targets have no <eos>


# ============================================================================ CLI
@pytest.fixture(scope="module")
def fert_bin(tiny_bin, tmp_path_factory):
    """A copy of the tiny data with eflomal fertilities (the real CLI)."""
    out = tmp_path_factory.mktemp("nat") / "bin"
    shutil.copytree(tiny_bin, out)
    import sys

    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.fertility", out, "--aligner", "eflomal"])
    assert "eflomal aligned" in p.stderr
    return out


def test_cli_eflomal_fertilities_sum_to_target_lengths(fert_bin):
    from fairseq.data import data_utils

    for split in ("train", "valid", "test"):
        fert = data_utils.load_indexed_dataset(str(fert_bin / f"{split}.es-en.fert"), None)
        src = data_utils.load_indexed_dataset(str(fert_bin / f"{split}.es-en.es"), None)
        tgt = data_utils.load_indexed_dataset(str(fert_bin / f"{split}.es-en.en"), None)
        assert len(fert) == len(src) == len(tgt)
        for i in range(len(fert)):
            assert len(fert[i]) == len(src[i]) - 1 and int(fert[i].sum()) == len(tgt[i]) - 1




def _train_nat(data, save_dir, *extra, max_update=4):
    return train(data, save_dir, ["--arch", "nat_fertility_tiny"], task="translation_fertility",
                 criterion="nat_fertility_loss", max_update=max_update, extra=list(extra))


def _decode(data, ckpt, *extra):
    out = generate(data, ckpt, *extra, task="translation_fertility")
    hyps = hypotheses(out)
    assert sorted(hyps) == list(range(n_lines(data / "test.ids")))  # one output per test sentence
    return out, hyps


def test_cli_train_and_decode_copy_fertility(fert_bin, tmp_path):
    ckpt = _train_nat(fert_bin, tmp_path / "nat")
    for mode in ("argmax", "average"):
        _decode(fert_bin, ckpt, "--fertility-decoding", mode)
    out, hyps = _decode(fert_bin, ckpt, "--oracle-length")  # reference fertilities: reference lengths
    refs = {int(l.split("\t")[0][2:]): l.split("\t")[1] for l in out.splitlines() if l.startswith("T-")}
    assert all(len(hyps[i].split()) == len(refs[i].split()) for i in hyps)


@pytest.mark.parametrize("mode", ["uniform", "positional"])
def test_cli_train_and_decode_uniform_and_positional(fert_bin, tmp_path, mode):
    ckpt = _train_nat(fert_bin, tmp_path / mode, "--decoder-input", mode, "--no-positional-attention"
                      if mode == "positional" else "--pos-attn-diag-mask", max_update=3)
    _decode(fert_bin, ckpt)
    out, hyps = _decode(fert_bin, ckpt, "--oracle-length")
    refs = {int(l.split("\t")[0][2:]): l.split("\t")[1] for l in out.splitlines() if l.startswith("T-")}
    assert all(len(hyps[i].split()) == len(refs[i].split()) for i in hyps)


def test_cli_distill_resume_finetune_and_npd(tiny_bin, tmp_path):
    import sys

    teacher = train(tiny_bin, tmp_path / "teacher", TINY_TRANSFORMER, max_update=10)
    kd = tmp_path / "kd"
    cmd = [sys.executable, "-m", "fairseq_ext.tools.corpora.distill", "--path", teacher, "--data", tiny_bin, "--out", kd,
           "--splits", "train", "valid", "--chunk-size", "50", "--max-len-b", "5", "--max-len-a", "1.0"]
    p = run(cmd)
    assert "train: 209/209 sentences" in p.stderr
    first = (kd / "train.distill.en").read_text()
    chunk = kd / ".distill" / "train" / "chunk-000002.tsv"
    chunk.unlink()
    p = run(cmd + ["--fertility", "eflomal"])  # resumes: only the deleted chunk is decoded again
    assert "resuming, 159/209" in p.stderr and chunk.exists()
    assert (kd / "train.distill.en").read_text() == first
    assert n_lines(kd / "train.distill.en") == 209 and (kd / "train.es-en.fert.bin").exists()
    # test keeps the real references
    assert (kd / "test.es-en.en.bin").read_bytes() == (tiny_bin / "test.es-en.en.bin").read_bytes()

    # NAT with the teacher's encoder, then fine-tuning with Eq. 8.11, then NPD with the teacher
    nat = _train_nat(kd, tmp_path / "nat", "--init-encoder-from", teacher, max_update=3)
    ft = _train_nat(kd, tmp_path / "ft", "--finetune-from-model", nat, "--finetune", "--teacher-path", teacher,
                    "--ft-rl-center", "--ft-rl-scale", "0.1", max_update=2)
    _decode(kd, ft, "--npd-samples", "3", "--teacher-path", teacher, "--seed", "2")
    # EPD (Eq. 8.8): the 4 most probable fertility sequences; the chunked rescoring does not change the output
    epd, _ = _decode(kd, ft, "--fertility-decoding", "epd", "--epd-topk", "4", "--teacher-path", teacher)
    epd_chunked, _ = _decode(kd, ft, "--fertility-decoding", "epd", "--epd-topk", "4", "--teacher-path", teacher,
                             "--rescore-batch", "3")
    assert [l for l in epd.splitlines() if l[:2] in ("H-", "D-")] == \
        [l for l in epd_chunked.splitlines() if l[:2] in ("H-", "D-")]
    p = fairseq("generate", kd, "--task", "translation_fertility", "--path", ft, "--cpu", "--npd-samples", "2",
                check=False)
    assert p.returncode != 0 and "--teacher-path" in (p.stderr + p.stdout)
    p = fairseq("generate", kd, "--task", "translation_fertility", "--path", ft, "--cpu", "--fertility-decoding",
                "epd", check=False)
    assert p.returncode != 0 and "--teacher-path" in (p.stderr + p.stdout)

"""Gu (2018) ch. 8: fertility NAT, the math: registrations, alignment → fertility, the decoder inputs (copy by
fertility, uniform copy), the masks, fertility prediction and the losses computed by hand. Decoding is in
``test_nat_fertility_decoding.py``, the data, task and command lines in ``test_nat_fertility_cli.py``."""
import math
import types

import numpy as np
import pytest
import torch

import fairseq_ext  # noqa: F401
from fairseq_ext.criterions.nat_fertility_label_smoothed_cross_entropy import (
    NATFertilityLoss,
    finetune_loss,
    fertility_loss,
    reinforce_loss,
    reverse_kl,
    translation_loss,
)
from fairseq_ext.models.nat_fertility import (
    DIAGONAL_MASK_VALUE,
    fertility_copy_index,
    self_attention_mask,
    uniform_copy_index,
)
from fairseq_ext.modules.nat_fertility import predict_fertility, teacher_log_probs
from fairseq_ext.tools.corpora.fertility import fertility_from_links, parse_links
from harness import build_model, make_dictionary
from nat_toys import EOS, PAD, fertility_batch, fertility_sample


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


def test_copy_construction_matches_fertility_slots():
    """Decoder input i = the source embedding of the token whose fertility slot covers i."""
    model = build_model("nat_fertility_tiny")
    src, lengths, fert, _ = fertility_batch()
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
    src, lengths, fert, _ = fertility_batch()
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
    src, lengths, _, _ = fertility_batch()
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


def _fake_task(teacher=None):
    d = make_dictionary(60)
    return types.SimpleNamespace(target_dictionary=d, source_dictionary=d, teacher=lambda device=None: teacher)


@pytest.mark.parametrize("factor", [1.0, 0.3, 2.5])
def test_criterion_supervised_is_translation_plus_factor_times_fertility(factor):
    """L_KD = mean_t −log p(y_t) + factor · mean_{t'} −log p_F(f_t'), recomputed here with plain torch
    ops from the model's outputs (the translation term over the real target tokens, the fertility term
    over the source words, i.e. not padding or </s>, with targets clamped to the largest class L−1)."""
    model = build_model("nat_fertility_tiny")
    src, lengths, fert, tgt = fertility_batch()
    crit = NATFertilityLoss(_fake_task(), fertility_loss_factor=factor)
    loss, sample_size, log = crit(model, fertility_sample())
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
    loss, _, log = crit(model, fertility_sample())
    assert math.isclose(loss.item(), 0.25 * (log["rl"] + log["bp"]) + 0.75 * log["kd"], rel_tol=1e-5)
    assert log["rkl_sample"] > 0 and log["rkl_mean_fert"] > 0
    # L_BP alone: gradients reach the decoder, not the fertility predictor
    model.zero_grad()
    NATFertilityLoss(task, finetune=True, ft_terms="bp")(model, fertility_sample())[0].backward()
    assert model.decoder.layers[0].fc1.weight.grad.abs().sum() > 0
    assert model.fertility_proj.weight.grad is None or model.fertility_proj.weight.grad.abs().sum() == 0
    # L_RL alone: gradients reach only the fertility predictor (and the encoder under it)
    model.zero_grad()
    NATFertilityLoss(task, finetune=True, ft_terms="rl")(model, fertility_sample())[0].backward()
    g = model.decoder.layers[0].fc1.weight.grad
    assert g is None or g.abs().sum() == 0
    assert model.fertility_proj.weight.grad.abs().sum() > 0
    # the teacher never receives a gradient from the fine-tuning loss
    assert all(p.grad is None for p in teacher.parameters())
    # the BP term is the token-mean reverse KL against the teacher on the argmax output
    model.eval()
    out = model(*fertility_batch()[:2], fertility=fertility_batch()[2], tgt_tokens=fertility_batch()[3])
    m = out["word_ins"]["mask"]
    yhat = out["word_ins"]["out"].argmax(-1).masked_fill(~m, PAD)
    t_lp = teacher_log_probs(teacher, fertility_batch()[0], fertility_batch()[1], yhat, m)[:, : m.size(1)]
    bp = reverse_kl(out["word_ins"]["out"], t_lp, m).sum() / m.sum()
    _, _, log = NATFertilityLoss(task, finetune=True, ft_terms="bp,kd")(model, fertility_sample())
    assert math.isclose(log["bp"], bp.item(), rel_tol=1e-5)

"""SEG-NMT's translation stage (Gu 2019 ch. 4; fairseq_ext/models/seg_nmt.py, models/seg_copynet.py,
modules/tm_memory.py, criterions/seg_nmt_cross_entropy.py), the memory math in process: Eqs. 4.2–4.7 against
rnnsearch on the same weights, the criterion, training through the memory, seg_copynet. Incremental decoding and
beam search are in ``test_seg_nmt_incremental.py``, the task and the command lines in ``test_seg_nmt_cli.py``."""
import math
import types

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.modules.tm_memory import copy_probs, gather_slots, shallow_fusion
from harness import arch_args, build_model, make_dictionary, toy_batch
from seg_toys import EOS, PAIRS, PAD, V, seg, tm_inputs, toy

SEG_ARCHS = ["seg_nmt", "seg_nmt_bench", "seg_nmt_jrc", "seg_nmt_tiny"]
COPY_ARCHS = ["seg_copynet", "seg_copynet_bench", "seg_copynet_tiny"]


def rnnsearch_twin(model, arch="rnnsearch_tiny", **kw):
    """rnnsearch with the sentence weights of ``model`` (every non-memory tensor)."""
    base = build_model(arch, vocab=V, **kw)
    base.load_state_dict({k: v for k, v in model.state_dict().items() if k in base.state_dict()})
    return base


def fix_gate(model, logit):
    """ζ = σ(logit) at every step (a float or −∞ for ζ = 0)."""
    model.decoder.tm_gate.forward = lambda x: torch.full(x.shape[:1], float(logit))


def target_of(prev):
    return torch.cat([prev[:, 1:], torch.full((prev.size(0), 1), EOS)], 1)


# ------------------------------------------------------------------------------------------ registration, presets
def test_archs_registered():
    assert sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__name__ == "SegNMTModel") == SEG_ARCHS
    assert sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__name__ == "SegCopyNetModel") == COPY_ARCHS


def defaults(arch, **kw):
    return vars(arch_args(arch, **kw))


SEG_OPTIONS = ("fusion", "tm_metric", "no_tm_coverage", "gate_hidden_dim")


def test_presets_have_the_sentence_sizes_of_their_rnnsearch():
    for seg_arch, base in [("seg_nmt", "rnnsearch_jrc"), ("seg_nmt_jrc", "rnnsearch_jrc"),
                           ("seg_nmt_bench", "rnnsearch_bench"), ("seg_nmt_tiny", "rnnsearch_tiny"),
                           ("seg_copynet", "rnnsearch_jrc"), ("seg_copynet_bench", "rnnsearch_bench"),
                           ("seg_copynet_tiny", "rnnsearch_tiny")]:
        ours, theirs = defaults(seg_arch), defaults(base)
        assert {k: v for k, v in ours.items() if k not in SEG_OPTIONS} == theirs, seg_arch
    thesis = defaults("seg_nmt")
    assert thesis == defaults("seg_nmt_jrc")
    sizes = (thesis["encoder_hidden_size"], thesis["decoder_hidden_size"], thesis["encoder_embed_dim"])
    assert sizes == (1024, 1024, 512)
    assert (thesis["fusion"], thesis["tm_metric"], thesis["no_tm_coverage"], thesis["gate_hidden_dim"]) == \
        ("shallow", "diagonal", False, 1024)
    assert defaults("seg_nmt", fusion="deep", gate_hidden_dim=0)["fusion"] == "deep"


def test_thesis_size_parameters_over_rnnsearch():
    """The memory adds only M (diagonal: C), λ and the gate MLP [c; z; z̃] → H → 1 (C = 2048, H = 1024)."""
    ours = build_model("seg_nmt", vocab=V, device="meta")
    base = build_model("rnnsearch_jrc", vocab=V, device="meta")
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    C, H = 2048, 1024
    assert n(ours) - n(base) == C + 1 + (C + 2 * H) * H + H + H + 1


def test_metric_starts_as_identity_and_coverage_weight_as_zero():
    diag, full = seg(), seg(tm_metric="full")
    C = diag.encoder.output_dim
    assert torch.equal(diag.decoder.tm_metric.weight, torch.ones(C))
    assert torch.equal(full.decoder.tm_metric.weight, torch.eye(C))
    assert diag.decoder.tm_coverage_weight.item() == 0.0 and full.decoder.tm_coverage_weight.item() == 0.0
    q, keys = torch.randn(2, C), torch.randn(2, 3, C)
    expected = torch.einsum("bc,bmc->bm", q, keys)
    assert torch.allclose(diag.decoder.tm_metric(q, keys), expected, atol=1e-5)
    assert torch.allclose(full.decoder.tm_metric(q, keys), expected, atol=1e-5)
    assert not hasattr(seg(no_tm_coverage=True).decoder, "tm_coverage_weight")


# ------------------------------------------------------------------------------------------ ζ = 0 and the mixture
def loss_of(model, src, lengths, prev, criterion, **tm):
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    from fairseq_ext.criterions.seg_nmt_cross_entropy import SegNMTCrossEntropyCriterion

    task = types.SimpleNamespace(target_dictionary=make_dictionary(V))
    crit = SegNMTCrossEntropyCriterion(task) if criterion == "seg" else CrossEntropyCriterion(task, False)
    sample = {"net_input": dict(src_tokens=src, src_lengths=lengths, prev_output_tokens=prev, **tm),
              "target": target_of(prev), "ntokens": prev.numel()}
    return crit(model, sample)[0]


@pytest.mark.parametrize("fusion", ["shallow", "deep"])
def test_zeta_zero_gives_the_plain_nmt_loss_exactly(fusion):
    model = seg(fusion=fusion)
    base = rnnsearch_twin(model)
    src, lengths, prev, tm = toy()
    lprobs = lambda m, **kw: m.get_normalized_probs(m(src, lengths, prev, **kw), log_probs=True)  # noqa: E731
    with torch.no_grad():
        plain = loss_of(base, src, lengths, prev, "seg")
        assert abs(loss_of(base, src, lengths, prev, "ce").item() - plain.item()) < 1e-4  # no clip needed here
        assert loss_of(model, src, lengths, prev, "seg", **tm) != plain  # the memory is used ...
        fix_gate(model, float("-inf"))
        assert torch.equal(lprobs(model, **tm), lprobs(base))  # ... ζ = 0: rnnsearch exactly
        assert torch.equal(loss_of(model, src, lengths, prev, "seg", **tm), plain)
        del model.decoder.tm_gate.forward
        # no retrieved pair (e.g. fairseq-interactive): ζ = 0, rnnsearch exactly
        for none in ({}, tm_inputs([], [[], [], []])):
            assert torch.equal(lprobs(model, **none), lprobs(base))
            assert torch.equal(loss_of(model, src, lengths, prev, "seg", **none), plain)


def test_shallow_fusion_is_the_mixture_of_rnnsearch_and_the_copy_distribution():
    """With ζ fixed, p = ζ p_copy + (1 − ζ) p_NMT where p_NMT is rnnsearch's output on the same weights and
    p_copy(w) = Σ_{τ: y'_τ = w} q_τ sums to one: the memory changes p only through the mixture."""
    model = seg()
    base = rnnsearch_twin(model)
    src, lengths, prev, tm = toy()
    zeta = 1 / (1 + math.exp(-0.4))
    fix_gate(model, 0.4)
    with torch.no_grad():
        enc = model.encoder(src, lengths, **tm)
        lp, extra = model.decoder(prev, encoder_out=enc)
        nmt = base.get_normalized_probs(base(src, lengths, prev), log_probs=True).exp()
    q = extra["tm_attn"][0]
    p_copy = copy_probs(q, enc["tm_tokens"][0], V)
    has = torch.tensor([True, True, False])
    assert torch.allclose(p_copy[has].sum(-1), torch.ones(2, 6), atol=1e-6)
    assert torch.equal(p_copy[~has], torch.zeros(1, 6, V))
    gate = extra["tm_gate"][0]
    assert torch.allclose(gate[has], torch.full((2, 6), zeta)) and torch.equal(gate[~has], torch.zeros(1, 6))
    expected = gate.unsqueeze(-1) * p_copy + (1 - gate.unsqueeze(-1)) * nmt
    assert torch.allclose(lp.exp(), expected, atol=1e-6)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(3, 6), atol=1e-5)
    # a word in no slot: log(1 − ζ) + log p_NMT; the row without memory: log p_NMT, bit for bit
    assert torch.allclose(lp[0, :, 40], math.log(1 - zeta) + nmt[0, :, 40].log(), atol=1e-6)
    assert torch.equal(lp[2], base.get_normalized_probs(base(src, lengths, prev), log_probs=True)[2])
    # the copy mass of a token held by two slots (9: pair 0 τ=0 and pair 1 τ=1) is their sum
    slots = enc["tm_tokens"][0][0].eq(9)
    assert int(slots.sum()) == 2
    assert torch.allclose(p_copy[0, :, 9], q[0][:, slots].sum(-1))


def test_shallow_fusion_in_log_space_is_exact_and_stable():
    g = torch.Generator().manual_seed(0)
    nmt = torch.log_softmax(torch.randn(2, 3, 10, generator=g) * 30, -1)
    log_q = torch.log_softmax(torch.randn(2, 3, 4, generator=g) * 30, -1)
    log_q[1, :, 2:] = float("-inf")  # padding slots
    tokens = torch.tensor([[3, 3, 5, 7], [4, 8, 1, 1]])
    logit = torch.randn(2, 3, generator=g)
    log_zeta, log_rest = torch.nn.functional.logsigmoid(logit), torch.nn.functional.logsigmoid(-logit)
    out = shallow_fusion(nmt, log_q, log_zeta, log_rest, tokens)
    zeta = log_zeta.exp().unsqueeze(-1)
    expected = zeta * copy_probs(log_q.exp(), tokens, 10) + (1 - zeta) * nmt.exp()
    assert torch.allclose(out.exp(), expected, atol=1e-6)
    assert torch.equal(out[..., 0], nmt[..., 0] + log_rest)  # id 0 is in no slot


def test_criterion_is_minus_log_of_the_clipped_mixture():
    from fairseq_ext.criterions.seg_nmt_cross_entropy import SegNMTCrossEntropyCriterion

    model = seg()
    src, lengths, prev, tm = toy()
    target = target_of(prev)
    target[1, -1] = PAD
    sample = {"net_input": dict(src_tokens=src, src_lengths=lengths, prev_output_tokens=prev, **tm),
              "target": target, "ntokens": int(target.ne(PAD).sum())}
    task = types.SimpleNamespace(target_dictionary=make_dictionary(V))
    with torch.no_grad():
        lp, extra = model(src, lengths, prev, **tm)
        loss, size, log = SegNMTCrossEntropyCriterion(task)(model, sample)
        floor = 3.0 / V  # most tokens are below it: the clip applies
        clipped = SegNMTCrossEntropyCriterion(task, prob_floor=floor)(model, sample)[0]
    gold = lp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    real = target.ne(PAD)
    assert abs(loss.item() + gold[real].sum().item()) < 1e-4 and size == 17
    assert abs(clipped.item() + gold.clamp(min=math.log(floor))[real].sum().item()) < 1e-4
    assert clipped.item() < loss.item()
    assert abs(log["tm_gate"] - extra["tm_gate"][0][real].sum().item()) < 1e-4


# ------------------------------------------------------------------------------------------ the memory
def test_keys_and_values_are_the_same_models_teacher_forced_pass():
    """Eqs. 4.2–4.3: c'_τ = the attention context that predicts y'_τ, z'_τ = the state, y'_τ the token, for
    every pair, concatenated pair by pair (the order of tm_index), real slots first."""
    model = seg()
    base = rnnsearch_twin(model)
    src, lengths, prev, tm = toy()
    with torch.no_grad():
        enc = model.encoder(src, lengths, **tm)
        tenc = base.encoder(tm["tm_src_tokens"], tm["tm_src_lengths"])
        _, ex = base.decoder(tm["tm_prev_output_tokens"], encoder_out=tenc, features_only=True)
    keys = torch.bmm(ex["attn"][0], tenc["encoder_out"][0].transpose(0, 1))
    states = ex["states"][0]
    for b, rows in enumerate([[0, 1], [2], []]):
        real = [tm["tm_tgt_tokens"][r].ne(PAD) for r in rows]
        expect_k = torch.cat([keys[r][m] for r, m in zip(rows, real)] or [keys.new_zeros(0, keys.size(2))])
        expect_v = torch.cat([states[r][m] for r, m in zip(rows, real)] or [states.new_zeros(0, 16)])
        tokens = sum([PAIRS[r][1] + [EOS] for r in rows], [])
        n = len(tokens)
        assert torch.allclose(enc["tm_keys"][0][b, :n], expect_k, atol=1e-6)
        assert torch.allclose(enc["tm_values"][0][b, :n], expect_v, atol=1e-6)
        assert enc["tm_tokens"][0][b, :n].tolist() == tokens
        M = enc["tm_padding_mask"][0].size(1)
        assert M == 10 and enc["tm_padding_mask"][0][b].tolist() == [False] * n + [True] * (M - n)
        pairs = sum([[k] * (len(PAIRS[r][1]) + 1) for k, r in enumerate(rows)], [])
        assert enc["tm_pair"][0][b, :n].tolist() == pairs and (enc["tm_pair"][0][b, n:] == -1).all()


def test_gather_slots_with_no_pair_anywhere():
    out = gather_slots({"keys": torch.zeros(0, 0, 4)}, torch.zeros(0, 0, dtype=torch.bool), torch.full((2, 0), -1))
    assert out["keys"].shape == (2, 0, 4) and out["padding_mask"].shape == (2, 0)


def coverage_run(model, src, lengths, prev, tm):
    """Step by step with an incremental state: (log p (B, T, V), β after each step (B, T, M))."""
    enc = model.encoder(src, lengths, **tm)
    state, outs, betas = {}, [], []
    for t in range(prev.size(1)):
        outs.append(model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0])
        betas.append(model.decoder.get_incremental_state(state, "state")["tm_coverage"])
    return torch.cat(outs, 1), torch.stack(betas, 1), enc


def test_scores_follow_eq_4_6_and_coverage_is_the_gated_sum_of_q():
    model = seg(tm_metric="full")
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        model.decoder.tm_metric.weight.add_(0.3 * torch.randn(model.decoder.tm_metric.weight.shape, generator=g))
        model.decoder.tm_coverage_weight.fill_(0.7)
    src, lengths, prev, tm = toy()
    with torch.no_grad():
        inc, beta, enc = coverage_run(model, src, lengths, prev, tm)
        full, extra = model.decoder(prev, encoder_out=enc)
    q, zeta = extra["tm_attn"][0], extra["tm_gate"][0]
    assert torch.allclose(inc, full, atol=1e-5)
    cum = torch.cumsum(q * zeta.unsqueeze(-1), dim=1)
    assert torch.allclose(beta, cum, atol=1e-6)  # β_t = Σ_{t' ≤ t} q_{t'} ζ_{t'} (Eq. 4.7)
    assert (beta[:, 1:] >= beta[:, :-1]).all() and bool((beta[:2, -1] > 0).any())
    # q_t = softmax(c_tᵀ M c'_τ − λ β_{t−1}) over the real slots (Eq. 4.6), c_t = the attention context
    ctx = torch.bmm(extra["attn"][0], enc["encoder_out"][0].transpose(0, 1))
    scores = torch.einsum("btc,cd,bmd->btm", ctx, model.decoder.tm_metric.weight, enc["tm_keys"][0])
    prev_beta = torch.cat([torch.zeros_like(beta[:, :1]), beta[:, :-1]], 1)
    scores = (scores - 0.7 * prev_beta).masked_fill(enc["tm_padding_mask"][0].unsqueeze(1), float("-inf"))
    assert torch.allclose(q[:2], torch.softmax(scores[:2], -1), atol=1e-5)
    assert torch.equal(q[2], torch.zeros_like(q[2]))  # the row without memory reads nothing
    assert torch.equal(q.masked_select(enc["tm_padding_mask"][0].unsqueeze(1).expand_as(q)),
                       torch.zeros(int(enc["tm_padding_mask"][0].sum()) * 6))


def test_no_coverage_means_no_beta_and_eq_4_2():
    model = seg(no_tm_coverage=True)
    src, lengths, prev, tm = toy()
    with torch.no_grad():
        enc = model.encoder(src, lengths, **tm)
        state = {}
        model.decoder(prev[:, :1], encoder_out=enc, incremental_state=state)
    assert "tm_coverage" not in model.decoder.get_incremental_state(state, "state")


@pytest.mark.parametrize("fusion", ["shallow", "deep"])
def test_absent_and_padded_pairs_get_zero_weight(fusion):
    """An example's output depends on its own pairs only: with an example without memory, or one with more
    pairs (more padding), in the batch, it is the same as alone; so is the example without memory."""
    model = seg(fusion=fusion)
    src, lengths, prev, tm = toy()
    with torch.no_grad():
        both = model(src, lengths, prev, **tm)[0]
        for b, (pairs, index) in enumerate([(PAIRS[:2], [[0, 1]]), (PAIRS[2:], [[0]]), ([], [[]])]):
            alone = model(src[b:b + 1], lengths[b:b + 1], prev[b:b + 1], **tm_inputs(pairs, index))[0]
            assert torch.allclose(alone, both[b:b + 1], atol=1e-5), b
        # pair order in the rows of the batch does not matter, only the order of tm_index
        swapped = tm_inputs([PAIRS[2], PAIRS[1], PAIRS[0]], [[2, 1], [0, -1], [-1, -1]])
        assert torch.allclose(model(src, lengths, prev, **swapped)[0], both, atol=1e-5)


def test_deep_fusion_reads_the_fused_state_in_the_readout_only():
    model = seg(fusion="deep")
    base = rnnsearch_twin(model)
    src, lengths, prev, tm = toy()
    fix_gate(model, 0.8)
    zeta = 1 / (1 + math.exp(-0.8))
    with torch.no_grad():
        enc = model.encoder(src, lengths, **tm)
        lp, extra = model.decoder(prev, encoder_out=enc)
        _, bex = base.decoder(prev, encoder_out=base.encoder(src, lengths), features_only=True)
        assert torch.allclose(extra["states"][0], bex["states"][0])  # the recurrence is rnnsearch's
        z_tilde = torch.bmm(extra["tm_attn"][0], enc["tm_values"][0])
        z = extra["states"][0]
        gate = extra["tm_gate"][0].unsqueeze(-1)
        assert torch.allclose(gate[:2], torch.full_like(gate[:2], zeta))
        z_fusion = gate * z_tilde + (1 - gate) * z  # Eq. 4.4
        ctx = torch.bmm(extra["attn"][0], enc["encoder_out"][0].transpose(0, 1))
        emb = model.decoder.embed_tokens(prev)
        o = torch.tanh(model.decoder.readout(torch.cat([z_fusion, emb, ctx], -1)))
        expected = torch.log_softmax(model.decoder.output_projection(o), -1)
    assert torch.allclose(lp, expected, atol=1e-5)


def test_gradients_reach_the_memory_encoding_end_to_end():
    """A word that occurs only in a retrieved source X' gets an embedding gradient: through the keys."""
    model = seg().train()
    src, lengths, prev, tm = toy()
    w = next(i for i in range(4, V) if not (src == i).any() and not (prev == i).any())
    pairs = [([w, 6, 7], [9, 10, 11])]
    tm = tm_inputs(pairs, [[0], [-1], [-1]])
    loss = loss_of(model, src, lengths, prev, "seg", **tm)
    loss.backward()
    assert model.encoder.embed_tokens.weight.grad[w].abs().sum() > 0
    assert model.decoder.tm_metric.weight.grad.abs().sum() > 0
    assert model.decoder.tm_coverage_weight.grad is not None and float(model.decoder.tm_coverage_weight.grad) != 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.zero_grad()
    loss_of(model, src, lengths, prev, "seg", **tm_inputs([], [[], [], []])).backward()  # no memory: no NaN
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_training_learns_to_copy_from_a_memory_that_holds_the_answer():
    """Alg. 2 on a toy batch whose retrieved target is the reference: the gate opens (ζ → 1 on the gold
    tokens), then the matching learns to point at the right slot (the loss falls below the ≈ 24·log 6 of a
    uniform read of the 6 slots)."""
    from fairseq_ext.criterions.seg_nmt_cross_entropy import SegNMTCrossEntropyCriterion

    model = seg().train()
    src, lengths, prev = toy_batch(bsz=4, src_len=7, tgt_len=6, seed=4)
    target = target_of(prev)
    pairs = [(src[b][src[b].ne(PAD)][:-1].tolist(), target[b][:-1].tolist()) for b in range(4)]
    tm = tm_inputs(pairs, [[0], [1], [2], [3]])
    sample = {"net_input": dict(src_tokens=src, src_lengths=lengths, prev_output_tokens=prev, **tm),
              "target": target, "ntokens": target.numel()}
    crit = SegNMTCrossEntropyCriterion(types.SimpleNamespace(target_dictionary=make_dictionary(V)))
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    losses, gates = [], []
    for _ in range(40):
        loss, _, log = crit(model, sample)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        gates.append(log["tm_gate"] / target.numel())
    assert gates[-1] > 0.95 > 0.5 > gates[0] and losses[-1] < 0.5 * 24 * math.log(6)


def test_tm_trace_gives_the_gate_and_the_argmax_slot_of_every_token():
    model = seg()
    src, lengths, prev, tm = toy()
    net = dict(src_tokens=src, src_lengths=lengths, **tm)
    tokens = target_of(prev)
    with torch.no_grad():
        trace = model.tm_trace(net, torch.tensor([0, 1, 2, 0]), torch.cat([tokens, tokens[:1]]))
        enc = model.encoder(src, lengths, **tm)
        _, extra = model.decoder(prev, encoder_out=enc)
    assert torch.allclose(trace["gate"][:3], extra["tm_gate"][0], atol=1e-6)
    assert torch.allclose(trace["gate"][3], extra["tm_gate"][0][0], atol=1e-6)
    slot = extra["tm_attn"][0][0].argmax(-1)
    assert trace["pair"][0].tolist() == enc["tm_pair"][0][0, slot].tolist()
    assert trace["slot_token"][0].tolist() == enc["tm_tokens"][0][0, slot].tolist()
    assert trace["position"][0].tolist() == enc["tm_position"][0][0, slot].tolist()
    assert (trace["pair"][2] == -1).all() and (trace["gate"][2] == 0).all()
    assert set(trace["pair"][1].tolist()) == {0}


def test_warm_start_from_rnnsearch_checkpoints():
    """A sentence checkpoint (rnnsearch_tiny / rnnsearch_bench) loads into seg_nmt_tiny / seg_nmt_bench: the
    sentence tensors are copied, M = I, λ = 0 and the gate keep their initialisation."""
    for base_arch, arch in [("rnnsearch_tiny", "seg_nmt_tiny"), ("rnnsearch_bench", "seg_nmt_bench")]:
        base = build_model(base_arch, vocab=V, seed=1)
        model = seg(arch, seed=2)
        gate = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("decoder.tm_gate")}
        model.load_state_dict(base.state_dict())
        own = model.state_dict()
        assert all(torch.equal(own[k], v) for k, v in base.state_dict().items())
        assert torch.equal(own["decoder.tm_metric.weight"], torch.ones(model.encoder.output_dim))
        assert float(own["decoder.tm_coverage_weight"]) == 0.0
        assert all(torch.equal(own[k], v) for k, v in gate.items())
        # a seg_nmt checkpoint loads strictly
        model.load_state_dict(seg(arch, seed=3).state_dict())


# ------------------------------------------------------------------------------------------ seg_copynet
def test_seg_copynet_copies_from_the_top1_retrieved_target():
    model = seg("seg_copynet_tiny")
    src, lengths, prev, tm = toy()
    with torch.no_grad():
        enc = model.encoder(src, lengths, **tm)
        feats, _ = model.decoder(prev, encoder_out=enc, features_only=True)
        out = model.decoder(prev, encoder_out=enc)[0]
        # only the first pair of an example counts: changing the second changes nothing
        other = tm_inputs(PAIRS[:2] + [([5], [44, 45])], [[0, 1], [2, -1], [-1, -1]])
        assert torch.equal(model(src, lengths, prev, **other)[0][0], out[0])
    gen, copy = feats[..., :V], feats[..., V:]
    assert enc["src_copy_ids"][0][0].tolist() == [9, 10, 11, EOS, PAD, PAD]  # Y' of pair 0
    # the selective read (Eq. 3.6) reads the states of Y': y_{t-1} = 10 at position 1 of Y' only
    seen, original = [], model.decoder.step_input
    model.decoder.step_input = lambda e, st, eo, step: seen.append(original(e, st, eo, step)[:, 16:]) or \
        original(e, st, eo, step)
    prev2 = prev.clone()
    prev2[0, 1:3] = torch.tensor([10, 40])
    with torch.no_grad():
        model.decoder(prev2, encoder_out=enc)
    zeta = torch.stack(seen, 1)
    assert torch.allclose(zeta[0, 1], enc["tm_states"][0][0, 1], atol=1e-6)
    assert torch.equal(zeta[0, 2], torch.zeros(32)) and torch.equal(zeta[0, 0], torch.zeros(32))
    assert enc["src_copy_mask"][0][0].tolist() == [True, True, True, False, False, False]
    assert torch.allclose(out.exp().sum(-1), torch.ones(3, 6), atol=1e-5)
    expected = gen[0, :, 10].exp() + copy[0, :, 1].exp()  # 10 = y'_1 of row 0's top pair
    assert torch.allclose(out[0, :, 10].exp(), expected, atol=1e-6)
    assert torch.equal(out[0, :, 40], gen[0, :, 40])  # not in Y': generate mode only
    assert torch.isinf(copy[2]).all()  # no retrieved pair: nothing to copy


def test_seg_copynet_without_memory_is_rnnsearch_and_decodes_incrementally():
    model = seg("seg_copynet_tiny")
    src, lengths, prev, tm = toy()
    none = tm_inputs([], [[], [], []])
    with torch.no_grad():
        base = build_model("rnnsearch_tiny", vocab=V)
        own = model.state_dict()
        E = 16
        for k, v in base.state_dict().items():
            own[k] = v if own[k].shape == v.shape else torch.cat([v[:, :E], torch.randn(v.size(0), 32)], 1)
        own["encoder.tm_embed_tokens.weight"] = own["decoder.embed_tokens.weight"]  # the same tensor
        model.load_state_dict(own)
        assert torch.allclose(model(src, lengths, prev, **none)[0],
                              base.get_normalized_probs(base(src, lengths, prev), log_probs=True), atol=1e-5)
        enc = model.encoder(src, lengths, **tm)
        state, outs = {}, []
        for t in range(prev.size(1)):
            if t == 2:
                idx = torch.tensor([1, 0, 0])
                enc = model.encoder.reorder_encoder_out(enc, idx)
                model.decoder.reorder_incremental_state_scripting(state, idx)
                prev, outs = prev.index_select(0, idx), [o.index_select(0, idx) for o in outs]
            outs.append(model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0])
        tm = dict(tm, tm_index=tm["tm_index"].index_select(0, idx))
        full = model(src.index_select(0, idx), lengths.index_select(0, idx), prev, **tm)[0]
    assert torch.allclose(torch.cat(outs, 1), full, atol=1e-5)

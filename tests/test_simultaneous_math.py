"""Simultaneous NMT with a learned READ/WRITE agent (Gu 2019 ch. 9), the math: the registrations, the latency
metrics (AP, CW, AL, DAL), the rewards, and learning (the ``simul_policy_gradient`` criterion, the frozen NMT) in
process on the tiny uni-directional NMT of ``conftest.py``. The environment and decoding are in
``test_simultaneous_incremental.py``, the command lines in ``test_simultaneous_cli.py``."""
import math
import random

import pytest
import torch
from fairseq import optim

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.__main__ import registrations
from fairseq_ext.generators.simultaneous import SimultaneousGenerator
from fairseq_ext.modules.actor_critic import sentence_bleu_plus1
from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.modules.latency import (
    READ,
    WRITE,
    average_lagging,
    average_proportion,
    consecutive_wait,
    delays_from_actions,
    differentiable_average_lagging,
    latency,
)
from fairseq_ext.modules.simultaneous.agent import AdvantageNormalizer
from fairseq_ext.modules.simultaneous.rewards import (
    RewardConfig,
    UnitMapper,
    prefix_bleu,
    returns_to_go,
    sentence_bleu0,
    trajectory_rewards,
)
from harness import build_model, make_dictionary, nmt_state, task_batch
from simul_toys import build


# ------------------------------------------------------------------------------------------ registrations
def test_registrations():
    regs = registrations()
    assert {"simul_agent", "simul_agent_tiny"} <= set(regs["architectures"])
    assert "simul_agent" in regs["models"]
    assert "simul_policy_gradient" in regs["criterions"]
    assert "simul_rl_translation" in regs["tasks"]


def test_environment_presets():
    thesis = build_model("rnnsearch_gu_wmt15_uni", device="meta")
    assert thesis.encoder.rnn.directions == 1 and thesis.decoder.hidden_size == 1028
    assert thesis.decoder.embed_tokens.embedding_dim == 512 and thesis.decoder.transition.variant == "conditional"
    tiny = build_model("rnnsearch_tiny", encoder_unidirectional=True)
    assert tiny.encoder.rnn.directions == 1 and tiny.decoder.hidden_size == 16


# ------------------------------------------------------------------------------------------ latency metrics
def test_delays_ap_cw_on_hand_made_action_sequences():
    # |X| = 4 (x_1 pre-read): W R W R R W W  -> delays 1, 2, 4, 4
    acts = "WRWRRWW"
    assert delays_from_actions(acts, 4) == [1, 2, 4, 4]
    assert delays_from_actions([WRITE, READ, WRITE, READ, READ, WRITE, WRITE], 4) == [1, 2, 4, 4]
    assert average_proportion([1, 2, 4, 4], 4) == pytest.approx(11 / 16)
    assert consecutive_wait(acts) == pytest.approx((1 + 2) / 2)  # READ runs of 1 and 2 before WRITEs
    # WUE on |X| = 5, 3 words: 4 READs then 3 WRITEs: AP = 5*3/(5*3) = 1, CW = 4
    wue = "RRRRWWW"
    assert delays_from_actions(wue, 5) == [5, 5, 5]
    assert average_proportion(delays_from_actions(wue, 5), 5) == 1.0 and consecutive_wait(wue) == 4.0
    # WOS: W R W R ... -> g(τ) = τ; CW = 1; no READ at all -> CW 0
    assert delays_from_actions("WRWRW", 3) == [1, 2, 3] and consecutive_wait("WRWRW") == 1.0
    assert consecutive_wait("WWW") == 0.0
    # READs after the end are no-ops for the delays
    assert delays_from_actions("RRRRW", 2) == [2]
    with pytest.raises(ValueError):
        delays_from_actions("WXR", 3)


def test_al_and_dal_follow_their_published_definitions():
    # SimulEval's own example: delays 1 1 2 3 5 7 7 9, |X| = 9, |Y| = 8 (γ = 8/9)
    d, src = [1, 1, 2, 3, 5, 7, 7, 9], 9
    gamma = 8 / 9
    # AL (Ma et al. 2019): τ_g = 8 (first g(τ) = |X|), (1/τ_g) Σ_{τ≤τ_g} g(τ) − (τ−1)/γ
    al = sum(g - t / gamma for t, g in enumerate(d)) / 8
    assert average_lagging(d, src) == pytest.approx(al)
    assert average_lagging(d, src) == pytest.approx((35 - 28 * 9 / 8) / 8)
    # with the reference length (SimulEval's γ = |Y*|/|X|)
    assert average_lagging(d, src, tgt_len=10) == pytest.approx(sum(g - t * 9 / 10 for t, g in enumerate(d)) / 8)
    # the sum stops at the first τ with g(τ) = |X|: later words do not count
    assert average_lagging([2, 4, 4, 4], 4) == pytest.approx(((2 - 0) + (4 - 1)) / 2)
    # wait-k on equal lengths: AL = k - ... : |X| = |Y| = 6, k = 2 -> g = 2,3,4,5,6,6, τ_g = 5, AL = 2
    assert average_lagging([2, 3, 4, 5, 6, 6], 6) == pytest.approx(2.0)
    # DAL (Cherry & Foster 2019): g'(τ) = max(g(τ), g'(τ−1) + 1/γ)
    gp, total = [], 0.0
    for t, g in enumerate(d):
        gp.append(g if t == 0 else max(g, gp[-1] + 1 / gamma))
        total += gp[-1] - t / gamma
    assert differentiable_average_lagging(d, src) == pytest.approx(total / 8)
    # WUE: every word after the whole source: DAL = |X| + (|Y|−1)/2 · (1/γ) ... by hand for |X| = 4, |Y| = 2
    # g' = 4, 4 + 2 = 6 (1/γ = 2); DAL = ((4 − 0) + (6 − 2))/2 = 4
    assert differentiable_average_lagging([4, 4], 4) == pytest.approx(4.0)
    assert average_lagging([4, 4], 4) == pytest.approx(4.0)
    assert average_lagging([6], 4) == 6.0  # g(1) > |X|: SimulEval's convention
    lat = latency("WRWRRWW", 4)
    assert lat["delays"] == [1, 2, 4, 4] and lat["ap"] == pytest.approx(11 / 16) and lat["cw"] == 1.5


# ------------------------------------------------------------------------------------------ rewards
def test_bleu0_times_bp_is_the_sibling_bleu_plus1():
    rng = random.Random(0)
    pairs = [([rng.randint(4, 9) for _ in range(rng.randint(0, 10))],
              [rng.randint(4, 9) for _ in range(rng.randint(1, 10))]) for _ in range(40)]
    pairs += [([5, 6, 7], [5, 6, 7]), ([], [5]), ([5, 6], [5, 6, 7, 8, 9])]
    T = 12
    hyp, ref = torch.full((len(pairs), T), 1), torch.full((len(pairs), T), 1)
    for i, (h, r) in enumerate(pairs):
        hyp[i, : len(h)] = torch.tensor(h, dtype=torch.long)
        ref[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    hl, rl = torch.tensor([len(h) for h, _ in pairs]), torch.tensor([len(r) for _, r in pairs])
    b0, bp = sentence_bleu0(hyp, hl, ref, rl)
    assert torch.allclose((b0 * bp).float(), sentence_bleu_plus1(hyp, hl, ref, rl), atol=1e-6)
    # by hand: "a b" vs "a b c d e": p1 = 1, p2 = (1+1)/(1+1), p3 = 1/1, p4 = 1/1 -> BLEU⁰ = 1, BP = exp(1 − 5/2)
    assert float(b0[-1]) == pytest.approx(1.0) and float(bp[-1]) == pytest.approx(math.exp(1 - 5 / 2))
    assert float(b0[-2]) == 0.0  # empty hypothesis


def test_bleu0_increments_sum_to_the_final_sentence_bleu():
    rng = random.Random(1)
    cfg = RewardConfig(delay_type="ap", beta=0.0)
    for _ in range(20):
        ref = [rng.randint(4, 9) for _ in range(rng.randint(2, 9))]
        words = [rng.randint(4, 9) for _ in range(rng.randint(1, 9))] + [2]  # ends in </s>
        actions = [READ] * rng.randint(0, 3)
        for _w in words:
            actions += [WRITE] + [READ] * rng.randint(0, 2)
        while actions[-1] == READ:
            actions.pop()
        mapper = UnitMapper(make_dictionary(12))
        b0, final = prefix_bleu([mapper.prefixes(words)], [mapper.units(ref)])
        rew = trajectory_rewards(actions, b0[0], final[0], 10, cfg)
        expected = float(sentence_bleu_plus1(torch.tensor([words[:-1]]), torch.tensor([len(words) - 1]),
                                             torch.tensor([ref]), torch.tensor([len(ref)])))
        b0_full, bp_full = sentence_bleu0(torch.tensor([words[:-1]]), torch.tensor([len(words) - 1]),
                                          torch.tensor([ref]), torch.tensor([len(ref)]))
        assert final[0] == pytest.approx(float(b0_full * bp_full), abs=1e-12)
        for tau in range(1, len(words)):  # the incremental BLEU⁰ of every prefix = the batched one
            b0_tau, _ = sentence_bleu0(torch.tensor([words[:tau]]), torch.tensor([tau]), torch.tensor([ref]),
                                       torch.tensor([len(ref)]))
            assert b0[0][tau] == pytest.approx(float(b0_tau), abs=1e-12)
        assert sum(rew["quality"]) == pytest.approx(final[0], abs=1e-12)  # Σ_t r^Q_t = BLEU(Y, Y*)
        assert sum(rew["quality"]) == pytest.approx(expected, abs=1e-6)  # = the sibling's BLEU+1
        assert sum(rew["rewards"]) == pytest.approx(final[0], abs=1e-12)  # β = 0
        assert all(q == 0.0 for q, a in zip(rew["quality"], actions) if a == READ)
        # before the last step the increments are those of BLEU⁰ (no brevity penalty)
        assert sum(rew["quality"][:-1]) == pytest.approx(b0[0][-2], abs=1e-9)
    # literal Eq. 9.6: r_T = BLEU(Y)
    lit = trajectory_rewards([WRITE, WRITE], [0.0, 0.5, 0.5], 0.3, 3, RewardConfig(quality="literal"))
    assert lit["quality"] == [0.5, 0.3]


def test_word_level_reward_units_merge_sentencepiece():
    d = make_dictionary(8)
    for s in ["▁the", "▁ca", "t", "▁sat"]:
        d.add_symbol(s)
    ids = [d.index(s) for s in ["▁the", "▁ca", "t", "▁sat"]] + [d.eos()]
    words = UnitMapper(d, "sentencepiece")
    prefixes = words.prefixes(ids)
    assert len(prefixes) == 5 and prefixes[-1] == prefixes[-2]  # </s> adds no unit
    assert prefixes[1][1] != prefixes[2][1]  # "ca" (partial) then "cat"
    assert words.units(ids) == prefixes[-1] and len(prefixes[-1]) == 3
    assert UnitMapper(d).units(ids) == ids[:-1]  # subword units, </s> dropped


def test_delay_rewards_ap_at_the_end_and_the_cw_step_penalty():
    acts = [READ, READ, WRITE, READ, WRITE, WRITE]  # |X| = 4: delays 3, 4, 4; AP = 11/12
    b0 = [0.0, 0.0, 0.0, 0.0]
    ap = trajectory_rewards(acts, b0, 0.0, 4, RewardConfig(delay_type="ap", target_ap=0.5, beta=-2.0))
    assert ap["ap"] == pytest.approx(11 / 12)
    assert ap["delay"][:-1] == [0.0] * 5 and ap["delay"][-1] == pytest.approx(-2.0 * (11 / 12 - 0.5))
    assert trajectory_rewards(acts, b0, 0.0, 4, RewardConfig(target_ap=0.95))["delay"][-1] == 0.0
    # Eq. 9.9, CW: α[sgn(c_t − c*) + 1]: c = 1, 2, 0, 1, 0, 0 with c* = 1 -> 1, 2, 0, 1, 0, 0 times α
    cw = trajectory_rewards(acts, b0, 0.0, 4, RewardConfig(delay_type="cw", target_cw=1, alpha=-0.1))
    assert cw["delay"] == pytest.approx([-0.1, -0.2, 0.0, -0.1, 0.0, 0.0])
    lin = trajectory_rewards(acts, b0, 0.0, 4, RewardConfig(delay_type="cw", target_cw=1, alpha=-0.1,
                                                           cw_penalty="linear"))
    assert lin["delay"] == pytest.approx([0.0, -0.1, 0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        RewardConfig(alpha=0.1)


def test_returns_to_go_and_running_advantage_normalisation():
    r = torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    assert torch.equal(returns_to_go(r, mask), torch.tensor([[3.0, 2.0, 2.0, 0.0], [1.0, 0.5, 0.0, 0.0]]))
    norm = AdvantageNormalizer(momentum=0.5)
    a = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
    m = torch.ones(2, 2, dtype=torch.bool)
    out = norm(a, m)  # first batch: its own statistics
    assert float(norm.mean) == pytest.approx(4.0) and float(norm.var) == pytest.approx(5.0)
    assert torch.allclose(out, (a - 4.0) / math.sqrt(5.0 + 1e-8))
    norm(a + 2.0, m)  # EMA: mean 0.5*4 + 0.5*6
    assert float(norm.mean) == pytest.approx(5.0) and int(norm.count) == 2
    assert torch.allclose(norm(a, m, mode="batch", update=False), (a - 4.0) / math.sqrt(5.0 + 1e-8))
    assert float(norm.mean) == pytest.approx(5.0)


# ------------------------------------------------------------------------------------------ learning
def test_agent_update_leaves_the_nmt_bit_identical(tiny_bin, uni_nmt_ckpt):
    cfg, task, model, criterion = build(tiny_bin, uni_nmt_ckpt, "--traj-per-sent", "3")
    model.train()
    assert not model.encoder.training and not model.decoder.training and model.agent.training
    assert not any(p.requires_grad for p in [*model.encoder.parameters(), *model.decoder.parameters()])
    params = [p for p in model.parameters() if p.requires_grad]
    assert len(params) == len(list(model.agent.parameters()))
    optimizer = optim.build_optimizer(cfg.optimizer, params)
    frozen = nmt_state(model)
    before = {k: v.clone() for k, v in model.agent.state_dict().items()}
    sample = task_batch(task, n=4, split="train")
    optimizer.zero_grad()
    loss, sample_size, log = task.train_step(sample, model, criterion, optimizer, 0)
    assert sample_size == 12 and log["traj"] == 12
    optimizer.step()
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in frozen.items())
    moved = [k for k, v in model.agent.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("rnn.") for k in moved) and any(k.startswith("baseline.") for k in moved)
    assert int(model.agent.adv_norm.count) == 1


def test_policy_gradient_loss_pieces(tiny_bin, uni_nmt_ckpt):
    """The baseline gets gradient only from its regression, the policy only from −log π R̃ − κ𝓗."""
    _, task, model, criterion = build(tiny_bin, uni_nmt_ckpt, "--traj-per-sent", "2", "--entropy-coef", "0",
                                      "--baseline-coef", "0")
    model.train()
    torch.manual_seed(1)
    loss, _, log = criterion(model, task_batch(task, n=3, split="train"))
    loss.backward()
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0 for p in model.agent.baseline.parameters())
    assert float(model.agent.out.weight.grad.abs().sum()) > 0
    assert log["writes"] > 0 and 0 <= log["bleu"] <= 100 * log["traj"]


def test_entropy_bonus_default_and_term(tiny_bin, uni_nmt_ckpt, monkeypatch):
    """κ (``--entropy-coef``) defaults to 0.001 (thesis §9.4.3) in the criterion's config and the built
    criterion; on the same sampled trajectories (same seed, same advantage statistics) the loss with κ > 0 is
    the κ = 0 loss minus κ·Σ_t 𝓗(π_θ(·|t)) (Eq. 9.10's entropy bonus), the entropies computed by hand from the
    agent's logits (W s_t + b, Eq. 9.4) over the chosen (active, not forced) steps; the logged ``entropy`` is
    that sum and ``entropy`` / ``entropy_n`` its mean per step."""
    from fairseq_ext.criterions.simul_policy_gradient import SimulPolicyGradientConfig

    assert SimulPolicyGradientConfig().entropy_coef == 0.001
    cfg, task, model, criterion = build(tiny_bin, uni_nmt_ckpt, "--traj-per-sent", "3")
    assert cfg.criterion.entropy_coef == 0.001 and criterion.entropy_coef == 0.001
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():  # a random policy (the baseline keeps its small initial weights: a loss of order 1)
        for w in [*model.agent.rnn.parameters(), *model.agent.out.parameters()]:
            w.copy_(torch.randn(w.shape, generator=g))
    model.train()
    sample = task_batch(task, n=3, split="train")
    stats = {k: v.clone() for k, v in model.agent.adv_norm.state_dict().items()}
    logits, rollouts = [], []
    model.agent.out.register_forward_hook(lambda mod, inp, out: logits.append(out.detach().double()))
    rollout = criterion.rollouts
    monkeypatch.setattr(criterion, "rollouts", lambda *a, **k: rollouts.append(rollout(*a, **k)) or rollouts[-1])

    def run(kappa):
        model.agent.adv_norm.load_state_dict(stats)  # the running statistics the update starts from
        logits.clear()
        criterion.entropy_coef = kappa
        torch.manual_seed(7)
        loss, n, log = criterion(model, sample)
        return float(loss), n, log, torch.stack(logits, 1)  # (R, T, 2)

    loss0, n, log0, _ = run(0.0)
    for kappa in (0.001, 0.5):
        loss, n_k, log, lg = run(kappa)
        env0, env = rollouts[0][0], rollouts[-1][0]
        assert n_k == n == 9 and env.actions == env0.actions and env.tokens == env0.tokens  # same trajectories
        p = torch.softmax(lg, -1)
        hand = -(p * torch.log_softmax(lg, -1)).sum(-1)  # 𝓗 of each row at each step
        chosen = torch.stack([h["active"] & ~h["forced"] for h in env.history], 1)
        assert chosen.shape == hand.shape[:2] and int(chosen.sum()) == log["entropy_n"]
        assert 0 < int(chosen.sum()) < chosen.numel()  # some trajectories end before others
        total = float((hand * chosen).sum())
        assert log["entropy"] == pytest.approx(total, rel=1e-5)
        assert 0 < log["entropy"] / log["entropy_n"] < math.log(2)
        assert log["pg_loss"] == pytest.approx(log0["pg_loss"], rel=1e-6)
        assert log["baseline_mse"] == pytest.approx(log0["baseline_mse"], rel=1e-6)
        assert loss0 - loss == pytest.approx(kappa * total, rel=1e-3)  # L(κ) = L(0) − κ Σ_t 𝓗


def test_validation_decodes_with_the_argmax_agent(simul_built):
    _, task, model, criterion = simul_built
    model.eval()
    sample = task_batch(task, n=4, split="valid")
    with torch.no_grad():
        loss, n, log = criterion(model, sample)
        again = criterion(model, sample)[2]
    assert n == 4 and log["traj"] == 4 and log == again  # deterministic
    assert loss.item() == pytest.approx(log["loss"]) and not loss.requires_grad


def test_cw_reward_words_forced_writes_and_batch_normalisation(tiny_bin, uni_nmt_ckpt):
    """The other reward settings through one update: CW delay (linear penalty), word-level BLEU rewards,
    forced WRITEs in training (no gradient on them), per-batch advantage normalisation (no statistics kept)."""
    cfg, task, model, criterion = build(tiny_bin, uni_nmt_ckpt, "--delay-type", "cw", "--target-cw", "2",
                                        "--cw-penalty", "linear", "--reward-bpe", "sentencepiece",
                                        "--train-force-write", "--adv-norm", "batch", "--traj-per-sent", "2")
    assert criterion.reward_cfg.delay_type == "cw" and criterion.units.bpe == "sentencepiece"
    optimizer = optim.build_optimizer(cfg.optimizer, [p for p in model.parameters() if p.requires_grad])
    frozen = nmt_state(model)
    loss, n, log = task.train_step(task_batch(task, n=3, split="train"), model, criterion, optimizer, 0)
    optimizer.step()
    assert n == 6 and torch.isfinite(torch.tensor(log["loss"]))
    assert int(model.agent.adv_norm.count) == 0
    assert all(torch.equal(model.state_dict()[k], v) for k, v in frozen.items())
    with pytest.raises(ValueError, match="simul_agent"):  # the agent policy needs an agent
        nmt = load_ensemble([str(uni_nmt_ckpt)], task=task, frozen=True)[0][0]
        SimultaneousGenerator([nmt], task.target_dictionary, policy="agent")

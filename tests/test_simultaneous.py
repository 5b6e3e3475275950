"""Simultaneous NMT with a learned READ/WRITE agent (Gu 2019 ch. 9): the environment on a frozen uni-directional
``rnnsearch`` (``rnnsearch_gu_wmt15_uni``), the ``simul_agent`` model, the ``simul_policy_gradient`` criterion, the
``simul_rl_translation`` task with its ``simul_greedy`` / ``simul_beam`` generators and baselines, the latency
metrics and the ``simul_latency`` scorer — the math in-process on a tiny NMT trained in a fixture, and the
fairseq command lines (training, kill + resume, decoding)."""
import json
import math
import random
from dataclasses import dataclass
from typing import Optional

import pytest
import torch
from fairseq import optim, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.__main__ import registrations
from fairseq_ext.generators.decoding import GreedyGenerator
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
from fairseq_ext.modules.simultaneous.agent import AdvantageNormalizer, SimulAgent
from fairseq_ext.modules.simultaneous.environment import SimulEnvironment
from fairseq_ext.modules.simultaneous.policies import WaitIfWorse, build_policy
from fairseq_ext.modules.simultaneous.rewards import (
    RewardConfig,
    UnitMapper,
    prefix_bleu,
    returns_to_go,
    sentence_bleu0,
    trajectory_rewards,
)
from fairseq_ext.modules.simultaneous.search import run_episode, simultaneous_beam_search
from fairseq_ext.modules.simultaneous.streaming import StreamingSimulTranslator
from fairseq_ext.tools.evaluation import simul_latency
from fairseq_ext.tools.common import cli_status
from harness import TINY, build_model, fairseq, hypotheses, make_dictionary, n_lines, toy_batch, train

UNI_NMT = ["--arch", "rnnsearch_tiny", "--encoder-unidirectional"]


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def nmt_ckpt(tiny_bin, tmp_path_factory):
    """The frozen environment: rnnsearch_tiny --encoder-unidirectional (uni-GRU encoder), 30 MLE updates on the tiny slice."""
    return train(tiny_bin, tmp_path_factory.mktemp("simul_nmt"), UNI_NMT, task="translation_decoding",
                 criterion="cross_entropy", max_update=30)


def agent_args(tiny_bin, nmt, *extra, arch="simul_agent_tiny"):
    return [str(tiny_bin), "--task", "simul_rl_translation", "--arch", arch, "--nmt-path", str(nmt),
            "--criterion", "simul_policy_gradient", "--optimizer", "adam", "--lr", "2e-3", "--lr-scheduler", "fixed",
            "--simul-max-len-a", "0.5", "--simul-max-len-b", "5", "--cpu", "--seed", "1", *extra]


def build(tiny_bin, nmt, *extra, arch="simul_agent_tiny"):
    """(cfg, task, model, criterion) exactly as fairseq-train builds them."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, agent_args(tiny_bin, nmt, *extra, arch=arch))
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return cfg, task, model, task.build_criterion(cfg.criterion)


def batch(task, n=6, split="test", start=0):
    task.load_dataset(split)
    ds = task.dataset(split)
    return ds.collater([ds[i] for i in range(start, start + n)])


def randomise_agent(model, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.agent.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def nmt_tensors(model):
    return {k: v.clone() for k, v in model.state_dict().items() if k.startswith(("encoder.", "decoder."))}


@pytest.fixture(scope="module")
def built(tiny_bin, nmt_ckpt):
    return build(tiny_bin, nmt_ckpt)


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


# ------------------------------------------------------------------------------------------ environment
def test_prefix_encoder_is_causal_and_bidirectional_encoders_are_refused():
    model = build_model("rnnsearch_tiny", encoder_unidirectional=True)
    src, lengths, _ = toy_batch(bsz=3, src_len=7)
    with torch.no_grad():
        full = model.encoder(src, src_lengths=lengths)["encoder_out"][0].transpose(0, 1)
        env = SimulEnvironment(model, src, lengths)
        for eta in range(1, 6):
            states = env.prefix_states(eta)
            for r in range(3):
                real = src[r][src[r].ne(1)]
                alone = model.encoder(real[:eta].unsqueeze(0))["encoder_out"][0][:, 0]  # the prefix on its own
                assert torch.allclose(states[r], alone, atol=1e-6)
                assert torch.equal(states[r], full[r][src[r].ne(1)][:eta])
        # a later source word never changes an earlier state
        changed = src.clone()
        changed[:, -2] = 7
        other = model.encoder(changed, src_lengths=lengths)["encoder_out"][0].transpose(0, 1)
        assert torch.equal(other[:, :-2], full[:, :-2]) and not torch.equal(other[:, -2], full[:, -2])
    with pytest.raises(ValueError, match="uni-directional"):
        SimulEnvironment(build_model("rnnsearch_tiny"), src, lengths)


def test_attention_covers_the_read_prefix_and_a_prefix_is_decoded_like_a_short_sentence():
    """Before the first WRITE the candidate with η words read is the first step of the NMT on x_{1:η} alone
    (φ_INIT recomputed from the prefix, attention over it only)."""
    model = build_model("rnnsearch_tiny", encoder_unidirectional=True)
    src, lengths, _ = toy_batch(bsz=2, src_len=6)
    with torch.no_grad():
        env = SimulEnvironment(model, src, lengths)
        for eta in (1, 3):
            cand = env.observe(torch.full((2,), eta))
            for r in range(2):
                real = src[r][src[r].ne(1)][:eta].unsqueeze(0)
                enc = model.encoder(real)
                out, extra = model.decoder(torch.tensor([[2]]), encoder_out=enc)
                lp = model.get_normalized_probs((out, None), log_probs=True)[0, 0]
                lp[1] = -math.inf
                lp[2] = -math.inf  # min_len 1
                assert torch.allclose(cand.lprobs[r], lp, atol=1e-5)
                assert int(cand.token[r]) == int(lp.argmax())
            enc_eta = env.prefix_encoder_out(torch.full((2,), eta))
            mask = enc_eta["encoder_padding_mask"][0]
            assert mask.logical_not().sum(1).tolist() == [eta, eta]


def test_wue_equals_full_sentence_greedy_of_the_uni_directional_nmt(built, nmt_ckpt):
    _, task, model, _ = built
    nmt = load_ensemble([str(nmt_ckpt)], task=task, frozen=True)[0][0]
    sample = batch(task, n=8)
    greedy = GreedyGenerator([nmt], task.target_dictionary, max_len_a=0, max_len_b=12).generate([nmt], sample)
    for m in (nmt, model):  # the plain NMT checkpoint and the agent's frozen copy
        wue = SimultaneousGenerator([m], task.target_dictionary, policy="wue", max_len_a=0,
                                    max_len_b=12).generate([m], sample)
        for g, w in zip(greedy, wue):
            assert torch.equal(g[0]["tokens"], w[0]["tokens"])
            assert torch.allclose(g[0]["positional_scores"], w[0]["positional_scores"], atol=1e-5)
            assert set(w[0]["delays"]) == {w[0]["src_len"]} and w[0]["latency"]["ap"] == 1.0


def test_wait_k_and_wos_delays(built):
    _, task, model, _ = built
    sample = batch(task, n=6)
    for policy, k in (("wos", 1), ("waitk", 3)):
        hyps = SimultaneousGenerator([model], task.target_dictionary, policy=policy, waitk=k, max_len_b=20
                                     ).generate([model], sample)
        for h in hyps:
            d, s = h[0]["delays"], h[0]["src_len"]
            assert d == [min(k + t, s) for t in range(len(d))]
            assert int(h[0]["tokens"][-1]) == 2 and int((h[0]["tokens"] == 2).sum()) == 1


def peaky_model(seed=0, scale=4.0):
    """A random uni-directional rnnsearch_tiny whose weights are scaled up: its outputs depend on the source."""
    model = build_model("rnnsearch_tiny", seed=seed, encoder_unidirectional=True)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


@pytest.mark.parametrize("diff", [False, True])
def test_wiw_and_wid_pre_read_and_compare(diff):
    """WIW: READ when the pre-READ lowers the candidate's probability; WID: when it changes the argmax."""
    model = peaky_model()
    src, lengths, _ = toy_batch(bsz=6, src_len=9, seed=2)
    with torch.no_grad():
        env = SimulEnvironment(model, src, lengths, max_len_b=20)
        policy = WaitIfWorse(diff=diff)
        n_read = 0
        while not bool(env.done.all()):
            cand = env.observe()
            peek = env.observe(env.eta + 1)
            if diff:
                wait = peek.token.ne(cand.token)
            else:
                wait = peek.lprobs.gather(1, cand.token[:, None])[:, 0] < cand.score
            expected = ~(wait & ~env.source_done)
            write = policy.act(env, cand)
            assert torch.equal(write, expected)
            n_read += int((~write & ~env.done).sum())
            env.step(write, cand)
    assert n_read > 0 and sum(r.count(WRITE) for r in env.actions) > 0


def test_agent_never_writes_past_eos_and_forced_write_after_the_end(built):
    _, task, model, _ = built
    randomise_agent(model, seed=3)
    sample = batch(task, n=6)
    net = sample["net_input"]
    torch.manual_seed(0)
    for force in (False, True):
        env = SimulEnvironment(model, net["src_tokens"].repeat(3, 1), net["src_lengths"].repeat(3),
                               max_len_b=8, force_write_at_end=force)
        with torch.no_grad():
            results = run_episode(env, build_policy("agent", model, rows=env.rows, sample=True))
        for res in results:
            toks = res["tokens"].tolist()
            assert 2 not in toks[:-1]  # nothing after </s>
            assert len(toks) <= int(env.tau_max.max()) + 1
            assert sum(res["actions"]) == len(toks) == len(res["delays"])
            if force:
                assert toks[-1] == 2
                assert len(res["actions"]) <= res["src_len"] - 1 + len(toks)  # no READ after the source end
        # the rows whose trajectory ended take no more actions
        steps = torch.stack([h["active"] for h in env.history], 1).sum(1).tolist()
        assert steps == [len(r["actions"]) for r in results]


def test_simultaneous_beam_collapses_on_read_and_beam_one_is_greedy(built):
    _, task, model, _ = built
    randomise_agent(model, seed=5)
    sample = batch(task, n=5)
    net = sample["net_input"]
    greedy = SimultaneousGenerator([model], task.target_dictionary, policy="agent", max_len_b=15).generate(
        [model], sample)
    one = SimultaneousGenerator([model], task.target_dictionary, policy="agent", beam_size=1, max_len_b=15)
    wide_sizes = []
    for i in range(5):
        src, lengths = net["src_tokens"][i: i + 1], net["src_lengths"][i: i + 1]
        env = SimulEnvironment(model, src, lengths, max_len_b=15)
        res1 = simultaneous_beam_search(env, build_policy("agent", model, rows=1), 1)
        assert res1["tokens"].tolist() == greedy[i][0]["tokens"].tolist()
        assert res1["actions"] == [WRITE if a == "W" else READ for a in greedy[i][0]["actions"]]
        trace = []
        env = SimulEnvironment(model, src, lengths, max_len_b=15)
        res = simultaneous_beam_search(env, build_policy("agent", model, rows=1), 3, trace=trace)
        assert [a for a, _ in trace] == res["actions"]
        assert all(size == 1 for a, size in trace if a == READ)  # collapsed on every READ
        assert all(1 <= size <= 3 for _, size in trace)
        wide_sizes += [size for a, size in trace if a == WRITE]
        assert res["tokens"].tolist()[-1] == 2 and 2 not in res["tokens"].tolist()[:-1]
        assert len(res["delays"]) == len(res["tokens"])
    assert max(wide_sizes) == 3
    assert one.beam_size == 1
    # a policy that ignores the words (wait-k) gives the beam the same delays as greedy decoding
    for i in range(3):
        src, lengths = net["src_tokens"][i: i + 1], net["src_lengths"][i: i + 1]
        g = run_episode(SimulEnvironment(model, src, lengths, max_len_b=15), build_policy("waitk", waitk=2))[0]
        b = simultaneous_beam_search(SimulEnvironment(model, src, lengths, max_len_b=15),
                                     build_policy("waitk", waitk=2), 4)
        n = min(len(g["delays"]), len(b["delays"]))
        assert g["delays"][:n] == b["delays"][:n]


# ------------------------------------------------------------------------------------------ learning
def test_agent_update_leaves_the_nmt_bit_identical(tiny_bin, nmt_ckpt):
    cfg, task, model, criterion = build(tiny_bin, nmt_ckpt, "--traj-per-sent", "3")
    model.train()
    assert not model.encoder.training and not model.decoder.training and model.agent.training
    assert not any(p.requires_grad for p in [*model.encoder.parameters(), *model.decoder.parameters()])
    params = [p for p in model.parameters() if p.requires_grad]
    assert len(params) == len(list(model.agent.parameters()))
    optimizer = optim.build_optimizer(cfg.optimizer, params)
    frozen = nmt_tensors(model)
    before = {k: v.clone() for k, v in model.agent.state_dict().items()}
    sample = batch(task, n=4, split="train")
    optimizer.zero_grad()
    loss, sample_size, log = task.train_step(sample, model, criterion, optimizer, 0)
    assert sample_size == 12 and log["traj"] == 12
    optimizer.step()
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in frozen.items())
    moved = [k for k, v in model.agent.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("rnn.") for k in moved) and any(k.startswith("baseline.") for k in moved)
    assert int(model.agent.adv_norm.count) == 1


def test_policy_gradient_loss_pieces(tiny_bin, nmt_ckpt):
    """The baseline gets gradient only from its regression, the policy only from −log π R̃ − κ𝓗."""
    _, task, model, criterion = build(tiny_bin, nmt_ckpt, "--traj-per-sent", "2", "--entropy-coef", "0",
                                      "--baseline-coef", "0")
    model.train()
    torch.manual_seed(1)
    loss, _, log = criterion(model, batch(task, n=3, split="train"))
    loss.backward()
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0 for p in model.agent.baseline.parameters())
    assert float(model.agent.out.weight.grad.abs().sum()) > 0
    assert log["writes"] > 0 and 0 <= log["bleu"] <= 100 * log["traj"]


def test_entropy_bonus_default_and_term(tiny_bin, nmt_ckpt, monkeypatch):
    """κ (``--entropy-coef``) defaults to 0.001 (thesis §9.4.3) in the criterion's config and the built
    criterion; on the same sampled trajectories (same seed, same advantage statistics) the loss with κ > 0 is
    the κ = 0 loss minus κ·Σ_t 𝓗(π_θ(·|t)) (Eq. 9.10's entropy bonus), the entropies computed by hand from the
    agent's logits (W s_t + b, Eq. 9.4) over the chosen (active, not forced) steps; the logged ``entropy`` is
    that sum and ``entropy`` / ``entropy_n`` its mean per step."""
    from fairseq_ext.criterions.simul_policy_gradient import SimulPolicyGradientConfig

    assert SimulPolicyGradientConfig().entropy_coef == 0.001
    cfg, task, model, criterion = build(tiny_bin, nmt_ckpt, "--traj-per-sent", "3")
    assert cfg.criterion.entropy_coef == 0.001 and criterion.entropy_coef == 0.001
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():  # a random policy (the baseline keeps its small initial weights: a loss of order 1)
        for w in [*model.agent.rnn.parameters(), *model.agent.out.parameters()]:
            w.copy_(torch.randn(w.shape, generator=g))
    model.train()
    sample = batch(task, n=3, split="train")
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


def test_validation_decodes_with_the_argmax_agent(built):
    _, task, model, criterion = built
    model.eval()
    sample = batch(task, n=4, split="valid")
    with torch.no_grad():
        loss, n, log = criterion(model, sample)
        again = criterion(model, sample)[2]
    assert n == 4 and log["traj"] == 4 and log == again  # deterministic
    assert loss.item() == pytest.approx(log["loss"]) and not loss.requires_grad


# ------------------------------------------------------------------------------------------ command lines
AGENT_TRAIN = ["--traj-per-sent", "2", "--batch-size", "4", "--no-progress-bar", "--log-format", "simple",
               "--log-interval", "1", "--no-epoch-checkpoints", "--disable-validation"]


def train_agent(tiny_bin, nmt, save_dir, max_update, *extra, arch="simul_agent"):
    fairseq("train", *agent_args(tiny_bin, nmt, *AGENT_TRAIN, "--max-update", max_update, "--save-dir", save_dir,
                                 *extra, arch=arch), user_dir=True)
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def agent_ckpt(tiny_bin, nmt_ckpt, tmp_path_factory):
    """fairseq-train the thesis-size agent (``--arch simul_agent``: 512 GRU units) 4 updates from the tiny
    uni-directional NMT, with the default rewards (AP target 0.5) and running advantage normalisation."""
    return train_agent(tiny_bin, nmt_ckpt, tmp_path_factory.mktemp("simul_agent"), 4, arch="simul_agent")


def test_cli_training_never_optimises_the_nmt(nmt_ckpt, agent_ckpt):
    state = torch.load(agent_ckpt, map_location="cpu", weights_only=False)
    nmt = torch.load(nmt_ckpt, map_location="cpu", weights_only=False)["model"]
    model = state["model"]
    assert model["agent.rnn.weight_hh"].shape == (3 * 512, 512)
    assert state["cfg"]["model"].nmt_path == str(nmt_ckpt)
    assert all(torch.equal(model[k], v) for k, v in nmt.items())
    n_opt = sum(len(g["params"]) for g in state["last_optimizer_state"]["param_groups"])
    assert n_opt == sum(1 for k in model if k.startswith("agent.") and "adv_norm" not in k)
    assert state["optimizer_history"][-1]["num_updates"] == 4
    assert int(model["agent.adv_norm.count"]) == 4


def test_cli_kill_and_resume_equals_an_uninterrupted_run(tiny_bin, nmt_ckpt, agent_ckpt, tmp_path):
    save = tmp_path / "resumed"
    train_agent(tiny_bin, nmt_ckpt, save, 2)
    resumed = train_agent(tiny_bin, nmt_ckpt, save, 4)
    a = torch.load(agent_ckpt, map_location="cpu", weights_only=False)
    b = torch.load(resumed, map_location="cpu", weights_only=False)
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"] == 4
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["last_optimizer_state"]["state"], b["last_optimizer_state"]["state"]
    for i in sa:
        for key in sa[i]:
            assert torch.equal(torch.as_tensor(sa[i][key]), torch.as_tensor(sb[i][key]))


def test_cli_generate_agent_greedy_beam_and_baselines_with_latency_file(tiny_bin, nmt_ckpt, agent_ckpt, tmp_path):
    n = n_lines(TINY / "test.es")
    common = ["--task", "simul_rl_translation", "--cpu", "--max-len-b", "20", "--batch-size", "16"]
    out = tmp_path / "actions.jsonl"
    p = fairseq("generate", tiny_bin, "--path", agent_ckpt, *common, "--simul-actions-out", out)
    assert sorted(hypotheses(p.stdout)) == list(range(n))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == list(range(n))
    for r in records:
        assert r["actions"].count("W") == r["tgt_len"] == len(r["delays"])
        lat = latency(r["actions"], r["src_len"])
        assert lat["delays"] == r["delays"] and r["ap"] == pytest.approx(lat["ap"], abs=1e-6)
    # simul_beam with a baseline, on the plain NMT checkpoint; --post-process grows the dictionary object while
    # decoding (fairseq re-encodes each hypothesis), which must not change the beam's vocabulary size
    beam = fairseq("generate", tiny_bin, "--path", nmt_ckpt, *common, "--simul-decoding", "simul_beam",
                   "--simul-beam", "3", "--simul-policy", "wiw", "--post-process", "sentencepiece")
    assert sorted(hypotheses(beam.stdout)) == list(range(n))
    # the scorer
    summary = tmp_path / "latency.json"
    assert simul_latency.main([str(out), "--json", str(summary)]) == 0
    corpus = json.loads(summary.read_text())
    assert corpus["sentences"] == n
    assert corpus["ap"] == pytest.approx(sum(r["ap"] for r in records) / n, abs=1e-6)
    assert corpus["dal"] == pytest.approx(sum(r["dal"] for r in records) / n, abs=1e-6)


def save_checkpoint(path, cfg, model):
    """``model`` saved as fairseq-train saves a checkpoint (its configuration, no optimiser state)."""
    from omegaconf import OmegaConf

    torch.save({"cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), "model": model.state_dict(),
                "args": None, "extra_state": {"train_iterator": {"epoch": 1}},
                "optimizer_history": [{"criterion_name": "SimulPolicyGradientCriterion", "optimizer_name": "Adam",
                                       "lr_scheduler_state": {"best": None}, "num_updates": 0}]}, path)
    return path


@pytest.fixture(scope="module")
def random_ckpts(tiny_bin, nmt_ckpt, tmp_path_factory):
    """Untrained checkpoints whose decisions depend on the source (the 30-update NMT writes one sentence for every
    source, so WIW/WID and the 4-update agent only ever WRITE): ``nmt`` — the tiny uni-directional rnnsearch of
    ``nmt_ckpt`` with N(0, 1) weights; ``agent`` — a simul_agent_tiny with random policy weights on it, whose
    READs and WRITEs interleave (``model``: that agent in-process, eval mode; ``task``: its task)."""
    d = tmp_path_factory.mktemp("simul_random")
    state = torch.load(nmt_ckpt, map_location="cpu", weights_only=False)
    g = torch.Generator().manual_seed(0)
    for v in state["model"].values():
        if v.is_floating_point():
            v.copy_(torch.randn(v.shape, generator=g))
    torch.save(state, d / "nmt.pt")
    cfg, task, model, _ = build(tiny_bin, d / "nmt.pt")
    randomise_agent(model, seed=1)
    model.eval()
    return {"nmt": d / "nmt.pt", "agent": save_checkpoint(d / "agent.pt", cfg, model), "model": model, "task": task}


@pytest.mark.parametrize("decoding,policy,ckpt", [
    ("simul_beam", "agent", "random_agent"), ("simul_greedy", "wue", "nmt"), ("simul_greedy", "wos", "agent"),
    ("simul_beam", "wid", "random_nmt"), ("simul_greedy", "waitk", "random_nmt")])
def test_cli_generate_policies_and_decoders(decoding, policy, ckpt, tiny_bin, nmt_ckpt, agent_ckpt, random_ckpts,
                                            built, tmp_path):
    """fairseq-generate --user-dir over the other policy/generator pairs (the agent with simul_beam, §9.3.3; the
    baselines WUE, WOS, WID, wait-k 2 with Alg. 4 or simul_beam; on the trained agent's or NMT's checkpoint, or,
    for the policies that look at the words, on ``random_ckpts`` whose READs and WRITEs interleave):
    every test sentence gets exactly one hypothesis and one actions record; the record agrees with the S line
    (|X| with ⟨/s⟩) and with itself (delays = g(τ) of the actions, AP (Eq. 9.7)/CW/AL/DAL
    recomputed); the delays have the policy's closed form (WUE: g(τ) = |X|, AP = 1; WOS: the first WRITE
    right after the pre-read x_1, g(τ) = min(τ, |X|); wait-k: g(τ) = min(k + τ − 1, |X|)); and the words and
    actions are those of the same generator run in-process on the checkpoint."""
    n = n_lines(TINY / "test.es")
    path = {"agent": agent_ckpt, "nmt": nmt_ckpt, "random_agent": random_ckpts["agent"],
            "random_nmt": random_ckpts["nmt"]}[ckpt]
    out = tmp_path / "actions.jsonl"
    k = 2
    p = fairseq("generate", tiny_bin, "--path", path, "--task", "simul_rl_translation", "--cpu", "--max-len-b", "20",
                "--batch-size", "16", "--simul-decoding", decoding, "--simul-beam", "3", "--simul-policy", policy,
                "--simul-waitk", k, "--simul-actions-out", out)
    lines = {tag: [ln.split("\t") for ln in p.stdout.splitlines() if ln.startswith(tag + "-")] for tag in "SH"}
    h_ids = [int(f[0][2:]) for f in lines["H"]]
    assert sorted(h_ids) == list(range(n))  # exactly one hypothesis per sentence
    src = {int(f[0][2:]): f[1] for f in lines["S"]}
    hyp = {int(f[0][2:]): f[2] for f in lines["H"]}
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == list(range(n))
    _, task, _, _ = built
    model = load_ensemble([str(path)], task=task, frozen=True)[0][0]
    sample = batch(task, n=n)
    gen = SimultaneousGenerator([model], task.target_dictionary, policy=policy, waitk=k, max_len_b=20,
                                beam_size=3 if decoding == "simul_beam" else 1)
    offline = dict(zip(sample["id"].tolist(), gen.generate([model], sample)))
    for r in records:
        i, s, acts, d = r["id"], r["src_len"], r["actions"], r["delays"]
        h = offline[i][0]
        assert s == len(src[i].split()) + 1 == h["src_len"] and r["tgt_len"] == len(h["tokens"])
        assert acts.count("W") == r["tgt_len"] == len(d) and acts.count("R") <= s - 1
        lat = latency(acts, s)
        assert d == lat["delays"] and all(a <= b for a, b in zip(d, d[1:])) and d[-1] <= s
        for key in ("ap", "cw", "al", "dal"):
            assert r[key] == pytest.approx(lat[key], abs=1e-5)
        if policy == "wue":
            assert d == [s] * len(d) and r["ap"] == 1.0 and acts == "R" * (s - 1) + "W" * len(d)
        elif policy == "wos":
            assert acts[0] == "W" and d == [min(1 + t, s) for t in range(len(d))]
        elif policy == "waitk":
            assert acts.startswith("R" * (k - 1) + "W") and d == [min(k + t, s) for t in range(len(d))]
        assert acts == h["actions"] and d == h["delays"]
        assert hyp[i] == task.target_dictionary.string(h["tokens"])  # (a random NMT may write <s>: not printed)
    if policy in ("agent", "wid"):  # the random checkpoints: READs between WRITEs (simul_beam collapses there)
        assert any("R" in r["actions"][r["actions"].index("W"):] for r in records)


def test_cw_reward_words_forced_writes_and_batch_normalisation(tiny_bin, nmt_ckpt):
    """The other reward settings through one update: CW delay (linear penalty), word-level BLEU rewards,
    forced WRITEs in training (no gradient on them), per-batch advantage normalisation (no statistics kept)."""
    cfg, task, model, criterion = build(tiny_bin, nmt_ckpt, "--delay-type", "cw", "--target-cw", "2",
                                        "--cw-penalty", "linear", "--reward-bpe", "sentencepiece",
                                        "--train-force-write", "--adv-norm", "batch", "--traj-per-sent", "2")
    assert criterion.reward_cfg.delay_type == "cw" and criterion.units.bpe == "sentencepiece"
    optimizer = optim.build_optimizer(cfg.optimizer, [p for p in model.parameters() if p.requires_grad])
    frozen = nmt_tensors(model)
    loss, n, log = task.train_step(batch(task, n=3, split="train"), model, criterion, optimizer, 0)
    optimizer.step()
    assert n == 6 and torch.isfinite(torch.tensor(log["loss"]))
    assert int(model.agent.adv_norm.count) == 0
    assert all(torch.equal(model.state_dict()[k], v) for k, v in frozen.items())
    with pytest.raises(ValueError, match="simul_agent"):  # the agent policy needs an agent
        nmt = load_ensemble([str(nmt_ckpt)], task=task, frozen=True)[0][0]
        SimultaneousGenerator([nmt], task.target_dictionary, policy="agent")


def test_simul_latency_tool_errors(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 0, "src_len": 3, "actions": "WW"}) + "\n" + "{not json\n")
    assert cli_status(simul_latency.main, [str(bad)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"error: {bad}:2:")
    for i, record in enumerate([{"src_len": 3, "actions": "WRX"}, {"src_len": 0, "actions": "W"},
                                {"src_len": 3, "actions": "RR"}, {"src_len": 3, "actions": "RW", "delays": [1]}]):
        wrong = tmp_path / f"wrong{i}.jsonl"
        wrong.write_text(json.dumps({"id": 0, "src_len": 3, "actions": "W"}) + "\n" + json.dumps(record) + "\n")
        assert cli_status(simul_latency.main, [str(wrong)]) == 2
        assert capsys.readouterr().err.startswith(f"error: {wrong}:2:")
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"src_len": 4, "actions": "WRWRRWW"}) + "\n"
                    + json.dumps({"src_len": 5, "actions": "RRRRWWW", "ref_len": 3}) + "\n")
    assert cli_status(simul_latency.main, [str(good), "--json", str(tmp_path / "out.json")]) == 0
    res = json.loads((tmp_path / "out.json").read_text())
    assert res["ap"] == pytest.approx((11 / 16 + 1.0) / 2) and res["cw"] == pytest.approx((1.5 + 4) / 2)
    assert res["cw_pooled"] == pytest.approx((1 + 2 + 4) / 3)
    assert res["al"] == pytest.approx((average_lagging([1, 2, 4, 4], 4) + 5.0) / 2)
    assert "AP 0.8438" in capsys.readouterr().out


@pytest.mark.parametrize("policy", ["agent", "wue", "wos", "waitk"])
def test_streaming_translator_equals_offline_simultaneous_decoding(policy):
    """The source arriving token by token (the SimulEval agent's core) gives the offline decisions and words."""
    model = peaky_model(seed=1)
    model.agent = SimulAgent(16 + 16 + 16, hidden_size=8, baseline_hidden=4)  # an agent on the random NMT
    randomise_agent(model, seed=2)
    src, lengths, _ = toy_batch(bsz=4, src_len=8, seed=4)
    with torch.no_grad():
        offline = run_episode(SimulEnvironment(model, src, lengths, max_len_b=12),
                              build_policy(policy, model, rows=4, waitk=2))
    stream = StreamingSimulTranslator(model, policy, waitk=2, max_len=12)
    for r in range(4):
        stream.reset()
        words = src[r][src[r].ne(1)].tolist()[:-1]  # the source words; </s> comes with `finished`
        out = stream.pop()
        assert out == []  # nothing read yet
        for w in words:
            stream.push([w])
            out += stream.pop()
        stream.push([], finished=True)
        out += stream.pop()
        assert stream.finished and out == offline[r]["tokens"].tolist() == stream.tokens
        assert stream.actions == offline[r]["actions"] and stream.delays == offline[r]["delays"]
    with pytest.raises(ValueError, match="pre-reads"):
        StreamingSimulTranslator(model, "wiw")


def test_simuleval_adapter_is_optional():
    from fairseq_ext.tools.export.export import simuleval_agent

    if simuleval_agent.simuleval_available():
        assert simuleval_agent.SimulAgentText is not None
    else:
        with pytest.raises(ImportError, match=r"pip install -e .\.\[simuleval\]."):
            simuleval_agent.require_simuleval()


# ------------------------------------------------------------------------------------------ SimulEval adapter
# A stub of the SimulEval v1.1 API that fairseq_ext/tools/export/simuleval_agent.py imports (SimulEval itself pins an
# older bitarray than fairseq and is not installed here): simuleval.agents.TextToTextAgent (GenericAgent's
# __init__ builds the states and calls self.reset(); push/pop/pushpop turn the policy's actions into segments),
# simuleval.agents.actions.ReadAction/WriteAction and simuleval.utils.entrypoint, as in SimulEval 1.1.4.
@dataclass
class StubSegment:  # simuleval.data.segments.TextSegment
    index: int = 0
    content: str = ""
    finished: bool = False
    is_empty: bool = False


@dataclass
class StubEmptySegment(StubSegment):  # simuleval.data.segments.EmptySegment
    is_empty: bool = True


class StubAgentStates:  # simuleval.agents.states.AgentStates
    def __init__(self):
        self.reset()

    def reset(self):
        self.source, self.target, self.source_finished, self.target_finished = [], [], False, False

    def update_source(self, segment):
        self.source_finished = segment.finished
        if not segment.is_empty:
            self.source.append(segment.content)

    def update_target(self, segment):
        self.target_finished = segment.finished
        if not segment.finished and not segment.is_empty:
            self.target.append(segment.content)


class StubReadAction:
    def is_read(self):
        return True


@dataclass
class StubWriteAction:
    content: str
    finished: bool
    incomplete_word: Optional[bool] = None

    def is_read(self):
        return False


class StubGenericAgent:  # simuleval.agents.agent.GenericAgent (stateful use)
    source_type = target_type = None

    def __init__(self, args=None):
        if args is not None:
            self.args = args
        assert self.source_type and self.target_type
        self.device = "cpu"
        self.states = self.build_states()
        self.reset()

    def build_states(self):
        return StubAgentStates()

    def reset(self):
        self.states.reset()

    def push(self, segment):
        self.states.update_source(segment)

    def pop(self):
        if self.states.target_finished:
            return StubEmptySegment(finished=True)
        action = self.policy()
        if not isinstance(action, (StubReadAction, StubWriteAction)):
            raise RuntimeError(f"the policy returned {action!r}, not an Action")
        if action.is_read():
            return StubEmptySegment()
        segment = StubSegment(content=action.content, finished=action.finished)
        self.states.update_target(segment)
        return segment

    def pushpop(self, segment):
        self.push(segment)
        return self.pop()

    @classmethod
    def from_args(cls, args):
        return cls(args)


class StubTextToTextAgent(StubGenericAgent):
    source_type = target_type = "text"


def load_adapter_on_simuleval_stub(monkeypatch):
    """``(adapter module, entrypoint registry)``: ``fairseq_ext/tools/export/simuleval_agent.py`` executed afresh (under
    another module name) with the stub as ``simuleval``; the installed module is left as it is."""
    import importlib.util
    import sys
    import types

    from fairseq_ext.tools.export.export import simuleval_agent

    registry = []
    modules = {"simuleval": {}, "simuleval.agents": {"TextToTextAgent": StubTextToTextAgent},
               "simuleval.agents.actions": {"ReadAction": StubReadAction, "WriteAction": StubWriteAction},
               "simuleval.utils": {"entrypoint": lambda klass: registry.append(klass) or klass}}
    for name, attrs in modules.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("simuleval_agent_on_stub", simuleval_agent.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, registry


def simuleval_sentence(agent, words, max_calls=1000):
    """One sentence through SimulEval v1.1's evaluator loop (``SentenceLevelEvaluator.__call__`` with a
    ``TextToTextInstance``): ``agent.reset()``, then per call one source word is pushed (the last one with
    ``finished``; afterwards empty finished segments) and the agent's pop is received, until a finished
    prediction. Returns the policy's actions, the written words and their delays (words sent, SimulEval's
    ``step_to_delay``)."""
    agent.reset()
    actions, written, delays, step, finished = [], [], [], 0, False
    policy = agent.policy
    agent.policy = lambda: actions.append(policy()) or actions[-1]
    try:
        for _ in range(max_calls):
            if step >= len(words):
                segment = StubEmptySegment(finished=True)
            else:
                segment = StubSegment(index=step, content=words[step], finished=step == len(words) - 1)
                step += 1
            out = agent.pushpop(segment)
            finished = out.finished
            if not out.is_empty and out.content:
                new = out.content.strip().split()
                written += new
                delays += [step] * len(new)
            if finished:
                break
    finally:
        del agent.policy
    assert finished, "the agent never finished the sentence"
    return actions, written, delays


def target_words(pieces):
    """``[(word, e)]``: the words of the sentencepiece ``pieces`` and the index of the piece whose writing completes
    each (the first piece after its last one that starts a word, ``len(pieces)`` — ⟨/s⟩ — for the last word)."""
    found, current, last = [], "", -1
    for j, piece in enumerate(pieces):
        for c in piece.replace("\u2581", " "):
            if c != " ":
                current, last = current + c, j
            elif current:
                found.append((current, last))
                current = ""
    if current:
        found.append((current, last))
    return [(w, next((e for e in range(lj + 1, len(pieces)) if pieces[e].startswith("\u2581")), len(pieces)))
            for w, lj in found]


@pytest.mark.parametrize("policy,unit", [("agent", "subword"), ("agent", "word"), ("waitk", "subword")])
def test_simuleval_adapter_on_a_stub_streams_the_offline_simultaneous_decoding(policy, unit, tiny_bin, random_ckpts,
                                                                               monkeypatch):
    """The SimulEval text agent (``SimulAgentText``) on a stub of the SimulEval API: it is registered by
    ``@entrypoint``, its ``add_args`` parse, and constructing it (GenericAgent's ``__init__`` calls ``reset``)
    loads the checkpoint. Driven by SimulEval's loop one source unit at a time (``subword``: the source
    dictionary's symbols, no ``--spm``; ``word``: the raw words, segmented with ``--spm``), over several
    sentences with a ``reset`` between them: its WRITEs are, word for word, the simultaneous greedy decoding
    (Alg. 4) of the whole sentence with the same agent (``random_ckpts``: READs and WRITEs interleave) or
    wait-k 2 policy on the same checkpoint; each word is sent as soon as its last subword
    is followed by the next word's first (or ⟨/s⟩), so its delay is the source units pushed when that subword
    was written; the agent writes ⟨/s⟩ (``finished``) exactly once, as its last action."""
    import argparse

    adapter, registry = load_adapter_on_simuleval_stub(monkeypatch)
    assert adapter.simuleval_available() and registry == [adapter.SimulAgentText]
    adapter.require_simuleval()
    ckpt, task, model = random_ckpts["agent"], random_ckpts["task"], random_ckpts["model"]
    parser = argparse.ArgumentParser()
    adapter.SimulAgentText.add_args(parser)
    spm = tiny_bin.parent / "seg" / "spm.model"
    max_len = 12
    args = parser.parse_args(["--checkpoint", str(ckpt), "--data-bin", str(tiny_bin), "--simul-policy", policy,
                              "--simul-waitk", "2", "--max-len", str(max_len)]
                             + (["--spm", str(spm)] if unit == "word" else []))
    agent = adapter.SimulAgentText.from_args(args)
    assert agent.translator.policy_name == policy and agent.fed == 0 and agent.pending == []
    loaded = agent.translator.model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    # the offline reference: Alg. 4 on the whole sentences (⟨/s⟩ read last, a WRITE forced after it)
    n = 6
    sample = batch(task, n=n)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    raw = (TINY / "test.es").read_text(encoding="utf-8").splitlines()
    net = sample["net_input"]
    with torch.no_grad():
        offline = run_episode(SimulEnvironment(model, net["src_tokens"], net["src_lengths"], max_len_b=max_len),
                              build_policy(policy, model, rows=n, waitk=2))
    eos = tgt_dict.eos()
    reads_between_writes = 0
    for r, i in enumerate(sample["id"].tolist()):
        ids = [t for t in net["src_tokens"][r].tolist() if t != src_dict.pad()][:-1]  # without ⟨/s⟩
        words = raw[i].split() if unit == "word" else [src_dict[t] for t in ids]
        units = [agent.encode(w) for w in words]
        assert [t for u in units for t in u] == ids  # the adapter segments the words as the data were
        cum = [sum(len(u) for u in units[: j + 1]) for j in range(len(units))]
        actions, written, delays = simuleval_sentence(agent, words)
        ref = offline[r]
        toks, g = ref["tokens"].tolist(), ref["delays"]
        assert toks[-1] == eos and eos not in toks[:-1]
        assert agent.translator.tokens == toks and agent.translator.actions == ref["actions"]
        expected = target_words([tgt_dict[t] for t in toks[:-1]])
        assert written == [w for w, _ in expected]  # the WRITEs, word for word
        # the source units pushed when the subword completing each word was written (g counts subwords)
        assert delays == [next((j + 1 for j, c in enumerate(cum) if c >= g[e]), len(words)) for _, e in expected]
        assert all(isinstance(a, (StubReadAction, StubWriteAction)) for a in actions)
        writes = [a for a in actions if isinstance(a, StubWriteAction)]
        assert [a.finished for a in writes] == [False] * (len(writes) - 1) + [True] and actions[-1] is writes[-1]
        assert all(a.content for a in writes[:-1])
        assert agent.states.target_finished and agent.translator.finished
        reads_between_writes += "".join("W" if a else "R" for a in ref["actions"]).strip("R").count("R")
    if policy == "agent":
        assert reads_between_writes > 0  # the random agent interleaves READs and WRITEs

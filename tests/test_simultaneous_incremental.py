"""Simultaneous NMT (Gu 2019 ch. 9), the environment and decoding step by step: the prefix encoder on a frozen
uni-directional ``rnnsearch``, the READ/WRITE policies and baselines (wait-k, WUE, WIW, WID), simultaneous beam
search, and the streaming translator against offline simultaneous decoding."""
import math

import pytest
import torch

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.generators.decoding import GreedyGenerator
from fairseq_ext.generators.simultaneous import SimultaneousGenerator
from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.modules.latency import READ, WRITE
from fairseq_ext.modules.simultaneous.agent import SimulAgent
from fairseq_ext.modules.simultaneous.environment import SimulEnvironment
from fairseq_ext.modules.simultaneous.policies import WaitIfWorse, build_policy
from fairseq_ext.modules.simultaneous.search import run_episode, simultaneous_beam_search
from fairseq_ext.modules.simultaneous.streaming import StreamingSimulTranslator
from harness import build_model, task_batch, toy_batch
from simul_toys import randomise_agent


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


def test_wue_equals_full_sentence_greedy_of_the_uni_directional_nmt(simul_built, uni_nmt_ckpt):
    _, task, model, _ = simul_built
    nmt = load_ensemble([str(uni_nmt_ckpt)], task=task, frozen=True)[0][0]
    sample = task_batch(task, n=8)
    greedy = GreedyGenerator([nmt], task.target_dictionary, max_len_a=0, max_len_b=12).generate([nmt], sample)
    for m in (nmt, model):  # the plain NMT checkpoint and the agent's frozen copy
        wue = SimultaneousGenerator([m], task.target_dictionary, policy="wue", max_len_a=0,
                                    max_len_b=12).generate([m], sample)
        for g, w in zip(greedy, wue):
            assert torch.equal(g[0]["tokens"], w[0]["tokens"])
            assert torch.allclose(g[0]["positional_scores"], w[0]["positional_scores"], atol=1e-5)
            assert set(w[0]["delays"]) == {w[0]["src_len"]} and w[0]["latency"]["ap"] == 1.0


def test_wait_k_and_wos_delays(simul_built):
    _, task, model, _ = simul_built
    sample = task_batch(task, n=6)
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


def test_agent_never_writes_past_eos_and_forced_write_after_the_end(simul_built):
    _, task, model, _ = simul_built
    randomise_agent(model, seed=3)
    sample = task_batch(task, n=6)
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


def test_simultaneous_beam_collapses_on_read_and_beam_one_is_greedy(simul_built):
    _, task, model, _ = simul_built
    randomise_agent(model, seed=5)
    sample = task_batch(task, n=5)
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

"""Simultaneous NMT (Gu 2019 ch. 9), the command lines: fairseq-train of the ``simul_agent`` (the NMT never
optimised, kill + resume), fairseq-generate with the ``simul_greedy`` / ``simul_beam`` generators, policies and
baselines, the ``simul_latency`` scorer, and the SimulEval adapter on a stub."""
import json
from dataclasses import dataclass
from typing import Optional

import pytest
import torch

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.generators.simultaneous import SimultaneousGenerator
from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.modules.latency import average_lagging, latency
from fairseq_ext.modules.simultaneous.environment import SimulEnvironment
from fairseq_ext.modules.simultaneous.policies import build_policy
from fairseq_ext.modules.simultaneous.search import run_episode
from fairseq_ext.tools.evaluation import simul_latency
from fairseq_ext.tools.common import cli_status
from harness import TINY, assert_same_checkpoints, fairseq, hypotheses, n_lines, task_batch
from simul_toys import agent_args, build, randomise_agent


# ------------------------------------------------------------------------------------------ command lines
AGENT_TRAIN = ["--traj-per-sent", "2", "--batch-size", "4", "--no-progress-bar", "--log-format", "simple",
               "--log-interval", "1", "--no-epoch-checkpoints", "--disable-validation"]


def train_agent(tiny_bin, nmt, save_dir, max_update, *extra, arch="simul_agent"):
    fairseq("train", *agent_args(tiny_bin, nmt, *AGENT_TRAIN, "--max-update", max_update, "--save-dir", save_dir,
                                 *extra, arch=arch), user_dir=True)
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def agent_ckpt(tiny_bin, uni_nmt_ckpt, tmp_path_factory):
    """fairseq-train the thesis-size agent (``--arch simul_agent``: 512 GRU units) 4 updates from the tiny
    uni-directional NMT, with the default rewards (AP target 0.5) and running advantage normalisation."""
    return train_agent(tiny_bin, uni_nmt_ckpt, tmp_path_factory.mktemp("simul_agent"), 4, arch="simul_agent")


def test_cli_training_never_optimises_the_nmt(uni_nmt_ckpt, agent_ckpt):
    state = torch.load(agent_ckpt, map_location="cpu", weights_only=False)
    nmt = torch.load(uni_nmt_ckpt, map_location="cpu", weights_only=False)["model"]
    model = state["model"]
    assert model["agent.rnn.weight_hh"].shape == (3 * 512, 512)
    assert state["cfg"]["model"].nmt_path == str(uni_nmt_ckpt)
    assert all(torch.equal(model[k], v) for k, v in nmt.items())
    n_opt = sum(len(g["params"]) for g in state["last_optimizer_state"]["param_groups"])
    assert n_opt == sum(1 for k in model if k.startswith("agent.") and "adv_norm" not in k)
    assert state["optimizer_history"][-1]["num_updates"] == 4
    assert int(model["agent.adv_norm.count"]) == 4


def test_cli_kill_and_resume_equals_an_uninterrupted_run(tiny_bin, uni_nmt_ckpt, agent_ckpt, tmp_path):
    save = tmp_path / "resumed"
    train_agent(tiny_bin, uni_nmt_ckpt, save, 2)
    resumed = train_agent(tiny_bin, uni_nmt_ckpt, save, 4)
    assert_same_checkpoints(agent_ckpt, resumed, 4)


def test_cli_generate_agent_greedy_beam_and_baselines_with_latency_file(tiny_bin, uni_nmt_ckpt, agent_ckpt, tmp_path):
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
    beam = fairseq("generate", tiny_bin, "--path", uni_nmt_ckpt, *common, "--simul-decoding", "simul_beam",
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
def random_ckpts(tiny_bin, uni_nmt_ckpt, tmp_path_factory):
    """Untrained checkpoints whose decisions depend on the source (the 30-update NMT writes one sentence for every
    source, so WIW/WID and the 4-update agent only ever WRITE): ``nmt`` — the tiny uni-directional rnnsearch of
    ``uni_nmt_ckpt`` with N(0, 1) weights; ``agent`` — a simul_agent_tiny with random policy weights on it, whose
    READs and WRITEs interleave (``model``: that agent in-process, eval mode; ``task``: its task)."""
    d = tmp_path_factory.mktemp("simul_random")
    state = torch.load(uni_nmt_ckpt, map_location="cpu", weights_only=False)
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
def test_cli_generate_policies_and_decoders(decoding, policy, ckpt, tiny_bin, uni_nmt_ckpt, agent_ckpt, random_ckpts,
                                            simul_built, tmp_path):
    """fairseq-generate --user-dir over the other policy/generator pairs (the agent with simul_beam, §9.3.3; the
    baselines WUE, WOS, WID, wait-k 2 with Alg. 4 or simul_beam; on the trained agent's or NMT's checkpoint, or,
    for the policies that look at the words, on ``random_ckpts`` whose READs and WRITEs interleave):
    every test sentence gets exactly one hypothesis and one actions record; the record agrees with the S line
    (|X| with ⟨/s⟩) and with itself (delays = g(τ) of the actions, AP (Eq. 9.7)/CW/AL/DAL
    recomputed); the delays have the policy's closed form (WUE: g(τ) = |X|, AP = 1; WOS: the first WRITE
    right after the pre-read x_1, g(τ) = min(τ, |X|); wait-k: g(τ) = min(k + τ − 1, |X|)); and the words and
    actions are those of the same generator run in-process on the checkpoint."""
    n = n_lines(TINY / "test.es")
    path = {"agent": agent_ckpt, "nmt": uni_nmt_ckpt, "random_agent": random_ckpts["agent"],
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
    _, task, _, _ = simul_built
    model = load_ensemble([str(path)], task=task, frozen=True)[0][0]
    sample = task_batch(task, n=n)
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


def test_simuleval_adapter_is_optional():
    from fairseq_ext.tools.export import simuleval_agent

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

    from fairseq_ext.tools.export import simuleval_agent

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
    sample = task_batch(task, n=n)
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

"""Trainable greedy decoding (Gu 2019 ch. 7): the ``trainable_greedy`` model, the ``actor_critic`` criterion, the
``trainable_greedy_decoding`` task, the ``rmsprop`` optimiser and the actor hooks of ``rnnsearch`` — the math
in-process on a tiny rnnsearch checkpoint trained in a fixture, and the fairseq command lines (training,
kill + resume, decoding greedy and beam with the actor, the influence export)."""
import math
import os
import random

import pytest
import torch
from fairseq import optim

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.__main__ import registrations
from fairseq_ext.criterions.trainable_greedy_actor_critic import shift_right
from fairseq_ext.generators.decoding import GreedyGenerator
from fairseq_ext.generators.rescoring import score_candidates
from fairseq_ext.modules.actor_critic import critic_aware_weights, sentence_bleu_plus1
from fairseq_ext.modules.checkpoint import load_ensemble
from harness import (ROOT, TINY, assert_same_checkpoints, build_model, fairseq, hypotheses, n_lines, nmt_state,
                     randomise_parameters, task_batch, toy_batch, train_objects)


# ------------------------------------------------------------------------------------------ fixtures
# nmt_ckpt (conftest.py): the frozen NMT, rnnsearch_tiny (conditional GRU), 20 MLE updates on the tiny slice.
def ac_args(tiny_bin, nmt, *extra, arch="trainable_greedy_tiny"):
    return [str(tiny_bin), "--task", "trainable_greedy_decoding", "--arch", arch, "--nmt-path", str(nmt),
            "--criterion", "actor_critic", "--optimizer", "rmsprop", "--lr", "2e-4",
            "--group-lr", "actor:2e-6,critic:2e-4", "--lr-scheduler", "fixed", "--tg-max-len-a", "0.5",
            "--tg-max-len-b", "5", "--cpu", "--seed", "1", *extra]


def build(tiny_bin, nmt, *extra, arch="trainable_greedy_tiny"):
    """(cfg, task, model, criterion) exactly as fairseq-train builds them."""
    return train_objects(*ac_args(tiny_bin, nmt, *extra, arch=arch))


def randomise_actor(model, seed=0, scale=0.5):
    randomise_parameters(model.actor, seed, scale)


# ------------------------------------------------------------------------------------------ registrations
def test_registrations():
    regs = registrations()
    assert {"trainable_greedy", "trainable_greedy_tiny"} <= set(regs["architectures"])
    assert "trainable_greedy" in regs["models"]
    assert "actor_critic" in regs["criterions"]
    assert "trainable_greedy_decoding" in regs["tasks"]
    assert "rmsprop" in optim.OPTIMIZER_REGISTRY


# ------------------------------------------------------------------------------------------ the hooks
@pytest.mark.parametrize("variant", ["conditional", "plain"])
def test_state_action_gets_the_unperturbed_context_and_a_zero_action_changes_nothing(variant):
    """rnnsearch's ``state_action`` site: the hook sees c_t of the unperturbed step (the attention of step 1
    is unchanged by a large action, whose outputs differ) and an identity action is bit-identical."""
    model = build_model("rnnsearch_tiny", decoder_variant=variant)
    src, lengths, prev = toy_batch(bsz=3, src_len=7, tgt_len=5)
    dec = model.decoder
    seen = []
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        plain_out, plain_extra = dec(prev, encoder_out=enc)
        try:
            dec.state_action = lambda z, ctx, t, e: (seen.append((t, ctx)), z + 0.0)[1]
            same_out, same_extra = dec(prev, encoder_out=enc)
            dec.state_action = lambda z, ctx, t, e: z + 3.0
            moved_out, moved_extra = dec(prev, encoder_out=enc)
        finally:
            dec.state_action = None
    assert torch.equal(same_out, plain_out) and torch.equal(same_extra["states"][0], plain_extra["states"][0])
    assert [t for t, _ in seen] == [1, 2, 3, 4, 5]
    # c_t handed to the hook = the context of the unperturbed step: Σ_τ α_tτ h_τ with the plain pass's α
    values = enc["encoder_out"][0].transpose(0, 1)
    for t, ctx in seen:
        expected = torch.bmm(plain_extra["attn"][0][:, t - 1: t], values).squeeze(1)
        assert torch.allclose(ctx, expected, atol=1e-6)
    assert torch.equal(moved_extra["attn"][0][:, 0], plain_extra["attn"][0][:, 0])  # c_1 pinned
    assert not torch.allclose(moved_out[:, 0], plain_out[:, 0], atol=1e-4)  # but the step moved


def test_output_action_changes_the_readout_of_the_same_step():
    model = build_model("rnnsearch_tiny", decoder_layers=2)
    src, lengths, prev = toy_batch(bsz=2, src_len=6, tgt_len=4)
    dec = model.decoder
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        plain, plain_extra = dec(prev, encoder_out=enc)
        try:
            dec.output_action = lambda z, ctx, t, e: z + 0.0
            same, _ = dec(prev, encoder_out=enc)
            dec.output_action = lambda z, ctx, t, e: z + 1.0
            moved, moved_extra = dec(prev, encoder_out=enc)
        finally:
            dec.output_action = None
    assert torch.equal(same, plain)
    assert not torch.allclose(moved[:, 0], plain[:, 0], atol=1e-4)
    assert torch.allclose(moved_extra["states"][0][:, 0], plain_extra["states"][0][:, 0] + 1.0)


# ------------------------------------------------------------------------------------------ model
@pytest.mark.parametrize("site", ["state", "output"])
def test_zero_action_reproduces_greedy_decoding_exactly(tiny_bin, nmt_ckpt, site):
    """The zero-initialised actor output layer: greedy decoding with the actor is the NMT's greedy decoding,
    token for token and score for score; a non-zero actor changes it."""
    cfg, task, model, _ = build(tiny_bin, nmt_ckpt, "--tg-action-site", site)
    assert all(float(p.abs().max()) == 0.0 for p in model.actor.out.parameters())
    nmt = load_ensemble([str(nmt_ckpt)], task=task, frozen=True)[0][0]
    sample = task_batch(task, n=8)
    tgt = task.target_dictionary
    plain = GreedyGenerator([nmt], tgt, max_len_b=30).generate([nmt], sample)
    with_actor = GreedyGenerator([model], tgt, max_len_b=30).generate([model], sample)
    for a, b in zip(plain, with_actor):
        assert torch.equal(a[0]["tokens"], b[0]["tokens"])
        assert torch.equal(a[0]["positional_scores"], b[0]["positional_scores"])
    randomise_actor(model, scale=2.0)
    moved = GreedyGenerator([model], tgt, max_len_b=30).generate([model], sample)
    assert any(not torch.equal(a[0]["positional_scores"], b[0]["positional_scores"]) for a, b in zip(plain, moved))
    model.set_actor_enabled(False)  # --tg-actor off: the plain NMT again
    off = GreedyGenerator([model], tgt, max_len_b=30).generate([model], sample)
    assert all(torch.equal(a[0]["positional_scores"], b[0]["positional_scores"]) for a, b in zip(plain, off))


def test_nmt_is_frozen_and_kept_in_eval_mode(tiny_bin, nmt_ckpt):
    _, _, model, _ = build(tiny_bin, nmt_ckpt)
    model.train()
    assert model.training and model.actor.training and model.critic.training
    assert not model.encoder.training and not model.decoder.training
    assert not any(p.requires_grad for p in [*model.encoder.parameters(), *model.decoder.parameters()])
    assert all(p.requires_grad for p in [*model.actor.parameters(), *model.critic.parameters()])
    assert {p.param_group for p in model.actor.parameters()} == {"actor"}
    assert {p.param_group for p in model.critic.parameters()} == {"critic"}
    H, C = model.decoder.hidden_size, model.decoder.context_dim
    assert model.actor.hidden.in_features == H + C and model.actor.out.out_features == H


def test_gradients_reach_the_actions_through_the_frozen_recurrence(tiny_bin, nmt_ckpt):
    """d z_T / d a_1 ≠ 0 (T − 1 frozen transitions in between) and the actor step's loss gives the actor a
    gradient and the NMT none."""
    _, task, model, criterion = build(tiny_bin, nmt_ckpt, "--tg-actor-samples", "2")
    model.train()
    sample = task_batch(task, n=4)
    net = sample["net_input"]
    enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
    noise = torch.zeros(4, 10, model.state_dim, requires_grad=True)  # an additive action at every step
    prev = net["prev_output_tokens"][:, :6]
    states = model.trajectory(model.with_action_noise(enc, noise), prev)
    states[:, -1].sum().backward()
    assert float(noise.grad[:, 0].abs().sum()) > 0  # step 1's action reaches z_6
    assert float(noise.grad[:, 6:].abs().sum()) == 0.0  # steps never taken
    model.zero_grad()
    out = criterion.decode(model, sample, "actor")
    w = criterion.actor_weights(out["rc"], out["r"], out["group"])
    (-(w * out["rc"]).sum()).backward()
    assert float(model.actor.out.weight.grad.abs().sum()) > 0
    assert all(p.grad is None for p in [*model.encoder.parameters(), *model.decoder.parameters()])
    assert all(p.grad is None for p in model.critic.parameters())  # the critic is a constant here
    assert all(p.requires_grad for p in model.critic.parameters())  # ... only for that pass


def test_critic_step_sees_the_reference_trajectory(tiny_bin, nmt_ckpt):
    _, task, model, criterion = build(tiny_bin, nmt_ckpt, "--tg-critic-samples", "3", "--tg-actor-samples", "2")
    model.train()
    sample = task_batch(task, n=5)
    out = criterion.decode(model, sample, "critic")
    assert out["r"].numel() == 5 * (3 + 1)
    assert torch.equal(out["group"][-5:], torch.arange(5))
    assert torch.allclose(out["r"][-5:], torch.ones(5))  # BLEU+1(Y, Y) = 1
    assert bool(((out["rc"] > 0) & (out["rc"] < 1)).all())  # sigmoid output for BLEU
    out.pop("rc").sum().backward()
    assert all(p.grad is None for p in model.actor.parameters())
    assert model.critic.output.weight.grad is not None
    assert criterion.decode(model, sample, "actor")["r"].numel() == 5 * 2


def test_alternation_of_critic_and_actor_updates(tiny_bin, nmt_ckpt):
    _, _, _, criterion = build(tiny_bin, nmt_ckpt)  # thesis defaults: N_c = 10, N_a = 1
    assert [criterion.phase(u) for u in range(23)] == (["critic"] * 10 + ["actor"]) * 2 + ["critic"] * 1


@pytest.mark.parametrize("phase,moved,still", [("actor", "actor", "critic"), ("critic", "critic", "actor")])
def test_one_update_moves_only_its_network_and_never_the_nmt(tiny_bin, nmt_ckpt, phase, moved, still):
    cfg, task, model, criterion = build(tiny_bin, nmt_ckpt, "--critic-updates", "1")
    optimizer = optim.build_optimizer(cfg.optimizer, [p for p in model.parameters() if p.requires_grad])
    frozen = nmt_state(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    update_num = 1 if phase == "actor" else 0
    assert criterion.phase(update_num) == phase
    sample = task_batch(task, n=6, split="train")
    optimizer.zero_grad()
    task.train_step(sample, model, criterion, optimizer, update_num)
    optimizer.step()
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in frozen.items())
    assert any(not torch.equal(after[k], before[k]) for k in before if k.startswith(moved + "."))
    assert all(torch.equal(after[k], before[k]) for k in before if k.startswith(still + "."))
    n_trainable = sum(1 for p in [*model.actor.parameters(), *model.critic.parameters()])
    assert sum(len(g["params"]) for g in optimizer.param_groups) == n_trainable


# ------------------------------------------------------------------------------------------ the equations
def test_critic_aware_weights_are_normalised():
    g = torch.Generator().manual_seed(0)
    rc, r = torch.rand(12, generator=g), torch.rand(12, generator=g)
    group = torch.arange(3).repeat_interleave(4)
    tau = 0.05
    w = critic_aware_weights(rc, r, tau, group)
    raw = torch.exp(-(rc - r) ** 2 / tau)
    for b in range(3):
        sl = slice(4 * b, 4 * b + 4)
        assert torch.allclose(w[sl].sum(), torch.tensor(1.0))
        assert torch.allclose(w[sl], raw[sl] / raw[sl].sum())
    wb = critic_aware_weights(rc, r, tau)  # over the whole batch
    assert torch.allclose(wb, raw / raw.sum()) and torch.allclose(wb.sum(), torch.tensor(1.0))
    assert torch.allclose(critic_aware_weights(rc, r, tau, group, uniform=True), torch.full((12,), 0.25))
    tiny = critic_aware_weights(rc, r + 5.0, 1e-4, group)  # every raw weight underflows: still normalised
    assert torch.isfinite(tiny).all() and torch.allclose(tiny.view(3, 4).sum(1), torch.ones(3))
    # the better the critic on a sample, the larger its weight
    assert int(w[:4].argmax()) == int((rc[:4] - r[:4]).abs().argmin())


def reference_bleu_plus1(hyp, ref):
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize="none", smooth_method="add-k", smooth_value=1, effective_order=False)
    return metric.sentence_score(" ".join(f"w{t}" for t in hyp), [" ".join(f"w{t}" for t in ref)]).score / 100


def test_bleu_plus1_batched_equals_sacrebleu_sentence_bleu():
    rng = random.Random(0)
    pairs = [([5, 6, 7, 8, 9], [5, 6, 7, 8, 9]), ([], [5, 6]), ([5], [5, 6, 7]), ([5, 6], [5, 6]),
             ([7, 7, 7, 7], [7, 5]), ([5, 6, 7], [8, 9, 10])]
    for _ in range(60):
        pairs.append(([rng.randint(4, 9) for _ in range(rng.randint(0, 12))],
                      [rng.randint(4, 9) for _ in range(rng.randint(1, 12))]))
    T = max(max(len(h), len(r)) for h, r in pairs) + 2
    hyp = torch.full((len(pairs), T), 1)
    ref = torch.full((len(pairs), T), 1)
    for i, (h, r) in enumerate(pairs):
        hyp[i, : len(h)] = torch.tensor(h, dtype=torch.long)
        ref[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        hyp[i, len(h)] = ref[i, len(r)] = 2  # an EOS after the scored tokens is not counted
    got = sentence_bleu_plus1(hyp, torch.tensor([len(h) for h, _ in pairs]), ref,
                              torch.tensor([len(r) for _, r in pairs]))
    expected = torch.tensor([reference_bleu_plus1(h, r) for h, r in pairs])
    assert torch.allclose(got, expected.float(), atol=1e-5)
    assert float(got[0]) == pytest.approx(1.0)
    # by hand: hyp "a b c" vs ref "a b d e": p1 = 2/3, p2 = (1+1)/(2+1), p3 = 1/2, p4 = 1/1, BP = exp(1 - 4/3)
    hand = math.exp(1 - 4 / 3) * (2 / 3 * 2 / 3 * 1 / 2 * 1) ** 0.25
    by_hand = sentence_bleu_plus1(torch.tensor([[5, 6, 7]]), torch.tensor([3]), torch.tensor([[5, 6, 8, 9]]),
                                  torch.tensor([4]))
    assert float(by_hand) == pytest.approx(hand, rel=1e-5)


def test_perplexity_objective_is_the_nmt_mean_log_prob(tiny_bin, nmt_ckpt):
    """R = (1/|Ŷ|) log p_θ(Ŷ|X) of the frozen NMT (⟨eos⟩ counted), whatever the actor: the rescorer's
    length-normalised score (α = 1)."""
    _, task, model, criterion = build(tiny_bin, nmt_ckpt, "--tg-objective", "perplexity")
    randomise_actor(model)
    sample = task_batch(task, n=5)
    net = sample["net_input"]
    target = sample["target"]
    with torch.no_grad():
        enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        lengths = target.ne(1).sum(1)
        r = criterion.rewards(model, enc, target, lengths, target)
        nmt = load_ensemble([str(nmt_ckpt)], task=task, frozen=True)[0][0]
        cands = [target[i, : lengths[i]] for i in range(5)]
        ref = score_candidates(nmt, net["src_tokens"], net["src_lengths"], cands, eos=2, pad=1, alpha=1.0)
    assert torch.allclose(r, ref.scores, atol=1e-5)
    assert bool((r < 0).all())


def test_influence_is_zero_for_a_zero_actor_and_the_step_kl_otherwise(tiny_bin, nmt_ckpt):
    _, task, model, _ = build(tiny_bin, nmt_ckpt)
    sample = task_batch(task, n=4)
    net, target = sample["net_input"], sample["target"]
    src, lengths = net["src_tokens"], net["src_lengths"]
    assert float(model.influence(src, lengths, target).abs().max()) == 0.0
    randomise_actor(model, scale=1.0)
    kl = model.influence(src, lengths, target)
    assert bool((kl[target.ne(1)] > 0).all()) and float(kl[target.eq(1)].abs().max()) == 0.0
    with torch.no_grad():  # step 1: both from z_0, so the two teacher-forced passes give the two distributions
        enc = model.encoder(src, src_lengths=lengths)
        prev = shift_right(target, 2, 1)
        p_with = model.get_normalized_probs(model.decoder(prev, encoder_out=enc), log_probs=True)[:, 0]
        with model.actor_disabled():
            p_without = model.get_normalized_probs(model.decoder(prev, encoder_out=enc), log_probs=True)[:, 0]
    manual = (p_with.exp() * (p_with - p_without)).sum(-1)
    assert torch.allclose(kl[:, 0], manual, atol=1e-6)


# ------------------------------------------------------------------------------------------ optimiser
def test_rmsprop_two_learning_rates_follow_the_scheduler(tiny_bin, nmt_ckpt):
    cfg, _, model, _ = build(tiny_bin, nmt_ckpt)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optim.build_optimizer(cfg.optimizer, params)
    lrs = {g["name"]: g["lr"] for g in opt.param_groups}
    assert lrs == pytest.approx({"actor": 2e-6, "critic": 2e-4})
    assert opt.get_lr() == pytest.approx(2e-4)
    opt.set_lr(1e-4)  # a scheduler halves the rate: both groups follow
    assert {g["name"]: g["lr"] for g in opt.param_groups} == pytest.approx({"actor": 1e-6, "critic": 1e-4})
    assert opt.get_lr() == pytest.approx(1e-4)
    # one step with a gradient on the critic only: torch's RMSprop update for it, nothing for the actor
    actor_before = [p.detach().clone() for p in model.actor.parameters()]
    w = model.critic.output.weight
    w0 = w.detach().clone()
    opt.zero_grad()
    w.grad = torch.full_like(w, 0.5)
    opt.step()
    alpha, eps = cfg.optimizer.rmsprop_alpha, cfg.optimizer.rmsprop_eps
    expected = w0 - 1e-4 * 0.5 / (math.sqrt((1 - alpha) * 0.25) + eps)
    assert torch.allclose(w.detach(), expected, atol=1e-9)
    assert all(torch.equal(a, b) for a, b in zip(actor_before, model.actor.parameters()))
    state = opt.state_dict()
    opt2 = optim.build_optimizer(cfg.optimizer, params)
    opt2.load_state_dict(state)
    opt2.set_lr(2e-4)
    assert {g["name"]: g["lr"] for g in opt2.param_groups} == pytest.approx({"actor": 2e-6, "critic": 2e-4})
    with pytest.raises(ValueError, match="no parameter has"):
        cfg.optimizer.group_lr = "policy:1e-3"
        optim.build_optimizer(cfg.optimizer, params)


# ------------------------------------------------------------------------------------------ command lines
AC_TRAIN = ["--critic-updates", "2", "--tg-critic-samples", "2", "--tg-actor-samples", "2", "--max-sentences", "8",
            "--no-progress-bar", "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints"]


def train_ac(tiny_bin, nmt, save_dir, max_update, *extra, arch="trainable_greedy_tiny"):
    fairseq("train", *ac_args(tiny_bin, nmt, *AC_TRAIN, "--max-update", max_update, "--save-dir", save_dir, *extra,
                              arch=arch), user_dir=True)
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def ac_ckpt(tiny_bin, nmt_ckpt, tmp_path_factory):
    """fairseq-train the actor-critic 6 updates (critic, critic, actor, ...) from the tiny NMT."""
    return train_ac(tiny_bin, nmt_ckpt, tmp_path_factory.mktemp("tg_ac"), 6)


def test_cli_training_saves_actor_and_critic_but_never_optimises_the_nmt(nmt_ckpt, ac_ckpt):
    state = torch.load(ac_ckpt, map_location="cpu", weights_only=False)
    nmt = torch.load(nmt_ckpt, map_location="cpu", weights_only=False)["model"]
    model = state["model"]
    assert all(torch.equal(model[k], v) for k, v in nmt.items())  # the frozen copy, bit for bit
    groups = state["last_optimizer_state"]["param_groups"]
    n_opt = sum(len(g["params"]) for g in groups)
    assert n_opt == sum(1 for k in model if k.startswith(("actor.", "critic.")))
    assert {g["name"]: g["lr"] for g in groups} == pytest.approx({"actor": 2e-6, "critic": 2e-4})
    assert state["optimizer_history"][-1]["num_updates"] == 6


def test_cli_generate_greedy_and_beam_with_the_actor(tiny_bin, ac_ckpt, tmp_path):
    n = n_lines(TINY / "test.es")
    outs = {}
    for name, args in {"greedy": ["--decoding-algorithm", "greedy", "--tg-influence-out", tmp_path / "infl.tsv"],
                       "beam": ["--decoding-algorithm", "beam", "--beam", "3"],
                       "off": ["--decoding-algorithm", "greedy", "--tg-actor", "off"]}.items():
        p = fairseq("generate", tiny_bin, "--task", "trainable_greedy_decoding", "--path", ac_ckpt, "--cpu",
                    "--max-len-b", "20", *args)
        outs[name] = p.stdout
        hyps = hypotheses(p.stdout)
        assert sorted(hyps) == list(range(n)), name
        assert sum(1 for line in p.stdout.splitlines() if line.startswith("H-")) == n
    lines = (tmp_path / "infl.tsv").read_text().splitlines()
    assert lines[0] == "#id\tposition\ttoken\tkl\tinfluenced"
    rows = [line.split("\t") for line in lines[1:]]
    assert {int(r[0]) for r in rows} == set(range(n))
    n_tokens = sum(len(h.split()) + 1 for h in hypotheses(outs["greedy"]).values())  # + </s>
    assert len(rows) == n_tokens
    assert all(float(r[3]) >= 0 and r[4] == str(int(float(r[3]) > 0.001)) for r in rows)


def test_cli_kill_and_resume_equals_an_uninterrupted_run(tiny_bin, nmt_ckpt, ac_ckpt, tmp_path):
    """3 updates, stop, resume to 6 (mid-epoch; critic, critic, actor | critic, critic, actor) = 6 at once:
    the actor, the critic and the optimiser state are bit-identical."""
    save = tmp_path / "resumed"
    train_ac(tiny_bin, nmt_ckpt, save, 3)
    resumed = train_ac(tiny_bin, nmt_ckpt, save, 6)
    a, _ = assert_same_checkpoints(ac_ckpt, resumed, 6)
    assert float(a["model"]["actor.out.bias"].abs().max()) > 0  # the actor did move (from its zero init)


def test_cli_thesis_arch_perplexity_objective_output_site(tiny_bin, nmt_ckpt, tmp_path):
    """``--arch trainable_greedy`` (actor 32, critic of the NMT's sizes), the perplexity objective and the
    output site, trained 3 updates from a relative ``--nmt-path`` (stored absolute) and decoded with the
    shrinking beam."""
    nmt = os.path.relpath(nmt_ckpt, ROOT)
    ckpt = train_ac(tiny_bin, nmt, tmp_path, 3, "--tg-objective", "perplexity", "--tg-action-site", "output",
                    "--critic-updates", "1", arch="trainable_greedy")
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert state["model"]["actor.hidden.weight"].shape[0] == 32
    assert state["model"]["critic.output.weight"].shape[1] == 16  # the tiny NMT's decoder size
    assert state["cfg"]["model"].nmt_path == str(nmt_ckpt)
    p = fairseq("generate", tiny_bin, "--task", "trainable_greedy_decoding", "--path", ckpt, "--cpu",
                "--max-len-b", "20", "--decoding-algorithm", "shrinking_beam", "--beam", "2", cwd=tmp_path)
    assert sorted(hypotheses(p.stdout)) == list(range(n_lines(TINY / "test.es")))

"""Gu ch. 6, MetaNMT: the first-order MAML episode (:mod:`fairseq_ext.modules.meta_learning`), the model
``ulr_transformer`` (ULR ε^0 + Δε, Eq. 6.12), the tasks ``meta_translation`` and ``ulr_finetune_translation``
— the math on toy models, and the command lines on a tiny synthetic three-language corpus."""
import argparse
import re
import types

import numpy as np
import pytest
import torch
import torch.nn as nn

from harness import (fairseq, generate, hypotheses, incremental_logits, marked_dictionary,
                     n_lines, n_params, rebuilt_without_ulr_folder, ulr_dir, universal_corpus,
                     universal_task)

from fairseq_ext.modules.meta_learning import (
    apply_finetune_strategy,
    finetune_trainable_names,
    maml_episode,
    model_partition,
    parameter_partition,
)

DELTA = "encoder.embed_tokens.delta.weight"
ULR_PARAMS = {"encoder.embed_tokens.ulr.universal", "encoder.embed_tokens.ulr.A"}


# ----------------------------------------------------------------------------- toy models
class Linear(nn.Module):
    """pred = x·(w + δ) + u: w an "encoder" (fast and meta), u an "ε_U" (meta only), δ a "Δε" (fast only,
    reset every episode)."""

    def __init__(self, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = nn.Parameter(torch.randn(3, generator=g, dtype=torch.float64))
        self.u = nn.Parameter(torch.randn(1, generator=g, dtype=torch.float64))
        self.delta = nn.Parameter(torch.zeros(3, dtype=torch.float64))

    def forward(self, x):
        return x @ (self.w + self.delta) + self.u

    def meta_partition_names(self):
        return {"learn_frozen": ["u"], "meta_frozen": ["delta"], "reset": ["delta"]}


class Tanh(Linear):
    """A non-linear toy (a non-trivial Hessian): pred = tanh(x·W)·(w + δ) + u."""

    def __init__(self, seed=0):
        super().__init__(seed)
        g = torch.Generator().manual_seed(seed + 1)
        self.W = nn.Parameter(torch.randn(3, 3, generator=g, dtype=torch.float64))

    def forward(self, x):
        return torch.tanh(x @ self.W) @ (self.w + self.delta) + self.u


def toy_batch(seed, n=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, generator=g, dtype=torch.float64), torch.randn(n, generator=g, dtype=torch.float64)


def sq_loss(model):
    def loss_fn(batch):
        x, y = batch
        return ((model(x) - y) ** 2).sum(), len(y), {}

    return loss_fn


# ----------------------------------------------------------------------------- the episode
def test_one_meta_step_equals_the_hand_computed_first_order_update():
    m = Linear()
    w0, u0 = m.w.detach().numpy().copy(), float(m.u.detach())
    (x, y), (x2, y2) = toy_batch(1), toy_batch(2)
    eta, eta_meta = 0.01, 0.1
    res = maml_episode(sq_loss(m), (x, y), (x2, y2), model_partition(m), inner_lr=eta)
    torch.optim.SGD([m.w, m.u], lr=eta_meta).step()  # the meta optimiser (fairseq's)

    X, Y, X2, Y2 = (t.numpy() for t in (x, y, x2, y2))
    g = 2 * X.T @ (X @ w0 + u0 - Y) / len(Y)  # ∇ of the mean loss on D at θ (w and δ alike; δ = 0)
    step = eta * g / (np.abs(g) + 1e-9)  # one step of a fresh Adam: m̂ = g, v̂ = g²
    w1, d1 = w0 - step, -step  # θ′ (u is not fast)
    r2 = X2 @ (w1 + d1) + u0 - Y2
    gw, gu = 2 * X2.T @ r2, 2 * r2.sum()  # ∇ of the summed loss on D′ at θ′ (Eq. 6.10)
    assert np.allclose(m.w.detach().numpy(), w0 - eta_meta * gw, atol=1e-10)
    assert np.allclose(float(m.u), u0 - eta_meta * gu, atol=1e-10)
    assert torch.equal(m.delta, torch.zeros(3, dtype=torch.float64)) and m.delta.grad is None
    assert np.isclose(float(res.loss), (r2 ** 2).sum()) and res.inner_losses[0] == pytest.approx(
        ((X @ w0 + u0 - Y) ** 2).sum())


def test_partition_roles_within_an_episode():
    """ε_U-like u is constant in the inner loop, δ moves only there, starts at 0 and is 0 again afterwards."""
    m = Linear()
    with torch.no_grad():
        m.delta.fill_(3.0)  # a leftover: zeroed at the episode start
    w0, u0 = m.w.detach().clone(), m.u.detach().clone()
    seen = {}
    base = sq_loss(m)

    def loss_fn(batch):
        seen.setdefault("calls", []).append((m.w.detach().clone(), m.u.detach().clone(), m.delta.detach().clone()))
        return base(batch)

    maml_episode(loss_fn, toy_batch(1), toy_batch(2), model_partition(m), inner_lr=0.01)
    (w_d, u_d, d_d), (w_dp, u_dp, d_dp) = seen["calls"]
    assert torch.equal(d_d, torch.zeros(3, dtype=torch.float64)) and torch.equal(w_d, w0)  # at θ, Δε = 0
    assert not torch.equal(w_dp, w0) and d_dp.abs().sum() > 0  # at θ′: the fast parameters moved
    assert torch.equal(u_dp, u0)  # ε_U fixed in the inner loop
    assert torch.equal(m.w, w0) and torch.equal(m.u, u0) and m.delta.abs().sum() == 0  # θ restored, Δε = 0
    assert m.w.grad is not None and m.u.grad is not None and m.delta.grad is None  # Δε fixed in the meta update
    opt = torch.optim.Adam(m.parameters(), lr=0.1, weight_decay=0.1)  # a meta optimiser over everything
    opt.step()
    assert m.delta.abs().sum() == 0


def test_partition_checks():
    m = Linear()
    p = model_partition(m)
    assert (p.fast, p.meta, p.reset) == (["w", "delta"], ["w", "u"], ["delta"])
    plain = parameter_partition(m)
    assert plain.fast == plain.meta == ["w", "u", "delta"] and plain.reset == []
    with pytest.raises(ValueError, match="no parameter named nope"):
        parameter_partition(m, learn_frozen=["nope"])
    with pytest.raises(ValueError, match="must be fast and not meta"):
        parameter_partition(m, reset=["delta"])


def test_meta_gradients_of_episodes_add_up_and_the_inner_adam_is_fresh():
    m = Linear()
    part = model_partition(m)
    r1 = maml_episode(sq_loss(m), toy_batch(1), toy_batch(2), part, inner_lr=0.01)
    g1 = m.w.grad.clone()
    r2 = maml_episode(sq_loss(m), toy_batch(3), toy_batch(4), part, inner_lr=0.01)
    g12 = m.w.grad.clone()
    m.w.grad = None
    m.u.grad = None
    maml_episode(sq_loss(m), toy_batch(3), toy_batch(4), part, inner_lr=0.01)
    assert torch.allclose(g12, g1 + m.w.grad)  # Σ_k of Eq. 6.6; episode 2 did not depend on episode 1
    assert r1.inner_optimizer is not r2.inner_optimizer
    for r in (r1, r2):
        states = list(r.inner_optimizer.state.values())
        assert len(states) == 2 and all(int(s["step"]) == 1 for s in states)  # one step of a new Adam
        assert r.inner_optimizer.defaults["betas"] == (0.9, 0.98) and r.inner_optimizer.defaults["eps"] == 1e-9


def test_more_inner_steps_take_more_adam_steps():
    m = Linear()
    r = maml_episode(sq_loss(m), toy_batch(1), toy_batch(2), model_partition(m), inner_lr=0.01, inner_steps=3)
    assert len(r.inner_losses) == 3 and r.inner_losses[2] < r.inner_losses[0]
    assert all(int(s["step"]) == 3 for s in r.inner_optimizer.state.values())


def second_order_maml_grad(model, d, d_prime, eta):
    """∇_θ L^{D′}(θ − η∇L^D(θ)) by autograd (exact MAML, SGD inner step on the fast parameters)."""
    part = model_partition(model)
    fast, meta = part.tensors("fast"), part.tensors("meta")
    x, y = d
    loss = ((model(x) - y) ** 2).sum() / len(y)
    grads = torch.autograd.grad(loss, fast, create_graph=True)
    theta_prime = {id(p): p - eta * g for p, g in zip(fast, grads)}
    W = theta_prime.get(id(model.W), model.W)
    w, delta, u = theta_prime[id(model.w)], theta_prime[id(model.delta)], model.u
    x2, y2 = d_prime
    loss2 = ((torch.tanh(x2 @ W) @ (w + delta) + u - y2) ** 2).sum()
    return dict(zip(part.meta, torch.autograd.grad(loss2, meta)))


def test_finite_difference_is_the_second_order_gradient_for_an_sgd_inner_step():
    eta = 0.05
    exact = second_order_maml_grad(Tanh(), toy_batch(1), toy_batch(2), eta)
    m = Tanh()
    maml_episode(sq_loss(m), toy_batch(1), toy_batch(2), model_partition(m), inner_lr=eta, inner_optimizer="sgd",
                 meta_gradient="finite_difference", fd_nu=1e-7)  # error O(ν)
    fo = Tanh()
    maml_episode(sq_loss(fo), toy_batch(1), toy_batch(2), model_partition(fo), inner_lr=eta, inner_optimizer="sgd")
    for name in ("W", "w", "u"):
        got, first = dict(m.named_parameters())[name].grad, dict(fo.named_parameters())[name].grad
        assert torch.allclose(got, exact[name], rtol=1e-6, atol=1e-5), name
        assert (first - exact[name]).abs().max() > 0.1, name  # the Hessian term matters here
    assert m.delta.grad is None and m.delta.abs().sum() == 0


def test_finite_difference_reuses_the_dropout_masks():
    """With dropout, ∇L^D at θ and at θ̂ must see the same masks (else the 1/ν blows the noise up)."""
    torch.manual_seed(0)
    m = Tanh()
    drop = nn.Dropout(0.5)
    loss = sq_loss(m)

    def loss_fn(batch):
        x, y = batch
        return loss((drop(x), y))

    maml_episode(loss_fn, toy_batch(1), toy_batch(2), model_partition(m), inner_lr=0.05, inner_optimizer="sgd",
                 meta_gradient="finite_difference", fd_nu=1e-6)
    assert torch.isfinite(m.w.grad).all() and m.w.grad.abs().max() < 1e3


def test_episode_argument_errors():
    m = Linear()
    with pytest.raises(ValueError, match="inner_steps must be 1"):
        maml_episode(sq_loss(m), toy_batch(1), toy_batch(2), model_partition(m), 0.1, inner_steps=2,
                     meta_gradient="finite_difference")
    with pytest.raises(ValueError, match="unknown inner optimizer"):
        maml_episode(sq_loss(m), toy_batch(1), toy_batch(2), model_partition(m), 0.1, inner_optimizer="rmsprop")


# ----------------------------------------------------------------------------- ulr_transformer
def _marked_dictionary():
    return marked_dictionary(words=("casa", "gato", "perro", "mesa"))


def _ulr_dir(tmp_path, d, m=10, dq=6, seed=0):
    return ulr_dir(tmp_path, d, m=m, dq=dq, seed=seed)


def _task(d, data=None):
    return universal_task(d, data=data)


TINY_SIZES = dict(encoder_layers=2, decoder_layers=2, encoder_embed_dim=32, decoder_embed_dim=32,
                  encoder_ffn_embed_dim=64, decoder_ffn_embed_dim=64, encoder_attention_heads=4,
                  decoder_attention_heads=4, dropout=0.0)


def build(arch="ulr_transformer_tiny", seed=0, d=None, **kw):
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    torch.manual_seed(seed)
    d = d or _marked_dictionary()
    args = argparse.Namespace(arch=arch, **kw)
    ARCH_CONFIG_REGISTRY[arch](args)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, _task(d)), args


def _batch(d, seed=1, bsz=3, src_len=6, tgt_len=5):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (bsz, src_len), generator=g)
    src[0, :2] = d.pad()
    src[:, -1] = d.eos()
    prev = torch.randint(d.nspecial, len(d), (bsz, tgt_len), generator=g)
    prev[:, 0] = d.eos()
    return src, src.ne(d.pad()).sum(1), prev


def test_ulr_off_is_exactly_fairseqs_transformer():
    d = _marked_dictionary()
    ours, _ = build(d=d)
    ref, _ = build("transformer", d=d, **TINY_SIZES)
    assert type(ours).__name__ == "ULRTransformerModel" and n_params(ours) == n_params(ref)
    a, b = ours.state_dict(), ref.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ours.eval(), ref.eval()
    src, lengths, prev = _batch(d)
    assert torch.equal(ours(src, lengths, prev)[0], ref(src, lengths, prev)[0])
    assert ours.meta_partition_names() == {}


def test_presets():
    _, args = build("ulr_transformer_base", d=_marked_dictionary())
    assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_layers, args.decoder_layers,
            args.encoder_attention_heads, args.dropout, args.share_all_embeddings) == (512, 512, 6, 6, 8, 0.1, False)
    _, args = build("ulr_transformer_bench", d=_marked_dictionary())
    assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_layers, args.encoder_normalize_before,
            args.share_all_embeddings) == (256, 1024, 3, True, False)


def test_ulr_source_embedding_is_scaled_ulr_plus_delta(tmp_path):
    d = _marked_dictionary()
    m, args = build(d=d, ulr=True, ulr_dir=str(_ulr_dir(tmp_path, d)))
    emb = m.encoder.embed_tokens
    assert type(emb).__name__ == "ULRDeltaEmbedding" and not emb.ulr.language_specific
    assert (args.ulr_num_universal, args.ulr_query_dim) == (10, 6)
    names = {n for n, _ in m.named_parameters()}
    assert ULR_PARAMS | {DELTA} <= names and "encoder.embed_tokens.weight" not in names
    assert not any(n.endswith(("query", "key", "alpha")) for n in names)  # frozen buffers
    assert emb.delta.weight.abs().sum() == 0
    with torch.no_grad():
        emb.delta.weight.normal_()
        emb.delta.weight[d.pad()].zero_()
    src, _, _ = _batch(d)
    x, embed = m.encoder.forward_embedding(src)
    expected = 32 ** 0.5 * (emb.ulr(src) + emb.delta(src))  # Eq. 6.12, scaled like fairseq's embed_tokens
    assert torch.allclose(embed, expected) and torch.allclose(x, expected + m.encoder.embed_positions(src))
    assert m.meta_partition_names() == {"learn_frozen": sorted(ULR_PARAMS), "meta_frozen": [DELTA],
                                        "reset": [DELTA]}
    with pytest.raises(ValueError, match="share-all-embeddings"):
        build(d=d, ulr=True, ulr_dir=str(tmp_path / "ulr"), share_all_embeddings=True)


def test_ulr_model_rebuilds_without_the_folder_and_decodes_incrementally(tmp_path):
    d = _marked_dictionary()
    m, args = build(d=d, ulr=True, ulr_dir=str(_ulr_dir(tmp_path, d)))
    m, m2 = rebuilt_without_ulr_folder(m, args, _task(d))
    src, lengths, prev = _batch(d)
    full = m(src, lengths, prev)[0]
    assert torch.equal(full, m2(src, lengths, prev)[0])
    assert torch.allclose(incremental_logits(m, src, lengths, prev), full, atol=1e-5)


def test_finetune_strategies_freeze_exactly_the_right_parameters(tmp_path):
    d = _marked_dictionary()
    m, _ = build(d=d, ulr=True, ulr_dir=str(_ulr_dir(tmp_path, d)))
    names = {n for n, _ in m.named_parameters()}
    enc = {n for n in names if n.startswith("encoder.")} - ULR_PARAMS
    expected = {"emb": {DELTA}, "emb+enc": enc, "all": names - ULR_PARAMS}
    for strategy, want in expected.items():
        assert apply_finetune_strategy(m, strategy) == want
        assert {n for n, p in m.named_parameters() if p.requires_grad} == want, strategy
    assert any(n.startswith("encoder.layers.") for n in enc) and any(n.startswith("decoder.") for n in expected["all"])
    plain, _ = build(d=d)  # without ULR, emb is the ordinary source embedding
    assert apply_finetune_strategy(plain, "emb") == {"encoder.embed_tokens.weight"}
    with pytest.raises(ValueError, match="unknown fine-tuning strategy"):
        finetune_trainable_names(names, "dec")


def test_episode_on_the_ulr_transformer_keeps_ulr_in_the_inner_loop_and_delta_at_zero(tmp_path):
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    d = _marked_dictionary()
    m, _ = build(d=d, ulr=True, ulr_dir=str(_ulr_dir(tmp_path, d)))
    crit = CrossEntropyCriterion(types.SimpleNamespace(target_dictionary=d), False)
    params = dict(m.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    at_theta_prime = {}

    def sample(seed):
        src, lengths, prev = _batch(d, seed=seed)
        target = torch.cat([prev[:, 1:], torch.full((3, 1), d.eos())], 1)
        return {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
                "target": target, "ntokens": int(target.numel()), "id": torch.arange(3), "nsentences": 3}

    d_prime = sample(2)

    def loss_fn(batch):
        if batch is d_prime:
            at_theta_prime.update({n: p.detach().clone() for n, p in params.items()})
        return crit(m, batch)

    m.train()
    maml_episode(loss_fn, sample(1), d_prime, model_partition(m), inner_lr=1e-2)
    for n in ULR_PARAMS:
        assert torch.equal(at_theta_prime[n], before[n]), n  # ε_U, A fixed in the inner loop
        assert params[n].grad is not None and params[n].grad.abs().sum() > 0  # ... and meta-trained
    assert at_theta_prime[DELTA].abs().sum() > 0 and params[DELTA].abs().sum() == 0 and params[DELTA].grad is None
    assert not torch.equal(at_theta_prime["encoder.layers.0.fc1.weight"], before["encoder.layers.0.fc1.weight"])
    assert all(torch.equal(p, before[n]) for n, p in params.items())  # θ restored


def test_budget_subsets_are_seeded_draws_within_the_budget():
    from fairseq_ext.tasks.meta_translation import budget_subset

    tokens = np.arange(1, 41) % 7 + 3
    draws = [budget_subset(tokens, 60, s) for s in range(1, 6)]
    assert all(tokens[x].sum() <= 60 and tokens[x].sum() > 60 - 10 for x in draws)
    assert len({tuple(x) for x in draws}) == 5 and np.array_equal(draws[0], budget_subset(tokens, 60, 1))
    assert len(budget_subset(tokens, 1, 1)) == 1  # at least one pair


# ----------------------------------------------------------------------------- command lines
@pytest.fixture(scope="module")
def meta_data(tmp_path_factory):
    """The harness's three-language toy corpus (aux aa, bb; low-resource cc, 40 lines); valid 20, test 12 cc."""
    return universal_corpus(tmp_path_factory.mktemp("meta"), n_valid=20, n_test=12)


MODEL = ["--arch", "ulr_transformer_tiny", "--ulr", "--dropout", "0.1"]
OPT = ["--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9", "--lr", "1e-3",
       "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "2", "--max-tokens", "400", "--cpu", "--seed", "1",
       "--no-progress-bar", "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints",
       "--criterion", "cross_entropy"]
META = ["--task", "meta_translation", *MODEL, *OPT]


def meta_train(data, save_dir, max_update, *extra, **kw):
    return fairseq("train", data, *META, "--max-update", max_update, "--save-dir", save_dir, *extra, **kw)


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


@pytest.fixture(scope="module")
def meta_ckpt(meta_data, tmp_path_factory):
    """Four meta-updates of ulr_transformer_tiny (first-order, episodes over aa and bb)."""
    save = tmp_path_factory.mktemp("meta_ckpt")
    p = meta_train(meta_data, save, 4)
    return save / "checkpoint_last.pt", p.stdout + p.stderr


def test_cli_meta_train_and_generate(meta_data, meta_ckpt, tmp_path):
    ckpt, log = meta_ckpt
    assert "meta-training languages aa,bb, inner adam x1 (lr = meta lr), first_order meta-gradient" in log
    assert "fixed in the inner loop: encoder.embed_tokens.ulr.A, encoder.embed_tokens.ulr.universal" in log
    assert "zeroed per episode: encoder.embed_tokens.delta.weight" in log
    assert "inner_loss=" in log and "num_updates=4" in log
    sd = weights(ckpt)
    assert sd[DELTA].abs().sum() == 0  # Δε is zero between episodes
    out = generate(meta_data, ckpt, "--task", "meta_translation")
    assert len(hypotheses(out)) == n_lines(meta_data.parent / "spm" / "test.src")


def test_cli_resume_equals_an_uninterrupted_run(meta_data, meta_ckpt, tmp_path):
    meta_train(meta_data, tmp_path, 2)
    p = meta_train(meta_data, tmp_path, 4)
    assert "Loaded checkpoint" in p.stdout + p.stderr and "@ 2 updates" in p.stdout + p.stderr
    a, b = weights(meta_ckpt[0]), weights(tmp_path / "checkpoint_last.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cli_finite_difference_and_meta_validation_on_a_held_out_language(meta_data, meta_ckpt, tmp_path):
    p = meta_train(meta_data, tmp_path, 2, "--meta-langs", "aa", "--meta-valid-lang", "bb", "--meta-valid-steps",
                   "2", "--meta-gradient", "finite_difference", "--inner-lr", "1e-3",
                   "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}', "--best-checkpoint-metric", "bleu",
                   "--maximize-best-checkpoint-metric")
    log = p.stdout + p.stderr
    assert re.search(r"valid on 'valid' subset .*\| bleu \d", log) and (tmp_path / "checkpoint_best.pt").exists()
    assert "meta-training languages aa, inner adam x1 (lr 0.001), finite_difference meta-gradient, " \
           "meta-validation on bb" in log
    assert "meta-validation: fine-tuned a copy on bb for 2 steps (lr 0.0001, emb+enc)" in log
    assert weights(tmp_path / "checkpoint_last.pt")[DELTA].abs().sum() == 0


@pytest.mark.parametrize("strategy", ["emb", "emb+enc", "all"])
def test_cli_finetune_strategies_from_the_meta_checkpoint(meta_data, meta_ckpt, tmp_path, strategy):
    p = fairseq("train", meta_data, "--task", "ulr_finetune_translation", "--finetune-strategy", strategy,
                "--target-token-budget", "300", "--subsample-seed", "2", "--finetune-from-model", meta_ckpt[0],
                *MODEL, *OPT, "--max-update", "2", "--save-dir", tmp_path)
    log = p.stdout + p.stderr
    assert "ulr_finetune_translation: training on" in log and "budget 300, draw 2" in log
    before, after = weights(meta_ckpt[0]), weights(tmp_path / "checkpoint_last.pt")
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    allowed = {"emb": lambda k: k == DELTA, "emb+enc": lambda k: k.startswith("encoder.") and k not in ULR_PARAMS,
               "all": lambda k: k not in ULR_PARAMS}[strategy]
    assert DELTA in changed and all(allowed(k) for k in changed), sorted(changed)
    if strategy != "emb":
        assert any(k.startswith("encoder.layers.") for k in changed)
    if strategy == "all":
        assert any(k.startswith("decoder.") for k in changed)
        out = generate(meta_data, tmp_path / "checkpoint_last.pt", "--task", "ulr_finetune_translation")
        assert len(hypotheses(out)) == n_lines(meta_data.parent / "spm" / "test.src")


def test_cli_multilingual_transfer_baseline_joint_phase(meta_data, tmp_path):
    """Eq. 6.11: universal_translation + ulr_transformer with Δε kept at zero; fine-tuning then works as above."""
    fairseq("train", meta_data, "--task", "universal_translation", *MODEL, "--ulr-freeze-delta", *OPT,
            "--max-update", "2", "--save-dir", tmp_path)
    sd = weights(tmp_path / "checkpoint_last.pt")
    assert sd[DELTA].abs().sum() == 0


def test_meta_validation_bleu_decodes_with_the_fine_tuned_copy(meta_data):
    """--eval-bleu with --meta-valid-lang: the dev BLEU is the fine-tuned copy's (as the loss is), not the meta
    model's -- fairseq's SequenceGenerator decodes with the models it was built on, so the task builds one on the
    copy for each validation and the meta model's generator is back afterwards."""
    import fairseq_ext  # noqa: F401
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(meta_data), *META, "--meta-langs", "aa", "--meta-valid-lang", "bb", "--meta-valid-steps", "1",
        "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}'])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    task.load_dataset("train")
    task.load_dataset("valid")
    ds = task.dataset("valid")
    sample = ds.collater([ds[i] for i in range(4)])
    meta_generator = task.sequence_generator
    decoded_with = []

    def inference_with_bleu(generator, sample_, model_):
        decoded_with.append((generator.model.models[0], model_))
        return types.SimpleNamespace(sys_len=1, ref_len=1, counts=[0] * 4, totals=[1] * 4)

    task._inference_with_bleu = inference_with_bleu
    for epoch in (1, 2):
        task.begin_valid_epoch(epoch, model)
        model.eval()
        with torch.no_grad():
            task.valid_step(sample, model, criterion)
            task.valid_step(sample, model, criterion)
        tuned = task._valid_model
        assert tuned is not model and decoded_with[-2:] == [(tuned, tuned)] * 2
        assert task.sequence_generator is meta_generator and meta_generator.model.models[0] is model
    assert decoded_with[0][0] is not decoded_with[-1][0]  # a new copy (and generator) at each validation


def test_cli_bad_meta_languages_are_one_clear_error(meta_data, tmp_path):
    p = meta_train(meta_data, tmp_path, 1, "--meta-langs", "aa,zz", check=False)
    assert p.returncode != 0
    assert "--meta-langs zz: not a language of this task (its languages: aa, bb, cc)" in p.stdout + p.stderr
    p = meta_train(meta_data, tmp_path, 1, "--meta-valid-lang", "aa", check=False)
    assert p.returncode != 0 and "--meta-valid-lang aa is also a meta-training language" in p.stdout + p.stderr


def test_registrations():
    from fairseq_ext.__main__ import registrations

    regs = registrations()
    assert {"meta_translation", "ulr_finetune_translation"} <= set(regs["tasks"])
    assert "transformer_ulr" in regs["models"]
    assert {"transformer_ulr", "transformer_ulr_base", "transformer_ulr_bench", "transformer_ulr_tiny"} <= set(
        regs["architectures"])
    # the earlier names, kept so that old commands and checkpoints work
    assert {"ulr_transformer", "ulr_transformer_base", "ulr_transformer_bench", "ulr_transformer_tiny"} <= set(
        regs["architectures"])

"""Gu ch. 6: the criterion ``metanmt_cross_entropy`` — the meta-objective of Eq. 6.4 (its meta-gradient is the
one ``meta_translation`` computes with ``cross_entropy``, and the hand-computed first-order one) and the
proximal prior of Eq. 6.3 (0 at θ^0, gradient 2β(θ − θ^0)), in process and through fairseq-train."""
import copy
import re
import types

import pytest
import torch

from harness import fairseq, train_objects, universal_corpus

from fairseq_ext.modules.meta_learning import INNER_ADAM_BETAS, INNER_ADAM_EPS, model_partition

DELTA = "encoder.embed_tokens.delta.weight"
MODEL = ["--arch", "ulr_transformer_tiny", "--ulr"]
OPT = ["--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9", "--lr", "1e-3",
       "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "2", "--max-tokens", "400", "--cpu", "--seed", "1",
       "--no-progress-bar", "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The harness's three-language toy corpus (aux aa, bb; low-resource cc, 40 lines); valid 20, test 12 cc."""
    return universal_corpus(tmp_path_factory.mktemp("metacrit"), n_valid=20, n_test=12)


def setup(data, criterion, *extra, dropout="0.1"):
    """(task, model, criterion) of ``fairseq-train DATA --task meta_translation ...`` built in process."""
    _, task, model, crit = train_objects(data, "--task", "meta_translation", *MODEL, "--dropout", dropout, *OPT,
                                         "--criterion", criterion, *extra, seed=0)
    task.load_dataset("train")
    return task, model, crit


def meta_grads(task, model, criterion, update_num=3, lr=1e-3):
    """The ``.grad`` of every parameter after one ``train_step`` (an episode) from a seeded RNG."""
    for p in model.parameters():
        p.grad = None
    optimizer = types.SimpleNamespace(backward=lambda loss: loss.backward(), get_lr=lambda: lr)
    torch.manual_seed(123)
    loss, n, log = task.train_step(None, model, criterion, optimizer, update_num)
    return {k: (None if p.grad is None else p.grad.clone()) for k, p in model.named_parameters()}, loss, n


@pytest.mark.parametrize("meta_gradient", ["first_order", "finite_difference"])
def test_the_criterions_meta_gradient_is_the_cross_entropy_train_steps(data, meta_gradient):
    """Same seed, same episode: ``metanmt_cross_entropy``'s meta-objective leaves exactly the gradients (and loss)
    of today's ``train_step`` with ``cross_entropy`` — dropout on, both meta-gradient forms."""
    extra = ("--meta-gradient", meta_gradient)
    task, model, ce = setup(data, "cross_entropy", *extra)
    task2, model2, meta = setup(data, "metanmt_cross_entropy", *extra)
    assert type(meta).__name__ == "MetaNMTCrossEntropyCriterion" and callable(meta.meta_objective)
    model2.load_state_dict(model.state_dict())
    model.train(), model2.train()
    g1, loss1, n1 = meta_grads(task, model, ce)
    g2, loss2, n2 = meta_grads(task2, model2, meta)
    assert g1.keys() == g2.keys() and loss1.item() == loss2.item() and n1 == n2
    assert sum(g is not None for g in g1.values()) > 10
    for k in g1:
        assert (g1[k] is None) == (g2[k] is None) and (g1[k] is None or torch.equal(g1[k], g2[k])), k
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))  # both back at θ


def test_the_first_order_meta_gradient_is_the_gradient_at_theta_prime(data):
    """Eq. 6.10 by hand on the ULR transformer: one fresh inner Adam step on D over the fast parameters (ε_U and
    A fixed, Δε from 0), then ∇L^{D′} at θ′ for the meta parameters (Δε none)."""
    task, model, meta = setup(data, "metanmt_cross_entropy", dropout="0")
    model.train()
    from fairseq_ext.tasks.meta_translation import episode_rng

    _, d, d_prime = task.draw_episode(episode_rng(task._seed(), 3, 0), model)
    D, Dp = task._collate(d, model), task._collate(d_prime, model)
    ref = copy.deepcopy(model)
    part = model_partition(ref)
    fast = part.tensors("fast")
    opt = torch.optim.Adam(fast, lr=1e-3, betas=INNER_ADAM_BETAS, eps=INNER_ADAM_EPS)
    loss, n, _ = meta.likelihood(ref, D)
    grads = torch.autograd.grad(loss / n, fast)
    for p, g in zip(fast, grads):
        p.grad = g
    opt.step()
    ref.zero_grad(set_to_none=True)
    meta.likelihood(ref, Dp)[0].backward()
    expected = {k: p.grad for k, p in ref.named_parameters()}

    got, _, _ = meta_grads(task, model, meta)
    assert got[DELTA] is None and expected[DELTA] is not None  # Δε: fast only (fixed in the meta update)
    for k in part.meta:
        torch.testing.assert_close(got[k], expected[k], rtol=1e-5, atol=1e-7, msg=k)


def test_the_proximal_term_is_zero_at_theta0_and_its_gradient_is_2_beta_delta(data):
    """Eq. 6.3 as a loss: NLL + β‖θ − θ^0‖² per sample-size unit; at θ = θ^0 exactly the NLL; its gradient
    (after fairseq's division by the sample size) adds 2β(θ − θ^0) on the trained parameters; no term in eval."""
    from fairseq_ext.criterions.metanmt_cross_entropy import MetaNMTCrossEntropyCriterion

    task, model, ce = setup(data, "cross_entropy", dropout="0")
    beta = 0.25
    crit = MetaNMTCrossEntropyCriterion(task, sentence_avg=False, proximal_weight=beta, proximal_reference="unused")
    crit.set_reference(dict(model.named_parameters()))
    model.encoder.layers[0].fc1.weight.requires_grad_(False)  # frozen by a fine-tuning strategy: not in the sum
    sample = task._collate(task.language_batches("cc", model)[0], model)
    model.train()

    def grads(criterion):
        model.zero_grad(set_to_none=True)
        loss, n, log = criterion(model, sample)
        (loss / n).backward()
        return loss.detach(), log, {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}

    l0, log0, g_ce = grads(ce)
    l1, log1, g_at = grads(crit)
    assert crit.proximal(model).item() == 0.0 and torch.equal(l0, l1) and log1["proximal"] == 0.0
    assert all(torch.equal(g_ce[k], g_at[k]) for k in g_ce)

    torch.manual_seed(5)
    delta = {k: 0.01 * torch.randn_like(p) for k, p in model.named_parameters()}
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.add_(delta[k])
    _, _, g_ce = grads(ce)
    lp, logp, g_prox = grads(crit)
    trained = {k for k, p in model.named_parameters() if p.requires_grad}
    sq = sum(float((delta[k].double() ** 2).sum()) for k in trained)
    assert crit.proximal(model).item() == pytest.approx(beta * sq, rel=1e-4)
    assert logp["proximal"] == pytest.approx(beta * sq * logp["sample_size"], rel=1e-4)
    for k in trained:
        torch.testing.assert_close(g_prox[k] - g_ce[k], 2 * beta * delta[k], rtol=1e-3, atol=1e-6, msg=k)
    model.eval()
    with torch.no_grad():
        assert "proximal" not in crit(model, sample)[2] and torch.equal(crit(model, sample)[0], ce(model, sample)[0])


def test_meta_translation_refuses_a_proximal_weight(data):
    with pytest.raises(ValueError, match="--proximal-weight is the prior of fine-tuning"):
        setup(data, "metanmt_cross_entropy", "--proximal-weight", "0.1", "--proximal-reference", "x.pt")


# ----------------------------------------------------------------------------- command lines
def meta_train(data, save_dir, max_update, criterion, *extra, **kw):
    return fairseq("train", data, "--task", "meta_translation", *MODEL, "--dropout", "0.1", *OPT, "--criterion",
                   criterion, "--max-update", max_update, "--save-dir", save_dir, *extra, **kw)


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


@pytest.fixture(scope="module")
def meta_ckpts(data, tmp_path_factory):
    """Two meta-updates with the old command (``--criterion cross_entropy``, as recipes/gu/ch6.sh runs it) and the
    same with ``--criterion metanmt_cross_entropy``."""
    root = tmp_path_factory.mktemp("meta_cli")
    meta_train(data, root / "old", 2, "cross_entropy")
    p = meta_train(data, root / "new", 2, "metanmt_cross_entropy")
    assert "num_updates=2" in p.stdout + p.stderr
    return root / "old" / "checkpoint_last.pt", root / "new" / "checkpoint_last.pt"


def finetune(data, ckpt, save_dir, beta, *extra, **kw):
    return fairseq("train", data, "--task", "ulr_finetune_translation", "--finetune-strategy", "all",
                   "--finetune-from-model", ckpt, *MODEL, "--dropout", "0.1", *OPT, "--lr-scheduler", "fixed",
                   "--lr", "3e-3", "--criterion", "metanmt_cross_entropy", "--proximal-weight", beta,
                   "--save-dir", save_dir, *extra, **kw)


def distance(ckpt, reference):
    a, b = weights(ckpt), weights(reference)
    return sum(float(((a[k].float() - b[k].float()) ** 2).sum()) for k in b) ** 0.5


def test_cli_meta_training_with_the_criterion_writes_the_old_commands_checkpoint(meta_ckpts):
    """fairseq-train: same seed, same episodes -> the same meta-gradients -> the very same parameters."""
    a, b = weights(meta_ckpts[0]), weights(meta_ckpts[1])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cli_fine_tuning_with_the_proximal_prior(data, meta_ckpts, tmp_path):
    """``--proximal-weight`` with θ^0 = ``--finetune-from-model`` (no ``--proximal-reference``): trains and logs the
    term; without a reference: one error line."""
    p = finetune(data, meta_ckpts[1], tmp_path / "ft", "3", "--max-update", "3")
    log = p.stdout + p.stderr
    assert "'proximal_weight': 3.0" in log and "num_updates=3" in log
    logged = [float(x) for x in re.findall(r"train_inner .* proximal=([0-9.]+)", log)]
    assert len(logged) == 3 and logged[0] == 0.0 and min(logged[1:]) > 0  # θ = θ^0 at the first update
    assert 0 < distance(tmp_path / "ft" / "checkpoint_last.pt", meta_ckpts[1])

    p = fairseq("train", data, "--task", "ulr_finetune_translation", *MODEL, *OPT, "--criterion",
                "metanmt_cross_entropy", "--proximal-weight", "1", "--max-update", "1", "--save-dir",
                tmp_path / "bad", check=False)
    assert p.returncode != 0
    assert "error: metanmt_cross_entropy: --proximal-weight needs the reference parameters" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_cli_the_proximal_prior_keeps_fine_tuning_nearer_theta0(data, meta_ckpts, tmp_path):
    """Six fine-tuning updates (all parameters, lr 3e-3) with β = 0 and β = 3 from the same checkpoint and
    seed: the prior leaves the parameters nearer θ^0."""
    dist = {}
    for beta in ("0", "3"):
        p = finetune(data, meta_ckpts[1], tmp_path / beta, beta, "--max-update", "6")
        assert ("proximal=" in p.stdout + p.stderr) == (beta != "0")  # logged only with a prior
        dist[beta] = distance(tmp_path / beta / "checkpoint_last.pt", meta_ckpts[1])
    assert 0 < dist["3"] < dist["0"]

"""Nguyen ch. 6 "Transformers without Tears": the INVSQRTDECAY (Eq. 6.7) / VALDECAY / NOWARMUP LR schedulers,
in process."""
import math

import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the model)
import fairseq_ext.optim  # noqa: F401  (registers the LR schedulers)
from fairseq_ext.optim.twt_schedules import invsqrt_lr


# ------------------------------------------------------------------------------------- LR schedules
def make_optimizer(lr=1.0):
    from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

    cfg = FairseqAdamConfig(lr=[lr], adam_betas="(0.9, 0.999)", tpu=False)
    return FairseqAdam(cfg, [torch.nn.Parameter(torch.zeros(1))])


def scheduler(name, begin=True, **cfg):
    """A scheduler as the trainer drives it: built, then ``begin_epoch`` before the first update."""
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY, LR_SCHEDULER_DATACLASS_REGISTRY

    s = LR_SCHEDULER_REGISTRY[name](LR_SCHEDULER_DATACLASS_REGISTRY[name](**cfg), make_optimizer())
    if begin:
        s.step_begin_epoch(1)
    return s


def test_invsqrt_formula_peaks():
    # Eq. 6.7, §6.3.4: λ=1, d=512, n_w=8k gives 4.94e-4; λ=2 gives ≈1e-3
    assert math.isclose(invsqrt_lr(8000, 1, 512, 8000), 4.94e-4, rel_tol=1e-3)
    assert math.isclose(invsqrt_lr(8000, 2, 512, 8000), 9.88e-4, rel_tol=1e-3)


@pytest.mark.parametrize("lam", [1.0, 2.0])
def test_twt_invsqrt_follows_eq_6_7(lam):
    nw = 800
    s = scheduler("twt_invsqrt", lr_lambda=lam, lr_model_dim=512, warmup_updates=nw)
    for k in (1, 2, nw // 2, nw - 1, nw, nw + 1, 4 * nw, 100 * nw):
        lr = s.step_update(k - 1)  # update k runs at LR(k)
        want = lam / math.sqrt(512) * min(k ** -0.5, k * nw ** -1.5)
        assert math.isclose(lr, want, rel_tol=1e-12) and math.isclose(s.optimizer.get_lr(), want)
    s.step(5, 30.0)  # validation does not change it
    assert math.isclose(s.optimizer.get_lr(), want)


@pytest.mark.parametrize("name,kw", [("twt_invsqrt", {}), ("valdecay", dict(lr=[3e-4], lr_lambda=1.0)),
                                     ("valdecay", dict(lr=[3e-4]))])
def test_peak_is_reported_before_training_starts(name, kw):
    """fairseq's pre-training --stop-min-lr check sees the post-warmup LR, the first update LR(1)."""
    kw = dict(kw, warmup_updates=8000, lr_model_dim=512)
    if name == "valdecay":
        kw["maximize_best_checkpoint_metric"] = True
    s = scheduler(name, begin=False, **kw)
    peak = kw["lr"][0] if "lr" in kw and "lr_lambda" not in kw else 1 / math.sqrt(512 * 8000)
    assert math.isclose(s.optimizer.get_lr(), peak) and math.isclose(s.step_update(0), peak)
    s.step_begin_epoch(1)
    assert math.isclose(s.step_update(0), peak / 8000)


def test_fairseq_inverse_sqrt_with_mapped_lr_matches_eq_6_7():
    """Spec invariant 4: fairseq inverse_sqrt with lr = λ/√(d·n_w), warmup-init 0."""
    nw, lam, d = 8000, 1.0, 512
    s = scheduler("inverse_sqrt", lr=[lam / math.sqrt(d * nw)], warmup_updates=nw, warmup_init_lr=0)
    assert s.optimizer.get_lr() == 0  # why twt_invsqrt exists: fairseq's --stop-min-lr would stop here
    for n in (1, nw // 2, nw, 4 * nw):
        assert math.isclose(s.step_update(n), invsqrt_lr(n, lam, d, nw), rel_tol=1e-9)


def valdecay(**kw):
    kw.setdefault("lr", [3e-4])
    kw.setdefault("maximize_best_checkpoint_metric", True)
    return scheduler("valdecay", **kw)


def test_valdecay_warmup_is_up_flat():
    nw = 100
    s = valdecay(warmup_updates=nw, lr_lambda=1.0, lr_model_dim=512)
    peak = 1 / math.sqrt(512 * nw)
    for k in (1, 50, 99, 100, 101, 1000, 10 ** 6):
        assert math.isclose(s.step_update(k - 1), invsqrt_lr(k, 1.0, 512, nw) if k <= nw else peak)


def test_valdecay_decays_by_the_reference_plateau_rule():
    """Decay ×0.8 iff the new score is below the minimum of the previous 3 (spec §6.7.2)."""
    s = valdecay(warmup_updates=0)
    s.step_update(10)
    bleus = [10, 12, 13, 11, 12.5, 10.9, 14, 11, 11, 9, 20]
    decays = [False, False, False, False, False, True, False, False, False, True, False]
    lr = 3e-4
    for b, dec in zip(bleus, decays):
        lr *= 0.8 if dec else 1.0
        assert math.isclose(s.step(1, b), lr), (b, dec)
        assert math.isclose(s.optimizer.get_lr(), lr)
    assert s.step(1, None) == s.optimizer.get_lr()  # no validation this epoch: no change


def test_valdecay_minimize_mode_and_threshold():
    s = valdecay(warmup_updates=0, maximize_best_checkpoint_metric=False, lr_patience=1)
    assert math.isclose(s.step(1, 5.0), 3e-4) and math.isclose(s.step(2, 4.0), 3e-4)
    assert math.isclose(s.step(3, 4.5), 3e-4 * 0.8)  # a loss above the previous one is worse
    s = valdecay(warmup_updates=0, lr_patience=1, lr_threshold=1.0)
    s.step(1, 10.0)
    assert math.isclose(s.step(2, 9.5), 3e-4) and math.isclose(s.step(3, 8.0), 3e-4 * 0.8)


def test_valdecay_does_not_decay_during_warmup():
    s = valdecay(warmup_updates=100)
    for epoch, score in enumerate([5, 4, 3, 2, 1], 1):
        s.step_update(epoch * 10)
        s.step(epoch, score)
    assert math.isclose(s.lr, 3e-4)
    s.step_update(100)
    assert math.isclose(s.step(6, 0.5), 3e-4 * 0.8)  # warmup over: the history still counts


def test_nowarmup_decays_until_stop_min_lr_and_state_round_trips():
    s = valdecay(warmup_updates=0)  # NOWARMUP: constant 3e-4
    assert math.isclose(s.optimizer.get_lr(), 3e-4) and math.isclose(s.step_update(0), 3e-4)
    scores, lr = [30.0, 30.0, 30.0], 3e-4
    for sc in scores:
        s.step(1, sc)
    epochs = 0
    while lr > 1e-6:  # a falling dev score decays every epoch until --stop-min-lr
        scores.append(scores[-1] - 1)
        lr = s.step(1, scores[-1])
        epochs += 1
    assert epochs == math.ceil(math.log(1e-6 / 3e-4) / math.log(0.8))
    t = valdecay(warmup_updates=0)
    t.load_state_dict(s.state_dict())
    assert t.lr == s.lr and t.scores == s.scores and math.isclose(t.step_update(5), s.lr)


def test_valdecay_rejects_bad_settings():
    with pytest.raises(ValueError):
        valdecay(lr_patience=0)
    with pytest.raises(ValueError):
        valdecay(lr_lambda=1.0, warmup_updates=0)

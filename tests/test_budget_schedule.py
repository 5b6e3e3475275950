"""``budget_inverse_sqrt``: the warm-up fits the budget (``--max-update``, or ``--stop-time-hours`` at the measured
speed); without a budget it is fairseq's ``inverse_sqrt``; the effective warm-up survives a resume."""
import math
import re

import pytest
import torch
from fairseq.optim import FairseqOptimizer
from fairseq.optim.lr_scheduler.inverse_square_root_schedule import (
    InverseSquareRootLRScheduleConfig,
    InverseSquareRootSchedule,
)

from harness import TINY_TRANSFORMER, train

import fairseq_ext  # noqa: F401  (registration)
from fairseq_ext.optim import budget_schedule
from fairseq_ext.optim.budget_schedule import BudgetInverseSqrtConfig, BudgetInverseSqrtSchedule


class Opt(FairseqOptimizer):  # a fairseq optimizer over one parameter
    def __init__(self):
        super().__init__(None)
        self._optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


def sched(**kw):
    cfg = BudgetInverseSqrtConfig(**{"lr": [1e-3], "warmup_updates": 300, "max_update": 0, "stop_time_hours": 0,
                                     **kw})
    return BudgetInverseSqrtSchedule(cfg, Opt())


def test_without_a_budget_it_is_inverse_sqrt():
    ours = sched(warmup_updates=40)
    ref = InverseSquareRootSchedule(InverseSquareRootLRScheduleConfig(lr=[1e-3], warmup_updates=40), Opt())
    for u in (0, 1, 20, 39, 40, 41, 500):
        assert ours.step_update(u) == pytest.approx(ref.step_update(u), rel=1e-12)


def test_warmup_is_a_share_of_max_update():
    s = sched(max_update=100)  # 10% of 100 < 300
    assert s.warmup == 10
    assert s.step_update(5) == pytest.approx(0.5e-3)
    assert s.step_update(10) == pytest.approx(1e-3)
    assert s.step_update(40) == pytest.approx(1e-3 * math.sqrt(10 / 40))
    assert sched(max_update=100_000).warmup == 300  # a long budget keeps --warmup-updates
    with pytest.raises(ValueError, match="--warmup-share"):
        sched(warmup_share=0)


def test_time_budget_is_estimated_from_the_first_updates(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(budget_schedule.time, "monotonic", lambda: clock[0])
    s = sched(stop_time_hours=0.1, budget_probe_updates=10)  # 360 s
    for u in range(1, 12):  # 1 s per update -> ~360 updates in the budget -> warm-up 36
        s.step_update(u)
        clock[0] += 1.0
    assert s.warmup == 36
    assert s.step_update(72) == pytest.approx(1e-3 * math.sqrt(36 / 72))
    state = s.state_dict()
    resumed = sched(stop_time_hours=0.1, budget_probe_updates=10)
    resumed.load_state_dict(state)
    assert resumed.warmup == 36 and resumed.step_update(72) == pytest.approx(s.step_update(72))


def test_warmup_never_shrinks_below_the_updates_made(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(budget_schedule.time, "monotonic", lambda: clock[0])
    s = sched(stop_time_hours=0.01, budget_probe_updates=30)  # 36 s at 1 s/update -> 3.6 updates of warm-up
    for u in range(1, 33):
        s.step_update(u)
        clock[0] += 1.0
    assert s.warmup == 31  # the probe ended at update 31


def test_cli_short_budget_reaches_the_learning_rate(tiny_bin, tmp_path):
    """fairseq-train with --warmup-updates 300 and --max-update 20: plain inverse_sqrt ends at 20/300 of --lr,
    budget_inverse_sqrt warms up in 2 updates and decays from --lr."""
    args = TINY_TRANSFORMER
    log = {}
    for name in ("inverse_sqrt", "budget_inverse_sqrt"):
        ckpt = train(tiny_bin, tmp_path / name, args, max_update=20,
                     extra=["--lr-scheduler", name, "--warmup-updates", "300", "--disable-validation"])
        log[name] = torch.load(ckpt, map_location="cpu", weights_only=False)
    lr = {k: v["last_optimizer_state"]["param_groups"][0]["lr"] for k, v in log.items()}
    assert lr["inverse_sqrt"] == pytest.approx(1e-3 * 19 / 300, rel=0.1)
    assert lr["budget_inverse_sqrt"] == pytest.approx(1e-3 * math.sqrt(2 / 19), rel=0.1)
    assert log["budget_inverse_sqrt"]["optimizer_history"][-1]["lr_scheduler_state"]["warmup_updates"] == 2

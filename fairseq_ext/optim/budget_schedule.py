"""``budget_inverse_sqrt``: fairseq's ``inverse_sqrt`` whose warm-up fits the training budget.

A short run with a fixed ``--warmup-updates`` can end inside its warm-up: the learning rate never reaches
``--lr`` and the model barely trains. Here the warm-up is ``min(--warmup-updates, --warmup-share x the updates
the budget allows)``: the budget is ``--max-update`` when given, and/or ``--stop-time-hours``, whose number of
updates is estimated from the measured time of the first ``--budget-probe-updates`` updates (the warm-up then
shrinks at that point, never below the updates already made). After the warm-up the learning rate decays as in
``inverse_sqrt`` (``lr x sqrt(warmup / update)``). With no budget it *is* ``inverse_sqrt``. The effective warm-up
is kept in the checkpoint, so a resumed run goes on with it.
"""
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from fairseq.optim.lr_scheduler import register_lr_scheduler
from fairseq.optim.lr_scheduler.inverse_square_root_schedule import (
    InverseSquareRootLRScheduleConfig,
    InverseSquareRootSchedule,
)
from omegaconf import II

logger = logging.getLogger(__name__)


@dataclass
class BudgetInverseSqrtConfig(InverseSquareRootLRScheduleConfig):
    warmup_updates: int = field(
        default=4000, metadata={"help": "the longest warm-up (linear, in updates); shortened to fit the budget"})
    warmup_share: float = field(
        default=0.1, metadata={"help": "the warm-up takes at most this share of the updates the budget allows "
                                       "(--max-update, or --stop-time-hours at the measured speed)"})
    budget_probe_updates: int = field(
        default=20, metadata={"help": "with --stop-time-hours: estimate the updates of the budget from the time "
                                      "of this many first updates"})
    max_update: int = II("optimization.max_update")
    stop_time_hours: float = II("optimization.stop_time_hours")


@register_lr_scheduler("budget_inverse_sqrt", dataclass=BudgetInverseSqrtConfig)
class BudgetInverseSqrtSchedule(InverseSquareRootSchedule):
    """``inverse_sqrt`` with a warm-up of at most ``warmup_share`` of the budget (module doc)."""

    def __init__(self, cfg: BudgetInverseSqrtConfig, optimizer):
        if not 0 < cfg.warmup_share <= 1:
            raise ValueError(f"--warmup-share must be in (0, 1], got {cfg.warmup_share}")
        super().__init__(cfg, optimizer)
        self.warmup_end_lr = cfg.lr[0] if isinstance(cfg.lr, Collection) else cfg.lr
        self.warmup = cfg.warmup_updates
        self._probe_start = None  # (time, updates) when the time budget's probe started
        self._estimated = not (cfg.stop_time_hours or 0) > 0
        if (cfg.max_update or 0) > 0:
            self._fit(cfg.max_update, 0, "--max-update")

    def _fit(self, budget_updates: float, done: int, what: str) -> None:
        w = max(1, min(self.warmup, int(self.cfg.warmup_share * budget_updates)), done)
        if w < self.warmup:
            logger.info("budget_inverse_sqrt: warm-up %d -> %d updates (%.0f%% of the ~%d updates of %s)",
                        self.warmup, w, 100 * self.cfg.warmup_share, budget_updates, what)
            self._set_warmup(w)

    def _set_warmup(self, w: int) -> None:
        self.warmup = w
        self.lr_step = (self.warmup_end_lr - self.cfg.warmup_init_lr) / w
        self.decay_factor = self.warmup_end_lr * w ** 0.5

    def step_update(self, num_updates):
        if not self._estimated:
            if self._probe_start is None:
                self._probe_start = (time.monotonic(), num_updates)
            elif num_updates - self._probe_start[1] >= self.cfg.budget_probe_updates:
                t0, u0 = self._probe_start
                per_update = (time.monotonic() - t0) / (num_updates - u0)
                self._fit(self.cfg.stop_time_hours * 3600 / max(per_update, 1e-9), num_updates,
                          f"--stop-time-hours {self.cfg.stop_time_hours:g} at {per_update:.2f} s/update")
                self._estimated = True
        if num_updates < self.warmup:
            self.lr = self.cfg.warmup_init_lr + num_updates * self.lr_step
        else:
            self.lr = self.decay_factor * num_updates ** -0.5
        self.optimizer.set_lr(self.lr)
        return self.lr

    def state_dict(self):
        return {**super().state_dict(), "warmup_updates": self.warmup, "estimated": self._estimated}

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        if "warmup_updates" in state_dict:
            self._set_warmup(int(state_dict["warmup_updates"]))
            self._estimated = bool(state_dict.get("estimated", True))

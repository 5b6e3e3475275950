"""Learning-rate regimes of Nguyen (2021) ch. 6 (§6.2.4, §6.3.4), as fairseq LR schedulers.

* ``twt_invsqrt`` — INVSQRTDECAY, Eq. 6.7: LR(n) = λ/√d · min(n^−½, n·n_w^−1.5)
  (``--lr-lambda λ --lr-model-dim d --warmup-updates n_w``; 2×LR is ``--lr-lambda 2``).
  fairseq's ``inverse_sqrt`` with ``--lr λ/√(d·n_w) --warmup-init-lr 0`` gives the same curve, but it
  starts at LR 0, which ``--stop-min-lr`` takes for "stop" before the first epoch.
* ``valdecay`` — VALDECAY / NOWARMUP: linear warmup over ``--warmup-updates`` to the peak (``--lr``,
  or λ/√(d·n_w) with ``--lr-lambda``), then flat ("up-flat"); after each validation the LR is
  multiplied by ``--lr-shrink`` (α_decay = 0.8) when the score is worse than every one of the previous
  ``--lr-patience`` (3) scores — the reference implementation's plateau rule, not
  torch's best-so-far rule of ``reduce_lr_on_plateau``. No decay during warmup. ``--warmup-updates 0
  --lr 3e-4`` is NOWARMUP. The score is fairseq's ``--best-checkpoint-metric`` (dev BLEU with
  ``--eval-bleu --best-checkpoint-metric bleu --maximize-best-checkpoint-metric``); training stops
  once the LR falls to ``--stop-min-lr 1e-6``.

Convention: ``step_update(n)`` (called after n updates) sets the LR of update n + 1, so update k runs
at LR(k) of Eq. 6.7 as in the reference implementation.

``--stop-min-lr`` during warmup: fairseq compares the LR with ``--stop-min-lr`` before the first epoch,
when a warmup LR(1) = peak/n_w (e.g. 6e-8) would stop training at once (fairseq's own ``inverse_sqrt``
does that, starting at 0). Until the first ``step_begin_epoch`` both schedulers therefore report the
post-warmup LR while still in warmup; the real LR(n + 1) is set when the epoch begins, before any
update. Like the reference implementation, the stop rule is then about the decayed LR; only an
epoch end inside the warmup with LR(n + 1) ≤ ``--stop-min-lr`` (tiny epochs) would still stop.
"""
import math
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from fairseq.optim.lr_scheduler.reduce_lr_on_plateau import ReduceLROnPlateauLRScheduleConfig


def invsqrt_lr(n: int, lr_lambda: float, d: int, warmup: int) -> float:
    """Eq. 6.7: λ/√d · min(1/√n, n/n_w^1.5) (pure inverse-sqrt decay when n_w = 0)."""
    n = max(n, 1)
    if warmup <= 0:
        return lr_lambda / math.sqrt(d * n)
    return lr_lambda / math.sqrt(d) * min(n ** -0.5, n * warmup ** -1.5)


class _PeakBeforeTraining:
    """Report the post-warmup LR (``self.plateau_lr()``) during warmup until the first epoch begins."""

    started = False

    def step_begin_epoch(self, epoch):
        self.started = True
        return super().step_begin_epoch(epoch)

    def _set(self, n: int, lr: float) -> float:
        warm = n < self.cfg.warmup_updates
        self.optimizer.set_lr(self.plateau_lr() if warm and not self.started else lr)
        return self.optimizer.get_lr()


@dataclass
class TwtInvSqrtConfig(FairseqDataclass):
    lr_lambda: float = field(default=1.0, metadata={"help": "λ of Eq. 6.7 (2 for the 2×LR runs)"})
    lr_model_dim: int = field(default=512, metadata={"help": "d of Eq. 6.7 (the model dimension)"})
    warmup_updates: int = field(default=8000, metadata={"help": "n_warmup of Eq. 6.7"})


@register_lr_scheduler("twt_invsqrt", dataclass=TwtInvSqrtConfig)
class TwtInvSqrtSchedule(_PeakBeforeTraining, FairseqLRScheduler):
    """INVSQRTDECAY (Eq. 6.7); ignores ``--lr``."""

    def __init__(self, cfg: TwtInvSqrtConfig, optimizer):
        super().__init__(cfg, optimizer)
        self.step_update(0)

    def lr_at(self, n: int) -> float:
        return invsqrt_lr(n, self.cfg.lr_lambda, self.cfg.lr_model_dim, self.cfg.warmup_updates)

    def plateau_lr(self) -> float:
        return self.lr_at(max(self.cfg.warmup_updates, 1))  # the peak

    def step_update(self, num_updates):
        return self._set(num_updates + 1, self.lr_at(num_updates + 1))


@dataclass
class ValDecayConfig(ReduceLROnPlateauLRScheduleConfig):
    lr_shrink: float = field(default=0.8, metadata={"help": "α_decay: LR factor on a plateau"})
    lr_threshold: float = field(
        default=0.0, metadata={"help": "decay when the score is worse than the previous --lr-patience "
                                       "scores by more than this (0: the reference rule)"})
    lr_patience: int = field(default=3, metadata={"help": "number of previous validations compared"})
    warmup_updates: int = field(
        default=0, metadata={"help": "linear warmup to the peak over N updates (0: NOWARMUP)"})
    warmup_init_lr: float = field(default=0.0, metadata={"help": "LR at the start of the warmup"})
    lr_lambda: float = field(
        default=0.0, metadata={"help": "if > 0, the peak LR is λ/√(d·n_w) (Eq. 6.7 at n = n_w) "
                                       "instead of --lr; needs --warmup-updates"})
    lr_model_dim: int = field(default=512, metadata={"help": "d for --lr-lambda"})


@register_lr_scheduler("valdecay", dataclass=ValDecayConfig)
class ValDecaySchedule(_PeakBeforeTraining, FairseqLRScheduler):
    """VALDECAY (linear warmup, flat, ×α_decay on a dev plateau) and NOWARMUP (``--warmup-updates 0``)."""

    def __init__(self, cfg: ValDecayConfig, optimizer):
        super().__init__(cfg, optimizer)
        if cfg.lr_patience < 1:
            raise ValueError("valdecay needs --lr-patience >= 1")
        if cfg.lr_lambda > 0:
            if cfg.warmup_updates <= 0:
                raise ValueError("--lr-lambda needs --warmup-updates > 0 (NOWARMUP takes --lr)")
            self.peak = cfg.lr_lambda / math.sqrt(cfg.lr_model_dim * cfg.warmup_updates)
        else:
            self.peak = cfg.lr[0]
        self.lr = self.peak  # the LR after warmup; decayed by step()
        self.scores = []
        self.num_updates = 0
        self.step_update(0)

    def plateau_lr(self) -> float:
        return self.lr

    def step_update(self, num_updates):
        self.num_updates = num_updates
        n, w = num_updates + 1, self.cfg.warmup_updates
        w0 = max(self.cfg.warmup_init_lr, 0.0)
        return self._set(n, self.lr if n >= w else w0 + (self.peak - w0) * n / w)

    def step(self, epoch, val_loss=None):
        super().step(epoch, val_loss)
        if val_loss is not None:
            self.scores.append(float(val_loss))
            p = self.cfg.lr_patience
            if self.num_updates >= self.cfg.warmup_updates and len(self.scores) > p:
                sign = 1.0 if self.cfg.maximize_best_checkpoint_metric else -1.0
                worst = min(sign * s for s in self.scores[-1 - p:-1])
                if sign * self.scores[-1] < worst - self.cfg.lr_threshold:
                    self.lr *= self.cfg.lr_shrink
        return self.step_update(self.num_updates)

    def state_dict(self):
        return {"best": self.best, "lr": self.lr, "scores": list(self.scores)}

    def load_state_dict(self, state_dict):
        self.best = state_dict.get("best")
        self.lr = state_dict.get("lr", self.lr)
        self.scores = list(state_dict.get("scores", []))

"""``rmsprop``: RMSProp (Tieleman & Hinton 2012) as a fairseq optimiser, with one learning rate per parameter
group — what trainable greedy decoding needs (Gu 2019 §7.4.1: "RMSProp with the initial learning rates of
2×10⁻⁶ and 2×10⁻⁴, respectively, for the actor and critic"), since fairseq builds one optimiser over all
trainable parameters.

torch's :class:`torch.optim.RMSprop` (``--rmsprop-alpha`` the decay of the mean square, ``--rmsprop-eps``,
``--rmsprop-momentum``, ``--rmsprop-centered``, ``--weight-decay``) over parameter groups formed by the
parameters' ``param_group`` attribute (the one fairseq's ``composite`` optimiser reads; untagged
parameters form the group ``default``). ``--group-lr "actor:2e-6,critic:2e-4"`` gives a group its learning
rate at ``--lr``; the LR scheduler's value is the base (what fairseq logs as ``lr``) and every group follows
it in proportion: lr_g(t) = lr(t) · lr_g / ``--lr`` (with ``--lr-scheduler fixed`` the groups keep their
rates). Unlisted groups run at lr(t). As for every torch optimiser, a parameter without a gradient in an
update is left alone (its state included), which is how the actor–critic alternation updates one network
at a time. On resume the group rates come from the command line (fairseq's rule: the current optimiser
configuration wins over the checkpoint's).

Reference: Tieleman, Hinton, "Lecture 6.5 — RMSProp", COURSERA: Neural Networks for Machine Learning, 2012.
"""
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II


@dataclass
class FairseqRMSPropConfig(FairseqDataclass):
    rmsprop_alpha: float = field(default=0.99, metadata={"help": "decay of the running mean of squared gradients"})
    rmsprop_eps: float = field(default=1e-8, metadata={"help": "added to the denominator"})
    rmsprop_momentum: float = field(default=0.0, metadata={"help": "momentum factor"})
    rmsprop_centered: bool = field(default=False, metadata={"help": "normalise by the estimated variance"})
    weight_decay: float = field(default=0.0, metadata={"help": "weight decay"})
    group_lr: str = field(
        default="", metadata={"help": "per parameter group learning rates at --lr, e.g. 'actor:2e-6,critic:2e-4' "
                                      "(groups: the parameters' param_group attribute)"})
    lr: List[float] = II("optimization.lr")


def parse_group_lr(spec: str) -> Dict[str, float]:
    """``"actor:2e-6,critic:2e-4"`` → {"actor": 2e-6, "critic": 2e-4}."""
    out: Dict[str, float] = {}
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--group-lr: expected NAME:LR items, got {item!r}")
        out[name.strip()] = float(value)
    return out


@register_optimizer("rmsprop", dataclass=FairseqRMSPropConfig)
class FairseqRMSProp(FairseqOptimizer):
    """RMSProp with per-group learning rates (module doc)."""

    def __init__(self, cfg: FairseqRMSPropConfig, params):
        super().__init__(cfg)
        self.base_lr = float(cfg.lr[0])
        self.group_lrs = parse_group_lr(cfg.group_lr)
        groups: "OrderedDict[str, list]" = OrderedDict()
        for p in params:
            groups.setdefault(getattr(p, "param_group", "default"), []).append(p)
        unknown = set(self.group_lrs) - set(groups)
        if unknown:
            raise ValueError(f"--group-lr names groups no parameter has: {sorted(unknown)} (groups: {list(groups)})")
        param_groups = [{"params": ps, "name": name, "lr_scale": self.lr_scale(name)} for name, ps in groups.items()]
        self._optimizer = torch.optim.RMSprop(param_groups, **self.optimizer_config)
        self.set_lr(self.base_lr)

    def lr_scale(self, name: str) -> float:
        if name not in self.group_lrs:
            return 1.0
        lr0 = float(self.cfg.lr[0])
        if lr0 <= 0:
            raise ValueError("--group-lr needs --lr > 0")
        return self.group_lrs[name] / lr0

    @property
    def optimizer_config(self):
        return {"lr": self.cfg.lr[0], "alpha": self.cfg.rmsprop_alpha, "eps": self.cfg.rmsprop_eps,
                "momentum": self.cfg.rmsprop_momentum, "centered": self.cfg.rmsprop_centered,
                "weight_decay": self.cfg.weight_decay}

    def get_lr(self):
        """The scheduler's (base) learning rate."""
        return self.base_lr

    def set_lr(self, lr):
        self.base_lr = float(lr)
        for group in self.param_groups:
            group["lr"] = self.base_lr * group.get("lr_scale", 1.0)

    def load_state_dict(self, state_dict, optimizer_overrides=None):
        super().load_state_dict(state_dict, optimizer_overrides)
        for group in self.param_groups:  # the command line's group rates win
            group["lr_scale"] = self.lr_scale(group.get("name", "default"))
        self.set_lr(self.base_lr)

    @property
    def supports_flat_params(self):
        return False

"""``metanmt_cross_entropy``: the objectives of MetaNMT (Gu 2019 ch. 6) as a criterion — fairseq's
``cross_entropy`` (the NLL −Σ log p(Y|X; θ), summed, divided by the sample size by fairseq's trainer) with

* the meta-objective of Eq. 6.4 (:meth:`MetaNMTCrossEntropyCriterion.meta_objective`): the NLL of D′ at θ′ =
  Learn(D; θ) and its meta-gradient — ∇_{θ′}L^{D′}(θ′) (first-order, Eq. 6.10) or the finite difference of
  Eqs. 6.7–6.9 — left in the ``.grad`` of the meta parameters. The task ``meta_translation`` keeps the
  episodes and language-specific learning on D (its inner loop) and calls it for step 3 of each episode; its
  ``--meta-gradient`` / ``--fd-nu`` choose the form. With the NLL as its loss this is exactly what the task
  computes with ``--criterion cross_entropy``.
* the proximal prior of Eqs. 6.2–6.3 for language-specific learning on the target task (fine-tuning with
  ``ulr_finetune_translation``): Learn(D; θ^0) = argmax_θ Σ log p(Y|X, θ) − β‖θ − θ^0‖², i.e. the training
  loss NLL + β‖θ − θ^0‖² (θ_i ~ N(θ_i^0, 1/β²)). β = ``--proximal-weight`` (default 0: off), θ^0 = the
  parameters of ``--proximal-reference`` (default: ``--finetune-from-model``, the meta-learned checkpoint
  fine-tuning starts from). The sum is over the parameters that fine-tuning trains (those frozen by
  ``--finetune-strategy`` stay at θ^0). β is in the scale of the per-unit loss fairseq's optimiser sees
  (the term is added as sample_size · β‖θ − θ^0‖² to the summed NLL), so the gradient the optimiser gets is
  ∇(NLL / sample_size) + 2β(θ − θ^0). The term applies to training batches only (validation scores the NLL).

Logged: ``loss`` / ``nll_loss`` / ``ppl`` of the likelihood term exactly as ``cross_entropy`` logs them, and
``proximal`` (β‖θ − θ^0‖² per sample-size unit, base 2 like ``loss``) when β > 0.

The thesis solves Eq. 6.3 "by maximizing the first term with gradient-based optimization and early-stopping
after only a few update steps" — the default β = 0.

Reference: J. Gu, Y. Wang, Y. Chen, K. Cho, V. O. K. Li, "Meta-Learning for Low-Resource Neural Machine
Translation", EMNLP 2018; J. Gu, "Efficient Neural Machine Translation", PhD thesis, HKU, 2019, ch. 6.
"""
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig
from omegaconf import II

from fairseq_ext.data.context_keys import unwrap_model
from fairseq_ext.modules.checkpoint import CheckpointError, load_state
from fairseq_ext.modules.meta_learning import InnerLearning, ParameterPartition, meta_objective_gradient, proximal_term
from fairseq_ext.data.errors import UserDataError


@dataclass
class MetaNMTCrossEntropyCriterionConfig(CrossEntropyCriterionConfig):
    proximal_weight: float = field(
        default=0.0, metadata={"help": "beta of the proximal prior beta*||theta - theta0||^2 (Eq. 6.3) added to the "
                                       "per-token training loss during fine-tuning (0: off)"})
    proximal_reference: Optional[str] = field(
        default=None, metadata={"help": "checkpoint whose parameters are theta0 of the proximal prior (default: "
                                        "--finetune-from-model)"})
    finetune_from_model: Optional[str] = II("checkpoint.finetune_from_model")


@register_criterion("metanmt_cross_entropy", dataclass=MetaNMTCrossEntropyCriterionConfig)
class MetaNMTCrossEntropyCriterion(CrossEntropyCriterion):
    """NLL (fairseq's ``cross_entropy``), the meta-objective of Eq. 6.4 and the proximal prior of Eq. 6.3
    (module doc)."""

    def __init__(self, task, sentence_avg, proximal_weight: float = 0.0, proximal_reference: Optional[str] = None,
                 finetune_from_model: Optional[str] = None):
        super().__init__(task, sentence_avg)
        if not proximal_weight >= 0:
            raise UserDataError(f"metanmt_cross_entropy: --proximal-weight must be >= 0, got {proximal_weight}")
        reference = None
        for value in (proximal_reference, finetune_from_model):
            try:
                reference = reference or (str(value) if value else None)
            except Exception:  # an unresolvable interpolation (a config built by hand)
                continue
        if proximal_weight > 0 and not reference:
            raise CheckpointError("metanmt_cross_entropy: --proximal-weight needs the reference parameters theta0: "
                                  "give --proximal-reference CHECKPOINT or --finetune-from-model CHECKPOINT")
        self.proximal_weight = float(proximal_weight)
        self.proximal_reference = reference
        self._reference: Optional[Dict[str, torch.Tensor]] = None  # θ^0 of the trained parameters

    # -- the proximal prior (Eq. 6.3) -------------------------------------------------------------------
    def set_reference(self, reference: Dict[str, torch.Tensor]) -> None:
        """θ^0 by parameter name (instead of ``--proximal-reference``'s checkpoint)."""
        self._reference = {n: t.detach().clone() for n, t in reference.items()}

    def _reference_for(self, model) -> Dict[str, torch.Tensor]:
        if self._reference is None:
            self._reference = {n: t for n, t in load_state(self.proximal_reference)["model"].items()
                               if torch.is_tensor(t)}
        return self._reference

    def trained_parameters(self, model):
        """(names, parameters, θ^0 tensors) of the parameters of ``model`` that require grad."""
        ref = self._reference_for(model)
        names, params, refs = [], [], []
        for n, p in unwrap_model(model).named_parameters():
            if not p.requires_grad:
                continue
            if n not in ref:
                raise CheckpointError(f"metanmt_cross_entropy: the proximal reference "
                                      f"{self.proximal_reference or '(set_reference)'} has no parameter {n}")
            if ref[n].shape != p.shape:
                raise CheckpointError(f"metanmt_cross_entropy: the proximal reference "
                                      f"{self.proximal_reference or '(set_reference)'}: {n} has shape "
                                      f"{tuple(ref[n].shape)}, the model's is {tuple(p.shape)}")
            if ref[n].device != p.device or ref[n].dtype != p.dtype:
                ref[n] = ref[n].to(device=p.device, dtype=p.dtype)
            names.append(n)
            params.append(p)
            refs.append(ref[n])
        return names, params, refs

    def proximal(self, model) -> torch.Tensor:
        """β‖θ − θ^0‖² over the trained parameters (Eq. 6.3's prior term, per sample-size unit)."""
        _, params, refs = self.trained_parameters(model)
        return self.proximal_weight * proximal_term(params, refs)

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        if self.proximal_weight > 0 and model.training and reduce:
            prox = self.proximal(model)
            loss = loss + prox.to(loss.dtype) * sample_size
            logging_output["proximal"] = float(prox.detach()) * float(sample_size)
        return loss, sample_size, logging_output

    # -- the meta-objective (Eq. 6.4) ---------------------------------------------------------------------
    def likelihood(self, model, sample):
        """The NLL term alone: fairseq's ``cross_entropy`` (loss, sample size, logging output)."""
        return super().forward(model, sample)

    def meta_objective(self, model, outer_batch, inner_batch, partition: ParameterPartition, inner: InnerLearning,
                       backward: Optional[Callable[[torch.Tensor], None]] = None, meta_gradient: str = "first_order",
                       fd_nu: float = 1e-4):
        """L^{D′}(θ′) of Eq. 6.4 (the model is at θ′ = Learn(D; θ)) and its meta-gradient (Eq. 6.10, or
        Eq. 6.8 with ``meta_gradient="finite_difference"``) into the ``.grad`` of the meta parameters; returns
        (loss, sample size, logging output) of D′."""
        return meta_objective_gradient(lambda batch: self.likelihood(model, batch), outer_batch, inner_batch,
                                       partition, inner, backward, meta_gradient, fd_nu)

    @classmethod
    def reduce_metrics(cls, logging_outputs: List[Dict]) -> None:
        """``cross_entropy``'s metrics of the likelihood term, and ``proximal`` (base 2, per sample-size unit)."""
        super().reduce_metrics(logging_outputs)
        if any("proximal" in log for log in logging_outputs):
            n = sum(float(log.get("sample_size", 0)) for log in logging_outputs if "proximal" in log)
            total = sum(float(log.get("proximal", 0.0)) for log in logging_outputs)
            metrics.log_scalar("proximal", total / max(n, 1.0) / math.log(2), n, round=4)

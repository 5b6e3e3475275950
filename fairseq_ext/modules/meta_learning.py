"""MetaNMT: first-order model-agnostic meta-learning (MAML) for low-resource NMT, Gu (2019) ch. 6 — the
episode as plain functions on any :class:`torch.nn.Module` (torch only; the fairseq side is the task
``meta_translation`` of :mod:`fairseq_ext.tasks.meta_translation`).

Language pairs are tasks T^k; an episode draws one task and two batches D, D′ of it (Eq. 6.4)::

    (6.5)  θ′_k = Learn(D_{T^k}; θ) = θ − η ∇_θ L^{D}(θ)         ``inner_steps`` steps, η = ``inner_lr``
    (6.6)  θ ← θ − η′ Σ_k ∇_θ L^{D′}(θ′_k)                       the meta optimiser η′ (fairseq's)
    (6.10) ∇_θ L^{D′}(θ′) ≈ ∇_{θ′} L^{D′}(θ′)                   ``meta_gradient="first_order"``
    (6.8)  ∇_θ L^{D′}(θ′) ≈ ∇_{θ′} L^{D′}(θ′) − (η/ν) [ ∇_θ L^D(θ)|_{θ̂} − ∇_θ L^D(θ)|_θ ]
    (6.9)  θ̂ = θ + ν ∇_{θ′} L^{D′}(θ′)                          ``"finite_difference"``, ν = ``fd_nu``

:func:`maml_episode` runs one episode: Δε (Eq. 6.12) zeroed, :func:`language_specific_learning` (a fresh
inner Adam on D), :func:`meta_objective_gradient` (the loss on D′ at θ′, its gradient added to ``.grad``),
θ restored.

Parameter partition (§6.3.3, :func:`model_partition`): a model's ``meta_partition_names()`` names the
parameters fixed in the inner loop (ε_U, A), fixed in the meta update and reset each episode (Δε);
without it every trainable parameter is both fast and meta (plain FOMAML).

Fine-tuning (§6.4.2, :func:`apply_finetune_strategy`): ``emb``, ``emb+enc``, ``all``. The proximal prior of
Eqs. 6.2-6.3: :func:`proximal_term` (β‖θ − θ^0‖²).

References: J. Gu, Y. Wang, Y. Chen, K. Cho, V. O. K. Li, "Meta-Learning for Low-Resource Neural Machine
Translation", EMNLP 2018; J. Gu, "Efficient Neural Machine Translation", PhD thesis, The University of
Hong Kong, 2019, ch. 6.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import torch
import torch.nn as nn
from torch import Tensor

INNER_OPTIMIZERS = ("adam", "sgd")
META_GRADIENTS = ("first_order", "finite_difference")
FINETUNE_STRATEGIES = ("all", "emb+enc", "emb")
INNER_ADAM_BETAS = (0.9, 0.98)
INNER_ADAM_EPS = 1e-9
SOURCE_EMBEDDING_PREFIX = "encoder.embed_tokens."
ENCODER_PREFIX = "encoder."

LossFn = Callable[[Any], Tuple[Tensor, Any, Dict[str, Any]]]


# ----------------------------------------------------------------------------------------------- partition
@dataclass
class ParameterPartition:
    """Named trainable parameters and their roles in an episode (module doc).

    ``fast``: updated by language-specific learning (the inner loop); ``meta``: receive the meta-gradient;
    ``reset``: set to 0 at the start (and the end) of every episode — a subset of ``fast``, disjoint from
    ``meta``."""

    params: Dict[str, nn.Parameter]
    fast: List[str]
    meta: List[str]
    reset: List[str] = field(default_factory=list)

    def tensors(self, which: str) -> List[nn.Parameter]:
        return [self.params[n] for n in getattr(self, which)]


def parameter_partition(model: nn.Module, learn_frozen: Iterable[str] = (), meta_frozen: Iterable[str] = (),
                        reset: Iterable[str] = ()) -> ParameterPartition:
    """The partition of ``model``'s parameters that require grad: fast = all but ``learn_frozen``, meta =
    all but ``meta_frozen``; ``reset`` ⊆ fast, disjoint from meta."""
    named = dict(model.named_parameters())
    learn_frozen, meta_frozen, reset = set(learn_frozen), set(meta_frozen), set(reset)
    unknown = sorted((learn_frozen | meta_frozen | reset) - set(named))
    if unknown:
        raise ValueError(f"meta-learning partition: no parameter named {', '.join(unknown)}")
    params = {n: p for n, p in named.items() if p.requires_grad or n in reset}
    frozen_reset = sorted(n for n in reset if not named[n].requires_grad)
    if frozen_reset:
        raise ValueError(f"meta-learning partition: the episode-reset parameters {', '.join(frozen_reset)} do not "
                         f"require grad (they are trained by language-specific learning)")
    fast = [n for n in params if n not in learn_frozen]
    meta = [n for n in params if n not in meta_frozen]
    bad = sorted((reset - set(fast)) | (reset & set(meta)))
    if bad:
        raise ValueError(f"meta-learning partition: reset parameters must be fast and not meta: {', '.join(bad)}")
    return ParameterPartition(params, fast, meta, [n for n in params if n in reset])


def partition_names(model: nn.Module) -> Dict[str, List[str]]:
    """``model.meta_partition_names()`` (``learn_frozen`` / ``meta_frozen`` / ``reset``), {} without it."""
    hook = getattr(model, "meta_partition_names", None)
    return dict(hook()) if callable(hook) else {}


def model_partition(model: nn.Module) -> ParameterPartition:
    """The partition ``model`` declares (:func:`partition_names`), plain FOMAML (all fast and meta) otherwise."""
    return parameter_partition(model, **partition_names(model))


# ----------------------------------------------------------------------------------------------- the inner optimiser
def make_inner_optimizer(params: Sequence[nn.Parameter], kind: str, lr: float) -> torch.optim.Optimizer:
    """A fresh inner optimiser: Adam (β (0.9, 0.98), ε 1e−9) or plain SGD (Eq. 6.5 as written)."""
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, betas=INNER_ADAM_BETAS, eps=INNER_ADAM_EPS)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise ValueError(f"unknown inner optimizer {kind!r} (choose from {', '.join(INNER_OPTIMIZERS)})")


def _as_float(n) -> float:
    n = float(n.item() if torch.is_tensor(n) else n)
    return n if n > 0 else 1.0


def _rng_state():
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


@dataclass
class InnerLearning:
    """What language-specific learning on D (step 2) leaves for the meta-objective (step 3)."""

    theta: List[Tensor]  # the fast parameters at θ (restored in step 4)
    losses: List[float]  # L^D before each inner step ([0]: at θ)
    sample_size: float  # of D
    optimizer: torch.optim.Optimizer  # the (fresh) inner optimiser of this episode
    lr: float  # η
    grad_at_theta: Optional[Tuple[Optional[Tensor], ...]] = None  # ∇L^D(θ), every parameter (finite differences)
    rng_before: Any = None  # the RNG state of ∇L^D(θ)'s dropout masks (finite differences)


@dataclass
class EpisodeResult:
    """What one episode leaves besides the ``.grad`` of the meta parameters."""

    loss: Tensor  # L^{D′}(θ′), as ``loss_fn`` returned it (detached)
    sample_size: Any  # of D′
    logging_output: Dict[str, Any]  # of D′
    inner_losses: List[float]  # L^D before each inner step ([0]: at θ)
    inner_sample_size: float
    inner_optimizer: torch.optim.Optimizer  # the (fresh) inner optimiser of this episode


# (outer_batch, inner_batch, partition, inner, backward) -> (L^{D′}(θ′), sample size, logging output); it leaves
# the meta-gradient in the ``.grad`` of the meta parameters (step 3)
MetaObjective = Callable[[Any, Any, ParameterPartition, InnerLearning, Callable[[Tensor], None]],
                         Tuple[Tensor, Any, Dict[str, Any]]]


def _everyone(partition: ParameterPartition) -> List[nn.Parameter]:
    fast = partition.tensors("fast")
    fast_ids = {id(p) for p in fast}
    return fast + [p for p in partition.tensors("meta") if id(p) not in fast_ids]


def language_specific_learning(loss_fn: LossFn, inner_batch, partition: ParameterPartition, inner_lr: float,
                               inner_steps: int = 1, inner_optimizer: str = "adam",
                               keep_gradient_at_theta: bool = False,
                               theta: Optional[List[Tensor]] = None) -> InnerLearning:
    """Steps 1–2 (module doc): snapshot θ (or take the snapshot ``theta``), then ``inner_steps`` steps of a
    fresh inner optimiser on D over the fast parameters (Eq. 6.5): the model is at θ′ when it returns.
    ``keep_gradient_at_theta``: also keep ∇L^D(θ) of every parameter and the RNG state before it (what
    Eq. 6.8 needs)."""
    fast = partition.tensors("fast")
    everyone = _everyone(partition)
    if theta is None:
        theta = [p.detach().clone() for p in fast]
    opt = make_inner_optimizer(fast, inner_optimizer, inner_lr)
    inner = InnerLearning(theta, [], 1.0, opt, inner_lr,
                          rng_before=_rng_state() if keep_gradient_at_theta else None)
    for step in range(inner_steps):
        loss, n, _ = loss_fn(inner_batch)
        inner.sample_size = _as_float(n)
        keep = keep_gradient_at_theta and step == 0
        grads = torch.autograd.grad(loss / inner.sample_size, everyone if keep else fast, allow_unused=True)
        if keep:
            inner.grad_at_theta = grads  # ∇L^D at θ, for every parameter (Eq. 6.8's last term)
        for p, g in zip(fast, grads[: len(fast)]):
            p.grad = g
        opt.step()
        for p in fast:
            p.grad = None
        inner.losses.append(float(loss.detach()))
    return inner


def meta_objective_gradient(loss_fn: LossFn, outer_batch, inner_batch, partition: ParameterPartition,
                            inner: InnerLearning, backward: Optional[Callable[[Tensor], None]] = None,
                            meta_gradient: str = "first_order", fd_nu: float = 1e-4
                            ) -> Tuple[Tensor, Any, Dict[str, Any]]:
    """Step 3 (module doc): the meta-objective L^{D′}(θ′) of Eq. 6.4 (``loss_fn`` on D′, the model at θ′) and
    its meta-gradient passed through ``backward``: ∇_{θ′}L^{D′}(θ′) (Eq. 6.10) or, with
    ``"finite_difference"``, Eq. 6.8 with θ̂ of Eq. 6.9 (``inner`` must then hold ∇L^D(θ); the model is left at
    θ̂ on the fast coordinates — step 4 restores θ). Returns ``loss_fn``'s (loss, sample size, logging
    output) on D′."""
    if meta_gradient not in META_GRADIENTS:
        raise ValueError(f"unknown meta gradient {meta_gradient!r} (choose from {', '.join(META_GRADIENTS)})")
    backward = backward or (lambda loss: loss.backward())
    outer_loss, outer_n, logging_output = loss_fn(outer_batch)
    if meta_gradient == "first_order":
        backward(outer_loss)  # Eq. 6.10: ∇_{θ′} L^{D′}(θ′) lands in .grad
        return outer_loss, outer_n, logging_output
    if inner.grad_at_theta is None:
        raise ValueError("finite_difference meta-gradients need ∇L^D(θ) from language-specific learning "
                         "(keep_gradient_at_theta=True)")
    fast, everyone = partition.tensors("fast"), _everyone(partition)
    meta_ids = {id(p) for p in partition.tensors("meta")}
    rng_after = _rng_state()
    n_out = _as_float(outer_n)
    g_prime = torch.autograd.grad(outer_loss, everyone, allow_unused=True)
    # θ̂ = θ + ν ∇_{θ′} L^{D′}(θ′) on the fast coordinates (Eq. 6.9; of the per-token mean loss)
    with torch.no_grad():
        for p, t, g in zip(fast, inner.theta, g_prime[: len(fast)]):
            p.copy_(t if g is None else t + fd_nu * g / n_out)
    _set_rng_state(inner.rng_before)  # the dropout masks of ∇L^D(θ)
    loss_hat, n_hat, _ = loss_fn(inner_batch)
    g_hat = torch.autograd.grad(loss_hat / _as_float(n_hat), everyone, allow_unused=True)
    _set_rng_state(rng_after)
    scale = n_out * inner.lr / fd_nu
    surrogate = outer_loss.new_zeros(())
    for p, g1, gh, g0 in zip(everyone, g_prime, g_hat, inner.grad_at_theta):
        if id(p) not in meta_ids:
            continue
        total = torch.zeros_like(p) if g1 is None else g1.detach().clone()
        if gh is not None:
            total -= scale * (gh - (g0 if g0 is not None else 0))
        elif g0 is not None:
            total += scale * g0
        surrogate = surrogate + (p * total).sum()  # Eq. 6.8, passed through ``backward``
    backward(surrogate)
    return outer_loss, outer_n, logging_output


def maml_episode(loss_fn: LossFn, inner_batch, outer_batch, partition: ParameterPartition, inner_lr: float,
                 inner_steps: int = 1, inner_optimizer: str = "adam", meta_gradient: str = "first_order",
                 fd_nu: float = 1e-4, backward: Optional[Callable[[Tensor], None]] = None,
                 meta_objective: Optional[MetaObjective] = None) -> EpisodeResult:
    """One MetaNMT episode (module doc, steps 0–4): ``.grad`` of the meta parameters += ∇L^{D′} at θ′
    (Eq. 6.10, or Eq. 6.8 with ``finite_difference``); every parameter is back at θ and Δε at 0 when it
    returns.

    ``loss_fn(batch) -> (loss, sample_size, logging_output)`` computes the summed loss of the model the
    ``partition`` belongs to (a fairseq criterion called on the model); ``backward(loss)`` backpropagates
    the meta loss (default ``loss.backward()``; fairseq passes ``optimizer.backward`` so loss scaling
    applies). ``meta_objective`` replaces step 3 (default: :func:`meta_objective_gradient` with ``loss_fn``,
    ``meta_gradient`` and ``fd_nu``; the criterion ``metanmt_cross_entropy`` passes its own)."""
    if inner_steps < 1:
        raise ValueError(f"inner_steps must be >= 1, got {inner_steps}")
    if meta_gradient not in META_GRADIENTS:
        raise ValueError(f"unknown meta gradient {meta_gradient!r} (choose from {', '.join(META_GRADIENTS)})")
    fd = meta_gradient == "finite_difference"
    if fd and inner_steps != 1:
        raise ValueError("finite_difference meta-gradients (Eq. 6.8) differentiate one inner step: inner_steps "
                         f"must be 1, got {inner_steps}")
    if fd and not fd_nu > 0:
        raise ValueError(f"fd_nu must be > 0, got {fd_nu}")
    backward = backward or (lambda loss: loss.backward())
    if meta_objective is None:
        def meta_objective(outer, inner_b, part, inner, back):
            return meta_objective_gradient(loss_fn, outer, inner_b, part, inner, back, meta_gradient, fd_nu)
    fast, reset = partition.tensors("fast"), partition.tensors("reset")
    meta_ids = {id(p) for p in partition.tensors("meta")}
    everyone = _everyone(partition)

    # 0. Δε^k = 0;  1. snapshot θ (the fast parameters are the only ones that move before step 4)
    with torch.no_grad():
        for p in reset:
            p.zero_()
    theta = [p.detach().clone() for p in fast]
    stashed = [p.grad for p in everyone]  # meta-gradients of earlier episodes of this update
    for p in everyone:
        p.grad = None
    try:
        # 2. language-specific learning on D with a fresh inner optimiser: θ → θ′
        inner = language_specific_learning(loss_fn, inner_batch, partition, inner_lr, inner_steps, inner_optimizer,
                                           keep_gradient_at_theta=fd, theta=theta)
        # 3. L^{D′}(θ′), its meta-gradient
        outer_loss, outer_n, logging_output = meta_objective(outer_batch, inner_batch, partition, inner, backward)
    finally:
        # 4. restore θ, Δε = 0
        with torch.no_grad():
            for p, t in zip(fast, theta):
                p.copy_(t)
            for p in reset:
                p.zero_()
    for p, old in zip(everyone, stashed):
        g = p.grad if id(p) in meta_ids else None
        p.grad = g if old is None else (old if g is None else old + g)
    return EpisodeResult(outer_loss.detach(), outer_n, logging_output, inner.losses, inner.sample_size,
                         inner.optimizer)


# ----------------------------------------------------------------------------------------------- fine-tuning
def finetune_trainable_names(names: Iterable[str], strategy: str, learn_frozen: Iterable[str] = ()) -> Set[str]:
    """The parameter names a fine-tuning ``strategy`` trains (fairseq encoder–decoder naming): ``emb`` =
    ``encoder.embed_tokens.*``, ``emb+enc`` = ``encoder.*``, ``all`` = everything; ``learn_frozen`` never."""
    if strategy not in FINETUNE_STRATEGIES:
        raise ValueError(f"unknown fine-tuning strategy {strategy!r} (choose from {', '.join(FINETUNE_STRATEGIES)})")
    frozen = set(learn_frozen)
    prefix = {"emb": SOURCE_EMBEDDING_PREFIX, "emb+enc": ENCODER_PREFIX, "all": ""}[strategy]
    return {n for n in names if n.startswith(prefix) and n not in frozen}


def apply_finetune_strategy(model: nn.Module, strategy: str) -> Set[str]:
    """Set ``requires_grad`` of every parameter of ``model`` for ``strategy`` (ε_U and A — the model's
    ``learn_frozen`` — always frozen, §6.3.3); returns the trainable names."""
    names = [n for n, _ in model.named_parameters()]
    trainable = finetune_trainable_names(names, strategy, partition_names(model).get("learn_frozen", ()))
    if not trainable:
        raise ValueError(f"fine-tuning strategy {strategy!r} leaves no parameter of {type(model).__name__} "
                         f"trainable")
    for n, p in model.named_parameters():
        p.requires_grad_(n in trainable)
    return trainable


# ----------------------------------------------------------------------------------------------- the proximal prior
def proximal_term(params: Sequence[Tensor], reference: Sequence[Tensor]) -> Tensor:
    """‖θ − θ^0‖² = Σ_i (θ_i − θ_i^0)² over ``params`` and their ``reference`` values (Eq. 6.3's second term,
    without β), in float32; differentiable in ``params``."""
    if len(params) != len(reference):
        raise ValueError(f"proximal term: {len(params)} parameters but {len(reference)} reference tensors")
    total = None
    for p, r in zip(params, reference):
        d = ((p.float() - r.float()) ** 2).sum()
        total = d if total is None else total + d
    return total if total is not None else torch.zeros(())

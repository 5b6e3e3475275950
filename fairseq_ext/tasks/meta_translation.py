"""MetaNMT tasks (Gu 2019 ch. 6): ``meta_translation`` (first-order MAML over source languages) and
``ulr_finetune_translation`` (fine-tuning on the target language), both on the data of
``universal_translation``.

``meta_translation`` (§6.3.2): each ``train_step`` runs one episode (``--update-freq N``: the Σ_k of
Eq. 6.6): a language k ~ U(``--meta-langs``), two batches D, D′ drawn as a function of (seed, update),
then :func:`fairseq_ext.modules.meta_learning.maml_episode` (``--inner-steps``, ``--inner-lr``; Eq. 6.10,
or Eq. 6.8 with ``--meta-gradient finite_difference``); fairseq's optimiser is the meta optimiser. A
checkpoint resumes meta-training exactly. Meta-validation (§6.4.2): ``--meta-valid-lang L`` fine-tunes a
copy on L (``--meta-valid-steps``, ``--meta-valid-lr``) before validating it.

``ulr_finetune_translation`` (§6.4.2): trains on ``--lowres-lang`` only, optionally a draw of
``--target-token-budget N`` target tokens (``--subsample-seed``; the thesis's 4k-160k sets), with
``--finetune-strategy all|emb+enc|emb``; ``--criterion metanmt_cross_entropy --proximal-weight β`` adds the
proximal prior of Eq. 6.3. The multilingual-transfer baseline of Fig. 6.3 (Eq. 6.11) is
``universal_translation`` + ``ulr_transformer`` followed by this task.

References: J. Gu, Y. Wang, Y. Chen, K. Cho, V. O. K. Li, "Meta-Learning for Low-Resource Neural Machine
Translation", EMNLP 2018; J. Gu, "Efficient Neural Machine Translation", PhD thesis, HKU, 2019, ch. 6.
"""
import copy
import json
import logging
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq import metrics, utils
from fairseq.data import BaseWrapperDataset
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from omegaconf import II

from fairseq_ext.data.batching import example_lengths
from fairseq_ext.data.context_keys import unwrap_model
from fairseq_ext.data.universal import LanguageDataError, LanguageResampled, parse_langs
from fairseq_ext.modules.meta_learning import (
    FINETUNE_STRATEGIES,
    INNER_ADAM_BETAS,
    INNER_ADAM_EPS,
    INNER_OPTIMIZERS,
    META_GRADIENTS,
    apply_finetune_strategy,
    maml_episode,
    model_partition,
)
from fairseq_ext.tasks.universal_translation import UniversalTranslationConfig, UniversalTranslationTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

VALID_STREAM = 7919  # the third entry of the meta-validation draws' seed (episodes use the episode index)


def _base_dataset(ds):
    return ds.dataset if isinstance(ds, LanguageResampled) else ds


def episode_rng(seed: int, update_num: int, episode: int) -> np.random.Generator:
    """The generator of one episode's draws: a pure function of (seed, update, episode within the update)."""
    return np.random.default_rng([int(seed), int(update_num), int(episode)])


def budget_subset(tgt_tokens: np.ndarray, budget: int, seed: int) -> np.ndarray:
    """Positions (into ``tgt_tokens``) of a random subset whose token counts add up to at most ``budget``:
    the pairs in an order drawn with ``seed``, kept while the running total stays within the budget (at
    least one). Sorted."""
    order = np.random.default_rng([int(seed), 1]).permutation(len(tgt_tokens))
    total = np.cumsum(np.asarray(tgt_tokens)[order])
    n = max(1, int(np.searchsorted(total, budget, side="right")))
    return np.sort(order[:n])


class IndexSubset(BaseWrapperDataset):
    """The examples ``indices`` of a dataset (indices *of the wrapped dataset*, as fairseq's filters, batching
    and collater expect): :meth:`ordered_indices` is them sorted by source then target length."""

    def __init__(self, dataset, indices: np.ndarray):
        super().__init__(dataset)
        self.indices = np.asarray(indices, dtype=np.int64)

    def ordered_indices(self):
        src, tgt = example_lengths(self.dataset)
        idx = self.indices
        keys = (src[idx],) if tgt is None else (tgt[idx], src[idx])
        return idx[np.lexsort(keys)]


# ----------------------------------------------------------------------------------------------- meta_translation
@dataclass
class MetaTranslationConfig(UniversalTranslationConfig):
    meta_langs: str = field(
        default="", metadata={"help": "the source tasks of meta-learning, comma-separated (default: --aux-langs)"})
    inner_steps: int = field(default=1, metadata={"help": "language-specific learning steps on D per episode"})
    inner_lr: Optional[float] = field(
        default=None, metadata={"help": "inner learning rate eta (default: the meta optimizer's current lr)"})
    inner_optimizer: ChoiceEnum(INNER_OPTIMIZERS) = field(
        default="adam", metadata={"help": "the fresh inner optimizer of each episode: adam (beta 0.9/0.98, eps 1e-9) "
                                          "or sgd (Eq. 6.5 as written)"})
    meta_gradient: ChoiceEnum(META_GRADIENTS) = field(
        default="first_order", metadata={"help": "first_order (Eq. 6.10) or finite_difference (Eqs. 6.7-6.9)"})
    fd_nu: float = field(default=1e-4, metadata={"help": "nu of the finite-difference meta-gradient (Eq. 6.9)"})
    episode_max_tokens: Optional[int] = field(
        default=None, metadata={"help": "tokens in each of D and D' (default: --max-tokens)"})
    meta_valid_lang: str = field(
        default="", metadata={"help": "meta-validation: fine-tune a copy on this held-out language before each "
                                      "validation (default: validate the meta model itself)"})
    meta_valid_steps: int = field(default=32, metadata={"help": "meta-validation fine-tuning steps"})
    meta_valid_lr: float = field(default=1e-4, metadata={"help": "meta-validation fine-tuning learning rate"})
    finetune_strategy: ChoiceEnum(FINETUNE_STRATEGIES) = field(
        default="emb+enc", metadata={"help": "what fine-tuning trains: all, emb+enc (decoder frozen) or emb (the "
                                             "source embedding change only); ULR's universal embeddings and A "
                                             "are always frozen"})
    max_tokens: Optional[int] = II("dataset.max_tokens")
    batch_size: Optional[int] = II("dataset.batch_size")


@register_task("meta_translation", dataclass=MetaTranslationConfig)
class MetaTranslationTask(UniversalTranslationTask):
    """First-order MAML over the source languages (module doc)."""

    cfg: MetaTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        meta = parse_langs(cfg.meta_langs) or list(self.aux_langs)
        unknown = [lang for lang in meta if lang not in self.langs]
        if unknown:
            raise LanguageDataError(f"meta_translation: --meta-langs {', '.join(unknown)}: not a language of this task "
                                    f"(its languages: {', '.join(self.langs)})")
        if len(set(meta)) != len(meta):
            raise LanguageDataError(f"meta_translation: --meta-langs repeats a language: {cfg.meta_langs}")
        self.meta_langs: List[str] = meta
        self.meta_valid_lang: str = (cfg.meta_valid_lang or "").strip()
        if self.meta_valid_lang:
            if self.meta_valid_lang not in self.langs:
                raise LanguageDataError(f"meta_translation: --meta-valid-lang {self.meta_valid_lang}: not a language "
                                        f"of this task (its languages: {', '.join(self.langs)})")
            if self.meta_valid_lang in meta:
                raise LanguageDataError(f"meta_translation: --meta-valid-lang {self.meta_valid_lang} is also a "
                                        f"meta-training language (--meta-langs {', '.join(meta)})")
        if cfg.inner_steps < 1:
            raise UserDataError(f"meta_translation: --inner-steps must be >= 1, got {cfg.inner_steps}")
        if cfg.meta_gradient == "finite_difference" and cfg.inner_steps != 1:
            raise UserDataError("meta_translation: --meta-gradient finite_difference needs --inner-steps 1 (Eq. 6.8 "
                             "differentiates one inner step)")
        if not cfg.fd_nu > 0:
            raise UserDataError(f"meta_translation: --fd-nu must be > 0, got {cfg.fd_nu}")
        if cfg.meta_valid_steps < 0:
            raise UserDataError(f"meta_translation: --meta-valid-steps must be >= 0, got {cfg.meta_valid_steps}")
        self._episode_ds = None  # the training set (unwrapped) and its languages
        self._episode_langs: Optional[np.ndarray] = None
        self._batches: Dict[int, List[np.ndarray]] = {}
        self._partition = None
        self._last_update = None
        self._episode_in_update = 0
        self._valid_model = None
        self._valid_generator = None
        logger.info("meta_translation: meta-training languages %s, inner %s x%d (lr %s), %s meta-gradient%s",
                    ",".join(meta), cfg.inner_optimizer, cfg.inner_steps,
                    cfg.inner_lr if cfg.inner_lr is not None else "= meta lr", cfg.meta_gradient,
                    f", meta-validation on {self.meta_valid_lang}" if self.meta_valid_lang else "")

    # -- data -------------------------------------------------------------------------------------------
    def _episode_max_tokens(self) -> Optional[int]:
        for value in (self.cfg.episode_max_tokens, self.cfg.max_tokens):
            try:
                if value is not None and int(value) > 0:
                    return int(value)
            except Exception:  # an unresolvable interpolation (a config built by hand)
                continue
        return None

    def _episode_max_sentences(self) -> Optional[int]:
        try:
            return int(self.cfg.batch_size) if self.cfg.batch_size else None
        except Exception:
            return None

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if split != getattr(self.cfg, "train_subset", "train"):
            return
        if self.cfg.lang_temperature != 1.0:
            logger.info("meta_translation: --lang-temperature only shapes the (ignored) tick batches; episodes "
                        "draw languages uniformly")
        self._episode_ds = _base_dataset(self.datasets[split])
        self._episode_langs = self.lang_ids[split]
        self._batches = {}
        counts = np.bincount(self._episode_langs, minlength=len(self.langs))
        needed = self.meta_langs + ([self.meta_valid_lang] if self.meta_valid_lang else [])
        empty = [lang for lang in needed if counts[self.langs.index(lang)] == 0]
        if empty:
            raise LanguageDataError(f"meta_translation: the training split {split} has no examples of "
                                    f"{', '.join(empty)} (--meta-langs / --meta-valid-lang)")
        if self._episode_max_tokens() is None and self._episode_max_sentences() is None:
            raise UserDataError("meta_translation: give --episode-max-tokens, --max-tokens or --batch-size (the size of "
                             "D and D')")

    def language_batches(self, lang: str, model) -> List[np.ndarray]:
        """The fixed length-sorted batches (index arrays) of ``lang``'s training examples, D/D′-sized."""
        k = self.langs.index(lang)
        if k not in self._batches:
            if self._episode_ds is None:
                raise RuntimeError("meta_translation: the training split is not loaded")
            ds = self._episode_ds
            ids = np.flatnonzero(self._episode_langs == k)
            max_positions = utils.resolve_max_positions(self.max_positions(), unwrap_model(model).max_positions())
            ids = self.filter_indices_by_size(ids, ds, max_positions, ignore_invalid_inputs=True)
            src, tgt = example_lengths(ds)
            ids = ids[np.lexsort((src[ids],) if tgt is None else (tgt[ids], src[ids]))]
            batches = [np.asarray(b) for b in ds.batch_by_size(ids, max_tokens=self._episode_max_tokens(),
                                                               max_sentences=self._episode_max_sentences())]
            if not batches:
                raise LanguageDataError(f"meta_translation: no usable training example of {lang}")
            self._batches[k] = batches
            logger.info("meta_translation: %s: %d examples in %d episode batches", lang, len(ids), len(batches))
        return self._batches[k]

    def _collate(self, indices: np.ndarray, model):
        ds = self._episode_ds
        sample = ds.collater([ds[int(i)] for i in indices])
        device = next(unwrap_model(model).parameters()).device
        return utils.apply_to_sample(lambda t: t.to(device), sample)

    def draw_episode(self, rng: np.random.Generator, model):
        """(language, D indices, D′ indices): k ~ U(meta langs), D and D′ two independent uniform batch draws."""
        lang = self.meta_langs[int(rng.integers(len(self.meta_langs)))]
        batches = self.language_batches(lang, model)
        d = batches[int(rng.integers(len(batches)))]
        d_prime = batches[int(rng.integers(len(batches)))]
        return lang, d, d_prime

    # -- training ---------------------------------------------------------------------------------------
    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        # every parameter the episode updates must require grad (--ulr-freeze-delta is for plain training)
        for n, p in model.named_parameters():
            if not p.requires_grad:
                logger.info("meta_translation: %s trained by the episodes (requires_grad on)", n)
                p.requires_grad_(True)
        part = model_partition(model)
        logger.info("meta_translation: %d fast, %d meta parameter tensors; fixed in the inner loop: %s; fixed in the "
                    "meta update and zeroed per episode: %s", len(part.fast), len(part.meta),
                    ", ".join(sorted(set(part.meta) - set(part.fast))) or "none", ", ".join(part.reset) or "none")
        return model

    def build_criterion(self, cfg, from_checkpoint=False):
        criterion = super().build_criterion(cfg, from_checkpoint)
        if getattr(criterion, "proximal_weight", 0) > 0:
            raise UserDataError("meta_translation: --proximal-weight is the prior of fine-tuning on the target task "
                             "(ulr_finetune_translation); meta-training takes --proximal-weight 0")
        return criterion

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size() > 1:
            raise NotImplementedError("meta_translation runs in one process (no data-parallel meta-training)")
        model.train()
        model.set_num_updates(update_num)
        if self._last_update != update_num:
            self._last_update, self._episode_in_update = update_num, 0
        episode = self._episode_in_update
        self._episode_in_update += 1
        if ignore_grad:  # fairseq's dummy batch: no episode, no gradient
            zero = torch.zeros((), device=next(unwrap_model(model).parameters()).device)
            return zero, 0, {"loss": 0.0, "nll_loss": 0.0, "ntokens": 0, "nsentences": 0, "sample_size": 0}
        raw = unwrap_model(model)
        if self._partition is None or self._partition[0] is not raw:
            self._partition = (raw, model_partition(raw))
        lang, d, d_prime = self.draw_episode(episode_rng(self._seed(), update_num, episode), model)
        inner_batch, outer_batch = self._collate(d, model), self._collate(d_prime, model)
        inner_lr = self.cfg.inner_lr if self.cfg.inner_lr is not None else optimizer.get_lr()

        def loss_fn(batch):
            return criterion(model, batch)

        objective = None  # step 3 with the criterion's loss (e.g. cross_entropy)
        if callable(getattr(criterion, "meta_objective", None)):  # the criterion computes the meta-objective
            def objective(outer, inner_b, part, inner, back):
                return criterion.meta_objective(model, outer, inner_b, part, inner, back,
                                                meta_gradient=self.cfg.meta_gradient, fd_nu=self.cfg.fd_nu)

        with self.autocast():
            res = maml_episode(loss_fn, inner_batch, outer_batch, self._partition[1], inner_lr=inner_lr,
                               inner_steps=self.cfg.inner_steps, inner_optimizer=self.cfg.inner_optimizer,
                               meta_gradient=self.cfg.meta_gradient, fd_nu=self.cfg.fd_nu,
                               backward=optimizer.backward, meta_objective=objective)
        log = dict(res.logging_output)
        log["meta_inner_loss"] = res.inner_losses[0]
        log["meta_inner_sample_size"] = res.inner_sample_size
        log["meta_episodes"] = 1
        return res.loss, res.sample_size, log

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if any("meta_inner_loss" in log for log in logging_outputs):
            loss = sum(float(log.get("meta_inner_loss", 0.0)) for log in logging_outputs)
            n = sum(float(log.get("meta_inner_sample_size", 0.0)) for log in logging_outputs)
            metrics.log_scalar("inner_loss", loss / max(n, 1.0) / np.log(2), n, round=3)

    # -- meta-validation ----------------------------------------------------------------------------------
    def begin_valid_epoch(self, epoch, model):
        super().begin_valid_epoch(epoch, model)
        self._valid_model = None  # fine-tuned anew at the first valid_step of this validation
        self._valid_generator = None

    def meta_validation_model(self, model, criterion, update_num: int):
        """A copy of ``model`` fine-tuned on ``--meta-valid-lang`` (module doc); ``model`` is untouched."""
        lang = self.meta_valid_lang
        tuned = copy.deepcopy(unwrap_model(model))
        for p in tuned.parameters():
            p.grad = None  # the copy of the meta model's last update's gradients
        trainable = apply_finetune_strategy(tuned, self.cfg.finetune_strategy)
        params = [p for n, p in tuned.named_parameters() if n in trainable]
        opt = torch.optim.Adam(params, lr=self.cfg.meta_valid_lr, betas=INNER_ADAM_BETAS, eps=INNER_ADAM_EPS)
        batches = self.language_batches(lang, tuned)
        rng = np.random.default_rng([self._seed(), int(update_num), VALID_STREAM])
        tuned.train()
        with torch.enable_grad(), self.autocast():
            for _ in range(self.cfg.meta_valid_steps):
                batch = self._collate(batches[int(rng.integers(len(batches)))], tuned)
                loss, n, _ = criterion(tuned, batch)
                (loss / max(float(n), 1.0)).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        tuned.eval()
        logger.info("meta-validation: fine-tuned a copy on %s for %d steps (lr %g, %s)", lang,
                    self.cfg.meta_valid_steps, self.cfg.meta_valid_lr, self.cfg.finetune_strategy)
        return tuned

    def valid_step(self, sample, model, criterion):
        if not self.meta_valid_lang:
            return super().valid_step(sample, model, criterion)
        if self._valid_model is None:
            self._valid_model = self.meta_validation_model(model, criterion, self._last_update or 0)
            if self.cfg.eval_bleu:
                # fairseq's SequenceGenerator decodes with the models it was built on (its ``models`` argument
                # is ignored), so --eval-bleu needs a generator on the fine-tuned copy, not the meta model's
                self._valid_generator = self.build_generator(
                    [self._valid_model], Namespace(**json.loads(self.cfg.eval_bleu_args)))
        if not self.cfg.eval_bleu:
            return super().valid_step(sample, self._valid_model, criterion)
        meta_generator, self.sequence_generator = self.sequence_generator, self._valid_generator
        try:
            return super().valid_step(sample, self._valid_model, criterion)
        finally:
            self.sequence_generator = meta_generator


# ----------------------------------------------------------------------------------------------- fine-tuning
@dataclass
class ULRFinetuneTranslationConfig(UniversalTranslationConfig):
    finetune_strategy: ChoiceEnum(FINETUNE_STRATEGIES) = field(
        default="emb+enc", metadata={"help": "what fine-tuning trains: all, emb+enc (decoder frozen) or emb (the "
                                             "source embedding change only); ULR's universal embeddings and A "
                                             "are always frozen"})
    target_token_budget: int = field(
        default=0, metadata={"help": "train on a random subset of the low-resource pairs with at most this many "
                                     "target tokens (0: all)"})
    subsample_seed: int = field(default=1, metadata={"help": "which draw of --target-token-budget (1..5)"})


@register_task("ulr_finetune_translation", dataclass=ULRFinetuneTranslationConfig)
class ULRFinetuneTranslationTask(UniversalTranslationTask):
    """Fine-tuning on the low-resource language with a strategy and a token budget (module doc)."""

    cfg: ULRFinetuneTranslationConfig

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        trainable = apply_finetune_strategy(model, self.cfg.finetune_strategy)
        frozen = [n for n, _ in model.named_parameters() if n not in trainable]
        logger.info("ulr_finetune_translation: strategy %s trains %d parameter tensors, freezes %d (%s)",
                    self.cfg.finetune_strategy, len(trainable), len(frozen), ", ".join(frozen[:8])
                    + (", ..." if len(frozen) > 8 else ""))
        return model

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if split != getattr(self.cfg, "train_subset", "train"):
            return
        if getattr(self.cfg, "batching", "sorted") == "chunked":
            raise UserDataError("ulr_finetune_translation: --batching chunked is not supported (the training set is a "
                             "subset of the split)")
        if self.cfg.target_token_budget < 0:
            raise UserDataError(f"--target-token-budget must be >= 0, got {self.cfg.target_token_budget}")
        base = _base_dataset(self.datasets[split])
        keep = np.flatnonzero(self.lang_ids[split] == self.lowres_index)
        if not len(keep):
            raise LanguageDataError(f"ulr_finetune_translation: the training split {split} has no examples of the "
                                    f"low-resource language {self.lowres_lang}")
        _, tgt = example_lengths(base)
        tokens = np.maximum(np.asarray(tgt)[keep] - 1, 0)  # without EOS
        if self.cfg.target_token_budget > 0:
            keep = keep[budget_subset(tokens, self.cfg.target_token_budget, self.cfg.subsample_seed)]
            tokens = np.maximum(np.asarray(tgt)[keep] - 1, 0)
        self.datasets[split] = IndexSubset(base, keep)
        logger.info("ulr_finetune_translation: training on %d %s pairs (%d target tokens%s)", len(keep),
                    self.lowres_lang, int(tokens.sum()),
                    f", budget {self.cfg.target_token_budget}, draw {self.cfg.subsample_seed}"
                    if self.cfg.target_token_budget > 0 else "")

"""Tasks for Nguyen (2021) ch. 3 (transfer across related languages) and ch. 4 (concatenation).

``transfer_translation`` -- ``translation_ext`` plus what a transferred child model needs:

* ``--freeze-target-embeddings`` (§3.2, "+freeze"): the decoder's input embedding
  and its output projection (tied or not) get ``requires_grad=False``, so the optimizer never sees
  them. Refused (one clear error) when source and target share one embedding matrix
  (``--share-all-embeddings``), because freezing it would freeze the source embeddings too.
* ``--transfer-parent-data DIR``: the parent's binarized folder; the child's ``dict.<lang>.txt``
  must be identical to the parent's (the joint-BPE vocabulary of
  ``python -m fairseq_ext.tools.transfer joint-bpe``), else one clear error naming the first
  differing entry. Independently, loading a checkpoint whose embedding matrices do not have the
  child dictionary's sizes fails with a message saying so (e.g. ``--finetune-from-model`` on a
  parent with another vocabulary; remap it with ``transfer remap`` first).

  Parent→child transfer itself is fairseq's: ``--finetune-from-model parent/checkpoint_best.pt``
  (loads every parameter, resets optimizer, LR scheduler, meters and data iterator).

``concat_translation`` -- ``transfer_translation`` plus the data augmentation by concatenation of
ch. 4 (:mod:`fairseq_ext.data.concat_dataset` for the data side)::

    --concat {none,consec,rand}     D_orig ∪ D_new with CONSEC / RAND pairs      (§4.2.1)
    --position-shift {none,sim,uniform} --shift-prob P --shift-max 100             (§4.3, Table 4.4)
    --concat-attn-mask              a segment attends only to itself (enc self, dec self and
                                    target segment k -> source segment k)        [Table 4.5 "mask"]
    --concat-sep-batch              D_new built from length-sorted neighbours, and batches never mix
                                    D_orig and D_new                            [Table 4.5 "sep-batch"]
    --concat-reset-pos              positions restart at 0 in every segment     [Table 4.5 "reset-pos"]
    --concat-resample               redraw RAND pairs and shifts every epoch (default: drawn once)
    --concat-eval {none,consec,rand}  valid/test sets replaced by their concatenations, decoded
                                    segment-aware (Table 4.3)

Choices where the thesis is silent:

* D_new and the shifts are drawn once from ``--concat-seed`` (``--concat-resample``: per epoch).
* A shift is drawn for every training example, original or concatenated (so "RAND +
  uniform-shift" also shifts concatenations); shift lengths count the final ``</s>``.
* sep-batch: D_new joins neighbours of the whole training set sorted by (source, target) length
  (random tie order), for consec and rand alike (drawn once, not per Morishita chunk, a
  simplification); with ``--batching chunked`` the batches of each chunk are still never mixed.

Batching (inherited from ``translation_ext``, :class:`~fairseq_ext.tasks.translation_ext.TrainBatchingMixin`),
the setting of every ch. 4 system (§4.2.2, Table 4.1)::

    --batching chunked --chunk-size 10000 --max-tokens 4096   Morishita et al.: shuffle, 10k-example
                                    chunks sorted by length, packed to 4096 tokens, batches shuffled
    --updates-per-epoch {100,600,1500,2000}   an "epoch" is N updates (validation, checkpoints,
                                    --max-epoch and --patience count them); the next epoch continues
                                    the shuffled stream of passes where this one stopped

``--updates-per-epoch`` with ``--concat-resample`` is refused (a pass would change under its batches).
* ``--concat-eval rand`` pairs neighbours of one seeded permutation (N-1 examples, as consec).
* Decoding concatenated inputs: give room, e.g. ``--max-len-a 1.2 --max-len-b 10``; pass
  ``--concat-reset-pos`` to fairseq-generate too if the model was trained with it (it only matters
  for multi-segment inputs). ``--concat-attn-mask`` is a training-time ablation: masks are not
  applied in incremental decoding, so decoding concatenated inputs with it is refused.

Mechanics (no fairseq code is copied; the model is untouched when no flag needs it):

* positions: a forward hook on the encoder's and decoder's ``embed_positions`` (sinusoidal or
  learned) replaces their output by the embedding of explicit positions
  (:func:`~fairseq_ext.data.concat_dataset.token_positions`) when ``--concat-reset-pos`` is on or
  the batch carries shifts. Without them, concatenated segments simply continue the positions of
  the first one, which is what the thesis does. The hook also records the segment ids of the
  tokens for the masks.
* masks: a forward pre-hook on every attention module adds the block mask
  (:func:`~fairseq_ext.data.concat_dataset.segment_attention_mask`) to ``attn_mask`` in
  teacher-forced (non-incremental) passes; cross-attention is sent through fairseq's
  ``F.multi_head_attention_forward`` path (``static_kv=False``, identical without incremental
  state), which accepts per-example masks.
* segment-aware decoding (``--concat-eval`` or ``--segment-aware-decoding``): hypotheses end at the
  k-th ``</s>``, k = number of ``</s>`` in the source. Internally the first k-1 ``</s>`` are
  emitted as the unused ``<s>`` symbol (the model is fed ``</s>`` in their place and the scores
  are unchanged), so fairseq's beam search does not finalise them; the returned hypotheses carry
  ``</s>`` again, i.e. exactly the target format ``y1 </s> y2 </s>``, and fairseq's strings (and
  BLEU) drop them like every ``</s>``.

References: T. Q. Nguyen and D. Chiang, "Transfer Learning across Low-Resource, Related Languages for
Neural Machine Translation", IJCNLP 2017; T. Q. Nguyen, K. Murray, D. Chiang, "Data Augmentation by
Concatenation for Low-Resource Translation: A Mystery and a Solution", IWSLT 2021; Nguyen's thesis
(see :mod:`fairseq_ext.models.twt`).
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq.data import Dictionary
from fairseq.dataclass import ChoiceEnum
from fairseq.modules import LearnedPositionalEmbedding, MultiheadAttention, SinusoidalPositionalEmbedding
from fairseq.sequence_generator import EnsembleModel, SequenceGenerator
from fairseq.tasks import register_task

from fairseq_ext.data.concat_dataset import (
    CONCAT_MODES, SHIFT_MODES, SOURCE, TARGET_INPUT, ConcatPairDataset, build_pairs,
    segment_attention_mask, segment_ids, sim_shifts, token_positions, uniform_shifts)
from fairseq_ext.generators.length_penalty import GNMTLengthPenaltySequenceGenerator
from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask

logger = logging.getLogger(__name__)

DEFAULT_SHIFT_PROB = {"sim": 1.0 / 3.0, "uniform": 0.1}


# ============================================================================ transfer_translation
@dataclass
class TransferTranslationConfig(TranslationExtConfig):
    freeze_target_embeddings: bool = field(
        default=False,
        metadata={"help": "freeze the decoder's word embeddings and output projection "
                          "(Nguyen & Chiang 2017 'transfer+freeze'); needs untied source/target embeddings"},
    )
    transfer_parent_data: Optional[str] = field(
        default=None,
        metadata={"help": "the parent's binarized data folder: fail unless the child's dictionaries "
                          "are identical to the parent's (shared-vocabulary transfer)"},
    )


def target_embedding_parameters(model) -> list:
    """The decoder's input embedding and output projection weights (each tensor once)."""
    dec = model.decoder
    out = []
    for owner, name in ((getattr(dec, "embed_tokens", None), "weight"),
                        (getattr(dec, "output_projection", None), "weight"),
                        (getattr(dec, "fc_out", None), "weight"),  # fairseq LSTM decoder
                        (dec, "embed_out")):
        p = getattr(owner, name, None) if owner is not None else None
        if isinstance(p, torch.nn.Parameter) and all(p is not q for q in out):
            out.append(p)
    if not out:
        raise ValueError("--freeze-target-embeddings: the decoder has no embed_tokens / output projection")
    return out


def freeze_target_embeddings(model) -> list:
    """``requires_grad=False`` on the target embeddings (see :func:`target_embedding_parameters`);
    returns the frozen parameters."""
    params = target_embedding_parameters(model)
    enc_emb = getattr(getattr(model, "encoder", None), "embed_tokens", None)
    enc_w = getattr(enc_emb, "weight", None)
    if enc_w is not None and any(p is enc_w for p in params):
        raise ValueError("--freeze-target-embeddings: source and target share one embedding matrix "
                         "(--share-all-embeddings), so freezing it would freeze the source embeddings "
                         "too; train the child without --share-all-embeddings "
                         "(--share-decoder-input-output-embed is fine)")
    for p in params:
        p.requires_grad_(False)
    logger.info("froze the target embeddings: %s", ", ".join(
        f"{tuple(p.shape)}" for p in params))
    return params


def check_same_dictionaries(child: Dictionary, parent_path: str, what: str) -> None:
    """One clear error unless ``child`` equals the dictionary file ``parent_path``."""
    if not os.path.isfile(parent_path):
        raise ValueError(f"--transfer-parent-data: missing parent dictionary {parent_path}")
    parent = Dictionary.load(parent_path)
    if len(parent) != len(child):
        raise ValueError(f"mismatched parent/child vocabulary ({what}): the parent dictionary {parent_path} "
                         f"has {len(parent)} entries, the child's {len(child)}; binarize both with the same "
                         f"joint dictionary (python -m fairseq_ext.tools.transfer joint-bpe) or remap the "
                         f"parent's embeddings (python -m fairseq_ext.tools.transfer remap)")
    diff = [i for i in range(len(parent)) if parent[i] != child[i]]
    if diff:
        i = diff[0]
        raise ValueError(f"mismatched parent/child vocabulary ({what}): entry {i} is {parent[i]!r} in "
                         f"{parent_path} but {child[i]!r} in the child's dictionary ({len(diff)} entries "
                         f"differ); binarize both with the same joint dictionary")


def parent_languages(folder: str) -> tuple:
    """``(src, tgt)`` of a fairseq-preprocess folder, from its ``train.<src>-<tgt>.<src>.idx``."""
    if not os.path.isdir(folder):
        raise ValueError(f"--transfer-parent-data: missing folder {folder}")
    found = set()
    for name in os.listdir(folder):
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "train" and parts[3] == "idx" and "-" in parts[1]:
            src, _, tgt = parts[1].partition("-")
            if parts[2] == src:
                found.add((src, tgt))
    if len(found) != 1:
        raise ValueError(f"--transfer-parent-data: {folder} must hold the binarized training data of one "
                         f"language pair (train.<src>-<tgt>.<src>.idx); found {sorted(found) or 'none'}")
    return found.pop()


def _vocab_size_check_hook(model):
    """A load_state_dict pre-hook: embedding matrices in the checkpoint must have the model's rows."""
    expected = {}
    for name, p in model.named_parameters():
        if name.endswith(("embed_tokens.weight", "output_projection.weight", "fc_out.weight", "embed_out")):
            expected[name] = p.shape[0]

    def hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        for name, rows in expected.items():
            t = state_dict.get(prefix + name)
            if t is not None and t.shape[0] != rows:
                raise ValueError(
                    f"mismatched parent/child vocabulary: the checkpoint's {name} has {t.shape[0]} rows but "
                    f"the child's dictionary has {rows} entries; binarize the child with the parent's "
                    f"dictionary (python -m fairseq_ext.tools.transfer joint-bpe) or remap the checkpoint "
                    f"(python -m fairseq_ext.tools.transfer remap)")
    model.register_load_state_dict_pre_hook(hook)


@register_task("transfer_translation", dataclass=TransferTranslationConfig)
class TransferTranslationTask(TranslationExtTask):
    """``translation_ext`` + ``--freeze-target-embeddings`` + parent-vocabulary checks (ch. 3)."""

    cfg: TransferTranslationConfig

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        parent = getattr(cfg, "transfer_parent_data", None)
        if parent:
            psrc, ptgt = parent_languages(parent)
            for side, lang, d in (("source", psrc, task.src_dict), ("target", ptgt, task.tgt_dict)):
                check_same_dictionaries(d, os.path.join(parent, f"dict.{lang}.txt"), f"{side} side")
        return task

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        _vocab_size_check_hook(model)
        if getattr(self.cfg, "freeze_target_embeddings", False):
            freeze_target_embeddings(model)
        return model


# ============================================================================ concat_translation
@dataclass
class ConcatTranslationConfig(TransferTranslationConfig):
    concat: ChoiceEnum(list(CONCAT_MODES)) = field(
        default="none", metadata={"help": "add D_new to the training data: consecutive pairs (consec) "
                                          "or pairs of a random permutation (rand)"})
    concat_seed: int = field(default=1, metadata={"help": "seed of RAND pairs, shifts and --concat-eval rand"})
    concat_resample: bool = field(
        default=False, metadata={"help": "redraw the RAND pairs / position shifts at every epoch "
                                         "(default: drawn once)"})
    concat_sep_batch: bool = field(
        default=False, metadata={"help": "sep-batch ablation: build D_new from length-sorted neighbours "
                                         "and never mix D_orig and D_new in a batch"})
    concat_attn_mask: bool = field(
        default=False, metadata={"help": "mask ablation: each segment attends only to itself (and target "
                                         "segment k to source segment k)"})
    concat_reset_pos: bool = field(
        default=False, metadata={"help": "reset-pos ablation: positions restart at 0 in every segment"})
    position_shift: ChoiceEnum(list(SHIFT_MODES)) = field(
        default="none", metadata={"help": "shift whole training examples' positions: sim (by the lengths "
                                          "of a random pair) or uniform (by U{0..--shift-max})"})
    shift_prob: Optional[float] = field(
        default=None, metadata={"help": "probability of shifting an example (default 1/3 for sim, "
                                        "0.1 for uniform)"})
    shift_max: int = field(default=100, metadata={"help": "largest uniform shift (inclusive)"})
    concat_eval: ChoiceEnum(list(CONCAT_MODES)) = field(
        default="none", metadata={"help": "replace valid/test sets by their consec / rand concatenations "
                                          "(and decode segment-aware)"})
    segment_aware_decoding: bool = field(
        default=False, metadata={"help": "finish a hypothesis at the k-th </s>, k = number of </s> in its "
                                         "source (on by default with --concat-eval)"})


class ConcatRuntime:
    """Per-batch state read by the model hooks: the batch's position shifts and the segment ids
    recorded from the tokens seen by ``embed_positions``."""

    def __init__(self, pad: int, eos: int, reset_pos: bool, attn_mask: bool):
        self.pad, self.eos = pad, eos
        self.reset_pos, self.attn_mask = reset_pos, attn_mask
        self.shifts = None
        self.segments = {SOURCE: None, TARGET_INPUT: None}


def _embed_positions(module, positions: torch.Tensor) -> torch.Tensor:
    """Embeddings of explicit 0-based ``positions`` (-1 = padding) for fairseq's sinusoidal or
    learned positional modules (fairseq indexes position t at ``padding_idx + 1 + t``)."""
    pad = module.padding_idx
    idx = torch.where(positions.ge(0), positions + pad + 1, torch.full_like(positions, pad))
    top = int(idx.max()) + 1 if idx.numel() else 0
    if isinstance(module, SinusoidalPositionalEmbedding):
        if top > module.weights.size(0):
            module.weights = SinusoidalPositionalEmbedding.get_embedding(
                top, module.embedding_dim, module.padding_idx).to(module.weights)
        return module.weights[idx].detach()
    if isinstance(module, LearnedPositionalEmbedding):
        if top > module.num_embeddings:
            raise ValueError(f"a shifted/concatenated position ({top - pad - 2}) exceeds the learned positional "
                             f"embedding's {module.num_embeddings - pad - 1} positions; raise "
                             f"--max-source-positions/--max-target-positions or use sinusoidal positions")
        return torch.nn.functional.embedding(idx, module.weight, module.padding_idx)
    raise ValueError(f"concat_translation: unsupported positional embedding {type(module).__name__}")


def _positions_hook(rt: ConcatRuntime, side: str, shift_key: str):
    def hook(module, args, kwargs, output):
        tokens = args[0] if args else kwargs["input"]
        incremental = kwargs.get("incremental_state") is not None
        rt.segments[side] = segment_ids(tokens, rt.pad, rt.eos, side)
        shift = rt.shifts[shift_key] if rt.shifts is not None else None
        if not rt.reset_pos and shift is None:
            return None
        if shift is not None and shift.numel() != tokens.size(0):
            shift = None  # (a beam-expanded batch in validation generation: no shifts there)
            if not rt.reset_pos:
                return None
        pos = token_positions(tokens, rt.pad, rt.eos, side, reset=rt.reset_pos, shift=shift)
        if incremental:
            pos = pos[:, -1:]
        return _embed_positions(module, pos).to(output.dtype)
    return hook


def _mask_pre_hook(rt: ConcatRuntime, query_side: str, key_side: str, cross: bool):
    def hook(module, args, kwargs):
        if not rt.attn_mask or kwargs.get("incremental_state") is not None:
            return None
        q_seg, k_seg = rt.segments[query_side], rt.segments[key_side]
        query = kwargs.get("query", args[0] if args else None)
        if q_seg is None or k_seg is None or query is None:
            return None
        if q_seg.size(1) != query.size(0) or k_seg.size(0) != query.size(1):
            return None  # not the batch the segments were recorded from
        if int(q_seg.max()) <= 0 and int(k_seg.max()) <= 0:
            return None  # one segment everywhere: nothing to mask
        mask = segment_attention_mask(q_seg, k_seg, module.num_heads, dtype=torch.float32)
        if kwargs.get("attn_mask") is not None:
            mask = mask + kwargs["attn_mask"].to(mask.dtype).unsqueeze(0)
        kpm = kwargs.get("key_padding_mask")
        if kpm is not None:  # folded into the float mask (torch deprecates mixing bool and float masks)
            kpm = torch.zeros(kpm.shape, dtype=mask.dtype, device=mask.device).masked_fill(kpm.bool(), float("-inf"))
            mask = mask + kpm.repeat_interleave(module.num_heads, dim=0).unsqueeze(1)
        kwargs = dict(kwargs, attn_mask=mask, key_padding_mask=None)
        if cross:
            kwargs["static_kv"] = False  # same result without incremental state; takes 3-D masks
        return args, kwargs
    return hook


def _head_weights_hook(module, args, kwargs, output):
    """With the F.multi_head_attention_forward path, weights come averaged over heads ``(B, T, S)``;
    add the head axis fairseq's decoder averages over when it asked for per-head weights."""
    if kwargs.get("need_head_weights") and isinstance(output, tuple) and output[1] is not None \
            and output[1].dim() == 3:
        return output[0], output[1].unsqueeze(0)
    return None


def install_concat_hooks(model, rt: ConcatRuntime) -> None:
    """Hooks for explicit positions and segment masks on a fairseq transformer (see module doc)."""
    enc, dec = getattr(model, "encoder", None), getattr(model, "decoder", None)
    for part, side, key in ((enc, SOURCE, "src"), (dec, TARGET_INPUT, "tgt")):
        ep = getattr(part, "embed_positions", None)
        if ep is None:
            raise ValueError("concat_translation: --concat-reset-pos, --concat-attn-mask and --position-shift "
                             "need a model with positional embeddings (encoder.embed_positions and "
                             "decoder.embed_positions)")
        ep.register_forward_hook(_positions_hook(rt, side, key), with_kwargs=True)
    if not rt.attn_mask:
        return
    for layer in enc.layers:
        layer.self_attn.register_forward_pre_hook(_mask_pre_hook(rt, SOURCE, SOURCE, False), with_kwargs=True)
    for layer in dec.layers:
        layer.self_attn.register_forward_pre_hook(
            _mask_pre_hook(rt, TARGET_INPUT, TARGET_INPUT, False), with_kwargs=True)
        cross = getattr(layer, "encoder_attn", None)
        if isinstance(cross, MultiheadAttention):
            cross.register_forward_pre_hook(_mask_pre_hook(rt, TARGET_INPUT, SOURCE, True), with_kwargs=True)
            cross.register_forward_hook(_head_weights_hook, with_kwargs=True)


# ---------------------------------------------------------------------------- segment-aware decoding
SEPARATOR_PENALTY = -1e4  # log-prob of a too-early final </s> (finite, so forced endings still finish)


class SegmentAwareEnsemble(EnsembleModel):
    """:class:`EnsembleModel` whose hypotheses end at the k-th ``</s>`` (k = ``</s>`` in the source).

    The first k-1 ``</s>`` are emitted as ``sep`` (the unused ``<s>``); the models are fed ``</s>``
    in their place and the probability of ``</s>`` moves to ``sep`` unchanged. As fairseq's
    ``--min-len 1`` does for a whole hypothesis, no segment may be empty (no ``</s>``/``sep`` right
    after another). A final ``</s>`` that would come too early gets the log-probability
    :data:`SEPARATOR_PENALTY` (finite, so a hypothesis forced to end at the length limit still ends)."""

    def __init__(self, models, eos: int, sep: int):
        super().__init__(models)
        self.eos, self.sep = eos, sep

    def forward_encoder(self, net_input):
        outs = super().forward_encoder(net_input)
        if outs is not None:
            for o in outs:  # keep the source tokens in the (beam-reordered) encoder output
                if isinstance(o, dict) and len(o.get("src_tokens", [])) == 0:
                    o["src_tokens"] = [net_input["src_tokens"]]
        return outs

    def forward_decoder(self, tokens, encoder_outs, incremental_states, temperature: float = 1.0):
        is_sep = tokens.eq(self.sep)
        lprobs, attn = super().forward_decoder(tokens.masked_fill(is_sep, self.eos), encoder_outs,
                                               incremental_states, temperature)
        k = None
        if encoder_outs:
            src = encoder_outs[0].get("src_tokens", []) if isinstance(encoder_outs[0], dict) else []
            if len(src) and src[0].size(0) == tokens.size(0):
                k = src[0].eq(self.eos).sum(1)
        if k is None:
            k = torch.ones(tokens.size(0), dtype=torch.long, device=tokens.device)
        more = is_sep[:, 1:].sum(1) < (k - 1)
        empty = tokens[:, -1].eq(self.eos) | tokens[:, -1].eq(self.sep)  # no segment is left empty
        eos_lp = lprobs[:, self.eos].clone()
        lprobs[:, self.sep] = torch.where(more & ~empty, eos_lp, torch.full_like(eos_lp, float("-inf")))
        lprobs[:, self.eos] = torch.where(more | empty, torch.full_like(eos_lp, SEPARATOR_PENALTY), eos_lp)
        return lprobs, attn


class SegmentAwareMixin:
    def __init__(self, models, tgt_dict, **kwargs):
        eos = kwargs.get("eos") or tgt_dict.eos()
        self.separator = tgt_dict.bos()
        if self.separator in (eos, tgt_dict.pad(), tgt_dict.unk()):
            raise ValueError("segment-aware decoding needs a <s> symbol distinct from </s>, <pad> and <unk>")
        if not isinstance(models, EnsembleModel):
            models = SegmentAwareEnsemble(models, eos, self.separator)
        super().__init__(models, tgt_dict, **kwargs)

    def _generate(self, sample, *args, **kwargs):
        out = super()._generate(sample, *args, **kwargs)
        for hyps in out:
            for h in hyps:
                h["tokens"] = h["tokens"].masked_fill(h["tokens"].eq(self.separator), self.eos)
        return out


_SEGMENT_AWARE_CLASSES = {}


def segment_aware(cls):
    """``cls`` (a :class:`SequenceGenerator`) with segment-aware ends (cached subclass)."""
    if cls not in _SEGMENT_AWARE_CLASSES:
        _SEGMENT_AWARE_CLASSES[cls] = type(f"SegmentAware{cls.__name__}", (SegmentAwareMixin, cls), {})
    return _SEGMENT_AWARE_CLASSES[cls]


@register_task("concat_translation", dataclass=ConcatTranslationConfig)
class ConcatTranslationTask(TransferTranslationTask):
    """Data augmentation by concatenation (Nguyen 2021 ch. 4); see the module doc for the flags."""

    cfg: ConcatTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if cfg.shift_max < 0:
            raise ValueError(f"--shift-max must be >= 0, got {cfg.shift_max}")
        if cfg.shift_prob is not None and not 0.0 <= cfg.shift_prob <= 1.0:
            raise ValueError(f"--shift-prob must be in [0, 1], got {cfg.shift_prob}")
        if cfg.concat_sep_batch and cfg.concat == "none":
            raise ValueError("--concat-sep-batch needs --concat consec or rand")
        if cfg.concat_resample and cfg.updates_per_epoch > 0:
            raise ValueError("--concat-resample redraws the data at every epoch, which would change examples "
                             "inside a pass of --updates-per-epoch; use one of the two")
        if src_dict.eos() != tgt_dict.eos() or src_dict.pad() != tgt_dict.pad():
            raise ValueError("concat_translation needs the same </s> and <pad> ids in both dictionaries")
        self.runtime = ConcatRuntime(src_dict.pad(), src_dict.eos(), cfg.concat_reset_pos, cfg.concat_attn_mask)

    # -- data
    def _shift_prob(self) -> float:
        p = self.cfg.shift_prob
        return DEFAULT_SHIFT_PROB[self.cfg.position_shift] if p is None else p

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        base = self.datasets[split]
        cfg = self.cfg
        seed = cfg.concat_seed
        src_sizes, tgt_sizes = np.asarray(base.src_sizes), base.tgt_sizes
        if split == cfg.train_subset:
            if cfg.concat == "none" and cfg.position_shift == "none":
                return
            mode, sort = cfg.concat, cfg.concat_sep_batch

            def pairs_fn(ep):
                return build_pairs(mode, src_sizes, tgt_sizes, np.random.default_rng([seed, ep, 1]), sort)

            if cfg.position_shift != "none" and tgt_sizes is None:
                raise ValueError("--position-shift needs target data")
            prob, kind, smax = self._shift_prob() if cfg.position_shift != "none" else 0.0, \
                cfg.position_shift, cfg.shift_max

            def shifts_fn(ep, n):
                rng = np.random.default_rng([seed, ep, 2])
                if kind == "sim":
                    return sim_shifts(n, src_sizes, np.asarray(tgt_sizes), prob, rng)
                return uniform_shifts(n, prob, smax, rng)

            ds = ConcatPairDataset(base, pairs_fn, keep_original=True,
                                   shifts_fn=shifts_fn if kind != "none" else None,
                                   sep_batch=cfg.concat_sep_batch, resample=cfg.concat_resample)
            logger.info("concat_translation %s: %d original + %d %s concatenations%s", split, ds.n_orig,
                        len(ds.pairs), mode, f", {kind}-shift p={prob:.3g}" if kind != "none" else "")
        elif cfg.concat_eval != "none":
            mode = cfg.concat_eval
            ds = ConcatPairDataset(
                base, lambda ep: build_pairs(mode, src_sizes, tgt_sizes, np.random.default_rng([seed, 0, 3])),
                keep_original=False)
            if len(ds) == 0:
                raise ValueError(f"--concat-eval {mode}: split {split} has fewer than 2 sentences")
            logger.info("concat_translation %s: replaced by its %d %s concatenations", split, len(ds), mode)
        else:
            return
        self.datasets[split] = ds

    # -- model
    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        c = self.cfg
        if c.concat_reset_pos or c.concat_attn_mask or c.position_shift != "none":
            install_concat_hooks(model, self.runtime)
        return model

    def _segment_aware(self) -> bool:
        return self.cfg.concat_eval != "none" or self.cfg.segment_aware_decoding

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        if self._segment_aware() and seq_gen_cls is None and not getattr(args, "sampling", False):
            if self.cfg.concat_attn_mask:
                raise ValueError("segment-aware decoding of concatenated inputs with --concat-attn-mask is not "
                                 "supported (the masks are applied in teacher-forced passes only); decode "
                                 "single sentences, or drop --concat-eval/--segment-aware-decoding")
            alpha = getattr(self.cfg, "gnmt_alpha", 0.0)
            if alpha and alpha > 0:
                seq_gen_cls = segment_aware(GNMTLengthPenaltySequenceGenerator)
                extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {}, gnmt_alpha=alpha)
            else:
                seq_gen_cls = segment_aware(SequenceGenerator)
        return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                       extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)

    # -- steps: expose the batch's position shifts to the hooks
    def train_step(self, sample, *args, **kwargs):
        self.runtime.shifts = sample.get("concat_shift") if isinstance(sample, dict) else None
        try:
            return super().train_step(sample, *args, **kwargs)
        finally:
            self.runtime.shifts = None

    def valid_step(self, sample, *args, **kwargs):
        self.runtime.shifts = sample.get("concat_shift") if isinstance(sample, dict) else None
        try:
            return super().valid_step(sample, *args, **kwargs)
        finally:
            self.runtime.shifts = None

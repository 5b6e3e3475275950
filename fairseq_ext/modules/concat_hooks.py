"""Model hooks of the ``concat_translation`` task (Nguyen 2021 ch. 4): explicit token positions
(``--concat-reset-pos``, ``--position-shift``; §4.3, Table 4.4) and segment attention masks
(``--concat-attn-mask``; Table 4.5 "mask") on a fairseq Transformer, without copying fairseq code.

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

:class:`ConcatRuntime` carries the per-batch state the hooks read (the batch's shifts, set by the task
around each train/valid step, and the segment ids recorded from the tokens).
"""
import torch
from fairseq.modules import LearnedPositionalEmbedding, MultiheadAttention, SinusoidalPositionalEmbedding

from fairseq_ext.data.concat_dataset import (
    SOURCE, TARGET_INPUT, segment_attention_mask, segment_ids, token_positions)
from fairseq_ext.data.errors import UserDataError


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
            raise UserDataError(f"a shifted/concatenated position ({top - pad - 2}) exceeds the learned positional "
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
            raise UserDataError("concat_translation: --concat-reset-pos, --concat-attn-mask and --position-shift "
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

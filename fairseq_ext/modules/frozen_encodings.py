"""Encodings of sentences by a *frozen* encoder or decoder, kept across batches and epochs.

The context of Maruf (2019) ch. 4's H-attention (``--ctx-rep-model pretrained``, §4.3.1: the context word vectors
come from the pre-trained sentence model, kept fixed in stage 2) is the output of a sentence model whose parameters
never change and which never drops out (it stays in eval mode). A context sentence's encoding is then a function of
its tokens alone, the same in every batch and every epoch, so it is computed once and reused:
:class:`FrozenEncodingCache` returns the states of an N-set exactly as the frozen module would, computing only the
rows it has not seen (in one batch of their own) and storing each new row's states (its words, not its padding):

* :meth:`FrozenEncodingCache.encode`: the frozen encoder's states of the left-padded sources (encoder
  integration, Fig. 4.3, and the source side of the decoder integration); key: the sentence's tokens;
* :meth:`FrozenEncodingCache.features`: the frozen decoder's teacher-forced features of a context translation
  (decoder integration, Fig. 4.4: keys = its last source-attention outputs, values = its outputs); key: the
  context sentence's source tokens *and* its translation's tokens (the decoder attends to the frozen encoder's
  states of that source, so the encoder is ``watch``-ed too). In online decoding a translation's features are
  computed once, the first time a later sentence reads it, and reused by every later sentence.

What is cached and when it is valid:

* the key is made of tokens only (so the same sentence in another split, chunk or document is a hit and two
  different sentences never share an entry);
* the module must be in eval mode (no dropout: the cached value is then the value the uncached path computes);
  in training mode, or with gradients enabled, nothing is cached or read;
* everything stored is dropped as soon as the state of the module or of a watched one changes: any parameter or
  buffer written (in place, loaded, moved or cast: its version counter, storage and dtype, and a checksum of its
  values, which also sees writes through ``.data``), the module's mode, or the autocast state;
* the states of a hit equal the uncached ones up to the float rounding of a different batch composition (the
  products run over batches of another size; the uncached path differs between batches by the same); the
  padding positions of a merged row are zeros (the module leaves arbitrary values there; every reader masks
  them).

Memory: at most ``max_mb`` megabytes of states per cache (C floats per word; the decoder's two feature vectors
2·C); once full, new sentences are computed but not stored (under a cyclic epoch order a least-recently-used
policy would evict every entry before its reuse).
"""
import copy
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor


def module_state(module: nn.Module) -> tuple:
    """What the outputs of ``module`` depend on besides its input: its mode, the autocast state, and per parameter
    and buffer its storage, dtype, version counter and the sum of its values."""
    tensors = [*module.parameters(), *module.buffers()]
    device = tensors[0].device.type if tensors else "cpu"
    with torch.no_grad():
        sums = torch.stack([t.detach().sum(dtype=torch.float64) for t in tensors if t.is_floating_point()]).tolist() \
            if tensors else []
    return (module.training, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device),
            tuple((t.data_ptr(), t.dtype, t._version) for t in tensors), tuple(sums))


def row_keys(tokens: Tensor, lengths: List[int], left_pad: bool) -> List[tuple]:
    """Each row of ``tokens`` without its padding (``lengths`` tokens at its right or left end), as a tuple."""
    L = tokens.size(1)
    return [tuple(row[L - n:] if left_pad else row[:n]) for row, n in zip(tokens.tolist(), lengths)]


def decoder_inputs(targets: Tensor, pad: int, eos: int) -> Tensor:
    """fairseq's ``collate_tokens(move_eos_to_beginning=True)`` on right-padded targets (…, EOS, pad):
    EOS first, shifted right, the final EOS dropped."""
    lengths = targets.ne(pad).sum(1, keepdim=True)
    prev = torch.cat([targets.new_full((targets.size(0), 1), eos), targets[:, :-1]], 1)
    positions = torch.arange(prev.size(1), device=prev.device).unsqueeze(0)
    return prev.masked_fill(positions >= lengths, pad)


class FrozenEncodingCache:
    """Per-sentence outputs of a frozen, eval-mode fairseq encoder or decoder (module doc). ``watch``: further
    frozen modules the outputs depend on (the encoder whose states a decoder reads); a change of theirs empties the
    cache too."""

    def __init__(self, max_mb: float, watch: Sequence[nn.Module] = ()):
        self.max_bytes = int(max_mb * 2 ** 20)
        self.watch = list(watch)
        self.store: Dict[tuple, Tuple[Tensor, ...]] = {}
        self.bytes = 0
        self.state: Optional[tuple] = None
        self.hits = self.misses = 0

    def __deepcopy__(self, memo):
        """A copy of the model (EMA, quantisation) gets an empty cache with the same budget, not the stored states;
        it watches the copies of the watched modules."""
        return FrozenEncodingCache(self.max_bytes / 2 ** 20, [copy.deepcopy(m, memo) for m in self.watch])

    def clear(self):
        self.store.clear()
        self.bytes = 0

    def usable(self, module: nn.Module, rows: int) -> bool:
        """Whether ``module``'s outputs may be read from / kept in the cache now (module doc)."""
        return not (module.training or torch.is_grad_enabled() or self.max_bytes <= 0 or rows == 0)

    def rows(self, module: nn.Module, keys: List[tuple], lengths: List[int],
             compute: Callable[[List[int]], List[Tuple[Tensor, ...]]]) -> List[Tuple[Tensor, ...]]:
        """Per key the tensors (each ``lengths[i]`` × C) of its sentence: stored ones, the others by
        ``compute(missing row numbers)`` in one call (and stored while the budget lasts)."""
        state = (module_state(module), *(module_state(m) for m in self.watch))
        if state != self.state:
            self.clear()
            self.state = state
        found: List[Optional[Tuple[Tensor, ...]]] = [self.store.get(k) for k in keys]
        miss = [i for i, f in enumerate(found) if f is None]
        self.hits += len(keys) - len(miss)
        self.misses += len(miss)
        if miss:
            for i, parts in zip(miss, compute(miss)):
                found[i] = parts
                size = sum(p.numel() * p.element_size() for p in parts)
                if lengths[i] > 0 and self.bytes + size <= self.max_bytes:
                    self.store[keys[i]] = tuple(p.clone() for p in parts)
                    self.bytes += size
        return found  # type: ignore[return-value]

    def encode(self, encoder: nn.Module, tokens: Tensor, pad: int) -> Tuple[Tensor, Tensor]:
        """``tokens`` (N, L), left-padded → the encoder's (N, L, C) batch-first states and (N, L) padding mask."""
        pad_mask = tokens.eq(pad)
        if not self.usable(encoder, tokens.size(0)):
            out = encoder(tokens, (~pad_mask).sum(1))
            return out["encoder_out"][0].transpose(0, 1), out["encoder_padding_mask"][0]
        L = tokens.size(1)
        lengths = (~pad_mask).sum(1).tolist()

        def compute(miss: List[int]) -> List[Tuple[Tensor, ...]]:
            width = max(1, max(lengths[i] for i in miss))
            sub = tokens[torch.tensor(miss, device=tokens.device), L - width:]
            states = encoder(sub, sub.ne(pad).sum(1))["encoder_out"][0].transpose(0, 1)
            return [(states[j, width - lengths[i]:],) for j, i in enumerate(miss)]

        found = self.rows(encoder, row_keys(tokens, lengths, left_pad=True), lengths, compute)
        return merge_rows([f[0] for f in found], lengths, L, left_pad=True), pad_mask

    def features(self, decoder: nn.Module, prev: Tensor, nset_out: Dict[str, List[Tensor]], src_tokens: Tensor,
                 pad: int) -> Tuple[Tensor, Tensor]:
        """``decoder.sentence_features(prev, nset_out)`` (two (N, T, C) tensors: the frozen decoder's outputs and
        its last source-attention outputs) of the right-padded teacher-forcing inputs ``prev`` (N, T) over the
        encoder states ``nset_out`` of the left-padded sources ``src_tokens`` (N, L): each row keyed by its
        source and its target, the encoder of its states being watched."""
        if not self.usable(decoder, prev.size(0)):
            return decoder.sentence_features(prev, nset_out)
        T = prev.size(1)
        lengths = prev.ne(pad).sum(1).tolist()
        src_lengths = src_tokens.ne(pad).sum(1).tolist()
        keys = list(zip(row_keys(src_tokens, src_lengths, left_pad=True), row_keys(prev, lengths, left_pad=False)))

        def compute(miss: List[int]) -> List[Tuple[Tensor, ...]]:
            idx = torch.tensor(miss, device=prev.device)
            sub = prev.index_select(0, idx)[:, : max(1, max(lengths[i] for i in miss))]
            out = decoder.sentence_features(sub, {
                "encoder_out": [nset_out["encoder_out"][0].index_select(1, idx)],
                "encoder_padding_mask": [nset_out["encoder_padding_mask"][0].index_select(0, idx)]})
            return [tuple(x[j, : lengths[i]] for x in out) for j, i in enumerate(miss)]

        found = self.rows(decoder, keys, lengths, compute)
        return tuple(merge_rows([f[k] for f in found], lengths, T, left_pad=False)  # type: ignore[return-value]
                     for k in range(2))


def merge_rows(rows: List[Tensor], lengths: List[int], width: int, left_pad: bool) -> Tensor:
    """(N, ``width``, C) of the rows (each ``lengths[i]`` × C), left- or right-aligned, zeros elsewhere."""
    out = rows[0].new_zeros(len(rows), width, rows[0].size(-1))
    for i, (row, n) in enumerate(zip(rows, lengths)):
        if n > 0 and left_pad:
            out[i, width - n:] = row
        elif n > 0:
            out[i, :n] = row
    return out

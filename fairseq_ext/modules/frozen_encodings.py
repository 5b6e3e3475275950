"""Encodings of sentences by a *frozen* encoder, kept across batches and epochs.

The context of Maruf (2019) ch. 4's H-attention (``--ctx-rep-model pretrained``, §4.3.1: the context word vectors
come from the pre-trained sentence model, kept fixed in stage 2) is the output of an encoder whose parameters never
change and which never drops out (it stays in eval mode). A sentence's context encoding is then a function of its
tokens alone, the same in every batch and every epoch, so it is computed once and reused: :class:`FrozenEncodingCache`
returns the left-padded batch-first states of an N-set exactly as the encoder would, encoding only the rows it has
not seen (in one batch of their own) and storing each new row's states (its words, not its padding).

What is cached and when it is valid:

* the key is the sentence's tokens (so the same sentence in another split, chunk or document is a hit and two
  different sentences never share an entry);
* the encoder must be in eval mode (no dropout: the cached value is then the value the uncached path computes);
  in training mode, or with gradients enabled, nothing is cached or read;
* everything it stores is dropped as soon as the encoder's state changes: any parameter or buffer written (in place,
  loaded, moved or cast: its version counter, storage and dtype, and a checksum of its values, which also sees
  writes through ``.data``), the module's mode, or the autocast state;
* the states of a hit equal the uncached ones up to the float rounding of a different batch composition (the
  encoder's products run over batches of another size; the uncached path differs between batches by the same);
  the padding positions of a merged row are zeros (the encoder leaves arbitrary values there; every reader masks
  them).

Memory: at most ``max_mb`` megabytes of states (C floats per word); once full, new sentences are encoded but not
stored (under a cyclic epoch order a least-recently-used policy would evict every entry before its reuse).
"""
from typing import Dict, List, Optional, Tuple

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


class FrozenEncodingCache:
    """Per-sentence outputs of a frozen, eval-mode fairseq encoder (module doc)."""

    def __init__(self, max_mb: float):
        self.max_bytes = int(max_mb * 2 ** 20)
        self.store: Dict[tuple, Tensor] = {}
        self.bytes = 0
        self.state: Optional[tuple] = None
        self.hits = self.misses = 0

    def __deepcopy__(self, memo):
        """A copy of the model (EMA, quantisation) gets an empty cache with the same budget, not the stored states."""
        return FrozenEncodingCache(self.max_bytes / 2 ** 20)

    def clear(self):
        self.store.clear()
        self.bytes = 0

    def encode(self, encoder: nn.Module, tokens: Tensor, pad: int) -> Tuple[Tensor, Tensor]:
        """``tokens`` (N, L), left-padded → the encoder's (N, L, C) batch-first states and (N, L) padding mask."""
        pad_mask = tokens.eq(pad)
        if encoder.training or torch.is_grad_enabled() or self.max_bytes <= 0 or tokens.size(0) == 0:
            out = encoder(tokens, (~pad_mask).sum(1))
            return out["encoder_out"][0].transpose(0, 1), out["encoder_padding_mask"][0]
        state = module_state(encoder)
        if state != self.state:
            self.clear()
            self.state = state
        L = tokens.size(1)
        lengths = (~pad_mask).sum(1).tolist()
        keys = [tuple(row[L - n:]) for row, n in zip(tokens.tolist(), lengths)]
        found: List[Optional[Tensor]] = [self.store.get(k) for k in keys]
        miss = [i for i, f in enumerate(found) if f is None]
        self.hits += len(keys) - len(miss)
        self.misses += len(miss)
        if miss:
            width = max(1, max(lengths[i] for i in miss))
            sub = tokens[torch.tensor(miss, device=tokens.device), L - width:]
            states = encoder(sub, sub.ne(pad).sum(1))["encoder_out"][0].transpose(0, 1)
            for j, i in enumerate(miss):
                found[i] = row = states[j, width - lengths[i]:]
                size = row.numel() * row.element_size()
                if lengths[i] > 0 and self.bytes + size <= self.max_bytes:
                    self.store[keys[i]] = row.clone()
                    self.bytes += size
        first = found[0]
        out = first.new_zeros(tokens.size(0), L, first.size(-1))
        for i, row in enumerate(found):
            if lengths[i] > 0:
                out[i, L - lengths[i]:] = row
        return out, pad_mask

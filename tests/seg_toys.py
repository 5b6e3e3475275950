"""The SEG-NMT tests' toys (not a test module): ``seg_nmt_tiny`` on the toy dictionary and a toy batch with its
translation-memory pairs (the ``tm_*`` keys of the ``seg_translation`` batch contract)."""
import torch
from fairseq.data import data_utils

from harness import build_model, toy_batch

V = 60
PAD, EOS = 1, 2


def seg(arch="seg_nmt_tiny", seed=0, **kw):
    return build_model(arch, vocab=V, seed=seed, **kw)


def tm_inputs(pairs, tm_index):
    """The task's ``tm_*`` net_input keys for ``pairs`` = [(X' ids, Y' ids)] (without </s>) and ``tm_index``."""
    if not pairs:
        return dict(tm_src_tokens=torch.full((0, 1), PAD), tm_src_lengths=torch.zeros(0, dtype=torch.long),
                    tm_prev_output_tokens=torch.full((0, 1), PAD), tm_tgt_tokens=torch.full((0, 1), PAD),
                    tm_index=torch.tensor(tm_index, dtype=torch.long).reshape(len(tm_index), -1))
    src = [torch.tensor(x + [EOS]) for x, _ in pairs]
    tgt = [torch.tensor(y + [EOS]) for _, y in pairs]
    return dict(tm_src_tokens=data_utils.collate_tokens(src, PAD, EOS, True),
                tm_src_lengths=torch.tensor([s.numel() for s in src]),
                tm_prev_output_tokens=data_utils.collate_tokens(tgt, PAD, EOS, False, move_eos_to_beginning=True),
                tm_tgt_tokens=data_utils.collate_tokens(tgt, PAD, EOS, False),
                tm_index=torch.tensor(tm_index, dtype=torch.long))


PAIRS = [([5, 6, 7, 8], [9, 10, 11]), ([12, 13], [14, 9, 15, 16, 17]), ([18, 19, 20], [21, 22])]


def toy(tm_index=([0, 1], [2, -1], [-1, -1]), pairs=PAIRS, **kw):
    """A toy batch of 3 (row 0: pairs 0 and 1, row 1: pair 2, row 2: none) → (src, lengths, prev, tm)."""
    src, lengths, prev = toy_batch(bsz=len(tm_index), src_len=7, tgt_len=6, **kw)
    return src, lengths, prev, tm_inputs(pairs, [list(r) for r in tm_index])

"""The document-translation tests' toys (not a test module): a toy dictionary, sentence pairs with unique content
per sentence, document datasets over them, and the context of a batch row resolved through the N-set."""
import numpy as np
import torch
from fairseq.data import LanguagePairDataset

from fairseq_ext.data.documents import DocumentIndex, DocumentPairDataset
from harness import make_dictionary

V = 700
D = make_dictionary(V)
PAD, EOS = D.pad(), D.eos()


def src_of(i):  # unique content and length per sentence
    return torch.tensor([4 + i % 600] * (1 + i % 4) + [EOS])


def tgt_of(i):
    return torch.tensor([5 + (7 * i) % 600] * (1 + i % 3) + [EOS])


def make_pair(n, src=None):
    src = src or [src_of(i) for i in range(n)]
    tgt = [tgt_of(i) for i in range(n)]
    return LanguagePairDataset(src, np.array([len(s) for s in src]), D, tgt, np.array([len(t) for t in tgt]), D,
                               left_pad_source=True, shuffle=False)


def make_docs(lengths, **kw):
    index = DocumentIndex.from_lengths(lengths)
    return DocumentPairDataset(make_pair(len(index)), index, **kw)


def collate(ds, ids):
    return ds.collater([ds[i] for i in ids])


def rows_of(batch):
    """Dataset index of every N-set row."""
    return batch["id"].tolist() + batch["ctx_id"].tolist()


def context_of(batch, b, pad=PAD):
    """(source tokens, distance) of each context sentence of batch row b, resolved through the N-set."""
    net = batch["net_input"]
    B = net["src_tokens"].size(0)
    out = []
    for r, dist in zip(net["ctx_index"][b].tolist(), net["ctx_distance"][b].tolist()):
        if r < 0:
            assert dist == 0
            continue
        t = net["src_tokens"][r] if r < B else net["ctx_src_tokens"][r - B]
        out.append((t[t.ne(pad)].tolist(), dist))
    return out

"""``doc_translation`` (Maruf 2019 ch. 3-4), the document batches in process: the document index, context selection,
the document batch keys of :mod:`fairseq_ext.data.documents` (N-set, ctx_index/-1 padding, ctx_distance, target
context), document batching, the concatenation baseline. The task and the CLI are in
``test_doc_translation_task.py``."""
import numpy as np
import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the tasks)
from fairseq_ext.data.documents import (
    DocumentDataError,
    DocumentIndex,
    DocumentPairDataset,
    PrevConcatDataset,
    capped_count,
    context_positions,
    document_batches,
    strip_context,
    subset_doc_sample,
    uses_document_context,
)
from doc_batches import EOS, PAD, collate, context_of, make_docs, make_pair, rows_of, src_of, tgt_of


# ----------------------------------------------------------------------------- DocumentIndex
def test_document_index_positions_and_errors(tmp_path):
    idx = DocumentIndex.from_ids(["Ruth.1.1", "Ruth.1.2", "Ruth.2.1", "Job.3.1", "Job.3.2", "Job.3.3"])
    assert idx.names == ["Ruth.1", "Ruth.2", "Job.3"] and idx.lengths.tolist() == [2, 1, 3]
    assert idx.doc_of.tolist() == [0, 0, 1, 2, 2, 2] and idx.pos.tolist() == [0, 1, 0, 0, 1, 2]
    p = tmp_path / "x.ids"
    p.write_text("A.1.1\nA.1.2\nB.1.1\nA.1.3\n")
    with pytest.raises(DocumentDataError, match=rf"{p}:4: .*'A.1'.*lines 1-2.*contiguous"):
        DocumentIndex.from_file(str(p))
    p.write_text("A.1.1\n\nA.1.2\n")
    with pytest.raises(DocumentDataError, match=rf"{p}:2: empty id"):
        DocumentIndex.from_file(str(p))


# ----------------------------------------------------------------------------- context selection
def brute_force(pos, length, mode, size, cap):
    cand = [p for p in range(length) if p != pos and (mode == "offline" or p < pos)]
    cand.sort(key=lambda p: (abs(p - pos), p))  # nearest first, ties -> earlier
    m = min(size if size > 0 else length, cap)
    return sorted(cand[:m])


def test_context_selection_matches_the_definition():
    for length in range(1, 10):
        for pos in range(length):
            for mode in ("offline", "online"):
                for size in (0, 1, 2, 3, 5):
                    for cap in (0, 1, 2, 4, 128):
                        got = context_positions(pos, length, mode, size, cap)
                        assert got == brute_force(pos, length, mode, size, cap), (pos, length, mode, size, cap)
                        assert pos not in got
                        if mode == "online":
                            assert all(p < pos for p in got)
    assert context_positions(0, 1, "offline") == [] and context_positions(0, 5, "online") == []
    assert context_positions(2, 6, "offline", size=3) == [0, 1, 3]  # -1, +1, then -2 before +2
    assert context_positions(0, 6, "offline", size=3) == [1, 2, 3]
    assert context_positions(4, 6, "online", size=0, cap=2) == [2, 3]


def test_collater_shapes_padding_and_the_n_set():
    ds = make_docs([1, 4, 6], mode="offline", context_size=0, max_context=3, target_context="gold")
    batch = collate(ds, [1, 2, 7])  # one sentence of doc 1 ... and the one-sentence doc 0 is not here
    net = batch["net_input"]
    ids = batch["id"].tolist()
    B = len(ids)
    extra = batch["ctx_id"].tolist()
    assert sorted(ids) == [1, 2, 7] and extra == sorted(extra)
    N = B + len(extra)
    assert net["ctx_index"].shape == net["ctx_distance"].shape == (B, 3)
    assert net["ctx_src_tokens"].shape[0] == len(extra) == net["ctx_src_lengths"].numel()
    assert net["ctx_tgt_tokens"].shape[0] == N and net["ctx_tgt_lengths"].tolist() == \
        [len(tgt_of(j)) for j in rows_of(batch)]
    # extra rows are the right sources, left-padded like src_tokens; targets are right-padded, EOS last
    for e, j in enumerate(extra):
        row = net["ctx_src_tokens"][e]
        assert row[row.ne(PAD)].tolist() == src_of(j).tolist() and int(row[-1]) == EOS
    for r, j in enumerate(rows_of(batch)):
        row = net["ctx_tgt_tokens"][r]
        assert row[: len(tgt_of(j))].tolist() == tgt_of(j).tolist() and row[len(tgt_of(j)):].eq(PAD).all()
    # the context of every sentence is its document's, resolved through the N-set
    index = ds.index
    for b, i in enumerate(ids):
        want = [index.starts[index.doc_of[i]] + p for p in
                context_positions(int(index.pos[i]), index.doc_length_of(i), "offline", 0, 3)]
        assert context_of(batch, b) == [(src_of(j).tolist(), int(index.pos[j] - index.pos[i])) for j in want]
        k = len(want)
        assert net["ctx_index"][b, k:].eq(-1).all() and net["ctx_distance"][b, k:].eq(0).all()
        assert net["ctx_index"][b, :k].ge(0).all() and net["ctx_index"][b, :k].lt(N).all()
        assert net["ctx_distance"][b, :k].ne(0).all()
    assert batch["doc_index"].tolist() == [int(index.doc_of[i]) for i in ids]
    assert batch["doc_pos"].tolist() == [int(index.pos[i]) for i in ids]
    # a one-sentence document: empty context, K = 0, E = 0
    one = collate(ds, [0])
    assert one["net_input"]["ctx_index"].shape == (1, 0) and one["net_input"]["ctx_src_tokens"].shape == (0, 1)
    assert one["net_input"]["ctx_src_lengths"].shape == (0,) and one["ctx_id"].numel() == 0


def test_context_is_independent_of_batch_order_and_company():
    ds = make_docs([5, 7, 3], mode="offline", context_size=4)
    a = collate(ds, [6, 0, 1, 2, 3, 4])
    b = collate(ds, [9, 8, 6, 13, 14])
    c = collate(ds, [6])
    got = []
    for batch in (a, b, c):
        r = batch["id"].tolist().index(6)
        got.append(context_of(batch, r))
    assert got[0] == got[1] == got[2] and len(got[0]) == 4


def test_online_context_ignores_later_sentences():
    lengths = [6]
    srcs = [src_of(i) for i in range(6)]
    changed = list(srcs)
    changed[4] = torch.tensor([600, 601, 602, EOS])
    idx = DocumentIndex.from_lengths(lengths)
    ds1 = DocumentPairDataset(make_pair(6, srcs), idx, mode="online")
    ds2 = DocumentPairDataset(make_pair(6, changed), idx, mode="online")
    for i in range(4):
        c1, c2 = collate(ds1, [i]), collate(ds2, [i])
        assert context_of(c1, 0) == context_of(c2, 0) and all(d < 0 for _, d in context_of(c1, 0))
    assert context_of(collate(ds1, [0]), 0) == []


def test_a_500_sentence_document_is_bounded_by_the_cap(tmp_path):
    ids = tmp_path / "long.ids"
    ids.write_text("".join(f"Long.1.{k}\n" for k in range(1, 501)) + "Short.1.1\n")
    index = DocumentIndex.from_file(str(ids))
    assert index.lengths.tolist() == [500, 1]
    ds = DocumentPairDataset(make_pair(501), index, mode="offline", max_context=16)
    assert capped_count(index, "offline", 0, 16) == 500
    num_tokens = ds.num_tokens_vec(np.arange(501))
    # inference: the whole document is one batch (never cut), K <= cap, no extra rows
    batches = document_batches(index, num_tokens, max_tokens=200)
    assert [len(b) for b in batches] == [500, 1]
    whole = collate(ds, batches[0].tolist())
    assert whole["net_input"]["ctx_index"].shape == (500, 16) and whole["ctx_id"].numel() == 0
    # training: consecutive chunks within the limits; the extra rows of a chunk stay bounded
    rng = np.random.default_rng([1, 1])
    train = document_batches(index, num_tokens, max_tokens=200, order=rng.permutation(2), cut_long=True)
    assert sorted(np.concatenate(train).tolist()) == list(range(501))
    for b in train:
        assert len(b) * int(num_tokens[b].max()) <= 200
        if b[0] < 500:
            assert (np.diff(b[b < 500]) == 1).all()
        batch = collate(ds, b.tolist())
        assert batch["ctx_id"].numel() <= 16 and batch["net_input"]["ctx_index"].size(1) <= 16


def test_document_batches_keep_documents_whole_and_cover_everything_once():
    lengths = [3, 9, 1, 5, 12, 2]
    index = DocumentIndex.from_lengths(lengths)
    num_tokens = np.array([2 + i % 5 for i in range(len(index))])
    keep = np.ones(len(index), dtype=bool)
    keep[[4, 20]] = False  # filtered by size
    inf = document_batches(index, num_tokens, keep, max_tokens=30)
    flat = np.concatenate(inf).tolist()
    assert sorted(flat) == [i for i in range(len(index)) if keep[i]] and len(flat) == len(set(flat))
    for b in inf:  # a document is never split across batches at inference
        docs = set(index.doc_of[b].tolist())
        for d in docs:
            assert set(b.tolist()) >= {i for i in index.sentences(d) if keep[i]}
    for epoch in (1, 2):
        order = np.random.default_rng([7, epoch]).permutation(index.n_docs)
        tr = document_batches(index, num_tokens, keep, max_tokens=30, order=order, cut_long=True)
        flat = np.concatenate(tr).tolist()
        assert sorted(flat) == [i for i in range(len(index)) if keep[i]] and len(flat) == len(set(flat))
        assert all(len(b) * int(num_tokens[b].max()) <= 30 for b in tr)
    a = document_batches(index, num_tokens, keep, max_tokens=30, order=np.random.default_rng([7, 1]).permutation(6),
                         cut_long=True)
    assert all(np.array_equal(x, y) for x, y in zip(a, document_batches(
        index, num_tokens, keep, max_tokens=30, order=np.random.default_rng([7, 1]).permutation(6), cut_long=True)))


def test_concat_source_is_previous_sentences_with_brk():
    index = DocumentIndex.from_lengths([3, 2])
    srcs = [src_of(i) for i in range(5)]
    brk = 650
    cat = PrevConcatDataset(_Sized(srcs), index, 2, brk, EOS, max_source_positions=None)
    s = [x[:-1].tolist() for x in srcs]
    assert cat[0].tolist() == srcs[0].tolist()
    assert cat[2].tolist() == s[0] + [brk] + s[1] + [brk] + srcs[2].tolist()
    assert cat[3].tolist() == srcs[3].tolist()  # a new document: no context
    assert cat[4].tolist() == s[3] + [brk] + srcs[4].tolist()
    assert [len(cat[i]) for i in range(5)] == cat.sizes.tolist()
    short = PrevConcatDataset(_Sized(srcs), index, 2, brk, EOS, max_source_positions=len(srcs[2]) + 3)
    assert short[2].tolist() == (s[1] + [brk] + srcs[2].tolist())[-(len(srcs[2]) + 3):]
    assert short.sizes[2] == len(short[2])


class _Sized(list):
    @property
    def sizes(self):
        return np.array([len(x) for x in self])


def test_models_opt_in_to_the_context_keys():
    ds = make_docs([4, 3])
    batch = collate(ds, [0, 1, 4])
    plain = strip_context(batch)
    assert not any(k.startswith("ctx_") for k in plain["net_input"]) and "ctx_id" not in plain
    assert "ctx_index" in batch["net_input"]  # the original is untouched

    class M(torch.nn.Module):
        uses_document_context = True

    wrapped = torch.nn.Module()
    wrapped.module = M()
    assert uses_document_context(M()) and uses_document_context(wrapped) and not uses_document_context(torch.nn.Linear(1, 1))


def test_subset_keeps_each_sentence_its_context():
    ds = make_docs([6], mode="offline", target_context="gold")
    batch = collate(ds, [0, 1, 2, 3])
    B = 4
    keep = torch.tensor([0, 2])
    sub = subset_doc_sample(batch, keep, True, PAD, EOS)
    for new_b, old_b in enumerate(keep.tolist()):
        assert context_of(sub, new_b) == context_of(batch, old_b)
    assert sub["net_input"]["ctx_tgt_tokens"].size(0) == len(rows_of(sub)) == len(rows_of(batch))
    for r, j in enumerate(rows_of(sub)):
        row = sub["net_input"]["ctx_tgt_tokens"][r]
        assert row[row.ne(PAD)].tolist() == tgt_of(j).tolist()
    assert sub["net_input"]["src_tokens"].size(0) == 2 and batch["net_input"]["src_tokens"].size(0) == B

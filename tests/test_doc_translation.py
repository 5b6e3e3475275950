"""``doc_translation`` (Maruf 2019 ch. 3-4): document index, context selection, the document batch keys of
:mod:`fairseq_ext.data.documents` (N-set, ctx_index/-1 padding, ctx_distance, target context), document batching,
the concatenation baseline, the generated-context tool, input errors, and the real CLI with a sentence model."""
import shutil

import numpy as np
import pytest
import torch
from fairseq.data import LanguagePairDataset

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
from fairseq_ext.tasks.doc_translation import DocTranslationConfig, DocTranslationTask
from fairseq_ext.tools.common import ToolError
from harness import TINY_TRANSFORMER, fairseq, generate, hypotheses, make_dictionary, n_lines, train

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


def test_document_index_an_empty_id_or_empty_document_is_named_by_file_and_line(tiny_bin, tmp_path):
    """Eq. 3.2 runs over documents d (Π_d Π_j P(y^j | x^j, Y^-j, X^-j)), so every line of {split}.ids must name its
    document: an empty id line -- a blank line used as a document separator, a whitespace-only line, an extra
    blank line at the end, a blank first line -- is one DocumentDataError ``FILE:LINE: empty id``; CRLF line ends
    are not empty ids; an empty document (0 sentences) is refused by DocumentIndex itself, naming its source;
    through the task an empty id line of test.ids names test.ids and the line, and an empty ids file is the
    line-count error naming both files."""
    p = tmp_path / "x.ids"
    for text, line in (("A.1.1\nA.1.2\n\nB.1.1\n", 3),   # blank line between two documents
                       ("A.1.1\n   \nA.1.2\n", 2),          # whitespace only
                       ("A.1.1\nA.1.2\n\n", 3),             # one blank line too many at the end
                       ("\nA.1.1\n", 1)):
        p.write_text(text)
        with pytest.raises(DocumentDataError, match=rf"^{p}:{line}: empty id"):
            DocumentIndex.from_file(str(p))
    p.write_bytes(b"A.1.1\r\nA.1.2\r\nB.2.1\r\n")
    crlf = DocumentIndex.from_file(str(p))
    assert crlf.names == ["A.1", "B.2"] and crlf.lengths.tolist() == [2, 1]
    assert DocumentIndex.from_ids(["A.1.1", "A.1.2"], source="ids.txt").lengths.tolist() == [2]
    with pytest.raises(ValueError, match=r"^<synthetic>: empty document"):
        DocumentIndex.from_lengths([2, 0, 1])
    with pytest.raises(DocumentDataError, match=r"^list\.ids:2: empty id"):
        DocumentIndex.from_ids(["A.1.1", "", "A.1.2"], source="list.ids")

    bad = tmp_path / "bin"
    shutil.copytree(tiny_bin, bad)
    lines = (bad / "test.ids").read_text().splitlines()
    lines[4] = ""
    (bad / "test.ids").write_text("\n".join(lines) + "\n")
    with pytest.raises(DocumentDataError, match=rf"^{bad / 'test.ids'}:5: empty id"):
        task_for(bad).load_dataset("test")
    (bad / "test.ids").write_text("")
    with pytest.raises(DocumentDataError, match=r"test\.ids has 0 lines, but the binarized split .*test\.es-en\.es\.bin"):
        task_for(bad).load_dataset("test")


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


# ----------------------------------------------------------------------------- the task on the tiny data
def task_for(data, **kw):
    cfg = DocTranslationConfig(data=str(data), source_lang="es", target_lang="en", dataset_impl="mmap",
                               train_subset="train", required_seq_len_multiple=1, num_batch_buckets=0, **kw)
    return DocTranslationTask.setup_task(cfg)


def test_task_datasets_and_input_errors(tiny_bin, tmp_path):
    task = task_for(tiny_bin, doc_target_context="gold", doc_context_mode="online")
    task.load_dataset("test")
    ds = task.dataset("test")
    assert ds.index.n_docs == 2 and len(ds) == n_lines(tiny_bin / "test.ids")
    itr = task.get_batch_iterator(ds, max_tokens=300, max_positions=(1024, 1024)).next_epoch_itr(shuffle=False)
    seen = []
    test_tokens = ds.num_tokens_vec(np.arange(len(ds)))
    for batch in itr:  # inference batches: documents in order, cut into chunks within --max-tokens (memory bound)
        ids = batch["id"].tolist()
        seen += ids
        assert len(ids) * int(test_tokens[ids].max()) <= 300
        for b, i in enumerate(ids):  # online context: the earlier sentences, from this batch or as extra rows
            want = [(ds[j]["source"].tolist(), int(ds.index.pos[j] - ds.index.pos[i])) for j in ds.context(i)]
            assert [(list(t), d) for t, d in context_of(batch, b)] == want
    assert sorted(seen) == list(range(len(ds)))

    # the training split: training batches (shuffled, long documents cut) only when the epoch is shuffled
    task.load_dataset("train")
    tr = task.dataset("train")
    num_tokens = tr.num_tokens_vec(np.arange(len(tr)))

    def epoch_batches(shuffle):
        itr = task.get_batch_iterator(tr, max_tokens=400, max_positions=(1024, 1024), ignore_invalid_inputs=True,
                                      seed=3, epoch=1, disable_iterator_cache=True)
        return [b["id"].tolist() for b in itr.next_epoch_itr(shuffle=shuffle)]

    for shuffle in (False, True):
        batches = epoch_batches(shuffle)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(len(tr)))
        cut = any(not set(b) >= set(tr.index.sentences(int(tr.index.doc_of[i]))) for b in batches for i in b)
        assert cut  # long documents are cut in training and at inference alike: no batch above --max-tokens
        assert all(len(b) * int(num_tokens[b].max()) <= 400 for b in batches)
        if not shuffle:
            assert flat == [i for b in batches for i in sorted(b)]  # inference: document order
    assert epoch_batches(True) == epoch_batches(True)  # a pure function of the seed and the epoch

    # ids file: wrong number of lines -> both files named; missing -> both places named
    bad = tmp_path / "bin"
    shutil.copytree(tiny_bin, bad)
    lines = (bad / "test.ids").read_text().splitlines()
    (bad / "test.ids").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DocumentDataError, match=r"test\.ids has 35 lines, but the binarized split .*test\.es-en\.es\.bin"):
        task_for(bad).load_dataset("test")
    (bad / "test.ids").unlink()
    with pytest.raises(DocumentDataError, match=r"test\.ids: not found"):
        task_for(bad).load_dataset("test")
    ids_dir = tmp_path / "ids"
    ids_dir.mkdir()
    shutil.copy(tiny_bin / "test.ids", ids_dir / "test.ids")
    task_for(bad, doc_ids_dir=str(ids_dir)).load_dataset("test")

    # generated target context: a line count that does not match is named
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "test.en").write_text("▁the ▁end\n" * 3)
    with pytest.raises(DocumentDataError, match=rf"{gen / 'test.en'}: 3 lines, but the split .* has 36 examples"):
        task_for(tiny_bin, doc_target_context="generated", doc_generated_dir=str(gen)).load_dataset("test")
    with pytest.raises(ValueError, match="needs --doc-generated-dir"):
        task_for(tiny_bin, doc_target_context="generated")


def test_generated_target_context_gives_each_n_set_row_its_generated_line(tiny_bin, tmp_path):
    """§3.2 / §3.5.1 (Eq. 3.2's Y^-j in training = the stage-1 model's *generated* translations): with
    ``--doc-target-context generated --doc-generated-dir DIR`` row r of ``ctx_tgt_tokens`` is line j of
    DIR/train.en encoded in the target dictionary with EOS last (``ctx_tgt_lengths`` its length), where j is the
    dataset index of N-set row r (batch rows, then ``ctx_id``), and never the reference of j; the context entries
    of every sentence i resolve to the generated lines of exactly the other sentences of i's document (offline),
    never its own row. Checked on every training batch (shuffled documents, long ones cut: extra rows), on the
    whole-document inference batches and on a hand-picked batch."""
    from fairseq.data import Dictionary

    d = Dictionary.load(str(tiny_bin / "dict.en.txt"))
    words = [d[k] for k in range(d.nspecial, len(d))]
    n = n_lines(tiny_bin / "train.ids")
    lines = [f"{words[i % len(words)]} {words[(7 * i + 3) % len(words)]} {words[(11 * i + 5) % len(words)]}"
             for i in range(n)]
    assert len(set(lines)) == n
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "train.en").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    expected = [d.encode_line(line, add_if_not_exist=False, append_eos=True).long().tolist() for line in lines]
    assert all(len(e) == 4 and d.unk() not in e for e in expected)

    task = task_for(tiny_bin, doc_target_context="generated", doc_generated_dir=str(gen))
    task.load_dataset("train")
    ds = task.dataset("train")
    pad = task.target_dictionary.pad()
    index = ds.index

    def check(batch):
        net = batch["net_input"]
        rows = rows_of(batch)
        tgt, lengths = net["ctx_tgt_tokens"], net["ctx_tgt_lengths"]
        assert tgt.size(0) == lengths.numel() == len(rows)
        for r, j in enumerate(rows):
            got = tgt[r][tgt[r].ne(pad)].tolist()
            assert got == expected[j] and int(lengths[r]) == len(expected[j]), (r, j)
            assert got != ds[j]["target"].tolist()  # the generated line, not the reference
        for b, i in enumerate(batch["id"].tolist()):
            entries = [r for r in net["ctx_index"][b].tolist() if r >= 0]
            assert b not in entries
            doc = int(index.doc_of[i])
            assert [rows[r] for r in entries] == [j for j in index.sentences(doc) if j != i]
            assert [tgt[r][tgt[r].ne(pad)].tolist() for r in entries] == \
                [expected[j] for j in index.sentences(doc) if j != i]
        return len(batch["ctx_id"])

    itr = task.get_batch_iterator(ds, max_tokens=400, max_positions=(1024, 1024), ignore_invalid_inputs=True,
                                  seed=1, epoch=1, disable_iterator_cache=True)
    seen, extra = [], 0
    for batch in itr.next_epoch_itr(shuffle=True):
        extra += check(batch)
        seen += batch["id"].tolist()
    assert sorted(seen) == list(range(n)) and extra > 0  # documents were cut: extra rows were checked too
    for batch in itr.next_epoch_itr(shuffle=False):  # whole documents
        check(batch)
    assert check(ds.collater([ds[i] for i in (0, 5, 40, 208)])) > 0


class _Plain(torch.nn.Module):
    pass


class _Doc(torch.nn.Module):
    uses_document_context = True


class _Recorder:
    """A criterion and a generator that record the samples they get."""

    def __init__(self):
        self.samples = []

    def __call__(self, model, sample):
        self.samples.append(sample)
        return torch.tensor(0.0), 1, {}

    def generate(self, models, sample, **kwargs):
        self.samples.append(sample)
        return [[{"tokens": torch.tensor([9, EOS]), "score": torch.tensor(-1.0), "positional_scores": torch.zeros(2),
                  "attention": None, "alignment": None}] for _ in range(sample["net_input"]["src_tokens"].size(0))]


def test_task_steps_give_context_only_to_models_that_opt_in(tiny_bin):
    task = task_for(tiny_bin)
    srcs = [src_of(i) for i in range(7)]
    srcs[1] = torch.tensor([EOS])  # an empty source line
    ds = DocumentPairDataset(make_pair(7, srcs), DocumentIndex.from_lengths([4, 3]))
    batch = collate(ds, [0, 1, 2, 4])
    rec = _Recorder()
    task.valid_step(batch, _Plain(), rec)
    assert not any(k.startswith("ctx_") for k in rec.samples[-1]["net_input"])
    task.valid_step(batch, _Doc(), rec)
    assert rec.samples[-1]["net_input"]["ctx_index"] is batch["net_input"]["ctx_index"]
    empty_row = batch["id"].tolist().index(1)
    for model in (_Plain(), _Doc()):
        hyps = task.inference_step(rec, [model], batch)
        got = rec.samples[-1]
        assert len(hyps) == 4 and hyps[empty_row][0]["tokens"].tolist() == [EOS]  # empty source: empty output
        assert sorted(got["id"].tolist()) == [0, 2, 4]
        assert ("ctx_index" in got["net_input"]) == isinstance(model, _Doc)
    for b, i in enumerate(got["id"].tolist()):  # the document model's subset keeps every context
        assert context_of(got, b) == context_of(batch, batch["id"].tolist().index(i))
    with pytest.raises(ValueError, match="routes the context keys itself"):
        task.inference_step(rec, [_Doc(), _Plain()], batch)


def test_doc_context_tool(tiny_bin, tmp_path):
    from fairseq_ext.tools.corpora import doc_context

    n = n_lines(tiny_bin / "valid.ids")
    out = tmp_path / "gen.txt"
    rows = [f"S-{i}\tsrc {i}\nH-{i}\t-0.5\t▁w{i} ▁x\n" for i in reversed(range(n))]
    out.write_text("".join(rows))
    assert doc_context.main([str(out), "--data", str(tiny_bin), "--split", "valid", "--out", str(tmp_path / "g")]) == 0
    assert (tmp_path / "g" / "valid.en").read_text().splitlines() == [f"▁w{i} ▁x" for i in range(n)]
    out.write_text("".join(rows[1:]))  # id n-1 missing
    with pytest.raises(ToolError, match=rf"{out}: no hypothesis for sentence ids {n - 1}"):
        doc_context.main([str(out), "--data", str(tiny_bin), "--split", "valid", "--out", str(tmp_path / "g")])
    out.write_text("".join(rows + rows[:1]))  # id printed twice
    with pytest.raises(ToolError, match=rf"{out}: sentence ids printed more than once"):
        doc_context.main([str(out), "--data", str(tiny_bin), "--split", "valid", "--out", str(tmp_path / "g")])


def test_grown_dictionary_rows_are_appended_to_a_sentence_checkpoint():
    from fairseq_ext.modules.warm_start import accept_grown_dictionary
    torch.manual_seed(0)
    small = torch.nn.ModuleDict({"embed": torch.nn.Embedding(10, 4), "proj": torch.nn.Linear(4, 10),
                                 "other": torch.nn.Linear(4, 3)})
    grown = torch.nn.ModuleDict({"embed": torch.nn.Embedding(11, 4), "proj": torch.nn.Linear(4, 11),
                                 "other": torch.nn.Linear(4, 3)})
    accept_grown_dictionary(grown, 1)
    new_rows = grown["embed"].weight[10:].detach().clone()
    grown.load_state_dict(small.state_dict())
    assert torch.equal(grown["embed"].weight[:10], small["embed"].weight)
    assert torch.equal(grown["embed"].weight[10:], new_rows)  # the added symbol keeps its initialisation
    assert torch.equal(grown["proj"].weight[:10], small["proj"].weight)
    assert torch.equal(grown["proj"].bias[:10], small["proj"].bias)
    assert torch.equal(grown["other"].weight, small["other"].weight)
    full = {k: v.clone() + 1 for k, v in grown.state_dict().items()}  # a grown checkpoint loads unchanged
    grown.load_state_dict(full)
    assert torch.equal(grown["embed"].weight, full["embed.weight"])
    two_fewer = torch.nn.ModuleDict({"embed": torch.nn.Embedding(9, 4), "proj": torch.nn.Linear(4, 9),
                                     "other": torch.nn.Linear(4, 3)})
    with pytest.raises(RuntimeError, match="size mismatch"):  # any other mismatch is still an error
        grown.load_state_dict(two_fewer.state_dict())


# ----------------------------------------------------------------------------- CLI
def test_cli_sentence_model_trains_and_generates_online_and_concat(tiny_bin, tmp_path):
    n_test = n_lines(tiny_bin / "test.ids")
    small = ["--encoder-layers", "1", "--decoder-layers", "1"]
    ckpt = train(tiny_bin, tmp_path / "sent", TINY_TRANSFORMER + small, task="doc_translation", max_update=2,
                 extra=["--doc-target-context", "gold", "--doc-context-size", "3", "--disable-validation"])
    sent_ckpt = ckpt
    out = generate(tiny_bin, ckpt, "--doc-context-mode", "online", "--decoding-algorithm", "greedy",
                   "--max-tokens", "400", task="doc_translation")
    assert sorted(hypotheses(out)) == list(range(n_test))
    assert sum(line.startswith("H-") for line in out.splitlines()) == n_test  # exactly one per test line

    ckpt = train(tiny_bin, tmp_path / "concat", TINY_TRANSFORMER + small, task="doc_translation", max_update=1,
                 extra=["--doc-concat-prev", "1", "--disable-validation"])
    out = generate(tiny_bin, ckpt, "--doc-concat-prev", "1", "--max-tokens", "400", task="doc_translation")
    assert sorted(hypotheses(out)) == list(range(n_test))
    assert sum("<brk>" in line for line in out.splitlines() if line.startswith("S-")) == n_test - 2

    # the sentence checkpoint (no <brk>) warm-starts the concatenation model
    p = fairseq("train", tiny_bin, "--task", "doc_translation", *TINY_TRANSFORMER, *small, "--doc-concat-prev", "1",
                "--finetune-from-model", sent_ckpt, "--optimizer", "adam", "--lr", "1e-4", "--max-tokens", "1000",
                "--max-update", "1", "--disable-validation", "--save-dir", tmp_path / "concat_warm", "--cpu")
    assert "appended the new rows (initialised) to encoder.embed_tokens.weight" in p.stdout + p.stderr

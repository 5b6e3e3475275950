"""``doc_translation`` (Maruf 2019 ch. 3-4), the task on the tiny data and the command lines: input errors named by
file and line, generated target context, the context keys given only to models that opt in, the generated-context
tool, grown dictionaries, and the real CLI with a sentence model. The document batches are in
``test_doc_translation_batches.py``."""
import shutil

import numpy as np
import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the tasks)
from fairseq_ext.data.documents import DocumentDataError, DocumentIndex, DocumentPairDataset
from fairseq_ext.tasks.doc_translation import DocTranslationConfig, DocTranslationTask
from fairseq_ext.tools.common import ToolError
from harness import TINY_TRANSFORMER, fairseq, generate, hypotheses, n_lines, train
from doc_batches import EOS, collate, context_of, make_pair, rows_of, src_of


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

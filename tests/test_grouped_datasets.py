"""The document (``doc_translation``, Maruf 2019 ch. 3-4) and conversation (``conversation_translation``, ch. 5)
datasets share one grouping machinery (:mod:`fairseq_ext.data.grouped`): these tests build the batches of both
tasks on the committed tiny data (``tests/data/bible_tiny`` with its ``.ids``, ``tests/data/conversations``), word
level, for several context sizes, target-context modes and a ``--max-tokens`` small enough to cut groups into
chunks, and check them two ways:

* against an independent reference written here from the thesis's definitions (the ids / ``.conv`` file read
  line by line): every kept sentence appears once per epoch, its context is exactly the nearest sentences of its
  document (offline: all others, online: the earlier ones) and its history exactly the earlier sentences of its
  conversation (or the restriction of Table 5.5), no chunk above ``--max-tokens`` but for a single sentence;
* against the digest of every tensor of every batch and of the task's log lines, recorded from the code before
  the two files shared their machinery (so the refactoring changed no batch and no log line).
"""
import hashlib
import logging
import shutil

import numpy as np
import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the tasks)
from fairseq_ext.data.context_keys import strip_context, uses_document_context
from fairseq_ext.data.conversations import ConversationDataError, ConversationIndex
from fairseq_ext.data.documents import DocumentDataError, DocumentIndex
from fairseq_ext.data.errors import UserDataError
from fairseq_ext.tasks.conversation_translation import (ConversationTranslationConfig, ConversationTranslationTask,
                                                        strip_history, uses_history, without_target_history)
from fairseq_ext.tasks.doc_translation import DocTranslationConfig, DocTranslationTask
from harness import ROOT, TINY, fairseq

CONV = ROOT / "tests" / "data" / "conversations"
MAX_TOKENS = 90  # cuts the longer chapters and conversations into chunks (word level, ~20-40 words a verse)


@pytest.fixture(scope="module")
def bins(tmp_path_factory):
    """Both tiny corpora binarized at the word level (fairseq-preprocess, joined dictionary)."""
    root = tmp_path_factory.mktemp("grouped")
    doc, conv = root / "doc", root / "conv"
    for raw, out, s, t, side in ((TINY, doc, "es", "en", ".ids"), (CONV, conv, "src", "tgt", ".conv")):
        fairseq("preprocess", "-s", s, "-t", t, "--joined-dictionary", "--trainpref", raw / "train",
                "--validpref", raw / "valid", "--testpref", raw / "test", "--destdir", out, "--workers", "1",
                user_dir=False)
        for sp in ("train", "valid", "test"):
            shutil.copyfile(raw / f"{sp}{side}", out / f"{sp}{side}")
    return doc, conv


def doc_task(data, **kw):
    cfg = DocTranslationConfig(data=str(data), source_lang="es", target_lang="en", dataset_impl="mmap",
                               train_subset="train", required_seq_len_multiple=1, num_batch_buckets=0, **kw)
    return DocTranslationTask.setup_task(cfg)


def conv_task(data, **kw):
    cfg = ConversationTranslationConfig(data=str(data), source_lang="src", target_lang="tgt", dataset_impl="mmap",
                                        train_subset="train", required_seq_len_multiple=1, num_batch_buckets=0,
                                        **kw)
    return ConversationTranslationTask.setup_task(cfg)


DOC_SETTINGS = [
    dict(),
    dict(doc_context_mode="online", doc_context_size=2, doc_target_context="gold"),
    dict(doc_context_size=3, doc_max_context=2, doc_target_context="gold"),
    dict(doc_context_mode="online", doc_max_context=0),
    dict(doc_concat_prev=2),
]
CONV_SETTINGS = [
    dict(),
    dict(conv_context="prev_sent", conv_target_history="none"),
    dict(conv_context="same_lang_prev_turns"),
    dict(conv_context="other_lang_prev_turns", conv_target_history="reference"),
    dict(conv_context="current_turn"),
]


def epochs(task, split, max_tokens=MAX_TOKENS, max_sentences=None):
    """The batches of ``split``: two shuffled epochs (training) and one pass in order, as fairseq iterates them."""
    task.load_dataset(split)
    ds = task.dataset(split)
    out = []
    for epoch, shuffle in ((1, True), (2, True), (1, False)):
        itr = task.get_batch_iterator(ds, max_tokens=max_tokens, max_sentences=max_sentences,
                                      max_positions=(1024, 1024), ignore_invalid_inputs=True, seed=3, epoch=epoch,
                                      disable_iterator_cache=True)
        out.append((shuffle, list(itr.next_epoch_itr(shuffle=shuffle))))
    return ds, out


def digest(passes, logs, data) -> str:
    h = hashlib.sha256()
    for shuffle, batches in passes:
        h.update(repr(shuffle).encode())
        for b in batches:
            _feed(h, b)
    for line in logs:
        h.update(line.replace(str(data), "DATA").encode())
    return h.hexdigest()[:16]


def _feed(h, obj):
    if isinstance(obj, dict):
        for k in sorted(obj):
            h.update(k.encode())
            _feed(h, obj[k])
    elif torch.is_tensor(obj):
        h.update(f"{obj.dtype}{tuple(obj.shape)}".encode())
        h.update(obj.contiguous().numpy().tobytes())
    else:
        h.update(repr(obj).encode())


def run(task_of, data, setting, split, caplog, **kw):
    caplog.clear()
    with caplog.at_level(logging.INFO):
        task = task_of(data, **setting)
        ds, passes = epochs(task, split, **kw)
    logs = [r.getMessage() for r in caplog.records if r.name.startswith("fairseq_ext")]
    return ds, passes, digest(passes, logs, data)


# ------------------------------------------------------------------------------------ the reference
def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def ref_documents(ids):
    """Document number and position of every line: the id without its last ``.N``, contiguous runs."""
    doc, pos, names = [], [], []
    for line in ids:
        name = line.rsplit(".", 1)[0]
        if not names or names[-1] != name:
            names.append(name)
            pos.append(0)
        else:
            pos.append(pos[-1] + 1)
        doc.append(len(names) - 1)
    return doc, pos


def ref_context(doc, pos, i, mode, size, cap):
    """Brute force: the other sentences of the document (online: the earlier ones), nearest first (ties: the
    earlier), at most ``size`` (0: all) and ``cap``, in document order."""
    mine = [j for j in range(len(doc)) if doc[j] == doc[i] and j != i and (mode == "offline" or j < i)]
    mine.sort(key=lambda j: (abs(pos[j] - pos[i]), pos[j] - pos[i]))
    n = min(size or len(mine), cap)
    return sorted(mine[:n])


def ref_history(conv, lang, i, context):
    same = [j for j in range(i) if conv[j] == conv[i]]
    turn_start = i
    while turn_start - 1 in same and lang[turn_start - 1] == lang[i]:
        turn_start -= 1
    if context == "all":
        return same
    if context == "prev_sent":
        return same[-1:]
    if context == "current_turn":
        return list(range(turn_start, i))
    return [j for j in same if j < turn_start and (lang[j] == lang[i]) == (context == "same_lang_prev_turns")]


def n_set(batch, key):
    return batch["id"].tolist() + batch[key].tolist()


def check_cover(ds, passes, max_tokens):
    sizes = ds.num_tokens_vec(np.arange(len(ds)))
    for shuffle, batches in passes:
        seen = sorted(i for b in batches for i in b["id"].tolist())
        assert seen == list(range(len(ds))), "every sentence once per pass"
        for b in batches:
            ids = b["id"].tolist()
            assert len(ids) == 1 or len(ids) * int(sizes[ids].max()) <= max_tokens


# ------------------------------------------------------------------------------------------ digests
# recorded on the code before documents.py and conversations.py shared fairseq_ext/data/grouped.py
DOC_DIGESTS = {
    0: ('4ab0e72bf27f694e', 'd471e35656637578', '4799549f9a4abd0a', '5ad751e631c2b9da'),
    1: ('81cf766ac3044829', '3a11b5ed34bb5132', '4d92a81a78b86f0f', '532d58b10523e14c'),
    2: ('ba5802185f895856', '413034a6c3a43f28', 'c681d1aa11c7cfae', '5011bb89dc8d6121'),
    3: ('6e63e0b7109c74b9', '63bd976de3746721', '2d75607bbf2319d6', '32b349de082e8818'),
    4: ('8a22f839b770d3b0', 'e61e5c3e66be4e0c', 'c155dffecd62e52b', '6afb5a2003a9f527'),
}
CONV_DIGESTS = {
    0: ('d70fe179ed6e5fcf', '192372d5c6fdb640', '0f543d6b44e145ff'),
    1: ('862121dc2901c675', '8c8c6cb8c4f56ff3', '8e29557e32c62e01'),
    2: ('37eda4622bfda3c6', 'b12da5a11fa8b5e1', 'f01951b966a76320'),
    3: ('5232335a111b8ef0', 'f3354846166a3139', '48b2359c0eaa0592'),
    4: ('69aed8a26303e51f', '58857cb3d080eb58', 'bd4e52f6025a32a7'),
}


@pytest.mark.parametrize("k", range(len(DOC_SETTINGS)))
def test_document_batches_are_the_reference_and_unchanged(bins, caplog, k):
    """Eq. 3.2: each sentence is translated once with its document context (the nearest sentences, Table 3.1's
    window); chunks of a long document respect --max-tokens; the batches and logs are those recorded before."""
    data = bins[0]
    setting = DOC_SETTINGS[k]
    ids = lines(data / "train.ids")
    doc, pos = ref_documents(ids)
    ds, passes, dg = run(doc_task, data, setting, "train", caplog)
    check_cover(ds, passes, MAX_TOKENS)
    assert any(len({doc[i] for i in b["id"].tolist()}) == 1 and len(b["id"]) < doc.count(doc[b["id"][0]])
               for _, bs in passes for b in bs), "some document is cut into chunks"
    mode = setting.get("doc_context_mode", "offline")
    size, cap = setting.get("doc_context_size", 0), setting.get("doc_max_context", 128)
    for _, batches in passes:
        for b in batches:
            assert b["doc_index"].tolist() == [doc[i] for i in b["id"].tolist()]
            assert b["doc_pos"].tolist() == [pos[i] for i in b["id"].tolist()]
            if setting.get("doc_concat_prev"):
                assert "ctx_index" not in b["net_input"]
                continue
            rows = n_set(b, "ctx_id")
            net = b["net_input"]
            for r, i in enumerate(b["id"].tolist()):
                got = [rows[x] for x in net["ctx_index"][r].tolist() if x >= 0]
                assert got == ref_context(doc, pos, i, mode, size, cap)
                assert [d for d in net["ctx_distance"][r].tolist() if d] == [pos[j] - pos[i] for j in got]
            assert ("ctx_tgt_tokens" in net) == (setting.get("doc_target_context") == "gold")
            if "ctx_tgt_tokens" in net:
                assert net["ctx_tgt_tokens"].size(0) == len(rows)
                for r, j in enumerate(rows):
                    assert net["ctx_tgt_tokens"][r, : net["ctx_tgt_lengths"][r]].tolist() == \
                        ds.dataset[j]["target"].tolist()
    others = [run(doc_task, data, setting, sp, caplog)[2] for sp in ("valid", "test")]
    small = run(doc_task, data, setting, "test", caplog, max_tokens=None, max_sentences=4)[2]
    assert (dg, *others, small) == DOC_DIGESTS[k]


@pytest.mark.parametrize("k", range(len(CONV_SETTINGS)))
def test_conversation_batches_are_the_reference_and_unchanged(bins, caplog, k):
    """§5.3: a sentence sees the earlier sentences of its conversation (or a Table 5.5 restriction), its direction
    is its source language; long training conversations are cut into chunks within --max-tokens; the batches and
    logs are those recorded before."""
    data = bins[1]
    setting = CONV_SETTINGS[k]
    fields = [line.split("\t") for line in lines(data / "train.conv")]
    conv = [f[0] for f in fields]
    lang = [0 if f[1] == "en" else 1 for f in fields]
    ds, passes, dg = run(conv_task, data, setting, "train", caplog, max_tokens=60)
    check_cover(ds, passes[:2], 60)  # a conversation is cut in training only
    assert any(len({conv[i] for i in b["id"].tolist()}) == 1 and len(b["id"]) < conv.count(conv[b["id"][0]])
               for _, bs in passes for b in bs), "some conversation is cut into chunks"
    context = setting.get("conv_context", "all")
    for _, batches in passes:
        for b in batches:
            rows = n_set(b, "hist_id")
            net = b["net_input"]
            assert net["direction"].tolist() == [lang[i] for i in b["id"].tolist()]
            assert net["nset_lang"].tolist() == [lang[j] for j in rows]
            for r, i in enumerate(b["id"].tolist()):
                got = [rows[x] for x in net["hist_index"][r].tolist() if x >= 0]
                assert got == ref_history(conv, lang, i, context)
            assert ("hist_tgt_tokens" in net) == (setting.get("conv_target_history", "gold") != "none")
    others = [run(conv_task, data, setting, sp, caplog)[2] for sp in ("valid", "test")]
    assert (dg, *others) == CONV_DIGESTS[k]


# ---------------------------------------------------------------------------------------- bad input
def test_non_contiguous_groups_are_one_error_naming_file_and_line():
    """The lines of a document / a conversation are contiguous: the first line that breaks this is named, with
    the lines the group had before (the exact messages of both tasks)."""
    with pytest.raises(DocumentDataError) as e:
        DocumentIndex.from_ids(["A.1", "A.2", "B.1", "A.3"], source="x.ids")
    assert str(e.value) == ("x.ids:4: line id 'A.3' belongs to document 'A', whose lines 1-2 came before another "
                            "document; the lines of a document must be contiguous (--doc-id-pattern 'auto' decides "
                            "the document of an id)")
    with pytest.raises(ConversationDataError) as e:
        ConversationIndex.from_lines(["a\ten\tJ", "a\tes\tn", "b\ten\tJ", "b\tes\tn", "a\ten\tJ"], ("en", "es"),
                                     source="x.conv")
    assert str(e.value) == ("x.conv:5: conversation 'a' started at line 1 and another conversation came in "
                            "between; the lines of a conversation must be contiguous")
    with pytest.raises(ConversationDataError, match=r"^x\.conv:3: conversation 'b' has one language only"):
        ConversationIndex.from_lines(["a\ten\tJ", "a\tes\tn", "b\ten\tJ"], ("en", "es"), source="x.conv")
    with pytest.raises(DocumentDataError, match=r"^x\.ids:2: empty id"):
        DocumentIndex.from_ids(["A.1", " "], source="x.ids")


def test_invalid_utf8_is_one_error_naming_file_and_line_in_both_files(tmp_path):
    """An ids file and a conversation file are read by the same line reader: a byte that is not UTF-8 is one error
    ``FILE:LINE: invalid UTF-8`` (no traceback of a UnicodeDecodeError), CRLF line ends are plain line ends."""
    ids = tmp_path / "x.ids"
    ids.write_bytes(b"A.1\r\nA.2\r\nB\xff.1\r\n")
    with pytest.raises(DocumentDataError, match=rf"^{ids}:3: invalid UTF-8"):
        DocumentIndex.from_file(str(ids))
    conv = tmp_path / "x.conv"
    conv.write_bytes(b"a\ten\tJ\r\na\tes\tn\xe9\r\nb\ten\tJ\r\nb\tes\tn\r\n")
    with pytest.raises(ConversationDataError, match=rf"^{conv}:2: invalid UTF-8"):
        ConversationIndex.from_file(str(conv), ("en", "es"))
    conv.write_bytes(b"a\ten\tJ\r\na\tes\tn\r\nb\ten\tJ\r\nb\tes\tn\tb.2\r\n")
    index = ConversationIndex.from_file(str(conv), ("en", "es"))
    assert index.names == ["a", "b"] and index.speakers == ["J", "n", "J", "n"] and index.line_ids[3] == "b.2"


def test_missing_generated_translations_name_the_option_of_each_task(bins, tmp_path):
    """Both tasks read the generated target side with one reader; a missing file is one error naming the option
    of the task that asked for it."""
    doc, conv = bins
    cases = ((doc_task, doc, dict(doc_target_context="generated", doc_generated_dir=str(tmp_path)),
              "--doc-target-context", "valid.en"),
             (conv_task, conv, dict(conv_target_history="generated", conv_generated_dir=str(tmp_path)),
              "--conv-target-history", "valid.tgt"))
    for task_of, data, kw, option, name in cases:
        with pytest.raises(UserDataError) as e:
            task_of(data, **kw).load_dataset("valid")
        assert str(e.value).startswith(f"{option} generated: {tmp_path / name} not found"), str(e.value)


def test_sentence_models_get_neither_context_nor_history_keys():
    """The keys of both tasks are removed by one routing (data.context_keys): a model that does not opt in gets
    fairseq's sentence batch; the opt-in attribute is found through wrappers."""
    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.module = inner

    class Opted(torch.nn.Module):
        uses_conversation_history = True

    assert uses_history(Wrapper(Wrapper(Opted()))) and not uses_history(Wrapper(torch.nn.Linear(1, 1)))
    assert not uses_history(None) and not uses_document_context(Wrapper(Opted()))
    plain = {"src_tokens": torch.ones(2, 3), "src_lengths": torch.tensor([3, 3]), "prev_output_tokens": 0}
    conv = {"id": 0, "conv_index": 1, "conv_pos": 2, "hist_id": 3, "target": 4,
            "net_input": dict(plain, direction=0, hist_src_tokens=1, hist_src_lengths=2, nset_lang=3, nset_turn=4,
                              hist_index=5, hist_tgt_tokens=6, hist_tgt_lengths=7)}
    out = strip_history(conv)
    assert out == {"id": 0, "target": 4, "net_input": plain} and len(conv["net_input"]) == 11
    assert without_target_history(conv)["net_input"].keys() == conv["net_input"].keys() - {"hist_tgt_tokens",
                                                                                           "hist_tgt_lengths"}
    doc = {"id": 0, "ctx_id": 1, "doc_index": 2,
           "net_input": dict(plain, ctx_src_tokens=1, ctx_src_lengths=2, ctx_index=3, ctx_distance=4)}
    assert strip_context(doc) == {"id": 0, "doc_index": 2, "net_input": plain}
    sentence = {"id": 0, "net_input": plain}
    assert strip_context(sentence) is sentence and strip_history(sentence) is sentence

"""A user's own documents on ``doc_translation``: how line ids name documents (``--doc-id-pattern``), misread ids
refused, ``--doc-ids-dir`` winning over the ids next to the data, data errors as one ``error:`` line, and the memory
bound of long documents (a 500-sentence document is cut into batches within ``--max-tokens`` at validation and
decoding as in training)."""
import random
import shutil
import sys

import numpy as np
import pytest

from harness import TINY_TRANSFORMER, data_cli, fairseq, generate, hypotheses, n_lines, run, train

from fairseq_ext.data.documents import DocumentDataError, DocumentIndex, check_documents, doc_id_rule, document_of
from fairseq_ext.tasks.doc_translation import DocTranslationConfig, DocTranslationTask


# ----------------------------------------------------------------------------- ids -> documents
@pytest.mark.parametrize("ids,docs", [
    (["Ruth.1.1", "Ruth.1.2", "Ruth.2.1"], ["Ruth.1", "Ruth.1", "Ruth.2"]),                  # the Bible's ids
    (["help/page-name#3", "help/page-name#4", "help/other#1"], ["help/page-name"] * 2 + ["help/other"]),
    (["chapter.html#12", "chapter.html#13", "intro.html#1"], ["chapter.html"] * 2 + ["intro.html"]),
    (["talk12:1", "talk12:2", "talk13:1"], ["talk12", "talk12", "talk13"]),
    (["doc-a", "doc-a", "doc-b"], ["doc-a", "doc-a", "doc-b"]),                              # the name on every line
])
def test_auto_rule_covers_the_common_id_formats(ids, docs):
    assert [document_of(i) for i in ids] == docs
    assert DocumentIndex.from_ids(ids).names == list(dict.fromkeys(docs))


def test_whole_and_regex_rules():
    assert doc_id_rule("whole")("Ruth.1.3") == "Ruth.1.3"
    rule = doc_id_rule(r"(.+)_[0-9]+")
    assert rule("report_12") == "report" and rule("no-number") is None
    assert doc_id_rule(r"(?P<lang>..)/(?P<doc>[^/]+)/[0-9]+")("de/news1/3") == "news1"
    idx = DocumentIndex.from_ids(["r_1", "r_2", "s_1"], pattern=r"(.+)_[0-9]+")
    assert idx.lengths.tolist() == [2, 1]
    with pytest.raises(DocumentDataError, match=r"ids\.txt:2: id 'oops' does not match --doc-id-pattern"):
        DocumentIndex.from_ids(["r_1", "oops"], source="ids.txt", pattern=r"(.+)_[0-9]+")
    with pytest.raises(DocumentDataError, match="has no group"):
        doc_id_rule(r".+_[0-9]+")
    with pytest.raises(DocumentDataError, match="not a regular expression"):
        doc_id_rule(r"(.+")


def test_misread_ids_are_refused_and_half_single_documents_warned(caplog):
    misread = DocumentIndex.from_ids([f"help/p{i}" for i in range(20)], source="train.ids")  # 20 one-line documents
    with pytest.raises(DocumentDataError, match=r"train\.ids: 20 of the 20 documents have one sentence"):
        check_documents(misread)
    check_documents(DocumentIndex.from_ids(["a#1", "a#2", "b#1"]))  # a short split decides nothing
    half = DocumentIndex.from_ids([f"d{i}#1" for i in range(6)] + ["big#1", "big#2", "big#3", "big#4", "big#5"])
    with caplog.at_level("WARNING"):
        check_documents(half)
    assert "6 of the 7 documents have one sentence" in caplog.text


# ----------------------------------------------------------------------------- the task on the tiny data
def task_for(data, **kw):
    cfg = DocTranslationConfig(data=str(data), source_lang="es", target_lang="en", dataset_impl="mmap",
                               train_subset="train", required_seq_len_multiple=1, num_batch_buckets=0, **kw)
    return DocTranslationTask.setup_task(cfg)


def with_ids(tiny_bin, tmp_path, split, ids, name="bin"):
    """A copy of the binarized tiny data whose ``{split}.ids`` is ``ids``."""
    d = tmp_path / name
    shutil.copytree(tiny_bin, d)
    (d / f"{split}.ids").write_text("\n".join(ids) + "\n")
    return d


def test_doc_ids_dir_wins_over_the_ids_next_to_the_data(tiny_bin, tmp_path):
    n = n_lines(tiny_bin / "test.ids")
    ids_dir = tmp_path / "ids"
    ids_dir.mkdir()
    (ids_dir / "test.ids").write_text("".join(f"manual/a#{i}\n" for i in range(n // 2)) +
                                      "".join(f"manual/b#{i}\n" for i in range(n - n // 2)))
    task = task_for(tiny_bin, doc_ids_dir=str(ids_dir))
    task.load_dataset("test")
    assert task.dataset("test").index.names == ["manual/a", "manual/b"]  # not the Bible chapters of bin/test.ids
    with pytest.raises(DocumentDataError, match=r"valid\.ids: not found \(--doc-ids-dir"):
        task.load_dataset("valid")  # given explicitly, so no silent fall-back to bin/valid.ids


def test_task_reads_the_id_pattern(tiny_bin, tmp_path):
    n = n_lines(tiny_bin / "test.ids")
    data = with_ids(tiny_bin, tmp_path, "test", [f"doc{i // 12}_{i}" for i in range(n)])
    with pytest.raises(DocumentDataError, match=r"test\.ids: 36 of the 36 documents have one sentence"):
        task_for(data).load_dataset("test")  # auto: no trailing #N/:N/.N -> each id its own document
    task = task_for(data, doc_id_pattern=r"(doc[0-9]+)_[0-9]+")
    task.load_dataset("test")
    assert task.dataset("test").index.lengths.tolist() == [12, 12, 12]


def test_data_error_is_one_line_without_traceback(tiny_bin, tmp_path):
    ids = (tiny_bin / "train.ids").read_text().splitlines()
    ids[5], ids[-1] = ids[-1], ids[5]  # a document's lines are no longer contiguous
    data = with_ids(tiny_bin, tmp_path, "train", ids)
    p = fairseq("train", data, "--task", "doc_translation", *TINY_TRANSFORMER, "--optimizer", "adam", "--lr", "1e-3",
                "--max-tokens", "1000", "--max-update", "1", "--save-dir", tmp_path / "ck", "--cpu", check=False)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"{data / 'train.ids'}:7: line id" in errors[0]


# ----------------------------------------------------------------------------- long documents: the memory bound
def synthetic_documents(root, n_train_docs=12, doc_len=40, long_doc=500, seed=0):
    """Raw es-en-like text: ``n_train_docs`` training documents of ``doc_len`` lines with ids ``help/pN#k`` and
    ``chN.html#k``, and a valid and a test split of one ``long_doc``-sentence document each."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(80)]
    raw = root / "raw"
    raw.mkdir(parents=True)

    def write(split, docs):
        src, tgt, ids = [], [], []
        for name, length in docs:
            for k in range(1, length + 1):
                s = [rng.choice(words) for _ in range(rng.randint(4, 14))]
                src.append(" ".join(s))
                tgt.append(" ".join(w.upper() for w in s))
                ids.append(f"{name}#{k}")
        for ext, lines in (("es", src), ("en", tgt), ("ids", ids)):
            (raw / f"{split}.{ext}").write_text("\n".join(lines) + "\n")

    write("train", [(f"help/p{d}" if d % 2 else f"ch{d}.html", doc_len) for d in range(n_train_docs)])
    write("valid", [("manual/long-valid", long_doc)])
    write("test", [("manual/long-test", long_doc)])
    return raw


@pytest.fixture(scope="module")
def long_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("long_docs")
    raw = synthetic_documents(root)
    data_cli("prepare", "--raw", raw, "--src", "es", "--tgt", "en", "--out", root, "--vocab-size", "120")
    return root / "spm120" / "bin"


def test_a_500_sentence_document_is_cut_into_bounded_batches_at_inference(long_bin):
    task = task_for(long_bin, doc_context_mode="offline")
    task.load_dataset("valid")
    ds = task.dataset("valid")
    assert ds.index.lengths.tolist() == [500]
    num_tokens = ds.num_tokens_vec(np.arange(len(ds)))
    itr = task.get_batch_iterator(ds, max_tokens=600, max_positions=(1024, 1024)).next_epoch_itr(shuffle=False)
    seen, rows = [], []
    for batch in itr:
        ids = batch["id"].tolist()
        seen += ids
        assert len(ids) * int(num_tokens[ids].max()) <= 600  # the bound: never a 500-sentence batch
        n_set = len(ids) + batch["ctx_id"].numel()
        rows.append(n_set)
        assert batch["net_input"]["ctx_index"].size(1) <= 128  # each sentence: at most --doc-max-context
        for b, i in enumerate(ids[:3]):  # every sentence keeps exactly its context (batch rows + extra rows)
            net = batch["net_input"]
            got = sorted(int(d) for d in net["ctx_distance"][b].tolist() if d != 0)
            assert got == sorted(int(ds.index.pos[j] - ds.index.pos[i]) for j in ds.context(i))
    assert sorted(seen) == list(range(500))
    assert max(rows) < 500


PEAK_RSS = [sys.executable, "-c", "import resource, subprocess, sys; r = subprocess.call(sys.argv[1:]); "
            "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
            "sys.exit(r)"]
MEMORY_BOUND_MB = 1500  # torch + fairseq + the model: ~0.5 GB; an uncut 500-sentence batch needs several GB


def peak_mb(p) -> float:
    return int(p.stderr.rsplit("peak_rss_kb", 1)[1].split()[0]) / 1024


@pytest.mark.slow
def test_500_sentence_document_trains_validates_and_decodes_within_the_memory_bound(long_bin, tmp_path):
    """The hierarchical selective-attention encoder at its default --doc-max-context 128 on training documents of
    40 sentences, validated (every update) and decoded on one 500-sentence document."""
    from harness import BIN, USER_DIR
    shape = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
             "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
             "--decoder-attention-heads", "4"]
    p = run(PEAK_RSS + [BIN / "fairseq-train", "--user-dir", USER_DIR, long_bin, "--task", "doc_translation",
                        "--arch", "selattn_enc_hier_sparsesoft_bench", *shape, "--optimizer", "adam", "--lr", "1e-3",
                        "--max-tokens", "1000", "--max-update", "4", "--validate-interval-updates", "2",
                        "--save-dir", tmp_path / "ck", "--cpu", "--no-progress-bar", "--log-format", "simple"])
    assert "valid on 'valid' subset" in p.stdout + p.stderr
    print(f"fairseq-train peak RSS {peak_mb(p):.0f} MB")
    assert peak_mb(p) < MEMORY_BOUND_MB, peak_mb(p)
    p = run(PEAK_RSS + [BIN / "fairseq-generate", "--user-dir", USER_DIR, long_bin, "--task", "doc_translation",
                        "--path", tmp_path / "ck" / "checkpoint_last.pt", "--max-tokens", "1000", "--beam", "2",
                        "--max-len-b", "20", "--cpu"])
    assert sorted(hypotheses(p.stdout)) == list(range(500))
    print(f"fairseq-generate peak RSS {peak_mb(p):.0f} MB")
    assert peak_mb(p) < MEMORY_BOUND_MB, peak_mb(p)


# ----------------------------------------------------------------------------- the own-data path, end to end
def foreign_ids(raw_ids):
    """The tiny Bible's ids in two foreign formats: chapters alternate between ``help/<book>-<ch>#<verse>`` and
    ``<book><ch>.html#<verse>``."""
    out, chapters = [], {}
    for line_id in raw_ids:
        book, ch, verse = line_id.rsplit(".", 2)
        k = chapters.setdefault((book, ch), len(chapters))
        out.append(f"help/{book}-{ch}#{verse}" if k % 2 == 0 else f"{book}{ch}.html#{verse}")
    return out


@pytest.mark.slow
def test_own_data_path_from_raw_files_with_foreign_ids_to_a_score(tmp_path):
    """README's own-data document path on raw files whose ids are ``help/page#N`` and ``page.html#N``: prepare,
    a stage-1 sentence model, a stage-2 document model warm-started from it, decoding with document context,
    BLEU and d-BLEU against the raw references."""
    from harness import TINY
    raw = tmp_path / "raw"
    raw.mkdir()
    n_docs = {}
    for split in ("train", "valid", "test"):
        for lang in ("es", "en"):
            shutil.copy(TINY / f"{split}.{lang}", raw / f"{split}.{lang}")
        ids = foreign_ids((TINY / f"{split}.ids").read_text().splitlines())
        (raw / f"{split}.ids").write_text("\n".join(ids) + "\n")
        n_docs[split] = len(DocumentIndex.from_ids(ids).names)
    data_cli("prepare", "--raw", raw, "--src", "es", "--tgt", "en", "--out", tmp_path, "--vocab-size", "300")
    data = tmp_path / "spm300" / "bin"
    shape = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
             "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
             "--decoder-attention-heads", "4"]
    sent = train(data, tmp_path / "sent", ["--arch", "transformer_maruf_base_bench", *shape], task="doc_translation",
                 max_update=6)
    p = fairseq("train", data, "--task", "doc_translation", "--arch", "selattn_enc_hier_sparsesoft_bench", *shape,
                "--finetune-from-model", sent, "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
                "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "300", "--max-update", "4",
                "--save-dir", tmp_path / "doc", "--cpu", "--no-progress-bar", "--log-format", "simple")
    log = p.stdout + p.stderr
    assert f"doc_translation train: {n_docs['train']} documents" in log  # the foreign ids were read as chapters
    assert f"doc_translation valid: {n_docs['valid']} documents" in log
    out = generate(data, tmp_path / "doc" / "checkpoint_best.pt", "--post-process", "sentencepiece",
                   task="doc_translation")
    (tmp_path / "gen.out").write_text(out)
    n_test = n_lines(raw / "test.ids")
    assert sorted(hypotheses(out)) == list(range(n_test))
    score = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.score", "score", "--hyp", tmp_path / "gen.out",
                 "--ref", raw / "test.en"]).stdout
    assert "BLEU" in score and "chrF" in score
    dbleu = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.score", "dbleu", "--hyp", tmp_path / "gen.out",
                 "--ref", raw / "test.en", "--ids", raw / "test.ids"]).stdout
    assert f"{n_docs['test']} documents" in dbleu

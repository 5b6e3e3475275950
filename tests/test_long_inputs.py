"""Over-long inputs (longer than the model's positions) at evaluation time: every input gets exactly one output.

``translation_ext`` (so every task derived from it) cuts such a source or target to its first max - 1 tokens +
</s> with one warning naming the input (fairseq_ext.data.truncation) in fairseq-interactive, fairseq-generate and
validation; the training split keeps fairseq's filtering."""
import re
import shutil

import numpy as np
import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the tasks)
from fairseq_ext.data.truncation import TruncatedTokens, position_limits, truncate_tokens
from harness import TINY_TRANSFORMER, fairseq, hypotheses, make_dictionary, train

LONG_WORDS = 3000  # > the transformer's 1024 positions
# the smallest transformer of the harness, one layer each side
# a task config built by hand: the values fairseq's command line would interpolate
TASK_CFG = dict(dataset_impl="mmap", train_subset="train", required_seq_len_multiple=1, num_batch_buckets=0)
ONE_LAYER = [("1" if prev in ("--encoder-layers", "--decoder-layers") else a)
             for prev, a in zip([None] + TINY_TRANSFORMER[:-1], TINY_TRANSFORMER)]


@pytest.fixture(scope="module")
def ckpt(tiny_bin, tmp_path_factory):
    return train(tiny_bin, tmp_path_factory.mktemp("long_inputs"), ONE_LAYER, max_update=2)


def seg_lines(tiny_bin, name):
    return (tiny_bin.parent / "seg" / name).read_text(encoding="utf-8").splitlines()


def warnings_of(text):
    return [ln for ln in text.splitlines() if "WARNING" in ln and "positions" in ln]


def interactive(tiny_bin, ckpt, lines, *extra):
    p = fairseq("interactive", tiny_bin, "--task", "translation_ext", "--path", ckpt, "--cpu", "--beam", "1",
                "--max-len-b", "5", "--buffer-size", "2", *extra, input_text="".join(ln + "\n" for ln in lines))
    return p.stdout + p.stderr


@pytest.mark.parametrize("skip", [False, True], ids=["default", "skip-invalid-size"])
def test_interactive_translates_an_over_long_line(tiny_bin, ckpt, skip):
    normal = seg_lines(tiny_bin, "test.es")[0]
    lines = [" ".join(["▁la"] * LONG_WORDS), normal, normal, " ".join(["▁y"] * LONG_WORDS)]
    out = interactive(tiny_bin, ckpt, lines, *(["--skip-invalid-size-inputs-valid-test"] if skip else []))
    assert "Traceback" not in out and "is invalid" not in out
    assert sorted(hypotheses(out)) == [0, 1, 2, 3]  # one output per input, in the input's order
    assert re.findall(r"^S-(\d+)", out, re.M) == ["0", "1", "2", "3"]
    warned = warnings_of(out)
    # one warning per over-long line, naming it (1-based, counted across the --buffer-size 2 chunks)
    assert len(warned) == 2, warned
    assert "input line 1 (id 0):" in warned[0] and f"{LONG_WORDS + 1} source tokens" in warned[0]
    assert "input line 4 (id 3):" in warned[1]
    long_src = re.search(r"^S-0\t(.*)$", out, re.M).group(1).split()
    assert len(long_src) == 1023  # the first max - 1 tokens (and </s>, not printed)


def test_generate_gives_every_example_of_a_split_one_output(tiny_bin, ckpt, tmp_path):
    """A binarized test split with an over-long source (line 3) and an over-long target (line 5)."""
    src, tgt = seg_lines(tiny_bin, "test.es")[:5], seg_lines(tiny_bin, "test.en")[:5]
    src[2] = " ".join(["▁la"] * LONG_WORDS)
    tgt[4] = " ".join(["▁the"] * 1500)
    seg = tmp_path / "seg"
    seg.mkdir()
    (seg / "test.es").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (seg / "test.en").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")
    data = tmp_path / "bin"
    fairseq("preprocess", "--source-lang", "es", "--target-lang", "en", "--testpref", seg / "test",
            "--srcdict", tiny_bin / "dict.es.txt", "--tgtdict", tiny_bin / "dict.en.txt", "--destdir", data,
            "--workers", "1", user_dir=False)
    for args in ([], ["--skip-invalid-size-inputs-valid-test"]):
        p = fairseq("generate", data, "--task", "translation_ext", "--path", ckpt, "--cpu", "--beam", "1",
                    "--max-len-b", "5", "--batch-size", "2", *args)
        out = p.stdout + p.stderr
        assert sorted(hypotheses(p.stdout)) == [0, 1, 2, 3, 4]
        warned = warnings_of(out)
        assert len(warned) == 2, warned
        assert "test line 3 (id 2)" in warned[0] and f"{LONG_WORDS + 1} source tokens" in warned[0]
        assert "test line 5 (id 4)" in warned[1] and "1501 target tokens" in warned[1]


def test_training_split_keeps_fairseqs_filter_evaluation_splits_are_cut(tiny_bin):
    """In-process: with the median length as the positions the training split loses its long pairs (fairseq's filter, as fairseq-train
    asks for it); the valid split, and the train split loaded by an evaluation command (fairseq-generate passes
    the checkpoint's task_cfg), keep every example, cut."""
    from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask

    task = TranslationExtTask.setup_task(TranslationExtConfig(data=str(tiny_bin), source_lang="es", target_lang="en",
                                                              **TASK_CFG))
    task.load_dataset("train")
    train_ds = task.dataset("train")
    n_train = len(train_ds)
    m = int(np.median(train_ds.src_sizes))
    limits = (m, m)
    kept = task.filter_indices_by_size(np.arange(n_train), train_ds, limits, ignore_invalid_inputs=True)
    assert 0 < len(kept) < n_train
    with pytest.raises(Exception, match="is invalid"):
        task.filter_indices_by_size(np.arange(n_train), train_ds, limits)
    for split, kwargs in (("valid", {}), ("train", {"task_cfg": task.cfg})):
        task.load_dataset(split, **kwargs)
        ds = task.dataset(split)
        assert (ds.src_sizes > m).any()
        kept = task.filter_indices_by_size(np.arange(len(ds)), ds, limits)
        assert len(kept) == len(ds)
        assert ds.src_sizes.max() <= m and ds.tgt_sizes.max() <= m
        for i in range(len(ds)):
            ex = ds[i]
            assert len(ex["source"]) <= m and ex["source"][-1] == task.src_dict.eos()
            assert len(ex["target"]) <= m and ex["target"][-1] == task.tgt_dict.eos()
        batch = ds.collater([ds[i] for i in range(len(ds))])
        assert batch["net_input"]["src_tokens"].size(1) <= m


def test_truncate_tokens_keeps_the_first_tokens_and_eos():
    d = make_dictionary(20)
    eos = d.eos()
    seqs = [torch.tensor([4, 5, 6, 7, eos]), torch.tensor([4, 5, eos]), torch.tensor([9, eos])]
    assert truncate_tokens(seqs[0], 3, eos).tolist() == [4, 5, eos]
    assert truncate_tokens(seqs[1], 3, eos) is seqs[1]
    ds = TruncatedTokens(seqs, [5, 3, 2], 3, eos)  # a plain list, as fairseq-interactive's sources
    assert ds.sizes.tolist() == [3, 3, 2] and [t.tolist() for t in ds] == [[4, 5, eos], [4, 5, eos], [9, eos]]
    assert position_limits((7, None)) == (7, None) and position_limits(5) == (5, 5) and position_limits(None) == (
        None, None)


def test_doc_translation_inherits_the_cut(tiny_bin, tmp_path):
    """The document dataset of doc_translation wraps the pair dataset: its valid split is cut too, and its batches
    keep every sentence."""
    from fairseq_ext.tasks.doc_translation import DocTranslationConfig, DocTranslationTask

    data = tmp_path / "bin"
    shutil.copytree(tiny_bin, data)
    task = DocTranslationTask.setup_task(DocTranslationConfig(data=str(data), source_lang="es", target_lang="en",
                                                              **TASK_CFG))
    task.load_dataset("valid")
    ds = task.dataset("valid")
    itr = task.get_batch_iterator(ds, max_tokens=400, max_positions=(12, 12)).next_epoch_itr(shuffle=False)
    ids = sorted(i for b in itr for i in b["id"].tolist())
    assert ids == list(range(len(ds)))
    assert max(len(ds[i]["source"]) for i in range(len(ds))) <= 12

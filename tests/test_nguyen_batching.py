"""Nguyen (2021) training-data machinery: UNK-copy augmentation [T §3.3, §5.6.6]
(``fairseq_ext.tools.corpora.unk_copy``), Morishita chunked batching [T §4.2.2] and virtual epochs of a fixed
number of updates [T §6.3.1, Table 4.1] (``--batching chunked --chunk-size --updates-per-epoch`` of the
``translation_ext`` task family)."""
import json
import os
import re
import shlex
import shutil
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from fairseq.data import LanguagePairDataset

import fairseq_ext  # noqa: F401  (registers the tasks)
from fairseq_ext.tools.corpora import unk_copy as uc
from fairseq_ext.data.batching import VirtualEpochs, chunked_batches, sort_chunk
from fairseq_ext.tools.common import ToolError, read_lines
from fairseq_ext.tasks.concat_translation import ConcatTranslationConfig, ConcatTranslationTask
from fairseq_ext.tasks.translation_ext import TranslationExtConfig, TranslationExtTask
from harness import ROOT, TINY_TRANSFORMER, data_cli, fairseq, make_dictionary, n_lines, run


# ----------------------------------------------------------------------------- UNK copy
def _write(folder, name, lines):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(s + "\n" for s in lines), encoding="utf-8")


def test_unk_copy_replaces_the_rare_types_of_each_side(tmp_path):
    inp = tmp_path / "seg"
    src = ["a a b", "a c d", "b e"]          # counts: a 3, b 2, c 1, d 1, e 1
    tgt = ["x y", "x z", "c c c"]            # counts: x 2, y 1, z 1, c 3 (c is rare on the source only)
    _write(inp, "train.xx", src)
    _write(inp, "train.yy", tgt)
    _write(inp, "train.ids", ["v1", "v2", "v3"])
    _write(inp, "valid.xx", ["a q"])
    _write(inp, "valid.yy", ["q"])
    _write(inp, "train.docs.jsonl", ['{"doc_id": "d", "ids": ["v1", "v2", "v3"]}'])
    (inp / "segment.json").write_text(json.dumps({"src": "xx", "tgt": "yy", "models": {"xx": "../codes"},
                                                  "lines": {"train": 3, "valid": 1}}))
    rec = uc.unk_copy(str(inp), str(tmp_path / "out"), min_freq=2)
    out = tmp_path / "out"
    assert read_lines(out / "train.xx") == src + ["a a b", "a <unk> <unk>", "b <unk>"]
    assert read_lines(out / "train.yy") == tgt + ["x <unk>", "x <unk>", "c c c"]
    assert read_lines(out / "train.ids") == ["v1", "v2", "v3", "v1+unk", "v2+unk", "v3+unk"]
    assert read_lines(out / "valid.xx") == ["a q"] and read_lines(out / "valid.yy") == ["q"]  # untouched
    assert not (out / "train.docs.jsonl").exists()
    assert rec["rare_types"] == {"xx": 3, "yy": 2} and rec["replaced_tokens"] == {"xx": 3, "yy": 2}
    seg = json.loads((out / "segment.json").read_text())
    assert seg["unk_copy"]["min_freq"] == 2 and seg["lines"] == {"train": 6, "valid": 1}
    assert seg["models"]["xx"] == os.path.abspath(inp / "../codes")  # still points at the model
    # hapaxes only (ch. 5) vs < 3
    uc.unk_copy(str(inp), str(tmp_path / "out3"), min_freq=3)
    assert read_lines(tmp_path / "out3" / "train.xx")[3:] == ["a a <unk>", "a <unk> <unk>", "<unk> <unk>"]


def test_unk_copy_of_the_tiny_bpe_data_binarizes(tiny_bin, tmp_path):
    seg = tiny_bin.parent / "seg"
    out = tmp_path / "unk"
    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.unk_copy", seg, out, "--src", "es", "--tgt", "en",
             "--min-freq", "5"])
    assert json.loads(p.stdout)["lines"] == {"train": 2 * n_lines(seg / "train.es"), "original": n_lines(seg / "train.es")}
    for lang in ("es", "en"):
        orig = read_lines(seg / f"train.{lang}")
        new = read_lines(out / f"train.{lang}")
        n = len(orig)
        assert len(new) == 2 * n and new[:n] == orig
        counts = Counter(w for line in orig for w in line.split())
        for a, b in zip(orig, new[n:]):
            assert b.split() == ["<unk>" if counts[w] < 5 else w for w in a.split()]
        assert "<unk>" in " ".join(new[n:])
        for split in ("valid", "test"):
            assert (out / f"{split}.{lang}").read_bytes() == (seg / f"{split}.{lang}").read_bytes()
    assert "up to date" in run([sys.executable, "-m", "fairseq_ext.tools.corpora.unk_copy", seg, out, "--src", "es",
                                "--tgt", "en", "--min-freq", "5"]).stderr
    data_cli("binarize", out, "--fairseq-args", f"--srcdict {tiny_bin / 'dict.es.txt'}")
    from fairseq.data import data_utils
    ds = data_utils.load_indexed_dataset(str(out / "bin" / "train.es-en.en"), None)
    assert len(ds) == 2 * n_lines(seg / "train.en")
    assert (out / "bin" / "dict.en.txt").read_text() == (tiny_bin / "dict.en.txt").read_text()


@pytest.mark.parametrize("mutate,args,message", [
    (lambda d: _write(d, "train.en", ["x"] * 3 + [""]), [], "train.en:4: empty segment"),
    (lambda d: _write(d, "train.en", ["x"]), [], "line counts differ"),
    (None, ["--min-freq", "1"], "--min-freq must be >= 2"),
    (None, ["--same"], "the output folder must differ"),
])
def test_unk_copy_bad_input_is_one_clear_error(tmp_path, mutate, args, message):
    inp = tmp_path / "seg"
    _write(inp, "train.es", ["a", "b", "c", "d"])
    _write(inp, "train.en", ["a", "b", "c", "d"])
    if mutate:
        mutate(inp)
    out = inp if "--same" in args else tmp_path / "out"
    args = [a for a in args if a != "--same"]
    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.unk_copy", inp, out, "--src", "es", "--tgt", "en", *args],
            check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last.startswith("error: ") and message in last, p.stderr
    assert "Traceback" not in p.stderr


def test_unk_copy_refuses_a_folder_that_already_has_one(tmp_path):
    inp = tmp_path / "seg"
    _write(inp, "train.es", ["a", "a"])
    _write(inp, "train.en", ["b", "c"])
    uc.unk_copy(str(inp), str(tmp_path / "once"), "es", "en", min_freq=2)
    with pytest.raises(ToolError, match="already holds an UNK copy"):
        uc.unk_copy(str(tmp_path / "once"), str(tmp_path / "twice"), "es", "en", min_freq=2)


# ----------------------------------------------------------------------------- chunked batching
def _dataset(n=700, seed=0):
    rng = np.random.default_rng(seed)
    d = make_dictionary(20)
    src_len, tgt_len = rng.integers(1, 40, n), rng.integers(1, 40, n)
    src = [torch.full((int(x),), 5, dtype=torch.long) for x in src_len]
    tgt = [torch.full((int(x),), 6, dtype=torch.long) for x in tgt_len]
    return LanguagePairDataset(src, src_len, d, tgt, tgt_len, d, shuffle=True), d


def _check_chunked(ds, batches, perm, chunk_size, max_tokens):
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(ds)))  # every index exactly once
    for b in batches:
        assert len(b) * ds.num_tokens_vec(b).max() <= max_tokens
    chunk_of = np.empty(len(ds), dtype=np.int64)
    chunk_of[perm] = np.arange(len(perm)) // chunk_size
    for b in batches:
        c = chunk_of[b]
        assert (c == c[0]).all()  # a batch never mixes chunks
        chunk = perm[c[0] * chunk_size:(c[0] + 1) * chunk_size]
        rank = {int(i): r for r, i in enumerate(sort_chunk(chunk, ds.src_sizes, ds.tgt_sizes))}
        pos = [rank[int(i)] for i in b]
        assert pos == list(range(pos[0], pos[0] + len(b)))  # a run of the length-sorted chunk
    src = ds.src_sizes
    assert any(src[a].max() > src[b].min() for a, b in zip(batches, batches[1:]))  # batch order shuffled


def test_chunked_batches_cover_every_index_once_sorted_within_chunks():
    ds, _ = _dataset()
    rng = np.random.default_rng([1, 1])
    perm = rng.permutation(len(ds))
    batches = chunked_batches(ds, perm, rng, chunk_size=100, max_tokens=300)
    _check_chunked(ds, batches, perm, 100, 300)
    assert len(batches) > 2 * (len(ds) // 100)
    with pytest.raises(ValueError, match="--chunk-size must be >= 1"):
        chunked_batches(ds, perm, rng, chunk_size=0, max_tokens=300)


def _task(cls=TranslationExtTask, config=TranslationExtConfig, **kw):
    d = make_dictionary(20)
    return cls(config(train_subset="train", **kw), d, d)


def _epoch_ids(itr):
    """The batches (as lists of example ids) of the iterator's next epoch, in training order."""
    return [s["id"].tolist() for s in itr.next_epoch_itr(shuffle=True)]


def _batch_set(batches):
    """Batches as a sorted list of sorted tuples (the collater reorders a batch by length)."""
    return sorted(tuple(sorted(int(i) for i in b)) for b in batches)


def test_task_chunked_batching_per_epoch_and_seed():
    ds, _ = _dataset()
    valid, _ = _dataset(50, seed=1)
    orders = {}
    for seed in (1, 1, 2):
        task = _task(batching="chunked", chunk_size=100)
        task.datasets.update(train=ds, valid=valid)
        itr = task.get_batch_iterator(ds, max_tokens=300, seed=seed, epoch=1)
        assert callable(itr.batch_sampler)
        epochs = [_epoch_ids(itr) for _ in range(3)]
        for ep in epochs:
            assert sorted(i for b in ep for i in b) == list(range(len(ds)))
            assert all(len(b) * max(ds.num_tokens(i) for i in b) <= 300 for b in ep)
        assert epochs[0] != epochs[1] != epochs[2]
        orders.setdefault(seed, []).append(epochs)
        v = task.get_batch_iterator(valid, max_tokens=300, seed=seed)
        assert not callable(v.batch_sampler)  # valid/test: fairseq's sorted batches
    assert orders[1][0] == orders[1][1] and orders[1][0] != orders[2][0]
    # the batches of epoch e are those of the seeded Morishita pass e
    rng = np.random.default_rng([1, 2])
    perm = rng.permutation(len(ds))
    expected = chunked_batches(ds, perm, rng, 100, max_tokens=300)
    assert _batch_set(orders[1][0][1]) == _batch_set(expected)
    _check_chunked(ds, expected, perm, 100, 300)


# ----------------------------------------------------------------------------- virtual epochs
def test_virtual_epochs_cut_an_endless_stream_of_passes():
    lengths = {p: 3 + p % 4 for p in range(1, 60)}   # passes of 4, 5, 6, 3, 4, ... batches

    def make_pass(p):
        return [(p, j) for j in range(lengths[p])]

    stream = [b for p in range(1, 60) for b in make_pass(p)]
    for n in (2, 5, 13):  # shorter than, about as long as, and longer than a pass
        ve = VirtualEpochs(make_pass, n)
        got = [ve(None, e) for e in range(1, 9)]
        assert all(len(g) == n for g in got)
        assert sum(got, []) == stream[:8 * n]
        assert VirtualEpochs(make_pass, n)(None, 6) == stream[5 * n:6 * n]  # resuming at epoch 6
        assert len(ve._kept) <= 1 + n // 3
    with pytest.raises(ValueError, match="--updates-per-epoch must be >= 1"):
        VirtualEpochs(make_pass, 0)


@pytest.mark.parametrize("batching", ["sorted", "chunked"])
def test_task_updates_per_epoch(batching):
    ds, _ = _dataset(300)
    task = _task(batching=batching, chunk_size=64, updates_per_epoch=7, update_freq=[2])
    task.datasets["train"] = ds
    itr = task.get_batch_iterator(ds, max_tokens=300, seed=3, epoch=1)
    epochs = [_epoch_ids(itr) for _ in range(12)]
    assert all(len(ep) == 14 for ep in epochs)  # 7 updates x --update-freq 2
    ve = itr.batch_sampler
    assert all(_batch_set(ep) == _batch_set(ve(ds, e)) for e, ep in enumerate(epochs, 1))
    stream = [b for e in range(1, 13) for b in ve(ds, e)]  # (fairseq shuffles each epoch's batches)
    first = ve.ends[0]
    assert sorted(i for b in stream[:first] for i in b) == list(range(len(ds)))  # pass 1: every index once
    second = ve.ends[1]
    assert sorted(i for b in stream[first:second] for i in b) == list(range(len(ds)))
    assert _batch_set(stream[:first]) != _batch_set(stream[first:second])
    # resuming at epoch 5 (a fresh iterator, as after loading a checkpoint) gives epoch 5's batches
    task2 = _task(batching=batching, chunk_size=64, updates_per_epoch=7, update_freq=[2])
    task2.datasets["train"] = ds
    itr2 = task2.get_batch_iterator(ds, max_tokens=300, seed=3, epoch=5)
    assert _batch_set(_epoch_ids(itr2)) == _batch_set(epochs[4])


def test_updates_per_epoch_with_concat_resample_is_refused():
    with pytest.raises(ValueError, match="--concat-resample redraws"):
        _task(ConcatTranslationTask, ConcatTranslationConfig, concat="rand", concat_resample=True,
              updates_per_epoch=10)


# ----------------------------------------------------------------------------- CLI
def test_cli_concat_chunked_virtual_epochs(tiny_bin, tmp_path):
    """fairseq-train with Morishita chunks and epochs of 3 updates (resuming is covered above: a fresh
    iterator at epoch e gives epoch e's batches)."""
    p = fairseq("train", tiny_bin, "--task", "concat_translation", "--concat", "rand", "--batching", "chunked",
                "--chunk-size", "50", "--updates-per-epoch", "3", "--max-epoch", "2", "--num-workers", "0",
                *TINY_TRANSFORMER, "--criterion", "cross_entropy", "--optimizer", "adam", "--lr", "1e-3",
                "--max-tokens", "1000", "--save-dir", tmp_path, "--cpu", "--seed", "1", "--no-progress-bar",
                "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints")
    log = p.stderr + p.stdout
    assert "virtual epochs of 3 updates (3 batches), chunked batching" in log
    inner = re.findall(r"epoch (\d+):\s+(\d+) / (\d+) loss", log)
    assert inner == [("001", str(i), "3") for i in (1, 2, 3)] + [("002", str(i), "3") for i in (1, 2, 3)]
    assert re.search(r"valid \| epoch 001 .*num_updates 3\b", log)
    assert re.search(r"train \| epoch 002 .*num_updates 6\b", log)
    assert (tmp_path / "checkpoint_last.pt").exists()


def test_thesis_recipes_use_the_new_flags():
    from fairseq import options
    p = run(["bash", ROOT / "recipes" / "nguyen" / "ch4.sh"], MODE="thesis", THESIS_DATA="/x")
    line = next(s for s in p.stdout.splitlines() if "fairseq-train" in s)
    args = [str(ROOT / "fairseq_ext") if a == "fairseq_ext" else a for a in shlex.split(line[2:])[1:]]
    a = options.parse_args_and_arch(options.get_training_parser(), args)
    assert (a.batching, a.chunk_size, a.updates_per_epoch, a.max_epoch, a.max_tokens) == \
        ("chunked", 10000, 100, 1000, 4096)
    p = run(["bash", ROOT / "recipes" / "nguyen" / "ch3.sh"], MODE="thesis", THESIS_DATA="/x")
    lines = [shlex.split(s[2:]) for s in p.stdout.splitlines() if "fairseq_ext.tools.corpora.unk_copy" in s]
    assert len(lines) == 2
    for toks in lines:
        assert uc.build_parser().parse_args(toks[3:]).min_freq == 5
    assert "parent_unk/bin" in p.stdout and "--max-epoch 25 " in p.stdout and "--max-epoch 100 " in p.stdout


def test_ch3_driver_unk_copy_binarizes_with_the_joint_dictionary(tmp_path):
    from fairseq_ext.tools.chapters import transfer_pipeline as driver
    raw = tmp_path / "raw"
    shutil.copytree(ROOT / "tests" / "data" / "bible_tiny", raw)
    from fairseq_ext.tools.corpora import transfer
    rep = transfer.joint_bpe(str(raw), "es", "en", str(raw), "kjv", "en", str(tmp_path / "jb"), 200, binarize=False)
    out = driver.unk_copy_binarized(tmp_path / "jb" / "child", tmp_path / "jb" / "child_unk5", "kjv", "en", 5,
                                    rep["dict"])
    assert n_lines(out / "train.kjv") == 2 * n_lines(raw / "train.kjv")
    assert (out / "bin" / "dict.kjv.txt").read_text() == (tmp_path / "jb" / "dict.txt").read_text()
    a = driver.build_parser().parse_args(["run", "--parent-src", "es", "--child-src", "kjv", "--out", "x",
                                          "--unk-copy", "5"])
    assert a.unk_copy == 5

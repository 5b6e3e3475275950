"""The base: registration, compat fixes, translation_ext task, GNMT length penalty, CLI round trip."""
import math
import re
import sys

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import fairseq_ext  # noqa: F401
from fairseq_ext.generators.length_penalty import (
    GNMTLengthPenaltySequenceGenerator,
    equivalent_fairseq_exponent,
    gnmt_length_penalty,
)
from harness import (BIN, ROOT, TINY_TRANSFORMER, fairseq, generate, hypotheses, n_lines, run,
                     train)


def test_import_registers_everything():
    from fairseq.tasks import TASK_REGISTRY

    assert "translation_ext" in TASK_REGISTRY


def test_train_help_lists_plugin_registrations():
    p = run([sys.executable, "-m", "fairseq_ext"])
    assert "translation_ext" in p.stdout and "tasks" in p.stdout
    # relative --user-dir from the repo root, as the README shows
    p = run([BIN / "fairseq-train", "--user-dir", "fairseq_ext", "--help"], cwd=ROOT)
    assert "--criterion {" in p.stdout  # fairseq lists criterion choices (plugin ones included)
    from fairseq_ext.__main__ import registrations

    for name in registrations()["criterions"]:
        assert name in p.stdout


def test_batch_by_size_keeps_the_tail():
    """1494 = 186*8 + 6 test sentences: fairseq's batcher dropped the last 6 (compat fix)."""
    from fairseq.data import data_utils

    idx = np.arange(1494)
    ntok = np.full(1494, 30)
    kw = dict(num_tokens_vec=ntok, max_sentences=16, required_batch_size_multiple=8)
    raw = data_utils.batch_by_size.__wrapped__(idx, None, **kw)
    assert sum(len(b) for b in raw) < 1494  # the base bug is still there underneath
    fixed = data_utils.batch_by_size(idx, None, **kw)
    assert sorted(np.concatenate(fixed).tolist()) == list(range(1494))


_PREFETCH_AT_EXIT = """
import sys, torch
if sys.argv[1] == "plugin":
    import fairseq_ext  # noqa: F401
from fairseq.data import iterators

class Slow:  # a collater that is inside torch operations most of the time
    def __len__(self):
        return 1000
    def __iter__(self):
        for _ in range(1000):
            a = torch.randn(300, 300)
            for _ in range(50):
                a = torch.tanh(a @ a)
            yield a

it = iterators.BufferedIterator(3, Slow())
next(it)  # stop after one batch, as --max-update does mid-epoch
print("stopped")
"""


def test_stopping_mid_epoch_exits_cleanly(tmp_path):
    """fairseq's prefetch thread aborted the process at exit (-6) while it was collating; the compat
    layer stops it between batches.  (Without ``import fairseq_ext`` this script aborts on this build.)"""
    import subprocess
    script = tmp_path / "prefetch.py"
    script.write_text(_PREFETCH_AT_EXIT)
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    fixed = subprocess.run([sys.executable, str(script), "plugin"], capture_output=True, text=True, env=env,
                           cwd=ROOT)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert fixed.stdout.strip() == "stopped"


class _FreshEachEpoch(torch.utils.data.Dataset):
    """A dataset fairseq cannot reuse across epochs (as a resampled one): a new EpochBatchIterator every epoch."""
    can_reuse_epoch_itr_across_epochs = False

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return i

    def collater(self, samples):
        return torch.tensor(samples)


@pytest.mark.parametrize("reuse_dataloader", [True, False])  # fairseq's tasks: True (--reuse-dataloader default)
def test_finished_train_iterator_leaves_no_worker_behind(reuse_dataloader):
    """Fix 10: fairseq builds a new EpochBatchIterator each epoch for a dataset it cannot reuse, with persistent
    DataLoader workers, and the old one is freed only by the cyclic collector -- so one forked copy of the trainer
    piled up per epoch (a 647-pair language resampled over 49 epochs was killed for memory). When the trainer
    hands out the next epoch's iterator, the finished one's workers end."""
    import gc
    import multiprocessing

    from fairseq.data import iterators
    from fairseq.trainer import Trainer

    from fairseq_ext._compat import release_finished_train_iterator

    assert getattr(Trainer.get_train_iterator, "_fairseq_ext", False)  # installed by import fairseq_ext
    ds = _FreshEachEpoch()
    trainer = type("T", (), {})()

    def epoch_iterator(epoch):
        itr = iterators.EpochBatchIterator(dataset=ds, collate_fn=ds.collater, batch_sampler=[[0, 1], [2, 3]],
                                           num_workers=1, epoch=epoch, persistent_workers=True,
                                           reuse_dataloader=reuse_dataloader)
        assert sum(len(b) for b in itr.next_epoch_itr(shuffle=False)) == 4
        return itr

    gc.disable()  # the collector would free an old iterator only by chance; the fix must not rely on it
    try:
        kept = [epoch_iterator(1), epoch_iterator(2)]  # fairseq alone: both finished epochs keep a worker
        assert len(multiprocessing.active_children()) == 2
        for itr in kept:
            release_finished_train_iterator(trainer, itr)
        # each new epoch's iterator releases the previous one's worker: one worker alive at any time
        assert len(multiprocessing.active_children()) == 1
        for epoch in (3, 4, 5):
            itr = epoch_iterator(epoch)
            assert len(multiprocessing.active_children()) == 2  # the finished one's and the new one's
            release_finished_train_iterator(trainer, itr)
            assert len(multiprocessing.active_children()) == 1
            release_finished_train_iterator(trainer, itr)  # the same (reused) iterator keeps its worker
            assert len(multiprocessing.active_children()) == 1
        release_finished_train_iterator(trainer, None)
        assert multiprocessing.active_children() == []
    finally:
        gc.enable()


def test_safe_globals_cover_fairseq_checkpoint_objects():
    import argparse
    import io

    buf = io.BytesIO()
    torch.save({"args": argparse.Namespace(a=1), "x": np.float64(1.5), "arr": np.arange(3)}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    assert state["args"].a == 1 and state["x"] == 1.5
    buf = io.BytesIO()
    torch.save({"f": len}, buf)  # anything else is still refused
    buf.seek(0)
    with pytest.raises(Exception):
        torch.load(buf, weights_only=True)


@pytest.mark.parametrize("length", [1, 2, 5, 17, 80])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_gnmt_exponent_reproduces_gnmt_penalty(length, alpha):
    a = equivalent_fairseq_exponent(length, alpha)
    assert math.isclose(length ** a, gnmt_length_penalty(length, alpha), rel_tol=1e-12)


class _DispatchedOps(TorchDispatchMode):
    """Records the aten ops that reach the kernels (a fused attention kernel is one op; the math
    kernel is composite and shows up as its matmuls and softmax)."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


FUSED_CPU_ATTENTION = "aten._scaled_dot_product_flash_attention_for_cpu"


def _attention_ops(q):
    with _DispatchedOps() as spy:
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    return out, spy.ops


def test_cpu_bf16_autocast_context():
    """--cpu-bf16 turns on bf16 autocast; --math-attention selects the math SDPA kernel (the fused
    CPU kernel is disabled and never called), each independently of the other."""
    from fairseq_ext.tasks.translation_ext import AutocastMixin

    class Cfg:
        cpu_bf16 = False
        math_attention = False

    class T(AutocastMixin):
        cfg = Cfg()

    lin = torch.nn.Linear(8, 8)
    q = torch.randn(2, 4, 5, 8)
    ref, ops = _attention_ops(q)
    assert FUSED_CPU_ATTENTION in ops and "aten.bmm" not in ops  # by default torch runs the fused kernel
    for bf16, math_kernel in ((True, False), (False, True), (True, True), (False, False)):
        Cfg.cpu_bf16, Cfg.math_attention = bf16, math_kernel
        with T().autocast():
            assert lin(torch.randn(2, 8)).dtype == (torch.bfloat16 if bf16 else torch.float32)
            out, ops = _attention_ops(q)
            if math_kernel:
                assert FUSED_CPU_ATTENTION not in ops and "aten.bmm" in ops, (bf16, ops)
            else:
                assert FUSED_CPU_ATTENTION in ops, (bf16, ops)
            assert torch.backends.cuda.flash_sdp_enabled() != math_kernel
            assert torch.backends.cuda.mem_efficient_sdp_enabled() != math_kernel
            assert torch.backends.cuda.math_sdp_enabled()
            if not bf16:  # the math kernel gives the same attention
                assert torch.allclose(out, ref, atol=1e-6)
        assert torch.backends.cuda.flash_sdp_enabled()  # restored on exit
    _, ops = _attention_ops(q)
    assert FUSED_CPU_ATTENTION in ops


@pytest.mark.parametrize("case", ["output_projection_step", "transposed"])
def test_frozen_linear_under_bf16_autocast_is_one_gemm(case):
    """modules.frozen_linear: under CPU bf16 autocast a frozen weight on a B x T x C input whose strides do not fold for
    free -- the B x 1 x C step of incremental decoding cut from a time-major tensor into the bias-free output
    projection (the slow case found in a frozen teacher), or a transposed T x B x C -- gives one GEMM, as a
    trainable weight does, not a bmm over a weight copied B times; the numbers agree with the trainable path's
    to bf16 rounding."""
    step = case == "output_projection_step"
    x = torch.randn(1 if step else 3, 16, 32).transpose(0, 1)
    lin = torch.nn.Linear(32, 64, bias=not step)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        trainable = lin(x)
        lin.requires_grad_(False)
        with _DispatchedOps() as spy:
            frozen = lin(x)
    assert "aten.bmm" not in spy.ops and ("aten.mm" in spy.ops or "aten.addmm" in spy.ops), spy.ops
    assert frozen.shape == trainable.shape == (16, x.shape[1], 64) and frozen.dtype == torch.bfloat16
    assert torch.allclose(frozen.float(), trainable.float(), rtol=2e-2, atol=2e-2)
    with torch.no_grad():  # without autocast fairseq's own path is untouched; TorchScript still compiles it
        assert torch.equal(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias))
        assert torch.equal(torch.jit.script(lin)(x), lin(x))


@pytest.fixture(scope="module")
def tiny_ckpt(tiny_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("ckpt")
    return train(tiny_bin, save, max_update=30, extra=["--cpu-bf16", "--math-attention"])


def test_generate_every_sentence_once_and_weights_only(tiny_bin, tiny_ckpt):
    state = torch.load(tiny_ckpt, weights_only=True)  # the compat allow-list, safety kept on
    assert state["cfg"]["task"]["_name"] == "translation_ext"
    n = n_lines(tiny_bin / "test.ids")
    assert n % 8 != 0  # the tail case the batcher used to drop
    out = generate(tiny_bin, tiny_ckpt, "--batch-size", "8")  # default --required-batch-size-multiple 8
    assert sorted(hypotheses(out)) == list(range(n))


def test_gnmt_scores_are_logprob_over_gnmt_penalty(tiny_bin, tiny_ckpt):
    out = generate(tiny_bin, tiny_ckpt, "--gnmt-alpha", "0.8", "--batch-size", "16")
    checked = 0
    lines = out.splitlines()
    for h, p in zip([l for l in lines if l.startswith("H-")], [l for l in lines if l.startswith("P-")]):
        score = float(h.split("\t")[1])
        pos = [float(x) for x in p.split("\t")[1].split()]
        assert math.isclose(score * gnmt_length_penalty(len(pos), 0.8), sum(pos), abs_tol=2e-3 * len(pos))
        checked += 1
    assert checked == n_lines(tiny_bin / "test.ids")


def test_resume_training_loads_checkpoint(tiny_bin, tiny_ckpt, tmp_path):
    import shutil

    shutil.copy(tiny_ckpt, tmp_path / "checkpoint_last.pt")
    p = fairseq("train", tiny_bin, "--task", "translation_ext", *TINY_TRANSFORMER, "--optimizer", "adam",
                "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "32", "--save-dir", tmp_path,
                "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                "--cpu", "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints")
    assert "Loaded checkpoint" in p.stderr + p.stdout
    assert "num_updates 32" in p.stderr + p.stdout


def test_early_stopping_state_survives_a_resumption(tiny_bin, tmp_path):
    """--patience counts on across a resumption: a run interrupted at 4 updates stops where the uninterrupted
    one does.  The metric (the dev loss, *maximised*) gets worse at every validation, so the first one stays
    the best and every later validation counts: with --patience 2, the uninterrupted run stops after the
    validations at 4 and 6.  Without the checkpointed state the resumed run compared against its first new
    validation (6) and stopped at 10."""
    import shutil

    def run_to(save_dir, max_update):
        return fairseq("train", tiny_bin, "--task", "translation_ext", *TINY_TRANSFORMER, "--optimizer", "adam",
                       "--lr", "1e-3", "--max-tokens", "1000", "--max-update", str(max_update), "--save-dir", save_dir,
                       "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--seed", "1",
                       "--validate-interval-updates", "2", "--validate-interval", "1000", "--save-interval-updates",
                       "2", "--save-interval", "1000", "--keep-interval-updates", "1", "--patience", "2",
                       "--best-checkpoint-metric", "loss", "--maximize-best-checkpoint-metric",
                       "--cpu", "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints")

    def valid_updates(log):
        return [int(u) for u in re.findall(r"valid on 'valid' subset .*\| num_updates (\d+)", log)]

    full = run_to(tmp_path / "full", 30)
    log = full.stderr + full.stdout
    assert "early stop since valid performance hasn't improved for last 2 runs" in log
    assert valid_updates(log) == [2, 4, 6]
    first = run_to(tmp_path / "resumed", 4)
    assert valid_updates(first.stderr + first.stdout) == [2, 4]
    state = torch.load(tmp_path / "resumed" / "checkpoint_last.pt", weights_only=True)["extra_state"]
    second = run_to(tmp_path / "resumed", 30)
    log = second.stderr + second.stdout
    assert valid_updates(log) == [6] and "early stop since valid performance" in log
    assert "early stopping resumed: best" in log and "1 validation(s) without improvement" in log
    assert state["fairseq_ext_patience"]["num_runs"] == 1
    shutil.rmtree(tmp_path / "full")
    # a checkpoint of a run without --patience (bench.py --continue-from an equal-updates job) has no patience
    # state: the count starts from fairseq's own best metric of the checkpoint (the value at 2 here), not from the
    # resumed run's first validation (which would stop at 10 instead of 8)
    plain = fairseq("train", tiny_bin, "--task", "translation_ext", *TINY_TRANSFORMER, "--optimizer", "adam",
                    "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "4", "--save-dir", tmp_path / "plain",
                    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--seed", "1",
                    "--validate-interval-updates", "2", "--validate-interval", "1000", "--save-interval-updates",
                    "2", "--save-interval", "1000", "--keep-interval-updates", "1",
                    "--best-checkpoint-metric", "loss", "--maximize-best-checkpoint-metric",
                    "--cpu", "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints")
    assert valid_updates(plain.stderr + plain.stdout) == [2, 4]
    assert "fairseq_ext_patience" not in torch.load(tmp_path / "plain" / "checkpoint_last.pt",
                                                    weights_only=True)["extra_state"]
    resumed = run_to(tmp_path / "plain", 30)
    log = resumed.stderr + resumed.stdout
    assert valid_updates(log) == [6, 8] and "early stop since valid performance" in log
    assert "early stopping resumed: best" in log and "0 validation(s) without improvement" in log


def test_interactive_and_wrapper_without_user_dir(tiny_bin, tiny_ckpt):
    src = " ".join((tiny_bin / ".." / "seg" / "test.es").resolve().read_text().splitlines()[:1])
    p = run([BIN / "fairseq-ext-interactive", tiny_bin, "--task", "translation_ext", "--path", tiny_ckpt,
             "--cpu", "--beam", "2", "--max-len-b", "20"], input_text=src + "\n")
    assert re.search(r"^H-0\t", p.stdout, re.M)


def test_finetune_from_model_restarts_the_training_clock(tiny_bin, tiny_ckpt, tmp_path):
    """--stop-time-hours counts the fine-tuning run only (the parent's 1 h must not be inherited)."""
    state = torch.load(tiny_ckpt, weights_only=True)
    state["extra_state"]["previous_training_time"] = 3600.0  # a parent trained for an hour
    parent = tmp_path / "parent.pt"
    torch.save(state, parent)
    p = fairseq("train", tiny_bin, "--task", "translation_ext", *TINY_TRANSFORMER, "--optimizer", "adam",
                "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "3", "--stop-time-hours", "0.5",
                "--finetune-from-model", parent, "--save-dir", tmp_path / "child",
                "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                "--cpu", "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints")
    log = p.stderr + p.stdout
    assert "Stopping training due to cumulative_training_time" not in log
    assert "num_updates 3" in log


def test_language_modeling_task_trains(tmp_path):
    """fairseq's TokenBlockDataset used ``np.compat.long`` (gone in numpy 2): ``--task language_modeling`` (the
    sentence RNNLMs of Maruf ch. 3/5) crashed before the compat alias."""
    fairseq("preprocess", "--only-source", "--trainpref", ROOT / "tests/data/bible_tiny/train.en",
            "--validpref", ROOT / "tests/data/bible_tiny/valid.en", "--destdir", tmp_path / "bin", "--workers", "1",
            user_dir=False)
    fairseq("train", tmp_path / "bin", "--task", "language_modeling", "--arch", "lstm_lm", "--decoder-embed-dim",
            "16", "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16", "--sample-break-mode", "eos",
            "--tokens-per-sample", "128", "--max-tokens", "512", "--optimizer", "adam", "--lr", "1e-3",
            "--max-update", "2", "--save-dir", tmp_path / "ckpt", "--cpu", "--no-progress-bar")
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()

"""fairseq's distributed training runs with the plugin on CPU: 2 gloo processes under torchrun train
exactly like 1 process with --update-freq 2 (same effective batch), for both DDP backends."""
import pytest

from harness import BIN, TINY_TRANSFORMER, USER_DIR, run, train_losses

COMMON = ["--user-dir", USER_DIR, "--task", "translation_ext", *TINY_TRANSFORMER,
          "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
          "--optimizer", "adam", "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5",
          "--max-tokens", "400", "--max-update", "8", "--dropout", "0", "--seed", "3", "--cpu",
          "--no-save", "--no-progress-bar", "--log-format", "simple", "--log-interval", "1"]


@pytest.mark.parametrize("ddp_backend", ["pytorch_ddp", "legacy_ddp"])
def test_two_gloo_processes_match_one_with_update_freq_2(tiny_bin, ddp_backend):
    one = run([BIN / "fairseq-train", tiny_bin, *COMMON, "--update-freq", "2"])
    two = run([BIN / "torchrun", "--nproc_per_node", "2", "--master_port", "29577", BIN / "fairseq-train",
               tiny_bin, *COMMON, "--distributed-world-size", "2", "--distributed-backend", "gloo",
               "--ddp-backend", ddp_backend])
    assert "distributed init (rank 1)" in two.stderr + two.stdout
    l1 = train_losses(one.stderr + one.stdout)
    l2 = train_losses(two.stderr + two.stdout)
    assert len(l1) == 8
    # only rank 0 logs, and it logs the all-reduced loss: every update equals the 1-process run
    assert len(l2) == 8 and all(abs(a - b) < 2e-3 for a, b in zip(l1, l2))

"""Nguyen ch. 6 "Transformers without Tears", the command lines: fairseq-train / fairseq-generate of the twt
models, and VALDECAY with warmup training past --stop-min-lr."""
import math
import sys

import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the model)
import fairseq_ext.optim  # noqa: F401  (registers the LR schedulers)
from fairseq_ext.optim.twt_schedules import invsqrt_lr
from fairseq_ext.tools.evaluation import fairseq_log
from harness import TINY_SHAPE, TINY_SHAPE_FLAGS, USER_DIR, generate, hypotheses, n_lines, run, train

D = TINY_SHAPE["encoder_embed_dim"]


# ------------------------------------------------------------------------------------------- CLI
CLI_MODELS = {
    "prenorm_fixnorm_scalenorm": ["--arch", "twt_prenorm_fixnorm_scalenorm", *TINY_SHAPE_FLAGS, "--dropout", "0.1"],
    "postnorm_rmsnorm_xavier": ["--arch", "transformer_twt", *TINY_SHAPE_FLAGS, "--share-all-embeddings",
                                "--norm-type", "rmsnorm", "--fixnorm", "--twt-init", "xavier"],
}


@pytest.mark.parametrize("name", sorted(CLI_MODELS))
def test_cli_train_and_generate(tiny_bin, tmp_path, name):
    ckpt = train(tiny_bin, tmp_path, CLI_MODELS[name], max_update=8)
    state = torch.load(ckpt, weights_only=True)
    assert any(k.endswith("output_bias") for k in state["model"])
    out = generate(tiny_bin, ckpt, "--batch-size", "16")
    assert sorted(hypotheses(out)) == list(range(n_lines(tiny_bin / "test.ids")))


PRELUDE = ("import sys, fairseq_ext.optim; from fairseq_cli.train import cli_main; "
           "sys.argv[0] = 'fairseq-train'; cli_main()")


def test_cli_valdecay_with_warmup_trains_past_stop_min_lr(tiny_bin, tmp_path):
    """VALDECAY with 8k warmup and --stop-min-lr 1e-6: LR(1) is far below 1e-6, training still runs."""
    p = run([sys.executable, "-c", PRELUDE, "--user-dir", USER_DIR, tiny_bin, "--task", "translation_ext",
             "--arch", "twt_prenorm_fixnorm_scalenorm", *TINY_SHAPE_FLAGS,
             "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
             "--adam-betas", "(0.9,0.999)",
             "--clip-norm", "1.0", "--lr-scheduler", "valdecay", "--lr-lambda", "1", "--lr-model-dim", str(D),
             "--warmup-updates", "8000", "--stop-min-lr", "1e-6", "--max-tokens", "2000", "--max-epoch", "2",
             "--save-dir", tmp_path, "--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple",
             "--log-interval", "1", "--no-epoch-checkpoints"])
    log = p.stdout + p.stderr
    assert "stopping training because current learning rate" not in log
    logged = [(r["num_updates"], r["lr"]) for r in fairseq_log.intervals(log)]
    assert len(logged) > 8 and "epoch 002" in log
    for k, lr in logged:  # logged after update k: the LR of update k + 1 (Eq. 6.7 warmup)
        assert math.isclose(lr, invsqrt_lr(int(k) + 1, 1, D, 8000), rel_tol=1e-4)
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    # validation scores (here the valid loss) are kept for the plateau rule; fairseq saves the
    # checkpoint before the end-of-epoch LR step, so the last epoch's score is not in it yet
    valid = [v["loss"] for v in fairseq_log.validations(log)]
    assert len(valid) == 2
    assert state["optimizer_history"][-1]["lr_scheduler_state"]["scores"] == pytest.approx(valid[:1], abs=1e-3)

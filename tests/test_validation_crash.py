"""fairseq-train validates before it saves, so an exception in validation (out of memory on a long validation
document, a broken valid file) used to lose every update since the last save. With the plugin loaded the weights
are saved to ``checkpoint_last.pt`` before the error propagates, and the same command resumes from them."""
import re
import textwrap

import torch

from harness import TINY_TRANSFORMER, fairseq


def crashing_user_dir(root):
    """A user dir that loads fairseq_ext and adds a criterion whose validation step fails (as an out-of-memory
    error would) once the model has trained ``CRASH_AFTER`` updates."""
    d = root / "crash_plugin"
    d.mkdir()
    (d / "__init__.py").write_text(textwrap.dedent('''
        import fairseq_ext  # noqa: F401
        from fairseq.criterions import register_criterion
        from fairseq.criterions.label_smoothed_cross_entropy import (
            LabelSmoothedCrossEntropyCriterion, LabelSmoothedCrossEntropyCriterionConfig)

        @register_criterion("crash_in_validation", dataclass=LabelSmoothedCrossEntropyCriterionConfig)
        class CrashInValidation(LabelSmoothedCrossEntropyCriterion):
            def forward(self, model, sample, reduce=True):
                if not model.training:
                    raise RuntimeError("simulated: DefaultCPUAllocator: not enough memory")
                return super().forward(model, sample, reduce)
    '''))
    return d


def test_a_crash_in_validation_keeps_the_trained_weights(tiny_bin, tmp_path):
    user_dir = crashing_user_dir(tmp_path)
    save = tmp_path / "ck"
    args = ["train", tiny_bin, "--user-dir", user_dir, "--task", "translation_ext", *TINY_TRANSFORMER,
            "--criterion", "crash_in_validation", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
            "--max-update", "7", "--save-dir", save, "--cpu", "--seed", "1", "--no-progress-bar"]
    p = fairseq(*args, user_dir=False, check=False)
    assert p.returncode != 0 and "simulated: DefaultCPUAllocator" in p.stderr
    ckpt = save / "checkpoint_last.pt"
    assert ckpt.exists(), p.stderr[-3000:]
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 7
    log = p.stdout + p.stderr
    assert "validation failed" in log and str(ckpt) in log
    # the same command, validation switched off, resumes from the saved updates instead of starting again
    p = fairseq(*args, "--disable-validation", "--max-update", "8", user_dir=False)
    assert re.search(r"Loaded checkpoint .*checkpoint_last.pt \(epoch \d+ @ 7 updates\)", p.stdout + p.stderr)

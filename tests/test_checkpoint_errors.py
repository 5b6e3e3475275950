"""A checkpoint that cannot be read gets one clear error, and never the advice to turn safe loading off.

torch's own message for a refused global ends with "... weights_only=False ..." -- advice that
disables the safety the project keeps on (``fairseq_ext/_compat.py``). The compat layer turns every
unreadable file into "not a readable fairseq checkpoint: FILE (why)" and a non-zero exit.
"""
import fractions
import shutil

import pytest
import torch

import fairseq_ext  # noqa: F401  (applies the compat layer)
from fairseq import checkpoint_utils
from fairseq_ext.modules.checkpoint import CheckpointError, load_ensemble, load_state
from harness import fairseq, train


@pytest.fixture(scope="module")
def good_ckpt(tiny_bin, tmp_path_factory):
    return train(tiny_bin, tmp_path_factory.mktemp("ckpt"), max_update=2)


def bad_files(good_ckpt, folder):
    corrupt = folder / "corrupt.pt"
    corrupt.write_bytes(b"\x00not a checkpoint at all\xff" * 50)
    truncated = folder / "truncated.pt"
    data = good_ckpt.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    unsafe = folder / "unsafe.pt"
    state = torch.load(good_ckpt, weights_only=True)
    state["extra_state"]["note"] = fractions.Fraction(1, 3)  # a global outside the allow-list
    torch.save(state, unsafe)
    return {"corrupt": corrupt, "truncated": truncated, "unsafe": unsafe}


def test_loader_names_the_file_and_the_reason(good_ckpt, tmp_path):
    files = bad_files(good_ckpt, tmp_path)
    reasons = {"corrupt": "corrupt or truncated", "truncated": "corrupt or truncated",
               "unsafe": "fractions.Fraction"}
    for kind, path in files.items():
        with pytest.raises(CheckpointError) as e:
            checkpoint_utils.load_checkpoint_to_cpu(str(path))
        msg = str(e.value)
        assert msg.startswith(f"not a readable fairseq checkpoint: {path}"), msg
        assert reasons[kind] in msg, msg
        assert "weights_only=False" not in msg
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_state(str(tmp_path / "missing.pt"))
    with pytest.raises(CheckpointError, match="not a readable"):
        load_ensemble([str(files["corrupt"])])
    assert "model" in load_state(str(good_ckpt))  # a good file still loads, with safety on


@pytest.mark.parametrize("kind", ["corrupt", "unsafe"])
def test_generate_and_interactive_fail_with_one_line(tiny_bin, good_ckpt, tmp_path, kind):
    path = bad_files(good_ckpt, tmp_path)[kind]
    for tool, extra, stdin in (("generate", ["--task", "translation_ext"], None),
                               ("interactive", ["--task", "translation_ext", "--source-lang", "es",
                                                "--target-lang", "en"], "hola\n")):
        p = fairseq(tool, tiny_bin, "--path", path, "--cpu", *extra, check=False, input_text=stdin)
        assert p.returncode != 0
        assert f"error: not a readable fairseq checkpoint: {path}" in p.stderr, p.stderr[-2000:]
        assert "weights_only=False" not in p.stderr + p.stdout
        assert "Traceback" not in p.stderr


def test_a_good_checkpoint_is_untouched(tiny_bin, good_ckpt, tmp_path):
    copy = tmp_path / "copy.pt"
    shutil.copy(good_ckpt, copy)
    p = fairseq("generate", tiny_bin, "--task", "translation_ext", "--path", copy, "--cpu",
                "--beam", "1", "--max-len-b", "5", "--max-sentences", "8")
    assert p.returncode == 0 and "H-0" in p.stdout

"""The warm start of a document model from a sentence checkpoint (``--finetune-from-model``,
:mod:`fairseq_ext.modules.warm_start`) on the command line: a stage-1 checkpoint that does not fit the
document model's sentence part ends fairseq-train with one ``error:`` line naming the checkpoint, no traceback."""
from harness import fairseq, train

SENT = ["--arch", "rnnsearch_tiny", "--decoder-layers", "2", "--decoder-variant", "plain"]  # docmem_tiny's sentence part


def _finetune(tiny_bin, tmp_path, sent_ckpt):
    return fairseq("train", tiny_bin, "--task", "doc_translation", "--doc-target-context", "gold",
                   "--arch", "docmem_tiny", "--criterion", "cross_entropy", "--optimizer", "sgd", "--lr", "0.1",
                   "--max-tokens", "1000", "--max-update", "1", "--disable-validation", "--cpu",
                   "--save-dir", tmp_path / "doc", "--finetune-from-model", sent_ckpt, check=False)


def _one_error_line(p, ckpt):
    err = p.stderr
    assert p.returncode == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"error: {ckpt}: warm start from a sentence checkpoint"), lines[0]
    assert "different architecture shape" in lines[0]
    return lines[0]


def test_sentence_checkpoint_of_another_architecture_is_one_error_line(tiny_bin, tmp_path):
    """rnnsearch_tiny's default decoder (conditional GRU, one layer) has other parameters than docmem_tiny's
    two plain GRU layers: the first missing and unexpected keys are named."""
    ckpt = train(tiny_bin, tmp_path / "sent", ["--arch", "rnnsearch_tiny"], task="translation_decoding",
                 criterion="cross_entropy", max_update=1, extra=["--disable-validation"])
    line = _one_error_line(_finetune(tiny_bin, tmp_path, ckpt), ckpt)
    assert "missing" in line and "unexpected" in line and "decoder." in line


def test_sentence_checkpoint_of_another_size_is_one_error_line(tiny_bin, tmp_path):
    """The same parameters at another width: the first shape mismatches are named."""
    ckpt = train(tiny_bin, tmp_path / "sent", [*SENT, "--encoder-hidden-size", "24"], task="translation_decoding",
                 criterion="cross_entropy", max_update=1, extra=["--disable-validation"])
    line = _one_error_line(_finetune(tiny_bin, tmp_path, ckpt), ckpt)
    assert "size mismatch" in line and "encoder." in line

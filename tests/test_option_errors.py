"""Bad options given to fairseq-train / fairseq-generate with ``--user-dir fairseq_ext`` are the user's mistake:
the plugin raises :class:`fairseq_ext.data.errors.UserDataError` (a ``ValueError``) naming the option, which the
plugin's excepthook prints as one ``error: ...`` line without a Python traceback (exit status 2)."""
import pytest

from fairseq_ext.data.errors import UserDataError
from harness import TINY_SHAPE_FLAGS, TINY_TRANSFORMER, build_model, fairseq, make_dictionary, train_objects

TRAIN_FLAGS = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--cpu"]


def test_jas_top_n_beyond_the_encoder_layers(tiny_bin):
    with pytest.raises(UserDataError, match="--jas-top-n 5 must be in 1..2"):
        train_objects(tiny_bin, "--task", "translation_ext", "--arch", "transformer_jas", *TINY_SHAPE_FLAGS,
                      "--jas-top-n", "5", *TRAIN_FLAGS)


def test_concat_option_conflict(tiny_bin):
    with pytest.raises(UserDataError, match="--concat-sep-batch needs --concat consec or rand"):
        train_objects(tiny_bin, "--task", "concat_translation", "--concat-sep-batch", *TINY_TRANSFORMER, *TRAIN_FLAGS)


def test_freeze_target_embeddings_with_shared_embeddings(tiny_bin):
    with pytest.raises(UserDataError, match="--freeze-target-embeddings: source and target share"):
        train_objects(tiny_bin, "--task", "transfer_translation", "--freeze-target-embeddings", *TINY_TRANSFORMER,
                      *TRAIN_FLAGS)


def test_negative_npd_sigma0():
    from fairseq_ext.generators.decoding import NoisyParallelGenerator

    model = build_model("rnnsearch_tiny")
    with pytest.raises(UserDataError, match="--npd-sigma0 must be >= 0"):
        NoisyParallelGenerator([model], make_dictionary(), samples=2, sigma0=-1.0)


def test_cli_bad_option_is_one_error_line(tiny_bin, tmp_path):
    p = fairseq("train", tiny_bin, "--task", "translation_ext", "--arch", "transformer_jas", *TINY_SHAPE_FLAGS,
                "--jas-top-n", "5", *TRAIN_FLAGS, "--max-update", "1", "--save-dir", tmp_path, check=False)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: --jas-top-n 5 must be in 1..2 (the number of encoder layers)"], p.stderr[-2000:]


def test_encoder_layerdrop_with_auxiliary_decoders():
    from harness import build_parsed

    with pytest.raises(UserDataError, match="--encoder-layerdrop 0.1 is not supported with --aux-layers"):
        build_parsed("transformer_ms", *TINY_SHAPE_FLAGS, "--aux-layers", "1", "--encoder-layerdrop", "0.1")

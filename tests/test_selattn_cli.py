"""Maruf (2019) ch. 4, the command lines: the two-stage training (a sentence model, then ``transformer_selattn``
warm-started from it) and the Zhang et al. (2018) baseline through fairseq-train / fairseq-generate."""
import torch

import fairseq_ext  # noqa: F401  (registration)
from harness import TINY_SHAPE_FLAGS, fairseq, generate, hypotheses, n_lines, train


# ----------------------------------------------------------------------------- command line
def test_cli_warm_start_train_and_generate(tiny_bin, tmp_path):
    """Stage 1 sentence model, stage 2 selattn warm-started from it on doc_translation (encoder:
    hierarchical sparse-soft; decoder: sparse-sparse with the gold target context), then
    fairseq-generate of the test documents."""
    shape = TINY_SHAPE_FLAGS
    sent = train(tiny_bin, tmp_path / "sent", ["--arch", "transformer_maruf_base_bench", *shape],
                 task="doc_translation", max_update=4)
    for arch, extra in (("transformer_selattn_enc_hier_sparsesoft_bench", []),
                        ("transformer_selattn_dec_hier_sparsesparse_bench", ["--doc-target-context", "gold"])):
        p = fairseq("train", tiny_bin, "--task", "doc_translation", "--arch", arch, *shape, *extra,
                    "--finetune-from-model", sent, "--criterion", "label_smoothed_cross_entropy",
                    "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
                    "--max-update", "3", "--save-dir", tmp_path / arch, "--cpu", "--seed", "1",
                    "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints")
        log = p.stdout + p.stderr
        assert "warm start from a sentence checkpoint: copied" in log and "never filled" not in log
        out = generate(tiny_bin, tmp_path / arch / "checkpoint_last.pt", *extra, task="doc_translation")
        assert len(hypotheses(out)) == n_lines(tiny_bin / "test.ids")


def test_cli_zhang2018_decoder_integration_trains_and_generates(tiny_bin, tmp_path):
    """The Zhang et al. (2018) baseline (§4.8, footnote 17) through the real command lines: ``fairseq-train --user-dir
    fairseq_ext --task doc_translation --arch transformer_zhang2018_bench`` at a 2+2-layer d=32 shape with
    ``--ctx-integration decoder`` and a one-layer context encoder, then ``fairseq-generate`` (beam 2: the decoder's
    context sub-layers are reordered with the beam) gives exactly one hypothesis per test sentence; the checkpoint
    has the context sub-layers in the decoder layers only."""
    shape = TINY_SHAPE_FLAGS
    ckpt = train(tiny_bin, tmp_path / "zhang", ["--arch", "transformer_zhang2018_bench", *shape,
                                                "--ctx-integration", "decoder", "--ctx-encoder-layers", "1"],
                 task="doc_translation", max_update=2, extra=["--disable-validation"])
    keys = torch.load(ckpt, map_location="cpu", weights_only=False)["model"].keys()
    assert any(k.startswith("decoder.layers.1.ctx_attn.") for k in keys)
    assert not any(k.startswith("encoder.layers.") and ".ctx_" in k for k in keys)
    out = generate(tiny_bin, ckpt, task="doc_translation")
    n = n_lines(tiny_bin / "test.ids")
    assert sorted(hypotheses(out)) == list(range(n))
    assert sum(line.startswith("H-") for line in out.splitlines()) == n

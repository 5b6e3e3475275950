"""Encoder-based Multi-level Supervision + AIF (Ampomah thesis ch. 4), the command lines: fairseq-train /
fairseq-generate round trips from the main decoder, an auxiliary decoder and the ind-decoder."""
import torch

import fairseq_ext  # noqa: F401  (registration)
from harness import TINY_SHAPE, as_flags, generate, hypotheses, n_lines, train


# --------------------------------------------------------------------------- CLI
MS_TINY = as_flags(dict(TINY_SHAPE, encoder_layers=3))
CRIT = ["--label-smoothing", "0.1", "--aux-weight", "1.0"]


def _scored(out):
    return sorted(l for l in out.splitlines() if l.startswith(("H-", "P-")))


def test_cli_ms_aif_train_and_generate_from_main_aux_and_ind_decoder(tiny_bin, tmp_path):
    log = tmp_path / "train.log"
    ckpt = train(tiny_bin, tmp_path, ["--arch", "transformer_ms_aif_bench", *MS_TINY, "--aux-layers", "1,2"],
                 criterion="multi_supervision_label_smoothed", max_update=6,
                 extra=[*CRIT, "--log-file", log])
    text = log.read_text()
    for key in ("loss_main=", "loss_aux1=", "loss_aux2=", "nll_loss_aux2="):
        assert key in text, key
    state = torch.load(ckpt, weights_only=True)
    assert state["cfg"]["model"].aux_layers == "1,2" and state["cfg"]["model"].aif is True
    assert any(k.startswith("decoder.aif.") for k in state["model"])
    want = list(range(n_lines(tiny_bin / "test.ids")))
    outs = {}
    for name, override in (("main", None), ("aux1", "{'generate_from':'aux1'}"),
                           ("ind", "{'aif_disable':True}")):
        extra = ["--batch-size", "32"] + (["--model-overrides", override] if override else [])
        outs[name] = generate(tiny_bin, ckpt, *extra)
        assert sorted(hypotheses(outs[name])) == want, name
    assert _scored(outs["aux1"]) != _scored(outs["main"]) and _scored(outs["ind"]) != _scored(outs["main"])


def test_cli_ms_without_aif_train_and_generate(tiny_bin, tmp_path):
    ckpt = train(tiny_bin, tmp_path,
                 ["--arch", "transformer_ms_iwslt_small", *MS_TINY, "--aux-decoder-layers", "2"],
                 criterion="multi_supervision_label_smoothed", max_update=5, extra=CRIT)
    want = list(range(n_lines(tiny_bin / "test.ids")))
    main = generate(tiny_bin, ckpt, "--batch-size", "32")
    aux = generate(tiny_bin, ckpt, "--batch-size", "32", "--model-overrides", "{'generate_from':'aux:2'}")
    assert sorted(hypotheses(main)) == want and sorted(hypotheses(aux)) == want
    assert _scored(main) != _scored(aux)

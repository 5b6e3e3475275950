"""Every architecture the plugin registers is listed here by name, builds, and runs a forward pass.

The math of each family is tested in its own module (test_joint_attention, test_dual_contextual,
test_multi_supervision, test_twt, test_lexical, test_untied_position, test_nat_fertility); this
module makes sure no registered preset is left unbuilt: the thesis-size presets are built with their
own layer counts, norms and strategies, only the widths shrunk, and a new architecture must be added
to the list below (the first test fails otherwise).
"""
import pytest
import torch

from fairseq_ext.__main__ import registrations
from harness import build_model, toy_arthur_lexicon, toy_batch

TRANSFORMER_FAMILY = [
    "transformer_arthur", "transformer_dc", "transformer_dec_dc_bench", "transformer_dec_dc_iwslt_small",
    "transformer_dec_dc_wmt_en_de", "transformer_enc_dc_bench", "transformer_enc_dc_iwslt_small",
    "transformer_enc_dc_wmt_en_de", "transformer_full_dc_bench", "transformer_full_dc_iwslt_small",
    "transformer_full_dc_wmt_en_de", "transformer_iwslt_small", "transformer_jas",
    "transformer_jas_cagg_bench", "transformer_jas_cagg_iwslt_small", "transformer_jas_cagg_wmt_en_de",
    "transformer_jas_iter_cagg_bench", "transformer_jas_iter_cagg_iwslt_small",
    "transformer_jas_iter_cagg_wmt_en_de", "transformer_jas_iter_sagg_bench",
    "transformer_jas_iter_sagg_iwslt_small", "transformer_jas_iter_sagg_wmt_en_de",
    "transformer_jas_m00_bench", "transformer_jas_m00_iwslt_small", "transformer_jas_m00_wmt_en_de",
    "transformer_jas_m01_bench", "transformer_jas_m01_iwslt_small", "transformer_jas_m01_wmt_en_de",
    "transformer_jas_m10_bench", "transformer_jas_m10_iwslt_small", "transformer_jas_m10_wmt_en_de",
    "transformer_jas_m11_bench", "transformer_jas_m11_iwslt_small", "transformer_jas_m11_wmt_en_de",
    "transformer_jas_sagg_bench", "transformer_jas_sagg_iwslt_small", "transformer_jas_sagg_wmt_en_de",
    "transformer_lex", "transformer_lex_small", "transformer_ms", "transformer_ms_aif_bench",
    "transformer_ms_aif_iwslt_small", "transformer_ms_aif_wmt_en_de", "transformer_ms_bench",
    "transformer_ms_iwslt_small", "transformer_ms_wmt_en_de", "transformer_twt", "transformer_twt_small",
    "transformer_untied_pos", "transformer_untied_pos_random", "transformer_untied_pos_random_small",
    "transformer_untied_pos_small", "transformer_wmt_en_de_10l", "transformer_wmt_en_de_ffn4096",
    "twt_postnorm_fixnorm_scalenorm", "twt_postnorm_layernorm", "twt_prenorm_fixnorm_layernorm",
    "twt_prenorm_fixnorm_rmsnorm", "twt_prenorm_fixnorm_scalenorm", "twt_prenorm_fixnorm_scalenorm_fixedg",
    "twt_prenorm_layernorm", "twt_random_untied_pos", "twt_untied_pos",
]
LSTM_FAMILY = ["lstm_luong", "lstm_luong_arthur", "lstm_luong_fixnorm", "lstm_luong_fixnorm_lex",
               "lstm_luong_tied"]
ARTHUR = {"lstm_luong_arthur", "transformer_arthur"}  # need a lexicon file (--arthur-lexicon)
NAT_FAMILY = ["nat_fertility", "nat_fertility_iwslt16", "nat_fertility_small", "nat_fertility_tiny"]

NARROW = dict(encoder_embed_dim=32, decoder_embed_dim=32, encoder_ffn_embed_dim=64,
              decoder_ffn_embed_dim=64, encoder_attention_heads=4, decoder_attention_heads=4)


def test_every_registered_architecture_is_listed():
    assert sorted(TRANSFORMER_FAMILY + LSTM_FAMILY + NAT_FAMILY) == registrations()["architectures"]


def _lexicon(arch, tmp_path):
    return {"arthur_lexicon": toy_arthur_lexicon(tmp_path / "lex.pt")} if arch in ARTHUR else {}


@pytest.mark.parametrize("arch", TRANSFORMER_FAMILY)
def test_transformer_family_preset_builds_and_runs(arch, tmp_path):
    model = build_model(arch, vocab=60, **NARROW, **_lexicon(arch, tmp_path))
    src, lengths, prev = toy_batch()
    with torch.no_grad():
        logits = model(src, lengths, prev)[0]
    assert logits.shape == (3, 6, 60) and torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", LSTM_FAMILY)
def test_lstm_preset_builds_and_runs(arch, tmp_path):
    model = build_model(arch, vocab=60, encoder_embed_dim=32, decoder_embed_dim=32, encoder_hidden_size=32,
                        decoder_hidden_size=32, decoder_out_embed_dim=32, **_lexicon(arch, tmp_path))
    src, lengths, prev = toy_batch()
    with torch.no_grad():
        logits = model(src, lengths, prev)[0]
    assert logits.shape == (3, 6, 60) and torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", NAT_FAMILY)
def test_nat_preset_builds(arch):
    model = build_model(arch, vocab=60, device="meta", **NARROW)
    assert sum(p.numel() for p in model.parameters()) > 0

"""``fairseq-ext-export`` of Nguyen's ch. 6 Transformers without Tears (``transformer_twt``,
``transformer_twt_*``): ScaleNorm and RMSNorm become CTranslate2's RMSNorm, FixNorm's normalised rows are
folded into the exported embeddings and output projection (:mod:`fairseq_ext.tools.export.export_twt`).

* every thesis preset (Table 6.3 rows (1)-(4), Table 6.6, Table 6.7), on the tiny slice: greedy outputs of the
  CTranslate2 float32 model equal fairseq's (SequenceGenerator, as ``fairseq-generate --beam 1``) token for
  token, and the log-probability of every reference token agrees to 1e-4 (the ε placement of the fold:
  max(‖x‖, ε) against sqrt(‖x‖² + ε²)). The checkpoints are one trained TwT whose norm gains, output bias and
  weights are then drawn at random per preset, so that a wrong γ, bias or row norm changes the scores;
* the fold of one norm on its own: ScaleNorm and CTranslate2's RMSNorm formula with γ = g/√d, ε' = ε²/d agree
  to float32 resolution for ‖x‖ ≥ 1e-3;
* what does not fold is refused in one line (``transformer_untied_pos``, ``--layernorm-embedding`` beside
  ScaleNorm).
"""
import argparse
import math

import pytest
import torch

from harness import train
from test_fast_inference import TWT_TINY, fairseq_greedy_and_scores

import ctranslate2  # noqa: E402,I001  (the dev extra)

from fairseq_ext.models.twt import THESIS_PRESETS  # noqa: E402


@pytest.fixture(scope="module")
def twt_trained(tiny_bin, tmp_path_factory):
    return train(tiny_bin, tmp_path_factory.mktemp("twt"), TWT_TINY, max_update=4)


def preset_checkpoint(trained, arch, path, seed=0):
    """``trained``'s checkpoint relabelled as the preset ``arch`` (its norm placement, norm type, FixNorm and
    output bias) with its weights rebuilt by that preset and drawn at random: norm gains ×U[0.5, 1.5], RMSNorm
    gains U[0.5, 1.5], output bias N(0, 1), every matrix + N(0, 0.05²)."""
    import fairseq_ext  # noqa: F401
    from fairseq import tasks
    from omegaconf import OmegaConf

    prenorm, norm_type, fixnorm = THESIS_PRESETS[arch]
    state = torch.load(trained, weights_only=True)
    m = state["cfg"]["model"]
    m.arch, m.norm_type, m.fixnorm, m.output_bias = arch, norm_type, fixnorm, fixnorm
    m.encoder_normalize_before = m.decoder_normalize_before = prenorm
    task = tasks.setup_task(OmegaConf.create(dict(state["cfg"]["task"])))
    torch.manual_seed(seed)
    model = task.build_model(m)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".g"):
                p.mul_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif "layer_norm" in name or name.endswith("output_bias"):
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5) if name.endswith(".weight")
                        else torch.randn_like(p) * (1.0 if name.endswith("output_bias") else 0.1))
            else:
                p.add_(torch.randn_like(p) * 0.05)
    state["model"] = model.state_dict()
    torch.save(state, path)
    return path


@pytest.mark.parametrize("arch", sorted(THESIS_PRESETS))
def test_every_twt_preset_exports_and_decodes_as_fairseq(tiny_bin, twt_trained, tmp_path, arch):
    from fairseq_ext.tools.export.export import main as export_main

    ckpt = preset_checkpoint(twt_trained, arch, tmp_path / f"{arch}.pt")
    out = tmp_path / "ct2"
    assert export_main([str(ckpt), "--out", str(out), "--data", str(tiny_bin)]) == 0
    tr = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    src, hyp, tgt, pos = fairseq_greedy_and_scores(ckpt, tiny_bin)
    ids = sorted(src)
    res = tr.translate_batch([src[i] for i in ids], beam_size=1, max_decoding_length=50, min_decoding_length=1)
    differ = [i for i, r in zip(ids, res) if r.hypotheses[0] != hyp[i]]
    assert not differ, f"{len(differ)} of {len(ids)} differ, e.g. {hyp[differ[0]][:8]} vs " \
                       f"{res[differ[0]].hypotheses[0][:8]}"
    scored = tr.score_batch([src[i] for i in ids], [tgt[i] for i in ids])
    worst = max(abs(a - b) for i, r in zip(ids, scored) for a, b in zip(r.log_probs, pos[i]))
    assert worst < 1e-4, worst
    assert len({round(x, 2) for i in ids for x in pos[i]}) > 50  # scores that discriminate


def test_scalenorm_equals_the_rmsnorm_it_is_exported_as():
    """g·x/max(‖x‖, ε) against γ_i x_i / sqrt(mean(x²) + ε') with γ = g/√d, ε' = ε²/d (CTranslate2's RMSNorm)."""
    from fairseq_ext.modules.norms import RMSNorm, ScaleNorm
    from fairseq_ext.tools.export.export_twt import rms_epsilon, rms_gamma

    d = 32
    norm = ScaleNorm(d)
    with torch.no_grad():
        norm.g.fill_(3.7)
    gamma, eps = torch.from_numpy(rms_gamma(norm)), rms_epsilon(norm.eps, d)
    torch.manual_seed(0)
    for scale in (1e-3, 1.0, 1e3):
        x = torch.randn(64, d) * scale
        ct2 = gamma * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        assert torch.allclose(norm(x), ct2, rtol=1e-5, atol=0), scale
    rms = RMSNorm(d)
    with torch.no_grad():
        rms.weight.uniform_(0.5, 1.5)
    x = torch.randn(8, d)
    ct2 = torch.from_numpy(rms_gamma(rms)) * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    assert torch.allclose(rms(x), ct2, rtol=1e-5, atol=0)
    assert math.isclose(float(gamma[0]), 3.7 / math.sqrt(d), rel_tol=1e-6)


def test_what_does_not_fold_is_refused_with_its_reason():
    from fairseq_ext.tools.export.export import list_archs, unsupported_reason

    base = dict(encoder_normalize_before=True, decoder_normalize_before=True, encoder_attention_heads=4,
                decoder_attention_heads=4, decoder_embed_dim=32, activation_fn="relu", norm_type="scalenorm",
                fixnorm=True)
    assert unsupported_reason("transformer_twt_prenorm_fixnorm_scalenorm", argparse.Namespace(**base)) is None
    assert "one norm kind" in unsupported_reason("transformer_twt_prenorm_fixnorm_scalenorm",
                                                 argparse.Namespace(**base, layernorm_embedding=True))
    layernorm = argparse.Namespace(**{**base, "norm_type": "layernorm"}, layernorm_embedding=True)
    assert unsupported_reason("transformer_twt_prenorm_layernorm", layernorm) is None
    verdict = {a: r for a, _, r in list_archs()}
    assert all(verdict[a] is None for a in [*THESIS_PRESETS, "transformer_twt", "transformer_twt_bench"])
    assert "untied positional attention" in verdict["transformer_untied_pos"]

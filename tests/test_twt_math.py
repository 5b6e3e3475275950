"""Nguyen ch. 6 "Transformers without Tears", the model in process: ScaleNorm/RMSNorm/FixNorm (Eq. 6.5), the
``transformer_twt`` model (placement of the norms, reduction to fairseq's transformer, incremental decoding), its
archs, init schemes and word dropout. The LR schedulers are in ``test_twt_schedules.py``, the command lines in
``test_twt_cli.py``."""
import contextlib
import math
import types

import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the model)
import fairseq_ext.optim  # noqa: F401  (registers the LR schedulers)
from fairseq.models.transformer import TransformerModel
from fairseq_ext.models.twt import THESIS_PRESETS
from fairseq_ext.modules.norms import FixNormEmbedding, RMSNorm, ScaleNorm, fixnorm
from harness import ROOT, TINY_SHAPE, TINY_SHAPE_FLAGS, build_parsed, make_dictionary, n_params, train_parse

D = TINY_SHAPE["encoder_embed_dim"]
TINY = TINY_SHAPE_FLAGS
PRE = ["--encoder-normalize-before", "--decoder-normalize-before"]


# ----------------------------------------------------------------------------------------- helpers
DICT = make_dictionary(44)  # 40 words


def parse(arch, *flags):
    return train_parse("/nonexistent", "--arch", arch, *flags)


def build(arch, *flags, seed=1, share=True):
    return build_parsed(arch, *(["--share-all-embeddings"] if share else []), *flags, seed=seed,
                        task=types.SimpleNamespace(source_dictionary=DICT, target_dictionary=DICT))


def batch(bsz=3, src_len=7, tgt_len=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(DICT.nspecial, len(DICT), (bsz, src_len), generator=g)
    src[0, :2] = DICT.pad()  # left-padded source, as fairseq batches it
    prev = torch.randint(DICT.nspecial, len(DICT), (bsz, tgt_len), generator=g)
    prev[:, 0] = DICT.eos()
    lengths = (src != DICT.pad()).sum(1)
    return src, lengths, prev


def norms(model, cls):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, cls)]


# ------------------------------------------------------------------------------- norms (Eq. 6.5)
def test_scalenorm_projects_rows_onto_sphere_of_radius_g():
    n = ScaleNorm(64)
    assert n.g.shape == (1,) and math.isclose(n.g.item(), 8.0)  # g initialised to √d [T §6.3.3]
    x = torch.randn(5, 3, 64) * 7
    y = n(x)
    assert torch.allclose(y.norm(dim=-1), torch.full((5, 3), 8.0), atol=1e-4)
    assert torch.allclose(y, 8.0 * x / x.norm(dim=-1, keepdim=True), atol=1e-5)
    assert torch.equal(ScaleNorm(64)(torch.zeros(2, 64)), torch.zeros(2, 64))  # ‖x‖ clamped at 1e-5
    with torch.no_grad():
        n.g.fill_(3.0)
    assert torch.allclose(n(x).norm(dim=-1), torch.full((5, 3), 3.0), atol=1e-4)


def test_scalenorm_gradients_reach_g_and_input():
    n = ScaleNorm(16)
    x = torch.randn(4, 16, requires_grad=True)
    (n(x) * torch.randn(4, 16)).sum().backward()
    assert n.g.grad is not None and n.g.grad.abs().item() > 0
    assert x.grad is not None and x.grad.abs().sum() > 0
    # d‖y‖/dx = 0: ScaleNorm's output norm does not depend on x
    x2 = torch.randn(4, 16, requires_grad=True)
    n(x2).norm(dim=-1).sum().backward()
    assert x2.grad.abs().max() < 1e-5


def test_fixed_g_scalenorm_has_no_parameters():
    n = ScaleNorm(64, learnable=False)
    assert list(n.parameters()) == [] and "g" in n.state_dict() and math.isclose(n.g.item(), 8.0)


def test_rmsnorm_with_unit_gains_equals_scalenorm_with_sqrt_d():
    x = torch.randn(6, 48) * 3
    r = RMSNorm(48)
    assert r.weight.shape == (48,) and torch.all(r.weight == 1)
    assert torch.allclose(r(x), ScaleNorm(48)(x), atol=1e-5)  # §6.4.2: tie g_i, divide by √d
    with torch.no_grad():
        r.weight.copy_(torch.arange(48.0))
    assert torch.allclose(r(x), ScaleNorm(48)(x) * torch.arange(48.0), atol=1e-4)


def test_norms_compute_in_float32_under_bf16():
    """A bf16 input is normalised in float32 and rounded to bf16 once, at the end: the output is the
    float32 reference rounded to bf16 (within one bf16 rounding, 2^-8 relative, of the float32 result),
    also under CPU bf16 autocast. Computing ‖x‖ (or g/‖x‖) in bf16 adds a second rounding and fails."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(64, 512, generator=g) * torch.logspace(-2, 2, 64)[:, None]).to(torch.bfloat16)
    rms = RMSNorm(512)
    with torch.no_grad():
        rms.weight.copy_(torch.rand(512, generator=g) + 0.5)
    for n in (ScaleNorm(512), ScaleNorm(512, learnable=False), rms):
        ref = n(x.float())  # the float32 computation on the same (bf16-representable) input
        assert ref.dtype == torch.float32
        for ctx in (contextlib.nullcontext(), torch.autocast("cpu", dtype=torch.bfloat16)):
            with ctx:
                y = n(x)
            assert y.dtype == torch.bfloat16
            assert torch.equal(y, ref.to(torch.bfloat16)), n
            rel = ((y.float() - ref).abs() / ref.abs().clamp(min=1e-30)).max().item()
            assert rel <= 2.0 ** -8, (n, rel)


def test_fixnorm_rows_and_embedding():
    w = torch.randn(10, 8) * 5
    assert torch.allclose(fixnorm(w, 2.5).norm(dim=-1), torch.full((10,), 2.5))
    emb = FixNormEmbedding(10, 8, padding_idx=1, radius=1.0)
    assert emb.weight.abs().max() <= 0.01 and torch.all(emb.weight[1] == 0)  # U[-0.01, 0.01] init
    out = emb(torch.tensor([[2, 1, 5]]))
    assert torch.allclose(out[0, [0, 2]].norm(dim=-1), torch.ones(2), atol=1e-5)
    assert torch.all(out[0, 1] == 0)  # padding stays zero
    out.sum().backward()
    assert emb.weight.grad[2].abs().sum() > 0 and torch.all(emb.weight.grad[1] == 0)


def test_scalenorm_plus_fixnorm_logits_are_bounded_by_g():
    """Eq. 6.6: g·(w·x)/(‖w‖‖x‖) ∈ [−g, g] for every type (spec invariant 2)."""
    n, w = ScaleNorm(16), torch.randn(30, 16)
    with torch.no_grad():
        n.g.fill_(5.0)
    logits = n(torch.randn(7, 16) * 9) @ fixnorm(w).t()
    assert logits.abs().max() <= 5.0 + 1e-4


# -------------------------------------------------------------------- model: placement of the norms
@pytest.mark.parametrize("norm_type,cls", [("scalenorm", ScaleNorm), ("rmsnorm", RMSNorm),
                                           ("scalenorm-fixed", ScaleNorm)])
@pytest.mark.parametrize("prenorm", [True, False])
def test_every_layernorm_is_swapped_and_placed(norm_type, cls, prenorm):
    m = build("transformer_twt", *TINY, "--norm-type", norm_type, *(PRE if prenorm else []))
    assert norms(m, torch.nn.LayerNorm) == []
    L = 2
    for layer in m.encoder.layers:
        assert layer.normalize_before is prenorm
        assert isinstance(layer.self_attn_layer_norm, cls) and isinstance(layer.final_layer_norm, cls)
    for layer in m.decoder.layers:
        assert layer.normalize_before is prenorm
        for name in ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"):
            assert isinstance(getattr(layer, name), cls)
    # PreNorm appends a norm after each stack (Eq. 6.3 and the note after it); PostNorm has none.
    assert isinstance(m.encoder.layer_norm, cls) if prenorm else m.encoder.layer_norm is None
    assert isinstance(m.decoder.layer_norm, cls) if prenorm else m.decoder.layer_norm is None
    assert len(norms(m, cls)) == (2 * L + 3 * L + (2 if prenorm else 0))


@pytest.mark.parametrize("prenorm", [True, False])
def test_fixed_g_learns_only_the_output_norm(prenorm):
    m = build("transformer_twt", *TINY, "--norm-type", "scalenorm-fixed", "--fixnorm",
              *(PRE if prenorm else []))
    learned = [n for n, mod in norms(m, ScaleNorm) if mod.learnable]
    assert learned == (["decoder.layer_norm"] if prenorm else ["decoder.layers.1.final_layer_norm"])
    assert [n for n, _ in m.named_parameters() if n.endswith(".g")] == [learned[0] + ".g"]
    assert m.decoder.output_norm() is dict(m.named_modules())[learned[0]]
    assert all(math.isclose(mod.g.item(), math.sqrt(D), rel_tol=1e-6) for _, mod in norms(m, ScaleNorm))


@pytest.mark.parametrize("prenorm", [True, False])
def test_parameter_counts(prenorm):
    """ScaleNorm replaces LayerNorm's 2d scale+shift by one scalar (§6.2.3); RMSNorm keeps d gains."""
    flags = [*TINY, *(PRE if prenorm else [])]
    n_norms = 2 * 2 + 3 * 2 + (2 if prenorm else 0)
    base = n_params(build("transformer_twt", *flags))
    assert n_params(build("transformer_twt", *flags, "--norm-type", "scalenorm")) == base - n_norms * (2 * D - 1)
    assert n_params(build("transformer_twt", *flags, "--norm-type", "rmsnorm")) == base - n_norms * D
    assert n_params(build("transformer_twt", *flags, "--norm-type", "scalenorm-fixed")) == base - n_norms * 2 * D + 1
    # FixNorm reparameterises the same matrix; its only extra parameter is the output bias
    assert n_params(build("transformer_twt", *flags, "--fixnorm")) == base + len(DICT)
    assert n_params(build("transformer_twt", *flags, "--fixnorm", "--no-output-bias")) == base


# ------------------------------------------------------------------------ model: reduction, outputs
def assert_same_model(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    src, lengths, prev = batch()
    with torch.no_grad():
        assert torch.equal(a(src, lengths, prev)[0], b(src, lengths, prev)[0])


@pytest.mark.parametrize("flags,twt_flags", [
    (TINY, []),
    (TINY + PRE, []),
    (TINY + PRE, ["--twt-init", "fairseq", "--norm-type", "layernorm", "--no-output-bias"]),
])
def test_degenerate_settings_reduce_to_fairseq_transformer(flags, twt_flags):
    """LayerNorm, no FixNorm, fairseq init: fairseq's transformer (same weights for a seed, same outputs)."""
    for share in (True, False):
        assert_same_model(build("transformer_twt", *flags, *twt_flags, share=share),
                          build("transformer", *flags, share=share))


def test_small_arch_is_the_bench_baseline():
    from fairseq_ext.tools.evaluation.bench_configs import TRANSFORMER_SMALL

    fairseq_flags = [f for f in TRANSFORMER_SMALL if f not in ("--arch", "transformer")]
    twt, ref = build("transformer_twt_bench", share=False), build("transformer", *fairseq_flags, share=False)
    assert n_params(twt) == n_params(ref)
    assert_same_model(twt, ref)


def test_thesis_presets():
    args = parse("twt_prenorm_fixnorm_scalenorm")
    assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_attention_heads,
            args.encoder_layers, args.decoder_layers) == (512, 2048, 8, 6, 6)
    assert args.dropout == args.attention_dropout == args.activation_dropout == 0.3
    assert args.share_all_embeddings and args.fixnorm and args.output_bias
    assert args.norm_type == "scalenorm" and args.twt_init == "smallinit"
    assert args.encoder_normalize_before and args.decoder_normalize_before
    gl = parse("twt_prenorm_fixnorm_scalenorm", "--encoder-layers", "4", "--dropout", "0.4")
    assert gl.encoder_layers == 4 and gl.attention_dropout == 0.4
    for name, (prenorm, norm_type, fixn) in THESIS_PRESETS.items():
        a = parse(name)
        assert (a.encoder_normalize_before, a.decoder_normalize_before) == (prenorm, prenorm), name
        assert (a.norm_type, a.fixnorm, a.output_bias) == (norm_type, fixn, fixn), name


@pytest.mark.parametrize("flags", [
    PRE + ["--norm-type", "scalenorm", "--fixnorm"],
    ["--norm-type", "scalenorm", "--fixnorm"],
    PRE + ["--norm-type", "rmsnorm", "--fixnorm", "--twt-init", "xavier"],
    ["--norm-type", "scalenorm-fixed", "--fixnorm", "--twt-init", "smallinit"],
    PRE + ["--fixnorm"],
])
def test_incremental_decoding_equals_full_decoding(flags):
    m = build("transformer_twt", *TINY, *flags)
    src, lengths, prev = batch()
    with torch.no_grad():
        enc = m.encoder(src, src_lengths=lengths)
        full = m.decoder(prev, encoder_out=enc)[0]
        state, steps = {}, []
        for t in range(prev.size(1)):
            steps.append(m.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0])
    assert torch.allclose(full, torch.cat(steps, 1), atol=1e-5)


def test_fixnorm_model_inputs_and_logits():
    m = build("transformer_twt", *TINY, *PRE, "--norm-type", "scalenorm", "--fixnorm", "--dropout", "0")
    assert isinstance(m.encoder.embed_tokens, FixNormEmbedding)
    assert m.decoder.embed_tokens is m.encoder.embed_tokens  # shared source/target/output
    assert m.decoder.output_projection.weight is m.encoder.embed_tokens.weight
    tok = torch.tensor([[5, 6, 7]])
    assert torch.allclose(m.encoder.embed_tokens(tok).norm(dim=-1), torch.ones(1, 3), atol=1e-5)
    with torch.no_grad():
        m.decoder.output_bias.copy_(torch.randn(len(DICT)))
        m.decoder.output_norm().g.fill_(4.0)
    src, lengths, prev = batch()
    with torch.no_grad():
        logits = m(src, lengths, prev)[0]
    assert (logits - m.decoder.output_bias).abs().max() <= 4.0 + 1e-4  # |g·cos| ≤ g (Eq. 6.6)


def test_forward_under_cpu_bf16_autocast():
    m = build("transformer_twt", *TINY, *PRE, "--norm-type", "scalenorm", "--fixnorm")
    src, lengths, prev = batch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(src, lengths, prev)[0]
    assert torch.isfinite(out.float()).all()


# ------------------------------------------------------------------------------- word dropout
def record_inputs(model):
    """Record the tokens that reach the encoder (``src``) and the decoder (``prev``)."""
    seen = {}
    enc_forward, dec_forward = model.encoder.forward, model.decoder.forward

    def encoder(src_tokens, *args, **kwargs):
        seen["src"] = src_tokens
        return enc_forward(src_tokens, *args, **kwargs)

    def decoder(prev_output_tokens, *args, **kwargs):
        seen["prev"] = prev_output_tokens
        return dec_forward(prev_output_tokens, *args, **kwargs)

    model.encoder.forward, model.decoder.forward = encoder, decoder
    return seen


def test_word_dropout_is_off_by_default_and_p0_changes_nothing():
    for name in ("transformer_twt", *THESIS_PRESETS):
        assert parse(name).word_dropout == 0.0, name
        assert parse(name, "--word-dropout", "0.1").word_dropout == 0.1, name
    m = build("twt_prenorm_fixnorm_scalenorm", *TINY, "--dropout", "0").train()
    assert m.word_dropout_p == 0.0
    src, lengths, prev = batch()
    seen = record_inputs(m)
    out = m(src, lengths, prev)[0]
    assert torch.equal(seen["src"], src) and torch.equal(seen["prev"], prev)
    assert torch.equal(out, TransformerModel.forward(m, src, lengths, prev)[0])


def test_word_dropout_in_training_only_at_rate_p_and_never_on_specials():
    p = 0.3
    m = build("twt_prenorm_fixnorm_scalenorm", *TINY, "--dropout", "0", "--word-dropout", str(p))
    assert m.word_dropout_p == p
    src, lengths, prev = batch(bsz=64, src_len=50, tgt_len=50, seed=3)
    seen = record_inputs(m)
    with torch.no_grad():
        out = m(src, lengths, prev)[0]  # eval: no dropout
        assert torch.equal(seen["src"], src) and torch.equal(seen["prev"], prev)
        m.word_dropout_p = 0.0
        assert torch.equal(out, m(src, lengths, prev)[0])
        m.word_dropout_p = p
        torch.manual_seed(0)
        m.train()(src, lengths, prev)
    for given, got in ((src, seen["src"]), (prev, seen["prev"])):
        special = given < DICT.nspecial  # <s> <pad> </s> <unk>
        assert torch.equal(got[special], given[special])
        changed = got != given
        assert torch.all(got[changed] == DICT.unk())
        rate = changed.sum().item() / (~special).sum().item()
        assert abs(rate - p) < 0.03, rate


@pytest.mark.parametrize("scheme", ["xavier", "smallinit"])
def test_init_schemes(scheme):
    d, ff = 128, 512
    m = build("transformer_twt", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", str(d),
              "--decoder-embed-dim", str(d), "--encoder-ffn-embed-dim", str(ff), "--decoder-ffn-embed-dim", str(ff),
              "--twt-init", scheme)
    want = math.sqrt(1 / d) if scheme == "xavier" else math.sqrt(2 / (5 * d))  # spec invariant 6
    for layer in [*m.encoder.layers, *m.decoder.layers]:
        for attn in (layer.self_attn, getattr(layer, "encoder_attn", None)):
            if attn is None:
                continue
            for lin in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
                assert abs(lin.weight.std().item() / want - 1) < 0.05
                assert torch.all(lin.bias == 0)
        for lin in (layer.fc1, layer.fc2):
            assert abs(lin.weight.std().item() / math.sqrt(2 / (d + ff)) - 1) < 0.05
            assert torch.all(lin.bias == 0)
    emb = m.encoder.embed_tokens.weight[DICT.nspecial:]
    assert abs(emb.std().item() / d ** -0.5 - 1) < 0.1  # non-FixNorm embeddings: N(0, d^-1/2)

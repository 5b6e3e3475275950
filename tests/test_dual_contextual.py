"""Dual Contextual module (Ampomah thesis ch. 5 / MT journal 2021): equations, conv windows, causal
decoder, incremental = full decoding, placement variants, thesis parameter counts, CLI round trip."""

import pytest
import torch
import torch.nn.functional as F

import fairseq_ext  # noqa: F401  (registration)
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.modules import MultiheadAttention
from fairseq_ext.modules.dual_contextual import DualContextual, conv_padding
from harness import (TINY_SHAPE, TINY_SHAPE_FLAGS, arch_args, beam_incremental, build_model, generate, hypotheses,
                     n_lines, n_params, toy_batch, train)
from thesis_sizes import AMPOMAH_WMT_VOCAB

TINY = dict(TINY_SHAPE, encoder_layers=3, share_all_embeddings=True)


build = build_model


batch = toy_batch


def forward(model, src, lengths, tgt):
    with torch.no_grad():
        return model(src, lengths, tgt)[0]


def dc_modules(stack):
    return [isinstance(layer.self_attn, DualContextual) for layer in stack.layers]


# --------------------------------------------------------------------------- placement, shapes


@pytest.mark.parametrize("placement,enc,dec", [("enc", [1, 1, 1], [0, 0]), ("dec", [0, 0, 0], [1, 1]),
                                               ("full", [1, 1, 1], [1, 1])])
def test_placement_and_shapes(placement, enc, dec):
    for base in ("wmt_en_de", "iwslt_small", "bench"):
        assert ARCH_MODEL_REGISTRY[f"transformer_{placement}_dc_{base}"].__name__ == "TransformerDCModel"
    model = build(f"transformer_{placement}_dc_bench", **TINY)
    assert dc_modules(model.encoder) == [bool(x) for x in enc]
    assert dc_modules(model.decoder) == [bool(x) for x in dec]
    for layer in model.decoder.layers:
        assert isinstance(layer.encoder_attn, MultiheadAttention)
        if isinstance(layer.self_attn, DualContextual):
            assert layer.self_attn.causal
    src, lengths, tgt = batch()
    out = forward(model, src, lengths, tgt)
    assert out.shape == (3, 6, 60) and torch.isfinite(out).all()


def test_encoder_layer_ranges():  # Table 5.6: "[i-j]" = DC only in encoder layers i..j
    model = build("transformer_enc_dc_wmt_en_de", **{**TINY, "encoder_layers": 6,
                                                     "encoder_dc_layers": "2-4"})
    assert dc_modules(model.encoder) == [False, True, True, True, False, False]
    model = build("transformer_full_dc_bench", **{**TINY, "encoder_dc_layers": "1,3",
                                                  "decoder_dc_layers": "2"})
    assert dc_modules(model.encoder) == [True, False, True] and dc_modules(model.decoder) == [False, True]
    with pytest.raises(ValueError):
        build("transformer_enc_dc_bench", **{**TINY, "encoder_dc_layers": "4"})


def test_no_dc_layers_is_the_fairseq_transformer():
    base = build("transformer", seed=1, **TINY)
    dc = build("transformer_dc", seed=2, encoder_dc_layers="none", decoder_dc_layers="none", **TINY)
    dc.load_state_dict(base.state_dict(), strict=True)
    src, lengths, tgt = batch()
    assert torch.equal(forward(dc, src, lengths, tgt), forward(base, src, lengths, tgt))


# --------------------------------------------------------------------------- the equations


def _randomize(m):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    return m.eval()


def reference_dc(m, r, kpm=None):
    """Eqs. 5.4-5.7 written out position by position and head by head."""
    T, B, d = r.shape
    f, (left, right) = m.kernel_size, m.padding
    x = r if kpm is None else r.masked_fill(kpm.t()[..., None], 0)
    x = torch.cat([r.new_zeros(left, B, d), x, r.new_zeros(right, B, d)])
    W, b = m.conv.weight, m.conv.bias  # W^r: 2d x d x f
    r_hat = torch.stack([F.glu(sum(x[t + k] @ W[:, :, k].t() for k in range(f)) + b, dim=-1)
                         for t in range(T)])
    l_c = m.local_layer_norm(r_hat + r)  # Eq. 5.4
    H, dk = m.num_heads, d // m.num_heads
    hs = []
    for fi, src in ((m.fi_l, l_c), (m.fi_g, r)):  # Eq. 5.5: FI(r, l_c), FI(r, r)
        q, k, v = fi.q_proj(r) * dk ** -0.5, fi.k_proj(src), fi.v_proj(src)
        heads = []
        for h in range(H):
            sl = slice(h * dk, (h + 1) * dk)
            logits = torch.einsum("tbc,sbc->bts", q[..., sl], k[..., sl])
            if m.causal:
                logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            if kpm is not None:
                logits = logits.masked_fill(kpm[:, None, :], float("-inf"))
            heads.append(torch.einsum("bts,sbc->tbc", logits.softmax(-1), v[..., sl]))
        hs.append(torch.cat(heads, -1))  # Eq. 5.6: concatenation, no output projection
    return m.agg(torch.cat(hs, -1))  # Eq. 5.7 (z_hat)


@pytest.mark.parametrize("causal,f,padding", [(False, 2, "same"), (False, 3, "same"), (False, 2, "left"),
                                              (False, 4, "right"), (True, 2, "same"), (True, 3, "same")])
def test_dc_module_follows_eqs_5_4_to_5_7(causal, f, padding):
    m = _randomize(DualContextual(16, 4, kernel_size=f, causal=causal, padding=padding))
    r = torch.randn(7, 2, 16)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    if causal:
        kpm[1, -2:] = True  # right-padded target
    else:
        kpm[0, :3] = True  # left-padded source
    with torch.no_grad():
        out, _ = m(r, r, r, key_padding_mask=kpm)
        ref = reference_dc(m, r, kpm)
    valid = ~kpm.t()
    assert torch.allclose(out[valid], ref[valid], atol=1e-4)


def test_local_zero_aggregation_starts_as_self_attention():
    """--dc-agg-init local-zero: at initialisation z_hat = h_g W_z[:, d:] + b_z, whatever the local unit computes
    (plain self-attention through FI_g, with W_z's global half as its output projection)."""
    torch.manual_seed(0)
    m = DualContextual(16, 4, kernel_size=3, agg_init="local-zero").eval()
    assert torch.count_nonzero(m.agg.weight[:, :16]) == 0 and torch.count_nonzero(m.agg.weight[:, 16:]) > 0
    r = torch.randn(6, 2, 16)
    with torch.no_grad():
        out, _ = m(r, r, r)
        h_g, _ = m.fi_g(r, *m.fi_g.project_kv(r))
        torch.nn.init.normal_(m.conv.weight)          # the local unit no longer matters at the start
        out2, _ = m(r, r, r)
    assert torch.allclose(out, h_g @ m.agg.weight[:, 16:].t() + m.agg.bias, atol=1e-5)
    assert torch.allclose(out, out2, atol=1e-6)
    # the default keeps Xavier on both halves (the bench rows' initialisation)
    assert torch.count_nonzero(DualContextual(16, 4).agg.weight[:, :16]) > 0
    with pytest.raises(ValueError, match="aggregation init"):
        DualContextual(16, 4, agg_init="zeros")


def test_dc_dropout_flag_sets_the_local_unit_dropout():
    from fairseq_ext.models.dual_contextual import _dc_module

    args = arch_args("transformer_enc_dc_bench", dropout=0.3, attention_dropout=0.0)
    assert args.dc_dropout is None and args.dc_agg_init == "xavier"       # defaults: the bench rows' module
    assert _dc_module(16, 4, args, causal=False).dropout_module.p == 0.3   # --dropout, as before
    args.dc_dropout, args.dc_agg_init = 0.0, "local-zero"
    m = _dc_module(16, 4, args, causal=False)
    assert m.dropout_module.p == 0.0 and torch.count_nonzero(m.agg.weight[:, :16]) == 0


def test_parameters_of_one_dc_module():
    d, f = 32, 3
    m = DualContextual(d, 4, kernel_size=f)
    mha = MultiheadAttention(d, 4, self_attention=True)
    # conv f*d*2d + 2d, LN 2d, two FI units 3(d^2+d) each (no W_o), W_z 2d*d + d
    assert n_params(m) == (2 * f * d * d + 2 * d) + 2 * d + 6 * (d * d + d) + 2 * d * d + d
    assert n_params(m) - n_params(mha) == (2 * f + 4) * d * d + 7 * d  # spec §4 C0 (both keep a 2d LN)
    with_proj = DualContextual(d, 4, kernel_size=f, fi_out_proj=True)
    assert n_params(with_proj) - n_params(m) == 2 * (d * d + d)


@pytest.mark.parametrize("f,padding,window", [(2, "same", (0, 1)), (3, "same", (-1, 1)), (4, "same", (-1, 2)),
                                              (2, "left", (-1, 0)), (3, "right", (0, 2))])
def test_local_context_window(f, padding, window):
    assert conv_padding(f, padding) == (-window[0], window[1])
    m = _randomize(DualContextual(8, 2, kernel_size=f, padding=padding))
    r = torch.randn(9, 1, 8)
    t = 4
    with torch.no_grad():
        base, _ = m.local_context(r, None)
        for s in range(9):
            r2 = r.clone()
            r2[s] += 1.0
            changed = not torch.allclose(m.local_context(r2, None)[0][t], base[t])
            assert changed == (window[0] <= s - t <= window[1]), (s, t)


def test_padding_does_not_leak_into_the_encoder():
    m = _randomize(DualContextual(16, 4, kernel_size=3))
    r = torch.randn(6, 2, 16)
    kpm = torch.zeros(2, 6, dtype=torch.bool)
    kpm[0, :2] = True
    r2 = r.clone()
    r2[:2, 0] = torch.randn(2, 16)  # change only the padded positions
    with torch.no_grad():
        a, b = m(r, r, r, key_padding_mask=kpm)[0], m(r2, r2, r2, key_padding_mask=kpm)[0]
    assert torch.allclose(a[2:], b[2:], atol=1e-6) and not torch.allclose(a[:2], b[:2])


# --------------------------------------------------------------------------- decoder: causality, incremental


@pytest.mark.parametrize("placement", ["dec", "full"])
@pytest.mark.parametrize("f", [2, 4])
def test_decoder_is_causal(placement, f):
    model = build(f"transformer_{placement}_dc_bench", dc_kernel_size=f, **TINY)
    src, lengths, tgt = batch()
    out = forward(model, src, lengths, tgt)
    for t in (1, 3, 5):
        tgt2 = tgt.clone()
        tgt2[:, t:] = torch.randint(4, 60, tgt2[:, t:].shape)
        out2 = forward(model, src, lengths, tgt2)
        assert torch.equal(out[:, :t], out2[:, :t]) and not torch.allclose(out[:, t:], out2[:, t:])


@pytest.mark.parametrize("placement", ["dec", "full"])
@pytest.mark.parametrize("f", [1, 2, 3, 5])
@pytest.mark.parametrize("prenorm", [False, True])
def test_incremental_equals_full_decoding(placement, f, prenorm):
    model = build(f"transformer_{placement}_dc_iwslt_small", dc_kernel_size=f,
                  encoder_normalize_before=prenorm, decoder_normalize_before=prenorm, **TINY)
    beam = 3
    src, lengths, _ = batch(bsz=2)
    _, _, tgt = batch(bsz=2 * beam, tgt_len=8, seed=5)
    src, lengths = src.repeat_interleave(beam, 0), lengths.repeat_interleave(beam, 0)
    inc, src, lengths, tgt, _ = beam_incremental(model, src, lengths, tgt, beam)
    full = forward(model, src, lengths, tgt)
    assert (inc - full).abs().max() < 1e-5


# --------------------------------------------------------------------------- thesis parameter counts

# Spec §1.6 / §4 (Table 5.2, [P] Table 1): WMT base, tied embeddings, V = 33,416 (see
# test_joint_attention.py); each DC layer adds (2f + 4) d^2 + 7d over self-attention.
V_WMT, D, FF, L = AMPOMAH_WMT_VOCAB, 512, 2048, 6
BASE = V_WMT * D + L * (4 * (D * D + D) + 2 * D * FF + FF + D + 4 * D) \
    + L * (8 * (D * D + D) + 2 * D * FF + FF + D + 6 * D)


def dc_extra(f, layers):
    return layers * ((2 * f + 4) * D * D + 7 * D)


def meta_count(arch, **kw):
    return n_params(build_model(arch, V_WMT, device="meta", **kw))


@pytest.mark.parametrize("placement,layers,reported",
                         [("enc", 6, 73.9), ("dec", 6, 73.9), ("full", 12, 86.5)])
def test_thesis_parameter_counts(placement, layers, reported):
    count = meta_count(f"transformer_{placement}_dc_wmt_en_de")
    assert count == BASE + dc_extra(2, layers)
    assert round(count / 1e6, 1) == reported  # [T] Table 5.2
    if placement != "full":
        assert abs(count / 1e6 - 73.86) < 0.01  # [P] Table 1 (two decimals; spec §4 C0 param check)


def test_kernel_size_ranges_and_fi_projection_counts():
    for f in range(2, 9):  # Fig. 5.3 sweep
        assert meta_count("transformer_enc_dc_wmt_en_de", dc_kernel_size=f) == BASE + dc_extra(f, 6)
    for spec, k in (("1-1", 1), ("1-3", 3), ("4-6", 3), ("5-6", 2)):  # Table 5.6
        assert meta_count("transformer_enc_dc_wmt_en_de", encoder_dc_layers=spec) == BASE + dc_extra(2, k)
    with_proj = meta_count("transformer_enc_dc_wmt_en_de", dc_fi_out_proj=True)
    assert round((with_proj - BASE) / 1e6, 1) == 15.8  # spec: the FI output projection would give 15.8M


# --------------------------------------------------------------------------- CLI


def test_cli_full_dc_train_and_generate(tiny_bin, tmp_path):
    ckpt = train(tiny_bin, tmp_path, ["--arch", "transformer_full_dc_bench", *TINY_SHAPE_FLAGS, "--dc-kernel-size", "3",
                                      "--encoder-dc-layers", "1-1"], max_update=6)
    state = torch.load(ckpt, weights_only=True)
    assert state["cfg"]["model"].dc_kernel_size == 3
    out = generate(tiny_bin, ckpt, "--batch-size", "32")
    assert sorted(hypotheses(out)) == list(range(n_lines(tiny_bin / "test.ids")))

"""Nguyen ch. 7: untied positional attention (Eq. 7.6), ``transformer_untied_pos*`` / ``twt_*untied_pos``."""
import math

import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the models)
from fairseq_ext.models.untied_position import (
    PositionTable, UntiedPosAttention, sinusoidal_table,
)
from harness import TINY_SHAPE_FLAGS, build_model, generate, hypotheses, incremental_logits, n_lines, train

V = 50
D, H = 16, 2
TINY = dict(encoder_layers=2, decoder_layers=2, encoder_embed_dim=D, decoder_embed_dim=D,
            encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=H,
            decoder_attention_heads=H)
ARCHS = ("transformer_untied_pos_bench", "transformer_untied_pos_random_bench")


def batch(bsz=3, src_len=7, tgt_len=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (bsz, src_len), generator=g)
    src[0, :2] = 1  # left padding, as fairseq batches the source
    src[1, :1] = 1
    prev = torch.randint(4, V, (bsz, tgt_len), generator=g)
    prev[:, 0] = 2
    return src, src.ne(1).sum(1), prev


def model(arch=ARCHS[0], seed=0, **kw):
    return build_model(arch, vocab=V, seed=seed, **dict(TINY, **kw))


def perturb_biases(m):
    """Non-zero attention biases so that the loop references exercise them."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("_proj.bias"):
                p.normal_(0, 0.1)


# ------------------------------------------------------------------------------- Eqs. 7.1–7.2
def test_sinusoidal_table_is_eq_7_1_7_2():
    pe = sinusoidal_table(50, 8)
    for pos in (0, 1, 7, 49):
        for i in range(4):
            assert math.isclose(pe[pos, 2 * i].item(), math.sin(pos / 10000 ** (2 * i / 8)), abs_tol=1e-6)
            assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(pos / 10000 ** (2 * i / 8)), abs_tol=1e-6)
    t = PositionTable("sinusoidal", 10, 8)
    assert not list(t.parameters()) and torch.allclose(t(30), sinusoidal_table(30, 8))  # extends on demand
    r = PositionTable("random", 10, 64)
    assert r.table.requires_grad and 0.08 < r.table.std().item() < 0.17  # N(0, d^-1/2)
    assert not PositionTable("random", 10, 8, freeze=True).table.requires_grad
    with pytest.raises(ValueError):
        r(11)


# ------------------------------------------------------------------ attention math (Eq. 7.6)
def reference_attention(attn, x_q, x_k, p_q, p_k, term, key_pad, causal=False):
    """Loop over batch, heads, queries and keys: softmax_j(s_ij) with
    s_ij = (x_i W_q + b_q)·(x_j W_k + b_k)/√(2d_k) + (p_i W'_q)·(p_j W'_k)/√(2d_k)."""
    tq, bsz, d = x_q.shape
    tk = x_k.size(0)
    dk = d // H
    scale = (2 * dk) ** -0.5
    q, k, v = attn.q_proj(x_q), attn.k_proj(x_k), attn.v_proj(x_k)
    out = torch.zeros(tq, bsz, d)
    for b in range(bsz):
        for h in range(H):
            sl = slice(h * dk, (h + 1) * dk)
            for i in range(tq):
                scores = []
                for j in range(tk):
                    if key_pad is not None and key_pad[b, j] or causal and j > i:
                        scores.append(float("-inf"))
                        continue
                    word = (q[i, b, sl] * k[j, b, sl]).sum() * scale
                    pos = (term.q_proj(p_q[b][i])[sl] * term.k_proj(p_k[b][j])[sl]).sum() * scale
                    scores.append(word + pos)
                a = torch.softmax(torch.stack([torch.as_tensor(s) for s in scores]), dim=0)
                out[i, b, sl] = sum(a[j] * v[j, b, sl] for j in range(tk))
    return attn.out_proj(out)


def real_positions(pad_row):
    """0-based positions of the real tokens of one sentence (pads: any)."""
    return (torch.cumsum((~pad_row).long(), 0) - 1).clamp(min=0)


@pytest.mark.parametrize("arch", ARCHS)
@torch.no_grad()
def test_encoder_self_attention_matches_loop_reference(arch):
    m = model(arch, seed=1)
    perturb_biases(m)
    src, lengths, _ = batch()
    pad = src.eq(1)
    x = torch.randn(src.size(1), src.size(0), D)
    attn = m.encoder.layers[0].self_attn
    assert isinstance(attn, UntiedPosAttention) and math.isclose(attn.scaling, (2 * D // H) ** -0.5)
    attn.pos_bias = m.encoder.positional_bias(src)
    table = m.encoder.positions(src.size(1))
    p = [table[real_positions(pad[b])] for b in range(src.size(0))]
    ref = reference_attention(attn, x, x, p, p, m.encoder.pos_self, pad)
    fast, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)  # SDPA path
    slow, w = attn(x, x, x, key_padding_mask=pad, need_weights=True)  # explicit softmax path
    real = ~pad.t().unsqueeze(-1)  # compare real query rows
    assert torch.allclose(fast * real, ref * real, atol=1e-5)
    assert torch.allclose(slow * real, ref * real, atol=1e-5)
    assert w.shape == (3, 7, 7) and torch.all(w.masked_select(pad.unsqueeze(1).expand_as(w)) == 0)


@pytest.mark.parametrize("arch", ARCHS)
@torch.no_grad()
def test_decoder_self_and_cross_attention_match_loop_reference(arch):
    m = model(arch, seed=2)
    perturb_biases(m)
    src, lengths, prev = batch()
    enc = m.encoder(src, src_lengths=lengths)
    pad = src.eq(1)
    self_bias, cross_bias = m.decoder.positional_biases(prev, enc, incremental=False)
    t, s, bsz = prev.size(1), src.size(1), src.size(0)
    table = m.decoder.positions(max(t, s))
    p_t = [table[:t]] * bsz
    p_s = [table[real_positions(pad[b])] for b in range(bsz)]
    layer = m.decoder.layers[1]
    y = torch.randn(t, bsz, D)
    layer.self_attn.pos_bias = self_bias
    causal = torch.triu(torch.full((t, t), float("-inf")), 1)
    got, _ = layer.self_attn(y, y, y, attn_mask=causal, need_weights=False)
    ref = reference_attention(layer.self_attn, y, y, p_t, p_t, m.decoder.pos_self, None, causal=True)
    assert torch.allclose(got, ref, atol=1e-5)
    layer.encoder_attn.pos_bias = cross_bias
    x = enc["encoder_out"][0]
    got, w = layer.encoder_attn(y, x, x, key_padding_mask=pad, static_kv=True, need_weights=True)
    ref = reference_attention(layer.encoder_attn, y, x, p_t, p_s, m.decoder.pos_cross, pad)
    assert torch.allclose(got, ref, atol=1e-5) and torch.allclose(w.sum(-1), torch.ones(bsz, t), atol=1e-5)


def test_attention_never_takes_fairseqs_fused_path(monkeypatch):
    """fairseq's fused path (``F.multi_head_attention_forward``) has no ``apply_sparse_mask`` hook and
    its own scaling: training and incremental decoding must both go through the hooked path."""
    import torch.nn.functional as F

    def fused(*args, **kwargs):
        raise AssertionError("fused attention path taken: the positional term would be lost")

    monkeypatch.setattr(F, "multi_head_attention_forward", fused)
    m = model(seed=7, dropout=0.1, attention_dropout=0.1).train()
    src, lengths, prev = batch()
    m(src, lengths, prev)[0].sum().backward()
    assert m.encoder.pos_self.q_proj.weight.grad.abs().sum() > 0
    assert m.decoder.pos_self.q_proj.weight.grad.abs().sum() > 0
    assert m.decoder.pos_cross.q_proj.weight.grad.abs().sum() > 0
    m.eval()
    with torch.no_grad():
        assert torch.allclose(m(src, lengths, prev)[0], incremental_logits(m, src, lengths, prev), atol=1e-5)


def test_positional_term_is_computed_once_and_shared_by_all_layers():
    m = model(encoder_layers=3, decoder_layers=3)
    seen = {}

    def hook(name):
        def pre(module, args, kwargs):
            seen.setdefault(name, []).append(module.pos_bias)
        return pre

    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(m, side).layers):
            layer.self_attn.register_forward_pre_hook(hook(f"{side}.self"), with_kwargs=True)
            if getattr(layer, "encoder_attn", None) is not None:
                layer.encoder_attn.register_forward_pre_hook(hook("cross"), with_kwargs=True)
    src, lengths, prev = batch()
    m(src, lengths, prev)
    for name, biases in seen.items():
        assert len(biases) == 3 and all(b is biases[0] for b in biases), name  # the same tensor
        assert biases[0] is not None
    assert seen["encoder.self"][0].shape == (3, H, 7, 7)  # per sentence (left padding)
    assert seen["decoder.self"][0].shape == (1, H, 6, 6)
    assert seen["cross"][0].shape == (3, H, 6, 7)
    assert m.encoder.layers[0].self_attn.pos_bias is None  # cleared after the forward


# ------------------------------------------------------------------------- degenerate settings
@torch.no_grad()
def test_zero_positional_projections_reduce_to_twt_without_positions():
    m = model(seed=3, untied_pos_scale="standard", norm_type="scalenorm", fixnorm=True)
    base = build_model("transformer_twt_bench", vocab=V, seed=0, no_token_positional_embeddings=True,
                       norm_type="scalenorm", fixnorm=True, **TINY)
    res = base.load_state_dict(m.state_dict(), strict=False)
    assert not res.missing_keys and all(".pos_" in k or "positions" in k for k in res.unexpected_keys)
    for module in (m.encoder.pos_self, m.decoder.pos_self, m.decoder.pos_cross):
        module.q_proj.weight.zero_()
    src, lengths, prev = batch()
    assert torch.allclose(m(src, lengths, prev)[0], base(src, lengths, prev)[0], atol=1e-5)


@torch.no_grad()
def test_without_the_positional_term_the_encoder_is_position_blind():
    m = model(seed=4)
    src = torch.randint(4, V, (2, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    out = m.encoder(src)["encoder_out"][0]
    out_perm = m.encoder(src[:, perm])["encoder_out"][0]
    assert not torch.allclose(out[perm], out_perm, atol=1e-4)  # positions matter
    m.encoder.pos_self.k_proj.weight.zero_()
    out = m.encoder(src)["encoder_out"][0]
    out_perm = m.encoder(src[:, perm])["encoder_out"][0]
    assert torch.allclose(out[perm], out_perm, atol=1e-5)  # permutation-equivariant


@pytest.mark.parametrize("arch", ARCHS)
@torch.no_grad()
def test_left_padding_does_not_shift_positions(arch):
    m = model(arch, seed=5)
    src = torch.randint(4, V, (1, 5))
    padded = torch.cat([torch.ones(1, 3, dtype=torch.long), src], dim=1)
    prev = torch.tensor([[2, 7, 8, 9]])
    a = m(src, torch.tensor([5]), prev)[0]
    b = m(padded, torch.tensor([5]), prev)[0]
    assert torch.allclose(a, b, atol=1e-5)


# -------------------------------------------------------------------------------- decoding
@pytest.mark.parametrize("arch", ARCHS)
@torch.no_grad()
def test_incremental_decoding_equals_full(arch):
    m = model(arch, seed=6, norm_type="scalenorm", fixnorm=True)
    src, lengths, prev = batch()
    full = m(src, lengths, prev)[0]
    enc = m.encoder(src, src_lengths=lengths)
    state, outs = {}, []
    for t in range(prev.size(1)):
        outs.append(m.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0])
    assert torch.allclose(full, torch.cat(outs, 1), atol=1e-5)
    # beam reordering of the cached keys/values
    order = torch.tensor([2, 0, 0])
    m.decoder.reorder_incremental_state_scripting(state, order)
    enc2 = m.encoder.reorder_encoder_out(enc, order)
    longer = torch.cat([prev[order], prev[order, -1:]], 1)
    step = m.decoder(longer, encoder_out=enc2, incremental_state=state)[0]
    ref = m(src[order], lengths[order], longer)[0][:, -1:]
    assert torch.allclose(step, ref, atol=1e-5)


def test_archs_and_parameters():
    m = build_model("transformer_untied_pos_bench", vocab=V, device="meta")
    twt = build_model("transformer_twt_bench", vocab=V, device="meta")
    n = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    assert m.encoder.embed_positions is None and m.decoder.embed_positions is None
    assert n(m) - n(twt) == 3 * 2 * 256 * 256  # W'_q, W'_k for enc self, dec self, cross
    r = build_model("transformer_untied_pos_random_bench", vocab=V, device="meta")
    assert n(r) - n(m) == 1024 * 256 + 1024 * 256  # a learned position table per stack
    t = build_model("twt_random_untied_pos", vocab=V, device="meta")
    assert t.decoder.positions.kind == "random" and t.encoder.layers[0].self_attn.embed_dim == 512
    assert type(t.encoder.layers[0].self_attn_layer_norm).__name__ == "ScaleNorm"
    s = model()
    assert s.positional_scores("enc", 11).shape == (H, 11, 11)
    assert s.positional_scores("cross", 5, 9).shape == (H, 5, 9)


# ------------------------------------------------------------------------------------- CLI
TINY_CLI = TINY_SHAPE_FLAGS


@pytest.mark.parametrize("arch,extra", [
    ("twt_untied_pos", ["--dropout", "0.1"]),
    ("transformer_untied_pos_random_bench", ["--target-vocab-mask", "train"]),
])
def test_cli_train_and_generate(tiny_bin, tmp_path, arch, extra):
    ckpt = train(tiny_bin, tmp_path, ["--arch", arch, *TINY_CLI, *extra],
                 criterion="masked_label_smoothed_cross_entropy", extra=["--label-smoothing", "0.1"],
                 max_update=6)
    state = torch.load(ckpt, weights_only=True)
    assert any(".pos_self.q_proj" in k for k in state["model"])
    out = generate(tiny_bin, ckpt, "--batch-size", "16")
    assert sorted(hypotheses(out)) == list(range(n_lines(tiny_bin / "test.ids")))

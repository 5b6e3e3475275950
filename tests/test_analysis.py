"""Analysis tools of Ampomah's thesis: the math against hand-computed examples, the attention
recorder against the modules' own outputs, and the ``python -m fairseq_ext.tools.analysis.analysis`` CLI on tiny
trained checkpoints (Enc-DC, MS-l+AIF, MLMHA)."""
import csv
import json
import math
import sys

import pytest
import torch

from harness import build_model, run, train

import fairseq_ext  # noqa: F401
from fairseq_ext.tools.analysis.attention_stats import (
    AIFDependency,
    AttentionRecorder,
    DCDivergence,
    SelfAttentionStats,
    attention_modules,
    distance_sums,
    entropy,
    js_divergence,
    kl,
    layer_index,
    mean_distance,
    reduce_heads,
)


def _rand_dist(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(3 * torch.randn(*shape, generator=g), dim=-1)


# --------------------------------------------------------------------------- math


@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_entropy_of_uniform_is_log_n_and_of_one_hot_is_zero(n):
    assert entropy(torch.full((n,), 1.0 / n)).item() == pytest.approx(math.log(n), abs=1e-6)
    assert entropy(torch.eye(n)).tolist() == [0.0] * n
    # a mask restricts the sum: uniform over 4 with 2 masked keys -> -2 * (1/4) log(1/4)
    a = torch.full((4,), 0.25)
    assert entropy(a, torch.tensor([True, True, False, False])).item() == pytest.approx(0.5 * math.log(4))


def test_entropy_hand_example_and_batching():
    p = torch.tensor([0.5, 0.25, 0.25])
    want = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert entropy(p).item() == pytest.approx(want, abs=1e-6)
    batch = _rand_dist(2, 3, 4, 6)
    e = entropy(batch)
    assert e.shape == (2, 3, 4)
    assert e[1, 2, 3].item() == pytest.approx(entropy(batch[1, 2, 3]).item(), abs=1e-6)


def test_mean_distance_identity_uniform_and_causal_window():
    eye = torch.eye(5).expand(2, 3, 5, 5)  # B H T S
    assert torch.equal(mean_distance(eye), torch.zeros(2, 3))
    # uniform over 3: rows have mean |i-j| of 1, 2/3, 1 -> 8/9
    u = torch.full((3, 3), 1 / 3)
    assert mean_distance(u).item() == pytest.approx(8 / 9)
    # thesis' literal window j <= i: sum_{j<=i} w (i-j) / sum_{j<=i} w = (0 + 1/3 + 1) / (1/3 + 2/3 + 1)
    assert mean_distance(u, causal=True).item() == pytest.approx((1 / 3 + 3 / 3) / 2.0)
    # "always attend to the previous token" has distance exactly 1
    prev = torch.zeros(4, 4)
    prev[0, 0] = 1
    prev[1:, :-1] = torch.eye(3)
    assert mean_distance(prev).item() == pytest.approx(3 / 4)
    assert mean_distance(prev, causal=True).item() == pytest.approx(3 / 4)


def test_mean_distance_ignores_padding_and_is_shift_invariant():
    a = _rand_dist(1, 2, 4, 4, seed=3)
    # the same sentence left-padded by 2 (fairseq's default source padding)
    padded = torch.zeros(1, 2, 6, 6)
    padded[..., 2:, 2:] = a
    padded[..., :2, :] = 1 / 6  # junk in the padded query rows must not count
    mask = torch.tensor([[False, False, True, True, True, True]])
    for causal in (False, True):
        assert torch.allclose(mean_distance(padded, mask, causal=causal), mean_distance(a, causal=causal))
    num, den = distance_sums(a)
    assert torch.allclose(den, torch.full((1, 2), 4.0))  # rows sum to 1, 4 rows


def test_js_divergence_properties():
    p, q = _rand_dist(4, 7, seed=1), _rand_dist(4, 7, seed=2)
    assert torch.allclose(js_divergence(p, q), js_divergence(q, p), atol=1e-7)  # symmetric
    assert torch.allclose(js_divergence(p, p), torch.zeros(4), atol=1e-7)
    assert (js_divergence(p, q) > 0).all()
    # disjoint supports: log 2 (the maximum)
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert js_divergence(a, b).item() == pytest.approx(math.log(2))
    # hand example: p = (1/2, 1/2, 0), q = (0, 1/2, 1/2): m = (1/4, 1/2, 1/4)
    p1, q1 = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.0, 0.5, 0.5])
    want = 0.5 * (0.5 * math.log(2) + 0) * 2
    assert js_divergence(p1, q1).item() == pytest.approx(want)
    # equals the definition through kl()
    m = 0.5 * (p + q)
    assert torch.allclose(js_divergence(p, q), 0.5 * kl(p, m) + 0.5 * kl(q, m), atol=1e-6)


def test_kl_properties_and_log_input():
    p, q = _rand_dist(3, 5, 9, seed=4), _rand_dist(3, 5, 9, seed=5)
    d = kl(p, q)
    assert d.shape == (3, 5) and (d >= 0).all()
    assert torch.allclose(kl(p, p), torch.zeros(3, 5), atol=1e-6)
    assert torch.allclose(kl(p.log(), q.log(), log_input=True), d, atol=1e-5)
    # hand example: KL((1/2,1/2) || (1/4,3/4)) = 1/2 log 2 + 1/2 log(2/3)
    want = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)
    assert kl(torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.75])).item() == pytest.approx(want)
    # zeros in p contribute nothing (masked attention keys), also with -inf log-probs
    p0, q0 = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0])
    assert kl(p0, q0).item() == 0.0
    assert kl(p0.log(), q0.log(), log_input=True).item() == 0.0
    assert not kl(p, q).sub(kl(q, p)).abs().lt(1e-9).all()  # not symmetric


def test_reduce_heads():
    a = _rand_dist(2, 3, 4, 4, seed=6)
    m = reduce_heads(a, "max")
    assert m.shape == (2, 4, 4) and torch.allclose(m.sum(-1), torch.ones(2, 4))
    assert torch.allclose(reduce_heads(a, "mean"), a.mean(1))
    one_hot = torch.full((1, 2, 3, 3), 1 / 3)
    one_hot[0, 1] = torch.eye(3)
    assert torch.equal(reduce_heads(one_hot, "peak"), torch.eye(3)[None])
    same = a[:, :1].expand(-1, 3, -1, -1)  # identical heads: max = that head
    assert torch.allclose(reduce_heads(same, "max"), a[:, 0], atol=1e-6)


def test_accumulators_pool_over_batches():
    torch.manual_seed(0)
    a = _rand_dist(4, 2, 5, 5, seed=7)
    mask = torch.ones(4, 5, dtype=torch.bool)
    one, two = SelfAttentionStats(), SelfAttentionStats()
    one.add(1, "self", a, mask)
    two.add(1, "self", a[:2], mask[:2])
    two.add(1, "self", a[2:], mask[2:])
    r1, r2 = one.rows(), two.rows()
    assert [round(r["distance_full"], 6) for r in r1] == [round(r["distance_full"], 6) for r in r2]
    h1 = [r for r in r1 if r["head"] == 1][0]
    assert h1["distance_full"] == pytest.approx(mean_distance(a[:, 0]).mean().item(), rel=1e-5)
    assert h1["entropy_full"] == pytest.approx(entropy(a[:, 0]).mean().item(), rel=1e-5)
    assert r1[-1]["head"] == "mean"

    dc = DCDivergence()
    dc.add("encoder", 1, a, a, mask, mask)
    assert dc.result()["layers"][0]["js"] == pytest.approx(0.0, abs=1e-6) and dc.result()["E_d"] < 1e-6

    dep = AIFDependency()
    lp = torch.log_softmax(torch.randn(2, 3, 7), -1)
    tm = torch.tensor([[True, True, True], [True, True, False]])
    att = {1: _rand_dist(2, 2, 3, 4, seed=8)}
    dep.add(torch.tensor([5, 2]), tm, lp, lp, att, att, {"aux1": lp.flip(-1)})
    res = dep.result()
    assert [r["id"] for r in res["sentences"]] == [2, 5]
    assert res["mean"]["kl_main_ind"] == pytest.approx(0.0, abs=1e-6) and res["mean"]["kl_main_aux1"] > 0
    assert res["attention"][1]["mean"] == pytest.approx(0.0, abs=1e-6)
    assert len(res["sentences"][0]["kl_tokens"]) == 2


# --------------------------------------------------------------------------- recorder

TINY = dict(encoder_layers=2, decoder_layers=2, encoder_embed_dim=16, decoder_embed_dim=16,
            encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=4,
            decoder_attention_heads=4, dropout=0.0)


def _batch(model, B=3, S=6, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (B, S), generator=g)
    src[0, :2] = 1  # left padding
    lengths = src.ne(1).sum(-1)
    prev = torch.randint(4, 40, (B, T), generator=g)
    prev[:, 0] = 2
    return src, lengths, prev


def test_recorder_gets_per_head_maps_without_changing_outputs():
    model = build_model("transformer", **TINY)
    src, lengths, prev = _batch(model)
    with torch.no_grad():
        ref, _ = model(src, lengths, prev)
        mods = attention_modules(model)
        assert set(mods) == {f"{p}.layers.{i}.{a}" for p, a in (("encoder", "self_attn"), ("decoder", "self_attn"),
                                                                 ("decoder", "encoder_attn")) for i in (0, 1)}
        with AttentionRecorder(mods) as rec:
            out, extra = model(src, lengths, prev)
        maps = rec.pop()
    assert torch.allclose(out, ref, atol=1e-6)
    enc = maps["encoder.layers.0.self_attn"][0]
    assert enc.shape == (3, 4, 6, 6)
    assert torch.allclose(enc[1].sum(-1), torch.ones(4, 6), atol=1e-5)
    assert enc[0, :, :, :2].abs().max() == 0  # padded keys get no attention
    cross = maps["decoder.layers.1.encoder_attn"][0]
    assert cross.shape == (3, 4, 5, 6)
    # the last layer's head average is fairseq's own alignment attention
    assert torch.allclose(cross.mean(1), extra["attn"][0], atol=1e-5)
    dself = maps["decoder.layers.0.self_attn"][0]
    assert torch.triu(dself[0, 0], 1).abs().max() == 0  # causal
    # flags restored, hooks removed
    for m in mods.values():
        assert m.skip_embed_dim_check is False and not m._forward_hooks and not m._forward_pre_hooks
    assert layer_index("decoder.aux_decoders.0.layers.3.encoder_attn") == 4


def test_recorder_on_dc_and_mlmha_modules():
    dc = build_model("transformer_full_dc_bench", **TINY)
    src, lengths, prev = _batch(dc)
    mods = attention_modules(dc)
    with torch.no_grad(), AttentionRecorder(mods) as rec:
        dc(src, lengths, prev)
    maps = rec.pop()
    a = maps["encoder.layers.0.self_attn"][0]
    assert set(a) == {"fi_l", "fi_g"} and a["fi_g"].shape == (3, 4, 6, 6)
    assert maps["decoder.layers.1.self_attn"][0]["fi_l"].shape == (3, 4, 5, 5)
    assert all(m.export_attn is False and m.last_attn is None for m in mods.values() if hasattr(m, "export_attn"))

    jas = build_model("transformer_jas_m10_bench", **TINY, jas_top_n=2)
    with torch.no_grad(), AttentionRecorder(attention_modules(jas)) as rec:
        jas(src, lengths, prev)
    assert rec.pop()["decoder.layers.0.encoder_attn"][0].shape == (3, 2, 4, 5, 6)  # B n H T S


# --------------------------------------------------------------------------- CLI

DIMS = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
        "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]


def analysis(*args):
    return run([sys.executable, "-m", "fairseq_ext.tools.analysis.analysis", *args])


def _finite_csv(path, cols):
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for r in rows:
        for c in cols:
            assert math.isfinite(float(r[c])), (path, r)
    return rows


@pytest.fixture(scope="module")
def enc_dc_ckpt(tiny_bin, tmp_path_factory):
    # Enc-DC in encoder layer 1 only: layer 2 keeps standard self-attention
    return train(tiny_bin, tmp_path_factory.mktemp("encdc"),
                 ["--arch", "transformer_enc_dc_bench", *DIMS, "--encoder-dc-layers", "1"], max_update=4)


def test_cli_self_attn_export_and_dc_js(tiny_bin, enc_dc_ckpt, tmp_path):
    common = ["--path", enc_dc_ckpt, "--data", tiny_bin, "--subset", "test", "--cpu", "--batch-size", "8"]
    p = analysis("self-attn", *common, "--max-sentences", "20", "--out", tmp_path / "sa")
    assert "batch 3/3 done (20 sentences)" in p.stderr
    rows = _finite_csv(tmp_path / "sa" / "self_attn.csv", ["distance_causal", "entropy_causal",
                                                          "distance_full", "entropy_full"])
    kinds = {(r["layer"], r["kind"]) for r in rows}
    assert kinds == {("1", "fi_g"), ("1", "fi_l"), ("2", "self")}
    assert len([r for r in rows if r["layer"] == "2"]) == 5  # 4 heads + mean
    assert (tmp_path / "sa" / "self_attn.png").stat().st_size > 1000
    assert json.loads((tmp_path / "sa" / "self_attn.json").read_text())["sentences"] == 20

    analysis("export", *common, "--max-sentences", "10", "--random-sample", "--out", tmp_path / "ex",
             "--what", "enc-self,dec-self,cross,dc")
    b0 = torch.load(tmp_path / "ex" / "attn_00000.pt", weights_only=False)
    assert len(b0["ids"]) == 8 and (tmp_path / "ex" / "attn_00001.pt").exists()
    S = b0["src_tokens"].shape[1]
    T = b0["prev_output_tokens"].shape[1]
    assert b0["attn"]["encoder.layers.0.self_attn"]["fi_g"].shape == (8, 4, S, S)
    assert b0["attn"]["encoder.layers.1.self_attn"].shape == (8, 4, S, S)
    assert b0["attn"]["decoder.layers.1.encoder_attn"].shape == (8, 4, T, S)
    assert b0["attn"]["decoder.layers.0.self_attn"].shape == (8, 4, T, T)
    assert torch.isfinite(b0["attn"]["decoder.layers.1.encoder_attn"]).all()
    analysis("export", *common, "--max-sentences", "4", "--format", "npz", "--out", tmp_path / "npz")
    import numpy as np

    z = np.load(tmp_path / "npz" / "attn_00000.npz")
    assert z["attn.encoder.layers.0.self_attn.fi_l"].shape[:2] == (4, 4)

    p = analysis("dc-js", *common, "--max-sentences", "12", "--out", tmp_path / "js")
    rows = _finite_csv(tmp_path / "js" / "dc_js.csv", ["js", "js_head1"])
    assert [(r["side"], r["layer"]) for r in rows] == [("encoder", "1")]
    res = json.loads((tmp_path / "js" / "dc_js.json").read_text())
    assert 0 <= res["E_d"] <= math.log(2) and res["sentences"] == 12
    assert (tmp_path / "js" / "dc_js.png").stat().st_size > 1000


def test_cli_aif_kl(tiny_bin, tmp_path):
    ckpt = train(tiny_bin, tmp_path / "ms", ["--arch", "transformer_ms_aif_bench", *DIMS, "--encoder-layers", "3",
                                             "--aux-layers", "1,2"],
                 criterion="multi_supervision_label_smoothed", max_update=4,
                 extra=["--label-smoothing", "0.1", "--aux-weight", "1.0"])
    p = analysis("aif-kl", "--path", ckpt, "--data", tiny_bin, "--cpu", "--max-sentences", "10",
                 "--batch-size", "5", "--max-len-b", "12", "--out", tmp_path / "kl")
    assert "batch 2/2 done" in p.stderr
    out = tmp_path / "kl"
    rows = _finite_csv(out / "aif_kl_sentences.csv", ["kl_main_ind", "kl_main_aux1", "kl_main_aux2"])
    assert len(rows) == 10 and all(float(r["kl_main_ind"]) >= 0 for r in rows)
    assert any(float(r["kl_main_ind"]) > 0 for r in rows)  # AIF changes the distribution
    att = _finite_csv(out / "aif_kl_attention.csv", ["kl"])
    assert len(att) == 2 * 5  # 2 decoder layers x (4 heads + mean)
    summary = json.loads((out / "aif_kl.json").read_text())
    assert summary["prefix"] == "greedy" and summary["sentences"] == 10
    assert set(summary["mean"]) == {"kl_main_ind", "kl_main_aux1", "kl_main_aux2"}
    tok = [json.loads(l) for l in (out / "aif_kl_tokens.jsonl").read_text().splitlines()]
    assert len(tok) == 10 and all(len(t["tokens"]) == len(t["kl"]) for t in tok)
    assert (out / "aif_kl.png").stat().st_size > 1000
    # reference prefix
    analysis("aif-kl", "--path", ckpt, "--data", tiny_bin, "--cpu", "--max-sentences", "3",
             "--prefix", "reference", "--out", tmp_path / "kl_ref")
    assert json.loads((tmp_path / "kl_ref" / "aif_kl.json").read_text())["prefix"] == "reference"

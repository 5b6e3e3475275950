"""Encoder-based Multi-level Supervision + AIF (Ampomah thesis ch. 4), in process: auxiliary decoders, Eqs.
4.1-4.3, baseline equivalence, incremental decoding with AIF in beam search, generating from an aux decoder, the
ind-decoder, thesis parameter counts (Tables 4.6a, 5.2). The command lines are in
``test_multi_supervision_cli.py``."""
import math
import types

import pytest
import torch

import fairseq_ext  # noqa: F401  (registration)
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.logging import metrics
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.models.transformer import TransformerDecoderBase
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq_ext.criterions.multi_supervision_label_smoothed_cross_entropy import MultiSupervisionLabelSmoothedCriterion
from fairseq_ext.models.multi_supervision import AIFDecoderLayer, parse_generate_from
from fairseq_ext.modules.aif import AuxiliaryInformationFusion
from harness import (TINY_SHAPE, arch_args, beam_incremental, beam_toy_batch, build_model, make_dictionary, n_params,
                     toy_batch)
from thesis_sizes import AMPOMAH_IWSLT_EN_VI_VOCAB, AMPOMAH_WMT_VOCAB, assert_reported

TINY = dict(TINY_SHAPE, encoder_layers=4, share_all_embeddings=True)
NORMS = {"postnorm": {}, "prenorm": {"encoder_normalize_before": True, "decoder_normalize_before": True}}

build = build_model


batch = toy_batch


def forward(model, src, lengths, tgt):
    with torch.no_grad():
        return model(src, lengths, tgt)


def perturb_(module, seed=7):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g))


# --------------------------------------------------------------------------- registration, shapes


def test_registered_architectures_and_defaults():
    for base in ("bench", "iwslt_small", "wmt_en_de"):
        for kind, aif in (("ms", False), ("ms_aif", True)):
            arch = f"transformer_{kind}_{base}"
            assert ARCH_MODEL_REGISTRY[arch].__name__ == "TransformerMSModel"
            args = arch_args(arch)
            assert (args.aux_layers, args.aif, args.aif_disable, args.generate_from,
                    args.share_all_embeddings) == ("1", aif, False, "main", True)
    args = arch_args("transformer_ms_aif_bench")  # = TRANSFORMER_SMALL of recipes/bench
    assert (args.encoder_layers, args.decoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim,
            args.decoder_ffn_embed_dim, args.encoder_attention_heads, args.encoder_normalize_before,
            args.decoder_normalize_before, args.dropout) == (3, 3, 256, 1024, 1024, 4, True, True, 0.1)
    args = arch_args("transformer_ms_iwslt_small")
    assert (args.encoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim,
            args.encoder_normalize_before) == (4, 256, 1024, False)


def test_parse_generate_from_and_layer_validation():
    assert parse_generate_from("main", [1, 2]) is None and parse_generate_from(None, [1]) is None
    assert parse_generate_from("aux2", [1, 2]) == 1 == parse_generate_from("aux:2", [1, 2])
    assert parse_generate_from("AUX_1", [1, 2]) == 0
    for bad in ("aux3", "decoder", "aux"):
        with pytest.raises(ValueError):
            parse_generate_from(bad, [1, 2])
    with pytest.raises(ValueError):  # an aux decoder must sit below the top encoder layer (l < L)
        build("transformer_ms_bench", aux_layers="4", **TINY)
    with pytest.raises(ValueError):
        build("transformer_ms_bench", aux_layers="1", generate_from="aux2", **TINY)


@pytest.mark.parametrize("arch", ["transformer_ms_bench", "transformer_ms_aif_bench"])
def test_shapes_and_shared_modules(arch):
    model = build(arch, aux_layers="1,3", **TINY)
    dec = model.decoder
    assert dec.aux_layers == [1, 3] and len(dec.aux_decoders) == 2
    assert (dec.aif is not None) == arch.endswith("aif_bench")
    for aux in dec.aux_decoders:  # same structure; shared embeddings and output projection
        assert type(aux) is TransformerDecoderBase and len(aux.layers) == len(dec.layers) == 2
        assert aux.embed_tokens is dec.embed_tokens is model.encoder.embed_tokens
        assert aux.output_projection is dec.output_projection
        assert aux.output_projection.weight is dec.embed_tokens.weight
        assert aux.embed_positions is dec.embed_positions
    src, lengths, tgt = batch()
    enc = model.encoder(src, lengths)
    assert len(enc["aux_encoder_out"]) == 2 and enc["aux_encoder_out"][0].shape == (7, 3, 32)
    assert enc["encoder_states"] == []  # only kept when asked
    out, extra = forward(model, src, lengths, tgt)
    assert out.shape == (3, 6, 60) and torch.isfinite(out).all()
    assert extra["aux_layers"] == [1, 3] and [a.shape for a in extra["aux_out"]] == [(3, 6, 60)] * 2
    assert [f.shape for f in extra["aux_features"]] == [(3, 6, 32)] * 2


# --------------------------------------------------------------------------- baseline equivalence


@pytest.mark.parametrize("norm", sorted(NORMS))
@pytest.mark.parametrize("arch", ["transformer_ms_wmt_en_de", "transformer_ms_aif_wmt_en_de"])
def test_no_aux_layers_is_the_fairseq_transformer(arch, norm):
    dims = {**TINY, **NORMS[norm]}
    base = build("transformer", seed=1, **dims)
    ms = build(arch, seed=2, aux_layers="none", **dims)
    assert ms.decoder.aif is None and len(ms.decoder.aux_decoders) == 0
    assert n_params(ms) == n_params(base)
    ms.load_state_dict(base.state_dict(), strict=True)  # same parameter names and shapes
    src, lengths, tgt = batch()
    a, extra = forward(ms, src, lengths, tgt)
    assert torch.equal(a, forward(base, src, lengths, tgt)[0]) and "aux_out" not in extra
    assert torch.equal(beam_incremental(ms, src, lengths, tgt)[0], beam_incremental(base, src, lengths, tgt)[0])


def _load_baseline(ms, base):
    missing, unexpected = ms.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and all(k.startswith(("decoder.aux_decoders.", "decoder.aif.")) for k in missing)


@pytest.mark.parametrize("norm", sorted(NORMS))
def test_aux_decoders_leave_the_main_path_alone_without_aif(norm):
    """MS-l (no AIF): the aux decoders are extra heads; the main output is the baseline's."""
    dims = {**TINY, **NORMS[norm]}
    base = build("transformer", seed=1, **dims)
    ms = build("transformer_ms_iwslt_small", seed=2, aux_layers="1,2,3", **dims)
    _load_baseline(ms, base)
    src, lengths, tgt = batch()
    assert torch.equal(forward(ms, src, lengths, tgt)[0], forward(base, src, lengths, tgt)[0])
    inc, *_, state = beam_incremental(ms, src, lengths, tgt)
    assert torch.equal(inc, beam_incremental(base, src, lengths, tgt)[0])
    # no AIF: beam search never runs the aux decoders (decoding cost = baseline, Table 4.6a)
    aux_ids = {l.self_attn._incremental_state_id for a in ms.decoder.aux_decoders for l in a.layers}
    assert len(aux_ids) == 6 and not aux_ids & {k.split(".")[0] for k in state}


@pytest.mark.parametrize("norm", sorted(NORMS))
def test_ind_decoder_and_zero_aif_weights_recover_ms_l(norm):
    """Sec. 4.5.5 / Eq. 4.3: W_l^{a_i} = 0 (or --aif-disable) gives MS-l, i.e. the baseline's main
    path given the same weights."""
    dims = {**TINY, **NORMS[norm]}
    base = build("transformer", seed=1, **dims)
    aif = build("transformer_ms_aif_iwslt_small", seed=2, aux_layers="1,3", **dims)
    _load_baseline(aif, base)
    src, lengths, tgt = batch()
    ref = forward(base, src, lengths, tgt)[0]
    fused = forward(aif, src, lengths, tgt)[0]
    assert not torch.allclose(fused, ref, atol=1e-3)  # the fusion matters
    with aif.decoder.ind_decoder():
        assert torch.equal(forward(aif, src, lengths, tgt)[0], ref)
        assert torch.equal(beam_incremental(aif, src, lengths, tgt)[0], beam_incremental(base, src, lengths, tgt)[0])
    assert torch.equal(forward(aif, src, lengths, tgt)[0], fused)  # switched back on
    off = build("transformer_ms_aif_iwslt_small", aux_layers="1,3", aif_disable=True, **dims)
    off.load_state_dict(aif.state_dict())  # the override adds/removes no parameters
    assert torch.equal(forward(off, src, lengths, tgt)[0], ref)
    with torch.no_grad():
        aif.decoder.aif.weight.zero_()
    assert torch.allclose(forward(aif, src, lengths, tgt)[0], ref, atol=1e-6)
    zero = build("transformer_ms_aif_bench", aif_zero_init=True, **dims)
    assert zero.decoder.aif.weight.abs().max() == 0


def test_aux_decoder_l_depends_only_on_encoder_layers_up_to_l():
    """Fig. 4.2: Aux-Decoder l attends to H_e^l; perturbing encoder layers above l changes the main
    output but not Aux-Decoder l's (with AIF the fusion carries the aux states into the main path)."""
    model = build("transformer_ms_aif_bench", aux_layers="1,2", **TINY)
    src, lengths, tgt = batch()
    out, extra = forward(model, src, lengths, tgt)
    perturb_(model.encoder.layers[2])  # encoder layer 3 (of 4)
    out2, extra2 = forward(model, src, lengths, tgt)
    assert torch.equal(extra["aux_out"][0], extra2["aux_out"][0])
    assert torch.equal(extra["aux_out"][1], extra2["aux_out"][1])
    assert not torch.allclose(out, out2)
    perturb_(model.encoder.layers[1])  # encoder layer 2: Aux-Decoder 2 changes, Aux-Decoder 1 not
    _, extra3 = forward(model, src, lengths, tgt)
    assert torch.equal(extra["aux_out"][0], extra3["aux_out"][0])
    assert not torch.allclose(extra["aux_out"][1], extra3["aux_out"][1])
    # AIF carries main-decoder gradients into the aux decoders (no detach)
    model.train()
    model.decoder.dropout_module.p = 0.0
    o, _ = model(src, lengths, tgt)
    o.sum().backward()
    assert model.decoder.aux_decoders[0].layers[0].fc1.weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------- Eqs. 4.2-4.3


def test_aif_module_follows_eq_4_2():
    torch.manual_seed(0)
    n, d, L, B, T = 3, 16, 2, 2, 5
    aif = AuxiliaryInformationFusion(n, d, L)
    assert n_params(aif) == n * L * d * d  # bias-free W_l^{a_i} in R^{d x d}
    bound = math.sqrt(6 / (2 * d))  # Xavier per d x d block
    assert aif.weight.abs().max() <= bound and aif.weight.abs().max() > 0.8 * bound
    f = [torch.randn(B, T, d) for _ in range(n)]
    z = aif(f)
    assert z.shape == (L, T, B, d)
    for l in range(L):
        ref = sum(fi @ aif.block(l, i).t() for i, fi in enumerate(f))  # B T d
        assert torch.allclose(z[l], ref.transpose(0, 1), atol=1e-5)


@pytest.mark.parametrize("norm", sorted(NORMS))
def test_aif_layer_follows_eq_4_3(norm):
    """h^l <- h^l + z^f right after the masked self-attention sublayer (Fig. 4.4)."""
    from fairseq.models.transformer import TransformerConfig

    ns = arch_args("transformer", **{**TINY, **NORMS[norm]})
    cfg = TransformerConfig.from_namespace(ns)
    torch.manual_seed(0)
    layer = AIFDecoderLayer(cfg).eval()
    plain = TransformerDecoderLayerBase(cfg).eval()
    plain.load_state_dict(layer.state_dict(), strict=True)  # the layer itself has no new weights
    T, J, B, d = 4, 6, 2, 32
    x, enc, z = torch.randn(T, B, d), torch.randn(J, B, d), torch.randn(T, B, d)
    kpm = torch.zeros(B, J, dtype=torch.bool)
    kpm[1, :2] = True
    mask = torch.triu(torch.full((T, T), float("-inf")), 1)
    with torch.no_grad():
        a = layer(x, enc, kpm, self_attn_mask=mask)[0]
        assert torch.equal(a, plain(x, enc, kpm, self_attn_mask=mask)[0])
        got = layer(x, enc, kpm, self_attn_mask=mask, aif=z)[0]
        pre = layer.normalize_before
        ln = lambda m, v: m(v)  # noqa: E731
        # reference, sublayer by sublayer
        h = ln(layer.self_attn_layer_norm, x) if pre else x
        h = layer.self_attn(h, h, h, attn_mask=mask, need_weights=False)[0] + x
        h = h if pre else layer.self_attn_layer_norm(h)
        h = h + z  # Eq. 4.3
        e = layer.encoder_attn_layer_norm(h) if pre else h
        e = layer.encoder_attn(e, enc, enc, key_padding_mask=kpm, static_kv=True)[0] + h
        e = e if pre else layer.encoder_attn_layer_norm(e)
        f = layer.final_layer_norm(e) if pre else e
        f = layer.fc2(torch.relu(layer.fc1(f))) + e
        ref = f if pre else layer.final_layer_norm(f)
    assert torch.allclose(got, ref, atol=1e-5)


@pytest.mark.parametrize("norm", sorted(NORMS))
def test_aif_with_activation_checkpointing_gives_the_same_outputs_and_gradients(norm):
    """z^f reaches each Main-Decoder layer as a keyword argument (a forward pre-hook), so fairseq's
    activation checkpointing recomputes the layer with it and differentiates through it."""
    src, lengths, tgt = batch()
    results = []
    for checkpoint in (False, True):
        m = build("transformer_ms_aif_bench", aux_layers="1,2", seed=3, dropout=0.1,
                  checkpoint_activations=checkpoint, **{**TINY, **NORMS[norm]}).train()
        torch.manual_seed(0)
        out, extra = m(src, lengths, tgt)
        (out.logsumexp(-1).sum() + sum(a.logsumexp(-1).sum() for a in extra["aux_out"])).backward()
        grads = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
        results.append((out.detach(), grads))
    (out, grads), (out_ck, grads_ck) = results
    assert torch.equal(out, out_ck) and grads.keys() == grads_ck.keys()
    assert any(n.startswith("decoder.aif.") for n in grads)
    assert all(torch.allclose(grads[n], grads_ck[n], atol=1e-5) for n in grads)


# --------------------------------------------------------------------------- criterion (Eq. 4.1)


def _criterion(cls, gamma=None, eps=0.1):
    task = types.SimpleNamespace(target_dictionary=make_dictionary(60))
    kw = {} if gamma is None else {"aux_weight": gamma}
    return cls(task, sentence_avg=False, label_smoothing=eps, report_accuracy=True, **kw)


def _sample(seed=1):
    src, lengths, tgt = batch(seed=seed)
    target = torch.cat([tgt[:, 1:], torch.full((3, 1), 2)], 1)
    target[0, -2:] = 1  # padding in the target
    tgt[0, -1] = 1
    return {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": tgt},
            "target": target, "ntokens": int(target.ne(1).sum())}


def _ls_loss(logits, target, eps=0.1, pad=1):
    """Label-smoothed CE written out: (1-eps-eps/(V-1)) nll + eps/(V-1) sum_v -log p_v."""
    lp = torch.log_softmax(logits.float(), -1)
    V = lp.size(-1)
    keep = target.ne(pad)
    nll = -lp.gather(-1, target.unsqueeze(-1)).squeeze(-1)[keep].sum()
    smooth = -lp.sum(-1)[keep].sum()
    e = eps / (V - 1)
    return (1 - eps - e) * nll + e * smooth, nll


@pytest.mark.parametrize("arch", ["transformer_ms_bench", "transformer_ms_aif_bench"])
def test_criterion_is_main_plus_gamma_sum_aux(arch):
    model = build(arch, aux_layers="1,3", **TINY)
    sample = _sample()
    gamma = 0.7
    crit = _criterion(MultiSupervisionLabelSmoothedCriterion, gamma)
    with torch.no_grad():
        loss, sample_size, log = crit(model, sample)
        out, extra = model(**sample["net_input"])
    main, main_nll = _ls_loss(out, sample["target"])
    aux = [_ls_loss(a, sample["target"]) for a in extra["aux_out"]]
    assert torch.allclose(loss, main + gamma * (aux[0][0] + aux[1][0]), atol=1e-4)
    assert sample_size == sample["ntokens"]
    assert torch.allclose(log["loss_main"], main, atol=1e-4)
    assert torch.allclose(log["nll_loss"], main_nll, atol=1e-4)
    for (a, a_nll), layer in zip(aux, (1, 3)):
        assert torch.allclose(log[f"loss_aux{layer}"], a, atol=1e-4)
        assert torch.allclose(log[f"nll_loss_aux{layer}"], a_nll, atol=1e-4)
    with metrics.aggregate() as agg:
        MultiSupervisionLabelSmoothedCriterion.reduce_metrics([log, log])
    vals = agg.get_smoothed_values()
    for k in ("loss", "nll_loss", "ppl", "accuracy", "loss_main", "loss_aux1", "loss_aux3",
              "nll_loss_aux1", "nll_loss_aux3"):
        assert k in vals, k
    assert abs(vals["loss_aux3"] - float(aux[1][0]) / sample_size / math.log(2)) < 1e-3
    assert abs(vals["nll_loss_aux1"] - float(aux[0][1]) / sample["ntokens"] / math.log(2)) < 1e-3


def test_gamma_zero_is_the_baseline_objective():
    """gamma = 0 on MS-l: loss and every shared gradient equal the baseline transformer's."""
    base = build("transformer", seed=1, **TINY).train()
    ms = build("transformer_ms_iwslt_small", seed=2, aux_layers="1,2", **TINY).train()
    _load_baseline(ms, base)
    for m in (base, ms):  # deterministic training forward
        for mod in m.modules():
            if hasattr(mod, "p") and isinstance(getattr(mod, "p"), float):
                mod.p = 0.0
    sample = _sample()
    l_ms, _, log = _criterion(MultiSupervisionLabelSmoothedCriterion, 0.0)(ms, sample)
    l_base, _, log_base = _criterion(LabelSmoothedCrossEntropyCriterion)(base, sample)
    assert torch.equal(l_ms, l_base) and torch.equal(log["nll_loss"], log_base["nll_loss"])
    assert log["loss_aux1"] > 0  # still logged
    l_ms.backward(), l_base.backward()
    params = dict(ms.named_parameters())
    for name, p in base.named_parameters():
        assert torch.equal(params[name].grad, p.grad), name
    aux_grads = [p.grad for n, p in ms.named_parameters() if ".aux_decoders." in n and "embed" not in n]
    assert all(g is None or g.abs().max() == 0 for g in aux_grads)


def test_criterion_on_a_plain_transformer_is_label_smoothed_ce():
    model = build("transformer", **TINY)
    sample = _sample()
    with torch.no_grad():
        a, _, la = _criterion(MultiSupervisionLabelSmoothedCriterion, 1.0)(model, sample)
        b, _, lb = _criterion(LabelSmoothedCrossEntropyCriterion)(model, sample)
    assert torch.equal(a, b) and set(la) == set(lb)


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("norm", sorted(NORMS))
@pytest.mark.parametrize("arch,aux", [("transformer_ms_aif_bench", "1"),
                                      ("transformer_ms_aif_iwslt_small", "1,2,3"),
                                      ("transformer_ms_iwslt_small", "2")])
def test_incremental_equals_full_decoding(arch, aux, norm):
    model = build(arch, aux_layers=aux, **{**TINY, **NORMS[norm]})
    src, lengths, tgt = beam_toy_batch()
    inc, src2, len2, tgt2, state = beam_incremental(model, src, lengths, tgt, beam=3)
    full = forward(model, src2, len2, tgt2)[0]
    assert inc.dtype == torch.float32 and (inc - full).abs().max() < 1e-5
    if model.decoder.aif is not None:  # the aux decoders ran incrementally, with their own caches
        ids = {l.self_attn._incremental_state_id for a in model.decoder.aux_decoders for l in a.layers}
        assert ids <= {k.split(".")[0] for k in state}


@pytest.mark.parametrize("arch", ["transformer_ms_bench", "transformer_ms_aif_bench"])
def test_generate_from_aux_decoder(arch):
    ref = build(arch, aux_layers="1,2", **TINY)
    src, lengths, tgt = beam_toy_batch()
    _, extra = forward(ref, src, lengths, tgt)
    m = build(arch, aux_layers="1,2", generate_from="aux2", **TINY)
    m.load_state_dict(ref.state_dict())
    out, _ = forward(m, src, lengths, tgt)
    assert torch.equal(out, extra["aux_out"][1])
    inc, src2, len2, tgt2, _ = beam_incremental(m, src, lengths, tgt, beam=3)
    assert (inc - forward(m, src2, len2, tgt2)[0]).abs().max() < 1e-5


@pytest.mark.parametrize("arch", ["transformer_ms_bench", "transformer_ms_aif_bench"])
def test_causality(arch):
    model = build(arch, aux_layers="1,3", **TINY)
    src, lengths, tgt = batch()
    out, extra = forward(model, src, lengths, tgt)
    tgt2 = tgt.clone()
    tgt2[:, 4:] = torch.randint(4, 60, tgt2[:, 4:].shape)
    out2, extra2 = forward(model, src, lengths, tgt2)
    assert torch.equal(out[:, :4], out2[:, :4]) and not torch.allclose(out[:, 4:], out2[:, 4:])
    for a, b in zip(extra["aux_out"], extra2["aux_out"]):
        assert torch.equal(a[:, :4], b[:, :4]) and not torch.allclose(a[:, 4:], b[:, 4:])


# --------------------------------------------------------------------------- thesis parameter counts

V_WMT, V_VI = AMPOMAH_WMT_VOCAB, AMPOMAH_IWSLT_EN_VI_VOCAB  # one V per setting, shared (tests/thesis_sizes.py)


def _layers(d, F):
    enc = 4 * (d * d + d) + (d * F + F) + (F * d + d) + 4 * d
    dec = 8 * (d * d + d) + (d * F + F) + (F * d + d) + 6 * d
    return enc, dec


def meta_count(arch, vocab, **kw):
    return n_params(build_model(arch, vocab, device="meta", **kw))


def test_wmt_parameter_counts():
    """Table 5.2: MS-4 86.5M, MS-1+AIF 88.0M (baseline 61.2M); Table 4.4 MS-1..MS-5 all alike."""
    enc, dec = _layers(512, 2048)
    base = V_WMT * 512 + 6 * (enc + dec)
    for l in range(1, 6):
        c = meta_count("transformer_ms_wmt_en_de", V_WMT, aux_layers=str(l))
        assert c == base + 6 * dec
        assert_reported(c, 86.5, what=f"MS-{l}")
    c = meta_count("transformer_ms_aif_wmt_en_de", V_WMT, aux_layers="1")
    assert c == base + 6 * dec + 6 * 512 * 512
    assert_reported(c, 88.0, what="MS-1+AIF")


def test_iwslt_parameter_counts_table_4_6a():
    """En-Vi, 0-3 aux decoders with and without AIF: 12.8 / 17.0, 17.3 / 21.2, 21.7 / 25.4, 26.2M.

    Each aux decoder adds 4 decoder layers (+4.21M), AIF adds 4*256^2 (+0.262M) per aux decoder.
    The joint vocabulary is only given as ~21k: V_VI (see tests/thesis_sizes.py) puts every entry
    within the table's rounding, no exception."""
    enc, dec = _layers(256, 1024)
    base = V_VI * 256 + 4 * (enc + dec)
    assert meta_count("transformer_iwslt_small", V_VI) == base
    assert_reported(base, 12.8, what="baseline")
    table = {"1": (17.0, 17.3), "1,2": (21.2, 21.7), "1,2,3": (25.4, 26.2)}
    for aux, (ms, ms_aif) in table.items():
        n = len(aux.split(","))
        c = meta_count("transformer_ms_iwslt_small", V_VI, aux_layers=aux)
        assert c == base + n * 4 * dec, aux
        assert_reported(c, ms, what=f"MS {aux}")
        c = meta_count("transformer_ms_aif_iwslt_small", V_VI, aux_layers=aux)
        assert c == base + n * 4 * dec + n * 4 * 256 * 256, aux
        assert_reported(c, ms_aif, what=f"MS {aux} + AIF")
    # other attachment layers cost the same (MS-13, MS-23)
    assert meta_count("transformer_ms_iwslt_small", V_VI, aux_layers="2,3") == base + 2 * 4 * dec


def test_bench_parameter_counts():
    """PreNorm 3+3: each aux decoder also has its final LayerNorm (2d)."""
    enc, dec = _layers(256, 1024)
    V = 8000
    base = meta_count("transformer", V, encoder_layers=3, decoder_layers=3, encoder_embed_dim=256,
                      decoder_embed_dim=256, encoder_ffn_embed_dim=1024, decoder_ffn_embed_dim=1024,
                      encoder_attention_heads=4, decoder_attention_heads=4, share_all_embeddings=True,
                      encoder_normalize_before=True, decoder_normalize_before=True)
    assert base == V * 256 + 3 * (enc + dec) + 2 * 2 * 256
    assert meta_count("transformer_ms_bench", V, aux_layers="none") == base
    assert meta_count("transformer_ms_bench", V, aux_layers="1,2") == base + 2 * (3 * dec + 2 * 256)
    assert meta_count("transformer_ms_aif_bench", V) == base + 3 * dec + 2 * 256 + 3 * 256 * 256

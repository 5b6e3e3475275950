"""Maruf (2019) ch. 4, the models in process: ``transformer_selattn`` (encoder and decoder integration, incremental
decoding), the warm start from a sentence checkpoint, the parameter overhead of Table 4.5, and the Zhang et al.
(2018) baseline ``transformer_zhang2018``."""
import logging

import pytest
import torch

import fairseq_ext  # noqa: F401  (registration)
from harness import TINY_SHAPE, build_model, n_params, toy_batch, train_parse

V = 60
PAD, EOS = 1, 2
# a 2+2-layer d=32 shape on top of the bench archs (PreNorm, all embeddings shared)
SMALL = TINY_SHAPE


def small(arch, **kw):
    return build_model(arch, vocab=V, **{**SMALL, **kw})


def doc_batch(seed=1):
    """B=3 batch sentences, E=2 extra rows (N=5); sentence 0 sees rows 1 and 3, sentence 1 sees rows
    0, 2 and 4, sentence 2 has no context. ``ctx_tgt_tokens`` has one right-padded row per N-set row."""
    src, lengths, prev = toy_batch(bsz=3, vocab=V, seed=seed)
    g = torch.Generator().manual_seed(seed + 10)
    ctx_src = torch.randint(4, V, (2, 5), generator=g)
    ctx_src[:, -1] = EOS
    ctx_src[0, :2] = PAD
    tgt = torch.randint(4, V, (5, 6), generator=g)
    tgt[:, -1] = EOS
    tgt[1, 3], tgt[1, 4:] = EOS, PAD
    ctx = dict(ctx_src_tokens=ctx_src, ctx_src_lengths=ctx_src.ne(PAD).sum(1),
               ctx_index=torch.tensor([[1, 3, -1], [0, 2, 4], [-1, -1, -1]]),
               ctx_distance=torch.tensor([[-1, 2, 0], [-1, 1, -2], [0, 0, 0]]),
               ctx_tgt_tokens=tgt, ctx_tgt_lengths=tgt.ne(PAD).sum(1))
    return src, lengths, prev, ctx


# ----------------------------------------------------------------------------- the model
ENC_ARCHS = ["transformer_selattn_enc_hier_sparsesoft_bench", "transformer_selattn_enc_hier_sparsesparse_bench",
             "transformer_selattn_enc_sent_bench", "transformer_selattn_enc_word_bench"]
DEC_ARCHS = ["transformer_selattn_dec_hier_sparsesoft_bench", "transformer_selattn_dec_hier_sparsesparse_bench",
             "transformer_selattn_dec_sent_bench", "transformer_selattn_dec_word_bench"]


@pytest.mark.parametrize("model_name,arch", [("transformer_selattn", "transformer_selattn_enc_hier_sparsesoft_bench"),
                                             ("transformer_zhang2018", "transformer_zhang2018_bench")])
def test_ctx_integration_is_encoder_or_decoder_never_both(model_name, arch, tiny_bin, capsys):
    """Footnote 8 (the context enters the encoder (Fig. 4.3) or the decoder (Fig. 4.4), never both): one
    ``--ctx-integration`` option whose only choices are encoder and decoder; fairseq-train's parser accepts each and
    refuses both/anything else (argparse: exit 2, "invalid choice"); the model built with either value has its
    context attention and gate on that side only."""
    import argparse

    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    parser = argparse.ArgumentParser()
    MODEL_REGISTRY[model_name].add_args(parser)
    actions = [a for a in parser._actions if a.dest == "ctx_integration"]
    assert len(actions) == 1 and actions[0].option_strings == ["--ctx-integration"]
    assert tuple(actions[0].choices) == ("encoder", "decoder") and actions[0].nargs is None
    assert ARCH_MODEL_REGISTRY[arch] is MODEL_REGISTRY[model_name]
    base = [str(tiny_bin), "--task", "doc_translation", "--arch", arch]
    for value in ("encoder", "decoder"):
        args = train_parse(*base, "--ctx-integration", value)
        assert args.ctx_integration == value
        model = small(arch, ctx_integration=value)
        sides = {n.split(".")[0] for n, _ in model.named_parameters()
                 if any(f".{m}" in n for m in ("ctx_layer.", "ctx_gate.", "ctx_attn."))}
        assert sides == {value}, (value, sides)
    capsys.readouterr()
    for bad in ("both", "encoder,decoder", "none"):
        with pytest.raises(SystemExit) as e:
            train_parse(*base, "--ctx-integration", bad)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--ctx-integration: invalid choice" in err and repr(bad) in err


def logits(model, src, lengths, prev, ctx):
    return model(src, lengths, prev, **ctx)[0]


@pytest.mark.parametrize("arch", ENC_ARCHS + DEC_ARCHS)
@pytest.mark.parametrize("rep", ["pretrained", "current"])
def test_context_outside_ctx_index_does_not_matter(arch, rep):
    model = small(arch, ctx_rep_model=rep)
    src, lengths, prev, ctx = doc_batch()
    out = logits(model, src, lengths, prev, ctx)
    assert torch.isfinite(out).all()
    changed = dict(ctx, ctx_src_tokens=ctx["ctx_src_tokens"].clone(), ctx_tgt_tokens=ctx["ctx_tgt_tokens"].clone())
    changed["ctx_src_tokens"][0, 2:4] = torch.tensor([5, 6])  # N-set row 3: only sentence 0's context
    changed["ctx_tgt_tokens"][3, :2] = torch.tensor([7, 8])
    out2 = logits(model, src, lengths, prev, changed)
    assert torch.allclose(out[1:], out2[1:], atol=1e-5)
    assert not torch.allclose(out[0], out2[0], atol=1e-4)


@pytest.mark.parametrize("arch", ["transformer_selattn_enc_hier_sparsesoft_bench", "transformer_selattn_dec_hier_sparsesparse_bench",
                                  "transformer_selattn_enc_word_bench", "transformer_selattn_dec_sent_bench"])
def test_output_invariant_to_batch_permutation(arch):
    model = small(arch)
    src, lengths, prev, ctx = doc_batch()
    out = logits(model, src, lengths, prev, ctx)
    perm = torch.tensor([2, 0, 1])
    inv = torch.argsort(perm)
    idx = ctx["ctx_index"][perm]
    idx = torch.where((idx >= 0) & (idx < 3), inv[idx.clamp(0, 2)], idx)
    tgt = torch.cat([ctx["ctx_tgt_tokens"][:3][perm], ctx["ctx_tgt_tokens"][3:]])
    ctx_p = dict(ctx, ctx_index=idx, ctx_distance=ctx["ctx_distance"][perm], ctx_tgt_tokens=tgt,
                 ctx_tgt_lengths=tgt.ne(PAD).sum(1))
    out_p = logits(model, src[perm], lengths[perm], prev[perm], ctx_p)
    assert torch.allclose(out_p, out[perm], atol=1e-5)


def incremental(model, src, lengths, prev, ctx):
    """Step-by-step decoding as fairseq's beam search drives it: every sentence expanded to a beam of
    2, the beams reordered within each sentence at step 2, sentence 1 finished (dropped) at step 4;
    returns the logits and the batch rows they belong to."""
    rows = torch.tensor([0, 0, 1, 1, 2, 2])
    enc = model.encoder.reorder_encoder_out(model.encoder(src, src_lengths=lengths, **ctx), rows)
    state, outs = {}, []
    for t in range(prev.size(1)):
        new_order = {2: torch.tensor([1, 1, 3, 2, 5, 4]), 4: torch.tensor([0, 1, 4, 5])}.get(t)
        if new_order is not None:
            model.decoder.reorder_incremental_state_scripting(state, new_order)
            enc = model.encoder.reorder_encoder_out(enc, new_order)
            rows = rows[new_order]
            outs = [o[new_order] for o in outs]
        outs.append(model.decoder(prev[rows][:, : t + 1], encoder_out=enc, incremental_state=state)[0])
    return torch.cat(outs, 1), rows


@pytest.mark.parametrize("arch", DEC_ARCHS + ["transformer_selattn_enc_hier_sparsesoft_bench"])
@pytest.mark.parametrize("rep", ["pretrained", "current"])
@pytest.mark.parametrize("prenorm", [True, False])
def test_incremental_decoding_equals_full(arch, rep, prenorm):
    model = small(arch, ctx_rep_model=rep, encoder_normalize_before=prenorm, decoder_normalize_before=prenorm)
    src, lengths, prev, ctx = doc_batch()
    full = logits(model, src, lengths, prev, ctx)
    inc, rows = incremental(model, src, lengths, prev, ctx)
    assert torch.allclose(inc, full[rows], atol=1e-5)


def test_decoder_queries_and_keys_are_source_attention_outputs():
    """Decoder integration: the tap is the last layer's source-attention sub-layer output
    (post-residual, post-LayerNorm under PostNorm)."""
    model = small("transformer_selattn_dec_hier_sparsesoft_bench", encoder_normalize_before=False,
                  decoder_normalize_before=False)
    layer = model.decoder.layers[-1]
    seen = {}
    layer.encoder_attn_layer_norm.register_forward_hook(lambda m, i, o: seen.setdefault("y", o))
    src, lengths, prev, _ = doc_batch()
    model.decoder.sentence_features(prev, model.encoder(src, src_lengths=lengths))
    assert seen["y"] is not None
    torch.testing.assert_close(model.decoder.sentence_features(prev, model.encoder(src, src_lengths=lengths))[1],
                               seen["y"].transpose(0, 1))


# ----------------------------------------------------------------------------- warm start / reduction
def sentence_and_doc(arch, **kw):
    sent = small("transformer_maruf_base_bench", seed=3)
    doc = small(arch, seed=4, **kw)
    return sent, doc


@pytest.mark.parametrize("arch", ["transformer_selattn_enc_hier_sparsesoft_bench", "transformer_selattn_dec_word_bench"])
def test_warm_start_copies_reports_and_fills_the_frozen_copy(arch, caplog):
    sent, doc = sentence_and_doc(arch)
    before = {k: v.clone() for k, v in doc.state_dict().items() if ".ctx_layer." in k or ".ctx_gate." in k}
    with caplog.at_level(logging.INFO, logger="fairseq_ext.modules.warm_start"):
        doc.load_state_dict(sent.state_dict())
    msg = [r.getMessage() for r in caplog.records if "warm start" in r.getMessage()]
    assert len(msg) == 1 and f"copied {len(sent.state_dict())} tensors" in msg[0]
    assert "ctx_layer" in msg[0] and "ctx_gate" in msg[0]
    state = doc.state_dict()
    for k, v in sent.state_dict().items():
        assert torch.equal(state[k], v), k
    for k, v in before.items():
        assert torch.equal(state[k], v), k
    # the frozen sentence model now is the sentence model
    for k, v in sent.encoder.state_dict().items():
        assert torch.equal(doc.encoder.ctx_rep_encoder.state_dict()[k], v), k
    assert bool(doc.encoder.ctx_rep_filled)
    assert not any(p.requires_grad for p in doc.encoder.ctx_rep_encoder.parameters())
    if doc.decoder.ctx_rep_decoder is not None:
        for k, v in sent.decoder.state_dict().items():
            assert torch.equal(doc.decoder.ctx_rep_decoder.state_dict()[k], v), k
    doc.train()
    assert not doc.encoder.ctx_rep_encoder.training
    # a document checkpoint loads strictly, as in fairseq
    again = small(arch, seed=5)
    again.load_state_dict(doc.state_dict())
    for k, v in doc.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k
    del state["encoder.ctx_gate.w_r.weight" if "_enc_" in arch else "decoder.ctx_gate.w_r.weight"]
    with pytest.raises(RuntimeError, match="Missing key"):
        small(arch).load_state_dict(state)


def test_warm_start_rejects_other_mismatches():
    sent, doc = sentence_and_doc("transformer_selattn_enc_sent_bench")
    state = sent.state_dict()
    state["encoder.some_new_thing"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match="unexpected"):
        doc.load_state_dict(state)
    wrong = small("transformer_maruf_base_bench", encoder_ffn_embed_dim=48)
    with pytest.raises(RuntimeError, match="size mismatch"):
        doc.load_state_dict(wrong.state_dict())


@pytest.mark.parametrize("arch", ["transformer_selattn_enc_hier_sparsesparse_bench", "transformer_selattn_dec_hier_sparsesoft_bench"])
def test_no_context_reduces_to_the_sentence_model(arch):
    """With --empty-context identity and no context (K=0, or every entry -1) a warm-started model is
    exactly its sentence model; with the default (zero) the gate sees c = 0: r~ = sigmoid(W_r r) r."""
    sent, doc = sentence_and_doc(arch, empty_context="identity")
    doc.load_state_dict(sent.state_dict())
    src, lengths, prev, ctx = doc_batch()
    expected = sent(src, lengths, prev)[0]
    assert torch.equal(doc(src, lengths, prev)[0], expected)
    none = dict(ctx, ctx_index=ctx["ctx_index"][:, :0], ctx_distance=ctx["ctx_distance"][:, :0])
    assert torch.equal(logits(doc, src, lengths, prev, none), expected)
    masked = dict(ctx, ctx_index=torch.full_like(ctx["ctx_index"], -1))
    assert torch.equal(logits(doc, src, lengths, prev, masked), expected)
    assert torch.equal(logits(doc, src, lengths, prev, ctx)[2], expected[2])  # sentence 2: no context
    # default zero context vector
    zero = small(arch, seed=4)
    zero.load_state_dict(sent.state_dict())
    if "_enc_" in arch:
        r = sent.encoder(src, src_lengths=lengths)["encoder_out"][0]
        g = torch.sigmoid(zero.encoder.ctx_gate.w_r(r))
        enc = sent.encoder(src, src_lengths=lengths)
        enc["encoder_out"] = [g * r]
        expected_zero = sent.decoder(prev, encoder_out=enc)[0]
    else:
        x, _ = sent.decoder.extract_features(prev, sent.encoder(src, src_lengths=lengths))
        expected_zero = sent.decoder.output_layer(torch.sigmoid(zero.decoder.ctx_gate.w_r(x)) * x)
    torch.testing.assert_close(logits(zero, src, lengths, prev, none), expected_zero)
    assert torch.isfinite(logits(zero, src, lengths, prev, masked)).all()


def test_context_vectors_come_from_the_frozen_pretrained_copy():
    """pretrained: changing the trainable sentence encoder leaves the context keys/values alone
    (only the queries change); current: they follow the model."""
    src, lengths, _, ctx = doc_batch()
    for rep, same in (("pretrained", True), ("current", False)):
        model = small("transformer_selattn_enc_hier_sparsesoft_bench", ctx_rep_model=rep)
        enc = model.encoder

        def memory():
            out = enc(src, src_lengths=lengths)
            return enc.sentence_set(out, src, ctx["ctx_src_tokens"], ctx["ctx_src_lengths"])[0]

        before = memory()
        with torch.no_grad():
            enc.layers[0].fc2.weight.add_(0.5)
        assert torch.equal(before, memory()) == same


# ----------------------------------------------------------------------------- sizes
def count_trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_parameter_overhead_matches_table_4_5():
    """News: Transformer 50M; +Attention 53.7M (+4d² attention + 2·d·d_ff FFN + 2d² gate, plus the
    FFN biases and the two LayerNorms of the context layer); +H-Attention 54.2M (+2d² for Q_s, K_s).
    A 20k-type source and target vocabulary gives the 50M of the thesis."""
    d, f, vocab = 512, 2048, 20000
    base = n_params(build_model("transformer_maruf_base", vocab=vocab, device="meta"))
    assert 49.5e6 < base < 50.5e6
    flat = 4 * d * d + (2 * d * f + f + d) + 2 * (2 * d) + 2 * d * d
    for arch, extra, table in [("transformer_selattn_enc_sent", flat, 53.7e6), ("transformer_selattn_enc_word", flat, 53.7e6),
                               ("transformer_selattn_enc_hier_sparsesoft", flat + 2 * d * d, 54.2e6),
                               ("transformer_selattn_dec_hier_sparsesparse", flat + 2 * d * d, 54.2e6)]:
        model = build_model(arch, vocab=vocab, device="meta")
        assert model.new_parameter_count() == extra, arch
        assert count_trainable(model) == base + extra, arch
        assert abs(count_trainable(model) - table) < 0.15e6, arch


# ----------------------------------------------------------------------------- Zhang et al. 2018
@pytest.mark.parametrize("integration", ["encoder", "decoder"])
@pytest.mark.parametrize("prenorm", [True, False])
def test_zhang2018_warm_start_freeze_and_incremental(integration, prenorm):
    kw = dict(ctx_integration=integration, encoder_normalize_before=prenorm, decoder_normalize_before=prenorm)
    sent = small("transformer_maruf_base_bench", seed=3, encoder_normalize_before=prenorm,
                 decoder_normalize_before=prenorm)
    model = small("transformer_zhang2018_bench", seed=4, **kw)
    model.load_state_dict(sent.state_dict())
    # shared word embeddings: the context encoder reads the checkpoint's
    assert model.encoder.ctx_encoder.embed_tokens is model.encoder.embed_tokens
    assert torch.equal(model.encoder.embed_tokens.weight, sent.encoder.embed_tokens.weight)
    assert len(model.encoder.ctx_encoder.layers) == len(model.encoder.layers)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert set(frozen) == {n for n, _ in sent.named_parameters()}
    assert trainable and all(model.is_doc_key(n) for n in trainable)
    assert all(p.requires_grad for p in small("transformer_zhang2018_bench",
                                              freeze_sentence_params=False).parameters())
    src, lengths, prev, ctx = doc_batch()
    full = logits(model, src, lengths, prev, ctx)
    inc, rows = incremental(model, src, lengths, prev, ctx)
    assert torch.allclose(inc, full[rows], atol=1e-5)
    # only the two previous sentences count: sentence 1 reads rows 0 (-1) and 4 (-2), not row 2 (+1)
    changed = dict(ctx, ctx_src_tokens=ctx["ctx_src_tokens"].clone())
    changed["ctx_src_tokens"][0, 3] = 9  # row 3 = sentence 0's context at distance +2
    assert torch.equal(logits(model, src, lengths, prev, changed), full)
    changed["ctx_src_tokens"][1, 0] = 9  # row 4 = sentence 1's context at distance -2
    out = logits(model, src, lengths, prev, changed)
    assert not torch.allclose(out[1], full[1]) and torch.equal(out[[0, 2]], full[[0, 2]])


def test_zhang2018_postnorm_copy_runs_its_own_context_sublayer():
    """PostNorm places the context sub-layer after ``self_attn_layer_norm`` by a forward hook: a deep copy
    of the model (as ``--quantize int8`` and EMA make) must call the copy's sub-layer, not the original's."""
    import copy

    for integration in ("encoder", "decoder"):
        model = small("transformer_zhang2018_bench", seed=4, ctx_integration=integration,
                      encoder_normalize_before=False, decoder_normalize_before=False).eval()
        src, lengths, prev, ctx = doc_batch()
        full = logits(model, src, lengths, prev, ctx)
        twin = copy.deepcopy(model)
        assert torch.equal(logits(twin, src, lengths, prev, ctx), full)
        with torch.no_grad():  # change the original's context sub-layers only
            for m in model.modules():
                if hasattr(m, "ctx_gate"):
                    for p in m.ctx_gate.parameters():
                        p.add_(1.0)
        assert not torch.allclose(logits(model, src, lengths, prev, ctx), full), integration
        assert torch.equal(logits(twin, src, lengths, prev, ctx), full), integration


def test_zhang2018_previous_sentences_input():
    model = small("transformer_zhang2018_bench")
    src, _, _, ctx = doc_batch()
    tokens = model.encoder.previous_sentences(src, ctx["ctx_src_tokens"], ctx["ctx_index"], ctx["ctx_distance"])
    strip = [t[t.ne(PAD)] for t in tokens]
    assert torch.equal(strip[0], src[1][src[1].ne(PAD)])                     # only distance -1
    row4 = ctx["ctx_src_tokens"][1]
    assert torch.equal(strip[1], torch.cat([row4[row4.ne(PAD)], src[0][src[0].ne(PAD)]]))  # -2 then -1
    assert strip[2].tolist() == [EOS]                                        # no context: a lone EOS

"""Maruf (2019) ch. 4: sparsemax, hierarchical / flat context attention, the Document-level Context
Layer and gate, ``transformer_selattn`` (encoder and decoder integration), the warm start from a
sentence checkpoint, and the Zhang et al. (2018) baseline ``transformer_zhang2018``."""
import logging

import pytest
import torch

import fairseq_ext  # noqa: F401  (registration)
from fairseq_ext.modules.doc_attention import (
    ContextGate,
    DocContext,
    DocContextLayer,
    HierarchicalMultiheadAttention,
    SentenceMultiheadAttention,
    WordMultiheadAttention,
    masked_softmax,
    sparsemax,
)
from harness import build_model, fairseq, generate, hypotheses, n_lines, n_params, toy_batch, train

V = 60
PAD, EOS = 1, 2
# a 2+2-layer d=32 shape on top of the bench archs (PreNorm, all embeddings shared)
SMALL = dict(encoder_layers=2, decoder_layers=2, encoder_embed_dim=32, decoder_embed_dim=32,
             encoder_ffn_embed_dim=64, decoder_ffn_embed_dim=64, encoder_attention_heads=4,
             decoder_attention_heads=4)


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


# ----------------------------------------------------------------------------- sparsemax
def test_sparsemax_simplex_exact_zeros_and_masking():
    torch.manual_seed(0)
    x = torch.randn(4, 7) * 3
    mask = torch.rand(4, 7) > 0.3
    mask[:, 0] = True
    p = sparsemax(x, mask)
    assert torch.allclose(p.sum(-1), torch.ones(4), atol=1e-6)
    assert (p >= 0).all() and (p[~mask] == 0).all()
    assert (sparsemax(torch.tensor([[5.0, 0.0, -1.0]])) == torch.tensor([[1.0, 0.0, 0.0]])).all()
    assert (p == 0).any()  # sparse
    # fp16 scores are normalised in fp32 and returned in fp16
    assert sparsemax(x.half(), mask).dtype == torch.float16


def test_sparsemax_gradcheck_and_all_masked_row():
    torch.manual_seed(0)
    x = torch.randn(3, 6, dtype=torch.double, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 1, 1], [1, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda z: sparsemax(z, mask), (x,))
    assert torch.autograd.gradcheck(lambda z: masked_softmax(z, mask), (x,))
    for fn in (sparsemax, masked_softmax):
        p = fn(x, mask)
        assert (p[2] == 0).all() and (p[:2][~mask[:2]] == 0).all()
        (p * torch.randn_like(p)).sum().backward()
        assert torch.isfinite(x.grad).all() and (x.grad[2] == 0).all()
        x.grad = None
    assert sparsemax(torch.zeros(2, 0)).shape == (2, 0)


def test_sparsemax_scores_are_normalised_in_fp32_under_cpu_bf16_autocast(monkeypatch):
    """Eq. 4.1-4.2 (α_s = sparsemax(K_sᵀQ_s/√d_k)) and Eq. 4.3 with sparsemax (sparse-sparse) under ``--cpu-bf16``,
    i.e. torch.autocast('cpu', bfloat16): the H-attention's scores reach the normaliser in bf16 and are cast to fp32,
    so the sparsemax probabilities (entmax's input and output) are fp32, sum to 1 (to fp32 precision) on every row
    with a real context entry, and are exactly 0 on the masked entries (-1 context entries, a sentence without
    words, padding words) and on some real ones (sparsity). The weights the module returns are those
    probabilities, masked, in the scores' dtype (bf16 here, as fairseq's MultiheadAttention does with its softmax):
    their zeros stay exact and a sentence without context gets all zeros."""
    import entmax

    import fairseq_ext.modules.doc_attention as doc_attention

    score_dtypes, probs = [], []
    real_normalise, real_sparsemax = doc_attention.normalise, entmax.sparsemax

    def spy_normalise(scores, mask, dim, kind):
        score_dtypes.append(scores.dtype)
        return real_normalise(scores, mask, dim, kind)

    def spy_sparsemax(x, dim=-1, **kw):
        p = real_sparsemax(x, dim=dim, **kw)
        probs.append((x, p))
        return p

    monkeypatch.setattr(doc_attention, "normalise", spy_normalise)
    monkeypatch.setattr(entmax, "sparsemax", spy_sparsemax)
    torch.manual_seed(0)
    attn = HierarchicalMultiheadAttention(16, num_heads=2, word_norm="sparsemax").eval()
    ctx = toy_context()
    query = torch.randn(3, 4, 16) * 3
    with torch.autocast("cpu", dtype=torch.bfloat16):
        prepared = attn.prepare(ctx)
        out, w = attn(query, prepared, need_weights=True)
    assert score_dtypes == [torch.bfloat16, torch.bfloat16] and len(probs) == 2  # sentence level, word level
    sent_mask = prepared["sent_mask"][:, None, None, :].expand_as(probs[0][1])
    word_mask = prepared["word_mask"][:, None, None].expand_as(probs[1][1])
    for (x, p), mask in zip(probs, (sent_mask, word_mask)):
        assert x.dtype == p.dtype == torch.float32
        rows = mask.any(-1)
        assert rows.any() and (~rows).any()
        assert torch.allclose(p.sum(-1)[rows], torch.ones(int(rows.sum())), atol=1e-6)
        assert (p[mask.logical_not() & rows.unsqueeze(-1)] == 0).all()
        assert (p[mask] == 0).any()  # sparse among the real entries too
    alpha_s, alpha = w["sentence"], w["word"]
    assert alpha_s.dtype == alpha.dtype == torch.bfloat16 == out.dtype
    assert torch.equal(alpha_s, probs[0][1].masked_fill(~sent_mask, 0).to(torch.bfloat16))
    assert (alpha_s[~sent_mask] == 0).all() and (alpha[~word_mask] == 0).all() and (alpha_s[2] == 0).all()
    assert torch.allclose(alpha_s.float().sum(-1)[:2], torch.ones(2, 2, 4), atol=1e-2)
    assert torch.isfinite(out).all()


# ----------------------------------------------------------------------------- attention modules
def toy_context(C=16, N=4, L=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    words = torch.randn(N, L, C, generator=g)
    word_mask = torch.ones(N, L, dtype=torch.bool)
    word_mask[0, :2] = False  # left padding
    word_mask[2, 3:] = False
    word_mask[3] = False      # a row without words (e.g. an empty sentence)
    index = torch.tensor([[1, 2, 3, -1], [0, 2, -1, -1], [-1, -1, -1, -1]])
    return DocContext(words, word_mask, index)


@pytest.mark.parametrize("word_norm", ["softmax", "sparsemax"])
def test_hierarchical_weights_are_sentence_times_word_weights(word_norm):
    """Eq. 4.2-4.4 checked against a direct computation for one head, query word and sentence."""
    from entmax import sparsemax as ref_sparsemax

    torch.manual_seed(0)
    attn = HierarchicalMultiheadAttention(16, num_heads=2, word_norm=word_norm).eval()
    ctx = toy_context()
    query = torch.randn(3, 4, 16)
    prepared = attn.prepare(ctx)
    out, w = attn(query, prepared, need_weights=True)
    alpha_s, alpha = w["sentence"], w["word"]                      # B H T K, B H T K L
    assert out.shape == (3, 4, 16)
    # one weight per context word; the document's weights sum to 1 (0 without context)
    assert torch.allclose(alpha.sum((-1, -2))[:2], torch.ones(2, 2, 4), atol=1e-5)
    assert (alpha[2] == 0).all() and (out[2] == 0).all()
    # masked context entries (-1), the row without words and padding words get exactly 0
    assert (alpha[0, :, :, 2] == 0).all() and (alpha[0, :, :, 3] == 0).all() and (alpha[1, :, :, 2:] == 0).all()
    assert (alpha[1, :, :, 0, :2] == 0).all() and (alpha[0, :, :, 1, 3:] == 0).all()
    assert torch.allclose(alpha.sum(-1), alpha_s, atol=1e-6)
    # direct computation: batch 1, head 1, query word 2
    b, h, t, d = 1, 1, 2, 8
    hs = slice(h * d, (h + 1) * d)
    q_s = attn.q_s_proj(query[b, t])[hs] / d ** 0.5
    q_w = attn.q_w_proj(query[b, t])[hs] / d ** 0.5
    rows = [0, 2]
    sent_vec = torch.stack([ctx.words[r][ctx.word_mask[r]].mean(0) for r in rows])
    expected_s = ref_sparsemax(attn.k_s_proj(sent_vec)[:, hs] @ q_s, dim=-1)
    assert torch.allclose(alpha_s[b, h, t, :2], expected_s, atol=1e-5)
    for k, r in enumerate(rows):
        keys = attn.k_w_proj(ctx.words[r][ctx.word_mask[r]])[:, hs]
        scores = keys @ q_w
        expected_w = torch.softmax(scores, -1) if word_norm == "softmax" else ref_sparsemax(scores, dim=-1)
        assert torch.allclose(alpha[b, h, t, k][ctx.word_mask[r]], expected_s[k] * expected_w, atol=1e-5)
    # the output reads V_w with those weights
    values = attn.v_w_proj(ctx.words)                                 # N L C
    heads = []
    for hh in range(2):
        acc = sum(alpha[b, hh, t, k, l] * values[r, l, hh * d:(hh + 1) * d]
                  for k, r in enumerate(rows) for l in range(5))
        heads.append(acc)
    assert torch.allclose(out[b, t], attn.out_proj(torch.cat(heads)), atol=1e-5)


@pytest.mark.parametrize("cls", [SentenceMultiheadAttention, WordMultiheadAttention])
def test_flat_attention_masks_and_sums(cls):
    torch.manual_seed(0)
    attn = cls(16, num_heads=4).eval()
    ctx = toy_context()
    out, w = attn(torch.randn(3, 4, 16), attn.prepare(ctx), need_weights=True)
    alpha = w["sentence"] if cls is SentenceMultiheadAttention else w["word"]
    assert torch.allclose(alpha.sum(-1)[:2], torch.ones(2, 4, 4), atol=1e-5)
    assert (alpha[2] == 0).all() and (out[2] == 0).all() and torch.isfinite(out).all()
    if cls is SentenceMultiheadAttention:
        assert (alpha[0, ..., 2:] == 0).all() and (alpha[1, ..., 2:] == 0).all()
    else:  # K*L words: row 3 of sentence 0 (no words) and the -1 entries get 0
        assert (alpha[0, ..., 10:] == 0).all() and (alpha[1, ..., 10:] == 0).all()
        assert (alpha[1, ..., :2] == 0).all()


def test_context_layer_gives_zero_without_context_and_gate_is_eq_4_7():
    torch.manual_seed(0)
    layer = DocContextLayer(16, 32, 4, doc_attn="hierarchical").eval()
    c, _ = layer(torch.randn(3, 4, 16), layer.prepare(toy_context()))
    assert (c[2] == 0).all() and c[:2].abs().sum() > 0
    gate = ContextGate(16)
    assert not any(hasattr(m, "bias") and m.bias is not None for m in gate.modules() if m is not gate)
    r, cv = torch.randn(2, 3, 16), torch.randn(2, 3, 16)
    g = torch.sigmoid(gate.w_r(r) + gate.w_d(cv))
    assert torch.allclose(gate(r, cv), g * r + (1 - g) * cv)


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

    from fairseq import options
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    parser = argparse.ArgumentParser()
    MODEL_REGISTRY[model_name].add_args(parser)
    actions = [a for a in parser._actions if a.dest == "ctx_integration"]
    assert len(actions) == 1 and actions[0].option_strings == ["--ctx-integration"]
    assert tuple(actions[0].choices) == ("encoder", "decoder") and actions[0].nargs is None
    assert ARCH_MODEL_REGISTRY[arch] is MODEL_REGISTRY[model_name]
    base = [str(tiny_bin), "--task", "doc_translation", "--arch", arch]
    for value in ("encoder", "decoder"):
        args = options.parse_args_and_arch(options.get_training_parser(), base + ["--ctx-integration", value])
        assert args.ctx_integration == value
        model = small(arch, ctx_integration=value)
        sides = {n.split(".")[0] for n, _ in model.named_parameters()
                 if any(f".{m}" in n for m in ("ctx_layer.", "ctx_gate.", "ctx_attn."))}
        assert sides == {value}, (value, sides)
    capsys.readouterr()
    for bad in ("both", "encoder,decoder", "none"):
        with pytest.raises(SystemExit) as e:
            options.parse_args_and_arch(options.get_training_parser(), base + ["--ctx-integration", bad])
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


# ----------------------------------------------------------------------------- command line
def test_cli_warm_start_train_and_generate(tiny_bin, tmp_path):
    """Stage 1 sentence model, stage 2 selattn warm-started from it on doc_translation (encoder:
    hierarchical sparse-soft; decoder: sparse-sparse with the gold target context), then
    fairseq-generate of the test documents."""
    shape = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
             "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
             "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
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
    shape = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
             "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
             "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
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

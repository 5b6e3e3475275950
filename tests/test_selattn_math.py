"""Maruf (2019) ch. 4, the attention math: sparsemax, hierarchical / flat context attention, the Document-level
Context Layer and its gate (Eq. 4.7). The models are in ``test_selattn_model.py``, the command lines in
``test_selattn_cli.py``."""
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

    def spy_normalise(scores, mask, dim, kind, **kw):
        score_dtypes.append(scores.dtype)
        return real_normalise(scores, mask, dim, kind, **kw)

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
    word_mask = prepared["word_mask"][None, :, None].expand_as(probs[1][1])  # the word scores are head-major: H B T K L
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
    assert (alpha_s[~sent_mask] == 0).all() and (alpha[~word_mask.transpose(0, 1)] == 0).all() and (alpha_s[2] == 0).all()
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

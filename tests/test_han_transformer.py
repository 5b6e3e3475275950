"""Miculicich et al. (2018) HAN, the online baseline of Maruf (2019) ch. 4 (Table 4.3; fairseq_ext/models/
han_transformer.py, modules/han_attention.py): the context layer by hand, only the k previous sentences read, the
sentence model when there is no context, the decoder's query, incremental = full decoding, the parameter overhead of
Table 4.5, and fairseq-train / fairseq-generate (encoder; decoder with document-order decoding)."""
import math

import pytest
import torch
import torch.nn.functional as F
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.models.transformer import TransformerDecoderBase

from harness import TINY_SHAPE, TINY_SHAPE_FLAGS, arch_args, build_model, n_params
from test_selattn_model import doc_batch, incremental, logits
from fairseq_ext.modules.doc_attention import DocContext
from fairseq_ext.modules.han_attention import HANContextLayer

V = 60
ARCHS = ["transformer_han_dec", "transformer_han_dec_bench", "transformer_han_enc", "transformer_han_enc_bench"]


def small(arch, seed=0, **kw):
    return build_model(arch, vocab=V, seed=seed, **{**TINY_SHAPE, **kw})


def test_archs_and_their_defaults():
    assert sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__name__ == "HANTransformerModel") == ARCHS
    a = arch_args("transformer_han_enc")
    assert (a.encoder_layers, a.encoder_embed_dim, a.dropout, a.ctx_integration, a.ctx_prev_sentences,
            a.ctx_rep_model, a.empty_context) == (4, 512, 0.2, "encoder", 3, "current", "identity")
    assert arch_args("transformer_han_dec_bench").ctx_integration == "decoder"


def reference(layer, h, words, word_mask, index):
    """The HAN context vector by hand, one query word and one context sentence at a time (eval: no dropout)."""
    B, T, C = h.shape
    H = layer.word_attn.num_heads
    D = C // H

    def attend(attn, ln, q, keys, values, mask):
        q = attn.q_proj(ln(q)).view(H, D) / math.sqrt(D)
        k, v = attn.k_proj(keys).view(-1, H, D), attn.v_proj(values).view(-1, H, D)
        heads = []
        for i in range(H):
            w = torch.softmax((k[:, i] @ q[i]).masked_fill(~mask, -math.inf), 0)
            heads.append(w @ v[:, i])
        return attn.out_proj(torch.cat(heads))

    out = torch.zeros(B, T, C)
    for b in range(B):
        rows = [r for r in index[b].tolist() if r >= 0 and bool(word_mask[r].any())]
        for t in range(T):
            if not rows:
                continue
            s = torch.stack([layer.word_layer_norm(attend(layer.word_attn, layer.query_word_layer_norm, h[b, t],
                                                          words[r], words[r], word_mask[r])) for r in rows])
            d = attend(layer.sent_attn, layer.query_sent_layer_norm, h[b, t], s, s, torch.ones(len(rows), dtype=bool))
            out[b, t] = d + layer.fc2(F.relu(layer.fc1(layer.ffn_layer_norm(d))))
    return out


def test_context_layer_by_hand():
    """Word-level attention inside each context sentence, layer norm, sentence-level attention over the query's
    own summaries, the residual FFN; no context: zero."""
    torch.manual_seed(0)
    layer = HANContextLayer(embed_dim=8, ffn_embed_dim=12, num_heads=2).eval()
    words = torch.randn(4, 5, 8)
    word_mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    index = torch.tensor([[1, 2, -1], [3, -1, -1], [0, 3, 2]])
    h = torch.randn(3, 2, 8)
    with torch.no_grad():
        prepared = layer.prepare(DocContext(words, word_mask, index))
        got, weights = layer(h, prepared, need_weights=True)
        want = reference(layer, h, words, word_mask, index)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(got[1], torch.zeros(2, 8))  # its only context sentence has no word
    assert weights["sentence"].shape == (3, 2, 2, 3) and weights["word"].shape == (3, 2, 2, 3, 5)
    assert torch.equal(weights["sentence"][0, :, :, 2], torch.zeros(2, 2))  # padding slot


@pytest.mark.parametrize("arch", ["transformer_han_enc_bench", "transformer_han_dec_bench"])
def test_only_the_k_previous_sentences_are_read(arch):
    """doc_batch: sentence 0 sees row 1 (d = −1) and row 3 (+2), sentence 1 rows 0 (−1), 2 (+1), 4 (−2). A later
    sentence changes nothing; with --ctx-prev-sentences 1, neither does d = −2; the previous sentence does."""
    src, lengths, prev, ctx = doc_batch()
    side = "ctx_src_tokens" if "_enc_" in arch else "ctx_tgt_tokens"

    def changed(row):
        c = dict(ctx, **{side: ctx[side].clone()})
        r = row - 3 if side == "ctx_src_tokens" else row
        c[side][r, -2] = 7 if c[side][r, -2] != 7 else 8
        return c

    for k in (3, 1):
        model = small(arch, ctx_prev_sentences=k)
        full = logits(model, src, lengths, prev, ctx)
        assert torch.equal(logits(model, src, lengths, prev, changed(3)), full)       # +2 for sentence 0
        far = logits(model, src, lengths, prev, changed(4))                           # −2 for sentence 1
        assert torch.equal(far[[0, 2]], full[[0, 2]])
        assert torch.equal(far[1], full[1]) == (k == 1)
    if side == "ctx_tgt_tokens":  # row 0 = sentence 0's translation, sentence 1's previous sentence
        model = small(arch)
        full = logits(model, src, lengths, prev, ctx)
        out = logits(model, src, lengths, prev, changed(0))
        assert not torch.allclose(out[1], full[1]) and torch.equal(out[[0, 2]], full[[0, 2]])


@pytest.mark.parametrize("arch", ["transformer_han_enc_bench", "transformer_han_dec_bench"])
@pytest.mark.parametrize("prenorm,rep", [(True, "current"), (False, "current"), (True, "pretrained")])
def test_incremental_decoding_equals_full(arch, prenorm, rep):
    """Beam-like reordering and finished rows (test_selattn_model.incremental); the context states from the model
    itself (HAN's default) or from the frozen sentence copy (``--ctx-rep-model pretrained``)."""
    model = small(arch, encoder_normalize_before=prenorm, decoder_normalize_before=prenorm, ctx_rep_model=rep)
    src, lengths, prev, ctx = doc_batch()
    full = logits(model, src, lengths, prev, ctx)
    inc, rows = incremental(model, src, lengths, prev, ctx)
    assert torch.allclose(inc, full[rows], atol=1e-5)


@pytest.mark.parametrize("arch", ["transformer_han_enc_bench", "transformer_han_dec_bench"])
def test_no_previous_sentence_is_the_sentence_model(arch):
    """Warm-started from a sentence checkpoint: without context (none given, all −1, or no previous sentence: row
    2 of doc_batch) the output is the sentence model's exactly; with a previous sentence it is not."""
    sent = small("transformer_maruf_base_bench", seed=3)
    doc = small(arch, seed=4)
    doc.load_state_dict(sent.state_dict())
    src, lengths, prev, ctx = doc_batch()
    expected = sent(src, lengths, prev)[0]
    assert torch.equal(doc(src, lengths, prev)[0], expected)
    masked = dict(ctx, ctx_index=torch.full_like(ctx["ctx_index"], -1))
    assert torch.equal(logits(doc, src, lengths, prev, masked), expected)
    out = logits(doc, src, lengths, prev, ctx)
    assert torch.equal(out[2], expected[2]) and not torch.allclose(out[:2], expected[:2])
    with doc.memory_disabled():  # pass 0 of document-order decoding
        assert torch.equal(logits(doc, src, lengths, prev, ctx), expected)


def test_decoder_queries_and_reads_the_decoder_outputs():
    """HAN decoder: the query is the decoder's output of the current word and the context memory the decoder
    outputs of the context translations (selattn's decoder reads source-attention outputs)."""
    model = small("transformer_han_dec_bench")
    src, lengths, prev, ctx = doc_batch()
    seen = {}
    real = model.decoder.ctx_layer.forward
    model.decoder.ctx_layer.forward = lambda q, p, **kw: seen.setdefault("q", q) is not None and real(q, p, **kw)
    real_prepare = model.decoder.ctx_layer.prepare
    model.decoder.ctx_layer.prepare = lambda c: seen.setdefault("ctx", c) is not None and real_prepare(c)
    with torch.no_grad():
        logits(model, src, lengths, prev, ctx)
        enc = model.encoder(src, src_lengths=lengths)
        x, _ = TransformerDecoderBase.extract_features_scriptable(model.decoder, prev, enc)
    torch.testing.assert_close(seen["q"], x)
    memory = seen["ctx"]
    assert memory.values is None and memory.words.shape[0] == ctx["ctx_tgt_tokens"].size(0)


def test_parameter_overhead_against_table_4_5():
    """News: Transformer 50M, Miculicich et al. 54.8M. Ours: two bias-free 4d² attentions, the FFN, the 2d² gate and
    five LayerNorms over the 20k-vocabulary sentence model of the selattn test."""
    d, f, vocab = 512, 2048, 20000
    base = n_params(build_model("transformer_maruf_base", vocab=vocab, device="meta"))
    model = build_model("transformer_han_enc", vocab=vocab, device="meta")
    extra = 2 * 4 * d * d + (2 * d * f + f + d) + 2 * d * d + 5 * 2 * d
    assert model.new_parameter_count() == extra and n_params(model) == base + extra
    assert abs(n_params(model) - 54.8e6) < 0.2e6


def test_cli_encoder_and_decoder_train_and_generate(tiny_bin, tmp_path):
    """``fairseq-train --task doc_translation --arch transformer_han_enc_bench`` / ``…_dec_bench`` (2+2, d 32) and
    ``fairseq-generate``: the encoder model with beam search, the decoder model in document order reading its own
    previous translations (doc_bcd, Gauss-Seidel, one pass after the sentence model's): one hypothesis per test
    sentence."""
    from harness import generate, hypotheses, n_lines, train

    n = n_lines(tiny_bin / "test.ids")
    for arch, train_extra, gen_extra in (
            ("transformer_han_enc_bench", [], []),
            ("transformer_han_dec_bench", ["--doc-target-context", "gold"],
             ["--decoding-algorithm", "doc_bcd", "--doc-iterations", "1", "--bcd-update", "gauss_seidel"])):
        ckpt = train(tiny_bin, tmp_path / arch, ["--arch", arch, *TINY_SHAPE_FLAGS, *train_extra],
                     task="doc_translation", max_update=2, extra=["--disable-validation"])
        keys = torch.load(ckpt, map_location="cpu", weights_only=False)["model"].keys()
        side = "encoder" if "_enc_" in arch else "decoder"
        assert any(k.startswith(f"{side}.ctx_layer.sent_attn.") for k in keys)
        assert any(k.startswith(f"{side}.ctx_gate.layer_norm.") for k in keys)
        out = generate(tiny_bin, ckpt, *gen_extra, task="doc_translation")
        assert sorted(hypotheses(out)) == list(range(n)), arch

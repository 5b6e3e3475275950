"""Decoding cost of the document models of Maruf (2019) ch. 4 against the computation they replace.

* The H-attention (Eqs. 4.2-4.4) projects each context sentence once per batch and lays its word keys and values
  out once for every query word and decoding step (``prepare``), so a forward reads them with one batched GEMM and
  copies no B x K x L context; its outputs and weights equal the reference below (the previous computation: an
  einsum over gathered keys, masked twice) bit for bit, and the decoded hypotheses are the same.
* The Zhang et al. (2018) baseline's frozen output projection (``--freeze-sentence-params``) is one GEMM over the
  folded batch (not a bmm over a weight copied per sentence); its logits equal those of the same weight when
  trainable, and the hypotheses those of the previous computation.

The end-to-end checks decode the tiny test documents with batches of 4 sentences, so documents are cut across
batches (their other sentences come as extra context rows), offline and online, beam 2 (the decoder's context
memory is reordered with the beam).
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import fairseq_ext  # noqa: F401  (registration)
from fairseq_ext.modules import doc_attention as da
from fairseq_ext.models.zhang2018_doc_transformer import ZhangDecoder
from harness import TINY_SHAPE, TINY_SHAPE_FLAGS, build_model, train_objects


# ----------------------------------------------------------------------------- the reference computation
def reference_prepare(self, ctx):
    """The H-attention's memory as it was computed before: keys gathered per batch sentence, (B, H, K, L, D)."""
    sents, has_words = da.sentence_vectors(ctx)
    valid = ctx.index.ge(0)
    B, K = ctx.index.shape
    L = ctx.words.size(1)
    k_s = da.gather_rows(self.heads(self.k_s_proj(sents)), ctx.index)
    k_w = da.gather_rows(self.heads(self.k_w_proj(ctx.words)), ctx.index)
    v_w = da.gather_rows(self.heads(self.v_w_proj(ctx.value_vectors())), ctx.index)
    return {"k_s": k_s.permute(0, 2, 1, 3), "k_w": k_w.permute(0, 3, 1, 2, 4),
            "v_w": v_w.permute(0, 3, 1, 2, 4).reshape(B, self.num_heads, K * L, self.head_dim),
            "sent_mask": valid & da.gather_rows(has_words, ctx.index),
            "word_mask": da.gather_rows(ctx.word_mask, ctx.index) & valid.unsqueeze(-1)}


def reference_forward(self, query, prepared, need_weights=False):
    """Eqs. 4.2-4.4 as computed before: einsum over the gathered keys, both normalisations masked twice."""
    B, T, _ = query.shape
    q_s, q_w = self.query(self.q_s_proj, query), self.query(self.q_w_proj, query)
    alpha_s = da.sparsemax(torch.einsum("bhtd,bhkd->bhtk", q_s, prepared["k_s"]), prepared["sent_mask"][:, None, None, :])
    word_scores = torch.einsum("bhtd,bhkld->bhtkl", q_w, prepared["k_w"])
    alpha = alpha_s.unsqueeze(-1) * da.normalise(word_scores, prepared["word_mask"][:, None, None], -1, self.word_norm)
    K, L = alpha.shape[-2:]
    out = self.finish(torch.matmul(self.dropout_module(alpha).view(B, self.num_heads, T, K * L), prepared["v_w"]))
    return out, ({"sentence": alpha_s, "word": alpha} if need_weights else None)


def toy_context(C=16, N=5, L=6, seed=0):
    """Five sentences (left padding, a short one, one without words) and four batch sentences' contexts (one
    without context)."""
    g = torch.Generator().manual_seed(seed)
    words = torch.randn(N, L, C, generator=g)
    word_mask = torch.ones(N, L, dtype=torch.bool)
    word_mask[0, :2] = False
    word_mask[2, 4:] = False
    word_mask[3] = False
    index = torch.tensor([[1, 2, 3, 4], [0, 2, 4, -1], [-1, -1, -1, -1], [0, 1, -1, -1]])
    return da.DocContext(words, word_mask, index, torch.randn(N, L, C, generator=g))


class Dispatched(TorchDispatchMode):
    """The aten ops that run (``ops``) and the largest new tensor (elements) one of them writes (``largest``: views
    of an input and in-place results not counted)."""

    def __init__(self):
        super().__init__()
        self.ops, self.largest = set(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(str(func.overloadpacket))
        inputs = {a.untyped_storage().data_ptr() for a in (*args, *(kwargs or {}).values())
                  if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.numel())
        return out


# ----------------------------------------------------------------------------- the H-attention
@pytest.mark.parametrize("word_norm", ["softmax", "sparsemax"])
@pytest.mark.parametrize("steps", [1, 7])
def test_hierarchical_attention_equals_the_reference_bit_for_bit(word_norm, steps):
    """Eqs. 4.2-4.4 on a context with padding, an empty sentence and a sentence without context, for an encoder's
    query words (7) and a decoding step (1): outputs and weights are those of the reference, exactly; in training
    (no dropout) the gradients agree too."""
    torch.manual_seed(0)
    attn = da.HierarchicalMultiheadAttention(16, num_heads=2, word_norm=word_norm).eval()
    ctx = toy_context()
    query = torch.randn(4, steps, 16) * 3
    with torch.no_grad():
        out, w = attn(query, attn.prepare(ctx), need_weights=True)
        ref, rw = reference_forward(attn, query, reference_prepare(attn, ctx), need_weights=True)
    assert torch.equal(out, ref) and torch.equal(w["sentence"], rw["sentence"]) and torch.equal(w["word"], rw["word"])
    assert (out[2] == 0).all()  # no context: the value read is zero

    attn.train()
    grads = []
    for prep, fwd in ((attn.prepare, attn.forward), (lambda c: reference_prepare(attn, c),
                                                    lambda q, p: reference_forward(attn, q, p))):
        attn.zero_grad()
        (fwd(query, prep(ctx))[0] ** 2).sum().backward()
        grads.append([p.grad.clone() for p in attn.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_decoding_step_reads_the_context_memory_without_copying_it():
    """One decoding step of the decoder-integrated H-attention (T = 1) produces no tensor as large as the word keys
    of the batch's contexts: it reads them where ``prepare`` put them (the reference copies them on every step,
    for every live hypothesis)."""
    torch.manual_seed(0)
    attn = da.HierarchicalMultiheadAttention(16, num_heads=2).eval()
    ctx = toy_context()
    with torch.no_grad():
        prepared = attn.prepare(ctx)
        with Dispatched() as spy:
            attn(torch.randn(4, 1, 16), prepared)
    assert spy.largest < prepared["k_w"].numel(), (spy.largest, tuple(prepared["k_w"].shape))
    # nor after the beam reordered it (the memory keeps its head-major layout)
    order, query = torch.tensor([3, 1, 1, 0, 2]), torch.randn(5, 1, 16)
    with torch.no_grad():
        moved = da.reorder_prepared(prepared, order)
        with Dispatched() as spy:
            out = attn(query, moved)[0]
        plain = attn(query, {k: v[order].contiguous() for k, v in prepared.items()})[0]
    assert spy.largest < moved["k_w"].numel(), (spy.largest, tuple(moved["k_w"].shape))
    assert torch.equal(out, plain)


def test_a_decoding_step_in_which_no_row_finished_keeps_the_context_memory_in_place():
    """fairseq reorders the incremental state after every step; when the order keeps every row (greedy decoding, no
    sentence finished) the decoder's context memory is kept as it is, not copied; any other order selects rows."""
    attn = da.HierarchicalMultiheadAttention(16, num_heads=2).eval()
    with torch.no_grad():
        prepared = attn.prepare(toy_context())
    kept = da.reorder_prepared(prepared, torch.arange(4))
    assert all(kept[k].data_ptr() == v.data_ptr() for k, v in prepared.items())
    order = torch.tensor([2, 0, 0])
    moved = da.reorder_prepared(prepared, order)
    assert all(torch.equal(moved[k], v[order]) for k, v in prepared.items())


# ----------------------------------------------------------------------------- Zhang et al. (2018)
def test_zhang_frozen_output_projection_is_one_gemm_with_the_trainable_numbers():
    """``--freeze-sentence-params`` freezes the output projection; on the decoder's B x 1 x C step (a view of its
    time-major state) it is one GEMM, not a bmm over the weight copied per sentence, and gives exactly the logits of
    the same weight when trainable."""

    model = build_model("transformer_zhang2018", **TINY_SHAPE)
    dec = model.decoder
    assert isinstance(dec, ZhangDecoder) and not dec.output_projection.weight.requires_grad
    x = torch.randn(1, 6, 32).transpose(0, 1)  # B x 1 x C view of T x B x C
    with torch.no_grad(), Dispatched() as spy:
        frozen = dec.output_layer(x)
    assert "aten.bmm" not in spy.ops, spy.ops
    dec.output_projection.weight.requires_grad_(True)
    with torch.no_grad():
        trainable = dec.output_layer(x)
    assert torch.equal(frozen, trainable)


# ----------------------------------------------------------------------------- end to end on the tiny documents
def decode(task, model, cfg, use_reference: bool, monkeypatch):
    """{id: hypothesis tokens} of the tiny test documents, batches of 4 sentences, beam 2; and the first batch's
    encoder output. ``use_reference``: the reference H-attention and fairseq's own output projection."""
    from fairseq.models.transformer import TransformerDecoderBase

    with monkeypatch.context() as mp:
        if use_reference:
            mp.setattr(da.HierarchicalMultiheadAttention, "prepare", reference_prepare)
            mp.setattr(da.HierarchicalMultiheadAttention, "forward", reference_forward)
            mp.setattr(ZhangDecoder, "output_layer", TransformerDecoderBase.output_layer)
        cfg.generation.beam, cfg.generation.max_len_b = 2, 20
        gen = task.build_generator([model], cfg.generation)
        itr = task.get_batch_iterator(task.dataset("test"), max_tokens=None, max_sentences=4).next_epoch_itr(
            shuffle=False)
        hyps, first, extra_rows = {}, None, 0
        with torch.no_grad():
            for sample in itr:
                net = {k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"}
                extra_rows += net["ctx_src_tokens"].size(0)
                if first is None:
                    first = model.encoder(**net)["encoder_out"][0], net["src_tokens"].ne(1)
                for i, h in zip(sample["id"].tolist(), task.inference_step(gen, [model], sample)):
                    hyps[i] = h[0]["tokens"].tolist()
    assert extra_rows > 0  # some documents were cut across batches
    return hyps, first


@pytest.mark.parametrize("arch,flags", [
    ("transformer_selattn_enc_hier_sparsesoft_bench", []),
    ("transformer_selattn_enc_hier_sparsesparse_bench", ["--doc-context-mode", "online"]),
    ("transformer_selattn_dec_hier_sparsesoft_bench", ["--doc-target-context", "gold"]),
    ("transformer_zhang2018_bench", ["--doc-context-mode", "online"]),
    ("transformer_zhang2018_bench", ["--ctx-integration", "decoder"]),
])
def test_decoded_documents_equal_the_reference(tiny_bin, arch, flags, monkeypatch):
    """The tiny test documents decoded (beam 2, 4 sentences a batch: documents cut across batches) with the models'
    computation and with the reference: the same hypotheses, and encoder outputs within 1e-6 on the words."""
    cfg, task, model, _ = train_objects(tiny_bin, "--task", "doc_translation", "--arch", arch, *TINY_SHAPE_FLAGS,
                                        *flags, "--cpu", seed=1)
    model.eval()
    task.load_dataset("test")
    assert len(task.dataset("test").index.names) < 36  # several sentences per document
    hyps, (enc, words) = decode(task, model, cfg, False, monkeypatch)
    ref_hyps, (ref_enc, _) = decode(task, model, cfg, True, monkeypatch)
    assert len(hyps) == 36 and hyps == ref_hyps
    diff = (enc - ref_enc).abs().transpose(0, 1)[words]
    assert diff.max() <= 1e-6

"""The H-attention's context encodings by the frozen sentence encoder (``--ctx-rep-model pretrained``, Maruf 2019
§4.3.1) kept across batches (:mod:`fairseq_ext.modules.frozen_encodings`).

* A training step that reads the context from the cache has the loss and the gradients of the step that encodes it
  again (the frozen copy never drops out; the model's own dropout draws the same masks), in training mode, on
  batches of the tiny documents cut into chunks (extra context rows), with sentences seen before;
* a frozen encoder that changed (warm start, a load, a write through ``.data``) is never served from the cache:
  the result equals the uncached one under the new weights, and a cache that did not notice the change would give a
  different loss (the check fails on a stale cache);
* nothing is cached while the frozen copy is in training mode or gradients are on, and the memory budget holds.
"""
import pytest
import torch

import fairseq_ext  # noqa: F401  (registration)
from fairseq_ext.modules import frozen_encodings as fe
from harness import TINY_SHAPE_FLAGS, train_objects

ARCH = "transformer_selattn_enc_hier_sparsesoft_bench"


@pytest.fixture(scope="module")
def setup(tiny_bin):
    cfg, task, model, criterion = train_objects(tiny_bin, "--task", "doc_translation", "--arch", ARCH,
                                                *TINY_SHAPE_FLAGS, "--cpu", seed=1)
    task.load_dataset("train")
    itr = task.get_batch_iterator(task.dataset("train"), max_tokens=None, max_sentences=4,
                                  seed=1).next_epoch_itr(shuffle=False)
    batches = [s for s in itr if s["net_input"]["ctx_src_tokens"].size(0) > 0][:3]
    assert len(batches) == 3  # documents cut across batches: every batch has extra context rows
    return task, model, criterion, batches


def step(model, criterion, sample, seed=0):
    """Loss and gradients of one training step (dropout seeded)."""
    model.train()
    model.zero_grad()
    torch.manual_seed(seed)
    loss, _, _ = criterion(model, sample)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def run(model, criterion, batches, cache_mb):
    cache = fe.FrozenEncodingCache(cache_mb)
    model.encoder.ctx_rep_cache = cache
    return [step(model, criterion, b, seed=i) for i, b in enumerate(batches)], cache


def assert_same(a, b):
    (la, ga), (lb, gb) = a, b
    assert torch.allclose(la, lb, rtol=1e-6, atol=1e-6), (la, lb)
    assert ga.keys() == gb.keys()
    for n in ga:
        assert torch.allclose(ga[n], gb[n], rtol=1e-5, atol=1e-7), n


def test_cached_training_steps_equal_uncached(setup):
    task, model, criterion, batches = setup
    order = [batches[0], batches[1], batches[0], batches[2], batches[1]]  # later steps re-read earlier sentences
    uncached, off = run(model, criterion, order, 0)
    cached, cache = run(model, criterion, order, 64)
    assert off.hits == 0 and not off.store
    assert cache.hits > 0 and cache.store
    for a, b in zip(uncached, cached):
        assert_same(a, b)
    # the first step encodes everything, in the same batch: bit for bit
    assert torch.equal(uncached[0][0], cached[0][0])


def perturb_by_warm_start(model):
    with torch.no_grad():
        model.encoder.embed_tokens.weight.mul_(1.5)
    model.encoder.refresh_frozen_copy()


def perturb_through_data(model):
    for p in model.encoder.ctx_rep_encoder.layers[0].parameters():
        p.data.mul_(1.5)  # no version counter moves


def perturb_by_loading(model):
    state = {k: v * 1.5 if k.startswith("encoder.ctx_rep_encoder.layers.0.") and v.is_floating_point() else v
             for k, v in model.state_dict().items()}
    model.load_state_dict(state)


@pytest.mark.parametrize("perturb", [perturb_by_warm_start, perturb_through_data, perturb_by_loading])
def test_a_changed_frozen_encoder_is_not_served_from_the_cache(setup, perturb, monkeypatch):
    task, model, criterion, batches = setup
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        cache = fe.FrozenEncodingCache(64)
        model.encoder.ctx_rep_cache = cache
        before = step(model, criterion, batches[0])
        perturb(model)
        cached = step(model, criterion, batches[0])
        model.encoder.ctx_rep_cache = fe.FrozenEncodingCache(0)
        uncached = step(model, criterion, batches[0])
        assert_same(cached, uncached)
        assert not torch.allclose(before[0], uncached[0])  # the change matters to the loss

        # a cache that does not see the change serves the old encodings: the comparison above catches it
        stale = fe.FrozenEncodingCache(64)
        model.encoder.ctx_rep_cache = stale
        model.load_state_dict(saved)
        monkeypatch.setattr(fe, "module_state", lambda module: "unchanged")
        monkeypatch.setattr(fe.FrozenEncodingCache, "clear", lambda self: None)
        step(model, criterion, batches[0])
        perturb(model)
        stale_loss, _ = step(model, criterion, batches[0])
        assert not torch.allclose(stale_loss, uncached[0], rtol=1e-6, atol=1e-6)
    finally:
        model.load_state_dict(saved)
        model.encoder.ctx_rep_cache = fe.FrozenEncodingCache(0)


def test_nothing_is_cached_in_training_mode_or_with_gradients():
    enc = torch.nn.Module()
    calls = []

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3), requires_grad=False)

        def forward(self, tokens, lengths):
            calls.append(tokens.size(0))
            x = tokens.t().unsqueeze(-1).float() * self.w
            return {"encoder_out": [x], "encoder_padding_mask": [tokens.eq(1)]}

    enc = Encoder()
    tokens = torch.tensor([[1, 5, 6, 2], [7, 8, 9, 2]])
    cache = fe.FrozenEncodingCache(1)
    with torch.no_grad():
        enc.train()
        cache.encode(enc, tokens, pad=1)
        assert not cache.store
        enc.eval()
        a, m = cache.encode(enc, tokens, pad=1)
        assert len(cache.store) == 2 and calls == [2, 2]
        b, _ = cache.encode(enc, tokens.flip(0), pad=1)
        assert calls == [2, 2] and torch.equal(b, a.flip(0)) and (a[0, 0] == 0).all() and m[0, 0]
    cache.encode(enc, tokens, pad=1)  # gradients on: encoded again
    assert calls == [2, 2, 2]


def test_the_memory_budget_holds():
    class Encoder(torch.nn.Module):
        def forward(self, tokens, lengths):
            return {"encoder_out": [tokens.t().unsqueeze(-1).expand(-1, -1, 4).float()],
                    "encoder_padding_mask": [tokens.eq(1)]}

    enc = Encoder().eval()
    tokens = torch.tensor([[5, 6, 2], [1, 8, 2], [7, 8, 2]])
    cache = fe.FrozenEncodingCache(40 / 2 ** 20)  # 40 bytes: a 3-word sentence (48 bytes) does not fit, 2 words do
    with torch.no_grad():
        out, _ = cache.encode(enc, tokens, pad=1)
        assert list(cache.store) == [(8, 2)] and cache.bytes == 32
        cache.max_bytes = 80
        cache.encode(enc, tokens, pad=1)
        assert list(cache.store) == [(8, 2), (5, 6, 2)] and cache.bytes == 80
        again, _ = cache.encode(enc, tokens, pad=1)
    assert torch.equal(out, again)
    import copy
    twin = copy.deepcopy(cache)  # a copied model starts empty, with the same budget
    assert not twin.store and twin.max_bytes == 80


def backward_nodes(t: torch.Tensor) -> set:
    seen, stack = set(), [t.grad_fn]
    while stack:
        f = stack.pop()
        if f is not None and f not in seen:
            seen.add(f)
            stack.extend(g for g, _ in f.next_functions)
    return {type(f).__name__ for f in seen}


@pytest.mark.parametrize("word_norm", ["softmax", "sparsemax"])
def test_the_word_scores_are_masked_without_a_copy_in_the_backward(word_norm):
    """The word scores (B x H x T x K x L, the H-attention's largest tensor) are masked in place on the product
    itself, not through a view of it (that makes the backward clone the whole score gradient: CopySlices), and the
    outputs and gradients stay those of the reference computation."""
    from test_doc_context_cache import reference_forward, reference_prepare, toy_context
    from fairseq_ext.modules import doc_attention as da

    torch.manual_seed(0)
    attn = da.HierarchicalMultiheadAttention(16, num_heads=2, word_norm=word_norm).train()
    ctx = toy_context()
    query = torch.randn(4, 7, 16) * 3
    out, _ = attn(query, attn.prepare(ctx))
    assert not {"CopySlices", "AsStridedBackward0"} & backward_nodes(out)
    grads = []
    for o in (out, reference_forward(attn, query, reference_prepare(attn, ctx))[0]):
        attn.zero_grad()
        (o ** 2).sum().backward()
        grads.append([p.grad.clone() for p in attn.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)

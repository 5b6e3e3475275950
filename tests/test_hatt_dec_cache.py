"""The H-attention's decoder integration (Maruf 2019 Fig. 4.4) with ``--ctx-rep-model pretrained``: the frozen
decoder's features of every context translation kept across batches (:meth:`FrozenEncodingCache.features`, keyed by
the context sentence's source and translation).

* training steps that read the features from the cache have the loss and the gradients of the steps that compute
  them again, and eval-mode outputs are those of the uncached model, on batches of the tiny documents cut into
  chunks with sentences seen before; the first step (nothing cached yet) is bit for bit the uncached one;
* a planted wrong cache entry makes that comparison fail (the test would see a wrong cache);
* a frozen decoder, or the frozen encoder whose states it reads, that changed is never served from the cache, and a
  cache that did not notice the change would give a different loss.
"""
import pytest
import torch

import fairseq_ext  # noqa: F401  (registration)
from fairseq_ext.modules import frozen_encodings as fe
from harness import TINY_SHAPE_FLAGS, train_objects
from test_hatt_train_cache import assert_same, step

ARCH = "transformer_selattn_dec_hier_sparsesoft_bench"


@pytest.fixture(scope="module")
def setup(tiny_bin):
    cfg, task, model, criterion = train_objects(tiny_bin, "--task", "doc_translation", "--arch", ARCH,
                                                *TINY_SHAPE_FLAGS, "--doc-target-context", "gold", "--cpu", seed=1)
    assert model.decoder.ctx_rep_decoder is not None
    task.load_dataset("train")
    itr = task.get_batch_iterator(task.dataset("train"), max_tokens=None, max_sentences=4,
                                  seed=1).next_epoch_itr(shuffle=False)
    batches = [s for s in itr if s["net_input"]["ctx_src_tokens"].size(0) > 0][:3]
    assert len(batches) == 3
    order = [batches[0], batches[1], batches[0], batches[2], batches[1]]  # later steps re-read earlier sentences
    return model, criterion, order


def caches(model, mb, encoder_mb=None):
    model.encoder.ctx_rep_cache = fe.FrozenEncodingCache(mb if encoder_mb is None else encoder_mb)
    model.decoder.ctx_rep_cache = fe.FrozenEncodingCache(mb, [model.encoder.ctx_rep_encoder])
    return model.decoder.ctx_rep_cache


def train_run(model, criterion, order, mb, **kw):
    cache = caches(model, mb, **kw)
    return [step(model, criterion, b, seed=i) for i, b in enumerate(order)], cache


def eval_run(model, order, mb):
    cache = caches(model, mb)
    model.eval()
    with torch.no_grad():
        return [model(**b["net_input"])[0] for b in order], cache


def test_cached_steps_and_outputs_equal_uncached(setup):
    model, criterion, order = setup
    uncached, off = train_run(model, criterion, order, 0)
    cached, cache = train_run(model, criterion, order, 64)
    assert off.hits == 0 and not off.store
    assert cache.hits > 0 and cache.store and cache.misses < sum(b["net_input"]["ctx_tgt_tokens"].size(0)
                                                                 for b in order)
    for a, b in zip(uncached, cached):
        assert_same(a, b)
    assert torch.equal(uncached[0][0], cached[0][0])  # nothing cached yet: the same computation, bit for bit
    for n in uncached[0][1]:
        assert torch.equal(uncached[0][1][n], cached[0][1][n]), n

    plain, _ = eval_run(model, order, 0)
    kept, cache = eval_run(model, order, 64)
    assert cache.hits > 0
    assert torch.equal(plain[0], kept[0])
    for a, b in zip(plain, kept):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)

    # a wrong entry read from the cache: the same comparison fails
    key = next(iter(cache.store))
    values, keys = cache.store[key]
    cache.store[key] = (values + 1.0, keys)
    model.eval()
    with torch.no_grad():
        planted = [model(**b["net_input"])[0] for b in order]
    assert not all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(plain, planted))


def perturb_decoder_data(model):
    for p in model.decoder.ctx_rep_decoder.layers[0].parameters():
        p.data.mul_(1.5)  # no version counter moves


def perturb_encoder_data(model):
    for p in model.encoder.ctx_rep_encoder.layers[0].parameters():
        p.data.mul_(1.5)


def perturb_by_warm_start(model):
    with torch.no_grad():
        for p in model.decoder.layers[0].parameters():
            p.mul_(1.5)
    model.decoder.refresh_frozen_copy()


@pytest.mark.parametrize("perturb", [perturb_decoder_data, perturb_encoder_data, perturb_by_warm_start])
def test_a_changed_frozen_model_is_not_served_from_the_cache(setup, perturb, monkeypatch):
    model, criterion, order = setup
    batch = order[0]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        caches(model, 64, encoder_mb=0)  # the decoder's cache alone must see an encoder change (it watches it)
        before = step(model, criterion, batch)
        perturb(model)
        cached = step(model, criterion, batch)
        caches(model, 0)
        uncached = step(model, criterion, batch)
        assert_same(cached, uncached)
        assert not torch.allclose(before[0], uncached[0])  # the change matters to the loss

        model.load_state_dict(saved)
        caches(model, 64, encoder_mb=0)
        monkeypatch.setattr(fe, "module_state", lambda module: "unchanged")
        monkeypatch.setattr(fe.FrozenEncodingCache, "clear", lambda self: None)
        step(model, criterion, batch)
        perturb(model)
        stale_loss, _ = step(model, criterion, batch)
        assert not torch.allclose(stale_loss, uncached[0], rtol=1e-6, atol=1e-6)
    finally:
        monkeypatch.undo()
        model.load_state_dict(saved)
        caches(model, 0)


def test_the_cache_copies_with_the_model_and_watches_the_copy(setup):
    import copy

    model, _, _ = setup
    twin = copy.deepcopy(model)
    cache = twin.decoder.ctx_rep_cache
    assert not cache.store and cache.watch and cache.watch[0] is twin.encoder.ctx_rep_encoder

"""doc_bcd's kept memory states (generators/doc_bcd.py, ``reuse_states``): the target memory's s^{|y|} of a
translation (Maruf 2019 Eq. 3.4's M[Y^{-j}], docmem's sentence path) taken from pass 0's own memory-disabled
decoding or teacher-forced once per run, and the pass-0 translations of the context rows outside the batch
decoded once per run, give the hypotheses of the reference computation (every pass encoded and teacher-forced
anew) with scores equal to rounding; a memory read from the wrong states does not."""
import pytest
import torch

from docmem_batches import BATCH, V, corpus, make_sample, rnnsearch_twin, tiny
from harness import make_dictionary
from fairseq_ext.generators.doc_bcd import DocBCDGenerator, MemoryStateCache

# doc 0's sentences split over two batches (each batch's context rows include the other batch's sentences)
SECOND = [(0, 2), (1, 1), (0, 3)]


def generator(models, **kw):
    return DocBCDGenerator(models, make_dictionary(V), max_len_b=12, **kw)


def reference(models, sample, **kw):
    return generator(models, reuse_encoder=False, reuse_states=False, **kw).generate(models, sample)


def same(a, b) -> bool:
    """Same tokens, positional scores equal to 1e-5."""
    return len(a) == len(b) and all(
        torch.equal(x[0]["tokens"], y[0]["tokens"])
        and torch.allclose(x[0]["positional_scores"], y[0]["positional_scores"], atol=1e-5) for x, y in zip(a, b))


def models_for(variant, init, seed=5):
    if init == "base_model":
        return [tiny(variant, seed=seed), rnnsearch_twin({"decoder_variant": "plain"}, seed=seed + 1)]
    return [tiny(variant, seed=seed)]


def count_teacher_forced(model):
    """The N-set rows teacher-forced by ``memory_states`` (a list that grows)."""
    rows = []
    original = model.memory_states

    def counting(encoder_out, tokens, lengths, which):
        rows.append(which.numel())
        return original(encoder_out, tokens, lengths, which)

    model.memory_states = counting
    return rows


@pytest.mark.parametrize("variant", ["m2c_both", "m2o_both", "m2c_tgt", "prev_tgt"])
@pytest.mark.parametrize("init", ["zero_context", "base_model"])
@pytest.mark.parametrize("iterations", [1, 3])
def test_kept_states_give_the_reference_hypotheses_over_batches(variant, init, iterations):
    models = models_for(variant, init)
    for with_tgt in (True, False):  # extra rows' targets given by the task, or translated in pass 0
        gen = generator(models, iterations=iterations, init=init)
        assert gen.reuse_states
        for batch in (BATCH, SECOND, BATCH):  # the third meets only sentences the run has seen
            sample = make_sample(corpus(), batch, with_tgt=with_tgt)
            assert same(gen.generate(models, sample), reference(models, sample, iterations=iterations, init=init))
        if with_tgt is False:
            assert gen.memory.pass0 and gen.memory.known


def test_pass_zero_decoding_yields_the_teacher_forced_states():
    """The memory-disabled greedy pass's top state at the ⟨eos⟩ step is the teacher-forced s^{|y|} (to rounding)."""
    model = tiny("m2c_tgt", seed=7)
    gen = generator([model], iterations=1, init="zero_context")
    sample = make_sample(corpus(), BATCH, with_tgt=True)
    with torch.no_grad():
        gen.generate([model], sample)
        encoded = gen.doc_greedy.encode(sample)
    sources = gen.memory.source_keys(gen, sample)
    N = len(sources)
    assert len(gen.memory.known) == N  # pass 0 (batch rows) and the extra row's given target
    for (src, tgt), state in gen.memory.known.items():
        row = torch.tensor([sources.index(src)])
        forced = model.memory_states(encoded, torch.tensor([tgt]).expand(N, -1), torch.full((N,), len(tgt)), row)
        assert torch.allclose(state, forced[0], atol=1e-6)


def test_zero_context_teacher_forces_only_what_pass_zero_did_not_decode():
    model = tiny("m2c_both", seed=5)
    forced = count_teacher_forced(model)
    gen = generator([model], iterations=1, init="zero_context")
    gen.generate([model], make_sample(corpus(), BATCH, with_tgt=False))
    assert forced == []  # batch rows captured in pass 0, the extra row's pass-0 decoding captured too
    forced.clear()
    gen = generator([model], iterations=1, init="zero_context")
    gen.generate([model], make_sample(corpus(), BATCH, with_tgt=True))
    assert forced == [1]  # the extra row's given target: teacher-forced once
    gen.generate([model], make_sample(corpus(), BATCH, with_tgt=True))
    assert forced == [1]  # the same batch again: nothing new


def test_base_model_teacher_forces_each_translation_once_per_run():
    models = models_for("m2c_both", "base_model")
    forced = count_teacher_forced(models[0])
    gen = generator(models, iterations=1, init="base_model")
    n_rows = len(BATCH) + 1  # doc 0's fourth sentence is the extra row
    gen.generate(models, make_sample(corpus(), BATCH, with_tgt=False))
    assert forced == [n_rows]
    gen.generate(models, make_sample(corpus(), BATCH, with_tgt=False))
    assert forced == [n_rows]  # every (source, pass-0 translation) known


def test_a_wrong_memory_is_caught(monkeypatch):
    """The comparison above fails when the kept states are not s^{|y|}: here the state one step before ⟨eos⟩."""
    def off_by_one(self, gen, hyps):
        if self.captured is not None:
            sample, steps = self.captured
            self.captured = (sample, [steps[0]] + steps[:-1])
        return original(self, gen, hyps)

    original = MemoryStateCache.keep_captured
    monkeypatch.setattr(MemoryStateCache, "keep_captured", off_by_one)
    caught = 0
    for seed in (5, 7, 11):
        models = models_for("m2o_both", "zero_context", seed=seed)
        sample = make_sample(corpus(), BATCH, with_tgt=False)
        out = generator(models, iterations=1, init="zero_context").generate(models, sample)
        caught += not same(out, reference(models, sample, iterations=1, init="zero_context"))
    assert caught


def test_the_kept_states_are_dropped_when_the_model_changes():
    model = tiny("m2c_both", seed=5)
    gen = generator([model], iterations=1, init="zero_context")
    sample = make_sample(corpus(), BATCH, with_tgt=True)
    gen.generate([model], sample)
    with torch.no_grad():
        model.decoder.embed_tokens.weight.mul_(1.5)  # an optimizer step, in place
    assert same(gen.generate([model], sample), reference([model], sample, iterations=1, init="zero_context"))


# ------------------------------------------------------------------------------------------ the tiny Bible slice
@pytest.mark.slow
@pytest.mark.parametrize("batching", ["document", "size"])
def test_kept_states_on_the_tiny_bible_slice(tiny_bin, tmp_path, batching):
    """A docmem_tiny trained 4 updates on the tiny slice, decoded through the task's own batches (size batches: the
    context rows outside a batch are other batches' sentences): one generator for the whole test set keeps
    states and pass-0 translations across batches and gives the reference hypotheses (K = 1, 2, both inits)."""
    from fairseq import checkpoint_utils

    from harness import fairseq

    save = tmp_path / "ckpt"
    common = ["--criterion", "cross_entropy", "--optimizer", "sgd", "--lr", "0.1", "--clip-norm", "5",
              "--max-tokens", "1000", "--max-update", "4", "--cpu", "--seed", "1", "--no-progress-bar",
              "--no-epoch-checkpoints", "--task", "doc_translation"]
    fairseq("train", tiny_bin, "--doc-target-context", "gold", "--arch", "docmem_tiny", "--save-dir", save, *common)
    fairseq("train", tiny_bin, "--arch", "rnnsearch", "--encoder-embed-dim", "16", "--encoder-hidden-size", "16",
            "--decoder-layers", "2", "--decoder-variant", "plain", "--save-dir", tmp_path / "sent", *common)
    (doc, sent), _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(save / "checkpoint_last.pt"), str(tmp_path / "sent" / "checkpoint_last.pt")],
        arg_overrides={"data": str(tiny_bin), "doc_target_context": "none", "doc_batching": batching})
    doc.eval(), sent.eval()
    task.load_dataset("test")
    batches = list(task.get_batch_iterator(dataset=task.dataset("test"), max_sentences=8).next_epoch_itr(shuffle=False))
    if batching == "size":
        assert any(b["net_input"]["ctx_src_tokens"].size(0) > 0 for b in batches)
    d = task.target_dictionary
    for K in (1, 2):
        for models in ([doc], [doc, sent]):
            kw = dict(iterations=K, init="zero_context" if len(models) == 1 else "base_model", max_len_b=20)
            gen = DocBCDGenerator(models, d, **kw)
            ref = DocBCDGenerator(models, d, reuse_encoder=False, reuse_states=False, **kw)
            for sample in batches:
                assert same(gen.generate(models, sample), ref.generate(models, sample))
            assert gen.memory.known

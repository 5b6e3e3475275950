"""Block-coordinate-descent decoding of Maruf (2019) §3.3 (generators/doc_bcd.py) at lower cost: the document
model's encoder runs once per batch (the source side is the same in every pass) and ``--bcd-early-stop`` skips
the sentences whose inputs did not change; outputs are compared with the reference computation (every pass
encoded anew, every sentence re-decoded) on the hand-built document batches of ``docmem_batches.py``."""
from argparse import Namespace

import pytest
import torch

from docmem_batches import BATCH, V, corpus, make_sample, rnnsearch_twin, tiny
from harness import make_dictionary
from fairseq_ext.data.errors import UserDataError
from fairseq_ext.generators.doc_bcd import DocBCDGenerator


def run_bcd(models, sample, **kw):
    kw.setdefault("reuse_states", False)  # bit-for-bit comparisons; the kept memory states: test_doc_bcd_states.py
    gen = DocBCDGenerator(models, make_dictionary(V), max_len_b=12, **kw)
    return gen, gen.generate(models, sample)


def assert_same(a, b, bitwise=True):
    """Same hypotheses; scores bit for bit, or (``bitwise=False``, a sub-batch decoded) to rounding."""
    assert len(a) == len(b)
    for row, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x[0]["tokens"], y[0]["tokens"]), row
        if bitwise:
            assert torch.equal(x[0]["positional_scores"], y[0]["positional_scores"]), row
        else:
            assert torch.allclose(x[0]["positional_scores"], y[0]["positional_scores"], atol=1e-5), row


def with_sentence_model(variant, seed):
    model = tiny(variant, seed=seed)
    sent = rnnsearch_twin({"decoder_variant": "plain"}, seed=seed + 1)
    return [model, sent]


@pytest.mark.parametrize("variant", ["m2c_both", "m2o_both", "m2c_tgt", "prev_tgt", "jean2017"])
@pytest.mark.parametrize("init", ["zero_context", "base_model"])
@pytest.mark.parametrize("iterations", [1, 3])
def test_encoding_once_gives_the_outputs_of_encoding_every_pass(variant, init, iterations):
    models = with_sentence_model(variant, seed=5) if init == "base_model" else [tiny(variant, seed=5)]
    for with_tgt in (True, False):  # extra rows' targets given by the task, or translated in pass 0
        sample = make_sample(corpus(), BATCH, with_tgt=with_tgt)
        gen, reused = run_bcd(models, sample, iterations=iterations, init=init)
        assert gen.reuse_encoder
        _, plain = run_bcd(models, sample, iterations=iterations, init=init, reuse_encoder=False)
        assert_same(reused, plain)


def test_pass_zero_and_later_passes_run_the_encoder_once():
    model = tiny("m2c_both", seed=5)
    calls = []
    model.encoder.register_forward_hook(lambda *a: calls.append(1))
    sample = make_sample(corpus(), BATCH)
    run_bcd([model], sample, iterations=3, init="zero_context")
    assert len(calls) == 1
    calls.clear()
    run_bcd([model], sample, iterations=3, init="zero_context", reuse_encoder=False)
    assert len(calls) == 4


def passes(models, sample, iterations, **kw):
    """The translations after each pass 0..iterations of the reference computation."""
    return [run_bcd(models, sample, iterations=k, reuse_encoder=False, **kw)[1] for k in range(iterations + 1)]


@pytest.mark.parametrize("variant", ["m2c_both", "m2o_both", "prev_tgt"])
def test_early_stop_off_re_decodes_every_sentence_in_every_pass(variant):
    sample = make_sample(corpus(), BATCH)
    gen, out = run_bcd([tiny(variant, seed=5)], sample, iterations=3)
    assert gen.decoded_rows == [len(BATCH)] * 3
    assert_same(out, passes([tiny(variant, seed=5)], sample, 3)[-1])


@pytest.mark.parametrize("seed", [5, 7, 11])
@pytest.mark.parametrize("variant", ["m2c_both", "m2o_both", "prev_tgt"])
def test_early_stop_skips_converged_sentences_and_keeps_the_full_runs_output(variant, seed):
    models = [tiny(variant, seed=seed)]
    sample = make_sample(corpus(), BATCH)
    K = 4
    gen, stopped = run_bcd(models, sample, iterations=K, early_stop=True)
    _, full = run_bcd(models, sample, iterations=K)
    assert_same(stopped, full, bitwise=False)
    assert gen.decoded_rows[0] == len(BATCH)  # pass 1: every sentence has new target context
    assert all(a >= b for a, b in zip(gen.decoded_rows, gen.decoded_rows[1:]))
    # the reference passes say which sentences had unchanged inputs: exactly those are skipped
    ref = [[h[0]["tokens"] for h in out] for out in passes(models, sample, K)]  # ref[k]: after pass k
    index = sample["net_input"]["ctx_index"].tolist()
    for k in range(1, len(gen.decoded_rows)):  # decoded_rows[k]: pass k + 1, inputs = the output of pass k
        changed = [not torch.equal(a, b) for a, b in zip(ref[k], ref[k - 1])] + [False] * 8  # extra rows: given
        expect = [b for b in range(len(BATCH)) if changed[b] or any(changed[r] for r in index[b] if r >= 0)]
        assert gen.decoded_rows[k] == len(expect), k
    if len(gen.decoded_rows) < K:  # stopped early: the last pass changed nothing
        assert all(torch.equal(a, b) for a, b in zip(ref[len(gen.decoded_rows)], ref[len(gen.decoded_rows) - 1]))
    assert sum(gen.decoded_rows) < K * len(BATCH)  # the document converges: sentences are skipped


def test_early_stop_needs_jacobi_updates():
    with pytest.raises(UserDataError, match="jacobi"):
        DocBCDGenerator([tiny("m2c_both")], make_dictionary(V), iterations=2, update="gauss_seidel",
                        early_stop=True)



def test_bcd_refuses_the_references_as_target_context():
    """doc_bcd decodes the target context itself; with ``--doc-target-context gold`` the context sentences outside
    the batch would read their references (an oracle) beside the batch's own translations: one error line."""
    from fairseq_ext.tasks.doc_translation import DocTranslationConfig, DocTranslationTask

    d = make_dictionary(V)
    task = DocTranslationTask(DocTranslationConfig(decoding_algorithm="doc_bcd", doc_target_context="gold"), d, d)
    with pytest.raises(UserDataError, match="--doc-target-context gold"):
        task.build_generator([tiny("m2c_both")], Namespace())

# ------------------------------------------------------------------------------------------ the tiny Bible slice
@pytest.mark.slow
def test_reuse_and_early_stop_on_the_tiny_bible_slice(tiny_bin, tmp_path):
    """A docmem_tiny trained 4 updates on the tiny slice, decoded through the task's own document batches:
    encoding once gives the hypotheses and scores of encoding every pass (K = 1, 2, both Jacobi inits);
    fairseq-generate --bcd-early-stop gives the hypotheses of the full K = 2 run."""
    from fairseq import checkpoint_utils

    from harness import fairseq, hypotheses

    save = tmp_path / "ckpt"
    fairseq("train", tiny_bin, "--task", "doc_translation", "--doc-target-context", "gold", "--arch", "docmem_tiny",
            "--criterion", "cross_entropy", "--optimizer", "sgd", "--lr", "0.1", "--clip-norm", "5",
            "--max-tokens", "1000", "--max-update", "4", "--save-dir", save, "--cpu", "--seed", "1",
            "--no-progress-bar", "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints")
    ckpt = save / "checkpoint_last.pt"
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(ckpt)], arg_overrides={"data": str(tiny_bin), "doc_target_context": "none"})
    model = models[0].eval()
    task.load_dataset("test")
    batches = list(task.get_batch_iterator(dataset=task.dataset("test"), max_tokens=200).next_epoch_itr(shuffle=False))
    d = task.target_dictionary
    for K in (1, 2):
        for reuse in (True, False):
            gen = DocBCDGenerator([model], d, iterations=K, init="zero_context", reuse_encoder=reuse,
                                  reuse_states=False, max_len_b=20)
            out = [task.inference_step(gen, [model], sample) for sample in batches]
            if reuse:
                reused = out
            else:
                for a, b in zip(reused, out):
                    assert_same(a, b)
    flags = ["--task", "doc_translation", "--path", ckpt, "--cpu", "--beam", "1", "--max-len-b", "20",
             "--decoding-algorithm", "doc_bcd", "--doc-iterations", "2", "--bcd-init", "zero_context"]
    full = hypotheses(fairseq("generate", tiny_bin, *flags).stdout)
    stopped = hypotheses(fairseq("generate", tiny_bin, *flags, "--bcd-early-stop").stdout)
    assert full and stopped == full

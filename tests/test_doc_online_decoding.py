"""``--doc-online-decoding`` (:mod:`fairseq_ext.generators.doc_online`): the H-attention decoder integration
(Maruf 2019 Fig. 4.4, ``--ctx-rep-model pretrained``) decoding the tiny test documents in order, each sentence's
target context being the model's own translations of its earlier sentences.

* with the model's caches (the frozen encoder's states of each source, the frozen decoder's features of each
  produced translation: each computed exactly once in the whole run) the translations are those of the uncached
  reference, which recomputes the whole context of every wave;
* they equal decoding offline (fairseq's beam search on whole batches) with the same translations given as
  ``--doc-target-context generated``, and other translations there change them (the context is read);
* through ``fairseq-generate`` every test line gets exactly one hypothesis, with documents cut into chunks (batches
  of 4: the context of a chunk is the translations of the earlier batch) and a one-sentence document;
* the options that cannot work are refused with one line.
"""
import pytest
import torch

import fairseq_ext  # noqa: F401  (registration)
from fairseq_ext.data.errors import UserDataError
from fairseq_ext.generators.doc_online import online_waves
from fairseq_ext.modules import frozen_encodings as fe
from harness import TINY_SHAPE_FLAGS, USER_DIR, generate, hypotheses, n_lines, train, write_lines

ARCH = "transformer_selattn_dec_hier_sparsesoft_bench"
DECODE = ["--beam", "2", "--max-len-b", "12", "--batch-size", "4", "--doc-context-mode", "online"]


@pytest.fixture(scope="module")
def ckpt(tiny_bin, tmp_path_factory):
    return train(tiny_bin, tmp_path_factory.mktemp("hatt_dec_online"), ["--arch", ARCH, *TINY_SHAPE_FLAGS],
                 task="doc_translation", max_update=8,
                 extra=["--doc-target-context", "gold", "--doc-context-mode", "online", "--disable-validation"])


@pytest.fixture(scope="module")
def ids_dir(tiny_bin, tmp_path_factory):
    """The test ids with the first verse a document of its own."""
    ids = (tiny_bin / "test.ids").read_text(encoding="utf-8").split("\n")[:-1]
    return write_lines(tmp_path_factory.mktemp("ids") / "test.ids", ["solo", *ids[1:]]).parent


def decode(tiny_bin, ckpt, *flags, caches_mb=None):
    """(task, generator, {id: best tokens}) of the in-process fairseq-generate set-up on the test split."""
    from fairseq import checkpoint_utils, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, [str(tiny_bin), "--user-dir", str(USER_DIR), "--task",
                                                "doc_translation", "--path", str(ckpt), "--cpu", *DECODE, *flags])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    models, _ = checkpoint_utils.load_model_ensemble([str(ckpt)], task=task)
    model = models[0].eval()
    if caches_mb is not None:
        model.encoder.ctx_rep_cache = fe.FrozenEncodingCache(caches_mb)
        model.decoder.ctx_rep_cache = fe.FrozenEncodingCache(caches_mb, [model.encoder.ctx_rep_encoder])
    generator = task.build_generator(models, cfg.generation)
    task.load_dataset("test")
    itr = task.get_batch_iterator(task.dataset("test"), max_sentences=4).next_epoch_itr(shuffle=False)
    out = {}
    for sample in itr:
        for i, h in zip(sample["id"].tolist(), task.inference_step(generator, models, sample)):
            out[i] = h[0]["tokens"]
    return task, generator, out


def test_cached_online_decoding_equals_uncached_and_offline(tiny_bin, ckpt, ids_dir, tmp_path):
    ids = ["--doc-ids-dir", str(ids_dir)]
    task, gen, cached = decode(tiny_bin, ckpt, *ids, "--doc-online-decoding")
    n = n_lines(ids_dir / "test.ids")
    assert sorted(cached) == list(range(n))
    assert len(gen.wave_sizes) > 1  # the batch decoded in waves (document positions)
    model = gen.generator.model.models[0]
    enc, dec = model.encoder.ctx_rep_cache, model.decoder.ctx_rep_cache
    assert enc.hits > 0 and dec.hits > 0
    assert enc.misses == len(enc.store) and dec.misses == len(dec.store)  # each computed once in the whole run
    assert len({k[1] for k in dec.store}) > 1  # the features of produced translations, not only placeholders

    _, _, uncached = decode(tiny_bin, ckpt, *ids, "--doc-online-decoding", caches_mb=0)
    assert all(torch.equal(cached[i], uncached[i]) for i in range(n))

    d = task.target_dictionary
    gen_dir = tmp_path / "generated"
    write_lines(gen_dir / "test.en", [d.string(cached[i][:-1]) for i in range(n)])
    _, _, offline = decode(tiny_bin, ckpt, *ids, "--doc-target-context", "generated", "--doc-generated-dir",
                           str(gen_dir))
    assert all(torch.equal(cached[i], offline[i]) for i in range(n))

    # the context matters to this model: other translations as the target context change the output
    write_lines(gen_dir / "test.en", [d.string(cached[(i + 1) % n][:-1]) for i in range(n)])
    _, _, rotated = decode(tiny_bin, ckpt, *ids, "--doc-target-context", "generated", "--doc-generated-dir",
                           str(gen_dir))
    assert not all(torch.equal(cached[i], rotated[i]) for i in range(n))


def test_fairseq_generate_gives_one_hypothesis_per_line(tiny_bin, ckpt, ids_dir):
    out = generate(tiny_bin, ckpt, *DECODE, "--doc-ids-dir", ids_dir, "--doc-online-decoding",
                   task="doc_translation")
    n = n_lines(ids_dir / "test.ids")
    assert sorted(hypotheses(out)) == list(range(n))
    assert sum(line.startswith("H-") for line in out.splitlines()) == n


@pytest.mark.parametrize("flags, message", [
    (["--doc-context-mode", "offline"], "needs --doc-context-mode online"),
    (["--doc-target-context", "gold"], "drop --doc-target-context gold"),
    (["--decoding-algorithm", "doc_bcd"], "cannot be combined with --decoding-algorithm doc_bcd"),
])
def test_impossible_options_are_refused(tiny_bin, ckpt, flags, message):
    with pytest.raises(UserDataError, match=message):
        decode(tiny_bin, ckpt, "--doc-online-decoding", *flags)


def test_waves_follow_the_context():
    ctx = torch.tensor([[-1, -1], [0, -1], [0, 1], [-1, -1], [3, -1], [5, -1]])  # row 5: an extra row (index 5 >= B)
    assert online_waves(ctx, 5, list(range(5))) == [[0, 3], [1, 4], [2]]
    with pytest.raises(UserDataError, match="reads a later sentence"):
        online_waves(torch.tensor([[1], [0]]), 2, [7, 8])

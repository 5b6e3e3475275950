"""Gu ch. 6, MetaNMT, the command lines: the tasks ``meta_translation`` and ``ulr_finetune_translation`` with
``ulr_transformer`` on a tiny synthetic three-language corpus (training, resume, meta-validation, fine-tuning
strategies, decoding). The math is in ``test_meta_nmt_math.py``."""
import re
import types

import pytest
import torch

from harness import fairseq, generate, hypotheses, n_lines, train_objects, universal_corpus

DELTA = "encoder.embed_tokens.delta.weight"
ULR_PARAMS = {"encoder.embed_tokens.ulr.universal", "encoder.embed_tokens.ulr.A"}


# ----------------------------------------------------------------------------- command lines
@pytest.fixture(scope="module")
def meta_data(tmp_path_factory):
    """The harness's three-language toy corpus (aux aa, bb; low-resource cc, 40 lines); valid 20, test 12 cc."""
    return universal_corpus(tmp_path_factory.mktemp("meta"), n_valid=20, n_test=12)


MODEL = ["--arch", "ulr_transformer_tiny", "--ulr", "--dropout", "0.1"]
OPT = ["--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9", "--lr", "1e-3",
       "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "2", "--max-tokens", "400", "--cpu", "--seed", "1",
       "--no-progress-bar", "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints",
       "--criterion", "cross_entropy"]
META = ["--task", "meta_translation", *MODEL, *OPT]


def meta_train(data, save_dir, max_update, *extra, **kw):
    return fairseq("train", data, *META, "--max-update", max_update, "--save-dir", save_dir, *extra, **kw)


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


@pytest.fixture(scope="module")
def meta_ckpt(meta_data, tmp_path_factory):
    """Four meta-updates of ulr_transformer_tiny (first-order, episodes over aa and bb)."""
    save = tmp_path_factory.mktemp("meta_ckpt")
    p = meta_train(meta_data, save, 4)
    return save / "checkpoint_last.pt", p.stdout + p.stderr


def test_cli_meta_train_and_generate(meta_data, meta_ckpt, tmp_path):
    ckpt, log = meta_ckpt
    assert "meta-training languages aa,bb, inner adam x1 (lr = meta lr), first_order meta-gradient" in log
    assert "fixed in the inner loop: encoder.embed_tokens.ulr.A, encoder.embed_tokens.ulr.universal" in log
    assert "zeroed per episode: encoder.embed_tokens.delta.weight" in log
    assert "inner_loss=" in log and "num_updates=4" in log
    sd = weights(ckpt)
    assert sd[DELTA].abs().sum() == 0  # Δε is zero between episodes
    out = generate(meta_data, ckpt, "--task", "meta_translation")
    assert len(hypotheses(out)) == n_lines(meta_data.parent / "spm" / "test.src")


def test_cli_resume_equals_an_uninterrupted_run(meta_data, meta_ckpt, tmp_path):
    meta_train(meta_data, tmp_path, 2)
    p = meta_train(meta_data, tmp_path, 4)
    assert "Loaded checkpoint" in p.stdout + p.stderr and "@ 2 updates" in p.stdout + p.stderr
    a, b = weights(meta_ckpt[0]), weights(tmp_path / "checkpoint_last.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cli_finite_difference_and_meta_validation_on_a_held_out_language(meta_data, meta_ckpt, tmp_path):
    p = meta_train(meta_data, tmp_path, 2, "--meta-langs", "aa", "--meta-valid-lang", "bb", "--meta-valid-steps",
                   "2", "--meta-gradient", "finite_difference", "--inner-lr", "1e-3",
                   "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}', "--best-checkpoint-metric", "bleu",
                   "--maximize-best-checkpoint-metric")
    log = p.stdout + p.stderr
    assert re.search(r"valid on 'valid' subset .*\| bleu \d", log) and (tmp_path / "checkpoint_best.pt").exists()
    assert "meta-training languages aa, inner adam x1 (lr 0.001), finite_difference meta-gradient, " \
           "meta-validation on bb" in log
    assert "meta-validation: fine-tuned a copy on bb for 2 steps (lr 0.0001, emb+enc)" in log
    assert weights(tmp_path / "checkpoint_last.pt")[DELTA].abs().sum() == 0


@pytest.mark.parametrize("strategy", ["emb", "emb+enc", "all"])
def test_cli_finetune_strategies_from_the_meta_checkpoint(meta_data, meta_ckpt, tmp_path, strategy):
    p = fairseq("train", meta_data, "--task", "ulr_finetune_translation", "--finetune-strategy", strategy,
                "--target-token-budget", "300", "--subsample-seed", "2", "--finetune-from-model", meta_ckpt[0],
                *MODEL, *OPT, "--max-update", "2", "--save-dir", tmp_path)
    log = p.stdout + p.stderr
    assert "ulr_finetune_translation: training on" in log and "budget 300, draw 2" in log
    before, after = weights(meta_ckpt[0]), weights(tmp_path / "checkpoint_last.pt")
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    allowed = {"emb": lambda k: k == DELTA, "emb+enc": lambda k: k.startswith("encoder.") and k not in ULR_PARAMS,
               "all": lambda k: k not in ULR_PARAMS}[strategy]
    assert DELTA in changed and all(allowed(k) for k in changed), sorted(changed)
    if strategy != "emb":
        assert any(k.startswith("encoder.layers.") for k in changed)
    if strategy == "all":
        assert any(k.startswith("decoder.") for k in changed)
        out = generate(meta_data, tmp_path / "checkpoint_last.pt", "--task", "ulr_finetune_translation")
        assert len(hypotheses(out)) == n_lines(meta_data.parent / "spm" / "test.src")


def test_cli_multilingual_transfer_baseline_joint_phase(meta_data, tmp_path):
    """Eq. 6.11: universal_translation + ulr_transformer with Δε kept at zero; fine-tuning then works as above."""
    fairseq("train", meta_data, "--task", "universal_translation", *MODEL, "--ulr-freeze-delta", *OPT,
            "--max-update", "2", "--save-dir", tmp_path)
    sd = weights(tmp_path / "checkpoint_last.pt")
    assert sd[DELTA].abs().sum() == 0


def test_meta_validation_bleu_decodes_with_the_fine_tuned_copy(meta_data):
    """--eval-bleu with --meta-valid-lang: the dev BLEU is the fine-tuned copy's (as the loss is), not the meta
    model's -- fairseq's SequenceGenerator decodes with the models it was built on, so the task builds one on the
    copy for each validation and the meta model's generator is back afterwards."""
    _, task, model, criterion = train_objects(
        meta_data, *META, "--meta-langs", "aa", "--meta-valid-lang", "bb", "--meta-valid-steps", "1",
        "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}')
    task.load_dataset("train")
    task.load_dataset("valid")
    ds = task.dataset("valid")
    sample = ds.collater([ds[i] for i in range(4)])
    meta_generator = task.sequence_generator
    decoded_with = []

    def inference_with_bleu(generator, sample_, model_):
        decoded_with.append((generator.model.models[0], model_))
        return types.SimpleNamespace(sys_len=1, ref_len=1, counts=[0] * 4, totals=[1] * 4)

    task._inference_with_bleu = inference_with_bleu
    for epoch in (1, 2):
        task.begin_valid_epoch(epoch, model)
        model.eval()
        with torch.no_grad():
            task.valid_step(sample, model, criterion)
            task.valid_step(sample, model, criterion)
        tuned = task._valid_model
        assert tuned is not model and decoded_with[-2:] == [(tuned, tuned)] * 2
        assert task.sequence_generator is meta_generator and meta_generator.model.models[0] is model
    assert decoded_with[0][0] is not decoded_with[-1][0]  # a new copy (and generator) at each validation


def test_cli_bad_meta_languages_are_one_clear_error(meta_data, tmp_path):
    p = meta_train(meta_data, tmp_path, 1, "--meta-langs", "aa,zz", check=False)
    assert p.returncode != 0
    assert "--meta-langs zz: not a language of this task (its languages: aa, bb, cc)" in p.stdout + p.stderr
    p = meta_train(meta_data, tmp_path, 1, "--meta-valid-lang", "aa", check=False)
    assert p.returncode != 0 and "--meta-valid-lang aa is also a meta-training language" in p.stdout + p.stderr

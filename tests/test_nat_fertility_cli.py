"""Gu (2018) ch. 8: fertility NAT, the data and the command lines: the task's batches, eflomal fertilities, then
fairseq-train / fairseq-generate (copy, uniform and positional inputs; distillation, resume, fine-tuning, NPD)."""
import shutil

import pytest
import torch

import fairseq_ext  # noqa: F401
from harness import TINY_TRANSFORMER, fairseq, generate, hypotheses, n_lines, run, train


# ============================================================================ data: dataset + task
def test_task_batches_fertility_with_the_source(fert_bin):
    from fairseq.tasks import TASK_REGISTRY
    from fairseq_ext.tasks.translation_fertility import TranslationFertilityConfig

    cfg = TranslationFertilityConfig(data=str(fert_bin), source_lang="es", target_lang="en", dataset_impl="mmap",
                                     train_subset="train", required_seq_len_multiple=1, num_batch_buckets=0)
    task = TASK_REGISTRY["translation_fertility"].setup_task(cfg)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(len(ds))])
    src, fert, tgt = batch["net_input"]["src_tokens"], batch["fertility"], batch["target"]
    assert fert.shape == src.shape
    words = src.ne(task.src_dict.pad()) & src.ne(task.src_dict.eos())
    assert (fert[~words] == 0).all()
    assert torch.equal(fert.sum(1), tgt.ne(task.tgt_dict.pad()).sum(1))  # Σf = T
    assert not tgt.eq(task.tgt_dict.eos()).any()  # NAT targets have no <eos>


# ============================================================================ CLI
@pytest.fixture(scope="module")
def fert_bin(tiny_bin, tmp_path_factory):
    """A copy of the tiny data with eflomal fertilities (the real CLI)."""
    out = tmp_path_factory.mktemp("nat") / "bin"
    shutil.copytree(tiny_bin, out)
    import sys

    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.fertility", out, "--aligner", "eflomal"])
    assert "eflomal aligned" in p.stderr
    return out


def test_cli_eflomal_fertilities_sum_to_target_lengths(fert_bin):
    from fairseq.data import data_utils

    for split in ("train", "valid", "test"):
        fert = data_utils.load_indexed_dataset(str(fert_bin / f"{split}.es-en.fert"), None)
        src = data_utils.load_indexed_dataset(str(fert_bin / f"{split}.es-en.es"), None)
        tgt = data_utils.load_indexed_dataset(str(fert_bin / f"{split}.es-en.en"), None)
        assert len(fert) == len(src) == len(tgt)
        for i in range(len(fert)):
            assert len(fert[i]) == len(src[i]) - 1 and int(fert[i].sum()) == len(tgt[i]) - 1


def _train_nat(data, save_dir, *extra, max_update=4):
    return train(data, save_dir, ["--arch", "nat_fertility_tiny"], task="translation_fertility",
                 criterion="nat_fertility_loss", max_update=max_update, extra=list(extra))


def _decode(data, ckpt, *extra):
    out = generate(data, ckpt, *extra, task="translation_fertility")
    hyps = hypotheses(out)
    assert sorted(hyps) == list(range(n_lines(data / "test.ids")))  # one output per test sentence
    return out, hyps


def test_cli_train_and_decode_copy_fertility(fert_bin, tmp_path):
    ckpt = _train_nat(fert_bin, tmp_path / "nat")
    for mode in ("argmax", "average"):
        _decode(fert_bin, ckpt, "--fertility-decoding", mode)
    out, hyps = _decode(fert_bin, ckpt, "--oracle-length")  # reference fertilities: reference lengths
    refs = {int(l.split("\t")[0][2:]): l.split("\t")[1] for l in out.splitlines() if l.startswith("T-")}
    assert all(len(hyps[i].split()) == len(refs[i].split()) for i in hyps)


@pytest.mark.parametrize("mode", ["uniform", "positional"])
def test_cli_train_and_decode_uniform_and_positional(fert_bin, tmp_path, mode):
    ckpt = _train_nat(fert_bin, tmp_path / mode, "--decoder-input", mode, "--no-positional-attention"
                      if mode == "positional" else "--pos-attn-diag-mask", max_update=3)
    _decode(fert_bin, ckpt)
    out, hyps = _decode(fert_bin, ckpt, "--oracle-length")
    refs = {int(l.split("\t")[0][2:]): l.split("\t")[1] for l in out.splitlines() if l.startswith("T-")}
    assert all(len(hyps[i].split()) == len(refs[i].split()) for i in hyps)


def test_cli_distill_resume_finetune_and_npd(tiny_bin, tmp_path):
    import sys

    teacher = train(tiny_bin, tmp_path / "teacher", TINY_TRANSFORMER, max_update=10)
    kd = tmp_path / "kd"
    cmd = [sys.executable, "-m", "fairseq_ext.tools.corpora.distill", "--path", teacher, "--data", tiny_bin, "--out", kd,
           "--splits", "train", "valid", "--chunk-size", "50", "--max-len-b", "5", "--max-len-a", "1.0"]
    p = run(cmd)
    assert "train: 209/209 sentences" in p.stderr
    first = (kd / "train.distill.en").read_text()
    chunk = kd / ".distill" / "train" / "chunk-000002.tsv"
    chunk.unlink()
    p = run(cmd + ["--fertility", "eflomal"])  # resumes: only the deleted chunk is decoded again
    assert "resuming, 159/209" in p.stderr and chunk.exists()
    assert (kd / "train.distill.en").read_text() == first
    assert n_lines(kd / "train.distill.en") == 209 and (kd / "train.es-en.fert.bin").exists()
    # test keeps the real references
    assert (kd / "test.es-en.en.bin").read_bytes() == (tiny_bin / "test.es-en.en.bin").read_bytes()

    # NAT with the teacher's encoder, then fine-tuning with Eq. 8.11, then NPD with the teacher
    nat = _train_nat(kd, tmp_path / "nat", "--init-encoder-from", teacher, max_update=3)
    ft = _train_nat(kd, tmp_path / "ft", "--finetune-from-model", nat, "--finetune", "--teacher-path", teacher,
                    "--ft-rl-center", "--ft-rl-scale", "0.1", max_update=2)
    _decode(kd, ft, "--npd-samples", "3", "--teacher-path", teacher, "--seed", "2")
    # EPD (Eq. 8.8): the 4 most probable fertility sequences; the chunked rescoring does not change the output
    epd, _ = _decode(kd, ft, "--fertility-decoding", "epd", "--epd-topk", "4", "--teacher-path", teacher)
    epd_chunked, _ = _decode(kd, ft, "--fertility-decoding", "epd", "--epd-topk", "4", "--teacher-path", teacher,
                             "--rescore-batch", "3")
    assert [l for l in epd.splitlines() if l[:2] in ("H-", "D-")] == \
        [l for l in epd_chunked.splitlines() if l[:2] in ("H-", "D-")]
    p = fairseq("generate", kd, "--task", "translation_fertility", "--path", ft, "--cpu", "--npd-samples", "2",
                check=False)
    assert p.returncode != 0 and "--teacher-path" in (p.stderr + p.stdout)
    p = fairseq("generate", kd, "--task", "translation_fertility", "--path", ft, "--cpu", "--fertility-decoding",
                "epd", check=False)
    assert p.returncode != 0 and "--teacher-path" in (p.stderr + p.stdout)

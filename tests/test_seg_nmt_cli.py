"""SEG-NMT (Gu 2019 ch. 4; fairseq_ext/tasks/seg_translation.py), the task and the command lines: the batch
contract and errors of ``seg_translation`` with side files written here, then fairseq-train / fairseq-generate on
the tiny slice."""
import json
import shutil

import pytest
import torch
from fairseq.data import data_utils

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.data.translation_memory import TMEntry, TMFormatError, write_tm
from harness import USER_DIR, build_model, fairseq_in_one_process, hypotheses, n_lines
from seg_toys import EOS, PAD


# ------------------------------------------------------------------------------------------ the task
def similar(a, b) -> float:
    a, b = set(a), set(b)
    return len(a & b) / max(len(a | b), 1)


def write_side_files(data, splits=("train", "valid", "test"), n_candidates=6):
    """Side files for the binarized tiny data: candidates ranked by token-set overlap (the training line
    itself excluded), adaptive = Algorithm 1's greedy coverage over them."""
    from fairseq.data import Dictionary

    d = Dictionary.load(str(data / "dict.es.txt"))
    memory = data_utils.load_indexed_dataset(str(data / "train.es-en.es"), d)
    mem = [memory[i][:-1].tolist() for i in range(len(memory))]
    for split in splits:
        ds = data_utils.load_indexed_dataset(str(data / f"{split}.es-en.es"), d)
        entries = []
        for i in range(len(ds)):
            x = ds[i][:-1].tolist()
            ranked = sorted((j for j in range(len(mem)) if not (split == "train" and j == i)),
                            key=lambda j: (-similar(x, mem[j]), j))[:n_candidates]
            covered, c, adaptive = set(), 0.0, []
            for j in ranked:  # Alg. 1 (union erratum)
                cov = sum(t in covered | set(mem[j]) for t in x) / max(len(x), 1)
                if cov > c:
                    c, covered = cov, covered | set(mem[j])
                    adaptive.append(j)
            entries.append(TMEntry(ranked, [similar(x, mem[j]) for j in ranked], adaptive))
        write_tm(str(data), split, entries, {"memory_lines": len(mem), "exclude_self": split == "train"})


@pytest.fixture(scope="module")
def seg_bin(tiny_bin, tmp_path_factory):
    data = tmp_path_factory.mktemp("seg_bin") / "bin"
    shutil.copytree(tiny_bin, data)
    write_side_files(data)
    return data


def task_for(data, **kw):
    from fairseq_ext.tasks.seg_translation import SegTranslationConfig, SegTranslationTask

    cfg = SegTranslationConfig(data=str(data), source_lang="es", target_lang="en", dataset_impl="mmap",
                               train_subset="train", required_seq_len_multiple=1, num_batch_buckets=0, **kw)
    return SegTranslationTask.setup_task(cfg)


def test_collater_contract(seg_bin):
    task = task_for(seg_bin, tm_topk=2)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    mem_src, mem_tgt = task.memory
    entries = [json.loads(line) for line in open(seg_bin / "valid.tm.jsonl")]
    batch = ds.collater([ds[i] for i in range(5)])
    net = batch["net_input"]
    B, R = 5, net["tm_src_tokens"].size(0)
    assert net["tm_index"].shape == (B, 2) and net["tm_index"].ge(0).all()
    assert batch["tm_id"].tolist() == list(dict.fromkeys(j for e in [entries[i] for i in batch["id"].tolist()]
                                                         for j in e["ids"][:2]))  # distinct rows, in order
    assert R == len(batch["tm_id"]) and net["tm_src_lengths"].shape == (R,)
    for b, i in enumerate(batch["id"].tolist()):
        rows = net["tm_index"][b].tolist()
        assert [int(batch["tm_id"][r]) for r in rows] == entries[i]["ids"][:2]
        assert torch.allclose(batch["tm_fuzzy"][b], torch.tensor(entries[i]["fuzzy"][:2]), atol=1e-5)
    for r, j in enumerate(batch["tm_id"].tolist()):
        x, y = mem_src[j], mem_tgt[j]
        s = net["tm_src_tokens"][r]
        assert s[s.ne(PAD)].tolist() == x.tolist() and s[-1] == EOS  # left-padded, ends in </s>
        assert int(net["tm_src_lengths"][r]) == x.numel()
        t, p = net["tm_tgt_tokens"][r], net["tm_prev_output_tokens"][r]
        assert t[: y.numel()].tolist() == y.tolist() and t[y.numel():].eq(PAD).all()  # right-padded
        assert p[: y.numel()].tolist() == [EOS] + y[:-1].tolist()
    # --max-tokens counts the pairs
    i = 0
    own = max(int(ds.src_sizes[i]), int(ds.tgt_sizes[i]))
    extra = sum(max(int(mem_src.sizes[j]), int(mem_tgt.sizes[j])) for j in entries[i]["ids"][:2])
    assert ds.num_tokens(i) == own + extra and ds.num_tokens_vec([i])[0] == own + extra
    assert ds.size(i) == (ds.src_sizes[i], ds.tgt_sizes[i])


def test_selections_and_examples_without_pairs(seg_bin):
    entries = [json.loads(line) for line in open(seg_bin / "test.tm.jsonl")]
    task = task_for(seg_bin, tm_selection="adaptive", tm_max_k=3)
    task.load_dataset("test")
    ds = task.dataset("test")
    assert ds.selected == [e["adaptive"][:3] for e in entries]
    batch = ds.collater([ds[i] for i in range(4)])
    K = max(len(entries[i]["adaptive"][:3]) for i in range(4))
    assert batch["net_input"]["tm_index"].shape == (4, K)
    for b, i in enumerate(batch["id"].tolist()):
        n = len(entries[i]["adaptive"][:3])
        assert (batch["net_input"]["tm_index"][b, n:] == -1).all() and torch.isnan(batch["tm_fuzzy"][b, n:]).all()
    none = task_for(seg_bin, tm_topk=0)
    none.load_dataset("test")
    batch = none.dataset("test").collater([none.dataset("test")[i] for i in range(3)])
    assert batch["net_input"]["tm_index"].shape == (3, 0) and batch["net_input"]["tm_src_tokens"].shape == (0, 1)
    model = build_model("seg_nmt_tiny", seed=None, task=none)
    with torch.no_grad():  # an empty memory runs
        lp = model(**batch["net_input"])[0]
    assert torch.isfinite(lp).any(-1).all() and not torch.isnan(lp).any()


def test_own_line_is_never_retrieved_for_training(seg_bin, tmp_path):
    data = tmp_path / "bin"
    shutil.copytree(seg_bin, data)
    entries = [TMEntry(**json.loads(line)) for line in open(data / "train.tm.jsonl")]
    entries[3] = TMEntry([3, 7, 8], [1.0, 0.5, 0.4], [3])
    write_tm(str(data), "train", entries, {"memory_lines": len(entries)})
    task = task_for(data, tm_topk=2)
    task.load_dataset("train")
    assert task.dataset("train").selected[3] == [7, 8]


def test_missing_or_stale_side_files_are_one_clear_error(seg_bin, tmp_path):
    data = tmp_path / "bin"
    shutil.copytree(seg_bin, data)
    (data / "test.tm.jsonl").unlink()
    task = task_for(data)
    with pytest.raises(TMFormatError, match=r"test\.tm\.jsonl: missing translation-memory side file"):
        task.load_dataset("test")
    lines = (seg_bin / "valid.tm.jsonl").read_text().splitlines()
    write_tm(str(data), "valid", [TMEntry(**json.loads(x)) for x in lines[:-1]], {"memory_lines": 209})
    with pytest.raises(TMFormatError, match=r"valid\.tm\.jsonl: stale: \d+ lines for a split of \d+ examples"):
        task.load_dataset("valid")
    write_tm(str(data), "valid", [TMEntry(**json.loads(x)) for x in lines], {"memory_lines": 300})
    with pytest.raises(TMFormatError, match=r"valid\.tm\.meta\.json: stale"):
        task.load_dataset("valid")
    with pytest.raises(ValueError, match="--tm-topk"):
        task_for(data, tm_topk=20)


def test_subset_for_inference_keeps_the_memory_rows(seg_bin):
    task = task_for(seg_bin)
    task.load_dataset("test")
    ds = task.dataset("test")
    batch = ds.collater([ds[i] for i in range(4)])
    keep = torch.tensor([1, 3])
    sub = task.subset_for_inference(batch, keep)
    for k in ("tm_src_tokens", "tm_tgt_tokens", "tm_prev_output_tokens", "tm_src_lengths"):
        assert torch.equal(sub["net_input"][k], batch["net_input"][k])
    assert torch.equal(sub["net_input"]["tm_index"], batch["net_input"]["tm_index"][keep])
    assert torch.equal(sub["tm_id"], batch["tm_id"]) and sub["id"].tolist() == batch["id"][keep].tolist()


# ------------------------------------------------------------------------------------------ command lines
TRAIN = ["--task", "seg_translation", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1500", "--cpu",
         "--seed", "1", "--no-progress-bar", "--log-format", "simple", "--log-interval", "1",
         "--no-epoch-checkpoints", "--max-update", "3"]


def generate_args(data, ckpt, out, *flags):
    return [str(data), "--user-dir", str(USER_DIR), "--task", "seg_translation", "--path", str(ckpt), "--cpu",
            "--beam", "3", "--max-len-b", "8", "--batch-size", "16", "--results-path", str(out), *flags]


@pytest.mark.parametrize("arch,criterion", [("seg_nmt_tiny", "seg_nmt_cross_entropy"),
                                            ("seg_copynet_tiny", "copynet_cross_entropy")])
def test_train_and_generate_with_topk_and_adaptive(seg_bin, tmp_path, arch, criterion):
    ckpt = tmp_path / "ckpt" / "checkpoint_last.pt"
    export = tmp_path / "trace.jsonl"
    p = fairseq_in_one_process([
        ("train", [str(seg_bin), "--user-dir", str(USER_DIR), "--arch", arch, "--criterion", criterion, *TRAIN,
                   "--save-dir", str(tmp_path / "ckpt")]),
        ("generate", generate_args(seg_bin, ckpt, tmp_path / "topk", "--tm-topk", "4", "--tm-export", str(export))),
        ("generate", generate_args(seg_bin, ckpt, tmp_path / "adaptive", "--tm-selection", "adaptive")),
    ])
    log = p.stdout + p.stderr
    assert "Traceback" not in log
    n = n_lines(seg_bin / "test.ids")
    for name in ("topk", "adaptive"):
        text = (tmp_path / name / "generate-test.txt").read_text()
        assert sorted(hypotheses(text)) == list(range(n)), name
        assert len([line for line in text.splitlines() if line.startswith("H-")]) == n, name
    assert "topk selection (K=4, max 16): 4.000 pairs per example" in log and "adaptive selection" in log
    if arch == "seg_nmt_tiny":
        assert "tm_gate" in log  # logged by the criterion
        records = [json.loads(line) for line in export.read_text().splitlines()]
        assert sorted(r["id"] for r in records if r["rank"] == 0) == list(range(n))
        for r in records:
            T = len(r["tokens"])
            assert r["tokens"][-1] == "</s>" and len(r["gate"]) == len(r["slot_line"]) == T
            assert all(0.0 <= g <= 1.0 for g in r["gate"]) and len(r["tm_lines"]) == 4
            assert all(line in r["tm_lines"] for line in r["slot_line"])
    else:
        assert not export.exists() or export.read_text() == ""


def test_rnnsearch_trains_on_the_task_and_warm_starts_seg_nmt(seg_bin, tmp_path):
    """The NMT baseline trains on seg_translation unchanged (the memory keys are not given to it), and its
    checkpoint warm-starts seg_nmt_tiny (--finetune-from-model)."""
    base = tmp_path / "base" / "checkpoint_last.pt"
    p = fairseq_in_one_process([
        ("train", [str(seg_bin), "--user-dir", str(USER_DIR), "--arch", "rnnsearch_tiny", "--criterion",
                   "seg_nmt_cross_entropy", *TRAIN, "--save-dir", str(tmp_path / "base")]),
        ("train", [str(seg_bin), "--user-dir", str(USER_DIR), "--arch", "seg_nmt_tiny", "--criterion",
                   "seg_nmt_cross_entropy", *TRAIN, "--save-dir", str(tmp_path / "seg"),
                   "--finetune-from-model", str(base)]),
    ])
    log = p.stdout + p.stderr
    assert "warm start from a sentence checkpoint: copied" in log and "decoder.tm_* (" in log
    state = torch.load(tmp_path / "seg" / "checkpoint_last.pt", weights_only=False)
    assert state["cfg"]["model"].arch == "seg_nmt_tiny"

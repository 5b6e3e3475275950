"""Diagnostic corpora of the copying and retrieval mechanisms (fairseq_ext.tools.analysis.diagnostics_copy): the bounds hold by
construction (test names outside the dictionary and the training data; test tuplets that share their source), the
translation-memory side files point where they should; CopyNet's ``--no-copy`` switch; and (slow) CopyNet beats
its baseline on a short run of recipes/bench/diagnostics_copy.py."""
import argparse
import json
import subprocess
import sys
from collections import Counter

import pytest
import torch

from fairseq_ext.data.translation_memory import read_tm
from fairseq_ext.tools.common import ToolError
from fairseq_ext.tools.analysis.diagnostics_copy import (
    generate, generate_copy_split, generate_retrieval, name_pools, name_scores, value_scores,
)
from harness import ROOT, build_model, copy_task, env, toy_batch

SMALL_RETRIEVAL = dict(n_train=300, n_valid=30, n_test=80)


def words(lines):
    return {w for line in lines for w in line.split()}


# ------------------------------------------------------------------------------------------ copy
def test_copy_names_translate_as_themselves_and_fillers_one_to_one():
    s = generate_copy_split("train", 200, name_pools(1, [100])[0])
    for src, tgt, p in zip(s["src"], s["tgt"], s["probes"]):
        a, b = src.split(), tgt.split()
        assert len(a) == len(b) and 1 <= len(p["names"]) <= 2
        assert [w for w in b if w.startswith("N")] == p["names"] == [w for w in a if w.startswith("N")]
        assert all(y == "v" + x[1:] for x, y in zip(a, b) if x.startswith("w"))


def test_copy_test_names_occur_nowhere_in_training_and_not_in_the_dictionary(tmp_path):
    info = generate("copy", str(tmp_path / "c"), n_train=300, n_valid=40, n_test=60, binarize=False)
    raw = tmp_path / "c" / "raw"
    test_names = {n for x in (raw / "test.probes.jsonl").read_text().splitlines() for n in json.loads(x)["names"]}
    assert len(test_names) > 30 and info["splits"]["test"]["names"] >= 60
    seen = set()
    for split in ("train", "valid"):
        for side in ("src", "tgt"):
            seen |= words((raw / f"{split}.{side}").read_text().splitlines())
    assert not test_names & seen  # not in any training (or valid) sentence, target or source
    vocab = {line.split()[0] for line in (tmp_path / "c" / "dict.txt").read_text().splitlines()}
    assert not {w for w in seen | test_names if w.startswith("N")} & vocab  # the bound: no name can be generated
    assert {"w0", "v0"} <= vocab


def test_copy_binarized_targets_have_unk_where_the_names_are(tmp_path):
    from fairseq.data import Dictionary, data_utils

    info = generate("copy", str(tmp_path / "c"), n_train=120, n_valid=20, n_test=20)
    d = Dictionary.load(str(tmp_path / "c" / "bin" / "dict.tgt.txt"))
    ds = data_utils.load_indexed_dataset(str(tmp_path / "c" / "bin" / "test.src-tgt.tgt"), d)
    raw = (tmp_path / "c" / "raw" / "test.tgt").read_text().splitlines()
    for i, line in enumerate(raw):
        ids = ds[i].tolist()[:-1]
        assert [t == d.unk() for t in ids] == [w.startswith("N") for w in line.split()]
    assert info["bin"].endswith("bin")


def test_name_scores():
    probes = [{"line": 0, "names": ["Nab", "Ncd"]}, {"line": 1, "names": ["Nef"]}]
    res = name_scores(probes, {0: "v1 Nab v2 <unk>", 1: "Nef v3"})
    assert res["name_accuracy"] == pytest.approx(2 / 3) and res["exact_names"] == 0.5 and res["unk"] == 0.5
    with pytest.raises(ToolError, match="no hypothesis for line 1"):
        name_scores(probes, {0: ""})


# ------------------------------------------------------------------------------------------ retrieval
def test_retrieval_tuplets_share_their_source_and_take_every_value_once():
    r = generate_retrieval(seed=2, **SMALL_RETRIEVAL)
    V = 4
    by_tuplet = {}
    for p in r["probes"]:
        by_tuplet.setdefault(p["tuplet"], []).append(p)
    assert len(by_tuplet) == r["tuplets"] == 20
    for members in by_tuplet.values():
        assert len(members) == V and len({r["test"]["src"][p["line"]] for p in members}) == 1
        assert sorted(p["correct"] for p in members) == [f"u{i}" for i in range(V)]
        for p in members:
            assert r["test"]["tgt"][p["line"]].split()[p["position"]] == p["correct"]
            assert r["test"]["src"][p["line"]].split()[p["position"]] == p["key"]
    # the exact bound: the best function of the source alone is right on one member per tuplet
    seen = {}
    for p in r["probes"]:
        seen.setdefault(r["test"]["src"][p["line"]], Counter())[p["correct"]] += 1
    assert sum(max(c.values()) for c in seen.values()) == len(r["probes"]) // V


def test_retrieval_test_pairs_are_only_in_the_test_memory_and_give_the_answer():
    r = generate_retrieval(seed=2, **SMALL_RETRIEVAL)
    n_train = len(r["train"]["src"])
    assert r["memory"]["src"][:n_train] == r["train"]["src"]  # the test memory = training lines, then test pairs
    train_pairs = set(zip(r["train"]["src"], r["train"]["tgt"]))
    for p, lines in zip(r["probes"], r["tm"]["test"]):
        assert len(lines) == 2 and all(j >= n_train for j in lines)  # never a training line
        for j in lines:
            src, tgt = r["memory"]["src"][j].split(), r["memory"]["tgt"][j].split()
            assert src[p["position"]] == p["key"] and tgt[p["position"]] == p["correct"]
            assert (r["memory"]["src"][j], r["memory"]["tgt"][j]) not in train_pairs
            query = r["test"]["src"][p["line"]].split()
            assert sum(a != b for a, b in zip(src, query)) == 1  # a near-duplicate: one filler redrawn
    for p, lines in zip(r["probes"], r["tm"]["test_swapped"]):
        assert {r["memory"]["tgt"][j].split()[p["position"]] for j in lines} == {p["swapped"]} != {p["correct"]}
    assert all(j < n_train for lines in r["tm"]["test_random"] for j in lines)


def test_retrieval_training_clusters_agree_and_the_mapping_is_redrawn_per_cluster():
    r = generate_retrieval(seed=2, **SMALL_RETRIEVAL)
    src, tgt = r["train"]["src"], r["train"]["tgt"]

    def key_value(i, s=src, t=tgt):
        pos = next(k for k, w in enumerate(s[i].split()) if w.startswith("k"))
        return s[i].split()[pos], t[i].split()[pos]

    for i, lines in enumerate(r["tm"]["train"]):
        assert len(lines) == 2 and i not in lines
        assert all(key_value(j) == key_value(i) for j in lines)
    values_per_key = {}
    for i in range(len(src)):
        k, v = key_value(i)
        values_per_key.setdefault(k, set()).add(v)
    assert all(len(v) >= 3 for v in values_per_key.values())  # no fixed key -> value mapping to memorise
    for i, lines in enumerate(r["tm"]["valid"]):
        pos = next(k for k, w in enumerate(r["valid"]["src"][i].split()) if w.startswith("k"))
        assert {tgt[j].split()[pos] for j in lines} == {r["valid"]["tgt"][i].split()[pos]}


def test_retrieval_files_side_files_and_test_memories(tmp_path):
    info = generate("retrieval", str(tmp_path / "r"), **SMALL_RETRIEVAL)
    out = tmp_path / "r"
    n_train, n_mem = info["memory_lines"]["train"], info["memory_lines"]["test"]
    entries, meta = read_tm(str(out / "bin"), "train", split_lines=n_train, memory_lines=n_train)
    assert all(e.fuzzy and all(0 < f <= 1 for f in e.fuzzy) for e in entries)
    for variant in ("bin_test", "bin_test_random", "bin_test_swapped"):
        entries, _ = read_tm(str(out / variant), "test", split_lines=info["splits"]["test"]["lines"],
                             memory_lines=n_mem)
        assert len(entries) == 80
        assert (out / variant / "train.src-tgt.src.bin").exists()
    same = read_tm(str(out / "bin_test"), "test")[0]
    swapped = read_tm(str(out / "bin_test_swapped"), "test")[0]
    assert all(a.ids != b.ids for a, b in zip(same, swapped))
    again = generate("retrieval", str(out), **SMALL_RETRIEVAL)
    assert again["splits"] == info["splits"]  # up to date: skipped


def test_value_scores():
    probes = [{"line": 0, "correct": "u1", "swapped": "u2", "candidates": ["u0", "u1", "u2"]},
              {"line": 1, "correct": "u0", "swapped": "u1", "candidates": ["u0", "u1", "u2"]},
              {"line": 2, "correct": "u2", "swapped": "u0", "candidates": ["u0", "u1", "u2"]}]
    res = value_scores(probes, {0: "v1 u1 v2", 1: "v1 u1", 2: "u2 u0"})
    assert res["accuracy"] == pytest.approx(1 / 3) and res["swapped"] == pytest.approx(1 / 3)
    assert res["missing"] == 0


def test_cli_generates_the_new_tasks_and_bad_input_is_one_error_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.analysis.diagnostics", "generate", "retrieval", "--out",
                        str(tmp_path / "r"), "--n-train", "60", "--n-valid", "8", "--n-test", "8", "--no-binarize"],
                       cwd=ROOT, env=env(), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "bound 1/V exactly" in p.stdout
    assert len((tmp_path / "r" / "raw" / "test.src").read_text().splitlines()) == 8
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.analysis.diagnostics", "generate", "copy", "--out",
                        str(tmp_path / "x"), "--sent-len", "5", "2"], cwd=ROOT, env=env(), capture_output=True,
                       text=True)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0
    assert p.stderr.startswith("error: --sent-len 5 2") and "Traceback" not in p.stderr
    assert not (tmp_path / "x" / "raw" / "train.src").exists()


# ------------------------------------------------------------------------------------------ CopyNet's switch
def build_copynet(no_copy, V=60, slots=5):
    return build_model("copynet_tiny", task=copy_task(V, slots, V), no_copy=no_copy)


def test_copynet_no_copy_switch_leaves_the_generate_mode_alone():
    """``--no-copy`` (set at inference through --model-overrides): the same weights give the copy slots
    probability 0 and over V the distribution of the model whose copy scores are −∞ (the generate mode with a
    zero selective read); without the switch the copy mode has mass."""
    V = 60
    on, off = build_copynet(False), build_copynet(True)
    off.load_state_dict(on.state_dict())
    assert off.decoder.no_copy and not on.decoder.no_copy
    src, lengths, prev = toy_batch(bsz=3, src_len=7, tgt_len=6)
    src[0, 3] = V + 40  # a source OOV: it owns copy slot V
    with torch.no_grad():
        lp_off = off.get_normalized_probs(off(src, lengths, prev), log_probs=True)
        lp_on = on.get_normalized_probs(on(src, lengths, prev), log_probs=True)
        on.decoder.copy_scores = lambda state, enc: torch.full(enc["src_copy_mask"][0].shape, float("-inf"))
        lp_ref = on.get_normalized_probs(on(src, lengths, prev), log_probs=True)
    assert torch.isinf(lp_off[..., V:]).all() and torch.isfinite(lp_on[0, :, V]).all()
    assert torch.allclose(lp_off, lp_ref, atol=1e-6)
    assert not torch.allclose(lp_off[..., :V], lp_on[..., :V], atol=1e-3)
    assert torch.allclose(lp_off[..., :V].exp().sum(-1), torch.ones(3, 6), atol=1e-5)


def test_copynet_declares_the_switch_and_copies_by_default():
    from fairseq_ext.models.copynet import CopyNetModel

    parser = argparse.ArgumentParser()
    CopyNetModel.add_args(parser)
    assert parser.parse_args(["--no-copy"]).no_copy is True
    assert parser.parse_args([]).no_copy is None  # unset: the decoder copies (bool(None) is False)
    assert not build_copynet(None).decoder.no_copy


# ------------------------------------------------------------------------------------------ slow: the runner
@pytest.mark.slow
def test_copy_diagnostic_copynet_copies_unseen_names_and_the_baseline_cannot(tmp_path):
    """recipes/bench/diagnostics_copy.py on the copy task: CopyNet writes >= 90% of the test names (none seen in
    training), rnnsearch and CopyNet with --no-copy write none (the bound, exactly 0)."""
    out = tmp_path / "diag"
    p = subprocess.run([sys.executable, "recipes/bench/diagnostics_copy.py", "--tasks", "copy", "--updates", "1000",
                        "--curve-every", "0", "--out", str(out), "--table", ""], cwd=ROOT, env=env(),
                       capture_output=True, text=True, timeout=3600)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    base = json.loads((out / "copy" / "rnnsearch" / "result.json").read_text())
    copy = json.loads((out / "copy" / "copynet" / "result.json").read_text())
    assert base["accuracy"] == 0.0 and copy["off"]["copy off"]["name_accuracy"] == 0.0
    assert copy["accuracy"] >= 0.9, copy

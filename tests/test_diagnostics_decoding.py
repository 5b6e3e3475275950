"""Diagnostic corpora of the decoding mechanisms (fairseq_ext.tools.analysis.diagnostics_decoding): the search task's
mode starts with the less frequent first word (greedy's bound), the fertility task's gold fertilities reach the
binarized fertility dataset; and (slow) beam / shrinking beam / NPD beat greedy and fertility copy solves its task on
a short run of recipes/bench/diagnostics_decoding.py."""
import json
import subprocess
import sys

import pytest

from fairseq_ext.tools.analysis.diagnostics_decoding import exact_scores, fertility_of, generate, generate_split
from fairseq_ext.tools.common import ToolError
from harness import ROOT, env


def test_search_mode_starts_with_the_minor_word_and_test_references_are_the_mode():
    s = generate_split("search", "train", 3000, major=0.6, suffix_types=4)
    major = sum(t.startswith("A ") for t in s["tgt"]) / len(s["tgt"])
    assert 0.57 < major < 0.63
    for src, tgt, p in zip(s["src"], s["tgt"], s["probes"]):
        words = src.split()
        assert p["mode"] == " ".join(["B"] + ["v" + w[1:] for w in words]) and p["major"] == "A"
        t = tgt.split()
        assert len(t) == len(words) + 1
        assert tgt == p["mode"] or (t[0] == "A" and all(w in {"r0", "r1", "r2", "r3"} for w in t[1:]))
    # the bound: every A sentence is less probable than the mode (0.6 / 4^2 < 0.4 at the shortest length)
    assert 0.6 / 4 ** 2 < 0.4
    t = generate_split("search", "test", 50)
    assert t["tgt"] == [p["mode"] for p in t["probes"]]
    with pytest.raises(ToolError, match="not the mode"):
        generate_split("search", "train", 5, major=0.9, suffix_types=2)
    with pytest.raises(ToolError, match="more frequent"):
        generate_split("search", "train", 5, major=0.4)


def test_fertility_targets_repeat_each_word_its_fertility_and_reach_the_dataset(tmp_path):
    from fairseq.data import data_utils

    s = generate_split("fertility", "train", 200)
    for src, tgt, links, p in zip(s["src"], s["tgt"], s["links"], s["probes"]):
        words = src.split()
        assert p["fertility"] == [fertility_of(w) for w in words] and set(p["fertility"]) <= {1, 2, 3}
        assert tgt.split() == [f"g{w[1:]}" for w in words for _ in range(fertility_of(w))]
        assert len(links.split()) == len(tgt.split())
    info = generate("fertility", str(tmp_path / "f"), n_train=40, n_valid=10, n_test=10)
    fert = data_utils.load_indexed_dataset(str(tmp_path / "f" / "bin" / "test.src-tgt.fert"), None)
    probes = [json.loads(x) for x in (tmp_path / "f" / "raw" / "test.probes.jsonl").read_text().splitlines()]
    assert [fert[i].tolist() for i in range(len(fert))] == [p["fertility"] for p in probes]
    assert generate("fertility", str(tmp_path / "f"), n_train=40, n_valid=10, n_test=10)["splits"] == info["splits"]


def test_exact_scores():
    probes = [{"line": 0, "major": "A"}, {"line": 1, "major": "A"}]
    res = exact_scores(probes, {0: "A r1 r2", 1: "B v1 v2"}, {0: "B v3 v4", 1: "B v1 v2"})
    assert res == {"sentences": 2, "exact": 0.5, "major_first": 0.5, "length_ok": 1.0}
    with pytest.raises(ToolError, match="no hypothesis for line 1"):
        exact_scores(probes, {0: ""}, {0: ""})


def test_cli_bad_input_is_one_error_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.analysis.diagnostics", "generate", "search", "--out",
                        str(tmp_path / "x"), "--major", "0.3"], cwd=ROOT, env=env(), capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0, p.stderr
    assert p.stderr.startswith("error: --major 0.3") and "Traceback" not in p.stderr
    assert not (tmp_path / "x" / "raw" / "train.src").exists()


def _run(tmp_path, *args):
    out = tmp_path / "diag"
    p = subprocess.run([sys.executable, "recipes/bench/diagnostics_decoding.py", *args, "--out", str(out),
                        "--table", ""], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=3600)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    return out


@pytest.mark.slow
def test_beam_reaches_the_mode_that_greedy_cannot(tmp_path):
    """recipes/bench/diagnostics_decoding.py, search, a short run: greedy writes A first on every test sentence (exact
    match 0, the bound), fairseq's beam and the shrinking beam return the mode (>= 0.9)."""
    out = _run(tmp_path, "--tasks", "search", "--updates", "800", "--actor-updates", "20")
    rows = {r["system"]: r for r in json.loads((out / "search" / "result.json").read_text())}
    assert rows["greedy"]["exact"] <= 0.05 and rows["greedy"]["result"]["major_first"] >= 0.95, rows["greedy"]
    assert rows["beam"]["exact"] >= 0.9 and rows["shrinking_beam"]["exact"] >= 0.9, rows


@pytest.mark.slow
def test_fertility_inputs_solve_known_fertilities(tmp_path):
    """recipes/bench/diagnostics_decoding.py, fertility, a short run: the NAT with fertility-copy inputs is exact
    (>= 0.9) with predicted and with reference fertilities."""
    out = _run(tmp_path, "--tasks", "fertility", "--nat-updates", "1000")
    rows = {r["system"]: r for r in json.loads((out / "fertility" / "result.json").read_text())}
    assert rows["fertility"]["exact"] >= 0.9 and rows["fertility_gold"]["exact"] >= 0.9, rows

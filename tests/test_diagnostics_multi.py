"""Diagnostic corpora of the multilingual mechanisms (fairseq_ext.tools.analysis.diagnostics_multi): the cipher language has
no parallel sentence and is a relabelling of the seen one, the shared-form languages make every content word
ambiguous and the test twins make the language-blind bound exact; the folder is what universal_translation and
fairseq-ext-ulr read; and (slow) ULR translates the cipher where Multi-NMT cannot, on a short run of
recipes/bench/diagnostics_multi.py."""
import json
import subprocess
import sys
from collections import Counter, defaultdict

import numpy as np
import pytest

from fairseq_ext.tools.common import ToolError
from fairseq_ext.tools.analysis.diagnostics_multi import MARKERS, build_task, generate
from harness import ROOT, env

SMALL = dict(n_train=300, n_valid=20, n_test=60, concepts=40, seed_pairs=20, dim=8)


def test_ulr_cipher_is_a_relabelling_of_the_seen_language_without_parallel_data():
    t = build_task("ulr_cipher", **SMALL)
    train = t["splits"]["train"]
    assert set(train["lang"]) == {"sa"} and not any(w.startswith("z") for s in train["src"] for w in s.split())
    sa, zc = t["lexicon"]["sa"], t["lexicon"]["zc"]
    assert sorted(sa.values()) == sorted(zc.values()) == list(range(40))  # one word type per concept each
    relabel = {s: next(z for z, cz in zc.items() if cz == c) for s, c in sa.items()}
    assert len(set(relabel.values())) == 40  # bijective on the word types
    test = t["splits"]["test"]
    for i in range(0, len(test["src"]), 2):  # twins: sa line, then its cipher with the same reference
        assert (test["lang"][i], test["lang"][i + 1]) == ("sa", "zc") and test["en"][i] == test["en"][i + 1]
        assert [relabel[w] for w in test["src"][i].split()] == test["src"][i + 1].split()
        assert [f"e{sa[w]}" for w in test["src"][i].split()] == test["en"][i].split()
    seeds = t["seeds"]["zc"]
    assert len(seeds) == 20 and all(e == f"e{zc[z]}" for z, e in seeds)  # cipher -> English through sa


def test_mole_shared_forms_are_ambiguous_and_the_twins_make_the_blind_bound_exact():
    t = build_task("mole_shared", **SMALL)
    la, lb = t["translation"]["la"], t["translation"]["lb"]
    content = [w for w in la if w.startswith("w")]
    assert content and all(la[w] != lb[w] for w in content)  # every shared form translates differently
    assert Counter(t["splits"]["train"]["lang"]).keys() == {"la", "lb"}
    for split, marked in (("test", True), ("test_blind", False)):
        s = t["splits"][split]
        for i in range(0, len(s["src"]), 2):
            a, b = s["src"][i].split(), s["src"][i + 1].split()
            if marked:
                at = s["role"][i]["marker"]
                assert a[at] == MARKERS["la"][0] and b[at] == MARKERS["lb"][0] and a[:at] + a[at + 1:] == b[:at] + b[at + 1:]
            else:
                assert a == b  # nothing tells the twins apart
        # the best language-blind answer (per distinct source line and position, the most frequent reference
        # word, measured on the set itself) is right on exactly half of the content words
        votes = defaultdict(Counter)
        n = 0
        for i, (src, ref) in enumerate(zip(s["src"], s["en"])):
            key = " ".join(w for w in src.split() if w.startswith("w"))
            for j, w in enumerate(x for x in ref.split() if x.startswith("e")):
                votes[(key, j)][w] += 1
                n += 1
        assert sum(max(c.values()) for c in votes.values()) == n // 2


def test_bad_layout_is_one_tool_error():
    with pytest.raises(ToolError, match="Procrustes"):
        build_task("ulr_cipher", **dict(SMALL, seed_pairs=4))
    with pytest.raises(ToolError, match="unknown diagnostic task"):
        build_task("nope")


def test_generate_writes_the_universal_layout_and_projects_with_fairseq_ext_ulr(tmp_path):
    from fairseq.data import Dictionary

    out = tmp_path / "m"
    info = generate("mole_shared", str(out), **SMALL)
    b = out / "bin"
    for split, raw in (("train", "train"), ("valid", "valid"), ("test", "test"), ("test1", "test_blind")):
        assert (b / f"{split}.lang").read_text().splitlines() == (out / "raw" / f"{raw}.lang").read_text().splitlines()
    d = Dictionary.load(str(b / "dict.src.txt"))
    q = np.load(out / "ulr" / "query.npy")
    assert q.shape[0] == len(d)
    rows = {lang: [d.index(f"w{k}__{lang}") for k in range(40)] for lang in ("la", "lb")}
    assert all(r != d.unk() for r in rows["la"] + rows["lb"])
    assert np.array_equal(q[rows["la"]], q[rows["lb"]])  # identical representations under pure ULR
    assert json.loads((out / "manifest.json").read_text())["aux"] == ["la", "lb"]
    assert info["ulr"]["seed_pairs"] == {"la": 20, "lb": 20}

    out = tmp_path / "c"
    info = generate("ulr_cipher", str(out), **SMALL)
    d = Dictionary.load(str(out / "bin" / "dict.src.txt"))
    q, k = np.load(out / "ulr" / "query.npy"), np.load(out / "ulr" / "key.npy")
    uni = (out / "ulr" / "universal.txt").read_text().split()
    zc = info["lexicon"]["zc"]
    nearest = [uni[i] for i in (q[[d.index(f"{z}__zc") for z in zc]] @ k.T).argmax(1)]
    hits = np.mean([n == f"e{c}" for n, c in zip(nearest, zc.values())])
    assert hits >= 0.8 and info["ulr"]["nearest_key"]["zc"] == round(hits, 4)  # seed words or not
    assert info["ulr"]["nearest_key"]["sa"] >= 0.8
    again = generate("ulr_cipher", str(out), **SMALL)
    assert again["splits"] == info["splits"]  # up to date: skipped


def test_cli_generates_and_bad_input_is_one_error_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.analysis.diagnostics", "generate", "ulr_cipher", "--out",
                        str(tmp_path / "x"), "--seed-pairs", "4"], cwd=ROOT, env=env(), capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0, p.stderr
    assert p.stderr.startswith("error: --seed-pairs 4") and "Traceback" not in p.stderr
    assert not (tmp_path / "x" / "raw" / "train.src").exists()


@pytest.mark.slow
def test_ulr_translates_the_zero_resource_cipher_and_multi_nmt_cannot(tmp_path):
    """recipes/bench/diagnostics_multi.py, ulr_cipher, a short run: pure ULR translates the cipher (never seen in
    a parallel sentence) with word accuracy >= 0.8, and falls to the bound (<= 0.02) when its query rows are
    switched off; Multi-NMT stays at the bound."""
    out = tmp_path / "diag"
    p = subprocess.run([sys.executable, "recipes/bench/diagnostics_multi.py", "--tasks", "ulr_cipher", "--systems",
                        "multi", "ulr", "--updates", "1000", "--curve-every", "0", "--n-train", "10000", "--out",
                        str(out), "--table", ""], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=3600)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    ulr = json.loads((out / "ulr_cipher" / "ulr" / "result.json").read_text())
    multi = json.loads((out / "ulr_cipher" / "multi" / "result.json").read_text())
    assert ulr["test"]["accuracy"]["zc"] >= 0.8 and ulr["switch_off"]["accuracy"]["zc"] <= 0.02, ulr
    assert multi["test"]["accuracy"]["zc"] <= 0.02 and multi["test"]["accuracy"]["sa"] >= 0.8, multi

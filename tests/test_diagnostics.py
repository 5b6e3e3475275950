"""Diagnostic corpora (fairseq_ext.tools.analysis.diagnostics): the bound holds by construction, the files are
line-aligned and grouped into documents; and (slow) a document mechanism beats its sentence baseline on a
short run of recipes/bench/diagnostics.py."""
import json
import subprocess
import sys
from collections import Counter

import pytest

from fairseq_ext.data.documents import DocumentIndex, context_positions
from fairseq_ext.tools.common import ToolError
from fairseq_ext.tools.analysis.diagnostics import (
    AMB_TGT, PRO, PRO_TGT, decoded_scores, generate, generate_split, segment_instances,
)
from harness import ROOT, env

SMALL = dict(n_sentences=400)


def docs_of(split):
    """{document: [line numbers]} in order."""
    index = DocumentIndex.from_ids(split["ids"])
    return {index.names[d]: list(index.sentences(d)) for d in range(index.n_docs)}


@pytest.mark.parametrize("task", ["antecedent", "cataphor", "consistency"])
@pytest.mark.parametrize("name", ["train", "test"])
def test_splits_are_line_aligned_documents_with_probes_at_their_lines(task, name):
    s = generate_split(task, name, **SMALL)
    assert len(s["src"]) == len(s["tgt"]) == len(s["ids"]) >= 400
    for a, b in zip(s["src"], s["tgt"]):
        assert len(a.split()) == len(b.split())  # one-to-one translation
    docs = docs_of(s)  # contiguous documents (DocumentIndex raises otherwise)
    assert all(len(lines) >= (2 if task == "consistency" else 4) for lines in docs.values())
    for x in s["instances"]:
        assert s["ids"][x["line"]] == x["id"] and x["id"].rsplit(".", 1)[0] == x["doc"]
        ref = s["tgt"][x["line"]].split()
        assert x["reference"] == s["tgt"][x["line"]] and len(x["variants"]) == 1
        wrong = x["variants"][0].split()
        diff = [k for k, (a, b) in enumerate(zip(ref, wrong)) if a != b]
        assert diff == [x["probe"]["position"]] and ref[diff[0]] == x["probe"]["correct"]
        assert wrong[diff[0]] == x["probe"]["wrong"]


@pytest.mark.parametrize("task", ["antecedent", "cataphor"])
def test_pronoun_class_comes_from_the_noun_sentence_at_distance_d(task):
    s = generate_split(task, "train", **SMALL)
    by_line = {x["line"]: x for x in s["instances"]}
    for doc, lines in docs_of(s).items():
        nouns = [i for i in lines if any(w[:2] in ("na", "nb") for w in s["src"][i].split())]
        assert len(nouns) == 1  # one antecedent per document
        noun_line = nouns[0]
        klass = "f" if " na" in " " + s["src"][noun_line] else "m"
        probes = [i for i in lines if PRO in s["src"][i].split()]
        assert sorted(by_line[i]["distance"] for i in probes) == [1, 2, 3]
        for i in probes:
            x = by_line[i]
            assert x["gender"] == klass and x["probe"]["correct"] == PRO_TGT[klass]
            assert (i - noun_line) == (x["distance"] if task == "antecedent" else -x["distance"])
            # the PRO sentence itself has no noun; online (earlier) context of a cataphor has none either
            assert not any(w[:2] in ("na", "nb") for w in s["src"][i].split())
            if task == "cataphor":
                pos = lines.index(i)
                earlier = context_positions(pos, len(lines), "online")
                assert all(lines[p] != noun_line for p in earlier)


@pytest.mark.parametrize("task", ["antecedent", "cataphor", "consistency"])
def test_the_choice_stream_changes_no_probe_input(task):
    """Another --choice-seed: the same structure, only the classes (and the noun's class letter) change; so
    the class of a probe is independent of the inputs a sentence model (or, for consistency, any source-
    context model) sees."""
    a = generate_split(task, "train", seed=3, choice_seed=3, **SMALL)
    b = generate_split(task, "train", seed=3, choice_seed=4, **SMALL)
    assert a["ids"] == b["ids"]
    for x, y in zip(a["instances"], b["instances"]):
        assert x["line"] == y["line"] and a["src"][x["line"]] == b["src"][y["line"]]
    flipped = sum(x["gender"] != y["gender"] for x, y in zip(a["instances"], b["instances"]))
    assert 0.3 < flipped / len(a["instances"]) < 0.7
    if task == "consistency":
        assert a["src"] == b["src"]  # the whole source side: no source context can tell the choice
    else:
        strip = [" ".join("n?" + w[2:] if w[:2] in ("na", "nb") else w for w in line.split()) for line in a["src"]]
        assert strip == [" ".join("n?" + w[2:] if w[:2] in ("na", "nb") else w for w in line.split())
                         for line in b["src"]]


@pytest.mark.parametrize("task", ["antecedent", "cataphor", "consistency"])
def test_test_twins_make_the_bound_exact(task):
    """valid/test are twin documents with opposite classes and the same probe sentences: the best function of
    the probe sentence alone (here: the class seen most often with that exact sentence, from the test set
    itself) is right on exactly half of them."""
    s = generate_split(task, "test", **SMALL)
    docs = list(docs_of(s).values())
    assert len(docs) % 2 == 0
    for d1, d2 in zip(docs[::2], docs[1::2]):
        assert len(d1) == len(d2)
        same = [s["src"][i] == s["src"][j] for i, j in zip(d1, d2)]
        if task == "consistency":
            assert all(same)
        else:
            assert sum(not x for x in same) == 1  # only the noun sentence differs (its class letter)
    classes = Counter(x["gender"] for x in s["instances"])
    assert classes["f"] == classes["m"]
    seen = {}
    for x in s["instances"]:
        seen.setdefault(s["src"][x["line"]], Counter())[x["gender"]] += 1
    best = sum(max(c.values()) for c in seen.values() if c["f"] != c["m"]) + \
        sum(c["f"] for c in seen.values() if c["f"] == c["m"])
    assert best == len(s["instances"]) // 2


def test_consistency_documents_repeat_one_synonym():
    s = generate_split("consistency", "train", **SMALL)
    by_doc = {}
    for x in s["instances"]:
        by_doc.setdefault(x["doc"], []).append(x)
    for doc, xs in by_doc.items():
        assert len(xs) >= 2 and [x["distance"] for x in xs] == list(range(len(xs)))
        assert len({x["probe"]["correct"] for x in xs}) == 1
        assert {x["probe"]["correct"], x["probe"]["wrong"]} == set(AMB_TGT.values())


def test_generate_writes_raw_and_binarized_data_with_ids_and_sets(tmp_path):
    info = generate("antecedent", str(tmp_path / "a"), n_train=120, n_valid=40, n_test=40)
    raw, bin_dir = tmp_path / "a" / "raw", tmp_path / "a" / "word" / "bin"
    for split in ("train", "valid", "test"):
        n = len((raw / f"{split}.src").read_text().splitlines())
        assert n == len((raw / f"{split}.tgt").read_text().splitlines()) == info["splits"][split]["lines"]
        assert (bin_dir / f"{split}.ids").read_text() == (raw / f"{split}.ids").read_text()
        seg = [json.loads(x) for x in (bin_dir / f"{split}.contrastive.jsonl").read_text().splitlines()]
        assert seg and all(x["reference"].startswith("\u2581") for x in seg)
    assert info["splits"]["test"]["majority_share"] == 0.5
    dict_words = {line.split()[0] for line in (bin_dir / "dict.tgt.txt").read_text().splitlines()}
    assert {"\u2581la", "\u2581le"} <= dict_words
    again = generate("antecedent", str(tmp_path / "a"), n_train=120, n_valid=40, n_test=40)
    assert again["splits"] == info["splits"]  # up to date: skipped


def test_segment_instances_uses_the_word_units():
    x = {"reference": "v1 la v2", "variants": ["v1 le v2"], "line": 0}
    assert segment_instances([x])[0]["variants"] == ["\u2581v1 \u2581le \u2581v2"]


def test_decoded_scores_accuracy_and_document_consistency():
    inst = [{"line": 0, "doc": "a", "bucket": "0", "probe": {"correct": "syna", "wrong": "synb"}},
            {"line": 1, "doc": "a", "bucket": "1", "probe": {"correct": "syna", "wrong": "synb"}},
            {"line": 2, "doc": "b", "bucket": "0", "probe": {"correct": "synb", "wrong": "syna"}},
            {"line": 3, "doc": "b", "bucket": "1", "probe": {"correct": "synb", "wrong": "syna"}}]
    hyps = {0: "\u2581v1 \u2581synb", 1: "v2 synb", 2: "v3 synb", 3: "v4"}
    res = decoded_scores(inst, hyps)
    assert res["correct"] == 1 and res["missing"] == 1
    assert res["documents"] == 2 and res["consistent_docs"] == 1  # doc a: synb twice (wrong, but consistent)
    with pytest.raises(ToolError, match="no hypothesis for line 3"):
        decoded_scores(inst, {0: "", 1: "", 2: ""})


def test_cli_bad_input_is_one_error_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.analysis.diagnostics", "generate", "antecedent", "--out",
                        str(tmp_path / "x"), "--sent-len", "5", "2"], cwd=ROOT, env=env(), capture_output=True,
                       text=True)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0
    assert p.stderr.startswith("error: --sent-len 5 2") and "Traceback" not in p.stderr
    assert not (tmp_path / "x" / "raw" / "train.src").exists()


@pytest.mark.slow
def test_document_family_diagnostic_h_attention_resolves_the_antecedent(tmp_path):
    """recipes/bench/diagnostics.py on a short run of the antecedent task (the H-attention encoder, warm-started
    from a sentence transformer): the context moves the probe's log-probability towards the right class at
    every distance (mean margin > 0.5 nats; accuracy >= 0.9), and with the context switched off
    (--doc-max-context 0) the margin is exactly the bound's 0 (the test twins cancel) and accuracy <= 0.5."""
    out = tmp_path / "diag"
    p = subprocess.run([sys.executable, "recipes/bench/diagnostics.py", "--tasks", "antecedent", "--systems",
                        "hatt_enc", "--stage1-updates", "1000", "--stage2-updates", "2000", "--curve-every", "0",
                        "--n-train", "20000", "--out", str(out), "--table", ""], cwd=ROOT, env=env(),
                       capture_output=True, text=True, timeout=3600)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    row = json.loads((out / "antecedent" / "hatt_enc" / "result.json").read_text())
    assert row["margin"] > 0.5 and all(row["by_bucket"][b] >= 0.9 for b in ("1", "2", "3")), row
    assert abs(row["context_off"]["margin"]) < 1e-3 and row["context_off"]["accuracy"] <= 0.5, row
    assert row["pass"]


def test_the_console_script_is_installed():
    from harness import BIN, run

    out = run([str(BIN / "fairseq-ext-diagnostics"), "generate", "--help"]).stdout
    assert "antecedent" in out


def test_the_cue_corpus_makes_pass_0_inconsistent_by_construction(tmp_path):
    """The BCD diagnostic's pass 0: a training set whose synonym is set by each sentence's own cue (its first
    filler word's parity), binarized with the corpus's dictionaries, so its sentence model decodes the real test
    set and disagrees within a document by chance."""
    from fairseq_ext.tools.analysis import diagnostics_runs as runner

    info = generate("consistency", str(tmp_path / "data"), n_train=400, n_valid=40, n_test=40)
    data = tmp_path / "data" / "word" / "bin"
    cue_bin = runner.cue_corpus(data, tmp_path / "cue")
    assert (cue_bin / "dict.tgt.txt").read_text() == (data / "dict.tgt.txt").read_text()
    assert (cue_bin / "train.ids").read_text() == (data / "train.ids").read_text()
    word = tmp_path / "cue" / "data" / "word"
    src = (word / "train.src").read_text().splitlines()
    tgt = (word / "train.tgt").read_text().splitlines()
    ids = (data / "train.ids").read_text().splitlines()
    per_doc = {}
    for s, t, i in zip(src, tgt, ids):
        if "\u2581amb" in s.split():
            syn = next(w for w in t.split() if w.startswith("\u2581syn"))
            assert syn == "\u2581" + runner.cue_synonym(s.split())
            per_doc.setdefault(i.rsplit(".", 1)[0], set()).add(syn)
    mixed = sum(len(v) > 1 for v in per_doc.values())
    assert 0.2 < mixed / len(per_doc) < 0.9, (mixed, len(per_doc))
    assert info["task"] == "consistency"


def test_every_registered_model_family_is_in_the_diagnostics_coverage_table():
    """RESULTS.md's "Diagnostics: coverage" table names every model family the plugin registers, with its
    diagnostic or the reason none is built."""
    import re

    from fairseq_ext.__main__ import registrations

    text = (ROOT / "recipes" / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    section = text.split("## Diagnostics: coverage of the registered model families", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.M))
    missing = set(registrations()["models"]) - listed
    assert not missing, f"add to the coverage table: {sorted(missing)}"

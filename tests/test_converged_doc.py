"""The document systems at convergence: recipes/bench/converged_doc.sh and the stage-2 options of recipes/bench/bench.py
(--finetune-from-model: the warm start and doc_bcd's pass 0; --doc-generated-dir: the stage-1 translations as target
context) with the decoding flags of the document configurations (bench_configs: their context flags, two passes)."""
import csv
import json
import sys

import pytest

from fairseq_ext.tools.evaluation import bench_configs, bench_runs
from harness import ROOT, run

RECIPE = ROOT / "recipes" / "bench" / "converged_doc.sh"
PNG = b"\x89PNG\r\n\x1a\n"


def test_document_systems_decode_with_the_context_they_trained_with():
    gen = {n: bench_configs.get(n)["generate"] for n in bench_configs.CONFIGS}
    assert gen["maruf_sentence"] == bench_configs.GREEDY
    assert gen["maruf_hatt_enc_off"][-2:] == ["--doc-context-mode", "offline"]
    assert gen["maruf_concat_warm"][-2:] == ["--doc-concat-prev", "1"]
    # the decoder integrations and the ch. 3 target-context systems: two passes, pass 0 = the stage-1 model
    for n in ("maruf_hatt_dec", "maruf3_m2c_both", "maruf3_prev_tgt"):
        k = gen[n].index("--decoding-algorithm")
        assert gen[n][k:k + len(bench_configs.TWO_PASS)] == bench_configs.TWO_PASS
        assert gen[n][-2:] == ["--doc-target-context", "generated"]
    # the HAN decoder: document order on its own translations (no stage-1 pass 0)
    assert "gauss_seidel" in gen["maruf_han_dec"] and "base_model" not in gen["maruf_han_dec"]
    assert gen["maruf3_jean2017"] == bench_configs.GREEDY   # source context only
    assert gen["transformer"] == bench_configs.GENERATE     # sentence configurations unchanged
    p = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.bench_configs", "--context", "maruf_han_dec"])
    assert p.stdout.split() == ["--doc-context-mode", "online", "--doc-target-context", "generated"]


def test_stage2_flags_warm_start_generated_context_and_pass0(tmp_path):
    parse = bench_runs.build_parser().parse_args
    data_bin = tmp_path / "seg" / "bin"
    data_bin.mkdir(parents=True)

    def flags(name, argv):
        d = tmp_path / "job" / name
        return d, bench_runs.stage2_flags(name, bench_configs.resolve(name, d, data_bin, "es", "en"), parse(argv),
                                          data_bin, d)

    d, (task, warm, path) = flags("maruf_hatt_dec", ["--finetune-from-model", "s1.pt", "--doc-generated-dir", "gen"])
    assert task == ["--doc-ids-dir", str(tmp_path / "seg"), "--doc-generated-dir", "gen"]  # no ids in bin/
    assert warm == ["--finetune-from-model", "s1.pt"] and path == f"{d / 'checkpoint_best.pt'}:s1.pt"
    (data_bin / "train.ids").write_text("")
    d, (task, warm, path) = flags("maruf_hatt_enc_on", ["--finetune-from-model", "s1.pt", "--doc-generated-dir", "gen"])
    assert task == [] and path == d / "checkpoint_best.pt"   # reads no target context; decoded on its own
    d, (task, warm, path) = flags("transformer", [])
    assert (task, warm, path) == ([], [], d / "checkpoint_best.pt")
    with pytest.raises(SystemExit, match="reads the generated target context: give --doc-generated-dir"):
        flags("maruf3_m2c_both", ["--finetune-from-model", "s1.pt"])
    with pytest.raises(SystemExit, match="pass 0: give --finetune-from-model"):
        flags("maruf3_prev_tgt", ["--doc-generated-dir", "gen"])


def test_recipe_refuses_an_unknown_stage_and_stage2_before_stage1(tmp_path):
    p = run(["bash", RECIPE], check=False, DATA="tiny", RUNS=tmp_path, STAGES="bogus", THREADS="1")
    assert p.returncode == 2 and "unknown stage 'bogus'" in p.stderr
    p = run(["bash", RECIPE], check=False, DATA="tiny", RUNS=tmp_path, STAGES="doc2_ch3", THREADS="1")
    assert p.returncode == 1 and "doc1/rnnsearch has not finished: run STAGES=doc1 first" in p.stdout + p.stderr


@pytest.mark.slow
def test_converged_doc_recipe_tiny(tmp_path):
    """DATA=tiny: stage 1 on one lane (the two sentence models in turn), then every stage-2 system warm-started from
    its stage-1 model on two lanes, the comparison against the continued sentence model, the contrastive scores; a
    rerun reuses everything."""
    table = tmp_path / "RESULTS.md"
    table.write_text("# r\n", encoding="utf-8")
    env = dict(DATA="tiny", RUNS=tmp_path, THREADS="1", TABLE=str(table))
    run(["bash", RECIPE], timeout=2400, LANES="1", STAGES="doc1", **env)
    run(["bash", RECIPE], timeout=2400, STAGES="doc2", **env)
    out = tmp_path / "converged_doc_tiny"
    expected = {"doc1": {"transformer", "rnnsearch"},
                "doc2_ch4": {"maruf_sentence", "maruf_hatt_enc_off", "maruf_hatt_enc_on", "maruf_hatt_dec",
                             "maruf_zhang_enc", "maruf_concat_warm", "maruf_han_enc", "maruf_han_dec"},
                "doc2_ch3": {"maruf3_sentence", "maruf3_m2c_both", "maruf3_prev_tgt", "maruf3_jean2017",
                             "maruf3_wang2017"}}
    block = table.read_text().split("<!-- bench:converged -->")[1].split("<!-- /bench:converged -->")[0]
    for job, configs in expected.items():
        summary = json.loads((out / job / "summary.json").read_text())
        assert set(summary) == configs
        assert all(summary[c]["curve"]["points"] >= 1 for c in configs)
        assert (out / job / "curves.png").read_bytes()[:8] == PNG
        assert sum(1 for ln in block.splitlines() if ln.endswith(f"| {job} |")) == len(configs)
    assert not (out / "doc1" / "laneB.log").exists()   # LANES=1
    stage1 = {"doc2_ch4": out / "doc1" / "transformer" / "checkpoint_best.pt",
              "doc2_ch3": out / "doc1" / "rnnsearch" / "checkpoint_best.pt"}
    for job, ckpt in stage1.items():
        summary = json.loads((out / job / "summary.json").read_text())
        for c in expected[job]:   # every stage-2 system warm-started from its family's stage 1
            assert summary[c]["finetune_from_model"] == str(ckpt)
            assert f"loading pretrained model from {ckpt}" in (out / job / c / "train.log").read_text()
        # the generated target context: stage 1's translation of every split, line-aligned with it
        model = ckpt.parent.name
        for split, n in (("train", 209), ("valid", 4), ("test", 36)):
            assert len((out / "doc2_context" / model / f"{split}.en").read_text().splitlines()) == n
        assert "warm-started from" in block.split(f"- job `{job}`")[1].splitlines()[0]
    # two-pass decoding of the decoder integration (pass 0 = stage 1) and the memory network
    for job, c in (("doc2_ch4", "maruf_hatt_dec"), ("doc2_ch3", "maruf3_m2c_both")):
        hyps = [ln for ln in (out / job / c / "generate.out").read_text().splitlines() if ln.startswith("H-")]
        assert len(hyps) == 36
    # the converged rows compare every system with the continued sentence model of its job
    rows = {ln.split("|")[1].strip(): ln for ln in block.splitlines() if ln.endswith("| doc2_ch4 |")}
    assert rows["maruf_sentence"].split("|")[6].strip() == "–"
    # contrastive pronoun scores of every best checkpoint (or the note that the test set has none)
    for job, configs in expected.items():
        if job == "doc1":
            continue
        md = (out / job / "contrastive.md").read_text()
        assert "no contrastive instance" not in md   # the tiny test split has 10 (masculine) instances
        assert all((out / job / c / "contrastive.test.json").exists() for c in configs)
        assert md.count(", test set") == len(configs)
    # resumable: a rerun reuses every configuration
    p = run(["bash", RECIPE], timeout=2400, **env)
    for job in expected:
        lanes = "".join((out / job / f"lane{x}.log").read_text() for x in "AB" if (out / job / f"lane{x}.log").exists())
        assert all(f"{c}: reusing" in lanes for c in expected[job])
    with open(out / "doc2_ch4" / "curves.csv", newline="") as f:
        assert {r["config"] for r in csv.DictReader(f)} == expected["doc2_ch4"]
    assert p.returncode == 0

"""SEG-NMT at convergence (Gu ch. 4): recipes/bench/converged_tm.sh (its stages, its bench configurations, one clear
error for a bad stage or a missing stage 1) and the per-bin paired bootstrap of the Fig. 4.3 report
(``tm_analysis fuzzy-bins --n-bootstrap``); marked slow, the recipe's ``DATA=tiny`` run end to end."""
import json
import sys

import pytest

from fairseq_ext.data.translation_memory import TMEntry, write_tm
from fairseq_ext.tools.analysis import tm_analysis as ta
from fairseq_ext.tools.analysis import tm_bleu
from fairseq_ext.tools.evaluation import bench_configs
from fairseq_ext.tools.evaluation.significance import paired_bootstrap
from harness import ROOT, run

RECIPE = ROOT / "recipes" / "bench" / "converged_tm.sh"
PNG = b"\x89PNG\r\n\x1a\n"
STAGE2 = ("seg_rnnsearch", "seg_nmt_shallow", "seg_nmt_deep", "seg_copynet")

REFS = [f"the lord spoke unto moses word {i} and said {i % 3}" for i in range(12)]
HYPS = {"NMT": [f"the lord spoke to moses word {i} said" for i in range(12)],
        "SEG": [r if i % 2 else f"the lord spoke unto moses {i} and said" for i, r in enumerate(REFS)],
        "TM": [f"god spoke unto aaron word {i} and said {i % 3}" for i in range(12)]}
TOP1 = [0.1, 0.2, 0.35, 0.4, 0.55, 0.6, 0.75, 0.8, 0.9, 1.0, None, 0.95]


def _entries():
    return [TMEntry([], [], []) if f is None else TMEntry([i], [f], [i]) for i, f in enumerate(TOP1)]


def test_stage2_configurations_share_task_batches_and_optimiser():
    for name in STAGE2:
        cfg = bench_configs.get(name)
        assert cfg["task"] == "seg_translation"
        assert cfg["train"][-len(bench_configs.SEG_STAGE2):] == bench_configs.SEG_STAGE2   # same batches of 32
        assert cfg["generate"] == bench_configs.GENERATE + ["--tm-topk", "2"]             # beam 5, K = 2
    arch = {n: bench_configs.get(n)["train"][1] for n in STAGE2}
    assert arch == {"seg_rnnsearch": "rnnsearch_bench", "seg_nmt_shallow": "seg_nmt_bench",
                    "seg_nmt_deep": "seg_nmt_bench", "seg_copynet": "seg_copynet_bench"}
    assert "deep" in bench_configs.get("seg_nmt_deep")["train"]
    assert "--fusion" not in bench_configs.get("seg_nmt_shallow")["train"]   # shallow is the model's default
    p = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.bench_configs", "seg_nmt_deep"])
    assert p.stdout.split()[:2] == ["--task", "seg_translation"]


def test_recipe_names_its_stages_and_configurations():
    text = RECIPE.read_text()
    assert 'STAGES=${STAGES:-stage1 tm tm2 copynet report}' in text
    for name in STAGE2:
        assert name in text
    assert "--baseline seg_rnnsearch --finetune-from-model" in text
    assert "COST_PLACEHOLDER" not in text   # the header carries the measured cost


def test_recipe_refuses_an_unknown_stage_and_stage2_before_stage1_and_retrieval(tmp_path):
    env = dict(DATA="tiny", RUNS=str(tmp_path), THREADS="1")
    p = run(["bash", RECIPE], check=False, STAGES="bogus", **env)
    assert p.returncode == 2 and "error: unknown stage 'bogus'" in p.stderr
    p = run(["bash", RECIPE], check=False, STAGES="tm2", **env)
    assert p.returncode == 1 and "doc1/rnnsearch has not finished: run STAGES=stage1 first" in p.stderr
    p = run(["bash", RECIPE], check=False, STAGES="copynet", **env)
    assert p.returncode == 1 and "has no side files: run STAGES=tm first" in p.stderr
    # stage 1 is never trained while converged_doc.sh's doc1 job writes its logs (its lane may reach rnnsearch)
    lane = tmp_path / "converged_tm_tiny" / "doc1" / "laneA.log"
    lane.parent.mkdir(parents=True)
    lane.write_text("[doc1] transformer: training\n")
    p = run(["bash", RECIPE], check=False, STAGES="stage1", **env)
    assert p.returncode == 1 and "doc1 is being trained" in p.stderr and "laneA.log" in p.stderr
    assert not (lane.parent / "rnnsearch").exists()


def test_fuzzy_bins_bootstrap_inside_each_bin_is_the_paired_bootstrap_of_its_sentences():
    res = tm_bleu.fuzzy_bins(_entries(), [REFS], HYPS, n_bootstrap=100)
    assert res["n_bootstrap"] == 100
    members = {0: [0, 1, 10], 1: [2, 3], 2: [4, 5], 3: [6, 7, 8, 9, 11]}
    for j, b in enumerate(res["bins"]):
        idx = members[j]
        assert b["n"] == len(idx)
        expect = paired_bootstrap([HYPS["NMT"][i] for i in idx], {k: [HYPS[k][i] for i in idx] for k in ("SEG", "TM")},
                                  [REFS[i] for i in idx], n=100)
        bleu_m, chrf_m = expect["metrics"]
        for s in expect["systems"]:
            assert b["systems"][s["name"]]["bleu_p"] == pytest.approx(s[bleu_m]["p_value"])
            assert b["systems"][s["name"]]["chrf_p"] == pytest.approx(s[chrf_m]["p_value"])
        assert "bleu_p" not in b["systems"]["NMT"]   # the reference point
    assert res["all"]["SEG"]["bleu_p"] is not None
    md = tm_bleu.format_fuzzy_bins(res)
    assert "(p " in md and "paired bootstrap against NMT" in md
    # off by default: the report of recipes/gu/ch4.sh is unchanged
    plain = tm_bleu.fuzzy_bins(_entries(), [REFS], HYPS)
    assert "n_bootstrap" not in plain and "(p " not in tm_bleu.format_fuzzy_bins(plain)
    # an empty bin has no p
    empty = tm_bleu.fuzzy_bins(_entries(), [REFS], HYPS, [0.0, 0.25, 0.3, 1.0], n_bootstrap=20)
    assert empty["bins"][1]["n"] == 0 and empty["bins"][1]["systems"]["SEG"]["bleu_p"] is None


def test_fuzzy_bins_cli_n_bootstrap_writes_p_values_and_png(tmp_path, capsys):
    write_tm(str(tmp_path), "test", _entries(), {"memory_lines": 20, "exclude_self": False})
    ref = tmp_path / "test.en"
    ref.write_text("".join(r + "\n" for r in REFS))
    hyp = []
    for name, lines in HYPS.items():
        (tmp_path / f"{name}.txt").write_text("".join(x + "\n" for x in lines))
        hyp += ["--hyp", f"{name}={tmp_path / f'{name}.txt'}"]
    assert ta.main(["fuzzy-bins", "--side", str(tmp_path / "test.tm.jsonl"), "--ref", str(ref), *hyp,
                    "--n-bootstrap", "50", "--json", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")]) == 0
    res = json.loads((tmp_path / "b.json").read_text())
    assert all(b["systems"]["TM"]["bleu_p"] is not None for b in res["bins"])
    assert (tmp_path / "b.png").read_bytes()[:8] == PNG
    assert "(p " in capsys.readouterr().out


@pytest.mark.slow
def test_converged_tm_recipe_tiny(tmp_path):
    """DATA=tiny: stage 1 (the tiny doc1 rnnsearch), retrieval, the warm-started stage 2 on two lanes, CopyNet from
    scratch, the report with Fig. 4.3 and its bootstrap, the cost stage; a rerun reuses everything."""
    table = tmp_path / "RESULTS.md"
    table.write_text("# r\n", encoding="utf-8")
    env = dict(DATA="tiny", RUNS=str(tmp_path), THREADS="1", TABLE=str(table))
    run(["bash", RECIPE], timeout=2400, STAGES="stage1 tm tm2 copynet report cost", **env)
    out = tmp_path / "converged_tm_tiny"
    ckpt = out / "doc1" / "rnnsearch" / "checkpoint_best.pt"
    assert ckpt.exists()
    for split, n in (("train", 209), ("valid", 4), ("test", 36)):
        assert len((out / "data_tm" / "bin" / f"{split}.tm.jsonl").read_text().splitlines()) == n
    assert len((out / "tm" / "test.txt").read_text().splitlines()) == 36
    summary = json.loads((out / "tm2" / "summary.json").read_text())
    assert set(summary) == {"seg_rnnsearch", "seg_nmt_shallow", "seg_nmt_deep"}
    for c in summary:   # warm-started from stage 1, curves
        assert summary[c]["finetune_from_model"] == str(ckpt) and summary[c]["curve"]["points"] >= 1
        assert f"loading pretrained model from {ckpt}" in (out / "tm2" / c / "train.log").read_text()
    copy = json.loads((out / "tm2_copynet" / "summary.json").read_text())
    assert set(copy) == {"seg_copynet"} and "finetune_from_model" not in copy["seg_copynet"]
    for job in ("tm2", "tm2_copynet"):
        assert (out / job / "curves.png").read_bytes()[:8] == PNG
    block = table.read_text().split("<!-- bench:converged -->")[1].split("<!-- /bench:converged -->")[0]
    assert sum(1 for ln in block.splitlines() if ln.endswith("| tm2 |")) == 3
    report = (out / "report.md").read_text()
    for head in ("## Against NMT", "## Against TM", "## Against CopyNet", "## Fig. 4.3"):
        assert head in report
    bins = json.loads((out / "fig4_3_fuzzy_bins.json").read_text())
    assert bins["systems"] == ["NMT", "TM", "NMT-stage1", "SEG-NMT", "SEG-NMT-deep", "CopyNet"]
    assert bins["n_bootstrap"] == 50 and bins["all"]["SEG-NMT"]["bleu_p"] is not None
    assert (out / "fig4_3_fuzzy_bins.png").read_bytes()[:8] == PNG
    assert len(json.loads((out / "compare_tm.json").read_text())["systems"]) == 3
    cost = (out / "cost" / "cost.md").read_text()
    assert all(f"| {c} |" in cost for c in STAGE2)
    # resumable: a rerun reuses every configuration
    p = run(["bash", RECIPE], timeout=2400, STAGES="stage1 tm tm2 copynet", **env)
    lanes = "".join(f.read_text() for f in (out / "tm2").glob("lane*.log"))
    assert "reusing" in lanes and "loading pretrained" not in p.stdout

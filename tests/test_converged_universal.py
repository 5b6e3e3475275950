"""Universal NMT at convergence (Gu ch. 5): recipes/bench/converged_universal.sh (bench.py's curve machinery on a
`fairseq-ext-data universal` folder, the back-translation chain from the converged + ULR model) and the verdicts of
its rows (fairseq_ext/tools/evaluation/verdicts.py)."""
import json
import sys

import pytest

from fairseq_ext.tools.evaluation import bench_configs, verdicts
from harness import ROOT, run

RECIPE = ROOT / "recipes" / "bench" / "converged_universal.sh"
PNG = b"\x89PNG\r\n\x1a\n"
LADDER = {"gu5_multi", "gu5_ulr", "gu5_ulr_mole"}
BT = {"gu5_multi_bt10", "gu5_ulr_bt10", "gu5_ulr_mole_bt10"}


def test_the_bt_configurations_are_the_ladder_plus_the_converged_bt_split():
    for name in LADDER:
        bt = bench_configs.get(f"{name}_bt10")
        assert bt["task"] == "universal_translation" == bench_configs.get(name)["task"]
        assert bt["train"] == bench_configs.get(name)["train"] + ["--bt-split", "bt_converged",
                                                                  "--bt-real-upsample", "10"]
        assert bt["generate"] == bench_configs.GENERATE


def test_dry_run_lists_the_stages_and_a_bad_stage_is_one_error(tmp_path):
    p = run(["bash", RECIPE], DATA="tiny", RUNS=tmp_path, DRY_RUN="1", THREADS="1")
    assert "ladder: gu5_multi gu5_ulr gu5_ulr_mole (baseline gu5_multi)" in p.stdout
    assert "bt: gu5_multi_bt10 gu5_ulr_bt10 gu5_ulr_mole_bt10" in p.stdout
    for name in ("gu5_multi", "gu5_ulr", "gu5_ulr_mole", *BT):   # every configuration the recipe names exists
        assert name in bench_configs.CONFIGS and name in RECIPE.read_text()
    p = run(["bash", RECIPE], check=False, DATA="tiny", RUNS=tmp_path, STAGES="ladder bogus", THREADS="1")
    assert p.returncode == 2 and p.stderr.strip() == "error: unknown stage 'bogus' (ladder bt)"
    assert not (tmp_path / "converged_universal_tiny").exists()   # refused before any work


@pytest.mark.parametrize("delta, p, thesis, expected", [
    (2.00, 0.001, 5.07, "direction only"), (3.00, 0.001, 5.07, "reproduced"), (0.40, 0.20, 0.50, "level"),
    (-1.86, 0.001, 0.50, "lost"), (-2.60, 0.001, 2.34, "lost"), (1.0, 0.01, 0.0, "lost"),
    (-3.0, 0.001, -2.0, "reproduced"), (-5.86, 0.001, -0.03, "lost"),
    (-0.5, 0.001, -0.1, "reproduced")])
def test_verdict_rule(delta, p, thesis, expected):
    assert verdicts.verdict(delta, p, thesis) == expected


def test_verdicts_cli_compares_each_row_and_marks_rows_not_run(tmp_path):
    ref = tmp_path / "test.en"
    sents = [f"the word of the lord came to me number {i} saying" for i in range(30)]
    ref.write_text("\n".join(sents) + "\n")

    def hyps(name, good):   # fairseq-generate D- lines (ids out of order, as fairseq writes them)
        f = tmp_path / f"{name}.out"
        f.write_text("".join(f"D-{i}\t-0.5\t{s if i < good else 'and it came to pass'}\n"
                             for i, s in reversed(list(enumerate(sents)))))
        return str(f)

    base, better = hyps("base", 10), hyps("better", 28)
    out = tmp_path / "v" / "verdicts"
    p = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.verdicts", "--ref", str(ref), "--n-bootstrap", "50",
             "--out", str(out), "--row", "+ ULR vs Multi-NMT", base, better, "5.07",
             "--row", "+ BT vs + ULR", better, str(tmp_path / "missing.out"), "2.34"])
    rows = json.loads(out.with_suffix(".json").read_text())
    assert [r["verdict"] for r in rows] == ["reproduced", "not run"]
    assert rows[0]["delta"] > 5.07 / 2 and rows[0]["p"] < 0.05 and rows[1]["missing"] == [str(tmp_path / "missing.out")]
    md = out.with_suffix(".md").read_text()
    assert md == p.stdout and "| + BT vs + ULR | – | – | – | – | +2.34 | not run |" in md and "**reproduced**" in md
    bad = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.verdicts", "--ref", str(ref), "--out", str(out),
               "--row", "x", base, better, "five"], check=False)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1] == \
        "error: --row 'x': the thesis delta 'five' is not a number"


@pytest.mark.slow
def test_converged_universal_recipe_tiny(tmp_path):
    """DATA=tiny: the ladder from scratch with curves, the BT chain from its + ULR model, the BT systems, the
    comparisons and verdicts; a rerun reuses everything."""
    table = tmp_path / "RESULTS.md"
    table.write_text("# r\n", encoding="utf-8")
    env = dict(DATA="tiny", RUNS=tmp_path, THREADS="1", TABLE=str(table))
    p = run(["bash", RECIPE], check=False, STAGES="bt", **env)
    assert p.returncode == 1 and "gu5_ulr has not finished: run STAGES=ladder first" in p.stderr
    run(["bash", RECIPE], timeout=3600, **env)
    out = tmp_path / "converged_universal_tiny"
    block = table.read_text().split("<!-- bench:converged -->")[1].split("<!-- /bench:converged -->")[0]
    for job, configs, base in (("ladder", LADDER, "gu5_multi"), ("bt", BT, "gu5_multi_bt10")):
        summary = json.loads((out / job / "summary.json").read_text())
        assert set(summary) == configs
        assert all(summary[c]["curve"]["points"] >= 1 for c in configs)
        assert (out / job / "curves.png").read_bytes()[:8] == PNG
        rows = {ln.split("|")[1].strip(): ln for ln in block.splitlines() if ln.endswith(f"| {job} |")}
        assert set(rows) == configs and rows[base].split("|")[6].strip() == "–"
    # the BT split from the converged + ULR model, read by the BT systems only
    data = out / "data" / "it_300_esfrru"
    assert (data / "bin" / "bt_converged.lang").read_text().split() == ["it"] * 40
    assert (out / "bt_data" / "backward" / "train.done").exists()
    for c in BT:
        assert "+ 40 back-translated pairs (bt_converged), real it pairs x10" in (out / "bt" / c / "train.log").read_text()
    assert "back-translated" not in (out / "ladder" / "gu5_ulr" / "train.log").read_text()
    rows = json.loads((out / "verdicts.json").read_text())
    assert len(rows) == 7 and all(r["verdict"] in ("reproduced", "direction only", "level", "lost") for r in rows)
    assert rows[0]["row"] == "+ ULR vs Multi-NMT" and rows[0]["thesis_delta"] == 5.07
    # resumable: a rerun reuses every configuration and the BT data
    p = run(["bash", RECIPE], timeout=1200, **env)
    for job, configs in (("ladder", LADDER), ("bt", BT)):
        lanes = "".join((out / job / f"lane{x}.log").read_text() for x in "AB")
        assert all(f"{c}: reusing" in lanes for c in configs)
    assert p.returncode == 0

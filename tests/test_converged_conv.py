"""The conversation systems at convergence (Maruf ch. 5, Table 5.3): recipes/bench/converged_conv.sh, the
conversation branch of recipes/bench/bench.py's stage-2 flags (the generated target history of the systems that
read it), the maruf5_* configurations' greedy online decoding, and the CPU cost per update
(fairseq_ext/tools/evaluation/update_cost.py)."""
import json
import sys

import pytest

from fairseq_ext.tools.evaluation import bench_configs, bench_runs, update_cost
from harness import ROOT, run

RECIPE = ROOT / "recipes" / "bench" / "converged_conv.sh"
CONFIGS = ["maruf5_base", "maruf5_src_lsa", "maruf5_src_la", "maruf5_tgt", "maruf5_dual", "maruf5_dual_mix"]
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_recipe_configurations_exist_decode_greedily_and_say_which_read_the_target_history():
    for c in CONFIGS:
        cfg = bench_configs.get(c)
        assert cfg["task"] == "conversation_translation" and cfg["generate"] == bench_configs.GREEDY
        assert "--conv-target-history" not in cfg["train"]  # the references unless the job gives its translations
    reads = {c for c in CONFIGS if bench_configs.reads_target_history(bench_configs.get(c)["train"])}
    assert reads == {"maruf5_tgt", "maruf5_dual", "maruf5_dual_mix"}
    assert not bench_configs.reads_target_history(["--tgt-ctx", "none", "--dual", "none"])
    text = RECIPE.read_text()
    for c in CONFIGS:
        assert c in text


def test_stage2_flags_give_the_generated_target_history_to_the_systems_that_read_it(tmp_path):
    (tmp_path / "bin").mkdir()

    def stage2(name, *argv):
        cfg = bench_configs.resolve(name, tmp_path / name, tmp_path / "bin", "src", "tgt")
        return bench_runs.stage2_flags(name, cfg, bench_runs.build_parser().parse_args(list(argv)), tmp_path / "bin",
                                       tmp_path / name)[:2]

    both = ("--finetune-from-model", "s1.pt", "--doc-generated-dir", "gen")
    assert stage2("maruf5_dual", *both) == (["--conv-target-history", "generated", "--conv-generated-dir", "gen"],
                                            ["--finetune-from-model", "s1.pt"])
    assert stage2("maruf5_base", *both)[0] == [] and stage2("maruf5_src_lsa", *both)[0] == []
    assert stage2("maruf5_tgt", *both[:2])[0] == []   # no translations given: the references


def test_update_cost_cancels_the_start_up_rotates_and_gives_ratios():
    calls = []

    def run_one(name, n, r):
        calls.append((name, n, r))
        return 10.0 + n * {"a": 1.0, "b": 1.5}[name] + (0.2 if r == 1 else 0.0)

    per = update_cost.measure(["a", "b"], 2, 2, 6, run_one)
    assert calls == [("a", 2, 0), ("a", 6, 0), ("b", 2, 0), ("b", 6, 0), ("b", 2, 1), ("b", 6, 1), ("a", 2, 1),
                     ("a", 6, 1)]
    s = update_cost.summarise(per)
    assert s["a"]["s_per_update"] == pytest.approx(1.0) and s["b"]["ratio"] == pytest.approx(1.5)
    md = update_cost.markdown(s, 2, 6)
    assert "| b | 1.50 | 1.50-1.50 | 1.50 |" in md and "x a" in md


def test_update_cost_rejects_bad_input_in_one_line(tmp_path):
    p = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.update_cost", "--data", tmp_path, "--configs",
             "maruf5_base,bogus", "--out", tmp_path / "o"], check=False)
    assert p.returncode != 0 and "unknown configuration(s) bogus" in p.stderr and "Traceback" not in p.stderr
    p = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.update_cost", "--data", tmp_path, "--configs",
             "maruf5_base", "--short", "4", "--long", "4", "--out", tmp_path / "o"], check=False)
    assert p.returncode != 0 and "need 0 < short < long" in p.stderr


def test_recipe_refuses_an_unknown_stage_and_stage2_before_stage1(tmp_path):
    p = run(["bash", RECIPE], check=False, DATA="tiny", RUNS=tmp_path, STAGES="bogus", THREADS="1")
    assert p.returncode == 2 and "unknown stage 'bogus' (bimsmt1 bimsmt2 cost)" in p.stderr
    p = run(["bash", RECIPE], check=False, DATA="tiny", RUNS=tmp_path, STAGES="bimsmt2", THREADS="1")
    assert p.returncode == 1 and "bimsmt1/maruf5_base has not finished: run STAGES=bimsmt1 first" in p.stderr


@pytest.mark.slow
def test_converged_conv_recipe_tiny(tmp_path):
    """DATA=tiny: the base from scratch, its translations, every Table 5.3 system warm-started from it on two lanes,
    the comparison against the continued base, Table 5.3's layout and the cost stage; a rerun reuses everything."""
    table = tmp_path / "RESULTS.md"
    table.write_text("# r\n", encoding="utf-8")
    env = dict(DATA="tiny", RUNS=tmp_path, THREADS="1", TABLE=str(table))
    run(["bash", RECIPE], timeout=2400, STAGES="bimsmt1 bimsmt2 cost", **env)
    out = tmp_path / "converged_conv_tiny"
    for job, configs in (("bimsmt1", ["maruf5_base"]), ("bimsmt2", CONFIGS)):
        for c in configs:
            r = json.loads((out / job / c / "result.json").read_text())
            assert r["curve"]["every"] == 2 and r["curve"]["stopped"] in ("max-updates", "patience")
            if job == "bimsmt2":
                assert r["finetune_from_model"].endswith("bimsmt1/maruf5_base/checkpoint_best.pt")
        assert (out / job / "curves.png").read_bytes()[:8] == PNG
    # the target-history systems trained on stage 1's translations; the others on none
    for c in CONFIGS:
        log = (out / "bimsmt2" / c / "train.log").read_text()
        assert ("target history generated" in log) == (c in {"maruf5_tgt", "maruf5_dual", "maruf5_dual_mix"}), c
    assert (out / "bimsmt2_context" / "train.tgt").stat().st_size > 0
    t53 = (out / "bimsmt2" / "table53" / "results.md").read_text()
    assert "| dual (Dual Context Src-Tgt) | " in t53 and "BLEU en->es" in t53
    cost = json.loads((out / "bimsmt_cost" / "cost.json").read_text())
    assert list(cost["configs"]) == CONFIGS and cost["configs"]["maruf5_base"]["ratio"] == 1.0
    text = table.read_text()
    assert "- job `bimsmt2`" in text and "| maruf5_dual |" in text
    before = (out / "bimsmt2" / "maruf5_dual" / "result.json").stat().st_mtime
    run(["bash", RECIPE], timeout=600, STAGES="bimsmt2", **env)
    assert (out / "bimsmt2" / "maruf5_dual" / "result.json").stat().st_mtime == before

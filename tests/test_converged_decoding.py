"""The decoding agents at convergence (Gu ch. 7 and ch. 9): recipes/bench/converged_decoding.sh -- stage 1 (the
uni-directional environment, bench configuration ``rnnsearch_uni``), the trainable greedy actors at the thesis's
learning rates against plain greedy / beam, the simultaneous agents against the wait-k curve, the per-update cost."""
import json

import pytest

from fairseq_ext.tools.evaluation import bench_configs
from harness import ROOT, run

RECIPE = ROOT / "recipes" / "bench" / "converged_decoding.sh"
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_environment_is_the_bench_rnnsearch_with_a_unidirectional_encoder():
    uni, bi = bench_configs.get("rnnsearch_uni"), bench_configs.get("rnnsearch")
    assert uni["task"] == bi["task"] == "translation_decoding" and uni["generate"] == bi["generate"]
    assert [f for f in uni["train"] if f != "--encoder-unidirectional"] == bi["train"]
    assert "--encoder-unidirectional" in uni["train"]


@pytest.mark.parametrize("env, message", [
    (dict(STAGES="bogus"), "error: unknown stage 'bogus' (stage1 tg simul cost)"),
    (dict(TG_ACTORS="bleu_lrfast"), "error: actor 'bleu_lrfast' is not <objective>_lr<LR> (e.g. bleu_lr2e-6)"),
    (dict(TG_ACTORS="bleu2_lr1e-5"), "error: actor 'bleu2_lr1e-5': unknown objective 'bleu2'"),
    (dict(TARGETS="ap0.3 xy2"), "error: unknown delay target 'xy2'"),
    (dict(WAITK="1 k"), "error: WAITK values must be integers >= 1, got 'k'"),
    (dict(TG_STAGE1="mine"), "error: TG_STAGE1 must be doc1 or own, got 'mine'"),
])
def test_bad_settings_are_one_error_line_before_any_work(tmp_path, env, message):
    p = run(["bash", RECIPE], check=False, DATA="tiny", RUNS=tmp_path, THREADS="1", **env)
    assert p.returncode == 2 and message in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())   # refused before the data or any run folder


def test_stage2_refuses_to_start_before_its_stage1(tmp_path):
    for stage, missing in (("tg", "converged_decoding_tiny/dec_stage1/rnnsearch has not finished"),
                           ("simul", "converged_decoding_tiny/dec_stage1/rnnsearch_uni has not finished")):
        p = run(["bash", RECIPE], check=False, DATA="tiny", RUNS=tmp_path, THREADS="1", STAGES=stage)
        assert p.returncode == 1 and missing in p.stderr and "run its stage first (STAGES=stage1)" in p.stderr


@pytest.mark.slow
def test_converged_decoding_recipe_tiny(tmp_path):
    """DATA=tiny: stage 1 (the uni-directional environment and the bi-directional NMT) to the stop, the actors at
    their learning rates and the agents (AP and CW targets) with patience, their test decodes and reports, the cost
    table; a rerun reuses everything."""
    table = tmp_path / "RESULTS.md"
    table.write_text("# r\n", encoding="utf-8")
    env = dict(DATA="tiny", RUNS=tmp_path, THREADS="1", TABLE=str(table), TARGETS="ap0.5 cw2")
    run(["bash", RECIPE], timeout=2400, STAGES="stage1 tg simul cost", **env)
    j = tmp_path / "converged_decoding_tiny"
    summary = json.loads((j / "dec_stage1" / "summary.json").read_text())
    assert set(summary) == {"rnnsearch_uni", "rnnsearch"}
    assert (j / "dec_stage1" / "curves.png").read_bytes()[:8] == PNG
    block = table.read_text().split("<!-- bench:converged -->")[1].split("<!-- /bench:converged -->")[0]
    assert sum(1 for ln in block.splitlines() if ln.endswith("| dec_stage1 |")) == 2
    # ch. 7: three actors (the thesis's actor learning rate 2e-6 among them), each validated and stopped
    tg = j / "dec_tg"
    for a in ("bleu_lr2e-6", "bleu_lr1e-5", "bleu_lr1e-4"):
        log = (tg / f"{a}.log").read_text()
        assert f"'group_lr': 'actor:{a.split('_lr')[1]},critic:2e-4'" in log and "'patience': 1," in log
        assert "valid on 'valid' subset" in log and (tg / a / "train.done").exists()
        for search in ("greedy", "beam"):
            assert (tg / "decode" / f"{a}.{search}" / "generate-test.txt").exists()
    md = (tg / "results.md").read_text()
    assert "bleu_lr2e-6" in md and (tg / "fig7_4_curves.png").read_bytes()[:8] == PNG
    # ch. 9: the agents, the baselines and the wait-k curve on the same environment, the reading at equal AL
    sm = j / "dec_simul"
    for name in ("ap0.5", "cw2", "wue", "wos", "wiw", "wid", "wait1", "wait3"):
        assert (sm / "decode" / f"{name}.greedy" / "actions.jsonl").exists(), name
    md = (sm / "results.md").read_text()
    assert "Agents against the wait-k curve at the same AL" in md
    assert (sm / "bleu_al.png").read_bytes()[:8] == PNG
    # the cost table: every stage, with a dev validation of each
    cost = (j / "dec_cost" / "cost.md").read_text()
    for s in ("s1_bi", "s1_uni", "tg", "agent"):
        row = next(ln for ln in cost.splitlines() if ln.startswith(f"| {s} |"))
        assert row.split("|")[4].strip()   # one validation's CPU seconds
    # resumable: a rerun reuses the models and decodes
    p = run(["bash", RECIPE], timeout=2400, STAGES="stage1 tg simul", **env)
    assert "bleu_lr2e-6: reusing" in p.stdout and "cw2: reusing" in p.stdout


@pytest.mark.parametrize("name, search, flags", [
    ("wue", "greedy", "--simul-policy wue --simul-decoding simul_greedy"),
    ("wid", "beam", "--simul-policy wid --simul-decoding simul_beam --simul-beam 5"),
    ("wait3", "greedy", "--simul-policy waitk --simul-waitk 3 --simul-decoding simul_greedy"),
    ("ap0.5_-0.5", "beam", "--simul-policy agent --simul-decoding simul_beam --simul-beam 5"),
    ("waiter", "greedy", "--simul-policy agent --simul-decoding simul_greedy"),
])
def test_simul_flags_one_mapping_for_both_simultaneous_recipes(name, search, flags):
    """lib.sh simul_flags: the one name -> flags mapping of recipes/gu/ch9.sh and converged_decoding.sh (ch9.sh's
    thesis printout is checked flag by flag in test_gu_ch9_recipe.py)."""
    p = run(["bash", "-c", 'source recipes/lib.sh; simul_flags "$@"', "_", name, search, "5"])
    assert p.stdout.split() == flags.split()
    p = run(["bash", "-c", 'source recipes/lib.sh; simul_flags wue nope 5'], check=False)
    assert p.returncode == 2 and "unknown search 'nope'" in p.stderr

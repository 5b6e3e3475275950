"""Gu (2019) ch. 7 (trainable greedy decoding) recipe: the report's statistics on hand-made inputs (the paired
bootstrap of a difference of means, the validation-curve parser, sentencepiece detokenisation), the thesis-mode
printout of ``recipes/gu/ch7.sh`` (every command parses with fairseq's own parser and carries the §7.4.1
settings) and, marked slow, the recipe's ``DATA=tiny`` run end to end."""
import json

import numpy as np
import pytest

from fairseq_ext.tools.chapters import greedy_report as rep
from harness import ROOT, n_lines, parse_fairseq_command, run, thesis_commands

RECIPE = ROOT / "recipes" / "gu" / "ch7.sh"
PNG = b"\x89PNG\r\n\x1a\n"


# ============================================================================ report statistics
def test_paired_bootstrap_of_means():
    rng = np.random.default_rng(0)
    base = rng.normal(-2.0, 0.5, size=400)
    same = rep.paired_bootstrap_mean(base, base.copy(), n=200)
    assert same["delta"] == 0 and same["p_value"] == 1.0
    better = rep.paired_bootstrap_mean(base, base + 0.3 + rng.normal(0, 0.05, size=400), n=200)
    assert better["delta"] == pytest.approx(0.3, abs=0.02)
    assert better["p_value"] == pytest.approx(1 / 201)          # no resample reaches the observed difference
    assert better["ci95"][0] < better["delta"] < better["ci95"][1]
    noise = rep.paired_bootstrap_mean(base, base + rng.normal(0, 0.5, size=400), n=200)
    assert noise["p_value"] > 0.05


def test_validation_curve_and_detok(tmp_path):
    log = tmp_path / "bleu.log"
    log.write_text(
        "2026-11-24 10:00:00 | INFO | train_inner | epoch 001: 10 / 3580 loss=0.15, reward=0.1, num_updates=10\n"
        "2026-11-24 10:00:05 | INFO | valid | epoch 001 | valid on 'valid' subset | loss -0.1234 | reward 0.1234 | "
        "critic_mse 0.02 | wps 1 | wpb 2 | bsz 3 | num_updates 55\n"
        "2026-11-24 10:01:05 | INFO | valid | epoch 001 | valid on 'valid' subset | loss -0.13 | reward 0.13 | "
        "critic_mse 0.02 | wps 1 | wpb 2 | bsz 3 | num_updates 110 | best_loss -0.13\n", encoding="utf-8")
    assert rep.validation_curve(str(log)) == [(55, 0.1234), (110, 0.13)]
    assert rep.detok("\u2581And \u2581he \u2581sa id") == "And he said"
    assert rep.detok("plain text ") == "plain text"


# ============================================================================ thesis printout
def thesis_lines(**env):
    return thesis_commands(RECIPE, **env)


parse_fairseq = parse_fairseq_command


def test_thesis_mode_prints_parsable_commands():
    lines = thesis_lines()
    fs = [parse_fairseq(ln) for ln in lines if "fairseq-" in ln.split()[1]]
    trains = [a for t, a in fs if t == "fairseq-train"]
    gens = [a for t, a in fs if t == "fairseq-generate"]
    # 8 WMT'15 directions: one NMT and two actors (BLEU, perplexity) each
    assert [a.arch for a in trains].count("rnnsearch_gu_wmt15") == 8
    actors = [a for a in trains if a.arch == "trainable_greedy"]
    assert sorted(a.tg_objective for a in actors) == ["bleu"] * 8 + ["perplexity"] * 8
    for a in actors:   # §7.4.1: RMSProp 2e-6 / 2e-4, 10 critic updates per actor update, pairs <= 200 subwords
        assert (a.optimizer, a.group_lr, a.critic_updates, a.actor_updates) == ("rmsprop", "actor:2e-6,critic:2e-4",
                                                                               10, 1)
        assert a.max_source_positions == 200 and a.nmt_path.endswith("/nmt/checkpoint_best.pt")
    for a in trains:
        if a.arch == "rnnsearch_gu_wmt15":
            assert a.max_source_positions == 50 and a.batch_size == 32
    # greedy and beam 5 for every actor and for the plain NMT
    assert len(gens) == 8 * (2 * 2 + 2)
    assert sorted({a.decoding_algorithm for a in gens}) == ["beam", "greedy"] and all(a.beam == 5 for a in gens)
    assert sum(a.task == "translation_decoding" for a in gens) == 16
    assert sum("examples/trainable_greedy/report.py" in ln for ln in lines) == 8


def test_thesis_mode_pairs_option():
    lines = thesis_lines(PAIRS="ru-en")
    assert all("/ru-en/" in ln for ln in lines if "fairseq-" in ln)
    assert sum("fairseq-train" in ln for ln in lines) == 3


def test_unknown_actor_is_refused(tmp_path):
    p = run(["bash", RECIPE], timeout=300, check=False, DATA="tiny", RUNS=tmp_path, ACTORS="bleu greedyish",
            STAGE1_UPDATES="2")
    assert p.returncode == 2 and "unknown actor greedyish" in p.stderr


# ============================================================================ tiny end to end
@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    """DATA=tiny: ~5 min on one thread next to other work."""
    run(["bash", RECIPE], timeout=1200, DATA="tiny", RUNS=tmp_path, THREADS="1")
    out = tmp_path / "gu_ch7_tiny"
    n_test = n_lines(out / "data" / "bin" / "test.ids")
    for name in ("plain", "bleu", "bleu_uniform", "perplexity"):
        for algo in ("greedy", "beam"):
            text = (out / "decode" / f"{name}.{algo}" / "generate-test.txt").read_text()
            assert sum(ln.startswith("H-") for ln in text.splitlines()) == n_test
    res = json.loads((out / "results.json").read_text())
    assert {(r["actor"], r["search"]) for r in res["actors"]} == {
        (a, s) for a in ("bleu", "bleu_uniform", "perplexity") for s in ("greedy", "beam")}
    assert all(len(res["curves"][a]) >= 1 for a in ("bleu", "bleu_uniform", "perplexity"))
    for png in ("fig7_3_deltas.png", "fig7_4_curves.png"):
        assert (out / png).read_bytes()[:8] == PNG
    assert n_lines(out / "decode" / "bleu.influence.tsv") > n_test
    md = (out / "results.md").read_text()
    assert "Fig. 7.3" in md and "time × plain" in md

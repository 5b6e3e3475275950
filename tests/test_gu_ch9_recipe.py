"""Gu (2019) ch. 9 (simultaneous NMT with a learned READ/WRITE agent) recipe: the report's pieces on hand-made inputs
(the dominance check against WIW / WID, the Pareto front and its interpolation, the wait-k reading, the table, the
< 50-subword filter, the validation-curve parser, a whole report on hand-written decodes), the thesis-mode printout
of ``recipes/gu/ch9.sh`` (every fairseq command parses with fairseq's own parser and carries the §9.5 settings), bad
options refused, and, marked slow, the recipe's ``DATA=tiny`` run end to end."""
import json
import os

import pytest

from fairseq_ext.tools.chapters import simul_report as rep
from harness import ROOT, n_lines, parse_fairseq_command, run, thesis_commands

RECIPE = ROOT / "recipes" / "gu" / "ch9.sh"
PNG = b"\x89PNG\r\n\x1a\n"


# ============================================================================ dominance, curves, table
def test_dominance_verdicts():
    agents = [(0.5, 20.0, "ap0.3"), (0.7, 25.0, "ap0.5"), (0.9, 28.0, "ap0.7")]
    d = rep.dominance(agents, (0.75, 22.0, "wiw"), "ap")           # ap0.5 has less delay and more BLEU
    assert d["verdict"] == "dominated" and d["dominated_by"] == ["ap0.5"] and d["agents_win"]
    d = rep.dominance(agents, (0.6, 22.0, "wid"), "ap")            # no point dominates; the curve is at 22.5
    assert d["verdict"] == "under_curve" and d["curve_bleu"] == pytest.approx(22.5) and d["agents_win"]
    d = rep.dominance(agents, (0.6, 23.0, "wid"), "ap")
    assert d["verdict"] == "above_curve" and not d["agents_win"] and "NOT dominated" in d["text"]
    d = rep.dominance(agents, (0.3, 10.0, "wiw"), "ap")            # lower delay than every agent
    assert d["verdict"] == "outside_range" and not d["agents_win"] and "[0.500, 0.900]" in d["text"]
    d = rep.dominance(agents, (0.95, 27.0, "wiw"), "cw")            # more delay, less BLEU than ap0.7
    assert d["verdict"] == "dominated" and d["dominated_by"] == ["ap0.7"]
    assert not rep.dominates((0.5, 20.0), (0.5, 20.0))              # equal points: no dominance
    assert rep.dominates((0.5, 20.0), (0.5, 19.0)) and not rep.dominates((0.6, 21.0), (0.5, 19.0))


def test_pareto_front_and_interpolation():
    pts = [(0.5, 20.0, "a"), (0.6, 19.0, "b"), (0.7, 25.0, "c"), (0.7, 24.0, "d"), (0.9, 28.0, "e")]
    assert [p[2] for p in rep.pareto_front(pts)] == ["a", "c", "e"]
    assert rep.interpolate([(1, 10), (3, 30)], 2) == pytest.approx(20)
    assert rep.interpolate([(3, 30), (1, 10)], 1) == pytest.approx(10)   # any order; ends included
    assert rep.interpolate([(1, 10), (3, 30)], 0.5) is None and rep.interpolate([(1, 10), (3, 30)], 4) is None
    assert rep.interpolate([(1, 10), (1, 12), (2, 14)], 1) == pytest.approx(12)   # a vertical step: the top
    assert rep.interpolate([(2, 5)], 2) == 5


def rows_fixture():
    def row(name, kind, search, bleu, ap, cw, al):
        return {"name": name, "kind": kind, "search": search, "bleu": bleu, "chrf": bleu + 20, "ap": ap, "cw": cw,
                "al": al, "dal": al + 1}
    return [row("ap0.3", "agent", "greedy", 18.0, 0.55, 1.5, 3.0), row("ap0.3", "agent", "beam", 19.0, 0.56, 1.5, 3.1),
            row("ap0.7", "agent", "greedy", 24.0, 0.80, 3.0, 8.0), row("ap0.7", "agent", "beam", 25.5, 0.81, 3.1, 8.2),
            row("wiw", "baseline", "greedy", 20.0, 0.70, 2.0, 6.0),
            row("wid", "baseline", "greedy", 19.0, 0.50, 1.2, 2.0),
            row("wue", "baseline", "greedy", 27.0, 1.0, 20.0, 20.0),
            row("wos", "baseline", "greedy", 8.0, 0.5, 1.0, 1.0),
            row("wait1", "waitk", "greedy", 8.0, 0.5, 1.0, 1.0), row("wait3", "waitk", "greedy", 14.0, 0.6, 1.0, 3.0),
            row("wait7", "waitk", "greedy", 22.0, 0.75, 1.0, 7.0)]


def test_dominance_table_waitk_readings_and_table():
    rows = rows_fixture()
    dom = rep.dominance_table(rows)
    # 3 delay measures x 2 agent searches x {wiw, wid}
    assert len(dom) == 12
    ap_greedy = {d["baseline"]: d for d in dom if d["delay"] == "ap" and d["agent_search"] == "greedy"}
    assert ap_greedy["wiw"]["verdict"] == "under_curve"      # curve at AP 0.70: 18 + 6 * 0.6 = 21.6 >= 20
    assert ap_greedy["wid"]["verdict"] == "outside_range"    # AP 0.50 < 0.55: lower delay than any agent
    wk = {(r["name"], r["search"]): r for r in rep.waitk_readings(rows)}
    assert wk[("ap0.3", "greedy")]["waitk_bleu"] == pytest.approx(14.0) and wk[("ap0.3", "greedy")]["gap"] == 4.0
    assert wk[("ap0.7", "beam")]["waitk_bleu"] is None       # AL 8.2 beyond wait-7's 7.0
    table = rep.format_table(rows).splitlines()
    assert table[0].startswith("| system | kind | search | BLEU")
    names = [ln.split("|")[1].strip() for ln in table[2:]]
    assert names[:4] == ["ap0.3", "ap0.3", "ap0.7", "ap0.7"] and names[-3:] == ["wait1", "wait3", "wait7"]
    assert rep.system_kind("wait12", ["ap0.5"]) == "waitk" and rep.system_kind("ap0.5", ["ap0.5"]) == "agent"
    with pytest.raises(ValueError):
        rep.system_kind("waitk", ["ap0.5"])


def test_filter_keeps_pairs_under_the_limit(tmp_path):
    (tmp_path / "seg").mkdir()
    (tmp_path / "raw").mkdir()
    seg_src = ["a b c", " ".join(["x"] * 5), "d e", "f"]
    seg_tgt = ["a b", "y", " ".join(["z"] * 4), "g h"]
    (tmp_path / "seg" / "test.es").write_text("\n".join(seg_src) + "\n")
    (tmp_path / "seg" / "test.en").write_text("\n".join(seg_tgt) + "\n")
    (tmp_path / "raw" / "test.es").write_text("S0\nS1\nS2\nS3\n")
    (tmp_path / "raw" / "test.en").write_text("R0\nR1\nR2\nR3\n")
    out = tmp_path / "out"
    res = rep.filter_split(str(tmp_path / "seg" / "test"), str(tmp_path / "raw" / "test"), "es", "en", str(out),
                           max_len=4)   # both sides < 4 tokens: lines 0 and 3
    assert res == {"kept": 2, "under_max_len": 2, "total": 4, "max_len": 4}
    assert (out / "ref.txt").read_text() == "R0\nR3\n" and (out / "src.txt").read_text() == "S0\nS3\n"
    assert (out / "test.es").read_text() == "a b c\nf\n" and (out / "lines.txt").read_text() == "0\n3\n"
    res = rep.filter_split(str(tmp_path / "seg" / "test"), str(tmp_path / "raw" / "test"), "es", "en", str(out),
                           max_len=50, max_pairs=2)   # all 4 qualify; 2 evenly spaced: lines 0 and 2
    assert res["kept"] == 2 and res["under_max_len"] == 4 and (out / "lines.txt").read_text() == "0\n2\n"
    (tmp_path / "raw" / "test.en").write_text("R0\n")
    with pytest.raises(Exception, match="lines"):
        rep.filter_split(str(tmp_path / "seg" / "test"), str(tmp_path / "raw" / "test"), "es", "en", str(out))


def test_validation_curve_parser(tmp_path):
    log = tmp_path / "ap0.5.log"
    log.write_text(
        "2026-11-24 09:54:23 | INFO | train | epoch 001 | loss 107.148 | reward -0.3641 | bleu 0 | ap 0.6641 | "
        "num_updates 4\n"
        "2026-11-24 09:54:25 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 0.43 | reward -0.43 | "
        "bleu 3.5 | ap 0.9142 | cw 56.16 | bleu_over_ap 3.8284 | write_rate 0.48 | wps 1 | num_updates 4 | "
        "best_bleu_over_ap 3.8284\n", encoding="utf-8")
    pts = rep.validation_curve(str(log))
    assert len(pts) == 1 and pts[0]["num_updates"] == 4
    assert (pts[0]["bleu"], pts[0]["ap"], pts[0]["cw"]) == (3.5, 0.9142, 56.16)


def write_decode(folder, hyps, actions, src_lens):
    folder.mkdir(parents=True)
    lines, recs = [], []
    for i, (h, a, s) in enumerate(zip(hyps, actions, src_lens)):
        lines += [f"S-{i}\tsrc", f"T-{i}\tref", f"H-{i}\t-0.5\t{h}", f"D-{i}\t-0.5\t{h}", f"P-{i}\t-0.5"]
        recs.append(json.dumps({"id": i, "src_len": s, "actions": a}))
    (folder / "generate-test.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "actions.jsonl").write_text("\n".join(recs) + "\n")


def test_report_on_hand_written_decodes(tmp_path):
    refs = ["the cat sat on the mat", "a dog ran in the park today"]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    dd = tmp_path / "decode"
    good = ["\u2581the \u2581cat \u2581sat \u2581on \u2581the \u2581mat",
            "\u2581a \u2581dog \u2581ran \u2581in \u2581the \u2581park"]
    bad = ["\u2581the \u2581cat", "\u2581a \u2581dog"]
    write_decode(dd / "ap0.5.greedy", good, ["WRWRWWWW", "WRRWWWWW"], [3, 4])
    write_decode(dd / "ap0.5.beam", good, ["WRWRWWWW", "WRRWWWWW"], [3, 4])
    write_decode(dd / "wiw.greedy", bad, ["RRWWW", "RRRWWW"], [3, 4])
    write_decode(dd / "wait2.greedy", bad, ["RWWW", "RWWW"], [3, 4])
    (dd / "wid.greedy.tmp").mkdir()   # an unfinished decode is ignored
    out = tmp_path / "out"
    assert rep.main(["report", "--decode-dir", str(dd), "--ref", str(tmp_path / "ref.txt"), "--out", str(out),
                     "--agent", "ap0.5", "--remove-bpe", "sentencepiece", "--title", "hand-made"]) == 0
    res = json.loads((out / "results.json").read_text())
    by = {(r["name"], r["search"]): r for r in res["systems"]}
    assert set(by) == {("ap0.5", "greedy"), ("ap0.5", "beam"), ("wiw", "greedy"), ("wait2", "greedy")}
    assert by[("ap0.5", "greedy")]["bleu"] > by[("wiw", "greedy")]["bleu"]
    # AP of "WRWRWWWW" on |X| = 3: delays 1,2,3,3,3,3 -> 15 / 18; "WRRWWWWW" on 4: 1,3,3,3,3,3 -> 16 / 24
    assert by[("ap0.5", "greedy")]["ap"] == pytest.approx((15 / 18 + 16 / 24) / 2)
    assert by[("wiw", "greedy")]["cw"] == pytest.approx(2.5)
    assert {d["baseline"] for d in res["dominance"]} == {"wiw"}
    for png in ("fig9_5_bleu_ap.png", "fig9_6_bleu_cw.png", "bleu_al.png"):
        assert (out / png).read_bytes()[:8] == PNG
    md = (out / "results.md").read_text()
    assert "Do the agents dominate WIW / WID?" in md and "| wait2 | waitk | greedy |" in md
    # a decode of an unknown system is refused
    write_decode(dd / "mystery.greedy", good, ["WRWRWWWW", "WRRWWWWW"], [3, 4])
    from fairseq_ext.tools.common import cli_status
    assert cli_status(rep.main, ["report", "--decode-dir", str(dd), "--ref", str(tmp_path / "ref.txt"),
                                 "--out", str(out), "--agent", "ap0.5"]) == 2


# ============================================================================ thesis printout
def thesis_lines(**env):
    return thesis_commands(RECIPE, **env)


parse_fairseq = parse_fairseq_command


def test_thesis_mode_prints_parsable_commands():
    lines = thesis_lines()
    fs = [parse_fairseq(ln) for ln in lines if os.path.basename(ln.split()[1]).startswith("fairseq-")]
    trains = [a for t, a in fs if t == "fairseq-train"]
    gens = [a for t, a in fs if t == "fairseq-generate"]
    # 4 directions (En<->Ru, En<->De): one environment and 6 agents each
    envs = [a for a in trains if a.arch == "rnnsearch_gu_wmt15_uni"]
    assert len(envs) == 4 and all(a.encoder_unidirectional and a.max_source_positions == 50 for a in envs)
    agents = [a for a in trains if a.arch == "simul_agent"]
    assert len(agents) == 24
    assert sorted(a.target_ap for a in agents if a.delay_type == "ap") == [0.3] * 4 + [0.5] * 4 + [0.7] * 4
    assert sorted(a.target_cw for a in agents if a.delay_type == "cw") == [2] * 4 + [5] * 4 + [8] * 4
    for a in agents:   # §9.5.1: 10 sentences x 5 trajectories, Adam 2e-4, BLEU/AP model selection
        assert (a.batch_size, a.traj_per_sent, a.optimizer, a.lr, a.required_batch_size_multiple) == (
            10, 5, "adam", [2e-4], 1)
        assert a.best_checkpoint_metric == "bleu_over_ap" and a.maximize_best_checkpoint_metric
        assert a.nmt_path.endswith("/nmt/checkpoint_best.pt") and a.max_source_positions == 50
    # per direction and evaluation set (nt2013, nt2015): 6 agents x 2 searches + WUE x 2 + WOS/WIW/WID + 5 wait-k
    assert len(gens) == 4 * 2 * (12 + 2 + 3 + 5)
    assert all(a.task == "simul_rl_translation" and a.simul_actions_out for a in gens)
    beams = [a for a in gens if a.simul_decoding == "simul_beam"]
    assert len(beams) == 4 * 2 * 7 and all(a.simul_beam == 5 for a in beams)
    assert sorted({a.simul_policy for a in gens}) == ["agent", "waitk", "wid", "wiw", "wos", "wue"]
    assert sorted({a.simul_waitk for a in gens if a.simul_policy == "waitk"}) == [1, 2, 3, 5, 7]
    assert sum("examples/simultaneous/report.py report" in ln for ln in lines) == 8
    assert sum("fairseq-preprocess" in ln for ln in lines) == 8


def test_thesis_mode_options():
    lines = thesis_lines(PAIRS="ru-en", TARGETS="ap0.5 cw5", BETAS="-0.5 -2")
    trains = [ln for ln in lines if "fairseq-train" in ln]
    assert all("/ru-en/" in ln for ln in lines if "fairseq-" in ln)
    assert len(trains) == 1 + 3   # the environment, ap0.5 for two betas, cw5
    assert any("--save-dir checkpoints/gu_ch9/ru-en/agents/ap0.5_-0.5" in ln and "--delay-beta -0.5" in ln
               for ln in trains)


@pytest.mark.parametrize("env,message", [
    ({"TARGETS": "ap0.5 sooner"}, "unknown delay target 'sooner'"),
    ({"WAITK": "1 x"}, "WAITK values must be integers"),
    ({"PAIR": "de-en"}, "PAIR must be es-en, en-es, en-ru or ru-en"),
    ({"AGENT_SELECT": "best final"}, "AGENT_SELECT and BEAM_SELECT take best and/or last, got 'final'"),
    ({"BEAM_SELECT": "top"}, "AGENT_SELECT and BEAM_SELECT take best and/or last, got 'top'"),
])
def test_bad_options_are_refused(tmp_path, env, message):
    p = run(["bash", RECIPE], timeout=120, check=False, RUNS=tmp_path, **env)
    assert p.returncode == 2 and message in p.stderr
    assert not any(tmp_path.iterdir())   # refused before any work


# ============================================================================ tiny end to end
@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    """DATA=tiny: ~5-6 min on one thread next to other work."""
    run(["bash", RECIPE], timeout=1500, DATA="tiny", RUNS=tmp_path, THREADS="1", AGENT_SELECT="best last",
        BEAM_SELECT="best")   # the last checkpoints greedy only
    out = tmp_path / "gu_ch9_tiny"
    assert (out / "nmt" / "train.done").exists()   # stage 1 finished: a rerun skips it, a killed one resumes it
    ev = out / "eval_lt100"          # the tiny slice's limit: both sides < 100 subwords, every such pair
    n_test = n_lines(ev / "test" / "ref.txt")
    systems = {f"{a}.{s}" for a in ("ap0.3", "ap0.5", "ap0.7") for s in ("greedy", "beam")}
    systems |= {f"{a}-last.greedy" for a in ("ap0.3", "ap0.5", "ap0.7")}
    systems |= {f"{b}.greedy" for b in ("wue", "wos", "wiw", "wid", "wait1", "wait3")} | {"wue.beam"}
    for name in systems:
        text = (ev / "decode" / name / "generate-test.txt").read_text()
        assert sum(ln.startswith("H-") for ln in text.splitlines()) == n_test
        assert n_lines(ev / "decode" / name / "actions.jsonl") == n_test
    res = json.loads((out / "results.json").read_text())
    assert {f"{r['name']}.{r['search']}" for r in res["systems"]} == systems
    assert len(res["dominance"]) == 12 and all(len(res["curves"][a]) >= 1 for a in ("ap0.3", "ap0.5", "ap0.7"))
    for png in ("fig9_5_bleu_ap.png", "fig9_6_bleu_cw.png", "bleu_al.png", "fig9_4_curves.png"):
        assert (out / png).read_bytes()[:8] == PNG
    md = (out / "results.md").read_text()
    assert "Do the agents dominate WIW / WID?" in md

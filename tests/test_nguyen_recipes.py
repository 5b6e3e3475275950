"""Nguyen thesis recipes (recipes/nguyen/ch{3,4,5,6,7}.sh, recipes/nguyen/transfer.py): the thesis-mode
commands parse with the real fairseq / plugin parsers (ch. 6's with the fixed-update epochs of Table 6.1),
the default configurations exist, and every recipe but ch6 runs end to end in its ``DATA=tiny`` mode (the
committed Bible slice, seconds of training): train, decode, sacreBLEU, paired bootstrap, and the chapter's
extra step (transfer from a parent, Table 4.3 concatenated decoding, Table 5.8 lexicon, Fig. 7.1 positional
maps)."""
import csv
import json
import os
import re
import shlex

import pytest

from fairseq_ext.tools.chapters import transfer_pipeline
from fairseq_ext.tools.evaluation import bench_configs, bench_runs
from harness import ROOT, n_lines, run

RECIPES = {c: ROOT / "recipes" / "nguyen" / f"{c}.sh" for c in ("ch3", "ch4", "ch5", "ch6", "ch7")}
TINY_ENV = {"DATA": "tiny", "BUDGET_MIN": "0.02", "PARENT_BUDGET_MIN": "0.02", "N_BOOTSTRAP": "100",
            "THREADS": "1"}


def recipe(name, check=True, **env):
    return run(["bash", RECIPES[name]], check=check, timeout=900, **env)


# ----------------------------------------------------------------------------- static checks
def test_default_configurations_exist():
    names = set()
    for path in RECIPES.values():
        for m in re.finditer(r"CONFIGS(?:_TINY)?:-([\w,]+)\}", path.read_text()):
            names.update(m.group(1).split(","))
    assert {"concat_consec", "concat_rand", "fixnorm_lex", "luong_fixnorm_lex", "untied_pos"} <= names
    for n in names:
        cfg = bench_configs.get(n)
        assert {"desc", "task", "train", "generate"} <= set(cfg)
    for n in ("concat_rand_mask_sep_batch_reset_pos", "shift_uniform", "random_untied_pos",
              "untied_pos_scalenorm_fixnorm", "luong_untied", "transformer_untied"):
        assert n in bench_configs.CONFIGS
    assert bench_configs.BASELINE == "transformer"


def _parse_thesis_lines(lines):
    """Every printed fairseq-train/-generate/-preprocess command and every plugin CLI call parses."""
    from fairseq import options

    from fairseq_ext.tools.corpora import arthur_lexicon, transfer, transliterate
    from fairseq_ext.tools.evaluation import score
    n = 0
    for line in lines:
        toks = shlex.split(line[2:])
        tool = os.path.basename(toks[0])
        args = [str(ROOT / "fairseq_ext") if a == "fairseq_ext" else a for a in toks[1:]]
        if tool == "fairseq-train":
            options.parse_args_and_arch(options.get_training_parser(), args)
        elif tool == "fairseq-generate":
            options.parse_args_and_arch(options.get_generation_parser(), args)
        elif tool == "fairseq-preprocess":
            options.get_preprocessing_parser().parse_args(args)
        elif tool == "python" and args[:2] == ["-m", "fairseq_ext.tools.corpora.transfer"]:
            transfer.build_parser().parse_args(args[2:])
        elif tool == "python" and args[:2] == ["-m", "fairseq_ext.tools.corpora.transliterate"]:
            transliterate.build_parser().parse_args(args[2:])
        elif tool == "python" and args[:2] == ["-m", "fairseq_ext.tools.evaluation.score"]:
            score.build_parser().parse_args(args[2:])
        elif tool == "python" and args[:2] == ["-m", "fairseq_ext.tools.corpora.arthur_lexicon"]:
            arthur_lexicon.build_parser().parse_args(args[2:])
        else:
            continue
        n += 1
    return n


@pytest.mark.parametrize("name,must", [
    ("ch3", ["transliterate folder", "--scheme uyghur", "joint-bpe", "--arch lstm_luong", "--optimizer adadelta",
             "--finetune-from-model", "--freeze-target-embeddings", "transfer remap", "--gnmt-alpha 0.8",
             "--beam 12", "transfer overlap", "transfer plot"]),
    ("ch4", ["--task concat_translation", "--concat consec", "--concat rand", "--position-shift sim",
             "--position-shift uniform", "--concat-attn-mask --concat-sep-batch --concat-reset-pos",
             "--concat-eval rand", "--norm-type scalenorm --fixnorm", "--lr-scheduler twt_invsqrt",
             "--gnmt-alpha 0.6", "--buckets"]),
    ("ch5", ["--arch lstm_luong ", "--arch lstm_luong_tied", "--arch lstm_luong_fixnorm ",
             "--arch lstm_luong_fixnorm_lex", "--optimizer adadelta", "--batch-size 32", "--replace-unk",
             "--gnmt-alpha 0.8", "fairseq_ext.tools.analysis.lexicon", "fairseq_ext.tools.corpora.arthur_lexicon --data /x",
             "--arch lstm_luong_arthur", "--arthur-lexicon checkpoints/nguyen_ch5/arthur_lexicon.pt"]),
    ("ch6", ["--arch twt_prenorm_fixnorm_scalenorm", "--lr-scheduler twt_invsqrt", "--updates-per-epoch 1500",
             "--max-epoch 200", "--patience 20", "--gnmt-alpha 0.6"]),
    ("ch7", ["--arch twt_untied_pos", "--arch twt_random_untied_pos", "--no-lexical", "--gnmt-alpha 0.6",
             "fig7 "]),
])
def test_thesis_mode_prints_parsable_commands(name, must, capsys):
    p = recipe(name, MODE="thesis", THESIS_DATA="/x")
    lines = p.stdout.splitlines()
    assert lines and all(s.startswith("+ ") for s in lines)
    text = p.stdout
    for m in must:
        assert m in text, m
    assert "/x" in text
    assert _parse_thesis_lines(lines) >= 4
    q = recipe(name, check=False, MODE="thesis")
    assert q.returncode != 0 and "THESIS_DATA" in q.stderr


def _transfer_driver():
    return transfer_pipeline


def test_bad_arguments_are_clear_errors(tmp_path, capsys):
    p = recipe("ch3", check=False, EXPERIMENTS="related,bogus", RUNS=tmp_path)
    assert p.returncode == 2 and "unknown experiment 'bogus'" in p.stderr
    p = recipe("ch3", check=False, EXPERIMENTS="xscript", XLIT="latin", RUNS=tmp_path)
    assert p.returncode == 2 and "unknown XLIT 'latin'" in p.stderr
    driver = _transfer_driver()
    assert driver.main(["run", "--parent-src", "es", "--child-src", "es", "--out", str(tmp_path / "x")]) == 2
    assert "error: the parent and child source languages are the same (es)" in capsys.readouterr().err
    assert driver.main(["run", "--parent-src", "es", "--child-src", "kjv", "--systems", "bpe_baseline,zoph",
                        "--out", str(tmp_path / "x")]) == 2
    assert "unknown system 'zoph'" in capsys.readouterr().err
    assert driver.UNTIED_SMALL.count("--share-decoder-input-output-embed") == 1
    assert "--share-all-embeddings" not in driver.UNTIED_SMALL and "subword_nmt" in driver.GENERATE_BPE


def test_parent_run_gets_every_bench_option(tmp_path):
    """The parent's run_config reads every option bench.py has (a hand-built namespace once missed --max-updates,
    added with the learning-curve mode, and the parent stage failed before training)."""
    driver = _transfer_driver()
    a = driver.build_parser().parse_args(["run", "--parent-src", "ar", "--child-src", "fa", "--out", str(tmp_path),
                                          "--parent-budget-min", "20", "--threads", "1"])
    pargs = driver.parent_args(tmp_path / "seg", a, "ar", "en_web")
    defaults = vars(bench_runs.build_parser().parse_args([]))
    assert set(defaults) <= set(vars(pargs))
    assert (pargs.budget_min, pargs.threads, pargs.src, pargs.tgt, pargs.ref2) == (20.0, 1, "ar", "en_web", "")
    assert (pargs.max_updates, pargs.curve_every, pargs.patience, pargs.force) == (0, 0, 0, False)


def test_exclude_train(tmp_path):
    driver = _transfer_driver()
    raw = tmp_path / "raw"
    raw.mkdir()
    for sp, n in (("train", 5), ("valid", 2)):
        (raw / f"{sp}.ids").write_text("".join(f"{sp}.{i}\n" for i in range(n)))
        (raw / f"{sp}.xx").write_text("".join(f"line {sp} {i}\n" for i in range(n)))
    out = driver.exclude_train(str(raw), str(tmp_path / "out"), ["xx"], {"train.1", "train.3"})
    assert (tmp_path / "out" / "train.ids").read_text() == "train.0\ntrain.2\ntrain.4\n"
    assert (tmp_path / "out" / "train.xx").read_text() == "line train 0\nline train 2\nline train 4\n"
    assert (tmp_path / "out" / "valid.xx").read_text() == (raw / "valid.xx").read_text()
    assert out == str(tmp_path / "out")
    with pytest.raises(driver.ToolError, match="leaves no parent training data"):
        driver.exclude_train(str(raw), str(tmp_path / "o2"), ["xx"], {f"train.{i}" for i in range(5)})


# ----------------------------------------------------------------------------- tiny real runs
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("nguyen_runs")


def _result(job, name):
    r = json.loads((job / name / "result.json").read_text())
    assert r["n_translated"] == 4 and r["bleu"] >= 0 and r["chrf"] >= 0 and r["updates"] >= 1
    assert r["bleu_signature"].startswith("nrefs:1|")
    return r


def _summary(job):
    return json.loads((job / "summary.json").read_text())


@pytest.mark.slow
def test_tiny_ch3_transfer(runs):
    recipe("ch3", RUNS=runs, **TINY_ENV)
    out = runs / "nguyen_tiny" / "ch3"
    data = out / "data"
    assert n_lines(data / "child_raw" / "train.kjv") == 100
    assert n_lines(data / "parent_raw" / "train.es") == 209 - 100  # the child's verses excluded
    child_ids = set((data / "child_raw" / "train.ids").read_text().split())
    assert not child_ids & set((data / "parent_raw" / "train.ids").read_text().split())
    assert (data / "child_xlit-kjv" / "transliterate.json").exists()  # uroman on the child source
    job = out / "bpe300"
    child = job / "child_kjv-en_from_es_bpe300"
    assert (data / "bpe300" / "parent" / "bin" / "dict.es.txt").read_text() == \
        (data / "bpe300" / "child" / "bin" / "dict.kjv.txt").read_text()  # one joint vocabulary
    _result(job, "parent")
    base = _result(child, "bpe_baseline")
    frozen = _result(child, "bpe_transfer_freeze")
    log = (child / "bpe_transfer_freeze" / "train.log").read_text()
    assert "froze the target embeddings" in log and f"Loaded checkpoint {job / 'parent' / 'checkpoint_best.pt'}" in log
    assert "Loaded checkpoint" not in (child / "bpe_baseline" / "train.log").read_text()
    hyps = (child / "bpe_baseline" / "generate.out").read_text()
    assert "\nD-" in hyps and "@@" not in "".join(x for x in hyps.splitlines() if x.startswith("D-"))
    s = _summary(child)
    assert s["bpe_transfer_freeze"]["significance"]["bleu_p"] is not None and base["name"] == "bpe_baseline"
    summ = json.loads((out / "summary.json").read_text())
    run300 = summ["runs"]["300"]
    assert 0 < run300["bpe_overlap"]["train"]["share"] <= 1 and summ["word_overlap"]["train"]["types"] > 0
    assert set(run300["child"]) == {"bpe_baseline", "bpe_transfer_freeze"}
    assert run300["child"]["bpe_transfer_freeze"]["bleu"] == frozen["bleu"]
    assert (out / "sweep.tsv").read_text().startswith("system\tsize\tbleu\n")
    assert json.loads((data / "bpe300" / "overlap.json").read_text())["bpe"]["dev"]["types"] > 0


@pytest.mark.slow
def test_tiny_ch7_untied_pos(runs):
    recipe("ch7", RUNS=runs, **TINY_ENV)
    job = runs / "nguyen_tiny" / "job"
    _result(job, "transformer")
    _result(job, "untied_pos")
    assert _summary(job)["untied_pos"]["significance"]["bleu_p"] is not None
    assert (job / "fig7_untied_pos.png").stat().st_size > 10000


@pytest.mark.slow
def test_tiny_ch5_lexical(runs):
    p = recipe("ch5", RUNS=runs, **TINY_ENV)
    job = runs / "nguyen_tiny" / "job"
    _result(job, "luong_fixnorm_lex")
    lex = (job / "lexicon_luong_fixnorm_lex.txt").read_text().splitlines()
    assert len(lex) == 30 and all("\t" in ln and ln.endswith(")") for ln in lex)
    assert "Table 5.8 lexicon of luong_fixnorm_lex" in p.stdout


@pytest.mark.slow
def test_tiny_ch5_equal_updates_mode(tmp_path):
    """MAX_UPDATES=U: every configuration stops at U updates with a dev BLEU curve, in its own job folder
    (job_u<U>), never mixed with the wall-clock job's results."""
    recipe("ch5", RUNS=tmp_path, **dict(TINY_ENV, CONFIGS="transformer,luong_tied", MAX_UPDATES="4",
                                        CURVE_EVERY="2"))
    job = tmp_path / "nguyen_tiny" / "job_u4"
    assert not (tmp_path / "nguyen_tiny" / "job").exists()
    for name in ("transformer", "luong_tied"):
        r = _result(job, name)
        assert r["curve"]["last_updates"] == 4 and r["curve"]["stopped"] == "max-updates"
        assert [int(x["updates"]) for x in csv.DictReader(open(job / name / "curve.csv"))] == [2, 4]
    assert (job / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_tiny_ch4_concat(runs):
    recipe("ch4", RUNS=runs, **TINY_ENV)
    job = runs / "nguyen_tiny" / "job"
    r = _result(job, "concat_rand")
    assert r["desc"].startswith("Nguyen ch.4 RAND")
    assert "rand concatenations" in (job / "concat_rand" / "train.log").read_text()
    rows = (job / "concat_eval.tsv").read_text().splitlines()
    assert rows[0] == "config\tconcat_eval\tbleu" and rows[1].startswith("concat_rand\tconsec\t")
    float(rows[1].split("\t")[2])
    out = (job / "concat_rand" / "generate_concat_consec.out").read_text()
    assert len(re.findall(r"^H-\d+", out, re.M)) == 4 - 1  # N-1 CONSEC concatenations of the test set

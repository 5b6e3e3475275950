"""recipes/bench/bench.py (:mod:`fairseq_ext.tools.evaluation.bench_runs`): the learning-curve mode (dev BLEU every N
updates through fairseq's --eval-bleu hook, equal-updates and convergence stops, curves.csv / curves.png, the
"converged" table)."""
import csv
import json
import re
import shutil
import sys

import pytest

from fairseq_ext.tools.evaluation import bench_runs, fairseq_log
from harness import ROOT, run

PNG = b"\x89PNG\r\n\x1a\n"

BENCH = ROOT / "recipes" / "bench" / "bench.py"


def bench_module():
    return bench_runs


LOG = """\
2026-11-24 10:00:00 | INFO | fairseq_cli.train | Start iterating over samples
2026-11-24 10:00:05 | INFO | train_inner | epoch 001:      2 / 9 loss=9.1, nll_loss=9.0, ppl=512, wps=900, ups=0.5, wpb=1800, bsz=60, num_updates=2, lr=1e-05, gnorm=3.1, train_wall=4, wall=5
2026-11-24 10:00:07 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.9 | nll_loss 8.8 | ppl 445.7 | bleu 0.5 | wps 1000 | wpb 900 | bsz 45 | num_updates 2
2026-11-24 10:00:12 | INFO | train_inner | epoch 001:      4 / 9 loss=8.1, nll_loss=8.0, ppl=256, wps=900, ups=0.5, wpb=1800, bsz=60, num_updates=4, lr=2e-05, gnorm=2.1, train_wall=3.5, wall=12
2026-11-24 10:00:14 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.5 | nll_loss 8.4 | ppl 362 | bleu 1.25 | wps 1000 | wpb 900 | bsz 45 | num_updates 4 | best_bleu 1.25
2026-11-24 10:00:15 | INFO | fairseq_cli.train | Start iterating over samples
2026-11-24 10:00:19 | INFO | train_inner | epoch 001:      6 / 9 loss=7.1, nll_loss=7.0, ppl=128, wps=900, ups=0.5, wpb=1800, bsz=60, num_updates=6, lr=3e-05, gnorm=2.0, train_wall=3.0, wall=19
2026-11-24 11:00:00 | INFO | fairseq.trainer | Loaded checkpoint x/checkpoint_last.pt (epoch 1 @ 4 updates)
2026-11-24 11:00:00 | INFO | fairseq_cli.train | Start iterating over samples
2026-11-24 11:00:05 | INFO | train_inner | epoch 001:      6 / 9 loss=7.0, nll_loss=6.9, ppl=120, wps=900, ups=0.5, wpb=1800, bsz=60, num_updates=6, lr=3e-05, gnorm=2.0, train_wall=2.5, wall=18
2026-11-24 11:00:07 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.0 | nll_loss 7.9 | ppl 256 | bleu 1.25 | wps 1000 | wpb 900 | bsz 45 | num_updates 6 | best_bleu 1.25
"""


def test_parse_curve_and_best_point():
    b = fairseq_log
    rows = b.parse_curve(LOG)
    assert [r["updates"] for r in rows] == [2, 4, 6]
    assert [r["dev_bleu"] for r in rows] == [0.5, 1.25, 1.25]
    assert [r["dev_loss"] for r in rows] == [8.9, 8.5, 8.0] and rows[0]["dev_nll_loss"] == 8.8
    # the training loss of the last train_inner interval before each validation (the resumed run's own at 6)
    assert [r["train_loss"] for r in rows] == [9.1, 8.1, 7.0] and rows[-1]["train_nll_loss"] == 6.9
    # training wall-clock: the sum of the train_inner intervals (validation excluded); the elapsed wall-clock: from
    # the timestamps ("Start iterating" also begins every epoch). The resumption ("Loaded checkpoint ... @ 4 updates")
    # goes back to the validation at 4 updates: the 3 s trained after it in the first run were lost, and so was the
    # first run's wall-clock after 10:00:14; fairseq's own wall (18 in the log, 0 in real resumed logs) is not used
    assert [r["train_wall_s"] for r in rows] == [4.0, 7.5, 10.0]
    assert [r["wall_s"] for r in rows] == [7.0, 14.0, 21.0]
    zero = b.parse_curve(LOG.replace("wall=18", "wall=0"))
    assert zero[-1]["wall_s"] == 21.0
    assert rows[0]["epoch"] == 1
    # the first of equal dev BLEUs is the best (fairseq keeps the earlier checkpoint)
    assert b.best_point(rows)["updates"] == 4
    assert b.best_point([{**rows[0], "dev_bleu": None}]) is None
    # a resumed run repeats an update: the later validation wins
    rows = b.parse_curve(LOG + LOG.split("\n", 7)[-1].replace("| loss 8.0 |", "| loss 7.5 |"))
    assert [r["updates"] for r in rows] == [2, 4, 6] and rows[-1]["dev_loss"] == 7.5


def test_stop_reason_reads_only_the_last_run_of_a_resumed_log():
    """A run resumed after an early stop (a larger patience, a raised cap) appends to the same train.log, which
    keeps the first run's "early stop" line: the stop label must come from the last run only. Before the fix
    the whole log was searched, and a resumed CONSEC run that stopped at the 5-hour cap was labelled
    "patience (20 validations)"."""
    bench = fairseq_log
    first = ("| early stop since valid performance hasn't improved for last 5 runs\n"
             "| done training in 4404.2 seconds\n")
    cap = ("| early stopping resumed: best 18.56, 5 validation(s) without improvement\n"
           "| Stopping training due to cumulative_training_time: 5.0017 > stop_time_hours: 5.0 hour(s)\n"
           "| done training in 3398.1 seconds\n")
    assert bench.stop_reason(first, 5, 0, 8200) == "patience"
    assert bench.stop_reason(first + cap, 20, 0, 12001) == "budget"
    assert bench.stop_reason(first + cap.replace("Stopping training due to cumulative_training_time: 5.0017 > "
                                                 "stop_time_hours: 5.0 hour(s)", "early stop since valid "
                                                 "performance hasn't improved for last 20 runs"), 20, 0, 12001) == "patience"
    assert bench.stop_reason(first + cap, 20, 12001, 12001) == "max-updates"
    assert bench.stop_reason("| early stop since valid performance hasn't improved for last 5 runs\n", 0, 0, 9) == "budget"


def test_merge_table_keeps_other_jobs_and_replaces_its_own(tmp_path):
    b = bench_module()
    path = tmp_path / "R.md"
    path.write_text("# r\n\n<!-- bench:table -->\n" + b.HEADER + "\n| jas | old | 1 | job1 |\n"
                    "| transformer | base | 2 | job1 |\n<!-- /bench:table -->\n\n<!-- bench:jobs -->\n- job `job1`\n")
    b.merge_table(path, {"transformer": "| transformer | base | 3 | job2 |", "enc_dc": "| enc_dc | dc | 4 | job2 |"},
                  "- job `job2`")
    b.merge_table(path, {"enc_dc": "| enc_dc | dc | 5 | job2 |"}, "- job `job2`")   # a re-run replaces its row
    block = path.read_text().split("<!-- bench:table -->")[1].split("<!-- /bench:table -->")[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("| ") and not ln.startswith("| config")]
    assert rows == ["| transformer | base | 2 | job1 |", "| jas | old | 1 | job1 |",
                    "| transformer | base | 3 | job2 |", "| enc_dc | dc | 5 | job2 |"]
    assert path.read_text().count("- job `job2`") == 1


def test_options_that_cannot_stop_are_refused(tmp_path):
    p = run([sys.executable, BENCH, "--data", tmp_path, "--patience", "3"], check=False)
    assert p.returncode == 2 and "--patience needs --curve-every" in p.stderr
    p = run([sys.executable, BENCH, "--data", tmp_path, "--budget-min", "0"], check=False)
    assert p.returncode == 2 and "nothing would stop training" in p.stderr


@pytest.fixture(scope="module")
def tiny_data(tiny_bin, tmp_path_factory):
    """The tiny slice as bench.py reads a prepared folder: bin/ and segment.json side by side."""
    d = tmp_path_factory.mktemp("bench_tiny") / "spm300"
    d.mkdir()
    (d / "bin").symlink_to(tiny_bin)
    shutil.copy(tiny_bin / "segment.json", d / "segment.json")
    return d


def test_curve_job_equal_updates(tiny_data, tmp_path):
    table = tmp_path / "RESULTS.md"
    table.write_text("# results\n", encoding="utf-8")
    out = tmp_path / "curvejob"
    common = [sys.executable, BENCH, "--data", tiny_data, "--threads", "1", "--ref2", "", "--n-bootstrap", "20",
              "--out", out, "--table", table]
    p = run([*common, "--configs", "transformer,twt_scalenorm_fixnorm", "--curve-every", "2", "--max-updates", "4",
             "--budget-min", "0", "--pair", "twt_scalenorm_fixnorm=transformer"], timeout=900)
    for name in ("transformer", "twt_scalenorm_fixnorm"):
        with open(out / name / "curve.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [int(r["updates"]) for r in rows] == [2, 4]          # a validation every 2 updates, none at epoch ends
        assert all(r["dev_bleu"] != "" and r["dev_loss"] != "" for r in rows)
        # the training clock = the sum of fairseq's train_inner train_wall up to each validation; fairseq logs it
        # per interval in whole seconds, so on a fast CPU a few updates may add 0
        walls = [float(re.search(r"train_wall=([\d.]+)", ln).group(1))
                 for ln in (out / name / "train.log").read_text().splitlines() if "| train_inner |" in ln]
        assert len(walls) == 4 and float(rows[1]["train_wall_s"]) == sum(walls)
        assert 0 <= float(rows[0]["train_wall_s"]) == sum(walls[:2]) <= float(rows[1]["train_wall_s"])
        res = json.loads((out / name / "result.json").read_text())
        c = res["curve"]
        assert c["stopped"] == "max-updates" and c["last_updates"] == 4 and c["points"] == 2
        assert c["best_dev_bleu"] == max(float(r["dev_bleu"]) for r in rows)
        assert (out / name / "checkpoint_best.pt").exists()
        n_test = sum(1 for _ in open(ROOT / "tests" / "data" / "bible_tiny" / "test.en"))
        assert res["n_translated"] == n_test
    with open(out / "curves.csv", newline="") as f:
        assert {r["config"] for r in csv.DictReader(f)} == {"transformer", "twt_scalenorm_fixnorm"}
    assert (out / "curves.png").read_bytes()[:8] == PNG
    text = table.read_text()
    block = text.split("<!-- bench:converged -->")[1].split("<!-- /bench:converged -->")[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("| ") and not ln.startswith("| config")]
    assert [ln.split(" | ")[0] for ln in rows] == ["| transformer", "| twt_scalenorm_fixnorm"]  # baseline first
    assert "(p=" in rows[1] and "/ 4 |" in rows[0] and "| max-updates | curvejob |" in rows[0]
    assert "- job `curvejob`" in block and "max 4 updates" in block and "<!-- bench:table -->" not in text
    assert "| twt_scalenorm_fixnorm |" in p.stdout
    pairs = text.split("<!-- bench:pairs -->")[1].split("<!-- /bench:pairs -->")[0]   # --pair: the reverse pair
    assert "| transformer | twt_scalenorm_fixnorm |" in pairs and "| curvejob |" in pairs and "(p=" in pairs
    assert "findfont" not in p.stdout + p.stderr  # no matplotlib debug lines in the job log


@pytest.mark.slow
def test_curve_job_patience(tiny_data, tmp_path):
    """Convergence: early stopping after P validations without a better dev BLEU (capped by --max-updates)."""
    table = tmp_path / "RESULTS.md"
    table.write_text("# results\n\n<!-- bench:converged -->\n| x | y | curvejob |\n<!-- /bench:converged -->\n",
                     encoding="utf-8")
    out2 = tmp_path / "patiencejob"
    run([sys.executable, BENCH, "--data", tiny_data, "--threads", "1", "--ref2", "", "--out", out2, "--table", table,
         "--configs", "transformer", "--curve-every", "1", "--patience", "2", "--max-updates", "8",
         "--budget-min", "0"], timeout=900)
    res = json.loads((out2 / "transformer" / "result.json").read_text())
    c = res["curve"]
    with open(out2 / "transformer" / "curve.csv", newline="") as f:
        bleus = [float(r["dev_bleu"]) for r in csv.DictReader(f)]
    assert c["patience"] == 2 and len(bleus) == c["points"] == c["last_updates"]
    if c["stopped"] == "patience":   # the last 2 validations are no better than the best before them
        assert c["last_updates"] < 8 and max(bleus[-2:]) <= max(bleus[:-2])
    else:
        assert c["stopped"] == "max-updates" and c["last_updates"] == 8
    block = table.read_text().split("<!-- bench:converged -->")[1]
    assert "| curvejob |" in block and "| patiencejob |" in block   # jobs never replace each other's rows


CONVERGED = ROOT / "recipes" / "bench" / "converged.sh"


def test_converged_recipe_refuses_an_unknown_stage(tmp_path):
    p = run(["bash", CONVERGED], check=False, DATA="tiny", RUNS=tmp_path, STAGES="bogus", THREADS="1")
    assert p.returncode == 2 and "unknown stage 'bogus'" in p.stderr


@pytest.mark.slow
def test_converged_recipe_tiny(tmp_path):
    """DATA=tiny: the three stages on the tiny slice (two --train-only lanes per job, then the comparison)."""
    table = tmp_path / "RESULTS.md"
    table.write_text("# r\n", encoding="utf-8")
    run(["bash", CONVERGED], timeout=2400, DATA="tiny", RUNS=tmp_path, THREADS="1", TABLE=str(table))
    out = tmp_path / "converged_tiny"
    expected = {"conv_es": {"transformer", "enc_dc", "jas_m11", "ms12_aif"},
                "conv_tl": {"transformer", "concat_consec", "concat_rand"},
                "ablate": {"transformer", "enc_dc", "enc_dc_pad_left", "enc_dc_lr7e4", "ms12_aif", "enc_dc_local_zero",
                           "enc_dc_nodrop", "transformer_lr7e4", "ms12_aif_zero", "ms12"}}
    block = table.read_text().split("<!-- bench:converged -->")[1].split("<!-- /bench:converged -->")[0]
    for stage, configs in expected.items():
        summary = json.loads((out / stage / "summary.json").read_text())
        assert set(summary) == configs
        for c in configs:
            assert summary[c]["curve"]["points"] >= 1
        assert (out / stage / "curves.png").read_bytes()[:8] == PNG
        assert sum(1 for ln in block.splitlines() if ln.endswith(f"| {stage} |")) == len(configs)
    # the ablation stops every configuration at the same number of updates
    abl = json.loads((out / "ablate" / "summary.json").read_text())
    assert {r["curve"]["last_updates"] for r in abl.values()} == {4}
    # the ablate stage runs first; conv_es continues its configurations from there (jas_m11 from scratch)
    es_curve = [r for r in csv.DictReader(open(out / "conv_es" / "curves.csv")) if r["config"] == "transformer"]
    assert int(es_curve[0]["updates"]) == 2 and int(es_curve[-1]["updates"]) > 4
    assert "transformer: continuing" in (out / "conv_es" / "laneA.log").read_text()
    assert "jas_m11: not in" in (out / "conv_es" / "laneB.log").read_text()
    # conv_tl ends with Table 4.3: every converged checkpoint decodes the CONSEC-concatenated test set
    rows = (out / "conv_tl" / "concat_eval.tsv").read_text().splitlines()
    assert rows[0] == "config\tconcat_eval\tbleu"
    assert [r.split("\t")[:2] for r in rows[1:]] == [[c, "consec"] for c in ("transformer", "concat_consec", "concat_rand")]
    assert all(r.split("\t")[2] != "?" for r in rows[1:])


@pytest.mark.slow
def test_converged_recipe_variant_jobs_tiny(tmp_path):
    """DATA=tiny, STAGES="variants_lr7e4 variants_ms": the two equal-updates jobs of the Ampomah rows, each one command;
    the lr-7e-4 job's deltas are against its own baseline (transformer_lr7e4), the MS job pairs MS-1/MS-2 with
    MS-12+AIF in the pairs table."""
    table = tmp_path / "RESULTS.md"
    table.write_text("# r\n", encoding="utf-8")
    run(["bash", CONVERGED], timeout=2400, DATA="tiny", RUNS=tmp_path, THREADS="1", TABLE=str(table),
        STAGES="variants_lr7e4 variants_ms")
    out = tmp_path / "converged_tiny"
    expected = {"variants_lr7e4": {"transformer_lr7e4", "dec_dc_lr7e4", "full_dc_lr7e4", "jas_iter_cagg_lr7e4"},
                "variants_ms": {"transformer", "ms12_aif", "ms1", "ms2"}}
    text = table.read_text()
    block = text.split("<!-- bench:converged -->")[1].split("<!-- /bench:converged -->")[0]
    for stage, configs in expected.items():
        summary = json.loads((out / stage / "summary.json").read_text())
        assert set(summary) == configs
        assert {r["curve"]["last_updates"] for r in summary.values()} == {4}  # equal updates
        rows = [ln for ln in block.splitlines() if ln.endswith(f"| {stage} |")]
        assert len(rows) == len(configs)
    base = [ln for ln in block.splitlines() if ln.startswith("| transformer_lr7e4 |")]
    assert len(base) == 1 and "| – |" in base[0]  # the lr-7e-4 job's baseline row has no delta
    pairs = text.split("<!-- bench:pairs -->")[1].split("<!-- /bench:pairs -->")[0]
    assert {tuple(c.strip() for c in ln.strip("|").split("|")[:2]) for ln in pairs.splitlines()
            if ln.endswith("| variants_ms |")} == {("ms1", "ms12_aif"), ("ms2", "ms12_aif")}


def test_configuration_prepare_step_builds_the_arthur_lexicon_first(tiny_data, tmp_path):
    """luong_arthur (the Arthur et al. baseline of Nguyen ch. 5) names a lexicon made from the job's own training
    data: bench.py fills the placeholders and makes the file before training, once."""
    import torch
    from fairseq_ext.tools.evaluation import bench_configs as configs
    from fairseq_ext.tools.evaluation import interleaved as speed
    cfg = configs.resolve("luong_arthur", tmp_path / "run", tiny_data / "bin", "es", "en")
    assert cfg["train"][cfg["train"].index("--arthur-lexicon") + 1] == str(tmp_path / "run" / "arthur_lexicon.pt")
    assert cfg["prepare"][0][1][cfg["prepare"][0][1].index("--data") + 1] == str(tiny_data / "bin")
    assert configs.resolve("transformer", tmp_path, tiny_data, "es", "en")["train"] == configs.get("transformer")["train"]
    with pytest.raises(SystemExit, match="needs files made from its job's data"):
        speed.build("luong_arthur", tiny_data / "bin")
    out = tmp_path / "job"
    cmd = [sys.executable, BENCH, "--data", tiny_data, "--threads", "1", "--ref2", "", "--out", out, "--budget-min", "0",
           "--max-updates", "2", "--train-only", "--configs", "luong_arthur"]
    run(cmd, timeout=900)
    d = out / "luong_arthur"
    lex = d / "arthur_lexicon.pt"
    assert lex.exists() and "[arthur_lexicon]" in (d / "prepare.log").read_text()
    assert str(lex) in (d / "train.log").read_text()  # the flag fairseq-train was given
    import fairseq_ext  # noqa: F401  (allow-lists the globals of fairseq checkpoints for weights_only loading)
    state = torch.load(d / "checkpoint_best.pt", weights_only=True)
    assert "decoder.arthur.index" in state["model"]  # decoding reads the lexicon from the checkpoint
    n_test = sum(1 for _ in open(ROOT / "tests" / "data" / "bible_tiny" / "test.en"))
    assert json.loads((d / "result.json").read_text())["n_translated"] == n_test
    stamp = lex.stat().st_mtime_ns
    run([*cmd, "--force"], timeout=900)  # a rerun keeps the lexicon it made
    assert lex.stat().st_mtime_ns == stamp


def test_curve_lines_stay_distinct_past_ten_configurations():
    styles = [tuple(sorted(fairseq_log.line_style(i).items())) for i in range(40)]
    assert len(set(styles)) == 40  # the 11th configuration is not drawn like the 1st


def test_continue_from_seeds_a_run_with_the_newest_interval_checkpoint(tmp_path):
    """--continue-from JOB: a configuration not yet started copies the newest checkpoint_E_U.pt of the same
    configuration in JOB as checkpoint_last.pt (fairseq resumes from it), with the best checkpoint and the log;
    another data folder or --arch is refused; a configuration JOB lacks starts from scratch."""
    import argparse
    import torch
    b = bench_module()
    data_bin = tmp_path / "data" / "bin"
    data_bin.mkdir(parents=True)
    src = tmp_path / "ablate" / "transformer"
    src.mkdir(parents=True)

    def ckpt(path, updates, data=data_bin, arch="transformer"):
        torch.save({"cfg": {"task": {"data": str(data)}, "model": argparse.Namespace(arch=arch)},
                    "optimizer_history": [{"num_updates": updates}]}, path)

    ckpt(src / "checkpoint_3_250.pt", 250)
    ckpt(src / "checkpoint_13_1500.pt", 1500)
    ckpt(src / "checkpoint_best.pt", 1250)
    (src / "train.log").write_text(LOG, encoding="utf-8")
    cfg = b.bench_configs.get("transformer")
    d = tmp_path / "conv" / "transformer"
    d.mkdir(parents=True)
    b.continue_from(src, d, data_bin, cfg)
    last = torch.load(d / "checkpoint_last.pt", weights_only=True)
    assert last["optimizer_history"][-1]["num_updates"] == 1500
    assert torch.load(d / "checkpoint_best.pt", weights_only=True)["optimizer_history"][-1]["num_updates"] == 1250
    assert (d / "train.log").read_text() == LOG
    # another data folder, another architecture: refused, nothing copied
    for kw in ({"data": tmp_path / "other" / "bin"}, {"arch": "transformer_jas_m11_bench"}):
        ckpt(src / "checkpoint_15_1750.pt", 1750, **kw)
        fresh = tmp_path / "conv2" / str(len(kw))
        fresh.mkdir(parents=True, exist_ok=True)
        with pytest.raises(SystemExit, match="--continue-from: .*checkpoint_15_1750.pt was trained on"):
            b.continue_from(src, fresh, data_bin, cfg)
        assert not any(fresh.iterdir())
    # a configuration the other job lacks: from scratch
    fresh = tmp_path / "conv" / "jas_m11"
    fresh.mkdir()
    b.continue_from(tmp_path / "ablate" / "jas_m11", fresh, data_bin, b.bench_configs.get("jas_m11"))
    assert not any(fresh.iterdir())
    # only with the curve mode
    with pytest.raises(SystemExit):
        b.main(["--data", str(tmp_path / "data"), "--configs", "transformer",
                "--continue-from", str(tmp_path / "ablate")])


def test_device_flags_cpu_adds_cpu_and_cuda_drops_cpu_only_flags():
    bench = bench_module()
    flags = ["--arch", "transformer", "--cpu-bf16", "--math-attention", "--lr", "3e-3"]
    for precision in ("fp32", "amp", "fp16"):  # the CPU keeps the configuration's own flags
        assert bench.device_flags(flags, "cpu", precision) == flags + ["--cpu"]
    assert bench.device_flags(flags, "cuda") == ["--arch", "transformer", "--lr", "3e-3"]
    # half precision on a GPU: --amp trains (decoding stays float32), --fp16 trains and decodes
    assert bench.device_flags(flags, "cuda", "amp") == ["--arch", "transformer", "--lr", "3e-3", "--amp"]
    assert bench.device_flags(flags, "cuda", "amp", train=False) == ["--arch", "transformer", "--lr", "3e-3"]
    assert bench.device_flags(flags, "cuda", "fp16", train=False)[-1] == "--fp16"
    assert bench.cuda_precision("fp32") == "fp32" and bench.cuda_precision("fp16") == "fp16"
    args = bench.build_parser().parse_args(["--device", "cuda"])
    assert args.device == "cuda" and args.precision == "auto"
    assert bench.build_parser().parse_args([]).device == "cpu"

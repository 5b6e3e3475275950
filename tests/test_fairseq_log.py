"""fairseq_ext/tools/evaluation/fairseq_log.py: the one parser of fairseq-train / fairseq-generate logs, on real log lines
(a bench run of the es->en low set on this machine, fairseq 0.12 simple format) and the shared run helpers."""
import json
import sys

import pytest

from fairseq_ext.tools.evaluation import fairseq_log as fl
from fairseq_ext.tools.evaluation import runs

# real lines (runs/converged/variants/transformer/train.log, a resumed diagnostics run, a bench generate.out)
TRAIN_LOG = """\
2026-11-28 05:58:59 | INFO | fairseq_cli.train | num. shared model params: 6,554,624 (num. trained: 6,554,624)
2026-11-28 05:59:03 | INFO | fairseq.trainer | No existing checkpoint found runs/x/checkpoint_last.pt
2026-11-28 06:00:54 | INFO | train_inner | epoch 001:     25 / 119 loss=12.009, nll_loss=11.89, ppl=3794.23, wps=341.1, ups=0.22, wpb=1513.9, bsz=46.4, num_updates=25, lr=0.000250092, gnorm=2.744, clip=92, train_wall=111, wall=115
2026-11-28 06:03:17 | INFO | train_inner | epoch 001:     50 / 119 loss=9.586, nll_loss=9.187, ppl=583.04, wps=265.8, ups=0.18, wpb=1517.7, bsz=47.4, num_updates=50, lr=0.000500083, gnorm=0.765, clip=12, train_wall=142, wall=258
2026-11-28 06:06:24 | INFO | train_inner | epoch 001:     75 / 119 loss=9.082, nll_loss=8.535, ppl=370.96, wps=181.1, ups=0.13, wpb=1357.2, bsz=36.2, num_updates=75, lr=0.000750075, gnorm=0.694, clip=4, train_wall=187, wall=445
2026-11-28 06:12:01 | INFO | train | epoch 001 | loss 9.645 | nll_loss 9.202 | ppl 588.86 | wps 226.5 | ups 0.15 | wpb 1483.8 | bsz 42 | num_updates 119 | lr 0.00119006 | gnorm 1.139 | clip 25.2 | train_wall 777 | wall 782
2026-11-28 06:20:26 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.786 | nll_loss 7.027 | ppl 130.41 | bleu 0.82 | wps 225 | wpb 1253.5 | bsz 32.2 | num_updates 200
2026-11-28 06:48:13 | INFO | valid | epoch 004 | valid on 'valid' subset | loss 7.036 | nll_loss 6.133 | ppl 70.17 | bleu 2.87 | wps 785.4 | wpb 1253.5 | bsz 32.2 | num_updates 400 | best_bleu 2.87
2026-11-28 06:50:23 | INFO | fairseq_cli.train | Stopping training due to cumulative_training_time: 0.1669606610139211 > stop_time_hours: 0.16667 hour(s)
2026-11-28 06:50:32 | INFO | fairseq_cli.train | done training in 606.6 seconds
"""
GENERATE = ("Generate test with beam=5: BLEU4 = 0.53, 22.6/4.1/0.9/0.2 (BP=0.279, ratio=0.440, syslen=14859, "
            "reflen=33807)\n"
            "INFO:fairseq_cli.generate:Translated 1,494 sentences (30,982 tokens) in 107.7s (13.88 sentences/s, "
            "287.75 tokens/s)\n")


def test_records_read_every_kind_of_training_line():
    recs = list(fl.records(TRAIN_LOG))
    assert [r["kind"] for r in recs] == ["train_inner"] * 3 + ["train", "valid", "valid"]
    inner = recs[0]
    # the interval's "epoch 001:  25 / 119" prefix does not swallow its first cell (loss)
    assert inner["epoch"] == 1 and inner["stats"]["loss"] == 12.009 and inner["stats"]["num_updates"] == 25
    assert inner["stats"]["lr"] == 0.000250092 and inner["stats"]["train_wall"] == 111
    assert recs[3]["stats"]["train_wall"] == 777 and recs[3]["stats"]["wall"] == 782 and recs[3]["subset"] is None
    v = recs[5]
    assert (v["epoch"], v["subset"], v["stats"]["bleu"], v["stats"]["best_bleu"], v["stats"]["num_updates"]) == \
        (4, "valid", 2.87, 2.87, 400)
    assert v["time"] - recs[4]["time"] == 27 * 60 + 47
    # Python's default logging format (logging configured before fairseq_cli set its own)
    plain = ["INFO:train_inner:epoch 001:      2 / 5 loss=13.2, nll_loss=13.1, num_updates=2, lr=2.5e-07, wall=3",
             "INFO:valid:epoch 001 | valid on 'valid' subset | loss 12.9 | nll_loss 12.8 | num_updates 5"]
    assert [(r["kind"], r["epoch"], r["stats"]["num_updates"], r["time"]) for r in fl.records("\n".join(plain))] == \
        [("train_inner", 1, 2, None), ("valid", 1, 5, None)]
    assert fl.intervals(plain[0])[0]["lr"] == 2.5e-07
    # scientific notation, negative numbers (e.g. a reward)
    st = fl.stats("epoch 003 | valid on 'valid' subset | loss -1.5e-02 | reward -0.25 | lr 1e-05 | num_updates 7")
    assert st == {"epoch": 3.0, "loss": -0.015, "reward": -0.25, "lr": 1e-05, "num_updates": 7.0}


def test_validations_of_any_subset_and_training_intervals():
    """fairseq tags a validation line with its subset's name; a resumed run's interval restarts the update count."""
    other = ("2026-01-01 10:00:00 | INFO | valid_tl | epoch 001 | valid on 'valid_tl' subset | loss 6.5 | ppl 64 | "
             "wps 5000 | num_updates 700 | best_loss 6\n")
    v = fl.validations(TRAIN_LOG + other)
    assert [(x["subset"], x["epoch"], x["num_updates"]) for x in v] == [("valid", 2, 200), ("valid", 4, 400),
                                                                          ("valid_tl", 1, 700)]
    assert [i["updates"] for i in fl.intervals(TRAIN_LOG)] == [25, 25, 25]
    assert fl.intervals(TRAIN_LOG, "train")[0]["updates"] == 119
    resumed = TRAIN_LOG + TRAIN_LOG.splitlines()[3].replace("num_updates=50", "num_updates=10") + "\n"
    assert [i["updates"] for i in fl.intervals(resumed)] == [25, 25, 25, 10]


def test_parse_train_log_on_real_lines():
    t = fl.parse_train_log(TRAIN_LOG)
    assert t["params"] == 6554624 and t["updates"] == 400 and t["epochs"] == 1
    assert t["train_tokens_per_s"] == pytest.approx((265.8 + 181.1) / 2)  # the first interval skipped
    assert t["valid_loss"] == [7.786, 7.036] and t["valid_bleu"] == [0.82, 2.87]
    assert fl.train_losses(TRAIN_LOG) == [12.009, 9.586, 9.082]
    # a run too short for two intervals: the epoch summaries' wps
    short = "\n".join(ln for ln in TRAIN_LOG.splitlines() if "train_inner" not in ln)
    assert fl.parse_train_log(short)["train_tokens_per_s"] == 226.5
    assert fl.parse_train_log("") == {"params": None, "train_tokens_per_s": None, "updates": 0, "epochs": 0,
                                      "valid_loss": [], "valid_bleu": []}


def test_train_cost_sums_the_epoch_summaries():
    c = fl.train_cost(TRAIN_LOG)
    assert c == {"train_wall_s": 777.0, "wall_s": 782.0, "updates": 119, "s_per_update": round(777 / 119, 3),
                 "wall_s_per_update": round(782 / 119, 3)}
    assert fl.train_cost("no summaries\n") == {}


def test_curve_and_stop_reason_on_real_lines(tmp_path):
    rows = fl.parse_curve(TRAIN_LOG)
    assert [(r["updates"], r["epoch"], r["dev_bleu"], r["dev_nll_loss"]) for r in rows] == \
        [(200, 2, 0.82, 7.027), (400, 4, 2.87, 6.133)]
    # training wall-clock: the train_inner intervals' train_wall; elapsed: from "No existing checkpoint found"
    assert rows[0]["train_wall_s"] == 440.0 and rows[0]["wall_s"] == (6 * 3600 + 20 * 60 + 26) - (5 * 3600 + 59 * 60 + 3)
    assert fl.best_point(rows)["updates"] == 400
    assert fl.curve_points(rows)["best_dev_bleu"] == 2.87 and fl.curve_points(rows)["points"] == 2
    assert fl.stop_reason(TRAIN_LOG, 5, 0, 400) == "budget"
    fl.write_curves_csv(tmp_path / "curves.csv", {"a": rows, "b": rows[:1]})
    lines = (tmp_path / "curves.csv").read_text().splitlines()
    assert lines[0] == "config," + ",".join(fl.CURVE_FIELDS) and len(lines) == 4 and lines[3].startswith("b,200,2,")
    fl.write_curve_csv(tmp_path / "curve.csv", rows)
    assert (tmp_path / "curve.csv").read_text().splitlines()[0] == ",".join(fl.CURVE_FIELDS)


def test_parse_generate_log_on_a_real_summary():
    assert fl.parse_generate_log(GENERATE) == {"n_translated": 1494, "decode_s": 107.7, "decode_sent_per_s": 13.88,
                                               "decode_tokens_per_s": 287.75}
    assert fl.parse_generate_log("nothing") == {}


def test_run_helpers(tmp_path):
    data = tmp_path / "spm4000"
    data.mkdir()
    (tmp_path / "raw-train5000").mkdir()
    # segment.json written on another machine: its absolute raw path is not here, the sibling of that name is
    (data / "segment.json").write_text(json.dumps({"raw": "/elsewhere/raw-train5000", "post_process": "subword_nmt"}))
    assert runs.raw_folder(data) == tmp_path / "raw-train5000" and runs.post_process(data) == "subword_nmt"
    assert runs.post_process(tmp_path) == "sentencepiece" and runs.raw_folder(tmp_path) == tmp_path.parent / "raw"
    # a universal folder (fairseq-ext-data universal): no segment.json beside bin/, its raw text inside it
    uni = tmp_path / "it_16k_esfrru"
    (uni / "raw").mkdir(parents=True)
    assert runs.raw_folder(uni) == uni / "raw" and runs.post_process(uni) == "sentencepiece"
    assert runs.fmt(None) == "–" and runs.fmt(1.234) == "1.23" and runs.fmt(3, "d") == "3"
    assert runs.fmt(float("nan"), missing="—") == "—" and runs.fmt(12345, ",") == "12,345"
    log = tmp_path / "out.log"
    assert runs.run_logged([sys.executable, "-c", "print('hello')"], log, 1) >= 0 and log.read_text() == "hello\n"
    with pytest.raises(SystemExit, match=r"error: command failed \(3\); see .*\nboom"):
        runs.run_logged([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], log, 1)


def test_bench_job_note_names_the_cpu_model_and_its_isa():
    """A job's note says which CPU measured it (model name and matrix ISA: AMX / AVX512-BF16 / AVX2), not the bare
    architecture ``x86_64``, since the machine changes between sessions and bf16 speed depends on it."""
    import argparse
    from fairseq_ext.tools.common import cpu_name
    from fairseq_ext.tools.evaluation.bench_runs import machine_text
    text = machine_text(argparse.Namespace(device="cpu", precision="fp32"))
    assert text == cpu_name()
    if open("/proc/cpuinfo").read().count("model name"):
        assert text not in ("x86_64", "")


def test_reused_result_of_a_moved_job_folder_finds_its_files(tmp_path):
    """A job folder moved or gathered from another machine (gpu_batch.sh's $OUT) keeps its result.json, whose
    ``hyp_file`` names the old place: the reuse points it at the file of that name in the configuration's folder."""
    from fairseq_ext.tools.evaluation.bench_runs import relocated
    d = tmp_path / "new_job" / "cfg"
    d.mkdir(parents=True)
    (d / "generate.out").write_text("H-0\t-0.1\tx\n")
    r = relocated({"hyp_file": "runs/old_job/cfg/generate.out", "name": "cfg", "bleu": 1.0}, d)
    assert r["hyp_file"] == str(d / "generate.out") and r["name"] == "cfg"
    kept = relocated({"hyp_file": str(d / "generate.out")}, tmp_path)  # an existing path is kept
    assert kept["hyp_file"] == str(d / "generate.out")
    gone = relocated({"hyp_file": "runs/old_job/cfg/other.out"}, d)  # no such file here either: unchanged
    assert gone["hyp_file"] == "runs/old_job/cfg/other.out"

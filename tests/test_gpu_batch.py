"""recipes/bench/gpu_batch.sh: configurations trained concurrently to convergence under a wall-clock cap, then
decoded, scored and compared by recipes/bench/bench.py, the results gathered in OUT (five files)."""
import csv
import json
import re
import shutil
import tarfile

import pytest

from fairseq_ext.tools.evaluation.fairseq_log import timestamp
from fairseq_ext.tools.evaluation import bench_configs as configs
from harness import ROOT, USER_DIR, run

SCRIPT = ROOT / "recipes" / "bench" / "gpu_batch.sh"
SETS = ("ampomah", "twt66", "nguyen4", "twt_lr", "luong", "ms", "doc1", "bimsmt1", "gu5")
# the baseline of each set (first in its list)
BASELINES = {"twt66": "twt66_postnorm_xavier", "nguyen4": "twt_concat_none", "twt_lr": "twt_lr_invsqrt",
             "luong": "luong_tied", "ms": "ms12_aif", "doc1": "transformer", "bimsmt1": "maruf5_base",
             "gu5": "gu5_multi"}


def dry_run(**env):
    """The configurations and lane commands the script would run (no data needed)."""
    p = run(["bash", SCRIPT], DRY_RUN="1", **env)
    return [re.search(r"--configs (\S+)$", ln).group(1) for ln in p.stdout.splitlines() if "--train-only" in ln]


@pytest.mark.parametrize("name", SETS)
def test_every_set_names_configurations_that_fairseq_accepts(name):
    """Each set's list exists in bench_configs (baseline first) and fairseq-train's parser takes every configuration's
    flags (architecture, task, criterion and optimiser options), so no lane of a GPU job dies on a typo."""
    import fairseq_ext  # noqa: F401
    from fairseq import options

    names = dry_run(SET=name)
    assert names and all(n in configs.CONFIGS for n in names), names
    if name == "ampomah":
        assert {"ms1", "ms2", "jas_m00", "jas_iter_cagg", "dec_dc_lr7e4", "full_dc_lr7e4", "jas_sagg_sumln",
                "jas_iter_sagg_sumln", "jas_iter_cagg_lr7e4"} <= set(names)
    for n in names:
        cfg = configs.get(n)
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, ["/nonexistent/bin", "--user-dir", str(USER_DIR), "--task",
                                                    cfg["task"], *cfg["train"], "--cpu"])
        assert args.arch == cfg["train"][cfg["train"].index("--arch") + 1]
    if name in BASELINES:
        assert names[0] == BASELINES[name]
    if name == "twt_lr":  # Table 6.4: INVSQRTDECAY, VALDECAY, NOWARMUP, the two decays at 2xLR
        assert len(names) == 5


def test_luong_set_runs_equal_updates_without_patience():
    """The Luong LSTMs sit on their init's plateau for ~2,000 updates: the set trains every lane to the thesis's 50
    epochs (6,000 updates) with no patience rule; MAX_UPDATES= (empty) lifts the limit."""
    p = run(["bash", SCRIPT], DRY_RUN="1", SET="luong")
    lanes = [ln for ln in p.stdout.splitlines() if "--train-only" in ln]
    assert len(lanes) == 5 and all("--max-updates 6000" in ln and "--patience 0" in ln
                                   and "--curve-every 500" in ln for ln in lanes)
    p = run(["bash", SCRIPT], DRY_RUN="1", SET="luong", MAX_UPDATES="")
    assert "--max-updates" not in p.stdout
    assert "--max-updates" not in run(["bash", SCRIPT], DRY_RUN="1", SET="twt66").stdout


def test_stage1_sets_of_the_converged_recipes():
    """doc1 trains the stage-1 models the converged stage-2 recipes wait for (on converged_doc.sh's folder, lib.sh
    doc_set); bimsmt1 and gu5 take their folders' languages from the set (the conversation folder has no
    segment.json) and bimsmt1 validates once an epoch."""
    assert dry_run(SET="doc1") == ["transformer", "rnnsearch", "rnnsearch_uni"]
    out = run(["bash", SCRIPT], DRY_RUN="1", SET="doc1").stdout
    assert "--data $(doc_set)" in out and "--patience 5" in out
    out = run(["bash", SCRIPT], DRY_RUN="1", SET="bimsmt1").stdout
    assert "--data data/bible_conv_es_en --src src --tgt tgt" in out and "--curve-every 110" in out
    out = run(["bash", SCRIPT], DRY_RUN="1", SET="gu5").stdout
    assert "--data data/bible_universal/it_16k_esfrru --src src --tgt en" in out


def test_a_folder_needs_segment_json_in_it_or_in_bin_or_the_languages(tmp_path):
    """A prepared folder has bin/ and segment.json beside it or inside bin/ (a universal folder's); without either the
    languages must be given; otherwise one error line before any lane starts."""
    data = tmp_path / "d"
    (data / "bin").mkdir(parents=True)
    env = dict(CONFIGS="transformer", DATA=str(data), DEVICE="cpu", CAP_MIN="0.01", HARD_MIN="0.01",
               JOB=str(tmp_path / "job"))
    p = run(["bash", SCRIPT], check=False, **env)
    assert p.returncode == 2 and "not a prepared folder" in p.stderr and not (tmp_path / "job").exists()
    (data / "bin" / "segment.json").write_text(json.dumps({"src": "es", "tgt": "en"}))
    p = run(["bash", SCRIPT], check=False, **env)
    assert "not a prepared folder" not in p.stderr and (tmp_path / "job" / "lanes").is_dir()


def test_unknown_configuration_and_set_are_one_line_errors():
    p = run(["bash", SCRIPT], check=False, DRY_RUN="1", CONFIGS="transformer,bogus_cfg")
    assert p.returncode != 0
    assert "error: fairseq_ext/tools/evaluation/bench_configs.py has no configuration bogus_cfg" in p.stderr
    assert "Traceback" not in p.stderr
    p = run(["bash", SCRIPT], check=False, DRY_RUN="1", SET="nope")
    assert p.returncode == 2 and "error: unknown SET 'nope'" in p.stderr
    # the baseline is added when the list lacks it
    assert dry_run(CONFIGS="ms1", BASELINE="transformer") == ["transformer", "ms1"]


def tiny_data(tiny_bin, tmp_path):
    """A prepared folder (bin/ + segment.json) over the tiny slice."""
    data = tmp_path / "spm300"
    data.mkdir()
    (data / "bin").symlink_to(tiny_bin)
    shutil.copy(tiny_bin / "segment.json", data / "segment.json")
    return data


@pytest.mark.slow
def test_cpu_batch_on_the_tiny_slice(tiny_bin, tmp_path):
    """Two configurations at once on the CPU, a 1-minute cap, dev BLEU every 2 updates with patience 2: every
    configuration's result and the job's curves come back in OUT."""
    data = tiny_data(tiny_bin, tmp_path)
    out, job = tmp_path / "out", tmp_path / "job"
    p = run(["bash", SCRIPT], timeout=900, DEVICE="cpu", DATA=data, CONFIGS="transformer,ms1", CAP_MIN="1",
            HARD_MIN="8", PATIENCE="2", CURVE_EVERY="2", N_BOOTSTRAP="20", JOB=job, OUT=out)
    assert sorted(f.name for f in out.iterdir()) == ["compare.log", "curves.csv", "curves.png", "result.json",
                                                     "runs.tar.gz"]
    res = json.loads((out / "result.json").read_text())
    assert set(res) == {"transformer", "ms1"}
    for name, r in res.items():
        assert r["device"] == "cpu" and r["n_translated"] == 36 and r["curve"]["points"] >= 1
        assert r["curve"]["stopped"] in ("patience", "budget") and r["curve"]["patience"] == 2
    assert res["ms1"]["significance"]["bleu_p"] is not None  # paired bootstrap against the job's baseline
    with open(out / "curves.csv", newline="") as f:
        assert {r["config"] for r in csv.DictReader(f)} == {"transformer", "ms1"}
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    with tarfile.open(out / "runs.tar.gz") as t:
        members = set(t.getnames())
    for name in ("transformer", "ms1"):
        assert {f"{name}/result.json", f"{name}/curve.csv", f"{name}/train.log", f"{name}/generate.out",
                f"lanes/{name}.log"} <= members
    assert "| ms1 |" in (out / "compare.log").read_text() and "| ms1 |" in p.stdout
    # the two lanes trained at the same time: each one's training began before the other's ended
    spans = {}
    for n in ("transformer", "ms1"):
        times = [t for t in map(timestamp, (job / n / "train.log").read_text().splitlines()) if t is not None]
        spans[n] = (times[0], times[-1])
    assert spans["ms1"][0] <= spans["transformer"][1] and spans["transformer"][0] <= spans["ms1"][1]


@pytest.mark.slow
def test_cpu_batch_equal_updates_on_the_tiny_slice(tiny_bin, tmp_path):
    """SET=luong's rule (equal updates, no patience) with two of its configurations: both lanes stop at
    MAX_UPDATES, and the comparison is against the set's baseline (tied)."""
    data = tiny_data(tiny_bin, tmp_path)
    out = tmp_path / "out"
    run(["bash", SCRIPT], timeout=900, SET="luong", CONFIGS="luong_untied", DEVICE="cpu", DATA=data, CAP_MIN="10",
        HARD_MIN="14", MAX_UPDATES="4", CURVE_EVERY="2", N_BOOTSTRAP="20", JOB=tmp_path / "job", OUT=out)
    res = json.loads((out / "result.json").read_text())
    assert set(res) == {"luong_tied", "luong_untied"}
    for r in res.values():
        assert r["curve"]["stopped"] == "max-updates" and r["curve"]["patience"] == 0 and r["curve"]["points"] >= 2
    assert res["luong_untied"]["significance"]["bleu_p"] is not None


def test_bench_args_reach_every_lane_for_a_warm_started_set():
    """BENCH_ARGS passes bench.py options to every lane (and the comparison): a stage-2 set warm-starts from a stage-1
    checkpoint with --finetune-from-model; without it the lanes carry no such option."""
    p = run(["bash", SCRIPT], DRY_RUN="1", SET="doc1", CONFIGS="maruf_sentence,maruf_hatt_enc_off",
            BASELINE="maruf_sentence", BENCH_ARGS="--finetune-from-model runs/converged/doc1/transformer/checkpoint_best.pt")
    lanes = [ln for ln in p.stdout.splitlines() if "--train-only" in ln]
    assert len(lanes) == 2
    assert all("--finetune-from-model runs/converged/doc1/transformer/checkpoint_best.pt" in ln for ln in lanes)
    assert "--finetune-from-model" not in run(["bash", SCRIPT], DRY_RUN="1", SET="doc1").stdout

"""The quickstart's system (bench_configs ``quickstart``, recipes/quickstart.sh) and its AVX2 run
(recipes/bench/quickstart_avx2.sh): the flags parse, train on the tiny slice, and an AVX2 emulation trains float32."""
import json
import os
import shlex
import shutil
import subprocess
import sys

from harness import ROOT, fairseq, run

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def flags(name, env=None):
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.evaluation.bench_configs", name],
                       capture_output=True, text=True, env=dict(os.environ, **(env or {})), check=True)
    return shlex.split(p.stdout)


def test_quickstart_is_the_baseline_recipe_at_d128():
    base, quick = flags("transformer"), flags("quickstart")
    assert quick[:4] == ["--task", "translation_ext", "--arch", "transformer_cpu_small"]
    # every optimiser / batch / bf16 flag is the baseline's; only the shape differs
    arch_end = base.index("--dropout") + 2
    assert quick[4:] == base[arch_end:]
    assert base[base.index("--encoder-embed-dim") + 1] == "256"  # the baseline itself is unchanged


def test_avx2_emulation_trains_float32():
    """torch told to use AVX2 kernels (an AVX2-only CPU, emulated) gets no --cpu-bf16: bf16 is emulated there."""
    for name in ("quickstart", "transformer"):
        assert "--cpu-bf16" not in flags(name, AVX2)
        assert "--math-attention" not in flags(name, AVX2)


def test_quickstart_config_trains_two_updates(tiny_bin, tmp_path):
    train = flags("quickstart", AVX2)
    fairseq("train", tiny_bin, *train, "--cpu", "--max-update", "2", "--max-tokens", "1000", "--save-dir", tmp_path,
            "--no-epoch-checkpoints", "--no-progress-bar", "--log-format", "simple", "--log-interval", "1",
            OMP_NUM_THREADS="1", **AVX2)
    assert (tmp_path / "checkpoint_last.pt").exists()


def test_quickstart_scripts_parse_and_emulate_every_float32_kernel_library():
    for script in ("recipes/quickstart.sh", "recipes/bench/quickstart_avx2.sh"):
        subprocess.run(["bash", "-n", ROOT / script], check=True)
    text = (ROOT / "recipes/bench/quickstart_avx2.sh").read_text()
    # MKL runs the float32 GEMMs: without MKL_ENABLE_INSTRUCTIONS they stay AVX-512 under the other two
    for var, value in AVX2.items():
        assert f"{var}={value}" in text


def test_bench_runs_the_quickstart_alone(tiny_bin, tmp_path):
    """recipes/quickstart.sh makes its configuration the job's baseline: bench.py trains, decodes and scores it and
    no second system (bench.py adds the baseline ``transformer`` to a job that lacks it: twice the time)."""
    data = tmp_path / "spm300"
    data.mkdir()
    (data / "bin").symlink_to(tiny_bin)
    shutil.copy(tiny_bin / "segment.json", data / "segment.json")
    out = tmp_path / "job"
    run([sys.executable, ROOT / "recipes/bench/bench.py", "--data", data, "--configs", "quickstart", "--baseline",
         "quickstart", "--budget-min", "0", "--max-updates", "2", "--threads", "1", "--ref2", "", "--out", out],
        timeout=900, **AVX2)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["quickstart"]
    res = json.loads((out / "quickstart" / "result.json").read_text())
    assert res["updates"] == 2 and res["bleu"] is not None
    assert '--configs "$CONFIG" --baseline "$CONFIG"' in (ROOT / "recipes/quickstart.sh").read_text()

"""Start-up of the command lines: light tools load neither torch nor fairseq, and a run is not noisy.

* ``fairseq-ext-tm/-score/-data/-export/-translate --help`` and the import of a light tool module load neither torch nor
  fairseq (the plugin registers itself only once one of them is imported);
* ``import fairseq_ext`` followed by fairseq or torch (in either order), or the import of any registered or
  shared layer first, registers everything and applies the compat fixes (safe globals for ``torch.load``);
* a tiny ``fairseq-train --user-dir`` run, and the ``fairseq-ext-train`` wrapper, print no Hydra deprecation
  warnings ("strict flag", "version_base", "ConfigStore schema") and no "Please install tensorboardX" on stderr
  (the wrapper on stdout neither), while a warning of the user's own code still shows.
"""
import sys

import pytest

from harness import BIN, TINY_TRANSFORMER, run

LOADED = "import sys; print('LOADED', sorted(m for m in ('torch', 'fairseq') if m in sys.modules), file=sys.stderr)"
NOISE = ("strict flag", "version_base", "ConfigStore schema", "tensorboardX")


def loaded(stderr: str) -> str:
    return [ln for ln in stderr.splitlines() if ln.startswith("LOADED")][-1]


@pytest.mark.parametrize("module,script", [
    ("tm.retrieval", "fairseq-ext-tm"), ("evaluation.score", "fairseq-ext-score"), ("corpora.corpora", "fairseq-ext-data"),
    ("export.export", "fairseq-ext-export"), ("export.translate", "fairseq-ext-translate")])
def test_help_of_a_light_tool_loads_neither_torch_nor_fairseq(module, script):
    code = (f"import sys\nfrom fairseq_ext.tools.{module} import cli_main\n"
            f"try:\n    cli_main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n" + LOADED)
    p = run([sys.executable, "-c", code])
    assert "usage:" in p.stdout
    assert loaded(p.stderr) == "LOADED []", p.stderr[-2000:]
    p = run([BIN / script, "--help"])  # the console script itself
    assert "usage:" in p.stdout and not p.stderr


@pytest.mark.parametrize("first", [
    "import fairseq_ext; import fairseq",
    "import fairseq_ext; import torch",
    "import fairseq; import fairseq_ext",
    "import fairseq_ext.models",
    "from fairseq_ext.data.binarized import load_tokens",
    "from fairseq_ext import _compat",
])
def test_any_first_use_registers_the_plugin(first):
    code = (f"{first}\nimport argparse, torch\nfrom fairseq.criterions import CRITERION_REGISTRY\n"
            "from fairseq.models import ARCH_MODEL_REGISTRY\nfrom fairseq.tasks import TASK_REGISTRY\n"
            "print('translation_ext' in TASK_REGISTRY, 'twt_prenorm_fixnorm_scalenorm' in ARCH_MODEL_REGISTRY,\n"
            "      'masked_label_smoothed_cross_entropy' in CRITERION_REGISTRY,\n"
            "      argparse.Namespace in torch.serialization.get_safe_globals())")
    p = run([sys.executable, "-c", code])
    assert p.stdout.split() == ["True"] * 4, p.stdout + p.stderr[-2000:]


def test_a_user_warning_still_shows():
    code = "import fairseq_ext, warnings\nwarnings.warn('data/x.es:3: an empty segment')"
    p = run([sys.executable, "-c", code], PYTHONWARNINGS="")
    assert "data/x.es:3: an empty segment" in p.stderr


@pytest.mark.parametrize("tool", ["fairseq-train", "fairseq-ext-train"])
def test_training_prints_no_hydra_deprecation_nor_tensorboardx(tiny_bin, tmp_path, tool):
    """As a user runs it (PYTHONWARNINGS unset): stderr holds none of the noise; fairseq-ext-train's stdout
    neither (fairseq-train's own import prints the tensorboardX line on stdout before any plugin code runs)."""
    p = run([BIN / tool, tiny_bin, "--user-dir", "fairseq_ext", "--task", "translation_ext", *TINY_TRANSFORMER,
             "--criterion", "cross_entropy", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
             "--max-update", "2", "--save-dir", tmp_path, "--cpu", "--no-progress-bar", "--log-format", "simple",
             "--no-save", "--disable-validation"], PYTHONWARNINGS="")
    found = [w for w in NOISE if w in p.stderr or (tool == "fairseq-ext-train" and w in p.stdout)]
    assert not found, p.stderr[-3000:]
    assert "DEBUG" not in p.stderr  # the wrapper sets fairseq's logging up before fairseq configures its own
    assert "| INFO | fairseq_cli.train | done training" in p.stdout + p.stderr


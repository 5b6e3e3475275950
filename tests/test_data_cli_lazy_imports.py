"""``fairseq-ext-data``'s subcommands that import their module only when run (sword, multi, universal, tiny) reach
it: a bad argument ends in the module's own one-line error (exit 2), not in an ImportError traceback."""
import os
import subprocess
import sys

import pytest

from harness import ROOT

MULTI_TINY = os.path.join("tests", "data", "bible_multi_tiny", "multi.tsv")
CASES = {
    # subcommand argv -> the module's own error message
    "multi": (["multi", "--pairs", "en_web-xx"], "unknown language code 'xx'"),
    "universal": (["universal", "--multi", MULTI_TINY, "--aux", "es", "--lowres", "xx", "--target", "en_web"],
                  "unknown language code 'xx' in --lowres"),
    "tiny": (["tiny", "--raw", "no/such/folder"], "no/such/folder"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lazily_imported_subcommand_reports_its_own_error(name, tmp_path):
    argv, message = CASES[name]
    out = ["--out", str(tmp_path / "out")]
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.corpora.corpora"] + argv + out, cwd=ROOT,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=120)
    assert "ImportError" not in p.stderr, p.stderr[-2000:]
    assert p.returncode == 2 and message in p.stderr, (p.returncode, p.stderr[-2000:])

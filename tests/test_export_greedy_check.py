"""``python -m fairseq_ext.tools.export.greedy_check``: an exported TwT (Nguyen ch. 6, ScaleNorm + FixNorm, with
random norm gains and output bias so that a wrong fold changes the scores) decodes greedily as fairseq on every
test sentence (CTranslate2 float32) and scores every reference token to 1e-4; the int8 export is reported beside
it; a missing or mismatched model folder is one error line."""
import json
import subprocess
import sys

import pytest

from harness import ROOT
from test_export_twt import preset_checkpoint, twt_trained  # noqa: F401  (the module fixture)

import ctranslate2  # noqa: E402,F401,I001  (the dev extra)

ARCH = "transformer_twt_prenorm_fixnorm_scalenorm"


@pytest.fixture(scope="module")
def exported(tiny_bin, twt_trained, tmp_path_factory):  # noqa: F811
    from fairseq_ext.tools.export.export import main as export_main

    d = tmp_path_factory.mktemp("greedy_check")
    ckpt = preset_checkpoint(twt_trained, ARCH, d / f"{ARCH}.pt")
    for q in ("float32", "int8"):
        assert export_main([str(ckpt), "--out", str(d / q), "--data", str(tiny_bin), "--quantization", q]) == 0
    return ckpt, d


def test_exported_twt_decodes_as_fairseq(tiny_bin, exported, capsys):
    from fairseq_ext.tools.export.greedy_check import main

    ckpt, d = exported
    out = d / "greedy.json"
    assert main([str(ckpt), str(tiny_bin), "--ct2", str(d / "float32"), str(d / "int8"), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == res
    n = sum(1 for _ in open(tiny_bin / "test.ids"))
    assert res["sentences"] == n > 0 and res["subset"] == "test"
    fp32, int8 = res["models"][str(d / "float32")], res["models"][str(d / "int8")]
    assert fp32["quantization"] == "float32" and int8["quantization"] == "int8"
    assert fp32["greedy_identical"] == n, fp32
    assert fp32["max_abs_logprob_diff"] < 1e-4, fp32
    assert 0 <= int8["greedy_identical"] <= n and int8["max_abs_logprob_diff"] > fp32["max_abs_logprob_diff"]
    assert main([str(ckpt), str(tiny_bin), "--ct2", str(d / "float32"), "--limit", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 3


def test_bad_model_folder_is_one_error_line(tiny_bin, exported, tmp_path):
    ckpt, d = exported
    (tmp_path / "empty").mkdir()
    cases = [(tmp_path / "nowhere", "missing CTranslate2 model folder"),
             (tmp_path / "empty", "not a folder written by fairseq-ext-export")]
    for folder, message in cases:
        p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.export.greedy_check", str(ckpt), str(tiny_bin),
                            "--ct2", str(folder)], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 2 and p.stdout == "", p.stderr
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0] and str(folder) in lines[0]


def test_missing_inputs_and_vocabulary_of_other_data_are_refused(tiny_bin, exported, tmp_path):
    from fairseq_ext.tools.common import ToolError
    from fairseq_ext.tools.export.greedy_check import check_export_folder

    ckpt, d = exported
    from fairseq_ext.tools.export.greedy_check import main

    with pytest.raises(ToolError, match="checkpoint not found: .*nope.pt"):
        main([str(tmp_path / "nope.pt"), str(tiny_bin), "--ct2", str(d / "float32")])
    with pytest.raises(ToolError, match="missing data folder"):
        main([str(ckpt), str(tmp_path / "nobin"), "--ct2", str(d / "float32")])
    with pytest.raises(ToolError, match="target vocabulary of .* tokens, but the data's target dictionary has 7"):
        check_export_folder(str(d / "float32"), 7)

"""``recipes/bench/decode_speed.py --per-batch``: the systems loaded once in one process, every batch decoded by
every system in turn (fairseq_ext.tools.evaluation.interleaved.time_batches), on the tiny slice."""
import json
import sys

from harness import ROOT, USER_DIR, run

DECODE_SPEED = ROOT / "recipes" / "bench" / "decode_speed.py"


def test_per_batch_same_checkpoint_twice(tiny_bin, nmt_ckpt, tmp_path):
    common = f"{tiny_bin} --user-dir {USER_DIR} --task translation_decoding --path {nmt_ckpt} --cpu --max-len-b 20"
    out = tmp_path / "decode.json"
    p = run([sys.executable, DECODE_SPEED, "--per-batch", "--rounds", "3", "--out", out,
             "--system", f"a={common} --batch-size 4", "--system", f"b={common} --batch-size 4"])
    res = json.loads(out.read_text())
    assert list(res["summary"]) == ["a", "b"] and res["per_batch"]
    a, b = res["summary"]["a"], res["summary"]["b"]
    assert a["ratio_median"] == 1.0
    assert 0.5 < b["ratio_median"] < 2.0  # the same model: about 1 (a loaded machine allows some spread)
    assert [r["tokens"] for r in res["runs"]["a"]] == [r["tokens"] for r in res["runs"]["b"]]  # greedy, identical
    assert b["sentences"] == a["sentences"] == len((tiny_bin / "test.ids").read_text().splitlines())
    assert len(res["runs"]["b"]) == 3 and "| b |" in p.stdout
    # --batches times only those; systems with different batches are refused
    p = run([sys.executable, DECODE_SPEED, "--per-batch", "--rounds", "1", "--batches", "0,1", "--out", out,
             "--system", f"a={common} --batch-size 4", "--system", f"b={common} --batch-size 4"])
    assert json.loads(out.read_text())["summary"]["a"]["sentences"] == 8
    p = run([sys.executable, DECODE_SPEED, "--per-batch", "--rounds", "1", "--system", f"a={common} --batch-size 4",
             "--system", f"b={common} --batch-size 3"], check=False)
    assert p.returncode != 0 and "different numbers of sentences" in p.stderr and "Traceback" not in p.stderr


def test_help():
    p = run([sys.executable, DECODE_SPEED, "--help"])
    assert "--per-batch" in p.stdout and "--batches" in p.stdout

"""recipes/bench/speed.py: interleaved training-cost ratios of bench configurations."""
import json
import sys

from harness import ROOT, run

SPEED = ROOT / "recipes" / "bench" / "speed.py"


def test_speed_ratios_and_table(tiny_bin, tmp_path):
    table = tmp_path / "RESULTS.md"
    table.write_text("# bench\n\nintro\n", encoding="utf-8")
    out = tmp_path / "jobA"
    args = [sys.executable, SPEED, "--data", tiny_bin, "--configs", "twt_scalenorm_fixnorm",
            "--rounds", "2", "--steps", "1", "--warmup", "1", "--max-tokens", "300",
            "--out", out, "--table", table]
    run(args)
    res = json.loads((out / "speed.json").read_text())
    # the baseline is added first and is its own reference in every round
    assert list(res["configs"]) == ["transformer", "twt_scalenorm_fixnorm"]
    assert res["configs"]["transformer"]["ratios"] == [1.0, 1.0]
    twt = res["configs"]["twt_scalenorm_fixnorm"]
    assert len(twt["seconds"]) == 2 and all(s > 0 for s in twt["seconds"])
    # same dims: ScaleNorm's one scalar per norm replaces LayerNorm's 2d parameters
    assert 0 < res["configs"]["transformer"]["params"] - twt["params"] < 0.01 * twt["params"]
    text = table.read_text()
    assert text.startswith("# bench\n\nintro\n") and "<!-- speed:table -->" in text
    assert text.count("| jobA |") == 2
    run(args)  # a re-run of the same job replaces its rows instead of adding more
    assert table.read_text().count("| jobA |") == 2


def test_speed_refuses_other_tasks(tiny_bin, tmp_path):
    p = run([sys.executable, SPEED, "--data", tiny_bin, "--configs", "concat_rand", "--rounds", "1",
             "--steps", "1", "--out", tmp_path / "j"], check=False)
    assert p.returncode != 0 and "concat_rand" in p.stderr and "plain translation" in p.stderr

"""recipes/bench/bench.py --pair (:mod:`fairseq_ext.tools.evaluation.bench_pairs`): a second, one-change reference
inside a job (MS-1 against MS-12+AIF), measured by the same paired bootstrap and merged into RESULTS.md's pairs
block, never copied by hand."""
import sys

import pytest

from fairseq_ext.tools.evaluation import bench_pairs
from harness import ROOT, run


def test_parse_pairs_reads_base_and_configurations_and_refuses_bad_specs():
    assert bench_pairs.parse_pairs(["ms12_aif=ms1,ms2", "transformer_lr7e4=dec_dc_lr7e4"]) == [
        ("ms12_aif", ["ms1", "ms2"]), ("transformer_lr7e4", ["dec_dc_lr7e4"])]
    for bad in ("ms12_aif", "ms12_aif=", "=ms1", "ms1=ms1"):
        with pytest.raises(ValueError, match="BASE=CFG"):
            bench_pairs.parse_pairs([bad])
    with pytest.raises(KeyError, match="unknown configuration 'nope'"):
        bench_pairs.parse_pairs(["ms12_aif=nope"])


def test_bench_refuses_a_malformed_pair_before_training(tmp_path):
    p = run([sys.executable, ROOT / "recipes" / "bench" / "bench.py", "--data", tmp_path, "--pair", "ms1"],
            check=False)
    assert p.returncode == 2 and "--pair 'ms1'" in p.stderr
    p = run([sys.executable, ROOT / "recipes" / "bench" / "bench.py", "--data", tmp_path, "--pair", "ms1=nope"],
            check=False)
    assert p.returncode == 2 and "unknown configuration 'nope'" in p.stderr and "Traceback" not in p.stderr


def test_pair_rows_are_the_paired_bootstrap_of_the_job_outputs(tmp_path):
    ref = tmp_path / "test.en"
    ref.write_text("the cat sat on the mat\na dog ran home today\nwe saw the big red house\n")
    (tmp_path / "a.txt").write_text("the cat sat on the mat\na dog ran home today\nwe saw the big red house\n")
    (tmp_path / "b.txt").write_text("the cat sat on a mat\na dog ran\nwe saw a house\n")
    results = {"ms12_aif": {"hyp_file": tmp_path / "a.txt"}, "ms1": {"hyp_file": tmp_path / "b.txt"}}
    rows = bench_pairs.pair_rows(results, [("ms12_aif", ["ms1"])], ref, 50, "variants")
    cells = [c.strip() for c in rows[("ms1", "ms12_aif")].strip("|").split("|")]
    assert cells[:2] == ["ms1", "ms12_aif"] and cells[-1] == "variants"
    assert float(cells[3]) == 100.0 and float(cells[2]) < 100.0
    assert cells[4].startswith(f"{float(cells[2]) - 100.0:+.2f} (p=") and cells[5].startswith("-")


def test_merge_pairs_follows_the_converged_table_and_replaces_only_its_own_rows(tmp_path):
    path = tmp_path / "R.md"
    path.write_text("# r\n\n<!-- bench:converged -->\n| x |\n<!-- /bench:converged -->\n\n## Later\n")
    bench_pairs.merge_pairs(path, {("ms1", "ms12_aif"): "| ms1 | ms12_aif | 1 | 2 | -1.00 (p=0.1) | x | job1 |"})
    bench_pairs.merge_pairs(path, {("ms1", "ms12_aif"): "| ms1 | ms12_aif | 3 | 2 | +1.00 (p=0.1) | x | job2 |",
                                   ("ms2", "ms12_aif"): "| ms2 | ms12_aif | 1 | 2 | -1.00 (p=0.1) | x | job2 |"})
    bench_pairs.merge_pairs(path, {("ms1", "ms12_aif"): "| ms1 | ms12_aif | 4 | 2 | +2.00 (p=0.1) | x | job2 |"})
    text = path.read_text()
    assert text.index("<!-- /bench:converged -->") < text.index(bench_pairs.TITLE) < text.index("## Later")
    block = text.split(bench_pairs.START)[1].split(bench_pairs.END)[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("| ") and not ln.startswith("| config")]
    assert rows == ["| ms1 | ms12_aif | 1 | 2 | -1.00 (p=0.1) | x | job1 |",
                    "| ms1 | ms12_aif | 4 | 2 | +2.00 (p=0.1) | x | job2 |",
                    "| ms2 | ms12_aif | 1 | 2 | -1.00 (p=0.1) | x | job2 |"]
    assert text.count(bench_pairs.TITLE) == 1 and f"{bench_pairs.END}\n\n## Later" in text

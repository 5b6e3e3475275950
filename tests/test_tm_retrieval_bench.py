"""``recipes/bench/tm_retrieval.py``: the retrieval tool of old revisions (wherever it lived then: the flat
``tools/retrieval.py`` with tantivy only, ``tools/tm/retrieval.py`` with the numpy engine in its siblings)
timed against the working tree's, interleaved in one process, on the tiny Bible slice (memory: train,
queries: the first lines of test)."""
import json
import sys

from harness import ROOT, TINY, run, write_lines

BENCH = ROOT / "recipes" / "bench" / "tm_retrieval.py"
FLAT = "b7e6130"          # fairseq_ext/tools/retrieval.py, tantivy only
PACKAGED = "2102380~1"    # fairseq_ext/tools/tm/retrieval.py + memory_index, selection, tm_engines (numpy)


def test_old_revisions_wherever_the_tool_lived_against_head(tmp_path):
    queries = write_lines(tmp_path / "q.es", (TINY / "test.es").read_text(encoding="utf-8").splitlines())
    out = tmp_path / "bench.json"
    p = run([sys.executable, BENCH, "--memory-src", TINY / "train.es", "--query", queries, "--rounds", "2",
             "--chunk", "16", "--engines", "numpy,tantivy", "--old-rev", f"HEAD,{FLAT},{PACKAGED}",
             "--json", out], OMP_NUM_THREADS="1")
    res = json.loads(out.read_text())
    assert res["reference"] == "old@HEAD" and res["queries"] == 36
    assert list(res["setups"]) == ["old@HEAD", f"old@{FLAT}", f"old@{PACKAGED}", "new-numpy", "new-tantivy"]
    assert res["sources"][f"old@{FLAT}"].endswith(":fairseq_ext/tools/retrieval.py)")
    assert res["sources"][f"old@{PACKAGED}"].endswith(":fairseq_ext/tools/tm/retrieval.py)")
    for name, s in res["setups"].items():
        assert s["agreement"] == "36/36" and s["deterministic"], (name, s)
        assert s["qps_wall"] > 0 and len(s["qps_wall_rounds"]) == 2
    assert "Traceback" not in p.stderr


def test_a_revision_without_the_tool_is_one_error_line(tmp_path):
    queries = write_lines(tmp_path / "q.es", ["y dijo"])
    first = run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT).stdout.split()[0]
    p = run([sys.executable, BENCH, "--memory-src", TINY / "train.es", "--query", queries, "--old-rev", first],
            check=False)
    assert p.returncode != 0 and "no retrieval tool" in p.stderr and "Traceback" not in p.stderr

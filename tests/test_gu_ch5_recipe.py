"""Gu (2019) ch. 5 (universal NMT: ULR + MoLE) recipe: the thesis-mode printout of ``recipes/gu/ch5.sh`` (every
command parses with its own parser: fairseq's with ``--user-dir fairseq_ext``, the tools' ``build_parser``), the
report (``fairseq_ext.tools.chapters.universal_report``) on a synthetic output tree (its scores.json written by
the real ``fairseq_ext.tools.evaluation.score compare --json``), ``fairseq-ext-ulr gates`` (the MoLE gate of
Fig. 5.8) on tiny checkpoints trained here, and, marked slow, the recipe's ``DATA=tiny`` run end to end."""
import json
import math
import shlex
import subprocess
import sys

import numpy as np
import pytest

from fairseq_ext.tools.corpora import corpora, ulr

from fairseq_ext.tools.chapters import universal_report as rep
from harness import ROOT, fairseq, n_lines, parse_fairseq_command, run, thesis_commands, write_lines

RECIPE = ROOT / "recipes" / "gu" / "ch5.sh"
MULTI_TINY = ROOT / "tests" / "data" / "bible_multi_tiny" / "multi.tsv"
PNG = b"\x89PNG\r\n\x1a\n"


# ============================================================================ thesis printout
def parse_line(line):
    """(tool, parsed args) of a printed ``+ ...`` line: fairseq's parser, or the plugin tool's ``build_parser``."""
    got = parse_fairseq_command(line)
    if got is not None:
        return got
    toks = shlex.split(line[2:])
    tool = toks[0].rsplit("/", 1)[-1]
    if tool == "fairseq-ext-ulr":
        return f"ulr {toks[1]}", ulr.build_parser().parse_args(toks[1:])
    assert tool == "python" and toks[1] == "-m" and toks[2] == "fairseq_ext.tools.corpora.corpora", line
    return f"corpora {toks[3]}", corpora.build_parser().parse_args(toks[3:])


def test_thesis_mode_prints_parsable_commands():
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    lines = thesis_commands(RECIPE)
    by = {}
    for ln in lines:
        tool, args = parse_line(ln)
        by.setdefault(tool, []).append(args)
    assert set(by) == {"corpora universal", "ulr embed", "ulr seed-dict", "ulr project", "fairseq-train",
                       "fairseq-generate"}
    # Table 5.3's seven settings: the data (BPE 40k per language), 300-d embeddings, M = 20k universal tokens
    data = by["corpora universal"]
    assert [(a.lowres, a.aux) for a in data] == [
        ("ro", "cs,de,el,fi"), ("ro", "cs,de,el,fr"), ("ro", "de,el,fi,it"), ("ro", "es,fr,it,pt"),
        ("lv", "es,fr,it,pt"), ("lv", "es,fr,it,pt,ru"), ("ko", "es,fr,it,pt")]
    assert all(a.vocab_size == 40000 and a.target == "en" for a in data)
    assert [a.data for a in by["ulr embed"]] == [a.out for a in data] and all(a.dim == 300 for a in by["ulr embed"])
    assert len(by["ulr seed-dict"]) == 7 and all(a.num_universal == 20000 for a in by["ulr project"])
    # the ladder: multi, + ULR, + ULR + MoLE per setting, registered names, §5.4.1's optimisation
    trains, gens = by["fairseq-train"], by["fairseq-generate"]
    assert len(trains) == len(gens) == 7 * 3
    for a in trains:
        assert a.task == "universal_translation" and a.task in TASK_REGISTRY
        assert a.arch == "universal_rnn_512" and a.arch in ARCH_MODEL_REGISTRY
        assert a.criterion in CRITERION_REGISTRY
        assert (a.optimizer, a.lr, a.clip_norm, a.batch_size, a.max_update) == ("adam", [0.001], 1.0, 128, 1000000)
        assert a.lang_temperature == 5
        name = a.save_dir.rsplit("/", 1)[-1]
        assert (bool(a.ulr), bool(a.mole)) == {"multi": (False, False), "ulr": (True, False),
                                               "ulr_mole": (True, True)}[name]
        assert a.criterion == ("universal_mole_cross_entropy" if name == "ulr_mole" else "cross_entropy")
    assert [g.path for g in gens] == [t.save_dir + "/checkpoint_best.pt" for t in trains]
    assert all(g.beam == 5 and g.gen_subset == "test" and g.post_process == "sentencepiece" for g in gens)
    assert all(g.task == "universal_translation" for g in gens)
    # every fairseq command reads the data folder its setting built
    for t, g in zip(trains, gens):
        assert t.data == g.data and t.data.rsplit("/", 1)[0] in {a.out for a in data}


def test_unknown_system_is_refused(tmp_path):
    p = run(["bash", RECIPE], timeout=120, check=False, DATA="tiny", RUNS=tmp_path, SYSTEMS="multi ulr_bogus")
    assert p.returncode == 2 and "unknown system ulr_bogus" in p.stderr
    p = run(["bash", RECIPE], timeout=120, check=False, DATA="tiny", RUNS=tmp_path, SYSTEMS="multi", BT_SYSTEMS="ulr_bt1x")
    assert p.returncode == 2 and "unknown system ulr_bt1x (_btK: K an integer)" in p.stderr


def test_bt_systems_up_sample_the_real_pairs():
    """ulr_bt10 = ulr + the back-translated split with the real pairs counted 10 times; *_bt keeps K = 1."""
    fn = "\n".join(RECIPE.read_text().split("\nsystem_flags() {")[1:2])
    script = f"system_flags() {{{fn.split(chr(10) + '}' + chr(10))[0]}\n}}\n" \
             "system_flags ulr_bt10; system_flags ulr_mole_bt3; system_flags multi_bt"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["--ulr --criterion cross_entropy --bt-split bt --bt-real-upsample 10",
                   "--ulr --mole --criterion universal_mole_cross_entropy --bt-split bt --bt-real-upsample 3",
                   "--criterion cross_entropy --bt-split bt"]


# ============================================================================ the report on a synthetic tree
REF = ["and god said let there be light", "the lord is my shepherd", "in the beginning was the word",
       "blessed are the poor in spirit", "he went up into the mountain", "and the earth was without form",
       "the word of the lord came unto me", "let us make man in our image"]
HYPS = {
    "multi": ["and god said let be light", "the lord is a shepherd", "in the start was word", "blessed the poor",
              "he went into the mountain", "and the earth was void", "the word of god came to me", "let us make man"],
    "ulr": ["and god said let there be light", "the lord is my shepherd", "in the beginning was the word",
            "blessed are the poor", "he went up into the mountain", "and the earth was without form",
            "the word of the lord came to me", "let us make man in our image"],
    "closest": ["god light", "lord", "beginning word", "poor", "mountain", "earth", "word lord", "man image"],
    "vanilla": ["the the", "lord", "was", "the", "he", "and", "the", "let"],
}


def _train_log(path, wps):
    """A fairseq-train log (--log-format simple): train_inner lines and two epoch summaries at ``wps``."""
    lines = []
    for e, upd in ((1, 40), (2, 80)):
        lines.append(f"2026-01-01 00:00:0{e} | INFO | train_inner | epoch 00{e}:     20 / 40 loss=5.1, ppl=34.3, "
                     f"wps={wps * 3}, ups=1.5, wpb=1000.0, bsz=50, num_updates={upd - 20}, lr=0.001, gnorm=1.2, "
                     f"clip=0, train_wall=10, wall=12")
        lines.append(f"2026-01-01 00:00:0{e} | INFO | train | epoch 00{e} | loss 5.05 | ppl 33 | wps {wps} | ups 1.5 | "
                     f"wpb 1000 | bsz 50 | num_updates {upd} | lr 0.001 | gnorm 1.2 | clip 0 | train_wall 20 | wall 25")
    write_lines(path, lines)


def make_tree(root, systems_by_tag, tokens, wps=None):
    """OUT/<tag>/<system>/{test/generate-test.txt, data_dir, train.log} + data folders with a manifest, and
    OUT/<tag>/scores.json from `python -m fairseq_ext.tools.evaluation.score compare --json` (baseline multi)."""
    out = root / "out"
    ref = write_lines(root / "ref.en", REF)
    for tag, systems in systems_by_tag.items():
        data = root / "data" / tag
        data.mkdir(parents=True, exist_ok=True)
        (data / "manifest.json").write_text(json.dumps({"lowres": "it", "aux": ["es", "fr", "ru"],
                                                        "lowres_train_en_tokens": tokens[tag]}))
        for s in systems:
            d = out / tag / s
            write_lines(d / "test" / "generate-test.txt", HYPS[s])
            (d / "data_dir").write_text(f"{data}\n")
            if wps and s in wps:
                _train_log(d / "train.log", wps[s])
        others = []
        for s in systems:
            if s != "multi":
                others += ["--system", out / tag / s / "test" / "generate-test.txt"]
        run([sys.executable, "-m", "fairseq_ext.tools.evaluation.score", "compare", "--baseline",
             out / tag / "multi" / "test" / "generate-test.txt", *others, "--ref", ref, "--n-bootstrap", "50",
             "--json", out / tag / "scores.json"])
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("ch5_report")
    out = make_tree(root, {"16k": ["vanilla", "multi", "closest", "ulr"], "0k": ["multi", "ulr"],
                           "full": ["vanilla", "multi", "ulr"]},
                    {"16k": 16012, "0k": 0, "full": 27345}, wps={"multi": 2000.0, "ulr": 1500.0, "closest": 1800.0})
    return out


def test_report_reads_the_real_compare_json(tree):
    sc = rep.read_scores(str(tree / "16k" / "scores.json"))
    raw = json.loads((tree / "16k" / "scores.json").read_text())
    assert set(sc) - {"_meta"} == {"vanilla", "multi", "closest", "ulr"} and sc["_meta"]["baseline"] == "multi"
    assert sc["multi"]["baseline"] and sc["multi"]["d_bleu"] is None
    row = next(s for s in raw["systems"] if s["name"].endswith("/ulr/test/generate-test.txt"))
    assert sc["ulr"]["bleu"] == row["BLEU"]["score"] and sc["ulr"]["p_bleu"] == row["BLEU"]["p_value"]
    assert sc["ulr"]["d_bleu"] == pytest.approx(sc["ulr"]["bleu"] - sc["multi"]["bleu"])
    assert sc["ulr"]["d_bleu"] > 0 > sc["closest"]["d_bleu"]
    assert rep.label("ulr_bt10") == "Multi-NMT + ULR + BT (real pairs ×10)" and rep.label("ulr") == "Multi-NMT + ULR"
    assert rep.label("multi_bt") == "Multi-NMT + BT" and rep.label("other_bt3") == "other_bt3"
    bad = tree.parent / "bad.json"
    bad.write_text(json.dumps({"bleu": 1}))
    with pytest.raises(rep.ToolError, match="score compare --json"):
        rep.read_scores(str(bad))


def test_report_helpers(tmp_path):
    assert rep.system_of("runs/gu_ch5/it/16k/ulr_mole/test/generate-test.txt") == "ulr_mole"
    assert [rep.tokens_of_tag(t) for t in ("0k", "16k", "300", "full")] == [0, 16000, 300, None]
    log = tmp_path / "train.log"
    _train_log(log, 1000.0)
    assert rep.words_per_second(str(log)) == pytest.approx(1000.0)  # the epoch summaries, not train_inner
    inner = tmp_path / "inner.log"
    inner.write_text("".join(ln + "\n" for ln in log.read_text().splitlines() if "train_inner" in ln))
    assert rep.words_per_second(str(inner)) == pytest.approx(3000.0)
    assert rep.words_per_second(str(tmp_path / "none.log")) is None


def test_report_writes_table_fig5_5_and_cost(tree, capsys):
    assert rep.main(["--out", str(tree), "--main", "16k"]) == 0
    printed = capsys.readouterr().out
    md = (tree / "table5_4.md").read_text()
    assert printed.strip() == md.strip()
    sec = md.split("## Table 5.4 at 16k")[1].split("## Size")[0]
    rows = [ln for ln in sec.splitlines() if ln.startswith("| ") and not ln.startswith("| System")]
    labels = [ln.split(" | ")[0][2:] for ln in rows]
    # thesis order; ulr_a_i and ulr_mole were not run: left out
    assert labels == ["Vanilla", "Multi-NMT", "Closest Uni-Token Only", "Multi-NMT + ULR"]
    assert "16,012 English tokens of it-en pairs; aux es, fr, ru" in md
    thesis = {lab: ln.rstrip(" |").rsplit(" | ", 1)[-1] for lab, ln in zip(labels, rows)}
    assert thesis == {"Vanilla": "1.21", "Multi-NMT": "14.94", "Closest Uni-Token Only": "5.83",
                      "Multi-NMT + ULR": "20.01"}
    sc = rep.read_scores(str(tree / "16k" / "scores.json"))
    ulr_row = rows[labels.index("Multi-NMT + ULR")]
    assert f"| {sc['ulr']['bleu']:.2f} | {sc['ulr']['chrf']:.2f} | {sc['ulr']['d_bleu']:+.2f} (" in ulr_row
    assert "| Multi-NMT | " in md and "## Size 0k" in md and "## Size full" in md
    assert md.index("## Size 0k") < md.index("## Size full")
    cost = next(ln for ln in md.splitlines() if ln.startswith("Cost"))
    assert "separate runs, load-dependent" in cost
    assert "Multi-NMT 2,000 (1.00× Multi-NMT)" in cost and "Multi-NMT + ULR 1,500 (0.75× Multi-NMT)" in cost
    assert "Closest Uni-Token Only 1,800 (0.90× Multi-NMT)" in cost
    # Fig. 5.5: x from the manifests; vanilla has no 0k point (no marker)
    assert (tree / "fig5_5.png").read_bytes()[:8] == PNG
    f55 = (tree / "fig5_5.md").read_text()
    assert "| 0 (0k) | — |" in f55 and "| 16,012 (16k) |" in f55 and "| 27,345 (full) |" in f55
    res = json.loads((tree / "report.json").read_text())
    assert [p["x"] for p in res["fig5_5"]["multi"]] == [0, 16012, 27345]
    assert [p["x"] for p in res["fig5_5"]["vanilla"]] == [16012, 27345]
    assert not (tree / "fig5_8_gates.png").exists()     # no ulr_mole checkpoint


def test_report_zero_resource_vanilla_only_when_marked(tree, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(tree, out)
    (out / "0k" / "vanilla").mkdir()
    (out / "0k" / "vanilla" / "no_data").write_text("no it-en pair at 0k\n")
    assert rep.main(["--out", str(out), "--main", "16k", "--no-gates"]) == 0
    res = json.loads((out / "report.json").read_text())
    assert res["fig5_5"]["vanilla"][0] == {"x": 0, "bleu": 0.0, "tag": "0k", "no_data": True}
    assert "| 0 (0k) | 0 (no data) |" in (out / "fig5_5.md").read_text()


def test_report_quotes_the_interleaved_cost(tree, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(tree, out)
    (out / "cost").mkdir()
    conf = {"gu5_multi": {"params": 9.0e6, "ratios": [1.0, 1.0, 1.0], "median_ratio": 1.0, "ms_per_step": 400.0},
            "gu5_ulr": {"params": 9.5e6, "ratios": [1.2, 1.3, 1.25], "median_ratio": 1.25, "ms_per_step": 500.0},
            "gu5_ulr_mole": {"params": 11.0e6, "ratios": [1.5, 1.4, 1.45], "median_ratio": 1.45,
                             "ms_per_step": 580.0}}
    (out / "cost" / "speed.json").write_text(json.dumps({"rounds": 3, "steps": 10, "configs": conf}))
    assert rep.main(["--out", str(out), "--main", "16k", "--no-gates"]) == 0
    line = next(ln for ln in (out / "table5_4.md").read_text().splitlines() if ln.startswith("Cost, interleaved"))
    assert "Multi-NMT + ULR 1.25× (range 1.20–1.30; 9.50M parameters)" in line
    assert "Multi-NMT + ULR + MoLE 1.45× (range 1.40–1.50; 11.00M parameters)" in line
    assert "3 rounds x 10 steps" in line and "9.00M parameters, 400 ms" in line
    assert json.loads((out / "report.json").read_text())["cost_interleaved"]["gu5_ulr"]["median_ratio"] == 1.25
    del conf["gu5_multi"]
    (out / "cost" / "speed.json").write_text(json.dumps({"rounds": 3, "steps": 10, "configs": conf}))
    with pytest.raises(rep.ToolError, match="no gu5_multi"):
        rep.main(["--out", str(out), "--main", "16k", "--no-gates"])


def test_report_without_scores_is_one_error(tmp_path):
    (tmp_path / "16k" / "multi").mkdir(parents=True)
    with pytest.raises(rep.ToolError, match="no <tag>/scores.json"):
        rep.main(["--out", str(tmp_path), "--main", "16k"])


# ============================================================================ gates (Fig. 5.8)
@pytest.fixture(scope="module")
def mole_run(tmp_path_factory):
    """The recipe's tiny data folder (fairseq-ext-data universal on the committed multi-parallel slice) and two
    universal_rnn_tiny checkpoints of a few updates: with MoLE, and Multi-NMT (no MoLE)."""
    root = tmp_path_factory.mktemp("ch5_gates")
    data = root / "data"
    run([sys.executable, "-m", "fairseq_ext.tools.corpora.corpora", "universal", "--multi", MULTI_TINY, "--aux", "es,fr,ru",
         "--lowres", "it", "--lowres-tokens", "300", "--vocab-size", "150", "--lowres-mono", "50", "--out", data])
    common = ["--task", "universal_translation", "--arch", "universal_rnn_tiny", "--optimizer", "adam", "--lr", "1e-3",
              "--max-tokens", "2048", "--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple",
              "--no-epoch-checkpoints", "--disable-validation"]
    fairseq("train", data / "bin", *common, "--mole", "--criterion", "universal_mole_cross_entropy",
            "--max-update", "3", "--save-dir", root / "mole")
    fairseq("train", data / "bin", *common, "--criterion", "cross_entropy", "--max-update", "1",
            "--save-dir", root / "multi")
    return {"data": data, "mole": root / "mole" / "checkpoint_last.pt", "multi": root / "multi" / "checkpoint_last.pt"}


def gates(*args, check=True):
    return run([sys.executable, "-m", "fairseq_ext.tools.corpora.ulr", "gates", *args], check=check, timeout=300)


def test_gates_first_n_sentences(mole_run, tmp_path):
    data = mole_run["data"]
    p = gates("--path", mole_run["mole"], "--data", data / "bin", "--n", "3", "--json", tmp_path / "g.jsonl",
              "--plot", tmp_path / "g.png", "--plot-n", "2", "--summary", tmp_path / "s.json")
    recs = [json.loads(ln) for ln in (tmp_path / "g.jsonl").read_text(encoding="utf-8").splitlines()]
    # the summary is over every piece of the 3 sentences (the plot shows the first 2)
    summ = json.loads((tmp_path / "s.json").read_text())
    g = np.array([t["gate"] for r in recs for t in r["tokens"]])
    assert summ["sentences"] == 3 and summ["pieces"] == len(g)
    assert [summ["mean_gate"][e] for e in ("es", "fr", "ru")] == pytest.approx(g.mean(0).tolist(), abs=1e-6)
    assert [summ["top_share"][e] for e in ("es", "fr", "ru")] == pytest.approx(
        [float((g.argmax(1) == k).mean()) for k in range(3)])
    assert summ["saturated_share"] == pytest.approx(float((g.max(1) > 0.99).mean()))
    assert summ["mean_entropy"] == pytest.approx(float(-(g * np.log(g)).sum(1).mean()), abs=1e-5)
    assert "(the first 2)" in p.stderr and "mean gate es" in p.stderr
    ids = (data / "raw" / "test.ids").read_text(encoding="utf-8").splitlines()
    src = (data / "spm" / "test.src").read_text(encoding="utf-8").splitlines()
    assert [r["index"] for r in recs] == [0, 1, 2] and [r["id"] for r in recs] == ids[:3]
    for r in recs:
        assert r["experts"] == ["es", "fr", "ru"] and r["lang"] == "it"
        assert [t["symbol"] for t in r["tokens"]] == src[r["index"]].split()   # no pad, no </s>
        assert all(t["symbol"] == t["piece"] + "__it" for t in r["tokens"])
        for t in r["tokens"]:
            assert len(t["gate"]) == 3 and sum(t["gate"]) == pytest.approx(1.0, abs=1e-4)
            assert t["top"] == r["experts"][t["gate"].index(max(t["gate"]))]
        assert r["src"] == "".join(t["piece"] for t in r["tokens"]).replace("\u2581", " ").strip()
    assert (tmp_path / "g.png").read_bytes()[:8] == PNG


def test_gates_by_verse_id_and_errors(mole_run, tmp_path):
    data = mole_run["data"]
    ids = (data / "raw" / "test.ids").read_text(encoding="utf-8").splitlines()
    bare = ids[4].split(":", 1)[1]           # an id also matches without its "it:" prefix
    gates("--path", mole_run["mole"], "--data", data / "bin", "--ids", f"{ids[7]},{bare}",
          "--json", tmp_path / "g.jsonl", "--plot", tmp_path / "g.png")
    recs = [json.loads(ln) for ln in (tmp_path / "g.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["index"], r["id"]) for r in recs] == [(7, ids[7]), (4, ids[4])]
    p = gates("--path", mole_run["mole"], "--data", data / "bin", "--ids", "it:Nowhere.1.1",
              "--json", tmp_path / "x.jsonl", "--plot", tmp_path / "x.png", check=False)
    assert p.returncode == 2 and "error:" in p.stderr and "'it:Nowhere.1.1' is not in the test split" in p.stderr
    # a checkpoint without MoLE: one clear error, nothing written
    p = gates("--path", mole_run["multi"], "--data", data / "bin", "--json", tmp_path / "y.jsonl",
              "--plot", tmp_path / "y.png", check=False)
    assert p.returncode == 2
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "not a universal_rnn checkpoint with MoLE" in err[0] and "Traceback" not in p.stderr
    assert not (tmp_path / "y.jsonl").exists() and not (tmp_path / "y.png").exists()
    p = gates("--path", mole_run["mole"], "--data", data / "bin", "--n", "2", "--ids", ids[0],
              "--json", tmp_path / "z.jsonl", "--plot", tmp_path / "z.png", check=False)
    assert p.returncode == 2 and "not allowed with argument" in p.stderr


def test_report_calls_gates_for_the_main_ulr_mole_checkpoint(mole_run, tmp_path):
    import shutil

    out = make_tree(tmp_path, {"300": ["multi", "ulr"]}, {"300": 301})
    d = out / "300" / "ulr_mole"
    d.mkdir()
    shutil.copy(mole_run["mole"], d / "checkpoint_best.pt")
    (d / "data_dir").write_text(f"{mole_run['data']}\n")
    n_test = n_lines(mole_run["data"] / "raw" / "test.ids")
    # a MoLE diagnostic system (the residual one) gets its own figure and summary line
    r = out / "300" / "ulr_mole_res"
    r.mkdir()
    shutil.copy(mole_run["mole"], r / "checkpoint_best.pt")
    (r / "data_dir").write_text(f"{mole_run['data']}\n")
    assert rep.main(["--out", str(out), "--main", "300"]) == 0
    assert (out / "fig5_8_gates.png").read_bytes()[:8] == PNG
    assert (out / "fig5_8_gates_ulr_mole_res.png").read_bytes()[:8] == PNG
    assert n_lines(out / "fig5_8_gates.jsonl") == min(n_test, rep.GATE_SUMMARY_SENTENCES)
    md = (out / "table5_4.md").read_text()
    assert "Fig. 5.8, Multi-NMT + ULR + MoLE: fig5_8_gates.png (the gate of 3 test sentences)" in md
    assert "Fig. 5.8, Multi-NMT + ULR + MoLE, residual (diagnostic): fig5_8_gates_ulr_mole_res.png" in md
    summ = json.loads((out / "report.json").read_text())["gate_summary"]["ulr_mole"]
    assert summ["sentences"] == min(n_test, rep.GATE_SUMMARY_SENTENCES)
    assert sum(summ["mean_gate"].values()) == pytest.approx(1.0, abs=1e-4)
    assert sum(summ["top_share"].values()) == pytest.approx(1.0)
    assert 0 <= summ["mean_entropy"] <= math.log(3) + 1e-6


# ============================================================================ tiny end to end
@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    """DATA=tiny: ~10 minutes on one thread next to other work (6 systems + 3 with back-translation at 300 tokens, 5
    at 0 / full, the interleaved cost stage)."""
    p = run(["bash", RECIPE], timeout=1800, DATA="tiny", RUNS=tmp_path, THREADS="1")
    out = tmp_path / "gu_ch5_tiny"
    for name in ("table5_4.md", "fig5_5.png", "fig5_5.md", "fig5_8_gates.png", "report.json"):
        assert (out / name).is_file(), name
    for png in ("fig5_5.png", "fig5_8_gates.png"):
        assert (out / png).read_bytes()[:8] == PNG
    expected = {"300": {"vanilla", "multi", "closest", "ulr_a_i", "ulr", "ulr_mole", "multi_bt", "ulr_bt", "ulr_mole_bt"},
                "0k": {"multi", "ulr"},
                "full": {"vanilla", "multi", "ulr"}}
    for tag, systems in expected.items():
        for s in systems:
            d = out / tag / s
            data = (d / "data_dir").read_text().strip()
            n_test = n_lines(f"{data}/raw/test.en")
            hyps = [ln for ln in (d / "test" / "generate-test.txt").read_text().splitlines() if ln.startswith("H-")]
            assert len(hyps) == n_test and len({h.split("\t")[0] for h in hyps}) == n_test, (tag, s)
        sc = json.loads((out / tag / "scores.json").read_text())
        assert {n.split("/")[-3] for n in [sc["baseline"]["name"]] + [x["name"] for x in sc["systems"]]} == systems
    md = (out / "table5_4.md").read_text()
    assert "## Table 5.4 at 300" in md and "Multi-NMT + ULR + MoLE" in md and "load-dependent" in md
    cost = json.loads((out / "cost" / "speed.json").read_text())   # the interleaved cost stage
    assert list(cost["configs"]) == ["gu5_multi", "gu5_ulr", "gu5_ulr_mole"]
    assert "Cost, interleaved" in md and "Multi-NMT + ULR + MoLE" in md.split("Cost, interleaved")[1]
    assert "## Table 5.4" in p.stdout

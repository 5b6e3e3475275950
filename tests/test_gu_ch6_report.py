"""Gu (2019) ch. 6 (MetaNMT) recipe: the helpers and the report (``fairseq_ext.tools.chapters.meta_splits``,
``fairseq_ext.tools.chapters.meta_report``: the splits built next to a real ``fairseq-ext-data universal`` folder of the tiny multi-parallel slice; the report on a
synthetic output tree whose scores come from the real ``fairseq_ext.tools.evaluation.score``), and, marked slow,
the recipe's ``DATA=tiny`` run end to end. The thesis-mode printout is in ``test_gu_ch6_printout.py``."""
import json
import re
import statistics
import sys

import pytest

from fairseq_ext.tools.evaluation import score
from fairseq_ext.tools.chapters import meta_splits
from fairseq_ext.tools.chapters import meta_report as rep
from harness import ROOT, n_lines, run, write_lines

RECIPE = ROOT / "recipes" / "gu" / "ch6.sh"
MULTI_TINY = ROOT / "tests" / "data" / "bible_multi_tiny" / "multi.tsv"
PNG = b"\x89PNG\r\n\x1a\n"


# ============================================================================ splits and concat on real data
@pytest.fixture(scope="module")
def uni(tmp_path_factory):
    """A `fairseq-ext-data universal` folder of the tiny slice: sources es, fr, validation tl, target it."""
    d = tmp_path_factory.mktemp("ch6_uni") / "it"
    run([sys.executable, "-m", "fairseq_ext.tools.corpora.corpora", "universal", "--multi", MULTI_TINY, "--aux", "es,fr,tl",
         "--lowres", "it", "--lowres-tokens", "800", "--lowres-mono", "0", "--vocab-size", "150", "--out", d])
    return d


def _fairseq_lines(prefix):
    from fairseq.data import data_utils

    return len(data_utils.load_indexed_dataset(str(prefix), None))


def test_splits_next_to_a_universal_folder(uni, capsys):
    counts = meta_splits.build_splits(str(uni), ["es", "fr"], ["tl"])
    b = uni / "bin_meta"
    train_lang = (uni / "spm" / "train.lang").read_text().splitlines()
    n = {x: train_lang.count(x) for x in ("es", "fr", "tl", "it")}
    assert all(n.values())
    assert counts["train_multi"] == {"es": n["es"], "fr": n["fr"]}
    assert counts["train_meta_tl"] == {"es": n["es"], "fr": n["fr"], "tl": n["tl"]}
    assert set((b / "train_multi.lang").read_text().split()) == {"es", "fr"}
    assert (b / "train_meta_tl.lang").read_text().split() == [x for x in train_lang if x != "it"]
    for split in ("train_multi", "train_meta_tl", "valid_tl"):
        for side in ("src", "en"):
            assert _fairseq_lines(b / f"{split}.src-en.{side}") == n_lines(b / f"{split}.lang")
    # the universal folder's own files are links (the target's pool, dev and test, the dictionaries)
    for name in ("dict.src.txt", "dict.en.txt", "train.src-en.src.bin", "valid.lang", "test.src-en.en.idx"):
        assert (b / name).is_symlink() and (b / name).resolve() == (uni / "bin" / name).resolve()
    # tl's dev set: its verses of the valid book (Philippians), marked __tl; train subsets keep the lines
    ids = (b / "valid_tl.ids").read_text().splitlines()
    assert ids and all(i.startswith("tl:Philippians.") for i in ids) and len(ids) == counts["valid_tl"]["tl"]
    assert not (b / "seg").exists()  # the temporary segmentation does not stay
    assert n_lines(b / "valid_tl.raw.en") == len(ids)
    spm = uni / "spm"
    src = spm.joinpath("train.src").read_text().splitlines()
    multi_src = [s for s, x in zip(src, train_lang) if x in ("es", "fr")]
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(str(b / "dict.src.txt"))
    ds = data_utils.load_indexed_dataset(str(b / "train_multi.src-en.src"), d)
    assert d.string(ds[0]) == multi_src[0] and d.string(ds[len(ds) - 1]) == multi_src[-1]
    vs = data_utils.load_indexed_dataset(str(b / "valid_tl.src-en.src"), d)
    assert all(sym.endswith("__tl") for sym in d.string(vs[0]).split()) and d.unk() not in vs[0].tolist()
    # a second call is skipped (stamp); a changed argument rebuilds
    capsys.readouterr()
    meta_splits.build_splits(str(uni), ["es", "fr"], ["tl"])
    assert "up to date" in capsys.readouterr().err
    counts2 = meta_splits.build_splits(str(uni), ["es"], ["tl"])
    assert counts2["train_multi"] == {"es": n["es"]} and (b / "train_multi.lang").read_text().split() == ["es"] * n["es"]


def test_splits_errors(uni):
    with pytest.raises(rep.ToolError, match="is the target"):
        meta_splits.build_splits(str(uni), ["es"], ["it"], name="x")
    with pytest.raises(rep.ToolError, match="'de' is not in"):
        meta_splits.build_splits(str(uni), ["es", "de"], ["tl"], name="x")
    with pytest.raises(rep.ToolError, match="distinct languages"):
        meta_splits.build_splits(str(uni), ["es", "tl"], ["tl"], name="x")
    with pytest.raises(rep.ToolError, match="no manifest.json"):
        meta_splits.build_splits(str(uni / "bin"), ["es"], ["tl"])
    assert not (uni / "x").exists()


def _gen(path, hyps, order=None):
    """A fairseq-generate output (lines in batch order, not id order) with D- lines = ``hyps``."""
    order = order or list(range(len(hyps)))[::-1]
    lines = []
    for i in order:
        lines += [f"S-{i}\tsrc", f"T-{i}\tref", f"H-{i}\t-0.5\t{hyps[i]}", f"D-{i}\t-0.5\t{hyps[i]}", f"P-{i}\t-0.5"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_concat_puts_the_draws_one_after_the_other(tmp_path):
    ref = write_lines(tmp_path / "ref.en", REF[:3])
    a = _gen(tmp_path / "a.txt", ["x1", "x2", "x3"])
    b = write_lines(tmp_path / "b.txt", ["y1", "y2", "y3"])   # plain text works too
    assert rep.main(["concat", "--ref", str(ref), "--out", str(tmp_path / "o" / "h.txt"), "--ref-out",
                     str(tmp_path / "o" / "r.txt"), str(a), str(b)]) == 0
    assert (tmp_path / "o" / "h.txt").read_text().splitlines() == ["x1", "x2", "x3", "y1", "y2", "y3"]
    assert (tmp_path / "o" / "r.txt").read_text().splitlines() == REF[:3] * 2
    short = _gen(tmp_path / "c.txt", ["z1", "z2"])
    with pytest.raises(rep.ToolError, match="no hypothesis for ids 2"):
        rep.concat_hypotheses(str(ref), [str(short)], str(tmp_path / "h2.txt"), str(tmp_path / "r2.txt"))


# ============================================================================ the report on a synthetic tree
REF = ["and god said let there be light", "the lord is my shepherd", "in the beginning was the word",
       "blessed are the poor in spirit", "he went up into the mountain", "and the earth was without form",
       "the word of the lord came unto me", "let us make man in our image"]


def _hyps(quality, seed):
    """Hypotheses that keep the first ``quality`` words of each reference (varied a little by ``seed``)."""
    out = []
    for i, r in enumerate(REF):
        w = r.split()
        k = max(1, min(len(w), quality + (i + seed) % 2))
        out.append(" ".join(w[:k]))
    return out


def _ft_log(path, pairs, tokens, draw, valid):
    """A fine-tuning log (--log-format simple) with the task's subset line and valid lines [(loss, update)]."""
    lines = [f"2026-01-01 00:00:00 | INFO | fairseq_ext.tasks.meta_translation | ulr_finetune_translation: training "
             f"on {pairs} it pairs ({tokens} target tokens, budget 16000, draw {draw})"]
    for loss, upd in valid:
        lines.append(f"2026-01-01 00:00:01 | INFO | train_inner | epoch 001:     10 / 20 loss=5.1, ppl=34.3, wps=900, "
                     f"ups=0.5, wpb=1800, bsz=60, num_updates={upd}, lr=0.0003, gnorm=1.2, train_wall=20, wall=22")
        lines.append(f"2026-01-01 00:00:02 | INFO | valid | epoch 001 | valid on 'valid' subset | loss {loss} | "
                     f"ppl 30 | wps 5000 | wpb 1900 | bsz 60 | num_updates {upd}")
    write_lines(path, lines)


def _cost_log(path, spu, wpb, n_int=3, interval=10):
    """A cost-stage log: ``n_int`` train_inner intervals of ``interval`` updates at ``spu`` seconds each (the first
    interval 3x slower: the start-up the report skips)."""
    lines = []
    for j in range(1, n_int + 1):
        wall = spu * interval * (3 if j == 1 else 1)
        lines.append(f"2026-01-01 00:00:0{j} | INFO | train_inner | epoch 001:     {j * interval} / 900 loss=9.1, "
                     f"inner_loss=9.2, ppl=550, wps=100, ups={interval / wall:.2f}, wpb={wpb}, bsz=60, "
                     f"num_updates={j * interval}, lr=0.0005, gnorm=2.1, train_wall={wall:.0f}, wall={j * 30}")
    lines.append("2026-01-01 00:01:00 | INFO | fairseq_cli.train | done training in 95.0 seconds")
    write_lines(path, lines)


def _score(hyp, ref, out):
    assert score.main(["score", "--hyp", str(hyp), "--ref", str(ref), "--json", str(out)]) == 0


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """OUT of the recipe: zero-shot and 2 draws x 3 strategies of MetaNMT, transfer without emb; scores,
    per-column bootstrap on the concatenation (the recipe's concat + `score compare`), cost rounds, joint logs."""
    root = tmp_path_factory.mktemp("ch6_report")
    out = root / "out"
    ref = write_lines(root / "ref.en", REF)
    (out).mkdir()
    (out / "settings.json").write_text(json.dumps({"meta_langs": ["es", "fr", "ru", "ar"], "valid_lang": "tl",
                                                   "target": "it", "target_tokens": 16000, "meta_budget_min": 40}))
    quality = {"meta": {"zero": 2, "all": 5, "emb+enc": 6, "emb": 4}, "multi": {"zero": 1, "all": 4, "emb+enc": 4}}
    gens = {}
    for s, cols in quality.items():
        for col, q in cols.items():
            if col == "zero":
                d = out / "zero" / s
                g = _gen(d / "test" / "generate-test.txt", _hyps(q, 0))
                _score(g, ref, d / "score.json")
                gens.setdefault((s, col), []).append(g)
                continue
            for k in (1, 2):
                d = out / "ft" / s / col / f"d{k}"
                g = _gen(d / "test" / "generate-test.txt", _hyps(q, k))
                _score(g, ref, d / "score.json")
                _ft_log(d / "train.log", 600 + k, 15900 + k, k, [(5.0, 25), (4.5 - k / 10, 50), (4.8, 75)])
                gens.setdefault((s, col), []).append(g)
    for col in ("zero", "all", "emb+enc", "emb"):
        if (("multi", col)) not in gens:
            continue
        c = out / "compare" / col
        for s in ("meta", "multi"):
            rep.concat_hypotheses(str(ref), [str(g) for g in gens[(s, col)]], str(c / f"{s}.txt"), str(c / "ref.txt"))
        assert score.main(["compare", "--baseline", str(c / "multi.txt"), "--system", str(c / "meta.txt"), "--ref",
                           str(c / "ref.txt"), "--format", "text", "--n-bootstrap", "50", "--json",
                           str(out / "compare" / f"{col}.json")]) == 0
    for r, (m, b) in enumerate([(3.0, 1.5), (3.3, 1.5), (2.8, 1.6)], 1):
        _cost_log(out / "cost" / f"r{r}" / "meta.log", m, 2000)
        _cost_log(out / "cost" / f"r{r}" / "multi.log", b, 2040)
    for s, upd in (("meta", 700), ("multi", 1500)):
        write_lines(out / s / "train.log", [
            f"2026-01-01 | INFO | valid_tl | epoch 001 | valid on 'valid_tl' subset | loss {6 if s == 'meta' else 7} | "
            f"ppl 64 | wps 5000 | wpb 1900 | bsz 60 | num_updates {upd - 100}",
            f"2026-01-01 | INFO | valid_tl | epoch 001 | valid on 'valid_tl' subset | loss 6.5 | ppl 64 | wps 5000 | "
            f"wpb 1900 | bsz 60 | num_updates {upd} | best_loss 6"])
    return out


def test_report_helpers(tmp_path):
    _cost_log(tmp_path / "c.log", 2.0, 2000)
    spu = rep.seconds_per_update(str(tmp_path / "c.log"))
    assert spu["train_wall"] == pytest.approx(2.0) and spu["updates"] == 20 and spu["wpb"] == 2000
    assert spu["wall"] == pytest.approx(2.0, rel=0.01)
    _cost_log(tmp_path / "tiny.log", 0.01, 100)        # whole-second train_wall = 0: the wall clock only
    spu = rep.seconds_per_update(str(tmp_path / "tiny.log"))
    assert spu["train_wall"] is None and spu["wall"] == pytest.approx(0.01, rel=0.01)
    assert rep.seconds_per_update(str(tmp_path / "none.log")) is None
    _ft_log(tmp_path / "ft.log", 612, 15980, 3, [(5.0, 25), (4.1, 50), (4.3, 75)])
    assert rep.finetune_info(str(tmp_path / "ft.log")) == {"pairs": 612, "target_tokens": 15980, "updates": 75,
                                                           "best_valid_loss": 4.1, "best_update": 50, "validations": 3}
    assert rep.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0, 3) and rep.mean_std([4.0]) == (4.0, 0.0, 1)
    assert rep.mean_std([]) == (None, None, 0)


def test_report_table_6_2_layout(tree, capsys):
    assert rep.main(["--out", str(tree)]) == 0
    printed = capsys.readouterr().out
    md = (tree / "table6_2.md").read_text()
    assert printed.strip() == md.strip()
    sec = md.split("## Table 6.2 / Fig. 6.3 layout")[1].split("## Paired bootstrap")[0]
    head = next(ln for ln in sec.splitlines() if ln.startswith("| System"))
    assert head == "| System | zero-shot | fine-tuned: all | fine-tuned: emb+enc | fine-tuned: emb |"
    rows = {ln.split(" | ")[0][2:]: [c.strip() for c in ln.strip("| ").split(" | ")[1:]]
            for ln in sec.splitlines() if ln.startswith("| ") and not ln.startswith("| System")}
    # means / stds of the draws, from the real scorer's JSON
    for s, label in (("meta", "MetaNMT"), ("multi", "Multilingual transfer")):
        for j, col in enumerate(("all", "emb+enc", "emb")):
            files = [tree / "ft" / s / col / f"d{k}" / "score.json" for k in (1, 2)]
            if not files[0].exists():
                assert rows[label][j + 1] == "—"
                continue
            b = [json.loads(f.read_text())["bleu"] for f in files]
            assert rows[label][j + 1] == f"{statistics.fmean(b):.2f} ± {statistics.stdev(b):.2f} (n=2)"
        z = json.loads((tree / "zero" / s / "score.json").read_text())["bleu"]
        assert rows[label][0] == f"{z:.2f}"
    thesis = rows["Thesis MetaNMT, Ro-En (Es Fr It Pt De Ru)"]
    assert thesis[0] == "15.93" and thesis[2].startswith("20.00 ± 0.27")
    assert "only as bars" in md and "31.76" in md
    # paired bootstrap on the concatenation: the compare JSON's numbers
    boot = md.split("## Paired bootstrap")[1].split("##")[0]
    cmp_all = json.loads((tree / "compare" / "all.json").read_text())
    d = cmp_all["systems"][0]["BLEU"]["delta"]
    line = next(ln for ln in boot.splitlines() if ln.startswith("| fine-tuned: all"))
    assert f"{d:+.2f} (" in line and line.endswith(f"| {cmp_all['n_sentences']} |") and cmp_all["n_sentences"] == 16
    assert "| fine-tuned: emb | — |" in boot and "concatenation of the draws" in boot
    # per draw, fine-tuning runs
    assert "| MetaNMT | emb+enc |" in md and "601 (15901), 602 (15902)" in md
    assert "Fine-tuning runs: 10, updates run 75–75" in md and "best checkpoint at update 50–50" in md
    # cost: median of the rounds' ratios (3.0/1.5, 3.3/1.5, 2.8/1.6 -> 2.00, 2.20, 1.75)
    assert "**One meta-iteration = 2.00× one multilingual update** (median over 3 rounds; per round: 2.00, 2.20, " \
           "1.75)" in md and "`train_wall`" in md
    assert "MetaNMT 700 updates (best valid_tl loss 6.000 at 600)" in md
    assert "Multilingual transfer 1,500 updates" in md and "40 min each" in md
    assert (tree / "fig6_3.png").read_bytes()[:8] == PNG
    res = json.loads((tree / "report.json").read_text())
    assert res["cost"]["ratio_median"] == pytest.approx(2.0)
    assert res["table"]["meta"]["emb+enc"]["n"] == 2 and "emb" not in res["table"]["multi"]
    assert res["compare"]["emb"] is None and res["compare"]["zero"]["n_sentences"] == 8


def test_report_without_scores_is_one_error(tmp_path):
    (tmp_path / "meta").mkdir()
    with pytest.raises(rep.ToolError, match="no score in"):
        rep.main(["--out", str(tmp_path)])
    bad = tmp_path / "zero" / "meta" / "score.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps({"BLEU": 1}))
    with pytest.raises(rep.ToolError, match="score score --json"):
        rep.main(["--out", str(tmp_path)])


# ============================================================================ tiny end to end
@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    """DATA=tiny: ~8 minutes on one thread next to other work (data, ULR, 2 joint runs, cost rounds, 2 x 3 x 2
    fine-tunings, 14 decodes)."""
    p = run(["bash", RECIPE], timeout=2400, DATA="tiny", RUNS=tmp_path, THREADS="1")
    out = tmp_path / "gu_ch6_tiny"
    for name in ("table6_2.md", "fig6_3.png", "report.json", "settings.json"):
        assert (out / name).is_file(), name
    assert (out / "fig6_3.png").read_bytes()[:8] == PNG
    data = (out / "data_dir").read_text().strip()
    n_test = n_lines(f"{data}/raw/test.en")
    decodes = [out / "zero" / s for s in ("meta", "multi")]
    decodes += [out / "ft" / s / st / f"d{k}" for s in ("meta", "multi") for st in ("all", "emb+enc", "emb")
                for k in (1, 2)]
    for d in decodes:
        hyps = [ln for ln in (d / "test" / "generate-test.txt").read_text().splitlines() if ln.startswith("D-")]
        assert len(hyps) == n_test and len({h.split("\t")[0] for h in hyps}) == n_test, d
        assert json.loads((d / "score.json").read_text())["n_sentences"] == n_test
        assert not list(d.glob("*.pt"))                      # fine-tuned checkpoints are deleted once decoded
    for d in decodes[2:]:
        k = d.name[1:]
        assert f"budget 300, draw {k})" in (d / "train.log").read_text()
    meta_log = (out / "meta" / "train.log").read_text()
    assert "meta-training languages es,fr,ru,ar" in meta_log and "meta-validation on tl" in meta_log
    assert "meta-validation: fine-tuned a copy on tl" in meta_log
    multi_log = (out / "multi" / "train.log").read_text()
    assert "universal_translation train_multi:" in multi_log
    line = next(ln for ln in multi_log.splitlines() if "universal_translation train_multi:" in ln)
    assert "'es'" in line and "'it'" not in line and "'tl'" not in line       # the sources only
    for col in ("zero", "all", "emb+enc", "emb"):
        c = json.loads((out / "compare" / f"{col}.json").read_text())
        assert c["n_sentences"] == n_test * (1 if col == "zero" else 2)
    res = json.loads((out / "report.json").read_text())
    assert res["cost"] and len(res["cost"]["rounds"]) == 2 and res["cost"]["ratio_median"] > 0
    assert {st: res["table"]["meta"][st]["n"] for st in ("all", "emb+enc", "emb")} == {"all": 2, "emb+enc": 2,
                                                                                        "emb": 2}
    md = (out / "table6_2.md").read_text()
    assert "## Table 6.2 / Fig. 6.3 layout" in md and "One meta-iteration =" in md
    assert "## Table 6.2 / Fig. 6.3 layout" in p.stdout
    # EQUAL_UPDATES=1 again: every finished stage is reused; transfer is trained anew to the meta run's update
    # count (the same seed and flags: its validations repeat multi's), decoded and fine-tuned (emb+enc), compared
    n_meta = re.findall(r"num_updates (\d+)", meta_log)[-1]
    p = run(["bash", RECIPE], timeout=2400, DATA="tiny", RUNS=tmp_path, THREADS="1", EQUAL_UPDATES="1")
    assert f"multi_eq = the transfer baseline stopped at {n_meta} updates" in p.stdout
    eq_log = (out / "multi_eq" / "train.log").read_text()
    assert re.findall(r"num_updates (\d+)", eq_log)[-1] == n_meta
    assert "meta-training languages" not in p.stdout + (out / "meta" / "train.log").read_text()[len(meta_log):]
    for d in [out / "zero" / "multi_eq"] + [out / "ft" / "multi_eq" / "emb+enc" / f"d{k}" for k in (1, 2)]:
        assert json.loads((d / "score.json").read_text())["n_sentences"] == n_test, d
    for col, n in (("zero", 1), ("emb+enc", 2)):
        assert json.loads((out / "compare_eq" / f"{col}.json").read_text())["n_sentences"] == n_test * n

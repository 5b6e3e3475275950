"""Gu (2019) ch. 6 (MetaNMT) recipe: the thesis-mode printout of ``recipes/gu/ch6.sh`` (every command parses: the
data / ULR / splits tools with their own parsers, every fairseq command line with fairseq's parser and
``--user-dir fairseq_ext``), the helpers and the report of ``recipes/gu/ch6_report.py`` (the MetaNMT splits built
next to a real ``fairseq-ext-data universal`` folder of the tiny multi-parallel slice; the report on a synthetic
output tree whose scores come from the real ``fairseq_ext.tools.evaluation.score``), and, marked slow, the recipe's
``DATA=tiny`` run end to end."""
import json
import os
import re
import shlex
import statistics
import sys

import pytest

from fairseq_ext.tools.corpora import corpora, ulr

from fairseq_ext.tools.evaluation import score

from harness import ROOT, n_lines, parse_fairseq_command, recipe_script, run, thesis_commands

RECIPE = ROOT / "recipes" / "gu" / "ch6.sh"
MULTI_TINY = ROOT / "tests" / "data" / "bible_multi_tiny" / "multi.tsv"
PNG = b"\x89PNG\r\n\x1a\n"
EUROPARL = "bg,cs,da,de,el,es,et,fr,hu,it,lt,nl,pl,pt,sk,sl,sv".split(",")
S6 = ["es", "fr", "it", "pt", "de", "ru"]
TABLE_6_2_SETS = [["es"], ["es", "fr"], ["es", "fr", "it", "pt"], ["de", "ru"], S6, EUROPARL + ["ru"]]
TARGETS = ["ro", "lv", "fi", "tr", "ko"]


def report_module():
    return recipe_script("recipes/gu/ch6_report.py")


# ============================================================================ thesis printout
def light_parse(line):
    """(tool, positional, {--option: value or True}) of a printed ``+ ...`` fairseq line (no quoting in them)."""
    toks = shlex.split(line[2:])
    tool, pos, opts, i = os.path.basename(toks[0]), [], {}, 1
    while i < len(toks):
        t = toks[i]
        if t.startswith("--"):
            if i + 1 < len(toks) and not toks[i + 1].startswith("--"):
                opts[t], i = toks[i + 1], i + 2
            else:
                opts[t], i = True, i + 1
        else:
            pos.append(t)
            i += 1
    return tool, pos, opts


# the values that only name things (paths, languages, draws): lines differing only there parse alike
FAIRSEQ = ("fairseq-train", "fairseq-generate")
FREE = {"--save-dir", "--path", "--results-path", "--finetune-from-model", "--meta-langs", "--meta-valid-lang",
        "--train-subset", "--valid-subset", "--subsample-seed", "--seed"}


def shape(line):
    tool, pos, opts = light_parse(line)
    return tool, tuple(sorted((k, "*" if k in FREE else v) for k, v in opts.items()))


def tool_parse(line, rep):
    """(tool, args) of a non-fairseq printed line, with the tool's own parser."""
    toks = shlex.split(line[2:])
    tool = toks[0].rsplit("/", 1)[-1]
    if tool == "fairseq-ext-ulr":
        return f"ulr {toks[1]}", ulr.build_parser().parse_args(toks[1:])
    assert tool == "python", line
    if toks[1] == "-m":
        assert toks[2] == "fairseq_ext.tools.corpora.corpora", line
        return f"corpora {toks[3]}", corpora.build_parser().parse_args(toks[3:])
    assert toks[1] == "recipes/gu/ch6_report.py", line
    return f"ch6 {toks[2]}", rep.build_parser().parse_args(toks[2:])


@pytest.fixture(scope="module")
def thesis_lines():
    return thesis_commands(RECIPE)


def test_thesis_fairseq_lines_parse_with_registered_names(thesis_lines):
    """Every fairseq-train / fairseq-generate line is parsed by fairseq's own parser: one line of each distinct
    shape (the lines of a shape differ only in paths, languages, draws and seeds, which fairseq's parser takes as
    free strings / integers); the registries know every task / arch / criterion."""
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    fs = [ln for ln in thesis_lines if os.path.basename(shlex.split(ln[2:])[0]) in FAIRSEQ]
    reps = {}
    for ln in fs:
        reps.setdefault(shape(ln), ln)
    assert len(fs) == 696 and len(reps) == 6  # meta, transfer, 3 fine-tunings, the decodes
    for ln in reps.values():
        tool, a = parse_fairseq_command(ln)
        assert tool in FAIRSEQ and a.task in TASK_REGISTRY
        if tool == "fairseq-train":
            assert a.arch == "ulr_transformer_base" and a.arch in ARCH_MODEL_REGISTRY and a.ulr
            assert a.criterion == "cross_entropy" and a.criterion in CRITERION_REGISTRY
            assert (a.optimizer, a.adam_betas, a.adam_eps, a.max_tokens) == ("adam", "(0.9,0.98)", 1e-9, 4000)
            if a.task == "ulr_finetune_translation":
                assert a.finetune_strategy in ("all", "emb+enc", "emb") and a.target_token_budget == 16000
                assert (a.lr, a.lr_scheduler, a.max_update, a.patience) == ([1e-4], "fixed", 3000, 10)
            else:
                assert (a.lr, a.lr_scheduler, a.warmup_updates, a.patience) == ([3.5e-4], "inverse_sqrt", 16000, 10)
                assert a.validate_interval_updates == a.save_interval_updates == 1000
            if a.task == "meta_translation":
                assert (a.inner_steps, a.inner_optimizer, a.meta_gradient) == (1, "adam", "first_order")
                assert (a.meta_valid_steps, a.meta_valid_lr, a.finetune_strategy) == (160, 1e-4, "emb+enc")
            if a.task == "universal_translation":
                assert a.ulr_freeze_delta and a.lang_temperature == 0 and a.train_subset == "train_multi"
        else:
            assert (a.beam, a.gnmt_alpha, a.gen_subset, a.post_process) == (4, 0.6, "test", "sentencepiece")


def test_thesis_settings_table_6_2_and_fig_6_3(thesis_lines):
    rep = report_module()
    by, order = {}, []
    for ln in thesis_lines:
        if os.path.basename(shlex.split(ln[2:])[0]) in FAIRSEQ:
            tool, pos, opts = light_parse(ln)
            by.setdefault(tool, []).append((pos, opts))
            order.append((tool, pos, opts))
        else:
            tool, a = tool_parse(ln, rep)
            by.setdefault(tool, []).append(a)
            order.append((tool, None, a))
    assert set(by) == {"corpora universal", "ulr embed", "ulr seed-dict", "ulr project", "ch6 splits",
                       "fairseq-train", "fairseq-generate"}
    # one folder per (source set, target): the sources + the validation tasks Ro / Lv except the target
    data = by["corpora universal"]
    folders = {}
    for a in data:
        vals = [v for v in ("ro", "lv") if v != a.lowres]
        src = a.aux.split(",")[: -len(vals)]
        assert a.aux.split(",")[-len(vals):] == vals
        assert (a.lowres_tokens, a.disjoint, a.vocab_size) == (-1, False, 40000)
        folders[a.out] = (tuple(src), a.lowres)
    assert sorted(folders.values()) == sorted((tuple(s), t) for s in TABLE_6_2_SETS for t in TARGETS)
    assert [a.data for a in by["ulr embed"]] == list(folders) and all(a.dim == 300 for a in by["ulr embed"])
    assert len(by["ulr seed-dict"]) == 30 and all(a.num_universal == 20000 for a in by["ulr project"])
    for a in by["ch6 splits"]:
        src, tgt = folders[a.data]
        assert a.meta_langs.split(",") == list(src) and a.valid_langs == ",".join(v for v in ("ro", "lv") if v != tgt)
    # the runs: every fairseq command reads a folder's bin_meta; each joint phase, its zero-shot decode, then
    # 5 draws per strategy fine-tuned from its best checkpoint, each decoded
    runs = {}   # save_dir -> dict
    for tool, pos, o in order:
        if tool not in ("fairseq-train", "fairseq-generate"):
            continue
        folder = pos[0].rsplit("/", 1)[0]
        assert pos[0].endswith("/bin_meta") and folder in folders
        src, tgt = folders[folder]
        if tool == "fairseq-train" and o["--task"] in ("meta_translation", "universal_translation"):
            v = o["--valid-subset"].split("_", 1)[1]
            assert o["--valid-subset"] == f"valid_{v}" and v in ("ro", "lv") and v != tgt
            if o["--task"] == "meta_translation":
                assert o["--meta-langs"].split(",") == list(src) and o["--meta-valid-lang"] == v
                assert o["--train-subset"] == f"train_meta_{v}"
            runs[o["--save-dir"]] = {"src": src, "tgt": tgt, "v": v, "task": o["--task"], "zero": 0, "ft": {}}
        elif tool == "fairseq-train":
            assert o["--task"] == "ulr_finetune_translation"
            parent = o["--finetune-from-model"].rsplit("/", 1)[0]
            assert o["--finetune-from-model"] == parent + "/checkpoint_best.pt" and parent in runs
            assert o["--seed"] == o["--subsample-seed"]
            runs[parent]["ft"].setdefault(o["--finetune-strategy"], []).append(int(o["--subsample-seed"]))
        else:
            path = o["--path"]
            parent = path.rsplit("/", 1)[0]
            if parent in runs:
                runs[parent]["zero"] += 1
            else:
                assert path.rsplit("/", 2)[0] in runs and path.endswith("/checkpoint_best.pt")
    assert all(r["zero"] == 1 for r in runs.values())
    assert all(seeds == [1, 2, 3, 4, 5] for r in runs.values() for seeds in r["ft"].values())
    # Table 6.2: MetaNMT for every source set and target, validation Lv for Ro and Ro otherwise, emb+enc
    for s in TABLE_6_2_SETS:
        for t in TARGETS:
            v = "lv" if t == "ro" else "ro"
            got = [r for r in runs.values() if r["src"] == tuple(s) and r["tgt"] == t and r["v"] == v
                   and r["task"] == "meta_translation"]
            assert len(got) == 1 and "emb+enc" in got[0]["ft"], (s, t)
    # Fig. 6.3: six sources, targets Ro Lv Fi Tr x validation Ro / Lv, both approaches x all / emb+enc / emb
    fig = [r for r in runs.values() if r["src"] == tuple(S6) and r["tgt"] != "ko"]
    want = {(t, v, task) for t in ("ro", "lv", "fi", "tr") for v in ("ro", "lv") if v != t
            for task in ("meta_translation", "universal_translation")}
    assert {(r["tgt"], r["v"], r["task"]) for r in fig} == want and len(fig) == len(want)
    assert all(set(r["ft"]) == {"all", "emb+enc", "emb"} for r in fig)
    assert {r["task"] for r in runs.values() if r["src"] != tuple(S6)} == {"meta_translation"}


def test_bad_settings_are_refused(tmp_path):
    p = run(["bash", RECIPE], timeout=120, check=False, DATA="tiny", RUNS=tmp_path, STRATEGIES="all bogus")
    assert p.returncode == 2 and "unknown strategy bogus" in p.stderr
    p = run(["bash", RECIPE], timeout=120, check=False, DATA="tiny", RUNS=tmp_path, META_LANGS="es,tl")
    assert p.returncode == 2 and "tl is a meta-training language and the validation or target language" in p.stderr
    p = run(["bash", RECIPE], timeout=120, check=False, DATA="tiny", RUNS=tmp_path, VALID_LANG="it")
    assert p.returncode == 2 and "the validation language is the target" in p.stderr
    assert not (tmp_path / "gu_ch6_tiny").exists()


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
    rep = report_module()
    counts = rep.build_splits(str(uni), ["es", "fr"], ["tl"])
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
    rep.build_splits(str(uni), ["es", "fr"], ["tl"])
    assert "up to date" in capsys.readouterr().err
    counts2 = rep.build_splits(str(uni), ["es"], ["tl"])
    assert counts2["train_multi"] == {"es": n["es"]} and (b / "train_multi.lang").read_text().split() == ["es"] * n["es"]


def test_splits_errors(uni):
    rep = report_module()
    with pytest.raises(rep.ToolError, match="is the target"):
        rep.build_splits(str(uni), ["es"], ["it"], name="x")
    with pytest.raises(rep.ToolError, match="'de' is not in"):
        rep.build_splits(str(uni), ["es", "de"], ["tl"], name="x")
    with pytest.raises(rep.ToolError, match="distinct languages"):
        rep.build_splits(str(uni), ["es", "tl"], ["tl"], name="x")
    with pytest.raises(rep.ToolError, match="no manifest.json"):
        rep.build_splits(str(uni / "bin"), ["es"], ["tl"])
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
    rep = report_module()
    ref = _write(tmp_path / "ref.en", REF[:3])
    a = _gen(tmp_path / "a.txt", ["x1", "x2", "x3"])
    b = _write(tmp_path / "b.txt", ["y1", "y2", "y3"])   # plain text works too
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


def _write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


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
    _write(path, lines)


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
    _write(path, lines)


def _score(hyp, ref, out):
    assert score.main(["score", "--hyp", str(hyp), "--ref", str(ref), "--json", str(out)]) == 0


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """OUT of the recipe: zero-shot and 2 draws x 3 strategies of MetaNMT, transfer without emb; scores,
    per-column bootstrap on the concatenation (the recipe's concat + `score compare`), cost rounds, joint logs."""
    root = tmp_path_factory.mktemp("ch6_report")
    rep = report_module()
    out = root / "out"
    ref = _write(root / "ref.en", REF)
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
        _write(out / s / "train.log", [
            f"2026-01-01 | INFO | valid_tl | epoch 001 | valid on 'valid_tl' subset | loss {6 if s == 'meta' else 7} | "
            f"ppl 64 | wps 5000 | wpb 1900 | bsz 60 | num_updates {upd - 100}",
            f"2026-01-01 | INFO | valid_tl | epoch 001 | valid on 'valid_tl' subset | loss 6.5 | ppl 64 | wps 5000 | "
            f"wpb 1900 | bsz 60 | num_updates {upd} | best_loss 6"])
    return out


def test_report_helpers(tmp_path):
    rep = report_module()
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
    rep = report_module()
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
    rep = report_module()
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

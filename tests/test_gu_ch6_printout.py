"""Gu (2019) ch. 6 (MetaNMT) recipe, the thesis-mode printout of ``recipes/gu/ch6.sh``: every command parses (the
data / ULR / splits tools with their own parsers, every fairseq command line with fairseq's parser and ``--user-dir
fairseq_ext``), the settings of Table 6.2 and Fig. 6.3, and bad settings are refused. The helpers and the report of
``fairseq_ext.tools.chapters.meta_report`` and the end-to-end run are in ``test_gu_ch6_report.py``."""
import os
import shlex

import pytest

from fairseq_ext.tools.corpora import corpora, ulr
from fairseq_ext.tools.chapters import meta_report as rep
from harness import ROOT, parse_fairseq_command, run, thesis_commands

RECIPE = ROOT / "recipes" / "gu" / "ch6.sh"
EUROPARL = "bg,cs,da,de,el,es,et,fr,hu,it,lt,nl,pl,pt,sk,sl,sv".split(",")
S6 = ["es", "fr", "it", "pt", "de", "ru"]
TABLE_6_2_SETS = [["es"], ["es", "fr"], ["es", "fr", "it", "pt"], ["de", "ru"], S6, EUROPARL + ["ru"]]
TARGETS = ["ro", "lv", "fi", "tr", "ko"]


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
    assert toks[1] == "examples/meta_nmt/report.py", line
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

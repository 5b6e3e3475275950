"""Tests of the many-to-English data of Gu (2019) ch. 5 (``fairseq-ext-data universal``,
fairseq_ext.tools.corpora.universal_data) on the committed slice tests/data/bible_multi_tiny/multi.tsv.

The low-resource budget (English tokens), the disjointness of auxiliary and low-resource verses, the
language markers of the source pieces, the line-aligned side files, the binarized data (loadable by
fairseq), the stamp (reuse / force), zero-resource, and one clear error per kind of bad input.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from fairseq_ext.tools.corpora import corpora, universal_data
from fairseq_ext.tools.common import ToolError, cli_status, read_lines
from fairseq_ext.tools.corpora.sword import TEST_BOOKS, VALID_BOOKS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TSV = os.path.join(ROOT, "tests", "data", "bible_multi_tiny", "multi.tsv")
SPLITS = ("train", "valid", "test")
BUDGET = 300
KW = dict(multi_tsv=TSV, vocab_size=150, lowres_tokens=BUDGET, lowres_mono=50)


def _lines(d, name):
    return read_lines(os.path.join(d, name))


def _verses(d, split, lang):
    """The verse ids (without the language prefix) of ``lang`` in ``raw/<split>``."""
    return {i.split(":", 1)[1] for i, x in zip(_lines(d, f"raw/{split}.ids"), _lines(d, f"raw/{split}.lang"))
            if x == lang}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("universal") / "it")
    return out, universal_data.build(out, aux=["es", "fr", "ru"], lowres="it", **KW)


def test_fixture_slice():
    assert os.path.getsize(TSV) < 400_000
    rows = read_lines(TSV)
    assert rows[0].split("\t") == ["id", "en_kjv", "en_bbe", "en_web", "es", "fr", "fr_darby", "it", "ar", "ru",
                                   "fa", "vi", "tl", "tl_ulb", "hi"]
    books = [r.split("\t", 1)[0].rsplit(".", 2)[0].replace("_", " ") for r in rows[1:]]
    assert sum(b in VALID_BOOKS for b in books) >= 30 and sum(b in TEST_BOOKS for b in books) >= 30
    assert sum(b not in VALID_BOOKS + TEST_BOOKS for b in books) >= 350


def test_layout_and_aligned_side_files(built):
    out, m = built
    for sp in SPLITS:
        for folder in ("raw", "spm"):
            n = {x: len(_lines(out, f"{folder}/{sp}.{x}")) for x in ("src", "en", "ids", "lang")}
            assert len(set(n.values())) == 1, (folder, sp, n)
        assert n["src"] == m["lines"][sp] == sum(m["counts"][sp].values())
        ids, langs = _lines(out, f"raw/{sp}.ids"), _lines(out, f"raw/{sp}.lang")
        assert all(i.split(":", 1)[0] == x for i, x in zip(ids, langs))
        assert len(set(ids)) == len(ids)
        assert _lines(out, f"bin/{sp}.lang") == langs
    for x in ("src", "lang", "ids"):
        assert len(_lines(out, f"raw/mono.{x}")) == m["counts"]["mono"]["it"] == 50
    assert set(_lines(out, "raw/mono.lang")) == {"it"}
    assert set(_lines(out, "raw/valid.lang")) == set(_lines(out, "raw/test.lang")) == {"it"}
    assert m["counts"]["train"]["it"] > 0 and all(m["counts"]["train"][a] > 0 for a in ("es", "fr", "ru"))
    held = {sp: {v.rsplit(".", 2)[0].replace("_", " ") for v in _verses(out, sp, "it")} for sp in ("valid", "test")}
    assert held["valid"] <= set(VALID_BOOKS) and held["test"] <= set(TEST_BOOKS)
    for lang in ("es", "fr", "ru", "it", "en"):
        for ext in ("model", "vocab"):
            assert os.path.isfile(os.path.join(out, "spm", f"spm.{lang}.{ext}"))
        assert _lines(out, f"spm/text.{lang}")
    for lang in ("es", "fr", "ru", "it"):
        assert len(_lines(out, f"spm/para.{lang}")) == len(_lines(out, f"spm/para.{lang}.en")) \
            == m["counts"]["train"][lang]
    # the low-resource text (--mono-text all) is every training-book verse; English text: each train verse once
    assert len(_lines(out, "spm/text.it")) > m["counts"]["train"]["it"] + 50
    train_verses = {i.split(":", 1)[1] for i in _lines(out, "raw/train.ids")}
    assert len(_lines(out, "spm/text.en")) == len(train_verses)
    assert m["langs"] == ["es", "fr", "ru", "it"] and m["target"] == "en_web" and m["lowres_tokens"] == BUDGET
    assert json.load(open(os.path.join(out, "manifest.json"))) == json.loads(json.dumps(m))


def test_budget_of_english_tokens(built):
    out, m = built
    en = [len(e.split()) for e, x in zip(_lines(out, "raw/train.en"), _lines(out, "raw/train.lang")) if x == "it"]
    total = sum(en)
    assert total == m["lowres_train_en_tokens"] >= BUDGET
    last = m["lowres_last_verse"]
    i = _lines(out, "raw/train.ids").index(last)
    assert total - len(_lines(out, "raw/train.en")[i].split()) < BUDGET
    assert total - max(en) < BUDGET


def test_aux_disjoint_from_lowres(built):
    out, m = built
    lowres = _verses(out, "train", "it") | {i.split(":", 1)[1] for i in _lines(out, "raw/mono.ids")}
    for a in ("es", "fr", "ru"):
        assert _verses(out, "train", a)
        assert not _verses(out, "train", a) & lowres


def test_no_disjoint_and_nested_budgets(built, tmp_path):
    out0, _ = built
    out = str(tmp_path / "nd")
    m = universal_data.build(out, aux=["es"], lowres="it", disjoint=False, **dict(KW, lowres_tokens=150))
    small = _verses(out, "train", "it")
    assert small and small < _verses(out0, "train", "it")  # a smaller budget is a prefix of the same order
    assert small & _verses(out, "train", "es")
    assert m["disjoint"] is False


def test_every_source_piece_is_marked(built):
    out, m = built
    for name, lang_file in [(f"{sp}.src", f"{sp}.lang") for sp in SPLITS] + [("mono.src", "mono.lang")]:
        for line, lang in zip(_lines(out, f"spm/{name}"), _lines(out, f"spm/{lang_file}")):
            pieces = line.split()
            assert pieces and all(p.endswith("__" + lang) and len(p) > len(lang) + 2 for p in pieces), (name, line)
            assert "@@" not in line
    for lang in ("es", "it"):  # text/para files are unmarked
        assert "__" not in " ".join(_lines(out, f"spm/text.{lang}"))
    symbols = [x.rsplit(" ", 1)[0] for x in _lines(out, "bin/dict.src.txt")]
    assert symbols and all(any(s.endswith("__" + x) for x in m["langs"]) for s in symbols)
    assert {s.rsplit("__", 1)[1] for s in symbols} == set(m["langs"])
    assert len(symbols) == m["dict_src"]


def test_bin_loads_with_fairseq(built):
    from fairseq.data import Dictionary, data_utils

    out, m = built
    b = os.path.join(out, "bin")
    dicts = {x: Dictionary.load(os.path.join(b, f"dict.{x}.txt")) for x in ("src", "en")}
    for sp in SPLITS:
        for x in ("src", "en"):
            ds = data_utils.load_indexed_dataset(os.path.join(b, f"{sp}.src-en.{x}"), dicts[x])
            assert ds is not None and len(ds) == m["lines"][sp]
        ds = data_utils.load_indexed_dataset(os.path.join(b, f"{sp}.src-en.src"), dicts["src"])
        first = _lines(out, f"spm/{sp}.src")[0].split()
        assert dicts["src"].string(ds[0]).split() == [p if p in dicts["src"].indices else "<unk>" for p in first]
    mono = data_utils.load_indexed_dataset(os.path.join(b, "mono", "mono.src-en.src"), dicts["src"])
    assert len(mono) == 50
    assert _lines(out, "bin/mono/mono.lang") == ["it"] * 50
    # pieces seen only in mono text are in the dictionary (no <unk> there)
    assert all(int(t) != dicts["src"].unk() for i in range(len(mono)) for t in mono[i])


def test_rerun_is_reused_and_force_redoes(tmp_path, capsys):
    out = str(tmp_path / "u")
    kw = dict(KW, aux=["es"])
    m1 = universal_data.build(out, **kw)
    capsys.readouterr()
    mtime = os.path.getmtime(os.path.join(out, "bin", "train.src-en.src.bin"))
    assert universal_data.build(out, **kw) == m1
    assert "up to date" in capsys.readouterr().err
    assert os.path.getmtime(os.path.join(out, "bin", "train.src-en.src.bin")) == mtime
    m3 = universal_data.build(out, force=True, **kw)
    err = capsys.readouterr().err
    assert "up to date" not in err and "[universal] wrote" in err
    assert m3["counts"] == m1["counts"]
    assert _lines(out, "raw/train.ids") and os.path.exists(os.path.join(out, "bin", "mono"))
    # a changed parameter is a rebuild, and stale files of the old build do not survive
    m4 = universal_data.build(out, **dict(kw, aux=["fr"]))
    assert "up to date" not in capsys.readouterr().err
    assert m4["aux"] == ["fr"] and not os.path.exists(os.path.join(out, "spm", "spm.es.model"))


def test_zero_resource(tmp_path):
    out = str(tmp_path / "z")
    m = universal_data.build(out, aux=["es"], lowres="it", **dict(KW, lowres_tokens=0))
    assert "it" not in _lines(out, "raw/train.lang") and m["counts"]["train"]["it"] == 0
    assert m["lowres_train_en_tokens"] == 0 and m["counts"]["mono"]["it"] == 50
    assert m["counts"]["valid"]["it"] > 0 and m["counts"]["test"]["it"] > 0
    symbols = [x.rsplit(" ", 1)[0] for x in _lines(out, "bin/dict.src.txt")]
    assert any(s.endswith("__it") for s in symbols)  # the low-resource pieces come from its mono text


def test_max_aux_verses_same_verses_for_every_aux_language(tmp_path):
    out = str(tmp_path / "cap")
    m = universal_data.build(out, aux=["es", "ru"], lowres="it", max_aux_verses=60, **KW)
    assert m["counts"]["train"]["es"] == m["counts"]["train"]["ru"] == 60
    assert _verses(out, "train", "es") == _verses(out, "train", "ru")


def test_vocab_size_adapts_to_the_text(tmp_path, capsys):
    big = universal_data.build(str(tmp_path / "big"), aux=["es"], **dict(KW, vocab_size=4000))
    err = capsys.readouterr().err
    assert all(big["vocab"][x] < 4000 for x in ("es", "it", "en"))
    assert "spm.it: %d pieces instead of 4000 (the text is too small for more)" % big["vocab"]["it"] in err
    small = universal_data.build(str(tmp_path / "small"), aux=["es"], **dict(KW, vocab_size=30))
    err = capsys.readouterr().err
    assert all(small["vocab"][x] > 30 for x in ("es", "it", "en"))
    assert "spm.es: vocab size 30 is below the" in err


def test_cli_subcommand(tmp_path, capsys):
    out = str(tmp_path / "cli")
    rc = corpora.main(["universal", "--aux", "es", "--lowres", "it", "--target", "en_web", "--lowres-tokens", "200",
                       "--lowres-mono", "20", "--vocab-size", "120", "--seed", "2", "--multi", TSV, "--out", out])
    assert rc == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["mono"] == {"it": 20} and counts["train"]["es"] > 0 and counts["train"]["it"] > 0
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert m["seed"] == 2 and m["vocab_size"] == 120 and m["lowres_train_en_tokens"] >= 200
    assert os.path.isfile(os.path.join(out, "bin", "train.src-en.src.bin"))


# --------------------------------------------------------------------------- bad input
def _bad_tsv(tmp_path, kind):
    rows = read_lines(TSV)
    if kind == "malformed":
        rows[5] = rows[5].rsplit("\t", 1)[0]  # a field short
    elif kind == "no_lowres":  # the low-resource column empty in every training book
        col = rows[0].split("\t").index("it")
        for i in range(1, len(rows)):
            f = rows[i].split("\t")
            if f[0].rsplit(".", 2)[0].replace("_", " ") not in VALID_BOOKS + TEST_BOOKS:
                f[col] = ""
            rows[i] = "\t".join(f)
    p = tmp_path / f"{kind}.tsv"
    p.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(p)


KNOWN = "es, fr, fr_darby, it, ar, ru, fa, vi, tl, tl_ulb, hi"
BAD = {
    "unknown_code": (["--aux", "es,xx"], r"unknown language code 'xx' in --aux; known source codes in {tsv}: " + KNOWN),
    "english_source": (["--lowres", "en_kjv"], r"unknown language code 'en_kjv' in --lowres \(an English edition"),
    "lowres_in_aux": (["--aux", "es,it"], r"the low-resource language 'it' is also an auxiliary language"),
    "target_not_english": (["--target", "fr"], r"the target 'fr' is not English: .* give one of en_kjv, en_bbe, "
                                               r"en_web"),
    "unknown_target": (["--target", "en_xx"], r"unknown language code 'en_xx' in --target"),
    "missing_tsv": ([], r"missing input file: {tsv} \(the multi-parallel Bible; build it with "
                        r"`fairseq-ext-data multi`"),
    "malformed": ([], r"{tsv}:6: malformed row: 14 tab-separated fields, the header has 15"),
    "no_lowres": ([], r"no it-en_web training verse left in {tsv} \(empty or filtered\); --lowres-tokens 100 "
                      r"cannot be met"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_one_error(tmp_path, capsys, name):
    import re

    args, expected = BAD[name]
    if name == "missing_tsv":
        tsv = str(tmp_path / "nowhere" / "multi.tsv")
    elif name in ("malformed", "no_lowres"):
        tsv = _bad_tsv(tmp_path, name)
    else:
        tsv = TSV
    out = str(tmp_path / "out")
    argv = ["universal", "--multi", tsv, "--out", out, "--lowres-tokens", "100", "--vocab-size", "100"] + args
    assert cli_status(corpora.main, argv) == 2
    cap = capsys.readouterr()
    errors = [x for x in cap.err.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and cap.err.rstrip("\n").endswith(errors[0]), cap.err
    assert re.match("error: " + expected.format(tsv=re.escape(tsv)), errors[0]), errors[0]
    assert "Traceback" not in cap.err and cap.out == ""
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    with pytest.raises(ToolError):
        corpora.main(argv)


def test_bad_numbers_are_errors(tmp_path):
    with pytest.raises(ToolError, match=r"--lowres-tokens -2"):
        universal_data.build(str(tmp_path / "o"), multi_tsv=TSV, lowres_tokens=-2)
    with pytest.raises(ToolError, match=r"'es' is given twice"):
        universal_data.build(str(tmp_path / "o"), multi_tsv=TSV, aux="es,es")
    shutil.rmtree(tmp_path / "o", ignore_errors=True)


def test_mono_text_all_is_every_training_book_verse_and_used_only_the_pairs(built, tmp_path):
    out, m = built  # default --mono-text all
    n_train_books = sum(1 for i in _lines(TSV.rsplit("/", 1)[0], "multi.tsv")[1:]) - m["counts"]["valid"]["it"] \
        - m["counts"]["test"]["it"]
    assert len(_lines(out, "spm/text.it")) > m["counts"]["train"]["it"] + m["counts"]["mono"]["it"]
    assert len(_lines(out, "spm/text.it")) <= n_train_books
    used = str(tmp_path / "used")
    mu = universal_data.build(used, aux=["es", "fr", "ru"], lowres="it", mono_text="used", **KW)
    assert len(_lines(used, "spm/text.it")) == mu["counts"]["train"]["it"] + mu["counts"]["mono"]["it"]
    assert len(_lines(used, "spm/text.es")) == mu["counts"]["train"]["es"]
    with pytest.raises(ToolError, match="--mono-text"):
        universal_data.build(str(tmp_path / "bad"), aux=["es"], lowres="it", mono_text="some", **KW)

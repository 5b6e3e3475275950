"""``fairseq-ext-translate``: raw lines -> detokenised output with a model exported by ``fairseq-ext-export``.

A tiny transformer trained on the tiny slice segmented by sentencepiece (1,000 pieces: after 100 updates its
greedy outputs already differ from line to line, unlike the 300-piece model, which only repeats "▁") is
exported with its segmentation; then, on raw Spanish lines with blank lines among them:

* ``--beam 1`` gives exactly the detokenised greedy output (D- lines) of ``fairseq-interactive --bpe
  sentencepiece`` on the same checkpoint, one output line per input line, a blank line an empty one;
* ``--input FILE`` with other batches gives the same as standard input;
* the export finds the segmentation next to the data folder (``prepare``'s layout) or says it found none,
  and translating such an export is one ``error:`` line naming the record, as is invalid UTF-8 input.
"""
import json
import re
import shutil
import subprocess

import pytest

from harness import BIN, TINY, TINY_TRANSFORMER, env, fairseq, prepare_tiny, run, train

pytest.importorskip("ctranslate2")  # the dev extra installs it

MAX_LEN = ["--max-len-b", "50"]


@pytest.fixture(scope="module")
def spm1k(tmp_path_factory):
    return prepare_tiny(tmp_path_factory.mktemp("spm1k"), vocab_size=1000)


@pytest.fixture(scope="module")
def ckpt(spm1k, tmp_path_factory):
    return train(spm1k, tmp_path_factory.mktemp("ck"), TINY_TRANSFORMER, max_update=100,
                 extra=("--lr", "5e-3", "--dropout", "0", "--disable-validation"))


@pytest.fixture(scope="module")
def exported(spm1k, ckpt, tmp_path_factory):
    from fairseq_ext.tools.export.export import main as export_main

    out = tmp_path_factory.mktemp("ct2") / "model"
    assert export_main([str(ckpt), "--out", str(out), "--data", str(spm1k),
                        "--segmentation", str(spm1k.parent / "seg")]) == 0
    return out


def raw_lines():
    """Raw Spanish test verses with blank lines at the start, in the middle (one of spaces) and next to the end."""
    lines = (TINY / "test.es").read_text(encoding="utf-8").splitlines()[:12]
    return [""] + lines[:5] + ["", "   "] + lines[5:11] + ["", lines[11]]


def translate(model, *args, input_text=None, check=True):
    return run([BIN / "fairseq-ext-translate", "--model", model, *args], input_text=input_text, check=check)


def test_greedy_output_is_fairseq_interactive_detokenised(spm1k, ckpt, exported):
    record = json.loads((exported / "fairseq_ext_export.json").read_text(encoding="utf-8"))
    assert record["segmentation"]["model"] == "spm.model" and (exported / "spm.model").exists()
    assert record["segmentation"]["post_process"] == "sentencepiece" and record["source_lang"] == "es"
    lines = raw_lines()
    p = translate(exported, "--beam", "1", *MAX_LEN, input_text="\n".join(lines))  # last line: no newline
    out = p.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines), p.stdout
    out = out[:-1]
    assert [o for o, ln in zip(out, lines) if not ln.strip()] == ["", "", "", ""]
    assert "[translate] 16 lines (4 blank)" in p.stderr
    text = [ln for ln in lines if ln.strip()]
    fs = fairseq("interactive", spm1k, "--task", "translation_ext", "--path", ckpt, "--cpu", "--beam", "1",
                 *MAX_LEN, "--bpe", "sentencepiece", "--sentencepiece-model", spm1k.parent / "seg" / "spm.model",
                 "--buffer-size", "64", "--batch-size", "64", input_text="\n".join(text) + "\n")
    d = {int(m.group(1)): m.group(2) for m in re.finditer(r"^D-(\d+)\t[^\t]*\t(.*)$", fs.stdout, re.M)}
    assert sorted(d) == list(range(len(text)))
    ours = [o for o, ln in zip(out, lines) if ln.strip()]
    differ = [(i, ours[i], d[i]) for i in range(len(text)) if ours[i] != d[i]]
    assert not differ, differ[:3]
    assert len(set(ours)) >= 5, ours  # the outputs tell the lines apart: an order mix-up would show


def test_file_input_and_other_batches_give_the_same(exported, tmp_path):
    lines = raw_lines()
    src = tmp_path / "raw.es"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    a = translate(exported, "--beam", "2", *MAX_LEN, input_text="\n".join(lines) + "\n").stdout
    b = translate(exported, "--beam", "2", *MAX_LEN, "--input", src, "--batch-size", "3").stdout
    assert a == b and a.count("\n") == len(lines)
    assert translate(exported, input_text="").stdout == ""  # no input, no output


def test_export_finds_the_segmentation_or_says_none(spm1k, ckpt, tmp_path):
    from fairseq_ext.tools.export.export import main as export_main

    # fairseq-ext-data prepare's layout: SEG/{segment.json,spm.model} with SEG/bin
    seg = tmp_path / "spm1000"
    shutil.copytree(spm1k.parent / "seg", seg)
    shutil.copytree(spm1k, seg / "bin")
    assert export_main([str(ckpt), "--out", str(tmp_path / "found"), "--data", str(seg / "bin")]) == 0
    assert (tmp_path / "found" / "spm.model").read_bytes() == (seg / "spm.model").read_bytes()
    # the harness's layout (bin/ beside seg/): no model next to the data, so none is copied
    assert export_main([str(ckpt), "--out", str(tmp_path / "none"), "--data", str(spm1k)]) == 0
    record = json.loads((tmp_path / "none" / "fairseq_ext_export.json").read_text(encoding="utf-8"))
    assert record["segmentation"] is None
    p = translate(tmp_path / "none", input_text="Y dijo\n", check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines()[-1].startswith(
        f"error: {tmp_path / 'none' / 'fairseq_ext_export.json'}: the export carries no segmentation model")
    assert "Traceback" not in p.stderr


def test_invalid_utf8_is_one_error_line(exported):
    p = subprocess.run([str(BIN / "fairseq-ext-translate"), "--model", str(exported), "--beam", "1", *MAX_LEN],
                       input=b"Y dijo\n\xff\n", capture_output=True, env=env())
    assert p.returncode == 2 and "Traceback" not in p.stderr.decode()
    assert p.stderr.decode().strip().splitlines()[-1] == "error: <stdin>:2: invalid UTF-8 (byte 0xff at column 1)"
    assert p.stdout == b""  # the block holding the bad line is not half written

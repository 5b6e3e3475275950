"""Gu ch. 5 back-translation (``fairseq-ext-bt``): the two passes' corpora on the tiny multi-parallel slice, the
monolingual English selection, the ``--bt-split`` of ``universal_translation``, and bad generate outputs."""
import os

import pytest

from harness import fairseq, n_lines

from fairseq_ext.tools.corpora import back_translation as bt
from fairseq_ext.tools.corpora import universal_data
from fairseq_ext.tools.common import ToolError, cli_status, read_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TSV = os.path.join(ROOT, "tests", "data", "bible_multi_tiny", "multi.tsv")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("bt") / "it")
    universal_data.build(out, aux=["es", "fr"], lowres="it", multi_tsv=TSV, vocab_size=150, lowres_tokens=300,
                         lowres_mono=30)
    return out


def fake_generate(path, hyps):
    """fairseq-generate-like output: ids in a shuffled order, S/H lines."""
    order = list(range(len(hyps)))[::-1]
    with open(path, "w", encoding="utf-8") as f:
        for i in order:
            f.write(f"S-{i}\tsrc\nH-{i}\t-0.5\t{hyps[i]}\nD-{i}\t-0.5\tdetok\n")
    return str(path)


def test_english_mono_avoids_the_low_resource_verses(data, tmp_path):
    out = str(tmp_path / "en.txt")
    n = bt.english_mono(data, 40, out)
    assert n == 40 == n_lines(out) == n_lines(out + ".ids")
    ids = {i.split(":", 1)[1] for i in read_lines(out + ".ids")}
    low = {i.split(":", 1)[1] for i, lang in zip(read_lines(os.path.join(data, "raw", "train.ids")),
                                                 read_lines(os.path.join(data, "raw", "train.lang"))) if lang == "it"}
    low |= {i.split(":", 1)[1] for i in read_lines(os.path.join(data, "raw", "mono.ids"))}
    assert ids and not ids & low
    en_train = set(read_lines(os.path.join(data, "spm", "train.en")))
    assert set(read_lines(out)) <= en_train  # English pieces of training verses


def test_backward_corpus_is_real_reversed_plus_synthetic(data, tmp_path):
    mono = read_lines(os.path.join(data, "spm", "mono.src"))
    hyps = [f"▁syn{i}" for i in range(len(mono))]
    hyps[3] = ""  # an empty hypothesis: its pair is dropped
    gen = fake_generate(tmp_path / "gen1.txt", hyps)
    en_mono = str(tmp_path / "en.txt")
    bt.english_mono(data, 20, en_mono)
    counts = bt.backward(data, gen, str(tmp_path / "back"), mono_en=en_mono)
    n_real = read_lines(os.path.join(data, "spm", "train.lang")).count("it")
    assert counts["train"] == n_real + len(mono) - 1 and counts["mono_en"] == 20
    src = read_lines(tmp_path / "back" / "spm" / "train.src")
    en = read_lines(tmp_path / "back" / "spm" / "train.en")
    assert all(p.endswith("__it") for line in src for p in line.split())
    assert en[n_real:n_real + 3] == hyps[:3] and src[n_real + 3] == mono[4]
    b = tmp_path / "back" / "bin"
    for f in ("train.en-src.en.bin", "train.en-src.src.bin", "valid.en-src.en.idx", "mono_en.en-src.en.bin",
              "dict.en.txt", "dict.src.txt"):
        assert (b / f).exists(), f
    with pytest.raises(ToolError, match="hypotheses for"):
        bt.backward(data, fake_generate(tmp_path / "short.txt", hyps[:-1]), str(tmp_path / "b2"))


def test_bt_split_trains_with_universal_translation(data, tmp_path):
    en_mono = str(tmp_path / "en.txt")
    n = bt.english_mono(data, 25, en_mono)
    it_pieces = [s for s in read_lines(os.path.join(data, "spm", "train.src")) if s.endswith("__it")]
    hyps = [it_pieces[i % len(it_pieces)] for i in range(n)]
    hyps[0] = ""
    assert bt.bt_split(data, fake_generate(tmp_path / "gen2.txt", hyps), en_mono, "bt") == n - 1
    b = os.path.join(data, "bin")
    assert n_lines(os.path.join(b, "bt.lang")) == n - 1 and set(read_lines(os.path.join(b, "bt.lang"))) == {"it"}
    p = fairseq("train", b, "--task", "universal_translation", "--bt-split", "bt", "--arch", "universal_rnn_tiny",
                "--criterion", "cross_entropy", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
                "--max-update", "2", "--cpu", "--no-progress-bar", "--log-format", "simple",
                "--save-dir", tmp_path / "ckpt", "--no-save")
    assert f"+ {n - 1} back-translated pairs (bt)" in p.stdout + p.stderr
    # a hypothesis in another language's pieces is refused, naming the file
    bad = fake_generate(tmp_path / "bad.txt", ["▁casa__es"] * n)
    assert cli_status(bt.main, ["bt-split", "--data", data, "--hyps", bad, "--en", en_mono]) == 2
    with pytest.raises(ToolError, match="not it's"):
        bt.bt_split(data, bad, en_mono)


def test_not_a_universal_folder(tmp_path):
    with pytest.raises(ToolError, match="manifest.json"):
        bt.english_mono(str(tmp_path), 3, str(tmp_path / "x"))

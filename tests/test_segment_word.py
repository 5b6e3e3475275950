"""Word-level segmentation (``--method word``): reversible units, a capped dictionary, true OOVs."""
from fairseq_ext.tools.corpora.segment import words
from harness import TINY, data_cli


def post_process_sentencepiece(text: str) -> str:
    """fairseq's ``--post-process sentencepiece``."""
    return text.replace(" ", "").replace("\u2581", " ").strip()


def test_word_units_split_punctuation_and_restore_the_text():
    line = "God, (and Jonah) said: \u201cdon't\u201d weep."
    units = words(line)
    assert units.split()[:4] == ["\u2581God", ",", "\u2581(", "and"]
    assert post_process_sentencepiece(units) == line
    assert words("") == ""


def test_prepare_word_level_caps_the_dictionary(tmp_path):
    data_cli("prepare", "--raw", TINY, "--src", "kjv", "--tgt", "en", "--method", "word",
             "--vocab-size", "200", "--out", tmp_path)
    seg = tmp_path / "word200"
    dict_lines = (seg / "bin" / "dict.kjv.txt").read_text(encoding="utf-8").splitlines()
    assert len(dict_lines) + 4 == 200  # fairseq's --nwords counts the 4 specials
    types = {ln.split("\t")[0] for ln in (seg / "words.tsv").read_text(encoding="utf-8").splitlines()}
    assert len(types) > 200  # the rest of the training types are out of vocabulary
    raw = (TINY / "test.kjv").read_text(encoding="utf-8").splitlines()
    segd = (seg / "test.kjv").read_text(encoding="utf-8").splitlines()
    assert [post_process_sentencepiece(s) for s in segd] == [" ".join(r.split()) for r in raw]

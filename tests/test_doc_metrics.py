"""d-BLEU (fairseq_ext.tools.evaluation.doc_metrics; ``fairseq-ext-score dbleu``) on a two-document set computed by hand."""
import json
import math

import pytest

from fairseq_ext.tools.evaluation import score as S
from fairseq_ext.tools.common import ToolError, cli_status
from fairseq_ext.tools.evaluation.doc_metrics import dbleu, dbleu_files, document_groups

IDS = ["A.1", "A.2", "B.1", "B.2"]
REFS = ["a b c d", "e f g h", "p q", "r s"]
HYPS = ["a b c d", "e f g x", "p q", "r s"]

# Worked out by hand (one-letter tokens: sacreBLEU's 13a tokenizer splits on the spaces; no n-gram order has
# zero matches, so the smoothing never applies; hypothesis and reference have 12 tokens: BP = 1).
#
# Sentence level, matches/total per order (1- to 4-grams):
#   "a b c d" / "a b c d"  4/4 3/3 2/2 1/1      "e f g x" / "e f g h"  3/4 2/3 1/2 0/1
#   "p q" / "p q"          2/2 1/1 0/0 0/0      "r s" / "r s"          2/2 1/1 0/0 0/0
#   corpus: 11/12, 7/8, 3/4, 1/2 -> BLEU = 100 * (11*7*3*1 / (12*8*4*2))^(1/4) = 100 * (231/768)^(1/4) = 74.06
# Document level: A = "a b c d e f g x" / "a b c d e f g h", B = "p q r s" / "p q r s":
#   A: 7/8, 6/7 (ab bc cd de ef fg), 5/6, 4/5;  B: 4/4, 3/3, 2/2, 1/1 (the n-grams across the sentence boundary,
#   "d e", "q r", ..., now count)
#   corpus: 11/12, 9/10, 7/8, 5/6 -> d-BLEU = 100 * (11*9*7*5 / (12*10*8*6))^(1/4) = 100 * (3465/5760)^(1/4) = 88.07
SENT_BLEU = 100 * (231 / 768) ** 0.25
DBLEU = 100 * (3465 / 5760) ** 0.25


def test_dbleu_two_documents_by_hand():
    res = dbleu(HYPS, [REFS], IDS)
    assert res["dbleu"] == pytest.approx(DBLEU) and round(res["dbleu"], 2) == 88.07
    assert res["counts"] == [11, 9, 7, 5] and res["totals"] == [12, 10, 8, 6] and res["bp"] == 1.0
    assert res["sentence"]["bleu"] == pytest.approx(SENT_BLEU) and round(res["sentence"]["bleu"], 2) == 74.06
    assert not math.isclose(res["dbleu"], res["sentence"]["bleu"])  # d-BLEU is not sentence-level BLEU
    assert res["n_documents"] == 2 and res["documents"] == [{"name": "A", "sentences": 2}, {"name": "B", "sentences": 2}]
    assert res["dbleu_str"].startswith("d-BLEU = 88.07") and res["dbleu_signature"].startswith("nrefs:1|")


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(p)


def test_dbleu_cli_plain_and_fairseq_generate_output(tmp_path, capsys):
    ref = _write(tmp_path, "ref.txt", REFS)
    ids = _write(tmp_path, "test.ids", IDS)
    hyp = _write(tmp_path, "hyp.txt", HYPS)
    out = tmp_path / "d.json"
    assert cli_status(S.main, ["dbleu", "--hyp", hyp, "--ref", ref, "--ids", ids, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "d-BLEU = 88.07" in printed and "d-BLEU signature: nrefs:1|" in printed and "2 documents" in printed
    assert json.loads(out.read_text())["dbleu"] == pytest.approx(DBLEU)
    # fairseq-generate output in batch order (not id order): aligned by sentence id
    gen = _write(tmp_path, "gen.out", [f"S-{i}\tsrc\nH-{i}\t-1.0\t{HYPS[i]}\nD-{i}\t-1.0\t{HYPS[i]}" for i in (2, 0, 3, 1)])
    assert dbleu_files(gen, ref, ids)["dbleu"] == pytest.approx(DBLEU)
    # an ids file that repeats the document name on every line: the same documents
    names = _write(tmp_path, "names.ids", ["A", "A", "B", "B"])
    assert dbleu_files(gen, ref, names)["dbleu"] == pytest.approx(DBLEU)
    # every sentence its own document: d-BLEU is the sentence-level BLEU
    assert dbleu(HYPS, REFS, ["a", "b", "c", "d"])["dbleu"] == pytest.approx(SENT_BLEU)


def test_dbleu_bad_input_is_one_error_line(tmp_path, capsys):
    ref = _write(tmp_path, "ref.txt", REFS)
    hyp = _write(tmp_path, "hyp.txt", HYPS)
    assert cli_status(S.main, ["dbleu", "--hyp", hyp, "--ref", ref]) == 2
    assert "d-BLEU needs --ids" in capsys.readouterr().err
    split = _write(tmp_path, "split.ids", ["A.1", "B.1", "A.2", "B.2"])   # document A is not contiguous
    assert cli_status(S.main, ["dbleu", "--hyp", hyp, "--ref", ref, "--ids", split]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {split}:3:") and len(err.strip().splitlines()) == 1
    short = _write(tmp_path, "short.ids", IDS[:3])
    assert cli_status(S.main, ["dbleu", "--hyp", hyp, "--ref", ref, "--ids", short]) == 2
    with pytest.raises(ToolError):
        document_groups(["A.1", ""], "x.ids")


def test_dbleu_doc_id_pattern(tmp_path):
    """``--doc-id-pattern`` of doc_translation: ``whole`` makes every id its own document (d-BLEU = sentence BLEU)."""
    from fairseq_ext.data import documents

    if not hasattr(documents, "doc_id_rule"):
        pytest.skip("fairseq_ext.data.documents has no --doc-id-pattern")
    ref = _write(tmp_path, "ref.txt", REFS)
    hyp = _write(tmp_path, "hyp.txt", HYPS)
    ids = _write(tmp_path, "test.ids", IDS)
    out = tmp_path / "d.json"
    assert cli_status(S.main, ["dbleu", "--hyp", hyp, "--ref", ref, "--ids", ids, "--doc-id-pattern", "whole",
                               "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["n_documents"] == 4 and res["dbleu"] == pytest.approx(SENT_BLEU)
    hashes = _write(tmp_path, "hash.ids", ["A#1", "A#2", "B#1", "B#2"])
    assert dbleu_files(hyp, ref, hashes, pattern="auto")["dbleu"] == pytest.approx(DBLEU)

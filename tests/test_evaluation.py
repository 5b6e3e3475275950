"""Tests of fairseq_ext.tools.evaluation.score and .hypotheses (sacreBLEU scoring helpers)."""
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu

from fairseq_ext.tools import hypotheses as gen
from fairseq_ext.tools import plots
from fairseq_ext.tools.evaluation import length_buckets, oov, score, significance
from fairseq_ext.tools.evaluation.bleu import TOKENISED_LABEL
from fairseq_ext.tools.common import cli_status

ROOT = Path(__file__).resolve().parents[1]
ScoringError = score.ScoringError


# ------------------------------------------------------------------------------- fixtures
GEN_OUT = """\
2024-01-01 12:00:00 | INFO | fairseq_cli.generate | loading model(s)
S-2\tel tercer verso
T-2\tthe third verse
H-2\t-0.40\tthe third verse
D-2\t-0.40\tThe third verse.
P-2\t-0.1 -0.2 -0.3 -0.4
S-0\ten el principio
T-0\tin the beginning
H-0\t-0.10\tin the begin@@ ning
D-0\t-0.10\tIn the beginning.
P-0\t-0.1 -0.1 -0.1
S-1\ty la tierra
T-1\tand the earth
H-1\t-0.20\tand the earth
D-1\t-0.20\tAnd the earth.
P-1\t-0.1 -0.1 -0.1
Generate test with beam=5: BLEU4 = 40.00, 60.0/50.0/40.0/30.0 (BP=1.000, ratio=1.000)
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _write_lines(path: Path, lines) -> Path:
    return _write(path, "".join(l + "\n" for l in lines))


def _gen_output(hyps, order=None, scores=None) -> str:
    """A fairseq-generate-like log for ``hyps`` (id i = hyps[i]) printed in ``order``."""
    order = list(range(len(hyps))) if order is None else order
    out = ["2024-01-01 | INFO | fairseq_cli.generate | {'beam': 5}"]
    for i in order:
        out += [f"S-{i}\tsrc {i}", f"T-{i}\tref {i}", f"H-{i}\t-0.5\t{hyps[i]}",
                f"D-{i}\t-0.5\t{hyps[i]}", f"P-{i}\t-0.5"]
    return "\n".join(out) + "\n"


_WORDS = ("the lord said unto moses and aaron go forth into the land which i give you "
          "for an inheritance behold my servant shall deal prudently he shall be exalted "
          "blessed are the meek for they shall inherit the earth").split()


def _corpus(n=80, seed=1):
    rng = random.Random(seed)
    src, ref = [], []
    for _ in range(n):
        k = rng.randint(3, 45)
        ref.append(" ".join(rng.choice(_WORDS) for _ in range(k)) + " .")
        src.append(" ".join(f"s{rng.randint(0, 50)}" for _ in range(k)))
    return src, ref


def _corrupt(ref, p, seed):
    rng = random.Random(seed)
    out = []
    for s in ref:
        toks = [t if rng.random() > p else rng.choice(["xx", "yy", "zz"]) for t in s.split()]
        out.append(" ".join(toks))
    return out


# --------------------------------------------------------------------------------- parsing
def test_parse_generate_output_out_of_order(tmp_path):
    p = _write(tmp_path / "gen.out", GEN_OUT)
    entries = gen.parse_generate_output(p)
    assert list(entries) == [0, 1, 2]
    assert entries[2].source == "el tercer verso"
    assert entries[2].target == "the third verse"
    assert entries[0].hypo_tok == "in the begin@@ ning"
    assert entries[0].score == pytest.approx(-0.10)

    hyps = score.load_hypotheses(p)  # D lines, sorted by id
    assert hyps == {0: "In the beginning.", 1: "And the earth.", 2: "The third verse."}
    assert list(hyps) == [0, 1, 2]
    tok = score.load_hypotheses(p, field="H", remove_bpe_kind="subword_nmt")
    assert tok[0] == "in the beginning"


def test_fallback_to_h_and_nbest(tmp_path):
    text = ("S-1\tb\nH-1\t-0.1\tbest one\nH-1\t-0.9\tworse one\n"
            "S-0\ta\nH-0\t-0.2\tzero\nH-0\t-0.3\tzero b\n")
    hyps = score.load_hypotheses(_write(tmp_path / "g.out", text))
    assert hyps == {0: "zero", 1: "best one"}  # no D line -> H; nbest -> first


def test_ids_mapping_and_plain_text(tmp_path):
    p = _write(tmp_path / "gen.out", GEN_OUT)
    ids = _write_lines(tmp_path / "test.ids", ["GEN.1.1", "GEN.1.2", "GEN.1.3"])
    hyps = score.load_hypotheses(p, ids=ids)
    assert hyps == {"GEN.1.1": "In the beginning.", "GEN.1.2": "And the earth.",
                    "GEN.1.3": "The third verse."}
    txt = _write_lines(tmp_path / "hyp.txt", ["a b", "", "c"])
    assert score.load_hypotheses(txt) == {0: "a b", 1: "", 2: "c"}
    assert score.load_hypotheses(txt, ids=["x", "y", "z"]) == {"x": "a b", "y": "", "z": "c"}


def test_remove_bpe():
    assert score.remove_bpe("\u2581In \u2581the \u2581begin ning", "sentencepiece") == "In the beginning"
    assert score.remove_bpe("in the begin@@ ning", "subword_nmt") == "in the beginning"
    assert score.remove_bpe("Already decoded.", "sentencepiece") == "Already decoded."
    with pytest.raises(ScoringError):
        score.remove_bpe("x", "wordpiece")


def test_missing_id_raises_naming_it(tmp_path):
    hyps = ["h0", "h1", "h2", "h3", "h4"]
    text = _gen_output(hyps, order=[4, 0, 2, 1])  # id 3 never printed
    p = _write(tmp_path / "gen.out", text)
    loaded = score.load_hypotheses(p)
    with pytest.raises(ScoringError) as ei:
        gen.align_to_references(loaded, 5, source=str(p))
    msg = str(ei.value)
    assert "no hypothesis for ids 3" in msg and "gen.out" in msg
    # with verse ids the message names the verse id
    ids = ["V0", "V1", "V2", "V3", "V4"]
    with pytest.raises(ScoringError, match="V3"):
        gen.align_to_references(score.load_hypotheses(p, ids=ids), 5, ids, source=str(p))


def test_duplicated_id_and_extra_id_raise(tmp_path):
    text = _gen_output(["a", "b"]) + _gen_output(["a", "b"], order=[1])
    with pytest.raises(ScoringError, match="more than once: 1"):
        score.load_hypotheses(_write(tmp_path / "dup.out", text))
    loaded = score.load_hypotheses(_write(tmp_path / "g.out", _gen_output(["a", "b", "c"])))
    with pytest.raises(ScoringError, match="not in the reference: 2"):
        gen.align_to_references(loaded, 2, source="g.out")
    with pytest.raises(ScoringError, match="duplicated ids"):
        gen.read_ids(["a", "b", "a"])


# ----------------------------------------------------------------------------------- BLEU
def test_bleu_equals_sacrebleu():
    _, ref = _corpus(40)
    hyp = _corrupt(ref, 0.3, seed=2)
    res = score.score_corpus(hyp, [ref])
    direct = sacrebleu.corpus_bleu(hyp, [ref])
    assert res["bleu"] == pytest.approx(direct.score, abs=1e-12)
    assert res["bp"] == pytest.approx(direct.bp)
    assert res["ratio"] == pytest.approx(direct.sys_len / direct.ref_len)
    assert res["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyp, [ref]).score, abs=1e-12)
    assert "tok:13a" in res["bleu_signature"] and "nrefs:1" in res["bleu_signature"]
    assert res["chrf_label"] == "chrF2" and "nc:6" in res["chrf_signature"]
    # a single stream given as list[str] works too
    assert score.score_corpus(hyp, ref)["bleu"] == res["bleu"]


def test_tokenised_differs_from_detok():
    refs = ["Hello , world !", "He said : \" yes . \""]
    hyps = ["Hello, world!", "He said: \"yes.\""]
    detok = score.score_corpus(hyps, [refs])
    tok = score.score_corpus(hyps, [refs], tokenised=True)
    assert detok["bleu"] == pytest.approx(100.0)  # 13a splits the punctuation
    assert tok["bleu"] < 50.0  # whitespace tokens do not match
    assert "tok:none" in tok["bleu_signature"]
    assert tok["bleu_label"] == TOKENISED_LABEL
    assert tok["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", smooth_method="none").score)
    # identical tokenised text -> 100 in both modes
    assert score.score_corpus(refs, [refs], tokenised=True)["bleu"] == pytest.approx(100.0)


def test_multi_reference():
    _, ref1 = _corpus(30, seed=3)
    ref2 = _corrupt(ref1, 0.4, seed=4)
    hyp = _corrupt(ref1, 0.3, seed=5)
    res = score.score_corpus(hyp, [ref1, ref2])
    assert res["n_refs"] == 2 and "nrefs:2" in res["bleu_signature"]
    assert res["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyp, [ref1, ref2]).score)
    assert res["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyp, [ref1, ref2]).score)
    with pytest.raises(ScoringError, match="reference 2 has 29"):
        score.score_corpus(hyp, [ref1, ref2[:-1]])


# ------------------------------------------------------------------------------ bootstrap
def test_bootstrap_identical_and_better():
    _, ref = _corpus(80, seed=6)
    base = _corrupt(ref, 0.5, seed=7)
    better = _corrupt(ref, 0.1, seed=8)
    env_before = os.environ.get("SACREBLEU_SEED")
    res = significance.paired_bootstrap(base, {"same": list(base), "better": better}, [ref], n=300)
    assert os.environ.get("SACREBLEU_SEED") == env_before  # environment left as it was
    same, good = res["systems"]
    for m in ("BLEU", "chrF2"):
        assert same[m]["p_value"] == pytest.approx(1.0) and not same[m]["significant"]
        assert same[m]["delta"] == 0.0
        assert good[m]["p_value"] < 0.05 and good[m]["significant"]
        assert good[m]["delta"] > 0
        assert good[m]["ci_low"] < good[m]["mean"] < good[m]["ci_high"]
    assert res["baseline"]["BLEU"]["score"] == pytest.approx(sacrebleu.corpus_bleu(base, [ref]).score)
    assert "bs:300" in res["signatures"]["BLEU"] and "seed:12345" in res["signatures"]["BLEU"]
    # reproducible with the fixed seed
    again = significance.paired_bootstrap(base, {"same": list(base), "better": better}, [ref], n=300)
    assert again == res
    table = significance.format_comparison(res)
    assert "better" in table and "*" in table


def test_bootstrap_checks_lengths():
    with pytest.raises(ScoringError, match="hypotheses but the baseline"):
        significance.paired_bootstrap(["a", "b"], {"s": ["a"]}, [["a", "b"]], n=10)


# ------------------------------------------------------------------------- length buckets
def test_length_buckets_sum_to_total():
    src, ref = _corpus(80, seed=9)
    hyp = _corrupt(ref, 0.3, seed=10)
    rows = length_buckets.bleu_by_length(src, hyp, [ref], "0,10,20,30,40,50,inf")
    assert [r["bucket"] for r in rows] == ["0-9", "10-19", "20-29", "30-39", "40-49", "50+"]
    assert sum(r["count"] for r in rows) == len(src)
    for r in rows:
        lens = [len(s.split()) for s in src]
        idx = [i for i, n in enumerate(lens) if r["lo"] <= n < (r["hi"] or math.inf)]
        assert r["count"] == len(idx)
        if idx:
            direct = sacrebleu.corpus_bleu([hyp[i] for i in idx], [[ref[i] for i in idx]])
            assert r["bleu"] == pytest.approx(direct.score)
        else:
            assert r["bleu"] is None
    assert rows[-1]["count"] == 0 and rows[-1]["hi"] is None  # no source longer than 45
    with pytest.raises(ScoringError, match="outside the buckets"):
        length_buckets.bleu_by_length(src, hyp, [ref], "0,10,20")
    assert "total" in length_buckets.format_buckets(rows)


def test_plot_written(tmp_path):
    src, ref = _corpus(50, seed=11)
    hyp = _corrupt(ref, 0.3, seed=12)
    rows = length_buckets.bleu_by_length(src, hyp, [ref], length_buckets.DEFAULT_EDGES)
    out = plots.plot_length_buckets(rows, tmp_path / "sub" / "buckets.png", title="test")
    data = Path(out).read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    out2 = plots.plot_length_buckets({"a": rows, "b": rows}, tmp_path / "two.png")
    assert Path(out2).stat().st_size > 0


# ------------------------------------------------------------------------------------- CLI
def test_cli_score_json_and_plot(tmp_path, capsys):
    src, ref = _corpus(40, seed=13)
    hyp = _corrupt(ref, 0.3, seed=14)
    order = list(range(40))
    random.Random(0).shuffle(order)
    g = _write(tmp_path / "gen.out", _gen_output(hyp, order))
    r1 = _write_lines(tmp_path / "test.en", ref)
    r2 = _write_lines(tmp_path / "test.kjv", _corrupt(ref, 0.2, seed=15))
    s = _write_lines(tmp_path / "test.es", src)
    js, png = tmp_path / "out.json", tmp_path / "b.png"
    rc = cli_status(score.main, ["score", "--hyp", str(g), "--ref", str(r1), "--ref", str(r2),
                                 "--src", str(s), "--json", str(js), "--plot", str(png)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "BLEU = " in out and "chrF2 = " in out and "signature: nrefs:2" in out
    data = json.loads(js.read_text())
    assert data["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(hyp, [ref, _corrupt(ref, 0.2, seed=15)]).score)
    assert sum(b["count"] for b in data["buckets"]) == 40
    assert png.stat().st_size > 0


def test_cli_compare(tmp_path, capsys):
    _, ref = _corpus(60, seed=16)
    r = _write_lines(tmp_path / "test.en", ref)
    b = _write_lines(tmp_path / "base.txt", _corrupt(ref, 0.5, seed=17))
    s = _write(tmp_path / "sys.out", _gen_output(_corrupt(ref, 0.1, seed=18), order=list(range(59, -1, -1))))
    js = tmp_path / "cmp.json"
    rc = cli_status(score.main, ["compare", "--baseline", str(b), "--system", str(s), "--ref", str(r),
                         "--n-bootstrap", "200", "--json", str(js)])
    out = capsys.readouterr().out
    assert rc == 0 and "paired bootstrap" in out and str(s) in out
    data = json.loads(js.read_text())
    assert data["systems"][0]["BLEU"]["p_value"] < 0.05


def test_cli_missing_hypothesis_exit_2(tmp_path, capsys):
    g = _write(tmp_path / "gen.out", _gen_output(["a", "b", "c", "d"], order=[0, 1, 3]))
    r = _write_lines(tmp_path / "test.en", ["a", "b", "c", "d"])
    rc = cli_status(score.main, ["score", "--hyp", str(g), "--ref", str(r)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and "ids 2" in err
    # usage errors are one line too
    with pytest.raises(SystemExit) as ei:
        score.cli_main(["score", "--ref", str(r)])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")


def test_cli_module_entry_point(tmp_path):
    """The real ``python -m fairseq_ext.tools.evaluation.score`` (imports the fairseq_ext package)."""
    g = _write(tmp_path / "gen.out", _gen_output(["a", "b", "c"], order=[2, 0]))
    r = _write_lines(tmp_path / "test.en", ["a", "b", "c"])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_ext.tools.evaluation.score", "score", "--hyp", str(g), "--ref", str(r)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "no hypothesis for ids 1" in errors[0]
    assert proc.stderr.rstrip("\n").splitlines()[-1] == errors[0]


# ------------------------------------------------------------------------------- OOV recall
def test_oov_recall_hand_case():
    vocab = {"the", "of", "and", "son"}
    refs = ["the son of Zerubbabel and Zerubbabel", "Abraham and the son"]
    hyps = ["the son of Zerubbabel", "the son of Abraham"]
    srcs = ["Zerubbabel begat", "and Isaac"]
    r = oov.oov_recall(hyps, refs, vocab, srcs)
    # reference OOVs: Zerubbabel x2 (1 produced: clipped by the hypothesis count), Abraham x1 (produced)
    assert (r["ref_oov_tokens"], r["produced"]) == (3, 2)
    assert r["recall"] == pytest.approx(200 / 3)
    # copyable = in the source sentence: only Zerubbabel (sentence 1); Abraham is not in source 2
    assert (r["copyable_oov_tokens"], r["copyable_produced"]) == (2, 1)
    assert r["hyp_unk_tokens"] == 0
    r2 = oov.oov_recall(["the <unk> of <unk>", "<unk>"], refs, vocab)
    assert r2["produced"] == 0 and r2["hyp_unk_tokens"] == 3 and "copyable_recall" not in r2
    with pytest.raises(ScoringError):
        oov.oov_recall(["x"], refs, vocab)


def test_cli_oov(tmp_path, capsys):
    (tmp_path / "dict.txt").write_text("the 10\nson 5\nof 3\n")
    (tmp_path / "ref").write_text("the son of Jesse\nthe Levite\n")
    (tmp_path / "src").write_text("the son of Jesse\na Levite\n")
    (tmp_path / "hyp").write_text("the son of Jesse\nthe <unk>\n")
    rc = cli_status(score.main, ["oov", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"),
                                 "--dict", str(tmp_path / "dict.txt"), "--src", str(tmp_path / "src"),
                                 "--json", str(tmp_path / "o.json")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| 2 | 1 | 50.0 |" in out  # Jesse produced, Levite not
    res = json.loads((tmp_path / "o.json").read_text())["systems"][str(tmp_path / "hyp")]
    assert res["copyable_oov_tokens"] == 2 and res["hyp_unk_tokens"] == 1
    (tmp_path / "hyp").write_text("only one line\n")
    assert cli_status(score.main, ["oov", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"),
                                   "--dict", str(tmp_path / "dict.txt")]) == 2

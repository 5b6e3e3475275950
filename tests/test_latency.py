"""The latency metrics of simultaneous translation (fairseq_ext.modules.latency), the corpus tool
``fairseq-ext-simul-latency`` and the LAAL column of the Gu ch. 9 report, on READ/WRITE sequences whose values
are worked out by hand below."""
import json

import pytest

from fairseq_ext.modules import latency as L
from fairseq_ext.tools.evaluation import simul_latency
from fairseq_ext.tools.common import cli_status, read_jsonl


def test_equal_lengths_every_metric_by_hand():
    """|X| = 4, actions (after the pre-read of x_1) W R W R R W W.

    delays: W at η=1 -> 1; R (η=2); W -> 2; R R (η=4); W W -> 4, 4.  g = [1, 2, 4, 4], |Y| = 4, |Y*| = 4.
    AP  = (1 + 2 + 4 + 4) / (4·4) = 11/16.
    CW  = READ runs that end in a WRITE: [1, 2] -> 1.5.
    AL  : γ = 4/4 = 1, τ_g = 3 (g(3) = 4 = |X|): [(1 − 0) + (2 − 1) + (4 − 2)] / 3 = 4/3 (hyp = ref: all three
          definitions agree).
    DAL : g' = 1, max(2, 1+1) = 2, max(4, 2+1) = 4, max(4, 4+1) = 5;
          [(1 − 0) + (2 − 1) + (4 − 2) + (5 − 3)] / 4 = 6/4 = 1.5.
    """
    d = L.delays_from_actions("WRWRRWW", 4)
    assert d == [1, 2, 4, 4]
    assert L.average_proportion(d, 4) == pytest.approx(11 / 16)
    assert L.consecutive_wait("WRWRRWW") == pytest.approx(1.5) and L.read_runs("WRWRRWW") == [1, 2]
    for al in (L.average_lagging_hyp(d, 4), L.average_lagging_ref(d, 4, 4), L.length_adaptive_average_lagging(d, 4, 4),
               L.average_lagging(d, 4)):
        assert al == pytest.approx(4 / 3)
    assert L.differentiable_average_lagging(d, 4) == pytest.approx(1.5)
    lat = L.latency("WRWRRWW", 4, ref_len=4)
    assert (lat["ap"], lat["cw"], lat["al"], lat["al_hyp"], lat["laal"], lat["dal"]) == pytest.approx(
        (11 / 16, 1.5, 4 / 3, 4 / 3, 4 / 3, 1.5))


def test_over_long_hypothesis_al_and_laal_differ():
    """|X| = 4, |Y*| = 2, actions W R W R R W W W W: delays [1, 2, 4, 4, 4, 4], |Y| = 6 (over-generation).

    AL, SimulEval (γ = |Y*|/|X| = 2/4, 1/γ = 2), τ_g = 3:  [(1 − 0) + (2 − 2) + (4 − 4)] / 3 = 1/3.
    AL, Ma et al. (γ = |Y|/|X| = 6/4, 1/γ = 2/3):           [(1 − 0) + (2 − 2/3) + (4 − 4/3)] / 3 = 5/3.
    LAAL (γ = max(6, 2)/4 = the hypothesis'):                5/3 -- the extra words earn nothing.
    DAL (1/γ = 2/3): g' = 1, 2, 4, max(4, 14/3) = 14/3, 16/3, 6;
         terms g' − (τ−1)·2/3 = 1, 4/3, 8/3, 8/3, 8/3, 8/3 -> sum 13, DAL = 13/6.
    AP = (1 + 2 + 4·4) / (4·6) = 19/24.
    """
    d = L.delays_from_actions("WRWRRWWWW", 4)
    assert d == [1, 2, 4, 4, 4, 4]
    assert L.average_lagging_ref(d, 4, 2) == pytest.approx(1 / 3)
    assert L.average_lagging_hyp(d, 4) == pytest.approx(5 / 3)
    assert L.length_adaptive_average_lagging(d, 4, 2) == pytest.approx(5 / 3)
    assert L.differentiable_average_lagging(d, 4) == pytest.approx(13 / 6)
    assert L.average_proportion(d, 4) == pytest.approx(19 / 24)
    lat = L.latency("WRWRRWWWW", 4, ref_len=2)
    assert lat["al"] == pytest.approx(1 / 3) and lat["laal"] == pytest.approx(5 / 3) and lat["al_hyp"] == pytest.approx(5 / 3)


def test_short_hypothesis_laal_follows_the_reference():
    """|X| = 4, |Y*| = 8, delays [1, 2, 4, 4] (|Y| = 4, under-generation).

    AL, SimulEval / LAAL (γ = 8/4 = 2, 1/γ = 1/2): [(1 − 0) + (2 − 1/2) + (4 − 1)] / 3 = 5.5/3 = 11/6.
    AL, Ma et al. (γ = 1): 4/3.
    """
    d = [1, 2, 4, 4]
    assert L.average_lagging_ref(d, 4, 8) == pytest.approx(11 / 6)
    assert L.length_adaptive_average_lagging(d, 4, 8) == pytest.approx(11 / 6)
    assert L.average_lagging_hyp(d, 4) == pytest.approx(4 / 3)
    assert L.length_adaptive_average_lagging(d, 4, None) == pytest.approx(4 / 3)   # no reference: the hypothesis


def test_computation_aware_al_by_hand():
    """delays [1, 2, 4, 4], |X| = 4, a source token every Δ = 0.5 s; the tokens were written 0.1, 0.3, 0.6, 0.7 s
    after the sentence started (wall clock 10.1 ... 10.7 s, start 10.0 s).

    elapsed e(τ) = g(τ)·Δ + (t_τ − t_0) = 0.6, 1.3, 2.6, 2.7 s; the source lasts |X|·Δ = 2.0 s;
    γ = 4 / 2.0 s, 1/γ = 0.5 s; τ_g = 3 (e(3) = 2.6 ≥ 2.0):
    AL_CA = [(0.6 − 0) + (1.3 − 0.5) + (2.6 − 1.0)] / 3 = 3.0/3 = 1.0 s  (AL without computation: 4/3 tokens
    = 0.667 s).
    """
    d, ts = [1, 2, 4, 4], [10.1, 10.3, 10.6, 10.7]
    assert L.elapsed_times(d, ts, 0.5, start=10.0) == pytest.approx([0.6, 1.3, 2.6, 2.7])
    assert L.computation_aware_average_lagging(d, ts, 4, 0.5, start=10.0) == pytest.approx(1.0)
    # no computation time at all: AL_CA is AL in seconds
    assert L.computation_aware_average_lagging(d, [0.0] * 4, 4, 0.5) == pytest.approx(4 / 3 * 0.5)
    with pytest.raises(ValueError, match="timestamps"):
        L.elapsed_times(d, ts[:3], 0.5)
    with pytest.raises(ValueError, match="> 0"):
        L.elapsed_times(d, ts, 0.0)


def test_simul_latency_reports_laal_with_reference_lengths(tmp_path, capsys):
    """Two sentences: the over-long one above (|Y*| = 2 from the --ref file: 1 subword + ⟨/s⟩) and the equal-length
    one (|Y*| = 4: 3 subwords + ⟨/s⟩), ids 1 and 0.

    al (SimulEval) = (1/3 + 4/3) / 2 = 5/6; al_hyp = LAAL = (5/3 + 4/3) / 2 = 3/2; AP = (19/24 + 11/16) / 2.
    """
    acts = tmp_path / "actions.jsonl"
    acts.write_text(json.dumps({"id": 1, "src_len": 4, "actions": "WRWRRWWWW"}) + "\n"
                    + json.dumps({"id": 0, "src_len": 4, "actions": "WRWRRWW"}) + "\n")
    ref = tmp_path / "ref.seg"
    ref.write_text("\u2581a \u2581b \u2581c\n\u2581d\n")
    out = tmp_path / "lat.json"
    assert cli_status(simul_latency.main, [str(acts), "--ref", str(ref), "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["al"] == pytest.approx(5 / 6) and res["al_hyp"] == pytest.approx(1.5) and res["laal"] == pytest.approx(1.5)
    assert res["ap"] == pytest.approx((19 / 24 + 11 / 16) / 2) and res["ref_lengths"] == str(ref)
    assert "LAAL 1.5000" in capsys.readouterr().out
    # the same reference as fairseq-generate T- lines
    gen = tmp_path / "gen.txt"
    gen.write_text("S-1\tx\nT-1\t\u2581d\nH-1\t-1\ty\nS-0\tx\nT-0\t\u2581a \u2581b \u2581c\nH-0\t-1\ty\n")
    assert simul_latency.corpus_latency(read_jsonl(acts), str(acts),
                                        simul_latency.reference_lengths(str(gen)))["laal"] == pytest.approx(1.5)
    # without a reference the three ALs agree
    assert cli_status(simul_latency.main, [str(acts), "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["al"] == res["al_hyp"] == res["laal"] == pytest.approx(1.5)
    # a record whose id has no reference line: one error line naming the actions file and line
    short = tmp_path / "short.seg"
    short.write_text("\u2581a\n")
    assert cli_status(simul_latency.main, [str(acts), "--ref", str(short)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {acts}:1:")


def test_simul_latency_computation_aware(tmp_path):
    """The AL_CA example above as a record with per-token timestamps (seconds since the sentence started)."""
    acts = tmp_path / "a.jsonl"
    acts.write_text(json.dumps({"id": 0, "src_len": 4, "actions": "WRWRRWW", "timestamps": [0.1, 0.3, 0.6, 0.7]})
                    + "\n")
    out = tmp_path / "lat.json"
    assert cli_status(simul_latency.main, [str(acts), "--source-token-seconds", "0.5", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["al_ca"] == pytest.approx(1.0)
    bad = tmp_path / "b.jsonl"
    bad.write_text(json.dumps({"id": 0, "src_len": 4, "actions": "WRWRRWW", "timestamps": [0.1]}) + "\n")
    assert cli_status(simul_latency.main, [str(bad), "--source-token-seconds", "0.5"]) == 2


def test_gu_ch9_report_has_laal_beside_al(tmp_path):
    """The ch. 9 report on one hand-written decode of two sentences (|X| = 4 each):

    sentence 0: W R W R R W W W W -> delays [1, 2, 4, 4, 4, 4], T- line of 1 subword (|Y*| = 1 + ⟨/s⟩ = 2):
                AL (hypothesis rate, 1/γ = 2/3) = 5/3, LAAL = 5/3 (over-long: LAAL is the hypothesis' AL);
    sentence 1: W R W R R W W   -> delays [1, 2, 4, 4],       T- line of 7 subwords (|Y*| = 8):
                AL (γ = 1) = 4/3, LAAL (1/γ = 4/8) = [(1 − 0) + (2 − 1/2) + (4 − 1)] / 3 = 11/6.
    Corpus: AL = (5/3 + 4/3) / 2 = 1.5, LAAL = (5/3 + 11/6) / 2 = 1.75.
    """
    from fairseq_ext.tools.chapters import simul_report as rep

    dec = tmp_path / "decode" / "wait2.greedy"
    dec.mkdir(parents=True)
    tgt = ["\u2581d", " ".join(f"\u2581w{i}" for i in range(7))]
    hyp = ["\u2581d \u2581e \u2581f \u2581g \u2581h", "\u2581w0 \u2581w1 \u2581w2"]
    dec.joinpath("generate-test.txt").write_text("".join(
        f"S-{i}\tsrc\nT-{i}\t{t}\nH-{i}\t-0.5\t{h}\nD-{i}\t-0.5\t{h}\n" for i, (t, h) in enumerate(zip(tgt, hyp))))
    dec.joinpath("actions.jsonl").write_text(json.dumps({"id": 0, "src_len": 4, "actions": "WRWRRWWWW"}) + "\n"
                                             + json.dumps({"id": 1, "src_len": 4, "actions": "WRWRRWW"}) + "\n")
    (tmp_path / "ref.txt").write_text("d\nw0 w1 w2 w3 w4 w5 w6\n")
    out = tmp_path / "out"
    assert rep.main(["report", "--decode-dir", str(tmp_path / "decode"), "--ref", str(tmp_path / "ref.txt"),
                     "--out", str(out), "--remove-bpe", "sentencepiece"]) == 0
    row = json.loads((out / "results.json").read_text())["systems"][0]
    assert row["al"] == pytest.approx(1.5) and row["laal"] == pytest.approx(1.75)
    md = (out / "results.md").read_text()
    assert "| AL | LAAL | DAL |" in md and "| 1.50 | 1.75 |" in md

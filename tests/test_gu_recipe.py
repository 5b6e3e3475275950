"""Gu (2018) ch. 8 recipe: fairseq_ext.tools.chapters.nat_pipeline end to end on the tiny slice (tiny models, a
few updates per stage), the helpers of fairseq_ext.tools.chapters.nat_latency, and the thesis-mode printout of
recipes/gu/ch8.sh."""
import csv
import json
import subprocess
import sys

import pytest
import torch

from fairseq_ext.tools.chapters import nat_latency as latency
from fairseq_ext.tools.chapters import nat_pipeline
from harness import ROOT, env, n_lines, run


# ============================================================================ latency helpers
def test_parse_system_names():
    assert latency.parse_system("ar_b4") == {"name": "ar_b4", "kind": "ar", "beam": 4, "ckpt": "teacher",
                                            "desc": "autoregressive teacher (beam 4)"}
    s = latency.parse_system("nat_ft_npd100")
    assert (s["kind"], s["ckpt"], s["decoding"], s["npd"]) == ("nat", "ft", "argmax", 100)
    s = latency.parse_system("nat_avg")
    assert (s["ckpt"], s["decoding"], s["npd"]) == ("nat", "average", 0)
    s = latency.parse_system("nat_ft_epd10")
    assert (s["ckpt"], s["decoding"], s["npd"], s["epd"], s["desc"]) == ("ft", "epd", 0, 10, "NAT +FT +EPD K=10")
    assert latency.rescored(s) == 10 and latency.rescored(latency.parse_system("nat_npd3")) == 3
    assert latency.rescored(latency.parse_system("nat_ft")) == 0
    for bad in ("ar_b0", "nat_npd0", "nat_epd0", "nat_ft_npd2_epd2", "nat_ft_beam", "transformer"):
        with pytest.raises(ValueError):
            latency.parse_system(bad)


def test_ct2_system_names():
    s = latency.parse_system("ct2_int8_b4")
    assert (s["kind"], s["beam"], s["quantization"], s["ckpt"]) == ("ct2", 4, "int8", "teacher")
    assert latency.parse_system("ct2_fp32_b1")["quantization"] == "float32"
    for bad in ("ct2_int4_b4", "ct2_int8", "ct2_fp32_b0"):
        with pytest.raises(ValueError):
            latency.parse_system(bad)


def test_second_ar_model_system_names():
    s = latency.parse_system("ar2_b4")
    assert (s["kind"], s["beam"], s["ckpt"], s["desc"]) == ("ar", 4, "ar2", "second autoregressive model (beam 4)")
    s = latency.parse_system("ar2_ct2_int8_b1")
    assert (s["kind"], s["beam"], s["ckpt"], s["quantization"]) == ("ct2", 1, "ar2", "int8")
    for bad in ("ar2_ar_b4", "b4", "ar2_b0", "ar2_nat", "ar3_b4"):
        with pytest.raises(ValueError):
            latency.parse_system(bad)


def test_latency_ct2_teacher_matches_fairseq_greedy(tiny_bin, tmp_path):
    """The CTranslate2 systems decode every test sentence once; the float32 export's greedy output is fairseq's
    greedy output (the export's equivalence), at batch 1 and batched; speed-ups are reported against them."""
    from harness import train

    teacher = train(tiny_bin, tmp_path / "teacher")
    out = tmp_path / "lat"
    assert latency.main(["--data", str(tiny_bin), "--teacher", str(teacher), "--systems",
                         "ar_b1,ct2_fp32_b1,ct2_int8_b2", "--batch-sizes", "1", "8", "--b1-max-sentences", "4",
                         "--reference", "ct2_int8_b2", "--out", str(out), "--hyp-dir", str(out / "hyps"),
                         "--post-process", "none", "--warmup", "1"]) == 0
    lat = json.loads((out / "latency.json").read_text())
    n_test = n_lines(tiny_bin / "test.ids")
    for name in ("ar_b1", "ct2_fp32_b1", "ct2_int8_b2"):
        s = lat["systems"][name]
        assert s["b1"]["sentences"] == 4 and s["b8"]["sentences"] == n_test
        assert s["b8"]["speedup_vs_ct2_int8_b2"] > 0
    hyps = {n: [ln.split("\t")[2] for ln in (out / "hyps" / f"{n}.out").read_text().splitlines()
                if ln.startswith("H-")] for n in ("ar_b1", "ct2_fp32_b1", "ct2_int8_b2")}
    assert len(hyps["ct2_int8_b2"]) == n_test
    assert hyps["ct2_fp32_b1"] == hyps["ar_b1"]
    # a second AR model (--ar2; here a copy of the teacher, so its outputs must be the teacher's) in fairseq and
    # CTranslate2, exported into its own folder, speed-ups against every CTranslate2 system
    ar2 = tmp_path / "ar2.pt"
    ar2.write_bytes(teacher.read_bytes())
    out2 = tmp_path / "lat2"
    assert latency.main(["--data", str(tiny_bin), "--teacher", str(teacher), "--ar2", str(ar2), "--systems",
                         "ar_b1,ar2_b1,ar2_ct2_fp32_b1", "--batch-sizes", "8", "--reference", "ar2_ct2_fp32_b1",
                         "--out", str(out2), "--hyp-dir", str(out2 / "hyps"), "--post-process", "none",
                         "--ct2-dir", str(out / "ct2_teacher")]) == 0
    lat2 = json.loads((out2 / "latency.json").read_text())
    assert lat2["checkpoints"]["ar2"] == str(ar2)
    assert lat2["systems"]["ar_b1"]["b8"]["speedup_vs_ar2_ct2_fp32_b1"] > 0
    hyps2 = {n: [ln.split("\t")[2] for ln in (out2 / "hyps" / f"{n}.out").read_text().splitlines()
                 if ln.startswith("H-")] for n in ("ar_b1", "ar2_b1", "ar2_ct2_fp32_b1")}
    assert hyps2["ar2_b1"] == hyps2["ar_b1"] == hyps2["ar2_ct2_fp32_b1"] == hyps["ar_b1"]
    rec2 = json.loads((out / "ct2_teacher" / "ar2_float32" / "fairseq_ext_export.json").read_text())
    assert rec2["checkpoint"] == str(ar2.resolve())
    assert json.loads((out / "ct2_teacher" / "int8" / "fairseq_ext_export.json").read_text())["quantization"] == "int8"
    # a retrained teacher at the same path is exported again (a stale export is never reused)
    rec = out / "ct2_teacher" / "int8" / "fairseq_ext_export.json"
    before = rec.stat().st_mtime
    teacher.touch()
    latency.ct2_translators([latency.parse_system("ct2_int8_b1")], str(teacher), str(tiny_bin), out / "ct2_teacher", 1)
    assert rec.stat().st_mtime > before


def test_npd_sub_batches_cover_the_batch():
    src = torch.arange(7 * 5).view(7, 5)
    sample = {"id": torch.arange(7), "nsentences": 7, "fertility": src.clone(),
              "net_input": {"src_tokens": src, "src_lengths": torch.full((7,), 5)}}
    npd = latency.parse_system("nat_ft_npd10")
    k = latency.npd_chunk(npd, sample, max_candidate_tokens=300)  # 300 // (10 * 2 * 5) = 3
    assert k == 3
    subs = latency.sub_batches(sample, k)
    assert [s["id"].tolist() for s in subs] == [[0, 1, 2], [3, 4, 5], [6]]
    assert torch.equal(torch.cat([s["net_input"]["src_tokens"] for s in subs]), src)
    assert torch.equal(torch.cat([s["fertility"] for s in subs]), src)
    assert latency.npd_chunk(npd, sample, max_candidate_tokens=1) == 1  # never 0
    assert latency.npd_chunk(latency.parse_system("nat_ft"), sample, 1) == 7  # no NPD: no split
    assert latency.npd_chunk(latency.parse_system("nat_ft_epd5"), sample, 300) == 6  # K candidates: 300 // 50
    assert latency.sub_batches(sample, 7) == [sample]


def test_speedups_are_relative_to_the_reference():
    res = {"batch_sizes": [1, 64], "systems": {
        "ar_b4": {"b1": {"ms_per_sentence": 100.0}, "b64": {"ms_per_sentence": 10.0}},
        "ar_b1": {"b1": {"ms_per_sentence": 50.0}, "b64": {"ms_per_sentence": 4.0}},
        "nat": {"b1": {"ms_per_sentence": 5.0}, "b64": {"ms_per_sentence": 2.0}}}}
    latency.summarise(res, "ar_b4")
    assert res["systems"]["nat"]["b1"]["speedup_vs_ar_b4"] == 20.0
    assert res["systems"]["nat"]["b64"]["speedup_vs_ar_b4"] == 5.0
    assert res["systems"]["nat"]["b1"]["speedup_vs_ar_b1"] == 10.0
    assert res["systems"]["ar_b4"]["b1"]["speedup_vs_ar_b4"] == 1.0


def test_pipeline_epd_systems_only_when_asked():
    import argparse

    default = nat_pipeline.systems(argparse.Namespace(npd=[10, 100], epd=[]))
    assert default == ["ar_b4", "ar_b1", "nat", "nat_avg", "nat_ft", "nat_ft_avg", "nat_ft_npd10", "nat_ft_npd100"]
    assert nat_pipeline.systems(argparse.Namespace(npd=[10], epd=[10]))[-2:] == ["nat_ft_npd10", "nat_ft_epd10"]
    assert nat_pipeline.row_name("nat_ft_epd10") == "NAT (+FT + EPD K=10)"
    assert nat_pipeline.row_name("nat_ft_npd100") == "NAT (+FT + NPD s=100)"
    assert nat_pipeline.row_name("nat_ft") == "NAT (+FT)"
    # a second AR model: its fairseq beam-4 row and its fastest-AR row, both fastest decoders get columns
    args = argparse.Namespace(npd=[10], epd=[], fastest_ar="ct2_int8_b4", ar2="ds.pt")
    assert nat_pipeline.systems(args)[-3:] == ["ar2_b4", "ct2_int8_b4", "ar2_ct2_int8_b4"]
    assert nat_pipeline.fastest_systems(args) == ["ct2_int8_b4", "ar2_ct2_int8_b4"]
    assert nat_pipeline.row_name("ar2_b4") == "Autoregressive 6+1 (b=4)"
    assert nat_pipeline.row_name("ar2_ct2_int8_b4") == "Autoregressive 6+1, CTranslate2 int8 (b=4)"


# ============================================================================ recipe printout
def test_ch8_thesis_mode_prints_the_three_settings():
    p = subprocess.run(["bash", "recipes/gu/ch8.sh"], cwd=ROOT, env=env(MODE="thesis"), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for d in ("iwslt16_en_de", "wmt14_en_de", "wmt16_en_ro"):
        assert f"# ---- {d.split('_')[0]}" in out and d in out
    cmds = [line for line in out.splitlines() if line.startswith("+ ")]
    assert len(cmds) == 3 * 13
    assert out.count("--arch nat_fertility_iwslt16") == 2 and out.count("--encoder-embed-dim 278") == 1
    assert "--warmup-updates 746" in out and "--lr 0.0022" in out
    assert out.count("--ft-lambda 0.25") == 3 and out.count("--lr 2e-5 --lr-scheduler fixed") == 3
    assert "--max-tokens 1024" in out  # En-Ro fine-tuning batch
    assert out.count("--npd-samples 100") == 3 and out.count("--beam 4 --lenpen 1") == 3
    assert out.count("--fertility-decoding epd --epd-topk 10 ") == 3 and out.count("--epd-topk 100 ") == 3
    assert out.count("nat_ft_npd100,nat_ft_epd10,nat_ft_epd100") == 3
    assert all("--criterion cross_entropy" in c for c in cmds if "translation_ext --arch" in c)  # no LS


def test_ch8_refuses_an_unknown_set():
    p = subprocess.run(["bash", "recipes/gu/ch8.sh"], cwd=ROOT, env=env(SET="mid"), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "unknown SET 'mid' (full, low)" in p.stderr


# ============================================================================ pipeline end to end
@pytest.mark.slow
def test_pipeline_end_to_end_on_the_tiny_slice(tiny_bin, tmp_path):
    from harness import train

    ar2 = train(tiny_bin, tmp_path / "ar2")   # a second AR model of the same data (the 6+1 model's place)
    out = tmp_path / "gu"
    cmd = [sys.executable, "-m", "fairseq_ext.tools.chapters.nat_pipeline", "--data", tiny_bin, "--out", out,
           "--ar2", ar2, "--ar2-name", "tiny-2",
           "--size", "tiny", "--teacher-max-update", "8", "--budget-min", "0", "--max-update", "6",
           "--ft-max-update", "2", "--npd", "2,3", "--epd", "2", "--b1-max-sentences", "5", "--n-bootstrap", "50",
           "--batch-size", "16"]  # 36 test sentences: 3 batches (the recipe's default is 64)
    p = run(cmd, timeout=300)
    # distilled training targets (test keeps the real references) and eflomal fertilities on every split
    kd = out / "kd"
    assert n_lines(kd / "train.distill.en") == n_lines(tiny_bin / "train.ids")
    assert (kd / "test.es-en.en.bin").read_bytes() == (tiny_bin / "test.es-en.en.bin").read_bytes()
    for split in ("train", "valid", "test"):
        assert (kd / f"{split}.es-en.fert.bin").exists() and (kd / f"{split}.es-en.fert.idx").exists()
    # checkpoints: the NAT starts from the teacher's encoder, the FT from the NAT
    for stage in ("teacher", "nat", "ft"):
        assert (out / stage / "checkpoint_best.pt").exists()
    nat_log = (out / "nat" / "train.log").read_text()
    assert "initialised the encoder from" in nat_log and "| bleu " in nat_log
    ft_log = (out / "ft" / "train.log").read_text()
    assert "| rl " in ft_log and "| bp " in ft_log and "| kd " in ft_log
    # translations of every system for every test sentence
    n_test = n_lines(tiny_bin / "test.ids")
    names = ["ar_b4", "ar_b1", "nat", "nat_avg", "nat_ft", "nat_ft_avg", "nat_ft_npd2", "nat_ft_npd3", "nat_ft_epd2",
             "ar2_b4", "ct2_int8_b4", "ar2_ct2_int8_b4"]   # --fastest-ar auto: CTranslate2 is installed (dev extra)
    for n in names:
        assert sum(line.startswith("D-") for line in (out / "decode" / "hyps" / f"{n}.out").open()) == n_test
    # latency: batch 1 on the 5-sentence subset, batch 16 on the whole test set, speed-ups vs AR b=4
    lat = json.loads((out / "decode" / "latency.json").read_text())
    assert lat["b1_sentences"] == 5 and lat["n_sentences"] == n_test
    for n in names:
        s = lat["systems"][n]
        assert s["b1"]["sentences"] == 5 and s["b16"]["sentences"] == n_test
        assert s["b1"]["ms_per_sentence"] > 0 and s["b16"]["speedup_vs_ar_b4"] > 0
        assert len(lat["per_sentence"][n]) == 5
    assert lat["systems"]["ar_b4"]["b1"]["speedup_vs_ar_b4"] == 1.0
    assert lat["systems"]["nat_ft"]["b16"]["speedup_vs_ct2_int8_b4"] > 0   # against the fastest AR decoder too
    assert lat["systems"]["nat_ft"]["b16"]["speedup_vs_ar2_ct2_int8_b4"] > 0   # and the second AR model's
    png = out / "decode" / "latency_vs_length.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # BLEU / bootstrap / targets
    res = json.loads((out / "results.json").read_text())
    assert set(res["systems"]) == set(names)
    for n in names:
        r = res["systems"][n]
        assert 0 <= r["bleu"] <= 100 and "nrefs:1" in r["bleu_signature"]
        assert (n == "ar_b4") == ("bleu_p" not in r)
    # BLEU(T) is against the teacher's greedy translations
    teacher_b1 = (out / "decode" / "teacher_b1.txt").read_text().splitlines()
    d_lines = [line.rstrip("\n").split("\t", 2)[2] for line in (out / "decode" / "hyps" / "ar_b1.out").open()
               if line.startswith("D-")]
    assert teacher_b1 == d_lines and all(0 <= res["systems"][n]["bleu_t"] <= 100 for n in names)
    assert set(res["targets"]["bleu_gap_npd"]) == {"nat_ft_npd2", "nat_ft_npd3"}
    assert set(res["targets"]["bleu_gap_epd"]) == {"nat_ft_epd2"}
    md = (out / "results.md").read_text()
    assert "| NAT (+FT + NPD s=3) |" in md and "| NAT (+FT + EPD K=2) |" in md and "Targets" in md
    assert "BLEU gap with EPD K=2" in md
    assert "| Autoregressive, CTranslate2 int8 (b=4) |" in md and "speed-up b=16 vs ct2_int8_b4 |" in md
    assert "| Autoregressive tiny-2 (b=4) |" in md and "| Autoregressive tiny-2, CTranslate2 int8 (b=4) |" in md
    assert "speed-up b=16 vs ar2_ct2_int8_b4 |" in md
    assert "| Autoregressive (b=4) |" in p.stdout
    # a rerun reuses every stage
    p = run(cmd, timeout=300)
    assert p.stderr.count("reusing") == 5
    # the NAT to convergence: dev BLEU every 2 updates, patience, curve.csv/.png; an interrupted run resumes
    from argparse import Namespace
    npl = nat_pipeline
    a = Namespace(out=tmp_path / "conv", force=False, size="tiny", budget_min=0, max_update=4, patience=50,
                  validate_every=2, seed=1, threads=1)
    npl.stage_nat(a, kd, out / "teacher" / "checkpoint_best.pt", "sentencepiece")
    d = a.out / "nat"
    first = json.loads((d / "done.json").read_text())
    assert first["curve"]["last_updates"] == 4 and first["curve"]["stopped"] == "limit"
    # interrupted at 4 updates: its interval checkpoint is the last one, no done.json
    (d / "done.json").unlink()
    (d / "checkpoint_last.pt").write_bytes(next(d.glob("checkpoint_*_4.pt")).read_bytes())
    a.max_update = 8
    npl.stage_nat(a, kd, out / "teacher" / "checkpoint_best.pt", "sentencepiece")
    log_text = (d / "train.log").read_text()
    assert "| bleu " in log_text and "Loaded checkpoint" in log_text and "@ 4 updates" in log_text
    rows = list(csv.DictReader(open(d / "curve.csv")))
    assert [int(r["updates"]) for r in rows] == [2, 4, 6, 8]
    assert (d / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    info = json.loads((d / "done.json").read_text())["curve"]
    assert info["points"] == 4 and info["patience"] == 50 and info["best_updates"] in (2, 4, 6, 8)
    assert "patience 50 validations, stopped by its cap" in npl._stop_text({"patience": 50}, {"curve": info})

"""Maruf thesis recipes (recipes/maruf/ch3.sh, recipes/maruf/ch4.sh): the thesis-mode printouts parse with the
real fairseq / plugin parsers (every printed fairseq-train line's --arch is registered, every flag is accepted,
the SGD schedules of ch. 3 give the thesis's learning rates), and ch3.sh runs end to end in its ``DATA=tiny``
mode (stage 1, generated target context, stage 2 of three systems, doc_bcd decoding, scores)."""
import os
import re
import shlex

import pytest

from harness import ROOT, n_lines, run

RECIPES = {c: ROOT / "recipes" / "maruf" / f"{c}.sh" for c in ("ch3", "ch4")}
DOC_CONTEXT_FLAGS = {"--data", "--split", "--src", "--tgt", "--out"}


def thesis_lines(name, **env):
    p = run(["bash", RECIPES[name]], timeout=120, MODE="thesis", **env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("+ ")]
    assert lines and all(ln.startswith(("+ ", "# ")) for ln in p.stdout.splitlines())
    return lines


def parse_line(line):
    """Parse one printed command with the parser of its tool: (tool, parsed args) or (tool, None) when the
    tool has no parser here (mkdir, python -c)."""
    from fairseq import options

    from fairseq_ext.tools.evaluation import contrastive, doc_consistency, score

    toks = shlex.split(line[2:])
    tool = os.path.basename(toks[0])
    args = [str(ROOT / "fairseq_ext") if a == "fairseq_ext" else a for a in toks[1:]]
    if tool == "fairseq-train":
        return tool, options.parse_args_and_arch(options.get_training_parser(), args)
    if tool == "fairseq-generate":
        return tool, options.parse_args_and_arch(options.get_generation_parser(), args)
    if tool == "fairseq-preprocess":
        return tool, options.get_preprocessing_parser().parse_args(args)
    if tool == "python" and args[0] == "-m":
        module = args[1].rsplit(".", 1)[-1]
        if module == "doc_context":  # its parser lives in main(): check the flags
            flags = {a for a in args[2:] if a.startswith("--")}
            assert flags <= DOC_CONTEXT_FLAGS, flags - DOC_CONTEXT_FLAGS
            return module, flags
        parser = {"score": score, "contrastive": contrastive, "doc_consistency": doc_consistency}[module]
        return module, parser.build_parser().parse_args(args[2:])
    return tool, None


def lr_sequence(args, epochs):
    """The learning rate fairseq's scheduler gives at the start of epochs 1..epochs."""
    import torch
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = convert_namespace_to_omegaconf(args)
    opt = optim.build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    sched = optim.lr_scheduler.build_lr_scheduler(cfg.lr_scheduler, opt)
    return [round(sched.step_begin_epoch(e), 10) for e in range(1, epochs + 1)]


def test_ch3_thesis_mode_prints_parsable_commands():
    from fairseq.models import ARCH_MODEL_REGISTRY

    lines = thesis_lines("ch3")
    text = "\n".join(lines)
    for d in ("ted_fr-en", "europarl_et-en", "nc_de-en"):
        assert f"data/maruf/{d}/bin" in text
    assert text.count("--thresholdsrc 5 --thresholdtgt 5") == 3
    assert text.count("--task language_modeling --sample-break-mode eos --arch lstm_lm") == 6
    assert text.count("--srcdict") == 6 and "--testpref data/maruf/nc_de-en/raw/test,data/maruf/nc_de-en/raw/test1" in text
    archs, parsed, stage1, stage2 = [], 0, [], []
    for line in lines:
        tool, args = parse_line(line)
        parsed += args is not None
        if tool == "fairseq-train":
            assert args.arch in ARCH_MODEL_REGISTRY, args.arch
            archs.append(args.arch)
            if args.arch == "rnnsearch_maruf":
                stage1.append(args)
            elif args.task == "doc_translation":
                stage2.append(args)
                assert args.finetune_from_model.endswith("/s_nmt/checkpoint_best.pt")
                both = args.arch.endswith("_both")
                assert args.dropout == (0.5 if both else 0.2) and (not both or args.doc_rnn_dropout == 0.2)
                reads_tgt = args.arch.endswith(("_tgt", "_both")) or args.arch == "ctx_prevtgt_rnn"
                assert (args.doc_target_context == "generated") == reads_tgt, args.arch
                assert (getattr(args, "src_mem_encoder", None) == "rnnlm") == args.arch.endswith(("_src", "_both"))
        if tool == "fairseq-generate" and args.decoding_algorithm == "doc_bcd":
            doc, sent = args.path.split(":")
            assert sent.endswith("/s_nmt/checkpoint_best.pt") and args.doc_iterations == 1 and args.beam == 1
    assert parsed == len([ln for ln in lines if "mkdir" not in ln and " -c " not in ln])
    for integration in ("m2c", "m2o"):
        for memories in ("src", "tgt", "both"):
            assert archs.count(f"docmem_{integration}_{memories}") == 3
    assert archs.count("ctx_prevtgt_rnn") == archs.count("ctx_jean2017_rnn") == archs.count("rnnsearch_maruf") == 3
    assert archs.count("docmem_wang2017") == 3  # Wang et al. (2017), Table 3.4
    assert text.count("--gen-subset test1") == 1 + 9  # NC's second test set: S-NMT and the 9 document models
    # §3.2 / §10.41: stage 1 lr 0.1 halved after the 4th epoch, 10 epochs; stage 2 lr 0.08 x0.9 after the 1st
    assert len(stage1) == 3 and len(stage2) == 3 * 9
    assert lr_sequence(stage1[0], 7) == [0.1, 0.1, 0.1, 0.1, 0.05, 0.025, 0.0125] and stage1[0].max_epoch == 10
    assert lr_sequence(stage2[0], 3) == [0.08, 0.072, 0.0648] and stage2[0].max_epoch == 15


def test_ch3_thesis_mode_without_rnnlms():
    lines = thesis_lines("ch3", CORPORA="ted_fr-en", SRC_MEM="encoder")
    text = "\n".join(lines)
    assert "language_modeling" not in text and "--src-mem-lm" not in text and "ted_fr-en" in text
    assert "europarl" not in text


def test_ch4_thesis_mode_prints_parsable_commands():
    from fairseq.models import ARCH_MODEL_REGISTRY

    lines = thesis_lines("ch4")
    archs, han = [], {}
    for line in lines:
        tool, args = parse_line(line)
        if tool == "fairseq-train":
            assert args.arch in ARCH_MODEL_REGISTRY, args.arch
            archs.append(args.arch)
            if args.arch.startswith("transformer_han_"):
                han[args.arch] = args
        if tool == "fairseq-generate" and "/han_dec/" in args.path:
            # the HAN decoder decodes in document order on its own translations of the previous sentences
            assert args.decoding_algorithm == "doc_bcd" and args.bcd_update == "gauss_seidel" and ":" not in args.path
    assert "transformer_maruf_base" in archs and "transformer_zhang2018" in archs
    assert sorted(han) == ["transformer_han_dec", "transformer_han_enc"]  # Table 4.3's Miculicich et al. rows
    assert han["transformer_han_dec"].doc_target_context == "generated"
    assert han["transformer_han_enc"].doc_target_context != "generated"
    assert all(a.doc_context_mode == "online" for a in han.values())
    assert {a for a in archs if a.startswith("transformer_selattn_")} == {
        f"transformer_selattn_{side}_{kind}" for side in ("enc", "dec")
        for kind in ("sent", "word", "hier_sparsesoft", "hier_sparsesparse")}


@pytest.mark.slow
def test_ch3_tiny_end_to_end(tmp_path):
    """DATA=tiny: ~2-4 min on one thread (about 25 fairseq / tool processes)."""
    run(["bash", RECIPES["ch3"]], timeout=900, DATA="tiny", RUNS=tmp_path, THREADS="1")
    out = tmp_path / "maruf_ch3_tiny"
    bin_dir = out / "data" / "bin"
    for split in ("train", "valid", "test"):  # the stage-1 translations, one per example
        assert n_lines(out / "generated" / f"{split}.en") == n_lines(bin_dir / f"{split}.ids")
    n_test = n_lines(bin_dir / "test.ids")
    for s in ("sentence", "m2c_both", "prev_tgt"):
        assert (out / s / "checkpoint_last.pt").exists() and (out / s / "train.done").exists()  # finished, not killed
        hyps = [ln for ln in (out / s / "generate-test.txt").read_text().splitlines() if ln.startswith("D-")]
        assert len(hyps) == n_test, s
    log = (out / "m2c_both.log").read_text()
    assert "warm start from a sentence checkpoint" in log and "encoder.doc_rnn" in log
    assert "warm start from a sentence checkpoint" in (out / "prev_tgt.log").read_text()
    res = (out / "results.md").read_text()
    assert "paired bootstrap" in res and "m2c_both/generate-test.txt" in res and "prev_tgt:" in res
    assert res.count("### ") == 3 and "METEOR" in res
    assert re.search(r"\| m2c_both \|", res)


@pytest.mark.slow
def test_ch3_tiny_wang2017(tmp_path):
    """DATA=tiny SYSTEMS="sentence wang2017": Wang et al. (2017) warm-starts from the tiny stage-1 model and decodes
    (doc_bcd: no target context, decoded once); scored against `sentence`."""
    run(["bash", RECIPES["ch3"]], timeout=900, DATA="tiny", RUNS=tmp_path, THREADS="1", SYSTEMS="sentence wang2017")
    out = tmp_path / "maruf_ch3_tiny"
    n_test = n_lines(out / "data" / "bin" / "test.ids")
    hyps = [ln for ln in (out / "wang2017" / "generate-test.txt").read_text().splitlines() if ln.startswith("D-")]
    assert len(hyps) == n_test and (out / "wang2017" / "train.done").exists()
    log = (out / "wang2017.log").read_text()
    assert "warm start from a sentence checkpoint" in log and "encoder.summary" in log
    assert "wang2017/generate-test.txt" in (out / "results.md").read_text()


@pytest.mark.slow
def test_ch4_tiny_han(tmp_path):
    """DATA=tiny SYSTEMS="sentence han_enc han_dec": the HAN encoder and decoder warm-start from the tiny stage-1
    model, the decoder on the stage-1 translations (written once for every split) and decoded in chapter order."""
    run(["bash", RECIPES["ch4"]], timeout=900, DATA="tiny", RUNS=tmp_path, THREADS="1", ROUNDS="0",
        SYSTEMS="sentence han_enc han_dec")
    out = tmp_path / "maruf_ch4_tiny"
    bin_dir = out / "data" / "bin"
    for split in ("train", "valid", "test"):
        assert n_lines(out / "generated" / f"{split}.en") == n_lines(bin_dir / f"{split}.ids")
    n_test = n_lines(bin_dir / "test.ids")
    for s in ("sentence", "han_enc", "han_dec"):
        hyps = [ln for ln in (out / s / "generate-test.txt").read_text().splitlines() if ln.startswith("D-")]
        assert len(hyps) == n_test and (out / s / "train.done").exists(), s
    for s in ("han_enc", "han_dec"):
        assert "warm start from a sentence checkpoint" in (out / f"{s}.log").read_text()
    assert "gauss_seidel" in (out / "han_dec.generate.log").read_text()
    res = (out / "results.sentence_han_enc_han_dec.md").read_text()
    assert "han_enc/generate-test.txt" in res and "han_dec/generate-test.txt" in res

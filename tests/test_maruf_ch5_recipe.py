"""Maruf (2019) ch. 5 (Bi-MSMT) recipe, recipes/maruf/ch5.sh: the thesis-mode printout (every fairseq command
parses with fairseq's own parser and carries the §5.7 settings; the helper commands parse with their tools'
parsers), the Bi-MSMT release converter (fairseq_ext.tools.chapters.bimsmt), a bad SYSTEMS name refused, and, marked
slow, the ``DATA=tiny`` run end to end (stage 1, generated target history, six stage-2 systems in two lanes,
online decoding, the Table 5.3 layout report)."""
import json
import os
import re
import shlex

import pytest

from fairseq_ext.tools.chapters import bimsmt
from fairseq_ext.tools.chapters import conversation_report as rep
from harness import ROOT, n_lines, parse_fairseq_command, run, thesis_commands

RECIPE = ROOT / "recipes" / "maruf" / "ch5.sh"
DOC_CONTEXT_FLAGS = {"--data", "--split", "--src", "--tgt", "--out"}


def thesis_lines(**env):
    return thesis_commands(RECIPE, **env)


def parse_line(line):
    """(tool, parsed args) of one printed command, with the parser of its tool (None: cp)."""
    from fairseq_ext.tools.corpora import conversations, corpora

    parsed = parse_fairseq_command(line)
    if parsed is not None:
        return parsed
    toks = shlex.split(line[2:])
    tool = os.path.basename(toks[0])
    args = [str(ROOT / "fairseq_ext") if a == "fairseq_ext" else a for a in toks[1:]]
    if tool == "python" and args[0] == "-m":
        module = args[1].rsplit(".", 1)[-1]
        if module == "doc_context":
            flags = {a for a in args[2:] if a.startswith("--")}
            assert flags <= DOC_CONTEXT_FLAGS, flags - DOC_CONTEXT_FLAGS
            return module, flags
        parser = {"conversations": conversations, "corpora": corpora}[module].build_parser()
        return module, parser.parse_args(args[2:])
    if tool == "python" and args[0] == "examples/multi_speaker_conversations/report.py":
        return "ch5_report", rep.build_parser().parse_args(args[1:])
    assert tool == "cp", line
    return tool, None


def test_thesis_mode_prints_parsable_commands():
    lines = thesis_lines()
    parsed = [parse_line(ln) for ln in lines]
    trains = [a for t, a in parsed if t == "fairseq-train"]
    gens = [a for t, a in parsed if t == "fairseq-generate"]
    # four corpora: 4 RNNLMs, the base and 12 contextual models each
    lms = [a for a in trains if a.arch == "lstm_lm"]
    assert len(lms) == 16 and all(a.task == "language_modeling" for a in lms)
    bases = [a for a in trains if a.arch == "bimsmt_rnn_base"]
    assert len(bases) == 4
    for a in bases:   # §5.7: SGD 0.1, halved after the fifth epoch, 15 epochs
        assert (a.optimizer, a.lr, a.force_anneal, a.lr_shrink, a.max_epoch) == ("sgd", [0.1], 6, 0.5, 15)
        assert a.task == "conversation_translation" and a.criterion == "conversation_cross_entropy"
    ctx = [a for a in trains if a.arch == "bimsmt_rnn"]
    assert len(ctx) == 4 * 10
    for a in ctx:     # §5.7: SGD 0.08, x0.9 after the first epoch, 30 epochs, initialised from the base
        assert (a.optimizer, a.lr, a.force_anneal, a.lr_shrink, a.max_epoch) == ("sgd", [0.08], 2, 0.9, 30)
        assert a.finetune_from_model.endswith("/base/checkpoint_best.pt")
        if a.src_ctx not in (None, "none") or a.dual == "src_tgt_mix":
            assert a.src_sent_encoder == "rnnlm" and len(a.sent_lm.split(",")) == 4
        if a.tgt_ctx == "lang_sent_attn" or a.dual != "none":
            assert a.conv_target_history == "generated" and a.tgt_vectors == "frozen_base"
    assert sorted({a.src_ctx for a in ctx if a.src_ctx}) == ["combined_attn", "direct", "hier_gating", "lang_attn",
                                                             "lang_sent_attn", "none"]
    assert {a.dual for a in ctx} == {"none", "src_tgt", "src_tgt_mix"}
    # InitDec for Europarl, InitDec+AddDec for Subtitles (Table 5.3)
    assert {a.ctx_inject for a in ctx if "subtitles" in a.save_dir and "." not in os.path.basename(a.save_dir)} \
        == {"initdec_adddec"}
    assert {a.ctx_inject for a in ctx if "europarl" in a.save_dir and "." not in os.path.basename(a.save_dir)} \
        == {"initdec"}
    tests = [a for a in gens if a.gen_subset == "test"]
    assert len(tests) == 4 * (11 + 4) and all(a.beam == 1 for a in gens)
    assert {a.conv_context for a in tests} == {"all", "prev_sent", "current_turn", "same_lang_prev_turns",
                                               "other_lang_prev_turns"}
    assert sum(t == "ch5_report" and a.cmd == "from-bimsmt" for t, a in parsed) == 12
    assert sum(t == "ch5_report" and a.cmd == "report" for t, a in parsed) == 4


def test_thesis_mode_corpora_option():
    lines = thesis_lines(CORPORA="europarl_en-de")
    assert lines and all("en-fr" not in ln and "en-ru" not in ln for ln in lines)
    assert sum("fairseq-train" in ln for ln in lines) == 4 + 1 + 10


def test_unknown_system_is_refused(tmp_path):
    p = run(["bash", RECIPE], timeout=60, check=False, DATA="tiny", RUNS=tmp_path, SYSTEMS="base src_lsa dualz")
    assert p.returncode == 2 and "unknown system dualz" in p.stderr
    assert not (tmp_path / "maruf_ch5_tiny" / "stage1").exists()   # refused before any training


def test_bimsmt_release_converter(tmp_path):
    (tmp_path / "en.txt").write_text("<chp>\n<sp>\n<en> Hello .\n<en> Thanks .\n<sp>\n<2en> Yes .\n<chp>\n<sp>\n"
                                     "<2en> No .\n<sp>\n<en> Why ?\n", encoding="utf-8")
    (tmp_path / "de.txt").write_text("<chp>\n<sp>\nHallo .\nDanke .\n<sp>\nJa .\n<chp>\n<sp>\nNein .\n<sp>\n"
                                     "Warum ?\n", encoding="utf-8")
    st = bimsmt.convert_bimsmt(str(tmp_path / "en.txt"), str(tmp_path / "de.txt"), "de", str(tmp_path / "out" / "dev"))
    assert st == {"conversations": 2, "sentences": 5, "en_source": 3}
    out = tmp_path / "out"
    assert (out / "dev.src").read_text().splitlines() == ["Hello .", "Thanks .", "Ja .", "Nein .", "Why ?"]
    assert (out / "dev.tgt").read_text().splitlines() == ["Hallo .", "Danke .", "Yes .", "No .", "Warum ?"]
    conv = [ln.split("\t") for ln in (out / "dev.conv").read_text().splitlines()]
    assert [c[:3] for c in conv] == [["dev.1", "en", "sp1"], ["dev.1", "en", "sp1"], ["dev.1", "de", "sp2"],
                                     ["dev.2", "de", "sp1"], ["dev.2", "en", "sp2"]]
    from fairseq_ext.data.conversations import ConversationIndex
    assert len(ConversationIndex.from_file(str(out / "dev.conv"), ("en", "de"))) == 5
    (tmp_path / "bad.txt").write_text("<chp>\n<sp>\nHallo .\n", encoding="utf-8")
    with pytest.raises(bimsmt.Error, match="line-aligned"):
        bimsmt.convert_bimsmt(str(tmp_path / "en.txt"), str(tmp_path / "bad.txt"), "de", str(tmp_path / "x"))


def test_train_cost_from_a_log(tmp_path):
    log = tmp_path / "t.log"
    log.write_text(
        "x | INFO | train_inner | epoch 001:  10 / 110 loss=9.1, num_updates=10, train_wall=40, wall=45\n"
        "x | INFO | train | epoch 001 | loss 9 | num_updates 110 | lr 0.001 | train_wall 500 | wall 530\n"
        "x | INFO | valid | epoch 002 | valid on 'valid' subset | loss 8 | num_updates 220\n"
        "x | INFO | train | epoch 002 | loss 8 | num_updates 220 | lr 0.001 | train_wall 520 | wall 1080\n",
        encoding="utf-8")
    c = rep.train_cost(str(log))
    assert c["updates"] == 220 and c["s_per_update"] == pytest.approx(1020 / 220, abs=1e-3)
    assert c["wall_s_per_update"] == pytest.approx(1080 / 220, abs=1e-3)


# ============================================================================ tiny end to end
@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    """DATA=tiny: ~2-5 min on one thread next to other work."""
    run(["bash", RECIPE], timeout=1200, DATA="tiny", RUNS=tmp_path, THREADS="1")
    out = tmp_path / "maruf_ch5_tiny"
    n_test = n_lines(ROOT / "tests" / "data" / "conversations" / "test.conv")
    systems = ("base", "src_lsa", "src_la", "tgt", "dual", "dual_mix")
    for s in systems:
        assert (out / s / "train.done").exists() and (out / s / "checkpoint_best.pt").exists()
        text = (out / "decode" / s / "generate-test.txt").read_text()
        assert sorted(int(m) for m in re.findall(r"^H-(\d+)\t", text, re.M)) == list(range(n_test))
    assert n_lines(out / "generated" / "train.tgt") == n_lines(ROOT / "tests" / "data" / "conversations" / "train.conv")
    res = json.loads((out / "results.json").read_text())
    assert res["systems"] == list(systems)
    assert set(res["table"]["dual"]) == {"overall", "en->es", "es->en"}
    assert all(res["costs"][s]["updates"] == 4 for s in systems)
    assert set(json.loads((out / "decode_speed.json").read_text())["summary"]) == set(systems)
    md = (out / "results.md").read_text()
    assert "Table 5.3 layout" in md and "| dual_mix (Dual Context Src-Tgt-Mix) |" in md and "24.7 / 21.8 / 27.7" in md
    assert "decode time × first" in md and "conversations score" in md
    # the training-cost stage: every context model against the base, interleaved on the same batches
    cost = json.loads((out / "cost" / "speed.json").read_text())
    assert list(cost["configs"]) == [f"maruf5_{s}" for s in systems]
    assert cost["configs"]["maruf5_base"]["ratios"] == [1.0]
    assert "training time per target word" in md and "| maruf5_dual_mix |" in md

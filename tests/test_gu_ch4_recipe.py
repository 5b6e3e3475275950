"""Gu (2018) ch. 4 (SEG-NMT) recipe and analyses: ``fairseq_ext.tools.analysis.tm_analysis`` on hand-made inputs (the
fuzzy bins partition the sentences and their BLEU is sacreBLEU's on the subset, the K sweep's average pairs,
the gate examples, the §4.5 split), the thesis-mode printout of ``recipes/gu/ch4.sh`` (every command parses
with its own parser: fairseq's with ``--user-dir fairseq_ext``, the tools' ``build_parser``) and, marked slow,
the recipe's ``DATA=tiny`` run end to end."""
import json
import os
import random
import shlex

import pytest
import sacrebleu

from fairseq_ext.data.translation_memory import TMEntry, write_tm
from fairseq_ext.tools.analysis import tm_analysis as ta
from fairseq_ext.tools.analysis import tm_bleu, tm_gate, tm_split
from fairseq_ext.tools.common import ToolError
from fairseq_ext.tools.tm.retrieval import parse_bins

from harness import ROOT, n_lines, parse_fairseq_command, run, thesis_commands

RECIPE = ROOT / "recipes" / "gu" / "ch4.sh"
PNG = b"\x89PNG\r\n\x1a\n"

REFS = ["the king went to the city", "and he said unto them", "the word of the lord came to me",
        "in the beginning god created the heaven", "blessed are the poor in spirit", "the lord is my shepherd",
        "let there be light", "he went up into the mountain"]
HYPS = {"NMT": ["the king went to a city", "he said to them", "the word of god came", "in the start god made heaven",
                "blessed are poor people", "the lord is a shepherd", "let be light", "he went into the mountains"],
        "SEG": ["the king went to the city", "and he said unto them", "the word of the lord came to him",
                "in the beginning god made the heaven", "blessed are the poor", "the lord is my shepherd",
                "let there be a light", "he went up to the mountain"]}
# top-1 fuzzy of each sentence (None: no candidate -> 0); edges 0.3 / 0.7 / 1.0 test the bin boundaries
TOP1 = [0.1, 0.3, 0.45, 0.5, 0.7, 1.0, None, 0.69]


def _entries(top1=TOP1):
    out = []
    for i, f in enumerate(top1):
        if f is None:
            out.append(TMEntry([], [], []))
        else:
            out.append(TMEntry([i, i + 1, i + 2][: 1 + i % 3], [f, f / 2, f / 3][: 1 + i % 3], [i, i + 2][: 1 + i % 2]))
    return out


def _side(tmp_path, entries=None, split="test"):
    entries = entries or _entries()
    write_tm(str(tmp_path), split, entries, {"memory_lines": 20, "exclude_self": False})
    return str(tmp_path / f"{split}.tm.jsonl")


def _lines(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def _generate_output(path, hyps):
    """A fairseq-generate style file, sentences in a shuffled order (batch order)."""
    order = list(range(len(hyps)))
    random.Random(3).shuffle(order)
    text = "".join(f"S-{i}\tsrc {i}\nT-{i}\t{REFS[i]}\nH-{i}\t-0.5\t{hyps[i]}\nD-{i}\t-0.5\t{hyps[i]}\n" for i in order)
    path.write_text(text + "Generate test with beam=5\n", encoding="utf-8")
    return str(path)


# ============================================================================ Fig. 4.3
def test_bins_partition_the_sentences_and_bleu_per_bin_is_sacrebleu_on_the_subset():
    res = tm_bleu.fuzzy_bins(_entries(), [REFS], HYPS)
    assert [b["bin"] for b in res["bins"]] == ["[0,0.3)", "[0.3,0.5)", "[0.5,0.7)", "[0.7,1]"]
    members = {0: [0, 6], 1: [1, 2], 2: [3, 7], 3: [4, 5]}   # 0.3 -> [0.3,0.5), 0.69 -> [0.5,0.7), 1.0 -> last
    assert [b["n"] for b in res["bins"]] == [len(members[j]) for j in range(4)]
    assert sum(b["n"] for b in res["bins"]) == len(REFS) == res["n_sentences"]
    for j, b in enumerate(res["bins"]):
        for name, hyps in HYPS.items():
            expect = sacrebleu.corpus_bleu([hyps[i] for i in members[j]], [[REFS[i] for i in members[j]]])
            assert b["systems"][name]["bleu"] == pytest.approx(expect.score)
    for name, hyps in HYPS.items():
        assert res["all"][name]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [REFS]).score)
    assert res["examples_without_candidate"] == 1 and res["bins"][0]["mean_fuzzy"] == pytest.approx(0.05)
    md = tm_bleu.format_fuzzy_bins(res)
    assert "| [0.7,1] | 2 |" in md and "Δ SEG − NMT" in md and "| all | 8 |" in md


def test_bins_empty_bin_and_bins_that_do_not_cover_are_refused():
    res = tm_bleu.fuzzy_bins(_entries(), [REFS], HYPS, [0.0, 0.2, 0.25, 1.0])
    assert res["bins"][1]["n"] == 0 and res["bins"][1]["systems"]["NMT"]["bleu"] is None
    assert "| [0.2,0.25) | 0 | - | - | - |" in tm_bleu.format_fuzzy_bins(res)
    with pytest.raises(ToolError, match="outside the bins"):
        tm_bleu.fuzzy_bins(_entries(), [REFS], HYPS, [0.2, 1.0])
    with pytest.raises(ToolError, match="increasing"):
        parse_bins("0,0.5,0.5,1")
    assert tm_bleu.bin_of(1.0, [0, 0.5, 1]) == 1 and tm_bleu.bin_of(0.5, [0, 0.5, 1]) == 1 and tm_bleu.bin_of(1.01, [0, 1]) is None


def test_fuzzy_bins_cli_reads_generate_output_and_writes_json_md_png(tmp_path, capsys):
    side = _side(tmp_path)
    ref = _lines(tmp_path / "test.en", REFS)
    nmt = _generate_output(tmp_path / "nmt.txt", HYPS["NMT"])
    seg = _lines(tmp_path / "seg.txt", HYPS["SEG"])   # plain text works too
    out = tmp_path / "out"
    assert ta.main(["fuzzy-bins", "--side", side, "--ref", ref, "--hyp", f"NMT={nmt}", "--hyp", f"SEG-NMT={seg}",
                    "--json", str(out / "b.json"), "--md", str(out / "b.md"), "--plot", str(out / "b.png")]) == 0
    res = json.loads((out / "b.json").read_text())
    assert res["systems"] == ["NMT", "SEG-NMT"] and [b["n"] for b in res["bins"]] == [2, 2, 2, 2]
    assert res["bins"][3]["systems"]["SEG-NMT"]["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu([HYPS["SEG"][4], HYPS["SEG"][5]], [[REFS[4], REFS[5]]]).score)
    assert (out / "b.png").read_bytes()[:8] == PNG
    assert (out / "b.md").read_text() in capsys.readouterr().out + "\n"
    # a side file of another split: one clear error
    with pytest.raises(ToolError, match="reference lines"):
        ta.main(["fuzzy-bins", "--side", side, "--ref", _lines(tmp_path / "short.en", REFS[:5]),
                 "--hyp", f"NMT={nmt}"])
    with pytest.raises(ToolError, match="NAME=FILE"):
        ta.main(["fuzzy-bins", "--side", side, "--ref", ref, "--hyp", nmt])


# ============================================================================ Fig. 4.4
def test_pairs_used_follow_the_task_selection():
    e = [TMEntry([1, 2, 3], [0.9, 0.5, 0.1], [1, 3]), TMEntry([4], [0.2], [4]), TMEntry([], [], [])]
    assert tm_bleu.pairs_used(e, 1) == pytest.approx(2 / 3)
    assert tm_bleu.pairs_used(e, 2) == pytest.approx(3 / 3)
    assert tm_bleu.pairs_used(e, 16) == pytest.approx(4 / 3)
    assert tm_bleu.pairs_used(e, None) == pytest.approx(3 / 3)
    assert tm_bleu.pairs_used(e, 16, max_k=2) == pytest.approx(3 / 3) and tm_bleu.pairs_used(e, None, max_k=1) == 2 / 3


def test_k_sweep_cli_table_and_plot(tmp_path):
    side = _side(tmp_path)
    ref = _lines(tmp_path / "test.en", REFS)
    nmt = _generate_output(tmp_path / "nmt.txt", HYPS["NMT"])
    seg = _generate_output(tmp_path / "seg.txt", HYPS["SEG"])
    half = _lines(tmp_path / "half.txt", HYPS["SEG"][:4] + HYPS["NMT"][4:])
    out = tmp_path / "k"
    args = ["k-sweep", "--side", side, "--ref", ref, "--hyp", f"adaptive={seg}", "--hyp", f"4={half}",
            "--hyp", f"1={nmt}", "--hyp", f"2={seg}", "--baseline", f"NMT={nmt}", "--json", str(out / "k.json"),
            "--md", str(out / "k.md"), "--plot", str(out / "k.png")]
    assert ta.main(args) == 0
    res = json.loads((out / "k.json").read_text())
    assert [p["name"] for p in res["points"]] == ["1", "2", "4", "adaptive"]   # K order, adaptive last
    entries = _entries()
    assert res["points"][3]["avg_pairs"] == pytest.approx(sum(len(e.adaptive) for e in entries) / len(entries))
    assert res["points"][2]["avg_pairs"] == pytest.approx(sum(len(e.ids) for e in entries) / len(entries))
    seg_bleu = sacrebleu.corpus_bleu(HYPS["SEG"], [REFS]).score
    nmt_bleu = sacrebleu.corpus_bleu(HYPS["NMT"], [REFS]).score
    assert res["points"][1]["bleu"] == pytest.approx(seg_bleu) and res["baseline"]["bleu"] == pytest.approx(nmt_bleu)
    assert res["points"][0]["delta_bleu"] == pytest.approx(0.0) and res["best_topk"] == "2"
    md = (out / "k.md").read_text()
    assert "| adaptive (Alg. 1) |" in md and "| K = 4 |" in md and "| NMT (no memory) | 0 |" in md
    assert (out / "k.png").read_bytes()[:8] == PNG
    with pytest.raises(ToolError, match="by its K"):
        ta.main(["k-sweep", "--side", side, "--ref", ref, "--hyp", f"all={seg}"])


# ============================================================================ Fig. 4.5
def test_gate_examples_pick_the_highest_fuzzy_and_render_zeta(tmp_path, capsys):
    recs = []
    for i, f in enumerate([0.2, 0.9, 0.5]):
        for rank in (0, 1):
            recs.append({"id": i, "rank": rank, "tokens": ["▁the", "▁king", "</s>"], "gate": [0.1, 0.8 - rank, 0.3],
                         "slot_token": [None, "▁king", "▁."], "tm_lines": [2, 5], "tm_fuzzy": [f, 0.1]})
    assert [r["id"] for r in tm_gate.gate_examples(recs, n=2)] == [1, 2]
    assert [r["id"] for r in tm_gate.gate_examples(recs, ids=[0])] == [0] and tm_gate.gate_examples(recs, ids=[0])[0]["rank"] == 0
    with pytest.raises(ToolError, match="no exported hypothesis"):
        tm_gate.gate_examples(recs, ids=[7])
    export = tmp_path / "zeta.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    mem = _lines(tmp_path / "train.en", [f"memory line {i}" for i in range(8)])
    assert ta.main(["gate", "--export", str(export), "--n", "1", "--memory-tgt", mem, "--ref",
                    _lines(tmp_path / "r.en", REFS[:3]), "--md", str(tmp_path / "g.md")]) == 0
    text = (tmp_path / "g.md").read_text()
    assert "**sentence 1** (top-1 fuzzy 0.90; 2 pairs; mean ζ 0.400)" in text
    assert "memory line 2" in text and REFS[1] in text
    assert "**▁king(0.80)**←▁king" in text and "▁the(0.10)" in text


# ============================================================================ §4.5 split
def test_split_corpus_samples_dev_test_then_applies_the_length_limits(tmp_path):
    n = 60
    a = [f"sentence number {i} " + "w " * (i % 9) for i in range(n)]
    b = [f"phrase {i} " + "x " * (i % 7) for i in range(n)]
    a[3], b[10], a[11] = "--- ...", "", "%%"  # special characters only / empty: dropped first
    _lines(tmp_path / "all.en", [x.strip() for x in a])
    _lines(tmp_path / "all.fr", [x.strip() for x in b])
    out = tmp_path / "split"
    st = tm_split.split_corpus(str(tmp_path / "all"), ["en", "fr"], str(out), dev=5, test=6, max_len_train=9,
                         max_len_test=100, seed=1)
    assert st["special_or_empty_dropped"] == 3 and st["splits"]["valid"]["sampled"] == 5
    assert st["splits"]["test"]["kept"] == 6 and st["splits"]["train"]["sampled"] == n - 3 - 11
    raw = out / "raw"
    ids = {s: (raw / f"{s}.ids").read_text().split() for s in ("train", "valid", "test")}
    assert not set(ids["train"]) & set(ids["valid"]) and not set(ids["valid"]) & set(ids["test"])
    assert not {"line4", "line11", "line12"} & set(sum(ids.values(), []))
    train_en = (raw / "train.en").read_text().splitlines()
    assert len(train_en) == st["splits"]["train"]["kept"] < st["splits"]["train"]["sampled"]
    assert all(len(x.split()) <= 9 for x in train_en)
    for s in ("train", "valid", "test"):   # the input lines, aligned, in the corpus order
        nums = [int(x[4:]) for x in ids[s]]
        assert nums == sorted(nums)
        assert (raw / f"{s}.fr").read_text().splitlines() == [b[i - 1].strip() for i in nums]
    assert json.loads((out / "split.json").read_text()) == st
    again = tm_split.split_corpus(str(tmp_path / "all"), ["en", "fr"], str(tmp_path / "again"), dev=5, test=6,
                            max_len_train=9, max_len_test=100, seed=1)
    assert again["splits"] == st["splits"]
    assert (tmp_path / "again" / "raw" / "test.ids").read_text() == (raw / "test.ids").read_text()
    with pytest.raises(ToolError, match="more than"):
        tm_split.split_corpus(str(tmp_path / "all"), ["en", "fr"], str(tmp_path / "x"), dev=50, test=50)


# ============================================================================ thesis printout
def thesis_lines(**env):
    return thesis_commands(RECIPE, **env)


def parse_line(line):
    """(tool, parsed args) with the tool's own parser."""
    from fairseq_ext.tools.corpora import corpora
    from fairseq_ext.tools.evaluation import score
    from fairseq_ext.tools.tm import retrieval

    fairseq_command = parse_fairseq_command(line)
    if fairseq_command:
        return fairseq_command
    toks = shlex.split(line[2:])
    tool = os.path.basename(toks[0])
    args = [str(ROOT / "fairseq_ext") if a == "fairseq_ext" else a for a in toks[1:]]
    if tool == "fairseq-ext-tm":
        return "tm " + args[0], retrieval.build_parser().parse_args(args)
    assert tool == "python" and args[0] == "-m", line
    module = args[1].rsplit(".", 1)[-1]
    parser = {"tm_analysis": ta, "corpora": corpora, "score": score}[module].build_parser()
    return f"{module} {args[2]}", parser.parse_args(args[2:])


def test_thesis_mode_prints_parsable_commands():
    from fairseq.models import ARCH_MODEL_REGISTRY

    lines = thesis_lines()
    parsed = [parse_line(ln) for ln in lines]
    by = {}
    for tool, args in parsed:
        by.setdefault(tool, []).append(args)
    # data (§4.5): 3 pairs split, BPE 20k per language, binarized per direction (6), one index per language
    assert len(by["tm_analysis split-corpus"]) == 3
    assert all((a.dev, a.test, a.max_len_train, a.max_len_test, a.tokenize) == (3000, 3000, 80, 100, "moses")
               for a in by["tm_analysis split-corpus"])
    assert all(a.method == "subword-nmt" and a.vocab_size == 20000 and not a.joint for a in by["corpora bpe"])
    assert len(by["corpora binarize"]) == 6 and not any(a.joined for a in by["corpora binarize"])
    assert len(by["tm build-index"]) == 6
    retrieve = by["tm retrieve"]
    assert len(retrieve) == 18 and all(a.candidates == 100 and a.keep == 16 for a in retrieve)
    assert [a.exclude_self for a in retrieve] == [a.split == "train" for a in retrieve]
    assert all(a.query == a.memory_src for a in retrieve if a.split == "train")
    # training (§4.3.1, Table 4.2): NMT and SEG-NMT K=2 everywhere, deep fusion and COPYNET on En-Fr both ways
    trains = by["fairseq-train"]
    archs = [a.arch for a in trains]
    assert all(a in ARCH_MODEL_REGISTRY for a in archs)
    assert archs.count("rnnsearch_jrc") == 6 and archs.count("seg_nmt_jrc") == 6 + 2 and archs.count("seg_copynet") == 2
    for a in trains:
        assert (a.optimizer, a.lr, a.clip_norm, a.batch_size, a.patience) == ("adam", [0.001], 1.0, 32, 5)
        if a.arch == "rnnsearch_jrc":
            assert a.task == "translation_decoding" and a.criterion == "cross_entropy"
        else:
            assert a.task == "seg_translation" and a.tm_topk == 2 and a.tm_selection == "topk"
            assert a.criterion == ("copynet_cross_entropy" if a.arch == "seg_copynet" else "seg_nmt_cross_entropy")
    deep = [a for a in trains if getattr(a, "fusion", None) == "deep"]
    assert sorted(a.save_dir for a in deep) == [f"checkpoints/gu_ch4/{d}/seg_nmt_deep" for d in ("en-fr", "fr-en")]
    # decoding: beam 5, length-normalised; Fr->En sweep K = 1, 4, 8, 16 + adaptive on dev and test; zeta export
    gens = by["fairseq-generate"]
    assert all(a.beam == 5 and a.lenpen == 1 and a.tokenizer == "moses" for a in gens)
    assert len(gens) == 2 * (6 + 6 + 2 + 2) + 2 * 5
    sweep = [a for a in gens if a.task == "seg_translation" and (a.tm_topk != 2 or a.tm_selection == "adaptive")]
    assert sorted((a.gen_subset, a.tm_selection, a.tm_topk) for a in sweep if a.tm_selection == "adaptive") == \
        [("test", "adaptive", 2), ("valid", "adaptive", 2)]
    assert sorted(a.tm_topk for a in sweep if a.tm_selection == "topk") == [1, 1, 4, 4, 8, 8, 16, 16]
    assert all("/fr-en/seg_nmt_k2/" in a.path for a in sweep)
    exports = [a for a in gens if getattr(a, "tm_export", None)]
    assert len(exports) == 1 and exports[0].gen_subset == "valid" and "/fr-en/" in exports[0].path
    # scores: tokenised BLEU and sacreBLEU against NMT, per direction and split; the figures on Fr->En
    compares = by["score compare"]
    assert len(compares) == 6 * 2 * 2 and sum(a.tokenised for a in compares) == 12
    assert all("/nmt/" in a.baseline and a.system[0].endswith((".tok", ".txt")) for a in compares)
    assert all(a.ref[0].split("/")[-2] == ("tok" if a.tokenised else "raw") for a in compares)
    assert len(by["tm_analysis k-sweep"]) == len(by["tm_analysis fuzzy-bins"]) == 2
    k = by["tm_analysis k-sweep"][0]
    assert [h.split("=")[0] for h in k.hyp] == ["2", "1", "4", "8", "16", "adaptive"] and k.tokenised
    assert k.baseline.startswith("NMT=") and k.plot.endswith(".png")
    assert len(by["tm_analysis gate"]) == 1 and len(by["tm tm-baseline"]) == 6 * 4


def test_thesis_mode_options():
    lines = thesis_lines(PAIRS="en-de", TRAIN_KS="1 2", FIG_DIRS="de-en")
    archs = [parse_line(ln)[1].arch for ln in lines if "fairseq-train" in ln]
    assert archs == ["rnnsearch_jrc", "seg_nmt_jrc", "seg_nmt_jrc"] * 2   # no deep / COPYNET outside En-Fr
    text = "\n".join(lines)
    assert "/de-en/seg_nmt_k1" in text and "en-fr" not in text and text.count("k-sweep") == 2


# ============================================================================ tiny end to end
@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    """DATA=tiny: ~4-6 min on one thread next to other work (about 30 fairseq / tool processes)."""
    p = run(["bash", RECIPE], timeout=1200, DATA="tiny", RUNS=tmp_path, THREADS="1")
    out = tmp_path / "gu_ch4_tiny"
    bin_dir = out / "data" / "bin"
    n_test = n_lines(bin_dir / "test.ids")
    for split in ("train", "valid", "test"):
        assert n_lines(bin_dir / f"{split}.tm.jsonl") == n_lines(bin_dir / f"{split}.ids")
    assert json.loads((bin_dir / "train.tm.meta.json").read_text())["exclude_self"] is True
    assert n_lines(out / "tm" / "test.txt") == n_test
    # stage 2: warm starts (not seg_copynet: from scratch for stage-1 + stage-2 updates)
    for s in ("seg_nmt", "seg_nmt_deep"):
        assert "warm start from a sentence checkpoint: copied" in (out / f"{s}.log").read_text()
    cn = (out / "seg_copynet.log").read_text()
    assert "warm start" not in cn and "num_updates 18" in cn
    decodes = [("nmt", "k2"), ("seg_nmt_deep", "k2"), ("seg_copynet", "k2")] + \
        [("seg_nmt", t) for t in ("k1", "k2", "k4", "k8", "k16", "adaptive")]
    for name, tag in decodes:
        text = (out / name / tag / "generate-test.txt").read_text()
        assert sum(ln.startswith("D-") for ln in text.splitlines()) == n_test, (name, tag)
    assert "adaptive selection" in (out / "seg_nmt" / "adaptive.log").read_text()
    zeta = [json.loads(ln) for ln in (out / "seg_nmt" / "zeta_test.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in zeta if r["rank"] == 0) == list(range(n_test))
    # scores and figures
    cmp = json.loads((out / "compare.json").read_text())
    assert cmp["baseline"]["name"].endswith("nmt/k2/generate-test.txt") and len(cmp["systems"]) == 4
    for png in ("fig4_3_fuzzy_bins.png", "fig4_4_k_sweep.png", "fuzzy_hist.png"):
        assert (out / png).read_bytes()[:8] == PNG, png
    bins = json.loads((out / "fig4_3_fuzzy_bins.json").read_text())
    assert sum(b["n"] for b in bins["bins"]) == n_test and bins["systems"][:3] == ["NMT", "TM", "SEG-NMT"]
    sweep = json.loads((out / "fig4_4_k_sweep.json").read_text())
    assert [pt["name"] for pt in sweep["points"]] == ["1", "2", "4", "8", "16", "adaptive"]
    speed = json.loads((out / "decode_speed.json").read_text())
    assert speed["summary"]["seg_nmt"]["ratio_median"] > 0
    res = (out / "results.md").read_text()
    for part in ("Table 4.2", "paired bootstrap", "Fig. 4.3", "Fig. 4.4", "Fig. 4.5", "Decoding time",
                 "| SEG-NMT (seg_nmt) | seg_nmt_tiny |", "| adaptive (Alg. 1) |", "ζ_t per output token"):
        assert part in res, part
    assert "results:" in p.stdout

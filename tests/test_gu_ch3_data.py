"""Gu (2018) ch. 3 (CopyNet) offline data: the synthetic copy-rule task (§3.3.1, Tables 3.1/3.2) and the
pattern-filling dialogue sets DS-I / DS-II (§3.3.3, Table 3.5) -- fairseq_ext.tools.corpora.synthetic_rules and
fairseq_ext.tools.corpora.dialogue_patterns.

Generation is deterministic for a seed, consistent with the published rule / pattern file, balanced over
the rule types, and DS-II keeps the test fillers out of training; the scorers give Table 3.2 / 3.5 from
plain or fairseq-generate (n-best) output; bad input is one ``error: FILE:LINE: message`` line, exit 2.
CPU only, small sizes (well under a second each, plus one subprocess of the real CLI).
"""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_ext.tools.corpora import dialogue_accuracy, dialogue_data as dd, dialogue_patterns as dp
from fairseq_ext.tools.corpora import synthetic_rules as sr
from fairseq_ext.tools.common import ToolError, cli_status, read_lines

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "valid", "test")
SMALL = dict(rules=10, train_per_rule=6, valid_per_rule=1, test_per_rule=4)


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if not p.name.startswith(".")}


def _write_lines(path, lines) -> str:
    Path(path).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def _gen_output(refs, wrong=(), order=None, nbest=1) -> str:
    """fairseq-generate-like output in a shuffled order; ids in ``wrong`` get a bad 1-best and (with
    nbest > 1) the golden one second."""
    order = list(range(len(refs))) if order is None else order
    out = []
    for i in order:
        out += [f"S-{i}\tsrc {i}", f"T-{i}\t{refs[i]}"]
        hyps = ["wrong output", refs[i]] if i in wrong else [refs[i], "other output"]
        for k in range(nbest):
            h = hyps[k] if k < len(hyps) else f"filler {k}"
            out += [f"H-{i}\t-0.{k + 1}\t{h}", f"D-{i}\t-0.{k + 1}\t{h}", f"P-{i}\t-0.1 -0.2"]
    return "\n".join(out) + "\n"


def _err_line(capsys) -> str:
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    out = tmp_path_factory.mktemp("syn") / "data"
    sr.generate(str(out), seed=7, **SMALL)
    return out


@pytest.fixture(scope="module")
def dialogue(tmp_path_factory):
    base = tmp_path_factory.mktemp("dlg")
    for proto in ("ds1", "ds2"):
        dd.generate(str(base / proto), proto, seed=3, train=400, valid=50, test=200)
    return base


# =========================================================================== synthetic rules
def test_thesis_defaults_and_scale():
    # §3.3.1: vocabulary 1,000, 200 rules x 200 instances split 50/50, fillers of 1~15 symbols, rules of 5~20
    assert sr.DEFAULTS["vocab_size"] == 1000 and sr.DEFAULTS["rules"] == 200
    assert sr.DEFAULTS["train_per_rule"] == sr.DEFAULTS["test_per_rule"] == 100
    assert sr.DEFAULTS["var_len"] == (1, 15) and sr.DEFAULTS["src_len"] == (5, 20)
    assert [sr.TYPE_LABELS[t] for t in sr.RULE_TYPES] == ["x→∅", "x→x", "x→xx", "xy→x", "xy→xy"]
    assert sr.symbols(1000)[:2] == ["000", "001"] and sr.symbols(1000)[-1] == "999"
    assert sr._scaled(None, 200, 0.1, 5) == 20 and sr._scaled(None, 100, 0.1) == 10
    assert sr._scaled(3, 200, 0.1, 5) == 3  # an explicit size wins over --scale


def test_synthetic_same_seed_same_files(syn, tmp_path):
    again = tmp_path / "again"
    sr.generate(str(again), seed=7, **SMALL)
    assert _files(syn) == _files(again)
    other = tmp_path / "other"
    sr.generate(str(other), seed=8, **SMALL)
    assert _files(other)["train.src"] != _files(syn)["train.src"]


def test_synthetic_counts_per_type_and_consistency(syn):
    meta = json.loads((syn / "synthetic_rules.json").read_text())
    rules = sr.read_rules(str(syn / "rules.tsv"))
    assert len(rules) == 10
    assert meta["rules_per_type"] == {t: 2 for t in sr.RULE_TYPES}
    assert [r["type"] for r in rules].count("x_xx") == 2
    by_id = {r["id"]: r for r in rules}
    assert len({tuple(r["src"]) for r in rules}) == 10  # distinct source patterns
    sources = set()
    for sp, per_rule in (("train", 6), ("valid", 1), ("test", 4)):
        src = read_lines(syn / f"{sp}.src")
        tgt = read_lines(syn / f"{sp}.tgt")
        info = read_lines(syn / f"{sp}.rule")
        assert len(src) == len(tgt) == len(info) == 10 * per_rule
        counts = {t: 0 for t in sr.RULE_TYPES}
        for s, t, line in zip(src, tgt, info):
            rid, rtype, fillers = line.split("\t")
            rule = by_id[rid]
            assert rule["type"] == rtype
            counts[rtype] += 1
            fillers = {v: f.split() for v, f in json.loads(fillers).items()}
            assert set(fillers) == set(sr.RULE_TYPES[rtype][0])
            assert all(1 <= len(f) <= 15 for f in fillers.values())
            assert s.split() == sr.fill(rule["src"], fillers) and t.split() == sr.fill(rule["tgt"], fillers)
            assert 5 <= len(rule["src"]) <= 20
            # the target holds the variable occurrences of its type (Table 3.1)
            assert sorted(x for x in rule["tgt"] if x in ("x", "y")) == sorted(sr.RULE_TYPES[rtype][1])
            assert all(len(tok) == 3 and tok.isdigit() for tok in s.split() + t.split())
            sources.add(s)
        assert counts == {t: 2 * per_rule for t in sr.RULE_TYPES}
        assert meta["lines_per_type"][sp] == counts
    assert len(sources) == 10 * 11  # no source twice, in particular no test source in training


def test_synthetic_rerun_is_a_noop_and_params_change_regenerates(syn, tmp_path, capsys):
    out = tmp_path / "d"
    sr.generate(str(out), seed=1, rules=5, train_per_rule=2, valid_per_rule=1, test_per_rule=2)
    mtime = (out / "train.src").stat().st_mtime_ns
    capsys.readouterr()
    sr.generate(str(out), seed=1, rules=5, train_per_rule=2, valid_per_rule=1, test_per_rule=2)
    assert "up to date" in capsys.readouterr().err
    assert (out / "train.src").stat().st_mtime_ns == mtime
    sr.generate(str(out), seed=1, rules=5, train_per_rule=3, valid_per_rule=1, test_per_rule=2)
    assert len(read_lines(out / "train.src")) == 15
    assert not [p for p in os.listdir(out) if ".tmp-" in p]


def test_synthetic_accuracy_perfect_and_one_wrong(syn, tmp_path, capsys):
    refs = read_lines(syn / "test.tgt")
    types = [x.split("\t")[1] for x in read_lines(syn / "test.rule")]
    perfect = _write_lines(tmp_path / "perfect.txt", refs)
    bad_i = types.index("xy_x")
    one_wrong = _write_lines(tmp_path / "one_wrong.txt", [r if i != bad_i else r + " 000" for i, r in enumerate(refs)])
    res = sr.score(str(syn), [f"COPYNET={perfect}", f"RNNSearch={one_wrong}"])
    cn, rs = res["systems"]["COPYNET"], res["systems"]["RNNSearch"]
    assert all(c["accuracy"] == 100.0 and c["total"] == 8 for c in cn["per_type"].values())
    assert cn["all"] == {"correct": 40, "total": 40, "accuracy": 100.0}
    assert rs["per_type"]["xy_x"] == {"correct": 7, "total": 8, "accuracy": 87.5}
    assert all(rs["per_type"][t]["accuracy"] == 100.0 for t in sr.RULE_TYPES if t != "xy_x")
    assert rs["all"]["correct"] == 39
    # the same through the CLI: Table 3.2 layout (Markdown) and --json
    assert cli_status(sr.main, ["accuracy", str(syn), "--hyp", f"COPYNET={perfect}", "--hyp",
                                f"RNNSearch={one_wrong}"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| Rule-type | x→∅ | x→x | x→xx | xy→x | xy→xy | all |"
    assert table[2] == "| COPYNET | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 |"
    assert table[3] == "| RNNSearch | 100.0 | 100.0 | 100.0 | 87.5 | 100.0 | 97.5 |"
    assert cli_status(sr.main, ["accuracy", str(syn), "--hyp", one_wrong, "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["systems"]["one_wrong"]["per_type"]["xy_x"]["accuracy"] == 87.5


def test_synthetic_accuracy_reads_fairseq_generate_output(syn, tmp_path):
    refs = read_lines(syn / "test.tgt")
    order = list(range(len(refs)))
    random.Random(0).shuffle(order)
    gen = tmp_path / "gen.out"
    gen.write_text(_gen_output(refs, wrong={0, 1}, order=order, nbest=2), encoding="utf-8")
    res = sr.score(str(syn), [f"sys={gen}"])["systems"]["sys"]
    assert res["all"]["correct"] == len(refs) - 2  # the 1-best counts, in id order, not file order


def test_synthetic_bad_input(syn, tmp_path, capsys):
    refs = read_lines(syn / "test.tgt")
    missing = tmp_path / "nope.txt"
    assert cli_status(sr.main, ["accuracy", str(syn), "--hyp", str(missing)]) == 2
    assert str(missing) in _err_line(capsys)
    short = _write_lines(tmp_path / "short.txt", refs[:-3])
    assert cli_status(sr.main, ["accuracy", str(syn), "--hyp", short]) == 2
    assert _err_line(capsys) == (f"error: {short}:{len(refs) - 2}: {len(refs) - 3} hypotheses but "
                                 f"{syn / 'test.tgt'} has {len(refs)} lines")
    long_ = _write_lines(tmp_path / "long.txt", refs + ["extra"])
    assert cli_status(sr.main, ["accuracy", str(syn), "--hyp", long_]) == 2
    assert _err_line(capsys).startswith(f"error: {long_}:{len(refs) + 1}: ")
    gen = tmp_path / "gen.out"
    gen.write_text(_gen_output(refs, order=range(len(refs) - 1)), encoding="utf-8")
    assert cli_status(sr.main, ["accuracy", str(syn), "--hyp", str(gen)]) == 2
    assert f"no hypothesis for ids {len(refs) - 1}" in _err_line(capsys)
    # a corrupt .rule file: file and line
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("test.tgt", "test.rule"):
        (bad / name).write_bytes((syn / name).read_bytes())
    lines = read_lines(bad / "test.rule")
    lines[4] = "r001\tx_yz\t{}"
    _write_lines(bad / "test.rule", lines)
    perfect = _write_lines(tmp_path / "perfect.txt", refs)
    assert cli_status(sr.main, ["accuracy", str(bad), "--hyp", perfect]) == 2
    assert _err_line(capsys).startswith(f"error: {bad / 'test.rule'}:5: unknown type 'x_yz'")
    # impossible generation settings and a file in the way
    with pytest.raises(ToolError, match="src-len"):
        sr.generate(str(tmp_path / "g"), rules=5, src_len=(1, 2))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ToolError, match="is a file"):
        sr.generate(str(tmp_path / "file"), rules=5)
    with pytest.raises(ToolError, match="distinct rules"):
        sr.generate(str(tmp_path / "g"), rules=50, vocab_size=2, src_len=(3, 3), tgt_len=(1, 1))


def test_synthetic_cli_subprocess(tmp_path):
    """The real ``python -m fairseq_ext.tools.corpora.synthetic_rules`` (imports the fairseq_ext package)."""
    out = tmp_path / "cli"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.corpora.synthetic_rules", "generate", str(out),
                        "--seed", "7", "--rules", "10", "--train-per-rule", "6", "--valid-per-rule", "1",
                        "--test-per-rule", "4"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["lines"] == {"train": 60, "valid": 10, "test": 40}
    # same seed and sizes as the in-process fixture -> the same bytes
    ref = Path(out).parent / "ref"
    sr.generate(str(ref), seed=7, **SMALL)
    assert _files(out) == _files(ref)


# =========================================================================== dialogue patterns
def test_shipped_patterns():
    slots, patterns = dd.read_patterns(dd.DEFAULT_PATTERNS)
    assert 20 <= len(patterns) <= 50
    kinds = {p.kind for p in patterns}
    assert kinds == {"copy", "none", "new"}
    assert any(len([q for q in patterns if q.input == p.input]) > 1 for p in patterns)  # several responses
    pattern_words = {w for p in patterns for text in (p.input, p.response)
                     for w in dd.tokenize(re.sub(r"\{\w+\}", " ", text), "word")}
    filler_words = {w for fs in slots.values() for f in fs for w in dd.tokenize(f, "word")}
    assert not pattern_words & filler_words  # a DS-II test filler is then an unseen word


def test_dialogue_same_seed_same_files(dialogue, tmp_path):
    for proto in ("ds1", "ds2"):
        again = tmp_path / proto
        dd.generate(str(again), proto, seed=3, train=400, valid=50, test=200)
        assert _files(dialogue / proto) == _files(again)
    dd.generate(str(tmp_path / "s4"), "ds2", seed=4, train=400, valid=50, test=200)
    assert _files(tmp_path / "s4")["train.src"] != _files(dialogue / "ds2")["train.src"]


def _fillers(folder, split):
    return [json.loads(x.split("\t")[2]) for x in read_lines(Path(folder) / f"{split}.rule")]


def test_dialogue_instances_follow_their_patterns(dialogue):
    _, patterns = dd.read_patterns(dd.DEFAULT_PATTERNS)
    by_id = {p.id: p for p in patterns}
    for proto in ("ds1", "ds2"):
        meta = json.loads((dialogue / proto / "dialogue_patterns.json").read_text())
        assert meta["dataset"] == dd.PROTOCOLS[proto] and meta["lines"] == {"train": 400, "valid": 50, "test": 200}
        for sp in SPLITS:
            src, tgt = read_lines(dialogue / proto / f"{sp}.src"), read_lines(dialogue / proto / f"{sp}.tgt")
            kinds = {k: 0 for k in dd.KINDS}
            for s, t, line in zip(src, tgt, read_lines(dialogue / proto / f"{sp}.rule")):
                pid, kind, fillers = line.split("\t")
                p = by_id[pid]
                fillers = json.loads(fillers)
                assert kind == p.kind and set(fillers) == set(p.slots())
                assert s == " ".join(dd.tokenize(dd.fill_text(p.input, fillers), "word"))
                assert t == " ".join(dd.tokenize(dd.fill_text(p.response, fillers), "word"))
                kinds[kind] += 1
                if kind == "copy":  # every response entity is in the input
                    assert all(fillers[x] in s for x in p.response_slots)
            assert kinds == meta["lines_per_kind"][sp] and all(kinds.values())
    published = read_lines(dialogue / "ds1" / "patterns.tsv")
    assert published[0] == "id\tkind\tinput\tresponse" and len(published) == len(patterns) + 1


def test_ds2_test_fillers_never_seen_in_training(dialogue):
    train = {f for d in _fillers(dialogue / "ds2", "train") for f in d.values()}
    valid = {f for d in _fillers(dialogue / "ds2", "valid") for f in d.values()}
    test = {f for d in _fillers(dialogue / "ds2", "test") for f in d.values()}
    assert test and not test & train and not valid & train and not valid & test
    # no word of a test filler occurs in a training filler, nor anywhere in the training data
    train_filler_words = {w for f in train for w in f.split()}
    train_words = {w for sp in ("train.src", "train.tgt") for x in read_lines(dialogue / "ds2" / sp) for w in x.split()}
    for f in test:
        assert not set(f.split()) & train_filler_words and not set(f.split()) & train_words
    pools = json.loads((dialogue / "ds2" / "dialogue_patterns.json").read_text())["pools"]
    for t in pools["train"]:
        assert not set(pools["train"][t]) & set(pools["test"][t])
        assert set(pools["train"][t]) | set(pools["valid"][t]) | set(pools["test"][t]) == set(
            dd.read_patterns(dd.DEFAULT_PATTERNS)[0][t])
    # DS-I: one pool, so test fillers do occur in training
    train1 = {f for d in _fillers(dialogue / "ds1", "train") for f in d.values()}
    test1 = {f for d in _fillers(dialogue / "ds1", "test") for f in d.values()}
    assert len(test1 & train1) > 0.8 * len(test1)


def test_dialogue_char_unit_and_custom_patterns(tmp_path):
    pat = _write_lines(tmp_path / "p.tsv", ["# toy", "slot\tcity\tRome|Oslo|Lima|Kyiv|Baku|Riga|Bern|Doha|Male|Suva",
                                            "pattern\ta\tI live in {city}.\tsee you in {city}!",
                                            "pattern\tb\tgo to {city}?\tno, {city2}."])
    dd.generate(str(tmp_path / "c"), "ds2", patterns_path=pat, train=20, valid=0, test=10, unit="char")
    src = read_lines(tmp_path / "c" / "train.src")
    assert all(len(tok) == 1 for x in src for tok in x.split()) and dd.SPACE in src[0].split()
    assert len(read_lines(tmp_path / "c" / "valid.src")) == 0
    bad = _write_lines(tmp_path / "bad.tsv", ["slot\tcity\tRome|Oslo", "pattern\ta\tI live in {town}.\tok"])
    with pytest.raises(ToolError) as ei:
        dd.generate(str(tmp_path / "d"), "ds1", patterns_path=bad, train=5, test=5)
    assert str(ei.value).startswith(f"{bad}:2: pattern a: unknown slot type 'town'")
    few = _write_lines(tmp_path / "few.tsv", ["slot\tcity\tRome|Oslo|Lima", "pattern\ta\t{city} or {city2}?\t{city2}"])
    with pytest.raises(ToolError, match="needs 2 distinct"):
        dd.generate(str(tmp_path / "e"), "ds2", patterns_path=few, train=5, test=5)


def test_dialogue_topk_accuracy(dialogue, tmp_path, capsys):
    refs = {proto: read_lines(dialogue / proto / "test.tgt") for proto in ("ds1", "ds2")}
    order = list(range(200))
    random.Random(1).shuffle(order)
    gen = tmp_path / "copynet_ds2.out"  # 10-best; 5 sentences have the golden only at rank 2
    gen.write_text(_gen_output(refs["ds2"], wrong={0, 1, 2, 3, 4}, order=order, nbest=10), encoding="utf-8")
    perfect = _write_lines(tmp_path / "ds1.txt", refs["ds1"])
    nb2 = _write_lines(tmp_path / "rnn2.txt", [h for r in refs["ds2"] for h in ("nope", r)])
    res = dialogue_accuracy.score([f"DS-I={dialogue / 'ds1'}", str(dialogue / "ds2")],
                   [f"COPYNET@DS-I={perfect}", f"COPYNET@DS-II={gen}"], ks=(1, 10))
    cn = res["systems"]["COPYNET"]
    assert cn["DS-I"]["top1"]["all"]["accuracy"] == 100.0 and cn["DS-I"]["top10"]["all"]["accuracy"] is None
    assert cn["DS-II"]["top1"]["all"]["correct"] == 195 and cn["DS-II"]["top10"]["all"]["correct"] == 200
    # Table 3.5 layout through the CLI; plain text with --nbest 2
    assert cli_status(dp.main, ["accuracy", "--data", str(dialogue / "ds2"), "--hyp", f"RNNSearch={nb2}",
                                "--nbest", "2", "--topk", "1", "2"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| Models | DS-II Top1 | DS-II Top2 |" and table[2] == "| RNNSearch | 0.0 | 100.0 |"
    assert cli_status(dp.main, ["accuracy", "--data", str(dialogue / "ds2"), "--hyp", f"x={nb2}"]) == 2
    assert _err_line(capsys).startswith(f"error: {nb2}:201: 400 lines but ")
    assert cli_status(dp.main, ["accuracy", "--data", str(dialogue / "ds1"), "--data", str(dialogue / "ds2"),
                                "--hyp", f"x={perfect}"]) == 2
    assert "write NAME@LABEL=FILE" in _err_line(capsys)


def test_dialogue_cli_main_bad_input(dialogue, tmp_path, capsys):
    """The console-script entry point: a missing hypothesis file is one error line, exit status 2."""
    missing = tmp_path / "missing.out"
    with pytest.raises(SystemExit) as ei:
        dp.cli_main(["accuracy", "--data", str(dialogue / "ds1"), "--hyp", f"COPYNET={missing}"])
    assert ei.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"error: missing input file: {missing}\n"

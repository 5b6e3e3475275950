"""Tests of the document-level evaluation tools of Maruf (2019): the ContraPro-style contrastive pronoun
set (fairseq_ext.tools.evaluation.contrastive), document consistency (fairseq_ext.tools.evaluation.doc_consistency) and the
offline METEOR of fairseq_ext.tools.evaluation.score."""
import json
import math
import re
import sys
from pathlib import Path

import pytest

from fairseq_ext.tools.evaluation import contrastive as C
from fairseq_ext.tools.evaluation import contrastive_build as CB
from fairseq_ext.tools.evaluation import contrastive_gender as CG
from fairseq_ext.tools.evaluation import contrastive_scoring as CSC
from fairseq_ext.tools.evaluation import doc_consistency as D
from fairseq_ext.tools.evaluation import meteor, score
from fairseq_ext.tools.common import ToolError, cli_status, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "bible_tiny"
REAL = ROOT / "data" / "bible_es_en" / "raw"


def write_split(folder: Path, split: str, rows, src="es", ref="en"):
    """rows: (id, es, en) triples -> {split}.{es,en,ids}."""
    folder.mkdir(parents=True, exist_ok=True)
    for k, lang in ((0, "ids"), (1, src), (2, ref)):
        (folder / f"{split}.{lang}").write_text("".join(r[k] + "\n" for r in rows), encoding="utf-8")
    return folder


CHAPTER = [
    ("Book.1.1", "Había una mujer en la ciudad.", "There was a woman in the city."),
    ("Book.1.2", "Y la casa era vieja.", "And the house was old."),
    ("Book.1.3", "Y tomó su manto.", "And she took her cloak."),
    ("Book.1.4", "Y su hermano le habló.", "And her brother spoke to her."),
    ("Book.1.5", "Y el rey la vio con su siervo.", "The king saw her with his servant."),
    ("Book.1.6", "Y él vino.", "And he came."),
    ("Book.1.7", "Entonces el hombre tomó su vara.", "Then the man took his rod."),
    ("Book.1.8", "Y se fue.", "And He went away, and the rod was His."),
    ("Book.2.1", "Y se levantó.", "And she rose."),
]


@pytest.fixture
def chapter_dir(tmp_path):
    d = write_split(tmp_path / "raw", "test", CHAPTER)
    (d / "names.en").write_text("There were no names.\n", encoding="utf-8")
    return d


def build(d, out, *extra):
    return C.main(["build", "--raw", str(d), "--split", "test", "--out", str(out),
                   "--name-corpus", str(d / "names.en"), *extra])


# =========================================================================================== builder
def test_build_instances_distances_and_variants(chapter_dir, tmp_path, capsys):
    out = tmp_path / "set.jsonl"
    assert build(chapter_dir, out, "--stats-json", str(tmp_path / "stats.json")) == 0
    xs = {x["id"]: x for x in read_jsonl(out)}
    assert sorted(xs) == ["Book.1.3", "Book.1.4", "Book.1.7", "Book.1.8"]
    a = xs["Book.1.3"]
    assert (a["line"], a["distance"], a["bucket"], a["gender"]) == (2, 2, "2", "f")
    assert a["antecedent"] == {"word": "woman", "line": 0, "id": "Book.1.1"}
    assert a["pronouns"] == ["she", "her"] and a["source_pronouns"] == ["su"]
    # `her` is both his and him: both variants
    assert a["variants"] == ["And he took his cloak.", "And he took him cloak."]
    b = xs["Book.1.4"]
    assert (b["distance"], b["gender"]) == (3, "f")  # "brother" is a mention of the other gender
    assert len(b["variants"]) == 4 and "And his brother spoke to him." in b["variants"]
    c = xs["Book.1.7"]
    assert (c["distance"], c["bucket"], c["gender"]) == (0, "0", "m")
    assert c["variants"] == ["Then the man took her rod."]
    d = xs["Book.1.8"]
    assert (d["distance"], d["antecedent"]["id"]) == (1, "Book.1.7")
    assert d["variants"] == ["And She went away, and the rod was Hers."]  # capitalisation kept; his -> hers
    st = json.loads((tmp_path / "stats.json").read_text())
    assert st["by_distance"] == {"0": 1, "1": 1, "2": 1, "3": 1, ">3": 0}
    assert st["by_gender"] == {"m": 2, "f": 2}
    # both genders (1.5), no ambiguous Spanish pronoun (1.1, 1.6: él is gendered), none in English (1.2),
    # no antecedent in its own chapter (2.1: the woman is in chapter 1)
    assert st["skipped"] == {"both_genders": 1, "no_ambiguous_source_pronoun": 3, "no_antecedent": 1}
    printed = capsys.readouterr().out
    assert "| all | 1 | 1 | 1 | 1 | 0 | 4 |" in printed


def test_build_needs_ambiguous_source_pronoun_and_one_gender(tmp_path):
    lex = CG.load_gender_lexicon()
    rows = [("B.1.1", "El rey habló.", "The king said that he would go."),
            ("B.1.2", "Y él vino.", "And he came."),                       # él: gendered, not ambiguous
            ("B.1.3", "Y su hijo y su hija.", "And his son and her daughter.")]  # both genders
    ids, es, en = zip(*rows)
    xs, skipped = CB.build_instances(es, en, ids, lex, {})
    assert xs == []
    assert skipped == {"both_genders": 1, "no_ambiguous_source_pronoun": 2}
    # la/lo are not in the default list; --src-pronouns can add them
    xs, _ = CB.build_instances(["Y la vio."], ["And the man saw him."], ["B.1.1"], lex, {})
    assert xs == []
    xs, _ = CB.build_instances(["Y la vio."], ["And the man saw him."], ["B.1.1"], lex, {}, src_pronouns=["la"])
    assert [x["distance"] for x in xs] == [0]


def test_gendered_source_flag(tmp_path):
    lex = CG.load_gender_lexicon()
    es, en, ids = ["Y ella tomó su manto."], ["And the woman took her cloak."], ["B.1.1"]
    xs, _ = CB.build_instances(es, en, ids, lex, {})
    assert xs[0]["source_gendered"] is True
    xs, skipped = CB.build_instances(es, en, ids, lex, {}, exclude_gendered_source=True)
    assert xs == [] and skipped == {"gendered_source_pronoun": 1}


def test_swap_variants():
    assert CG.swap_variants("He gave HIM his own.") == ["She gave HER her own."]
    assert CG.swap_variants("The land is his.") == ["The land is hers."]
    assert CG.swap_variants("She kept it for herself; it was hers.") == ["He kept it for himself; it was his."]
    assert CG.swap_variants("The he-goat ran.") == []  # a hyphenated compound is not a pronoun
    v = CG.swap_variants("her her her her")  # more than 3 `her`: the two uniform variants
    assert v == ["his his his his", "him him him him"]
    assert len(CG.swap_variants("her her her")) == 8


def test_derive_names():
    lex = CG.load_gender_lexicon()
    lines = ["Then Abram took Sarai his wife and went.", "And Abram said that he would go.",
             "And Abram went with his flocks.", "And Sarai took her maid.", "So Sarai laughed, and she was afraid.",
             "They came to Bethel.", "And they lived in Bethel.", "They stayed in Bethel for ever.",
             "And then we sang."]
    names = CG.derive_names(lines, lex)
    assert names["Sarai"]["gender"] == "f" and names["Abram"]["gender"] == "m"
    assert "Bethel" not in names and "Then" not in names and "And" not in names
    # names become antecedents
    xs, _ = CB.build_instances(["Y Sarai vino.", "Y su sierva vino."], ["Sarai came.", "Her servant came too."],
                              ["G.16.1", "G.16.2"], lex, names)
    assert [(x["distance"], x["gender"], x["antecedent"]["word"]) for x in xs] == [(1, "f", "Sarai")]


def test_build_deterministic_and_max_per_distance(tmp_path):
    outs = []
    for k in range(2):
        out = tmp_path / f"set{k}.jsonl"
        st = tmp_path / f"st{k}.json"
        assert C.main(["build", "--raw", str(TINY), "--split", "test", "--out", str(out),
                       "--stats-json", str(st), "--max-per-distance", "2", "--seed", "3"]) == 0
        outs.append((out.read_bytes(), json.loads(st.read_text())))
    assert outs[0] == outs[1]
    counts = outs[0][1]["by_distance"]
    assert all(v <= 2 for v in counts.values()) and sum(counts.values()) == outs[0][1]["instances"] > 0
    assert outs[0][1]["candidates"] >= outs[0][1]["instances"]
    lines = [json.loads(x)["line"] for x in outs[0][0].decode().splitlines()]
    assert lines == sorted(lines)


def test_build_errors(tmp_path):
    d = write_split(tmp_path / "raw", "test", CHAPTER)
    (d / "test.ids").write_text("Book.1.1\n", encoding="utf-8")
    with pytest.raises(ToolError, match="test.ids"):
        C.main(["build", "--raw", str(d), "--split", "test", "--out", str(tmp_path / "x.jsonl")])
    assert cli_status(C.main, ["build", "--raw", str(tmp_path / "nope"), "--out", str(tmp_path / "x")]) == 2
    rows = [("A.1.1", "su", "his"), ("A.2.1", "su", "his"), ("A.1.2", "su", "his")]
    d2 = write_split(tmp_path / "raw2", "test", rows)
    with pytest.raises(ToolError, match=r"test.ids:3: chapter 'A.1' is not contiguous"):
        C.main(["build", "--raw", str(d2), "--out", str(tmp_path / "y.jsonl"), "--name-corpus", str(d2 / "test.en")])


@pytest.mark.skipif(not (REAL / "test.es").exists(), reason="the es-en Bible is not prepared")
def test_build_on_the_real_test_split(tmp_path):
    _, st = CB.build_set(str(REAL), "test", str(tmp_path / "set.jsonl"))
    assert st["instances"] > 300 and st["by_gender"]["f"] > 10
    assert all(st["by_distance"][b] > 0 for b in CSC.BUCKETS)
    # Ruth: Naomi is a derived female name, and some feminine instance points back to her
    xs = read_jsonl(tmp_path / "set.jsonl")
    assert any(x["gender"] == "f" and x["antecedent"]["word"] == "Naomi" for x in xs)


# =========================================================================================== scoring
def test_accuracy_counting():
    xs = [{"gender": "m", "distance": 0, "variants": ["a"]},
          {"gender": "f", "distance": 1, "variants": ["a", "b"]},
          {"gender": "f", "distance": 5, "variants": ["a", "b"]},
          {"gender": "m", "distance": 2, "variants": ["a"]}]
    scores = [[-1.0, -2.0],        # correct
              [-1.0, -2.0, -0.5],  # beaten by one variant: wrong
              [-1.0, -3.0, -4.0],  # correct
              [-1.0, -1.0]]        # a tie is not a win
    res = C.contrastive_accuracy(xs, scores)
    assert res["overall"] == {"correct": 2, "total": 4, "accuracy": 0.5}
    assert res["by_distance"]["0"]["accuracy"] == 1.0 and res["by_distance"]["1"]["accuracy"] == 0.0
    assert res["by_distance"][">3"]["accuracy"] == 1.0 and res["by_distance"]["3"]["accuracy"] is None
    assert res["by_gender"]["f"] == {"correct": 1, "total": 2, "accuracy": 0.5}
    # gender-balanced: mean of the m and f accuracies, only where both genders occur
    assert res["balanced"] == {"overall": 0.5, "by_distance": {b: None for b in CSC.BUCKETS}}
    table = C.format_accuracy(res, "toy")
    assert "| Model | 0 | 1 | 2 | 3 | >3 | all |" in table
    assert "| toy | 1.000 | 0.000 | 0.000 | – | 1.000 | 0.500 |" in table
    assert "| toy (mean of m/f) | – | – | – | – | – | 0.500 |" in table
    # a model that always prefers the masculine form: high raw accuracy on a masculine-heavy set, 0.5 balanced
    xs = [{"gender": "m", "distance": 1, "variants": ["x"]}] * 9 + [{"gender": "f", "distance": 1, "variants": ["x"]}]
    scores = [[0.0, -1.0]] * 9 + [[-1.0, 0.0]]
    res = C.contrastive_accuracy(xs, scores)
    assert res["overall"]["accuracy"] == 0.9 and res["balanced"]["by_distance"]["1"] == 0.5


def test_sample_per_bucket_balance():
    xs = [{"bucket": b, "gender": g, "k": k} for k, (b, g) in enumerate(
        [("0", "m")] * 5 + [("0", "f")] * 2 + [("1", "m")] * 3 + [(">3", "f")] * 2)]
    bal = CB.sample_per_bucket(xs, None, seed=1, balance_gender=True)
    assert [(x["bucket"], x["gender"]) for x in bal] == [("0", "m")] * 2 + [("0", "f")] * 2
    assert bal == CB.sample_per_bucket(xs, None, seed=1, balance_gender=True)  # seeded
    assert [x["k"] for x in bal] == sorted(x["k"] for x in bal)  # split order
    capped = CB.sample_per_bucket(xs, 2, seed=1, balance_gender=True)
    assert sorted((x["bucket"], x["gender"]) for x in capped) == [("0", "f"), ("0", "m")]
    assert len(CB.sample_per_bucket(xs, 2, seed=1)) == 2 + 2 + 2


def _toy_dataset():
    import numpy as np
    from fairseq.data import Dictionary, LanguagePairDataset

    d = Dictionary()
    for w in "a b c d e f g h".split():
        d.add_symbol(w)
    srcs = ["a b", "a b c d e", "c", "d e f"]
    tgts = ["g h", "h g", "g", "h h"]
    enc = [d.encode_line(s, add_if_not_exist=False).long() for s in srcs]
    tenc = [d.encode_line(t, add_if_not_exist=False).long() for t in tgts]
    ds = LanguagePairDataset(enc, np.array([len(x) for x in enc]), d, tenc,
                             np.array([len(x) for x in tenc]), d)
    return d, ds, tgts


@pytest.mark.parametrize("per_batch", [1, 3])
def test_score_instances_maps_rows_back(per_batch):
    """A scorer that prefers the reference gets accuracy 1, whatever order the collater puts rows in."""
    d, ds, tgts = _toy_dataset()
    xs = [{"line": i, "gender": "m", "distance": i, "reference": tgts[i], "variants": v}
          for i, v in [(0, ["h h", "g g"]), (1, ["g h"]), (2, ["h"]), (3, ["g g", "h g", "g h"])]]
    cands = [[d.encode_line(t, add_if_not_exist=False).long() for t in [x["reference"]] + x["variants"]]
             for x in xs]
    refs = {(x["line"], tuple(c[0].tolist())) for x, c in zip(xs, cands)}
    seen = []

    def is_ref(sample, r):
        return (int(sample["id"][r]), CSC._strip(sample["target"][r], d.pad())) in refs

    def prefers_reference(sample):
        seen.append(sample["id"].tolist())
        return [0.0 if is_ref(sample, r) else -1.0 - r for r in range(len(sample["target"]))]

    scores, mismatched = CSC.score_instances(xs, ds, cands, prefers_reference, d.pad(), per_batch=per_batch)
    assert mismatched == 0
    assert [s[0] for s in scores] == [0.0] * 4 and all(v < 0 for s in scores for v in s[1:])
    assert C.contrastive_accuracy(xs, scores)["overall"]["accuracy"] == 1.0
    if per_batch == 3:  # the collater sorted the rows by source length: rows were mapped back by id+tokens
        assert seen[0] != sorted(seen[0])

    def prefers_variants(sample):
        return [-5.0 if is_ref(sample, r) else 0.0 for r in range(len(sample["target"]))]

    scores, _ = CSC.score_instances(xs, ds, cands, prefers_variants, d.pad(), per_batch=per_batch)
    assert C.contrastive_accuracy(xs, scores)["overall"]["accuracy"] == 0.0
    # a set built on another split: every reference differs from the dataset's target
    other = [[d.encode_line("a a", add_if_not_exist=False).long()] + c[1:] for c in cands]
    _, mismatched = CSC.score_instances(xs, ds, other, prefers_variants, d.pad())
    assert mismatched == 4


def test_forward_inputs_drop_context_keys():
    class Sentence:
        def forward(self, src_tokens, src_lengths, prev_output_tokens):
            pass

    class Document:
        def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
            pass

    net = {"src_tokens": 1, "src_lengths": 2, "prev_output_tokens": 3, "ctx_index": 4}
    assert set(CSC._forward_inputs(Sentence(), net)) == {"src_tokens", "src_lengths", "prev_output_tokens"}
    assert CSC._forward_inputs(Document(), net) == net


def test_score_end_to_end_matches_fairseq_score_reference(tiny_bin, tmp_path):
    """Real run: tiny transformer (stock `translation` task) trained for a few updates; the reference
    scores equal fairseq-generate --score-reference's (sum of the P- line, base 2 -> natural log)."""
    from harness import fairseq, run, train

    ckpt = train(tiny_bin, tmp_path / "ckpt", task="translation", max_update=5)
    set_path = tmp_path / "set.jsonl"
    assert C.main(["build", "--raw", str(TINY), "--split", "test", "--out", str(set_path)]) == 0
    xs = read_jsonl(set_path)
    assert xs
    spm = tiny_bin.parent / "seg" / "spm.model"
    p = run([sys.executable, "-m", "fairseq_ext.tools.evaluation.contrastive", "score", "--set", set_path, "--spm", spm,
             "--json", tmp_path / "acc.json", "--details", tmp_path / "det.jsonl", "--name", "tiny",
             "--instances-per-batch", "2",
             tiny_bin, "--path", ckpt, "--task", "translation", "--gen-subset", "test", "--cpu"])
    assert "| Model | 0 | 1 | 2 | 3 | >3 | all |" in p.stdout and "| tiny |" in p.stdout
    acc = json.loads((tmp_path / "acc.json").read_text())
    det = read_jsonl(tmp_path / "det.jsonl")
    assert acc["overall"]["total"] == len(xs) == len(det) and acc["reference_mismatches"] == 0
    assert acc["overall"]["correct"] == sum(r["correct"] for r in det)
    gen = fairseq("generate", tiny_bin, "--task", "translation", "--path", ckpt, "--cpu", "--score-reference",
                  "--gen-subset", "test", "--batch-size", "4").stdout
    pos = {int(m.group(1)): sum(map(float, m.group(2).split())) * math.log(2)
           for m in re.finditer(r"^P-(\d+)\t(.*)$", gen, re.M)}
    for r in det:
        assert r["reference_score"] == pytest.approx(pos[r["line"]], abs=1e-3)
        assert all(math.isfinite(v) for v in r["variant_scores"])
    # the same sentence model on the document dataset (doc_translation: items carry their context, the
    # collater adds the context keys, which a sentence model's forward does not take): the same scores
    pytest.importorskip("fairseq_ext.data.documents")
    assert C.main(["score", "--set", str(set_path), "--spm", str(spm), "--details", str(tmp_path / "doc.jsonl"),
                   str(tiny_bin), "--path", str(ckpt), "--task", "doc_translation", "--doc-target-context", "gold",
                   "--gen-subset", "test", "--cpu"]) == 0
    for r, q in zip(det, read_jsonl(tmp_path / "doc.jsonl")):
        assert q["reference_score"] == pytest.approx(r["reference_score"], abs=1e-3)
        assert q["variant_scores"] == pytest.approx(r["variant_scores"], abs=1e-3)
    # the wrong split: an error naming the set
    bad = cli_status(C.main, ["score", "--set", str(set_path), "--spm", str(spm), str(tiny_bin), "--path",
                              str(ckpt), "--task", "translation", "--gen-subset", "valid", "--cpu"])
    assert bad == 2


def test_score_needs_spm_or_segmented(tmp_path):
    (tmp_path / "s.jsonl").write_text('{"line": 0}\n')
    with pytest.raises(ToolError, match="--spm"):
        C.score_set(str(tmp_path / "s.jsonl"), ["x", "--path", "y"])


# =========================================================================================== consistency
def dict_aligner(lexicon):
    """Mock aligner: source token i -> every target token that is its lexicon translation."""
    def align(src, tgt):
        out = []
        for s, t in zip(src, tgt):
            st, tt = s.split(), t.split()
            out.append(" ".join(f"{i}-{j}" for i, a in enumerate(st) for j, b in enumerate(tt)
                                if lexicon.get(a) == b))
        return out
    return align


CONS_SRC = ["Y Moisés vio la zarza.", "Entonces Moisés tomó la vara.", "Y la zarza ardía.", "Moisés calló."]
CONS_IDS = ["Ex.3.1", "Ex.3.2", "Ex.3.3", "Ex.4.1"]


def test_consistency_hand_made_alignments():
    lex = {"moisés": "moses", "zarza": "bush", "vara": "rod", "vio": "saw", "tomó": "took", "ardía": "burned"}
    good = ["And Moses saw the bush.", "Then Moses took the rod.", "And the bush burned.", "Moses was silent."]
    bad = ["And Moses saw the bush.", "Then Moshe took the rod.", "And the shrub burned.", "Moses was silent."]
    lex_bad = dict(lex)
    res = D.measure(CONS_SRC, {"hypothesis": bad, "reference": good}, CONS_IDS, dict_aligner(lex_bad))
    # groups: Moisés (name) and zarza (content) in chapter Ex.3; Ex.4 has a single verse; "Entonces" is
    # sentence-initial (not a name), la/y are stopwords
    assert res["groups"] == 2
    ref, hyp = res["texts"]["reference"], res["texts"]["hypothesis"]
    assert ref["names"] == {"groups": 1, "consistent": 1, "occurrences": 2, "unaligned": 0, "share": 1.0,
                            "aligned_groups": 1, "share_aligned": 1.0}
    assert ref["content"]["consistent"] == 1 and ref["all"]["share"] == 1.0
    # Moshe / shrub are not aligned by the mock: unaligned occurrences break consistency
    assert hyp["all"] == {"groups": 2, "consistent": 0, "occurrences": 4, "unaligned": 2, "share": 0.0,
                          "aligned_groups": 0, "share_aligned": None}
    det = {(d["term"]): d for d in res["details"]["reference"]}
    assert det["Moisés"]["word"] == "moses" and det["zarza"]["translations"] == ["bush", "bush"]
    table = D.format_report(res)
    assert "| reference | names | 1 | 2 | 0 | 1 | 100.0% | 1 | 100.0% |" in table
    assert "| hypothesis | all | 2 | 4 | 2 | 0 | 0.0% | 0 | – |" in table


def test_consistency_rule():
    groups = [{"doc": "A", "kind": "names", "term": "X", "occurrences": [(0, 0), (1, 0), (2, 0)]}]
    cons = lambda tr: D.consistency(groups, tr)[0]["names"]["consistent"]  # noqa: E731
    assert cons([{0: "naomi"}, {0: "naomi her"}, {0: "naomi"}]) == 1  # one word aligned to every occurrence
    assert cons([{0: "naomi"}, {0: "noemi"}, {0: "naomi"}]) == 0
    assert cons([{0: "naomi"}, {}, {0: "naomi"}]) == 0  # unaligned
    assert D.name_types([D.tokenize("Y Moisés vio a Dios."), D.tokenize("Dios habló. Entonces fue.")]) \
        == frozenset({"Moisés", "Dios"})


def test_consistency_real_eflomal(tmp_path):
    pytest.importorskip("eflomal")
    out = tmp_path / "c.json"
    rc = D.main(["--raw", str(TINY), "--split", "test", "--hyp", str(TINY / "test.kjv"), "--json", str(out),
                 "--details", str(tmp_path / "g.jsonl")])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["groups"] > 10 and res["aligner"] == "eflomal-3"
    for text in ("hypothesis", "reference"):
        s = res["texts"][text]["all"]
        assert s["groups"] == res["groups"] and 0.0 < s["share"] <= 1.0
        assert s["groups"] == res["texts"][text]["names"]["groups"] + res["texts"][text]["content"]["groups"]
    assert len(read_jsonl(tmp_path / "g.jsonl")) == 2 * res["groups"]


def test_consistency_errors(tmp_path):
    (tmp_path / "h.txt").write_text("one\n")
    assert cli_status(D.main, ["--raw", str(TINY), "--hyp", str(tmp_path / "h.txt")]) == 2
    with pytest.raises(ToolError, match="no hypothesis"):
        D.main(["--raw", str(TINY), "--hyp", str(tmp_path / "h.txt")])


# =========================================================================================== METEOR
def test_meteor_offline():
    import nltk

    same = meteor.meteor_sentence("the cat sat on the mat", ["the cat sat on the mat"])
    assert same > 0.99
    assert meteor.meteor_sentence("a b c", ["x y z"]) == 0.0
    stem = meteor.meteor_sentence("he walked home", ["he walks home"])
    other = meteor.meteor_sentence("he went home", ["he walks home"])
    assert stem > 0.9 > other  # walked/walks match on the Porter stem
    # no synonyms: WordNet is never loaded (nothing downloaded)
    assert meteor.meteor_sentence("he went home", ["he departed home"]) < 0.9
    assert type(nltk.corpus.wordnet).__name__ == "LazyCorpusLoader"
    res = meteor.meteor_corpus(["the cat sat on the mat", "a b c"], [["the cat sat on the mat", "x y z"]])
    assert res["meteor"] == pytest.approx(100 * (same + 0.0) / 2)
    assert res["meteor_label"] == "METEOR (exact+stem, nltk; not comparable to METEOR 1.5)"
    assert res["corpus"] == "mean of sentence scores"
    # several references: the best one counts
    two = meteor.meteor_corpus(["a b c"], [["x y z"], ["a b c"]])
    assert two["meteor"] == pytest.approx(100 * meteor.meteor_sentence("a b c", ["a b c"]))


def test_meteor_cli(tmp_path, capsys):
    (tmp_path / "h.txt").write_text("In the beginning God created.\nAnd the earth was void.\n")
    (tmp_path / "r.txt").write_text("In the beginning God created.\nAnd the earth was empty.\n")
    assert score.main(["meteor", "--hyp", str(tmp_path / "h.txt"), "--ref", str(tmp_path / "r.txt"),
                       "--json", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("METEOR (exact+stem, nltk; not comparable to METEOR 1.5) = ")
    res = json.loads((tmp_path / "m.json").read_text())
    assert len(res["sentence_scores"]) == 2 and res["sentence_scores"][0] > 0.99
    (tmp_path / "short.txt").write_text("one\n")
    assert cli_status(score.main, ["meteor", "--hyp", str(tmp_path / "short.txt"),
                                   "--ref", str(tmp_path / "r.txt")]) == 2
    # several systems: each is scored (not only the last one)
    (tmp_path / "h2.txt").write_text("In the beginning God created.\nAnd the earth was empty.\n")
    assert score.main(["meteor", "--hyp", str(tmp_path / "h.txt"), "--hyp", str(tmp_path / "h2.txt"),
                       "--ref", str(tmp_path / "r.txt"), "--json", str(tmp_path / "m2.json")]) == 0
    both = json.loads((tmp_path / "m2.json").read_text())["systems"]
    assert set(both) == {str(tmp_path / "h.txt"), str(tmp_path / "h2.txt")}
    assert both[str(tmp_path / "h2.txt")]["meteor"] > both[str(tmp_path / "h.txt")]["meteor"]

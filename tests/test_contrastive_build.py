"""Tests of the contrastive pronoun builder for the source languages of the multilingual Bibles
(fairseq_ext.tools.evaluation.contrastive_build / contrastive_gender): the per-language pronoun lists, the
antecedent-outside-the-verse filter (``--min-distance``), and the errors on bad input."""
import json
from pathlib import Path

import pytest

from fairseq_ext.tools.common import ToolError, cli_status, read_jsonl
from fairseq_ext.tools.evaluation import contrastive as C
from fairseq_ext.tools.evaluation import contrastive_build as CB
from fairseq_ext.tools.evaluation import contrastive_gender as CG

# Tagalog -> English: siya/niya/kaniya carry no gender, so she/her comes from "woman" verses back
TL = [
    ("Book.1.1", "May isang babae sa bayan.", "There was a woman in the city."),
    ("Book.1.2", "At ang bahay ay luma.", "And the house was old."),
    ("Book.1.3", "At kinuha niya ang kaniyang balabal.", "And she took her cloak."),
    ("Book.1.4", "Kinuha ng lalake ang kaniyang tungkod.", "The man took his rod."),
    ("Book.1.5", "At umalis siya.", "And he went away."),
]


def write_split(folder: Path, split: str, rows, src: str, ref: str = "en_web") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for k, lang in ((0, "ids"), (1, src), (2, ref)):
        (folder / f"{split}.{lang}").write_text("".join(r[k] + "\n" for r in rows), encoding="utf-8")
    (folder / "names.en").write_text("There were no names.\n", encoding="utf-8")
    return folder


def build(d: Path, out: Path, src: str, *extra: str) -> int:
    return C.main(["build", "--raw", str(d), "--split", "test", "--src", src, "--ref", "en_web",
                   "--out", str(out), "--name-corpus", str(d / "names.en"), *extra])


def test_tagalog_pair_and_min_distance(tmp_path):
    d = write_split(tmp_path / "en_web-tl", "test", TL, "tl")
    out, st = tmp_path / "set.jsonl", tmp_path / "st.json"
    assert build(d, out, "tl", "--stats-json", str(st)) == 0
    xs = {x["id"]: x for x in read_jsonl(out)}
    assert sorted(xs) == ["Book.1.3", "Book.1.4", "Book.1.5"]
    assert (xs["Book.1.3"]["distance"], xs["Book.1.3"]["gender"]) == (2, "f")
    assert xs["Book.1.3"]["source_pronouns"] == ["niya", "kaniyang"]
    assert xs["Book.1.3"]["source_gendered"] is False  # Tagalog has no gendered pronoun
    assert (xs["Book.1.4"]["distance"], xs["Book.1.5"]["distance"]) == (0, 1)
    stats = json.loads(st.read_text())
    assert stats["src_lang"] == "tl" and "kaniya" in stats["src_pronouns"] and stats["gendered_pronouns"] == []
    # --min-distance 1: the antecedent must lie outside the verse (1.4 names "the man" itself)
    assert build(d, out, "tl", "--stats-json", str(st), "--min-distance", "1") == 0
    assert [x["id"] for x in read_jsonl(out)] == ["Book.1.3", "Book.1.5"]
    stats = json.loads(st.read_text())
    assert stats["skipped"]["antecedent_too_near"] == 1 and stats["min_distance"] == 1


def test_language_lists_and_labels():
    lex = CG.load_gender_lexicon()
    # a corpus label is its language: fr_darby uses the French lists; elle is gendered, sa is not
    amb, gen = CG.source_pronouns("fr_darby")
    src, ref, ids = ["La femme vint.", "Et elle prit sa robe."], ["The woman came.", "And she took her robe."], \
        ["B.1.1", "B.1.2"]
    xs, _ = CB.build_instances(src, ref, ids, lex, {}, src_pronouns=amb, gendered_pronouns=gen)
    assert [(x["id"], x["source_pronouns"], x["source_gendered"]) for x in xs] == [("B.1.2", ["sa"], True)]
    xs, sk = CB.build_instances(src, ref, ids, lex, {}, src_pronouns=amb, gendered_pronouns=gen,
                                exclude_gendered_source=True)
    assert xs == [] and sk["gendered_source_pronoun"] == 1
    # Devanagari vowel signs stay inside the word: उसके ("his/her", plural possessed) is one token
    assert [w for w, _, _ in CG.tokens("और उसके दोनों पुत्र")] == ["और", "उसके", "दोनों", "पुत्र"]
    amb, gen = CG.source_pronouns("hi")
    xs, _ = CB.build_instances(["एक स्त्री थी।", "और उसके दोनों पुत्र रह गए।"],
                               ["There was a woman.", "And her two sons were left."], ["B.1.1", "B.1.2"],
                               lex, {}, src_pronouns=amb, gendered_pronouns=gen)
    assert [(x["distance"], x["gender"], x["source_pronouns"]) for x in xs] == [(1, "f", ["उसके"])]
    # every language of the table has ambiguous pronouns, and none is also listed as gendered
    for lang, (a, g) in CG.SOURCE_PRONOUNS.items():
        assert a and not set(a) & set(g), lang


def test_unknown_language_is_one_error_naming_the_file(tmp_path, capsys):
    d = write_split(tmp_path / "en_web-de", "test", TL, "de")
    assert cli_status(C.main, ["build", "--raw", str(d), "--src", "de", "--ref", "en_web",
                               "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {d / 'test.de'}: ")
    assert "'de'" in err[0] and "known: es, fr" in err[0] and "--src-pronouns" in err[0]
    assert not (tmp_path / "x.jsonl").exists()
    with pytest.raises(ToolError, match="marks the gender"):
        CG.source_pronouns("ar")
    # with explicit pronouns a language without lists works (nothing is flagged as gendered)
    assert build(d, tmp_path / "y.jsonl", "de", "--src-pronouns", "kaniyang,niya") == 0
    assert len(read_jsonl(tmp_path / "y.jsonl")) == 2
    assert cli_status(C.main, ["build", "--raw", str(d), "--src", "de", "--ref", "en_web",
                               "--out", str(tmp_path / "z.jsonl"), "--min-distance", "-1"]) == 2
    assert "--min-distance" in capsys.readouterr().err


@pytest.mark.parametrize("short", ["en_web", "ids"])
def test_mismatched_line_counts_name_the_file_and_line(tmp_path, capsys, short):
    d = write_split(tmp_path / "en_web-tl", "test", TL, "tl")
    path = d / f"test.{short}"
    path.write_text("".join(line + "\n" for line in path.read_text(encoding="utf-8").splitlines()[:3]),
                    encoding="utf-8")
    assert cli_status(C.main, ["build", "--raw", str(d), "--src", "tl", "--ref", "en_web",
                               "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # line 4 of the short file is the first without a counterpart in test.tl (5 lines)
    assert err == [f"error: {path}:4: 3 lines but {d / 'test.tl'} has 5"]


# Spanish -> English, two training books: BookA is held out (prepare --exclude-books), BookB stays in train
ES = [
    ("BookB.1.1", "Y el día era claro.", "And the day was clear."),
    ("BookB.1.2", "Y la casa era vieja.", "And the house was old."),
    ("BookA.1.1", "Había una mujer en la ciudad.", "There was a woman in the city."),
    ("BookA.1.2", "Y la casa era vieja.", "And the house was old."),
    ("BookA.1.3", "Y tomó su manto.", "And she took her cloak."),
    ("BookA.1.4", "El hombre tomó su vara.", "The man took his rod."),
    ("BookA.2.1", "Y se fue.", "And he went away."),
    ("BookB.2.1", "Y el hombre tomó su vara.", "And the man took his rod."),
]


def test_build_from_held_out_books(tmp_path):
    """The set of the held-out books: `build --split heldout` on the folder of prepare --exclude-books draws its
    instances from those books only, the line of each instance is its verse's line in the heldout split (the
    split the scorer loads with --gen-subset heldout), and the chapter is the context (2.1 has no antecedent)."""
    from fairseq_ext.tools.corpora import corpora

    raw = tmp_path / "raw"
    write_split(raw, "train", ES, "es", "en")
    write_split(raw, "test", ES[:1], "es", "en")
    out = corpora.subsample(str(raw), str(tmp_path / "held"), ["es", "en"], None, exclude_books=("BookA",))
    held_ids = (tmp_path / "held" / "heldout.ids").read_text(encoding="utf-8").split()
    assert held_ids == [r[0] for r in ES if r[0].startswith("BookA.")]
    assert C.main(["build", "--raw", out, "--split", "heldout", "--out", str(tmp_path / "set.jsonl"),
                   "--name-corpus", str(raw / "names.en"), "--stats-json", str(tmp_path / "st.json")]) == 0
    xs = read_jsonl(tmp_path / "set.jsonl")
    assert [(x["id"], x["line"], x["gender"], x["distance"]) for x in xs] == [("BookA.1.3", 2, "f", 2),
                                                                             ("BookA.1.4", 3, "m", 0)]
    held_en = (tmp_path / "held" / "heldout.en").read_text(encoding="utf-8").splitlines()
    assert all(held_en[x["line"]] == x["reference"] and held_ids[x["line"]] == x["id"] for x in xs)
    assert xs[0]["antecedent"]["id"] == "BookA.1.1" and "And he took his cloak." in xs[0]["variants"]
    st = json.loads((tmp_path / "st.json").read_text())
    assert st["split"] == "heldout" and st["skipped"]["no_antecedent"] == 1  # BookA.2.1: a new chapter
    # the fair set: antecedent outside the verse
    assert C.main(["build", "--raw", out, "--split", "heldout", "--out", str(tmp_path / "fair.jsonl"),
                   "--name-corpus", str(raw / "names.en"), "--min-distance", "1", "--exclude-gendered-source"]) == 0
    assert [x["id"] for x in read_jsonl(tmp_path / "fair.jsonl")] == ["BookA.1.3"]


def test_score_a_document_model_on_the_held_out_books(tmp_path):
    """prepare --exclude-books Lamentations on the tiny slice, a HAN encoder model (doc_translation) trained two
    updates on it, the set of the held-out book scored with --gen-subset heldout: every reference is the split's
    target (the set's lines are the heldout split's), and the chapter is the context the model reads (the scores
    change when each verse is made a document of its own)."""
    import shutil

    import torch

    from fairseq_ext.tools.corpora import corpora
    from harness import TINY, TINY_SHAPE_FLAGS, train

    raw = tmp_path / "raw"
    shutil.copytree(TINY, raw)
    bin_dir = Path(corpora.prepare(None, "es", "en", raw=str(raw), out=str(tmp_path / "p"), vocab_size=300,
                                   exclude_books=("Lamentations",)))
    held_raw = next((tmp_path / "p").glob("raw-heldout1-*"))
    set_path = tmp_path / "set.jsonl"
    assert C.main(["build", "--raw", str(held_raw), "--split", "heldout", "--out", str(set_path),
                   "--name-corpus", str(raw / "train.en")]) == 0
    xs = read_jsonl(set_path)
    assert len(xs) >= 8 and {x["id"].split(".")[0] for x in xs} == {"Lamentations"}
    ckpt = train(bin_dir, tmp_path / "han", ["--arch", "transformer_han_enc_bench", *TINY_SHAPE_FLAGS],
                 task="doc_translation", max_update=2, extra=["--disable-validation"])
    assert any(k.startswith("encoder.ctx_layer.") for k in torch.load(ckpt, map_location="cpu",
                                                                       weights_only=False)["model"])
    spm = bin_dir.parent / "spm.model"

    def score(tag, *extra):
        acc, det = tmp_path / f"{tag}.json", tmp_path / f"{tag}.jsonl"
        assert C.main(["score", "--set", str(set_path), "--spm", str(spm), "--json", str(acc), "--details", str(det),
                       str(bin_dir), "--path", str(ckpt), "--task", "doc_translation", "--gen-subset", "heldout",
                       "--cpu", *extra]) == 0
        return json.loads(acc.read_text()), read_jsonl(det)

    acc, det = score("chapter")
    assert acc["split"] == "heldout" and acc["reference_mismatches"] == 0 and acc["overall"]["total"] == len(xs)
    _, alone = score("alone", "--doc-max-context", "0")  # no context sentence
    far = [k for k, x in enumerate(xs) if x["id"].rsplit(".", 1)[1] != "1"]  # not the first verse of its chapter
    assert far and any(abs(det[k]["reference_score"] - alone[k]["reference_score"]) > 1e-4 for k in far)
    for k in set(range(len(xs))) - set(far):  # a chapter's first verse has no previous sentence to read
        assert det[k]["reference_score"] == pytest.approx(alone[k]["reference_score"], abs=1e-4)



def test_old_option_name_still_accepted():
    """--es-pronouns (the option's name before --src-pronouns) stays an alias of it."""
    args = C.build_parser().parse_args(["build", "--raw", "r", "--out", "o.jsonl", "--es-pronouns", "a,b"])
    assert args.src_pronouns == "a,b"

"""Nguyen ch. 3: transfer across related languages -- transliteration (table + uroman), joint
parent+child BPE with one vocabulary, word-based embedding remap, vocabulary overlap, BLEU-vs-size
plot, ``transfer_translation`` (``--finetune-from-model``, ``--freeze-target-embeddings``)."""
import json
import random
import shutil
import sys

import pytest
import torch
from fairseq.data import Dictionary

import fairseq_ext  # noqa: F401  (registers the tasks; checkpoint allow-list)
from fairseq_ext.tools.corpora import corpora, transfer
from fairseq_ext.tools.corpora.transliterate import (
    UYGHUR_LETTERS, UYGHUR_TABLE, Transliterator, dump_table, load_table, reverse_uyghur, transliterate)
from fairseq_ext.tools.common import ToolError, read_lines
from fairseq_ext.tasks.transfer_translation import freeze_target_embeddings
from harness import TINY, build_model, fairseq, run, train

# ----------------------------------------------------------------------------- transliteration
KNOWN = [  # Uyghur Arabic script -> ULY-ASCII (and back)
    ("ئۇيغۇر", "uyghur"), ("مەكتەپ", "mektep"), ("قەشقەر", "qeshqer"), ("ئۈرۈمچى", "u'ru'mchi"),
    ("شىنجاڭ", "shinjang"), ("يېزا", "ye'za"), ("تائام", "taam"), ("ئانا", "ana"), ("بۆرە", "bo're"),
    ("ژۇرنال", "zhurnal"), ("خەت", "xet"), ("ۋەتەن", "weten"),
]


@pytest.mark.parametrize("arabic,latin", KNOWN)
def test_uyghur_table_round_trips_known_words(arabic, latin):
    assert transliterate(arabic) == latin
    assert reverse_uyghur(latin) == arabic


def test_uyghur_sentence_punctuation_and_digits():
    s = "ھەممە ئادەم، ئەركىن؟ ١٩٤٨؛ ۲۰۲۴"
    assert transliterate(s) == "hemme adem, erkin? 1948; 2024"
    assert reverse_uyghur("hemme adem, erkin?") == "ھەممە ئادەم، ئەركىن؟"


def test_uyghur_table_is_a_homomorphism_covering_every_letter():
    assert len(UYGHUR_LETTERS) == 33  # 32 letters + the hamza carrier
    for c, r in UYGHUR_LETTERS:
        assert UYGHUR_TABLE[c] == r and r.isascii()
    alphabet = list(UYGHUR_TABLE) + list("abc ,.!") + ["\u062b"]  # + a letter outside the table
    rng = random.Random(0)
    for _ in range(300):
        a = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        b = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert transliterate(a + b) == transliterate(a) + transliterate(b)
    assert all(transliterate(c).isascii() for c in UYGHUR_TABLE)
    assert transliterate("\ufefb") == "la"  # presentation forms are NFKC-normalised first (lam-alef)


def test_transliteration_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(ToolError, match="unknown transliteration scheme 'klingon'; known: uyghur, uroman"):
        Transliterator("klingon")
    t = Transliterator("uyghur")
    with pytest.raises(ToolError, match=r"no character of the 'uyghur' table's script.*CYRILLIC"):
        t.lines(["Москва это город"], "in.txt")
    assert t.lines(["ثابت"]) == ["\u062babt"]  # an unknown letter passes through...
    with pytest.raises(ToolError, match=r"in.txt:2: '\u062b' \(U\+062B ARABIC LETTER THEH\)"):
        t.lines(["ئانا", "ثابت"], "in.txt", strict=True)  # ...unless --strict


def test_table_files_dump_load_and_errors(tmp_path):
    p = tmp_path / "t.tsv"
    p.write_text(dump_table(UYGHUR_TABLE), encoding="utf-8")
    assert load_table(str(p)) == UYGHUR_TABLE
    custom = tmp_path / "c.tsv"
    custom.write_text("# mine\n\\u0436\tzh\nб\tb\n", encoding="utf-8")
    t = Transliterator(str(custom))
    assert t("жаба") == "zh\u0430b\u0430"  # only ж and б are in this table
    bad = tmp_path / "bad.tsv"
    bad.write_text("ab\tx\n", encoding="utf-8")
    with pytest.raises(ToolError, match="bad.tsv:1: the source must be exactly one character"):
        load_table(str(bad))


def test_uroman_any_script():
    import uroman  # noqa: F401  (pinned in setup.py; the test must run, not skip)
    t = Transliterator("uroman")
    assert t("Москва") == "Moskva"
    assert Transliterator("uroman", lcode="uig")("ئۇيغۇر") == "uyghur"
    assert t("Ελλάδα") == "Ellada"


def _uyghur_folder(root):
    raw = root / "raw"
    raw.mkdir()
    words = [a for a, _ in KNOWN]
    for k, sp in enumerate(("train", "valid", "test")):
        ug = [" ".join(words[(k + i + j) % len(words)] for j in range(3)) for i in range(4)]
        (raw / f"{sp}.ug").write_text("".join(s + "\n" for s in ug), encoding="utf-8")
        (raw / f"{sp}.en").write_text("".join(f"line {k} {i}\n" for i in range(4)), encoding="utf-8")
        (raw / f"{sp}.ids").write_text("".join(f"{sp}.{i}\n" for i in range(4)), encoding="utf-8")
    return raw


def test_transliterate_folder_cli(tmp_path):
    raw = _uyghur_folder(tmp_path)
    out = tmp_path / "latn"
    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.transliterate", "folder", raw, out, "--lang", "ug"])
    assert json.loads(p.stdout) == {"train": 4, "valid": 4, "test": 4}
    lines = read_lines(str(out / "train.ug"))
    assert lines[0] == " ".join(transliterate(w) for w in read_lines(str(raw / "train.ug"))[0].split())
    assert all(s.isascii() for s in lines)
    assert (out / "train.en").read_text() == (raw / "train.en").read_text()
    corpora.check(str(out), "ug", "en")  # a valid parallel folder
    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.transliterate", "folder", raw, tmp_path / "x", "--lang",
             "ug", "--scheme", "klingon"], check=False)
    assert p.returncode == 2 and p.stderr.strip().startswith("error: unknown transliteration scheme")
    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.transliterate", "file"], input_text="ئۇيغۇر\n")
    assert p.stdout == "uyghur\n"


# ----------------------------------------------------------------------------- joint BPE
def _pair(tmp, name, src):
    d = tmp / name
    d.mkdir()
    for sp in ("train", "valid", "test"):
        for x in (src, "en", "ids"):
            shutil.copy(TINY / f"{sp}.{x}", d / f"{sp}.{x}")
    return d


@pytest.fixture(scope="module")
def joint(tmp_path_factory):
    """Parent es->en and child kjv->en (the tiny slice), one joint BPE of 300 merges."""
    tmp = tmp_path_factory.mktemp("joint")
    parent, child = _pair(tmp, "parent", "es"), _pair(tmp, "child", "kjv")
    out = tmp / "out"
    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.transfer", "joint-bpe", "--parent", parent, "--parent-src",
             "es", "--parent-tgt", "en", "--child", child, "--child-src", "kjv", "--merges", 300, "--out", out])
    return {"out": out, "summary": json.loads(p.stdout), "parent_raw": parent, "child_raw": child, "tmp": tmp}


def test_joint_bpe_gives_one_shared_vocabulary(joint):
    out = joint["out"]
    codes = read_lines(str(out / "bpe.codes"))
    assert codes[0].startswith("#version") and len(codes) - 1 <= 300
    ref = (out / "dict.txt").read_text(encoding="utf-8")
    for f in ("parent/bin/dict.es.txt", "parent/bin/dict.en.txt", "child/bin/dict.kjv.txt", "child/bin/dict.en.txt"):
        assert (out / f).read_text(encoding="utf-8") == ref
    d = Dictionary.load(str(out / "dict.txt"))
    assert joint["summary"]["dict_size"] == len(d) and len(d) % 8 == 0
    # every token of the four segmented training files is in the one dictionary (no <unk> in train)
    for f in ("parent/train.es", "parent/train.en", "child/train.kjv", "child/train.en"):
        toks = {t for line in read_lines(str(out / f)) for t in line.split()}
        assert all(d.index(t) != d.unk() for t in toks)
    seg = read_lines(str(out / "child/train.kjv"))
    assert any("@@ " in s for s in seg)
    assert [s.replace("@@ ", "") for s in seg] == read_lines(str(joint["child_raw"] / "train.kjv"))
    assert 0 < joint["summary"]["child_src_overlap"]["train"]["share"] < 1
    assert transfer.check_dictionaries(str(out / "parent/bin"), str(out / "child/bin"))["dict_size"] == len(d)


def test_joint_bpe_bad_inputs(joint, tiny_bin, tmp_path):
    with pytest.raises(ToolError, match="missing child training file"):
        transfer.joint_bpe(str(joint["parent_raw"]), "es", "en", str(joint["child_raw"]), "ug", "en",
                           str(tmp_path / "o"), 100)
    with pytest.raises(ToolError, match="source and target language are the same"):
        transfer.joint_bpe(str(joint["parent_raw"]), "en", "en", str(joint["child_raw"]), "kjv", "en",
                           str(tmp_path / "o"), 100)
    with pytest.raises(ToolError, match="mismatched parent/child vocabulary"):
        transfer.check_dictionaries(str(joint["out"] / "parent/bin"), str(tiny_bin))


# ----------------------------------------------------------------------------- overlap and plot
def test_vocab_overlap(tmp_path):
    (tmp_path / "p").write_text("a a a b b c d\n", encoding="utf-8")
    (tmp_path / "ct").write_text("a b x x\nx y\n", encoding="utf-8")
    (tmp_path / "cd").write_text("c z\n", encoding="utf-8")
    r = transfer.vocab_overlap(str(tmp_path / "ct"), str(tmp_path / "cd"), parent_text=str(tmp_path / "p"))
    assert r["train"] == {"types": 4, "in_parent": 2, "share": 0.5} and r["dev"]["share"] == 0.5
    r = transfer.vocab_overlap(str(tmp_path / "ct"), str(tmp_path / "cd"), parent_text=str(tmp_path / "p"),
                               vocab_size=2)  # parent {a, b}; child train {x, a}
    assert r["train"]["in_parent"] == 1 and r["dev"]["in_parent"] == 0
    d = Dictionary()
    for w in "a b c".split():
        d.add_symbol(w)
    d.save(str(tmp_path / "dict.txt"))
    r = transfer.vocab_overlap(str(tmp_path / "ct"), None, parent_dict=str(tmp_path / "dict.txt"))
    assert r["parent_types"] == 3 and r["train"]["in_parent"] == 2


def test_bleu_vs_vocab_plot(tmp_path):
    tsv = tmp_path / "sweep.tsv"
    tsv.write_text("system\tsize\tbleu\nbaseline\t5000\t10.1\nbaseline\t10000\t11.1\ntransfer\t5000\t12.0\n"
                   "transfer\t10000\t13.2\n+freeze\t10000\t12.9\n", encoding="utf-8")
    png = tmp_path / "fig" / "bleu_vs_bpe.png"
    p = run([sys.executable, "-m", "fairseq_ext.tools.corpora.transfer", "plot", tsv, "--out", png])
    assert png.stat().st_size > 1000 and json.loads(p.stdout)["plot"] == str(png)
    tsv.write_text("name\tbleu\nx\t1\n", encoding="utf-8")
    with pytest.raises(ToolError, match="needs a header with the columns system, size, bleu"):
        transfer.read_sweep(str(tsv))


# ----------------------------------------------------------------------------- remap (word-based transfer)
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def test_remap_rows():
    parent = SPECIALS + ["the", "a", "dog", "cat"]
    child = SPECIALS + ["cat", "kedi", "the", "ev"]
    assert transfer.remap_rows(parent, child, "index") == list(range(8))
    # identity: cat -> 7, the -> 4; the others take the unused parent rows 5, 6 in order
    assert transfer.remap_rows(parent, child, "identity") == [0, 1, 2, 3, 7, 5, 4, 6]
    with pytest.raises(ToolError, match="mismatched parent/child vocabulary: the parent dictionary has 8 "
                                          "entries, the child's 6"):
        transfer.remap_rows(parent, child[:6], "index")
    assert transfer.remap_rows(parent, child + ["new"], "index", allow_size_mismatch=True)[-1] == -1
    with pytest.raises(ToolError, match="special symbols differ"):
        transfer.remap_rows(parent, ["x"] + child[1:], "index")


def _dict_file(path, words):
    d = Dictionary()
    for w in words:
        d.add_symbol(w)
    d.save(str(path))
    return len(d)


def test_remap_checkpoint_moves_rows(tmp_path):
    n = _dict_file(tmp_path / "p.src", ["x1", "x2"])
    _dict_file(tmp_path / "p.tgt", ["the", "dog"])
    _dict_file(tmp_path / "c.src", ["y1", "y2"])
    _dict_file(tmp_path / "c.tgt", ["dog", "cat"])
    enc = torch.arange(n * 2, dtype=torch.float).view(n, 2)
    dec = 100 + enc
    torch.save({"model": {"encoder.embed_tokens.weight": enc, "decoder.embed_tokens.weight": dec,
                          "decoder.output_projection.weight": dec.clone(), "decoder.layers.0.fc1.weight": torch.ones(3)},
                "last_optimizer_state": {"state": {}}}, tmp_path / "parent.pt")
    rep = transfer.remap_checkpoint(str(tmp_path / "parent.pt"), str(tmp_path / "p.src"), str(tmp_path / "p.tgt"),
                                    str(tmp_path / "c.src"), str(tmp_path / "c.tgt"), str(tmp_path / "child.pt"))
    st = torch.load(tmp_path / "child.pt", weights_only=True)
    m = st["model"]
    assert torch.equal(m["encoder.embed_tokens.weight"], enc)  # index map: same rows
    # target identity map: "dog" (parent row 5) -> child row 4; "cat" gets the unused row 4 ("the")
    assert torch.equal(m["decoder.embed_tokens.weight"][4], dec[5]) and torch.equal(m["decoder.embed_tokens.weight"][5], dec[4])
    assert torch.equal(m["decoder.output_projection.weight"], m["decoder.embed_tokens.weight"])
    assert "last_optimizer_state" not in st and rep["target"]["identity_rows"] == 4 + 1
    _dict_file(tmp_path / "big", ["a", "b", "c", "d", "e", "f", "g", "h", "i"])
    with pytest.raises(ToolError, match="has 6 rows but the parent source dictionary has 13 entries"):
        transfer.remap_checkpoint(str(tmp_path / "parent.pt"), str(tmp_path / "big"), str(tmp_path / "p.tgt"),
                                  str(tmp_path / "big"), str(tmp_path / "c.tgt"), str(tmp_path / "x.pt"))


# ----------------------------------------------------------------------------- freezing
def test_freeze_target_embeddings_unit():
    m = build_model("transformer", vocab=40, encoder_layers=1, decoder_layers=1, encoder_embed_dim=8,
                    decoder_embed_dim=8, encoder_ffn_embed_dim=8, decoder_ffn_embed_dim=8,
                    encoder_attention_heads=2, decoder_attention_heads=2, share_decoder_input_output_embed=True)
    frozen = freeze_target_embeddings(m)
    assert len(frozen) == 1 and not m.decoder.embed_tokens.weight.requires_grad
    assert m.encoder.embed_tokens.weight.requires_grad
    shared = build_model("transformer", vocab=40, encoder_layers=1, decoder_layers=1, encoder_embed_dim=8,
                         decoder_embed_dim=8, encoder_ffn_embed_dim=8, decoder_ffn_embed_dim=8,
                         encoder_attention_heads=2, decoder_attention_heads=2, share_all_embeddings=True)
    with pytest.raises(ValueError, match="share one embedding matrix"):
        freeze_target_embeddings(shared)


# ----------------------------------------------------------------------------- CLI: parent -> child
UNTIED = ["--arch", "transformer", "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
          "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
          "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--share-decoder-input-output-embed"]


def _model(ckpt):
    return torch.load(ckpt, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def parent_ckpt(joint):
    return train(joint["out"] / "parent" / "bin", joint["tmp"] / "parent_ck", UNTIED, task="transfer_translation",
                 max_update=5)


def test_cli_transfer_with_frozen_target_embeddings(joint, parent_ckpt, tmp_path):
    child_bin = joint["out"] / "child" / "bin"
    ckpt = train(child_bin, tmp_path, UNTIED, task="transfer_translation", max_update=4,
                 extra=["--finetune-from-model", parent_ckpt, "--freeze-target-embeddings",
                        "--transfer-parent-data", joint["out"] / "parent" / "bin"])
    parent, child = _model(parent_ckpt), _model(ckpt)
    pm, cm = parent["model"], child["model"]
    assert torch.equal(cm["decoder.embed_tokens.weight"], pm["decoder.embed_tokens.weight"])  # transferred + frozen
    assert not torch.equal(cm["encoder.embed_tokens.weight"], pm["encoder.embed_tokens.weight"])  # trained on
    assert child["optimizer_history"][-1]["num_updates"] == 4  # optimizer and counters reset (not 5 + 4)
    assert parent["optimizer_history"][-1]["num_updates"] == 5


def test_cli_child_with_another_vocabulary_is_refused(joint, parent_ckpt, tiny_bin, tmp_path):
    common = [*UNTIED, "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "1",
              "--cpu", "--task", "transfer_translation"]
    p = fairseq("train", tiny_bin, *common, "--save-dir", tmp_path / "a", "--transfer-parent-data",
                joint["out"] / "parent" / "bin", check=False)
    assert p.returncode != 0 and "mismatched parent/child vocabulary (source side)" in p.stderr
    p = fairseq("train", tiny_bin, *common, "--save-dir", tmp_path / "b", "--finetune-from-model", parent_ckpt,
                check=False)
    assert p.returncode != 0 and "mismatched parent/child vocabulary: the checkpoint's encoder.embed_tokens" in p.stderr


def test_cli_word_based_transfer_with_remapped_embeddings(joint, parent_ckpt, tmp_path):
    """Zoph et al.: the child has its own (word) vocabularies; parent rows are re-assigned by index."""
    word_bin = corpora.binarize(str(joint["child_raw"]), str(tmp_path / "word"), "kjv", "en", joined=False)
    pdict = joint["out"] / "dict.txt"
    args = [sys.executable, "-m", "fairseq_ext.tools.corpora.transfer", "remap", "--parent-ckpt", parent_ckpt,
            "--parent-src-dict", pdict, "--parent-tgt-dict", pdict, "--child-src-dict", f"{word_bin}/dict.kjv.txt",
            "--child-tgt-dict", f"{word_bin}/dict.en.txt", "--out", tmp_path / "remapped.pt"]
    p = run(args, check=False)
    assert p.returncode == 2 and "error: mismatched parent/child vocabulary (source side)" in p.stderr
    rep = json.loads(run(args + ["--allow-size-mismatch"]).stdout)
    n_src = len(Dictionary.load(f"{word_bin}/dict.kjv.txt"))
    assert rep["source"]["child_size"] == n_src and rep["keys"]["encoder.embed_tokens.weight"][1][0] == n_src
    rm, pm = _model(tmp_path / "remapped.pt")["model"], _model(parent_ckpt)["model"]
    k = min(n_src, pm["encoder.embed_tokens.weight"].shape[0])
    assert torch.equal(rm["encoder.embed_tokens.weight"][:k], pm["encoder.embed_tokens.weight"][:k])  # by index
    assert torch.equal(rm["encoder.layers.0.fc1.weight"], pm["encoder.layers.0.fc1.weight"])  # the rest as is
    ckpt = train(word_bin, tmp_path / "ck", UNTIED, task="transfer_translation", max_update=3,
                 extra=["--finetune-from-model", tmp_path / "remapped.pt"])
    assert _model(ckpt)["model"]["encoder.embed_tokens.weight"].shape[0] == n_src

"""Gu (2019) ch. 5: the offline tool ``fairseq-ext-ulr`` (embed -> seed-dict -> project -> closest) on a tiny
folder of two cipher "languages" (bijective token ciphers of a synthetic English), where the true dictionary is
known, and its one-line errors. The ULR / MoLE math is in ``test_ulr_math.py``."""
from __future__ import annotations

import json
import os
import random
import re

import numpy as np
import pytest
import torch

from fairseq_ext.modules.ulr import ULREmbedding, alpha_with_missing
from fairseq_ext.tools.corpora import ulr as tool
from fairseq_ext.tools.corpora.ulr_embed import train_embeddings
from fairseq_ext.tools.corpora.ulr_files import read_vec
from fairseq_ext.tools.common import ToolError, read_lines

W = "\u2581"


# =========================================================================== the tool on a cipher folder
NOUNS = ["king", "house", "garden", "water", "bread", "city", "people", "son", "land", "day", "light",
         "voice", "hand", "word", "gold", "fire"]
VERBS = ["saw", "gave", "took", "made", "found", "loved", "built", "heard"]
ADJS = ["great", "good", "old", "new", "holy", "small"]
SPLIT = {"house": ["hou", "se"], "garden": ["gar", "den"], "people": ["peo", "ple"]}
LANGS = ("xa", "xb")


def en_sentence(rng: random.Random) -> list[str]:
    words = ["the", rng.choice(ADJS), rng.choice(NOUNS), rng.choice(VERBS), "the", rng.choice(NOUNS)]
    if rng.random() < 0.5:
        words += ["and", rng.choice(VERBS), "the", rng.choice(ADJS), rng.choice(NOUNS)]
    if rng.random() < 0.4:
        words += ["in", str(rng.randint(1, 9))]
    pieces = []
    for w in words:
        parts = SPLIT.get(w, [w])
        pieces += [W + parts[0]] + parts[1:]
    return pieces + [W + "."]


def cipher_piece(p: str, lang: str) -> str:
    """A bijective cipher of an English piece (digits and punctuation stay)."""
    start = p.startswith(W)
    body = p[1:] if start else p
    if not body.isalpha():
        return p
    body = body[::-1] + "o" if lang == "xa" else "".join(chr((ord(c) - 97 + 3) % 26 + 97) for c in body) + "i"
    return (W if start else "") + body


def write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(x + "\n" for x in lines))


def build_folder(root) -> str:
    rng = random.Random(7)
    d = str(root)
    text_en = [" ".join(en_sentence(rng)) for _ in range(400)]
    write(os.path.join(d, "spm", "text.en"), text_en)
    train_src = []
    for lang, n in (("xa", 300), ("xb", 200)):
        en = [en_sentence(rng) for _ in range(n)]
        src = [[cipher_piece(p, lang) for p in s] for s in en]
        mono = [[cipher_piece(p, lang) for p in en_sentence(rng)] for _ in range(100)]
        write(os.path.join(d, "spm", f"para.{lang}"), [" ".join(s) for s in src])
        write(os.path.join(d, "spm", f"para.{lang}.en"), [" ".join(s) for s in en])
        write(os.path.join(d, "spm", f"text.{lang}"), [" ".join(s) for s in src + mono])
        train_src += [" ".join(f"{p}__{lang}" for p in s) for s in src]
    write(os.path.join(d, "spm", "train.src"), train_src)
    counts: dict[str, int] = {}
    for line in train_src:
        for t in line.split():
            counts[t] = counts.get(t, 0) + 1
    syms = sorted(counts, key=lambda s: (-counts[s], s))
    write(os.path.join(d, "bin", "dict.src.txt"), [f"{s} {counts[s]}" for s in syms] + ["madeupword0000 0"])
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({"aux": ["xa"], "lowres": "xb", "langs": list(LANGS), "target": "en"}, f)
    return d


EMBED = ["--dim", "16", "--epochs", "3", "--bucket", "5000", "--min-count", "1"]


@pytest.fixture(scope="module")
def ulr_folder(tmp_path_factory):
    d = build_folder(tmp_path_factory.mktemp("ulr") / "DIR")
    assert tool.main(["embed", "--data", d] + EMBED) == 0
    assert tool.main(["seed-dict", "--data", d, "--min-count", "3"]) == 0
    assert tool.main(["project", "--data", d, "--num-universal", "30", "--alpha-top", "5"]) == 0
    return d


def dict_symbols(d):
    lines = read_lines(os.path.join(d, "bin", "dict.src.txt"))
    return ["<s>", "<pad>", "</s>", "<unk>"] + [x.split()[0] for x in lines]


def test_embed_writes_unit_vectors(ulr_folder, capsys):
    for lang in LANGS + ("en",):
        words, vecs = read_vec(os.path.join(ulr_folder, "ulr", f"emb.{lang}.vec"))
        assert vecs.shape == (len(words), 16)
        assert np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-4)
        text_vocab = {t for line in read_lines(os.path.join(ulr_folder, "spm", f"text.{lang}")) for t in line.split()}
        assert set(words) == text_vocab
    # up to date: reused
    assert tool.main(["embed", "--data", ulr_folder] + EMBED) == 0
    assert capsys.readouterr().err.count("up to date") == 3


def test_centered_embeddings():
    rng = random.Random(3)
    sents = [en_sentence(rng) for _ in range(100)]
    words, vecs, composed = train_embeddings(sents, 8, 2, 3, 1, "word2vec", 1, 1000, center=True)
    assert composed == 0 and len(words) == vecs.shape[0]
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-4)
    assert np.linalg.norm(vecs.mean(0)) < 0.2
    again, vecs2, _ = train_embeddings(sents, 8, 2, 3, 1, "word2vec", 1, 1000, center=True)
    assert again == words and np.array_equal(vecs, vecs2)  # one worker, fixed seed, stable hash
    w3, v3, composed = train_embeddings(sents, 8, 2, 3, 1, "fasttext", 1, 1000, extra_words=["▁kings", "<unk>"])
    assert composed == 1 and w3[-1] == "▁kings" and v3.shape == (len(w3), 8)


def test_seed_dict_is_the_true_cipher(ulr_folder):
    for lang in LANGS:
        rows = [x.split("\t") for x in read_lines(os.path.join(ulr_folder, "ulr", f"seed.{lang}.tsv"))]
        assert len(rows) >= 15
        srcs, ens = [r[0] for r in rows], [r[1] for r in rows]
        assert len(set(srcs)) == len(srcs) and len(set(ens)) == len(ens)  # one-to-one
        counts = [int(r[2]) for r in rows]
        assert counts == sorted(counts, reverse=True) and min(counts) >= 3
        for f, e, _, kind in rows:
            assert f == cipher_piece(e, lang), (f, e)
            assert f.startswith(W) and e.startswith(W)
            assert kind in ("align", "identical")
        fragments = {W + p[0] for p in SPLIT.values()}
        assert not fragments & set(ens)  # "▁hou" (of "▁hou se") is never a seed


def test_project_outputs(ulr_folder):
    u = os.path.join(ulr_folder, "ulr")
    syms = dict_symbols(ulr_folder)
    query, key, alpha = np.load(os.path.join(u, "query.npy")), np.load(os.path.join(u, "key.npy")), \
        np.load(os.path.join(u, "alpha.npy"))
    universal = read_lines(os.path.join(u, "universal.txt"))
    man = json.load(open(os.path.join(u, "manifest.json")))
    assert query.dtype == np.float32 and key.dtype == np.float32 and alpha.dtype == np.bool_
    assert query.shape == (len(syms), 16) and alpha.shape == (len(syms),)
    assert key.shape == (30, 16) and len(universal) == 30 and man["M"] == 30 and man["dim"] == 16
    assert np.allclose(np.linalg.norm(key, axis=1), 1, atol=1e-4)
    en_counts = {}
    for line in read_lines(os.path.join(ulr_folder, "spm", "text.en")):
        for t in line.split():
            en_counts[t] = en_counts.get(t, 0) + 1
    assert [en_counts[w] for w in universal] == sorted((en_counts[w] for w in universal), reverse=True)
    assert min(en_counts[w] for w in universal) >= sorted(en_counts.values(), reverse=True)[29]
    norms = np.linalg.norm(query, axis=1)
    for i, s in enumerate(syms):  # rows aligned with the dictionary
        if i < 4 or s.startswith("madeupword"):
            assert norms[i] == 0 and not alpha[i]
        else:
            assert abs(norms[i] - 1) < 1e-4, s
    # each row is the projected embedding of its own piece
    for lang in LANGS:
        words, vecs = read_vec(os.path.join(u, f"emb.{lang}.vec"))
        O = np.load(os.path.join(u, "rotation.npz"))[lang]
        assert np.allclose(O.T @ O, np.eye(16), atol=1e-4)
        idx = {w: k for k, w in enumerate(words)}
        for i, s in enumerate(syms):
            if s.endswith(f"__{lang}"):
                assert np.allclose(query[i], vecs[idx[s[:-4]]] @ O, atol=1e-4)
        assert man["seed_pairs"][lang] >= 15
        assert man["mean_cos_after"][lang] > man["mean_cos_before"][lang] + 0.2
    # alpha: the 5 most frequent pieces of each language in train.src
    counts = {}
    for line in read_lines(os.path.join(ulr_folder, "spm", "train.src")):
        for t in line.split():
            counts[t] = counts.get(t, 0) + 1
    for lang in LANGS:
        mine = sorted((s for s in syms if s.endswith(f"__{lang}")), key=lambda s: (-counts[s], syms.index(s)))
        assert {s for i, s in enumerate(syms) if alpha[i] and s.endswith(f"__{lang}")} == set(mine[:5])
    assert int(alpha.sum()) == 10


def test_project_layer_loads(ulr_folder):
    u = os.path.join(ulr_folder, "ulr")
    query = torch.from_numpy(np.load(os.path.join(u, "query.npy")))
    key = torch.from_numpy(np.load(os.path.join(u, "key.npy")))
    alpha = alpha_with_missing(torch.from_numpy(np.load(os.path.join(u, "alpha.npy"))), query)
    assert alpha[:4].all()
    m = ULREmbedding(len(query), 8, 1, query, key, alpha)
    out = m(torch.arange(len(query)).view(1, -1))
    assert out.shape == (1, len(query), 8) and torch.isfinite(out).all()


def test_closest(ulr_folder, tmp_path):
    out = str(tmp_path / "closest.tsv")
    assert tool.main(["closest", "--data", ulr_folder, "--lang", "xb", "--top", "3", "--out", out]) == 0
    lines = read_lines(out)
    assert lines[0].split("\t") == ["index", "symbol", "lang", "rank", "universal", "q", "cosine"]
    rows = [x.split("\t") for x in lines[1:]]
    syms = dict_symbols(ulr_folder)
    n_xb = sum(s.endswith("__xb") for s in syms)
    assert len(rows) == 3 * n_xb
    universal = set(read_lines(os.path.join(ulr_folder, "ulr", "universal.txt")))
    for r in rows:
        assert r[2] == "xb" and syms[int(r[0])] == r[1] and r[4] in universal and 0 <= float(r[5]) <= 1
    for k in range(0, len(rows), 3):
        cos = [float(rows[k + j][6]) for j in range(3)]
        assert cos == sorted(cos, reverse=True) and [rows[k + j][3] for j in range(3)] == ["1", "2", "3"]


# --------------------------------------------------------------------------- errors
def run_cli_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        tool.cli_main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    errors = [x for x in captured.err.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in captured.err, captured.err
    assert captured.out == ""
    return errors[0]


def copy_folder(src, dst) -> str:
    import shutil

    shutil.copytree(src, dst)
    return str(dst)


def test_unknown_language_code(ulr_folder, capsys):
    err = run_cli_error(["embed", "--data", ulr_folder, "--langs", "zz"], capsys)
    assert re.match(r"error: unknown language code 'zz': no .*spm/text\.zz \(languages here: xa, xb\)$", err), err
    err = run_cli_error(["seed-dict", "--data", ulr_folder, "--langs", "xa,qq"], capsys)
    assert "unknown language code 'qq'" in err and "para.qq" in err
    err = run_cli_error(["closest", "--data", ulr_folder, "--lang", "qq"], capsys)
    assert "unknown language code 'qq'" in err


def test_empty_seed_dictionary(ulr_folder, tmp_path, capsys):
    d = copy_folder(ulr_folder, tmp_path / "d")
    err = run_cli_error(["seed-dict", "--data", d, "--langs", "xb", "--min-count", "100000", "--force"], capsys)
    assert re.match(r"error: empty seed dictionary for language 'xb': .*--min-count 100000", err), err
    write(os.path.join(d, "ulr", "seed.xa.tsv"), [])
    err = run_cli_error(["project", "--data", d], capsys)
    assert re.match(r"error: empty seed dictionary for language 'xa'", err), err


def test_missing_embeddings(ulr_folder, tmp_path, capsys):
    d = copy_folder(ulr_folder, tmp_path / "d")
    os.remove(os.path.join(d, "ulr", "emb.xb.vec"))
    err = run_cli_error(["project", "--data", d], capsys)
    assert re.match(r"error: missing embeddings for language 'xb': .*ulr/emb\.xb\.vec", err), err
    os.remove(os.path.join(d, "ulr", "emb.en.vec"))
    err = run_cli_error(["project", "--data", d], capsys)
    assert "missing embeddings for language 'en'" in err


def test_dict_symbol_without_language(ulr_folder, tmp_path, capsys):
    d = copy_folder(ulr_folder, tmp_path / "d")
    p = os.path.join(d, "bin", "dict.src.txt")
    lines = read_lines(p)
    lines[2] = "\u2581stray 3"
    write(p, lines)
    err = run_cli_error(["project", "--data", d], capsys)
    assert err == f"error: {p}:3: symbol '\u2581stray' has no language suffix __<lang>", err
    lines[2] = "\u2581stray__zz 3"
    write(p, lines)
    err = run_cli_error(["project", "--data", d], capsys)
    assert err.startswith(f"error: {p}:3: unknown language code 'zz' in symbol"), err
    with pytest.raises(ToolError, match="unknown language code 'zz'"):
        tool.main(["project", "--data", d])

"""Gu (2019) ch. 5: the Universal Lexical Representation (Eqs. 5.2-5.5), the Mixture of Language Experts
(Eqs. 5.6/5.7) and the offline tool ``fairseq-ext-ulr`` (embed -> seed-dict -> project -> closest) on a tiny
folder of two cipher "languages" (bijective token ciphers of a synthetic English), where the true
dictionary is known."""
from __future__ import annotations

import json
import os
import random
import re

import numpy as np
import pytest
import torch

from fairseq_ext.modules.ulr import MoLE, ULREmbedding, alpha_with_missing, mole_gate_loss, procrustes
from fairseq_ext.tools.corpora import ulr as tool
from fairseq_ext.tools.common import ToolError, read_lines

W = "\u2581"


def rand_orth(d: int, g: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


# =========================================================================== Procrustes (Eq. 5.4)
def test_procrustes_recovers_orthogonal_map():
    g = torch.Generator().manual_seed(0)
    d = 12
    Q = rand_orth(d, g)
    x = torch.randn(40, d, generator=g)
    O = procrustes(x, x @ Q)
    assert torch.allclose(O, Q, atol=1e-5)
    assert torch.allclose(O.t() @ O, torch.eye(d), atol=1e-5)
    noisy = procrustes(x, x @ Q + 0.05 * torch.randn(40, d, generator=g))
    assert torch.allclose(noisy.t() @ noisy, torch.eye(d), atol=1e-5)
    assert (noisy - Q).abs().max() < 0.1
    # it maximises the objective: no random orthogonal map does better
    y = x @ Q + 0.05 * torch.randn(40, d, generator=g)
    best = (x @ procrustes(x, y) * y).sum()
    for _ in range(20):
        assert (x @ rand_orth(d, g) * y).sum() <= best
    with pytest.raises(ValueError):
        procrustes(x, x[:, :5])


# =========================================================================== ULR (Eqs. 5.2/5.3/5.5)
NSPECIAL, PAD = 4, 1


@pytest.fixture(scope="module")
def cipher():
    """Universal tokens = M English tokens with random unit keys; a cipher language whose token
    4 + i means English token perm[i]; its raw queries are the keys rotated by a random orthogonal R; O from
    Procrustes on a seed subset; projected queries = raw @ O."""
    g = torch.Generator().manual_seed(1)
    M, dq, seeds = 60, 16, 24
    key = unit(torch.randn(M, dq, generator=g))
    perm = torch.randperm(M, generator=g)
    R = rand_orth(dq, g)
    raw = key[perm] @ R
    seed_idx = torch.randperm(M, generator=g)[:seeds]
    O = procrustes(raw[seed_idx], key[perm[seed_idx]])
    query = torch.zeros(NSPECIAL + M, dq)
    query[NSPECIAL:] = unit(raw @ O)
    alpha = torch.zeros(NSPECIAL + M, dtype=torch.bool)
    alpha[NSPECIAL::3] = True
    return dict(M=M, dq=dq, key=key, perm=perm, query=query, alpha=alpha, V=NSPECIAL + M)


def make_ulr(c, d=8, **kw) -> ULREmbedding:
    torch.manual_seed(0)
    return ULREmbedding(c["V"], d, PAD, c["query"], c["key"], c["alpha"], **kw)


def test_q_peaks_at_the_true_universal_token(cipher):
    m = make_ulr(cipher)
    tokens = torch.arange(NSPECIAL, cipher["V"]).view(3, -1)
    q = m.universal_probs(tokens)
    assert q.shape == (3, cipher["M"] // 3, cipher["M"])
    assert torch.equal(q.argmax(-1).flatten(), cipher["perm"])
    assert torch.allclose(q.sum(-1), torch.ones(q.shape[:2]), atol=1e-5)
    assert (q.max(-1).values > 0.9).all()  # τ = 0.05 makes it sharp


def test_zero_query_gives_uniform_q(cipher):
    m = make_ulr(cipher)
    q = m.universal_probs(torch.tensor([[0, 2, 3]]))  # specials: zero query rows
    assert torch.allclose(q, torch.full_like(q, 1.0 / cipher["M"]))


def test_closest_only_gives_one_hots(cipher):
    m = make_ulr(cipher, closest_only=True)
    tokens = torch.arange(NSPECIAL, cipher["V"]).view(1, -1)
    q = m.universal_probs(tokens)
    assert torch.equal(q, torch.nn.functional.one_hot(cipher["perm"], cipher["M"]).float().unsqueeze(0))
    out = m(tokens)
    expected = m.universal[cipher["perm"]] + m.embed(tokens[0]) * cipher["alpha"][tokens[0]].unsqueeze(-1)
    assert torch.allclose(out[0], expected, atol=1e-6)


def test_buffers_frozen_and_A_trained(cipher):
    for fixed in (False, True):
        m = make_ulr(cipher, fixed_A=fixed)
        names = {n for n, _ in m.named_parameters()}
        assert names == ({"universal", "embed.weight"} | (set() if fixed else {"A"}))
        assert {"query", "key", "alpha"} <= {n for n, _ in m.named_buffers()}
        assert ("A" in dict(m.named_buffers())) == fixed
        before = {k: v.clone() for k, v in m.state_dict().items()}
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        tokens = torch.randint(0, cipher["V"], (4, 7), generator=torch.Generator().manual_seed(3))
        target = torch.randn(4, 7, 8, generator=torch.Generator().manual_seed(4))
        loss = ((m(tokens) - target) ** 2).sum()
        loss.backward()
        opt.step()
        after = m.state_dict()
        for b in ("query", "key", "alpha"):
            assert torch.equal(before[b], after[b])
        assert torch.equal(before["A"], after["A"]) == fixed
        assert not torch.equal(before["universal"], after["universal"])


def test_alpha_mixing_matches_hand_formula(cipher):
    m = make_ulr(cipher)
    with torch.no_grad():
        m.A.copy_(torch.eye(cipher["dq"]) + 0.1 * torch.randn(cipher["dq"], cipher["dq"]))
    tokens = torch.tensor([[4, 5, 6, 7, 1], [9, 10, 3, 1, 1]])
    out = m(tokens)
    for b in range(2):
        for t in range(5):
            x = int(tokens[b, t])
            if x == PAD:
                assert torch.equal(out[b, t], torch.zeros(8))
                continue
            s = cipher["key"] @ (m.A @ cipher["query"][x]) / 0.05
            e = float(cipher["alpha"][x]) * m.embed.weight[x] + torch.softmax(s, 0) @ m.universal
            assert torch.allclose(out[b, t], e, atol=1e-5)
    pure = make_ulr(cipher, language_specific=False)
    assert pure.embed is None and "embed.weight" not in pure.state_dict()
    q = pure.universal_probs(tokens)
    expected = (q @ pure.universal).masked_fill((tokens == PAD).unsqueeze(-1), 0)
    assert torch.allclose(pure(tokens), expected, atol=1e-6)


def test_unique_computation_equals_naive(cipher):
    m = make_ulr(cipher)
    with torch.no_grad():
        m.A.add_(0.05 * torch.randn_like(m.A))
    tokens = torch.randint(0, cipher["V"], (5, 9), generator=torch.Generator().manual_seed(5))
    tokens[0, -3:] = PAD

    def naive(mod):
        s = (mod.query[tokens] @ mod.A.t()) @ mod.key.t() / mod.temperature  # (B,T,M)
        out = s.softmax(-1) @ mod.universal + mod.embed(tokens) * mod.alpha[tokens].unsqueeze(-1).float()
        return out.masked_fill((tokens == PAD).unsqueeze(-1), 0.0)

    a, b = m(tokens), naive(m)
    assert torch.allclose(a, b, atol=1e-5)
    ga = torch.autograd.grad((a ** 2).sum(), [m.A, m.universal, m.embed.weight])
    gb = torch.autograd.grad((b ** 2).sum(), [m.A, m.universal, m.embed.weight])
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, atol=1e-4)


def test_state_dict_round_trip(cipher):
    m = make_ulr(cipher)
    with torch.no_grad():
        m.A.add_(0.1)
    sd = m.state_dict()
    assert {"query", "key", "alpha", "A", "universal", "embed.weight"} == set(sd)
    other = ULREmbedding(cipher["V"], 8, PAD, torch.zeros(cipher["V"], cipher["dq"]),
                         torch.zeros(cipher["M"], cipher["dq"]), torch.zeros(cipher["V"], dtype=torch.bool))
    other.load_state_dict(sd)
    tokens = torch.arange(cipher["V"]).view(4, -1)
    assert torch.equal(other(tokens), m(tokens))
    fixed = make_ulr(cipher, fixed_A=True)
    fixed.load_state_dict(sd)  # same keys with or without a trainable A
    assert torch.equal(fixed.A, m.A)


def test_alpha_with_missing():
    q = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    a = torch.tensor([False, False, True, True])
    assert alpha_with_missing(a, q).tolist() == [True, False, True, True]


def test_bad_shapes_are_errors(cipher):
    with pytest.raises(ValueError, match="dictionary has"):
        ULREmbedding(cipher["V"] + 1, 8, PAD, cipher["query"], cipher["key"], cipher["alpha"])
    with pytest.raises(ValueError, match="share dq"):
        ULREmbedding(cipher["V"], 8, PAD, cipher["query"], cipher["key"][:, :3], cipher["alpha"])


# =========================================================================== MoLE (Eqs. 5.6/5.7)
def mole_hand(m: MoLE, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g = h @ m.gate.weight.t() + m.gate.bias
    w = torch.softmax(g, -1)
    s = torch.zeros_like(h)
    for k, e in enumerate(m.experts):
        f = torch.relu(h @ e[0].weight.t() + e[0].bias) @ e[2].weight.t() + e[2].bias
        s = s + f * w[..., k:k + 1]
    return (s + h if m.residual else s), g


@pytest.mark.parametrize("residual", [False, True])
def test_mole_output_matches_hand_formula(residual):
    torch.manual_seed(0)
    m = MoLE(6, 3, hidden=5, residual=residual)
    h = torch.randn(4, 5, 6)
    s, g = m(h, torch.tensor([False, True, False, True, True]))
    s2, g2 = mole_hand(m, h)
    assert s.shape == (4, 5, 6) and g.shape == (4, 5, 3)
    assert torch.allclose(s, s2, atol=1e-6) and torch.allclose(g, g2, atol=1e-6)


def test_mole_no_gradient_from_lowres_sentences():
    torch.manual_seed(0)
    m = MoLE(6, 3)
    h = torch.randn(4, 3, 6, requires_grad=True)
    s, g = m(h, torch.tensor([True, True, True]))
    (s.sum() + g.sum()).backward()
    for n, p in m.named_parameters():
        assert p.grad is None or torch.count_nonzero(p.grad) == 0, n
    assert h.grad is not None and torch.count_nonzero(h.grad) > 0

    h.grad = None
    s, g = m(h, torch.tensor([False, False, False]))
    (s.sum() + g.sum()).backward()
    assert all(torch.count_nonzero(p.grad) > 0 for p in m.parameters())

    # mixed batch: MoLE's gradient is exactly that of the auxiliary sentences alone
    m.zero_grad()
    s, g = m(h, torch.tensor([False, True, False]))
    (s ** 2).sum().backward()
    mixed = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    s_aux, _ = m(h[:, [0, 2]], None)
    (s_aux ** 2).sum().backward()
    for n, p in m.named_parameters():
        assert torch.allclose(mixed[n], p.grad, atol=1e-6), n


def test_mole_gate_loss():
    g = torch.randn(3, 4, 2)
    expert = torch.tensor([0, -1, 1, 1])
    pad = torch.tensor([[False, False, False], [False, False, False], [False, False, True],
                        [False, True, True]])
    logp = torch.log_softmax(g, -1)
    want = -(logp[0, 0, 0] + logp[1, 0, 0] + logp[2, 0, 0] + logp[0, 2, 1] + logp[1, 2, 1] + logp[0, 3, 1])
    assert torch.allclose(mole_gate_loss(g, expert, pad), want)
    g2 = g.clone()
    g2[:, 1] = 100 * torch.randn(3, 2)  # low-resource row: ignored
    g2[2, 2] = g2[1, 3] = g2[2, 3] = torch.tensor([50.0, -50.0])  # pads: ignored
    assert torch.allclose(mole_gate_loss(g2, expert, pad), want)
    assert mole_gate_loss(g, torch.tensor([-1, -1, -1, -1]), pad) == 0
    with pytest.raises(ValueError):
        mole_gate_loss(g, torch.tensor([0, 2, 0, 0]), pad)


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
        words, vecs = tool.read_vec(os.path.join(ulr_folder, "ulr", f"emb.{lang}.vec"))
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
    words, vecs, composed = tool.train_embeddings(sents, 8, 2, 3, 1, "word2vec", 1, 1000, center=True)
    assert composed == 0 and len(words) == vecs.shape[0]
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-4)
    assert np.linalg.norm(vecs.mean(0)) < 0.2
    again, vecs2, _ = tool.train_embeddings(sents, 8, 2, 3, 1, "word2vec", 1, 1000, center=True)
    assert again == words and np.array_equal(vecs, vecs2)  # one worker, fixed seed, stable hash
    w3, v3, composed = tool.train_embeddings(sents, 8, 2, 3, 1, "fasttext", 1, 1000, extra_words=["▁kings", "<unk>"])
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
        words, vecs = tool.read_vec(os.path.join(u, f"emb.{lang}.vec"))
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

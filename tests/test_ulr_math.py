"""Gu (2019) ch. 5, the math: Procrustes (Eq. 5.4), the Universal Lexical Representation (Eqs. 5.2/5.3/5.5) and
the Mixture of Language Experts (Eqs. 5.6/5.7). The offline tool is in ``test_ulr_cli.py``."""
from __future__ import annotations

import pytest
import torch

from fairseq_ext.modules.ulr import MoLE, ULREmbedding, alpha_with_missing, mole_gate_loss, procrustes


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

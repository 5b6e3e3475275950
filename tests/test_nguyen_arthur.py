"""Nguyen ch. 5 Arthur et al. (2016) baseline: the discrete lexicon p_l(e | f) (builder CLI) and its bias
log(L_f a_t + ε) in ``lstm_luong_arthur`` / ``transformer_arthur`` (thesis §5.5.2)."""
import math
import shutil
import sys

import numpy as np
import pytest
import torch

import fairseq_ext  # noqa: F401  (registers the models)
from fairseq.data import Dictionary
from fairseq_ext.tools.corpora.arthur_lexicon import (
    LexiconMismatchError, build_lexicon, estimate_lexicon, load_lexicon, main as lexicon_main,
)
from fairseq_ext.tools.common import ToolError, run_cli
from fairseq_ext.modules.lexical import DiscreteLexiconBias
from harness import (
    TINY_SHAPE, build_model, generate, hypotheses, incremental_logits, n_lines, run, toy_arthur_lexicon, toy_batch,
    train,
)

V = 60
TINY_L = dict(encoder_embed_dim=24, encoder_layers=2)
ARCHS = [("lstm_luong_arthur", TINY_L), ("transformer_arthur", TINY_SHAPE)]


@pytest.fixture(scope="module")
def toy_lex(tmp_path_factory):
    return toy_arthur_lexicon(tmp_path_factory.mktemp("lex") / "toy.pt", vocab=V)


@pytest.fixture(scope="module")
def tiny_lex(tiny_bin, tmp_path_factory):
    """The CLI on the binarized tiny slice (eflomal IBM1: fast)."""
    out = tmp_path_factory.mktemp("tiny_lex") / "lex.pt"
    run([sys.executable, "-m", "fairseq_ext.tools.corpora.arthur_lexicon", "--data", tiny_bin, "--src", "es",
         "--tgt", "en", "--out", out, "--eflomal-model", "1"])
    return out


# ------------------------------------------------------------------------------ the bias (Eq. 9)
def test_bias_is_log_of_attention_weighted_lexicon_plus_eps_by_hand():
    # L[f][e] = p_l(e | f) over 6 source and 5 target types, given in scrambled order
    L = {4: {0: 0.5, 3: 0.25}, 5: {1: 1.0}, 2: {2: 1.0}}
    entries = [(f, e, p) for f, row in L.items() for e, p in row.items()][::-1]
    bias = DiscreteLexiconBias(6, 5, eps=1e-3)
    bias.set_lexicon(torch.tensor([[f for f, _, _ in entries], [e for _, e, _ in entries]]),
                     torch.tensor([p for _, _, p in entries]))
    assert bias.index.shape == (6, 2) and bias.prob[4].tolist() == [0.5, 0.25]  # top-k, by decreasing p
    src = torch.tensor([[4, 5, 2]])
    attn = torch.tensor([[[0.2, 0.5, 0.3], [1.0, 0.0, 0.0]]])  # a_t(j): B=1, T=2, S=3
    out = bias(attn, src)
    for t in range(2):
        for e in range(5):
            p_lex = sum(attn[0, t, j].item() * L[f].get(e, 0.0) for j, f in enumerate(src[0].tolist()))
            assert math.isclose(out[0, t, e].item(), math.log(p_lex + 1e-3), rel_tol=1e-6, abs_tol=1e-6)
    # Σ_e p_lex,t(e) = Σ_j a_t(j) Σ_e p_l(e | f_j) ≤ 1 (row 4 keeps 0.75 of its mass)
    assert torch.allclose(bias.lexical_probs(attn, src).sum(-1), torch.tensor([[0.95, 0.75]]))


def test_bias_rejects_bad_lexicons_and_needs_one():
    bias = DiscreteLexiconBias(6, 5)
    with pytest.raises(RuntimeError, match="no Arthur lexicon"):
        bias(torch.ones(1, 1, 1), torch.tensor([[4]]))
    with pytest.raises(ValueError, match="sums to"):
        bias.set_lexicon(torch.tensor([[4, 4], [0, 1]]), torch.tensor([0.7, 0.6]))
    with pytest.raises(ValueError, match="outside"):
        bias.set_lexicon(torch.tensor([[4], [5]]), torch.tensor([0.5]))


# --------------------------------------------------------------------------------- the lexicon
def test_estimate_is_relative_link_frequency_with_topk_and_eos():
    src = [np.array([4, 5]), np.array([4, 6, 4])]
    tgt = [np.array([7, 8, 9]), np.array([7, 7])]
    links = ["0-0 0-1 1-2", "0-0 2-1 1-1"]  # f=4: e7 x3, e8 x1; f=5: e9; f=6: e7
    idx, val = estimate_lexicon(src, tgt, links, n_src=10, n_tgt=12, topk=1, eos=(2, 2))
    got = {(f, e): p for (f, e), p in zip(idx.t().tolist(), val.tolist())}
    assert got == pytest.approx({(2, 2): 1.0, (4, 7): 0.75, (5, 9): 1.0, (6, 7): 1.0})
    idx, val = estimate_lexicon(src, tgt, links, 10, 12, topk=5)
    got = {(f, e): p for (f, e), p in zip(idx.t().tolist(), val.tolist())}
    assert got == pytest.approx({(4, 7): 0.75, (4, 8): 0.25, (5, 9): 1.0, (6, 7): 1.0})
    with pytest.raises(ToolError, match=r"al\.links:2: link outside the 3x2"):
        estimate_lexicon(src, tgt, ["0-0", "0-2"], 10, 12, links_name="al.links")
    with pytest.raises(ToolError, match=r"al\.links:1: not Pharaoh"):
        estimate_lexicon(src, tgt, ["0:0", ""], 10, 12, links_name="al.links")


def test_lexicon_rows_are_sub_distributions_and_fit_the_dictionaries(tiny_bin, tiny_lex):
    lex = load_lexicon(str(tiny_lex), Dictionary.load(str(tiny_bin / "dict.es.txt")),
                       Dictionary.load(str(tiny_bin / "dict.en.txt")))
    n_src, n_tgt = lex["shape"]
    assert lex["pairs"] == n_lines(tiny_bin / "train.ids") and lex["topk"] == 100
    rows = torch.zeros(n_src).index_add_(0, lex["indices"][0], lex["values"])
    assert rows.max() <= 1 + 1e-6 and (rows > 0).sum() == lex["source_types"] > 50
    assert rows[2] == pytest.approx(1.0)  # </s> -> </s>
    assert lex["indices"][1].max() < n_tgt
    with pytest.raises(LexiconMismatchError, match=f"source dictionary of {n_src} types"):
        load_lexicon(str(tiny_lex), Dictionary(), None)


def test_pruned_and_layouts(tiny_bin, tmp_path):
    """Binarized, raw (``--dataset-impl raw``) and segmented folders give the same lexicon for the
    same links; --topk prunes without renormalising."""
    seg = tiny_bin.parent / "seg"
    links = tmp_path / "train.links"
    with open(seg / "train.es") as fs, open(seg / "train.en") as ft, open(links, "w") as fl:
        for a, b in zip(fs, ft):  # a diagonal alignment
            fl.write(" ".join(f"{i}-{i}" for i in range(min(len(a.split()), len(b.split())))) + "\n")
    raw = tmp_path / "raw"
    raw.mkdir()
    for lang in ("es", "en"):
        shutil.copy(seg / f"train.{lang}", raw / f"train.es-en.{lang}")
        shutil.copy(tiny_bin / f"dict.{lang}.txt", raw)
    outs = {}
    for name, data, extra in (("bin", tiny_bin, []), ("raw", raw, []), ("seg", seg, ["--dict-dir", tiny_bin])):
        outs[name] = tmp_path / f"{name}.pt"
        assert lexicon_main(["--data", str(data), "--src", "es", "--tgt", "en", "--out", str(outs[name]),
                             "--links", str(links), *map(str, extra)]) == 0
    lex = {k: torch.load(v, weights_only=True) for k, v in outs.items()}
    for k in ("raw", "seg"):
        assert torch.equal(lex[k]["indices"], lex["bin"]["indices"])
        assert torch.equal(lex[k]["values"], lex["bin"]["values"])
        assert lex[k]["src_dict_sha256"] == lex["bin"]["src_dict_sha256"]
    pruned = build_lexicon(str(tiny_bin), str(tmp_path / "k2.pt"), "es", "en", topk=2, links=str(links))
    small = torch.load(tmp_path / "k2.pt", weights_only=True)
    assert pruned["entries"] < lex["bin"]["values"].numel()
    assert torch.bincount(small["indices"][0]).max() == 2
    rows = torch.zeros(small["shape"][0]).index_add_(0, small["indices"][0], small["values"])
    assert rows.max() <= 1 + 1e-6 and rows.min() >= 0


def test_cli_bad_input_is_one_error_line_with_file_and_line(tiny_bin, tmp_path, capsys):
    bad = tmp_path / "bad.links"
    bad.write_text("0-0\n1-x\n" + "0-0\n" * (n_lines(tiny_bin / "train.ids") - 2))
    argv = ["--data", str(tiny_bin), "--out", str(tmp_path / "x.pt"), "--links", str(bad)]
    with pytest.raises(SystemExit) as e:
        run_cli(lexicon_main, argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"error: {bad}:2: not Pharaoh links (i-j pairs): '1-x'"
    bad.write_text("0-0\n")
    with pytest.raises(ToolError, match="1 lines for 209 sentence pairs"):
        lexicon_main(argv)
    with pytest.raises(ToolError, match="missing input folder"):
        lexicon_main(["--data", str(tmp_path / "nope"), "--out", str(tmp_path / "x.pt")])
    with pytest.raises(ToolError, match=r"missing dictionary: .*seg/bin/dict\.es\.txt"):
        lexicon_main(["--data", str(tiny_bin.parent / "seg"), "--src", "es", "--tgt", "en",
                      "--out", str(tmp_path / "x.pt")])
    assert not (tmp_path / "x.pt").exists()


# ------------------------------------------------------------------------------------ the models
@pytest.mark.parametrize("arch,kw", ARCHS)
def test_model_adds_the_bias_to_the_logits_with_the_decoders_attention(arch, kw, toy_lex):
    m = build_model(arch, vocab=V, seed=1, arthur_lexicon=toy_lex, **kw)
    src, lengths, prev = toy_batch()
    logits, extra = m(src, lengths, prev)
    if arch.startswith("lstm"):  # the Luong attention, over the source as the encoder right-pads it
        enc = m.encoder(src, lengths)
        attn, src_tokens = m.decoder.extract_features(prev, enc)[1], enc[5].t()
        assert torch.equal(src_tokens[0, :5], src[0, 2:])
    else:  # the last decoder layer's head-averaged cross-attention, over the left-padded source
        attn, src_tokens = extra["attn"][0], src
    assert attn.shape == (3, 6, 7) and torch.allclose(attn.sum(-1), torch.ones(3, 6), atol=1e-5)
    bias = m.decoder.arthur(attn, src_tokens)
    arthur, m.decoder.arthur = m.decoder.arthur, None
    plain = m(src, lengths, prev)[0]
    m.decoder.arthur = arthur
    assert torch.allclose(logits, plain + bias, atol=1e-5)
    assert bias.min() >= math.log(1e-3) - 1e-6 and bias.max() <= math.log(1 + 1e-3) + 1e-6
    assert (bias > math.log(1e-3) + 1e-3).any()


@pytest.mark.parametrize("arch,kw", ARCHS)
def test_incremental_decoding_equals_full_decoding(arch, kw, toy_lex):
    m = build_model(arch, vocab=V, seed=2, arthur_lexicon=toy_lex, **kw)
    src, lengths, prev = toy_batch()
    full = m(src, lengths, prev)[0]
    assert torch.allclose(full, incremental_logits(m, src, lengths, prev), atol=1e-5)
    # beam search reorders the encoder output (the source tokens of L_f included)
    order = torch.tensor([2, 0, 0, 1])
    enc = m.encoder.reorder_encoder_out(m.encoder(src, src_lengths=lengths), order)
    assert torch.allclose(m.decoder(prev[order], encoder_out=enc)[0], full[order], atol=1e-5)


@pytest.mark.parametrize("arch,kw", ARCHS)
def test_lexicon_is_a_checkpoint_buffer_and_mismatches_are_clear_errors(arch, kw, toy_lex, tmp_path):
    m = build_model(arch, vocab=V, seed=3, arthur_lexicon=toy_lex, **kw)
    state = m.state_dict()
    assert state["decoder.arthur.index"].shape == (V, 3) and "decoder.arthur.prob" in state
    # decoding from a checkpoint does not need the file: the buffers take the checkpoint's lexicon
    fresh = build_model(arch, vocab=V, seed=3, arthur_lexicon=str(tmp_path / "gone.pt"), **kw)
    assert fresh.decoder.arthur.index.shape == (V, 0)
    fresh.load_state_dict(state)
    src, lengths, prev = toy_batch()
    assert torch.equal(fresh(src, lengths, prev)[0], m(src, lengths, prev)[0])
    with pytest.raises(LexiconMismatchError, match="built for a source dictionary of 60 types .* has 64"):
        build_model(arch, vocab=64, arthur_lexicon=toy_lex, **kw)
    not_lex = tmp_path / "not_lex.pt"
    torch.save({"a": 1}, not_lex)
    with pytest.raises(LexiconMismatchError, match="not an Arthur lexicon file"):
        build_model(arch, vocab=V, arthur_lexicon=str(not_lex), **kw)
    with pytest.raises(ValueError, match=f"--arch {arch} needs --arthur-lexicon"):
        build_model(arch, vocab=V, **kw)


def test_other_lex_archs_accept_the_bias(toy_lex):
    m = build_model("lstm_luong_fixnorm_lex", vocab=V, arthur_lexicon=toy_lex, arthur_eps=0.01, **TINY_L)
    assert m.decoder.arthur.eps == 0.01 and m.decoder.lexical is not None
    assert build_model("transformer_lex_bench", vocab=V, **TINY_SHAPE).decoder.arthur is None


def test_bias_trains_through_the_attention(toy_lex):
    m = build_model("transformer_arthur", vocab=V, seed=4, arthur_lexicon=toy_lex, **TINY_SHAPE).train()
    src, lengths, prev = toy_batch()
    m.decoder.output_projection.weight.data.zero_()  # only the bias depends on the decoder state...
    loss = torch.nn.functional.cross_entropy(m(src, lengths, prev)[0].reshape(-1, V), prev.reshape(-1))
    loss.backward()
    assert m.decoder.layers[-1].encoder_attn.k_proj.weight.grad.abs().sum() > 0  # ...via a_t


# ------------------------------------------------------------------------------------------ CLI
def test_cli_build_train_and_decode_without_the_lexicon_file(tiny_bin, tiny_lex, tmp_path):
    lex = tmp_path / "lex.pt"
    shutil.copy(tiny_lex, lex)
    ckpt = train(tiny_bin, tmp_path, ["--arch", "lstm_luong_arthur", "--encoder-embed-dim", "32",
                                      "--encoder-layers", "1", "--decoder-layers", "1",
                                      "--arthur-lexicon", lex, "--arthur-eps", "0.001"],
                 criterion="cross_entropy", max_update=4, extra=["--batch-size", "16", "--clip-norm", "5"])
    state = torch.load(ckpt, weights_only=False)
    saved = load_lexicon(str(lex))
    assert state["model"]["decoder.arthur.index"].shape[1] == torch.bincount(saved["indices"][0]).max()
    lex.unlink()  # fairseq-generate builds the model from the checkpoint alone
    out = generate(tiny_bin, ckpt, "--batch-size", "16")
    assert sorted(hypotheses(out)) == list(range(n_lines(tiny_bin / "test.ids")))

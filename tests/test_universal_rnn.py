"""Gu ch. 5: task ``universal_translation``, model ``universal_rnn`` (ULR + MoLE), criterion
``universal_mole_cross_entropy`` — the language helpers, the model's math through fairseq's interfaces,
and the command lines on a tiny synthetic three-language corpus."""
import types

import numpy as np
import pytest
import torch

from harness import (UNI_LANGS as LANGS, arch_args, fairseq, generate, hypotheses, incremental_logits,
                     marked_dictionary, model_and_args, n_lines, n_params, rebuilt_without_ulr_folder, ulr_dir,
                     universal_corpus, universal_task)

from fairseq_ext.data.universal import (
    LanguageDataError,
    LanguageResampled,
    language_weights,
    read_lang_file,
    sentence_languages,
    symbol_language,
    token_languages,
)

# ----------------------------------------------------------------------------- languages
def test_symbol_language_and_token_languages():
    assert symbol_language("▁casa__es") == "es"
    assert symbol_language("casa") is None and symbol_language("__es") is None and symbol_language("a__") is None
    d = marked_dictionary()
    tl = token_languages(d, LANGS)
    assert tl[: d.nspecial].eq(-1).all()
    assert tl[d.index("asac__aa")] == 0 and tl[d.index("CASA__bb")] == 1 and tl[d.index("xcasa__cc")] == 2
    with pytest.raises(LanguageDataError, match=r"'xcasa__cc'.*not among the task's languages aa, bb"):
        token_languages(d, ["aa", "bb"])
    d.add_symbol("plain")
    with pytest.raises(LanguageDataError, match="'plain'.*no language marker"):
        token_languages(d, LANGS)


def test_sentence_language_is_the_majority_of_marked_tokens():
    d = marked_dictionary()
    tl = token_languages(d, LANGS)
    a, b, c = d.index("asac__aa"), d.index("CASA__bb"), d.index("xgato__cc")
    src = torch.tensor([[d.pad(), a, a, b, d.eos()], [c, d.unk(), c, c, d.eos()], [d.pad(), d.pad(), d.pad(),
                                                                                    d.unk(), d.eos()]])
    assert sentence_languages(src, tl, 3).tolist() == [0, 2, -1]


def test_lang_side_file_errors_name_file_and_line(tmp_path):
    p = tmp_path / "train.lang"
    p.write_text("aa\nbb\ncc\n")
    assert read_lang_file(str(p), 3, LANGS).tolist() == [0, 1, 2]
    with pytest.raises(LanguageDataError, match="4 examples"):
        read_lang_file(str(p), 4, LANGS)
    p.write_text("aa\nzz\n")
    with pytest.raises(LanguageDataError, match=r"train.lang:2: unknown language code 'zz'"):
        read_lang_file(str(p), 2, LANGS)
    with pytest.raises(LanguageDataError, match="language side file is missing"):
        read_lang_file(str(tmp_path / "valid.lang"), 2, LANGS)


def test_language_weights_follow_the_temperature():
    ids = np.array([0] * 90 + [1] * 9 + [2] * 1)
    share = lambda w: [float(w[ids == k].sum()) for k in range(3)]  # noqa: E731
    assert np.allclose(share(language_weights(ids, 1.0)), [0.9, 0.09, 0.01])
    assert np.allclose(share(language_weights(ids, 0.0)), [1 / 3] * 3)
    p = np.array([90, 9, 1]) ** 0.2
    assert np.allclose(share(language_weights(ids, 5.0)), p / p.sum())
    w = language_weights(ids, 0.0)
    assert np.allclose(w[ids == 0], w[0])  # uniform within a language
    with pytest.raises(ValueError, match="lang-temperature"):
        language_weights(ids, -1)


def test_language_weights_count_up_sampled_examples_as_repeated():
    """--bt-real-upsample K: a real low-resource pair weighs as K copies of itself, in its language's N_k and
    within the language, exactly as if the corpus held the copies."""
    ids = np.array([0] * 90 + [1] * 10)
    mult = np.ones(100)
    mult[90:95] = 10  # 5 real pairs x10 beside 5 back-translated ones
    repeated = np.array([0] * 90 + [1] * 55)  # the same corpus with the copies written out
    for t in (1.0, 5.0, 0.0):
        w, ref = language_weights(ids, t, mult), language_weights(repeated, t)
        assert np.isclose(w[90:].sum(), ref[90:].sum()) and np.isclose(w.sum(), 1.0)
        assert np.allclose(w[90:95], 10 * w[95:]) and np.allclose(w[:90], ref[:90])
    assert np.allclose(language_weights(ids, 5.0, np.ones(100)), language_weights(ids, 5.0))  # K = 1: unchanged
    with pytest.raises(ValueError, match="multiplicity"):
        language_weights(ids, 1.0, np.zeros(100))


class _Sized:
    def __init__(self, n):
        self.sizes = np.stack([np.arange(n) % 7 + 1, np.arange(n) % 5 + 1], 1)

    def __len__(self):
        return len(self.sizes)

    def set_epoch(self, epoch):
        pass


def test_resampled_epochs_draw_by_weight_and_depend_only_on_seed_and_epoch():
    ids = np.array([0] * 900 + [1] * 100)
    ds = LanguageResampled(_Sized(1000), language_weights(ids, 0.0), seed=3)
    ds.set_epoch(1)
    a = ds.ordered_indices()
    assert len(a) == 1000 and abs((ids[a] == 1).mean() - 0.5) < 0.06
    src = ds.dataset.sizes[a, 0]
    assert (np.diff(src) >= 0).all()  # sorted by source length
    assert np.array_equal(a, LanguageResampled(_Sized(1000), language_weights(ids, 0.0), seed=3).ordered_indices())
    ds.set_epoch(2)
    assert not np.array_equal(np.sort(a), np.sort(ds.ordered_indices()))
    assert ds.can_reuse_epoch_itr_across_epochs is False


# ----------------------------------------------------------------------------- the model
def _task(d, data=None):
    return universal_task(d, data=data)


def _ulr_dir(tmp_path, d, m=10, dq=6, seed=0):
    return ulr_dir(tmp_path, d, m=m, dq=dq, seed=seed, alpha_every=2)


def build(arch="universal_rnn_tiny", seed=0, d=None, task=None, **kw):
    return model_and_args(arch, seed=seed, task=task or _task(d or marked_dictionary()), **kw)


def _batch(d, langs=("aa", "bb", "cc"), seed=1):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for lang in langs:
        ids = [d.index(s) for s in d.symbols if s.endswith("__" + lang)]
        rows.append([ids[int(i)] for i in torch.randint(len(ids), (5,), generator=g)] + [d.eos()])
    src = torch.tensor(rows)
    src[0, :2] = d.pad()  # left padding
    prev = torch.randint(d.nspecial, len(d), (len(langs), 4), generator=g)
    prev[:, 0] = d.eos()
    return src, src.ne(d.pad()).sum(1), prev


def test_defaults_reduce_exactly_to_rnnsearch():
    d = marked_dictionary()
    uni, _ = build(d=d)
    base, _ = model_and_args("rnnsearch", seed=0, task=types.SimpleNamespace(source_dictionary=d, target_dictionary=d),
                             rnn_type="lstm", decoder_variant="plain", decoder_layers=2, encoder_embed_dim=16,
                             encoder_hidden_size=16, dropout=0.0)
    assert n_params(uni) == n_params(base)
    uni.eval(), base.eval()
    src, lengths, prev = _batch(d)
    a, extra = uni(src, lengths, prev)
    b, _ = base(src, lengths, prev)
    assert torch.equal(a, b)
    assert extra["src_lang"][0].tolist() == [0, 1, 2] and "mole_gate" not in extra


def test_thesis_arch_is_the_section_5_4_1_shape():
    m, args = build("universal_rnn_512", d=marked_dictionary())
    assert (args.rnn_type, args.encoder_layers, args.decoder_layers, args.encoder_embed_dim,
            args.encoder_hidden_size, args.dropout) == ("lstm", 1, 2, 512, 512, 0.4)
    assert m.encoder.rnn.output_dim == 1024  # bidirectional 512


def test_ulr_embedding_in_the_encoder_and_its_frozen_buffers(tmp_path):
    d = marked_dictionary()
    ulr = _ulr_dir(tmp_path, d)
    m, args = build(d=d, ulr=True, ulr_dir=str(ulr))
    emb = m.encoder.embed_tokens
    assert type(emb).__name__ == "ULREmbedding"
    assert (args.ulr_num_universal, args.ulr_query_dim) == (10, 6)
    names = {n for n, _ in m.named_parameters()}
    assert not any(n.endswith(("query", "key", "alpha")) for n in names)
    assert {"encoder.embed_tokens.universal", "encoder.embed_tokens.A"} <= names
    sd = m.state_dict()
    assert torch.allclose(sd["encoder.embed_tokens.query"], torch.from_numpy(np.load(ulr / "query.npy")))
    # fixed A: a buffer, not a parameter
    m2, _ = build(d=d, ulr=True, ulr_dir=str(ulr), ulr_fixed_A=True)
    assert "encoder.embed_tokens.A" not in {n for n, _ in m2.named_parameters()}
    # a stale folder (rows != dictionary) is refused
    np.save(ulr / "query.npy", np.zeros((len(d) + 1, 6), dtype=np.float32))
    with pytest.raises(ValueError, match="stale"):
        build(d=d, ulr=True, ulr_dir=str(ulr))
    with pytest.raises(FileNotFoundError, match="fairseq-ext-ulr"):
        build(d=d, ulr=True, ulr_dir=str(tmp_path / "nowhere"))


def test_ulr_model_rebuilds_from_recorded_shapes_without_the_folder(tmp_path):
    d = marked_dictionary()
    m, args = build(d=d, ulr=True, ulr_dir=str(_ulr_dir(tmp_path, d)))
    m, m2 = rebuilt_without_ulr_folder(m, args, _task(d))
    src, lengths, prev = _batch(d)
    assert torch.equal(m(src, lengths, prev)[0], m2(src, lengths, prev)[0])


def test_mole_replaces_the_encoder_states_and_exports_the_gate():
    d = marked_dictionary()
    m, _ = build(d=d, mole=True)
    m.eval()
    src, lengths, prev = _batch(d)
    enc = m.encoder(src, src_lengths=lengths)
    gate = enc["mole_gate"][0]
    assert gate.shape == (src.size(1), 3, 2)  # (S, B, K-1 experts)
    assert enc["encoder_out"][0][:2, 0].abs().sum() == 0  # padded positions stay zero
    # beam reordering carries the gate
    order = torch.tensor([2, 0, 0])
    re = m.encoder.reorder_encoder_out(enc, order)
    assert torch.equal(re["mole_gate"][0], gate[:, order]) and re["src_lang"][0].tolist() == [2, 0, 0]


def test_mole_gets_no_gradient_from_low_resource_sentences():
    d = marked_dictionary()
    m, _ = build(d=d, mole=True)
    src, lengths, prev = _batch(d, langs=("cc", "cc"))
    out, _ = m(src, lengths, prev)
    out.sum().backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in m.encoder.mole.parameters())
    assert m.encoder.embed_tokens.weight.grad.abs().sum() > 0  # the rest of the model learns
    m.zero_grad()
    src, lengths, prev = _batch(d, langs=("aa", "cc"))
    m(src, lengths, prev)[0].sum().backward()
    assert sum(float(p.grad.abs().sum()) for p in m.encoder.mole.parameters() if p.grad is not None) > 0


def test_incremental_decoding_equals_the_full_pass_with_ulr_and_mole(tmp_path):
    d = marked_dictionary()
    m, _ = build(d=d, ulr=True, ulr_dir=str(_ulr_dir(tmp_path, d)), mole=True)
    m.eval()
    src, lengths, prev = _batch(d)
    full, _ = m(src, lengths, prev)
    assert torch.allclose(incremental_logits(m, src, lengths, prev), full, atol=1e-5)


def test_criterion_adds_the_gate_loss_of_auxiliary_tokens_only():
    from fairseq_ext.criterions.universal_mole_cross_entropy import UniversalMoLECrossEntropyCriterion
    from fairseq_ext.modules.ulr import mole_gate_loss

    d = marked_dictionary()
    m, _ = build(d=d, mole=True)
    m.eval()
    src, lengths, prev = _batch(d)
    target = torch.cat([prev[:, 1:], torch.full((3, 1), d.eos())], 1)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
              "target": target, "ntokens": int(target.numel())}
    task = types.SimpleNamespace(target_dictionary=d)
    ce = UniversalMoLECrossEntropyCriterion(task, False, gate_loss_weight=0.0)
    loss0, _, log0 = ce(m, sample)
    lprobs = m.get_normalized_probs(m(src, lengths, prev), log_probs=True)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).sum()
    assert torch.allclose(loss0, nll, atol=1e-4)
    enc = m.encoder(src, src_lengths=lengths)
    g = mole_gate_loss(enc["mole_gate"][0], torch.tensor([0, 1, -1]), enc["encoder_padding_mask"][0])
    ref = -torch.log_softmax(enc["mole_gate"][0], -1)
    by_hand = ref[2:, 0, 0].sum() + ref[:, 1, 1].sum()  # sentence 0: 2 pads; sentence 2 is low-resource
    assert torch.allclose(g, by_hand, atol=1e-5)
    loss2, _, log2 = UniversalMoLECrossEntropyCriterion(task, False, gate_loss_weight=2.0)(m, sample)
    assert torch.allclose(loss2, nll + 2 * g, atol=1e-4)
    assert log2["gate_tokens"] == 4 + 6


# ----------------------------------------------------------------------------- command lines
@pytest.fixture(scope="module")
def uni_data(tmp_path_factory):
    """The three-language toy corpus of the harness (aux aa, bb; low-resource cc with 40 training lines)."""
    return universal_corpus(tmp_path_factory.mktemp("universal"))


MODEL = ["--arch", "universal_rnn_tiny"]
OPT = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--cpu", "--seed", "1", "--no-progress-bar",
       "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints"]


def test_cli_train_and_generate_ulr_mole(uni_data, tmp_path):
    p = fairseq("train", uni_data, "--task", "universal_translation", *MODEL, "--ulr", "--mole",
                "--criterion", "universal_mole_cross_entropy", "--lang-temperature", "0", *OPT,
                "--max-update", "6", "--save-dir", tmp_path / "ckpt")
    log = p.stdout + p.stderr
    assert "gate_acc" in log and "language sampling T=0" in log
    out = generate(uni_data, tmp_path / "ckpt" / "checkpoint_last.pt", "--task", "universal_translation")
    assert len(hypotheses(out)) == n_lines(uni_data.parent / "spm" / "test.src")


def test_cli_multi_nmt_baseline_and_back_translation_split(uni_data, tmp_path):
    """Multi-NMT (no ULR, no MoLE) with plain cross-entropy, the languages given on the command line, and a
    back-translation split added to training."""
    import shutil

    for suffix in ("src", "en"):
        for ext in ("bin", "idx"):
            shutil.copy(uni_data / f"valid.src-en.{suffix}.{ext}", uni_data / f"bt.src-en.{suffix}.{ext}")
    shutil.copy(uni_data / "valid.lang", uni_data / "bt.lang")
    p = fairseq("train", uni_data, "--task", "universal_translation", "--aux-langs", "aa,bb", "--lowres-lang", "cc",
                "--bt-split", "bt", *MODEL, "--criterion", "cross_entropy", *OPT, "--max-update", "3",
                "--save-dir", tmp_path / "ckpt")
    log = p.stdout + p.stderr
    assert f"+ {n_lines(uni_data / 'bt.lang')} back-translated pairs (bt)" in log
    # the real low-resource pairs up-sampled against the synthetic ones (resampled even at T = 1)
    p = fairseq("train", uni_data, "--task", "universal_translation", "--aux-langs", "aa,bb", "--lowres-lang", "cc",
                "--bt-split", "bt", "--bt-real-upsample", "10", *MODEL, "--criterion", "cross_entropy", *OPT,
                "--max-update", "3", "--save-dir", tmp_path / "ckpt10")
    log = p.stdout + p.stderr
    assert "real cc pairs x10" in log and "language sampling T=1 ->" in log
    p = fairseq("train", uni_data, "--task", "universal_translation", "--aux-langs", "aa,bb", "--lowres-lang", "cc",
                "--bt-real-upsample", "10", *MODEL, "--criterion", "cross_entropy", *OPT, "--max-update", "1",
                "--save-dir", tmp_path / "c", check=False)
    assert p.returncode != 0 and "--bt-real-upsample needs --bt-split" in p.stdout + p.stderr
    p = fairseq("train", uni_data, "--task", "universal_translation", "--aux-langs", "aa,bb", "--lowres-lang", "cc",
                "--bt-split", "bt", "--bt-real-upsample", "0", *MODEL, "--criterion", "cross_entropy", *OPT,
                "--max-update", "1", "--save-dir", tmp_path / "c0", check=False)
    assert p.returncode != 0 and "--bt-real-upsample must be > 0, got 0" in p.stdout + p.stderr


def test_cli_bad_language_input_is_one_clear_error(uni_data, tmp_path):
    p = fairseq("train", uni_data, "--task", "universal_translation", "--aux-langs", "aa", "--lowres-lang", "cc",
                *MODEL, "--criterion", "cross_entropy", *OPT, "--max-update", "1", "--save-dir", tmp_path / "c",
                check=False)
    assert p.returncode != 0 and "of language 'bb', which is not among the task's languages aa, cc" in p.stdout + p.stderr
    p = fairseq("train", uni_data, "--task", "universal_translation", "--aux-langs", "aa,bb", "--lowres-lang", "aa",
                *MODEL, "--criterion", "cross_entropy", *OPT, "--max-update", "1", "--save-dir", tmp_path / "c",
                check=False)
    assert p.returncode != 0 and "is also in --aux-langs" in p.stdout + p.stderr


def test_registrations():
    from fairseq_ext.__main__ import registrations

    regs = registrations()
    assert "universal_translation" in regs["tasks"]
    assert "universal_mole_cross_entropy" in regs["criterions"]
    assert {"universal_rnn", "universal_rnn_512", "universal_rnn_bench", "universal_rnn_tiny"} <= set(
        regs["architectures"])


def test_the_ulr_options_are_declared_once():
    """``universal_rnn`` and ``ulr_transformer`` declare the shared ULR options with one definition (same help,
    type, default) and fill the same architecture defaults."""
    import argparse

    from fairseq.models import ARCH_MODEL_REGISTRY

    shared = ("--ulr", "--ulr-dir", "--ulr-temperature", "--ulr-num-universal", "--ulr-query-dim")
    seen = []
    for arch in ("universal_rnn", "ulr_transformer"):
        parser = argparse.ArgumentParser()
        ARCH_MODEL_REGISTRY[arch].add_args(parser)
        actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
        defaults = arch_args(arch)
        seen.append(({o: (actions[o].help, actions[o].type, actions[o].default, actions[o].dest) for o in shared},
                     {actions[o].dest: getattr(defaults, actions[o].dest) for o in shared}))
    assert seen[0] == seen[1]

"""Nguyen ch. 5, in process: the lexical translation module, fixnorm, ``transformer_lex`` / ``lstm_luong`` (with
incremental decoding), the target-vocabulary mask and masked label smoothing. The command lines (training,
decoding, the lexicon tool) are in ``test_lexical_cli.py``."""
import math
import types

import pytest
import torch
import torch.nn.functional as F

import fairseq_ext  # noqa: F401  (registers models and criterions)
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from fairseq_ext.criterions.masked_label_smoothed_cross_entropy import (
    MaskedLabelSmoothedCrossEntropyCriterion,
    masked_label_smoothed_nll_loss,
)
from fairseq_ext.modules.vocab_mask import allowed_target_vocab, mask_logits
from fairseq_ext.models.lexical import reverse_padded
from fairseq_ext.modules.lexical import LexicalTranslation
from fairseq_ext.modules.word_dropout import word_dropout
from fairseq_ext.modules.norms import fixnorm
from harness import TINY_SHAPE, build_model, incremental_logits, make_dictionary, train_parse

V = 60
TINY_T = TINY_SHAPE
TINY_L = dict(encoder_embed_dim=24, encoder_layers=2)


def batch(bsz=3, src_len=7, tgt_len=6, seed=0, sort=False):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (bsz, src_len), generator=g)
    src[-1 if sort else 0, :2] = 1  # a left-padded sentence (fairseq's source layout)
    prev = torch.randint(4, V, (bsz, tgt_len), generator=g)
    prev[:, 0] = 2
    return src, src.ne(1).sum(1), prev


# --------------------------------------------------------------------- the lexical module (§5.4)
def test_lexical_module_matches_hand_computation():
    torch.manual_seed(0)
    d, n_words, r = 3, 4, 2.0
    lex = LexicalTranslation(d, n_words, radius=r).eval()
    with torch.no_grad():
        lex.bias.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
    attn = torch.tensor([[[0.2, 0.5, 0.3], [1.0, 0.0, 0.0]]])  # a_t(s): B=1, T=2, S=3
    emb = torch.randn(1, 3, d)  # f_s
    out = lex(attn, emb)
    W, Wl, b = lex.ffn.weight.tolist(), lex.weight.tolist(), lex.bias.tolist()
    for t in range(2):
        f = [math.tanh(sum(attn[0, t, s].item() * emb[0, s, c].item() for s in range(3))) for c in range(d)]
        h = [math.tanh(sum(W[c][k] * f[k] for k in range(d))) + f[c] for c in range(d)]
        hn = math.sqrt(sum(x * x for x in h))
        h = [r * x / hn for x in h]
        for e in range(n_words):
            wn = math.sqrt(sum(x * x for x in Wl[e]))
            logit = sum(r * Wl[e][c] / wn * h[c] for c in range(d)) + b[e]
            assert math.isclose(out[0, t, e].item(), logit, rel_tol=1e-5, abs_tol=1e-6)
    # one-word lexicon (§5.6.5): all attention on word s gives the same logits as lexicon_logits(f_s)
    assert torch.allclose(out[0, 1], lex.lexicon_logits(emb[0, :1])[0], atol=1e-6)


def test_lexical_fixnorm_norms_and_logit_range():
    torch.manual_seed(1)
    lex = LexicalTranslation(16, 50, radius=3.5).eval()
    attn = torch.softmax(torch.randn(2, 5, 7), dim=-1)
    emb = torch.randn(2, 7, 16) * 4
    h = lex.hidden(lex.context(attn, emb))
    assert torch.allclose(h.norm(dim=-1), torch.full((2, 5), 3.5), atol=1e-4)  # ‖h^ℓ‖ = r
    assert torch.allclose(lex.output_weight().norm(dim=-1), torch.full((50,), 3.5), atol=1e-4)  # ‖W^ℓ_e‖ = r
    assert (lex(attn, emb) - lex.bias).abs().max() <= 3.5 ** 2 + 1e-3  # W^ℓh^ℓ ∈ [−r², r²]
    assert not lex.ffn.bias and LexicalTranslation(4, 5, ffn_bias=True).ffn.bias is not None
    raw = LexicalTranslation(16, 50, radius=0).eval()  # radius 0: unnormalised
    assert not torch.allclose(raw.hidden(raw.context(attn, emb)).norm(dim=-1), torch.full((2, 5), 3.5))


def test_word_dropout_replaces_only_regular_tokens_in_training():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 40, (64, 50), generator=g)
    out = word_dropout(tokens, 0.3, unk=3, nspecial=4, generator=g)
    specials = tokens < 4
    assert torch.equal(out[specials], tokens[specials])
    changed = (out != tokens)
    assert torch.all(out[changed] == 3)
    rate = changed.sum().item() / (~specials & tokens.ne(3)).sum().item()
    assert 0.25 < rate < 0.35
    assert torch.equal(word_dropout(tokens, 0.3, 3, 4, training=False), tokens)


# ----------------------------------------------------------------------------- transformer_lex
def test_transformer_lex_without_lexical_is_transformer_twt():
    kw = dict(TINY_T, norm_type="scalenorm", fixnorm=True)
    base = build_model("transformer_twt_bench", vocab=V, seed=3, **kw)
    off = build_model("transformer_lex_bench", vocab=V, seed=3, lexical=False, **kw)
    assert off.decoder.lexical is None
    src, lengths, prev = batch()
    assert torch.equal(base(src, lengths, prev)[0], off(src, lengths, prev)[0])


def test_transformer_lex_with_zero_lexical_weights_equals_twt_and_adds_lexical_logits():
    kw = dict(TINY_T, norm_type="scalenorm", fixnorm=True)
    lex = build_model("transformer_lex_bench", vocab=V, seed=4, **kw)
    base = build_model("transformer_twt_bench", vocab=V, seed=0, **kw)
    missing = base.load_state_dict(lex.state_dict(), strict=False)
    assert all(k.startswith("decoder.lexical.") for k in missing.unexpected_keys) and not missing.missing_keys
    src, lengths, prev = batch()
    logits, extra = lex(src, lengths, prev)
    main = base(src, lengths, prev)[0]
    a = extra["attn"][0]  # a_t(s): last layer, averaged over heads
    assert a.shape == (3, 6, 7) and torch.allclose(a.sum(-1), torch.ones(3, 6), atol=1e-5)
    assert torch.all(a[0, :, :2] == 0)  # no attention on the padding
    # the lexical logits are the module applied to the last layer's head-averaged cross-attention
    # over the unscaled source embeddings f_s
    enc = lex.encoder(src, src_lengths=lengths)
    f_s = lex.encoder.embed_tokens(src)
    expected = lex.decoder.lexical(extra["attn"][0], f_s, src.eq(1))
    assert torch.allclose(logits, main + expected, atol=1e-5)
    assert torch.allclose(enc["encoder_embedding"][0] / math.sqrt(32), f_s, atol=1e-6)
    with torch.no_grad():
        lex.decoder.lexical.weight.zero_()
        lex.decoder.lexical.bias.zero_()
    assert torch.allclose(lex(src, lengths, prev)[0], main, atol=1e-6)


def test_transformer_lex_defaults_and_bench_size():
    m = build_model("transformer_lex_bench", vocab=V, device="meta")
    twt = build_model("transformer_twt_bench", vocab=V, device="meta")
    lex = m.decoder.lexical
    assert lex.radius == pytest.approx(256 ** 0.25) and lex.embed_dim == 256
    extra = sum(p.numel() for p in m.parameters()) - sum(p.numel() for p in twt.parameters())
    assert extra == 256 * 256 + V * 256 + V  # W, W^ℓ, b^ℓ


def test_transformer_lex_incremental_equals_full():
    m = build_model("transformer_lex_bench", vocab=V, seed=5, norm_type="scalenorm", fixnorm=True, **TINY_T)
    src, lengths, prev = batch()
    assert torch.allclose(m(src, lengths, prev)[0], incremental_logits(m, src, lengths, prev), atol=1e-5)


def test_lexical_training_step_updates_lexical_parameters():
    m = build_model("transformer_lex_bench", vocab=V, seed=6, **TINY_T).train()
    src, lengths, prev = batch()
    F.cross_entropy(m(src, lengths, prev)[0].reshape(-1, V), prev.reshape(-1)).backward()
    for p in (m.decoder.lexical.ffn.weight, m.decoder.lexical.weight, m.decoder.lexical.bias):
        assert p.grad is not None and p.grad.abs().sum() > 0
    assert m.encoder.embed_tokens.weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------------- lstm_luong
def test_lstm_luong_reduces_to_fairseq_lstm():
    """No reversal, no fixnorm, untied, no lexical module: exactly fairseq's ``lstm`` (same weights)."""
    ref = build_model("lstm", vocab=V, seed=7, criterion="cross_entropy", encoder_embed_dim=16,
                      decoder_embed_dim=16, decoder_out_embed_dim=16, encoder_layers=2, decoder_layers=2)
    m = build_model("lstm_luong", vocab=V, seed=0, encoder_embed_dim=16, reverse_source=False)
    m.load_state_dict(ref.state_dict())
    src, lengths, prev = batch(sort=True)
    out_ref, attn_ref = ref(src, lengths, prev)
    out, attn = m(src, lengths, prev)
    assert torch.allclose(out, out_ref, atol=1e-6) and torch.allclose(attn, attn_ref, atol=1e-6)


def test_lstm_luong_reverses_the_source_but_keeps_source_order_outputs():
    m = build_model("lstm_luong", vocab=V, seed=8, **TINY_L)
    fwd = build_model("lstm_luong", vocab=V, seed=8, reverse_source=False, **TINY_L)
    fwd.load_state_dict(m.state_dict())
    src, lengths, _ = batch(bsz=1)
    src = src[:, src[0].ne(1)]  # one unpadded sentence
    x_rev = m.encoder(src, lengths)[0]
    x_ref = fwd.encoder(src.flip(1), lengths)[0].flip(0)  # read backwards, outputs back in order
    assert torch.allclose(x_rev, x_ref, atol=1e-6)
    t = torch.tensor([[5, 6, 7, 1], [8, 9, 1, 1]])
    assert reverse_padded(t, torch.tensor([3, 2]), dim=1).tolist() == [[7, 6, 5, 1], [9, 8, 1, 1]]


def test_lstm_luong_presets_match_thesis_systems():
    untied = build_model("lstm_luong", vocab=V, device="meta")
    assert untied.encoder.reverse_source and untied.decoder.fc_out is not None
    assert untied.encoder.hidden_size == untied.encoder.embed_tokens.embedding_dim == 512
    assert untied.encoder.num_layers == untied.decoder.num_layers == 2
    tied = build_model("lstm_luong_tied", vocab=V, device="meta")
    assert tied.decoder.share_input_output_embed and tied.decoder.output_bias is not None
    fix = build_model("lstm_luong_fixnorm", vocab=V, device="meta")
    assert fix.decoder.fixnorm_radius == 5.0 and fix.decoder.lexical is None
    lex = build_model("lstm_luong_fixnorm_lex", vocab=V, device="meta")
    assert lex.decoder.fixnorm_radius == 3.5 and lex.decoder.lexical.radius == 3.5


def test_lstm_fixnorm_norms_and_combined_logit_range():
    """fixnorm (§5.3): ‖W_e‖ = ‖h̃‖ = r; with lex, W^o h̃ + W^ℓ h^ℓ ∈ [−2r², 2r²] (the sum of two
    terms bounded by r², thesis §5.3–5.4)."""
    m = build_model("lstm_luong_fixnorm_lex", vocab=V, seed=9, **TINY_L)
    r = 3.5
    dec = m.decoder
    tgt_norms = dec.embed_tokens(torch.arange(4, V)).norm(dim=-1)
    assert torch.allclose(tgt_norms, torch.full((V - 4,), r), atol=1e-4)
    src_norms = m.encoder.embed_tokens.weight[4:].norm(dim=-1)
    assert torch.allclose(src_norms, torch.full_like(src_norms, r), atol=1e-4)  # source init at norm r
    assert m.encoder.embed_tokens.weight.abs().max() > 0.01
    with torch.no_grad():  # make the biases visible
        dec.output_bias.normal_()
        dec.lexical.bias.normal_()
    src, lengths, prev = batch()
    logits = m(src, lengths, prev)[0]
    assert (logits - dec.output_bias - dec.lexical.bias).abs().max() <= 2 * r * r + 1e-3
    x, _ = dec.extract_features(prev, m.encoder(src, lengths))
    main = dec.output_layer(x) - dec.output_bias
    assert main.abs().max() <= r * r + 1e-3
    assert torch.allclose(main, fixnorm(x, r) @ fixnorm(dec.embed_tokens.weight, r).t(), atol=1e-4)
    no_h = build_model("lstm_luong_fixnorm", vocab=V, seed=9, fixnorm_hidden=False, **TINY_L)
    assert no_h.decoder.fixnorm_hidden is False
    xb = torch.randn(2, 3, 24) * 10
    expected = xb @ fixnorm(no_h.decoder.embed_tokens.weight, 5.0).t() + no_h.decoder.output_bias
    assert torch.allclose(no_h.decoder.output_layer(xb), expected, atol=1e-4)


def test_lstm_luong_init_uniform():
    m = build_model("lstm_luong_tied", vocab=V, seed=1, **TINY_L)
    for name, p in m.named_parameters():
        assert p.abs().max() <= 0.01, name
    assert torch.all(m.encoder.embed_tokens.weight[1] == 0)


@pytest.mark.parametrize("arch,kw", [("lstm_luong_fixnorm_lex", {}),
                                     ("lstm_luong", {"encoder_bidirectional": True}),
                                     ("lstm_luong_tied", {"reverse_source": False})])
def test_lstm_luong_incremental_equals_full(arch, kw):
    m = build_model(arch, vocab=V, seed=10, **TINY_L, **kw)
    src, lengths, prev = batch()
    assert torch.allclose(m(src, lengths, prev)[0], incremental_logits(m, src, lengths, prev), atol=1e-5)


def test_lstm_lexical_uses_the_main_attention_over_source_embeddings():
    m = build_model("lstm_luong_fixnorm_lex", vocab=V, seed=11, **TINY_L)
    src, lengths, prev = batch()
    enc = m.encoder(src, lengths)
    x, attn = m.decoder.extract_features(prev, enc)
    assert torch.allclose(attn.sum(-1), torch.ones(3, 6), atol=1e-5)
    right = enc[3].t()  # (B,S) padding mask of the right-padded source
    assert torch.all(attn.masked_select(right.unsqueeze(1).expand_as(attn)) == 0)
    expected = m.decoder.output_layer(x) + m.decoder.lexical(attn, enc[4].transpose(0, 1))
    assert torch.allclose(m(src, lengths, prev)[0], expected, atol=1e-5)


def _fairseq_lstm_decoder_pair(**kw):
    """fairseq's ``LSTMDecoder`` and ``LuongLSTMDecoder`` built with the same arguments and weights."""
    from fairseq.models.lstm import LSTMDecoder
    from fairseq_ext.models.lexical import LuongLSTMDecoder

    d = make_dictionary(V)
    kw = dict(dict(embed_dim=16, hidden_size=16, out_embed_dim=16, num_layers=3, dropout_in=0.0,
                   dropout_out=0.0, encoder_output_units=16), **kw)
    torch.manual_seed(0)
    ref = LSTMDecoder(d, **kw).eval()
    ours = LuongLSTMDecoder(d, **kw).eval()
    ours.load_state_dict(ref.state_dict())
    return ref, ours


@torch.no_grad()
def test_lstm_luong_decoder_keeps_fairseq_residuals_and_attention_in_training():
    """The decoder runs fairseq's loop (``residuals=True`` included) and records every step's
    attention, which fairseq returns only in evaluation."""
    from fairseq_ext.models.lexical import LuongLSTMEncoder

    enc_model = LuongLSTMEncoder(make_dictionary(V), reverse_source=True, embed_dim=16, hidden_size=16,
                                 num_layers=3, dropout_in=0.0, dropout_out=0.0).eval()
    src, lengths, prev = batch()
    enc = enc_model(src, lengths)
    ref, ours = _fairseq_lstm_decoder_pair(residuals=True)
    out_ref, attn_ref = ref(prev, enc[:4])
    out, attn = ours(prev, enc)
    assert torch.equal(out, out_ref) and torch.equal(attn, attn_ref)
    _, plain = _fairseq_lstm_decoder_pair(residuals=False)
    assert not torch.allclose(plain(prev, enc)[0], out, atol=1e-4)  # the residuals are used
    ours.train()  # dropout 0: the same numbers, and the attention is still there for lex / Arthur
    x, attn_train = ours.extract_features(prev, enc)
    assert torch.equal(attn_train, attn_ref) and ref.train().extract_features(prev, enc[:4])[1] is None
    assert ours(prev, enc)[1] is None and ours.attention_steps is None  # nothing kept after the call


@torch.no_grad()
def test_lstm_luong_decoder_without_encoder_is_fairseqs():
    ref, ours = _fairseq_lstm_decoder_pair(attention=False, encoder_output_units=0)
    _, _, prev = batch()
    out_ref, attn_ref = ref(prev)
    out, attn = ours(prev)
    assert attn_ref is None and attn is None and torch.equal(out, out_ref)


@torch.no_grad()
def test_lstm_luong_encoder_with_padding_only_columns():
    """A batch padded beyond its longest sentence (e.g. ``--pad-to-multiple``): fairseq's packed LSTM
    returns only the longest length; the extra columns come back as masked padding."""
    m = build_model("lstm_luong_fixnorm_lex", vocab=V, seed=12, **TINY_L)
    src, lengths, prev = batch()
    wide = torch.cat([torch.ones(src.size(0), 2, dtype=torch.long), src], dim=1)  # left padding
    enc, enc_wide = m.encoder(src, lengths), m.encoder(wide, lengths)
    assert enc_wide[0].shape[0] == wide.size(1) and torch.all(enc_wide[3][-2:])
    for a, b in zip(enc, enc_wide):
        assert torch.equal(a, b[: a.size(0)])
    assert torch.allclose(m.decoder(prev, enc)[0], m.decoder(prev, enc_wide)[0], atol=1e-6)


# ------------------------------------------------------------------ target-vocabulary masking
def test_masked_label_smoothing_is_a_distribution_over_the_allowed_vocabulary():
    torch.manual_seed(0)
    n, eps = 5, 0.1
    allowed = torch.zeros(V, dtype=torch.bool)
    allowed[torch.randperm(V)[:20]] = True
    target = torch.nonzero(allowed).flatten()[:n]
    lprobs = F.log_softmax(mask_logits(torch.randn(n, V), allowed), dim=-1)
    assert torch.isfinite(lprobs).all() and lprobs.exp()[:, ~allowed].max() < 1e-30
    loss, nll = masked_label_smoothed_nll_loss(lprobs, target, eps, allowed, reduce=False)
    # the implied smoothed target q: 1−ε on y, ε/(|A|−1) on A∖{y}, 0 elsewhere
    q = allowed.float().expand(n, V) * eps / (allowed.sum() - 1)
    q = q.scatter(1, target[:, None], 1 - eps)
    assert torch.allclose(q.sum(-1), torch.ones(n)) and torch.all(q[:, ~allowed] == 0)
    ce = -(q * lprobs.masked_fill(~allowed, 0)).sum(-1)
    assert torch.allclose(loss.flatten(), ce, atol=1e-5) and torch.isfinite(loss).all()
    assert torch.allclose(nll.flatten(), -lprobs.gather(1, target[:, None]).flatten())


def test_masked_label_smoothing_with_everything_allowed_is_fairseq_label_smoothing():
    torch.manual_seed(1)
    lprobs = F.log_softmax(torch.randn(8, V), dim=-1)
    target = torch.randint(0, V, (8,))
    target[3] = 1  # a pad, ignored
    ref = label_smoothed_nll_loss(lprobs, target, 0.1, ignore_index=1)
    everything = torch.ones(V, dtype=torch.bool)
    ours = masked_label_smoothed_nll_loss(lprobs, target, 0.1, everything, ignore_index=1)
    assert torch.allclose(ref[0], ours[0]) and torch.allclose(ref[1], ours[1])


def test_allowed_vocabulary_from_binarized_train_data_and_from_a_file(tiny_bin, tmp_path):
    d = Dictionary.load(str(tiny_bin / "dict.en.txt"))
    allowed = allowed_target_vocab(d, "train", str(tiny_bin), "es", "en")
    from fairseq.data import data_utils
    ds = data_utils.load_indexed_dataset(str(tiny_bin / "train.es-en.en"), d)
    seen = torch.unique(torch.cat([ds[i] for i in range(len(ds))]))
    expected = torch.zeros(len(d), dtype=torch.bool)
    expected[seen] = True
    expected[d.unk()] = True
    assert torch.equal(allowed, expected) and not allowed[d.pad()] and not allowed[d.bos()]
    assert 0 < allowed.sum() < len(d)  # joint dictionary: source-only types are masked
    f = tmp_path / "allowed.txt"
    f.write_text("".join(f"{d[i]} 1\n" for i in range(d.nspecial, len(d)) if allowed[i]))
    assert torch.equal(allowed_target_vocab(d, str(f)), allowed)
    assert allowed_target_vocab(d, "all").all()
    assert allowed_target_vocab(d, "train", str(tmp_path), "es", "en") is None
    with pytest.raises(ValueError):
        allowed_target_vocab(d, "nonexistent-file")


def test_criterion_masks_logits_and_combines_with_the_model_mask(tmp_path):
    d = make_dictionary(V)
    f = tmp_path / "allowed.txt"
    f.write_text("".join(f"w{i}\n" for i in range(30)))
    task = types.SimpleNamespace(target_dictionary=d, source_dictionary=d, cfg=None)
    crit = MaskedLabelSmoothedCrossEntropyCriterion(task, False, 0.1, target_vocab=str(f))
    assert crit.allowed.sum() == 30 + 2  # + </s>, <unk>
    model = build_model("transformer_lex_bench", vocab=V, seed=2, **TINY_T)
    src, lengths, prev = batch()
    target = torch.randint(4, 4 + 30, prev.shape)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
              "target": target, "ntokens": target.numel()}
    loss, _, log = crit(model, sample)
    assert torch.isfinite(loss)
    lprobs, _ = crit.get_lprobs_and_target(model, model(**sample["net_input"]), sample)
    assert lprobs.exp()[:, ~crit.allowed].max() < 1e-30
    # a reference token outside A is scored as <unk> (finite loss; a no-op for training data)
    outside = target.clone()
    outside[0, 0] = 4 + 40
    sample_out = dict(sample, target=outside)
    _, tgt = crit.get_lprobs_and_target(model, model(**sample["net_input"]), sample_out)
    assert tgt[0] == d.unk() and torch.equal(tgt[1:], outside.flatten()[1:])
    unk_target = outside.clone()
    unk_target[0, 0] = d.unk()
    assert torch.allclose(crit(model, sample_out)[0], crit(model, dict(sample, target=unk_target))[0])
    all_crit = MaskedLabelSmoothedCrossEntropyCriterion(task, False, 0.1, target_vocab="all")
    model.decoder.init_target_vocab_mask(str(f), task, d)  # a model mask shrinks "all" to the same set
    assert torch.equal(all_crit.allowed_for(model), crit.allowed)
    assert torch.allclose(all_crit(model, sample)[0], crit(model, sample)[0])


def test_target_vocab_is_a_command_line_option(tmp_path):
    """``--target-vocab FILE`` reaches the criterion (A = the file's tokens + </s>, <unk>); without it A is 'train'."""
    from fairseq import criterions
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    d = make_dictionary(V)
    f = tmp_path / "allowed.txt"
    f.write_text("".join(f"w{i}\n" for i in range(30)))
    task = types.SimpleNamespace(target_dictionary=d, source_dictionary=d, cfg=None)
    base = ["/nonexistent", "--task", "translation", "--arch", "transformer_twt", "--criterion",
            "masked_label_smoothed_cross_entropy", "--label-smoothing", "0.1"]
    args = train_parse(*base, "--target-vocab", f)
    crit = criterions.build_criterion(convert_namespace_to_omegaconf(args).criterion, task)
    assert int(crit.allowed.sum()) == 30 + 2
    assert train_parse(*base).target_vocab == "train"


class _FixedLogits(torch.nn.Module):
    """A stand-in model (no target-vocabulary mask of its own) whose decoder output is ``logits``."""
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, **net_input):
        return self.logits, {}

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return F.log_softmax(net_output[0].float(), -1) if log_probs else F.softmax(net_output[0].float(), -1)

    def get_targets(self, sample, net_output):
        return sample["target"]


def test_criterion_loss_with_padding_and_out_of_vocabulary_targets_is_hand_computed(tmp_path):
    """Padding targets are ignored (not scored as <unk>) and a target outside A is scored as <unk>:
    the criterion's loss and nll equal the sum over the five real target tokens of
    (1 − ε − ε_A)·(−log p_y) + ε_A·Σ_{v∈A}(−log p_v), ε_A = ε/(|A| − 1), p = softmax over A only."""
    d = make_dictionary(8)  # <s>=0 <pad>=1 </s>=2 <unk>=3 w0..w3=4..7
    f = tmp_path / "allowed.txt"
    f.write_text("w0\nw1\n")
    task = types.SimpleNamespace(target_dictionary=d, source_dictionary=d, cfg=None)
    eps = 0.1
    crit = MaskedLabelSmoothedCrossEntropyCriterion(task, False, eps, target_vocab=str(f))
    A = [d.eos(), d.unk(), 4, 5]  # </s>, <unk>, w0, w1
    assert crit.allowed.nonzero().flatten().tolist() == A
    pad, unk = d.pad(), d.unk()
    # w2 (6) is outside A; the last target of sentence 2 is padding
    target = torch.tensor([[4, 6, 2], [5, 2, pad]])
    # large logits on the disallowed types (<s>, <pad>, w2, w3): they must not count
    rows = [[9.0, 7.0, 0.5, -1.0, 2.0, 0.0, 6.0, 8.0], [9.0, 7.0, 1.5, 0.3, -0.7, 1.1, 6.0, 8.0],
            [9.0, 7.0, 0.0, 2.5, 1.0, -2.0, 6.0, 8.0], [9.0, 7.0, -0.4, 0.9, 0.2, 1.7, 6.0, 8.0],
            [9.0, 7.0, 2.2, -1.3, 0.6, 0.1, 6.0, 8.0], [9.0, 7.0, 0.3, 0.4, -0.5, 2.0, 6.0, 8.0]]
    logits = torch.tensor(rows).view(2, 3, 8)
    eps_a = eps / (len(A) - 1)
    loss = nll = 0.0
    for row, y in zip(rows, target.flatten().tolist()):
        if y == pad:
            continue  # padding: no term
        y = y if y in A else unk  # outside A: scored as <unk>
        log_z = math.log(sum(math.exp(row[v]) for v in A))
        nll_y = log_z - row[y]
        loss += (1 - eps - eps_a) * nll_y + eps_a * sum(log_z - row[v] for v in A)
        nll += nll_y
    sample = {"net_input": {}, "target": target, "ntokens": 5, "nsentences": 2}
    out, sample_size, log = crit(_FixedLogits(logits), sample)
    assert sample_size == 5
    assert math.isclose(out.item(), loss, rel_tol=1e-5), (out.item(), loss)
    assert math.isclose(log["nll_loss"], nll, rel_tol=1e-5), (log["nll_loss"], nll)


def test_model_target_vocab_mask_is_a_buffer_applied_to_logits(tmp_path):
    f = tmp_path / "allowed.txt"
    f.write_text("".join(f"w{i}\n" for i in range(10)))
    d = make_dictionary(V)
    task = types.SimpleNamespace(target_dictionary=d, source_dictionary=d, cfg=None)
    for arch, kw in (("transformer_lex_bench", TINY_T), ("lstm_luong_fixnorm_lex", TINY_L)):
        m = build_model(arch, vocab=V, seed=3, **kw)
        m.decoder.init_target_vocab_mask(str(f), task, d)
        assert "decoder.target_vocab_mask" in m.state_dict()
        src, lengths, prev = batch()
        logits = m(src, lengths, prev)[0]
        mask = m.decoder.target_vocab_mask
        assert torch.all(logits[..., ~mask] == -1e9) and torch.all(logits[..., mask] > -1e8)

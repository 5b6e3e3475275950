"""Bi-MSMT (Maruf 2019 ch. 5): the ``bimsmt_rnn`` model, its context variants, the ``conversation_online``
generator, and the command lines of every registration on the tiny conversation fixture
(``tests/data/conversations``: a few verses of Bible chapters where Jesus / the Beloved speak English and
the narrator / others Spanish)."""
import shutil
import sys

import pytest
import torch
from fairseq.data import LanguagePairDataset

import fairseq_ext  # noqa: F401  (registrations)
from fairseq_ext.data.conversations import ConversationIndex, ConversationPairDataset, segment_turns
from fairseq_ext.generators.conversation_online import ConversationOnlineGenerator
from fairseq_ext.models.bimsmt import BiMSMTModel
from fairseq_ext.models.rnnsearch import RNNSearchModel
from harness import (ROOT, build_model, fairseq, hypotheses, lstm_lm_checkpoint, make_dictionary, n_lines, train,
                     train_parse)

FIXTURE = ROOT / "tests" / "data" / "conversations"
VOCAB = 60
SRC_VARIANTS = ("direct", "hier_gating", "lang_attn", "lang_sent_attn", "combined_attn")
GATED = ("direct", "hier_gating", "lang_attn", "lang_sent_attn")

# two conversations: turns by language, the second starts with the second language
CONVS = [("c1", [0, 0, 1, 1, 1, 0, 1]), ("c2", [1, 0, 0, 1])]


def toy_dataset(convs=CONVS, seed=3, context="all", target="reference"):
    g = torch.Generator().manual_seed(seed)
    d = make_dictionary(VOCAB)
    lines, src, tgt = [], [], []
    for name, langs in convs:
        for k, lang in enumerate(langs):
            lines.append(f"{name}\t{('en', 'es')[lang]}\tspk{k % 2}")
            src.append(torch.cat([torch.randint(4, VOCAB, (int(torch.randint(2, 6, (1,), generator=g)),),
                                                generator=g), torch.tensor([2])]))
            tgt.append(torch.cat([torch.randint(4, VOCAB, (int(torch.randint(2, 6, (1,), generator=g)),),
                                                generator=g), torch.tensor([2])]))
    base = LanguagePairDataset(src, torch.tensor([len(s) for s in src]), d, tgt, torch.tensor([len(t) for t in tgt]),
                               d, shuffle=False)
    index = ConversationIndex.from_lines(lines, ("en", "es"))
    return ConversationPairDataset(base, index, context, target)


def toy_sample(ds=None, rows=None):
    ds = ds or toy_dataset()
    rows = list(range(len(ds))) if rows is None else rows
    return ds.collater([ds[i] for i in rows])


def run(model, sample):
    return model(**sample["net_input"])


# ------------------------------------------------------------------------------------------ variants
@pytest.mark.parametrize("variant", SRC_VARIANTS)
def test_source_context_variants_shape_gate_and_empty_history(variant):
    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, src_ctx=variant)
    sample = toy_sample()
    logits, extra = run(model, sample)
    B, T = sample["target"].shape
    assert logits.shape == (B, T, VOCAB)
    H = model.args.decoder_hidden_size
    first = sample["conv_pos"].eq(0)
    for d, rows in extra["rows"].items():
        ex = extra["context"][d]
        enc = model.directions[d].encoder(sample["net_input"]["src_tokens"][rows],
                                          sample["net_input"]["src_lengths"][rows])
        assert ex["src_has_history"].tolist() == (~first[rows]).tolist()
        if variant in GATED:
            gate = ex["src_gate"]
            assert gate.shape[0] == rows.numel()
            assert bool(((gate >= 0) & (gate <= 1)).all())
            # a row that has history on both language sides gets a gate strictly inside (0, 1)
            both = [k for k, r in enumerate(rows.tolist()) if sample["conv_pos"][r] >= 3]
            if both:
                assert bool(((gate[both] > 0) & (gate[both] < 1)).all())
        assert enc["encoder_final"][0].size(0) == rows.numel()
    # the context vector itself: (B_d, H), exactly zero without history
    for d in (0, 1):
        rows = sample["net_input"]["direction"].eq(d).nonzero().squeeze(1)
        from fairseq_ext.modules.bimsmt import History
        net = sample["net_input"]
        sent = model.nset_sentence_vectors([net["src_tokens"], net["hist_src_tokens"]], net["nset_lang"])
        hist = model.encode_history(sent, net["nset_lang"], net["nset_turn"], net["hist_index"])
        sub = History(*[None if t is None else t[rows] for t in hist])
        h = model.directions[d].encoder(net["src_tokens"][rows], net["src_lengths"][rows])["encoder_final"][0]
        o, _ = model.directions[d].context(h, sub)
        assert o.shape == (rows.numel(), H)
        assert torch.equal(o[first[rows]], torch.zeros_like(o[first[rows]]))
        assert bool(o[~first[rows]].abs().sum(1).gt(0).all())


@pytest.mark.parametrize("kw,n_vectors", [(dict(src_ctx="none", tgt_ctx="lang_sent_attn"), 1),
                                          (dict(dual="src_tgt"), 2), (dict(dual="src_tgt_mix"), 2)])
def test_target_and_dual_contexts_shapes(kw, n_vectors):
    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, **kw)
    sample = toy_sample()
    logits, extra = run(model, sample)
    assert logits.shape[:2] == sample["target"].shape
    H = model.args.decoder_hidden_size
    assert model.directions[0].decoder.ctx_dim == n_vectors * H
    for d, ex in extra["context"].items():
        for k, v in ex.items():
            if k.endswith("gate"):
                assert bool(((v >= 0) & (v <= 1)).all())
    with pytest.raises(ValueError, match="hist_tgt_tokens"):
        net = dict(sample["net_input"])
        net.pop("hist_tgt_tokens")
        model(**net)


def test_rnnlm_sentence_encoder_builds_from_dims():
    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, src_sent_encoder="rnnlm", sent_lm_dims="8,6,1")
    assert model.sent_encoders is not None and model.sent_encoders[0].output_dim == 12
    assert not any(p.requires_grad for p in model.sent_encoders.parameters())
    logits, _ = run(model, toy_sample())
    assert torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="--sent-lm"):
        build_model("bimsmt_rnn_tiny", vocab=VOCAB, src_sent_encoder="rnnlm")


def test_bad_option_combinations():
    with pytest.raises(ValueError, match="--dual src_tgt"):
        build_model("bimsmt_rnn_tiny", vocab=VOCAB, src_ctx="lang_attn", tgt_ctx="lang_sent_attn")
    with pytest.raises(ValueError, match="replaces"):
        build_model("bimsmt_rnn_tiny", vocab=VOCAB, dual="src_tgt_mix", src_ctx="lang_attn")


# ------------------------------------------------------------------------------------------ base model
def base_logits(model, sample, d):
    """Logits of an rnnsearch model holding direction d's sentence parameters, on direction d's rows."""
    ref = RNNSearchModel.build_model(model.args, type("T", (), {"source_dictionary": model.dictionary,
                                                                "target_dictionary": model.dictionary})()).eval()
    own = model.directions[d].state_dict()
    ref.load_state_dict({k: v for k, v in own.items() if k in ref.state_dict()}, strict=True)
    net = sample["net_input"]
    rows = net["direction"].eq(d).nonzero().squeeze(1)
    src = net["src_tokens"][rows]
    src = src[:, src.ne(1).any(0)]
    return ref(src, net["src_lengths"][rows], net["prev_output_tokens"][rows])[0], rows


@pytest.mark.parametrize("inject", ["initdec", "adddec", "initdec_adddec"])
def test_zero_context_is_the_base_model_exactly(inject):
    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, src_ctx="lang_sent_attn", ctx_inject=inject, seed=1)
    sample = toy_sample()
    for p in model.parameters():  # make every context parameter matter
        p.data.add_(0.05)
    with model.context_disabled():
        logits, _ = run(model, sample)
    full, _ = run(model, sample)
    first = sample["conv_pos"].eq(0)
    for d in (0, 1):
        ref, rows = base_logits(model, sample, d)
        assert torch.equal(logits[rows], ref)
        # a sentence without history gets o = 0: the base model (bit for bit with InitDec; AddDec's GRU on
        # [x; 0] is computed unfused, equal up to rounding)
        f = first[rows]
        if inject == "initdec":
            assert torch.equal(full[rows][f], ref[f])
        else:
            assert torch.allclose(full[rows][f], ref[f], atol=1e-5)
        assert not torch.allclose(full[rows][~f], ref[~f], atol=1e-4)  # history changes the others


def test_base_checkpoint_warm_starts_the_context_model():
    base = build_model("bimsmt_rnn_base", vocab=VOCAB, src_sent_encoder="nmt_encoder", encoder_embed_dim=8,
                       encoder_hidden_size=8, seed=2)
    ctx = build_model("bimsmt_rnn", vocab=VOCAB, src_sent_encoder="nmt_encoder", encoder_embed_dim=8,
                      encoder_hidden_size=8, ctx_inject="initdec_adddec", seed=3)
    ctx.load_state_dict(base.state_dict())
    for k, v in base.state_dict().items():
        assert torch.equal(ctx.state_dict()[k], v), k
    assert any(k.startswith("turn_rnns.") for k in ctx.state_dict())


def test_frozen_base_target_vectors_in_training_own_ones_at_test_time():
    kw = dict(vocab=VOCAB, src_sent_encoder="nmt_encoder", encoder_embed_dim=8, encoder_hidden_size=8)
    base = build_model("bimsmt_rnn_base", seed=2, **kw)
    model = build_model("bimsmt_rnn", seed=3, dual="src_tgt", tgt_vectors="frozen_base", **kw)
    model.load_state_dict(base.state_dict())  # the warm start fills the frozen copy
    for k, v in base.state_dict().items():
        assert torch.equal(model.state_dict()["frozen_base." + k[len("directions."):]], v), k
    assert not any(p.requires_grad for p in model.frozen_base.parameters())
    src = torch.tensor([[5, 6, 7, 2], [1, 8, 9, 2]])
    tgt = torch.tensor([[10, 11, 2], [12, 2, 1]])
    model.train()
    before = model.target_vectors(0, src, tgt)
    with torch.no_grad():
        for p in model.directions.parameters():
            p.add_(0.1)  # training moves the base parameters ...
    assert torch.equal(model.target_vectors(0, src, tgt), before)  # ... the training-time vectors stay fixed
    model.eval()
    assert not torch.allclose(model.target_vectors(0, src, tgt), before)  # test time: the model's own


# ------------------------------------------------------------------------------------------ history
def test_history_never_contains_a_later_sentence_or_its_translation():
    """Changing a later sentence (source and target) never changes an earlier sentence's output."""
    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, dual="src_tgt", ctx_inject="initdec_adddec")
    ds = toy_dataset()
    sample = toy_sample(ds)
    logits, _ = run(model, sample)
    net = sample["net_input"]
    last = int(sample["conv_pos"].argmax())  # the last sentence of c1
    changed = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in net.items()}
    changed["src_tokens"][last, -3:-1] = 7
    changed["hist_tgt_tokens"][last, 0] = 9
    logits2, _ = model(**changed)
    same = [b for b in range(len(ds)) if b != last]
    assert torch.equal(logits[same], logits2[same])
    for b, row in enumerate(net["hist_index"].tolist()):
        rows = [r for r in row if r >= 0]
        assert b not in rows and all(int(sample["conv_pos"][r]) < int(sample["conv_pos"][b]) for r in rows)
        assert all(int(sample["conv_index"][r]) == int(sample["conv_index"][b]) for r in rows)


# ------------------------------------------------------------------------------------------ generator
def gen(model, cache=True, beam=1):
    return ConversationOnlineGenerator([model], model.dictionary, max_len_b=6, cache_turns=cache, beam_size=beam)


@pytest.mark.parametrize("kw,beam", [(dict(src_ctx="lang_sent_attn"), 1),
                                     (dict(dual="src_tgt", ctx_inject="initdec_adddec"), 1),
                                     (dict(dual="src_tgt_mix", ctx_inject="adddec"), 1), (dict(src_ctx="hier_gating"), 1),
                                     (dict(dual="src_tgt", ctx_inject="initdec_adddec"), 3)])
def test_online_generation_uses_its_own_translations_and_equals_teacher_forcing(kw, beam):
    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, **kw)
    sample = toy_sample()
    g = gen(model, beam=beam)
    hyps = g.generate([model], sample)
    # the batch's target side (references) is never read: the same output with garbage there
    noisy = {**sample, "net_input": dict(sample["net_input"])}
    noisy["net_input"]["hist_tgt_tokens"] = torch.full_like(sample["net_input"]["hist_tgt_tokens"], 5)
    hyps2 = gen(model, beam=beam).generate([model], noisy)
    assert [h[0]["tokens"].tolist() for h in hyps] == [h[0]["tokens"].tolist() for h in hyps2]
    # teacher-forcing the whole batch on the generator's own translations (as targets and as target history)
    # gives back its per-token scores: each sentence saw exactly those translations as history
    toks = [h[0]["tokens"] for h in hyps]
    target = torch.nn.utils.rnn.pad_sequence(toks, batch_first=True, padding_value=1)
    prev = torch.cat([torch.full((len(toks), 1), 2), target[:, :-1]], 1).masked_fill(
        torch.cat([torch.zeros(len(toks), 1, dtype=torch.bool), target[:, :-1].eq(1)], 1), 1)
    net = dict(sample["net_input"], prev_output_tokens=prev, hist_tgt_tokens=target,
               hist_tgt_lengths=torch.tensor([t.numel() for t in toks]))
    lprobs = model.get_normalized_probs(model(**net), log_probs=True)
    for b, t in enumerate(toks):
        tf = lprobs[b, torch.arange(t.numel()), t]
        assert torch.allclose(tf, hyps[b][0]["positional_scores"], atol=1e-4)


@pytest.mark.parametrize("context", ["prev_sent", "current_turn", "other_lang_prev_turns"])
def test_online_generation_follows_the_restricted_history(context):
    """Table 5.4/5.5's switches: the generator sees exactly the task's (restricted) history."""
    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, dual="src_tgt")
    sample = toy_sample(toy_dataset(context=context))
    hyps = gen(model).generate([model], sample)
    toks = [h[0]["tokens"] for h in hyps]
    target = torch.nn.utils.rnn.pad_sequence(toks, batch_first=True, padding_value=1)
    prev = torch.cat([torch.full((len(toks), 1), 2), target[:, :-1]], 1).masked_fill(
        torch.cat([torch.zeros(len(toks), 1, dtype=torch.bool), target[:, :-1].eq(1)], 1), 1)
    net = dict(sample["net_input"], prev_output_tokens=prev, hist_tgt_tokens=target,
               hist_tgt_lengths=torch.tensor([t.numel() for t in toks]))
    lprobs = model.get_normalized_probs(model(**net), log_probs=True)
    for b, t in enumerate(toks):
        assert torch.allclose(lprobs[b, torch.arange(t.numel()), t], hyps[b][0]["positional_scores"], atol=1e-4)


def test_beam_size_selects_the_shrinking_beam():
    """--beam K: the shrinking beam (Gu Eqs. 2.11-2.13) over each direction model with its history, the best
    finished hypothesis kept (the teacher-forcing test above checks that the history then uses it); K = 1 is
    greedy exactly."""
    from fairseq_ext.generators.decoding import ShrinkingBeamGenerator

    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, dual="src_tgt")
    sample = toy_sample()
    greedy = gen(model).generate([model], sample)
    assert [h[0]["tokens"].tolist() for h in greedy] == \
        [h[0]["tokens"].tolist() for h in gen(model, beam=1).generate([model], sample)]
    g = gen(model, beam=4)
    assert all(isinstance(d, ShrinkingBeamGenerator) and d.beam_size == 4 for d in g.decoders)
    for h in g.generate([model], sample):
        assert len(h) == 1 and int(h[0]["tokens"][-1]) == model.dictionary.eos()
        assert float(h[0]["score"]) == pytest.approx(float(g.decoders[0].rerank_score(h[0]["positional_scores"])))


@pytest.mark.parametrize("beam", [1, 3])
def test_cached_turn_states_equal_recomputing_them(beam):
    model = build_model("bimsmt_rnn_tiny", vocab=VOCAB, dual="src_tgt")
    convs = [("a", [0, 0, 1, 1, 0, 0, 1, 0, 1, 1]), ("b", [1, 1, 0, 1, 0])]
    sample = toy_sample(toy_dataset(convs))
    cached, fresh = gen(model, True, beam), gen(model, False, beam)
    h1, h2 = cached.generate([model], sample), fresh.generate([model], sample)
    for a, b in zip(h1, h2):
        assert a[0]["tokens"].tolist() == b[0]["tokens"].tolist()
        assert torch.allclose(a[0]["positional_scores"], b[0]["positional_scores"], atol=1e-5)
    for i in cached.last_contexts:
        assert torch.allclose(cached.last_contexts[i], fresh.last_contexts[i], atol=1e-6)
    assert cached.stats["cache_hits"] > 0
    assert cached.stats["segments_encoded"] < fresh.stats["segments_encoded"]
    # each completed turn is encoded once (all turns but the last of a conversation), plus one ongoing-turn
    # prefix for every sentence that is not the first of its turn
    expected = 0
    for _, langs in convs:
        turns = segment_turns(langs)
        expected += len(turns) - 1 + sum(b - a - 1 for a, b in turns)
    assert cached.stats["segments_encoded"] == expected


# ------------------------------------------------------------------------------------------ command line
@pytest.fixture(scope="module")
def conv_bin(tmp_path_factory):
    out = tmp_path_factory.mktemp("conv") / "bin"
    fairseq("preprocess", "-s", "src", "-t", "tgt", "--joined-dictionary", "--trainpref", FIXTURE / "train",
            "--validpref", FIXTURE / "valid", "--testpref", FIXTURE / "test", "--destdir", out, "--workers", "1",
            user_dir=False)
    for sp in ("train", "valid", "test"):
        shutil.copyfile(FIXTURE / f"{sp}.conv", out / f"{sp}.conv")
    return out


def cli_train(data, tmp_path, model_args, updates=2):
    return train(data, tmp_path, model_args, task="conversation_translation", criterion="conversation_cross_entropy",
                 max_update=updates, extra=("--max-tokens", "2000", "--log-file", tmp_path / "train.log"))


def cli_generate(data, ckpt, *args):
    p = fairseq("generate", data, "--task", "conversation_translation", "--path", ckpt, "--cpu", "--beam", "1",
                "--max-len-b", "8", "--batch-size", "64", *args)
    return p


@pytest.mark.parametrize("arch,extra", [
    ("bimsmt_rnn_tiny", ["--dual", "src_tgt", "--ctx-inject", "initdec_adddec"]),
    ("bimsmt_rnn_base", ["--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--attention-dim", "16"]),
    ("bimsmt_rnn", ["--src-sent-encoder", "nmt_encoder", "--encoder-embed-dim", "16", "--encoder-hidden-size", "16",
                    "--attention-dim", "16"]),
    ("bimsmt_rnn_bench", ["--dual", "src_tgt_mix", "--ctx-inject", "adddec", "--encoder-embed-dim", "16",
                          "--encoder-hidden-size", "16", "--decoder-hidden-size", "16", "--attention-dim", "16"]),
])
def test_cli_train_and_generate(conv_bin, tmp_path, arch, extra):
    """Every registered architecture, with the task and the per-direction criterion, trains and decodes."""
    ckpt = cli_train(conv_bin, tmp_path, ["--arch", arch, *extra])
    log = (tmp_path / "train.log").read_text()
    assert "loss_en-es" in log and "loss_es-en" in log and "ppl_es-en" in log
    out = cli_generate(conv_bin, ckpt)
    hyps = hypotheses(out.stdout)
    assert len(hyps) == n_lines(FIXTURE / "test.conv")
    assert "Generate test with beam=1" in out.stderr or "BLEU" in out.stdout
    if arch == "bimsmt_rnn_tiny":   # --beam K: the shrinking beam, one translation per sentence
        assert len(hypotheses(cli_generate(conv_bin, ckpt, "--beam", "3").stdout)) == n_lines(FIXTURE / "test.conv")


def test_bad_conversation_file_is_one_clear_error(conv_bin, tmp_path):
    """The task's loading (what fairseq-train runs): an unknown language tag names the file and line."""
    from fairseq import tasks

    bad = tmp_path / "bin"
    shutil.copytree(conv_bin, bad)
    lines = (bad / "valid.conv").read_text().splitlines()
    lines[2] = lines[2].replace("\ten\t", "\tfr\t").replace("\tes\t", "\tfr\t")
    (bad / "valid.conv").write_text("\n".join(lines) + "\n")
    args = train_parse(bad, "--task", "conversation_translation", "--arch", "bimsmt_rnn_tiny", "--user-dir",
                       ROOT / "fairseq_ext")
    task = tasks.setup_task(args)
    task.load_dataset("train")
    with pytest.raises(ValueError, match=f"{bad / 'valid.conv'}:3: unknown language tag 'fr'"):
        task.load_dataset("valid")


@pytest.mark.slow
def test_cli_rnnlm_sentence_vectors_end_to_end(conv_bin, tmp_path):
    """The thesis's sentence vectors: four lstm_lm checkpoints (English / Spanish, forward / reversed; the
    tool's lm-data writes their text, training them is fairseq's language_modeling) on the joint dictionary,
    then bimsmt_rnn_tiny --src-sent-encoder rnnlm trains (the LMs frozen) and decodes from its checkpoint."""
    from fairseq.data import Dictionary

    from harness import run as run_cmd

    lm = tmp_path / "lm"
    run_cmd([sys.executable, "-m", "fairseq_ext.tools.corpora.conversations", "lm-data", FIXTURE, lm])
    assert n_lines(lm / "train.en.fwd") == n_lines(lm / "train.en.bwd") == 24
    d = Dictionary.load(str(conv_bin / "dict.src.txt"))
    ckpts = [str(tmp_path / f"{name}.pt") for name in ("en.fwd", "en.bwd", "es.fwd", "es.bwd")]
    for k, path in enumerate(ckpts):
        lstm_lm_checkpoint(path, d, k)
    ckpt = cli_train(conv_bin, tmp_path, ["--arch", "bimsmt_rnn_tiny", "--src-sent-encoder", "rnnlm",
                                          "--sent-lm", ",".join(ckpts)])
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    lm_weight = torch.load(ckpts[2], map_location="cpu", weights_only=False)["model"]["decoder.embed_tokens.weight"]
    assert torch.equal(state["model"]["sent_encoders.1.embed_fwd.weight"], lm_weight)  # frozen
    for p in ckpts:  # decoding reads the LMs from the model checkpoint
        shutil.move(p, p + ".moved")
    out = cli_generate(conv_bin, ckpt)
    assert len(hypotheses(out.stdout)) == n_lines(FIXTURE / "test.conv")

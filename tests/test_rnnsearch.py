"""The ``rnnsearch`` model (Gu 2019 §2.1; fairseq_ext/models/rnnsearch.py), its archs, the
``translation_decoding`` task's decoding algorithms and input checks, in-process and through the fairseq
command lines on the tiny Bible slice."""
import re

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY

from harness import (
    USER_DIR,
    build_model,
    fairseq,
    fairseq_in_one_process,
    hypotheses,
    n_lines,
    n_params,
    toy_batch,
)
from fairseq_ext.models.rnnsearch import THESIS_PRESETS

ARCHS = sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__name__ == "RNNSearchModel")
VARIANTS = {  # every structural switch of the decoder and encoder
    "gru_conditional": {},
    "gru_plain_3_layers": dict(decoder_variant="plain", decoder_layers=3),
    "lstm_conditional_2_layers": dict(rnn_type="lstm", decoder_layers=2),
    "lstm_plain": dict(rnn_type="lstm", decoder_variant="plain"),
    "no_attention": dict(no_attention=True),
    "unidirectional_2_layer_encoder": dict(encoder_unidirectional=True, encoder_layers=2),
    "tied_output": dict(share_decoder_input_output_embed=True),
}
TINY_SIZES = ["--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--decoder-hidden-size", "16",
              "--attention-dim", "16"]


def test_archs_registered():
    earlier = {"encdec_copynet_syn"}  # the earlier name of rnnsearch_encdec_copynet_syn
    assert set(THESIS_PRESETS) | {"rnnsearch", "rnnsearch_tiny", "rnnsearch_bench"} | earlier == set(ARCHS)


# ------------------------------------------------------------------------------------------ exactness
def step_by_step(model, src, lengths, prev, permute_at=None, order=None):
    """Features and attention one step at a time; at step ``permute_at`` the batch is re-ordered by
    ``order`` (encoder output, incremental state and tokens), as beam search does."""
    enc = model.encoder(src, src_lengths=lengths)
    state, feats, attns = {}, [], []
    for t in range(prev.size(1)):
        if t == permute_at:
            enc = model.encoder.reorder_encoder_out(enc, order)
            model.decoder.reorder_incremental_state_scripting(state, order)
            prev = prev.index_select(0, order)
            feats = [f.index_select(0, order) for f in feats]
            attns = [a.index_select(0, order) if a is not None else None for a in attns]
        f, extra = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state, features_only=True)
        feats.append(f)
        attns.append(extra["attn"][0])
    attn = torch.cat(attns, 1) if attns[0] is not None else None
    return torch.cat(feats, 1), attn, model.decoder.output_layer(torch.cat(feats, 1))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_incremental_decoding_equals_the_full_pass(variant):
    """Step-by-step decoding runs the teacher-forced pass's own per-step code: states, readouts and attention
    are bitwise equal; the logits agree to the rounding of the vocabulary projection (one GEMM over all
    steps in the full pass, one per step incrementally)."""
    model = build_model("rnnsearch_tiny", **VARIANTS[variant])
    src, lengths, prev = toy_batch(bsz=3, src_len=7, tgt_len=6)
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        full, extra = model.decoder(prev, encoder_out=enc, features_only=True)
        logits = model.decoder.output_layer(full)
        feats, attn, inc_logits = step_by_step(model, src, lengths, prev)
    assert torch.equal(feats, full)
    if variant == "no_attention":
        assert attn is None and extra["attn"][0] is None
    else:
        assert torch.equal(attn, extra["attn"][0])
        assert torch.allclose(attn.sum(-1), torch.ones(3, 6))
        assert float(attn[0, :, :2].abs().max()) == 0.0  # row 0's two left pads get no attention
    assert torch.allclose(inc_logits, logits, atol=1e-6, rtol=0)


@pytest.mark.parametrize("variant", ["gru_conditional", "lstm_conditional_2_layers", "no_attention"])
@pytest.mark.parametrize("order", [[2, 0, 1], [1, 1, 0]])
def test_incremental_decoding_after_reordering(variant, order):
    """reorder_incremental_state with a permutation (and with a repeated row, as beam search does)."""
    model = build_model("rnnsearch_tiny", **VARIANTS[variant])
    src, lengths, prev = toy_batch(bsz=3, src_len=7, tgt_len=6)
    order = torch.tensor(order)
    with torch.no_grad():
        feats, attn, _ = step_by_step(model, src, lengths, prev, permute_at=3, order=order)
        enc = model.encoder(src.index_select(0, order), src_lengths=lengths.index_select(0, order))
        full, extra = model.decoder(prev.index_select(0, order), encoder_out=enc, features_only=True)
    assert torch.equal(feats, full)
    if attn is not None:
        assert torch.equal(attn, extra["attn"][0])


@pytest.mark.parametrize("variant", ["gru_conditional", "lstm_plain", "unidirectional_2_layer_encoder"])
def test_left_padding_does_not_change_the_translation_model(variant):
    """A left-padded source (fairseq's default) gives the states and log-probs of the same source alone."""
    model = build_model("rnnsearch_tiny", **VARIANTS[variant])
    src, lengths, prev = toy_batch(bsz=3, src_len=7, tgt_len=6)
    assert lengths[0] == 5  # two left pads
    with torch.no_grad():
        batch_enc = model.encoder(src, src_lengths=lengths)
        alone_enc = model.encoder(src[:1, 2:], src_lengths=lengths[:1])
        batch_out = model.decoder(prev, encoder_out=batch_enc)[0][0]
        alone_out = model.decoder(prev[:1], encoder_out=alone_enc)[0][0]
    states = batch_enc["encoder_out"][0][:, 0]  # (S, C) of row 0
    assert float(states[:2].abs().max()) == 0.0
    assert torch.allclose(states[2:], alone_enc["encoder_out"][0][:, 0], atol=1e-6)
    assert torch.allclose(batch_out, alone_out, atol=1e-5)


def test_transform_state_sees_every_step_in_both_passes():
    model = build_model("rnnsearch_tiny")
    src, lengths, prev = toy_batch(bsz=2, src_len=5, tgt_len=4)
    seen = []
    model.decoder.state_perturbation = lambda h, t: (seen.append(t), h + 1.0)[1]
    try:
        with torch.no_grad():
            enc = model.encoder(src, src_lengths=lengths)
            full = model.decoder(prev, encoder_out=enc)[0]
            assert seen == [1, 2, 3, 4]
            _, _, inc = step_by_step(model, src, lengths, prev)
            assert seen == [1, 2, 3, 4] * 2
    finally:
        model.decoder.state_perturbation = None
    assert torch.allclose(inc, full, atol=1e-6)
    with torch.no_grad():  # the perturbation changed the outputs
        assert not torch.allclose(model.decoder(prev, encoder_out=enc)[0], full, atol=1e-3)


# ------------------------------------------------------------------------------------------ sizes
def gru(i, h):
    """GRU (cell) parameters: W_ih 3h×i, W_hh 3h×h, two biases 3h."""
    return 3 * h * (i + h) + 6 * h


def lstm(i, h):
    return 4 * h * (i + h) + 8 * h


def expected_params(V, E, H, A, rnn=gru, variant="plain", attention=True, dec_layers=1, bidirectional=True):
    """Separate source/target embeddings V×E; encoder RNN per direction; C = 2H; decoder init
    tanh(W·mean h): C×(L·H) + L·H; attention W (H×A), U (C×A) + b, v (A); first layer plain RNN([E; C] → H)
    or conditional RNN(E → H) + RNN(C → H); upper layers RNN(H → H); readout (H + E + C)×E + E; output
    E×V + V."""
    C = (2 if bidirectional else 1) * H
    total = 2 * V * E + (2 if bidirectional else 1) * rnn(E, H)
    total += C * dec_layers * H + dec_layers * H
    total += (H * A + C * A + A + A) if attention else 0
    total += rnn(E + C, H) if variant == "plain" else rnn(E, H) + rnn(C, H)
    total += (dec_layers - 1) * rnn(H, H)
    total += (H + E + C) * E + E + E * V + V
    return total


def test_parameter_counts_of_thesis_presets():
    V = 1004  # the synthetic task's 1,000 symbols + fairseq's 4 specials
    # Gu §3.3 RNNSearch/Enc-Dec (emb 150, hidden 300, GRU), written out:
    # 2·1004·150 (embeddings) + 2·gru(150, 300) (813,600) + 600·300 + 300 (init) + 300·300 + 600·300 + 300 + 300
    # (attention) + gru(750, 300) (946,800) + 1050·150 + 150 (readout) + 150·1004 + 1004 (output)
    copynet = 2 * 1004 * 150 + 813_600 + 180_300 + 270_600 + 946_800 + 157_650 + 151_604
    assert copynet == expected_params(V, 150, 300, 300) == 2_821_754
    assert n_params(build_model("rnnsearch_copynet_syn", vocab=V, device="meta")) == copynet
    assert n_params(build_model("encdec_copynet_syn", vocab=V, device="meta")) == copynet - 270_600
    V = 30_000
    for arch, kw in [
        ("rnnsearch_lcsts", dict(E=350, H=500, A=500)),
        ("rnnsearch_jrc", dict(E=512, H=1024, A=1024, variant="conditional")),
        ("rnnsearch_gu_wmt15", dict(E=512, H=1028, A=1028, variant="conditional")),
        ("rnnsearch_gu_wmt15_uni", dict(E=512, H=1028, A=1028, variant="conditional", bidirectional=False)),
        ("rnnsearch_uninmt", dict(E=512, H=512, A=512, rnn=lstm, dec_layers=2)),
        ("rnnsearch_maruf", dict(E=512, H=512, A=256, dec_layers=2)),
        ("rnnsearch_maruf_small", dict(E=256, H=256, A=128, dec_layers=2)),
    ]:
        assert n_params(build_model(arch, vocab=V, device="meta")) == expected_params(V, **kw), arch


def test_bench_arch_matches_the_bench_transformer_size():
    """recipes/bench ``rnnsearch`` vs ``transformer`` (3+3 d256 FFN 1024, shared) on the 8k joined vocabulary."""
    rnn = n_params(build_model("rnnsearch_bench", vocab=8000, device="meta"))
    tf = n_params(build_model("transformer", vocab=8000, device="meta", encoder_layers=3, decoder_layers=3,
                              encoder_embed_dim=256, decoder_embed_dim=256, encoder_ffn_embed_dim=1024,
                              decoder_ffn_embed_dim=1024, encoder_attention_heads=4, decoder_attention_heads=4,
                              share_all_embeddings=True))
    assert abs(rnn - tf) / tf < 0.03, (rnn, tf)


def test_training_step_reduces_the_loss():
    model = build_model("rnnsearch_tiny", dropout=0.1).train()
    src, lengths, prev = toy_batch(bsz=4, src_len=7, tgt_len=6)
    target = torch.cat([prev[:, 1:], torch.full((4, 1), 2)], 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        lprobs = model.get_normalized_probs(model(src, lengths, prev), log_probs=True)
        loss = torch.nn.functional.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


# ------------------------------------------------------------------------------------------ command lines
TRAIN_FLAGS = ["--criterion", "cross_entropy", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
               "--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints",
               "--disable-validation"]


def test_every_arch_trains_and_decodes_through_fairseq_cli(tiny_bin, tmp_path):
    """Every registered arch (thesis presets at tiny sizes, their structure kept): 2 updates, greedy decoding."""
    commands = []
    for arch in ARCHS:
        commands.append(("train", [str(tiny_bin), "--user-dir", str(USER_DIR), "--task", "translation_decoding",
                                   "--arch", arch, *TINY_SIZES, *TRAIN_FLAGS, "--max-update", "2",
                                   "--save-dir", str(tmp_path / arch)]))
        commands.append(("generate", [str(tiny_bin), "--user-dir", str(USER_DIR), "--task", "translation_decoding",
                                      "--decoding-algorithm", "greedy", "--path", str(tmp_path / arch / "checkpoint_last.pt"),
                                      "--cpu", "--max-len-b", "5", "--batch-size", "64",
                                      "--results-path", str(tmp_path / arch)]))
    fairseq_in_one_process(commands)
    n = n_lines(tiny_bin / "test.ids")
    for arch in ARCHS:
        state = torch.load(tmp_path / arch / "checkpoint_last.pt", weights_only=True)
        assert state["cfg"]["model"].arch == arch
        assert sorted(hypotheses((tmp_path / arch / "generate-test.txt").read_text())) == list(range(n)), arch


def test_generate_cli_every_decoding_algorithm(tiny_bin, nmt_ckpt, tmp_path):
    runs = {"beam1": ["--decoding-algorithm", "beam", "--beam", "1"],
            "beam": ["--decoding-algorithm", "beam", "--beam", "3"],
            "greedy": ["--decoding-algorithm", "greedy"],
            "shrinking_beam": ["--decoding-algorithm", "shrinking_beam", "--beam", "3", "--lenpen", "0.6",
                               "--nbest", "3"],
            "npd0": ["--decoding-algorithm", "npd", "--npd-samples", "3", "--npd-sigma0", "0"],
            "npd": ["--decoding-algorithm", "npd", "--npd-samples", "4", "--npd-sigma0", "1.0",
                    "--npd-rescore-batch", "5", "--seed", "3"]}
    fairseq_in_one_process([("generate", [str(tiny_bin), "--user-dir", str(USER_DIR), "--task",
                                          "translation_decoding", "--path", str(nmt_ckpt), "--cpu", "--max-len-b",
                                          "12", "--batch-size", "16", "--results-path", str(tmp_path / name), *flags])
                            for name, flags in runs.items()])
    out = {name: (tmp_path / name / "generate-test.txt").read_text() for name in runs}
    hyps = {name: hypotheses(text) for name, text in out.items()}
    n = n_lines(tiny_bin / "test.ids")
    for name, h in hyps.items():
        assert sorted(h) == list(range(n)), name
    assert hyps["greedy"] == hyps["beam1"] == hyps["npd0"]
    assert all(len(re.findall(rf"^H-{i}\t", out["shrinking_beam"], re.M)) == 3 for i in range(n))


def test_interactive_bad_input_gets_one_message_each(tiny_bin, nmt_ckpt):
    """A normal line, an empty line, unknown tokens, a line over the source limit: every line is answered,
    each problem is named once, nothing crashes."""
    line = (tiny_bin / ".." / "seg" / "test.es").resolve().read_text().splitlines()[0]
    words = line.split()
    assert len(words) > 40
    text = "\n".join([" ".join(words[:10]), "", " ".join(words[:5]) + " zzqx@1 qqzx@2", line]) + "\n"
    for algorithm in ("beam", "npd"):
        p = fairseq("interactive", tiny_bin, "--task", "translation_decoding", "--decoding-algorithm", algorithm,
                    "--npd-samples", "8", "--path", nmt_ckpt, "--cpu", "--beam", "2", "--max-len-b", "8",
                    "--max-source-positions", "30",
                    input_text=text)
        assert "Traceback" not in p.stderr
        assert sorted(hypotheses(p.stdout)) == [0, 1, 2, 3]
        warnings = [l for l in p.stderr.splitlines() if "fairseq_ext.tasks.translation_decoding" in l]
        assert len(warnings) == 3, warnings
        assert "input line 2 (id 1) is empty" in warnings[0]
        assert "input line 3 (id 2): 2 token(s) outside the source vocabulary" in warnings[1]
        assert "zzqx@1 qqzx@2" in warnings[1]
        assert re.search(r"input line 4 \(id 3\) has \d+ tokens .* source limit of 30 .* first 29 tokens", warnings[2])
        assert hypotheses(p.stdout)[1] == ""  # the empty line's translation is empty
        s3 = re.search(r"^S-3\t(.*)$", p.stdout, re.M).group(1)
        assert s3.split() == words[:29]

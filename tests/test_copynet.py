"""CopyNet (Gu 2019 §3.2; fairseq_ext/models/copynet.py, modules/copy_attention.py, criterions/copynet_cross_entropy.py,
tasks/copy_translation.py, tools/analysis/copy_heatmap.py): the mixture's math in-process, then fairseq-train /
generate / interactive on a tiny copy task whose test sentences hold words no dictionary has."""
import csv
import math
import random
import re
import sys
import types

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY

from harness import (BIN, USER_DIR, arch_args, build_model, copy_task, fairseq, fairseq_in_one_process, hypotheses,
                     incremental_reordered, make_dictionary, run, toy_batch)
from fairseq_ext.modules.copy_attention import copy_mixture, selective_read, source_copy_ids, source_to_target_map

ARCHS = sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__name__ == "CopyNetModel")
V, SLOTS = 60, 5


def build(arch="copynet_tiny", slots=SLOTS, seed=0, tgt_vocab=V, **kw):
    """A copynet model (eval mode) with ``slots`` copy slots, as task copy_translation builds it."""
    return build_model(arch, seed=seed, task=copy_task(V, slots, tgt_vocab), **kw)


def oov_batch():
    """Sources with OOV ids (>= V: 100 twice in row 0, 101, 102) and a repeated in-vocabulary word (7)."""
    src = torch.tensor([[1, 1, 7, 100, 9, 100, 2],
                        [7, 7, 101, 5, 102, 6, 2]])
    lengths = src.ne(1).sum(1)
    prev = torch.tensor([[2, 7, V, 9, V, 11],  # V = row 0's first slot (OOV 100)
                         [2, 7, V + 1, 7, 8, V]])
    return src, lengths, prev


def test_archs_registered():
    assert ARCHS == ["copynet", "copynet_bench", "copynet_lcsts", "copynet_syn", "copynet_tiny"]


def test_thesis_sizes_mirror_rnnsearch():
    for copy_arch, base in [("copynet_syn", "rnnsearch_copynet_syn"), ("copynet_lcsts", "rnnsearch_lcsts"),
                            ("copynet_bench", "rnnsearch_bench")]:
        assert vars(arch_args(copy_arch)) == vars(arch_args(base)), copy_arch


# ------------------------------------------------------------------------------------------ extended vocabulary
def test_source_copy_ids_slots_in_order_of_first_occurrence():
    src_to_tgt = torch.arange(V)
    src_to_tgt[20] = -1  # a source word the target vocabulary lacks: copyable into a slot too
    src = torch.tensor([[1, 1, 100, 7, 20, 100, 101, 2],
                        [102, 103, 104, 105, 7, 106, 107, 2]])
    ids, mask = source_copy_ids(src, src_to_tgt, num_slots=5, tgt_vocab_size=V, src_pad=1, src_eos=2, tgt_pad=1,
                                tgt_unk=3)
    assert ids[0].tolist() == [1, 1, V, 7, V + 1, V, V + 2, 2]
    assert ids[1].tolist() == [V, V + 1, V + 2, V + 3, 7, V + 4, 3, 2]  # the 6th distinct OOV: no slot, <unk>
    assert mask[0].tolist() == [False, False, True, True, True, True, True, False]  # no pads, no </s>


def test_source_to_target_map_with_separate_dictionaries():
    src, tgt = make_dictionary(10), make_dictionary(8)
    src.add_symbol("only_src")
    table = source_to_target_map(src, tgt)
    assert table[:8].tolist() == list(range(8)) and table[8:].tolist() == [-1, -1, -1]


# ------------------------------------------------------------------------------------------ the mixture
def modes(model, src, lengths, prev):
    """(log p(y, g) (B, T, V), log p(x_j, c) (B, T, S), encoder_out, log p(y) (B, T, V + n))."""
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        feats, _ = model.decoder(prev, encoder_out=enc, features_only=True)
        out = model.decoder(prev, encoder_out=enc)[0]
    return feats[..., :V], feats[..., V:], enc, out


def test_mixture_sums_to_one_with_generate_probability_zero_for_source_only_words():
    model = build()
    src, lengths, prev = oov_batch()
    gen, copy, enc, out = modes(model, src, lengths, prev)
    assert out.shape == (2, 6, V + SLOTS)
    assert torch.allclose(out.exp().sum(-1), torch.ones(2, 6), atol=1e-5)
    assert torch.allclose(gen.exp().sum(-1) + copy.exp().sum(-1), torch.ones(2, 6), atol=1e-5)  # one Z
    ids = enc["src_copy_ids"][0]
    # row 0: slot V holds OOV 100 (positions 3 and 5), no generate mass; its probability = their copy mass
    p_slot = out[0, :, V].exp()
    assert torch.allclose(p_slot, copy[0, :, 3].exp() + copy[0, :, 5].exp(), atol=1e-6)
    assert torch.equal(ids[0, [3, 5]], torch.tensor([V, V]))
    assert math.isinf(float(out[0, 0, V + 1])) and float(out[0, 0, V + 1]) < 0  # unused slot: probability 0
    # row 1 has two OOVs (101, 102): slots V, V+1 used, the others have probability 0
    assert torch.isfinite(out[1, :, V:V + 2]).all() and torch.isinf(out[1, :, V + 2:]).all()


def test_repeated_source_words_receive_summed_copy_mass():
    model = build()
    src, lengths, prev = oov_batch()
    gen, copy, _, out = modes(model, src, lengths, prev)
    # row 1 holds word 7 at positions 0 and 1: p(7) = p(7, g) + p(x_0, c) + p(x_1, c)
    expected = gen[1, :, 7].exp() + copy[1, :, 0].exp() + copy[1, :, 1].exp()
    assert torch.allclose(out[1, :, 7].exp(), expected, atol=1e-6)
    # a word not in the source gets its generate probability only, exactly (no exp/log round trip)
    assert torch.equal(out[1, :, 30], gen[1, :, 30])


def test_copy_mixture_is_stable_and_its_gradients_are_finite():
    g = torch.Generator().manual_seed(0)
    gen = (torch.randn(2, 3, V, generator=g) * 60).requires_grad_()
    cop = (torch.randn(2, 3, 4, generator=g) * 60)
    cop[:, :, -1] = float("-inf")  # a masked position
    cop.requires_grad_()
    scores = torch.cat([gen, cop], -1)
    lp = torch.log_softmax(scores, -1)
    ids = torch.tensor([[5, 5, V, 2], [V + 1, 9, 9, 2]])
    out = copy_mixture(lp[..., :V], lp[..., V:], ids, num_slots=3)
    assert torch.allclose(torch.logsumexp(out, -1), torch.zeros(2, 3), atol=1e-4)
    target = torch.tensor([[5, V, 7], [V + 1, 9, 3]])
    loss = -out.gather(-1, target.unsqueeze(-1)).sum()
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(gen.grad).all() and torch.isfinite(cop.grad).all()


def test_reduces_to_rnnsearch_when_copy_scores_are_minus_infinity():
    """Same weights, copy scores −∞: the selective read is 0 and the distribution over V is rnnsearch's softmax
    (the copy slots get probability 0)."""
    from harness import build_model

    for variant in ("plain", "conditional"):
        copy = build(decoder_variant=variant)
        base = build_model("rnnsearch_tiny", decoder_variant=variant, dropout=0.0)
        E, C = 16, copy.encoder.output_dim
        state = base.state_dict()
        own = copy.state_dict()
        for k, v in state.items():
            if own[k].shape == v.shape:
                own[k] = v
            else:  # the first cell's input weights: [ε; ζ; c] (plain) or [ε; ζ] (conditional) vs [ε; c] / [ε]
                assert k == "decoder.transition.cell.weight_ih", k
                own[k] = torch.cat([v[:, :E], torch.randn(v.size(0), C), v[:, E:]], 1)
        copy.load_state_dict(own)
        copy.decoder.copy_scores = lambda state, enc: torch.full(enc["src_copy_mask"][0].shape, float("-inf"))
        src, lengths, prev = toy_batch(bsz=3, src_len=7, tgt_len=6)
        with torch.no_grad():
            ours = copy.get_normalized_probs(copy(src, lengths, prev), log_probs=True)
            theirs = base.get_normalized_probs(base(src, lengths, prev), log_probs=True)
        assert torch.allclose(ours[..., :V], theirs, atol=1e-5), variant
        assert torch.isinf(ours[..., V:]).all()


# ------------------------------------------------------------------------------------------ selective read
def test_selective_read_is_zero_when_the_previous_word_is_not_in_the_source():
    states = torch.randn(2, 4, 3)
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.0], [0.4, 0.1, 0.1, 0.2]])
    ids = torch.tensor([[5, 7, 5, 2], [V, 8, V, 2]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, False]])
    zeta = selective_read(probs, ids, mask, torch.tensor([9, 3]), states)
    assert torch.equal(zeta, torch.zeros(2, 3))
    zeta = selective_read(probs, ids, mask, torch.tensor([5, V]), states)
    assert torch.allclose(zeta[0], (0.1 * states[0, 0] + 0.3 * states[0, 2]) / 0.4)  # ρ renormalised over x_j = y
    assert torch.allclose(zeta[1], (0.4 * states[1, 0] + 0.1 * states[1, 2]) / 0.5)


def test_selective_read_in_the_decoder():
    """ζ(y_{t−1}) = 0 at step 1 and when y_{t−1} is not in the source; otherwise the previous step's copy
    probabilities of the positions holding y_{t−1}, renormalised."""
    model = build()
    src, lengths, prev = oov_batch()
    _, copy, enc, _ = modes(model, src, lengths, prev)
    seen = []
    original = model.decoder.step_input

    def spy(embedded, state, encoder_out, step):
        x = original(embedded, state, encoder_out, step)
        seen.append(x[:, embedded.size(1):])
        return x

    model.decoder.step_input = spy
    with torch.no_grad():
        model.decoder(prev, encoder_out=enc)
    zeta = torch.stack(seen, 1)  # (B, T, C): step t reads y_{t-1} = prev[:, t-1] with step t-1's copy probs
    h = enc["encoder_out"][0].transpose(0, 1)
    zero = torch.zeros(h.size(2))
    assert torch.equal(zeta[0, 0], zero) and torch.equal(zeta[1, 0], zero)  # step 1: y_0 = </s>, nothing copied yet
    assert torch.allclose(zeta[0, 1], h[0, 2], atol=1e-6)  # y_1 = 7: position 2 only
    w = copy[0, 1].exp()[[3, 5]]  # y_2 = slot V: OOV 100 at positions 3 and 5, weighted by step 2's copy probs
    assert torch.allclose(zeta[0, 2], (w[0] * h[0, 3] + w[1] * h[0, 5]) / w.sum(), atol=1e-5)
    assert torch.allclose(zeta[0, 3], h[0, 4], atol=1e-6)  # y_3 = 9: position 4
    assert torch.equal(zeta[0, 5], zero)  # y_5 = 11 is not in row 0's source
    assert torch.equal(zeta[1, 4], zero)  # y_4 = 8 is not in row 1's source
    w = copy[1, 0].exp()[[0, 1]]  # row 1, y_1 = 7 at positions 0 and 1
    assert torch.allclose(zeta[1, 1], (w[0] * h[1, 0] + w[1] * h[1, 1]) / w.sum(), atol=1e-5)


# ------------------------------------------------------------------------------------------ incremental decoding
@pytest.mark.parametrize("order", [None, [1, 0], [1, 1]])
def test_incremental_decoding_equals_the_full_pass_with_beam_reordering(order):
    """The copy probabilities of the last step live in the incremental state and follow the beam."""
    model = build(decoder_variant="conditional")
    src, lengths, prev = oov_batch()
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        inc, idx, prev = incremental_reordered(model, enc, prev, order)
        full = model(src.index_select(0, idx), lengths.index_select(0, idx), prev)[0]
    assert torch.allclose(inc, full, atol=1e-5)


# ------------------------------------------------------------------------------------------ criterion
def test_marginal_likelihood_criterion():
    from fairseq_ext.criterions.copynet_cross_entropy import CopyNetCrossEntropyCriterion

    model = build()
    src, lengths, prev = oov_batch()
    target = torch.cat([prev[:, 1:], torch.full((2, 1), 2)], 1)
    target[1, -1] = 1  # a pad
    task = types.SimpleNamespace(target_dictionary=make_dictionary(V))
    crit = CopyNetCrossEntropyCriterion(task)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
              "target": target, "ntokens": 11}
    gen, copy, enc, _ = modes(model, src, lengths, prev)
    ids = enc["src_copy_ids"][0]
    expected = 0.0
    for b in range(2):
        for t in range(6):
            y = int(target[b, t])
            if y == 1:
                continue
            p = (gen[b, t, y].exp() if y < V else 0.0) + copy[b, t][ids[b].eq(y)].exp().sum()
            expected -= math.log(float(p))
    loss, size, log = crit(model, sample)
    assert size == 11 and log["copy_targets"] == 4
    assert abs(loss.item() - expected) < 1e-3
    smoothed = CopyNetCrossEntropyCriterion(task, label_smoothing=0.1)(model, sample)[0]
    assert torch.isfinite(smoothed) and smoothed.item() != loss.item()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = crit(model, sample)[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]


# ------------------------------------------------------------------------------------------ command lines
def write_copy_data(folder, seed=1):
    """An identity (copy) task: words w0..w29 and unique words oovN that no dictionary keeps (each occurs
    once per side; --thresholdsrc 3)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    for split, size in [("train", 600), ("valid", 16), ("test", 12)]:
        src, tgt = [], []
        for _ in range(size):
            words = [f"w{rng.randrange(30)}" for _ in range(rng.randint(3, 8))]
            for _ in range(rng.randint(0, 2) if split == "train" else 1 + rng.randint(0, 1)):
                n += 1
                words.insert(rng.randrange(len(words) + 1), f"oov{n}")
            src.append(" ".join(words))
            tgt.append(" ".join(words))
        (folder / f"{split}.src").write_text("\n".join(src) + "\n")
        (folder / f"{split}.tgt").write_text("\n".join(tgt) + "\n")
    return folder


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("copynet")
    raw = write_copy_data(root / "raw")
    run([BIN / "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", raw / "train",
         "--validpref", raw / "valid", "--testpref", raw / "test", "--destdir", root / "bin", "--joined-dictionary",
         "--thresholdsrc", "3", "--workers", "1"])
    return root / "bin", raw


TINY = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--decoder-out-embed-dim", "16",
        "--encoder-hidden-size", "16", "--decoder-hidden-size", "16", "--attention-dim", "16"]
TRAIN = ["--task", "copy_translation", "--criterion", "copynet_cross_entropy", "--optimizer", "adam",
         "--max-tokens", "1000", "--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple",
         "--no-epoch-checkpoints", "--disable-validation"]


def test_every_arch_trains_and_decodes_through_fairseq_cli(copy_data, tmp_path):
    data, raw = copy_data
    common = [str(data), "--user-dir", str(USER_DIR), "--copy-raw-dir", str(raw)]
    commands = []
    for arch in ARCHS:
        commands.append(("train", common + ["--arch", arch, *TINY, *TRAIN, "--lr", "1e-3", "--max-update", "2",
                                            "--save-dir", str(tmp_path / arch)]))
        commands.append(("generate", common + ["--task", "copy_translation", "--decoding-algorithm", "greedy",
                                               "--path", str(tmp_path / arch / "checkpoint_last.pt"), "--cpu",
                                               "--max-len-b", "5", "--batch-size", "64",
                                               "--results-path", str(tmp_path / arch)]))
    fairseq_in_one_process(commands)
    for arch in ARCHS:
        state = torch.load(tmp_path / arch / "checkpoint_last.pt", weights_only=True)
        assert state["cfg"]["model"].arch == arch
        assert sorted(hypotheses((tmp_path / arch / "generate-test.txt").read_text())) == list(range(12)), arch


@pytest.fixture(scope="module")
def copy_ckpt(copy_data, tmp_path_factory):
    data, raw = copy_data
    save = tmp_path_factory.mktemp("copynet_ckpt")
    fairseq("train", data, "--copy-raw-dir", raw, "--arch", "copynet_tiny", "--share-all-embeddings", *TRAIN,
            "--lr", "1e-2", "--max-update", "300", "--save-dir", save)
    return save / "checkpoint_last.pt"


def source_oovs(text):
    return {i: [w for w in s.split() if w.startswith("oov")]
            for i, s in ((int(m.group(1)), m.group(2)) for m in re.finditer(r"^S-(\d+)\t(.*)$", text, re.M))}


def test_generate_prints_copied_oovs_as_the_source_words_with_every_decoding_algorithm(copy_data, copy_ckpt,
                                                                                         tmp_path):
    data, raw = copy_data
    runs = {"beam": ["--beam", "3"], "greedy": ["--decoding-algorithm", "greedy"],
            "shrinking_beam": ["--decoding-algorithm", "shrinking_beam", "--beam", "3"],
            "npd": ["--decoding-algorithm", "npd", "--npd-samples", "3", "--npd-sigma0", "0.3"]}
    fairseq_in_one_process([("generate", [str(data), "--user-dir", str(USER_DIR), "--task", "copy_translation",
                                  "--copy-raw-dir", str(raw), "--path", str(copy_ckpt), "--cpu", "--max-len-b", "20",
                                  "--batch-size", "8", "--results-path", str(tmp_path / name), *flags])
                    for name, flags in runs.items()])
    for name in runs:
        text = (tmp_path / name / "generate-test.txt").read_text()
        hyps, oovs = hypotheses(text), source_oovs(text)
        assert sorted(hyps) == list(range(12)) and all(oovs.values()), name  # the S- lines show the OOV words
        assert "<unk>" not in text and "<copy:" not in text, name
        targets = dict(re.findall(r"^T-(\d+)\t(.*)$", text, re.M))
        assert all(targets[str(i)] == re.search(rf"^S-{i}\t(.*)$", text, re.M).group(1) for i in hyps)
        copied = [w for i, h in hyps.items() for w in h.split() if w.startswith("oov")]
        assert len(copied) >= 6, (name, hyps)  # the trained model copies OOVs ...
        assert all(w in oovs[i] for i, h in hyps.items() for w in h.split() if w.startswith("oov"))  # ... its own
        exact = sum(hyps[i] == targets[str(i)] for i in hyps)
        assert exact >= 6, (name, exact)


def test_interactive_copies_oovs_and_answers_bad_input_with_one_message_each(copy_data, copy_ckpt):
    data, _ = copy_data
    long_line = " ".join(f"w{i % 30}" for i in range(40))
    text = "\n".join(["w1 w2 zork w3", "", "w5 qqzx@1 w6 fred", long_line]) + "\n"
    for algorithm in ("beam", "greedy"):
        p = fairseq("interactive", data, "--task", "copy_translation", "--decoding-algorithm", algorithm,
                    "--path", copy_ckpt, "--cpu", "--beam", "2", "--max-len-b", "20", "--max-source-positions", "30",
                    input_text=text)
        assert "Traceback" not in p.stderr
        hyps = hypotheses(p.stdout)
        assert sorted(hyps) == [0, 1, 2, 3]
        warnings = [line for line in p.stderr.splitlines() if "fairseq_ext.tasks.copy_translation" in line]
        assert len(warnings) == 4, warnings
        assert "input line 1 (id 0): 1 token(s) outside the source vocabulary" in warnings[0] and "zork" in warnings[0]
        assert "input line 2 (id 1) is empty" in warnings[1]
        assert "input line 3 (id 2): 2 token(s) outside the source vocabulary" in warnings[2]
        assert "qqzx@1 fred" in warnings[2]
        assert re.search(r"input line 4 \(id 3\) has \d+ tokens .* source limit of 30 .* first 29 tokens", warnings[3])
        assert re.search(r"^S-0\tw1 w2 zork w3$", p.stdout, re.M)  # the S- line keeps the OOV
        assert hyps[1] == ""
        assert "<unk>" not in p.stdout and "<copy:" not in p.stdout
        copied = [w for w in hyps[0].split() + hyps[2].split() if not re.fullmatch(r"w\d+", w)]
        assert copied and set(copied) <= {"zork", "qqzx@1", "fred"}, hyps  # OOVs are copied as the words typed


def test_too_many_oovs_for_the_copy_slots_get_one_message(copy_data, copy_ckpt):
    data, _ = copy_data
    p = fairseq("interactive", data, "--task", "copy_translation", "--path", copy_ckpt, "--cpu", "--beam", "2",
                "--max-len-b", "10", "--max-source-oovs", "2", input_text="w1 aa bb cc w2\n")
    assert "Traceback" not in p.stderr and sorted(hypotheses(p.stdout)) == [0]
    assert "3 distinct words outside the target vocabulary, more than --max-source-oovs 2" in p.stderr


def test_missing_raw_text_is_a_warning_and_oovs_stay_unk(copy_data, copy_ckpt, tmp_path):
    data, _ = copy_data
    p = fairseq("generate", data, "--task", "copy_translation", "--copy-raw-dir", tmp_path, "--path", copy_ckpt,
                "--cpu", "--beam", "2", "--max-len-b", "20")
    assert "no raw text" in p.stderr and sorted(hypotheses(p.stdout)) == list(range(12))


def test_mismatched_raw_text_is_refused(copy_data, copy_ckpt, tmp_path):
    data, raw = copy_data
    lines = (raw / "test.src").read_text().splitlines()
    (tmp_path / "test.src").write_text("\n".join(["extra " + lines[0]] + lines[1:]) + "\n")
    (tmp_path / "test.tgt").write_text((raw / "test.tgt").read_text())
    p = fairseq("generate", data, "--task", "copy_translation", "--copy-raw-dir", tmp_path, "--path", copy_ckpt,
                "--cpu", check=False)
    assert p.returncode != 0 and "test.src:1:" in p.stderr and "binarized from" in p.stderr


def test_heatmap_tool_writes_png_and_tsv(copy_data, copy_ckpt, tmp_path):
    data, raw = copy_data
    out = tmp_path / "fig.png"
    run([sys.executable, "-m", "fairseq_ext.tools.analysis.copy_heatmap", "--path", copy_ckpt, "--data", data,
         "--copy-raw-dir", raw, "--index", "0", "--out", out])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(open(tmp_path / "fig.tsv"), delimiter="\t"))
    assert rows and rows[-1]["token"] == "</s>"
    for r in rows:
        assert abs(float(r["gen_mass"]) + float(r["copy_mass"]) - 1) < 1e-4
        assert 0 <= float(r["p_gen"]) + float(r["p_copy"]) <= 1 + 1e-5
        if r["token"].startswith("oov"):
            assert float(r["p_gen"]) == 0.0 and r["mode"] == "copy"
    p = run([sys.executable, "-m", "fairseq_ext.tools.analysis.copy_heatmap", "--path", tmp_path / "none.pt", "--data", data,
             "--out", out], check=False)
    assert p.returncode == 2 and p.stderr.startswith("error: checkpoint not found")

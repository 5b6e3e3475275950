"""Nguyen ch. 4: data augmentation by concatenation (``concat_translation``, CONSEC / RAND, position
shifting, mask / sep-batch / reset-pos ablations, concatenated-dev segment-aware decoding)."""
import json
import re
import sys

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, LanguagePairDataset
from fairseq.modules import SinusoidalPositionalEmbedding
from fairseq.sequence_generator import SequenceGenerator

import fairseq_ext  # noqa: F401  (registers the tasks)
from fairseq_ext.data.concat_dataset import (
    ConcatPairDataset, build_pairs, consec_pairs, length_sorted_pairs, rand_pairs, segment_attention_mask,
    segment_ids, sim_shifts, token_positions, uniform_shifts)
from fairseq_ext.generators.segment_aware import segment_aware
from fairseq_ext.modules.concat_hooks import ConcatRuntime, install_concat_hooks
from harness import (ROOT, TINY_TRANSFORMER, USER_DIR, build_model, fairseq, generate, hypotheses, n_lines,
                     run, train)

INF = float("-inf")


# ----------------------------------------------------------------------------- pair builders
def test_consec_rand_and_length_sorted_pairs():
    assert consec_pairs(4).tolist() == [[0, 1], [1, 2], [2, 3]]
    assert consec_pairs(1).shape == (0, 2)
    p = rand_pairs(50, np.random.default_rng(0))
    perm = np.concatenate([p[:, 0], p[-1:, 1]])
    assert sorted(perm.tolist()) == list(range(50)) and (p[1:, 0] == p[:-1, 1]).all()  # CONSEC of a permutation
    assert (rand_pairs(50, np.random.default_rng(0)) == p).all()  # seeded
    src = np.array([5, 1, 9, 3, 7, 2])
    tgt = np.array([1, 1, 1, 1, 1, 1])
    s = length_sorted_pairs(src, tgt, np.random.default_rng(0))
    assert s.tolist() == [[1, 5], [5, 3], [3, 0], [0, 4], [4, 2]]  # neighbours after sorting by length
    assert build_pairs("none", src, tgt, np.random.default_rng(0)).shape == (0, 2)
    with pytest.raises(ValueError, match="unknown concatenation mode"):
        build_pairs("bogus", src, tgt, np.random.default_rng(0))


def _toy_dataset(pairs):
    """A LanguagePairDataset over whitespace sentences (each ends with </s>, as binarized data)."""
    d = Dictionary()
    for s, t in pairs:
        for w in (s + " " + t).split():
            d.add_symbol(w)
    enc = [d.encode_line(s, add_if_not_exist=False, append_eos=True).long() for s, _ in pairs]
    dec = [d.encode_line(t, add_if_not_exist=False, append_eos=True).long() for _, t in pairs]
    ds = LanguagePairDataset(enc, np.array([len(x) for x in enc]), d, dec,
                             np.array([len(x) for x in dec]), d, shuffle=False)
    return ds, d


def _string(d, t):
    return " ".join(d[i] for i in t.tolist() if i != d.pad())


def test_concatenation_reproduces_the_thesis_example():
    """[T §4.2.1] source ``x1 <EOS> x2 <EOS>``, decoder input ``<BOS> y1 <BOS> y2``, output ``y1 <EOS> y2 <EOS>``
    (fairseq's BOS is </s>)."""
    base, d = _toy_dataset([("And I think back .", "Và tôi nghĩ lại ."),
                            ("I think back to my father .", "Tôi nghĩ lại về cha tôi .")])
    ds = ConcatPairDataset(base, lambda ep: consec_pairs(len(base)), keep_original=False)
    assert len(ds) == 1
    b = ds.collater([ds[0]])
    assert _string(d, b["net_input"]["src_tokens"][0]) == "And I think back . </s> I think back to my father . </s>"
    assert _string(d, b["net_input"]["prev_output_tokens"][0]) == "</s> Và tôi nghĩ lại . </s> Tôi nghĩ lại về cha tôi ."
    assert _string(d, b["target"][0]) == "Và tôi nghĩ lại . </s> Tôi nghĩ lại về cha tôi . </s>"


def test_dataset_is_orig_plus_new_with_sizes_and_separate_batches():
    sents = [(" ".join(f"s{i}" for _ in range(i + 1)), " ".join(f"t{i}" for _ in range(2 * i + 1))) for i in range(6)]
    base, d = _toy_dataset(sents)
    ds = ConcatPairDataset(base, lambda ep: consec_pairs(6), keep_original=True, sep_batch=True)
    assert len(ds) == 6 + 5
    assert ds.src_sizes.tolist() == [2, 3, 4, 5, 6, 7] + [5, 7, 9, 11, 13]
    assert ds.tgt_sizes.tolist() == [2, 4, 6, 8, 10, 12] + [6, 10, 14, 18, 22]
    assert ds[3]["source"].tolist() == base[3]["source"].tolist()
    assert ds[6]["source"].tolist() == base[0]["source"].tolist() + base[1]["source"].tolist()
    batches = ds.batch_by_size(np.arange(len(ds)), max_tokens=40)
    assert sum(len(b) for b in batches) == len(ds)
    assert all((np.asarray(b) < 6).all() or (np.asarray(b) >= 6).all() for b in batches)  # never mixed
    # without sep-batch, a batch may mix original and concatenated examples
    mixed = ConcatPairDataset(base, lambda ep: consec_pairs(6)).batch_by_size(np.arange(11), max_tokens=1000)
    assert len(mixed) == 1


def test_shift_draws():
    rng = np.random.default_rng(0)
    src = np.array([3, 5, 8, 13])
    tgt = np.array([4, 6, 9, 14])
    s, t = sim_shifts(30000, src, tgt, 1 / 3, rng)
    hit = s > 0
    assert abs(hit.mean() - 1 / 3) < 0.02
    assert set(s[hit]) <= set(src) and set(t[hit]) <= set(tgt) and (t[~hit] == 0).all()
    assert all(tgt[list(src).index(a)] == b for a, b in zip(s[hit][:200], t[hit][:200]))  # same pair j
    s, t = uniform_shifts(30000, 0.1, 100, rng)
    assert abs((s > 0).mean() - 0.1 * 100 / 101) < 0.01
    assert s.min() == 0 and s.max() == 100 and t.max() == 100
    assert not (s == t)[(s > 0)].all()  # independent


def test_collater_carries_shifts_in_batch_order():
    base, d = _toy_dataset([("a b c", "x"), ("a", "x y z w"), ("a b", "x y")])
    shifts = (np.array([10, 20, 30, 40, 50]), np.array([1, 2, 3, 4, 5]))
    ds = ConcatPairDataset(base, lambda ep: consec_pairs(3), shifts_fn=lambda ep, n: shifts)
    b = ds.collater([ds[i] for i in range(5)])  # the collater reorders by source length
    ids = b["id"].tolist()
    assert b["concat_shift"]["src"].tolist() == [10 * (i + 1) for i in ids]
    assert b["concat_shift"]["tgt"].tolist() == [i + 1 for i in ids]


# ----------------------------------------------------------------------------- token helpers
PAD, EOS = 1, 2


def test_segment_ids_and_positions():
    # left-padded source "x x </s> x x x </s>" and a one-segment row
    src = torch.tensor([[PAD, 5, 6, EOS, 7, 8, 9, EOS],
                        [PAD, PAD, PAD, PAD, PAD, 5, 6, EOS]])
    assert segment_ids(src, PAD, EOS, "source").tolist() == [[-1, 0, 0, 0, 1, 1, 1, 1], [-1] * 5 + [0, 0, 0]]
    assert token_positions(src, PAD, EOS, "source").tolist() == [[-1, 0, 1, 2, 3, 4, 5, 6], [-1] * 5 + [0, 1, 2]]
    assert token_positions(src, PAD, EOS, "source", reset=True).tolist() == \
        [[-1, 0, 1, 2, 0, 1, 2, 3], [-1] * 5 + [0, 1, 2]]
    shift = torch.tensor([10, 3])
    assert token_positions(src, PAD, EOS, "source", shift=shift).tolist() == \
        [[-1, 10, 11, 12, 13, 14, 15, 16], [-1] * 5 + [3, 4, 5]]
    # right-padded decoder input "</s> y y </s> y y"
    prev = torch.tensor([[EOS, 5, 6, EOS, 7, 8], [EOS, 5, PAD, PAD, PAD, PAD]])
    assert segment_ids(prev, PAD, EOS, "target_input").tolist() == [[0, 0, 0, 1, 1, 1], [0, 0, -1, -1, -1, -1]]
    assert token_positions(prev, PAD, EOS, "target_input").tolist() == [[0, 1, 2, 3, 4, 5], [0, 1, -1, -1, -1, -1]]
    assert token_positions(prev, PAD, EOS, "target_input", reset=True).tolist() == \
        [[0, 1, 2, 0, 1, 2], [0, 1, -1, -1, -1, -1]]
    assert token_positions(prev, PAD, EOS, "target_input", reset=True, shift=torch.tensor([4, 0])).tolist() == \
        [[4, 5, 6, 4, 5, 6], [0, 1, -1, -1, -1, -1]]


def test_segment_attention_masks():
    src = torch.tensor([[5, EOS, 6, 7, EOS]])
    prev = torch.tensor([[EOS, 8, EOS, 9, PAD]])
    qs, ks = segment_ids(prev, PAD, EOS, "target_input"), segment_ids(src, PAD, EOS, "source")
    enc = segment_attention_mask(ks, ks, num_heads=2)
    assert enc.shape == (2, 5, 5) and torch.equal(enc[0], enc[1])
    blocked = enc[0].isinf()
    assert blocked.tolist() == [[0, 0, 1, 1, 1], [0, 0, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0]]
    causal = torch.triu(torch.full((5, 5), INF), 1)
    dec = (segment_attention_mask(qs, qs, 1)[0] + causal).isinf()
    assert (~dec).int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0],
                                     [1, 1, 1, 1, 1]]  # block-diagonal and causal; the pad row is free
    cross = ~segment_attention_mask(qs, ks, 1)[0].isinf()
    assert cross.int().tolist() == [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 1], [0, 0, 1, 1, 1],
                                    [1, 1, 1, 1, 1]]  # target segment k -> source segment k


# ----------------------------------------------------------------------------- model hooks
V = 40
SMALL = dict(encoder_layers=2, decoder_layers=2, encoder_embed_dim=16, decoder_embed_dim=16,
             encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
             decoder_attention_heads=2, dropout=0.0)


def _hooked(reset_pos, attn_mask, **kw):
    m = build_model("transformer", vocab=V, seed=0, **dict(SMALL, **kw))
    rt = ConcatRuntime(PAD, EOS, reset_pos=reset_pos, attn_mask=attn_mask)
    install_concat_hooks(m, rt)
    return m, rt


def _logits(m, src, prev):
    src = torch.as_tensor(src).view(1, -1)
    return m(src, src.ne(PAD).sum(1), torch.as_tensor(prev).view(1, -1))[0][0]


X1, X2, Y1, Y2 = [5, 6, 7], [8, 9, 10, 11], [12, 13], [14, 15, 16]


def test_mask_and_reset_pos_make_segments_independent():
    """With masks + reset-pos, each segment of a concatenated example is computed exactly as if it
    were translated alone (encoder self, decoder self and cross attention all blocked)."""
    m, _ = _hooked(reset_pos=True, attn_mask=True)
    src = X1 + [EOS] + X2 + [EOS]
    prev = [EOS] + Y1 + [EOS] + Y2
    joint = _logits(m, src, prev)
    first = _logits(m, X1 + [EOS], [EOS] + Y1)
    second = _logits(m, X2 + [EOS], [EOS] + Y2)
    torch.testing.assert_close(joint[:len(Y1) + 1], first, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(joint[len(Y1) + 1:], second, rtol=1e-5, atol=1e-5)
    # in a padded batch too (left-padded source, right-padded target)
    bsrc = torch.tensor([src, [PAD] * 5 + X1 + [EOS]])
    bprev = torch.tensor([prev, [EOS] + Y1 + [PAD] * 4])
    out = m(bsrc, bsrc.ne(PAD).sum(1), bprev)[0]
    torch.testing.assert_close(out[0], joint, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1, :len(Y1) + 1], first, rtol=1e-5, atol=1e-5)


def test_without_ablations_segments_see_each_other_and_positions_continue():
    plain = build_model("transformer", vocab=V, seed=0, **SMALL)
    m, _ = _hooked(reset_pos=False, attn_mask=False)
    src, prev = X1 + [EOS] + X2 + [EOS], [EOS] + Y1 + [EOS] + Y2
    joint = _logits(m, src, prev)
    torch.testing.assert_close(joint, _logits(plain, src, prev))  # hooks change nothing by default
    assert not torch.allclose(joint[len(Y1) + 1:], _logits(m, X2 + [EOS], [EOS] + Y2), atol=1e-3)
    # mask only: the first segment is independent, the second keeps its continued positions
    mm, _ = _hooked(reset_pos=False, attn_mask=True)
    j2 = _logits(mm, src, prev)
    torch.testing.assert_close(j2[:len(Y1) + 1], _logits(mm, X1 + [EOS], [EOS] + Y1), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(j2[len(Y1) + 1:], _logits(mm, X2 + [EOS], [EOS] + Y2), atol=1e-3)


def test_position_shift_offsets_the_positional_embeddings():
    m, rt = _hooked(reset_pos=False, attn_mask=False)
    src = torch.tensor([[PAD, 5, 6, EOS], [5, 6, 7, EOS]])
    prev = torch.tensor([[EOS, 8, 9], [EOS, 8, PAD]])
    ep_src, ep_tgt = m.encoder.embed_positions, m.decoder.embed_positions
    assert isinstance(ep_src, SinusoidalPositionalEmbedding)
    unshifted = ep_src(src)
    rt.shifts = {"src": torch.tensor([7, 0]), "tgt": torch.tensor([0, 100])}
    try:
        shifted = ep_src(src)
        shifted_t = ep_tgt(prev)
    finally:
        rt.shifts = None
    table = SinusoidalPositionalEmbedding.get_embedding(300, 16, PAD)
    p = PAD + 1  # fairseq's first position index
    torch.testing.assert_close(shifted[0, 1:], table[p + 7:p + 10])
    torch.testing.assert_close(shifted[1], unshifted[1])
    assert shifted[0, 0].abs().sum() == 0  # padding stays zero
    torch.testing.assert_close(shifted_t[1, :2], table[p + 100:p + 102])
    torch.testing.assert_close(ep_src(src), unshifted)  # no shifts outside train/valid steps


# ----------------------------------------------------------------------------- segment-aware decoding
def _eos_model(eos_bias=30.0, bos_bias=-30.0):
    m = build_model("transformer_twt", vocab=V, seed=0, output_bias=True, **SMALL)
    with torch.no_grad():
        m.decoder.output_bias[EOS] = eos_bias
        m.decoder.output_bias[0] = bos_bias
    return m


def _gen(cls, m, srcs, **kw):
    from harness import make_dictionary
    d = make_dictionary(V)
    g = cls([m], d, beam_size=2, max_len_b=12, **kw)
    width = max(len(s) for s in srcs)
    src = torch.tensor([[PAD] * (width - len(s)) + s for s in srcs])
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(PAD).sum(1)}}
    return [h[0] for h in g.generate([m], sample)]


def test_segment_aware_decoding_ends_at_the_kth_eos():
    m = _eos_model()
    srcs = [X1 + [EOS], X1 + [EOS] + X2 + [EOS], [5, EOS, 6, EOS, 7, EOS]]
    # the model ends every sentence after one word (fairseq's --min-len 1 forbids an empty one)
    assert [len(h["tokens"]) for h in _gen(SequenceGenerator, m, srcs)] == [2, 2, 2]
    hyps = _gen(segment_aware(SequenceGenerator), m, srcs)
    for h, k in zip(hyps, (1, 2, 3)):  # "y1 </s> y2 </s> ...": k one-word segments
        t = h["tokens"].tolist()
        assert len(t) == 2 * k and t[1::2] == [EOS] * k and min(t[0::2]) >= 4, t
        assert len(h["positional_scores"]) == len(t) and h["positional_scores"].max() > -100


def test_segment_aware_decoding_equals_plain_beam_search_on_single_sentences():
    m = _eos_model(eos_bias=0.0)
    srcs = [[5, 6, 7, EOS], [9, 10, EOS], [11, EOS]]
    a = _gen(SequenceGenerator, m, srcs)
    b = _gen(segment_aware(SequenceGenerator), m, srcs)
    for x, y in zip(a, b):
        assert x["tokens"].tolist() == y["tokens"].tolist()
        torch.testing.assert_close(x["score"], y["score"])


# ----------------------------------------------------------------------------- CLI
def _seg(tiny_bin, split, lang):
    with open(tiny_bin.parent / "seg" / f"{split}.{lang}", encoding="utf-8") as f:
        return f.read().splitlines()


def test_cli_rand_concat_with_ablations_trains_and_decodes(tiny_bin, tmp_path):
    p = fairseq("train", tiny_bin, "--task", "concat_translation", "--concat", "rand", "--position-shift", "uniform",
                "--concat-attn-mask", "--concat-reset-pos", *TINY_TRANSFORMER, "--criterion",
                "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "1e-3",
                "--max-tokens", "1000", "--max-update", "4", "--save-dir", tmp_path / "ck", "--cpu", "--seed", "1",
                "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints")
    n_train = n_lines(tiny_bin / "train.ids")
    assert f"{n_train} original + {n_train - 1} rand concatenations, uniform-shift p=0.1" in p.stderr + p.stdout
    ckpt = tmp_path / "ck" / "checkpoint_last.pt"
    n_test = n_lines(tiny_bin / "test.ids")
    out = generate(tiny_bin, ckpt, task="concat_translation")
    assert len(hypotheses(out)) == n_test
    # Table 4.3: the test set replaced by its CONSEC concatenations, decoded segment-aware
    out = generate(tiny_bin, ckpt, "--concat-eval", "consec", "--max-len-a", "1", task="concat_translation")
    hyps = hypotheses(out)
    assert len(hyps) == n_test - 1
    refs = dict(re.findall(r"^T-(\d+)\t(.*)$", out, re.M))
    test_en = _seg(tiny_bin, "test", "en")
    assert refs["0"] == test_en[0] + " " + test_en[1] and refs["7"] == test_en[7] + " " + test_en[8]
    assert "<s>" not in "".join(hyps.values())


# fairseq-train with the task's begin_epoch / train_step wrapped: every training batch is written to a
# JSON-lines file (epoch, example ids, unpadded source tokens, position shifts) before it is trained on.
SPY_TRAIN = """
import json, sys
import fairseq_ext.tasks.concat_translation as tc
from fairseq_cli.train import cli_main

out, epoch = open({out!r}, "w"), [None]
begin_epoch, train_step = tc.ConcatTranslationTask.begin_epoch, tc.ConcatTranslationTask.train_step


def spy_begin_epoch(self, ep, model):
    epoch[0] = ep
    return begin_epoch(self, ep, model)


def spy_train_step(self, sample, *args, **kwargs):
    pad, shift = self.source_dictionary.pad(), sample.get("concat_shift")
    out.write(json.dumps({{
        "epoch": epoch[0], "id": sample["id"].tolist(),
        "src": [[t for t in row if t != pad] for row in sample["net_input"]["src_tokens"].tolist()],
        "shift": None if shift is None else [shift["src"].tolist(), shift["tgt"].tolist()]}}) + "\\n")
    out.flush()
    return train_step(self, sample, *args, **kwargs)


tc.ConcatTranslationTask.begin_epoch, tc.ConcatTranslationTask.train_step = spy_begin_epoch, spy_train_step
sys.argv[0] = "fairseq-train"
cli_main()
"""


def test_cli_consec_sep_batch_sim_shift_resample(tiny_bin, tmp_path):
    """The flags act on the batches trained on (recorded by :data:`SPY_TRAIN`), over two epochs."""
    spy, record = tmp_path / "spy_train.py", tmp_path / "batches.jsonl"
    spy.write_text(SPY_TRAIN.format(out=str(record)))
    p = run([sys.executable, spy, tiny_bin, "--user-dir", USER_DIR, "--task", "concat_translation",
             *TINY_TRANSFORMER, "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
             "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "8000", "--max-update", "10", "--max-epoch", "3",
             "--save-dir", tmp_path / "ck", "--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple",
             "--no-epoch-checkpoints", "--concat", "consec", "--concat-sep-batch", "--position-shift", "sim",
             "--concat-resample"], PYTHONPATH=ROOT)  # the package under test (the one --user-dir names)
    from fairseq.data import data_utils
    src_ds = data_utils.load_indexed_dataset(str(tiny_bin / "train.es-en.es"), None)
    tgt_ds = data_utils.load_indexed_dataset(str(tiny_bin / "train.es-en.en"), None)
    n = len(src_ds)
    assert n == n_lines(tiny_bin / "train.ids")
    assert f"{n} original + {n - 1} consec concatenations, sim-shift p=0.333" in p.stderr + p.stdout
    cfg = torch.load(tmp_path / "ck" / "checkpoint_last.pt", weights_only=True)["cfg"]["task"]
    assert (cfg["concat"], cfg["concat_sep_batch"], cfg["position_shift"], cfg["concat_resample"]) == \
        ("consec", True, "sim", True)
    batches = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(batches) == 10 and {b["epoch"] for b in batches} == {1, 2}
    eos = 2
    index = {tuple(src_ds[i].tolist()): i for i in range(n)}
    src_sizes, tgt_sizes = src_ds.sizes, tgt_ds.sizes
    sim_pairs = set(zip(src_sizes.tolist(), tgt_sizes.tolist()))
    shifts = {1: {}, 2: {}}
    kinds = set()
    for b in batches:
        concat = [i >= n for i in b["id"]]
        assert all(concat) or not any(concat)  # sep-batch: D_orig and D_new never share a batch
        kinds.add(concat[0])
        for i, src in zip(b["id"], b["src"]):
            assert src.count(eos) == (2 if i >= n else 1) and src[-1] == eos
            if i >= n:  # sep-batch pairs length-sorted neighbours: (source, target) length never decreases
                cut = src.index(eos) + 1
                a, c = index[tuple(src[:cut])], index[tuple(src[cut:])]
                assert (src_sizes[a], tgt_sizes[a]) <= (src_sizes[c], tgt_sizes[c]), (a, c)
        assert b["shift"] is not None  # sim-shift: every batch carries its examples' shifts
        for i, s, t in zip(b["id"], *b["shift"]):
            assert (s == 0) == (t == 0) and (s == 0 or (s, t) in sim_pairs)  # the lengths of a training pair
            shifts[b["epoch"]][i] = (s, t)
    assert kinds == {False, True}
    assert set(shifts[1]) == set(range(2 * n - 1))  # epoch 1 was trained on in full
    hit = np.mean([s > 0 for s, _ in shifts[1].values()])
    assert 0.25 < hit < 0.42  # p = 1/3
    # --concat-resample: the shifts of epoch 2 are a new draw
    common = set(shifts[1]) & set(shifts[2])
    assert len(common) > 50 and sum(shifts[1][i] != shifts[2][i] for i in common) > 0.25 * len(common)


@pytest.mark.parametrize("flags,message", [
    (["--concat-sep-batch"], "--concat-sep-batch needs --concat consec or rand"),
    (["--concat", "rand", "--shift-prob", "1.5", "--position-shift", "sim"], "--shift-prob must be in [0, 1]"),
])
def test_cli_bad_flags_are_clear_errors(tiny_bin, tmp_path, flags, message):
    p = fairseq("train", tiny_bin, "--task", "concat_translation", *flags, *TINY_TRANSFORMER, "--optimizer", "adam",
                "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "1", "--save-dir", tmp_path, "--cpu",
                check=False)
    assert p.returncode != 0 and message in p.stderr


def test_cli_concat_eval_with_masks_is_refused(tiny_bin, tmp_path):
    ckpt = train(tiny_bin, tmp_path, task="concat_translation", max_update=1)
    p = fairseq("generate", tiny_bin, "--task", "concat_translation", "--path", ckpt, "--cpu", "--concat-eval",
                "rand", "--concat-attn-mask", check=False)
    assert p.returncode != 0 and "--concat-attn-mask is not supported" in p.stderr

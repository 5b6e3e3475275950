"""Wang et al. (2017), the cross-sentence context baseline of Maruf (2019) ch. 3 (Table 3.4;
fairseq_ext/models/wang2017_doc_rnn.py, modules/local_context.py): the hierarchical summary and the gate by hand,
only the previous k sentences read, the sentence model when there is no context, incremental = full decoding, the
parameter count, and fairseq-train / fairseq-generate on the tiny slice. Toys: ``docmem_batches.py``."""
import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY

from docmem_batches import BATCH, V, corpus, logits_of, make_sample, per_sentence, step_by_step
from harness import arch_args, build_model, n_params
from fairseq_ext.data.errors import UserDataError
from fairseq_ext.modules.local_context import GatedMemoryInputGRUCell, HierarchicalSummary, previous_rows

ARCHS = sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__name__ == "Wang2017DocModel")
VARIANTS = ["docmem_wang2017", "docmem_wang2017_gated", "docmem_wang2017_init", "docmem_wang2017_init_gated"]
# a tiny model on the bench presets (conditional GRU) and on the thesis ones (plain GRU, two decoder layers)
DIMS = dict(encoder_embed_dim=16, decoder_embed_dim=16, decoder_out_embed_dim=16, encoder_hidden_size=16,
            decoder_hidden_size=32, attention_dim=16, share_all_embeddings=True)


def tiny(arch, seed=0, **kw):
    return build_model(arch, vocab=V, seed=seed, **{**DIMS, **kw})


def sentence_twin(arch, seed=1):
    """The rnnsearch sentence model with the sizes of ``tiny(arch)``."""
    a = arch_args(arch, **DIMS)
    keys = ("rnn_type", "decoder_variant", "decoder_layers", "dropout", "encoder_layers")
    return build_model("rnnsearch", vocab=V, seed=seed, **DIMS, **{k: getattr(a, k) for k in keys})


def test_archs_and_their_defaults():
    assert ARCHS == sorted(VARIANTS + [f"{a}_bench" for a in VARIANTS])
    a = arch_args("docmem_wang2017")  # the thesis's row: rnnsearch_maruf, dropout 0.2 (one context), 3 previous
    maruf = arch_args("rnnsearch_maruf")
    assert {k: getattr(a, k) for k in ("encoder_hidden_size", "decoder_layers", "decoder_variant", "attention_dim")} \
        == {k: getattr(maruf, k) for k in ("encoder_hidden_size", "decoder_layers", "decoder_variant", "attention_dim")}
    assert (a.dropout, a.ctx_prev_sentences, a.doc_summary_input, a.doc_summary_init) == (0.2, 3, "aux", False)
    c = arch_args("docmem_wang2017_init_bench")  # Wang et al.'s init only: D initialises the decoder, no input
    assert (c.doc_summary_input, c.doc_summary_init) == ("none", True)
    b = arch_args("docmem_wang2017_init_gated_bench")
    assert (b.decoder_variant, b.encoder_hidden_size, b.doc_summary_input, b.doc_summary_init) == \
        ("conditional", 288, "gated_aux", True)


def test_previous_rows_keep_only_the_k_previous_sentences_oldest_first():
    index = torch.tensor([[4, 7, 2, 9, -1], [3, 1, -1, -1, -1], [-1, -1, -1, -1, -1]])
    distance = torch.tensor([[-1, -3, 1, -4, 0], [2, -2, 0, 0, 0], [0, 0, 0, 0, 0]])
    assert previous_rows(index, distance, 3).tolist() == [[7, -1, 4], [-1, 1, -1], [-1, -1, -1]]
    assert previous_rows(index, distance, 1).tolist() == [[4], [-1], [-1]]
    assert previous_rows(index[:, :0], distance[:, :0], 3).tolist() == [[-1] * 3] * 3


def test_hierarchical_summary_by_hand():
    """D = the last state of the sentence GRU over the word GRU's last states of the previous sentences, in
    document order; zero without a previous sentence."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 5, padding_idx=1)
    summary = HierarchicalSummary(5, 6)
    tokens = torch.tensor([[1, 1, 7, 8, 2], [4, 5, 6, 9, 2], [1, 1, 1, 3, 2]])  # left-padded N-set rows
    prev = torch.tensor([[2, -1, 0], [-1, -1, -1], [-1, -1, 1]])
    with torch.no_grad():
        got = summary(emb, tokens, prev, pad=1)

        def last(rnn, x):
            return rnn.rnn(x.unsqueeze(0))[1][-1, 0]

        sent = {r: last(summary.word_rnn, emb(tokens[r][tokens[r].ne(1)])) for r in range(3)}
        want0 = last(summary.sentence_rnn, torch.stack([sent[2], sent[0]]))
        want2 = last(summary.sentence_rnn, sent[1].unsqueeze(0))
    assert torch.allclose(got[0], want0, atol=1e-6) and torch.allclose(got[2], want2, atol=1e-6)
    assert torch.equal(got[1], torch.zeros(6))


def test_gated_cell_reads_the_gated_summary_and_is_the_sentence_cell_without_memory():
    torch.manual_seed(0)
    cell = GatedMemoryInputGRUCell(input_size=6, memory_size=3, hidden_size=5, memory_offset=4)
    x, h = torch.randn(2, 9), torch.randn(2, 5)
    sentence = torch.cat([x[:, :4], x[:, 7:]], 1)  # [ε; c]
    z = torch.sigmoid(h @ cell.gate_hidden.weight.T + sentence @ cell.gate_input.weight.T)
    gated = torch.cat([x[:, :4], z * x[:, 4:7], x[:, 7:]], 1)
    assert torch.allclose(cell(x, h), super(GatedMemoryInputGRUCell, cell).forward(gated, h), atol=1e-6)
    cell.use_memory = False
    assert torch.equal(cell(x, h), torch.nn.GRUCell.forward(cell, sentence, h))


@pytest.mark.parametrize("arch", [f"{a}_bench" for a in VARIANTS] + ["docmem_wang2017_gated"])
def test_incremental_decoding_equals_the_full_pass(arch):
    model = tiny(arch)
    sample = make_sample(corpus(), BATCH)
    order = torch.tensor([3, 3, 0, 5, 1, 2])  # beam-like: repeats and drops
    with torch.no_grad():
        full = model(**sample["net_input"])[0]
        assert torch.allclose(full, step_by_step(model, sample), atol=1e-5)
        assert torch.allclose(full.index_select(0, order), step_by_step(model, sample, permute_at=2, order=order),
                              atol=1e-5)


@pytest.mark.parametrize("arch", [f"{a}_bench" for a in VARIANTS] + ["docmem_wang2017_init_gated"])
def test_no_previous_sentence_or_zero_context_is_the_sentence_model(arch):
    """Warm-started from an rnnsearch state dict: with ``--zero-context`` every sentence is translated exactly as by
    the sentence model (bit for bit), and without it the first sentence of each document (D = 0: the same function,
    up to rounding: the memory block adds W·0); a later sentence is not."""
    model, sent = tiny(arch), sentence_twin(arch)
    model.load_state_dict(sent.state_dict())
    sample = make_sample(corpus(), BATCH)
    want = per_sentence(logits_of(sent, sample), sample)
    got = per_sentence(logits_of(model, sample), sample)
    for key in want:
        if key[1] == 0:
            assert torch.allclose(got[key], want[key], atol=1e-6, rtol=0), key
    assert not torch.allclose(got[(0, 1)], want[(0, 1)], atol=1e-5)
    with model.memory_disabled():
        assert torch.equal(logits_of(model, sample), logits_of(sent, sample))


def test_only_the_k_previous_sentences_are_read():
    """Offline context (every other sentence of the document): a later sentence, or one more than
    --ctx-prev-sentences back, changes nothing; the previous sentence does."""
    docs = corpus(doc_lengths=(6, 2))
    batch = [(0, 5), (0, 4), (1, 1), (0, 0)]

    def out(model, d):
        sample = make_sample(d, batch)
        return per_sentence(logits_of(model, sample), sample)

    def with_source(d, pos, extra):
        d = [list(doc) for doc in d]
        d[0][pos] = (torch.cat([torch.tensor(extra), d[0][pos][0]]), d[0][pos][1])
        return d

    for k in (3, 1):
        model = tiny("docmem_wang2017_gated_bench", ctx_prev_sentences=k)
        base = out(model, docs)
        later = out(model, with_source(docs, 5, [7, 8]))            # (0, 5) is later than (0, 4)
        assert torch.equal(later[(0, 4)], base[(0, 4)])
        far = out(model, with_source(docs, 5 - k - 1, [9]))        # k + 1 sentences before (0, 5)
        assert torch.equal(far[(0, 5)], base[(0, 5)])
        near = out(model, with_source(docs, 4, [9]))                # the previous sentence of (0, 5)
        assert not torch.allclose(near[(0, 5)], base[(0, 5)], atol=1e-5)
        assert torch.equal(near[(1, 1)], base[(1, 1)])              # another document


def test_parameter_count_over_the_sentence_model():
    """Thesis size (emb 512, encoder 2x512 = C 1024, decoder 512, two layers): the summary's two GRUs
    (3C(E + C) + 3C·2C + 4·3C biases), the auxiliary input block 3HC, the gate HC + C(E + C) (U_z; [W_z; C_z]), the
    initial-state term C·2H."""
    E, C, H, vocab = 512, 1024, 512, 8000
    base = n_params(build_model("rnnsearch_maruf", vocab=vocab, device="meta"))
    summary = 3 * C * (E + C) + 3 * C * 2 * C + 4 * 3 * C
    extra = {"docmem_wang2017": summary + 3 * H * C,
             "docmem_wang2017_gated": summary + 3 * H * C + H * C + C * (E + C),
             "docmem_wang2017_init": summary + C * 2 * H,
             "docmem_wang2017_init_gated": summary + 3 * H * C + H * C + C * (E + C) + C * 2 * H}
    for arch, n in extra.items():
        assert n_params(build_model(arch, vocab=vocab, device="meta")) - base == n, arch


def test_misconfigurations_are_one_clear_error():
    with pytest.raises(UserDataError, match="reads its own context"):
        tiny("docmem_wang2017_bench", doc_context="memory")
    with pytest.raises(UserDataError, match="D would enter nowhere"):
        tiny("docmem_wang2017_bench", doc_summary_input="none")


def test_cli_train_and_generate(tiny_bin, tmp_path):
    """``fairseq-train --task doc_translation --arch docmem_wang2017_init_gated_bench`` (sizes shrunk) then
    ``fairseq-generate`` (beam 2: D and the gate's state follow the beam) give one hypothesis per test sentence;
    the checkpoint has the summary GRUs, the gate and the initial-state term."""
    from harness import generate, hypotheses, n_lines, train

    dims = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--decoder-out-embed-dim", "16",
            "--encoder-hidden-size", "16", "--decoder-hidden-size", "32", "--attention-dim", "16"]
    ckpt = train(tiny_bin, tmp_path / "wang", ["--arch", "docmem_wang2017_init_gated_bench", *dims],
                 task="doc_translation", criterion="cross_entropy", max_update=2, extra=["--disable-validation"])
    keys = torch.load(ckpt, map_location="cpu", weights_only=False)["model"].keys()
    for prefix in ("encoder.summary.word_rnn.", "encoder.summary.sentence_rnn.", "decoder.transition.cell.gate_input",
                   "decoder.summary_init."):
        assert any(k.startswith(prefix) for k in keys), prefix
    out = generate(tiny_bin, ckpt, task="doc_translation")
    n = n_lines(tiny_bin / "test.ids")
    assert sorted(hypotheses(out)) == list(range(n))

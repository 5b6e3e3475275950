"""Document-context NMT with memory networks (Maruf 2019 ch. 3), decoding: incremental decoding with memories,
fairseq's beam search and block-coordinate-descent decoding (generators/doc_bcd.py) on hand-built document
batches (``docmem_batches.py``)."""
import pytest
import torch

from docmem_batches import BATCH, EOS, PAD, TINY_VARIANTS, V, corpus, make_sample, rnnsearch_twin, step_by_step, tiny
from harness import make_dictionary
from fairseq_ext.generators.decoding import GreedyGenerator
from fairseq_ext.generators.doc_bcd import DocBCDGenerator


@pytest.mark.parametrize("variant", sorted(TINY_VARIANTS))
def test_incremental_decoding_equals_the_full_pass_with_memories(variant):
    model = tiny(variant)
    sample = make_sample(corpus(), BATCH)
    order = torch.tensor([3, 3, 0, 5, 1, 2])  # beam-like: repeats and drops
    with torch.no_grad():
        full = model(**sample["net_input"])[0]
        inc = step_by_step(model, sample)
        reordered = step_by_step(model, sample, permute_at=2, order=order)
    assert torch.allclose(full, inc, atol=1e-5)
    assert torch.allclose(full.index_select(0, order), reordered, atol=1e-5)


# ------------------------------------------------------------------------------------------ decoding
def test_fairseq_beam_search_with_memories_matches_greedy_bcd_pass():
    """fairseq's SequenceGenerator (what fairseq-generate runs) reorders the encoder output of a document
    batch correctly: its beam-1 output is doc_bcd's Jacobi pass given the same target context."""
    from fairseq.sequence_generator import SequenceGenerator

    model = tiny("m2c_both", seed=4)
    sample = make_sample(corpus(), BATCH)
    d = make_dictionary(V)
    hyps = SequenceGenerator([model], d, beam_size=1, max_len_b=12).generate([model], sample)
    bcd = DocBCDGenerator([model], d, iterations=1, max_len_b=12)
    ours = bcd.decode("doc", sample)
    for b in range(len(BATCH)):
        assert torch.equal(hyps[b][0]["tokens"], ours[b]["tokens"]), b
    beam = SequenceGenerator([model], d, beam_size=3, max_len_b=12).generate([model], sample)
    assert len(beam) == len(BATCH)


@pytest.mark.parametrize("init", ["base_model", "zero_context"])
def test_bcd_with_zero_iterations_is_greedy_of_the_sentence_model(init):
    model = tiny("m2c_both", seed=5)
    sent = rnnsearch_twin({"decoder_variant": "plain"}, seed=6)
    model.load_state_dict(sent.state_dict())
    d = make_dictionary(V)
    sample = make_sample(corpus(), BATCH)
    greedy = GreedyGenerator([sent], d, max_len_b=12).generate([sent], sample)
    models = [model, sent] if init == "base_model" else [model]
    bcd = DocBCDGenerator(models, d, iterations=0, init=init, max_len_b=12).generate(models, sample)
    for b in range(len(BATCH)):
        assert torch.equal(bcd[b][0]["tokens"], greedy[b][0]["tokens"])
        assert torch.equal(bcd[b][0]["positional_scores"], greedy[b][0]["positional_scores"])


def test_bcd_jacobi_pass_is_the_doc_model_on_pass_zero_translations():
    model = tiny("m2c_both", seed=5)
    d = make_dictionary(V)
    sample = make_sample(corpus(), BATCH)
    bcd = DocBCDGenerator([model], d, iterations=1, init="zero_context", max_len_b=12)
    out = bcd.generate([model], sample)
    with model.memory_disabled():
        first = bcd.doc_greedy.decode(sample)
    given = sample["net_input"]["ctx_tgt_tokens"]
    current = [h["tokens"] for h in first] + [given[len(BATCH)][given[len(BATCH)].ne(PAD)]]
    expect = bcd.doc_greedy.decode(bcd.with_targets(sample, current))
    for b in range(len(BATCH)):
        assert torch.equal(out[b][0]["tokens"], expect[b]["tokens"])


def test_bcd_gauss_seidel_runs_and_its_first_wave_is_jacobis():
    model = tiny("m2c_tgt", seed=7)
    d = make_dictionary(V)
    sample = make_sample(corpus(), BATCH)
    jac = DocBCDGenerator([model], d, iterations=1, update="jacobi", max_len_b=12).generate([model], sample)
    gs = DocBCDGenerator([model], d, iterations=1, update="gauss_seidel", max_len_b=12).generate([model], sample)
    first = [b for b, (_, p) in enumerate(BATCH) if p == 0]
    for b in first:  # the first sentence of each document sees only pass-0 translations in both schemes
        assert torch.equal(jac[b][0]["tokens"], gs[b][0]["tokens"])


def test_bcd_without_given_extra_targets_translates_them_in_pass_zero():
    model = tiny("m2c_tgt", seed=7)
    d = make_dictionary(V)
    sample = make_sample(corpus(), BATCH, with_tgt=False)
    out = DocBCDGenerator([model], d, iterations=1, max_len_b=12).generate([model], sample)
    assert len(out) == len(BATCH) and all(h[0]["tokens"][-1] == EOS for h in out)


class MockBCD(DocBCDGenerator):
    """decode() records the target context each sentence saw and answers [id, 10·pass + 10, EOS] where id is
    the sentence's first source token (unique per sentence)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = []  # (stage, {sentence id: {context sentence id: its translation's pass}})
        self.passes = {}

    def decode(self, stage, sample):
        net = sample["net_input"]
        src = net["src_tokens"]
        first = [int(r[r.ne(PAD)][0]) for r in src]
        extra = net["ctx_src_tokens"]
        ids = first + [int(r[r.ne(PAD)][0]) for r in extra] if extra.size(0) else list(first)
        seen = {}
        if stage == "doc":
            tgt = net["ctx_tgt_tokens"]
            for b, sid in enumerate(first):
                seen[sid] = {ids[r]: int(tgt[r, 1]) for r in net["ctx_index"][b].tolist() if r >= 0}
        self.calls.append((stage, seen))
        out = []
        for sid in first:
            p = self.passes[sid] = self.passes.get(sid, -1) + 1 if stage == "doc" else 0
            out.append({"tokens": torch.tensor([sid, 10 * p + 10, EOS]), "positional_scores": torch.zeros(3)})
        return out


def mock_docs():
    """Two documents (3 and 2 sentences), the first source token = a unique sentence id (4..8)."""
    docs = corpus((3, 2))
    sid = 4
    for d in docs:
        for i, (s, t) in enumerate(d):
            s[0] = sid
            sid += 1
    return docs


def test_jacobi_uses_only_the_previous_pass():
    docs = mock_docs()
    batch = [(1, 1), (0, 2), (0, 0), (1, 0), (0, 1)]
    gen = MockBCD([tiny("m2c_tgt")], make_dictionary(V), iterations=2, update="jacobi")
    out = gen.generate(gen.models, make_sample(docs, batch))
    stages = [s for s, _ in gen.calls]
    assert stages == ["init", "doc", "doc"]
    for t, (_, seen) in enumerate(gen.calls[1:], start=1):
        assert set(seen) == {4, 5, 6, 7, 8}
        for sid, ctx in seen.items():
            assert ctx and all(v == 10 * (t - 1) + 10 for v in ctx.values()), (t, sid, ctx)  # pass t-1
    assert all(int(h[0]["tokens"][1]) == 30 for h in out)


def test_gauss_seidel_updates_in_place_in_document_order():
    docs = mock_docs()
    batch = [(1, 1), (0, 2), (0, 0), (1, 0), (0, 1)]
    gen = MockBCD([tiny("m2c_tgt")], make_dictionary(V), iterations=2, update="gauss_seidel")
    gen.generate(gen.models, make_sample(docs, batch))
    position = {4: 0, 5: 1, 6: 2, 7: 0, 8: 1}
    doc = {4: 0, 5: 0, 6: 0, 7: 1, 8: 1}
    doc_calls = [seen for s, seen in gen.calls if s == "doc"]
    assert [sorted(c) for c in doc_calls] == [[4, 7], [5, 8], [6], [4, 7], [5, 8], [6]]  # waves, twice
    for i, seen in enumerate(doc_calls):
        t = 1 + i // 3  # pass
        for sid, ctx in seen.items():
            assert set(ctx) == {o for o in doc if doc[o] == doc[sid] and o != sid}
            for other, p in ctx.items():
                expect = t if position[other] < position[sid] else t - 1  # updated earlier in this pass
                assert p == 10 * expect + 10, (t, sid, other, p)


def test_bcd_rows_as_batch_keeps_the_context_of_every_sentence():
    """The sub-batch of a Gauss-Seidel wave gives a sentence exactly its output in the full batch."""
    model = tiny("m2c_both", seed=2)
    d = make_dictionary(V)
    sample = make_sample(corpus(), BATCH)
    gen = DocBCDGenerator([model], d, iterations=1, max_len_b=12)
    given = sample["net_input"]["ctx_tgt_tokens"]
    current = [r[r.ne(PAD)] for r in given]
    full = gen.doc_greedy.decode(sample)
    for rows in ([0, 2], [4], [5, 1, 3]):
        sub = gen.doc_greedy.decode(gen.rows_as_batch(sample, rows, current))
        for i, b in enumerate(rows):
            assert torch.equal(sub[i]["tokens"], full[b]["tokens"]), (rows, b)

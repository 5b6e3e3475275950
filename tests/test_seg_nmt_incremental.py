"""SEG-NMT (Gu 2019 ch. 4), incremental decoding: the step-by-step pass with beam reordering equals the full
pass, beam-search scores, the shared memory of a beam (reads, reordering, finished sentences)."""
import pytest
import torch

import fairseq_ext  # noqa: F401  (registrations)
from harness import incremental_reordered, make_dictionary
from seg_toys import EOS, V, seg, toy


@pytest.mark.parametrize("fusion,order", [("shallow", None), ("shallow", [2, 0, 0]), ("deep", [1, 0, 2])])
def test_incremental_decoding_equals_the_full_pass_with_beam_reordering(fusion, order):
    """The memory (encoder_out) and the coverage β (incremental state) follow the beam."""
    model = seg(fusion=fusion)
    with torch.no_grad():
        model.decoder.tm_coverage_weight.fill_(1.5)
    src, lengths, prev, tm = toy()
    with torch.no_grad():
        enc = model.encoder(src, lengths, **tm)
        inc, idx, prev = incremental_reordered(model, enc, prev, order)
        tm = dict(tm, tm_index=tm["tm_index"].index_select(0, idx))
        full = model(src.index_select(0, idx), lengths.index_select(0, idx), prev, **tm)[0]
    assert torch.allclose(inc, full, atol=1e-5)


def test_beam_search_scores_are_the_full_forward_scores():
    """fairseq's SequenceGenerator (beam 3) with the memory: every hypothesis's per-token scores equal the
    teacher-forced full pass over it with its example's memory."""
    from fairseq.sequence_generator import SequenceGenerator

    model = seg()
    with torch.no_grad():
        model.decoder.tm_coverage_weight.fill_(2.0)
        model.decoder.tm_gate.out.bias.fill_(1.0)  # a gate that uses the memory
    src, lengths, _, tm = toy()
    gen = SequenceGenerator([model], make_dictionary(V), beam_size=3, max_len_b=8)
    with torch.no_grad():
        hypos = gen.generate([model], {"net_input": dict(src_tokens=src, src_lengths=lengths, **tm)})
        for b, hs in enumerate(hypos):
            assert len(hs) == 3
            for h in hs:
                tokens = h["tokens"].unsqueeze(0)
                prev = torch.cat([torch.tensor([[EOS]]), tokens[:, :-1]], 1)
                row = dict(tm, tm_index=tm["tm_index"][b:b + 1])
                lp = model.get_normalized_probs(model(src[b:b + 1], lengths[b:b + 1], prev, **row), log_probs=True)
                gold = lp.gather(-1, tokens.unsqueeze(-1)).view(-1)
                assert torch.allclose(h["positional_scores"], gold, atol=1e-4), (b, h["tokens"])


def test_shared_memory_reads_equal_gathered_rows_and_reorder_drops_finished_sentences():
    """The keys/values stay one row per sentence in beam search: batched reads in the beam layout, a gather
    otherwise, both equal to reading the expanded rows; reordering moves only the row index and drops the
    rows of finished sentences."""
    from fairseq_ext.modules.tm_memory import BilinearMetric, reorder_shared, shared_group, shared_read, shared_scores

    g = torch.Generator().manual_seed(0)
    S, M, C, H, beam = 3, 5, 4, 6, 2
    keys, values = torch.randn(S, M, C, generator=g), torch.randn(S, M, H, generator=g)
    metric = BilinearMetric(C, "full")
    with torch.no_grad():
        metric.weight.copy_(torch.randn(C, C, generator=g))
    row = torch.arange(S).repeat_interleave(beam)
    assert shared_group(row, S * beam, S) == beam and shared_group(None, S, S) == 1
    assert shared_group(torch.tensor([0, 0, 2, 1, 1, 2]), 6, S) is None and shared_group(None, 4, S) is None
    for r in (row, torch.tensor([2, 0, 0, 1, 2, 1])):   # the beam layout (batched) and an arbitrary one (gather)
        q = torch.randn(r.numel(), C, generator=g)
        w = torch.randn(r.numel(), M, generator=g).softmax(-1)
        assert torch.allclose(shared_scores(metric, q, keys, r), metric(q, keys[r]), atol=1e-5)
        assert torch.allclose(shared_read(w, values, r), torch.bmm(w.unsqueeze(1), values[r]).squeeze(1), atol=1e-5)
    # fairseq's first reorder expands each sentence to its beam: only the index moves
    r1, t1 = reorder_shared(None, {"k": keys, "v": values}, row)
    assert torch.equal(r1, row) and t1["k"] is keys and t1["v"] is values
    # sentence 1 finished: its rows go, the index is renumbered, the layout stays the beam layout
    r2, t2 = reorder_shared(r1, t1, torch.tensor([1, 0, 5, 4]))
    assert torch.equal(r2, torch.tensor([0, 0, 1, 1])) and shared_group(r2, 4, 2) == 2
    assert torch.equal(t2["k"], keys[[0, 2]]) and torch.equal(t2["v"], values[[0, 2]])


@pytest.mark.parametrize("fusion", ["shallow", "deep"])
def test_beam_search_with_the_shared_memory_equals_expanded_memory(fusion, monkeypatch):
    """Beam search output (tokens and scores) is the same as with the memory expanded to every hypothesis and
    re-indexed at each step (rnnsearch's plain reordering), with sentences finishing at different steps."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_ext.models.rnnsearch import RNNSearchEncoder
    from fairseq_ext.models.seg_nmt import SegNMTEncoder

    model = seg(fusion=fusion, seed=3)
    with torch.no_grad():
        model.decoder.tm_coverage_weight.fill_(2.0)
        model.decoder.tm_gate.out.bias.fill_(1.0)
    src, lengths, _, tm = toy()
    sample = {"net_input": dict(src_tokens=src, src_lengths=lengths, **tm)}

    def decode():
        gen = SequenceGenerator([model], make_dictionary(V), beam_size=4, max_len_b=30)
        with torch.no_grad():
            return gen.generate([model], sample)

    import fairseq_ext.models.seg_nmt as seg_mod
    rows_seen, real = [], seg_mod.reorder_shared

    def spy(row, tables, new_order):
        out = real(row, tables, new_order)
        rows_seen.append(out[1]["tm_keys"].size(0))
        return out

    monkeypatch.setattr(seg_mod, "reorder_shared", spy)
    shared = decode()
    assert rows_seen[0] == 3
    if fusion == "shallow":   # copying </s> from the memory ends the sentences at different steps here
        assert min(rows_seen) < 3   # a sentence finished early: its memory rows were dropped
    monkeypatch.setattr(SegNMTEncoder, "reorder_encoder_out", RNNSearchEncoder.reorder_encoder_out)
    expanded = decode()
    for hs, ref in zip(shared, expanded):
        assert [h["tokens"].tolist() for h in hs] == [h["tokens"].tolist() for h in ref]
        for h, r in zip(hs, ref):
            assert torch.allclose(h["positional_scores"], r["positional_scores"], atol=1e-5)

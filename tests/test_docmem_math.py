"""Document-context NMT with memory networks (Maruf 2019 ch. 3; fairseq_ext/models/docmem.py,
modules/memnet.py), the math in process: the MemNet read, the memories and their integration, the pseudo-likelihood
(Eq. 3.2), the warm start and the parameter arithmetic of Table 3.3. Decoding is in ``test_docmem_decoding.py``,
the command lines in ``test_docmem_cli.py``; the toys in ``docmem_batches.py``."""
import types

import pytest
import torch
from fairseq.data import data_utils
from fairseq.models import ARCH_MODEL_REGISTRY

from docmem_batches import (BATCH, EOS, PAD, TINY_VARIANTS, V, corpus, logits_of, make_sample, per_sentence,
                            rnnsearch_twin, sentence, step_by_step, tiny)
from harness import arch_args, build_model, lstm_lm_checkpoint, make_dictionary, n_params
from fairseq_ext.models.docmem import DOC_PARAM_PREFIXES, extra_parameters
from fairseq_ext.modules.memnet import (
    LMSentenceEncoder,
    MemoryInputGRUCell,
    document_sequences,
    memnet_read,
    previous_row,
)
from fairseq_ext.modules.warm_start import SentenceWarmStartMixin


ARCHS = sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__name__ == "DocMemModel")


# ------------------------------------------------------------------------------------------ registry
def test_archs_registered():
    expected = {"docmem", "docmem_m2c", "docmem_m2o", "docmem_tiny"}
    expected |= {f"docmem_{i}_{m}{s}" for i in ("m2c", "m2o") for m in ("src", "tgt", "both") for s in ("", "_bench")}
    expected |= {f"{b}{s}" for b in ("docmem_prevtgt", "docmem_jean2017") for s in ("", "_bench")}
    expected |= {f"{b}{s}" for b in ("ctx_prevtgt_rnn", "ctx_jean2017_rnn") for s in ("", "_bench")}  # earlier names
    assert set(ARCHS) == expected


def test_thesis_archs_are_rnnsearch_maruf_and_bench_archs_rnnsearch_bench():
    for arch, base in [("docmem_m2c_src", "rnnsearch_maruf"), ("docmem_m2o_tgt_bench", "rnnsearch_bench"),
                       ("ctx_jean2017_rnn", "rnnsearch_maruf")]:
        a, b = arch_args(arch), arch_args(base)
        shared = {k: v for k, v in vars(b).items() if k != "dropout"}
        assert {k: vars(a)[k] for k in shared} == shared, arch
    a = arch_args("docmem_m2c_both")  # dual memory: 0.5 encoder/decoder, 0.2 document RNN (§3.5.1)
    assert (a.dropout, a.doc_rnn_dropout, a.doc_memories, a.memory_integration) == (0.5, 0.2, "both", "m2c")
    a = arch_args("docmem_m2o_src")
    assert (a.dropout, a.doc_memories, a.memory_integration) == (0.2, "src", "m2o")


# ------------------------------------------------------------------------------------------ MemNet read
def test_memnet_read_is_softmax_over_real_cells_and_zero_for_an_empty_memory():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 5, generator=g, requires_grad=True)
    cells = torch.randn(3, 4, 5, generator=g)
    mask = torch.tensor([[False, True, False, True], [True, True, True, True], [False, False, False, False]])
    out, p = memnet_read(q, cells, mask)
    for b, keep in ((0, [0, 2]), (2, [0, 1, 2, 3])):
        w = torch.softmax(cells[b, keep] @ q[b], 0)
        assert torch.allclose(p[b, keep], w) and torch.allclose(out[b], w @ cells[b, keep])
    assert p[0, 1] == 0 and p[0, 3] == 0
    assert torch.equal(out[1], torch.zeros(5)) and torch.equal(p[1], torch.zeros(4))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    out, p = memnet_read(q, cells[:, :0], mask[:, :0])  # K = 0
    assert out.shape == (3, 5) and not out.any() and p.shape == (3, 0)


def test_document_sequences_put_the_sentence_between_its_context_and_share_documents():
    index = torch.tensor([[1, 2, 5], [0, 2, 5], [3, -1, -1], [-1, -1, -1]])
    distance = torch.tensor([[1, 2, 3], [-1, 1, 2], [1, 0, 0], [0, 0, 0]])
    seqs, which, pos = document_sequences(index, distance, torch.arange(4))
    rows = [seqs[w].tolist() for w in which.tolist()]
    assert rows[0] == rows[1] == [0, 1, 2, 5]  # one document: one sequence for both
    assert rows[2] == [2, 3, -1, -1] and rows[3] == [3, -1, -1, -1]
    assert which[0] == which[1] and len(seqs) == 3
    assert pos[0].tolist() == [1, 2, 3] and pos[1].tolist() == [0, 2, 3] and pos[2].tolist() == [1, 0, 0]
    assert previous_row(index, distance).tolist() == [-1, 0, -1, -1]


def test_memory_input_cell_is_a_gru_on_the_concatenated_input_and_the_sentence_cell_without_memory():
    torch.manual_seed(0)
    cell = MemoryInputGRUCell(input_size=6, memory_size=3, hidden_size=5, memory_offset=4)
    x = torch.randn(2, 9)
    h = torch.randn(2, 5)
    full = torch.nn.GRUCell(9, 5)
    with torch.no_grad():
        full.weight_ih.copy_(torch.cat([cell.weight_ih[:, :4], cell.weight_mem, cell.weight_ih[:, 4:]], 1))
        full.weight_hh.copy_(cell.weight_hh)
        full.bias_ih.copy_(cell.bias_ih)
        full.bias_hh.copy_(cell.bias_hh)
    assert torch.allclose(cell(x, h), full(x, h), atol=1e-6)
    cell.use_memory = False
    plain = torch.nn.GRUCell.forward(cell, torch.cat([x[:, :4], x[:, 7:]], 1), h)
    assert torch.equal(cell(x, h), plain)


# ------------------------------------------------------------------------------------------ the model
@pytest.mark.parametrize("variant", sorted(TINY_VARIANTS))
def test_batch_order_and_companions_do_not_change_a_sentence(variant):
    """A sentence's output depends on its context only: not on the batch order, nor on sentences outside
    its context (another document, or one dropped from its ctx_index); changing a context sentence
    does change it (except for the baselines' non-previous sentences)."""
    model = tiny(variant)
    docs = corpus()
    ref = per_sentence(logits_of(model, make_sample(docs, BATCH)), make_sample(docs, BATCH))
    perm = [BATCH[i] for i in (4, 2, 5, 0, 3, 1)]
    sample = make_sample(docs, perm)
    got = per_sentence(logits_of(model, sample), sample)
    for k in ref:
        assert torch.allclose(ref[k], got[k], atol=1e-5), k
    # only document 0 in the batch; document 1 changed completely
    other = [list(d) for d in docs]
    other[1] = [(s[1:], t[:-2] if t.numel() > 2 else t) for s, t in docs[1]]
    sub = [(0, 1), (0, 0), (0, 3), (1, 0)]
    a = per_sentence(logits_of(model, make_sample(docs, sub)), make_sample(docs, sub))
    b = per_sentence(logits_of(model, make_sample(other, sub)), make_sample(other, sub))
    for k in [(0, 1), (0, 0), (0, 3)]:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    # sentence (0, 0) changed: (0, 1) sees it (its previous sentence) unless the model reads no context
    changed = [list(d) for d in docs]
    changed[0][0] = (torch.cat([torch.tensor([5, 6]), docs[0][0][0]]), torch.cat([torch.tensor([7]), docs[0][0][1]]))
    c = per_sentence(logits_of(model, make_sample(changed, sub)), make_sample(changed, sub))
    assert not torch.allclose(a[(0, 1)], c[(0, 1)], atol=1e-5)


def test_padded_context_entries_are_ignored():
    """A context entry −1 (padding) is the same as no entry: ctx_index with an extra −1 column, or a
    sentence removed from the context, read the same memory."""
    model = tiny("m2c_both")
    docs = corpus()
    sample = make_sample(docs, BATCH)
    wide = dict(sample["net_input"])
    wide["ctx_index"] = torch.cat([wide["ctx_index"], torch.full((len(BATCH), 2), -1)], 1)
    wide["ctx_distance"] = torch.cat([wide["ctx_distance"], torch.zeros(len(BATCH), 2, dtype=torch.long)], 1)
    with torch.no_grad():
        assert torch.allclose(model(**sample["net_input"])[0], model(**wide)[0], atol=1e-6)


def test_empty_memory_reads_zero():
    """A one-sentence document (all −1), and a batch without any context keys, read zero memories: the
    output equals the zero-memory (sentence) model's."""
    model = tiny("m2c_both")
    docs = corpus()
    sample = make_sample(docs, [(2, 0)])
    assert sample["net_input"]["ctx_index"].shape == (1, 0)
    with torch.no_grad():
        enc = model.encoder(**{k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"})
        state = model.decoder.initial_state(enc)
        assert not state["memory"].any()
        a = model(**sample["net_input"])[0]
        b = model(src_tokens=sample["net_input"]["src_tokens"], src_lengths=sample["net_input"]["src_lengths"],
                  prev_output_tokens=sample["net_input"]["prev_output_tokens"])[0]
        with model.memory_disabled():
            c = model(**sample["net_input"])[0]
    assert torch.allclose(a, c, atol=1e-6) and torch.allclose(b, c, atol=1e-6)


def test_target_memory_needs_the_current_translations():
    model = tiny("m2c_tgt")
    sample = make_sample(corpus(), BATCH, with_tgt=False)
    with pytest.raises(ValueError, match="ctx_tgt_tokens"):
        logits_of(model, sample)
    with model.memory_disabled():
        logits_of(model, sample)


def test_target_memory_reads_the_sentence_paths_last_states():
    """c^tgt by hand: s^{|y|} of each N-set translation teacher-forced through the zero-memory decoder,
    query s^j + W_at h^j, softmax over the context rows."""
    model = tiny("m2c_tgt")
    docs = corpus()
    sample = make_sample(docs, BATCH)
    net = sample["net_input"]
    with torch.no_grad():
        enc = model.encoder(**{k: v for k, v in net.items() if k != "prev_output_tokens"})
        memory = model.decoder.initial_state(enc)["memory"]
        nset = [(d, p) for d, p in BATCH] + [(0, 2)]
        last = []
        for d, p in nset:
            src, tgt = docs[d][p]
            prev = torch.cat([torch.tensor([EOS]), tgt[:-1]]).unsqueeze(0)
            with model.memory_disabled():
                e = model.encoder(src.unsqueeze(0), torch.tensor([src.numel()]))
                _, extra = model.decoder(prev, encoder_out=e)
            last.append(extra["states"][0][0, -1])
        last = torch.stack(last)
        for b in range(len(BATCH)):
            rows = [r for r in net["ctx_index"][b].tolist() if r >= 0]
            if not rows:
                assert not memory[b].any()
                continue
            q = last[b] + model.decoder.tgt_query_proj(enc["encoder_final"][0][b])
            w = torch.softmax(last[rows] @ q, 0)
            assert torch.allclose(memory[b], w @ last[rows], atol=1e-5), b


def test_training_step_reaches_the_memory_parameters():
    model = tiny("m2o_both", dropout=0.1).train()
    sample = make_sample(corpus(), BATCH)
    lprobs = torch.log_softmax(model(**sample["net_input"])[0], -1)
    loss = -lprobs.gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)[sample["target"].ne(PAD)].sum()
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    for name in ("encoder.doc_rnn.rnn.rnn.weight_ih_l0", "decoder.tgt_query_proj.weight",
                 "decoder.output_src_memory.weight", "decoder.output_tgt_memory.weight"):
        assert grads[name] is not None and grads[name].abs().sum() > 0, name
    assert model.training and model.decoder.training  # the memory pass restored the mode


# ------------------------------------------------------------------------------------------ pseudo-likelihood (Eq. 3.2)
PL_DOCS = (4, 3, 1)  # dataset indices: document 0 = 0..3, document 1 = 4..6, document 2 = 7


def task_dataset(docs, generated=None):
    """The ``doc_translation`` task's DocumentPairDataset over ``docs`` (offline context: every other sentence of
    the document), target context ``generated`` (one tensor per sentence, dataset order) or, if None, gold."""
    import numpy as np
    from fairseq.data import LanguagePairDataset

    from fairseq_ext.data.documents import DocumentIndex, DocumentPairDataset

    flat = [pair for doc in docs for pair in doc]
    src, tgt = [s for s, _ in flat], [t for _, t in flat]
    d = make_dictionary(V)
    pair = LanguagePairDataset(src, np.array([s.numel() for s in src]), d, tgt, np.array([t.numel() for t in tgt]), d,
                               left_pad_source=True, shuffle=False)
    return DocumentPairDataset(pair, DocumentIndex.from_lengths([len(doc) for doc in docs]),
                               target_context="gold" if generated is None else generated)


def generated_translations(n, seed=11):
    """Stand-ins for the stage-1 model's translations (different from the references)."""
    g = torch.Generator().manual_seed(seed)
    return [sentence(g, 1 + i % 4) for i in range(n)]


def sentence_nll(model, batch):
    """{dataset index: summed token NLL of its reference} of a batch (the terms cross_entropy adds up)."""
    lprobs = model.get_normalized_probs(model(**batch["net_input"]), log_probs=True)
    target = batch["target"]
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(target.eq(PAD), 0.0).sum(1)
    return dict(zip(batch["id"].tolist(), nll))


@pytest.mark.parametrize("variant", sorted(TINY_VARIANTS))
def test_pseudo_likelihood_loss_is_the_sum_of_per_sentence_losses(variant):
    """Eq. 3.2 (argmax_θ Π_d Π_j P_θ(y^j | x^j, Y^-j, X^-j)): the training loss of a document batch from the task's
    collater (fairseq's ``cross_entropy``, train mode) equals the sum over its sentences j of the loss of j alone in a
    batch that holds only j and its own context (its context row: the other sentences of its document as extra
    rows), for whole documents and for a batch that cuts documents; per row as well; and the sample size is the
    sum of the sentences' target tokens."""
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    n = sum(PL_DOCS)
    ds = task_dataset(corpus(PL_DOCS), generated_translations(n))
    model = tiny(variant).train()
    crit = CrossEntropyCriterion(types.SimpleNamespace(target_dictionary=make_dictionary(V)), sentence_avg=False)
    for ids in (list(range(n)), [1, 2, 5]):  # whole documents; a cut batch (extra rows 0, 3, 4, 6)
        batch = ds.collater([ds[i] for i in ids])
        assert (batch["ctx_id"].numel() > 0) == (len(ids) < n)
        loss, sample_size, _ = crit(model, batch)
        alone = {i: crit(model, ds.collater([ds[i]])) for i in ids}
        assert sample_size == sum(a[1] for a in alone.values()) == batch["ntokens"]
        assert torch.allclose(loss, sum(a[0] for a in alone.values()), rtol=1e-5, atol=1e-4), (loss, alone)
        rows = sentence_nll(model, batch)
        for i in ids:
            assert torch.allclose(rows[i], alone[i][0], rtol=1e-5, atol=1e-4), i


@pytest.mark.parametrize("variant", ["m2c_tgt", "m2o_both", "prev_tgt"])
def test_pseudo_likelihood_conditions_on_the_other_sentences_translations_only(variant, monkeypatch):
    """Eq. 3.2 / Eq. 3.4 with the target memory (§3.2; PREV TGT, Table 3.6): the term of sentence i is
    P(y^i | x^i, Y^-i, X^-i).

    (1) Changing the context translation of sentence j (row j of ``ctx_tgt_tokens``, the generated one) changes the
        loss of the sentence i = j + 1 of its document, which reads it, and no loss of another document.
    (2) Sentence i's own reference y^i enters no context: with the generated target context, changing it changes
        its own loss only -- every memory reading of the batch and every other sentence's loss stay the same.
    (3) With the gold target context (row i of ``ctx_tgt_tokens`` = y^i), i's own row is never one of its memory
        cells: the target-memory cells read for i (M[Y^-i]) are unchanged when y^i changes, while those of a
        sentence that has i in its context change (spec §10.2: s^i enters only the query); PREV TGT's reading
        for i (the translation at distance -1) is unchanged, that of i + 1 changes."""
    import fairseq_ext.models.docmem as docmem_module

    n = sum(PL_DOCS)
    docs = corpus(PL_DOCS)
    gen = generated_translations(n)
    model = tiny(variant)
    cells_seen = []
    real_read = docmem_module.memnet_read

    def spy(query, cells, mask):  # the decoder's target-memory read is the last one of a forward
        cells_seen.append((cells.detach().clone(), mask.clone()))
        return real_read(query, cells, mask)

    monkeypatch.setattr(docmem_module, "memnet_read", spy)

    def run(docs_, gen_):
        ds = task_dataset(docs_, gen_)
        batch = ds.collater([ds[i] for i in range(n)])
        net = batch["net_input"]
        row = {i: b for b, i in enumerate(batch["id"].tolist())}
        cells_seen.clear()
        with torch.no_grad():
            enc = model.encoder(**{k: v for k, v in net.items() if k != "prev_output_tokens"})
            memory = model.decoder.initial_state(enc)["memory"]
            cells = cells_seen[-1] if cells_seen else None
            nll = sentence_nll(model, batch)
        for b, i in enumerate(batch["id"].tolist()):
            assert b not in net["ctx_index"][b].tolist()  # the task never puts a sentence in its own context
        return nll, {i: memory[b] for i, b in row.items()}, cells, row

    def close(a, b):
        return torch.allclose(a, b, atol=1e-6)

    base, base_mem, _, _ = run(docs, gen)
    # (1) j = 0 -> i = 1
    gen_j = list(gen)
    gen_j[0] = torch.tensor([5, 6, 7, 8, 9, EOS])
    changed, _, _, _ = run(docs, gen_j)
    assert not torch.allclose(changed[1], base[1], atol=1e-4)
    assert all(close(changed[k], base[k]) for k in range(4, n))
    # (2) the reference of i = 1 changes; its generated translation does not
    docs_i = [list(doc) for doc in docs]
    docs_i[0][1] = (docs[0][1][0], torch.tensor([9, 8, 7, 6, 5, 4, EOS]))
    changed, mem, _, _ = run(docs_i, gen)
    assert not torch.allclose(changed[1], base[1], atol=1e-4)
    assert all(close(changed[k], base[k]) for k in range(n) if k != 1)
    assert all(close(mem[k], base_mem[k]) for k in range(n))
    # (3) gold target context: row 1 = y^1
    _, gold_mem, gold_cells, row = run(docs, None)
    _, mem, cells, row_i = run(docs_i, None)
    if variant == "prev_tgt":
        assert close(mem[1], gold_mem[1]) and not close(mem[2], gold_mem[2])
    else:
        (c0, m0), (c1, m1) = gold_cells, cells
        assert torch.equal(m0[row[1]], m1[row_i[1]]) and close(c0[row[1]], c1[row_i[1]])
        assert not close(c0[row[0]], c1[row_i[0]])  # sentence 0 reads y^1 as one of its cells


# ------------------------------------------------------------------------------------------ stage 1 / warm start


@pytest.mark.parametrize("variant", ["m2c_both", "m2o_both", "m2c_both_conditional", "jean2017", "prev_tgt"])
def test_zero_memory_is_the_sentence_model_bit_for_bit(variant):
    """Every sentence parameter has rnnsearch's name and shape; with the memories off the document model
    computes exactly what the rnnsearch model with those parameters computes."""
    model = tiny(variant)
    variant_kw = {k: v for k, v in TINY_VARIANTS[variant].items() if k in ("decoder_variant", "decoder_layers")}
    sent = rnnsearch_twin({"decoder_variant": "plain", **variant_kw})
    sd = sent.state_dict()
    doc_only = set(model.state_dict()) - set(sd)
    assert set(sd) <= set(model.state_dict())
    assert doc_only and all(k.startswith(DOC_PARAM_PREFIXES) for k in doc_only), doc_only
    for k, v in sd.items():
        assert model.state_dict()[k].shape == v.shape, k
    model.load_state_dict(sd)  # a sentence checkpoint: the warm start
    sample = make_sample(corpus(), BATCH)
    with torch.no_grad(), model.memory_disabled():
        assert torch.equal(model(**sample["net_input"])[0], sent(**sample["net_input"])[0])
    zero = build_model("docmem_tiny", vocab=V, zero_memory=True, **TINY_VARIANTS[variant])
    zero.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(zero(**sample["net_input"])[0], sent(**sample["net_input"])[0])


def test_warm_start_from_an_rnnsearch_state_dict(caplog):
    model = tiny("m2c_both")
    assert isinstance(model, SentenceWarmStartMixin)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sent = rnnsearch_twin({"decoder_variant": "plain"})
    with caplog.at_level("INFO"):
        model.load_state_dict(sent.state_dict())  # the mixin: sentence tensors copied, document ones kept
    assert "warm start from a sentence checkpoint" in caplog.text
    after = model.state_dict()
    for k, v in after.items():
        if k.startswith(DOC_PARAM_PREFIXES):
            assert torch.equal(v, before[k]), k
        else:
            assert torch.equal(v, sent.state_dict()[k]), k


# ------------------------------------------------------------------------------------------ Table 3.3
TABLE_3_3 = {  # Fr->En (|V_T| = 21K): parameters over S-NMT, in millions (48.8-42.5, 43.8-42.5, ...)
    ("m2c", "src"): 6.3, ("m2c", "tgt"): 1.3, ("m2c", "both"): 7.6,
    ("m2o", "src"): 26.2, ("m2o", "tgt"): 11.3, ("m2o", "both"): 37.5,
}


@pytest.mark.parametrize("integration,memories", sorted(TABLE_3_3))
def test_parameter_count_matches_table_3_3(integration, memories):
    """Thesis size, |V_T| = 21,000: the extra parameters over rnnsearch_maruf are exactly
    :func:`extra_parameters` (doc bi-GRU 4,724,736; M2C 3·512·1024 / W_at 512·1024 + 3·512·512; M2O
    21000·1024 / W_at + 21000·512), which is Table 3.3's delta to its 0.1M rounding."""
    vocab = 21000
    doc = build_model(f"docmem_{integration}_{memories}", vocab=vocab, device="meta")
    sent = build_model("rnnsearch_maruf", vocab=vocab, device="meta")
    extra = n_params(doc) - n_params(sent)
    assert extra == extra_parameters(512, 1024, vocab, memories, integration)
    assert abs(extra / 1e6 - TABLE_3_3[(integration, memories)]) <= 0.05 + 1e-9


def test_parameter_formula_by_hand():
    doc_gru = 2 * 3 * 512 * (1024 + 512 + 2)
    assert doc_gru == 4_724_736
    assert extra_parameters(512, 1024, 21000, "src", "m2c") == doc_gru + 3 * 512 * 1024
    assert extra_parameters(512, 1024, 21000, "tgt", "m2c") == 512 * 1024 + 3 * 512 * 512
    assert extra_parameters(512, 1024, 21000, "src", "m2o") == doc_gru + 21000 * 1024
    assert extra_parameters(512, 1024, 21000, "tgt", "m2o") == 512 * 1024 + 21000 * 512


@pytest.mark.parametrize("arch,base", [("docmem_m2c_both_bench", "rnnsearch_bench"),
                                       ("docmem_m2o_both_bench", "rnnsearch_bench"),
                                       ("ctx_prevtgt_rnn_bench", "rnnsearch_bench"),
                                       ("ctx_jean2017_rnn", "rnnsearch_maruf")])
def test_bench_and_baseline_parameter_counts(arch, base):
    vocab = 8000
    doc = build_model(arch, vocab=vocab, device="meta")
    sent = build_model(base, vocab=vocab, device="meta")
    extra = n_params(doc) - n_params(sent)
    if arch.startswith("docmem"):
        integration = arch.split("_")[1]
        assert extra == extra_parameters(576, 576, vocab, "both", integration)
    elif arch.startswith("ctx_prevtgt"):
        assert extra == 3 * 576 * 576  # the previous translation's state (576) into the first layer
    else:
        assert extra == 3 * 512 * 1024 + (512 * 256 + 1024 * 256 + 256 + 256)  # input block + 2nd attention


# ------------------------------------------------------------------------------------------ RNNLM sentence vectors
def lm_checkpoint(path, seed):
    """A 2-layer lstm_lm checkpoint on the toy dictionary; returns the model."""
    return lstm_lm_checkpoint(path, make_dictionary(V), seed, layers=2)


def test_rnnlm_sentence_vectors_are_the_two_lms_last_states(tmp_path):
    fwd = lm_checkpoint(tmp_path / "fwd.pt", 1)
    bwd = lm_checkpoint(tmp_path / "bwd.pt", 2)
    enc = LMSentenceEncoder.from_checkpoints(str(tmp_path / "fwd.pt"), str(tmp_path / "bwd.pt"), make_dictionary(V))
    assert all(not p.requires_grad for p in enc.parameters())
    words = [torch.tensor([5, 9, 7]), torch.tensor([11, 4, 6, 8, 30])]
    src = data_utils.collate_tokens([torch.cat([w, torch.tensor([EOS])]) for w in words], PAD, left_pad=True)
    vectors = enc(src)
    with torch.no_grad():
        for i, w in enumerate(words):
            f, _ = fwd.decoder.extract_features(torch.cat([torch.tensor([EOS]), w]).unsqueeze(0))
            b, _ = bwd.decoder.extract_features(torch.cat([torch.tensor([EOS]), w.flip(0)]).unsqueeze(0))
            assert torch.allclose(vectors[i], torch.cat([f[0, -1], b[0, -1]]), atol=1e-6)


def test_rnnlm_source_memory_model(tmp_path):
    lm_checkpoint(tmp_path / "fwd.pt", 1)
    lm_checkpoint(tmp_path / "bwd.pt", 2)
    spec = f"{tmp_path / 'fwd.pt'},{tmp_path / 'bwd.pt'}"
    model = tiny("m2c_src", src_mem_encoder="rnnlm", src_mem_lm=spec)
    assert model.encoder.doc_rnn.rnn.rnn.input_size == 12  # 2 x the LM hidden size
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    assert frozen == n_params(model.encoder.sentence_lm) and trainable + frozen == n_params(model)
    sample = make_sample(corpus(), BATCH)
    with torch.no_grad():
        full = model(**sample["net_input"])[0]
        assert torch.allclose(full, step_by_step(model, sample), atol=1e-5)
    # a trained model loads without the LM files (sizes kept in its args)
    again = build_model("docmem_tiny", vocab=V, seed=None, doc_memories="src", src_mem_encoder="rnnlm",
                        src_mem_lm="/nonexistent/f.pt,/nonexistent/b.pt", src_mem_lm_dims="8,6,2")
    again.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(again.eval()(**sample["net_input"])[0], full)

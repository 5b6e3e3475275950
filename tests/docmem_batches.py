"""The docmem tests' toys (not a test module): ``docmem_tiny`` variants, document batches built by hand following
the batch contract of the ``doc_translation`` task (``ctx_*`` keys), the incremental decoding loop and the rnnsearch
sentence model of the same sizes."""
import torch
from fairseq.data import data_utils

from harness import build_model


V = 40
PAD, EOS = 1, 2


TINY_VARIANTS = {  # (kwargs of docmem_tiny)
    "m2c_src": dict(doc_memories="src"),
    "m2c_tgt": dict(doc_memories="tgt"),
    "m2c_both": dict(doc_memories="both"),
    "m2o_both": dict(doc_memories="both", memory_integration="m2o"),
    "m2o_src": dict(doc_memories="src", memory_integration="m2o"),
    "m2c_both_conditional": dict(doc_memories="both", decoder_variant="conditional", decoder_layers=1),
    "prev_tgt": dict(doc_context="prev_tgt"),
    "jean2017": dict(doc_context="jean2017"),
}


def tiny(variant="m2c_both", seed=0, **kw):
    return build_model("docmem_tiny", vocab=V, seed=seed, **{**TINY_VARIANTS[variant], **kw})


# ------------------------------------------------------------------------------------------ document batches
def sentence(g, n):
    return torch.cat([torch.randint(4, V, (n,), generator=g), torch.tensor([EOS])])


def corpus(doc_lengths=(4, 2, 1), seed=3):
    """Documents as lists of (source, target) token tensors (fairseq formats, ending in EOS)."""
    g = torch.Generator().manual_seed(seed)
    return [[(sentence(g, 3 + (i + d) % 4), sentence(g, 2 + (i * 3 + d) % 5)) for i in range(n)]
            for d, n in enumerate(doc_lengths)]


def make_sample(docs, batch, context_size=0, with_tgt=True):
    """The contract's sample for the batch sentences ``batch`` [(doc, position)] in that order: offline
    context (every other sentence of the document, the ``context_size`` nearest if > 0), the other
    sentences of the batch's documents as extra rows."""
    in_batch = set(batch)
    extras = [(d, p) for d in sorted({d for d, _ in batch}) for p in range(len(docs[d])) if (d, p) not in in_batch]
    nset = list(batch) + extras
    row = {key: i for i, key in enumerate(nset)}
    ctx = []
    for d, p in batch:
        others = [q for q in range(len(docs[d])) if q != p]
        if context_size:
            others = sorted(sorted(others, key=lambda q: (abs(q - p), q))[:context_size])
        ctx.append([(row[(d, q)], q - p) for q in others])
    K = max((len(c) for c in ctx), default=0)
    index = torch.full((len(batch), K), -1, dtype=torch.long)
    distance = torch.zeros((len(batch), K), dtype=torch.long)
    for b, c in enumerate(ctx):
        for k, (r, dist) in enumerate(c):
            index[b, k], distance[b, k] = r, dist
    src = [docs[d][p][0] for d, p in batch]
    tgt = [docs[d][p][1] for d, p in batch]
    extra_src = [docs[d][p][0] for d, p in extras]
    net_input = {
        "src_tokens": data_utils.collate_tokens(src, PAD, left_pad=True),
        "src_lengths": torch.tensor([s.numel() for s in src]),
        "prev_output_tokens": data_utils.collate_tokens(tgt, PAD, EOS, move_eos_to_beginning=True),
        "ctx_src_tokens": (data_utils.collate_tokens(extra_src, PAD, left_pad=True) if extras
                           else torch.full((0, 1), PAD)),
        "ctx_src_lengths": torch.tensor([s.numel() for s in extra_src], dtype=torch.long),
        "ctx_index": index,
        "ctx_distance": distance,
    }
    if with_tgt:
        all_tgt = [docs[d][p][1] for d, p in nset]
        net_input["ctx_tgt_tokens"] = data_utils.collate_tokens(all_tgt, PAD)
        net_input["ctx_tgt_lengths"] = torch.tensor([t.numel() for t in all_tgt])
    return {"id": torch.arange(len(batch)), "net_input": net_input,
            "target": data_utils.collate_tokens(tgt, PAD),
            "doc_index": torch.tensor([d for d, _ in batch]), "doc_pos": torch.tensor([p for _, p in batch])}


# doc 0 has 4 sentences (3 in the batch, one extra row), doc 1 two, doc 2 one (empty memory)
BATCH = [(0, 1), (1, 0), (0, 0), (2, 0), (0, 3), (1, 1)]


def logits_of(model, sample):
    with torch.no_grad():
        return model(**sample["net_input"])[0]


def per_sentence(logits, sample):
    """{(doc, pos): logits over its real target positions}."""
    keys = list(zip(sample["doc_index"].tolist(), sample["doc_pos"].tolist()))
    lengths = sample["target"].ne(PAD).sum(1).tolist()
    return {k: logits[b, : lengths[b]] for b, k in enumerate(keys)}


def step_by_step(model, sample, permute_at=None, order=None):
    """Logits one step at a time with an incremental state; at ``permute_at`` the batch is reordered as
    beam search does (encoder output, incremental state)."""
    net = sample["net_input"]
    prev = net["prev_output_tokens"]
    enc = model.encoder(**{k: v for k, v in net.items() if k != "prev_output_tokens"})
    state, outs = {}, []
    for t in range(prev.size(1)):
        if t == permute_at:
            enc = model.encoder.reorder_encoder_out(enc, order)
            model.decoder.reorder_incremental_state_scripting(state, order)
            prev = prev.index_select(0, order)
            outs = [o.index_select(0, order) for o in outs]
        outs.append(model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0])
    return torch.cat(outs, 1)


def rnnsearch_twin(model_kwargs, seed=1):
    """The rnnsearch sentence model with docmem_tiny's sizes."""
    kw = {"encoder_embed_dim": 16, "encoder_hidden_size": 16, "decoder_layers": 2, "dropout": 0.0, **model_kwargs}
    return build_model("rnnsearch", vocab=V, seed=seed, **kw)

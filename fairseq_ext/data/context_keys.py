"""Which models of ``doc_translation`` (Maruf 2019 ch. 3-4) receive the context keys of a document batch
(:mod:`fairseq_ext.data.documents`), and a document batch cut to some of its rows. The same routing serves the
history keys of ``conversation_translation`` (ch. 5, :mod:`fairseq_ext.data.conversations`) and the memory keys
of ``seg_translation`` (Gu 2019 ch. 4): :func:`opts_in` and :func:`strip_keys` take the opt-in attribute and the
key names.

fairseq's sentence models have fixed ``forward`` arguments
(``TransformerModel.forward(src_tokens, src_lengths, prev_output_tokens, ...)``) and fail on unknown
keyword arguments, so the task gives the context keys only to a model that opts in with the class
attribute ``uses_document_context = True`` (looked up through DDP/proxy wrappers, see
:func:`uses_document_context`, :func:`unwrap_model`); for any other model :func:`strip_context` removes them from
``net_input`` (and ``ctx_id`` from the sample) before ``train_step``/``valid_step``/``inference_step``.
In ``inference_step`` the keys are also kept when the *generator* sets ``uses_document_context = True``
(e.g. ``doc_bcd``, which may run a sentence model next to the document model and routes the keys
itself); a plain generator with a mix of opting-in and sentence models is an error. So any sentence
model trains and decodes on ``doc_translation`` unchanged, and the concatenation baseline needs no
model change at all.

:func:`subset_doc_sample` keeps some batch rows of a document sample (``translation_decoding`` drops the empty
sources before decoding); the other batch rows become extra context rows, so every kept sentence keeps exactly
its context.
"""
import torch
from fairseq.data import data_utils

from fairseq_ext.data.samples import subset_sample

CONTEXT_NET_INPUT_KEYS = ("ctx_src_tokens", "ctx_src_lengths", "ctx_index", "ctx_distance",
                          "ctx_tgt_tokens", "ctx_tgt_lengths")
CONTEXT_SAMPLE_KEYS = ("ctx_id",)


def wrapped_levels(obj):
    """``obj`` and the models it wraps, outermost first (DDP/proxy wrappers: up to four ``.module`` levels)."""
    yield obj
    for _ in range(4):
        inner = getattr(obj, "module", None)
        if not isinstance(inner, torch.nn.Module):
            return
        obj = inner
        yield obj


def unwrap_model(model):
    """The model inside DDP/proxy wrappers (:func:`wrapped_levels`' innermost)."""
    for model in wrapped_levels(model):
        pass
    return model


def opts_in(obj, attr: str = "uses_document_context") -> bool:
    """Whether a model or a generator sets the class attribute ``attr``, on itself or on a model it wraps
    (:func:`wrapped_levels`)."""
    return any(getattr(level, attr, False) for level in wrapped_levels(obj))


def uses_document_context(obj) -> bool:
    """Whether a model (possibly DDP/proxy-wrapped) or a generator opts in to the context keys."""
    return opts_in(obj, "uses_document_context")


def has_context(sample, net_input_keys=CONTEXT_NET_INPUT_KEYS) -> bool:
    return isinstance(sample, dict) and isinstance(sample.get("net_input"), dict) and \
        any(k in sample["net_input"] for k in net_input_keys)


def strip_keys(sample, net_input_keys=CONTEXT_NET_INPUT_KEYS, sample_keys=CONTEXT_SAMPLE_KEYS):
    """A shallow copy of ``sample`` without ``net_input_keys`` (in ``net_input``) and ``sample_keys``; the sample
    itself when it has none of them."""
    if not (has_context(sample, net_input_keys) or
            isinstance(sample, dict) and isinstance(sample.get("net_input"), dict) and
            any(k in sample for k in sample_keys)):
        return sample
    out = {k: v for k, v in sample.items() if k not in sample_keys}
    out["net_input"] = {k: v for k, v in sample["net_input"].items() if k not in net_input_keys}
    return out


def strip_context(sample):
    """A shallow copy of ``sample`` without the context keys (for models that do not opt in)."""
    return strip_keys(sample, CONTEXT_NET_INPUT_KEYS, CONTEXT_SAMPLE_KEYS)


def subset_doc_sample(sample, keep: torch.Tensor, left_pad_source: bool, pad: int, eos: int):
    """The batch rows ``keep`` of a document sample; the other batch rows become extra context rows
    (they may be the context of kept rows), so every kept sentence keeps exactly its context."""
    net = sample["net_input"]
    B = net["src_tokens"].size(0)
    E = net["ctx_src_tokens"].size(0)
    keep_l = keep.tolist()
    kept = set(keep_l)
    dropped = [b for b in range(B) if b not in kept]
    order = keep_l + dropped + list(range(B, B + E))  # old N-set rows in their new order
    new_row = torch.empty(B + E, dtype=torch.long)
    new_row[torch.tensor(order, dtype=torch.long)] = torch.arange(B + E)
    rest = strip_context(sample)
    out = subset_sample(rest, keep, B)
    dev = net["src_tokens"].device
    sources = [net["src_tokens"][b][net["src_tokens"][b].ne(pad)] for b in dropped] + \
              [net["ctx_src_tokens"][e][net["ctx_src_tokens"][e].ne(pad)] for e in range(E)]
    onet = out["net_input"]
    if sources:
        onet["ctx_src_tokens"] = data_utils.collate_tokens(sources, pad, eos, left_pad_source)
        onet["ctx_src_lengths"] = torch.tensor([s.numel() for s in sources], dtype=torch.long, device=dev)
    else:
        onet["ctx_src_tokens"] = net["ctx_src_tokens"]
        onet["ctx_src_lengths"] = net["ctx_src_lengths"]
    idx = net["ctx_index"].index_select(0, keep.to(dev))
    dist = net["ctx_distance"].index_select(0, keep.to(dev))
    mapped = torch.where(idx.ge(0), new_row.to(dev)[idx.clamp(min=0)], idx)
    K = int(mapped.ge(0).sum(1).max()) if mapped.numel() else 0
    onet["ctx_index"], onet["ctx_distance"] = mapped[:, :K].contiguous(), dist[:, :K].contiguous()
    if "ctx_tgt_tokens" in net:
        o = torch.tensor(order, dtype=torch.long, device=dev)
        onet["ctx_tgt_tokens"] = net["ctx_tgt_tokens"].index_select(0, o)
        onet["ctx_tgt_lengths"] = net["ctx_tgt_lengths"].index_select(0, o)
    ids = sample["id"]
    old_extra = sample.get("ctx_id", torch.zeros(0, dtype=torch.long))
    out["ctx_id"] = torch.cat([ids[torch.tensor(dropped, dtype=torch.long, device=ids.device)].to(old_extra),
                               old_extra]) if dropped else old_extra
    return out

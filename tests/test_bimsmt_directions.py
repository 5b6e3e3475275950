"""Bi-MSMT (Maruf 2019 ch. 5): the two directions' context paths are mirror images. Swapping the language tags
of a conversation together with the parameters of the two direction models and of the two language-specific
Turn-RNNs gives the same outputs row by row (Lang-Specific S-Attention, Eq. 5.3 over sentence vectors, with the
gate of Eq. 5.1 and the reduction of Eq. 5.2), and the F->En loss trains the English Turn-RNN that encodes its
English history."""
import copy

import pytest
import torch

import fairseq_ext  # noqa: F401  (registrations)
from harness import build_model
from test_bimsmt import CONVS, VOCAB, toy_dataset, toy_sample

ARCH = "bimsmt_rnn_tiny"
MIRRORED = [(name, [1 - lang for lang in langs]) for name, langs in CONVS]
SWAP = {f"{m}.{k}.": f"{m}.{1 - k}." for m in ("directions", "turn_rnns", "sent_encoders") for k in (0, 1)}


def renamed(name: str) -> str:
    """The parameter of the other language's module (``directions.0.x`` <-> ``directions.1.x``, ...)."""
    return next((b + name[len(a):] for a, b in SWAP.items() if name.startswith(a)), name)


def mirrored(model):
    """A copy of ``model`` whose direction models and Turn-RNNs of language 0 and 1 are exchanged."""
    other = copy.deepcopy(model)
    other.load_state_dict({renamed(k): v for k, v in model.state_dict().items()})
    return other.eval()


@pytest.mark.parametrize("variant", ["lang_sent_attn", "lang_attn"])
def test_swapping_languages_and_direction_models_gives_the_same_outputs(variant):
    model = build_model(ARCH, vocab=VOCAB, src_ctx=variant)
    sample, flipped = toy_sample(toy_dataset()), toy_sample(toy_dataset(MIRRORED))
    assert torch.equal(flipped["net_input"]["direction"], 1 - sample["net_input"]["direction"])
    with torch.no_grad():
        logits, extra = model(**sample["net_input"])
        logits_m, extra_m = mirrored(model)(**flipped["net_input"])
    torch.testing.assert_close(logits_m, logits, rtol=1e-5, atol=1e-6)
    for d in (0, 1):  # the attention over the other language's sentences, row by row
        assert torch.equal(extra_m["rows"][1 - d], extra["rows"][d])
        torch.testing.assert_close(extra_m["context"][1 - d]["src_p_other"], extra["context"][d]["src_p_other"])
    with torch.no_grad(), model.context_disabled():
        base = model(**sample["net_input"])[0]
    for d in (0, 1):  # both directions read their context (rows with a history change)
        rows = extra["rows"][d][extra["context"][d]["src_has_history"]]
        assert rows.numel() and not torch.allclose(logits[rows], base[rows])


def test_foreign_to_english_loss_trains_the_english_turn_rnn_and_its_own_context():
    model = build_model(ARCH, vocab=VOCAB, src_ctx="lang_sent_attn").train()
    sample = toy_sample(toy_dataset())
    logits, _ = model(**sample["net_input"])
    rows = sample["net_input"]["direction"].eq(1)
    lprobs = torch.log_softmax(logits[rows], -1)
    loss = -lprobs.gather(-1, sample["target"][rows].unsqueeze(-1)).sum()
    loss.backward()

    def norm(prefix):
        return sum(float(p.grad.norm()) for n, p in model.named_parameters() if n.startswith(prefix)
                   and p.grad is not None)

    assert norm("turn_rnns.0.") > 0  # the English history of F->En sentences
    assert norm("directions.1.src_context.") > 0
    assert norm("directions.0.") == 0  # sentence vectors are gradient-stopped: the En->F model is untouched


def _grads(model, sample):
    model.train()
    model.zero_grad()
    logits, _ = model(**sample["net_input"])
    lprobs = torch.log_softmax(logits, -1)
    (-lprobs.gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)[sample["target"].ne(1)].sum()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_training_gradients_are_mirror_images():
    model = build_model(ARCH, vocab=VOCAB, src_ctx="lang_sent_attn")
    other = mirrored(model)
    g, g_m = _grads(model, toy_sample(toy_dataset())), _grads(other, toy_sample(toy_dataset(MIRRORED)))
    assert set(g) == {renamed(n) for n in g_m}
    for n, v in g_m.items():
        torch.testing.assert_close(v, g[renamed(n)], rtol=1e-4, atol=1e-6)

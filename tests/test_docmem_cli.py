"""Document-context NMT with memory networks (Maruf 2019 ch. 3), the command lines: fairseq-train /
fairseq-generate --user-dir on the tiny Bible slice (docmem, ctx_jean2017_rnn, block-coordinate-descent decoding
through the task) and the greedy generator's document context."""
import torch

from harness import build_model, toy_batch
from fairseq_ext.generators.decoding import GreedyGenerator
from fairseq_ext.generators.doc_bcd import DocBCDGenerator


# ------------------------------------------------------------------------------------------ command line
def test_cli_train_and_generate_then_bcd_through_the_task(tiny_bin, tmp_path):
    """fairseq-train / fairseq-generate --user-dir on the tiny Bible slice with gold target context; then
    doc_bcd through the task's own document batches (K = 0 is the zero-memory greedy output, K = 1 Jacobi
    and Gauss-Seidel run)."""
    from fairseq import checkpoint_utils

    from harness import fairseq, hypotheses, n_lines

    save = tmp_path / "ckpt"
    common = ["--task", "doc_translation", "--doc-target-context", "gold"]
    fairseq("train", tiny_bin, *common, "--arch", "docmem_tiny", "--criterion", "cross_entropy",
            "--optimizer", "sgd", "--lr", "0.1", "--clip-norm", "5", "--max-tokens", "1000", "--max-update", "4",
            "--save-dir", save, "--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "simple",
            "--log-interval", "1", "--no-epoch-checkpoints")
    ckpt = save / "checkpoint_last.pt"
    assert ckpt.exists()
    out = fairseq("generate", tiny_bin, *common, "--path", ckpt, "--cpu", "--beam", "1", "--max-len-b", "20").stdout
    n = n_lines(tiny_bin / "test.ids")
    assert len(hypotheses(out)) == n
    # the generator of --decoding-algorithm doc_bcd (two-pass decoding, no target context from the task)
    bcd = fairseq("generate", tiny_bin, "--task", "doc_translation", "--path", ckpt, "--cpu", "--beam", "1",
                  "--max-len-b", "20", "--decoding-algorithm", "doc_bcd", "--doc-iterations", "1").stdout
    assert len(hypotheses(bcd)) == n

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(ckpt)], arg_overrides={"data": str(tiny_bin), "doc_target_context": "none"})
    model = models[0].eval()
    assert model.uses_document_context and not model.zero_memory
    task.load_dataset("test")
    batches = list(task.get_batch_iterator(dataset=task.dataset("test"), max_tokens=200).next_epoch_itr(shuffle=False))
    with torch.no_grad():  # the task hands the document context to the model
        net = batches[0]["net_input"]
        enc = model.encoder(**{k: v for k, v in net.items() if k != "prev_output_tokens"})
    assert bool(enc["ctx_index"][0].ge(0).any()) and bool(enc["doc_src_context"][0].abs().sum() > 0)
    d = task.target_dictionary
    results = {}
    for name, kw in {"k0": dict(iterations=0), "jacobi": dict(iterations=1),
                     "gauss_seidel": dict(iterations=1, update="gauss_seidel")}.items():
        gen = DocBCDGenerator([model], d, max_len_b=20, **kw)
        hyps = {}
        for sample in batches:
            assert "ctx_tgt_tokens" not in sample["net_input"]
            for i, h in zip(sample["id"].tolist(), task.inference_step(gen, [model], sample)):
                hyps[i] = h[0]["tokens"].tolist()
        assert len(hyps) == n
        results[name] = hyps
    greedy = {}
    with model.memory_disabled():
        for sample in batches:
            net = sample["net_input"]
            plain = {"net_input": {"src_tokens": net["src_tokens"], "src_lengths": net["src_lengths"]}}
            for i, h in zip(sample["id"].tolist(), GreedyGenerator([model], d, max_len_b=20).generate([model], plain)):
                greedy[i] = h[0]["tokens"].tolist()
    assert results["k0"] == greedy


def test_cli_ctx_jean2017_rnn_trains_and_generates(tiny_bin, tmp_path):
    """The Jean et al. (2017) baseline of Table 3.4 (a second attention over the previous source sentence, its
    context vector an extra first-layer input at every step, §3.5) through the real command lines:
    ``fairseq-train --user-dir fairseq_ext --task doc_translation --arch ctx_jean2017_rnn_bench`` with its sizes
    overridden to a tiny model (emb 16, encoder 2x16, decoder 32, attention 16; no tiny preset of this arch), then
    ``fairseq-generate`` (beam 2: the previous-sentence attention state is reordered with the beam) gives exactly one
    hypothesis per test sentence; the checkpoint has the second attention."""
    from harness import generate, hypotheses, n_lines, train

    dims = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--decoder-out-embed-dim", "16",
            "--encoder-hidden-size", "16", "--decoder-hidden-size", "32", "--attention-dim", "16"]
    ckpt = train(tiny_bin, tmp_path / "jean", ["--arch", "ctx_jean2017_rnn_bench", *dims], task="doc_translation",
                 criterion="cross_entropy", max_update=2, extra=["--disable-validation"])
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert any(k.startswith("decoder.jean_attention.") for k in state["model"])
    assert state["model"]["decoder.embed_tokens.weight"].shape[1] == 16
    out = generate(tiny_bin, ckpt, task="doc_translation")
    n = n_lines(tiny_bin / "test.ids")
    assert sorted(hypotheses(out)) == list(range(n))
    assert sum(line.startswith("H-") for line in out.splitlines()) == n


def test_the_greedy_generator_gives_a_document_model_its_context():
    """--decoding-algorithm greedy (GreedyGenerator) hands the context keys to the encoder, as fairseq's beam
    search does: the memories are read, so the output differs from the context-free one."""
    from fairseq_ext.generators.decoding import GreedyGenerator

    model = build_model("docmem_tiny", vocab=60, doc_memories="src")
    src, lengths, prev = toy_batch()
    B = src.size(0)
    index = torch.tensor([[j for j in range(B) if j != i] for i in range(B)])
    net = dict(src_tokens=src, src_lengths=lengths, ctx_src_tokens=src.new_full((0, 1), 1),
               ctx_src_lengths=src.new_zeros(0), ctx_index=index, ctx_distance=index - torch.arange(B)[:, None])
    seen = {}
    encoder_forward = model.encoder.forward

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return encoder_forward(*args, **kwargs)

    model.encoder.forward = spy
    gen = GreedyGenerator([model], model.decoder.dictionary, max_len_b=8)
    with_ctx = gen.generate([model], {"net_input": net})
    assert "ctx_index" in seen and torch.equal(seen["ctx_index"], index)
    with model.memory_disabled():
        without = gen.generate([model], {"net_input": net})
    scores = [h[0]["positional_scores"] for h in with_ctx], [h[0]["positional_scores"] for h in without]
    assert any(a.shape != b.shape or not torch.allclose(a, b) for a, b in zip(*scores))

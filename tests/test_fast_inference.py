"""CPU inference: the CTranslate2 export (``fairseq-ext-export``) and the plugin's own fast path
(``fairseq-generate/-interactive --quantize int8``, :mod:`fairseq_ext.modules.fast_inference`).

* export: greedy outputs of the exported model (CTranslate2 float32) equal fairseq's (its
  SequenceGenerator, as fairseq-generate runs it), token for token, on the tiny slice, and so do the
  log-probabilities of every reference token, for PostNorm and PreNorm transformers; an unsupported
  architecture is refused with one ``error:`` line and exit status 2;
* ``--quantize int8``: the model loads through ``--user-dir``, its Linear layers run in int8, and every
  input is decoded exactly once by fairseq-generate and fairseq-interactive, also for the ScaleNorm/FixNorm
  ``twt`` (whose export, folded into RMSNorm, is tests/test_export_twt.py); and on one tiny architecture of
  every model family of the plugin, built in process, it replaces the Linear layers and the outputs stay
  finite and close to float32's; on the transformer, TwT (FixNorm), transformer_lex, the LSTM/GRU models and
  ULR/MoLE no float matrix product with a weight is left (a torch function mode follows every tensor computed
  from parameters only), also where the model reads ``.weight`` directly; fairseq's greedy outputs and
  reference scores of the int8 model stay close to float32's.

ctranslate2 is part of the ``dev`` extra (what scripts/run_tests.sh installs), so nothing here is skipped.
"""
import argparse
import re
import sys

import pytest
import torch

from harness import (TINY_TRANSFORMER, build_model, fairseq, make_dictionary, marked_dictionary, n_lines, run,
                     toy_batch, train, ulr_dir, universal_task)
from test_registry import NARROW, toy_document_input, toy_memory_input

import ctranslate2  # noqa: E402,I001  (the dev extra: a missing extra fails the module, not skips it)

PRENORM = ["--encoder-normalize-before", "--decoder-normalize-before"]
TWT_TINY = ["--arch", "twt_prenorm_fixnorm_scalenorm", "--encoder-layers", "2", "--decoder-layers", "2",
            "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
            "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
            "--decoder-attention-heads", "4", "--dropout", "0.1"]


@pytest.fixture(scope="module")
def postnorm_ckpt(tiny_bin, tmp_path_factory):
    return train(tiny_bin, tmp_path_factory.mktemp("postnorm"), TINY_TRANSFORMER)


@pytest.fixture(scope="module")
def prenorm_ckpt(tiny_bin, tmp_path_factory):
    return train(tiny_bin, tmp_path_factory.mktemp("prenorm"), TINY_TRANSFORMER + PRENORM)


@pytest.fixture(scope="module")
def twt_ckpt(tiny_bin, tmp_path_factory):
    return train(tiny_bin, tmp_path_factory.mktemp("twt"), TWT_TINY, max_update=8)


def export_cli(*args, check=True):
    return run([sys.executable, "-m", "fairseq_ext.tools.export.export", *args], check=check)


# ------------------------------------------------------------------------------------------- export
def fairseq_greedy_and_scores(ckpt, data_bin, *flags):
    """fairseq's own decoding of the test split, in this process (the package's ``greedy_check``, as
    ``fairseq-generate --beam 1 --max-len-b 50`` and ``--score-reference``): ``{id: source pieces}``, greedy
    hypotheses, reference pieces and the natural-log probability of every reference token and EOS."""
    from fairseq_ext.tools.export.greedy_check import fairseq_greedy_and_scores as decode

    out = decode(str(ckpt), str(data_bin), flags=flags)
    return out["src"], out["hyp"], out["tgt"], out["scores"]


@pytest.mark.parametrize("norm", ["postnorm", "prenorm"])
def test_export_is_equivalent_to_fairseq(tiny_bin, request, tmp_path, norm):
    """Greedy outputs identical token for token, and the log-probability of every reference token
    (fairseq's SequenceScorer against CTranslate2's score_batch) equal to 1e-3: a tiny model trained
    20 updates repeats one piece greedily, so the scores are what tell two networks apart."""
    from fairseq_ext.tools.export.export import main as export_main

    ckpt = request.getfixturevalue(f"{norm}_ckpt")
    out_dir = tmp_path / "ct2"
    assert export_main([str(ckpt), "--out", str(out_dir), "--data", str(tiny_bin)]) == 0
    assert (out_dir / "model.bin").exists()
    tr = ctranslate2.Translator(str(out_dir), device="cpu", intra_threads=1)
    src, hyp, tgt, pos = fairseq_greedy_and_scores(ckpt, tiny_bin)
    ids = sorted(src)
    assert ids == list(range(n_lines(tiny_bin / "test.ids")))
    # fairseq: at most max_len = 50 tokens, EOS forbidden before the first token (min_len 1)
    res = tr.translate_batch([src[i] for i in ids], beam_size=1, max_decoding_length=50,
                             min_decoding_length=1)
    differ = [i for i, r in zip(ids, res) if r.hypotheses[0] != hyp[i]]
    assert not differ, f"{len(differ)} of {len(ids)} differ, e.g. {hyp[differ[0]]} vs {res[differ[0]].hypotheses[0]}"
    scored = tr.score_batch([src[i] for i in ids], [tgt[i] for i in ids])
    for i, r in zip(ids, scored):
        assert len(r.log_probs) == len(pos[i]) == len(tgt[i]) + 1  # every token and EOS
        assert max(abs(a - b) for a, b in zip(r.log_probs, pos[i])) < 1e-3, i
    assert len({round(x, 2) for i in ids for x in pos[i]}) > 50  # scores that discriminate


def test_export_int8_model_translates_every_input(tiny_bin, prenorm_ckpt, tmp_path):
    from fairseq_ext.tools.export.export import main as export_main

    # --data defaults to the folder recorded in the checkpoint
    assert export_main([str(prenorm_ckpt), "--out", str(tmp_path / "ct2"), "--quantization", "int8"]) == 0
    assert '"quantization": "int8"' in (tmp_path / "ct2" / "fairseq_ext_export.json").read_text()
    lines = (tiny_bin.parent / "seg" / "test.es").read_text(encoding="utf-8").splitlines()
    tr = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    res = tr.translate_batch([ln.split() for ln in lines], beam_size=5, max_batch_size=16,
                             max_decoding_length=20)
    assert len(res) == len(lines) and all(r.hypotheses for r in res)


UNSUPPORTED = {  # arch -> words the one-line reason must contain
    "transformer_untied_pos_prenorm_fixnorm_scalenorm": "untied positional attention",
    "transformer_jas": "joint attention",
    "transformer_dc": "dual contextual",
    "transformer_lex": "lexical",
    "nat_fertility": "non-autoregressive",
    "rnnsearch": "RNN",
    "bimsmt_rnn_tiny": "conversation-history context",
    "universal_rnn_tiny": "universal lexical representation",
    "ulr_transformer_tiny": "universal lexical representation",
    "simul_agent_tiny": "READ/WRITE agent",
}


@pytest.fixture(scope="module")
def relabelled(postnorm_ckpt, tmp_path_factory):
    """A transformer checkpoint whose recorded architecture is replaced: the refusal is decided from
    the configuration, before any weight is read."""
    d = tmp_path_factory.mktemp("relabel")
    ckpt = postnorm_ckpt

    def make(arch):
        import fairseq_ext  # noqa: F401  (safe globals for torch.load)

        state = torch.load(ckpt, weights_only=True)
        state["cfg"]["model"].arch = arch
        path = d / f"{arch}.pt"
        torch.save(state, path)
        return path
    return make


def test_export_refuses_an_unsupported_architecture_in_one_line(relabelled, tmp_path):
    ckpt = relabelled("transformer_untied_pos_prenorm_fixnorm_scalenorm")
    p = export_cli(ckpt, "--out", tmp_path / "ct2", check=False)
    assert p.returncode == 2
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert err[-1].startswith(f"error: {ckpt}: architecture 'transformer_untied_pos_prenorm_fixnorm_scalenorm' "
                              f"cannot be exported to CTranslate2: (model transformer_untied_pos) ")
    assert "untied positional attention" in err[-1] and "--quantize int8" in err[-1]
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "ct2").exists()


@pytest.mark.parametrize("arch", sorted(UNSUPPORTED))
def test_export_says_why_each_family_cannot_be_exported(relabelled, tmp_path, arch):
    from fairseq_ext.tools.common import ToolError
    from fairseq_ext.tools.export.export import main

    with pytest.raises(ToolError, match=f"architecture '{arch}' cannot be exported .*{UNSUPPORTED[arch]}"):
        main([str(relabelled(arch)), "--out", str(tmp_path / "ct2")])


def test_list_archs_marks_the_transformer_presets_exportable():
    """The transformer presets export; every other model family the plugin registers has its own reason in
    ``UNSUPPORTED_MODELS`` (none gets the generic one), so all its architectures are listed."""
    from fairseq_ext.__main__ import registrations
    from fairseq_ext.tools.export.export import FOLDED_MODELS, UNSUPPORTED_MODELS, list_archs

    verdict = {a: r for a, _, r in list_archs()}
    for arch in ("transformer", "transformer_iwslt_de_en", "transformer_iwslt_small", "transformer_maruf_base",
                 "transformer_twt"):
        assert verdict[arch] is None, arch
    for arch in ("transformer_untied_pos", "transformer_jas", "nat_fertility", "rnnsearch_tiny", "transformer_lex",
                 "bimsmt_rnn", "universal_rnn", "ulr_transformer", "simul_agent"):
        assert verdict[arch], arch
    assert sorted([*UNSUPPORTED_MODELS, *FOLDED_MODELS]) == registrations()["models"]
    assert set(registrations()["architectures"]) <= set(verdict)


def test_export_rejects_options_ctranslate2_cannot_represent():
    import argparse

    from fairseq_ext.tools.export.export import unsupported_reason

    base = dict(encoder_normalize_before=True, decoder_normalize_before=True, encoder_attention_heads=4,
                decoder_attention_heads=4, decoder_embed_dim=32, activation_fn="relu")
    assert unsupported_reason("transformer", argparse.Namespace(**base)) is None
    for extra, words in [({"cross_self_attention": True}, "cross-self-attention"),
                         ({"decoder_normalize_before": False}, "normalize-before"),
                         ({"no_decoder_final_norm": True}, "final-norm"),
                         ({"activation_fn": "tanh"}, "activation")]:
        assert words in unsupported_reason("transformer", argparse.Namespace(**{**base, **extra}))


# -------------------------------------------------------------------------------- --quantize int8
def test_int8_linear_keeps_the_float_weights_and_approximates_the_layer():
    from fairseq_ext.modules.fast_inference import Int8Linear, optimize_for_inference_

    torch.manual_seed(0)
    emb = torch.nn.Embedding(50, 16)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 50))
    model[2].weight = torch.nn.Parameter(torch.randn(50, 32) * 0.1)
    x = emb(torch.arange(7)).detach().view(7, 16)
    ref = model(x)
    w = model[0].weight
    optimize_for_inference_(model, "int8")
    assert isinstance(model[0], Int8Linear) and isinstance(model[0], torch.nn.Linear)
    assert model[0].weight is w  # the float parameter is kept (tied weights, direct readers)
    out = model(x)
    assert out.shape == ref.shape and not torch.equal(out, ref)
    assert (out - ref).abs().max() < 0.05 * ref.abs().max()
    optimize_for_inference_(model, "int8")  # once only
    assert isinstance(model[0], Int8Linear) and not isinstance(model[0].weight, Int8Linear)
    assert model(x.bfloat16()).dtype == torch.bfloat16  # non-float32 inputs take the float path
    with pytest.raises(ValueError, match="--quantize"):
        optimize_for_inference_(model, "int4")


def generation_cfg(*flags):
    """fairseq-generate's configuration for ``flags`` (as its parser reads the command line)."""
    import fairseq_ext  # noqa: F401
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    return convert_namespace_to_omegaconf(
        options.parse_args_and_arch(options.get_generation_parser(), ["/nonexistent", *flags]))


def test_quantize_is_a_generation_option_applied_when_the_model_is_prepared():
    """``--quantize`` parses into ``cfg.generation.quantize`` (default ``none``), and fairseq's
    ``prepare_for_inference_(cfg)`` -- what fairseq-generate/-interactive call right after loading --
    applies it; an unknown value is an argparse error."""
    from fairseq import options

    from fairseq_ext.modules.fast_inference import Int8Linear

    assert generation_cfg().generation.quantize == "none"
    assert generation_cfg("--quantize", "int8").generation.quantize == "int8"
    kw = dict(encoder_layers=1, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
              encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
              decoder_attention_heads=2)
    plain, fast = build_model("transformer", **kw), build_model("transformer", **kw)
    plain.prepare_for_inference_(generation_cfg())
    fast.prepare_for_inference_(generation_cfg("--quantize", "int8"))
    assert not any(isinstance(m, Int8Linear) for m in plain.modules())
    n = sum(isinstance(m, Int8Linear) for m in fast.modules())
    assert n == sum(type(m) is torch.nn.Linear for m in plain.modules()) > 0
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(options.get_generation_parser(), ["/nonexistent", "--quantize", "int4"])


TRANSFORMER_SIZES = dict(NARROW, encoder_layers=2, decoder_layers=2)
RNN_SIZES = dict(encoder_embed_dim=16, decoder_embed_dim=16, encoder_hidden_size=16, decoder_hidden_size=16,
                 decoder_out_embed_dim=16, attention_dim=16)
#: every model family the plugin registers -> (a tiny architecture of it, build options, what its forward pass
#: is given: "sentence" a toy batch, "document" / "memory" / "conversation" the batch with the family's context
#: keys, "fertility" NAT decoding with given fertilities, "marked" the marked vocabulary of the universal tasks,
#: "frozen_nmt" a head around a frozen rnnsearch checkpoint)
FAMILY_CASES = {
    "bimsmt": ("bimsmt_rnn_tiny", dict(dual="src_tgt", ctx_inject="initdec_adddec"), "conversation"),
    "copynet": ("copynet_tiny", RNN_SIZES, "sentence"),
    "docmem": ("docmem_tiny", RNN_SIZES, "document"),
    "lstm_luong": ("lstm_luong", dict(encoder_embed_dim=32, decoder_embed_dim=32, encoder_hidden_size=32,
                                      decoder_hidden_size=32, decoder_out_embed_dim=32), "sentence"),
    "nat_fertility": ("nat_fertility_tiny", {}, "fertility"),
    "rnnsearch": ("rnnsearch_tiny", {}, "sentence"),
    "seg_copynet": ("seg_copynet_tiny", dict(RNN_SIZES, gate_hidden_dim=16), "memory"),
    "seg_nmt": ("seg_nmt_tiny", dict(RNN_SIZES, gate_hidden_dim=16), "memory"),
    "transformer_selattn": ("transformer_selattn_enc_hier_sparsesoft", TRANSFORMER_SIZES, "document"),
    "simul_agent": ("simul_agent_tiny", {}, "frozen_nmt"),
    "trainable_greedy": ("trainable_greedy_tiny", {}, "frozen_nmt"),
    "transformer_dc": ("transformer_enc_dc_bench", TRANSFORMER_SIZES, "sentence"),
    "transformer_jas": ("transformer_jas_m11_bench", TRANSFORMER_SIZES, "sentence"),
    "transformer_lex": ("transformer_lex", TRANSFORMER_SIZES, "sentence"),
    "transformer_ms": ("transformer_ms_aif_bench", TRANSFORMER_SIZES, "sentence"),
    "transformer_twt": ("twt_prenorm_fixnorm_scalenorm", TRANSFORMER_SIZES, "sentence"),
    "transformer_untied_pos": ("transformer_untied_pos", TRANSFORMER_SIZES, "sentence"),
    "transformer_ulr": ("transformer_ulr_tiny", dict(ulr=True), "marked"),
    "universal": ("universal_tiny", dict(ulr=True, mole=True), "marked"),
    "transformer_zhang2018": ("transformer_zhang2018", TRANSFORMER_SIZES, "document"),
    "transformer_han": ("transformer_han_enc", TRANSFORMER_SIZES, "document"),
    "docmem_wang2017": ("docmem_wang2017_gated", RNN_SIZES, "document"),
}


def frozen_nmt_task(tmp_path):
    """``(task, checkpoint)`` for the heads around a frozen NMT (``--nmt-path``): a translation task on the toy
    dictionary and an untrained ``rnnsearch_tiny --encoder-unidirectional`` (simul_agent's requirement) saved
    as a legacy fairseq checkpoint (``args`` + ``model``, the bookkeeping keys fairseq's loader upgrades)."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    nmt = build_model("rnnsearch_tiny", encoder_unidirectional=True)
    path = tmp_path / "nmt.pt"
    torch.save({"args": argparse.Namespace(arch="rnnsearch_tiny", task="translation", encoder_unidirectional=True),
                "model": nmt.state_dict(), "extra_state": {"train_iterator": None},
                "optimizer_history": [{"optimizer_name": "adam", "lr_scheduler_state": {}, "num_updates": 0}]}, path)
    d = make_dictionary()
    return TranslationTask(TranslationConfig(), d, d), path


def family_case(family, tmp_path):
    """``(model, outputs)``: the tiny architecture of ``family`` (:data:`FAMILY_CASES`) built in process, in
    eval mode, and ``outputs(model)``: the tensors compared -- the first output of the forward pass on a toy
    batch (nat_fertility: the decoder's logits for one target position per source word; simul_agent: also the
    READ/WRITE log-probabilities of one agent step, which decoding runs beside the NMT)."""
    from test_universal_rnn import build as build_for_task  # build_model's steps, with the task given

    arch, kw, inputs = FAMILY_CASES[family]
    vocab = 60
    if inputs == "marked":
        d = marked_dictionary()
        model = build_for_task(arch, d=d, task=universal_task(d), ulr_dir=str(ulr_dir(tmp_path, d, alpha_every=2)),
                               **kw)[0].eval()
        vocab = len(d)
    elif inputs == "frozen_nmt":
        task, nmt = frozen_nmt_task(tmp_path)
        model = build_for_task(arch, task=task, nmt_path=str(nmt), **kw)[0].eval()
    else:
        model = build_model(arch, vocab=vocab, **kw)
    src, lengths, prev = toy_batch(vocab=vocab)
    if inputs == "conversation":
        from test_bimsmt import toy_sample

        net_input = toy_sample()["net_input"]
        return model, lambda m: [m(**net_input)[0]]
    if inputs == "fertility":
        fertility = src.gt(3).long()  # the words (no pad, no EOS)
        return model, lambda m: [m.decode(m.encoder(src, src_lengths=lengths), src, fertility=fertility)[0]]
    extra = {"document": toy_document_input(src, prev), "memory": toy_memory_input()}.get(inputs, {})

    def outputs(m):
        out = [m(src, lengths, prev, **extra)[0]]
        if family == "simul_agent":  # an observation o_t = [c; z; emb] drawn at random, the initial policy state
            obs = torch.randn(src.size(0), m.agent.obs_dim, generator=torch.Generator().manual_seed(2))
            out.append(m.agent.step(obs, m.agent.initial_hidden(src.size(0)))[1])
        return out
    return model, outputs


@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_quantize_int8_on_every_model_family(family, tmp_path):
    """What ``--quantize int8`` does at load time (``prepare_for_inference_`` with the configuration
    fairseq-generate parses), on one tiny architecture of each model family the plugin registers: at least one
    ``nn.Linear`` becomes an :class:`Int8Linear` and none is left as is; the same model's outputs
    (:func:`family_case`) in float32 (prepared without ``--quantize``) and then in int8 have the same shapes,
    are finite, differ (the int8 kernels ran) and agree to 10% in relative L2 norm (measured: at most 2.2%).
    The list covers every registered model family."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from fairseq_ext.__main__ import registrations
    from fairseq_ext.modules.fast_inference import Int8Linear

    assert sorted(FAMILY_CASES) == registrations()["models"]
    assert ARCH_MODEL_NAME_REGISTRY[FAMILY_CASES[family][0]] == family
    model, outputs = family_case(family, tmp_path)
    model.prepare_for_inference_(generation_cfg())
    with torch.no_grad():
        ref = outputs(model)
    model.prepare_for_inference_(generation_cfg("--quantize", "int8"))  # fairseq's own part runs only once
    n = sum(isinstance(m, Int8Linear) for m in model.modules())
    assert n >= 1 and not any(type(m) is torch.nn.Linear for m in model.modules()), n
    with torch.no_grad():
        out = outputs(model)
    assert len(out) == len(ref)
    for r, o in zip(ref, out):
        assert o.shape == r.shape and torch.isfinite(o).all() and not torch.equal(o, r)
        err = float((o.float() - r.float()).norm() / r.float().norm())
        assert err < 0.1, (family, n, err)


def quantized_ids(out: str, err: str):
    """The sentence ids of fairseq's ``H-`` lines, once the log has said that at least one Linear layer
    was swapped to int8."""
    logged = re.search(r"--quantize int8: (\d+) Linear layers of \w+ swapped to int8", err)
    assert logged and int(logged.group(1)) >= 1, err[-2000:]
    return [int(m.group(1)) for m in re.finditer(r"^H-(\d+)\t", out, re.M)]


def test_quantized_generate_decodes_every_input_once(tiny_bin, twt_ckpt):
    """ScaleNorm/FixNorm twt through fairseq's own decoder."""
    p = fairseq("generate", tiny_bin, "--task", "translation_ext", "--path", twt_ckpt, "--cpu", "--beam", "5",
                "--batch-size", "8", "--max-len-b", "30", "--quantize", "int8")
    ids = quantized_ids(p.stdout, p.stderr)
    assert sorted(ids) == list(range(n_lines(tiny_bin / "test.ids")))  # each exactly once


def test_quantized_interactive_decodes_every_input_once(tiny_bin, prenorm_ckpt):
    lines = (tiny_bin.parent / "seg" / "test.es").read_text(encoding="utf-8").splitlines()
    p = fairseq("interactive", tiny_bin, "--task", "translation_ext", "--path", prenorm_ckpt, "--cpu",
                "--beam", "5", "--buffer-size", "8", "--batch-size", "8", "--max-len-b", "30",
                "--quantize", "int8", input_text="\n".join(lines) + "\n")
    ids = quantized_ids(p.stdout, p.stderr)
    assert sorted(ids) == list(range(len(lines)))


# ------------------------------------------------- no float32 matmul left on a weight under --quantize int8
#: torch functions that multiply by a matrix (a weight when one operand derives from parameters only)
MATMUL_OPS = {"linear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum",
              "mv", "addmv", "tensordot", "bilinear", "inner", "dot", "lstm", "gru", "rnn_tanh", "rnn_relu",
              "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "conv1d", "conv2d",
              "multi_head_attention_forward", "_native_multi_head_attention"}


class FloatWeightMatmuls(torch.overrides.TorchFunctionMode):
    """Records every float matrix product (:data:`MATMUL_OPS`) one of whose operands is a *weight*: a
    parameter of ``model`` or a tensor computed from parameters only (``w.t()``, FixNorm's normalised rows,
    ``w.detach()``): taint propagates through every torch function whose tensor inputs are all weights."""

    def __init__(self, model):
        super().__init__()
        import weakref

        from fairseq_ext.modules.ulr import ULREmbedding

        # ULR's embedding (Eqs. 5.2-5.3) is a lookup: a softmax over the universal tokens, once per distinct
        # token id of the batch, mixing the rows of ε_U; it stays float32, as every embedding does
        lookup = {id(p) for m in model.modules() if isinstance(m, ULREmbedding) for p in m.parameters()}
        self.weights = {}
        self.ref = weakref.ref
        for p in model.parameters():
            if id(p) not in lookup:
                self.weights[id(p)] = weakref.ref(p)
        self.found = []

    def is_weight(self, t):
        r = self.weights.get(id(t))
        return r is not None and r() is t

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_flatten

        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        name = getattr(func, "__name__", str(func))
        if name in MATMUL_OPS:
            w = [t for t in tensors if self.is_weight(t) and t.is_floating_point()]
            if w:
                self.found.append((name, tuple(tuple(t.shape) for t in w)))
        out = func(*args, **kwargs)
        if tensors and all(self.is_weight(t) for t in tensors):
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.weights[id(t)] = self.ref(t)
        return out


def float_weight_matmuls(model, outputs):
    with torch.no_grad(), FloatWeightMatmuls(model) as mode:
        out = outputs(model)
    return mode.found, out


#: the families whose every matrix product with a weight runs in int8 under --quantize int8: the transformer
#: (encoder self-attention: fairseq's fused path), TwT with FixNorm (the normalised output matrix), the LSTMs
#: (rnnsearch: GRU/LSTM layers and cells; lstm_luong: fairseq's LSTM with Luong attention, FixNorm output),
#: ULR / MoLE (the experts read their weights directly)
INT8_EVERYWHERE = {
    "transformer": ("transformer", TRANSFORMER_SIZES, "sentence"),
    "transformer_twt": FAMILY_CASES["transformer_twt"],
    "transformer_lex": FAMILY_CASES["transformer_lex"],
    "lstm_luong": ("lstm_luong_fixnorm", FAMILY_CASES["lstm_luong"][1], "sentence"),
    "rnnsearch": FAMILY_CASES["rnnsearch"],
    "rnnsearch_lstm": ("rnnsearch_tiny", dict(rnn_type="lstm"), "sentence"),
    "transformer_ulr": FAMILY_CASES["transformer_ulr"],
    "universal": FAMILY_CASES["universal"],
}


@pytest.mark.parametrize("case", sorted(INT8_EVERYWHERE))
def test_quantize_int8_leaves_no_float_matmul_on_a_weight(case, tmp_path, monkeypatch):
    """In float32 the forward pass multiplies by float weights (the check sees them); after ``--quantize int8``
    none is left -- also where the model reads ``.weight`` directly (fused attention, FixNorm, MoLE) -- and the
    outputs stay within 10% (relative L2) of float32's."""
    monkeypatch.setitem(FAMILY_CASES, case, INT8_EVERYWHERE[case])
    model, outputs = family_case(case, tmp_path)
    model.prepare_for_inference_(generation_cfg())
    found, ref = float_weight_matmuls(model, outputs)
    assert found, "the check sees the float32 products"
    model.prepare_for_inference_(generation_cfg("--quantize", "int8"))
    found, out = float_weight_matmuls(model, outputs)
    assert not found, sorted(set(found))
    for r, o in zip(ref, out):
        assert o.shape == r.shape and torch.isfinite(o).all()
        err = float((o.float() - r.float()).norm() / r.float().norm())
        assert err < 0.1, (case, err)


@pytest.mark.parametrize("model", ["twt", "prenorm"])
def test_quantize_int8_greedy_outputs_and_scores_stay_close_to_float32(tiny_bin, request, model):
    """fairseq's own greedy search and reference scoring of the tiny test split, float32 and then
    ``--quantize int8`` (TwT: FixNorm output matrix, ScaleNorm; PreNorm transformer): the int8 model's greedy
    outputs equal float32's on at least 80% of the sentences and the log-probability of every reference
    token stays within 0.25 nats, 0.05 on average (measured: all outputs equal, at most 0.07, mean 0.015)."""
    ckpt = request.getfixturevalue(f"{model}_ckpt")
    src, hyp, tgt, pos = fairseq_greedy_and_scores(ckpt, tiny_bin)
    src8, hyp8, tgt8, pos8 = fairseq_greedy_and_scores(ckpt, tiny_bin, "--quantize", "int8")
    ids = sorted(src)
    assert sorted(src8) == ids and tgt8 == tgt
    agree = sum(hyp[i] == hyp8[i] for i in ids) / len(ids)
    diffs = [abs(a - b) for i in ids for a, b in zip(pos[i], pos8[i])]
    assert all(len(pos[i]) == len(pos8[i]) for i in ids)
    print(f"{model}: greedy agreement {agree:.3f}, |dlogp| max {max(diffs):.4f} mean {sum(diffs) / len(diffs):.5f}")
    assert agree >= 0.8 and max(diffs) < 0.25 and sum(diffs) / len(diffs) < 0.05
    assert max(diffs) > 0  # the int8 kernels ran


def test_frozen_derived_weights_follow_their_parameter():
    """Without ``--quantize int8`` a derived weight (FixNorm's rows) is computed every call, with its gradient
    (the float32 path); for a registered weight it is computed once per version of the parameter, and
    ``F.linear`` on it runs in int8 -- re-packed after the parameter changes in place."""
    import torch.nn.functional as F

    from fairseq_ext.modules.fast_inference import frozen_derived, register_int8_weight
    from fairseq_ext.modules.norms import fixnorm

    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(40, 16))
    plain = frozen_derived(fixnorm, w, 2.0)
    assert plain.requires_grad and torch.equal(plain, fixnorm(w, 2.0))
    assert frozen_derived(fixnorm, w, 2.0) is not plain
    register_int8_weight(w)
    x = torch.randn(5, 16)
    with torch.no_grad():
        d = frozen_derived(fixnorm, w, 2.0)
        assert frozen_derived(fixnorm, w, 2.0) is d and torch.equal(d, fixnorm(w, 2.0))
        out, ref = F.linear(x, d), x @ fixnorm(w, 2.0).t()
        assert not torch.equal(out, ref) and (out - ref).abs().max() < 0.05 * ref.abs().max()
        w.mul_(-1)  # changed in place: derived again, packed again
        d2 = frozen_derived(fixnorm, w, 2.0)
        assert d2 is not d and torch.allclose(F.linear(x, d2), -ref, atol=0.05 * float(ref.abs().max()))
        assert torch.allclose(F.linear(x, w), x @ w.t(), atol=0.05 * float((x @ w.t()).abs().max()))


def test_quantized_generate_runs_an_lstm_model_end_to_end(tiny_bin, tmp_path):
    """An attention LSTM (``rnnsearch_tiny --rnn-type lstm``: bi-LSTM encoder, LSTM cells, tied output) trained a
    few updates, decoded by fairseq-generate ``--quantize int8``: its recurrent layers run in int8 and every input
    is decoded exactly once."""
    from harness import train_nmt

    ckpt = train_nmt(tiny_bin, tmp_path / "lstm", "--rnn-type", "lstm", max_update=6)
    p = fairseq("generate", tiny_bin, "--task", "translation_decoding", "--path", ckpt, "--cpu", "--beam", "3",
                "--batch-size", "8", "--max-len-b", "20", "--quantize", "int8")
    recurrent = re.search(r"swapped to int8, (\d+) recurrent layers", p.stderr)
    assert recurrent and int(recurrent.group(1)) >= 2, p.stderr[-2000:]  # the encoder's LSTM, the decoder's cells
    assert sorted(quantized_ids(p.stdout, p.stderr)) == list(range(n_lines(tiny_bin / "test.ids")))

"""Every architecture the plugin registers is listed here by name, builds, and runs a forward pass.

The math of each family is tested in its own module (test_joint_attention, test_dual_contextual,
test_multi_supervision, test_twt, test_lexical, test_untied_position, test_nat_fertility); this
module makes sure no registered preset is left unbuilt: the thesis-size presets are built with their
own layer counts, norms and strategies, only the widths shrunk, and a new architecture must be added
to the list below (the first test fails otherwise).
"""
import pytest
import torch

from fairseq_ext.__main__ import registrations
from fairseq_ext.models.rnnsearch import THESIS_PRESETS as RNNSEARCH_PRESETS
from harness import build_model, toy_arthur_lexicon, toy_batch

TRANSFORMER_FAMILY = [
    "transformer_bench", "transformer_cpu_small", "transformer_dc",
    "transformer_dc_dec_bench", "transformer_dc_dec_iwslt_small", "transformer_dc_dec_wmt_en_de",
    "transformer_dc_enc_bench", "transformer_dc_enc_iwslt_small", "transformer_dc_enc_wmt_en_de",
    "transformer_dc_full_bench", "transformer_dc_full_iwslt_small", "transformer_dc_full_wmt_en_de",
    "transformer_iwslt_small", "transformer_jas",
    "transformer_jas_cagg_bench", "transformer_jas_cagg_iwslt_small", "transformer_jas_cagg_wmt_en_de",
    "transformer_jas_iter_cagg_bench", "transformer_jas_iter_cagg_iwslt_small",
    "transformer_jas_iter_cagg_wmt_en_de", "transformer_jas_iter_sagg_bench",
    "transformer_jas_iter_sagg_iwslt_small", "transformer_jas_iter_sagg_wmt_en_de",
    "transformer_jas_m00_bench", "transformer_jas_m00_iwslt_small", "transformer_jas_m00_wmt_en_de",
    "transformer_jas_m01_bench", "transformer_jas_m01_iwslt_small", "transformer_jas_m01_wmt_en_de",
    "transformer_jas_m10_bench", "transformer_jas_m10_iwslt_small", "transformer_jas_m10_wmt_en_de",
    "transformer_jas_m11_bench", "transformer_jas_m11_iwslt_small", "transformer_jas_m11_wmt_en_de",
    "transformer_jas_sagg_bench", "transformer_jas_sagg_iwslt_small", "transformer_jas_sagg_wmt_en_de",
    "transformer_lex", "transformer_lex_arthur", "transformer_lex_bench", "transformer_ms", "transformer_ms_aif_bench",
    "transformer_ms_aif_iwslt_small", "transformer_ms_aif_wmt_en_de", "transformer_ms_bench",
    "transformer_ms_iwslt_small", "transformer_ms_wmt_en_de", "transformer_twt", "transformer_twt_bench",
    "transformer_twt_postnorm_fixnorm_scalenorm", "transformer_twt_postnorm_layernorm",
    "transformer_twt_prenorm_fixnorm_layernorm", "transformer_twt_prenorm_fixnorm_rmsnorm",
    "transformer_twt_prenorm_fixnorm_scalenorm", "transformer_twt_prenorm_fixnorm_scalenorm_fixedg",
    "transformer_twt_prenorm_layernorm",
    "transformer_untied_pos", "transformer_untied_pos_bench", "transformer_untied_pos_prenorm_fixnorm_scalenorm",
    "transformer_untied_pos_random", "transformer_untied_pos_random_bench",
    "transformer_untied_pos_random_prenorm_fixnorm_scalenorm", "transformer_wmt_en_de_10l",
    "transformer_wmt_en_de_ffn4096",
    # Gu ch. 6: fairseq's transformer with the ULR + delta source embedding (built here with --ulr off; with ULR
    # and the meta-learning task in test_meta_nmt)
    "transformer_ulr", "transformer_ulr_base", "transformer_ulr_bench", "transformer_ulr_tiny",
]
LSTM_FAMILY = ["lstm_luong", "lstm_luong_arthur", "lstm_luong_fixnorm", "lstm_luong_fixnorm_lex",
               "lstm_luong_tied"]
ARTHUR = {"lstm_luong_arthur", "transformer_lex_arthur", "transformer_arthur"}  # need a lexicon (--arthur-lexicon)
NAT_FAMILY = ["nat_fertility", "nat_fertility_bench", "nat_fertility_iwslt16", "nat_fertility_tiny"]
RNN_FAMILY = sorted(["rnnsearch", "rnnsearch_tiny", "rnnsearch_bench"] + list(RNNSEARCH_PRESETS))
COPYNET_FAMILY = ["copynet", "copynet_bench", "copynet_lcsts", "copynet_syn", "copynet_tiny"]
# Gu ch. 4: SEG-NMT and its COPYNET baseline over the retrieved target (need the task's tm_* inputs)
SEG_FAMILY = ["seg_copynet", "seg_copynet_bench", "seg_copynet_tiny", "seg_nmt", "seg_nmt_bench", "seg_nmt_jrc",
              "seg_nmt_tiny"]
# Maruf ch. 3 (memory networks on rnnsearch) and ch. 4 (selective attention on the transformer): document models
DOCMEM_FAMILY = ["docmem", "docmem_jean2017", "docmem_jean2017_bench",
                 "docmem_m2c", "docmem_m2c_both", "docmem_m2c_both_bench", "docmem_m2c_src", "docmem_m2c_src_bench",
                 "docmem_m2c_tgt", "docmem_m2c_tgt_bench", "docmem_m2o", "docmem_m2o_both", "docmem_m2o_both_bench",
                 "docmem_m2o_src", "docmem_m2o_src_bench", "docmem_m2o_tgt", "docmem_m2o_tgt_bench",
                 "docmem_prevtgt", "docmem_prevtgt_bench", "docmem_tiny"] + [
    # the Wang et al. (2017) baseline of ch. 3 (its own model on docmem's hooks; tested in test_wang2017)
    f"docmem_wang2017{v}{size}" for v in ("", "_gated", "_init", "_init_gated") for size in ("", "_bench")]
SELATTN_FAMILY = ["transformer_selattn", "transformer_zhang2018", "transformer_zhang2018_bench"] + [
    f"transformer_selattn_{side}_{attn}{size}" for side in ("enc", "dec")
    for attn in ("hier_sparsesoft", "hier_sparsesparse", "sent", "word") for size in ("", "_bench")] + [
    # the Miculicich et al. (2018) HAN baseline of ch. 4 (tested in test_han_transformer)
    f"transformer_han_{side}{size}" for side in ("enc", "dec") for size in ("", "_bench")]
MARUF_SENTENCE = ["transformer_maruf_base", "transformer_maruf_base_bench"]
# Gu ch. 7: actor + critic around a frozen rnnsearch checkpoint (--nmt-path); built and trained in test_trainable_greedy
TRAINABLE_GREEDY_FAMILY = ["trainable_greedy", "trainable_greedy_tiny"]
# Gu ch. 9: the READ/WRITE agent around a frozen uni-directional rnnsearch (--nmt-path); built in test_simultaneous
SIMUL_FAMILY = ["simul_agent", "simul_agent_tiny"]
# Maruf ch. 5: two rnnsearch direction models + conversation history; built and run in test_bimsmt
BIMSMT_FAMILY = ["bimsmt", "bimsmt_base", "bimsmt_bench", "bimsmt_tiny"]
# Gu ch. 5: rnnsearch + ULR embeddings + MoLE on the marked many-to-English vocabulary; built and run in
# test_universal_rnn (needs the task's languages)
UNIVERSAL_FAMILY = ["universal", "universal_512", "universal_bench", "universal_tiny"]
# Every earlier name of a renamed architecture (fairseq_ext.modules.arch_utils: the names' rule) -> its name: still
# registered, with the same model and defaults, so that old commands and checkpoints keep working.
OLD_NAMES = {
    # the bench shape's first name
    "transformer_twt_small": "transformer_twt_bench", "transformer_lex_small": "transformer_lex_bench",
    "transformer_untied_pos_small": "transformer_untied_pos_bench",
    "transformer_untied_pos_random_small": "transformer_untied_pos_random_bench",
    "nat_fertility_small": "nat_fertility_bench",
    # model first, then variant, then size
    "transformer_enc_dc_bench": "transformer_dc_enc_bench",
    "transformer_enc_dc_iwslt_small": "transformer_dc_enc_iwslt_small",
    "transformer_enc_dc_wmt_en_de": "transformer_dc_enc_wmt_en_de",
    "transformer_dec_dc_bench": "transformer_dc_dec_bench",
    "transformer_dec_dc_iwslt_small": "transformer_dc_dec_iwslt_small",
    "transformer_dec_dc_wmt_en_de": "transformer_dc_dec_wmt_en_de",
    "transformer_full_dc_bench": "transformer_dc_full_bench",
    "transformer_full_dc_iwslt_small": "transformer_dc_full_iwslt_small",
    "transformer_full_dc_wmt_en_de": "transformer_dc_full_wmt_en_de",
    "transformer_arthur": "transformer_lex_arthur",
    **{f"twt_{n}": f"transformer_twt_{n}" for n in (
        "postnorm_fixnorm_scalenorm", "postnorm_layernorm", "prenorm_fixnorm_layernorm", "prenorm_fixnorm_rmsnorm",
        "prenorm_fixnorm_scalenorm", "prenorm_fixnorm_scalenorm_fixedg", "prenorm_layernorm")},
    "twt_untied_pos": "transformer_untied_pos_prenorm_fixnorm_scalenorm",
    "twt_random_untied_pos": "transformer_untied_pos_random_prenorm_fixnorm_scalenorm",
    "ctx_jean2017_rnn": "docmem_jean2017", "ctx_jean2017_rnn_bench": "docmem_jean2017_bench",
    "ctx_prevtgt_rnn": "docmem_prevtgt", "ctx_prevtgt_rnn_bench": "docmem_prevtgt_bench",
    "encdec_copynet_syn": "rnnsearch_encdec_copynet_syn",
    # the base first or not at all
    "bimsmt_rnn": "bimsmt", "bimsmt_rnn_base": "bimsmt_base", "bimsmt_rnn_bench": "bimsmt_bench",
    "bimsmt_rnn_tiny": "bimsmt_tiny", "universal_rnn": "universal", "universal_rnn_512": "universal_512",
    "universal_rnn_bench": "universal_bench", "universal_rnn_tiny": "universal_tiny",
    "ulr_transformer": "transformer_ulr", "ulr_transformer_base": "transformer_ulr_base",
    "ulr_transformer_bench": "transformer_ulr_bench", "ulr_transformer_tiny": "transformer_ulr_tiny",
    "selattn_transformer": "transformer_selattn",
    **{f"selattn_{side}_{attn}{size}": f"transformer_selattn_{side}_{attn}{size}" for side in ("enc", "dec")
       for attn in ("hier_sparsesoft", "hier_sparsesparse", "sent", "word") for size in ("", "_bench")},
    "zhang2018_doc_transformer": "transformer_zhang2018",
    "zhang2018_doc_transformer_bench": "transformer_zhang2018_bench",
}
OLD_CRITERION_NAMES = {"actor_critic": "trainable_greedy_actor_critic",
                       "multi_supervision_label_smoothed": "multi_supervision_label_smoothed_cross_entropy",
                       "nat_fertility_loss": "nat_fertility_label_smoothed_cross_entropy"}

NARROW = dict(encoder_embed_dim=32, decoder_embed_dim=32, encoder_ffn_embed_dim=64,
              decoder_ffn_embed_dim=64, encoder_attention_heads=4, decoder_attention_heads=4)


def test_every_registered_architecture_is_listed():
    assert sorted(TRANSFORMER_FAMILY + LSTM_FAMILY + NAT_FAMILY + RNN_FAMILY + COPYNET_FAMILY + DOCMEM_FAMILY
                  + SELATTN_FAMILY + MARUF_SENTENCE + SEG_FAMILY + TRAINABLE_GREEDY_FAMILY + SIMUL_FAMILY
                  + BIMSMT_FAMILY + UNIVERSAL_FAMILY + list(OLD_NAMES)) == registrations()["architectures"]


def _lexicon(arch, tmp_path):
    return {"arthur_lexicon": toy_arthur_lexicon(tmp_path / "lex.pt")} if arch in ARTHUR else {}


def toy_document_input(src, prev):
    """The document keys of :mod:`fairseq_ext.data.documents` for a toy batch that is one document: each
    sentence's context is the other batch rows, plus the target side of every row (gold-style)."""
    B = src.size(0)
    index = torch.tensor([[j for j in range(B) if j != i] for i in range(B)])
    tgt = torch.cat([prev[:, 1:], prev[:, :1]], 1)  # target format: the words, then EOS
    return dict(ctx_src_tokens=src.new_full((0, 1), 1), ctx_src_lengths=src.new_zeros(0), ctx_index=index,
                ctx_distance=index - torch.arange(B)[:, None], ctx_tgt_tokens=tgt, ctx_tgt_lengths=tgt.ne(1).sum(1))


@pytest.mark.parametrize("arch", MARUF_SENTENCE + SELATTN_FAMILY)
def test_document_transformer_preset_builds_and_runs_with_context(arch):
    model = build_model(arch, vocab=60, **NARROW, encoder_layers=2, decoder_layers=2)
    src, lengths, prev = toy_batch()
    doc = toy_document_input(src, prev) if getattr(model, "uses_document_context", False) else {}
    with torch.no_grad():
        logits = model(src, lengths, prev, **doc)[0]
    assert logits.shape == (3, 6, 60) and torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", DOCMEM_FAMILY)
def test_docmem_preset_builds_and_runs_with_context(arch):
    model = build_model(arch, vocab=60, encoder_embed_dim=16, decoder_embed_dim=16, encoder_hidden_size=16,
                        decoder_hidden_size=16, decoder_out_embed_dim=16, attention_dim=16)
    assert model.uses_document_context
    src, lengths, prev = toy_batch()
    with torch.no_grad():
        logits = model(src, lengths, prev, **toy_document_input(src, prev))[0]
    assert logits.shape == (3, 6, 60) and torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", TRANSFORMER_FAMILY)
def test_transformer_family_preset_builds_and_runs(arch, tmp_path):
    model = build_model(arch, vocab=60, **NARROW, **_lexicon(arch, tmp_path))
    src, lengths, prev = toy_batch()
    with torch.no_grad():
        logits = model(src, lengths, prev)[0]
    assert logits.shape == (3, 6, 60) and torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", LSTM_FAMILY)
def test_lstm_preset_builds_and_runs(arch, tmp_path):
    model = build_model(arch, vocab=60, encoder_embed_dim=32, decoder_embed_dim=32, encoder_hidden_size=32,
                        decoder_hidden_size=32, decoder_out_embed_dim=32, **_lexicon(arch, tmp_path))
    src, lengths, prev = toy_batch()
    with torch.no_grad():
        logits = model(src, lengths, prev)[0]
    assert logits.shape == (3, 6, 60) and torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", NAT_FAMILY)
def test_nat_preset_builds(arch):
    model = build_model(arch, vocab=60, device="meta", **NARROW)
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.parametrize("arch", RNN_FAMILY + COPYNET_FAMILY)
def test_rnnsearch_preset_builds_and_runs(arch):
    model = build_model(arch, vocab=60, encoder_embed_dim=16, decoder_embed_dim=16, encoder_hidden_size=16,
                        decoder_hidden_size=16, decoder_out_embed_dim=16, attention_dim=16)
    src, lengths, prev = toy_batch()
    with torch.no_grad():
        logits = model(src, lengths, prev)[0]
    # copynet's output also has the per-sentence copy slots after the 60 words
    assert logits.shape[:2] == (3, 6) and logits.shape[2] >= 60 and not torch.isnan(logits).any()


def toy_memory_input(bsz=3):
    """The seg_translation keys for a toy batch: two retrieved pairs, the first example has both, the
    second one, the last none."""
    src = torch.tensor([[1, 5, 6, 7, 2], [8, 9, 10, 11, 2]])
    tgt = torch.tensor([[12, 13, 2, 1], [14, 15, 16, 2]])
    prev = torch.cat([torch.full((2, 1), 2), tgt[:, :-1]], 1).masked_fill(tgt.eq(1), 1)
    index = torch.full((bsz, 2), -1)
    index[0], index[1, 0] = torch.tensor([0, 1]), 1
    return dict(tm_src_tokens=src, tm_src_lengths=src.ne(1).sum(1), tm_prev_output_tokens=prev, tm_tgt_tokens=tgt,
                tm_index=index)


@pytest.mark.parametrize("arch", SEG_FAMILY)
def test_seg_preset_builds_and_runs_with_memory(arch):
    model = build_model(arch, vocab=60, encoder_embed_dim=16, decoder_embed_dim=16, encoder_hidden_size=16,
                        decoder_hidden_size=16, decoder_out_embed_dim=16, attention_dim=16, gate_hidden_dim=16)
    assert model.uses_translation_memory
    src, lengths, prev = toy_batch()
    with torch.no_grad():
        lprobs = model(src, lengths, prev, **toy_memory_input())[0]
    assert lprobs.shape == (3, 6, 60) and torch.allclose(lprobs.exp().sum(-1), torch.ones(3, 6), atol=1e-5)


BUILDABLE = set(TRANSFORMER_FAMILY + NAT_FAMILY) - ARTHUR


@pytest.mark.parametrize("old,new", sorted(OLD_NAMES.items()))
def test_an_earlier_architecture_name_gives_the_same_model(old, new):
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    assert ARCH_MODEL_REGISTRY[old] is ARCH_MODEL_REGISTRY[new]
    assert ARCH_CONFIG_REGISTRY[old] is ARCH_CONFIG_REGISTRY[new]  # the same defaults function
    if new in BUILDABLE:
        a, b = build_model(old, vocab=60, device="meta", **NARROW), build_model(new, vocab=60, device="meta", **NARROW)
        assert [(k, v.shape) for k, v in a.state_dict().items()] == [(k, v.shape) for k, v in b.state_dict().items()]


def test_earlier_criterion_names_resolve_to_the_same_classes_and_options():
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY

    from fairseq_ext.modules.arch_utils import ARCH_ALIASES, CRITERION_ALIASES

    assert (ARCH_ALIASES, CRITERION_ALIASES) == (OLD_NAMES, OLD_CRITERION_NAMES)
    for old, new in OLD_CRITERION_NAMES.items():
        assert issubclass(CRITERION_REGISTRY[old], CRITERION_REGISTRY[new])
        assert CRITERION_DATACLASS_REGISTRY[old] is CRITERION_DATACLASS_REGISTRY[new]


def test_every_registered_name_follows_the_naming_rule():
    """The rule of fairseq_ext.modules.arch_utils: a base (transformer, rnn, lstm) first or not at all; an
    architecture starts with its model's name; a criterion is <idea>_<loss> and lives in criterions/<name>.py."""
    import inspect
    import re

    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    regs = registrations()
    base = re.compile(r"(^|_)(transformer|rnn|lstm)(_|$)")
    bad = [m for m in regs["models"] if base.search(m) and base.search(m).start() > 0]
    for arch in regs["architectures"]:
        model = ARCH_MODEL_NAME_REGISTRY[arch]
        if arch in OLD_NAMES:
            continue
        hit = base.search(arch)
        if not (arch == model or arch.startswith(model + "_")) or (hit and hit.start() > 0):
            bad.append(f"{arch} (model {model})")
    loss = re.compile(r"[a-z0-9]+(_[a-z0-9]+)*_(label_smoothed_cross_entropy|cross_entropy|policy_gradient|actor_critic)")
    for name in regs["criterions"]:
        if name in OLD_CRITERION_NAMES:
            continue
        if not loss.fullmatch(name) or inspect.getmodule(CRITERION_REGISTRY[name]).__name__ != \
                f"fairseq_ext.criterions.{name}":
            bad.append(f"criterion {name} ({inspect.getmodule(CRITERION_REGISTRY[name]).__name__})")
    assert bad == []


def test_preset_tables_are_registered_through_arch_utils():
    """A family's presets go through ``arch_utils.register_presets`` / ``register_shaped``: no model file calls
    fairseq's ``register_model_architecture`` in a loop of its own."""
    import ast

    from harness import ROOT

    loops = []
    for path in sorted((ROOT / "fairseq_ext" / "models").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.For, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                loops += [f"{path.name}:{call.lineno}" for call in ast.walk(node)
                          if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "register_model_architecture"]
    assert loops == []


def test_a_checkpoint_trained_under_an_old_architecture_name_loads_and_decodes(tiny_bin, tmp_path):
    """A checkpoint whose configuration names an earlier architecture (``twt_random_untied_pos``, trained here
    under that name) decodes with fairseq-generate and loads (load_ensemble) as the model of its new name."""
    from harness import generate, hypotheses, n_lines, train

    from fairseq_ext.modules.checkpoint import load_ensemble, load_state

    shape = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim",
             "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
             "--decoder-attention-heads", "4"]
    ckpt = train(tiny_bin, tmp_path, ["--arch", "twt_random_untied_pos", *shape], max_update=2,
                 extra=["--disable-validation"])
    assert load_state(str(ckpt))["cfg"]["model"].arch == "twt_random_untied_pos"
    assert len(hypotheses(generate(tiny_bin, ckpt))) == n_lines(tiny_bin / "test.ids")
    models, _, _ = load_ensemble([str(ckpt)], arg_overrides={"data": str(tiny_bin)}, frozen=True)
    new = build_model("transformer_untied_pos_random_prenorm_fixnorm_scalenorm", vocab=60, device="meta", **NARROW)
    assert type(models[0]) is type(new)


@pytest.mark.parametrize("old,new,extra", [
    ("selattn_enc_hier_sparsesoft_bench", "transformer_selattn_enc_hier_sparsesoft_bench", []),
    ("zhang2018_doc_transformer_bench", "transformer_zhang2018_bench", ["--ctx-encoder-layers", "1"])])
def test_a_document_checkpoint_trained_under_an_old_architecture_name_loads_and_decodes(old, new, extra, tiny_bin,
                                                                                        tmp_path):
    """The document models' earlier names (Maruf ch. 4: ``selattn_*``, ``zhang2018_doc_transformer*``): a
    checkpoint trained under one decodes with fairseq-generate (doc_translation) and loads as its new name's model."""
    from harness import generate, hypotheses, n_lines, train

    from fairseq_ext.modules.checkpoint import load_ensemble, load_state

    shape = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim",
             "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
             "--decoder-attention-heads", "4"]
    ckpt = train(tiny_bin, tmp_path, ["--arch", old, *shape, *extra], task="doc_translation", max_update=2,
                 extra=["--disable-validation"])
    assert load_state(str(ckpt))["cfg"]["model"].arch == old
    assert len(hypotheses(generate(tiny_bin, ckpt, task="doc_translation"))) == n_lines(tiny_bin / "test.ids")
    models, _, _ = load_ensemble([str(ckpt)], arg_overrides={"data": str(tiny_bin)}, frozen=True)
    assert type(models[0]) is type(build_model(new, vocab=60, device="meta", **NARROW))


# ----------------------------------------------------------------------------- criterions' metrics
def _old_reduce(logs, extra):
    """What copynet / seg_nmt / universal_mole logged when each re-implemented ``reduce_metrics``: loss per
    sample-size unit and nll_loss per token (base 2), ppl from nll_loss, and their own ``extra`` keys."""
    import math

    def tot(k):
        return sum(float(log.get(k, 0)) for log in logs)

    out = {"loss": tot("loss") / tot("sample_size") / math.log(2), "nll_loss": tot("nll_loss") / tot("ntokens") / math.log(2)}
    out["ppl"] = 2 ** out["nll_loss"]
    out.update(extra(tot))
    return out


CRITERION_EXTRAS = {
    "copynet_cross_entropy": lambda tot: {"copy_targets": tot("copy_targets") / tot("ntokens")},
    "seg_nmt_cross_entropy": lambda tot: {"tm_gate": tot("tm_gate") / tot("ntokens")},
    "universal_mole_cross_entropy": lambda tot: {"gate_loss": tot("gate_loss") / tot("gate_tokens") / __import__("math").log(2),
                                                 "gate_acc": tot("gate_hits") / tot("gate_tokens")},
}


@pytest.mark.parametrize("name", sorted(CRITERION_EXTRAS))
def test_criterion_metrics_come_from_fairseqs_reduce_metrics_unchanged(name):
    """The three criterions whose loss / nll_loss / ppl are those of fairseq's label-smoothed cross-entropy
    call its ``reduce_metrics`` (``super()``) and add their own keys; the logged values are those they logged
    with their own copy of it."""
    from fairseq import metrics
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    cls = CRITERION_REGISTRY[name]
    assert issubclass(cls, LabelSmoothedCrossEntropyCriterion)
    logs = [dict(loss=torch.tensor(7.5), nll_loss=torch.tensor(6.25), ntokens=9, nsentences=2, sample_size=9,
                 copy_targets=2, tm_gate=3.5, gate_loss=torch.tensor(4.0), gate_tokens=5, gate_hits=3),
            dict(loss=torch.tensor(3.0), nll_loss=torch.tensor(2.5), ntokens=4, nsentences=1, sample_size=4,
                 copy_targets=1, tm_gate=1.0, gate_loss=torch.tensor(1.5), gate_tokens=2, gate_hits=2)]
    with metrics.aggregate(new_root=True) as agg:
        cls.reduce_metrics(logs)
        got = agg.get_smoothed_values()
    want = _old_reduce(logs, CRITERION_EXTRAS[name])
    assert set(want) <= set(got)
    for k, v in want.items():
        assert float(got[k]) == pytest.approx(v, abs=2e-3), k


# ----------------------------------------------------------------------------- one spelling per option
# earlier spelling -> the spelling: the same argparse option (one dest, one default), the earlier string kept
OLD_OPTION_SPELLINGS = {"--gate-hidden-dim": "--gate-hidden-size", "--actor-hidden-dim": "--actor-hidden-size",
                        "--mole-hidden-dim": "--mole-hidden-size", "--zero-memory": "--zero-context"}


def _model_options():
    import argparse

    from fairseq.models import MODEL_REGISTRY

    for model in registrations()["models"]:
        parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
        MODEL_REGISTRY[model].add_args(parser)
        for action in parser._actions:
            yield model, parser, action


def test_each_option_of_the_models_has_one_spelling_and_the_earlier_one_still_parses():
    """Sizes are ``*-hidden-size`` (fairseq's spelling), a switched-off context ``--zero-context``; an earlier
    spelling is a second string of the same option and sets the same value."""
    primaries, seen = set(), {}
    for model, parser, action in _model_options():
        primary = action.option_strings[0] if action.option_strings else ""
        primaries.add(primary)
        for old, new in OLD_OPTION_SPELLINGS.items():
            if old in action.option_strings:
                assert primary == new, (model, action.option_strings)
                value = [] if action.nargs == 0 else ["7"]
                assert vars(parser.parse_known_args([old, *value])[0]) == vars(parser.parse_known_args([new, *value])[0])
                seen[old] = model
    assert not [p for p in primaries if p.endswith("-hidden-dim") or p in OLD_OPTION_SPELLINGS]
    assert sorted(seen) == sorted(OLD_OPTION_SPELLINGS)


def test_rescore_batch_is_one_option_of_both_rescoring_tasks_and_the_earlier_spelling_parses():
    """``--rescore-batch`` (NPD of translation_decoding, NPD/EPD of translation_fertility) is one option with one
    default; translation_decoding's earlier ``--npd-rescore-batch`` is a second string of it."""
    from fairseq import options

    from fairseq_ext.generators.rescoring import RESCORE_BATCH

    def parse(task, *argv):
        return options.parse_args_and_arch(options.get_generation_parser(default_task=task), ["DATA", "--task", task,
                                                                                               *argv])

    for task in ("translation_decoding", "translation_fertility"):
        assert parse(task).rescore_batch == RESCORE_BATCH and parse(task, "--rescore-batch", "5").rescore_batch == 5
    old, new = parse("translation_decoding", "--npd-rescore-batch", "5"), parse("translation_decoding", "--rescore-batch",
                                                                              "5")
    assert vars(old) == vars(new) and not hasattr(new, "npd_rescore_batch")


def test_the_decoding_length_limit_is_written_once_for_the_shell_and_once_for_the_python_recipes():
    """recipes/lib.sh's ``LEN`` (the shell recipes) is ``bench_configs.DECODE_LEN`` (the Python ones), and
    no other recipe spells the limit out (flags, an ``--eval-bleu-args`` JSON or a generation Namespace)."""
    import re
    import shlex

    from fairseq_ext.tools.evaluation import bench_configs as configs
    from harness import ROOT

    (shell,) = re.findall(r"^LEN=\((.*)\)$", (ROOT / "recipes" / "lib.sh").read_text(encoding="utf-8"), flags=re.M)
    assert shlex.split(shell) == configs.DECODE_LEN == ["--max-len-a", "1.2", "--max-len-b", "10"]
    limit = re.compile(r"max.len.a\W+1\.2\W+max.len.b\W+10\b")
    written = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "recipes").rglob("*")) if p.suffix in (".sh", ".py")
               and p.name != "lib.sh" and limit.search(p.read_text(encoding="utf-8"))]
    assert written == []


def test_the_bench_shape_as_flags_is_the_bench_configuration():
    """The bench shape is defined once (arch_utils.SHAPES): ``shape_flags("bench")`` are the flags of the bench
    configuration's baseline (``bench_configs.TRANSFORMER_SMALL``) and build ``transformer_bench``."""
    from fairseq_ext.modules.arch_utils import shape_flags
    from fairseq_ext.tools.evaluation.bench_configs import TRANSFORMER_SMALL as recipe

    flags = shape_flags("bench")

    def pairs(argv):
        out, i = {}, 0
        while i < len(argv):
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
            out[argv[i]] = value
            i += 1 if value is True else 2
        return out

    assert pairs(["--arch", "transformer", *flags]) == pairs(list(recipe))

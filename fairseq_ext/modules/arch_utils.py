"""What the plugin's ``register_model_architecture`` functions share: fairseq's default convention and
the transformer shapes every family offers, defined once.

Every transformer family of the plugin registers its architectures on the same shapes, one suffix
each (``transformer_twt_bench``, ``transformer_jas_m11_iwslt_small``, ``nat_fertility_bench``, ...):

=============== ======================================================================================
``bench``       the benchmark model of ``recipes/bench`` (``bench_configs`` ``transformer``): 3+3 layers,
                d 256, FFN 1024, 4 heads, PreNorm, all embeddings shared, dropout 0.1
``iwslt_small`` the IWSLT "small" Transformer (Ampomah 2021, §3.3.2): 4+4 layers, 256/1024/4, shared
``wmt_en_de``   fairseq's ``transformer`` (base 6+6, 512/2048/8) with all embeddings shared
=============== ======================================================================================

Families registered before this table existed also answer to ``*_small`` for ``bench``
(:data:`LEGACY_BENCH_SUFFIX`), so their checkpoints keep loading.

**Names** (one rule for every registered name; ``tests/test_registry.py`` checks it):

* a model is ``<base>_<idea>`` with the fairseq base first (``transformer_dc``, ``transformer_ulr``,
  ``lstm_luong``), or the idea alone for the plugin's own RNN families (``rnnsearch``, ``copynet``, ``docmem``,
  ``bimsmt``, ``universal``): a base never comes last;
* an architecture is ``<model>[_<variant>][_<size>]``: its model's name, then the variant, then the size (a
  shape above, ``tiny``, or the thesis setting: ``transformer_dc_enc_bench``, ``docmem_m2c_src_bench``);
* a criterion is ``<idea>_<loss>``, the loss as fairseq spells it (``cross_entropy``,
  ``label_smoothed_cross_entropy``) or the training objective (``policy_gradient``, ``actor_critic``), and its
  file in ``criterions/`` is that name.

A renamed architecture or criterion stays registered under its old name (:data:`ARCH_ALIASES`,
:data:`CRITERION_ALIASES`: old name -> name), so old commands and checkpoints keep working (a checkpoint records
the architecture, never the model's name: a renamed model, ``ulr_transformer`` -> ``transformer_ulr``,
``universal_rnn`` -> ``universal``, keeps its old name as an architecture).
"""
from typing import Dict, List

from fairseq.distributed import fsdp_wrap
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, register_model_architecture
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq_ext.data.errors import UserDataError

# name -> defaults; keys without a side prefix are set for the encoder and the decoder alike.
SHAPES = {
    "bench": {"layers": 3, "embed_dim": 256, "ffn_embed_dim": 1024, "attention_heads": 4,
              "normalize_before": True, "share_all_embeddings": True, "dropout": 0.1},
    "iwslt_small": {"layers": 4, "embed_dim": 256, "ffn_embed_dim": 1024, "attention_heads": 4,
                    "share_all_embeddings": True, "dropout": 0.1},
    "wmt_en_de": {"share_all_embeddings": True},
}
PER_SIDE = ("layers", "embed_dim", "ffn_embed_dim", "attention_heads", "normalize_before")
LEGACY_BENCH_SUFFIX = "small"


def set_default(args, name, value):
    """fairseq's architecture convention: keep what the command line set, else use ``value``
    (``None`` counts as unset, since fairseq's ``add_args`` leave unset options as ``None``)."""
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def apply_defaults(args, defaults: Dict) -> None:
    """Fill ``defaults`` (keys of :data:`PER_SIDE` for the encoder and the decoder alike) the fairseq way."""
    for key, value in defaults.items():
        if key in PER_SIDE:
            for side in ("encoder", "decoder"):
                set_default(args, f"{side}_{key}", value)
        else:
            set_default(args, key, value)


def apply_shape(args, shape: str) -> None:
    """Fill the defaults of the transformer shape ``shape`` (a key of :data:`SHAPES`)."""
    apply_defaults(args, SHAPES[shape])


def shape_flags(shape: str) -> List[str]:
    """The command-line flags of the shape ``shape`` for fairseq's own ``transformer`` (the bench configurations
    and recipes spell a shape out with them; ``--arch transformer_{shape}`` is the same model)."""
    flags = []
    for key, value in SHAPES[shape].items():
        names = [f"{side}_{key}" for side in ("encoder", "decoder")] if key in PER_SIDE else [key]
        for name in names:
            flag = "--" + name.replace("_", "-")
            if value is True:
                flags.append(flag)
            elif value is not False:
                flags += [flag, str(value)]
    return flags


def shaped(shape: str, arch_fn):
    """The architecture function ``shape`` defaults, then ``arch_fn`` (the family's own defaults)."""

    def arch(args):
        apply_shape(args, shape)
        arch_fn(args)

    arch.__doc__ = f"{(arch_fn.__doc__ or '').strip()} Shape: {shape} (see fairseq_ext.modules.arch_utils)."
    return arch


def register_shaped(model: str, prefix: str, arch_fn, shapes=("bench",), legacy: bool = False):
    """Register ``{prefix}_{shape}`` for each of ``shapes`` (plus the alias ``{prefix}_small`` of ``bench`` when
    ``legacy``: the name those architectures had before the shapes were unified)."""
    for shape in shapes:
        register_model_architecture(model, f"{prefix}_{shape}")(shaped(shape, arch_fn))
        if legacy and shape == "bench":
            ARCH_ALIASES[f"{prefix}_{LEGACY_BENCH_SUFFIX}"] = f"{prefix}_bench"


def register_presets(model: str, make_arch, presets: Dict[str, tuple]) -> None:
    """Register each ``name: spec`` of ``presets`` as the architecture ``make_arch(*spec)`` of ``model`` (the
    thesis settings of a family: a table of specs and one function that turns a spec into defaults)."""
    for name, spec in presets.items():
        register_model_architecture(model, name)(make_arch(*spec))


# ------------------------------------------------------------------------------------------ aliases
# old architecture name -> its name under the rule of the module doc (same model, same defaults function)
ARCH_ALIASES: Dict[str, str] = {
    **{f"transformer_{side}_dc_{shape}": f"transformer_dc_{side}_{shape}"
       for side in ("enc", "dec", "full") for shape in SHAPES},
    "transformer_arthur": "transformer_lex_arthur",
    **{f"twt_{norms}": f"transformer_twt_{norms}" for norms in (
        "postnorm_fixnorm_scalenorm", "postnorm_layernorm", "prenorm_fixnorm_layernorm", "prenorm_fixnorm_rmsnorm",
        "prenorm_fixnorm_scalenorm", "prenorm_fixnorm_scalenorm_fixedg", "prenorm_layernorm")},
    "twt_untied_pos": "transformer_untied_pos_prenorm_fixnorm_scalenorm",
    "twt_random_untied_pos": "transformer_untied_pos_random_prenorm_fixnorm_scalenorm",
    "ctx_jean2017_rnn": "docmem_jean2017", "ctx_jean2017_rnn_bench": "docmem_jean2017_bench",
    "ctx_prevtgt_rnn": "docmem_prevtgt", "ctx_prevtgt_rnn_bench": "docmem_prevtgt_bench",
    "encdec_copynet_syn": "rnnsearch_encdec_copynet_syn",
    "bimsmt_rnn": "bimsmt", "bimsmt_rnn_base": "bimsmt_base", "bimsmt_rnn_bench": "bimsmt_bench",
    "bimsmt_rnn_tiny": "bimsmt_tiny",
    "universal_rnn": "universal", "universal_rnn_512": "universal_512", "universal_rnn_bench": "universal_bench",
    "universal_rnn_tiny": "universal_tiny",
    "ulr_transformer": "transformer_ulr", "ulr_transformer_base": "transformer_ulr_base",
    "ulr_transformer_bench": "transformer_ulr_bench", "ulr_transformer_tiny": "transformer_ulr_tiny",
    "selattn_transformer": "transformer_selattn",
    **{f"selattn_{side}_{attn}{size}": f"transformer_selattn_{side}_{attn}{size}" for side in ("enc", "dec")
       for attn in ("sent", "word", "hier_sparsesoft", "hier_sparsesparse") for size in ("", "_bench")},
    "zhang2018_doc_transformer": "transformer_zhang2018",
    "zhang2018_doc_transformer_bench": "transformer_zhang2018_bench",
}
# old criterion name -> criterion name
CRITERION_ALIASES: Dict[str, str] = {
    "actor_critic": "trainable_greedy_actor_critic",
    "multi_supervision_label_smoothed": "multi_supervision_label_smoothed_cross_entropy",
    "nat_fertility_loss": "nat_fertility_label_smoothed_cross_entropy",
}


def canonical_arch(name):
    """The architecture's name under the rule (``name`` itself unless it is an old name)."""
    return ARCH_ALIASES.get(name, name)


def register_model_aliases() -> None:
    """Register every old architecture name of :data:`ARCH_ALIASES` (once every model module is imported): it
    builds the same model with the same defaults function."""
    for old, new in ARCH_ALIASES.items():
        if old not in ARCH_CONFIG_REGISTRY:
            register_model_architecture(ARCH_MODEL_NAME_REGISTRY[new], old)(ARCH_CONFIG_REGISTRY[new])


def register_criterion_aliases() -> None:
    """Register every old criterion name of :data:`CRITERION_ALIASES`: a subclass under the old name (fairseq
    refuses one class under two names) with the same options."""
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY, register_criterion

    for old, new in CRITERION_ALIASES.items():
        if old not in CRITERION_REGISTRY:
            cls = CRITERION_REGISTRY[new]
            alias = type(f"{cls.__name__}As_{old}", (cls,), {"__doc__": f"``{old}``: the earlier name of ``{new}``."})
            register_criterion(old, dataclass=CRITERION_DATACLASS_REGISTRY.get(new))(alias)


def parse_layer_set(spec, num_layers: int, what: str = "layers") -> List[int]:
    """``"1,3"``, ``"2-4"``, ``"all"``, ``"none"``/``""``/None -> sorted 1-based layer indices."""
    if spec is None:
        return []
    if isinstance(spec, int):
        spec = str(spec)
    if isinstance(spec, (list, tuple)):
        spec = ",".join(str(s) for s in spec)
    spec = str(spec).strip().strip("[]").replace(" ", "")
    if spec.lower() in ("", "none", "0"):
        return []
    if spec.lower() == "all":
        return list(range(1, num_layers + 1))
    out = set()
    for part in spec.split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    bad = [i for i in out if not 1 <= i <= num_layers]
    if bad:
        raise UserDataError(f"{what} {bad} out of range 1..{num_layers} (in {spec!r})")
    return sorted(out)


def wrap_layer(cfg, layer):
    """Activation checkpointing / FSDP wrapping of a custom layer, with fairseq's own utilities and
    the same settings fairseq's ``build_*_layer`` applies to its layers."""
    checkpoint = getattr(cfg, "checkpoint_activations", False)
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=getattr(cfg, "offload_activations", False))
    return fsdp_wrap(layer, min_num_params=0 if checkpoint else getattr(cfg, "min_params_to_wrap", 0))

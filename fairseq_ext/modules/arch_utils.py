"""What the plugin's ``register_model_architecture`` functions share: fairseq's default convention and
the transformer shapes every family offers, defined once.

Every transformer family of the plugin registers its architectures on the same shapes, one suffix
each (``transformer_twt_bench``, ``transformer_jas_m11_iwslt_small``, ``nat_fertility_bench``, ...):

=============== ======================================================================================
``bench``       the benchmark model of ``recipes/bench`` (``configs.py`` ``transformer``): 3+3 layers,
                d 256, FFN 1024, 4 heads, PreNorm, all embeddings shared, dropout 0.1
``iwslt_small`` the IWSLT "small" Transformer (Ampomah 2021, §3.3.2): 4+4 layers, 256/1024/4, shared
``wmt_en_de``   fairseq's ``transformer`` (base 6+6, 512/2048/8) with all embeddings shared
=============== ======================================================================================

Families registered before this table existed also answer to ``*_small`` for ``bench``
(:data:`LEGACY_BENCH_SUFFIX`), so their checkpoints keep loading.
"""
from typing import List

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model_architecture
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

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


def apply_shape(args, shape: str) -> None:
    """Fill the defaults of the transformer shape ``shape`` (a key of :data:`SHAPES`)."""
    for key, value in SHAPES[shape].items():
        if key in PER_SIDE:
            for side in ("encoder", "decoder"):
                set_default(args, f"{side}_{key}", value)
        else:
            set_default(args, key, value)


def shaped(shape: str, arch_fn):
    """The architecture function ``shape`` defaults, then ``arch_fn`` (the family's own defaults)."""

    def arch(args):
        apply_shape(args, shape)
        arch_fn(args)

    arch.__doc__ = f"{(arch_fn.__doc__ or '').strip()} Shape: {shape} (see fairseq_ext.modules.arch_utils)."
    return arch


def register_shaped(model: str, prefix: str, arch_fn, shapes=("bench",), legacy: bool = False):
    """Register ``{prefix}_{shape}`` for each of ``shapes`` (plus ``{prefix}_small`` for ``bench`` when
    ``legacy``: the name those architectures had before the shapes were unified)."""
    for shape in shapes:
        fn = shaped(shape, arch_fn)
        register_model_architecture(model, f"{prefix}_{shape}")(fn)
        if legacy and shape == "bench":
            register_model_architecture(model, f"{prefix}_{LEGACY_BENCH_SUFFIX}")(fn)


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
        raise ValueError(f"{what} {bad} out of range 1..{num_layers} (in {spec!r})")
    return sorted(out)


def wrap_layer(cfg, layer):
    """Activation checkpointing / FSDP wrapping of a custom layer, with fairseq's own utilities and
    the same settings fairseq's ``build_*_layer`` applies to its layers."""
    checkpoint = getattr(cfg, "checkpoint_activations", False)
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=getattr(cfg, "offload_activations", False))
    return fsdp_wrap(layer, min_num_params=0 if checkpoint else getattr(cfg, "min_params_to_wrap", 0))

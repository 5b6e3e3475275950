"""Helpers for the plugin's ``register_model_architecture`` functions."""


def set_default(args, name, value):
    """fairseq's architecture convention: keep what the command line set, else use ``value``
    (``None`` counts as unset, since fairseq's ``add_args`` leave unset options as ``None``)."""
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def bench_small_defaults(args):
    """The bench model's shape (recipes/bench/configs.py TRANSFORMER_SMALL): 3+3 layers, d 256,
    FFN 1024, 4 heads, shared embeddings, PreNorm, dropout 0.1."""
    for side in ("encoder", "decoder"):
        set_default(args, f"{side}_layers", 3)
        set_default(args, f"{side}_embed_dim", 256)
        set_default(args, f"{side}_ffn_embed_dim", 1024)
        set_default(args, f"{side}_attention_heads", 4)
        set_default(args, f"{side}_normalize_before", True)
    set_default(args, "share_all_embeddings", True)
    set_default(args, "dropout", 0.1)

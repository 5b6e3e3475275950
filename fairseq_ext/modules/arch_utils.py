"""Helpers for the plugin's ``register_model_architecture`` functions."""


def set_default(args, name, value):
    """fairseq's architecture convention: keep what the command line set, else use ``value``
    (``None`` counts as unset, since fairseq's ``add_args`` leave unset options as ``None``)."""
    if getattr(args, name, None) is None:
        setattr(args, name, value)

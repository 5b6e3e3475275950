"""The Arthur et al. (2016) lexicon file (``--arthur-lexicon``): its format and the reader that the
``*_arthur`` models use when they are built.

The file is written by the offline tool :mod:`fairseq_ext.tools.corpora.arthur_lexicon` (``torch.save`` of a dict):
``format`` (:data:`FORMAT`), ``indices`` (2, nnz) long (source type f, target type e), ``values`` (nnz,)
float p_l(e | f), ``shape`` (|V_f|, |V_e|), the SHA-256 of both dictionaries' symbol lists
(:func:`dictionary_sha256`; a model built on other dictionaries refuses the file with a clear error) and
how it was built.
"""
import hashlib
import os

import torch
from fairseq_ext.data.errors import UserDataError

FORMAT = "arthur_lexicon/1"
BUILD_HINT = "python -m fairseq_ext.tools.corpora.arthur_lexicon"


class LexiconMismatchError(UserDataError):
    """The lexicon file does not fit the model's dictionaries (or is not a lexicon)."""


def dictionary_sha256(d) -> str:
    """SHA-256 of a fairseq dictionary's symbol list (ids and symbols; counts ignored)."""
    return hashlib.sha256("\n".join(d.symbols).encode("utf-8")).hexdigest()


def load_lexicon(path: str, src_dict=None, tgt_dict=None) -> dict:
    """Read a lexicon file; with dictionaries, check that it was built for them."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Arthur lexicon not found: {path}")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same user error
        raise LexiconMismatchError(f"{path}: not an Arthur lexicon file ({e.__class__.__name__}: {e})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise LexiconMismatchError(f"{path}: not an Arthur lexicon file (format {FORMAT} expected; build one "
                                   f"with {BUILD_HINT})")
    for i, (side, key, d) in enumerate((("source", "src", src_dict), ("target", "tgt", tgt_dict))):
        if d is None:
            continue
        n, digest = obj["shape"][i], obj[f"{key}_dict_sha256"]
        if n != len(d) or digest != dictionary_sha256(d):
            raise LexiconMismatchError(
                f"{path}: the Arthur lexicon was built for a {side} dictionary of {n} types "
                f"(sha256 {digest[:12]}) but the model's {side} dictionary has {len(d)} types "
                f"(sha256 {dictionary_sha256(d)[:12]}); rebuild it on the model's data with {BUILD_HINT}")
    return obj

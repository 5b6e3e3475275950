"""Languages of a many-to-English corpus (Gu 2019 ch. 5): the marked source dictionary, the ``.lang`` side
files and the language-balanced resampling of the training set.

* **Marked dictionary**: every source symbol is ``<piece>__<lang>`` (the language marker of §5.4.1, so no
  surface form is shared between languages and |V| = Σ_k V_k, Eq. 5.1); the special symbols carry none.
  :func:`token_languages` maps each symbol id to the index of its language in a language list (−1: a
  special symbol), which is how a model knows the language of a sentence without any side input (also in
  ``fairseq-interactive``).
* **Side file** ``<data>/<split>.lang``: one language code per line of the split, written by
  ``fairseq-ext-data universal``; :func:`read_lang_file` checks it against the split and the language list.
* **Sampling** (§5.2.1: "shuffle the multilingual sentence pairs into mini-batches so that different
  languages can be trained equally"): :func:`language_weights` gives per-example weights such that a
  language k is drawn with probability p_k ∝ N_k^{1/T} (T = 1: the corpus proportions; T = 0: uniform over
  languages), used with fairseq's :class:`~fairseq.data.ResamplingDataset` (a new draw every epoch).
"""
from __future__ import annotations

import os
from typing import List, Sequence

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset
from fairseq_ext.data.errors import UserDataError

MARK = "__"


class LanguageDataError(UserDataError):
    """A marked dictionary or a ``.lang`` side file that does not fit the language list."""


def parse_langs(value: str | Sequence[str] | None) -> List[str]:
    """``"es,fr"`` or ``["es", "fr"]`` -> ``["es", "fr"]`` (empty entries dropped)."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [x.strip() for x in items if x and x.strip()]


def symbol_language(symbol: str) -> str | None:
    """The language marker of a dictionary symbol (``"▁casa__es"`` -> ``"es"``), None for none."""
    i = symbol.rfind(MARK)
    if i <= 0 or i + len(MARK) >= len(symbol):
        return None
    return symbol[i + len(MARK):]


def token_languages(dictionary, langs: Sequence[str], where: str = "the source dictionary") -> torch.Tensor:
    """(len(dictionary),) long: the index in ``langs`` of each symbol's language, −1 for special symbols
    (the first ``dictionary.nspecial``) and for symbols fairseq adds without a marker (``madeupword``
    padding). A marked symbol of a language outside ``langs`` is an error naming it."""
    index = {lang: i for i, lang in enumerate(langs)}
    out = torch.full((len(dictionary),), -1, dtype=torch.long)
    for i, sym in enumerate(dictionary.symbols):
        if i < dictionary.nspecial or sym.startswith("madeupword"):
            continue
        lang = symbol_language(sym)
        if lang is None:
            raise LanguageDataError(f"{where}: symbol {sym!r} (line {i - dictionary.nspecial + 1}) has no language "
                                    f"marker '{MARK}<lang>' (build the data with fairseq-ext-data universal)")
        if lang not in index:
            raise LanguageDataError(f"{where}: symbol {sym!r} (line {i - dictionary.nspecial + 1}) is of language "
                                    f"{lang!r}, which is not among the task's languages {', '.join(langs)}")
        out[i] = index[lang]
    return out


def sentence_languages(src_tokens: torch.Tensor, token_lang: torch.Tensor, num_langs: int) -> torch.Tensor:
    """(B,) the language of each source sentence: the most frequent language of its marked tokens (−1 when
    it has none, e.g. an empty or all-⟨unk⟩ line)."""
    tl = token_lang.to(src_tokens.device)[src_tokens]  # (B, S)
    counts = torch.zeros(src_tokens.size(0), num_langs + 1, dtype=torch.long, device=src_tokens.device)
    counts.scatter_add_(1, tl + 1, torch.ones_like(tl))
    counts[:, 0] = 0
    best = counts.argmax(1) - 1
    return torch.where(counts.amax(1) > 0, best, torch.full_like(best, -1))


def read_lang_file(path: str, expected_lines: int, langs: Sequence[str]) -> np.ndarray:
    """The ``.lang`` side file as an int array of language indices; one error naming the file and line for
    a missing file, an unknown code or a line count that differs from the split's."""
    if not os.path.isfile(path):
        raise LanguageDataError(f"{path}: the language side file is missing (fairseq-ext-data universal writes "
                                f"<split>.lang next to the binarized data)")
    index = {lang: i for i, lang in enumerate(langs)}
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            code = line.strip()
            if code not in index:
                raise LanguageDataError(f"{path}:{n}: unknown language code {code!r} (the task's languages: "
                                        f"{', '.join(langs)}; set --aux-langs / --lowres-lang)")
            out.append(index[code])
    if len(out) != expected_lines:
        raise LanguageDataError(f"{path}: {len(out)} lines, but the binarized split has {expected_lines} examples "
                                f"(stale side file? rebuild the data)")
    return np.asarray(out, dtype=np.int64)


def language_weights(lang_ids: np.ndarray, temperature: float, multiplicity: np.ndarray | None = None) -> np.ndarray:
    """Per-example sampling weights (summing to 1) drawing language k with p_k ∝ N_k^{1/T}: T = 1 keeps the
    corpus proportions, T → ∞ (or 0, by convention here) is uniform over the languages present.

    ``multiplicity`` (one count per example, default 1): each example counts as if it appeared that many times,
    in N_k and within its language (the up-sampled real pairs beside back-translated ones, §5.5)."""
    if temperature < 0:
        raise ValueError(f"--lang-temperature must be >= 0 (0: uniform over languages), got {temperature}")
    mult = np.ones(len(lang_ids)) if multiplicity is None else np.asarray(multiplicity, dtype=np.float64)
    if mult.shape != (len(lang_ids),) or (mult <= 0).any():
        raise ValueError(f"multiplicity: one positive count per example expected ({len(lang_ids)})")
    counts = np.bincount(lang_ids, weights=mult,
                         minlength=int(lang_ids.max()) + 1 if len(lang_ids) else 0).astype(np.float64)
    present = counts > 0
    p = np.zeros_like(counts)
    if temperature == 0:
        p[present] = 1.0
    else:
        p[present] = counts[present] ** (1.0 / temperature)
    p /= p.sum()
    w = p[lang_ids] * mult / counts[lang_ids]
    return w / w.sum()


class LanguageResampled(BaseWrapperDataset):
    """The training set drawn anew every epoch with per-example ``weights`` (with replacement, as many
    draws as examples): :meth:`ordered_indices` returns the draw of the current epoch, sorted by source then
    target length, as indices *of the wrapped dataset*, so fairseq's size filter, ``batch_by_size`` and the
    collater work unchanged. The draw is a pure function of (``seed``, epoch)."""

    def __init__(self, dataset, weights: np.ndarray, seed: int = 1):
        super().__init__(dataset)
        if len(weights) != len(dataset):
            raise ValueError(f"LanguageResampled: {len(weights)} weights for {len(dataset)} examples")
        self.weights = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
        self.seed = int(seed)
        self.epoch = 1

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.epoch = int(epoch)

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False

    def draw(self, epoch: int | None = None) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.epoch if epoch is None else int(epoch)])
        return rng.choice(len(self.dataset), size=len(self.dataset), replace=True, p=self.weights)

    def ordered_indices(self):
        idx = self.draw()
        sizes = self.dataset.sizes
        src = sizes[:, 0] if sizes.ndim == 2 else sizes
        tgt = sizes[:, 1] if sizes.ndim == 2 else np.zeros_like(sizes)
        return idx[np.lexsort((tgt[idx], src[idx]))]

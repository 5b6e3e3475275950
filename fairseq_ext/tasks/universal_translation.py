"""``universal_translation``: many source languages → English with one model (Gu 2019 ch. 5, §5.2.1 and
§5.4.1): the multilingual baseline ("Multi-NMT", Eq. 5.1) and the ULR / MoLE models of ``universal_rnn``.

Data (``fairseq-ext-data universal`` writes it): one binarized pair ``src``–``en`` whose source dictionary
is the union of the languages' subword vocabularies, every symbol marked ``<piece>__<lang>``
(:mod:`fairseq_ext.data.universal`), and a side file ``<split>.lang`` naming each line's language.

* ``--aux-langs es,fr,ru`` / ``--lowres-lang it``: the auxiliary languages (one MoLE expert each, in this
  order) and the low-resource language; when not given they are read from the ``manifest.json`` of the
  data folder (``<data>/manifest.json``, its parent's or grandparent's). Every marked symbol and every
  ``.lang`` line must be one of them (one error naming the file and line otherwise).
* ``--lang-temperature T``: the training set is redrawn every epoch so that language k is sampled with
  probability ∝ N_k^{1/T} (1, the default: the corpus as it is, fairseq's batches; 0: uniform over the
  languages; 5: the usual multilingual middle ground) — the "shuffle ... so that different languages can
  be trained equally" of §5.2.1, with the choice of T left open by the thesis.
* ``--bt-split NAME``: back-translated pairs (§5.5), binarized as split NAME with its own ``NAME.lang``,
  are added to the training set. ``--bt-real-upsample K`` (1, the default: plain concatenation) counts each
  real pair of the low-resource language K times against them (in its language's share and within it), so
  that the real pairs are not drowned by the synthetic ones (the thesis gives no ratio; e.g. 10).

Everything else (``--cpu-bf16``, ``--batching``, ``--decoding-algorithm``, input checks) is inherited from
``translation_decoding``.
"""

import json
import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
from fairseq import utils
from fairseq.data import ConcatDataset
from fairseq.tasks import register_task
from omegaconf import II

from fairseq_ext.data.universal import (
    LanguageDataError,
    LanguageResampled,
    language_weights,
    parse_langs,
    read_lang_file,
    token_languages,
)
from fairseq_ext.tasks.translation_decoding import TranslationDecodingConfig, TranslationDecodingTask

logger = logging.getLogger(__name__)


@dataclass
class UniversalTranslationConfig(TranslationDecodingConfig):
    aux_langs: str = field(
        default="",
        metadata={"help": "auxiliary source languages, comma-separated, in expert order (default: the data "
                          "folder's manifest.json)"})
    lowres_lang: str = field(
        default="", metadata={"help": "the low-resource source language (default: the data folder's manifest.json)"})
    lang_temperature: float = field(
        default=1.0,
        metadata={"help": "training draws language k with probability ~ N_k^(1/T), anew every epoch "
                          "(1: the corpus proportions; 0: uniform over languages)"})
    bt_split: Optional[str] = field(
        default=None, metadata={"help": "a binarized split of back-translated pairs (with NAME.lang) added to "
                                        "the training set"})
    bt_real_upsample: float = field(
        default=1.0, metadata={"help": "with --bt-split: each real pair of the low-resource language counts this "
                                       "many times against the back-translated ones (1: plain concatenation)"})


def read_manifest(data: str) -> dict:
    """The ``manifest.json`` of a universal data folder (``<data>`` itself, its parent or grandparent), {} if
    none."""
    here = os.path.abspath(data)
    for d in (here, os.path.dirname(here), os.path.dirname(os.path.dirname(here))):  # bin/mono: two levels up
        path = os.path.join(d, "manifest.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    return {}


@register_task("universal_translation", dataclass=UniversalTranslationConfig)
class UniversalTranslationTask(TranslationDecodingTask):
    """Many sources → English (module doc)."""

    cfg: UniversalTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        data = utils.split_paths(cfg.data)[0] if cfg.data else ""
        manifest = read_manifest(data) if data else {}
        self.aux_langs: List[str] = parse_langs(cfg.aux_langs) or parse_langs(manifest.get("aux"))
        self.lowres_lang: str = (cfg.lowres_lang or manifest.get("lowres") or "").strip()
        if not self.aux_langs or not self.lowres_lang:
            raise LanguageDataError(
                f"universal_translation: the languages are unknown: give --aux-langs and --lowres-lang (or build "
                f"{data or 'the data'} with fairseq-ext-data universal, whose manifest.json names them)")
        if self.lowres_lang in self.aux_langs:
            raise LanguageDataError(f"universal_translation: --lowres-lang {self.lowres_lang} is also in --aux-langs")
        if len(set(self.aux_langs)) != len(self.aux_langs):
            raise LanguageDataError(f"universal_translation: --aux-langs repeats a language: {cfg.aux_langs}")
        self.langs: List[str] = self.aux_langs + [self.lowres_lang]
        # every marked symbol must be one of the languages (one error naming it otherwise)
        self.token_lang = token_languages(src_dict, self.langs, where=f"{data}/dict.{cfg.source_lang}.txt")
        self.lang_ids = {}

    def _seed(self) -> int:
        try:
            return int(self.cfg.seed)
        except Exception:  # an unresolvable interpolation (a config built by hand)
            return 1

    @property
    def lowres_index(self) -> int:
        return len(self.aux_langs)

    def _load_langs(self, path: str, split: str, n: int) -> np.ndarray:
        return read_lang_file(os.path.join(path, f"{split}.lang"), n, self.langs)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        paths = utils.split_paths(self.cfg.data)
        path = paths[(epoch - 1) % len(paths)]
        ds = self.datasets[split]
        langs = self._load_langs(path, split, len(ds))
        train = split == getattr(self.cfg, "train_subset", "train")
        upsample = getattr(self.cfg, "bt_real_upsample", None)
        upsample = 1.0 if upsample is None else float(upsample)  # None: a config saved before the option
        if upsample <= 0:
            raise LanguageDataError(f"universal_translation: --bt-real-upsample must be > 0, got {upsample:g}")
        if upsample != 1.0 and not self.cfg.bt_split:
            raise LanguageDataError("universal_translation: --bt-real-upsample needs --bt-split (the back-translated "
                                    "pairs the real ones are up-sampled against)")
        multiplicity = None
        if train and self.cfg.bt_split:
            super().load_dataset(self.cfg.bt_split, epoch=epoch, combine=combine, **kwargs)
            bt = self.datasets.pop(self.cfg.bt_split)
            langs = np.concatenate([langs, self._load_langs(path, self.cfg.bt_split, len(bt))])
            if upsample != 1.0:  # the real low-resource pairs (before the concatenation) count K times
                multiplicity = np.ones(len(langs))
                multiplicity[:len(ds)][langs[:len(ds)] == self.lowres_index] = upsample
            ds = ConcatDataset([ds, bt])
            logger.info("universal_translation: + %d back-translated pairs (%s)%s", len(bt), self.cfg.bt_split,
                        f", real {self.lowres_lang} pairs x{upsample:g}" if multiplicity is not None else "")
        self.lang_ids[split] = langs
        counts = {self.langs[i]: int(c) for i, c in enumerate(np.bincount(langs, minlength=len(self.langs))) if c}
        logger.info("universal_translation %s: %d examples by language %s", split, len(langs), counts)
        if train and (self.cfg.lang_temperature != 1.0 or multiplicity is not None):
            weights = language_weights(langs, self.cfg.lang_temperature, multiplicity)
            share = {self.langs[i]: round(float(weights[langs == i].sum()), 4) for i in np.unique(langs)}
            logger.info("universal_translation: language sampling T=%g -> %s", self.cfg.lang_temperature, share)
            ds = LanguageResampled(ds, weights, seed=self._seed())
        self.datasets[split] = ds

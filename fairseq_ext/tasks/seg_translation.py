"""``seg_translation``: translation with retrieved translation pairs, the translation stage of SEG-NMT (Gu 2019
ch. 4, §4.2.2-§4.2.3; models ``seg_nmt`` and ``seg_copynet``).

``translation_decoding`` whose examples come with the pairs the offline retrieval stage found (§4.2.1,
``fairseq-ext-tm``); the memory is the training split, and every split needs its side file
``{split}.tm.jsonl`` (:mod:`fairseq_ext.data.translation_memory`). Options::

    --tm-topk K                 the K best retrieved pairs per example (default 2; 0 = no memory)
    --tm-selection topk|adaptive   top-K (Fig. 4.4) or Algorithm 1's coverage selection
    --tm-max-k 16               cap on the pairs of one example
    --tm-export FILE            fairseq-generate: zeta_t per output token (Fig. 4.5)

An example's own line is never among its training pairs (§4.2.3). Batch contract
(:class:`TMPairDataset`): the distinct retrieved pairs of the batch as ``net_input`` keys
``tm_src_tokens``/``tm_src_lengths``, ``tm_prev_output_tokens``, ``tm_tgt_tokens`` and ``tm_index`` (B, K; -1
padding), with ``sample["tm_id"]`` and ``sample["tm_fuzzy"]`` (Eq. 4.1). ``--max-tokens`` counts the pairs.
Only models with ``uses_translation_memory = True`` get the ``tm_*`` keys.

References: Gu, Wang, Cho, Li, "Search Engine Guided Neural Machine Translation", AAAI 2018; Gu, "Efficient
Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019.
"""
import json
import logging
import math
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch
from fairseq import utils
from fairseq.data import BaseWrapperDataset, FairseqDataset, data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from fairseq_ext.data.binarized import split_prefix
from fairseq_ext.data.context_keys import has_context, opts_in, strip_keys, unwrap_model
from fairseq_ext.data.translation_memory import TMFormatError, read_tm
from fairseq_ext.data.truncation import truncate_tokens
from fairseq_ext.tasks.translation_decoding import TranslationDecodingConfig, TranslationDecodingTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

TM_SELECTIONS = ("topk", "adaptive")
TM_NET_INPUT_KEYS = ("tm_src_tokens", "tm_src_lengths", "tm_prev_output_tokens", "tm_tgt_tokens", "tm_index")
TM_SAMPLE_KEYS = ("tm_id",)  # per memory row, not per example


def uses_translation_memory(model) -> bool:
    """Whether a model (possibly DDP-wrapped) opts in to the ``tm_*`` keys."""
    return opts_in(model, "uses_translation_memory")


def has_tm(sample) -> bool:
    return has_context(sample, TM_NET_INPUT_KEYS)


def strip_tm(sample):
    """A shallow copy of ``sample`` without the memory keys (for models that do not opt in)."""
    return strip_keys(sample, TM_NET_INPUT_KEYS, TM_SAMPLE_KEYS + ("tm_fuzzy",))


class TMPairDataset(BaseWrapperDataset):
    """A :class:`~fairseq.data.LanguagePairDataset` whose batches carry the retrieved pairs (module doc).

    :param memory_src, memory_tgt: the memory's binarized source / target (indexed datasets, one line per
        training example, ending in </s>)
    :param selected: per example, the memory lines of its pairs, best first
    :param fuzzy: per example, S_fuzzy of each selected pair (NaN if unknown)
    """

    def __init__(self, dataset, memory_src, memory_tgt, selected: List[List[int]], fuzzy: List[List[float]],
                 max_source_positions: Optional[int] = None, max_target_positions: Optional[int] = None):
        super().__init__(dataset)
        if len(selected) != len(dataset) or len(fuzzy) != len(dataset):
            raise ValueError(f"TMPairDataset: {len(selected)} selections for {len(dataset)} examples")
        self.memory_src, self.memory_tgt = memory_src, memory_tgt
        self.selected, self.fuzzy = selected, fuzzy
        self.max_source_positions, self.max_target_positions = max_source_positions, max_target_positions
        mem = np.maximum(np.minimum(memory_src.sizes, max_source_positions or np.inf),
                         np.minimum(memory_tgt.sizes, max_target_positions or np.inf)).astype(np.int64)
        self.tm_tokens = np.array([int(mem[s].sum()) if s else 0 for s in selected], dtype=np.int64)

    def __getattr__(self, name):  # src, tgt, src_sizes, tgt_sizes, left_pad_source, src_dict, ...
        if name.startswith("__") or name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, index):
        item = dict(self.dataset[index])
        item["tm"] = self.selected[index]
        return item

    # -- batching: the pairs count towards --max-tokens
    def num_tokens(self, index):
        return self.dataset.num_tokens(index) + int(self.tm_tokens[index])

    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices) + self.tm_tokens[indices]

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        return FairseqDataset.batch_by_size(self, indices, max_tokens=max_tokens, max_sentences=max_sentences,
                                            required_batch_size_multiple=required_batch_size_multiple)

    # -- batches
    def collater(self, samples, pad_to_length=None):
        res = self.dataset.collater(samples, pad_to_length=pad_to_length) if pad_to_length is not None \
            else self.dataset.collater(samples)
        if not res:
            return res
        chosen = {int(s["id"]): s["tm"] for s in samples}
        ids = res["id"].tolist()
        rows, row_of = [], {}
        for i in ids:
            for j in chosen[i]:
                if j not in row_of:
                    row_of[j] = len(rows)
                    rows.append(j)
        B = len(ids)
        K = max((len(chosen[i]) for i in ids), default=0)
        tm_index = torch.full((B, K), -1, dtype=torch.long)
        tm_fuzzy = torch.full((B, K), float("nan"))
        for b, i in enumerate(ids):
            if chosen[i]:
                tm_index[b, : len(chosen[i])] = torch.tensor([row_of[j] for j in chosen[i]], dtype=torch.long)
                tm_fuzzy[b, : len(chosen[i])] = torch.tensor(self.fuzzy[i], dtype=torch.float)
        ds = self.dataset
        src_pad, src_eos = ds.src_dict.pad(), ds.src_dict.eos()
        tgt_dict = ds.tgt_dict
        if rows:
            sources = [truncate_tokens(self.memory_src[j].long(), self.max_source_positions, src_eos) for j in rows]
            targets = [truncate_tokens(self.memory_tgt[j].long(), self.max_target_positions, tgt_dict.eos()) for j in rows]
            tm_src = data_utils.collate_tokens(sources, src_pad, src_eos, ds.left_pad_source,
                                               pad_to_multiple=getattr(ds, "pad_to_multiple", 1))
            tm_tgt = data_utils.collate_tokens(targets, tgt_dict.pad(), tgt_dict.eos(), False)
            tm_prev = data_utils.collate_tokens(targets, tgt_dict.pad(), tgt_dict.eos(), False,
                                                move_eos_to_beginning=True)
            tm_src_lengths = torch.tensor([s.numel() for s in sources], dtype=torch.long)
        else:
            tm_src = torch.full((0, 1), src_pad, dtype=torch.long)
            tm_tgt = torch.full((0, 1), tgt_dict.pad(), dtype=torch.long)
            tm_prev = tm_tgt.clone()
            tm_src_lengths = torch.zeros(0, dtype=torch.long)
        net = res["net_input"]
        net["tm_src_tokens"], net["tm_src_lengths"] = tm_src, tm_src_lengths
        net["tm_prev_output_tokens"], net["tm_tgt_tokens"] = tm_prev, tm_tgt
        net["tm_index"] = tm_index
        res["tm_id"] = torch.tensor(rows, dtype=torch.long)
        res["tm_fuzzy"] = tm_fuzzy
        return res


def select_pairs(entries, selection: str, k: int, max_k: int, own_line: Optional[int] = None):
    """The memory lines and fuzzy scores of each example's pairs (module doc); ``own_line(i)`` given:
    example i's own line is dropped. Returns (selected, fuzzy, number of own lines dropped)."""
    selected, fuzzy, dropped = [], [], 0
    for i, e in enumerate(entries):
        score = dict(zip(e.ids, e.fuzzy))
        chosen = e.select(selection, k)
        if own_line is not None:
            kept = [j for j in chosen if j != own_line(i)]
            dropped += len(chosen) - len(kept)
            if selection == "topk" and len(kept) < len(chosen):  # the next candidate takes its place
                kept = [j for j in e.ids if j != own_line(i)][:k]
            chosen = kept
        chosen = [int(j) for j in chosen[:max_k]]
        selected.append(chosen)
        fuzzy.append([float(score.get(j, math.nan)) for j in chosen])
    return selected, fuzzy, dropped


@dataclass
class SegTranslationConfig(TranslationDecodingConfig):
    tm_topk: int = field(
        default=2, metadata={"help": "use the K best retrieved pairs of each example (0: no memory)"})
    tm_selection: ChoiceEnum(TM_SELECTIONS) = field(
        default="topk",
        metadata={"help": "topk: the --tm-topk best pairs; adaptive: Algorithm 1's greedy coverage selection"})
    tm_max_k: int = field(default=16, metadata={"help": "at most this many pairs per example"})
    tm_export: Optional[str] = field(
        default=None,
        metadata={"help": "fairseq-generate: write zeta_t per output token and the argmax memory slot of every "
                          "hypothesis to this file (JSON lines)"})


@register_task("seg_translation", dataclass=SegTranslationConfig)
class SegTranslationTask(TranslationDecodingTask):
    """Translation with retrieved pairs (module doc)."""

    cfg: SegTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if cfg.tm_max_k < 1:
            raise UserDataError(f"--tm-max-k must be >= 1, got {cfg.tm_max_k}")
        if not 0 <= cfg.tm_topk <= cfg.tm_max_k:
            raise UserDataError(f"--tm-topk must be in [0, --tm-max-k = {cfg.tm_max_k}], got {cfg.tm_topk}")
        self.memory = None
        self.export_file = None

    # -- data
    @property
    def memory_split(self) -> str:
        try:
            return str(self.cfg.train_subset)
        except Exception:  # an unresolvable interpolation (a config built by hand)
            return "train"

    def memory_path(self) -> str:
        return utils.split_paths(self.cfg.data)[0]

    def load_memory(self):
        """(source, target) indexed datasets of the memory (the training split), loaded once."""
        if self.memory is None:
            path, split, src, tgt = self.memory_path(), self.memory_split, self.cfg.source_lang, self.cfg.target_lang
            sides = []
            for lang, d in ((src, self.src_dict), (tgt, self.tgt_dict)):
                prefix = split_prefix(path, split, src, tgt, lang)
                if prefix is None:
                    raise TMFormatError(f"{path}/{split}.{src}-{tgt}.{lang}.bin: the translation memory (the "
                                        f"binarized {split!r} split) is missing")
                sides.append(data_utils.load_indexed_dataset(prefix, d, self.cfg.dataset_impl))
            if len(sides[0]) != len(sides[1]):
                raise TMFormatError(f"{path}: the memory's source ({len(sides[0])}) and target ({len(sides[1])}) "
                                    f"lines differ")
            self.memory = tuple(sides)
            logger.info("seg_translation: translation memory = %s/%s (%d pairs)", path, split, len(sides[0]))
        return self.memory

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        base = self.datasets[split]
        memory_src, memory_tgt = self.load_memory()
        paths = utils.split_paths(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)] if split == self.memory_split else paths[0]
        entries, _ = read_tm(data_path, split, split_lines=len(base), memory_lines=len(memory_src))
        own = (lambda i: i) if split == self.memory_split and data_path == self.memory_path() else None
        cfg = self.cfg
        selected, fuzzy, dropped = select_pairs(entries, cfg.tm_selection, cfg.tm_topk, cfg.tm_max_k, own)
        if dropped:
            logger.warning("seg_translation %s: dropped %d retrieved pairs that were the example itself", split,
                           dropped)
        n = np.array([len(s) for s in selected])
        logger.info("seg_translation %s: %s selection (K=%d, max %d): %.3f pairs per example on average, %d of %d "
                    "examples without a pair", split, cfg.tm_selection, cfg.tm_topk, cfg.tm_max_k,
                    float(n.mean()) if len(n) else 0.0, int((n == 0).sum()), len(n))
        self.datasets[split] = TMPairDataset(base, memory_src, memory_tgt, selected, fuzzy,
                                             cfg.max_source_positions, cfg.max_target_positions)

    # -- steps: the memory keys only for models that opt in
    def train_step(self, sample, model, *args, **kwargs):
        if not uses_translation_memory(model):
            sample = strip_tm(sample)
        return super().train_step(sample, model, *args, **kwargs)

    def valid_step(self, sample, model, *args, **kwargs):
        if not uses_translation_memory(model):
            sample = strip_tm(sample)
        return super().valid_step(sample, model, *args, **kwargs)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        opted = [uses_translation_memory(m) for m in models]
        if has_tm(sample) and not all(opted):
            if any(opted):
                raise UserDataError("seg_translation: an ensemble of translation-memory models and plain models is "
                                 "not supported")
            sample = strip_tm(sample)
        hypos = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                       constraints=constraints)
        if self.cfg.tm_export and has_tm(sample) and hasattr(unwrap_model(models[0]), "tm_trace"):
            self.export_trace(unwrap_model(models[0]), sample, hypos)
        return hypos

    def subset_for_inference(self, sample, keep: torch.Tensor):
        """The rows ``keep`` of a sample; the memory rows stay (``tm_index`` keeps pointing at them)."""
        if not has_tm(sample):
            return super().subset_for_inference(sample, keep)
        out = super().subset_for_inference(strip_tm(sample), keep)
        net = sample["net_input"]
        for k in TM_NET_INPUT_KEYS[:-1]:
            out["net_input"][k] = net[k]
        out["net_input"]["tm_index"] = net["tm_index"].index_select(0, keep.to(net["tm_index"].device))
        out["tm_id"] = sample["tm_id"]
        if "tm_fuzzy" in sample:
            out["tm_fuzzy"] = sample["tm_fuzzy"].index_select(0, keep.to(sample["tm_fuzzy"].device))
        return out

    # -- export of the gate (Fig. 4.5)
    def export_trace(self, model, sample, hypos) -> None:
        """One JSON line per hypothesis: the sample ``id``, its ``rank`` in the n-best list, the output
        ``tokens`` (ending in </s>), ``gate`` ζ_t per token, and per token the argmax memory slot:
        ``slot_pair`` (k, −1 without memory), ``slot_line`` (its training line), ``slot_position`` (τ in
        Y'_k), ``slot_token`` (y'_τ), ``slot_prob`` (q_{t,τ}); ``tm_lines`` / ``tm_fuzzy`` the example's pairs."""
        rows, seqs, where = [], [], []
        for b, hs in enumerate(hypos):
            for r, h in enumerate(hs):
                rows.append(b)
                seqs.append(h["tokens"].long())
                where.append((b, r))
        if not rows:
            return
        pad = self.tgt_dict.pad()
        device = sample["net_input"]["src_tokens"].device
        tokens = data_utils.collate_tokens(seqs, pad, self.tgt_dict.eos(), False).to(device)
        trace = model.tm_trace(sample["net_input"], torch.tensor(rows, device=device), tokens)
        trace = {k: v.cpu() for k, v in trace.items()}
        tm_index = sample["net_input"]["tm_index"].cpu()
        tm_id = sample["tm_id"].cpu()
        fuzzy = sample.get("tm_fuzzy")
        if self.export_file is None:
            self.export_file = open(self.cfg.tm_export, "w", encoding="utf-8")
        for n, (b, r) in enumerate(where):
            T = seqs[n].numel()
            lines = [int(tm_id[j]) for j in tm_index[b].tolist() if j >= 0]
            pair = trace["pair"][n, :T].tolist()
            record = {
                "id": int(sample["id"][b]), "rank": r, "tokens": [self.tgt_dict[int(t)] for t in seqs[n]],
                "gate": [round(float(g), 6) for g in trace["gate"][n, :T]],
                "slot_pair": pair,
                "slot_line": [lines[k] if k >= 0 else -1 for k in pair],
                "slot_position": trace["position"][n, :T].tolist(),
                "slot_token": [self.tgt_dict[int(t)] if k >= 0 else None
                               for t, k in zip(trace["slot_token"][n, :T], pair)],
                "slot_prob": [round(float(p), 6) for p in trace["slot_prob"][n, :T]],
                "tm_lines": lines,
                "tm_fuzzy": [None if math.isnan(x) else round(x, 6) for x in fuzzy[b, : len(lines)].tolist()]
                if fuzzy is not None else None,
            }
            self.export_file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.export_file.flush()

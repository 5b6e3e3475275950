"""``--doc-online-decoding``: online document decoding (Maruf 2019 ch. 4, the online setting of Table 4.3; the
decoder integration, Fig. 4.4, at test time): every sentence is translated after the earlier sentences of
its document, and its target context is the model's **own** translations of them (not references, not a stage-1
file).

A batch of ``doc_translation`` (whole documents, or consecutive chunks of a long one) is decoded in *waves*: wave k
holds the batch sentences all of whose in-batch context sentences are in waves < k (with ``--doc-context-mode
online`` and the full context that is the k-th sentence of every document of the batch: document-position waves
across the documents). Each wave is a sample of its own, decoded by the generator ``--decoding-algorithm`` builds
(fairseq's :class:`~fairseq.sequence_generator.SequenceGenerator` by default: ``--beam``, ``--lenpen``, ...,
unchanged): its batch = the wave's sentences, its extra rows = their context sentences, ``ctx_tgt_tokens`` = the
translations already produced (the best hypothesis of each; a sentence's own row gets ⟨eos⟩, never read under online
context). Context sentences of an earlier chunk of the document (extra rows of the task's batch) take the
translations this generator produced in the earlier batch (kept by dataset id for the run; fairseq-generate goes
through the split in corpus order).

Cost (the incremental cache). Nothing is recomputed across waves beyond the wave's own sentences: with
``--ctx-rep-model pretrained`` the frozen encoder's states of each context source and the frozen decoder's features
of each produced translation are computed once, the first time a later sentence reads them, and then served from
the model's caches (:mod:`fairseq_ext.modules.frozen_encodings`, ``--ctx-rep-cache-mb``; 0 recomputes the whole
context of every wave: the reference computation, the same translations). The output equals decoding offline with
those translations as ``--doc-target-context generated`` (up to the rounding of another batch composition).
"""
from typing import Dict, List, Optional

import torch
from fairseq.data import data_utils
from torch import Tensor

from fairseq_ext.data.context_keys import uses_document_context
from fairseq_ext.data.errors import UserDataError


def online_waves(ctx_index: Tensor, B: int, ids: List[int]) -> List[List[int]]:
    """The batch rows by wave (module doc): a row's wave is one more than the latest wave of its in-batch context
    rows (0 without any). A row that reads a later row of its document (offline context) has none."""
    context = [[r for r in row if 0 <= r < B] for row in ctx_index.tolist()] if ctx_index.numel() else [[]] * B
    wave: List[Optional[int]] = [None] * B
    todo = list(range(B))
    while todo:
        left = []
        for b in todo:
            deps = [wave[r] for r in context[b]]
            if any(d is None for d in deps):
                left.append(b)
            else:
                wave[b] = 1 + max(deps, default=-1)
        if len(left) == len(todo):
            raise UserDataError(f"--doc-online-decoding: sentence {ids[left[0]]} reads a later sentence of its document "
                                f"as context; online decoding needs --doc-context-mode online")
        todo = left
    waves: List[List[int]] = [[] for _ in range(1 + max(wave, default=-1))]  # type: ignore[type-var]
    for b, k in enumerate(wave):
        waves[k].append(b)  # type: ignore[index]
    return waves


class DocOnlineGenerator:
    """Online document decoding around a sentence-level generator (module doc)."""

    uses_document_context = True

    def __init__(self, generator, models, tgt_dict, src_pad: int, left_pad_source: bool = True):
        if not all(uses_document_context(m) for m in models):
            raise UserDataError("--doc-online-decoding decodes document models (uses_document_context); a sentence "
                                "model has no context to feed")
        self.generator = generator
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.src_pad, self.left_pad_source = src_pad, left_pad_source
        self.symbols_to_strip_from_output = getattr(generator, "symbols_to_strip_from_output", {self.eos})
        #: dataset id → the model's own translation (target units ending in ⟨eos⟩), for the whole run
        self.translations: Dict[int, Tensor] = {}
        #: rows per wave of the last batch
        self.wave_sizes: List[int] = []

    def cuda(self):
        if hasattr(self.generator, "cuda"):
            self.generator.cuda()
        return self

    @torch.no_grad()
    def generate(self, models, sample: Dict, prefix_tokens=None, constraints=None, **kwargs) -> List[List[Dict]]:
        net = sample["net_input"]
        src = net["src_tokens"]
        B = src.size(0)
        ids = sample["id"].tolist()
        extra_ids = sample["ctx_id"].tolist() if "ctx_id" in sample else []
        own: Dict[int, Tensor] = {B + e: self.earlier(i, net["ctx_src_tokens"][e]) for e, i in enumerate(extra_ids)}
        waves = online_waves(net["ctx_index"], B, ids)
        self.wave_sizes = [len(w) for w in waves]
        results: List[Optional[List[Dict]]] = [None] * B
        for wave in waves:
            rows = torch.tensor(wave, dtype=torch.long, device=src.device)
            hyps = self.generator.generate(
                models, self.wave_sample(sample, wave, own),
                prefix_tokens=None if prefix_tokens is None else prefix_tokens.index_select(0, rows),
                constraints=None if constraints is None else constraints.index_select(0, rows), **kwargs)
            for b, h in zip(wave, hyps):
                results[b] = h
                own[b] = self.translations[ids[b]] = h[0]["tokens"]
        return results  # type: ignore[return-value]

    def earlier(self, dataset_id: int, source: Tensor) -> Tensor:
        """The translation of a context sentence outside the batch (an earlier chunk's)."""
        found = self.translations.get(dataset_id)
        if found is not None:
            return found
        if int(source.ne(self.src_pad).sum()) <= 1:  # an empty source: the task translated it as empty
            return source.new_tensor([self.eos])
        raise UserDataError(f"--doc-online-decoding: sentence {dataset_id}, the context of a later sentence, has not "
                            f"been translated yet (online decoding goes through a split in corpus order; was it "
                            f"filtered out by its length? raise --max-source-positions / --max-target-positions)")

    def wave_sample(self, sample: Dict, wave: List[int], own: Dict[int, Tensor]) -> Dict:
        """The sample of one wave: its rows as the batch, their context rows as extra rows (module doc)."""
        net = sample["net_input"]
        src, index = net["src_tokens"], net["ctx_index"]
        B, device = src.size(0), src.device
        rows = torch.tensor(wave, dtype=torch.long, device=device)
        old = index.index_select(0, rows)
        context = sorted({r for r in old.view(-1).tolist() if r >= 0})
        new_row = torch.full((B + net["ctx_src_tokens"].size(0),), -1, dtype=torch.long, device=device)
        new_row[torch.tensor(wave + context, dtype=torch.long, device=device)] = torch.arange(
            len(wave) + len(context), device=device)
        mapped = torch.where(old.ge(0), new_row[old.clamp(min=0)], old)

        def source(r: int) -> Tensor:
            row = src[r] if r < B else net["ctx_src_tokens"][r - B]
            return row[row.ne(self.src_pad)]

        def collate(tokens: List[Tensor], pad: int, left: bool) -> Tensor:
            return data_utils.collate_tokens(tokens, pad, left_pad=left)

        extra = [source(r) for r in context]
        targets = [own.get(r, src.new_tensor([self.eos])) for r in wave + context]  # a wave row is never read
        new_net = {
            "src_tokens": collate([source(b) for b in wave], self.src_pad, self.left_pad_source),
            "src_lengths": net["src_lengths"].index_select(0, rows),
            "ctx_src_tokens": (collate(extra, self.src_pad, self.left_pad_source) if extra
                               else src.new_full((0, 1), self.src_pad)),
            "ctx_src_lengths": torch.tensor([t.numel() for t in extra], dtype=torch.long, device=device),
            "ctx_index": mapped,
            "ctx_distance": net["ctx_distance"].index_select(0, rows),
            "ctx_tgt_tokens": collate(targets, self.pad, False),
            "ctx_tgt_lengths": torch.tensor([t.numel() for t in targets], dtype=torch.long, device=device),
        }
        out = {k: v.index_select(0, rows) for k, v in sample.items()
               if k in ("id", "doc_index", "doc_pos", "target") and torch.is_tensor(v) and v.size(0) == B}
        out["net_input"] = new_net
        out["nsentences"] = len(wave)
        return out

"""``doc_bcd``: block-coordinate-descent document decoding of Maruf (2019) §3.3: argmax over y^1..y^|d| of
Π_j P(y^j | x^j, Y^{−j}, X^{−j}) (Eq. 3.2's factors), approximated by

1. pass 0: every sentence translated greedily without target context: ``init="base_model"`` with a
   second (sentence) model (``--path DOC.pt:SENT.pt``), ``init="zero_context"`` with the document model's
   memory off (:meth:`DocMemModel.memory_disabled`), ``"auto"`` the first when two models are given;
2. K = ``iterations`` passes re-translating every sentence with the document model, the others'
   current translations as target context (``ctx_tgt_tokens``): ``update="jacobi"`` (default; pass t sees
   pass t−1, the thesis's "two-pass decoding" for K = 1, footnote 9) or ``"gauss_seidel"`` (in document
   order, in place).

K = 0 returns pass 0, exactly the sentence model's greedy output; a model without target context is
decoded once.

Cost. The source side of every pass is the same (x^j, X^{−j}): with a document model that offers
``encoder_out_with_targets(encoder_out, ctx_tgt_tokens, ctx_tgt_lengths)`` (docmem) and Jacobi updates, the
document model's encoder runs once per batch and every pass swaps in the current translations (pass 0 of
``zero_context`` decodes on the same encoder states, its memories off); the output is the one of encoding every
pass anew. With ``reuse_states`` (default on, with the encoder reuse) the target memory's states s^{|y|} of a
translation (docmem's ``memory_states``: a deterministic function of the sentence's source and that
translation) are computed once per run and kept: the sentence's memory-disabled decoding in pass 0 of
``zero_context`` yields them for its own output on the way (the state at the step that predicts ⟨eos⟩; the
teacher-forced pass repeats that computation), the others come from one teacher-forced pass per pass over the
N-set rows whose (source, translation) has not been seen in this run; likewise the pass-0 translations of the
context rows outside the batch (a context-free function of the source) are decoded once per run. Both equal
the recomputation up to the rounding of batched kernels (a row's result may differ in the last bits with the
batch it is computed in); the caches are emptied when a model's parameters change. ``early_stop`` (``--bcd-early-stop``, Jacobi only, default off) re-decodes in pass k ≥ 2 only the
sentences j for which a translation of {j} ∪ (the context rows of j) changed in pass k−1: the others have the
inputs of pass k−1 (their source side is fixed; docmem's target memory reads only those translations,
Eq. 3.4), so their greedy output is that of pass k−1 in exact arithmetic; the iterations stop when no sentence
is left. It can skip nothing for K = 1 (pass 1 is the first pass with target context). It is exact up to the
floating-point effect of decoding a sub-batch (row results of the batched kernels may differ in the last bits
with the batch size), hence optional.

Each pass is :class:`~fairseq_ext.generators.decoding.GreedyGenerator`. The document model offers
``uses_document_context``, optionally ``uses_target_context`` and ``memory_disabled()``. The task builds the
generator from ``--doc-iterations K``, ``--bcd-update``, ``--bcd-init``, ``--bcd-early-stop``.

Reference: Maruf & Haffari, "Document Context Neural Machine Translation with Memory Networks", ACL 2018.
"""
import contextlib
from typing import Dict, List, Optional, Sequence

import torch
from fairseq.data import data_utils
from torch import Tensor

from fairseq_ext.generators.decoding import GreedyGenerator
from fairseq_ext.data.errors import UserDataError

BCD_UPDATES = ("jacobi", "gauss_seidel")
BCD_INITS = ("auto", "base_model", "zero_context")


class ContextGreedyGenerator(GreedyGenerator):
    """Greedy decoding (Eq. 2.10) of a batch of a document (the encoder sees the document context keys of
    ``net_input``, as with every generator of :mod:`fairseq_ext.generators.decoding`)."""

    @torch.no_grad()
    def decode(self, sample: Dict) -> List[Dict]:
        """[{tokens, positional_scores}] per batch row."""
        src_tokens = sample["net_input"]["src_tokens"]
        return self.greedy(self.encode(sample), src_tokens.size(0), self.decode_limit(src_tokens))


def strip_pad(tokens: Tensor, pad: int) -> List[Tensor]:
    return [row[row.ne(pad)] for row in tokens]


class DocBCDGenerator:
    """Block-coordinate-descent document decoding (module doc).

    ``uses_document_context``: the ``doc_translation`` task hands it the context keys; it passes them on to
    the document model, and to the sentence model only if that model opts in too.

    ``DocBCDGenerator(models, tgt_dict, iterations=1, update="jacobi", init="auto", **limits)`` (``limits``: the
    keywords of :class:`~fairseq_ext.generators.decoding.AutoregressiveGenerator`, fairseq's generation defaults
    where not given); ``generate(models, sample)`` → per batch sentence a one-element list of fairseq hypothesis
    dicts."""

    uses_document_context = True

    def __init__(self, models, tgt_dict, iterations: int = 1, update: str = "jacobi", init: str = "auto",
                 early_stop: bool = False, reuse_encoder: bool = True, reuse_states: bool = True, **greedy_kwargs):
        if iterations < 0:
            raise UserDataError(f"--doc-iterations must be >= 0, got {iterations}")
        if update not in BCD_UPDATES:
            raise UserDataError(f"unknown --bcd-update {update!r}; expected one of {BCD_UPDATES}")
        if init not in BCD_INITS:
            raise UserDataError(f"unknown --bcd-init {init!r}; expected one of {BCD_INITS}")
        if not 1 <= len(models) <= 2:
            raise UserDataError(f"doc_bcd takes the document model and optionally the sentence model "
                             f"(--path DOC.pt:SENT.pt), got {len(models)} models")
        if init == "auto":
            init = "base_model" if len(models) == 2 else "zero_context"
        if init == "base_model" and len(models) < 2:
            raise UserDataError("--bcd-init base_model needs the sentence model as the second --path entry")
        self.models = list(models)
        self.model = models[0]
        self.tgt_dict = tgt_dict
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.iterations, self.update, self.init = iterations, update, init
        if early_stop and update != "jacobi":
            raise UserDataError("--bcd-early-stop needs --bcd-update jacobi")
        #: encode once per batch (module doc); False: every pass encodes anew (the reference computation)
        self.reuse_encoder = bool(reuse_encoder) and hasattr(self.model, "encoder_out_with_targets")
        self.early_stop = bool(early_stop)
        #: keep memory states and pass-0 context translations across passes and batches (module doc)
        self.reuse_states = self.reuse_encoder and bool(reuse_states) and hasattr(self.model, "memory_states")
        self.memory = MemoryStateCache(self.models)
        #: rows decoded by each document pass of the last ``generate`` (pass 1, 2, ...)
        self.decoded_rows: List[int] = []
        #: (source tensor, encoder output) of the batch being generated
        self.encoded: Optional[tuple] = None
        self.doc_greedy = ContextGreedyGenerator([models[0]], tgt_dict, **greedy_kwargs)
        self.init_greedy = (ContextGreedyGenerator([models[1]], tgt_dict, **greedy_kwargs)
                            if init == "base_model" else self.doc_greedy)
        if init == "zero_context" and not hasattr(self.model, "memory_disabled"):
            raise UserDataError(f"--bcd-init zero_context needs a document model with memory_disabled() "
                             f"(docmem); {type(self.model).__name__} has none: give the sentence model too")
        self.symbols_to_strip_from_output = {self.eos}

    def cuda(self):
        for m in self.models:
            m.cuda()
        return self

    # ------------------------------------------------------------------ one greedy pass
    def decode(self, stage: str, sample: Dict) -> List[Dict]:
        """Greedy translations of the batch rows of ``sample``: ``stage`` "init" (pass 0) or "doc". On the
        batch being generated, the document model decodes on its encoder output of that batch (module doc),
        the rows ``sample["bcd_rows"]`` only when given."""
        encoded = self.encoded_for(sample)
        if stage == "init" and self.init == "zero_context":
            with self.model.memory_disabled(), self.memory.capture(self, sample):
                hyps = self.greedy_on(encoded, sample) if encoded is not None else self.doc_greedy.decode(sample)
            self.memory.keep_captured(self, hyps)
            return hyps
        if stage == "init":
            if not getattr(self.init_greedy.model, "uses_document_context", False):
                net_input = sample["net_input"]
                sample = dict(sample, net_input={k: net_input[k] for k in ("src_tokens", "src_lengths")})
            return self.init_greedy.decode(sample)
        if encoded is not None:
            net_input = sample["net_input"]
            states = self.memory.states(self, encoded, sample) if self.reuse_states else None
            encoded = self.model.encoder_out_with_targets(encoded, net_input["ctx_tgt_tokens"],
                                                          net_input["ctx_tgt_lengths"], states)
            return self.greedy_on(encoded, sample)
        return self.doc_greedy.decode(sample)

    def encoded_for(self, sample: Dict) -> Optional[Dict]:
        """The document model's encoder output of the batch being generated if ``sample`` is that batch (the
        same source tensor), else None."""
        if self.encoded is None or self.encoded[0] is not sample["net_input"]["src_tokens"]:
            return None
        return self.encoded[1]

    def greedy_on(self, encoder_out: Dict, sample: Dict) -> List[Dict]:
        """The document model's greedy translations on ``encoder_out``, of the rows ``sample["bcd_rows"]``
        (all when absent); the length limit is the whole batch's."""
        src_tokens = sample["net_input"]["src_tokens"]
        rows = sample.get("bcd_rows")
        if rows is not None:
            order = torch.tensor(rows, dtype=torch.long, device=src_tokens.device)
            encoder_out = self.model.encoder.reorder_encoder_out(encoder_out, order)
        n = len(rows) if rows is not None else src_tokens.size(0)
        return self.doc_greedy.greedy(encoder_out, n, self.doc_greedy.decode_limit(src_tokens))

    # ------------------------------------------------------------------ samples
    def source_pad(self) -> int:
        return self.model.encoder.dictionary.pad()

    def nset_sources(self, net_input) -> List[Tensor]:
        pad = self.source_pad()
        rows = strip_pad(net_input["src_tokens"], pad)
        extra = net_input.get("ctx_src_tokens")
        if extra is not None and extra.size(0) > 0:
            rows += strip_pad(extra, pad)
        return rows

    def with_targets(self, sample: Dict, translations: Sequence[Tensor]) -> Dict:
        """``sample`` with ``ctx_tgt_tokens`` / ``ctx_tgt_lengths`` = ``translations`` (one per N-set row)."""
        net_input = dict(sample["net_input"])
        net_input["ctx_tgt_tokens"] = data_utils.collate_tokens(list(translations), self.pad, self.eos)
        net_input["ctx_tgt_lengths"] = torch.tensor([t.numel() for t in translations],
                                                    device=net_input["src_tokens"].device)
        return dict(sample, net_input=net_input)

    def rows_as_batch(self, sample: Dict, rows: List[int], translations: Optional[Sequence[Tensor]]) -> Dict:
        """A sample whose batch is the N-set rows ``rows`` (in that order) and whose extra rows are all the
        other rows of the N-set, the context indices renumbered (rows ≥ B, extra rows of the original
        sample, get an empty context)."""
        net_input = sample["net_input"]
        src = net_input["src_tokens"]
        B, device, pad = src.size(0), src.device, self.source_pad()
        left = not bool(src[:, -1].eq(pad).any())
        sources = self.nset_sources(net_input)
        N = len(sources)
        chosen = set(rows)
        order = list(rows) + [r for r in range(N) if r not in chosen]
        new_of_old = torch.empty(N, dtype=torch.long, device=device)
        new_of_old[torch.tensor(order, device=device)] = torch.arange(N, device=device)
        old_index = net_input.get("ctx_index")
        K = old_index.size(1) if old_index is not None else 0
        index = torch.full((len(rows), K), -1, dtype=torch.long, device=device)
        distance = torch.zeros((len(rows), K), dtype=torch.long, device=device)
        inside = [i for i, r in enumerate(rows) if r < B]
        if inside and K > 0:
            sel = torch.tensor([rows[i] for i in inside], device=device)
            old = old_index.index_select(0, sel)
            pos = torch.tensor(inside, device=device)
            index[pos] = torch.where(old.ge(0), new_of_old[old.clamp(min=0)], old)
            distance[pos] = net_input["ctx_distance"].index_select(0, sel)
        extra = [sources[r] for r in order[len(rows):]]
        new_input = {
            "src_tokens": data_utils.collate_tokens([sources[r] for r in rows], pad, left_pad=left),
            "src_lengths": torch.tensor([sources[r].numel() for r in rows], device=device),
            "ctx_src_tokens": (data_utils.collate_tokens(extra, pad, left_pad=left) if extra
                               else src.new_full((0, 1), pad)),
            "ctx_src_lengths": torch.tensor([t.numel() for t in extra], dtype=torch.long, device=device),
            "ctx_index": index,
            "ctx_distance": distance,
        }
        if translations is not None:
            new_input["ctx_tgt_tokens"] = data_utils.collate_tokens([translations[r] for r in order], self.pad,
                                                                    self.eos)
            new_input["ctx_tgt_lengths"] = torch.tensor([translations[r].numel() for r in order], device=device)
        return {"id": None, "net_input": new_input}

    def document_waves(self, sample: Dict) -> List[List[int]]:
        """Batch rows grouped by their rank in their document (document order): wave k = the k-th sentence
        of every document of the batch."""
        B = sample["net_input"]["src_tokens"].size(0)
        doc = sample.get("doc_index")
        pos = sample.get("doc_pos")
        docs = doc.tolist() if doc is not None else [0] * B
        positions = pos.tolist() if pos is not None else list(range(B))
        waves: List[List[int]] = []
        seen: Dict[int, int] = {}
        for b in sorted(range(B), key=lambda r: (docs[r], positions[r], r)):
            k = seen.get(docs[b], 0)
            seen[docs[b]] = k + 1
            if k == len(waves):
                waves.append([])
            waves[k].append(b)
        return [sorted(w) for w in waves]

    # ------------------------------------------------------------------ BCD
    @torch.no_grad()
    def generate(self, models, sample: Dict, prefix_tokens=None, constraints=None, **kwargs) -> List[List[Dict]]:
        if prefix_tokens is not None or constraints is not None:
            raise NotImplementedError("doc_bcd does not support --prefix-size or --constraints")
        net_input = sample["net_input"]
        if self.iterations > 0 and not getattr(self.model, "uses_target_context", True):
            hyps = self.decode("doc", sample)  # no target context: nothing to iterate
            return [[self.doc_greedy.hypothesis(h["tokens"], h["positional_scores"])] for h in hyps]
        self.decoded_rows = []
        self.memory.check_models()
        if self.reuse_encoder and self.update == "jacobi" and self.iterations > 0:
            self.encoded = (net_input["src_tokens"], self.doc_greedy.encode(sample))
        try:
            return self.iterate(sample)
        finally:
            self.encoded = None

    def iterate(self, sample: Dict) -> List[List[Dict]]:
        """Pass 0 and the K passes (module doc)."""
        B = sample["net_input"]["src_tokens"].size(0)
        hyps = self.decode("init", sample)
        if self.iterations == 0:
            return [[self.doc_greedy.hypothesis(h["tokens"], h["positional_scores"])] for h in hyps]
        current = [h["tokens"] for h in hyps] + self.extra_translations(sample)
        previous: Optional[List[Tensor]] = None
        for _ in range(self.iterations):
            if self.update == "jacobi":
                rows = self.rows_to_redecode(sample, current, previous)
                if not rows:
                    break  # a fixed point: no sentence can change any more
                batch = self.with_targets(sample, current)
                if len(rows) < B:
                    batch = (dict(batch, bcd_rows=rows) if self.encoded_for(batch) is not None
                             else self.rows_as_batch(sample, rows, current))
                out = self.decode("doc", batch)
                self.decoded_rows.append(len(rows))
                previous = list(current)
                for b, h in zip(rows, out):
                    hyps[b] = h
                    current[b] = h["tokens"]
            else:
                for wave in self.document_waves(sample):
                    out = self.decode("doc", self.rows_as_batch(sample, wave, current))
                    for b, h in zip(wave, out):
                        hyps[b] = h
                        current[b] = h["tokens"]
        return [[self.doc_greedy.hypothesis(h["tokens"], h["positional_scores"])] for h in hyps]

    def rows_to_redecode(self, sample: Dict, current: List[Tensor], previous: Optional[List[Tensor]]) -> List[int]:
        """The batch rows a Jacobi pass decodes: all of them, or with ``early_stop`` those whose own or context
        translations changed between ``previous`` and ``current`` (module doc)."""
        B = sample["net_input"]["src_tokens"].size(0)
        if not self.early_stop or previous is None:
            return list(range(B))
        changed = [not torch.equal(c, p) for c, p in zip(current, previous)]
        index = sample["net_input"].get("ctx_index")
        context = index.tolist() if index is not None else [[] for _ in range(B)]
        return [b for b in range(B) if changed[b] or any(changed[r] for r in context[b] if r >= 0)]

    def extra_translations(self, sample: Dict) -> List[Tensor]:
        """Target sides of the extra N-set rows: the task's, else their pass-0 translations."""
        net_input = sample["net_input"]
        B = net_input["src_tokens"].size(0)
        extra = net_input.get("ctx_src_tokens")
        E = extra.size(0) if extra is not None else 0
        if E == 0:
            return []
        given = net_input.get("ctx_tgt_tokens")
        if given is not None:
            return strip_pad(given[B: B + E], self.pad)
        keys = self.memory.source_keys(self, sample)[B:] if self.reuse_states and self.context_free_init() else None
        known = [self.memory.pass0.get(k) for k in keys] if keys is not None else [None] * E
        missing = [B + i for i, t in enumerate(known) if t is None]
        if missing:
            hyps = self.decode("init", self.rows_as_batch(sample, missing, None))
            for r, h in zip(missing, hyps):
                known[r - B] = h["tokens"]
                if keys is not None:
                    self.memory.pass0[keys[r - B]] = h["tokens"]
        return known

    def context_free_init(self) -> bool:
        """Whether pass 0 translates a sentence from its source alone (the sentence model, or the document
        model with its memories off)."""
        return self.init == "zero_context" or not getattr(self.init_greedy.model, "uses_document_context", False)


class MemoryStateCache:
    """What ``reuse_states`` keeps for one run (module doc): ``known`` (source, translation) → s^{|y|} (H,)
    and ``pass0`` source → its pass-0 translation; emptied when a model's parameters change (an in-place
    update bumps a tensor's version) and when it grows past ``max_entries``."""

    def __init__(self, models, max_entries: int = 1 << 16):
        self.models = models
        self.max_entries = max_entries
        self.stamp = None
        self.known: Dict[tuple, Tensor] = {}
        self.pass0: Dict[tuple, Tensor] = {}
        self.captured: Optional[tuple] = None

    def check_models(self) -> None:
        stamp = tuple((id(p), p._version) for m in self.models for p in m.parameters())
        if stamp != self.stamp or len(self.known) + len(self.pass0) > self.max_entries:
            self.stamp = stamp
            self.known.clear()
            self.pass0.clear()

    @staticmethod
    def row_keys(tokens: Tensor, pad: int) -> List[tuple]:
        """Each row of ``tokens`` without its padding, as a tuple."""
        return [tuple(x for x in row if x != pad) for row in tokens.tolist()]

    def source_keys(self, gen: "DocBCDGenerator", sample: Dict) -> List[tuple]:
        """The sources of the N-set rows of ``sample`` (batch rows, then extra rows) as tuples."""
        net_input = sample["net_input"]
        pad = gen.source_pad()
        keys = self.row_keys(net_input["src_tokens"], pad)
        extra = net_input.get("ctx_src_tokens")
        if extra is not None and extra.size(0) > 0:
            keys += self.row_keys(extra, pad)
        return keys

    @contextlib.contextmanager
    def capture(self, gen: "DocBCDGenerator", sample: Dict):
        """Within the block (a memory-disabled greedy pass of the batch rows of ``sample``), record the
        decoder's top states at every step, then keep each row's state at the step that predicted its ⟨eos⟩
        under (its source, its translation)."""
        model = gen.model
        if not (gen.reuse_states and getattr(model, "memory_states_are_decoder_states", False)):
            yield
            return
        steps: List[Tensor] = []
        handle = model.decoder.register_forward_hook(lambda m, i, out: steps.append(out[1]["states"][0][:, -1]))
        try:
            yield
        finally:
            handle.remove()
        self.captured = (sample, steps)

    def keep_captured(self, gen: "DocBCDGenerator", hyps: List[Dict]) -> None:
        """Store the states of the last :meth:`capture` for the translations ``hyps`` of its rows."""
        if self.captured is None:
            return
        sample, steps = self.captured
        self.captured = None
        src = self.row_keys(sample["net_input"]["src_tokens"], gen.source_pad())
        lengths = torch.tensor([h["tokens"].numel() for h in hyps])
        last = lengths - 1  # the step that predicted ⟨eos⟩
        # the rows still active at a step keep their order: a row's place there = the earlier rows still active
        rank = (lengths.unsqueeze(0).gt(last.unsqueeze(1)) & torch.ones(len(hyps), len(hyps)).tril(-1).bool()).sum(1)
        kept = torch.stack([steps[int(t)][int(i)] for t, i in zip(last, rank)])  # a copy: the steps are freed
        for r, h in enumerate(hyps):
            self.known[(src[r], tuple(h["tokens"].tolist()))] = kept[r]

    def states(self, gen: "DocBCDGenerator", encoded: Dict, sample: Dict) -> Tensor:
        """(N, H) s^{|y|} of every N-set row's current translation (``ctx_tgt_tokens``): known ones from the
        run so far, the others teacher-forced in one pass (and kept)."""
        net_input = sample["net_input"]
        tokens, lengths = net_input["ctx_tgt_tokens"], net_input["ctx_tgt_lengths"]
        keys = [(s, tuple(t[: n])) for s, t, n in
                zip(self.source_keys(gen, sample), tokens.tolist(), lengths.tolist())]
        missing = [r for r, k in enumerate(keys) if k not in self.known]
        if missing:
            rows = torch.tensor(missing, dtype=torch.long, device=tokens.device)
            for r, state in zip(missing, gen.model.memory_states(encoded, tokens, lengths, rows)):
                self.known[keys[r]] = state
        return torch.stack([self.known[k] for k in keys])

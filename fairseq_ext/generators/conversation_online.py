"""``conversation_online``: online translation of bilingual conversations (Maruf 2019 ch. 5, §5.3.4:
argmax_y P(y^j | x^j, o^j), greedy in the thesis, "the history uses the model's own earlier translations").

A batch of the ``conversation_translation`` task holds whole conversations. The generator translates them
in conversation order, one *wave* per position (the k-th sentence of every conversation of the batch);
within a wave the rows are routed to the direction model of their language and decoded greedily (``--beam 1``,
the thesis's decoder) or with the shrinking beam of ``--beam K`` (Gu 2019 Eqs. 2.11–2.13: K live hypotheses, a
finished one leaves the beam, re-ranked by ``--lenpen``; the best is the translation the history then uses),
with fairseq's length limits and bans (:mod:`fairseq_ext.generators.decoding`).
The history of a row is exactly the one the task decided (``hist_index``): its sources (the sentence
vectors of every N-set row are computed once, up front -- all sources are observed) and, for the target
history, the generator's **own** translations of those rows (their target vectors are computed once, right
after the wave that produced them). The batch's ``hist_tgt_tokens`` (references or a file) are never read.

**Turn-RNN cache**: a history segment (a turn, or the prefix of the ongoing turn) is encoded by the
Turn-RNN of its language; a segment of a *completed* turn is cached (key: its rows) and reused by every
later sentence of the conversation, so earlier turns are never recomputed -- only the ongoing turn's prefix
is (bi-directional, it changes with every sentence, §5.7's "compute one turn at a time"). ``cache_turns=False``
recomputes everything (the check that both give the same translations is a unit test); ``stats`` counts the
segments encoded and the cache hits.

Hypotheses are fairseq's dicts (``tokens`` ending in ⟨eos⟩, ``score``, ``positional_scores``, ``attention``
and ``alignment`` None), so ``fairseq-generate`` prints them unchanged; ``--nbest`` is 1.

Reference: Maruf, Martins, Haffari, "Contextual Neural Model for Translating Bilingual Multi-Speaker
Conversations", WMT 2018; Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University,
2019, ch. 5.
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from fairseq_ext.generators.decoding import ShrinkingBeamGenerator
from fairseq_ext.modules.bimsmt import Segment, assemble_history, encode_segments, history_segments
from fairseq_ext.data.errors import UserDataError


class ConversationOnlineGenerator:
    """Online conversation decoding (greedy or the shrinking beam) with the Turn-RNN cache (module doc)."""

    uses_conversation_history = True

    def __init__(self, models, tgt_dict, cache_turns: bool = True, beam_size: int = 1, **limits):
        if len(models) != 1:
            raise NotImplementedError("conversation_online decodes with a single model (no ensembles)")
        self.model = models[0]
        if not getattr(self.model, "uses_conversation_history", False):
            raise UserDataError("conversation_online needs a conversation model (--arch bimsmt_rnn*)")
        self.tgt_dict = tgt_dict
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.beam_size = beam_size
        self.decoders = [ShrinkingBeamGenerator([m], tgt_dict, beam_size=beam_size, **limits)
                         for m in self.model.directions]
        self.symbols_to_strip_from_output = {self.eos}
        self.cache_turns = cache_turns
        self.stats = {"segments_encoded": 0, "cache_hits": 0}
        #: per decoded row (dataset id), the context extras of its direction model (analysis, tests)
        self.last_contexts: Dict[int, Tensor] = {}

    def cuda(self):
        self.model.cuda()
        return self

    # -------------------------------------------------------------------------------------------- decode
    @torch.no_grad()
    def generate(self, models, sample: Dict, prefix_tokens=None, constraints=None, **kwargs) -> List[List[Dict]]:
        if prefix_tokens is not None or constraints is not None:
            raise NotImplementedError("conversation_online supports neither --prefix-size nor --constraints")
        model = self.model
        model.eval()
        net = sample["net_input"]
        src, direction = net["src_tokens"], net["direction"]
        B = src.size(0)
        pad = model.dictionary.pad()
        hist_src = net.get("hist_src_tokens")
        if hist_src is None:
            hist_src = src.new_full((0, 1), pad)
        E = hist_src.size(0)
        nset_lang, nset_turn, hist_index = net["nset_lang"], net["nset_turn"], net["hist_index"]
        use_ctx = model.uses_context
        use_tgt = model.uses_target_history
        if use_tgt and E > 0:
            raise UserDataError("conversation_online: the batch lacks earlier sentences of its conversations (were "
                             "some filtered by size? raise --max-source-positions / --max-target-positions); their "
                             "translations are needed for the target history")
        sent = None
        if use_ctx and (model.use_src or model.use_mix):
            sent = model.nset_sentence_vectors([src, hist_src], nset_lang)
        tgt_vec: Optional[Tensor] = None
        pos = sample["conv_pos"].tolist() if "conv_pos" in sample else \
            hist_index.ge(0).sum(1).tolist()
        segments_of = history_segments(hist_index, nset_turn) if sent is not None else [[] for _ in range(B)]
        cache: Dict[Tuple[int, ...], Segment] = {}
        turn_of = nset_turn.tolist()
        langs = nset_lang.tolist()
        results: List[Optional[Dict]] = [None] * B
        ids = sample["id"].tolist() if "id" in sample else list(range(B))
        for p in sorted(set(pos)):
            wave = [b for b in range(B) if pos[b] == p]
            hist = None
            if use_ctx:
                segs = [self.row_segments(b, segments_of[b], sent, turn_of, langs, cache) for b in wave]
                targets = None
                if use_tgt:
                    targets = [[(langs[r], tgt_vec[r]) for r in hist_index[b].tolist() if r >= 0] for b in wave]
                like = sent if sent is not None else src.new_zeros(1, 1).float()
                hist = assemble_history(segs, targets, 2 * model.args.encoder_hidden_size,
                                        model.args.decoder_hidden_size, like)
            for d in (0, 1):
                local = [k for k, b in enumerate(wave) if int(direction[b]) == d]
                if not local:
                    continue
                rows = torch.tensor([wave[k] for k in local], dtype=torch.long, device=src.device)
                hyps = self.decode_rows(d, src.index_select(0, rows), hist, local, [ids[int(r)] for r in rows])
                for r, h in zip(rows.tolist(), hyps):
                    results[r] = h
            if use_tgt:
                tgt_vec = self.add_target_vectors(tgt_vec, wave, src, direction, results, B)
        return [[r] for r in results]  # type: ignore[misc]

    def row_segments(self, b: int, segs: List[Tuple[int, ...]], sent: Tensor, turn_of: List[int],
                     langs: List[int], cache: Dict[Tuple[int, ...], Segment]) -> List[Segment]:
        """The encoded history segments of row b: completed turns from the cache, the ongoing prefix anew."""
        out: List[Optional[Segment]] = []
        todo = []
        for s in segs:
            completed = turn_of[s[0]] != turn_of[b]
            if self.cache_turns and completed and s in cache:
                self.stats["cache_hits"] += 1
                out.append(cache[s])
            else:
                todo.append((len(out), s, completed))
                out.append(None)
        if todo:
            enc = encode_segments(self.model.turn_rnns, [(langs[s[0]], sent[list(s)]) for _, s, _ in todo])
            self.stats["segments_encoded"] += len(todo)
            for (k, s, completed), e in zip(todo, enc):
                out[k] = e
                if self.cache_turns and completed:
                    cache[s] = e
        return out  # type: ignore[return-value]

    def decode_rows(self, d: int, src: Tensor, hist, local: List[int], ids: List[int]) -> List[Dict]:
        model = self.model
        pad = model.dictionary.pad()
        direction = model.directions[d]
        src = src[:, src.ne(pad).any(0)]
        enc = direction.encoder(src, src.ne(pad).sum(1))
        if hist is not None:
            idx = torch.tensor(local, dtype=torch.long, device=src.device)
            sub = type(hist)(*[None if t is None else t.index_select(0, idx) for t in hist])
            ctx, extras = direction.context(enc["encoder_final"][0], sub)
            enc["conv_context"] = [ctx]
            for k, i in enumerate(ids):
                self.last_contexts[i] = ctx[k]
        gen = self.decoders[d]
        if self.beam_size > 1:
            return [h[0] for h in gen.beam(enc, src.size(0), gen.decode_limit(src))]
        hyps = gen.greedy(enc, src.size(0), gen.decode_limit(src))
        return [gen.hypothesis(h["tokens"], h["positional_scores"]) for h in hyps]

    def add_target_vectors(self, tgt_vec: Optional[Tensor], wave: List[int], src: Tensor, direction: Tensor,
                           results: List[Optional[Dict]], B: int) -> Tensor:
        """Target vectors (model.target_vectors) of this wave's own translations."""
        model = self.model
        for d in (0, 1):
            rows = [b for b in wave if int(direction[b]) == d]
            if not rows:
                continue
            idx = torch.tensor(rows, dtype=torch.long, device=src.device)
            hyps = [results[b]["tokens"] for b in rows]
            tokens = torch.nn.utils.rnn.pad_sequence(hyps, batch_first=True, padding_value=self.pad)
            vec = model.target_vectors(d, src.index_select(0, idx), tokens)
            if tgt_vec is None:
                tgt_vec = vec.new_zeros(B, vec.size(-1))
            tgt_vec[idx] = vec
        return tgt_vec

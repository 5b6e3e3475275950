"""Building blocks of the bilingual multi-speaker conversation model (Bi-MSMT) of Maruf (2019) ch. 5: the
language-specific Turn-RNNs, the history of a sentence as padded tensors, the source-context variants of
§5.3.1.1 with the language gate (Eq. 5.1) and the reduction (Eq. 5.2), the target-side history (§5.3.1.2)
and the Src-Tgt-Mix dual context (§5.3.2).

Notation: one direction model, source language s ("English" in the equations), target language t; D = 2H
the width of a Turn-RNN state and of the query h^j, H the decoder size.

* :class:`TurnRNN`: a bi-GRU over the sentence vectors of one turn (sentence states and turn vector).
* :class:`History`: what one sentence sees, padded over the batch (:func:`assemble_history`,
  :func:`encode_history`).
* Source context (``--src-ctx``): ``direct`` (Eq. 5.1), ``hier_gating`` (Eqs. 5.1-5.2), ``lang_attn``
  (Eq. 5.3), ``lang_sent_attn`` (Lang-Specific S-Attention), ``combined_attn`` (Eq. 5.2).
* Target context (``--tgt-ctx lang_sent_attn``, §5.3.1.2, Eq. 5.1) and Src-Tgt-Mix (§5.3.2).

An empty side reads the zero vector and the gate takes the other side alone; a sentence without any
history gets the context vector 0 exactly, so the decoder sees the base model's input.

Reference: Maruf, Martins, Haffari, "Contextual Neural Model for Translating Bilingual Multi-Speaker
Conversations", WMT 2018; Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University,
2019, ch. 5.
"""
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from fairseq_ext.data.errors import UserDataError

SRC_CONTEXTS = ("none", "direct", "hier_gating", "lang_attn", "lang_sent_attn", "combined_attn")
TGT_CONTEXTS = ("none", "lang_sent_attn")
DUAL_CONTEXTS = ("none", "src_tgt", "src_tgt_mix")
CTX_INJECTIONS = ("initdec", "adddec", "initdec_adddec")
SENT_ENCODERS = ("rnnlm", "nmt_encoder")


# ------------------------------------------------------------------------------------------ Turn-RNN
class TurnRNN(nn.Module):
    """Language-specific bi-directional Turn-RNN (module doc)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.rnn = nn.GRU(input_size, hidden_size, batch_first=True, bidirectional=True)
        self.output_dim = 2 * hidden_size

    def forward(self, vectors: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
        """vectors (n, L, Ds) right-padded, lengths (n,) ≥ 1 → states (n, L, D) (0 at padding), turn (n, D)."""
        packed = pack_padded_sequence(vectors, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=vectors.size(1))
        return states, torch.cat([h[0], h[1]], dim=-1)


class Segment(NamedTuple):
    """One encoded turn (or ongoing-turn prefix): its language, turn vector (D), sentence states (n, D)."""
    lang: int
    turn: Tensor
    states: Tensor


def encode_segments(turn_rnns: Sequence[TurnRNN], segments: List[Tuple[int, Tensor]]) -> List[Segment]:
    """Run the Turn-RNN of each segment's language over its sentence vectors (n_i, Ds), batched per language."""
    out: List[Optional[Segment]] = [None] * len(segments)
    for lang in (0, 1):
        idx = [k for k, (lg, _) in enumerate(segments) if lg == lang]
        if not idx:
            continue
        vecs = [segments[k][1] for k in idx]
        lengths = torch.tensor([v.size(0) for v in vecs], dtype=torch.long)
        padded = nn.utils.rnn.pad_sequence(vecs, batch_first=True)
        states, turns = turn_rnns[lang](padded, lengths)
        for r, k in enumerate(idx):
            out[k] = Segment(lang, turns[r], states[r, : int(lengths[r])])
    return out  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------ History
class History(NamedTuple):
    """The history of each batch row, padded (module doc). ``*_lang``: the source language of the item
    (0/1); ``*_pad``: True at padding. ``tgt_*`` are None without target history."""
    turn: Tensor        # (B, Kt, D)
    turn_lang: Tensor   # (B, Kt)
    turn_pad: Tensor    # (B, Kt)
    sent: Tensor        # (B, Ks, D)
    sent_lang: Tensor
    sent_pad: Tensor
    tgt: Optional[Tensor] = None       # (B, Ky, H)
    tgt_lang: Optional[Tensor] = None
    tgt_pad: Optional[Tensor] = None


def _pad_items(rows: List[List[Tuple[int, Tensor]]], dim: int, like: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    B = len(rows)
    K = max((len(r) for r in rows), default=0)
    vec = like.new_zeros(B, K, dim)
    lang = torch.zeros(B, K, dtype=torch.long, device=like.device)
    pad = torch.ones(B, K, dtype=torch.bool, device=like.device)
    for b, items in enumerate(rows):
        if items:
            vec[b, : len(items)] = torch.stack([v for _, v in items])
            lang[b, : len(items)] = torch.tensor([lg for lg, _ in items], device=like.device)
            pad[b, : len(items)] = False
    return vec, lang, pad


def assemble_history(segments: List[List[Segment]], targets: Optional[List[List[Tuple[int, Tensor]]]],
                     dim: int, tgt_dim: int, like: Tensor) -> History:
    """Pad per-row lists of segments (completed turns then the ongoing prefix, in order) and of target
    vectors ``(source language, vector)`` into a :class:`History`."""
    turns = [[(s.lang, s.turn) for s in segs] for segs in segments]
    sents = [[(s.lang, v) for s in segs for v in s.states] for segs in segments]
    t, tl, tp = _pad_items(turns, dim, like)
    s, sl, sp = _pad_items(sents, dim, like)
    if targets is None:
        return History(t, tl, tp, s, sl, sp)
    y, yl, yp = _pad_items(targets, tgt_dim, like)
    return History(t, tl, tp, s, sl, sp, y, yl, yp)


def history_segments(hist_index: Tensor, nset_turn: Tensor) -> List[List[Tuple[int, ...]]]:
    """For each batch row, its history rows (N-set) grouped into turn segments, in order."""
    out = []
    turns = nset_turn.tolist()
    for row in hist_index.tolist():
        segs: List[List[int]] = []
        for r in row:
            if r < 0:
                continue
            if segs and turns[segs[-1][-1]] == turns[r]:
                segs[-1].append(r)
            else:
                segs.append([r])
        out.append([tuple(s) for s in segs])
    return out


def encode_history(turn_rnns: Sequence[TurnRNN], sent_vectors: Tensor, nset_lang: Tensor, nset_turn: Tensor,
                   hist_index: Tensor, tgt_vectors: Optional[Tensor] = None, tgt_dim: int = 0) -> History:
    """The :class:`History` of every batch row from the N-set of a batch (module doc); each distinct segment
    (a completed turn shared by many rows, or an ongoing-turn prefix) is encoded once."""
    per_row = history_segments(hist_index, nset_turn)
    distinct: Dict[Tuple[int, ...], int] = {}
    for segs in per_row:
        for s in segs:
            distinct.setdefault(s, len(distinct))
    keys = list(distinct)
    langs = nset_lang.tolist()
    encoded = encode_segments(turn_rnns, [(langs[k[0]], sent_vectors[list(k)]) for k in keys]) if keys else []
    segments = [[encoded[distinct[s]] for s in segs] for segs in per_row]
    targets = None
    if tgt_vectors is not None:
        targets = [[(langs[r], tgt_vectors[r]) for r in row if r >= 0] for row in hist_index.tolist()]
    return assemble_history(segments, targets, turn_rnns[0].output_dim, tgt_dim, sent_vectors)


# ------------------------------------------------------------------------------------ reads and gates
def masked_read(scores: Tensor, values: Tensor, pad: Tensor) -> Tuple[Tensor, Tensor]:
    """softmax over the non-padded items → (Σ p v (B, D), p (B, K)); a row with no item reads 0 (p = 0)."""
    B, K = pad.shape
    if K == 0:
        return values.new_zeros(B, values.size(-1)), values.new_zeros(B, 0)
    empty = pad.all(dim=1, keepdim=True)
    scores = scores.float().masked_fill(pad & ~empty, float("-inf")).masked_fill(empty, 0.0)
    p = torch.softmax(scores, dim=-1).masked_fill(pad, 0.0).type_as(values)
    return torch.bmm(p.unsqueeze(1), values).squeeze(1), p


def dot_scores(items: Tensor, query: Tensor) -> Tensor:
    return torch.bmm(items, query.unsqueeze(-1)).squeeze(-1)


class LanguageGate(nn.Module):
    """Eq. 5.1: o = α⊙o_s + (1−α)⊙o_t, α = σ(U_s o_s + U_t o_t + b_g); α = 1 (0) when the t (s) side is empty."""

    def __init__(self, dim: int):
        super().__init__()
        self.u_own = nn.Linear(dim, dim, bias=False)
        self.u_other = nn.Linear(dim, dim)

    def forward(self, own: Tensor, other: Tensor, has_own: Tensor, has_other: Tensor) -> Tuple[Tensor, Tensor]:
        alpha = torch.sigmoid(self.u_own(own) + self.u_other(other))
        alpha = torch.where(has_other.unsqueeze(-1), alpha, torch.ones_like(alpha))
        alpha = torch.where(has_own.unsqueeze(-1), alpha, torch.zeros_like(alpha))
        return alpha * own + (1.0 - alpha) * other, alpha


class SourceContext(nn.Module):
    """o^src of one direction model for ``variant`` (module doc); forward → (o (B, H), {"gate", "p_own", ...})."""

    def __init__(self, variant: str, dim: int, hidden: int):
        super().__init__()
        if variant not in SRC_CONTEXTS[1:]:
            raise UserDataError(f"unknown --src-ctx {variant!r} ({', '.join(SRC_CONTEXTS)})")
        self.variant, self.dim, self.hidden = variant, dim, hidden
        if variant == "direct":
            self.w_own, self.w_other = nn.Linear(dim, hidden), nn.Linear(dim, hidden)
            self.gate = LanguageGate(hidden)
        elif variant == "hier_gating":
            self.proj = nn.ModuleList([nn.Linear(dim, hidden) for _ in range(2)])  # P_s, P_t
            self.fold_a = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(2)])  # W
            self.fold_r = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(2)])  # W'
            self.beta = nn.ModuleList([nn.Linear(2 * hidden, hidden) for _ in range(2)])  # [U; U'], b''
            self.gate = LanguageGate(hidden)
            self.reduce = nn.Linear(hidden, hidden)  # Eq. 5.2
        else:
            self.to_target = nn.Linear(dim, dim)  # W, b: source-language space → target-language space
            if variant != "combined_attn":
                self.gate = LanguageGate(dim)
            self.reduce = nn.Linear(dim, hidden)  # Eq. 5.2

    def fold(self, k: int, items: Tensor, use: Tensor) -> Tuple[Tensor, Tensor]:
        """Hierarchical gating of language side k over the items (B, K, D) with ``use`` (B, K)."""
        proj = torch.tanh(self.proj[k](items))
        B, K, _ = proj.shape
        a = proj.new_zeros(B, self.hidden)
        started = torch.zeros(B, dtype=torch.bool, device=proj.device)
        for i in range(K):
            r = proj[:, i]
            beta = torch.sigmoid(self.beta[k](torch.cat([a, r], dim=-1)))
            g = beta * torch.tanh(self.fold_a[k](a)) + (1.0 - beta) * torch.tanh(self.fold_r[k](r))
            new = torch.where(started.unsqueeze(-1), g, r)
            a = torch.where(use[:, i].unsqueeze(-1), new, a)
            started = started | use[:, i]
        return a, started

    def forward(self, h: Tensor, hist: History, own_lang: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
        sentence_level = self.variant == "lang_sent_attn"
        items, lang, pad = (hist.sent, hist.sent_lang, hist.sent_pad) if sentence_level else \
            (hist.turn, hist.turn_lang, hist.turn_pad)
        own = lang.eq(own_lang.unsqueeze(1)) & ~pad
        other = lang.ne(own_lang.unsqueeze(1)) & ~pad
        has_own, has_other = own.any(1), other.any(1)
        extras: Dict[str, Tensor] = {}
        if self.variant == "direct":
            o_own = torch.tanh(self.w_own((items * own.unsqueeze(-1)).sum(1))) * has_own.unsqueeze(-1)
            o_oth = torch.tanh(self.w_other((items * other.unsqueeze(-1)).sum(1))) * has_other.unsqueeze(-1)
            o, alpha = self.gate(o_own, o_oth, has_own, has_other)
        elif self.variant == "hier_gating":
            o_own, _ = self.fold(0, items, own)
            o_oth, _ = self.fold(1, items, other)
            o, alpha = self.gate(o_own, o_oth, has_own, has_other)
            o = torch.tanh(self.reduce(o))
        elif self.variant == "combined_attn":
            mapped = torch.where(own.unsqueeze(-1), torch.tanh(self.to_target(items)), items)
            query = torch.tanh(self.to_target(h))
            o, p = masked_read(dot_scores(mapped, query), mapped, pad)
            extras["p"] = p
            alpha = None
            o = torch.tanh(self.reduce(o))
        else:  # lang_attn / lang_sent_attn, Eq. 5.3
            read_own, p_own = masked_read(dot_scores(items, h), items, ~own)
            o_own = torch.tanh(self.to_target(read_own)) * has_own.unsqueeze(-1)
            o_oth, p_oth = masked_read(dot_scores(items, torch.tanh(self.to_target(h))), items, ~other)
            o, alpha = self.gate(o_own, o_oth, has_own, has_other)
            o = torch.tanh(self.reduce(o))
            extras["p_own"], extras["p_other"] = p_own, p_oth
        any_hist = has_own | has_other
        o = o * any_hist.unsqueeze(-1)  # no history at all: exactly 0 (module doc)
        if alpha is not None:
            extras["gate"] = alpha
        extras["has_history"] = any_hist
        return o, extras


class TargetContext(nn.Module):
    """o^tgt: language-specific sentence-level attention over the target vectors (module doc)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.query_tr = nn.Linear(dim, hidden)     # W^q_tr: reduction + language change
        self.query_dim = nn.Linear(dim, hidden)    # W_dim: reduction only
        self.context_tr = nn.Linear(hidden, hidden)  # W^c_tr: language change of the t-side read
        self.gate = LanguageGate(hidden)

    def forward(self, h: Tensor, hist: History, own_lang: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
        y, lang, pad = hist.tgt, hist.tgt_lang, hist.tgt_pad
        own = lang.eq(own_lang.unsqueeze(1)) & ~pad
        other = lang.ne(own_lang.unsqueeze(1)) & ~pad
        has_own, has_other = own.any(1), other.any(1)
        o_own, p_own = masked_read(dot_scores(y, torch.tanh(self.query_tr(h))), y, ~own)
        read, p_oth = masked_read(dot_scores(y, self.query_dim(h)), y, ~other)
        o_oth = torch.tanh(self.context_tr(read)) * has_other.unsqueeze(-1)
        o, alpha = self.gate(o_own, o_oth, has_own, has_other)
        any_hist = has_own | has_other
        return o * any_hist.unsqueeze(-1), {"gate": alpha, "p_own": p_own, "p_other": p_oth,
                                             "has_history": any_hist}


class MixContext(nn.Module):
    """Dual Context Src-Tgt-Mix (module doc): (o^{s,m}; o^{t,m}) (B, 2H)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.reduce_src = nn.ModuleList([nn.Linear(dim, hidden) for _ in range(2)])  # per source language
        self.query_dim = nn.Linear(dim, hidden)
        self.query_tr = nn.Linear(dim, hidden)
        self.lang_tl = nn.Linear(hidden, hidden)

    def forward(self, h: Tensor, hist: History, own_lang: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
        # source sentence states reduced to H with the reduction of their language
        red = torch.where(hist.sent_lang.eq(0).unsqueeze(-1), torch.tanh(self.reduce_src[0](hist.sent)),
                          torch.tanh(self.reduce_src[1](hist.sent)))
        items = torch.cat([red, hist.tgt], dim=1)
        # text language of each item: a source sentence is in its language, a translation in the other one
        text_lang = torch.cat([hist.sent_lang, 1 - hist.tgt_lang], dim=1)
        pad = torch.cat([hist.sent_pad, hist.tgt_pad], dim=1)
        own = text_lang.eq(own_lang.unsqueeze(1)) & ~pad
        other = text_lang.ne(own_lang.unsqueeze(1)) & ~pad
        read_own, p_own = masked_read(dot_scores(items, self.query_dim(h)), items, ~own)
        o_own = torch.tanh(self.lang_tl(read_own)) * own.any(1).unsqueeze(-1)
        o_oth, p_oth = masked_read(dot_scores(items, torch.tanh(self.query_tr(h))), items, ~other)
        return torch.cat([o_own, o_oth], dim=-1), {"p_own": p_own, "p_other": p_oth,
                                                   "has_history": own.any(1) | other.any(1)}

"""Memory-network building blocks of the document-context NMT of Maruf (2019) ch. 3 (§3.2–§3.4): the
MemNet read, the hierarchical source memory, the first decoder layer that takes the memory readings as
extra input, the frozen bi-RNNLM sentence encoder, and the helpers that turn the document batch of
``doc_translation`` (``ctx_index`` / ``ctx_distance`` / ``ctx_tgt_tokens``) into memories.

* :func:`memnet_read` — MEMNET(M, q) = Σ_k p_k m_k, p = softmax(qᵀM) (§3.2): single-hop, dot-product,
  over the memory cells of one sentence; padded cells (−1 in ``ctx_index``) are masked; an empty memory
  reads the zero vector (weights all 0), never NaN.
* :func:`document_sequences` + :class:`DocumentRNN` — the document level of the source memory (Fig. 3.3):
  for batch sentence j, its document is [context sentences before j; j; context sentences after j] (the
  order of ``ctx_index``, split by the sign of ``ctx_distance``); a bi-GRU runs over the sentence vectors
  of that sequence and the cells of the context sentences are its states, cell j itself being dropped —
  the thesis's "run over the document, mask cell j" (our choice). Sentences of one document that see the
  same context share one sequence, so the bi-GRU runs once per document in the usual case.
* :class:`MemoryInputGRUCell` — the first decoder GRU layer over [ε_T[y_{n−1}]; c^src; c^tgt; c_n]
  (Memory-to-Context, Fig. 3.2a) whose input matrix is stored as two blocks: the sentence block (the
  ``nn.GRUCell`` parameters of ``rnnsearch``, same names and shapes, so a sentence checkpoint loads into
  it) and ``weight_mem`` (3H × |c^src; c^tgt|), the memory block. W_ih [x; m] = W_ih^x x + W_ih^m m, so
  this *is* the GRU on the concatenated input; with ``use_memory`` off the cell is ``nn.GRUCell`` on x,
  bit for bit (the stage-1 / "zero memory" path equals the sentence model exactly).
* :class:`LMSentenceEncoder` — the sentence level of the source memory in the thesis: a frozen
  bi-directional LSTM whose two directions are the forward and backward RNNLMs (fairseq's stock
  ``lstm_lm`` trained with the ``language_modeling`` task on the source side and on the reversed source
  side); the sentence vector is [last forward state; last backward state] (§3.4, our choice).

Reference: Maruf & Haffari, "Document Context Neural Machine Translation with Memory Networks", ACL 2018
(= Maruf, "Document-wide Neural Machine Translation", PhD thesis, Monash University, 2019, ch. 3).
"""
import logging
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence

from fairseq_ext.modules.rnn import BiRNNEncoderStack, front_order
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- MemNet read
def memnet_read(query: Tensor, cells: Tensor, padding_mask: Tensor) -> Tuple[Tensor, Tensor]:
    """MEMNET(M, q) (§3.2): query (B, D), cells (B, K, D), padding_mask (B, K) True at padded cells →
    (Σ_k p_k m_k (B, D), p (B, K)). p = softmax(qᵀ m_k) over the real cells; a row without real cells
    (empty memory, or K = 0) reads zeros with p = 0."""
    B, K, D = cells.shape
    if K == 0:
        return cells.new_zeros(B, D), cells.new_zeros(B, 0)
    scores = torch.bmm(cells, query.unsqueeze(-1)).squeeze(-1).float()  # qᵀ m_k
    empty = padding_mask.all(dim=1, keepdim=True)
    scores = scores.masked_fill(padding_mask & ~empty, float("-inf")).masked_fill(empty, 0.0)
    weights = torch.softmax(scores, dim=-1).masked_fill(padding_mask, 0.0).type_as(cells)
    return torch.bmm(weights.unsqueeze(1), cells).squeeze(1), weights


def gather_rows(table: Tensor, index: Tensor) -> Tuple[Tensor, Tensor]:
    """``table`` (N, D) rows at ``index`` (B, K) (−1 = padding) → (B, K, D) (zeros at padding), mask (B, K)."""
    mask = index.lt(0)
    rows = table.index_select(0, index.clamp(min=0).reshape(-1)).view(*index.shape, table.size(-1))
    return rows.masked_fill(mask.unsqueeze(-1), 0.0), mask


def previous_row(ctx_index: Tensor, ctx_distance: Tensor, distance: int = -1) -> Tensor:
    """(B,) the row of each sentence's context at ``distance`` (−1: the previous sentence), −1 if none."""
    hit = ctx_distance.eq(distance) & ctx_index.ge(0)
    if ctx_index.size(1) == 0:
        return ctx_index.new_full((ctx_index.size(0),), -1)
    first = hit.long().argmax(dim=1)
    row = ctx_index.gather(1, first.unsqueeze(1)).squeeze(1)
    return torch.where(hit.any(dim=1), row, torch.full_like(row, -1))


# ---------------------------------------------------------------------------------------- source memory
def document_sequences(ctx_index: Tensor, ctx_distance: Tensor, self_row: Tensor
                       ) -> Tuple[Tensor, Tensor, Tensor]:
    """The document sequence each batch sentence's source memory runs over (module doc).

    ``ctx_index`` / ``ctx_distance`` (B, K) as in the batch contract (document order, −1 padding),
    ``self_row`` (B,) the sentence's own row of the N-set. Returns ``sequences`` (U, K + 1) (rows of the
    N-set in document order, −1 padding at the end; duplicates merged), ``which`` (B,) the sequence of
    each sentence and ``positions`` (B, K) where each context entry sits in it (0 at padding)."""
    B, K = ctx_index.shape
    valid = ctx_index.ge(0)
    after = ctx_distance.gt(0) & valid
    positions = (valid.long().cumsum(1) - 1 + after.long()).clamp(min=0)  # entries before j, then j, ...
    self_pos = (valid & ~after).sum(1)
    seq = ctx_index.new_full((B, K + 2), -1)  # one spare column for the scatter of padded entries
    seq.scatter_(1, torch.where(valid, positions, torch.full_like(positions, K + 1)), ctx_index)
    seq.scatter_(1, self_pos.unsqueeze(1), self_row.unsqueeze(1))
    seq = seq[:, : K + 1]
    sequences, which = torch.unique(seq, dim=0, return_inverse=True)
    return sequences, which, positions.masked_fill(~valid, 0)


class DocumentRNN(nn.Module):
    """The document-level bi-GRU of the source memory (Fig. 3.3): its states over the sentence vectors of
    a document are the memory cells ([→; ←], 2 × ``hidden_size``). Trained with the NMT loss."""

    def __init__(self, input_size: int, hidden_size: int, dropout: float = 0.0):
        super().__init__()
        self.rnn = BiRNNEncoderStack("gru", input_size, hidden_size, num_layers=1, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        self.output_dim = 2 * hidden_size

    def forward(self, sentence_vectors: Tensor, ctx_index: Tensor, ctx_distance: Tensor, self_row: Tensor
                ) -> Tuple[Tensor, Tensor]:
        """sentence_vectors (N, Ds) of the N-set → cells (B, K, 2H) of each sentence's context (its own cell
        excluded; zeros at padding) and their padding mask (B, K)."""
        B, K = ctx_index.shape
        mask = ctx_index.lt(0)
        if K == 0 or bool(mask.all()):
            return sentence_vectors.new_zeros(B, K, self.output_dim), mask
        sequences, which, positions = document_sequences(ctx_index, ctx_distance, self_row)
        x, pad = gather_rows(self.dropout(sentence_vectors), sequences)
        states, _ = self.rnn(x, pad)  # (U, K + 1, 2H)
        cells = states[which.unsqueeze(1), positions]  # (B, K, 2H)
        return cells.masked_fill(mask.unsqueeze(-1), 0.0), mask


# ----------------------------------------------------------------------------- decoder input with memory
class MemoryInputGRUCell(nn.GRUCell):
    """A GRU cell over an input laid out as [x₁ (``memory_offset`` columns); m (``memory_size``); x₂] whose
    input matrix is stored as the sentence block (``weight_ih`` over [x₁; x₂]: ``nn.GRUCell``'s names and
    shapes) plus the memory block ``weight_mem`` (3H × memory_size, no bias) — see the module doc.

    ``use_memory`` False: m is ignored and the cell is ``nn.GRUCell`` over [x₁; x₂] exactly."""

    def __init__(self, input_size: int, memory_size: int, hidden_size: int, memory_offset: int):
        super().__init__(input_size, hidden_size)
        self.memory_size, self.memory_offset = memory_size, memory_offset
        self.weight_mem = nn.Parameter(torch.empty(3 * hidden_size, memory_size))
        bound = 1.0 / hidden_size ** 0.5  # nn.GRUCell's own initialisation
        nn.init.uniform_(self.weight_mem, -bound, bound)
        self.use_memory = True

    def split(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        a, b = self.memory_offset, self.memory_offset + self.memory_size
        return torch.cat([x[:, :a], x[:, b:]], dim=-1), x[:, a:b]

    def forward(self, x: Tensor, h: Optional[Tensor] = None) -> Tensor:
        x, m = self.split(x)
        if not self.use_memory:
            return super().forward(x, h)
        if h is None:
            h = x.new_zeros(x.size(0), self.hidden_size)
        gi = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(m, self.weight_mem)
        gh = F.linear(h, self.weight_hh, self.bias_hh)
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1.0 - z) * n + z * h


# ----------------------------------------------------------------------- target side of the N-set
def decoder_inputs(tgt_tokens: Tensor, lengths: Tensor, eos: int, pad: int) -> Tensor:
    """fairseq target format (R, T) (no BOS, ends with ⟨eos⟩, right-padded) → decoder inputs (R, T)
    [⟨eos⟩, y_1 .. y_n, pad ...] (``collate_tokens(move_eos_to_beginning=True)``)."""
    prev = torch.cat([tgt_tokens.new_full((tgt_tokens.size(0), 1), eos), tgt_tokens[:, :-1]], dim=1)
    steps = torch.arange(prev.size(1), device=prev.device).unsqueeze(0)
    return prev.masked_fill(steps >= lengths.clamp(min=1).unsqueeze(1), pad)


def last_states(states: Tensor, lengths: Tensor) -> Tensor:
    """states (R, T, H) of a teacher-forced pass over ``decoder_inputs`` → (R, H) the state at the last
    input (the one that predicts ⟨eos⟩): s^{|y|}."""
    idx = (lengths.clamp(min=1) - 1).clamp(max=states.size(1) - 1)
    return states[torch.arange(states.size(0), device=states.device), idx]


def pad_cat(tensors: Sequence[Tensor], value) -> Tensor:
    """Concatenate (n_i, S_i, ...) tensors along dim 0, right-padding dim 1 to the widest with ``value``."""
    width = max(t.size(1) for t in tensors)
    out = []
    for t in tensors:
        if t.size(1) < width:
            shape = list(t.shape)
            shape[1] = width - t.size(1)
            t = torch.cat([t, t.new_full(shape, value)], dim=1)
        out.append(t)
    return torch.cat(out, dim=0)


# ------------------------------------------------------------------------- RNNLM sentence encoder
class LMSentenceEncoder(nn.Module):
    """Frozen bi-LSTM sentence encoder from two RNNLMs (module doc). The forward LM reads
    [⟨eos⟩, x_1 .. x_M], the backward LM [⟨eos⟩, x_M .. x_1] (how ``language_modeling`` with
    ``--sample-break-mode eos`` feeds a sentence, the backward LM trained on reversed lines); the sentence
    vector is [top forward state after x_M; top backward state after x_1] (2 × hidden). Its parameters do
    not require gradients (fairseq's optimizer skips them; the thesis does not count them)."""

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, num_layers: int, padding_idx: int,
                 eos: int):
        super().__init__()
        self.padding_idx, self.eos = padding_idx, eos
        self.hidden_size, self.output_dim = hidden_size, 2 * hidden_size
        self.embed_fwd = nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        self.embed_bwd = nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        self.lstm_fwd = nn.LSTM(embed_dim, hidden_size, num_layers=num_layers, batch_first=True)
        self.lstm_bwd = nn.LSTM(embed_dim, hidden_size, num_layers=num_layers, batch_first=True)
        self.requires_grad_(False)

    def run(self, embed: nn.Embedding, lstm: nn.LSTM, tokens: Tensor, lengths: Tensor) -> Tensor:
        packed = pack_padded_sequence(embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h, _) = lstm(packed)
        return h[-1]

    @torch.no_grad()
    def forward(self, src_tokens: Tensor) -> Tensor:
        """src_tokens (R, S) in fairseq source format (any padding, ending in ⟨eos⟩) → (R, 2H)."""
        words = src_tokens.ne(self.padding_idx) & src_tokens.ne(self.eos)
        order = front_order(~words)
        fwd = src_tokens.gather(1, order)  # the words first, in order, then the rest
        n = words.sum(1)
        steps = torch.arange(fwd.size(1), device=fwd.device).unsqueeze(0)
        fwd = fwd.masked_fill(steps >= n.unsqueeze(1), self.padding_idx)
        rev_idx = (n.unsqueeze(1) - 1 - steps).clamp(min=0)
        bwd = fwd.gather(1, rev_idx).masked_fill(steps >= n.unsqueeze(1), self.padding_idx)
        start = fwd.new_full((fwd.size(0), 1), self.eos)
        fwd, bwd = torch.cat([start, fwd], 1), torch.cat([start, bwd], 1)
        was = self.training
        self.eval()
        try:
            out = torch.cat([self.run(self.embed_fwd, self.lstm_fwd, fwd, n + 1),
                             self.run(self.embed_bwd, self.lstm_bwd, bwd, n + 1)], dim=-1)
        finally:
            self.train(was)
        return out

    @staticmethod
    def read_lm(path: str) -> dict:
        """The ``decoder.*`` tensors of a fairseq ``lstm_lm`` checkpoint."""
        state = torch.load(path, map_location="cpu", weights_only=False)
        model = state["model"] if "model" in state else state
        if _model_option(state, "residuals"):
            raise UserDataError(f"{path}: an lstm_lm with --residuals is not a plain LSTM; train it without")
        if "decoder.layers.0.weight_ih" not in model:
            raise UserDataError(f"{path} is not a fairseq lstm_lm checkpoint (no decoder.layers.0.weight_ih)")
        return model

    @classmethod
    def from_checkpoints(cls, fwd_path: str, bwd_path: str, dictionary) -> "LMSentenceEncoder":
        """Build from the forward and backward ``lstm_lm`` checkpoints (same sizes); their dictionary must
        be the NMT source dictionary (binarize the LM data with ``--srcdict`` of the translation data)."""
        fwd, bwd = cls.read_lm(fwd_path), cls.read_lm(bwd_path)
        shapes = []
        for path, sd in ((fwd_path, fwd), (bwd_path, bwd)):
            vocab, emb = sd["decoder.embed_tokens.weight"].shape
            layers = len({k.split(".")[2] for k in sd if k.startswith("decoder.layers.")})
            hidden = sd["decoder.layers.0.weight_hh"].shape[1]
            if sd["decoder.layers.0.weight_ih"].shape[1] != emb:
                raise UserDataError(f"{path}: the first LSTM layer reads {sd['decoder.layers.0.weight_ih'].shape[1]} "
                                 f"inputs, not the {emb}-d embedding (an lstm_lm with attention/input feeding?)")
            if vocab != len(dictionary):
                raise UserDataError(f"{path}: the LM vocabulary has {vocab} entries, the source dictionary "
                                 f"{len(dictionary)}; binarize the LM data with --srcdict <translation dict>")
            shapes.append((emb, hidden, layers))
        if shapes[0] != shapes[1]:
            raise UserDataError(f"forward LM {fwd_path} {shapes[0]} and backward LM {bwd_path} {shapes[1]} differ "
                             f"in (embedding, hidden, layers)")
        emb, hidden, layers = shapes[0]
        enc = cls(len(dictionary), emb, hidden, layers, dictionary.pad(), dictionary.eos())
        enc.load_lms(fwd, bwd)
        logger.info("source-memory sentence encoder: forward LM %s, backward LM %s (emb %d, hidden %d, %d layers)",
                    fwd_path, bwd_path, emb, hidden, layers)
        return enc

    @torch.no_grad()
    def load_lms(self, fwd: dict, bwd: dict) -> None:
        for sd, embed, lstm in ((fwd, self.embed_fwd, self.lstm_fwd), (bwd, self.embed_bwd, self.lstm_bwd)):
            embed.weight.copy_(sd["decoder.embed_tokens.weight"])
            for layer in range(lstm.num_layers):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(lstm, f"{name}_l{layer}").copy_(sd[f"decoder.layers.{layer}.{name}"])


def _model_option(state: dict, name: str):
    """``name`` of the model config of a fairseq checkpoint (``cfg.model`` or the older ``args``), or None."""
    cfg = state.get("cfg")
    model_cfg = cfg.get("model") if cfg is not None and hasattr(cfg, "get") else None
    for source in (model_cfg, state.get("args")):
        if source is None:
            continue
        value = source.get(name) if isinstance(source, dict) else getattr(source, name, None)
        if value is not None:
            return value
    return None


def lm_sizes(fwd_path: str) -> Tuple[int, int, int]:
    """(embedding, hidden, layers) of an ``lstm_lm`` checkpoint."""
    sd = LMSentenceEncoder.read_lm(fwd_path)
    emb = sd["decoder.embed_tokens.weight"].shape[1]
    layers = len({k.split(".")[2] for k in sd if k.startswith("decoder.layers.")})
    return emb, sd["decoder.layers.0.weight_hh"].shape[1], layers


def parse_lm_paths(spec: Optional[str]) -> List[str]:
    """``FWD.pt,BWD.pt`` → [FWD.pt, BWD.pt]."""
    paths = [p for p in (spec or "").split(",") if p]
    if len(paths) != 2:
        raise UserDataError(f"--src-mem-lm needs FWD.pt,BWD.pt (two lstm_lm checkpoints), got {spec!r}")
    return paths

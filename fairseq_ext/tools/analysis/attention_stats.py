"""Attention analyses of Ampomah's thesis (the attention statistics of its chapters 2-4 and 6).

Math (vectorised over any leading dimensions; distributions along the last dimension, natural log):

* :func:`entropy` — ``-sum_j a_j log a_j`` (``0 log 0 = 0``).
* :func:`kl` — ``KL(p || q) = sum_j p_j (log p_j - log q_j)`` (probabilities or log-probabilities).
* :func:`js_divergence` — ``JS(p || q) = 1/2 KL(p || m) + 1/2 KL(q || m)``, ``m = (p + q) / 2``
  (symmetric, ``0 <= JS <= log 2``).
* :func:`mean_distance` / :func:`distance_sums` — mean attention distance of Sec. 3.5.3:
  ``sum_i sum_j a_ij |i - j| / sum_i sum_j a_ij`` over real (non-pad) query rows ``i`` and keys
  ``j``; ``causal=True`` restricts the sums to ``j <= i`` (the thesis' literal formula, borrowed from
  a causal-LM analysis: ``sum_{j<=i} a_ij (i - j) / sum_{j<=i} a_ij``).

Model side:

* :class:`AttentionRecorder` — a context manager that records the attention probabilities of
  chosen modules during ordinary forward passes, without changing any model code: fairseq
  :class:`~fairseq.modules.MultiheadAttention` gets ``need_weights=need_head_weights=True`` through
  a forward pre-hook (and, while recording, bypasses PyTorch's fused path, which only returns
  head-averaged weights, by setting its ``skip_embed_dim_check`` flag); modules with an
  ``export_attn`` switch (MLMHA, the DC module) have it turned on and their ``last_attn`` is read in
  a forward hook.  All records are ``B x H x T x S`` (MLMHA with U0 = 1: ``B x n x H x T x S``; DC:
  ``{"fi_l": .., "fi_g": ..}``).
* :class:`SelfAttentionStats`, :class:`DCDivergence`, :class:`AIFDependency` — accumulators of the
  three analyses over batches.
"""
import math
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

__all__ = [
    "entropy", "kl", "js_divergence", "mean_distance", "distance_sums", "reduce_heads",
    "AttentionRecorder", "attention_modules", "SelfAttentionStats", "DCDivergence", "AIFDependency",
]


# ============================================================================ math


def _expand(mask: Optional[Tensor], like: Tensor) -> Optional[Tensor]:
    """A key mask ``[B, S]`` (or ``[S]``) -> broadcastable to ``like = [B, ..., T, S]``; any other
    shape is assumed broadcastable already.  ``True`` = keep."""
    if mask is None:
        return None
    mask = mask.to(torch.bool)
    if mask.dim() == 2 and like.dim() >= 3 and mask.shape[0] == like.shape[0]:
        return mask.view(mask.shape[0], *([1] * (like.dim() - 2)), mask.shape[1])
    return mask


def entropy(attn: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Entropy (nats) of each distribution along the last dimension: ``-sum_j a_j log a_j``.

    ``mask`` (bool, ``True`` = count this entry; ``[B, S]`` or broadcastable to ``attn``) restricts
    the sum, e.g. to the window ``j <= i`` of the thesis' formula.  Returns ``attn.shape[:-1]``.
    Uniform attention over ``n`` positions gives ``log n``; one-hot attention gives 0."""
    p = attn.float()
    m = _expand(mask, p)
    if m is not None:
        p = p.masked_fill(~m, 0.0)
    return -torch.special.xlogy(p, p).sum(-1)


def kl(p: Tensor, q: Tensor, mask: Optional[Tensor] = None, log_input: bool = False,
       eps: float = 1e-12) -> Tensor:
    """``KL(p || q) = sum_j p_j (log p_j - log q_j)`` along the last dimension (nats).

    With ``log_input=True`` ``p`` and ``q`` are log-probabilities (e.g. ``log_softmax`` outputs; the
    exact form, no ``eps``).  Otherwise they are probabilities; ``q`` is clamped to ``eps`` where
    ``p > 0 = q`` (e.g. a position one attention map masks and the other does not).  Entries with
    ``p = 0`` contribute 0.  ``mask`` (``True`` = count) as in :func:`entropy`.  The result is
    clamped at 0 against rounding (KL of normalised distributions is >= 0)."""
    if log_input:
        lp, lq = p.float(), q.float()
        pp = lp.exp()
        terms = (pp * (lp - lq)).masked_fill(pp == 0, 0.0)
    else:
        pp, qq = p.float(), q.float()
        terms = torch.special.xlogy(pp, pp) - torch.special.xlogy(pp, qq.clamp_min(eps))
    m = _expand(mask, terms)
    if m is not None:
        terms = terms.masked_fill(~m, 0.0)
    return terms.sum(-1).clamp_min(0.0)


def js_divergence(p: Tensor, q: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Jensen-Shannon divergence along the last dimension (nats; symmetric, in ``[0, log 2]``):
    ``JS(p || q) = 1/2 KL(p || m) + 1/2 KL(q || m)``, ``m = (p + q) / 2`` ([P] Eq. 10)."""
    pp, qq = p.float(), q.float()
    m = 0.5 * (pp + qq)
    terms = 0.5 * (torch.special.xlogy(pp, pp) - torch.special.xlogy(pp, m)
                   + torch.special.xlogy(qq, qq) - torch.special.xlogy(qq, m))
    mk = _expand(mask, terms)
    if mk is not None:
        terms = terms.masked_fill(~mk, 0.0)
    return terms.sum(-1).clamp(0.0, math.log(2.0))


def _window(attn: Tensor, src_mask: Optional[Tensor], causal: bool,
            query_mask: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """(weights with masked entries zeroed, |i - j| or (i - j) distances, valid query rows)."""
    T, S = attn.shape[-2:]
    i = torch.arange(T, device=attn.device)[:, None]
    j = torch.arange(S, device=attn.device)[None, :]
    dist = (i - j).abs().float()
    keep = torch.ones(T, S, dtype=torch.bool, device=attn.device)
    if causal:
        keep = j <= i
    w = attn.float().masked_fill(~keep, 0.0)
    km = _expand(src_mask, w)
    if km is not None:
        w = w.masked_fill(~km, 0.0)
    if query_mask is None and src_mask is not None and T == S:
        query_mask = src_mask  # self-attention: queries are the keys
    qm = _expand(query_mask, w[..., 0])  # [..., T]
    if qm is None:
        qm = torch.ones(w.shape[:-1], dtype=torch.bool, device=w.device)
    else:
        qm = qm.expand(w.shape[:-1])
    return w.masked_fill(~qm.unsqueeze(-1), 0.0), dist, qm


def distance_sums(attn: Tensor, src_mask: Optional[Tensor] = None, causal: bool = False,
                  query_mask: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """``(sum_i sum_j a_ij d_ij, sum_i sum_j a_ij)`` over the last two dims of ``attn``
    (``[..., T, S]``, rows = queries), real queries/keys only (``src_mask``: bool ``[B, S]``,
    ``True`` = real token; for self-attention it also masks the query rows), ``j <= i`` when
    ``causal``.  Sum these over sentences and divide for the thesis' corpus-level mean distance."""
    w, dist, _ = _window(attn, src_mask, causal, query_mask)
    return (w * dist).sum((-1, -2)), w.sum((-1, -2))


def mean_distance(attn: Tensor, src_mask: Optional[Tensor] = None, causal: bool = False,
                  query_mask: Optional[Tensor] = None) -> Tensor:
    """Mean attention distance ``sum_ij a_ij |i - j| / sum_ij a_ij`` for each leading index (e.g.
    ``[B, H]`` for ``B x H x T x S`` maps); see :func:`distance_sums`.  Identity attention -> 0."""
    num, den = distance_sums(attn, src_mask, causal, query_mask)
    return num / den


def reduce_heads(attn: Tensor, how: str = "max", mask: Optional[Tensor] = None) -> Tensor:
    """``B x H x T x S`` -> ``B x T x S``: one map per sentence from the heads ([P] Eq. 10,
    ``alpha = max([alpha^1 .. alpha^H])``).

    * ``max`` (default; spec §4.10-2 (i)): element-wise max over heads, rows renormalised.
    * ``peak`` (spec (ii)): per sentence, the head with the largest single weight.
    * ``mean``: the head average (fairseq's ``need_weights`` map).

    ``mask``: bool ``[B, S]`` (``True`` = real key) used to find the ``peak`` over real positions."""
    a = attn.float()
    if how == "mean":
        return a.mean(1)
    if how == "max":
        m = a.max(1).values
        return m / m.sum(-1, keepdim=True).clamp_min(1e-30)
    if how == "peak":
        b = a
        km = _expand(mask, a)
        if km is not None:
            b = b.masked_fill(~km, 0.0)
            if a.shape[-2] == a.shape[-1]:  # self-attention: ignore padded query rows too
                b = b.masked_fill(~mask.to(torch.bool)[:, None, :, None], 0.0)
        head = b.flatten(2).max(-1).values.argmax(1)  # B
        return a[torch.arange(a.shape[0], device=a.device), head]
    raise ValueError(f"unknown head reduction {how!r}; expected max, peak or mean")


# ============================================================================ recording


def _is_mha(module: nn.Module) -> bool:
    from fairseq.modules import MultiheadAttention

    return isinstance(module, MultiheadAttention)


def _has_export(module: nn.Module) -> bool:
    return hasattr(module, "export_attn") and hasattr(module, "last_attn")


def attention_modules(model: nn.Module, prefix: Optional[Iterable[str]] = None) -> Dict[str, nn.Module]:
    """``{qualified name: module}`` of every attention module of ``model`` that can be recorded:
    fairseq MultiheadAttention and the plugin's modules with ``export_attn`` (MLMHA, DC).
    ``prefix``: keep only names starting with one of these (e.g. ``"encoder.layers."``)."""
    out = {}
    prefixes = tuple(prefix) if prefix is not None else None
    for name, mod in model.named_modules():
        if not (_is_mha(mod) or _has_export(mod)):
            continue
        if prefixes is not None and not name.startswith(prefixes):
            continue
        # skip modules nested in another recorded one (none in this repo, but be safe)
        if any(name.startswith(n + ".") for n in out):
            continue
        out[name] = mod
    return out


class AttentionRecorder:
    """Record attention probabilities of ``modules`` (``{name: module}``) during forward passes.

    ``with AttentionRecorder(mods) as rec: model(...); maps = rec.pop()`` gives
    ``{name: [one record per call]}`` — MultiheadAttention: ``B x H x T x S`` (float, detached,
    before attention dropout); ``export_attn`` modules: their ``last_attn`` (MLMHA ``B x H x T x S``
    or ``B x n x H x T x S``; DC ``{"fi_l", "fi_g"}`` each ``B x H x T x S``).  Flags are restored
    and hooks removed on exit; module outputs are unchanged."""

    def __init__(self, modules: Dict[str, nn.Module]):
        self.modules = dict(modules)
        self.records: Dict[str, List[Any]] = defaultdict(list)
        self._handles: list = []
        self._saved: list = []

    def __enter__(self):
        for name, mod in self.modules.items():
            if _is_mha(mod):
                self._saved.append((mod, "skip_embed_dim_check", mod.skip_embed_dim_check))
                mod.skip_embed_dim_check = True  # the fused path returns head-averaged weights only
                self._handles.append(mod.register_forward_pre_hook(self._mha_pre, with_kwargs=True))
                self._handles.append(mod.register_forward_hook(self._mha_post(name)))
            else:
                self._saved.append((mod, "export_attn", mod.export_attn))
                mod.export_attn = True
                self._handles.append(mod.register_forward_hook(self._export_post(name)))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        for mod, attr, value in reversed(self._saved):
            setattr(mod, attr, value)
            if attr == "export_attn":
                mod.last_attn = None
        self._handles, self._saved = [], []
        return False

    @staticmethod
    def _mha_pre(module, args, kwargs):
        if len(args) > 5:  # need_weights given positionally: leave the call alone
            return None
        kwargs = dict(kwargs)
        kwargs["need_weights"] = True
        kwargs["need_head_weights"] = True
        return args, kwargs

    def _mha_post(self, name):
        def hook(module, args, output):
            w = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if w is not None and w.dim() == 4:  # H x B x T x S
                self.records[name].append(w.detach().float().transpose(0, 1))
        return hook

    def _export_post(self, name):
        def hook(module, args, output):
            a = module.last_attn
            if a is None:
                return
            if isinstance(a, dict):
                a = {k: v.detach().float() for k, v in a.items()}
            else:
                a = a.detach().float()
            self.records[name].append(a)
        return hook

    def pop(self) -> Dict[str, List[Any]]:
        out, self.records = dict(self.records), defaultdict(list)
        return out


# ============================================================================ analyses


def layer_index(name: str) -> Optional[int]:
    """1-based layer of ``...layers.<k>...`` in a module name (None if absent)."""
    parts = name.split(".")
    for a, b in zip(parts, parts[1:]):
        if a == "layers" and b.isdigit():
            return int(b) + 1
    return None


class SelfAttentionStats:
    """Encoder self-attention mean distance and entropy per layer and head (Sec. 3.5.3).

    Both windows are accumulated: ``full`` (all keys, ``|i - j|``) and ``causal`` (the thesis'
    literal ``j <= i``).  Distance: ``sum a_ij d_ij / sum a_ij`` pooled over all real tokens of all
    sentences (the thesis formula); entropy: mean over real query tokens of all sentences of
    ``-sum_j a_ij log a_ij`` (window-restricted, not renormalised, as written).  Padding is excluded,
    EOS included (spec).  ``kind`` is ``self`` for MultiheadAttention and ``fi_g`` / ``fi_l`` for the
    two FI maps of a DC layer."""

    def __init__(self):
        self.acc: Dict[Tuple[int, str], Dict[str, Tensor]] = {}

    def add(self, layer: int, kind: str, attn: Tensor, src_mask: Tensor) -> None:
        """``attn``: ``B x H x S x S``; ``src_mask``: ``B x S`` bool, ``True`` = real token."""
        attn = attn.float()
        H = attn.shape[1]
        q = src_mask.to(torch.bool)[:, None, :].expand(-1, H, -1)  # B H T
        S = attn.shape[-1]
        tri = torch.ones(S, S, dtype=torch.bool, device=attn.device).tril()
        key = src_mask.to(torch.bool)[:, None, None, :]
        stats = {"n_tokens": q.sum((0, 2)).float()}  # per head (same for all)
        for window, m in (("full", key), ("causal", key & tri)):
            num, den = distance_sums(attn, src_mask, causal=(window == "causal"))
            ent = entropy(attn, m).masked_fill(~q, 0.0).sum((0, 2))
            stats[f"dist_num_{window}"] = num.sum(0)
            stats[f"dist_den_{window}"] = den.sum(0)
            stats[f"ent_sum_{window}"] = ent
        cur = self.acc.get((layer, kind))
        if cur is None:
            self.acc[(layer, kind)] = {k: v.detach().cpu() for k, v in stats.items()}
        else:
            for k, v in stats.items():
                cur[k] += v.detach().cpu()

    def rows(self) -> List[Dict[str, Any]]:
        """One row per (layer, kind, head) plus a ``head = "mean"`` row per layer (the thesis' layer
        mean, ``1/N_h sum_h``)."""
        out = []
        for (layer, kind), s in sorted(self.acc.items()):
            res = {}
            for window in ("full", "causal"):
                res[f"distance_{window}"] = (s[f"dist_num_{window}"] / s[f"dist_den_{window}"]).tolist()
                res[f"entropy_{window}"] = (s[f"ent_sum_{window}"] / s["n_tokens"]).tolist()
            H = len(res["distance_full"])
            for h in range(H):
                out.append({"layer": layer, "kind": kind, "head": h + 1,
                            **{k: v[h] for k, v in res.items()}, "tokens": int(s["n_tokens"][h])})
            out.append({"layer": layer, "kind": kind, "head": "mean",
                        **{k: sum(v) / H for k, v in res.items()}, "tokens": int(s["n_tokens"][0])})
        return out


class DCDivergence:
    """JS divergence between the DC module's FI maps ``alpha_g`` and ``alpha_l`` (Sec. 5.6.2).

    Per layer ``dv^l``: heads reduced with :func:`reduce_heads` (default ``max``), JS per query row,
    averaged over the real rows of a sentence, then over sentences; ``E_d = (1/L) sum_l dv^l`` over
    the encoder layers.  Also kept: the JS of each head pair ``(alpha_g^h, alpha_l^h)``."""

    def __init__(self, head_reduce: str = "max"):
        self.head_reduce = head_reduce
        self.acc: Dict[Tuple[str, int], Dict[str, Any]] = {}

    def add(self, side: str, layer: int, fi_g: Tensor, fi_l: Tensor, key_mask: Tensor,
            query_mask: Tensor) -> None:
        """``fi_g``/``fi_l``: ``B x H x T x S``; masks bool, ``True`` = real token."""
        qm = query_mask.to(torch.bool)
        n_rows = qm.sum(-1).clamp_min(1).float()  # B
        g = reduce_heads(fi_g, self.head_reduce, key_mask)
        l_ = reduce_heads(fi_l, self.head_reduce, key_mask)
        js = js_divergence(g, l_, key_mask[:, None, :]).masked_fill(~qm, 0.0).sum(-1) / n_rows  # B
        js_h = js_divergence(fi_g, fi_l, key_mask[:, None, None, :])  # B H T
        js_h = js_h.masked_fill(~qm[:, None, :], 0.0).sum(-1) / n_rows[:, None]  # B H
        cur = self.acc.setdefault((side, layer), {"js": 0.0, "js_heads": 0.0, "n": 0})
        cur["js"] = cur["js"] + js.sum().item()
        cur["js_heads"] = cur["js_heads"] + js_h.sum(0).cpu()
        cur["n"] += js.shape[0]

    def result(self) -> Dict[str, Any]:
        layers = []
        for (side, layer), s in sorted(self.acc.items()):
            layers.append({"side": side, "layer": layer, "js": s["js"] / s["n"],
                           "js_per_head": (s["js_heads"] / s["n"]).tolist(), "sentences": s["n"]})
        enc = [r["js"] for r in layers if r["side"] == "encoder"]
        return {"head_reduce": self.head_reduce, "layers": layers,
                "E_d": (sum(enc) / len(enc)) if enc else None}


class AIFDependency:
    """AIF dependency (Sec. 4.5.5): main decoder (AIF on) vs the ind-decoder (AIF weights 0), both
    teacher-forced on the same target prefix.

    * ``D_{y_t} = KL(P^m(y_t) || P^ind(y_t))`` (Eq. 4.4), ``D_Y = mean_t D_{y_t}`` (Eq. 4.5);
    * ``D_h^l = KL(A_h^m || A_h^ind)`` of the encoder-decoder attention (Eq. 4.6), KL over the source
      per target position, averaged over positions (spec's reduction), then over sentences;
      ``D^l = mean_h D_h^l`` (Eq. 4.7);
    * extra: ``KL(P^m || P^{a_l})`` against each auxiliary decoder on the same prefix."""

    def __init__(self):
        self.sentences: List[Dict[str, Any]] = []
        self.attn_sum: Dict[int, Tensor] = {}
        self.attn_n: Dict[int, int] = {}

    def add(self, ids: Tensor, target_mask: Tensor, lp_main: Tensor, lp_ind: Tensor,
            attn_main: Dict[int, Tensor], attn_ind: Dict[int, Tensor],
            lp_aux: Optional[Dict[str, Tensor]] = None, tokens: Optional[List[List[str]]] = None,
            src_lengths: Optional[Tensor] = None) -> None:
        """``lp_*``: ``B x T x V`` log-probabilities; ``attn_*``: ``{layer: B x H x T x S}``;
        ``target_mask``: ``B x T`` bool, ``True`` = real target token."""
        tm = target_mask.to(torch.bool)
        n = tm.sum(-1).clamp_min(1).float()
        tok = kl(lp_main, lp_ind, log_input=True).masked_fill(~tm, 0.0)  # B T
        d_y = tok.sum(-1) / n
        aux = {}
        for name, lp in (lp_aux or {}).items():
            aux[name] = kl(lp_main, lp, log_input=True).masked_fill(~tm, 0.0).sum(-1) / n
        for layer, a_m in attn_main.items():
            d = kl(a_m, attn_ind[layer])  # B H T
            d = d.masked_fill(~tm[:, None, :], 0.0).sum(-1) / n[:, None]  # B H
            self.attn_sum[layer] = self.attn_sum.get(layer, 0) + d.sum(0).cpu()
            self.attn_n[layer] = self.attn_n.get(layer, 0) + d.shape[0]
        for b in range(tm.shape[0]):
            T = int(tm[b].sum())
            row = {"id": int(ids[b]), "target_len": T, "kl_main_ind": float(d_y[b]),
                   "kl_tokens": [float(x) for x in tok[b][tm[b]].tolist()]}
            if src_lengths is not None:
                row["src_len"] = int(src_lengths[b])
            for name, v in aux.items():
                row[f"kl_main_{name}"] = float(v[b])
            if tokens is not None:
                row["tokens"] = tokens[b]
            self.sentences.append(row)

    def result(self) -> Dict[str, Any]:
        s = sorted(self.sentences, key=lambda r: r["id"])
        keys = [k for k in (s[0] if s else {}) if k.startswith("kl_main_")]
        summary = {k: (sum(r[k] for r in s) / len(s)) for k in keys} if s else {}
        attn = {}
        for layer in sorted(self.attn_sum):
            per_head = (self.attn_sum[layer] / self.attn_n[layer]).tolist()
            attn[layer] = {"heads": per_head, "mean": sum(per_head) / len(per_head)}
        return {"sentences": s, "mean": summary, "attention": attn, "n_sentences": len(s)}

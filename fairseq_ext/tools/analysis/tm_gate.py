r"""The gate ζ_t of SEG-NMT (Gu thesis ch. 4, Fig. 4.5) on a few translations: per output token, the weight of the
translation memory's copy distribution against the model's (shallow fusion, Eq. 4.5: p = ζ_t p_copy +
(1 - ζ_t) p_NMT).

:func:`gate_examples` picks the best hypothesis of given sentences, or of the ``n`` with the highest top-1
fuzzy score, from the ``--tm-export`` file of ``fairseq-generate``; :func:`format_gate` writes them as Markdown,
each output token with its ζ_t, bold from a threshold and with the memory token of the argmax slot.
``python -m fairseq_ext.tools.analysis.tm_analysis gate`` runs it.
"""
from __future__ import annotations

from typing import Optional, Sequence

from fairseq_ext.tools.analysis.tm_bleu import fmt_score
from fairseq_ext.tools.common import ToolError

__all__ = ["gate_examples", "format_gate"]


def gate_examples(records: Sequence[dict], ids: Optional[Sequence[int]] = None, n: int = 3) -> list[dict]:
    """The best hypothesis (rank 0) of the sentences ``ids``, or of the ``n`` with the highest top-1 fuzzy
    score (ties: lower id), from ``--tm-export`` records."""
    best = {}
    for r in records:
        if r.get("rank", 0) == 0 and r["id"] not in best:
            best[r["id"]] = r
    if ids is not None:
        missing = [i for i in ids if i not in best]
        if missing:
            raise ToolError(f"no exported hypothesis for sentence(s) {', '.join(map(str, missing))}")
        return [best[i] for i in ids]

    def fz(r):
        f = r.get("tm_fuzzy") or []
        return f[0] if f and f[0] is not None else -1.0

    return sorted(best.values(), key=lambda r: (-fz(r), r["id"]))[:n]


def format_gate(examples: Sequence[dict], refs: Optional[Sequence[str]] = None,
                memory_tgt: Optional[Sequence[str]] = None, threshold: float = 0.5) -> str:
    out = []
    for r in examples:
        gate = r["gate"]
        fz = (r.get("tm_fuzzy") or [None])[0] if r.get("tm_lines") else None
        mean = sum(gate) / len(gate) if gate else 0.0
        out.append(f"**sentence {r['id']}** (top-1 fuzzy {fmt_score(fz)}; {len(r.get('tm_lines') or [])} pairs; "
                   f"mean ζ {mean:.3f})")
        out.append("")
        if memory_tgt is not None and r.get("tm_lines"):
            out.append(f"- retrieved target (line {r['tm_lines'][0]}): {memory_tgt[r['tm_lines'][0]]}")
        if refs is not None and 0 <= r["id"] < len(refs):
            out.append(f"- reference: {refs[r['id']]}")
        toks = []
        for t, g, st in zip(r["tokens"], gate, r.get("slot_token") or [None] * len(gate)):
            cell = f"{t}({g:.2f})"
            if g >= threshold:
                cell = f"**{cell}**" + (f"←{st}" if st is not None else "")
            toks.append(cell)
        out.append(f"- ζ_t per output token (bold: ζ ≥ {threshold:g}, ← the memory token of the argmax slot): "
                   + " ".join(toks))
        out.append("")
    return "\n".join(out)

r"""Recall of the reference's out-of-vocabulary words: how many of the words a model's dictionary lacks it
still produces, e.g. by copying them from the source (Gu thesis ch. 3, CopyNet).

:func:`oov_recall` counts, clipped by count, the reference tokens absent from the vocabulary that the
hypothesis of the same sentence contains, and with the source the share of those that occur in it (the
copyable ones); :func:`read_dictionary_words` reads the vocabulary of a fairseq ``dict.*.txt``.
``fairseq-ext-score oov`` (:mod:`fairseq_ext.tools.evaluation.score`) runs it on files.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Union

from fairseq_ext.tools.common import ToolError, read_lines

__all__ = ["read_dictionary_words", "oov_recall", "format_oov"]


def read_dictionary_words(path: Union[str, os.PathLike]) -> set[str]:
    """The words of a fairseq ``dict.*.txt`` (first field of each line)."""
    words = set()
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip():
            raise ToolError(f"{path}:{i}: empty line in a fairseq dictionary")
        words.add(line.split(" ", 1)[0])
    return words


def oov_recall(
    hyps: Sequence[str],
    refs: Sequence[str],
    vocab: set[str],
    srcs: Optional[Sequence[str]] = None,
) -> dict[str, Any]:
    """Recall of the reference's out-of-vocabulary whitespace tokens (those not in ``vocab``).

    A reference OOV token counts as produced when the hypothesis of the same sentence contains it,
    clipped by count (a word twice in the reference needs it twice in the hypothesis). With ``srcs``
    also the recall restricted to OOV tokens that occur in the source sentence (the copyable ones).
    """
    if len(hyps) != len(refs) or (srcs is not None and len(srcs) != len(refs)):
        raise ToolError(f"oov recall: {len(hyps)} hypotheses, {len(refs)} references"
                        + (f", {len(srcs)} sources" if srcs is not None else ""))
    from collections import Counter

    total = hit = c_total = c_hit = unk = 0
    for i, (h, r) in enumerate(zip(hyps, refs)):
        hc = Counter(h.split())
        unk += hc.get("<unk>", 0)
        rc = Counter(w for w in r.split() if w not in vocab)
        sw = set(srcs[i].split()) if srcs is not None else set()
        for w, n in rc.items():
            got = min(n, hc.get(w, 0))
            total += n
            hit += got
            if w in sw:
                c_total += n
                c_hit += got
    res: dict[str, Any] = {
        "ref_oov_tokens": total, "produced": hit,
        "recall": 100.0 * hit / total if total else float("nan"), "hyp_unk_tokens": unk,
    }
    if srcs is not None:
        res.update(copyable_oov_tokens=c_total, copyable_produced=c_hit,
                   copyable_recall=100.0 * c_hit / c_total if c_total else float("nan"))
    return res


def format_oov(result: Mapping[str, Any]) -> str:
    copy = result.get("src_file") is not None
    head = "| system | reference OOV tokens | produced | recall % |" + (
        " copyable (in source) | produced | recall % |" if copy else "") + " <unk> in output |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in result["systems"].items():
        row = f"| {name} | {r['ref_oov_tokens']} | {r['produced']} | {r['recall']:.1f} |"
        if copy:
            row += f" {r['copyable_oov_tokens']} | {r['copyable_produced']} | {r['copyable_recall']:.1f} |"
        lines.append(row + f" {r['hyp_unk_tokens']} |")
    return "\n".join(lines)

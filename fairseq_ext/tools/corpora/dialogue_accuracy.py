"""Gu (2018) ch. 3 (CopyNet), §3.3.3, Table 3.5: the top-K exact-match accuracy of systems on the DS-I / DS-II
dialogue data (``fairseq-ext-dialogue-patterns accuracy``, :mod:`fairseq_ext.tools.corpora.dialogue_patterns`):
a response counts when the golden one is among a system's K best outputs (``fairseq-generate --nbest K``
output, or plain text with ``--nbest`` lines per sentence), overall and per response kind (copy, none, new),
printed in the Table 3.5 layout.
"""
from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from typing import Optional, Sequence

from fairseq_ext.tools.common import ToolError, log, read_json, read_lines
from fairseq_ext.tools.corpora.dialogue_data import KINDS, META
from fairseq_ext.tools.corpora.synthetic_rules import fmt_pct, markdown_table, normalize, read_line_info
from fairseq_ext.tools.hypotheses import is_generate_output, parse_generate_output, remove_bpe

_HYP_RE = re.compile(r"^([HD])-(\d+)\t[^\t]*\t(.*)$", re.DOTALL)


# --------------------------------------------------------------------------- n-best hypotheses
def read_nbest(path: str, n_refs: int, ref_path: str, nbest: int = 1, field: str = "D",
               remove_bpe_kind: Optional[str] = None) -> list[list[str]]:
    """The n-best lists of ``path`` in reference order.

    ``fairseq-generate`` output: every H-/D- line of an id in order (best first); the file is first
    validated by :func:`fairseq_ext.tools.hypotheses.parse_generate_output` (duplicated or missing ids).
    Plain text: ``nbest`` consecutive lines per reference line."""
    lines = read_lines(path)
    if is_generate_output(lines):
        entries = parse_generate_output(lines, name=str(path))
        missing = [i for i in range(n_refs) if i not in entries]
        extra = [i for i in entries if i >= n_refs]
        if missing or extra:
            raise ToolError(f"{path}: {len(entries)} sentences for {n_refs} lines of {ref_path}"
                            + (f"; no hypothesis for ids {', '.join(map(str, missing[:5]))}" if missing else "")
                            + (f"; ids beyond the reference: {', '.join(map(str, extra[:5]))}" if extra else ""))
        by_field: dict[str, dict[int, list[str]]] = {"H": defaultdict(list), "D": defaultdict(list)}
        for ln in lines:
            m = _HYP_RE.match(ln)
            if m:
                by_field[m.group(1)][int(m.group(2))].append(m.group(3))
        other = "H" if field == "D" else "D"
        out = [by_field[field].get(i) or by_field[other][i] for i in range(n_refs)]
    else:
        if len(lines) != n_refs * nbest:
            raise ToolError(f"{len(lines)} lines but {ref_path} has {n_refs} lines x --nbest {nbest} = "
                            f"{n_refs * nbest}", path, min(len(lines), n_refs * nbest) + 1)
        out = [lines[i * nbest:(i + 1) * nbest] for i in range(n_refs)]
    if remove_bpe_kind:
        out = [[remove_bpe(h, remove_bpe_kind) for h in hs] for hs in out]
    return out


def topk_accuracy(nbests: Sequence[Sequence[str]], refs: Sequence[str], kinds: Sequence[str],
                  ks: Sequence[int]) -> dict:
    """``{"top<k>": {"all": cell, "per_kind": {kind: cell}}}``, cell = ``{"correct", "total", "accuracy"}``;
    accuracy ``None`` when K exceeds every n-best list (the output had fewer hypotheses)."""
    depth = max((len(h) for h in nbests), default=0)
    order = list(KINDS) + sorted(set(kinds) - set(KINDS))
    res = {}
    for k in ks:
        correct: Counter = Counter()
        total: Counter = Counter()
        for hs, r, kind in zip(nbests, refs, kinds):
            total[kind] += 1
            correct[kind] += normalize(r) in {normalize(h) for h in hs[:k]}
        valid = k <= depth or k == 1

        def cell(c: int, n: int) -> dict:
            return {"correct": c, "total": n, "accuracy": (100.0 * c / n) if n and valid else None}

        res[f"top{k}"] = {"all": cell(sum(correct.values()), sum(total.values())),
                          "per_kind": {kd: cell(correct[kd], total[kd]) for kd in order if total[kd]}}
    return res


def parse_data_args(specs: Sequence[str]) -> dict[str, str]:
    """``--data [LABEL=]DIR`` as ``{label: dir}`` (label default: the folder's protocol name)."""
    out: dict[str, str] = {}
    for spec in specs:
        label, sep, folder = spec.partition("=")
        if not sep:
            folder = spec
            meta_path = os.path.join(folder, META)
            label = read_json(meta_path).get("dataset") if os.path.isfile(meta_path) else None
            label = label or os.path.basename(os.path.normpath(folder))
        if label in out:
            raise ToolError(f"--data {spec!r}: the label {label!r} is given twice (write LABEL=DIR)")
        out[label] = folder
    return out


def parse_hyp_specs(specs: Sequence[str], labels: Sequence[str]) -> list[tuple[str, str, str]]:
    """``--hyp NAME[@LABEL]=FILE`` as ``[(name, label, path)]``."""
    out = []
    for spec in specs:
        head, sep, path = spec.partition("=")
        if not sep or not head or not path:
            raise ToolError(f"--hyp {spec!r}: expected NAME=FILE or NAME@LABEL=FILE")
        name, at, label = head.rpartition("@") if "@" in head else (head, "", "")
        if not at:
            if len(labels) != 1:
                raise ToolError(f"--hyp {spec!r}: several data sets ({', '.join(labels)}): write NAME@LABEL=FILE")
            label = labels[0]
        if label not in labels:
            raise ToolError(f"--hyp {spec!r}: unknown data set {label!r} (known: {', '.join(labels)})")
        if any(n == name and lb == label for n, lb, _ in out):
            raise ToolError(f"--hyp {spec!r}: {name}@{label} is given twice")
        out.append((name, label, path))
    return out


def score(data_specs: Sequence[str], hyp_specs: Sequence[str], ks: Sequence[int] = (1, 10), split: str = "test",
          nbest: int = 1, field: str = "D", remove_bpe_kind: Optional[str] = None) -> dict:
    """Top-K accuracy per system and data set (Table 3.5)."""
    datasets = parse_data_args(data_specs)
    hyps = parse_hyp_specs(hyp_specs, list(datasets))
    refs: dict[str, tuple[str, list[str], list[str]]] = {}
    for label, folder in datasets.items():
        ref_path = os.path.join(folder, f"{split}.tgt")
        r = read_lines(ref_path)
        info = read_line_info(os.path.join(folder, f"{split}.rule"), len(r), ref_path)
        refs[label] = (ref_path, r, [k for _, k in info])
    systems: dict[str, dict] = {}
    for name, label, path in hyps:
        ref_path, r, kinds = refs[label]
        nb = read_nbest(path, len(r), ref_path, nbest=nbest, field=field, remove_bpe_kind=remove_bpe_kind)
        res = topk_accuracy(nb, r, kinds, ks)
        res["file"] = path
        systems.setdefault(name, {})[label] = res
        log(f"[dialogue-patterns] {name} on {label}: "
            + ", ".join(f"top{k} {fmt_pct(res[f'top{k}']['all']['accuracy'])}" for k in ks))
    return {"split": split, "topk": list(ks), "datasets": {lb: {"folder": f, "lines": len(refs[lb][1])}
                                                         for lb, f in datasets.items()}, "systems": systems}


def table_3_5(result: dict, by_kind: bool = False) -> str:
    """Rows: systems; columns: ``<data set> Top<k>`` for every data set and K."""
    labels = list(result["datasets"])
    ks = result["topk"]
    header = ["Models"] + [f"{lb} Top{k}" for lb in labels for k in ks]

    def rows_for(get) -> list[list[str]]:
        rows = []
        for name, per in result["systems"].items():
            rows.append([name] + [fmt_pct(get(per[lb][f"top{k}"])) if lb in per else "" for lb in labels
                                  for k in ks])
        return rows

    text = markdown_table(header, rows_for(lambda c: c["all"]["accuracy"]))
    text += ("\nAccuracy (%): the golden response is among the top-K outputs; "
             + ", ".join(f"{lb} {result['split']} {d['lines']} lines" for lb, d in result["datasets"].items())
             + ".\n")
    if by_kind:
        for kind in KINDS:
            text += f"\nResponses of kind {kind!r}:\n\n"
            text += markdown_table(header, rows_for(
                lambda c, kind=kind: c["per_kind"][kind]["accuracy"] if kind in c["per_kind"] else None))
    return text

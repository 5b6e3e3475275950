"""Reading system outputs: ``fairseq-generate`` logs and plain one-sentence-a-line files.

Nothing here imports torch or fairseq. Bad input raises :class:`~fairseq_ext.tools.common.ToolError`
(``ScoringError`` is the same class, under the name the scorer used before).

``fairseq-generate`` prints, per input sentence and in batch order (not id order)::

    S-<id>\t<source>
    T-<id>\t<reference>
    H-<id>\t<score>\t<hypothesis, subword markers removed if --post-process was given>
    D-<id>\t<score>\t<detokenised hypothesis>
    P-<id>\t<positional scores>          (ignored, as are A-, E-, I-, W- and log lines)

With ``--nbest k`` there are k H-/D- lines per id, best first; the first one is kept.

:func:`load_hypotheses` returns ``{id: hypothesis}`` sorted by id, where the id is fairseq's
numeric sentence id, or (with an ``.ids`` file, line *i* = id of sentence *i*) the verse id.
:func:`align_to_references` turns such a dict into a list in reference order and raises one
:class:`~fairseq_ext.tools.common.ToolError` naming the missing ids when any sentence has no output.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence, Union

from fairseq_ext.tools.common import ToolError, read_lines

__all__ = [
    "ScoringError",
    "ToolError",
    "GenEntry",
    "parse_generate_output",
    "is_generate_output",
    "read_ids",
    "remove_bpe",
    "load_hypotheses",
    "align_to_references",
    "REMOVE_BPE_CHOICES",
]

PathLike = Union[str, "os.PathLike[str]"]
Key = Union[int, str]

_LINE_RE = re.compile(r"^([STHD])-(\d+)\t(.*)$", re.DOTALL)
_N_SHOWN = 5  # how many missing / duplicated ids an error message lists


ScoringError = ToolError  # bad evaluation input: misaligned or missing hypotheses, wrong reference lengths, ...


@dataclass
class GenEntry:
    """Everything ``fairseq-generate`` printed for one sentence id (best hypothesis only)."""

    id: int
    source: Optional[str] = None
    target: Optional[str] = None
    hypo_tok: Optional[str] = None  # H line
    hypo_detok: Optional[str] = None  # D line
    score: Optional[float] = None
    n_hypos: int = 0  # number of H lines seen (nbest)

    def hypothesis(self, field: str = "D") -> Optional[str]:
        """``field='D'``: detokenised text, falling back to H; ``'H'``: H, falling back to D."""
        if field == "H":
            return self.hypo_tok if self.hypo_tok is not None else self.hypo_detok
        return self.hypo_detok if self.hypo_detok is not None else self.hypo_tok


# ----------------------------------------------------------------------------------- reading
def read_ids(ids: Union[PathLike, Sequence[str], None]) -> Optional[list[str]]:
    """An ``.ids`` file (line *i* = id of sentence *i*) or a list of ids; checks uniqueness."""
    if ids is None:
        return None
    if isinstance(ids, (str, os.PathLike)):
        source = str(ids)
        id_list = [x.strip() for x in read_lines(ids)]
    else:
        source = "ids"
        id_list = [str(x) for x in ids]
    seen: set[str] = set()
    dups: list[str] = []
    for x in id_list:
        if x in seen and x not in dups:
            dups.append(x)
        seen.add(x)
    if dups:
        raise ToolError(f"{source}: duplicated ids {format_ids(dups)}")
    return id_list


def format_ids(ids: Sequence[Key]) -> str:
    shown = ", ".join(str(x) for x in ids[:_N_SHOWN])
    if len(ids) > _N_SHOWN:
        shown += f", ... ({len(ids)} in all)"
    return shown


def is_generate_output(lines: Iterable[str]) -> bool:
    """True if any line looks like fairseq-generate's ``H-<id>\\t`` / ``D-<id>\\t``."""
    for ln in lines:
        m = _LINE_RE.match(ln)
        if m and m.group(1) in "HD":
            return True
    return False


def parse_generate_output(
    source: Union[PathLike, Iterable[str]], name: Optional[str] = None
) -> dict[int, GenEntry]:
    """Parse ``fairseq-generate`` output (a path or an iterable of lines) into ``{id: GenEntry}``.

    The result is sorted by id.  A duplicated ``S-``/``T-`` line (one sentence printed twice,
    e.g. two generate runs concatenated) raises :class:`~fairseq_ext.tools.common.ToolError`.  Several ``H-`` lines
    for one id are allowed (``--nbest``); the first (best) is kept.  Without S- lines an
    uneven number of H- lines per id is taken as duplication and raises too.
    """
    if isinstance(source, (str, os.PathLike)):
        name = name or str(source)
        lines: Iterable[str] = read_lines(source)
    else:
        name = name or "<generate output>"
        lines = source
    entries: dict[int, GenEntry] = {}
    dup_src: list[int] = []
    n_detok: dict[int, int] = {}
    for ln in lines:
        ln = ln.rstrip("\r\n")
        m = _LINE_RE.match(ln)
        if not m:
            continue
        kind, sid, rest = m.group(1), int(m.group(2)), m.group(3)
        e = entries.get(sid)
        if e is None:
            e = entries[sid] = GenEntry(id=sid)
        if kind in "ST":
            attr = "source" if kind == "S" else "target"
            if getattr(e, attr) is not None and sid not in dup_src:
                dup_src.append(sid)
            setattr(e, attr, rest)
            continue
        score_str, _, text = rest.partition("\t")
        if kind == "H":
            e.n_hypos += 1
            if e.hypo_tok is None:
                e.hypo_tok = text
                e.score = _to_float(score_str)
        else:  # D
            n_detok[sid] = n_detok.get(sid, 0) + 1
            if e.hypo_detok is None:
                e.hypo_detok = text
                if e.score is None:
                    e.score = _to_float(score_str)
    if dup_src:
        raise ToolError(
            f"{name}: sentence ids printed more than once: {format_ids(sorted(dup_src))} "
            "(were several fairseq-generate outputs concatenated?)"
        )
    has_src = any(e.source is not None or e.target is not None for e in entries.values())
    if not has_src:
        counts = {max(e.n_hypos, n_detok.get(i, 0)) for i, e in entries.items()}
        if len(counts) > 1:
            lo = min(counts)
            dups = sorted(i for i, e in entries.items() if max(e.n_hypos, n_detok.get(i, 0)) > lo)
            raise ToolError(f"{name}: hypotheses printed more than once for ids {format_ids(dups)}")
    missing_hyp = sorted(i for i, e in entries.items() if e.hypothesis() is None)
    if missing_hyp:
        raise ToolError(f"{name}: no H-/D- line for sentence ids {format_ids(missing_hyp)}")
    return dict(sorted(entries.items()))


def _to_float(s: str) -> Optional[float]:
    try:
        return float(s)
    except ValueError:
        return None


# ------------------------------------------------------------------------- subword markers
REMOVE_BPE_CHOICES = ("sentencepiece", "subword_nmt")
_BPE_ALIASES = {
    "sentencepiece": "sentencepiece",
    "spm": "sentencepiece",
    "subword_nmt": "subword_nmt",
    "subword-nmt": "subword_nmt",
    "@@ ": "subword_nmt",
    "@@": "subword_nmt",
}


def remove_bpe(line: str, kind: Optional[str]) -> str:
    """Undo subword segmentation the way fairseq's ``--post-process`` does.

    ``sentencepiece``: drop spaces, turn ``▁`` into spaces (a line without any ``▁`` is taken
    as already decoded and left alone, so detokenised D- lines are not glued together).
    ``subword_nmt``: join ``@@ `` continuations.  ``None`` returns the line unchanged.
    """
    if kind is None:
        return line
    mode = _BPE_ALIASES.get(kind)
    if mode is None:
        raise ToolError(f"unknown --remove-bpe {kind!r}; choose from {', '.join(REMOVE_BPE_CHOICES)}")
    if mode == "sentencepiece":
        if "\u2581" not in line:
            return line
        return line.replace(" ", "").replace("\u2581", " ").strip()
    return (line + " ").replace("@@ ", "").rstrip()


# ------------------------------------------------------------------------------ hypotheses
def load_hypotheses(
    path: PathLike,
    ids: Union[PathLike, Sequence[str], None] = None,
    *,
    fmt: str = "auto",
    field: str = "D",
    remove_bpe_kind: Optional[str] = None,
) -> dict[Key, str]:
    """Hypotheses of a system as ``{id: text}``, sorted by (numeric) sentence id.

    :param path: ``fairseq-generate`` output or a plain text file (one hypothesis a line).
    :param ids: optional ``.ids`` file / list mapping sentence number *i* to an id (verse id);
        keys are then those ids (strings), otherwise fairseq's integer ids / line numbers.
    :param fmt: ``'auto'`` (detect H-/D- lines), ``'fairseq'`` or ``'text'``.
    :param field: for fairseq output, ``'D'`` (detokenised, fall back to H) or ``'H'``.
    :param remove_bpe_kind: ``'sentencepiece'`` / ``'subword_nmt'`` to strip subword markers.
    """
    if fmt not in ("auto", "fairseq", "text"):
        raise ToolError(f"unknown hypothesis format {fmt!r}")
    if field not in ("D", "H"):
        raise ToolError(f"unknown hypothesis field {field!r} (D or H)")
    lines = read_lines(path)
    if fmt == "auto":
        fmt = "fairseq" if is_generate_output(lines) else "text"
    if fmt == "fairseq":
        entries = parse_generate_output(lines, name=str(path))
        hyps: dict[int, str] = {i: e.hypothesis(field) or "" for i, e in entries.items()}
    else:
        hyps = dict(enumerate(lines))
    if remove_bpe_kind:
        hyps = {i: remove_bpe(h, remove_bpe_kind) for i, h in hyps.items()}
    id_list = read_ids(ids)
    if id_list is None:
        return hyps
    out_of_range = [i for i in hyps if i >= len(id_list)]
    if out_of_range:
        raise ToolError(
            f"{path}: sentence numbers {format_ids(out_of_range)} are beyond the "
            f"{len(id_list)} lines of the ids file"
        )
    return {id_list[i]: h for i, h in hyps.items()}


def align_to_references(
    hyps: Mapping[Key, str],
    n_refs: int,
    ids: Optional[Sequence[str]] = None,
    source: str = "hypotheses",
) -> list[str]:
    """Hypotheses as a list in reference order; every reference sentence needs exactly one.

    Without ``ids`` the expected keys are ``0 .. n_refs-1``; with ``ids`` (one per reference
    line) they are those ids.  Raises :class:`~fairseq_ext.tools.common.ToolError` naming missing / unexpected ids.
    """
    if ids is not None:
        ids = [str(x) for x in ids]
        if len(ids) != n_refs:
            raise ToolError(f"ids file has {len(ids)} lines but the reference has {n_refs}")
        expected: list[Key] = list(ids)
    else:
        expected = list(range(n_refs))
    have = set(hyps)
    missing = [k for k in expected if k not in have]
    extra_set = have.difference(expected)
    if missing or extra_set:
        parts = [f"{source}: {len(hyps)} hypotheses for {n_refs} reference sentences"]
        if missing:
            parts.append(f"no hypothesis for ids {format_ids(missing)}")
        if extra_set:
            extra = sorted(extra_set, key=lambda k: (str(type(k)), k))
            parts.append(f"ids not in the reference: {format_ids(extra)}")
        raise ToolError("; ".join(parts))
    return [hyps[k] for k in expected]

"""Document-level BLEU (d-BLEU): BLEU over whole documents, as document-level MT papers report it
(G-Transformer, Bao et al. 2021; Sun et al. 2022, "Rethinking Document-level Neural Machine Translation").

Each document's hypotheses, in line order, are joined with one space into one "sentence", and so are its
references; sacreBLEU's corpus BLEU of these document strings is d-BLEU (the same metric object, tokenizer and
smoothing as :func:`fairseq_ext.tools.evaluation.bleu.score_corpus`, whose signature it prints). n-grams may then cross
sentence boundaries and the brevity penalty is computed over the whole corpus as usual, so d-BLEU is not the
sentence-level corpus BLEU of the same lines (the sentence-level score is reported beside it).

The document of a line comes from the line-aligned ids file (``--ids``, one id a line, aligned with the
reference), read by :class:`fairseq_ext.data.documents.DocumentIndex` (``Ruth.1.3`` -> ``Ruth.1``; with
``--doc-id-pattern``, the rule of the ``doc_translation`` task); the lines of a document must be contiguous.
Hypotheses are read as ``fairseq-ext-score score`` reads them (:mod:`fairseq_ext.tools.hypotheses`):
fairseq-generate output (aligned by sentence id: sentence *i* is line *i* of the ids file) or plain text.

CLI: ``fairseq-ext-score dbleu --hyp H --ref R [--ref R2] --ids IDS [--doc-id-pattern P] [--tokenised]
[--lowercase] [--remove-bpe KIND] [--json OUT]``.
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple, Union

from fairseq_ext.tools.common import ToolError, read_lines
from fairseq_ext.tools.hypotheses import align_to_references, load_hypotheses, read_ids

PathLike = Union[str, "os.PathLike[str]"]
DBLEU_LABEL = "d-BLEU"


def document_groups(ids: Sequence[str], source: str = "ids",
                    pattern: Optional[str] = None) -> Tuple[List[str], List[range]]:
    """``(names, line ranges)`` of the documents of a line-aligned id list (one error line, ``source:LINE``,
    for an empty id or a document whose lines are not contiguous)."""
    from fairseq_ext.data.documents import DocumentIndex

    kwargs = {} if pattern is None else {"pattern": pattern}
    try:
        index = DocumentIndex.from_ids(list(ids), source=source, **kwargs)
    except ValueError as e:  # DocumentDataError: the message names the file and line
        raise ToolError(str(e)) from None
    return list(index.names), [index.sentences(d) for d in range(index.n_docs)]


def join_documents(lines: Sequence[str], groups: Sequence[range]) -> List[str]:
    """One string per document: its lines joined with a space (empty lines leave no double space)."""
    return [" ".join(x for x in (lines[i].strip() for i in g) if x) for g in groups]


def dbleu(hyps: Sequence[str], refs: Sequence[Sequence[str]], ids: Sequence[str], *, tokenised: bool = False,
          lowercase: bool = False, pattern: Optional[str] = None, source: str = "ids") -> dict[str, Any]:
    """d-BLEU of line-aligned ``hyps`` against the reference streams ``refs`` (each a list of lines), with the
    documents of ``ids``; the sentence-level corpus BLEU of the same lines is under ``sentence``."""
    from fairseq_ext.tools.evaluation.bleu import score_corpus

    if isinstance(refs[0], str):
        refs = [refs]  # a single stream
    if len(ids) != len(hyps):
        raise ToolError(f"{source}: {len(ids)} ids for {len(hyps)} hypotheses")
    names, groups = document_groups(ids, source, pattern)
    doc_hyps = join_documents(hyps, groups)
    doc_refs = [join_documents(stream, groups) for stream in refs]
    res = score_corpus(doc_hyps, doc_refs, tokenised, lowercase=lowercase)
    sent = score_corpus(hyps, refs, tokenised, lowercase=lowercase)
    return {
        "dbleu": res["bleu"],
        "dbleu_label": DBLEU_LABEL,
        "dbleu_str": res["bleu_str"].replace(res["bleu_label"], DBLEU_LABEL, 1),
        "dbleu_signature": res["bleu_signature"],
        "bp": res["bp"], "ratio": res["ratio"], "sys_len": res["sys_len"], "ref_len": res["ref_len"],
        "precisions": res["precisions"], "counts": res["counts"], "totals": res["totals"],
        "n_documents": len(groups),
        "n_sentences": len(hyps),
        "n_refs": len(doc_refs),
        "documents": [{"name": n, "sentences": len(g)} for n, g in zip(names, groups)],
        "sentence": {k: sent[k] for k in ("bleu", "bleu_str", "bleu_signature")},
        "tokenised": tokenised,
        "lowercase": lowercase,
        "sacrebleu_version": res["sacrebleu_version"],
    }


def dbleu_files(hyp: PathLike, refs: Union[PathLike, Sequence[PathLike]], ids: Optional[PathLike], *,
                tokenised: bool = False, lowercase: bool = False, remove_bpe: Optional[str] = None,
                field: str = "auto", fmt: str = "auto", pattern: Optional[str] = None) -> dict[str, Any]:
    """:func:`dbleu` from files: hypotheses aligned by sentence id as ``fairseq-ext-score score`` does."""
    from fairseq_ext.tools.evaluation.bleu import load_references

    if ids is None:
        raise ToolError("d-BLEU needs --ids: the line-aligned ids file naming the document of every line")
    ref_paths = [refs] if isinstance(refs, (str, os.PathLike)) else list(refs)
    streams = load_references(ref_paths)
    raw_ids = [x.strip() for x in read_lines(ids)]
    id_list = read_ids(raw_ids) if len(set(raw_ids)) == len(raw_ids) else None
    if field == "auto":
        field = "H" if tokenised else "D"
    if id_list is not None:
        loaded = load_hypotheses(hyp, id_list, fmt=fmt, field=field, remove_bpe_kind=remove_bpe)
    else:  # ids that repeat the document name on every line: align by line number
        loaded = load_hypotheses(hyp, None, fmt=fmt, field=field, remove_bpe_kind=remove_bpe)
    hyps = align_to_references(loaded, len(streams[0]), id_list, source=str(hyp))
    if len(raw_ids) != len(hyps):
        raise ToolError(f"{len(raw_ids)} lines but the reference has {len(hyps)}", str(ids))
    res = dbleu(hyps, streams, raw_ids, tokenised=tokenised, lowercase=lowercase, pattern=pattern, source=str(ids))
    res.update(hyp_file=str(hyp), ref_files=[str(p) for p in ref_paths], ids_file=str(ids), remove_bpe=remove_bpe)
    return res


def format_dbleu(res: dict[str, Any], name: Optional[str] = None) -> str:
    head = f"{name}: " if name else ""
    return "\n".join([
        f"{head}{res['dbleu_str']}",
        f"{DBLEU_LABEL} signature: {res['dbleu_signature']}",
        f"{res['n_documents']} documents, {res['n_sentences']} sentences, {res['n_refs']} reference(s); "
        f"sentence-level {res['sentence']['bleu_str']}",
    ])

r"""The community's contrastive test sets of document-level MT, read in their published formats and scored with
any fairseq model by the scorer of :mod:`fairseq_ext.tools.evaluation.contrastive` (``fairseq-ext-contrastive score
--format contrapro|bawden``).

* **ContraPro** (Müller et al. 2018; also the English→French sets of Lopes et al. 2020): the published JSON
  list, with the context sentences from the OpenSubtitles documents (``--docs DIR``, ``--context N``) or
  from the files of ContraPro's ``json2text_and_context.pl`` (``--text-prefix P``).
* **Bawden et al. 2018** (anaphora and lexical choice): the published JSON, or the files of its
  ``json2rawtext.py``; every pair has the previous sentence as context (distance 1).

Every instance becomes a document of its context sentences and the sentence, binarized with the task's
dictionaries into a scratch split and loaded as ``fairseq-generate`` loads a split; each candidate is scored
by :func:`fairseq_ext.tools.evaluation.contrastive_scoring.score_instances`. An instance is correct when the
reference scores strictly higher than every contrastive translation; accuracy is reported overall, by
antecedent distance and by category.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_ext.tools.common import ToolError, log, read_json, read_lines, require_file, write_jsonl
from fairseq_ext.tools.evaluation.contrastive_scoring import distance_bucket  # ContraPro's buckets: 0, 1, 2, 3, >3

SET_FORMATS = ("contrapro", "bawden")
DEFAULT_LANGS = {"contrapro": ("en", "de"), "bawden": ("en", "fr")}
_WS = re.compile(r"\s+")


def make_instance(ident: str, source: str, candidates: Sequence[str], context_src: Sequence[str] = (),
                  context_tgt: Sequence[str] = (), distance: Optional[int] = None, category: str = "-") -> Dict:
    """One instance: the source, its candidate translations (the reference first), its context sentences
    (oldest first) with their translations, the antecedent distance and a category."""
    if len(context_src) != len(context_tgt):
        raise ValueError("one context translation per context sentence")
    return {"id": ident, "source": source, "candidates": list(candidates), "context_src": list(context_src),
            "context_tgt": list(context_tgt), "distance": distance, "category": category}


def _same(a: str, b: str) -> bool:
    return _WS.sub("", a) == _WS.sub("", b)


def _context_pairs(src: Sequence[str], tgt: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Context lines without the positions where both sides are empty (no sentence there)."""
    keep = [(s, t) for s, t in zip(src, tgt) if s.strip() or t.strip()]
    return [s for s, _ in keep], [t for _, t in keep]


# ============================================================================================ ContraPro
def read_contrapro_json(path: str) -> List[Dict]:
    """The instances of a ContraPro JSON file, checked (one error naming the file and the instance)."""
    data = read_json(path)
    if not isinstance(data, list) or not data:
        raise ToolError("a ContraPro set is a non-empty JSON list of instances", path)
    for k, x in enumerate(data, 1):
        where = f"instance {k}"
        if not isinstance(x, dict):
            raise ToolError(f"{where} is not a JSON object", path)
        for key in ("src segment", "ref segment", "errors", "ante distance"):
            if key not in x:
                raise ToolError(f"{where} has no {key!r}", path)
        errors = x["errors"]
        if not isinstance(errors, list) or not errors or not all(
                isinstance(e, dict) and isinstance(e.get("contrastive"), str) for e in errors):
            raise ToolError(f"{where}: 'errors' must be a non-empty list of {{\"contrastive\": TEXT, ...}}", path)
        if not isinstance(x["ante distance"], int) or isinstance(x["ante distance"], bool):
            raise ToolError(f"{where}: 'ante distance' must be an integer, got {x['ante distance']!r}", path)
    return data


def _category(x: Mapping[str, Any]) -> str:
    if "src pronoun" in x and "ref pronoun" in x:  # ContraPro's evaluate.py: "it:er"
        return f"{str(x['src pronoun']).lower()}:{str(x['ref pronoun']).lower()}"
    return "-"


def index_documents(docs: str, src: str, tgt: str) -> Dict[str, Tuple[str, str]]:
    """``{document name: (source file, target file)}`` of every ``NAME.{src}``/``NAME.{tgt}`` pair below ``docs``."""
    if not os.path.isdir(docs):
        raise ToolError(f"missing documents folder: {docs}")
    found: Dict[str, Tuple[str, str]] = {}
    for root, _, files in os.walk(docs):
        for f in files:
            if f.endswith("." + tgt):
                name = f[: -len(tgt) - 1]
                s = os.path.join(root, f"{name}.{src}")
                if os.path.isfile(s):
                    found[name] = (s, os.path.join(root, f))
    if not found:
        raise ToolError(f"no document pair NAME.{src} / NAME.{tgt} below {docs}")
    return found


def contrapro_from_documents(entries: Sequence[Mapping], path: str, docs: str, context: int, src: str,
                             tgt: str) -> List[Dict]:
    """Instances with the ``context`` previous document lines (``--docs``)."""
    index = index_documents(docs, src, tgt)
    cache: Dict[str, Tuple[List[str], List[str]]] = {}
    out = []
    for k, x in enumerate(entries, 1):
        doc, seg = x.get("document id"), x.get("segment id")
        if not isinstance(doc, str) or not isinstance(seg, int) or isinstance(seg, bool) or seg < 1:
            raise ToolError(f"instance {k}: --docs needs 'document id' and a 'segment id' >= 1", path)
        name = doc[: -len(tgt) - 1] if doc.endswith("." + tgt) else doc[: -len(src) - 1] \
            if doc.endswith("." + src) else doc
        if name not in index:
            raise ToolError(f"instance {k}: document {doc!r} is not below {docs}", path)
        if name not in cache:
            s_path, t_path = index[name]
            s_lines, t_lines = read_lines(s_path), read_lines(t_path)
            if len(s_lines) != len(t_lines):
                raise ToolError(f"{len(t_lines)} lines but {s_path} has {len(s_lines)}", t_path)
            cache[name] = (s_lines, t_lines)
        s_lines, t_lines = cache[name]
        if seg > len(s_lines) or not _same(s_lines[seg - 1], x["src segment"]):
            raise ToolError(f"is not the 'src segment' of instance {k} of {path}", index[name][0], seg)
        lo = max(0, seg - 1 - context)
        cs, ct = _context_pairs(s_lines[lo:seg - 1], t_lines[lo:seg - 1])
        out.append(make_instance(f"{k}", x["src segment"], [x["ref segment"]] + [e["contrastive"] for e in x["errors"]],
                                 cs, ct, x["ante distance"], _category(x)))
    return out


def contrapro_from_text(entries: Sequence[Mapping], path: str, prefix: str, src: str, tgt: str) -> List[Dict]:
    """Instances from the ``PREFIX.text.*`` / ``PREFIX.context.*`` files of ``json2text_and_context.pl``."""
    files = {f"{kind}.{lang}": f"{prefix}.{kind}.{lang}" for kind in ("text", "context") for lang in (src, tgt)}
    for p in files.values():
        require_file(p)
    lines = {k: read_lines(p) for k, p in files.items()}
    n_text = sum(1 + len(x["errors"]) for x in entries)
    for lang in (src, tgt):
        if len(lines[f"text.{lang}"]) != n_text:
            raise ToolError(f"{len(lines[f'text.{lang}'])} lines, but the {len(entries)} instances of {path} have "
                            f"{n_text} candidates (1 + their errors each)", files[f"text.{lang}"])
    n_ctx = len(lines[f"context.{src}"])
    if n_ctx % n_text or len(lines[f"context.{tgt}"]) != n_ctx:
        raise ToolError(f"{n_ctx} lines: not the same number of context lines for each of the {n_text} text lines "
                        f"(and in {files[f'context.{tgt}']})", files[f"context.{src}"])
    c = n_ctx // n_text
    out, row = [], 0
    for k, x in enumerate(entries, 1):
        n = 1 + len(x["errors"])
        first_ctx = (lines[f"context.{src}"][row * c:(row + 1) * c], lines[f"context.{tgt}"][row * c:(row + 1) * c])
        for j in range(row + 1, row + n):
            ctx = (lines[f"context.{src}"][j * c:(j + 1) * c], lines[f"context.{tgt}"][j * c:(j + 1) * c])
            if lines[f"text.{src}"][j] != lines[f"text.{src}"][row]:
                raise ToolError(f"instance {k}: its candidates have different sources", files[f"text.{src}"], j + 1)
            if ctx != first_ctx:
                raise ToolError(f"instance {k}: its candidates have different contexts", files[f"context.{src}"],
                                j * c + 1)
        cs, ct = _context_pairs(*first_ctx)
        out.append(make_instance(f"{k}", lines[f"text.{src}"][row], lines[f"text.{tgt}"][row:row + n], cs, ct,
                                 x["ante distance"], _category(x)))
        row += n
    return out


def read_contrapro(path: str, *, docs: Optional[str] = None, text_prefix: Optional[str] = None,
                   context: Optional[int] = None, src: str = "en", tgt: str = "de") -> List[Dict]:
    """A ContraPro set with its context from ``docs`` (``context`` lines, default 1) or the text files of
    ``text_prefix`` (module doc)."""
    if (docs is None) == (text_prefix is None):
        raise ToolError("a ContraPro set needs its context: give --docs DIR or --text-prefix PREFIX")
    entries = read_contrapro_json(path)
    if docs is not None:
        c = 1 if context is None else context
        if c < 0:
            raise ToolError(f"--context must be >= 0, got {c}")
        return contrapro_from_documents(entries, path, docs, c, src, tgt)
    return contrapro_from_text(entries, path, text_prefix, src, tgt)


# ============================================================================================ Bawden et al.
def _pair(block: str, j: int, correct: Sequence[str], incorrect: Sequence[str], src: Sequence[str], path: str,
          category: str) -> Dict:
    where = f"block {block}, pair {j}"
    for what, v in (("src", src), ("correct", correct), ("incorrect", incorrect)):
        if not (isinstance(v, list) and len(v) == 2 and all(isinstance(t, str) for t in v)):
            raise ToolError(f"{where}: {what!r} must be [previous sentence, current sentence]", path)
    if correct[0] != incorrect[0]:
        raise ToolError(f"{where}: the correct and the incorrect translation have different previous sentences",
                        path)
    return make_instance(f"{block}.{j}", src[1], [correct[1], incorrect[1]], [src[0]], [correct[0]], 1, category)


def read_bawden_json(path: str) -> List[Dict]:
    """The pairs of ``anaphora.json`` or ``lexical-choice.json`` (module doc), in block order."""
    data = read_json(path)
    if not isinstance(data, dict) or not data:
        raise ToolError("a Bawden et al. set is a JSON object of numbered blocks", path)
    try:
        keys = sorted(data, key=int)
    except ValueError:
        raise ToolError("the blocks of a Bawden et al. set are numbered (\"1\", \"2\", ...)", path) from None
    out = []
    for key in keys:
        b = data[key]
        if not isinstance(b, dict):
            raise ToolError(f"block {key} is not a JSON object", path)
        if "examples" in b:  # lexical choice
            for j, ex in enumerate(b["examples"], 1):
                trg = ex.get("trg") if isinstance(ex, dict) else None
                if not isinstance(trg, dict):
                    raise ToolError(f"block {key}, pair {j}: no 'trg' with correct/incorrect", path)
                out.append(_pair(key, j, trg.get("correct"), trg.get("incorrect"), ex.get("src"), path,
                                 str(b.get("type", "-"))))
        elif "trg" in b:  # anaphora
            for j, t in enumerate(b["trg"], 1):
                kind = "correct" if "correct" in t else "semi-correct"
                cat = kind + (f":{t['type']}" if "type" in t else "")
                out.append(_pair(key, j, t.get(kind), t.get("incorrect"), b.get("src"), path, cat))
        else:
            raise ToolError(f"block {key} has neither 'examples' (lexical choice) nor 'trg' (anaphora)", path)
    if not out:
        raise ToolError("no contrastive pair in the set", path)
    return out


def read_bawden_text(prefix: str, src: str, tgt: str) -> List[Dict]:
    """The pairs of the ``PREFIX.current.*`` / ``PREFIX.prev.*`` files of ``json2rawtext.py``."""
    names = {(kind, lang): f"{prefix}.{kind}.{lang}" for kind in ("current", "prev") for lang in (src, tgt)}
    for p in names.values():
        require_file(p)
    lines = {k: read_lines(p) for k, p in names.items()}
    n = len(lines["current", src])
    for k, v in lines.items():
        if len(v) != n:
            raise ToolError(f"{len(v)} lines but {names['current', src]} has {n}", names[k])
    if n == 0 or n % 2:
        raise ToolError(f"{n} lines: two lines (correct, incorrect) per pair", names["current", src])
    out = []
    for i in range(0, n, 2):
        for kind, lang in (("current", src), ("prev", src), ("prev", tgt)):
            if lines[kind, lang][i] != lines[kind, lang][i + 1]:
                raise ToolError("the two lines of a pair differ here (only the current translation may)",
                                names[kind, lang], i + 2)
        out.append(make_instance(f"{i // 2 + 1}", lines["current", src][i],
                                 [lines["current", tgt][i], lines["current", tgt][i + 1]],
                                 [lines["prev", src][i]], [lines["prev", tgt][i]], 1, "-"))
    return out


def read_set(fmt: str, path: Optional[str] = None, *, docs: Optional[str] = None, text_prefix: Optional[str] = None,
             context: Optional[int] = None, langs: Optional[Tuple[str, str]] = None) -> List[Dict]:
    """The instances of a set in format ``fmt`` (:data:`SET_FORMATS`)."""
    if fmt not in SET_FORMATS:
        raise ToolError(f"unknown set format {fmt!r} ({', '.join(SET_FORMATS)})")
    src, tgt = langs or DEFAULT_LANGS[fmt]
    if fmt == "contrapro":
        if path is None:
            raise ToolError("give the ContraPro JSON file (--set)")
        return read_contrapro(path, docs=docs, text_prefix=text_prefix, context=context, src=src, tgt=tgt)
    if docs is not None:
        raise ToolError("--docs is for ContraPro sets; a Bawden et al. set holds its context itself")
    if (path is None) == (text_prefix is None):
        raise ToolError("give a Bawden et al. set as its JSON file (--set) or as text files (--text-prefix)")
    return read_bawden_json(path) if path is not None else read_bawden_text(text_prefix, src, tgt)


# ============================================================================================ accuracy
def _bucket_key(b: str):
    return (2, 0) if b == "-" else (1, 0) if b == ">3" else (0, int(b))


def set_accuracy(instances: Sequence[Mapping[str, Any]], scores: Sequence[Sequence[float]]) -> Dict[str, Any]:
    """Accuracy (the reference strictly above every contrastive candidate) overall, by antecedent distance bucket
    and by category."""
    if len(instances) != len(scores):
        raise ToolError(f"{len(scores)} score lists for {len(instances)} instances")
    tot, by_d, by_c = [0, 0], {}, {}
    for x, s in zip(instances, scores):
        if len(s) != len(x["candidates"]) or len(s) < 2:
            raise ToolError(f"instance {x['id']}: {len(s)} scores for {len(x['candidates'])} candidates")
        ok = int(all(s[0] > v for v in s[1:]))
        d = x.get("distance")
        for cell in (tot, by_d.setdefault("-" if d is None else distance_bucket(d), [0, 0]),
                     by_c.setdefault(x.get("category", "-"), [0, 0])):
            cell[0] += ok
            cell[1] += 1

    def acc(c: int, n: int) -> Dict[str, Any]:
        return {"correct": c, "total": n, "accuracy": c / n if n else None}

    return {"overall": acc(*tot),
            "by_distance": {b: acc(*by_d[b]) for b in sorted(by_d, key=_bucket_key)},
            "by_category": {c: acc(*by_c[c]) for c in sorted(by_c)}}


def format_set_accuracy(res: Mapping[str, Any], name: str = "model") -> str:
    """Markdown: accuracy by antecedent distance (and counts), then by category."""
    cells = list(res["by_distance"])
    fmt = lambda c: "–" if c["accuracy"] is None else f"{c['accuracy']:.3f}"  # noqa: E731
    lines = ["| Model | " + " | ".join(cells) + " | all |", "|---|" + "---|" * (len(cells) + 1),
             f"| {name} | " + " | ".join(fmt(res["by_distance"][b]) for b in cells) + f" | {fmt(res['overall'])} |",
             "| *instances* | " + " | ".join(str(res["by_distance"][b]["total"]) for b in cells)
             + f" | {res['overall']['total']} |", "", "| category | accuracy | instances |", "|---|---|---|"]
    lines += [f"| {c} | {fmt(v)} | {v['total']} |" for c, v in res["by_category"].items()]
    return "\n".join(lines)


# ============================================================================================ scoring
def _segment(texts: List[str], spm: Optional[str]) -> List[str]:
    if spm is None:
        return texts
    from fairseq_ext.tools.corpora.segment import apply_sentencepiece

    return apply_sentencepiece(spm, texts, threads=1)


def write_split(instances: Sequence[Mapping[str, Any]], task, folder: str, split: str, *,
                src_spm: Optional[str], tgt_spm: Optional[str]) -> List[int]:
    """Binarize the instances' documents (context sentences, then the sentence with its reference) as split
    ``split`` of ``folder`` with the task's dictionaries, and write ``split.ids`` (the document of every line:
    ``doc<k>`` on each line of instance k); returns the line of each instance's sentence."""
    from fairseq.data import indexed_dataset

    cfg = task.cfg
    s_lang, t_lang = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
    if not s_lang or not t_lang:
        raise ToolError(f"task {getattr(cfg, '_name', '?')}: no source/target language to name the split's files")
    src_lines, tgt_lines, ids, lines = [], [], [], []
    for k, x in enumerate(instances):
        src_lines += list(x["context_src"]) + [x["source"]]
        tgt_lines += list(x["context_tgt"]) + [x["candidates"][0]]
        ids += [f"doc{k}"] * (len(x["context_src"]) + 1)
        lines.append(len(src_lines) - 1)
    impl = getattr(cfg, "dataset_impl", None) or "mmap"
    prefix = os.path.join(folder, f"{split}.{s_lang}-{t_lang}")
    for lang, texts, spm, d in ((s_lang, src_lines, src_spm, task.source_dictionary),
                                (t_lang, tgt_lines, tgt_spm, task.target_dictionary)):
        builder = indexed_dataset.make_builder(f"{prefix}.{lang}.bin", impl=impl, vocab_size=len(d))
        for t in _segment(texts, spm):
            builder.add_item(d.encode_line(t, add_if_not_exist=False, append_eos=True).int())
        builder.finalize(f"{prefix}.{lang}.idx")
    with open(os.path.join(folder, f"{split}.ids"), "w", encoding="utf-8") as f:
        f.write("".join(i + "\n" for i in ids))
    return lines


def score_external_set(instances: Sequence[Dict], fairseq_argv: Sequence[str], *, spm: Optional[str] = None,
                       src_spm: Optional[str] = None, segmented: bool = False, per_batch: int = 1,
                       name: Optional[str] = None, details: Optional[str] = None, set_name: str = "",
                       scorer_factory: Optional[Callable[[Sequence[Any], Any], Callable]] = None) -> Dict[str, Any]:
    """Score every candidate of ``instances`` with the model(s) of ``fairseq_argv`` (``fairseq-generate``'s options)
    and return :func:`set_accuracy` with metadata (module doc). ``scorer_factory(models, task)`` replaces the
    model's log-probability (``sample -> one score per row``), e.g. to check the bookkeeping."""
    import tempfile

    from fairseq_ext.tools.evaluation.contrastive_scoring import load_for_scoring, score_candidates

    if (spm is None) == (not segmented):
        raise ToolError("give either --spm MODEL (raw text in the set) or --segmented")
    for p in (spm, src_spm):
        if p is not None:
            require_file(p, "sentencepiece model")
    if not instances:
        raise ToolError("empty contrastive set")
    with tempfile.TemporaryDirectory(prefix="contrastive_set.") as tmp:
        lines: List[int] = []

        def prepare(task, folder: str, split: str) -> None:
            lines.extend(write_split(instances, task, folder, split, src_spm=src_spm or spm, tgt_spm=spm))

        cfg, task, models, dataset, use_cuda = load_for_scoring(fairseq_argv, prepare=prepare, workdir=tmp)
        log(f"[contrastive] scoring {len(instances)} instances "
            f"({sum(len(x['candidates']) for x in instances)} candidates) of {set_name or 'the set'} "
            f"with {cfg.common_eval.path} (task {cfg.task._name})")
        scores, _ = score_candidates(lines, [x["candidates"] for x in instances], dataset, models,
                                     task.target_dictionary, spm=spm, per_batch=per_batch, use_cuda=use_cuda,
                                     scorer=scorer_factory(models, task) if scorer_factory else None)
    res = set_accuracy(instances, scores)
    n_ctx = Counter(len(x["context_src"]) for x in instances)
    res.update(model=name or str(cfg.common_eval.path), set=set_name, task=cfg.task._name,
               context_sentences=dict(sorted(n_ctx.items())),
               criterion="reference log-probability > every contrastive candidate's (sum over target tokens)")
    if details:
        write_jsonl(details, ({"id": x["id"], "distance": x["distance"], "category": x["category"],
                               "reference_score": s[0], "contrastive_scores": s[1:],
                               "correct": all(s[0] > v for v in s[1:])} for x, s in zip(instances, scores)))
    return res


# ============================================================================================ CLI
def add_set_arguments(p) -> None:
    """The options of ``fairseq-ext-contrastive score`` for the published sets."""
    p.add_argument("--format", dest="set_format", choices=("jsonl",) + SET_FORMATS, default="jsonl",
                   help="jsonl: a set of `build` on a split of DATA (default); contrapro / bawden: a published set "
                        "(ContraPro JSON, Bawden et al. 2018 JSON or text files) scored with its own context "
                        "(fairseq_ext.tools.evaluation.contrastive_sets)")
    p.add_argument("--docs", metavar="DIR", help="contrapro: the documents (NAME.SRC / NAME.TGT, one sentence a line)")
    p.add_argument("--text-prefix", metavar="P",
                   help="contrapro: P.{text,context}.{SRC,TGT} of json2text_and_context.pl; bawden: "
                        "P.{current,prev}.{SRC,TGT} of json2rawtext.py")
    p.add_argument("--context", type=int, default=None, metavar="N",
                   help="contrapro with --docs: previous sentences as context (default 1)")
    p.add_argument("--set-langs", metavar="SRC-TGT",
                   help="language suffixes of the set's files (default en-de for contrapro, en-fr for bawden)")
    p.add_argument("--src-spm", help="contrapro / bawden: sentencepiece model of the source side (default --spm)")


def score_from_args(args, fairseq_argv: Sequence[str]) -> Dict[str, Any]:
    """Read the set of ``args`` (:func:`add_set_arguments`), score it, print the tables; returns the result."""
    langs = None
    if args.set_langs:
        langs = tuple(args.set_langs.split("-"))
        if len(langs) != 2 or not all(langs):
            raise ToolError(f"--set-langs must be SRC-TGT, e.g. en-de, got {args.set_langs!r}")
    instances = read_set(args.set_format, args.set_path, docs=args.docs, text_prefix=args.text_prefix,
                         context=args.context, langs=langs)
    res = score_external_set(instances, fairseq_argv, spm=args.spm, src_spm=args.src_spm, segmented=args.segmented,
                             per_batch=args.instances_per_batch, name=args.name, details=args.details,
                             set_name=args.set_path or args.text_prefix)
    print(format_set_accuracy(res, res["model"]))
    return res

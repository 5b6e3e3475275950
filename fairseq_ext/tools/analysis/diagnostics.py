r"""Diagnostic corpora: synthetic tasks on which a sentence model is limited *by construction* and a
document-context mechanism should be near-perfect (``python -m fairseq_ext.tools.analysis.diagnostics``,
``fairseq-ext-diagnostics``). They tell a defective mechanism from a weak setting on the document models
of Maruf 2019 ch. 3-4.

Every task is a word-level pair ``src``→``tgt`` translated one-to-one by a fixed dictionary except one
*probe* token whose translation needs the document:

* ``antecedent``: a pronoun ``PRO`` translates by the class of a noun 1-3 sentences *before* it;
* ``cataphor``: the same with the noun *after* the pronoun (only an offline context resolves it);
* ``consistency``: a word ``amb`` translates to the same random synonym throughout a document (only the
  target context resolves it).

In ``valid``/``test`` every document is written twice, once with each class (*twin documents*), so a
model without the needed context is right on at most one of the two twins: accuracy <= 50% exactly.
Classes/choices come from a random stream separate from the structure (``--choice-seed``).

Output (``generate TASK --out DIR``): ``DIR/raw/{split}.{src,tgt,ids}``, ``DIR/raw/{split}.contrastive.jsonl``
(one probe a line, the format of :mod:`fairseq_ext.tools.evaluation.contrastive`), ``DIR/diagnostics.json``
and, unless ``--no-binarize``, ``DIR/word/bin/``. ``decoded --set SET --hyp GEN_OUT`` reports what a
system wrote at the probes (and, for consistency, the share of consistent documents).
"""
from __future__ import annotations

import os
import random
from collections import Counter, defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fairseq_ext.tools.common import (
    SPLITS, ArgumentParser, OutputSet, ToolError, log, positive_int, read_jsonl, run_cli, write_json, write_jsonl,
)
from fairseq_ext.tools.analysis.diagnostics_copy import COPY_TASKS
from fairseq_ext.tools.analysis.diagnostics_multi import TASKS as MULTI_TASKS, add_generate_arguments, run_generate
from fairseq_ext.tools.analysis import diagnostics_decoding as decoding
from fairseq_ext.tools.analysis import diagnostics_arch as arch
from fairseq_ext.tools.analysis import diagnostics_meta as meta
from fairseq_ext.tools.analysis import diagnostics_simul as simul

__all__ = ["TASKS", "BUCKETS", "generate_split", "generate", "segment_instances", "decoded_scores", "main",
           "cli_main"]

TASKS = ("antecedent", "cataphor", "consistency")
BUCKETS = ("0", "1", "2", "3", ">3")
SRC, TGT = "src", "tgt"
PRO, PRO_TGT = "PRO", {"f": "la", "m": "le"}
AMB, AMB_TGT = "amb", {"f": "syna", "m": "synb"}
VERSION = 3  # of the generator: a change regenerates existing corpora
N_PROBES = 3  # PRO sentences per antecedent/cataphor document: d = 1, 2, 3
DEFAULTS = {"seed": 1, "n_train": 40000, "n_valid": 300, "n_test": 600, "fillers": 16, "nouns": 2,
            "sent_len": (2, 5), "doc_len": (3, 6)}
BOUND = {"antecedent": "50%: the class is independent of sentence i (any sentence model; d > N for an "
                       "N-previous-sentence model)",
         "cataphor": "50%: the class is decided by a later sentence (any sentence or online model)",
         "consistency": "50%: the choice is independent of the source document (any sentence or "
                        "source-context model)"}


def bucket(d: int) -> str:
    return str(d) if d <= 3 else ">3"


# --------------------------------------------------------------------------------------------- documents
class _Builder:
    """Documents of one split: ``struct`` draws every source token, ``choice`` every class/synonym."""

    def __init__(self, task: str, split: str, seed: int, choice_seed: int, fillers: int, nouns: int,
                 sent_len: Tuple[int, int], doc_len: Tuple[int, int]):
        self.task, self.split = task, split
        self.struct = random.Random(f"diagnostics:{task}:{seed}:{split}:structure")
        self.choice = random.Random(f"diagnostics:{task}:{choice_seed}:{split}:choice")
        self.fillers, self.nouns, self.sent_len, self.doc_len = fillers, nouns, sent_len, doc_len

    def documents(self):
        """The next document(s): one with a random class (train), or twins with both classes (valid/test:
        the same source structure twice, in a random order)."""
        structure = self.consistency_structure() if self.task == "consistency" else self.pronoun_structure()
        if self.split == "train":
            return [self.realize(structure, "f" if self.choice.random() < 0.5 else "m")]
        first = "f" if self.choice.random() < 0.5 else "m"
        return [self.realize(structure, k) for k in (first, "m" if first == "f" else "f")]

    def sentence(self, special=None) -> Tuple[list, int]:
        """Filler words with ``special`` inserted at a random position: (tokens, position or -1)."""
        n = self.struct.randint(*self.sent_len)
        words: list = [f"w{self.struct.randrange(self.fillers)}" for _ in range(n)]
        if special is None:
            return words, -1
        k = self.struct.randrange(n + 1)
        return words[:k] + [special] + words[k:], k

    def pronoun_structure(self):
        """antecedent / cataphor: (sentences with the noun as a ("noun", slot) placeholder, probes)."""
        n_doc = max(self.struct.randint(*self.doc_len), N_PROBES + 1)
        before = self.struct.randint(0, n_doc - N_PROBES - 1)
        noun_pos = before if self.task == "antecedent" else before + N_PROBES
        pro_pos = [noun_pos + d if self.task == "antecedent" else noun_pos - d for d in range(1, N_PROBES + 1)]
        sents, probes = [], []
        for pos in range(n_doc):
            if pos == noun_pos:
                words, _ = self.sentence(("noun", self.struct.randrange(self.nouns)))
            elif pos in pro_pos:
                words, at = self.sentence(PRO)
                probes.append({"pos": pos, "position": at, "distance": abs(pos - noun_pos)})
            else:
                words, _ = self.sentence()
            sents.append(words)
        return sents, probes

    def consistency_structure(self):
        n_doc = self.struct.randint(max(self.doc_len[0], 2), self.doc_len[1])
        has = [self.struct.random() < 0.75 for _ in range(n_doc)]
        for pos in self.struct.sample(range(n_doc), 2):  # at least two occurrences
            has[pos] = True
        sents, probes = [], []
        for pos in range(n_doc):
            words, at = self.sentence(AMB if has[pos] else None)
            if has[pos]:
                probes.append({"pos": pos, "position": at, "distance": len(probes)})
            sents.append(words)
        return sents, probes

    @staticmethod
    def realize(structure, k: str):
        """(source sentences, target sentences, probes) of a structure with class/synonym ``k``."""
        sents, probes = structure
        other = "m" if k == "f" else "f"
        src = [[f"{'na' if k == 'f' else 'nb'}{w[1]}" if isinstance(w, tuple) else w for w in s] for s in sents]
        tgt = [[_Builder.translate(w, k) for w in s] for s in src]
        probe_map = PRO_TGT if any(PRO in s for s in src) else AMB_TGT
        return src, tgt, [dict(p, gender=k, correct=probe_map[k], wrong=probe_map[other]) for p in probes]

    @staticmethod
    def translate(word: str, k: str) -> str:
        if word == PRO:
            return PRO_TGT[k]
        if word == AMB:
            return AMB_TGT[k]
        if word.startswith("n"):  # naK -> maK, nbK -> mbK
            return "m" + word[1:]
        return "v" + word[1:]  # wK -> vK


def generate_split(task: str, split: str, n_sentences: int, *, seed: int = 1, choice_seed: Optional[int] = None,
                   fillers: int = DEFAULTS["fillers"], nouns: int = DEFAULTS["nouns"],
                   sent_len: Tuple[int, int] = DEFAULTS["sent_len"], doc_len: Tuple[int, int] = DEFAULTS["doc_len"]
                   ) -> Dict[str, Any]:
    """Whole documents until at least ``n_sentences`` lines: ``{"src", "tgt", "ids"}`` (lists of lines) and
    ``"instances"`` (the contrastive probes, module doc)."""
    if task not in TASKS:
        raise ToolError(f"unknown diagnostic task {task!r}; known: {', '.join(TASKS)}")
    if split not in SPLITS:
        raise ToolError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    if not 1 <= sent_len[0] <= sent_len[1]:
        raise ToolError(f"--sent-len {sent_len[0]} {sent_len[1]}: need 1 <= MIN <= MAX")
    if not 1 <= doc_len[0] <= doc_len[1]:
        raise ToolError(f"--doc-len {doc_len[0]} {doc_len[1]}: need 1 <= MIN <= MAX")
    if fillers < 1 or nouns < 1:
        raise ToolError("--fillers and --nouns must be >= 1")
    b = _Builder(task, split, seed, seed if choice_seed is None else choice_seed, fillers, nouns, sent_len, doc_len)
    out: Dict[str, Any] = {"src": [], "tgt": [], "ids": [], "instances": []}
    doc_no = 0
    docs: List[Any] = []
    while len(out["src"]) < n_sentences or docs:  # never half a pair of twins
        if not docs:
            docs = b.documents()
        src, tgt, probes = docs.pop(0)
        doc = f"{split}-d{doc_no:05d}"
        first = len(out["src"])
        for pos, (s, t) in enumerate(zip(src, tgt)):
            out["src"].append(" ".join(s))
            out["tgt"].append(" ".join(t))
            out["ids"].append(f"{doc}.{pos + 1}")
        for p in sorted(probes, key=lambda x: x["pos"]):
            ref = tgt[p["pos"]]
            wrong = list(ref)
            wrong[p["position"]] = p["wrong"]
            out["instances"].append({
                "line": first + p["pos"], "id": f"{doc}.{p['pos'] + 1}", "doc": doc, "distance": p["distance"],
                "bucket": bucket(p["distance"]), "gender": p["gender"], "reference": " ".join(ref),
                "variants": [" ".join(wrong)],
                "probe": {"correct": p["correct"], "wrong": p["wrong"], "position": p["position"]}})
        doc_no += 1
    return out


def set_counts(instances: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Probes by bucket and class, and the majority-class share (a constant answer's accuracy)."""
    by_b = Counter(x["bucket"] for x in instances)
    by_g = Counter(x["gender"] for x in instances)
    n = len(instances)
    return {"instances": n, "by_bucket": {b: by_b.get(b, 0) for b in BUCKETS},
            "by_class": {g: by_g.get(g, 0) for g in ("f", "m")},
            "majority_share": (max(by_g.values()) / n) if n else None}


def segment_instances(instances: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The probes with reference and variants in the word-level units of ``corpora prepare --method word``."""
    from fairseq_ext.tools.corpora.segment import words

    return [dict(x, reference=words(x["reference"]), variants=[words(v) for v in x["variants"]], segmented=True)
            for x in instances]


def generate(task: str, out: str, *, seed: int = 1, choice_seed: Optional[int] = None,
             n_train: int = DEFAULTS["n_train"], n_valid: int = DEFAULTS["n_valid"], n_test: int = DEFAULTS["n_test"],
             binarize: bool = True, force: bool = False, **layout) -> Dict[str, Any]:
    """Write the corpus of ``task`` under ``out`` (module doc); returns the ``diagnostics.json`` record."""
    sizes = {"train": n_train, "valid": n_valid, "test": n_test}
    raw = os.path.join(out, "raw")
    info: Dict[str, Any] = {"version": VERSION, "task": task, "seed": seed, "choice_seed": seed if choice_seed is None else choice_seed,
                            "sizes": sizes, "layout": {k: list(v) if isinstance(v, tuple) else v
                                                       for k, v in dict(DEFAULTS, **layout).items()
                                                       if k not in ("seed", "n_train", "n_valid", "n_test")},
                            "bound": BOUND.get(task), "src": SRC, "tgt": TGT, "splits": {}}
    meta = os.path.join(out, "diagnostics.json")
    KEYS = ("version", "task", "seed", "choice_seed", "sizes", "layout")
    if not force and os.path.isfile(meta) and os.path.isdir(os.path.join(out, "word", "bin")) == binarize:
        from fairseq_ext.tools.common import read_json

        old = read_json(meta)
        if {k: old.get(k) for k in KEYS} == {k: info[k] for k in KEYS}:
            log(f"[diagnostics] {out} is up to date ({task}); skipping (--force redoes it)")
            return old
    data = {}
    with OutputSet(raw) as o:
        for split, n in sizes.items():
            d = generate_split(task, split, n, seed=seed, choice_seed=choice_seed, **layout)
            data[split] = d
            o.write_lines(f"{split}.{SRC}", d["src"])
            o.write_lines(f"{split}.{TGT}", d["tgt"])
            o.write_lines(f"{split}.ids", d["ids"])
            o.write_jsonl(f"{split}.contrastive.jsonl", d["instances"])
            info["splits"][split] = dict(lines=len(d["src"]), documents=len(set(map(_doc, d["ids"]))),
                                         **set_counts(d["instances"]))
    log(f"[diagnostics] {task}: " + "; ".join(f"{s} {v['lines']} lines, {v['documents']} documents, "
                                              f"{v['instances']} probes" for s, v in info["splits"].items()))
    if binarize:
        from fairseq_ext.tools.corpora.corpora import prepare

        types = len({w for d in data.values() for side in ("src", "tgt") for line in d[side] for w in line.split()})
        bin_dir = prepare(None, SRC, TGT, method="word", vocab_size=types + 8, out=out, raw=raw, name="word",
                          force=force)
        for split, d in data.items():
            write_jsonl(os.path.join(bin_dir, f"{split}.contrastive.jsonl"), segment_instances(d["instances"]))
        info["bin"] = bin_dir
    write_json(meta, info, indent=1)
    return info


def _doc(line_id: str) -> str:
    return line_id.rsplit(".", 1)[0] if "." in line_id else line_id


# --------------------------------------------------------------------------------------------- decoded output
def decoded_scores(instances: Sequence[Dict[str, Any]], hyps: Dict[int, str]) -> Dict[str, Any]:
    """What a system wrote at the probes: ``correct`` = the hypothesis of the probe's line contains the correct
    probe word and not the wrong one; ``consistent_docs`` = the documents (with >= 2 probes) whose probe
    sentences all contain the same single probe word (either one); ``missing`` = no probe word at all."""
    correct, missing = 0, 0
    by_b: Dict[str, List[int]] = defaultdict(lambda: [0, 0])
    per_doc: Dict[str, List[Optional[str]]] = defaultdict(list)
    for x in instances:
        line = int(x["line"])
        if line not in hyps:
            raise ToolError(f"no hypothesis for line {line} (id {x.get('id')})")
        words = set(hyps[line].replace("\u2581", " ").split())
        c, w = x["probe"]["correct"], x["probe"]["wrong"]
        ok = c in words and w not in words
        chosen = c if ok else (w if w in words and c not in words else None)
        missing += chosen is None
        correct += ok
        by_b[x["bucket"]][0] += ok
        by_b[x["bucket"]][1] += 1
        per_doc[x["doc"]].append(chosen)
    docs = [v for v in per_doc.values() if len(v) >= 2]
    consistent = sum(1 for v in docs if v[0] is not None and all(c == v[0] for c in v))
    n = len(instances)
    return {"probes": n, "correct": correct, "accuracy": correct / n if n else None, "missing": missing,
            "by_bucket": {b: (c / t if t else None) for b, (c, t) in sorted(by_b.items())},
            "documents": len(docs), "consistent_docs": consistent,
            "consistency": consistent / len(docs) if docs else None}


def read_hypotheses(path: str) -> Dict[int, str]:
    """``{sentence id: hypothesis}`` of a fairseq-generate output (H- lines, the first of an n-best list)."""
    from fairseq_ext.tools.hypotheses import load_hypotheses

    return {int(k): v for k, v in load_hypotheses(path, field="H").items()}


# --------------------------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="fairseq-ext-diagnostics",
                        description="Synthetic diagnostic corpora for document-context mechanisms (module doc of "
                                    "fairseq_ext.tools.analysis.diagnostics).", allow_abbrev=False)
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write a diagnostic corpus (raw + word-level binarized)")
    g.add_argument("task", choices=TASKS + COPY_TASKS + MULTI_TASKS + decoding.DECODING_TASKS + arch.TASKS +
                   simul.SIMUL_TASKS + meta.TASKS,
                   help="copy, retrieval: fairseq_ext.tools.analysis.diagnostics_copy; ulr_cipher, mole_shared: "
                        "fairseq_ext.tools.analysis.diagnostics_multi; search, fertility: "
                        "fairseq_ext.tools.analysis.diagnostics_decoding; conv_register, rare_lex, position_perm: "
                        "fairseq_ext.tools.analysis.diagnostics_arch; monotone, reorder: "
                        "fairseq_ext.tools.analysis.diagnostics_simul; meta_cipher: "
                        "fairseq_ext.tools.analysis.diagnostics_meta")
    g.add_argument("--out", required=True, help="output folder")
    g.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="structure seed (default %(default)s)")
    g.add_argument("--choice-seed", type=int, default=None, help="class/synonym seed (default: --seed)")
    g.add_argument("--n-train", type=positive_int,
                   help=f"training sentences, whole documents (at least; default {DEFAULTS['n_train']}; copy, "
                        "retrieval: their module's)")
    g.add_argument("--n-valid", type=positive_int, help=f"default {DEFAULTS['n_valid']}")
    g.add_argument("--n-test", type=positive_int, help=f"default {DEFAULTS['n_test']}")
    g.add_argument("--fillers", type=positive_int, default=DEFAULTS["fillers"],
                   help="filler word types (default %(default)s)")
    g.add_argument("--nouns", type=positive_int, default=DEFAULTS["nouns"],
                   help="nouns per class (default %(default)s)")
    g.add_argument("--sent-len", type=int, nargs=2, metavar=("MIN", "MAX"), default=DEFAULTS["sent_len"],
                   help="filler words per sentence (default %(default)s)")
    g.add_argument("--doc-len", type=int, nargs=2, metavar=("MIN", "MAX"), default=DEFAULTS["doc_len"],
                   help="sentences per document (antecedent/cataphor: at least 4; default %(default)s)")
    g.add_argument("--no-binarize", action="store_true", help="write the raw folder only")
    g.add_argument("--force", action="store_true", help="regenerate even when diagnostics.json matches")
    add_generate_arguments(g)  # ulr_cipher, mole_shared: fairseq_ext.tools.analysis.diagnostics_multi
    decoding.add_generate_arguments(g)
    arch.add_generate_arguments(g)
    meta.add_generate_arguments(g)
    simul.add_generate_arguments(g)
    d = sub.add_parser("decoded", help="probe accuracy and document consistency of a system's output")
    d.add_argument("--set", dest="set_path", required=True, help="the {split}.contrastive.jsonl of the split")
    d.add_argument("--hyp", required=True, help="fairseq-generate output on that split")
    d.add_argument("--json", help="also write the result as JSON")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "generate" and args.task in MULTI_TASKS:
        return run_generate(args)
    if args.command == "generate" and args.task in decoding.DECODING_TASKS:
        return decoding.run_generate(args)
    if args.command == "generate" and args.task in arch.TASKS:
        return arch.run_generate(args)
    if args.command == "generate" and args.task in meta.TASKS:
        return meta.run_generate(args)
    if args.command == "generate" and args.task in simul.SIMUL_TASKS:
        return simul.run_generate(args)
    if args.command == "generate" and args.task in COPY_TASKS:
        from fairseq_ext.tools.analysis.diagnostics_copy import generate as generate_copy

        info = generate_copy(args.task, args.out, seed=args.seed, n_train=args.n_train, n_valid=args.n_valid,
                             n_test=args.n_test, binarize=not args.no_binarize, force=args.force, fillers=args.fillers,
                             sent_len=tuple(args.sent_len))
        print(f"{args.task}: bound {info['bound']}; data {info.get('bin', args.out)}")
        return 0
    if args.command == "generate":
        args.n_train, args.n_valid, args.n_test = (getattr(args, k) or DEFAULTS[k] for k in ("n_train", "n_valid",
                                                                                               "n_test"))
        info = generate(args.task, args.out, seed=args.seed, choice_seed=args.choice_seed, n_train=args.n_train,
                        n_valid=args.n_valid, n_test=args.n_test, binarize=not args.no_binarize, force=args.force,
                        fillers=args.fillers, nouns=args.nouns, sent_len=tuple(args.sent_len),
                        doc_len=tuple(args.doc_len))
        print(f"{args.task}: bound {info['bound']}; test probes {info['splits']['test']['instances']} "
              f"(majority share {info['splits']['test']['majority_share']:.3f}); data {info.get('bin', args.out)}")
        return 0
    res = decoded_scores(read_jsonl(args.set_path), read_hypotheses(args.hyp))
    print(f"probes {res['probes']}: correct {res['accuracy']:.3f} (missing {res['missing']}); consistent "
          f"documents {res['consistent_docs']}/{res['documents']}")
    if args.json:
        write_json(args.json, res, indent=1)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-diagnostics`` / ``python -m fairseq_ext.tools.analysis.diagnostics``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

r"""Contrastive pronoun evaluation in the style of ContraPro (Müller et al. 2018) on the Bible into English
(es-en, or a pair of the multilingual Bibles), for the document-level models of Maruf (2019) ch. 4 (Table 4.4).

A model is right on an instance when it scores the reference above every variant with the English
pronouns of the other gender; Spanish possessives, datives and reflexives (``su``, ``le``, ``se``, ...)
carry no natural gender, so *his*/*her* must come from the antecedent (the other source languages: their
lists in :data:`~fairseq_ext.tools.evaluation.contrastive_gender.SOURCE_PRONOUNS`, chosen by ``--src``).

``build`` (:mod:`~fairseq_ext.tools.evaluation.contrastive_build`, from raw ``{split}.{src}``, ``{split}.{ref}``,
``{split}.ids``): the verses with a gender-ambiguous source pronoun, English pronouns of one gender and an
antecedent of that gender in the same chapter, at a distance (verses back) bucketed as in Table 4.4; the
variants swap every gendered pronoun (:mod:`~fairseq_ext.tools.evaluation.contrastive_gender`). Output: one
JSON object a line; ``--min-distance 1`` keeps the antecedents outside the verse, ``--exclude-gendered-source``
drops verses whose source has a gendered pronoun; ``--max-per-distance``, ``--balance-gender`` sample the set.

``score``: every other option goes to fairseq's generation parser (data folder, ``--path``, task as for
``fairseq-generate``); each instance is scored by teacher forcing (log P(target | source, context));
accuracy overall, by distance (Table 4.4 layout) and by gender, and the gender-balanced accuracy
(:func:`contrastive_accuracy`; the model is loaded and run by :mod:`~fairseq_ext.tools.evaluation.contrastive_scoring`).
``--format contrapro|bawden`` scores the published sets (:mod:`fairseq_ext.tools.evaluation.contrastive_sets`)::

    python -m fairseq_ext.tools.evaluation.contrastive build --raw data/bible_es_en/raw --split test \
        --out contrastive.test.jsonl [--max-per-distance 500 --seed 1] [--balance-gender]
    python -m fairseq_ext.tools.evaluation.contrastive build --raw data/bible_multi/raw/en_web-tl \
        --src tl --ref en_web --min-distance 1 --out contrastive.tl.test.jsonl
    python -m fairseq_ext.tools.evaluation.contrastive build --raw data/bible_es_en/raw-heldout5-<hash> \
        --split heldout --name-corpus data/bible_es_en/raw/train.en --min-distance 1 --exclude-gendered-source \
        --out contrastive.heldout.jsonl     # the books of `fairseq-ext-data prepare --exclude-books ...`
    python -m fairseq_ext.tools.evaluation.contrastive score --set contrastive.test.jsonl \
        --spm data/bible_es_en/spm8000/spm.model data/bible_es_en/spm8000/bin --path ckpt.pt --task translation

(installed: ``fairseq-ext-contrastive``). Bad input prints one ``error: FILE:LINE: ...`` line, exit 2.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Mapping, Optional, Sequence

from fairseq_ext.tools.common import (
    ArgumentParser, ToolError, log, positive_int, read_jsonl, require_file, run_cli, write_json, write_jsonl,
)
from fairseq_ext.tools.evaluation.contrastive_build import build_set, format_stats
from fairseq_ext.tools.evaluation.contrastive_gender import DEFAULT_LEXICON, GENDERS, SOURCE_PRONOUNS
from fairseq_ext.tools.evaluation.contrastive_scoring import (BUCKETS, distance_bucket, load_for_scoring,
                                                              score_candidates)

__all__ = ["contrastive_accuracy", "format_accuracy", "score_set", "build_parser", "main", "cli_main"]


def contrastive_accuracy(instances: Sequence[Mapping[str, Any]],
                         scores: Sequence[Sequence[float]]) -> Dict[str, Any]:
    """Accuracy (reference strictly above every variant) overall, by distance bucket and by gender."""
    if len(instances) != len(scores):
        raise ToolError(f"{len(scores)} score lists for {len(instances)} instances")

    def acc(c, n):
        return {"correct": c, "total": n, "accuracy": (c / n) if n else None}

    tot = [0, 0]
    by_b = {b: [0, 0] for b in BUCKETS}
    by_g = {g: [0, 0] for g in GENDERS}
    by_bg = {b: {g: [0, 0] for g in GENDERS} for b in BUCKETS}
    for x, s in zip(instances, scores):
        if len(s) != 1 + len(x["variants"]):
            raise ToolError(f"instance {x.get('id')}: {len(s)} scores for 1 + {len(x['variants'])} candidates")
        ok = int(len(s) > 1 and all(s[0] > v for v in s[1:]))
        b = x.get("bucket") or distance_bucket(int(x["distance"]))
        g = x["gender"]
        for cell in (tot, by_b[b], by_g[g], by_bg[b][g]):
            cell[0] += ok
            cell[1] += 1
    def balanced(cells):
        return sum(c / n for c, n in cells) / len(cells) if all(n for _, n in cells) else None

    return {
        "overall": acc(*tot),
        "by_distance": {b: acc(*by_b[b]) for b in BUCKETS},
        "by_gender": {g: acc(*by_g[g]) for g in GENDERS},
        "by_distance_gender": {b: {g: acc(*by_bg[b][g]) for g in GENDERS} for b in BUCKETS},
        # the mean of the masculine and feminine accuracies (None unless both genders have instances):
        # a model that always prefers one gender gets 0.5 however unbalanced the set is
        "balanced": {"overall": balanced([by_g[g] for g in GENDERS]),
                     "by_distance": {b: balanced([by_bg[b][g] for g in GENDERS]) for b in BUCKETS}},
    }


def _fmt_acc(cell: Mapping[str, Any]) -> str:
    return "–" if cell["accuracy"] is None else f"{cell['accuracy']:.3f}"


def format_accuracy(res: Mapping[str, Any], name: str = "model") -> str:
    """Table 4.4 layout (accuracy by antecedent distance), counts, and accuracy by gender."""
    lines = ["| Model | " + " | ".join(BUCKETS) + " | all |", "|---|" + "---|" * (len(BUCKETS) + 1)]
    lines.append(f"| {name} | " + " | ".join(_fmt_acc(res["by_distance"][b]) for b in BUCKETS)
                 + f" | {_fmt_acc(res['overall'])} |")
    if "balanced" in res:
        bal = res["balanced"]
        lines.append(f"| {name} (mean of m/f) | " + " | ".join(
            _fmt_acc({"accuracy": bal["by_distance"][b]}) for b in BUCKETS)
            + f" | {_fmt_acc({'accuracy': bal['overall']})} |")
    lines.append("| *instances* | " + " | ".join(str(res["by_distance"][b]["total"]) for b in BUCKETS)
                 + f" | {res['overall']['total']} |")
    lines.append("")
    lines.append("| gender | " + " | ".join(BUCKETS) + " | all |")
    lines.append("|---|" + "---|" * (len(BUCKETS) + 1))
    for g, label in (("m", "masculine"), ("f", "feminine")):
        lines.append(f"| {label} | " + " | ".join(_fmt_acc(res["by_distance_gender"][b][g]) for b in BUCKETS)
                     + f" | {_fmt_acc(res['by_gender'][g])} |")
    return "\n".join(lines)


def score_set(set_path: str, fairseq_argv: Sequence[str], *, spm: Optional[str] = None,
              segmented: bool = False, per_batch: int = 1, name: Optional[str] = None,
              details: Optional[str] = None) -> Dict[str, Any]:
    """Load model and data (fairseq-generate options), score the set, return accuracies (+ metadata)."""
    if (spm is None) == (not segmented):
        raise ToolError("give either --spm MODEL (raw English in the set) or --segmented")
    if spm is not None:
        require_file(spm, "sentencepiece model")
    instances = read_jsonl(set_path)
    for i, x in enumerate(instances, 1):
        if not isinstance(x, dict) or not {"line", "reference", "variants", "gender"} <= set(x) \
                or ("distance" not in x and "bucket" not in x):
            raise ToolError("an instance needs line, reference, variants, gender and distance", set_path, i)
        if not x["variants"]:
            raise ToolError("an instance without variants", set_path, i)
    if not instances:
        raise ToolError("empty contrastive set", set_path)
    cfg, task, models, dataset, use_cuda = load_for_scoring(fairseq_argv)
    cands = [[x["reference"]] + list(x["variants"]) for x in instances]
    log(f"[contrastive] scoring {len(instances)} instances ({sum(map(len, cands))} candidates) on "
        f"{cfg.dataset.gen_subset} with {cfg.common_eval.path}")
    scores, mismatched = score_candidates([int(x["line"]) for x in instances], cands, dataset, models,
                                          task.target_dictionary, spm=spm, per_batch=per_batch, use_cuda=use_cuda)
    if mismatched == len(instances):
        raise ToolError(f"no reference of the set matches the target of its line in split "
                        f"{cfg.dataset.gen_subset!r} (wrong --gen-subset, --spm or reference language?)",
                        set_path)
    if mismatched:
        log(f"[contrastive] warning: {mismatched} of {len(instances)} references differ from the split's "
            f"targets after encoding")
    res = contrastive_accuracy(instances, scores)
    res.update(model=name or str(cfg.common_eval.path), set=str(set_path), split=cfg.dataset.gen_subset,
               task=cfg.task._name, reference_mismatches=mismatched,
               criterion="reference log-probability > every variant's (sum over target tokens)")
    if details:
        write_jsonl(details, ({"line": x["line"], "id": x.get("id"), "bucket": x.get("bucket"),
                               "gender": x["gender"], "reference_score": s[0], "variant_scores": s[1:],
                               "correct": all(s[0] > v for v in s[1:])}
                              for x, s in zip(instances, scores)))
    return res


# --------------------------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="fairseq-ext-contrastive",
                        description="ContraPro-style contrastive pronoun set (Bible into English): build and "
                                    "score.",
                        allow_abbrev=False)
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the contrastive set from a raw folder", allow_abbrev=False)
    b.add_argument("--raw", required=True, help="raw folder with {split}.{src,ref,ids}")
    b.add_argument("--split", default="test",
                   help="default test; heldout: the books that `fairseq-ext-data prepare --exclude-books` held out "
                        "of training (score with --gen-subset heldout on that folder's bin/)")
    b.add_argument("--out", required=True, help="output JSON lines file")
    b.add_argument("--src", default="es",
                   help="source language suffix (default es); its pronoun lists: "
                        f"{', '.join(SOURCE_PRONOUNS)} (or a corpus label such as fr_darby, tl_ulb)")
    b.add_argument("--ref", default="en", help="reference language suffix (default en)")
    b.add_argument("--lexicon", default=DEFAULT_LEXICON, help="gendered common nouns (WORD<TAB>m|f)")
    b.add_argument("--name-corpus", action="append", metavar="FILE",
                   help="English text to derive the names from (repeat; default train.REF + SPLIT.REF)")
    b.add_argument("--name-min-verses", type=positive_int, default=3)
    b.add_argument("--names-out", metavar="TSV", help="write the derived name lexicon here")
    b.add_argument("--src-pronouns", "--es-pronouns", dest="src_pronouns", default=None,
                   help="comma-separated gender-ambiguous source pronouns (default: those of --src; "
                        "--es-pronouns: the old name)")
    b.add_argument("--exclude-gendered-source", action="store_true",
                   help="skip verses whose source also has a gendered pronoun (él/ella for es)")
    b.add_argument("--min-distance", type=int, default=0,
                   help="keep antecedents at least N verses back (default 0; 1: outside the verse)")
    b.add_argument("--max-per-distance", type=positive_int, default=None,
                   help="keep a seeded random sample of at most N instances per distance bucket")
    b.add_argument("--balance-gender", action="store_true",
                   help="keep as many masculine as feminine instances in every distance bucket (seeded)")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--max-her", type=int, default=3,
                   help="all his/him combinations up to this many 'her' tokens (default 3)")
    b.add_argument("--stats-json", metavar="FILE", help="also write the counts as JSON")
    s = sub.add_parser("score", allow_abbrev=False,
                       help="accuracy of a model on the set; other options go to fairseq's generation parser",
                       description="Accuracy of a model on a contrastive set. Every option not listed here "
                                   "goes to fairseq's generation parser, as for fairseq-generate: DATA --path "
                                   "CHECKPOINT [--task TASK and its options] [--gen-subset SPLIT] [--cpu] ...")
    s.add_argument("--set", dest="set_path", help="the set: JSON lines of `build`, contrapro.json, anaphora.json ...")
    from fairseq_ext.tools.evaluation.contrastive_sets import add_set_arguments

    add_set_arguments(s)
    s.add_argument("--spm", help="sentencepiece model of the data (segments reference and variants)")
    s.add_argument("--segmented", action="store_true", help="the set's texts are already segmented")
    s.add_argument("--instances-per-batch", type=positive_int, default=1,
                   help="instances collated into one batch (default 1: each instance with its variants "
                        "alone, so a document model's batch never mixes instances)")
    s.add_argument("--name", help="model name in the table (default: the checkpoint path)")
    s.add_argument("--json", metavar="FILE", help="also write the accuracies as JSON")
    s.add_argument("--details", metavar="FILE", help="per-instance scores (JSON lines)")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    if argv and argv[0] == "score":
        args, rest = ap.parse_known_args(argv)
    else:
        args, rest = ap.parse_args(argv), []
    if args.command == "build":
        pron = None
        if args.src_pronouns is not None:
            pron = [w.strip() for w in args.src_pronouns.split(",") if w.strip()]
            if not pron:
                raise ToolError("--src-pronouns is empty")
        if args.min_distance < 0:
            raise ToolError(f"--min-distance must be >= 0, got {args.min_distance}")
        _, st = build_set(args.raw, args.split, args.out, src_lang=args.src, ref_lang=args.ref,
                          lexicon_path=args.lexicon, name_corpus=args.name_corpus, names_out=args.names_out,
                          src_pronouns=pron, exclude_gendered_source=args.exclude_gendered_source,
                          min_distance=args.min_distance,
                          max_per_distance=args.max_per_distance, seed=args.seed, max_her=args.max_her,
                          name_min_verses=args.name_min_verses, balance_gender=args.balance_gender)
        print(format_stats(st))
        log(f"[contrastive] {st['instances']} instances -> {args.out}")
        if args.stats_json:
            write_json(args.stats_json, st, indent=2)
        return 0
    if not rest:
        raise ToolError("score needs fairseq's arguments: DATA --path CHECKPOINT [--task ...]")
    if args.set_format != "jsonl":  # a published set (ContraPro, Bawden et al.) with its own context
        from fairseq_ext.tools.evaluation.contrastive_sets import score_from_args

        res = score_from_args(args, rest)
    else:
        if args.set_path is None:
            raise ToolError("give the set (--set)")
        res = score_set(args.set_path, rest, spm=args.spm, segmented=args.segmented,
                        per_batch=args.instances_per_batch, name=args.name, details=args.details)
        print(format_accuracy(res, res["model"]))
    if args.json:
        write_json(args.json, res, indent=2)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-contrastive`` / ``python -m fairseq_ext.tools.evaluation.contrastive``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

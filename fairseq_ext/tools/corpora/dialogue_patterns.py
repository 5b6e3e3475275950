r"""Gu (2018) ch. 3 (CopyNet), §3.3.3: the pattern-filling single-turn dialogue data (DS-I / DS-II) and its
top-K exact-match accuracy (Table 3.5). ``python -m fairseq_ext.tools.corpora.dialogue_patterns``
(``fairseq-ext-dialogue-patterns``)::

    python -m fairseq_ext.tools.corpora.dialogue_patterns generate OUT --protocol ds2 [--seed 1] [--scale 0.1]
    python -m fairseq_ext.tools.corpora.dialogue_patterns accuracy --data DS-I=ds1 --data DS-II=ds2 \
        --hyp RNNSearch@DS-I=rnn1.out --hyp RNNSearch@DS-II=rnn2.out ... [--topk 1 10] [--json]

``generate`` writes one data set (:mod:`~fairseq_ext.tools.corpora.dialogue_data`: the pattern file, the filler
pools of DS-I / DS-II, the sizes); ``accuracy`` prints top-K exact-match accuracy per system and data set in
the Table 3.5 layout (:mod:`~fairseq_ext.tools.corpora.dialogue_accuracy`).
"""
from __future__ import annotations

import json
from typing import Optional, Sequence

from fairseq_ext.tools.common import ArgumentParser, json_text, positive_int, run_cli
from fairseq_ext.tools.corpora.dialogue_accuracy import score, table_3_5
from fairseq_ext.tools.corpora.dialogue_data import DEFAULT_PATTERNS, PROTOCOLS, generate
from fairseq_ext.tools.hypotheses import REMOVE_BPE_CHOICES


# --------------------------------------------------------------------------- CLI
def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-dialogue-patterns",
                       description="Gu (2018) §3.3.3: pattern-filling dialogue data DS-I / DS-II (generate) and "
                                   "top-K exact-match accuracy, Table 3.5 (accuracy).")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write one data set",
                       description="Write {train,valid,test}.{src,tgt,rule}, patterns.tsv and dialogue_patterns.json "
                                   "(the choices where the thesis is silent: the module documentation).")
    g.add_argument("out", help="output folder")
    g.add_argument("--protocol", choices=sorted(PROTOCOLS), required=True,
                   help="ds1 (DS-I: one filler pool) or ds2 (DS-II: disjoint train/valid/test filler pools)")
    g.add_argument("--patterns", default=DEFAULT_PATTERNS, help="pattern file (default: the English toy patterns)")
    g.add_argument("--seed", type=int, default=1, help="default %(default)s")
    g.add_argument("--scale", type=float, default=1.0, help="multiply the default sizes (train 6500, valid 500, "
                                                             "test 1500)")
    g.add_argument("--train", type=positive_int, help="training instances (thesis 6500)")
    g.add_argument("--valid", type=int, help="validation instances (default 500; 0: none)")
    g.add_argument("--test", type=positive_int, help="test instances (thesis 1500)")
    g.add_argument("--test-fillers", type=float, default=0.3, help="DS-II: share of each slot type's fillers kept "
                                                                     "for test (default %(default)s)")
    g.add_argument("--valid-fillers", type=float, default=0.1, help="DS-II: share kept for valid (default "
                                                                      "%(default)s)")
    g.add_argument("--unit", choices=("word", "char"), default="word", help="tokens: words (default) or characters")
    g.add_argument("--force", action="store_true", help="regenerate even when the stamp matches")
    a = sub.add_parser("accuracy", help="top-K exact-match accuracy (Table 3.5)")
    a.add_argument("--data", action="append", required=True, metavar="[LABEL=]DIR",
                   help="a generated folder (repeat for DS-I and DS-II)")
    a.add_argument("--hyp", action="append", required=True, metavar="NAME[@LABEL]=FILE",
                   help="a system's output on one data set (fairseq-generate --nbest K output or plain text)")
    a.add_argument("--topk", type=positive_int, nargs="+", default=[1, 10], help="K values (default 1 10)")
    a.add_argument("--nbest", type=positive_int, default=1,
                   help="plain-text hypotheses: lines per sentence (default 1)")
    a.add_argument("--split", default="test", help="the split scored (default %(default)s)")
    a.add_argument("--field", choices=("D", "H"), default="D", help="fairseq-generate output: D (default) or H")
    a.add_argument("--remove-bpe", choices=REMOVE_BPE_CHOICES, default=None,
                   help="strip subword markers from the hypotheses first")
    a.add_argument("--by-kind", action="store_true", help="also a table per response kind (copy, none, new)")
    a.add_argument("--json", action="store_true", help="print the result as JSON instead of Markdown")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "generate":
        meta = generate(args.out, args.protocol, patterns_path=args.patterns, seed=args.seed, scale=args.scale,
                        train=args.train, valid=args.valid, test=args.test, test_fillers=args.test_fillers,
                        valid_fillers=args.valid_fillers, unit=args.unit, force=args.force)
        print(json.dumps({"out": args.out, "dataset": meta["dataset"], "lines": meta["lines"],
                          "test_pairs_seen_in_train": meta["test_pairs_seen_in_train"]}))
        return 0
    result = score(args.data, args.hyp, ks=args.topk, split=args.split, nbest=args.nbest, field=args.field,
                   remove_bpe_kind=args.remove_bpe)
    print(json_text(result) if args.json else table_3_5(result, by_kind=args.by_kind), end="")
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-dialogue-patterns``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

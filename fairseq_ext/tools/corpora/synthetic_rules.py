"""Gu (2018) ch. 3 (CopyNet), §3.3.1: the synthetic copy-rule task and its per-rule-type accuracy
(Table 3.2). ``python -m fairseq_ext.tools.corpora.synthetic_rules`` (``fairseq-ext-synthetic-rules``)::

    python -m fairseq_ext.tools.corpora.synthetic_rules generate OUT [--seed 1] [--scale 0.1] [size flags]
    python -m fairseq_ext.tools.corpora.synthetic_rules accuracy OUT --hyp encdec=enc.txt --hyp copynet=gen.out [--json]

As in §3.3.1 / Table 3.1: random transformation rules of 5-20 symbols over a 1,000-symbol vocabulary with
variables x, y filled by random subsequences of 1-15 symbols; five rule types ``x->∅``, ``x->x``,
``x->xx``, ``xy->x``, ``xy->xy``; 200 rules, 100 training and 100 test instances each (plus 5 validation
instances per rule). Every choice where the thesis is silent (target pattern length, variable order,
balanced types, unique sources, seeds) is a flag and is recorded in ``synthetic_rules.json``; ``--scale``
shrinks the data for CPU runs.

Output folder (temp files renamed together; a stamp makes a second identical run a no-op)::

    {train,valid,test}.src / .tgt   one instance a line, tokens separated by one space
    {train,valid,test}.rule         RULE_ID <tab> TYPE <tab> {"x": "...", "y": "..."}
    rules.tsv                       the rules (id, type, source pattern, target pattern)
    synthetic_rules.json            the parameters and the counts per type and split

``accuracy DATA --hyp [NAME=]FILE ...``: exact-match accuracy per rule type and overall, as Table 3.2,
from ``fairseq-generate`` output or plain text. Bad input is one ``error: FILE:LINE: message`` line, exit 2.
"""
from __future__ import annotations

import json
import os
import random
from collections import Counter
from typing import Optional, Sequence

from fairseq_ext.tools.common import (SPLITS, ArgumentParser, OutputSet, Timer, ToolError, json_text, log,
                                      positive_int, read_lines, run_cli, stamp_ok, write_stamp)
from fairseq_ext.tools.hypotheses import (REMOVE_BPE_CHOICES, align_to_references, is_generate_output,
                                          load_hypotheses)

VERSION = 1
STEP = "synthetic-rules"
META = "synthetic_rules.json"
RULES_FILE = "rules.tsv"

# rule type id -> (variables in the source, variable occurrences in the target, Table 3.2 label)
RULE_TYPES: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "x_empty": (("x",), (), "x→∅"),
    "x_x": (("x",), ("x",), "x→x"),
    "x_xx": (("x",), ("x", "x"), "x→xx"),
    "xy_x": (("x", "y"), ("x",), "xy→x"),
    "xy_xy": (("x", "y"), ("x", "y"), "xy→xy"),
}
TYPE_LABELS = {t: spec[2] for t, spec in RULE_TYPES.items()}
VARIABLES = ("x", "y")

# the thesis's sizes (§3.3.1) and the defaults chosen where it is silent (module doc)
DEFAULTS = {
    "rules": 200,
    "train_per_rule": 100,
    "valid_per_rule": 5,
    "test_per_rule": 100,
    "vocab_size": 1000,
    "src_len": (5, 20),
    "tgt_len": (1, 8),
    "var_len": (1, 15),
    "seed": 1,
}
MAX_REDRAWS = 1000


# --------------------------------------------------------------------------- rules
def symbols(vocab_size: int) -> list[str]:
    """The regular symbols: ``0 .. vocab_size-1`` zero-padded to one width (``000`` .. ``999``)."""
    width = len(str(vocab_size - 1))
    return [str(i).zfill(width) for i in range(vocab_size)]


def balanced_types(n_rules: int, rng: random.Random) -> list[str]:
    """``n_rules`` rule types, as balanced as possible (round robin over the 5 types), shuffled."""
    names = list(RULE_TYPES)
    types = [names[i % len(names)] for i in range(n_rules)]
    rng.shuffle(types)
    return types


def make_rule(rule_type: str, rng: random.Random, vocab: Sequence[str], src_len: tuple[int, int],
              tgt_len: tuple[int, int]) -> tuple[list[str], list[str]]:
    """One rule of ``rule_type``: (source pattern, target pattern), variables written ``x``/``y``."""
    src_vars, tgt_vars, _ = RULE_TYPES[rule_type]
    n = rng.randint(max(src_len[0], len(src_vars) + 1), src_len[1])
    slots = rng.sample(range(n), len(src_vars))
    order = list(src_vars)
    rng.shuffle(order)
    src = [rng.choice(vocab) for _ in range(n)]
    for pos, var in zip(slots, order):
        src[pos] = var
    m = rng.randint(tgt_len[0], tgt_len[1])
    tgt = [rng.choice(vocab) for _ in range(m)]
    for var in tgt_vars:  # insert each required occurrence at a random position
        tgt.insert(rng.randint(0, len(tgt)), var)
    return src, tgt


def fill(pattern: Sequence[str], fillers: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    for tok in pattern:
        out.extend(fillers[tok] if tok in fillers else [tok])
    return out


# --------------------------------------------------------------------------- generation
def _scaled(value: Optional[int], default: int, scale: float, minimum: int = 1) -> int:
    if value is not None:
        return value
    return max(minimum, int(round(default * scale)))


def _check_range(name: str, rng_: Sequence[int], lo_min: int) -> tuple[int, int]:
    lo, hi = int(rng_[0]), int(rng_[1])
    if lo < lo_min or hi < lo:
        raise ToolError(f"--{name} {lo} {hi}: need {lo_min} <= MIN <= MAX")
    return lo, hi


def write_split_files(o: OutputSet, data: dict) -> list[str]:
    """``{split}.src``, ``.tgt`` and ``.rule`` of ``data`` (``{split: [(src, tgt, rule line)]}``) into ``o``, the
    layout of this data and of :mod:`~fairseq_ext.tools.corpora.dialogue_data`; returns the file names."""
    outputs = []
    for sp in SPLITS:
        for k, ext in enumerate(("src", "tgt", "rule")):
            o.write_lines(f"{sp}.{ext}", (x[k] for x in data[sp]))
            outputs.append(f"{sp}.{ext}")
    return outputs


def generate(out: str, *, seed: int = DEFAULTS["seed"], scale: float = 1.0, rules: Optional[int] = None,
             train_per_rule: Optional[int] = None, valid_per_rule: Optional[int] = None,
             test_per_rule: Optional[int] = None, vocab_size: int = DEFAULTS["vocab_size"],
             src_len: Sequence[int] = DEFAULTS["src_len"], tgt_len: Sequence[int] = DEFAULTS["tgt_len"],
             var_len: Sequence[int] = DEFAULTS["var_len"], force: bool = False) -> dict:
    """Write the data set to ``out`` (module doc); returns the metadata (``synthetic_rules.json``)."""
    if scale <= 0:
        raise ToolError(f"--scale must be > 0, not {scale}")
    n_types = len(RULE_TYPES)
    n_rules = _scaled(rules, DEFAULTS["rules"], scale, minimum=n_types)
    per_rule = {
        "train": _scaled(train_per_rule, DEFAULTS["train_per_rule"], scale),
        "valid": _scaled(valid_per_rule, DEFAULTS["valid_per_rule"], scale),
        "test": _scaled(test_per_rule, DEFAULTS["test_per_rule"], scale),
    }
    if n_rules < 1:
        raise ToolError(f"--rules must be >= 1, not {n_rules}")
    for sp, k in per_rule.items():
        if k < 0 or (k == 0 and sp != "valid"):
            raise ToolError(f"--{sp}-per-rule must be >= 1 (valid: >= 0), not {k}")
    if vocab_size < 2:
        raise ToolError(f"--vocab-size must be >= 2, not {vocab_size}")
    src_len = _check_range("src-len", src_len, 1)
    tgt_len = _check_range("tgt-len", tgt_len, 1)
    var_len = _check_range("var-len", var_len, 1)
    if src_len[1] < 3:
        raise ToolError(f"--src-len {src_len[0]} {src_len[1]}: the xy rules need at least 3 source symbols "
                        "(x, y and one regular symbol)")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ToolError(f"the output folder is a file: {out}")
    params = {"version": VERSION, "seed": seed, "rules": n_rules, "per_rule": per_rule, "vocab_size": vocab_size,
              "src_len": list(src_len), "tgt_len": list(tgt_len), "var_len": list(var_len)}
    if not force and stamp_ok(out, STEP, params):
        log(f"[synthetic-rules] {out} is up to date; skipping (--force redoes it)")
        with open(os.path.join(out, META), encoding="utf-8") as f:
            return json.load(f)
    t0 = Timer()
    vocab = symbols(vocab_size)
    rng = random.Random(f"synthetic-rules:{seed}")
    types = balanced_types(n_rules, rng)
    rule_list: list[dict] = []
    seen_patterns: set[tuple[str, ...]] = set()
    width = len(str(n_rules - 1))
    for r, rtype in enumerate(types):
        for _ in range(MAX_REDRAWS):
            src, tgt = make_rule(rtype, rng, vocab, src_len, tgt_len)
            if tuple(src) not in seen_patterns:
                break
        else:
            raise ToolError(f"could not draw {n_rules} distinct rules (vocabulary {vocab_size}, "
                            f"--src-len {src_len[0]} {src_len[1]}); allow more symbols or longer rules")
        seen_patterns.add(tuple(src))
        rule_list.append({"id": f"r{str(r).zfill(width)}", "type": rtype, "src": src, "tgt": tgt})

    data: dict[str, list[tuple[str, str, str]]] = {sp: [] for sp in SPLITS}
    seen_src: set[str] = set()
    for r, rule in enumerate(rule_list):
        irng = random.Random(f"synthetic-rules:{seed}:{r}")
        variables = RULE_TYPES[rule["type"]][0]
        for sp in SPLITS:
            for _ in range(per_rule[sp]):
                for _ in range(MAX_REDRAWS):
                    fillers = {v: [irng.choice(vocab) for _ in range(irng.randint(*var_len))] for v in variables}
                    src = " ".join(fill(rule["src"], fillers))
                    if src not in seen_src:
                        break
                else:
                    raise ToolError(f"rule {rule['id']}: could not draw {sum(per_rule.values())} distinct "
                                    f"instances (--var-len {var_len[0]} {var_len[1]}, vocabulary {vocab_size})")
                seen_src.add(src)
                tgt = " ".join(fill(rule["tgt"], fillers))
                info = rule["id"] + "\t" + rule["type"] + "\t" + \
                    json.dumps({v: " ".join(f) for v, f in fillers.items()}, ensure_ascii=False)
                data[sp].append((src, tgt, info))

    counts = {}
    for sp in SPLITS:
        c = Counter(line[2].split("\t")[1] for line in data[sp])
        counts[sp] = {t: c[t] for t in RULE_TYPES}
    meta = {
        "generator": "fairseq_ext.tools.corpora.synthetic_rules",
        "thesis": "Gu (2018) §3.3.1, Tables 3.1/3.2",
        "params": params,
        "rule_types": {t: TYPE_LABELS[t] for t in RULE_TYPES},
        "rules_per_type": {t: types.count(t) for t in RULE_TYPES},
        "lines": {sp: len(data[sp]) for sp in SPLITS},
        "lines_per_type": counts,
    }
    with OutputSet(out) as o:
        outputs = write_split_files(o, data)
        o.write_lines(RULES_FILE, ["id\ttype\tsource\ttarget"] + [
            f"{x['id']}\t{x['type']}\t{' '.join(x['src'])}\t{' '.join(x['tgt'])}" for x in rule_list])
        o.write_text(META, json_text(meta))
        outputs += [RULES_FILE, META]
    write_stamp(out, STEP, params, outputs)
    log(f"[synthetic-rules] wrote {out}: {n_rules} rules, "
        + ", ".join(f"{sp} {len(data[sp])}" for sp in SPLITS) + f" lines in {t0}")
    return meta


def read_rules(path: str) -> list[dict]:
    """``rules.tsv`` back as ``[{id, type, src, tgt}]`` (``file:line`` errors)."""
    lines = read_lines(path)
    if not lines or lines[0].split("\t") != ["id", "type", "source", "target"]:
        raise ToolError("expected the header id<tab>type<tab>source<tab>target", path, 1)
    out = []
    for i, line in enumerate(lines[1:], 2):
        parts = line.split("\t")
        if len(parts) != 4:
            raise ToolError(f"expected 4 tab-separated fields, found {len(parts)}", path, i)
        if parts[1] not in RULE_TYPES:
            raise ToolError(f"unknown rule type {parts[1]!r} (known: {', '.join(RULE_TYPES)})", path, i)
        out.append({"id": parts[0], "type": parts[1], "src": parts[2].split(), "tgt": parts[3].split()})
    return out


# --------------------------------------------------------------------------- scoring (shared with dialogue_accuracy)
def read_line_info(path: str, n_expected: Optional[int] = None, ref_path: Optional[str] = None,
                   known_types: Optional[Sequence[str]] = None) -> list[tuple[str, str]]:
    """A ``{split}.rule`` file as ``[(id, type)]``; checks the fields and (optionally) the line count."""
    lines = read_lines(path)
    if n_expected is not None and len(lines) != n_expected:
        raise ToolError(f"{len(lines)} lines but {ref_path} has {n_expected}", path, min(len(lines), n_expected) + 1)
    out = []
    for i, line in enumerate(lines, 1):
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise ToolError("expected ID<tab>TYPE[<tab>FILLERS]", path, i)
        if known_types is not None and parts[1] not in known_types:
            raise ToolError(f"unknown type {parts[1]!r} (known: {', '.join(known_types)})", path, i)
        out.append((parts[0], parts[1]))
    return out


def parse_hyp_args(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``--hyp [NAME=]FILE`` values as ``[(name, path)]``; the name defaults to the file's base name."""
    out: list[tuple[str, str]] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = os.path.splitext(os.path.basename(spec))[0] or spec, spec
        if not name or not path:
            raise ToolError(f"--hyp {spec!r}: expected NAME=FILE or FILE")
        if name in [n for n, _ in out]:
            raise ToolError(f"--hyp {spec!r}: the system name {name!r} is given twice")
        out.append((name, path))
    return out


def normalize(line: str) -> str:
    """Tokens separated by one space (what exact match compares)."""
    return " ".join(line.split())


def load_aligned_hypotheses(path: str, n_refs: int, ref_path: str, *, field: str = "D",
                            remove_bpe_kind: Optional[str] = None) -> list[str]:
    """The 1-best hypotheses of ``path`` in reference order (through :mod:`fairseq_ext.tools.hypotheses`).

    Plain text must have exactly one line per reference line: a mismatch is an error naming the
    hypothesis file and the first line without a counterpart."""
    lines = read_lines(path)
    if not is_generate_output(lines) and len(lines) != n_refs:
        raise ToolError(f"{len(lines)} hypotheses but {ref_path} has {n_refs} lines", path,
                        min(len(lines), n_refs) + 1)
    hyps = load_hypotheses(path, fmt="auto", field=field, remove_bpe_kind=remove_bpe_kind)
    return align_to_references(hyps, n_refs, source=str(path))


def accuracy_by_type(hyps: Sequence[str], refs: Sequence[str], types: Sequence[str],
                     type_order: Sequence[str]) -> dict:
    """``{"per_type": {type: {"correct", "total", "accuracy"}}, "all": {...}}`` (accuracy in %; ``None``
    for a type with no line)."""
    correct: Counter = Counter()
    total: Counter = Counter()
    for h, r, t in zip(hyps, refs, types):
        total[t] += 1
        correct[t] += normalize(h) == normalize(r)
    order = list(type_order) + sorted(t for t in total if t not in type_order)

    def cell(c: int, n: int) -> dict:
        return {"correct": c, "total": n, "accuracy": (100.0 * c / n) if n else None}

    return {"per_type": {t: cell(correct[t], total[t]) for t in order},
            "all": cell(sum(correct.values()), sum(total.values()))}


def fmt_pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.1f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:"
                                                                for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def score(data: str, hyp_specs: Sequence[str], split: str = "test", field: str = "D",
          remove_bpe_kind: Optional[str] = None) -> dict:
    """Exact-match accuracy per rule type and overall for each system (Table 3.2)."""
    ref_path = os.path.join(data, f"{split}.tgt")
    refs = read_lines(ref_path)
    info = read_line_info(os.path.join(data, f"{split}.rule"), len(refs), ref_path, known_types=list(RULE_TYPES))
    types = [t for _, t in info]
    systems = {}
    for name, path in parse_hyp_args(hyp_specs):
        hyps = load_aligned_hypotheses(path, len(refs), ref_path, field=field, remove_bpe_kind=remove_bpe_kind)
        res = accuracy_by_type(hyps, refs, types, list(RULE_TYPES))
        res["file"] = path
        systems[name] = res
        log(f"[synthetic-rules] {name}: {res['all']['correct']}/{res['all']['total']} exact matches")
    return {"data": data, "split": split, "lines": len(refs), "types": TYPE_LABELS, "systems": systems}


def table_3_2(result: dict) -> str:
    """Table 3.2 layout: one row per system, one column per rule type, then all lines."""
    order = list(RULE_TYPES)
    header = ["Rule-type"] + [TYPE_LABELS[t] for t in order] + ["all"]
    rows = []
    for name, res in result["systems"].items():
        rows.append([name] + [fmt_pct(res["per_type"][t]["accuracy"]) for t in order]
                    + [fmt_pct(res["all"]["accuracy"])])
    counts = next(iter(result["systems"].values()))["per_type"] if result["systems"] else {}
    note = (f"\nExact-match accuracy (%) on {result['split']} ({result['lines']} lines: "
            + ", ".join(f"{TYPE_LABELS[t]} {counts[t]['total']}" for t in order if t in counts) + ").\n")
    return markdown_table(header, rows) + note


# --------------------------------------------------------------------------- CLI
def add_scoring_args(p: ArgumentParser) -> None:
    p.add_argument("--split", default="test", help="the split scored (default %(default)s)")
    p.add_argument("--field", choices=("D", "H"), default="D",
                   help="fairseq-generate output: D (detokenised, default) or H lines")
    p.add_argument("--remove-bpe", choices=REMOVE_BPE_CHOICES, default=None,
                   help="strip subword markers from the hypotheses first")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of Markdown")


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-synthetic-rules",
                       description="Gu (2018) §3.3.1: the synthetic copy-rule data set (generate) and its "
                                   "exact-match accuracy per rule type, Table 3.2 (accuracy).")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write the data set",
                       description="Write {train,valid,test}.{src,tgt,rule}, rules.tsv and synthetic_rules.json "
                                   "(the choices where the thesis is silent: the module documentation).")
    g.add_argument("out", help="output folder")
    g.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="default %(default)s")
    g.add_argument("--scale", type=float, default=1.0,
                   help="multiply the default rule and per-rule instance counts (e.g. 0.1 for a CPU run)")
    g.add_argument("--rules", type=positive_int, help=f"number of rules (thesis {DEFAULTS['rules']})")
    g.add_argument("--train-per-rule", type=positive_int,
                   help=f"training instances per rule (thesis {DEFAULTS['train_per_rule']})")
    g.add_argument("--valid-per-rule", type=int,
                   help=f"validation instances per rule, extra (default {DEFAULTS['valid_per_rule']}; 0: none)")
    g.add_argument("--test-per-rule", type=positive_int,
                   help=f"test instances per rule (thesis {DEFAULTS['test_per_rule']})")
    g.add_argument("--vocab-size", type=int, default=DEFAULTS["vocab_size"], help="default %(default)s")
    g.add_argument("--src-len", type=int, nargs=2, metavar=("MIN", "MAX"), default=DEFAULTS["src_len"],
                   help="source pattern length, variable slots included (default 5 20)")
    g.add_argument("--tgt-len", type=int, nargs=2, metavar=("MIN", "MAX"), default=DEFAULTS["tgt_len"],
                   help="regular symbols of the target pattern (default 1 8)")
    g.add_argument("--var-len", type=int, nargs=2, metavar=("MIN", "MAX"), default=DEFAULTS["var_len"],
                   help="length of a variable's filler (default 1 15)")
    g.add_argument("--force", action="store_true", help="regenerate even when the stamp matches")
    a = sub.add_parser("accuracy", help="exact-match accuracy per rule type (Table 3.2)")
    a.add_argument("data", help="the generated folder")
    a.add_argument("--hyp", action="append", required=True, metavar="[NAME=]FILE",
                   help="a system's hypotheses (fairseq-generate output or one line per sentence); repeat "
                        "for one row per system")
    add_scoring_args(a)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "generate":
        meta = generate(args.out, seed=args.seed, scale=args.scale, rules=args.rules,
                        train_per_rule=args.train_per_rule, valid_per_rule=args.valid_per_rule,
                        test_per_rule=args.test_per_rule, vocab_size=args.vocab_size, src_len=args.src_len,
                        tgt_len=args.tgt_len, var_len=args.var_len, force=args.force)
        print(json.dumps({"out": args.out, "lines": meta["lines"], "rules_per_type": meta["rules_per_type"]}))
        return 0
    result = score(args.data, args.hyp, split=args.split, field=args.field, remove_bpe_kind=args.remove_bpe)
    print(json_text(result) if args.json else table_3_2(result), end="")
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """Console script ``fairseq-ext-synthetic-rules``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

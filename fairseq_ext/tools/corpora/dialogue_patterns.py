r"""Gu (2018) ch. 3 (CopyNet), §3.3.3: the pattern-filling single-turn dialogue data (DS-I / DS-II) and its
top-K exact-match accuracy (Table 3.5). ``python -m fairseq_ext.tools.corpora.dialogue_patterns``
(``fairseq-ext-dialogue-patterns``)::

    python -m fairseq_ext.tools.corpora.dialogue_patterns generate OUT --protocol ds2 [--seed 1] [--scale 0.1]
    python -m fairseq_ext.tools.corpora.dialogue_patterns accuracy --data DS-I=ds1 --data DS-II=ds2 \
        --hyp RNNSearch@DS-I=rnn1.out --hyp RNNSearch@DS-II=rnn2.out ... [--topk 1 10] [--json]

Instances fill the slots of (input pattern, response pattern) pairs; DS-I draws the fillers of every
split from one pool, DS-II from disjoint train / valid / test pools (no word of a test filler occurs in a
training filler). The thesis's Tieba patterns are not public: the package ships English toy patterns
(``fairseq_ext/tools/corpora/data/dialogue_patterns_en.tsv``); ``--patterns FILE`` takes your own::

    slot<TAB>TYPE<TAB>FILLER|FILLER|...
    pattern<TAB>ID<TAB>INPUT<TAB>RESPONSE        slots written {TYPE}, {TYPE2}, ...

A pair's kind is ``copy``, ``none`` or ``new`` (response slots in / absent from / not in the input).
Sizes follow the thesis (train 6,500, test 1,500, plus 500 valid; ``--scale``); ``--unit word|char``;
every choice where the thesis is silent is recorded in ``dialogue_patterns.json``.

Output folder (layout of :mod:`fairseq_ext.tools.corpora.synthetic_rules`): ``{split}.src/.tgt/.rule``,
``patterns.tsv``, ``dialogue_patterns.json``. ``accuracy`` prints top-K exact-match accuracy per system
and data set in the Table 3.5 layout from ``fairseq-generate --nbest K`` output or plain text.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from random import Random
from typing import Optional, Sequence

from fairseq_ext.tools.common import (SPLITS, ArgumentParser, OutputSet, Timer, ToolError, json_text, log,
                                      positive_int, read_json, read_lines, run_cli, sha256_file, stamp_ok,
                                      write_stamp)
from fairseq_ext.tools.hypotheses import REMOVE_BPE_CHOICES, is_generate_output, parse_generate_output, remove_bpe
from fairseq_ext.tools.corpora.synthetic_rules import fmt_pct, markdown_table, normalize, read_line_info

VERSION = 1
STEP = "dialogue-patterns"
META = "dialogue_patterns.json"
PATTERNS_FILE = "patterns.tsv"
DEFAULT_PATTERNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dialogue_patterns_en.tsv")
PROTOCOLS = {"ds1": "DS-I", "ds2": "DS-II"}
KINDS = ("copy", "none", "new")
DEFAULT_SIZES = {"train": 6500, "valid": 500, "test": 1500}  # train/test: the thesis; valid: our choice
SPACE = "\u2581"

_SLOT_RE = re.compile(r"\{([A-Za-z_]+?)(\d*)\}")
_WORD_RE = re.compile(r"[\w'-]+|[^\w\s]")
_HYP_RE = re.compile(r"^([HD])-(\d+)\t[^\t]*\t(.*)$", re.DOTALL)


# --------------------------------------------------------------------------- the pattern file
class Pattern:
    def __init__(self, pid: str, inp: str, resp: str, line: int) -> None:
        self.id, self.input, self.response, self.line = pid, inp, resp, line
        self.input_slots = slot_names(inp)
        self.response_slots = slot_names(resp)
        if not self.response_slots:
            self.kind = "none"
        elif set(self.response_slots) <= set(self.input_slots):
            self.kind = "copy"
        else:
            self.kind = "new"

    def slots(self) -> list[str]:
        return list(dict.fromkeys(self.input_slots + self.response_slots))


def slot_names(text: str) -> list[str]:
    """The slot names of a pattern (``city``, ``city2``) in order of first occurrence."""
    return list(dict.fromkeys(m.group(1) + m.group(2) for m in _SLOT_RE.finditer(text)))


def slot_type(name: str) -> str:
    return name.rstrip("0123456789")


def tokenize(text: str, unit: str) -> list[str]:
    if unit == "char":
        return [SPACE if c == " " else c for c in " ".join(text.split())]
    return _WORD_RE.findall(text)


def read_patterns(path: str) -> tuple[dict[str, list[str]], list[Pattern]]:
    """``(slot fillers by type, patterns)`` of a pattern file (module doc); ``file:line`` errors."""
    slots: dict[str, list[str]] = {}
    patterns: list[Pattern] = []
    ids: dict[str, int] = {}
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if parts[0] == "slot":
            if len(parts) != 3:
                raise ToolError(f"a slot line is slot<TAB>TYPE<TAB>FILLER|FILLER|..., found {len(parts)} fields",
                                path, i)
            name = parts[1].strip()
            if not re.fullmatch(r"[A-Za-z_]+", name):
                raise ToolError(f"slot type {name!r}: letters and _ only (digits mark a second slot)", path, i)
            if name in slots:
                raise ToolError(f"slot type {name!r} defined twice", path, i)
            fillers = [" ".join(f.split()) for f in parts[2].split("|")]
            if any(not f for f in fillers):
                raise ToolError(f"slot type {name!r} has an empty filler", path, i)
            dup = [f for f, c in Counter(fillers).items() if c > 1]
            if dup:
                raise ToolError(f"slot type {name!r}: filler {dup[0]!r} listed twice", path, i)
            if any("{" in f or "}" in f for f in fillers):
                raise ToolError(f"slot type {name!r}: a filler contains {{ or }}", path, i)
            slots[name] = fillers
        elif parts[0] == "pattern":
            if len(parts) != 4:
                raise ToolError(f"a pattern line is pattern<TAB>ID<TAB>INPUT<TAB>RESPONSE, found {len(parts)} "
                                "fields", path, i)
            pid, inp, resp = parts[1].strip(), " ".join(parts[2].split()), " ".join(parts[3].split())
            if not pid or not inp or not resp:
                raise ToolError("empty pattern id, input or response", path, i)
            if pid in ids:
                raise ToolError(f"pattern id {pid!r} already used on line {ids[pid]}", path, i)
            ids[pid] = i
            patterns.append(Pattern(pid, inp, resp, i))
        else:
            raise ToolError(f"unknown line kind {parts[0]!r} (slot or pattern)", path, i)
    if not patterns:
        raise ToolError("no pattern line", path)
    for p in patterns:
        for s in p.slots():
            if slot_type(s) not in slots:
                raise ToolError(f"pattern {p.id}: unknown slot type {slot_type(s)!r} (in {{{s}}}); "
                                f"defined: {', '.join(sorted(slots)) or 'none'}", path, p.line)
    return slots, patterns


def slot_needs(patterns: Sequence[Pattern]) -> dict[str, int]:
    """Per slot type, the most distinct fillers one instance needs."""
    need: dict[str, int] = {}
    for p in patterns:
        for t, n in Counter(slot_type(s) for s in p.slots()).items():
            need[t] = max(need.get(t, 0), n)
    return need


# --------------------------------------------------------------------------- pools
def split_pools(slots: dict[str, list[str]], fractions: dict[str, float], rng: Random,
                need: dict[str, int]) -> dict[str, dict[str, list[str]]]:
    """DS-II: disjoint filler pools ``{split: {type: [fillers]}}``. Fillers sharing a word are one unit
    (union-find over words, across types), so no word of one pool's fillers occurs in another pool."""
    items = [(t, f) for t in sorted(slots) for f in slots[t]]
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, (_, f) in enumerate(items):
        for w in f.split():
            if w in owner:
                parent[find(i)] = find(owner[w])
            else:
                owner[w] = i
    comps: dict[int, list[int]] = defaultdict(list)
    for i in range(len(items)):
        comps[find(i)].append(i)
    units = sorted(comps.values(), key=lambda c: c[0])
    rng.shuffle(units)
    totals = Counter(t for t, _ in items)
    have: dict[str, Counter] = {sp: Counter() for sp in fractions}
    pools: dict[str, dict[str, list[str]]] = {sp: {t: [] for t in slots} for sp in fractions}
    for unit in units:
        types = Counter(items[i][0] for i in unit)
        # the pool furthest below its share for this unit's types (ties: train, valid, test order)
        best = max(fractions, key=lambda sp: sum(fractions[sp] * totals[t] - have[sp][t] for t in types))
        for i in unit:
            t, f = items[i]
            pools[best][t].append(f)
            have[best][t] += 1
    for sp, by_type in pools.items():
        for t, fill in by_type.items():
            if fractions[sp] > 0 and len(fill) < need.get(t, 0):
                raise ToolError(f"DS-II: the {sp} pool of slot type {t!r} has {len(fill)} filler(s) but a pattern "
                                f"needs {need[t]} distinct ones ({len(slots[t])} fillers in all); add fillers or "
                                f"change --test-fillers / --valid-fillers")
    return pools


# --------------------------------------------------------------------------- generation
def fill_text(text: str, fillers: dict[str, str]) -> str:
    return _SLOT_RE.sub(lambda m: fillers[m.group(1) + m.group(2)], text)


def make_instance(groups: list[list[Pattern]], pool: dict[str, list[str]], rng: Random, unit: str):
    responses = rng.choice(groups)
    p = rng.choice(responses)
    fillers: dict[str, str] = {}
    by_type: dict[str, list[str]] = defaultdict(list)
    for s in p.slots():
        by_type[slot_type(s)].append(s)
    for t, names in by_type.items():
        for name, f in zip(names, rng.sample(pool[t], len(names))):
            fillers[name] = f
    src = " ".join(tokenize(fill_text(p.input, fillers), unit))
    tgt = " ".join(tokenize(fill_text(p.response, fillers), unit))
    return src, tgt, p, fillers


def _size(value: Optional[int], split: str, scale: float) -> int:
    if value is not None:
        return value
    return max(1, int(round(DEFAULT_SIZES[split] * scale)))


def generate(out: str, protocol: str, *, patterns_path: str = DEFAULT_PATTERNS, seed: int = 1, scale: float = 1.0,
             train: Optional[int] = None, valid: Optional[int] = None, test: Optional[int] = None,
             test_fillers: float = 0.3, valid_fillers: float = 0.1, unit: str = "word", force: bool = False) -> dict:
    """Write one data set (``protocol`` ``ds1`` = DS-I or ``ds2`` = DS-II) to ``out``; returns its metadata."""
    if protocol not in PROTOCOLS:
        raise ToolError(f"unknown protocol {protocol!r}: ds1 (DS-I) or ds2 (DS-II)")
    if unit not in ("word", "char"):
        raise ToolError(f"unknown --unit {unit!r}: word or char")
    if scale <= 0:
        raise ToolError(f"--scale must be > 0, not {scale}")
    sizes = {"train": _size(train, "train", scale), "valid": _size(valid, "valid", scale),
             "test": _size(test, "test", scale)}
    for sp, n in sizes.items():
        if n < 0 or (n == 0 and sp != "valid"):
            raise ToolError(f"--{sp} must be >= 1 (valid: >= 0), not {n}")
    if not (0 < test_fillers < 1 and 0 <= valid_fillers < 1 and test_fillers + valid_fillers < 1):
        raise ToolError(f"--test-fillers {test_fillers} / --valid-fillers {valid_fillers}: need 0 < test, 0 <= valid "
                        "and test + valid < 1")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ToolError(f"the output folder is a file: {out}")
    slots, patterns = read_patterns(patterns_path)
    params = {"version": VERSION, "protocol": protocol, "patterns": os.path.basename(patterns_path),
              "patterns_sha256": sha256_file(patterns_path), "seed": seed, "sizes": sizes, "unit": unit}
    if sizes["valid"] == 0:
        valid_fillers = 0.0  # no valid lines: no valid pool either
    if protocol == "ds2":
        params["filler_fractions"] = {"valid": valid_fillers, "test": test_fillers}
    if not force and stamp_ok(out, STEP, params):
        log(f"[dialogue-patterns] {out} is up to date; skipping (--force redoes it)")
        return read_json(os.path.join(out, META))
    t0 = Timer()
    need = slot_needs(patterns)
    if protocol == "ds1":
        for t, n in need.items():
            if len(slots[t]) < n:
                raise ToolError(f"slot type {t!r} has {len(slots[t])} filler(s) but a pattern needs {n} distinct ones",
                                patterns_path)
        pools = {sp: slots for sp in SPLITS}
    else:
        fractions = {"train": 1.0 - test_fillers - valid_fillers, "valid": valid_fillers, "test": test_fillers}
        pools = split_pools(slots, fractions, Random(f"dialogue-patterns:{seed}:pools"), need)
        if valid_fillers == 0:
            pools["valid"] = pools["train"]
    groups_by_input: dict[str, list[Pattern]] = {}
    for p in patterns:
        groups_by_input.setdefault(p.input, []).append(p)
    groups = list(groups_by_input.values())
    data: dict[str, list[tuple[str, str, str]]] = {}
    for sp in SPLITS:
        rng = Random(f"dialogue-patterns:{seed}:{protocol}:{sp}")
        rows = []
        for _ in range(sizes[sp]):
            src, tgt, p, fillers = make_instance(groups, pools[sp], rng, unit)
            rows.append((src, tgt, f"{p.id}\t{p.kind}\t{json.dumps(fillers, ensure_ascii=False)}"))
        data[sp] = rows
    train_src = {r[0] for r in data["train"]}
    train_pairs = {(r[0], r[1]) for r in data["train"]}
    meta = {
        "generator": "fairseq_ext.tools.corpora.dialogue_patterns",
        "thesis": "Gu (2018) §3.3.3, Table 3.5",
        "dataset": PROTOCOLS[protocol],
        "params": params,
        "patterns": {"pairs": len(patterns), "inputs": len(groups), "kinds": dict(Counter(p.kind for p in patterns)),
                     "slot_types": {t: len(f) for t, f in slots.items()}},
        "pools": {sp: {t: list(f) for t, f in pools[sp].items()} for sp in SPLITS},
        "lines": {sp: len(data[sp]) for sp in SPLITS},
        "lines_per_kind": {sp: {k: sum(r[2].split("\t")[1] == k for r in data[sp]) for k in KINDS} for sp in SPLITS},
        "test_inputs_seen_in_train": sum(r[0] in train_src for r in data["test"]),
        "test_pairs_seen_in_train": sum((r[0], r[1]) in train_pairs for r in data["test"]),
    }
    outputs = []
    with OutputSet(out) as o:
        for sp in SPLITS:
            o.write_lines(f"{sp}.src", (r[0] for r in data[sp]))
            o.write_lines(f"{sp}.tgt", (r[1] for r in data[sp]))
            o.write_lines(f"{sp}.rule", (r[2] for r in data[sp]))
            outputs += [f"{sp}.src", f"{sp}.tgt", f"{sp}.rule"]
        o.write_lines(PATTERNS_FILE, ["id\tkind\tinput\tresponse"]
                      + [f"{p.id}\t{p.kind}\t{p.input}\t{p.response}" for p in patterns])
        o.write_text(META, json_text(meta))
        outputs += [PATTERNS_FILE, META]
    write_stamp(out, STEP, params, outputs)
    log(f"[dialogue-patterns] wrote {out} ({PROTOCOLS[protocol]}, {len(patterns)} patterns): "
        + ", ".join(f"{sp} {len(data[sp])}" for sp in SPLITS)
        + f" lines; {meta['test_pairs_seen_in_train']} test pairs also in train; {t0}")
    return meta


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

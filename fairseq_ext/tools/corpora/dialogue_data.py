r"""Gu (2018) ch. 3 (CopyNet), §3.3.3: the pattern-filling single-turn dialogue data DS-I / DS-II
(``fairseq-ext-dialogue-patterns generate``, :mod:`fairseq_ext.tools.corpora.dialogue_patterns`).

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
``patterns.tsv``, ``dialogue_patterns.json``.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from random import Random
from typing import Optional, Sequence

from fairseq_ext.tools.common import (SPLITS, OutputSet, Timer, ToolError, json_text, log, read_json, read_lines,
                                      sha256_file, stamp_ok, write_stamp)
from fairseq_ext.tools.corpora.synthetic_rules import write_split_files

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
    with OutputSet(out) as o:
        outputs = write_split_files(o, data)
        o.write_lines(PATTERNS_FILE, ["id\tkind\tinput\tresponse"]
                      + [f"{p.id}\t{p.kind}\t{p.input}\t{p.response}" for p in patterns])
        o.write_text(META, json_text(meta))
        outputs += [PATTERNS_FILE, META]
    write_stamp(out, STEP, params, outputs)
    log(f"[dialogue-patterns] wrote {out} ({PROTOCOLS[protocol]}, {len(patterns)} patterns): "
        + ", ".join(f"{sp} {len(data[sp])}" for sp in SPLITS)
        + f" lines; {meta['test_pairs_seen_in_train']} test pairs also in train; {t0}")
    return meta

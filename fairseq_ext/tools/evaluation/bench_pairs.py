"""Secondary comparisons inside one bench job (``recipes/bench/bench.py --pair BASE=CFG[,CFG]``).

A job compares every configuration with its one baseline (the transformer). Some rows need a second,
fairer reference that differs in one change only: MS-1 and MS-2 against MS-12+AIF (Ampomah Tables 4.1/4.6),
Dec-DC at lr 7e-4 against the transformer at lr 7e-4. ``--pair`` runs the same paired bootstrap for such a
pair on the job's own test outputs, prints the rows and, with ``--table``, merges them into the "pairs"
block of RESULTS.md (markers ``bench:pairs``; a row per configuration, reference and job), so that no such
delta is copied by hand.
"""
from pathlib import Path
from typing import Dict, List, Tuple

from fairseq_ext.tools.evaluation import bench_configs, score as ev
from fairseq_ext.tools.evaluation.runs import fmt

START, END = "<!-- bench:pairs -->", "<!-- /bench:pairs -->"
HEADER = ("| config | against | test BLEU | against's BLEU | ΔBLEU (bootstrap p) | ΔchrF (bootstrap p) | job |\n"
          "|---|---|---|---|---|---|---|")
TITLE = "## Pairs inside a job (recipes/bench/bench.py --pair)"


def parse_pairs(specs: List[str]) -> List[Tuple[str, List[str]]]:
    """``["ms12_aif=ms1,ms2"]`` -> ``[("ms12_aif", ["ms1", "ms2"])]``; unknown names raise ``KeyError`` (as
    ``bench_configs.get``), a malformed spec ``ValueError``."""
    pairs = []
    for spec in specs:
        base, sep, rest = spec.partition("=")
        cfgs = [c for c in rest.split(",") if c]
        if not sep or not base or not cfgs or base in cfgs:
            raise ValueError(f"--pair {spec!r}: expected BASE=CFG[,CFG...] with CFG other than BASE")
        for n in [base] + cfgs:
            bench_configs.get(n)
        pairs.append((base, cfgs))
    return pairs


def pair_rows(results: dict, pairs: List[Tuple[str, List[str]]], ref: Path, n_bootstrap: int,
              job: str) -> Dict[Tuple[str, str], str]:
    """Paired bootstrap of each pair's configurations against its reference, on the job's test outputs."""
    rows = {}
    for base, cfgs in pairs:
        cmp = ev.compare_files(results[base]["hyp_file"], [results[c]["hyp_file"] for c in cfgs], ref,
                               n=n_bootstrap)
        print(ev.format_comparison(cmp))
        bleu_m, chrf_m = cmp["metrics"]
        for c, s in zip(cfgs, cmp["systems"]):
            b, f = s[bleu_m], s[chrf_m]
            rows[(c, base)] = (f"| {c} | {base} | {fmt(b['score'])} | {fmt(cmp['baseline'][bleu_m]['score'])} | "
                               f"{fmt(b['delta'], '+.2f')} (p={b['p_value']:.3f}) | "
                               f"{fmt(f['delta'], '+.2f')} (p={f['p_value']:.3f}) | {job} |")
    return rows


def _key(line: str):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return (cells[-1], cells[0], cells[1])  # job, config, against


def merge_pairs(path: Path, rows: Dict[Tuple[str, str], str]) -> None:
    """Merge ``rows`` into the pairs block of ``path`` (a re-run of a job replaces its rows of the same pair;
    other rows are kept); the block follows the converged table, or ends the file."""
    text = path.read_text() if path.exists() else ""
    existing = {}
    if START in text:
        for line in text.split(START, 1)[1].split(END, 1)[0].splitlines():
            if line.startswith("| ") and not line.startswith("| config"):
                existing[_key(line)] = line
    for line in rows.values():
        existing[_key(line)] = line
    block = "\n".join([START, HEADER] + [existing[k] for k in sorted(existing)] + [END])
    if START in text:
        text = text.split(START, 1)[0] + block + text.split(END, 1)[1]
    elif "<!-- /bench:converged -->" in text:
        head, tail = text.split("<!-- /bench:converged -->", 1)
        text = head + "<!-- /bench:converged -->\n\n" + TITLE + "\n\n" + block + "\n\n" + tail.lstrip("\n")
    else:
        text = text + ("\n" if text else "") + "\n" + TITLE + "\n\n" + block + "\n"
    path.write_text(text)

"""Verdicts of thesis rows: each comparison (a system against its own baseline, two ``fairseq-generate`` outputs of the
same test set) scored with the paired bootstrap of :func:`~fairseq_ext.tools.evaluation.score.compare_files`, the
thesis's delta beside ours, and a verdict in the words of the README's index:

* **reproduced**: our BLEU delta is significant (p < ``alpha``), of the thesis's sign, and at least ``fraction`` (1/2)
  of the thesis's delta;
* **direction only**: significant and of the thesis's sign, but smaller than that;
* **level**: not significant (p >= ``alpha``);
* **lost**: significant and of the other sign, or any significant change where the thesis has none (a thesis
  delta under ``none_below``, 0.1 BLEU, is none: Iter-S-Agg's −0.03 is the thesis's "level", not a loss to match).

    python -m fairseq_ext.tools.evaluation.verdicts --ref DATA/raw/test.en --n-bootstrap 1000 --out JOB/verdicts \\
        --row "+ULR vs Multi-NMT" JOB/gu5_multi/generate.out JOB/gu5_ulr/generate.out 5.07 [--row ...]

A row whose hypothesis files are not there yet is listed as "not run".  Writes ``OUT.md`` (and prints it) and
``OUT.json``.
"""
import argparse
import json
import sys
from pathlib import Path

from fairseq_ext.tools.common import ToolError, run_cli
from fairseq_ext.tools.evaluation.runs import fmt

ALPHA = 0.05
FRACTION = 0.5
NONE_BELOW = 0.1


def verdict(delta: float, p: float, thesis_delta: float, alpha: float = ALPHA, fraction: float = FRACTION,
            none_below: float = NONE_BELOW) -> str:
    """The verdict of our ``delta`` (bootstrap ``p``) against the thesis's ``thesis_delta`` (module doc)."""
    if p >= alpha:
        return "level"
    if abs(thesis_delta) < none_below or (delta > 0) != (thesis_delta > 0):
        return "lost"
    return "reproduced" if abs(delta) >= fraction * abs(thesis_delta) else "direction only"


def compare_row(label: str, baseline: str, system: str, thesis_delta: float, ref: str, n: int) -> dict:
    """One row: ``system`` against ``baseline`` on ``ref`` (paired bootstrap, ``n`` resamples) and its verdict."""
    row = {"row": label, "baseline": baseline, "system": system, "thesis_delta": thesis_delta}
    missing = [f for f in (baseline, system) if not Path(f).is_file()]
    if missing:
        return dict(row, verdict="not run", missing=missing)
    from fairseq_ext.tools.evaluation.score import compare_files

    cmp = compare_files(baseline, [system], ref, n=n)
    bleu_m, chrf_m = cmp["metrics"]
    s = cmp["systems"][0]
    return dict(row, baseline_bleu=cmp["baseline"][bleu_m]["score"], bleu=s[bleu_m]["score"],
                delta=s[bleu_m]["delta"], p=s[bleu_m]["p_value"], chrf_delta=s[chrf_m]["delta"],
                chrf_p=s[chrf_m]["p_value"], signature=cmp["signatures"][bleu_m],
                verdict=verdict(s[bleu_m]["delta"], s[bleu_m]["p_value"], thesis_delta))


def markdown(rows: list) -> str:
    lines = ["| row | baseline BLEU | system BLEU | ΔBLEU (bootstrap p) | ΔchrF (p) | thesis ΔBLEU | verdict |",
             "|---|---:|---:|---|---|---:|---|"]
    for r in rows:
        if r["verdict"] == "not run":
            lines.append(f"| {r['row']} | – | – | – | – | {r['thesis_delta']:+.2f} | not run |")
            continue
        lines.append(f"| {r['row']} | {fmt(r['baseline_bleu'])} | {fmt(r['bleu'])} | {r['delta']:+.2f} "
                     f"({r['p']:.3f}) | {r['chrf_delta']:+.2f} ({r['chrf_p']:.3f}) | {r['thesis_delta']:+.2f} | "
                     f"**{r['verdict']}** |")
    sig = next((r["signature"] for r in rows if "signature" in r), None)
    return "\n".join(lines) + "\n" + (f"\nBLEU {sig}\n" if sig else "")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m fairseq_ext.tools.evaluation.verdicts", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", nargs=4, action="append", required=True,
                    metavar=("LABEL", "BASELINE_HYP", "SYSTEM_HYP", "THESIS_DELTA"),
                    help="a comparison: its label, the two fairseq-generate outputs, the thesis's BLEU delta")
    ap.add_argument("--ref", required=True, help="the reference of the test set, one sentence a line")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.md and OUT.json")
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    rows = []
    for label, base, system, thesis in a.row:
        try:
            thesis_delta = float(thesis)
        except ValueError:
            raise ToolError(f"--row {label!r}: the thesis delta {thesis!r} is not a number") from None
        rows.append(compare_row(label, base, system, thesis_delta, a.ref, a.n_bootstrap))
    md = markdown(rows)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    a.out.with_suffix(".md").write_text(md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    run_cli(main)

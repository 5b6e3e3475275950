r"""Paired bootstrap resampling (Koehn 2004) of systems against a baseline, for BLEU and chrF, via sacreBLEU 2.6.

:func:`paired_bootstrap` runs ``sacrebleu.significance.PairedTest(test_type='bs')`` with a fixed seed (nothing
here re-implements the bootstrap) and reports each system's score, bootstrap mean, 95% confidence interval and
p value against the baseline; :func:`format_comparison` prints them as the significance columns of the theses'
BLEU tables. ``fairseq-ext-score compare`` (:mod:`fairseq_ext.tools.evaluation.score`) runs it on files.
Imports neither torch nor fairseq.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Mapping, Sequence, Union

from fairseq_ext.tools.common import ToolError
from fairseq_ext.tools.evaluation.bleu import TOKENISED_LABEL, Refs, reference_streams, sacrebleu_metrics

__all__ = ["DEFAULT_SEED", "DEFAULT_N_BOOTSTRAP", "ALPHA", "paired_bootstrap", "format_comparison"]

DEFAULT_SEED = 12345
DEFAULT_N_BOOTSTRAP = 1000
ALPHA = 0.05


@contextmanager
def _sacrebleu_seed(seed: int):
    """sacreBLEU's PairedTest reads its RNG seed from $SACREBLEU_SEED; set it for the call."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old


def paired_bootstrap(
    baseline: Sequence[str],
    systems: Union[Mapping[str, Sequence[str]], Sequence[Sequence[str]]],
    refs: Refs,
    n: int = DEFAULT_N_BOOTSTRAP,
    seed: int = DEFAULT_SEED,
    *,
    tokenised: bool = False,
    lowercase: bool = False,
    chrf_word_order: int = 0,
    baseline_name: str = "baseline",
) -> dict[str, Any]:
    """Paired bootstrap resampling (Koehn 2004) of each system against the baseline.

    Runs ``sacrebleu.significance.PairedTest(test_type='bs')`` for BLEU and chrF with a fixed
    seed.  ``systems`` is ``{name: hyps}`` or a list of hypothesis lists (named ``system1``...).

    :return: ``{"n_bootstrap", "seed", "alpha", "metrics": [BLEU-name, chrF-name],
        "signatures": {metric: str}, "baseline": {"name", metric: {score, mean, ci, ci_low,
        ci_high}}, "systems": [{"name", metric: {score, mean, ci, ci_low, ci_high, delta,
        p_value, significant}}]}`` where ``ci`` is the half width of the 95% interval around
        the bootstrap mean.

    A system whose corpus score equals the baseline's (e.g. identical output) gets p = 1:
    sacreBLEU's statistic ``count(centred |delta*| > |delta|)`` degenerates to 1/(n+1) when
    every resampled difference is 0, and an observed difference of 0 is no evidence of one.
    """
    from sacrebleu.significance import PairedTest  # imports numpy; only needed here

    if int(n) < 1:
        raise ToolError(f"number of bootstrap resamples must be >= 1, got {n}")
    if int(seed) <= 0:
        # sacreBLEU treats a seed of 0 as "no seed" (entropy from the OS): not reproducible.
        raise ToolError(f"seed must be a positive integer, got {seed}")
    if isinstance(systems, Mapping):
        named = [(str(k), list(v)) for k, v in systems.items()]
    else:
        named = [(f"system{i + 1}", list(v)) for i, v in enumerate(systems)]
    if not named:
        raise ToolError("no system to compare with the baseline")
    baseline = list(baseline)
    streams = reference_streams(refs, len(baseline), "baseline hypotheses")
    for name, hyps in named:
        if len(hyps) != len(baseline):
            raise ToolError(
                f"{name}: {len(hyps)} hypotheses but the baseline has {len(baseline)}"
            )
    bleu_m, chrf_m = sacrebleu_metrics(tokenised, lowercase, chrf_word_order)
    with _sacrebleu_seed(int(seed)):
        test = PairedTest(
            [(baseline_name, baseline)] + named,
            {"BLEU": bleu_m, "chrF": chrf_m},
            references=streams,
            test_type="bs",
            n_samples=int(n),
            n_jobs=1,
        )
        signatures, scores = test()
    metric_names = [k for k in scores if k != "System"]

    def _entry(res: Any) -> dict[str, Any]:
        mean = float(res.mean) if res.mean is not None else None
        ci = float(res.ci) if res.ci is not None else None
        return {
            "score": float(res.score),
            "mean": mean,
            "ci": ci,
            "ci_low": None if mean is None or ci is None else mean - ci,
            "ci_high": None if mean is None or ci is None else mean + ci,
        }

    base: dict[str, Any] = {"name": baseline_name}
    for m in metric_names:
        base[m] = _entry(scores[m][0])
    out_systems = []
    for i, (name, _) in enumerate(named, start=1):
        row: dict[str, Any] = {"name": name}
        for m in metric_names:
            res = scores[m][i]
            e = _entry(res)
            delta = e["score"] - base[m]["score"]
            p = 1.0 if delta == 0.0 else float(res.p_value)
            e.update(delta=delta, p_value=p, significant=p < ALPHA)
            row[m] = e
        out_systems.append(row)
    return {
        "test": "paired bootstrap resampling",
        "n_bootstrap": int(n),
        "seed": int(seed),
        "alpha": ALPHA,
        "metrics": metric_names,
        "labels": {m: (TOKENISED_LABEL if (m == "BLEU" and tokenised) else m) for m in metric_names},
        "signatures": {m: str(s) for m, s in signatures.items()},
        "baseline": base,
        "systems": out_systems,
        "n_sentences": len(baseline),
        "n_refs": len(streams),
    }


def format_comparison(result: Mapping[str, Any]) -> str:
    """Table of :func:`paired_bootstrap` results: score (mean ± 95% CI) and p per metric."""
    metrics = result["metrics"]
    names = [f"baseline: {result['baseline']['name']}"] + [s["name"] for s in result["systems"]]
    wn = max(len("System"), *(len(n) for n in names))
    cols = [f"{result['labels'].get(m, m)} (mean ± 95% CI)" for m in metrics]
    wc = max(24, *(len(c) for c in cols))

    def cell(e: Mapping[str, Any]) -> str:
        if e.get("mean") is None:
            return f"{e['score']:.2f}"
        return f"{e['score']:.2f} ({e['mean']:.2f} ± {e['ci']:.2f})"

    def pcell(e: Mapping[str, Any]) -> str:
        if "p_value" not in e:
            return "-"
        return f"{e['p_value']:.4f}{'*' if e['significant'] else ' '}"

    lines = [
        f"{result['test']}: {result['n_bootstrap']} resamples, seed {result['seed']}, "
        f"{result['n_sentences']} sentences, {result['n_refs']} reference(s); "
        f"p vs baseline, * = p < {result['alpha']}",
        f"{'System':<{wn}}  " + "  ".join(f"{c:<{wc}}  {'p':>7} " for c in cols),
    ]
    rows = [result["baseline"]] + list(result["systems"])
    for n, row in zip(names, rows):
        lines.append(
            f"{n:<{wn}}  " + "  ".join(f"{cell(row[m]):<{wc}}  {pcell(row[m]):>8}" for m in metrics)
        )
    for m in metrics:
        lines.append(f"{result['labels'].get(m, m)} signature: {result['signatures'][m]}")
    return "\n".join(lines)

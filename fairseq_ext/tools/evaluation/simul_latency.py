"""Corpus latency of simultaneous translation (Gu 2019, ch. 9) from the ``--simul-actions-out`` file of
``fairseq-generate --task simul_rl_translation``.

Every JSON line holds one sentence: ``src_len`` (source tokens the environment reads, ⟨/s⟩ included) and
``actions`` (the policy's ``R``/``W`` decisions after the pre-read of x_1); ``delays`` (g(τ)), when present,
must be what the actions give; ``ref_len`` (optional) is the reference length |Y*|, and ``timestamps``
(optional) the wall-clock seconds since the sentence started at which each target token was written. The
scorer recomputes, per sentence (:mod:`fairseq_ext.modules.latency`, SimulEval's definitions):

* AP — average proportion Σ_τ g(τ)/(|X||Y|) (Eq. 9.7; Cho & Esipova 2016);
* CW — the mean length of the non-empty READ runs that end in a WRITE;
* AL — average lagging with SimulEval's rate |Y*|/|X| (the reference length when known, else the
  hypothesis'); AL_hyp — average lagging as Ma et al. (2019) define it (rate |Y|/|X|, the hypothesis);
  LAAL — length-adaptive average lagging (Papi et al. 2022: rate max(|Y|, |Y*|)/|X|), which does not reward
  a hypothesis longer than the reference as AL does; without reference lengths the three are equal;
* DAL — differentiable average lagging (Cherry & Foster 2019);
* AL_CA — computation-aware AL in seconds (``--source-token-seconds`` Δ, with ``timestamps`` on every record);

and reports their means over the sentences (SimulEval's corpus convention), plus ``cw_pooled`` (all READs
before WRITEs over all READ→WRITE switches of the corpus).

Reference lengths: ``--ref FILE``, either ``fairseq-generate`` output (its ``T-`` lines) or a text file whose
line *i* is the reference of sentence id *i*; a line's length is its whitespace tokens + 1 (⟨/s⟩, counted as
the delays count it), so the reference must be in the units of the actions (the model's subwords: the
``T-`` lines of a decode without ``--post-process``). Without ``--ref``, a record's own ``ref_len`` is used.

Usage: ``python -m fairseq_ext.tools.evaluation.simul_latency ACTIONS.jsonl [--ref REF] [--source-token-seconds S]
[--json OUT.json]`` (console script ``fairseq-ext-simul-latency``); bad input is ``error: FILE:LINE: message``,
exit status 2.

References: Gu, Neubig, Cho, Li, "Learning to Translate in Real-time with Neural Machine Translation",
EACL 2017; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019; Papi,
Gaido, Negri, Turchi, "Over-Generation Cannot Be Rewarded: Length-Adaptive Average Lagging for Simultaneous
Speech Translation", AutoSimTrans 2022.
"""
from __future__ import annotations

import re
import sys
from typing import Dict, List, Mapping, Optional, Sequence

from fairseq_ext.tools.common import ArgumentParser, ToolError, read_jsonl, read_lines, run_cli, write_json

METRICS = ("ap", "cw", "al", "al_hyp", "laal", "dal")


def _length(value, what: str, path: str, line: Optional[int]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ToolError(f"{what} must be an integer >= 1, got {value!r}", path, line)
    return value


def sentence_scores(record: Dict, path: str = "", line: Optional[int] = None,
                    ref_lens: Optional[Mapping[int, int]] = None,
                    source_token_seconds: Optional[float] = None) -> Dict:
    """AP, CW, AL, AL_hyp, LAAL, DAL (AL_CA with ``source_token_seconds``) and the READ runs of one record; the
    reference length from ``ref_lens`` (by the record's ``id``) or the record's ``ref_len``; a malformed
    record is a :class:`ToolError`."""
    from fairseq_ext.modules.latency import (action_codes, computation_aware_average_lagging, latency,
                                             read_runs)

    if not isinstance(record, dict):
        raise ToolError("a record must be a JSON object", path, line)
    src_len = _length(record.get("src_len"), "src_len", path, line)
    actions = record.get("actions")
    if not isinstance(actions, str):
        raise ToolError(f"actions must be a string of R/W, got {actions!r}", path, line)
    try:
        codes = action_codes(actions)
    except ValueError as e:
        raise ToolError(str(e), path, line) from None
    if 1 not in codes:
        raise ToolError("no WRITE in the actions", path, line)
    if ref_lens is not None:
        sid = record.get("id")
        if sid not in ref_lens:
            raise ToolError(f"sentence id {sid!r} has no reference line", path, line)
        ref_len = ref_lens[sid]
    else:
        ref_len = record.get("ref_len")
        if ref_len is not None:
            _length(ref_len, "ref_len", path, line)
    lat = latency(codes, src_len, ref_len=ref_len)
    if "delays" in record and list(record["delays"]) != lat["delays"]:
        raise ToolError(f"delays {record['delays']} do not match the actions (expected {lat['delays']})", path, line)
    out = {**{k: lat[k] for k in METRICS}, "runs": read_runs(codes)}
    if source_token_seconds is not None:
        stamps = record.get("timestamps")
        if not isinstance(stamps, list):
            raise ToolError("--source-token-seconds needs the per-token timestamps of every record", path, line)
        try:
            out["al_ca"] = computation_aware_average_lagging(lat["delays"], [float(t) for t in stamps], src_len,
                                                             source_token_seconds, tgt_len=ref_len)
        except (TypeError, ValueError) as e:
            raise ToolError(f"timestamps: {e}", path, line) from None
    return out


def reference_lengths(path: str) -> Dict[int, int]:
    """``{sentence id: |Y*|}`` from fairseq-generate output (``T-`` lines) or a text file (line i = id i):
    whitespace tokens + 1 (⟨/s⟩)."""
    from fairseq_ext.tools.hypotheses import is_generate_output, parse_generate_output

    lines = read_lines(path)
    if is_generate_output(lines) or any(re.match(r"[ST]-[0-9]+\t", ln) for ln in lines):
        entries = parse_generate_output(lines, name=path)
        missing = [i for i, e in entries.items() if e.target is None]
        if missing:
            raise ToolError(f"no T- (reference) line for sentence ids {missing[:5]}", path)
        return {i: len(e.target.split()) + 1 for i, e in entries.items()}
    return {i: len(ln.split()) + 1 for i, ln in enumerate(lines)}


def corpus_latency(records: Sequence[Dict], path: str = "", ref_lens: Optional[Mapping[int, int]] = None,
                   source_token_seconds: Optional[float] = None) -> Dict:
    """Means of the sentence scores over ``records`` (module doc)."""
    if not records:
        raise ToolError("no sentences", path)
    scores: List[Dict] = [sentence_scores(r, path, i, ref_lens, source_token_seconds)
                          for i, r in enumerate(records, 1)]
    n = len(scores)
    runs = [x for s in scores for x in s["runs"]]
    keys = METRICS + (("al_ca",) if source_token_seconds is not None else ())
    out = {"sentences": n, **{k: sum(s[k] for s in scores) / n for k in keys}}
    out["cw_pooled"] = sum(runs) / len(runs) if runs else 0.0
    return out


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m fairseq_ext.tools.evaluation.simul_latency", allow_abbrev=False,
                        description="Corpus AP, CW, AL, LAAL and DAL of simultaneous translation from the "
                                    "--simul-actions-out file of fairseq-generate --task simul_rl_translation.")
    ap.add_argument("actions", help="the JSON Lines file (one sentence per line: src_len, actions[, delays])")
    ap.add_argument("--ref", metavar="FILE",
                    help="reference lengths for AL and LAAL: fairseq-generate output (T- lines) or one reference a "
                         "line (line i = sentence id i), in the units of the actions (subwords)")
    ap.add_argument("--source-token-seconds", type=float, metavar="S",
                    help="computation-aware AL (AL_CA): one source token arrives every S seconds; every record "
                         "needs its per-token timestamps")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.source_token_seconds is not None and args.source_token_seconds <= 0:
        raise ToolError(f"--source-token-seconds must be > 0, got {args.source_token_seconds}")
    ref_lens = reference_lengths(args.ref) if args.ref else None
    res = corpus_latency(read_jsonl(args.actions), args.actions, ref_lens, args.source_token_seconds)
    res["file"] = args.actions
    if args.ref:
        res["ref_lengths"] = args.ref
    ca = f"  AL_CA {res['al_ca']:.4f}s" if "al_ca" in res else ""
    print(f"sentences {res['sentences']}  AP {res['ap']:.4f}  CW {res['cw']:.4f}  AL {res['al']:.4f}  "
          f"AL_hyp {res['al_hyp']:.4f}  LAAL {res['laal']:.4f}  DAL {res['dal']:.4f}{ca}  "
          f"(CW pooled {res['cw_pooled']:.4f})")
    if args.json:
        write_json(args.json, res)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m fairseq_ext.tools.evaluation.simul_latency`` / ``fairseq-ext-simul-latency``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

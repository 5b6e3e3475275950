"""Corpus latency of simultaneous translation (Gu 2019, ch. 9) from the ``--simul-actions-out`` file of
``fairseq-generate --task simul_rl_translation``.

Every JSON line holds one sentence: ``src_len`` (source tokens the environment reads, ⟨/s⟩ included) and
``actions`` (the policy's ``R``/``W`` decisions after the pre-read of x_1); ``delays`` (g(τ)), when present,
must be what the actions give, and ``ref_len`` (optional) is the reference length AL uses for γ, as
SimulEval does when it has a reference. The scorer recomputes, per sentence (:mod:`fairseq_ext.modules.simultaneous`):

* AP — average proportion Σ_τ g(τ)/(|X||Y|) (Eq. 9.7; Cho & Esipova 2016);
* CW — the mean length of the non-empty READ runs that end in a WRITE (spec §4.12.1);
* AL — average lagging (Ma et al. 2019) and DAL — differentiable average lagging (Cherry & Foster 2019), as
  SimulEval defines them;

and reports their means over the sentences (SimulEval's corpus convention), plus ``cw_pooled`` (all READs
before WRITEs over all READ→WRITE switches of the corpus).

Usage: ``python -m fairseq_ext.tools.simul_latency ACTIONS.jsonl [--json OUT.json]`` (console script
``fairseq-ext-simul-latency``); bad input is ``error: FILE:LINE: message``, exit status 2.

References: Gu, Neubig, Cho, Li, "Learning to Translate in Real-time with Neural Machine Translation",
EACL 2017; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019.
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional, Sequence

from fairseq_ext.tools.common import ArgumentParser, ToolError, read_jsonl, run_cli, write_json

METRICS = ("ap", "cw", "al", "dal")


def sentence_scores(record: Dict, path: str = "", line: Optional[int] = None) -> Dict:
    """AP, CW, AL, DAL (and the READ runs) of one record; a malformed record is a :class:`ToolError`."""
    from fairseq_ext.modules.simultaneous import action_codes, latency

    if not isinstance(record, dict):
        raise ToolError("a record must be a JSON object", path, line)
    src_len, actions = record.get("src_len"), record.get("actions")
    if not isinstance(src_len, int) or isinstance(src_len, bool) or src_len < 1:
        raise ToolError(f"src_len must be an integer >= 1, got {src_len!r}", path, line)
    if not isinstance(actions, str):
        raise ToolError(f"actions must be a string of R/W, got {actions!r}", path, line)
    try:
        codes = action_codes(actions)
    except ValueError as e:
        raise ToolError(str(e), path, line) from None
    if 1 not in codes:
        raise ToolError("no WRITE in the actions", path, line)
    ref_len = record.get("ref_len")
    lat = latency(codes, src_len, ref_len=ref_len)
    if "delays" in record and list(record["delays"]) != lat["delays"]:
        raise ToolError(f"delays {record['delays']} do not match the actions (expected {lat['delays']})", path, line)
    runs, current = [], 0
    for a in codes:
        if a == 0:
            current += 1
        else:
            if current:
                runs.append(current)
            current = 0
    return {**{k: lat[k] for k in METRICS}, "runs": runs}


def corpus_latency(records: Sequence[Dict], path: str = "") -> Dict:
    """Means of the sentence scores over ``records`` (module doc)."""
    if not records:
        raise ToolError("no sentences", path)
    scores: List[Dict] = [sentence_scores(r, path, i) for i, r in enumerate(records, 1)]
    n = len(scores)
    runs = [x for s in scores for x in s["runs"]]
    out = {"sentences": n, **{k: sum(s[k] for s in scores) / n for k in METRICS}}
    out["cw_pooled"] = sum(runs) / len(runs) if runs else 0.0
    return out


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m fairseq_ext.tools.simul_latency", allow_abbrev=False,
                        description="Corpus AP, CW, AL and DAL of simultaneous translation from the "
                                    "--simul-actions-out file of fairseq-generate --task simul_rl_translation.")
    ap.add_argument("actions", help="the JSON Lines file (one sentence per line: src_len, actions[, delays])")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    res = corpus_latency(read_jsonl(args.actions), args.actions)
    res["file"] = args.actions
    print(f"sentences {res['sentences']}  AP {res['ap']:.4f}  CW {res['cw']:.4f}  AL {res['al']:.4f}  "
          f"DAL {res['dal']:.4f}  (CW pooled {res['cw_pooled']:.4f})")
    if args.json:
        write_json(args.json, res)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m fairseq_ext.tools.simul_latency`` / ``fairseq-ext-simul-latency``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

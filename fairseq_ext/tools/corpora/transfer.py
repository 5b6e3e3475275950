"""Transfer learning across related languages (Nguyen 2021 ch. 3; Nguyen & Chiang, IJCNLP 2017):
data preparation, checkpoint surgery and analyses. ``python -m fairseq_ext.tools.corpora.transfer <cmd>``
(``fairseq-ext-transfer``).

Subcommands::

    joint-bpe  one subword-nmt BPE (K merges) learned on the union of parent source, parent target,
               child source and child target training data [T §3.2.2]; every split of both pairs is
               segmented and binarized with ONE dictionary (OUT/dict.txt), so a parent checkpoint
               loads into the child model as is:
                 OUT/bpe.codes  OUT/dict.txt  OUT/parent/{split}.{lang}, bin/  OUT/child/..., bin/
    remap      word-based transfer without vocabulary sharing (Zoph et al. 2016): a copy of a parent
               checkpoint whose embedding rows (source embeddings; target embeddings, output
               projection and output bias) are re-assigned to the child's dictionaries:
               ``index`` (child type i gets parent row i: "effectively a random assignment") or
               ``identity`` (a type present in both keeps its row; the others get the unused
               parent rows in index order). Default: source index, target identity.
    overlap    Table 3.3: the share of distinct child source types (train; dev) found in the parent's
               source vocabulary (optionally both cut to the N most frequent types).
    plot       Fig. 3.1: dev BLEU against the number of BPE merges / vocabulary size, one line per
               system (baseline, transfer, +freeze), from a TSV ``system<TAB>size<TAB>bleu``.
    check      the child's binarized dictionaries are identical to the parent's.

Then (fairseq): train the parent on OUT/parent/bin; train the child with
``--task transfer_translation --finetune-from-model PARENT/checkpoint_best.pt`` (all parameters
copied; optimizer, LR scheduler, meters and data iterator reset), optionally
``--freeze-target-embeddings`` (needs untied source/target embeddings) and
``--transfer-parent-data OUT/parent/bin`` (refuses a child binarized with another vocabulary).

For Uyghur-like children in another script, transliterate first
(``python -m fairseq_ext.tools.corpora.transliterate folder RAW RAW_LATN --lang ug --scheme uyghur|uroman``).

Errors are one :class:`~fairseq_ext.tools.common.ToolError` (``error: ...``, exit status 2).
Only ``remap``/``check`` import torch/fairseq (lazily); ``plot`` imports matplotlib.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from collections import Counter

from fairseq_ext.tools.common import (ArgumentParser, OutputSet, Timer, ToolError, log, positive_int, read_json,
                                      read_lines, run_cli, stamp_ok, write_stamp)
from fairseq_ext.tools.corpora.segment import (apply_subword_nmt, check_segmented, fingerprint, present_splits,
                                       validate_inputs)

VERSION = 1
SOURCE_KEYS = ("encoder.embed_tokens.weight",)
TARGET_KEYS = ("decoder.embed_tokens.weight", "decoder.output_projection.weight", "decoder.embed_out",
               "decoder.fc_out.weight", "decoder.fc_out.bias", "decoder.output_bias")
MAP_MODES = ("index", "identity")


# =========================================================================== joint BPE
def _counts(files: list[str]) -> Counter:
    c: Counter = Counter()
    for f in files:
        for line in read_lines(f):
            c.update(line.split())
    return c


def learn_joint_bpe(files: list[str], codes_path: str, merges: int, min_frequency: int = 2) -> None:
    """subword-nmt ``learn-bpe -s merges`` on the union of ``files`` (word counts, deterministic)."""
    from subword_nmt import learn_bpe
    vocab = _counts(files)
    if not vocab:
        raise ToolError(f"no words to learn BPE from in {', '.join(files)}")
    items = [f"{w} {c}" for w, c in sorted(vocab.items(), key=lambda x: (-x[1], x[0]))]
    with open(codes_path, "w", encoding="utf-8") as out, contextlib.redirect_stderr(io.StringIO()):
        learn_bpe.learn_bpe(items, out, merges, min_frequency=min_frequency, is_dict=True, total_symbols=False)


def build_dictionary(files: list[str], path: str, padding_factor: int = 8) -> int:
    """A fairseq dictionary of every token of ``files`` (frequency order, as fairseq-preprocess)."""
    from fairseq.data import Dictionary
    d = Dictionary()
    for w, c in sorted(_counts(files).items(), key=lambda x: (-x[1], x[0])):
        d.add_symbol(w, n=c)
    d.finalize(padding_factor=padding_factor)
    d.save(path)
    return len(d)


def _pair_langs(folder: str, src: str, tgt: str, what: str) -> list[str]:
    if not os.path.isdir(folder):
        raise ToolError(f"missing {what} folder: {folder}")
    if src == tgt:
        raise ToolError(f"{what}: source and target language are the same ({src})")
    for x in (src, tgt):
        if not os.path.isfile(os.path.join(folder, f"train.{x}")):
            raise ToolError(f"missing {what} training file: {os.path.join(folder, f'train.{x}')}")
    return present_splits(folder, [src, tgt])


def joint_bpe(parent: str, parent_src: str, parent_tgt: str, child: str, child_src: str, child_tgt: str,
              out: str, merges: int, min_frequency: int = 2, max_len: int | None = 1024,
              binarize: bool = True, force: bool = False) -> dict:
    """Learn one BPE on parent+child (source and target) train data, segment both pairs, build one
    dictionary and binarize both pairs with it. Returns a summary dict."""
    if merges < 1:
        raise ToolError(f"--merges must be >= 1, got {merges}")
    pairs = {"parent": (parent, parent_src, parent_tgt), "child": (child, child_src, child_tgt)}
    t0 = Timer()
    splits = {}
    inputs = {}
    for name, (folder, s, t) in pairs.items():
        splits[name] = _pair_langs(folder, s, t, name)
        log(f"[joint-bpe] validating {name} {folder} ({s}-{t})")
        validate_inputs(folder, [s, t], max_len)
        inputs[name] = fingerprint(folder, [f"{sp}.{x}" for sp in splits[name] for x in (s, t, "ids")])
    params = {"version": VERSION, "merges": merges, "min_frequency": min_frequency,
              "pairs": {k: [os.path.abspath(v[0]), v[1], v[2]] for k, v in pairs.items()}, "inputs": inputs}
    summary_path = os.path.join(out, "joint_bpe.json")
    if not force and stamp_ok(out, "joint-bpe", params) and os.path.isfile(summary_path):
        log(f"[joint-bpe] {out} is up to date; skipping (--force redoes it)")
        return read_json(summary_path)
    os.makedirs(out, exist_ok=True)
    train_files = [os.path.join(folder, f"train.{x}") for folder, s, t in pairs.values() for x in (s, t)]
    codes = os.path.join(out, "bpe.codes")
    log(f"[joint-bpe] learning {merges} merges on {', '.join(train_files)}")
    with OutputSet(out) as o:
        learn_joint_bpe(train_files, o.path("bpe.codes"), merges, min_frequency)
    outputs = ["bpe.codes"]
    seg_train = []
    for name, (folder, s, t) in pairs.items():
        seg_dir = os.path.join(out, name)
        with OutputSet(seg_dir) as o:
            for sp in splits[name]:
                for x in (s, t):
                    seg = apply_subword_nmt(codes, read_lines(os.path.join(folder, f"{sp}.{x}")))
                    check_segmented(os.path.join(folder, f"{sp}.{x}"), seg, "subword-nmt", max_len)
                    o.write_lines(f"{sp}.{x}", seg)
                ids = os.path.join(folder, f"{sp}.ids")
                if os.path.exists(ids):
                    o.copy(ids, f"{sp}.ids")
            o.write_json("segment.json",
                         {"method": "subword-nmt", "merges": merges, "joint": "parent+child", "src": s, "tgt": t,
                          "models": {s: "../bpe.codes", t: "../bpe.codes"}, "raw": os.path.abspath(folder),
                          "post_process": "subword_nmt", "max_len": max_len})
        seg_train += [os.path.join(seg_dir, f"train.{x}") for x in (s, t)]
    dict_path = os.path.join(out, "dict.txt")
    n_dict = build_dictionary(seg_train, dict_path)
    outputs.append("dict.txt")
    log(f"[joint-bpe] one dictionary of {n_dict} entries: {dict_path}")
    types = {}
    for name, (folder, s, t) in pairs.items():
        seg_dir = os.path.join(out, name)
        types[name] = {x: len(_counts([os.path.join(seg_dir, f"train.{x}")])) for x in (s, t)}
        if binarize:
            from fairseq_ext.tools.corpora.binarize import binarize as binarize_folder
            binarize_folder(seg_dir, seg_dir, s, t, joined=True, max_len=max_len, force=True,
                      extra_args=["--srcdict", dict_path])
    summary = {"merges": merges, "dict": dict_path, "dict_size": n_dict, "train_types": types,
               "parent": os.path.join(out, "parent"), "child": os.path.join(out, "child")}
    ps, cs = pairs["parent"][1], pairs["child"][1]
    summary["child_src_overlap"] = vocab_overlap(
        os.path.join(out, "child", f"train.{cs}"), None, parent_text=os.path.join(out, "parent", f"train.{ps}"))
    with OutputSet(out) as o:
        o.write_json("joint_bpe.json", summary)
    outputs.append("joint_bpe.json")
    write_stamp(out, "joint-bpe", params, outputs)
    log(f"[joint-bpe] wrote {out} in {t0}")
    return summary


# =========================================================================== vocabulary overlap
def _dict_types(path: str) -> list[str]:
    """Types of a fairseq ``dict.txt`` in its (frequency) order, without fairseq's padding symbols."""
    out = []
    for i, line in enumerate(read_lines(path), 1):
        parts = line.rstrip().rsplit(" ", 2)
        if len(parts) < 2:
            raise ToolError(f"{path}:{i}: not a fairseq dictionary line ('<type> <count>'): {line!r}")
        w = parts[0]
        if not w.startswith("madeupword"):
            out.append(w)
    return out


def _text_types(path: str) -> list[str]:
    return [w for w, _ in sorted(_counts([path]).items(), key=lambda x: (-x[1], x[0]))]


def vocab_overlap(child_train: str, child_dev: str | None, parent_text: str | None = None,
                  parent_dict: str | None = None, vocab_size: int = 0) -> dict:
    """Share of distinct child source types that are in the parent's source vocabulary (Table 3.3).

    The parent vocabulary is the types of ``parent_text`` or the entries of ``parent_dict``; with
    ``vocab_size`` > 0 the parent and the child train vocabularies are cut to their most frequent
    ``vocab_size`` types (the word-based systems). Dev types are all distinct dev tokens."""
    if (parent_text is None) == (parent_dict is None):
        raise ToolError("give exactly one of --parent-text and --parent-dict")
    parent = _dict_types(parent_dict) if parent_dict else _text_types(parent_text)
    child = _text_types(child_train)
    if vocab_size > 0:
        parent, child = parent[:vocab_size], child[:vocab_size]
    pset = set(parent)
    res = {"parent_types": len(parent), "vocab_size": vocab_size or None}

    def share(types: list[str]) -> dict:
        k = sum(1 for w in types if w in pset)
        return {"types": len(types), "in_parent": k, "share": (k / len(types)) if types else 0.0}

    res["train"] = share(child)
    if child_dev:
        res["dev"] = share(_text_types(child_dev))
    return res


# =========================================================================== plot
def read_sweep(path: str) -> list[dict]:
    """Rows of a TSV with columns ``system``, ``size``, ``bleu`` (header line required)."""
    lines = read_lines(path)
    rows = list(csv.DictReader(lines, delimiter="\t"))
    need = {"system", "size", "bleu"}
    have = set(rows[0]) if rows else set(lines[0].split("\t") if lines else [])
    if not need <= have:
        raise ToolError(f"{path}: needs a header with the columns system, size, bleu (has {sorted(have)})")
    out = []
    for i, r in enumerate(rows, 2):
        try:
            out.append({"system": r["system"], "size": float(r["size"]), "bleu": float(r["bleu"])})
        except (TypeError, ValueError):
            raise ToolError(f"{path}:{i}: size and bleu must be numbers: {r}") from None
    if not out:
        raise ToolError(f"{path}: no rows to plot")
    return out


def plot_bleu_vs_vocab(rows: list[dict], out_path: str, title: str | None = None,
                       xlabel: str = "BPE merges / vocabulary size",
                       ylabel: str = "dev BLEU (tokenized)") -> str:
    """Fig. 3.1: one line per system, BLEU against size (PNG); ``ylabel`` names the BLEU (the thesis plots dev)."""
    from fairseq_ext.tools.plots import pyplot
    systems: dict[str, list] = {}
    for r in rows:
        systems.setdefault(r["system"], []).append((r["size"], r["bleu"]))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    try:
        for name, pts in systems.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        fig.tight_layout()
        fig.savefig(out_path, dpi=150)
    finally:
        plt.close(fig)
    return out_path


# =========================================================================== remap (word-based transfer)
def remap_rows(parent_symbols: list[str], child_symbols: list[str], mode: str, nspecial: int = 4,
               allow_size_mismatch: bool = False, what: str = "") -> "list[int]":
    """For each child index, the parent row it takes (-1: freshly initialised).

    ``index``: child i <- parent i. ``identity``: a child type in the parent keeps its parent row,
    the others take the unused parent rows in index order. Special symbols map to themselves."""
    import numpy as np
    if mode not in MAP_MODES:
        raise ToolError(f"unknown map mode {mode!r}; known: {', '.join(MAP_MODES)}")
    np_, nc = len(parent_symbols), len(child_symbols)
    if np_ != nc and not allow_size_mismatch:
        raise ToolError(f"mismatched parent/child vocabulary{what}: the parent dictionary has {np_} entries, the "
                          f"child's {nc}; build both with the same size (fairseq-preprocess --nwordssrc/"
                          f"--nwordstgt N) or pass --allow-size-mismatch (extra child rows are initialised fresh)")
    if parent_symbols[:nspecial] != child_symbols[:nspecial]:
        raise ToolError(f"mismatched parent/child vocabulary{what}: the special symbols differ "
                          f"({parent_symbols[:nspecial]} vs {child_symbols[:nspecial]})")
    rows = np.full(nc, -1, dtype=np.int64)
    if mode == "index":
        k = min(np_, nc)
        rows[:k] = np.arange(k)
        return rows.tolist()
    pidx = {w: i for i, w in enumerate(parent_symbols)}
    found = np.array([pidx.get(w, -1) for w in child_symbols], dtype=np.int64)
    rows[:] = found
    unused = np.setdiff1d(np.arange(np_), found[found >= 0])
    missing = np.flatnonzero(found < 0)
    k = min(len(unused), len(missing))
    rows[missing[:k]] = unused[:k]
    return rows.tolist()


def _load_dict_symbols(path: str) -> list[str]:
    from fairseq.data import Dictionary
    if not os.path.isfile(path):
        raise ToolError(f"missing dictionary: {path}")
    return list(Dictionary.load(path).symbols)


def remap_checkpoint(parent_ckpt: str, parent_src_dict: str, parent_tgt_dict: str, child_src_dict: str,
                     child_tgt_dict: str, out: str, source_map: str = "index", target_map: str = "identity",
                     allow_size_mismatch: bool = False, seed: int = 1) -> dict:
    """Write ``out``: ``parent_ckpt`` with its source/target embedding rows re-assigned to the child's
    dictionaries (see :func:`remap_rows`); optimizer state dropped (the child resets it anyway)."""
    import numpy as np
    import torch

    import fairseq_ext  # noqa: F401  (checkpoint unpickling allow-list)
    if not os.path.isfile(parent_ckpt):
        raise ToolError(f"missing parent checkpoint: {parent_ckpt}")
    state = torch.load(parent_ckpt, map_location="cpu", weights_only=True)
    model = state.get("model")
    if not isinstance(model, dict):
        raise ToolError(f"{parent_ckpt}: not a fairseq checkpoint (no 'model' state)")
    sides = {"source": (SOURCE_KEYS, parent_src_dict, child_src_dict, source_map),
             "target": (TARGET_KEYS, parent_tgt_dict, child_tgt_dict, target_map)}
    src_key, tgt_key = SOURCE_KEYS[0], TARGET_KEYS[0]
    shared = (src_key in model and tgt_key in model and model[src_key].shape == model[tgt_key].shape
              and torch.equal(model[src_key], model[tgt_key]))
    gen = torch.Generator().manual_seed(seed)
    report = {"parent": parent_ckpt, "shared_embeddings": bool(shared), "keys": {}}
    maps = {}
    for side, (keys, pdict, cdict, mode) in sides.items():
        psym, csym = _load_dict_symbols(pdict), _load_dict_symbols(cdict)
        rows = np.asarray(remap_rows(psym, csym, mode, allow_size_mismatch=allow_size_mismatch,
                                     what=f" ({side} side)"))
        maps[side] = (rows, psym, csym)
        report[side] = {"map": mode, "parent_size": len(psym), "child_size": len(csym),
                        "identity_rows": int(sum(1 for i, r in enumerate(rows) if r >= 0 and r < len(psym)
                                                 and psym[r] == csym[i])),
                        "fresh_rows": int((rows < 0).sum())}
    if shared:
        if maps["source"][2] != maps["target"][2] or source_map != target_map:
            raise ToolError("the parent shares one embedding matrix between source and target "
                              "(--share-all-embeddings): the child needs one joint dictionary (the same "
                              "child source and target dictionaries) and the same --source-map/--target-map")
    for side, (keys, *_rest) in sides.items():
        rows, psym, csym = maps[side]
        for key in keys:
            if key not in model:
                continue
            w = model[key]
            if w.shape[0] != len(psym):
                raise ToolError(f"mismatched parent vocabulary: {key} in {parent_ckpt} has {w.shape[0]} rows but "
                                  f"the parent {side} dictionary has {len(psym)} entries (wrong --parent-{side[:3]}-dict?)")
            idx = torch.as_tensor(np.where(rows >= 0, rows, 0))
            new = w.index_select(0, idx).clone()
            fresh = torch.as_tensor(rows < 0)
            if fresh.any():
                if w.dim() == 2:
                    new[fresh] = torch.randn(int(fresh.sum()), w.shape[1], generator=gen).to(w.dtype) * w.shape[1] ** -0.5
                else:
                    new[fresh] = 0
            model[key] = new
            report["keys"][key] = [list(w.shape), list(new.shape)]
    if not report["keys"]:
        raise ToolError(f"{parent_ckpt}: none of the embedding parameters {SOURCE_KEYS + TARGET_KEYS} found")
    state["model"] = model
    state.pop("last_optimizer_state", None)
    state["transfer_remap"] = {k: v for k, v in report.items() if k in ("source", "target")}
    tmp = f"{out}.tmp-{os.getpid()}"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    torch.save(state, tmp)
    os.replace(tmp, out)
    log(f"[remap] wrote {out}: " + "; ".join(f"{k} {a} -> {b}" for k, (a, b) in report["keys"].items()))
    return report


# =========================================================================== check
def check_dictionaries(parent_bin: str, child_bin: str) -> dict:
    """Every ``dict.*.txt`` of ``child_bin`` must equal one of ``parent_bin``'s (shared vocabulary)."""
    def dicts(folder):
        if not os.path.isdir(folder):
            raise ToolError(f"missing binarized folder: {folder}")
        names = sorted(n for n in os.listdir(folder) if n.startswith("dict.") and n.endswith(".txt"))
        if not names:
            raise ToolError(f"{folder}: no dict.<lang>.txt (not a fairseq-preprocess output?)")
        return {n: [line.rsplit(" ", 1)[0] for line in read_lines(os.path.join(folder, n))] for n in names}
    pd, cd = dicts(parent_bin), dicts(child_bin)
    ref_name, ref = next(iter(pd.items()))
    for name, d in list(pd.items()) + list(cd.items()):
        if d != ref:
            diff = next((i for i, (a, b) in enumerate(zip(ref, d)) if a != b), min(len(ref), len(d)))
            raise ToolError(f"mismatched parent/child vocabulary: {name} differs from {parent_bin}/{ref_name} "
                              f"({len(d)} vs {len(ref)} lines, first difference at line {diff + 1}); binarize "
                              f"both with one joint dictionary (transfer joint-bpe)")
    return {"dict_size": len(ref) + 4, "dicts": sorted(pd) + sorted(cd)}


# =========================================================================== CLI
def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-transfer",
                                description="Transfer learning across related languages (Nguyen 2021 ch. 3).")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="SUBCOMMAND")
    j = sub.add_parser("joint-bpe", help="one BPE + one dictionary for parent and child; binarize both")
    j.add_argument("--parent", required=True, help="parent parallel folder (train/valid/test.{lang})")
    j.add_argument("--parent-src", required=True)
    j.add_argument("--parent-tgt", required=True)
    j.add_argument("--child", required=True, help="child parallel folder")
    j.add_argument("--child-src", required=True)
    j.add_argument("--child-tgt", help="default: --parent-tgt")
    j.add_argument("--merges", type=positive_int, required=True, help="number of BPE merge operations")
    j.add_argument("--min-frequency", type=positive_int, default=2)
    j.add_argument("--out", required=True)
    j.add_argument("--no-binarize", action="store_true")
    j.add_argument("--force", action="store_true")
    j.add_argument("--max-len", type=int, default=1024, help="longest segment in whitespace tokens (0: no limit)")

    r = sub.add_parser("remap", help="re-assign a parent checkpoint's embedding rows to child dictionaries")
    r.add_argument("--parent-ckpt", required=True)
    r.add_argument("--parent-src-dict", required=True)
    r.add_argument("--parent-tgt-dict", required=True)
    r.add_argument("--child-src-dict", required=True)
    r.add_argument("--child-tgt-dict", required=True)
    r.add_argument("--source-map", choices=MAP_MODES, default="index")
    r.add_argument("--target-map", choices=MAP_MODES, default="identity")
    r.add_argument("--allow-size-mismatch", action="store_true")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--out", required=True)

    o = sub.add_parser("overlap", help="Table 3.3: child source types found in the parent vocabulary")
    o.add_argument("--child-train", required=True)
    o.add_argument("--child-dev")
    g = o.add_mutually_exclusive_group(required=True)
    g.add_argument("--parent-text", help="parent source training text")
    g.add_argument("--parent-dict", help="parent source fairseq dict.txt")
    o.add_argument("--vocab-size", type=int, default=0, help="cut both vocabularies to N types (0: all)")

    pl = sub.add_parser("plot", help="Fig. 3.1: BLEU against BPE merges / vocabulary size")
    pl.add_argument("tsv", help="columns system, size, bleu (with a header)")
    pl.add_argument("--out", required=True, help="PNG path")
    pl.add_argument("--title")
    pl.add_argument("--xlabel", default="BPE merges / vocabulary size")

    c = sub.add_parser("check", help="the child's dictionaries equal the parent's")
    c.add_argument("parent_bin")
    c.add_argument("child_bin")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.cmd == "joint-bpe":
        res = joint_bpe(a.parent, a.parent_src, a.parent_tgt, a.child, a.child_src, a.child_tgt or a.parent_tgt,
                        a.out, a.merges, a.min_frequency, a.max_len or None, not a.no_binarize, a.force)
    elif a.cmd == "remap":
        res = remap_checkpoint(a.parent_ckpt, a.parent_src_dict, a.parent_tgt_dict, a.child_src_dict,
                               a.child_tgt_dict, a.out, a.source_map, a.target_map, a.allow_size_mismatch, a.seed)
    elif a.cmd == "overlap":
        res = vocab_overlap(a.child_train, a.child_dev, a.parent_text, a.parent_dict, a.vocab_size)
    elif a.cmd == "plot":
        res = {"plot": plot_bleu_vs_vocab(read_sweep(a.tsv), a.out, a.title, a.xlabel)}
    else:
        res = check_dictionaries(a.parent_bin, a.child_bin)
    print(json.dumps(res, indent=1))
    return 0


def cli_main(argv: list[str] | None = None) -> None:
    """Console script ``fairseq-ext-transfer``: ``error: FILE:LINE: message`` and exit status 2 on bad input."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

"""Back-translation for the low-resource language of a universal data folder (Gu 2019 §5.4.2): "we build the
synthetic parallel corpus by translating on monolingual data with a trained translation system and use it
to train a backward direction translation model. Once trained, the same operation can be used on the
forward direction" -- two passes, bootstrapped from the multilingual model.

``fairseq-ext-bt`` (``python -m fairseq_ext.tools.corpora.back_translation``) on a folder DIR of
``fairseq-ext-data universal`` (LOW = its low-resource language); the translating itself is
``fairseq-generate`` (without ``--post-process``: the pieces are needed):

1. the many-to-English model translates LOW's held-back monolingual verses (``DIR/bin/mono``, their English
   discarded) -> ``GEN1`` (English pieces);
2. ``backward --data DIR --synthetic GEN1 --out BDIR``: the English -> LOW corpus: the real LOW pairs
   reversed plus the synthetic (English*, LOW) pairs of step 1 (valid: LOW's valid pairs reversed),
   binarized with DIR's dictionaries (source ``dict.en.txt``, target the marked ``dict.src.txt``) into
   ``BDIR/bin``; train any English -> LOW model on it;
3. ``english-mono --data DIR --n N --out EN``: N English training verses that are *not* LOW's (neither its
   pairs nor its mono verses): monolingual English (pieces, one a line; ``EN.ids`` their verse ids);
4. the backward model translates ``EN`` -> ``GEN2`` (marked LOW pieces; e.g. ``fairseq-interactive`` on
   ``EN``, or ``fairseq-generate`` on ``BDIR/bin`` after ``backward --mono-en EN``, which binarizes EN as
   the source-only split ``mono_en`` of BDIR);
5. ``bt-split --data DIR --hyps GEN2 --en EN --name bt``: the synthetic (LOW*, English) pairs as split
   ``bt`` of ``DIR/bin`` (+ ``bt.lang``, ``bt.ids``), read by ``universal_translation --bt-split bt``.

Every input gets exactly one output line or one logged reason (an empty hypothesis: the pair is dropped,
counted); a generate output that does not have exactly one hypothesis per input line is one error naming
the file.
"""
from __future__ import annotations

import os
import random
import shutil

from fairseq_ext.tools.common import ArgumentParser, ToolError, log, positive_int, read_json, read_lines, run_cli
from fairseq_ext.tools.hypotheses import parse_generate_output
from fairseq_ext.tools.corpora.binarize import run_preprocess


def _manifest(data: str) -> dict:
    path = os.path.join(data, "manifest.json")
    if not os.path.isfile(path):
        raise ToolError("not a universal data folder (no manifest.json; build it with fairseq-ext-data universal)",
                        data)
    return read_json(path)


def generated(path: str, n: int) -> list[str]:
    """The best hypothesis (H-, pieces) of each of the ``n`` inputs of a fairseq-generate output, in id order."""
    entries = parse_generate_output(path)
    ids = list(entries)
    if ids != list(range(n)):
        missing = sorted(set(range(n)) - set(ids))[:5]
        raise ToolError(f"{len(ids)} hypotheses for {n} input lines (missing e.g. {missing}); was it generated "
                        f"from this folder's split, without --post-process?", path)
    return [entries[i].hypo_tok or "" for i in range(n)]


def _binarize(out_bin: str, prefix: str, src: str, tgt: str, srcdict: str, tgtdict: str | None, name: str,
              only_source: bool = False) -> None:
    """fairseq-preprocess ``prefix.{src,tgt}`` with fixed dictionaries into ``out_bin`` as split ``name``."""
    tmp = os.path.join(out_bin, f"{name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    argv = ["--source-lang", src, "--target-lang", tgt, "--trainpref", prefix, "--destdir", tmp, "--workers", "1",
            "--srcdict", srcdict]
    argv += ["--only-source"] if only_source else ["--tgtdict", tgtdict]
    try:
        run_preprocess(argv)
        for f in os.listdir(tmp):
            if f.startswith("train."):
                os.replace(os.path.join(tmp, f), os.path.join(out_bin, name + f[len("train"):]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write(path: str, lines) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
            n += 1
    return n


def english_mono(data: str, n: int, out: str, seed: int = 1) -> int:
    """Step 3: ``n`` English training verses that are not the low-resource language's (seeded sample)."""
    m = _manifest(data)
    low = m["lowres"]
    ids, langs, en = (read_lines(os.path.join(data, "spm", f"train.{x}")) for x in ("ids", "lang", "en"))
    mono_ids = read_lines(os.path.join(data, "spm", "mono.ids")) if os.path.isfile(
        os.path.join(data, "spm", "mono.ids")) else []
    taken = {i.split(":", 1)[1] for i, lang in zip(ids, langs) if lang == low} | {i.split(":", 1)[1] for i in mono_ids}
    seen, rows = set(), []
    for i, lang, e in zip(ids, langs, en):
        verse = i.split(":", 1)[1]
        if lang != low and verse not in taken and verse not in seen:
            seen.add(verse)
            rows.append((verse, e))
    random.Random(seed).shuffle(rows)
    rows = sorted(rows[:n])
    if len(rows) < n:
        log(f"[bt] warning: only {len(rows)} English verses are not {low}'s (asked for {n})")
    _write(out, (e for _, e in rows))
    _write(out + ".ids", (f"en:{v}" for v, _ in rows))
    log(f"[bt] {len(rows)} monolingual English verses -> {out}")
    return len(rows)


def backward(data: str, synthetic: str, out: str, mono_en: str | None = None) -> dict:
    """Step 2: the English -> low-resource corpus in ``out`` (spm/ and bin/)."""
    m = _manifest(data)
    low = m["lowres"]
    spm, bin_dir = os.path.join(data, "spm"), os.path.join(data, "bin")
    mono = read_lines(os.path.join(spm, "mono.src"))
    hyps = generated(synthetic, len(mono))
    o_spm, o_bin = os.path.join(out, "spm"), os.path.join(out, "bin")
    os.makedirs(o_spm, exist_ok=True)
    os.makedirs(o_bin, exist_ok=True)
    counts = {}
    for split in ("train", "valid"):
        src, en, langs = (read_lines(os.path.join(spm, f"{split}.{x}")) for x in ("src", "en", "lang"))
        pairs = [(e, s) for s, e, lang in zip(src, en, langs) if lang == low]
        if split == "train":
            dropped = sum(1 for h in hyps if not h.strip())
            pairs += [(h, s) for h, s in zip(hyps, mono) if h.strip()]
            if dropped:
                log(f"[bt] {dropped} empty English hypotheses of {synthetic}: their pairs are dropped")
        counts[split] = _write(os.path.join(o_spm, f"{split}.en"), (e for e, _ in pairs))
        _write(os.path.join(o_spm, f"{split}.src"), (s for _, s in pairs))
        _binarize(o_bin, os.path.join(o_spm, split), "en", "src", os.path.join(bin_dir, "dict.en.txt"),
                  os.path.join(bin_dir, "dict.src.txt"), split)
    for f in ("dict.en.txt", "dict.src.txt"):
        shutil.copyfile(os.path.join(bin_dir, f), os.path.join(o_bin, f))
    if mono_en:
        shutil.copyfile(mono_en, os.path.join(o_spm, "mono_en.en"))
        _binarize(o_bin, os.path.join(o_spm, "mono_en"), "en", "src", os.path.join(bin_dir, "dict.en.txt"), None,
                  "mono_en", only_source=True)
        counts["mono_en"] = len(read_lines(mono_en))
    log(f"[bt] backward en -> {low} corpus in {out}: train {counts['train']} (real + synthetic), valid "
        f"{counts['valid']}" + (f", mono_en {counts['mono_en']}" if mono_en else ""))
    return counts


def bt_split(data: str, hyps_path: str, en_path: str, name: str = "bt") -> int:
    """Step 5: the synthetic (low*, English) pairs as split ``name`` of ``DIR/bin``."""
    m = _manifest(data)
    low = m["lowres"]
    en = read_lines(en_path)
    hyps = generated(hyps_path, len(en))
    ids_path = en_path + ".ids"
    ids = read_lines(ids_path) if os.path.isfile(ids_path) else [f"en:{i}" for i in range(len(en))]
    suffix = f"__{low}"
    for n, h in enumerate(hyps, 1):
        bad = [p for p in h.split() if not p.endswith(suffix)]
        if bad:
            raise ToolError(f"hypothesis {n - 1} has pieces that are not {low}'s ({' '.join(bad[:3])}): was "
                            f"it generated by an English -> {low} model on this folder's dictionaries?", hyps_path)
    keep = [i for i, h in enumerate(hyps) if h.strip()]
    if len(keep) < len(hyps):
        log(f"[bt] {len(hyps) - len(keep)} empty {low} hypotheses of {hyps_path}: their pairs are dropped")
    if not keep:
        raise ToolError("no non-empty hypothesis: nothing to add", hyps_path)
    bin_dir = os.path.join(data, "bin")
    work = os.path.join(data, "spm", name)
    _write(work + ".src", (hyps[i] for i in keep))
    _write(work + ".en", (en[i] for i in keep))
    _binarize(bin_dir, work, "src", "en", os.path.join(bin_dir, "dict.src.txt"), os.path.join(bin_dir, "dict.en.txt"),
              name)
    _write(os.path.join(bin_dir, f"{name}.lang"), (low for _ in keep))
    _write(os.path.join(bin_dir, f"{name}.ids"), (f"{low}*:{ids[i].split(':', 1)[-1]}" for i in keep))
    log(f"[bt] {len(keep)} synthetic ({low}*, en) pairs -> {bin_dir}/{name}.src-en.* (+ {name}.lang)")
    return len(keep)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-bt", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, metavar="SUBCOMMAND")
    e = sub.add_parser("english-mono", help="monolingual English verses that are not the low-resource language's")
    e.add_argument("--data", required=True)
    e.add_argument("--n", type=positive_int, required=True)
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--out", required=True)
    b = sub.add_parser("backward", help="English -> low-resource corpus: real pairs + pass-1 synthetic pairs")
    b.add_argument("--data", required=True)
    b.add_argument("--synthetic", required=True, help="fairseq-generate output on DIR/bin/mono (pieces)")
    b.add_argument("--out", required=True)
    b.add_argument("--mono-en", help="also binarize this English file as split mono_en (source only)")
    s = sub.add_parser("bt-split", help="synthetic (low*, English) pairs as a split of DIR/bin")
    s.add_argument("--data", required=True)
    s.add_argument("--hyps", required=True, help="fairseq-generate output of the backward model on --en (pieces)")
    s.add_argument("--en", required=True)
    s.add_argument("--name", default="bt")
    return p


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if a.cmd == "english-mono":
        english_mono(a.data, a.n, a.out, a.seed)
    elif a.cmd == "backward":
        backward(a.data, a.synthetic, a.out, a.mono_en)
    else:
        bt_split(a.data, a.hyps, a.en, a.name)
    return 0


def cli_main(argv=None) -> None:
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

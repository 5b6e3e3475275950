"""The extra binarized splits of Gu (2019) ch. 6, MetaNMT, next to a ``fairseq-ext-data universal`` folder
(``python examples/meta_nmt/report.py splits``, :func:`build_splits`).

``splits --data DIR --meta-langs es,fr,ru,ar --valid-langs tl``
    The extra binarized splits MetaNMT needs next to a ``fairseq-ext-data universal`` folder DIR (whose
    low-resource language is the *target* task and whose auxiliary languages are the meta-training
    languages plus the validation language(s)), written to ``DIR/bin_meta`` (``--name``): every file of
    ``DIR/bin`` as a relative symlink (dictionaries, train/valid/test = the target's pool, dev and test),
    plus

    * ``train_multi``: the training pairs of the meta-training languages only (the multilingual-transfer
      baseline's joint phase, Eq. 6.11: it must not see the target's pool nor the validation language);
    * ``train_meta_<V>`` per validation language V: those + V's training pairs (``meta_translation`` draws
      episodes from ``--meta-langs`` only; V's pairs are what ``--meta-valid-lang V`` fine-tunes its copy on);
    * ``valid_<V>``: V's dev set -- its verses of the held-out *valid* books of the multi-parallel file
      (``manifest.json``'s ``multi_tsv``, the same length filter as the builder), segmented with DIR's
      ``spm.<V>`` / ``spm.en`` models and marked ``__<V>``: the "strict" meta-validation of §6.4.2
      (the universal folder's own valid split is the target's dev set).

    Each split has its ``<split>.lang`` (``universal_translation`` reads it). A stamp in DIR skips the
    work while DIR's manifest and the arguments are unchanged.
"""
from __future__ import annotations

import json
import os
import shutil

from fairseq_ext.tools.common import ToolError, log, read_json, read_lines, sha256_file, stamp_ok, write_stamp

SPLIT_DIR = "bin_meta"
SPLIT_VERSION = 1


def _link_bin(data: str, out: str) -> list[str]:
    names = []
    src = os.path.join(data, "bin")
    for name in sorted(os.listdir(src)):
        if os.path.isfile(os.path.join(src, name)) and name != "preprocess.log":
            os.symlink(os.path.join("..", "bin", name), os.path.join(out, name))
            names.append(name)
    return names


def write_lines(path: str, lines) -> None:
    """``lines`` to ``path``, one a line."""
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def _binarize(data: str, seg_prefix: str, split: str, out: str) -> None:
    """fairseq-preprocess of ``seg_prefix.{src,en}`` with DIR's dictionaries -> ``out/<split>.src-en.*``."""
    from fairseq_ext.tools.corpora.binarize import run_preprocess

    tmp = os.path.join(out, f"pp.{split}")
    run_preprocess(["--source-lang", "src", "--target-lang", "en", "--trainpref", seg_prefix, "--destdir", tmp,
                    "--srcdict", os.path.join(data, "bin", "dict.src.txt"),
                    "--tgtdict", os.path.join(data, "bin", "dict.en.txt"), "--workers", "1"])
    for side in ("src", "en"):
        for ext in ("bin", "idx"):
            os.replace(os.path.join(tmp, f"train.src-en.{side}.{ext}"), os.path.join(out, f"{split}.src-en.{side}.{ext}"))
    shutil.rmtree(tmp)


def build_splits(data: str, meta_langs: list[str], valid_langs: list[str], name: str = SPLIT_DIR,
                 force: bool = False) -> dict:
    """Write ``data/<name>`` (module doc); returns ``{split: {lang: lines}}``."""
    from fairseq_ext.tools.corpora import universal_data as ud
    from fairseq_ext.tools.corpora.segment import apply_sentencepiece

    man_path = os.path.join(data, "manifest.json")
    if not os.path.isfile(man_path):
        raise ToolError(f"{data} is not a `fairseq-ext-data universal` folder (no manifest.json)")
    man = read_json(man_path)
    langs, target = list(man["langs"]), man["lowres"]
    if not meta_langs or not valid_langs:
        raise ToolError("give --meta-langs and --valid-langs")
    for lang in meta_langs + valid_langs:
        if lang not in langs:
            raise ToolError(f"language {lang!r} is not in {data} (its languages: {', '.join(langs)})")
        if lang == target:
            raise ToolError(f"{lang} is the target (low-resource) language of {data}: it cannot be a meta-training "
                            f"or validation language")
    both = set(meta_langs) & set(valid_langs)
    if both or len(set(meta_langs)) != len(meta_langs) or len(set(valid_langs)) != len(valid_langs):
        raise ToolError(f"--meta-langs {','.join(meta_langs)} and --valid-langs {','.join(valid_langs)} must be "
                        f"distinct languages" + (f" ({', '.join(sorted(both))} in both)" if both else ""))
    params = {"version": SPLIT_VERSION, "meta_langs": meta_langs, "valid_langs": valid_langs,
              "manifest": sha256_file(man_path)[:16]}
    step = f"ch6splits.{name}"
    out = os.path.join(data, name)
    if not force and stamp_ok(data, step, params):
        log(f"[ch6 splits] {out} is up to date; skipping")
        return read_json(os.path.join(out, "splits.json"))
    tmp = f"{out}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "seg"))
    try:
        names = _link_bin(data, tmp)
        counts: dict = {}
        spm = os.path.join(data, "spm")
        src, en, lang = (read_lines(os.path.join(spm, f"train.{x}")) for x in ("src", "en", "lang"))
        if not len(src) == len(en) == len(lang):
            raise ToolError(f"{spm}/train.{{src,en,lang}} differ in length ({len(src)}, {len(en)}, {len(lang)})")
        subsets = {"train_multi": set(meta_langs)}
        subsets.update({f"train_meta_{v}": set(meta_langs) | {v} for v in valid_langs})
        for split, keep in subsets.items():
            rows = [i for i, x in enumerate(lang) if x in keep]
            prefix = os.path.join(tmp, "seg", split)
            write_lines(prefix + ".src", (src[i] for i in rows))
            write_lines(prefix + ".en", (en[i] for i in rows))
            write_lines(os.path.join(tmp, f"{split}.lang"), (lang[i] for i in rows))
            counts[split] = {x: sum(lang[i] == x for i in rows) for x in sorted(keep, key=langs.index)}
        multi = man["multi_tsv"]
        header = ud._read_header(multi)
        ids, book_split, texts = ud._read_rows(multi, header, valid_langs + [man["target"]])
        eng = texts[man["target"]]
        for v in valid_langs:
            keep, _, _ = ud._filter(texts[v], eng)
            rows = [i for i, s in enumerate(book_split) if s == "valid" and keep[i]]
            if not rows:
                raise ToolError(f"no {v} verse of the valid books in {multi}: no dev set for the validation task")
            seg_v = apply_sentencepiece(os.path.join(spm, f"spm.{v}.model"), [texts[v][i] for i in rows], 1)
            seg_en = apply_sentencepiece(os.path.join(spm, "spm.en.model"), [eng[i] for i in rows], 1)
            split = f"valid_{v}"
            prefix = os.path.join(tmp, "seg", split)
            write_lines(prefix + ".src", (ud._mark(s, v) for s in seg_v))
            write_lines(prefix + ".en", seg_en)
            write_lines(os.path.join(tmp, f"{split}.lang"), (v for _ in rows))
            write_lines(os.path.join(tmp, f"{split}.ids"), (f"{v}:{ids[i]}" for i in rows))
            write_lines(os.path.join(tmp, f"{split}.raw.en"), (eng[i] for i in rows))
            counts[split] = {v: len(rows)}
        for split in counts:
            _binarize(data, os.path.join(tmp, "seg", split), split, tmp)
        shutil.rmtree(os.path.join(tmp, "seg"))
        with open(os.path.join(tmp, "splits.json"), "w", encoding="utf-8") as f:
            json.dump(counts, f, indent=1)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    outputs = [os.path.join(name, n) for n in names + ["splits.json"] + [f"valid_{v}.raw.en" for v in valid_langs]]
    outputs += [os.path.join(name, f"{s}.{x}") for s in counts for x in ("lang", "src-en.src.bin", "src-en.en.bin")]
    write_stamp(data, step, params, outputs)
    log(f"[ch6 splits] wrote {out}: " + "; ".join(f"{s} " + ", ".join(f"{k} {n}" for k, n in c.items())
                                                  for s, c in counts.items()))
    return counts

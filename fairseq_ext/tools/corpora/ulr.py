"""The offline half of the Universal Lexical Representation (Gu 2019 thesis ch. 5, §5.3.1): monolingual
embeddings, seed dictionaries, the Procrustes projection (Eq. 5.4) and the arrays the ULR embedding
(:class:`fairseq_ext.modules.ulr.ULREmbedding`) loads. ``python -m fairseq_ext.tools.corpora.ulr <cmd>``
(``fairseq-ext-ulr``), on a data folder DIR written by ``fairseq-ext-data universal``.

Subcommands (in this order; each is skipped when its stamp is up to date, ``--force`` redoes it)::

    embed      skip-gram embeddings per language -> DIR/ulr/emb.<lang>.vec
    seed-dict  seed pairs source piece -> English piece (eflomal alignments, identical strings)
               -> DIR/ulr/seed.<lang>.tsv
    project    O_k = procrustes(seed queries, seed keys) (Eq. 5.4) -> DIR/ulr/query.npy, key.npy,
               universal.txt, alpha.npy (Eq. 5.5 α), rotation.npz, manifest.json
    closest    the nearest universal tokens of each source piece under q(u|x) (Eq. 5.3 with A = I)
    gates      the MoLE gate of a ``universal_rnn --mole`` checkpoint (Fig. 5.8), as JSON and heatmaps

Errors (one ``error: ...`` line, exit status 2): a language without its text / embeddings / seed file,
an unknown language code, an empty seed dictionary, a dict.src.txt symbol without a ``__<lang>`` suffix.
"""
from __future__ import annotations

import os
import zlib
from collections import Counter
from typing import Optional

import numpy as np

from fairseq_ext.tools.common import (ArgumentParser, OutputSet, Timer, ToolError, atomic_write, log,
                                      positive_int, read_json, read_lines, require_file, run_cli, sha256_file,
                                      stamp_ok, write_stamp)

WORD_START = "\u2581"  # sentencepiece's "▁"
SUFFIX = "__"
ENGLISH = "en"
SPM_SPECIALS = {"<unk>", "<s>", "</s>", "<pad>"}
DEFAULT_TEMPERATURE = 0.05
MODELS = ("fasttext", "word2vec")


# =========================================================================== the folder
def spm_path(data: str, name: str) -> str:
    return os.path.join(data, "spm", name)


def ulr_dir(data: str) -> str:
    return os.path.join(data, "ulr")


def _require_data(data: str) -> None:
    if not os.path.isdir(data):
        raise ToolError(f"missing data folder: {data}")


def manifest_langs(data: str) -> Optional[list[str]]:
    """The source languages recorded in DIR/manifest.json (``langs``, else ``aux`` + ``lowres``)."""
    path = os.path.join(data, "manifest.json")
    if not os.path.isfile(path):
        return None
    m = read_json(path)
    if not isinstance(m, dict):
        return None
    langs = m.get("langs")
    if not langs:
        langs = list(m.get("aux") or []) + ([m["lowres"]] if m.get("lowres") else [])
    return [x for x in langs if x != ENGLISH] or None


def text_langs(data: str) -> list[str]:
    """Languages with a DIR/spm/text.<lang> file (English excluded)."""
    folder = os.path.join(data, "spm")
    if not os.path.isdir(folder):
        return []
    return sorted(n[len("text."):] for n in os.listdir(folder)
                  if n.startswith("text.") and "." not in n[len("text."):] and n != f"text.{ENGLISH}")


def source_langs(data: str, langs_arg: Optional[str], needs: str) -> list[str]:
    """The source languages to work on: ``--langs`` (each must have ``DIR/spm/<needs>``, e.g.
    ``text.{lang}``), else the manifest's, else every language with such a file."""
    if langs_arg:
        langs = [x.strip() for x in langs_arg.split(",") if x.strip()]
    else:
        langs = manifest_langs(data) or text_langs(data)
    if not langs:
        raise ToolError(f"no source language: give --langs (no manifest.json and no {spm_path(data, 'text.<lang>')})")
    known = manifest_langs(data) or text_langs(data)
    for lang in langs:
        path = spm_path(data, needs.format(lang=lang))
        if not os.path.isfile(path):
            if lang in known:
                raise ToolError(f"missing input file for language {lang!r}: {path}")
            raise ToolError(f"unknown language code {lang!r}: no {path} (languages here: "
                            f"{', '.join(known) or 'none'})")
    return list(dict.fromkeys(langs))


def _fingerprint(paths: list[str]) -> dict[str, str]:
    return {os.path.basename(p): sha256_file(p)[:16] for p in paths if os.path.isfile(p)}


def is_whole_word(tokens: list[str], i: int) -> bool:
    """Piece i is a whole word: it starts with "▁", has more than the marker, and the next piece (if any)
    starts a new word (no BPE fragment)."""
    t = tokens[i]
    if not t.startswith(WORD_START) or len(t) <= 1:
        return False
    return i + 1 == len(tokens) or tokens[i + 1].startswith(WORD_START)


# =========================================================================== embeddings (.vec)
def read_vec(path: str) -> tuple[list[str], np.ndarray]:
    """A word2vec text file → (words, (n, d) float32)."""
    require_file(path, "embeddings file")
    lines = read_lines(path)
    if not lines:
        raise ToolError("empty embeddings file", path)
    head = lines[0].split()
    try:
        n, d = int(head[0]), int(head[1])
    except (ValueError, IndexError):
        raise ToolError("the first line of a word2vec text file is '<count> <dim>'", path, 1) from None
    words, rows = [], []
    for i, line in enumerate(lines[1:], 2):
        parts = line.rstrip(" ").split(" ")
        if len(parts) != d + 1:
            raise ToolError(f"expected a word and {d} numbers, got {len(parts) - 1} numbers", path, i)
        words.append(parts[0])
        rows.append(parts[1:])
    if len(words) != n:
        raise ToolError(f"the header says {n} vectors but the file has {len(words)}", path)
    vecs = np.asarray(rows, dtype=np.float32).reshape(len(words), d)
    return words, vecs


def write_vec(f, words: list[str], vecs: np.ndarray) -> None:
    f.write(f"{len(words)} {vecs.shape[1]}\n")
    for w, v in zip(words, vecs):
        f.write(w + " " + " ".join(f"{x:.6f}" for x in v) + "\n")


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to norm 1 (zero rows stay zero)."""
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(n > 0, n, 1.0)).astype(np.float32)


def _stable_hash(s: str) -> int:
    """gensim's ``hashfxn`` (its default, ``hash``, changes with PYTHONHASHSEED): CRC32."""
    return zlib.crc32(s.encode("utf-8"))


def train_embeddings(sentences: list[list[str]], dim: int, epochs: int, window: int, min_count: int,
                     model: str, seed: int, bucket: int, extra_words: Optional[list[str]] = None,
                     center: bool = False) -> tuple[list[str], np.ndarray, int]:
    """Skip-gram vectors (unit norm) of the words of ``sentences``, most frequent first; with fastText
    also of ``extra_words`` missing from the text (composed from n-grams).  ``center``: unit norm, minus the
    mean vector, unit norm again (Artetxe et al., 2018).  Returns (words, vecs, composed)."""
    import logging

    from gensim.models import FastText, Word2Vec

    logging.getLogger("gensim").setLevel(logging.WARNING)
    kw = dict(sentences=sentences, sg=1, vector_size=dim, window=window, min_count=min_count, epochs=epochs,
              workers=1, seed=seed, hashfxn=_stable_hash)
    m = FastText(bucket=bucket, **kw) if model == "fasttext" else Word2Vec(**kw)
    words = list(m.wv.index_to_key)
    vecs = np.asarray(m.wv.vectors[: len(words)], dtype=np.float32)
    composed = 0
    if model == "fasttext" and extra_words:
        have = set(words)
        more = [w for w in dict.fromkeys(extra_words) if w not in have and w not in SPM_SPECIALS]
        if more:
            vecs = np.concatenate([vecs, np.stack([m.wv[w] for w in more]).astype(np.float32)])
            words += more
            composed = len(more)
    vecs = unit_rows(vecs)
    if center:
        vecs = unit_rows(vecs - vecs.mean(0, keepdims=True))
    return words, vecs, composed


def spm_vocab_pieces(path: str) -> list[str]:
    if not os.path.isfile(path):
        return []
    return [line.split("\t")[0] for line in read_lines(path) if line]


def cmd_embed(a) -> None:
    _require_data(a.data)
    langs = source_langs(a.data, a.langs, "text.{lang}")
    if ENGLISH not in langs:
        langs.append(ENGLISH)
    path = spm_path(a.data, f"text.{ENGLISH}")
    if not os.path.isfile(path):
        raise ToolError(f"missing English text for the universal tokens: {path}")
    out = ulr_dir(a.data)
    os.makedirs(out, exist_ok=True)
    for lang in langs:
        text, vocab = spm_path(a.data, f"text.{lang}"), spm_path(a.data, f"spm.{lang}.vocab")
        name = f"emb.{lang}.vec"
        params = {"dim": a.dim, "epochs": a.epochs, "window": a.window, "min_count": a.min_count,
                  "model": a.model, "seed": a.seed, "bucket": a.bucket, "center": a.center,
                  "inputs": _fingerprint([text, vocab])}
        if not a.force and stamp_ok(out, f"embed.{lang}", params):
            log(f"[ulr embed] {os.path.join(out, name)} is up to date; skipping (--force redoes it)")
            continue
        t = Timer()
        sentences = [line.split() for line in read_lines(text)]
        sentences = [s for s in sentences if s]
        if not sentences:
            raise ToolError(f"no text for language {lang!r}", text)
        words, vecs, composed = train_embeddings(sentences, a.dim, a.epochs, a.window, a.min_count, a.model,
                                                 a.seed, a.bucket, spm_vocab_pieces(vocab), a.center)
        if not words:
            raise ToolError(f"no word of language {lang!r} occurs --min-count {a.min_count} times", text)
        with atomic_write(os.path.join(out, name)) as f:
            write_vec(f, words, vecs)
        write_stamp(out, f"embed.{lang}", params, [name])
        log(f"[ulr embed] {lang}: {len(sentences)} sentences, {len(words)} vectors ({composed} composed from "
            f"n-grams), dim {a.dim}, {a.model} -> {os.path.join(out, name)} ({t})")


# =========================================================================== seed dictionaries
def _align(src: list[str], tgt: list[str], symmetric: bool, seed: int) -> list[set[tuple[int, int]]]:
    """Links (i, j) per pair: eflomal forward, ∩ reverse when ``symmetric``."""
    import logging

    from fairseq_ext.tools.corpora.fertility import align_eflomal, parse_links

    logging.getLogger("eflomal").setLevel(logging.WARNING)
    empty = [k for k, (s, t) in enumerate(zip(src, tgt)) if not s.strip() or not t.strip()]
    src, tgt = list(src), list(tgt)
    for k in empty:  # eflomal cannot read an empty sentence
        src[k], tgt[k] = src[k].strip() or "<empty>", tgt[k].strip() or "<empty>"
    fwd = [set(map(tuple, parse_links(x).tolist())) for x in align_eflomal(src, tgt, seed=seed)]
    if symmetric:
        rev = align_eflomal(tgt, src, seed=seed)
        fwd = [f & {(i, j) for j, i in parse_links(r).tolist()} for f, r in zip(fwd, rev)]
    for k in empty:
        fwd[k] = set()
    return fwd


def extract_seed_pairs(src_lines: list[str], en_lines: list[str], links: list[set[tuple[int, int]]],
                       min_count: int, max_pairs: int) -> list[tuple[str, str, int, str]]:
    """(src, en, count, source) seed pairs, one-to-one, most frequent first (see the module docstring)."""
    pair_c: Counter = Counter()
    src_c: Counter = Counter()
    en_c: Counter = Counter()
    for s_line, e_line, lk in zip(src_lines, en_lines, links):
        s, e = s_line.split(), e_line.split()
        s_whole = [is_whole_word(s, i) for i in range(len(s))]
        e_whole = [is_whole_word(e, j) for j in range(len(e))]
        src_c.update(s[i] for i in range(len(s)) if s_whole[i])
        en_c.update(e[j] for j in range(len(e)) if e_whole[j])
        for i, j in lk:
            if i < len(s) and j < len(e) and s_whole[i] and e_whole[j]:
                pair_c[(s[i], e[j])] += 1
    best: dict[str, tuple[float, int, str]] = {}
    for (f, e), c in pair_c.items():
        if c < min_count:
            continue
        key = (c / src_c[f], c, e)
        old = best.get(f)
        if old is None or (key[0], key[1]) > (old[0], old[1]) or ((key[0], key[1]) == (old[0], old[1])
                                                                 and e < old[2]):
            best[f] = key
    cands = [(c, 0, f, e) for f, (_, c, e) in best.items()]
    for f, c in src_c.items():
        if f not in best and c >= min_count and en_c.get(f, 0) >= min_count:
            cands.append((min(c, en_c[f]), 1, f, f))
    cands.sort(key=lambda x: (-x[0], x[1], x[2], x[3]))
    used_f, used_e, out = set(), set(), []
    for c, kind, f, e in cands:
        if f in used_f or e in used_e:
            continue
        used_f.add(f)
        used_e.add(e)
        out.append((f, e, c, "align" if kind == 0 else "identical"))
        if len(out) >= max_pairs:
            break
    return out


def read_seed(path: str) -> list[tuple[str, str, int, str]]:
    require_file(path, "seed dictionary")
    out = []
    for i, line in enumerate(read_lines(path), 1):
        parts = line.split("\t")
        if len(parts) != 4:
            raise ToolError("a seed line is src<TAB>en<TAB>count<TAB>source", path, i)
        try:
            out.append((parts[0], parts[1], int(parts[2]), parts[3]))
        except ValueError:
            raise ToolError(f"count is not an integer: {parts[2]!r}", path, i) from None
    return out


def cmd_seed_dict(a) -> None:
    _require_data(a.data)
    langs = source_langs(a.data, a.langs, "para.{lang}")
    out = ulr_dir(a.data)
    os.makedirs(out, exist_ok=True)
    for lang in langs:
        src_p, en_p = spm_path(a.data, f"para.{lang}"), spm_path(a.data, f"para.{lang}.{ENGLISH}")
        require_file(en_p, f"English side of the {lang} parallel text")
        name = f"seed.{lang}.tsv"
        params = {"max_pairs": a.max_pairs, "min_count": a.min_count, "symmetric": not a.no_symmetric,
                  "seed": a.seed, "inputs": _fingerprint([src_p, en_p])}
        if not a.force and stamp_ok(out, f"seed.{lang}", params):
            log(f"[ulr seed-dict] {os.path.join(out, name)} is up to date; skipping (--force redoes it)")
            continue
        t = Timer()
        src, en = read_lines(src_p), read_lines(en_p)
        if len(src) != len(en):
            raise ToolError(f"line counts differ: {src_p} has {len(src)} lines but {en_p} has {len(en)}")
        links = _align(src, en, not a.no_symmetric, a.seed) if src else []
        pairs = extract_seed_pairs(src, en, links, a.min_count, a.max_pairs)
        if not pairs:
            raise ToolError(f"empty seed dictionary for language {lang!r}: no whole-word pair of {src_p} and "
                            f"{en_p} is aligned or identical at least --min-count {a.min_count} times")
        with atomic_write(os.path.join(out, name)) as f:
            for p in pairs:
                f.write("\t".join(map(str, p)) + "\n")
        write_stamp(out, f"seed.{lang}", params, [name])
        n_id = sum(p[3] == "identical" for p in pairs)
        log(f"[ulr seed-dict] {lang}: {len(src)} pairs aligned, {len(pairs)} seed pairs ({n_id} identical) "
            f"-> {os.path.join(out, name)} ({t})")


# =========================================================================== projection
def load_src_dict(path: str, known: Optional[list[str]]) -> tuple[list[str], list[Optional[tuple[str, str]]]]:
    """The symbols of a fairseq source dictionary (fairseq's indices) and, per index, (piece, lang) or None
    (specials, ``madeupword`` padding)."""
    from fairseq.data import Dictionary

    require_file(path, "source dictionary")
    d = Dictionary.load(path)
    symbols = list(d.symbols)
    marks: list[Optional[tuple[str, str]]] = []
    for i, sym in enumerate(symbols):
        if i < d.nspecial or (sym.startswith("madeupword") and sym[len("madeupword"):].isdigit()):
            marks.append(None)
            continue
        piece, sep, lang = sym.rpartition(SUFFIX)
        line = i - d.nspecial + 1
        if not sep or not piece or not lang:
            raise ToolError(f"symbol {sym!r} has no language suffix {SUFFIX}<lang>", path, line)
        if known is not None and lang not in known:
            raise ToolError(f"unknown language code {lang!r} in symbol {sym!r} (the manifest's languages: "
                            f"{', '.join(known)})", path, line)
        marks.append((piece, lang))
    return symbols, marks


def cmd_project(a) -> None:
    import torch

    from fairseq_ext.modules.ulr import procrustes

    _require_data(a.data)
    out = ulr_dir(a.data)
    dict_p = os.path.join(a.data, "bin", "dict.src.txt")
    train_p = spm_path(a.data, "train.src")
    en_text = spm_path(a.data, f"text.{ENGLISH}")
    symbols, marks = load_src_dict(dict_p, manifest_langs(a.data))
    langs = sorted({m[1] for m in marks if m is not None})
    if not langs:
        raise ToolError("no marked source piece (<piece>__<lang>)", dict_p)
    emb_p = {lang: os.path.join(out, f"emb.{lang}.vec") for lang in [ENGLISH] + langs}
    seed_p = {lang: os.path.join(out, f"seed.{lang}.tsv") for lang in langs}
    for lang, p in emb_p.items():
        if not os.path.isfile(p):
            raise ToolError(f"missing embeddings for language {lang!r}: {p} (run `fairseq-ext-ulr embed`)")
    for lang, p in seed_p.items():
        if not os.path.isfile(p):
            raise ToolError(f"missing seed dictionary for language {lang!r}: {p} (run `fairseq-ext-ulr seed-dict`)")
    require_file(train_p, "marked training source")
    require_file(en_text, "English text")
    names = ["query.npy", "key.npy", "universal.txt", "alpha.npy", "rotation.npz", "manifest.json"]
    params = {"num_universal": a.num_universal, "alpha_top": a.alpha_top,
              "inputs": _fingerprint([dict_p, train_p, en_text] + list(emb_p.values()) + list(seed_p.values()))}
    if not a.force and stamp_ok(out, "project", params):
        log(f"[ulr project] {out} is up to date; skipping (--force redoes it)")
        return
    t = Timer()

    # keys: the M most frequent English pieces that have an embedding
    en_words, en_vecs = read_vec(emb_p[ENGLISH])
    en_index = {w: i for i, w in enumerate(en_words)}
    dim = en_vecs.shape[1]
    en_counts: Counter = Counter(tok for line in read_lines(en_text) for tok in line.split())
    ranked = sorted((w for w in en_counts if w in en_index and w not in SPM_SPECIALS),
                    key=lambda w: (-en_counts[w], w))
    if not ranked:
        raise ToolError(f"no English piece of {en_text} has an embedding in {emb_p[ENGLISH]}")
    universal = ranked[: a.num_universal]
    M = len(universal)
    key = unit_rows(en_vecs[[en_index[w] for w in universal]])
    uni_index = {w: i for i, w in enumerate(universal)}

    V = len(symbols)
    query = np.zeros((V, dim), dtype=np.float32)
    rotations, seed_n, cos_before, cos_after, p_at_1, missing, pieces = {}, {}, {}, {}, {}, {}, {}
    for lang in langs:
        words, vecs = read_vec(emb_p[lang])
        if vecs.shape[1] != dim:
            raise ToolError(f"embeddings of {lang!r} have dimension {vecs.shape[1]} but English has {dim}",
                            emb_p[lang])
        vecs = unit_rows(vecs)
        index = {w: i for i, w in enumerate(words)}
        seeds = [(f, e) for f, e, _, _ in read_seed(seed_p[lang]) if f in index and e in en_index]
        if not seeds:
            raise ToolError(f"empty seed dictionary for language {lang!r}: no pair of {seed_p[lang]} has "
                            f"embeddings on both sides (run `fairseq-ext-ulr seed-dict`, lower --min-count)")
        x = vecs[[index[f] for f, _ in seeds]]
        y = unit_rows(en_vecs[[en_index[e] for _, e in seeds]])
        O = procrustes(torch.from_numpy(x), torch.from_numpy(y)).double().numpy()
        xo = unit_rows((x.astype(np.float64) @ O).astype(np.float32))
        rotations[lang] = O.astype(np.float32)
        seed_n[lang] = len(seeds)
        cos_before[lang] = float(np.mean(np.sum(x * y, axis=1)))
        cos_after[lang] = float(np.mean(np.sum(xo * y, axis=1)))
        in_uni = [k for k, (_, e) in enumerate(seeds) if e in uni_index]
        if in_uni:
            nearest = (xo[in_uni] @ key.T).argmax(1)
            p_at_1[lang] = float(np.mean([nearest[n] == uni_index[seeds[k][1]] for n, k in enumerate(in_uni)]))
        rows = [(i, m[0]) for i, m in enumerate(marks) if m is not None and m[1] == lang]
        have = [(i, index[p]) for i, p in rows if p in index]
        if have:
            ii, jj = zip(*have)
            query[list(ii)] = unit_rows((vecs[list(jj)].astype(np.float64) @ O).astype(np.float32))
        pieces[lang], missing[lang] = len(rows), len(rows) - len(have)
        log(f"[ulr project] {lang}: {len(seeds)} seed pairs, mean cosine {cos_before[lang]:.3f} -> "
            f"{cos_after[lang]:.3f} after the projection, seed P@1 {p_at_1.get(lang, float('nan')):.3f}; "
            f"{len(rows)} pieces, {missing[lang]} without an embedding (zero query)")

    # α: the --alpha-top most frequent pieces of each language in the training source
    sym_index = {s: i for i, s in enumerate(symbols) if marks[i] is not None}
    counts = np.zeros(V, dtype=np.int64)
    for line in read_lines(train_p):
        for tok in line.split():
            i = sym_index.get(tok)
            if i is not None:
                counts[i] += 1
    alpha = np.zeros(V, dtype=bool)
    alpha_n = {}
    for lang in langs:
        idx = [i for i, m in enumerate(marks) if m is not None and m[1] == lang and counts[i] > 0]
        idx.sort(key=lambda i: (-counts[i], i))
        alpha[idx[: a.alpha_top]] = True
        alpha_n[lang] = min(len(idx), a.alpha_top)

    manifest = {"M": M, "dim": dim, "langs": langs, "num_embeddings": V, "dict": os.path.relpath(dict_p, a.data),
                "alpha_top": a.alpha_top, "alpha_true": alpha_n, "seed_pairs": seed_n,
                "mean_cos_before": cos_before, "mean_cos_after": cos_after, "seed_p_at_1": p_at_1,
                "pieces": pieces, "missing_query": missing, "num_universal_requested": a.num_universal,
                "temperature": DEFAULT_TEMPERATURE, "files": names}
    with OutputSet(out) as o:
        for name, arr in (("query.npy", query), ("key.npy", key), ("alpha.npy", alpha)):
            with open(o.path(name), "wb") as f:
                np.save(f, arr)
        with open(o.path("rotation.npz"), "wb") as f:
            np.savez(f, **rotations)
        o.write_lines("universal.txt", universal)
        o.write_json("manifest.json", manifest)
    write_stamp(out, "project", params, names)
    log(f"[ulr project] query {query.shape}, key {key.shape} (M = {M}), alpha {int(alpha.sum())} True -> {out} ({t})")


# =========================================================================== inspection
def cmd_closest(a) -> None:
    _require_data(a.data)
    out = ulr_dir(a.data)
    for n in ("query.npy", "key.npy", "universal.txt"):
        require_file(os.path.join(out, n), "ULR file (run `fairseq-ext-ulr project`)")
    query = np.load(os.path.join(out, "query.npy"))
    key = np.load(os.path.join(out, "key.npy"))
    universal = read_lines(os.path.join(out, "universal.txt"))
    symbols, marks = load_src_dict(os.path.join(a.data, "bin", "dict.src.txt"), None)
    if len(symbols) != query.shape[0] or len(universal) != key.shape[0]:
        raise ToolError(f"{out} does not match {os.path.join(a.data, 'bin', 'dict.src.txt')}: rerun project")
    langs = sorted({m[1] for m in marks if m is not None})
    if a.lang and a.lang not in langs:
        raise ToolError(f"unknown language code {a.lang!r} (dict.src.txt has: {', '.join(langs)})")
    rows = [i for i, m in enumerate(marks) if m is not None and (not a.lang or m[1] == a.lang)
            and np.any(query[i] != 0)]
    top = min(a.top, key.shape[0])
    lines = ["index\tsymbol\tlang\trank\tuniversal\tq\tcosine"]
    for start in range(0, len(rows), 1024):
        chunk = rows[start:start + 1024]
        cos = query[chunk].astype(np.float64) @ key.T.astype(np.float64)
        s = cos / a.temperature
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        best = np.argsort(-cos, axis=1, kind="stable")[:, :top]
        for r, i in enumerate(chunk):
            piece, lang = marks[i]
            for k, u in enumerate(best[r], 1):
                lines.append(f"{i}\t{symbols[i]}\t{lang}\t{k}\t{universal[u]}\t{p[r, u]:.4f}\t{cos[r, u]:.4f}")
    text = "\n".join(lines) + "\n"
    if a.out:
        with atomic_write(a.out) as f:
            f.write(text)
        log(f"[ulr closest] {len(rows)} pieces x top {top} -> {a.out}")
    else:
        print(text, end="")


# =========================================================================== MoLE gates (Fig. 5.8)
def _gate_sentences(data: str, split: str, n: Optional[int], ids_arg: Optional[str],
                    size: int) -> list[tuple[int, str]]:
    """[(index in the split, verse id)]: the first ``n`` sentences, or those of the verse ids ``ids_arg``
    (DIR/raw/<split>.ids, else DIR/bin/<split>.ids; an id matches with or without its ``lang:`` prefix)."""
    root = os.path.dirname(os.path.abspath(data))
    ids_path = next((p for p in (os.path.join(root, "raw", f"{split}.ids"), os.path.join(data, f"{split}.ids"))
                     if os.path.isfile(p)), None)
    verse_ids = read_lines(ids_path) if ids_path else []
    if verse_ids and len(verse_ids) != size:
        raise ToolError(f"{len(verse_ids)} ids but the binarized {split} split has {size} sentences", ids_path)
    name = (lambda i: verse_ids[i]) if verse_ids else str
    if not ids_arg:
        if n > size:
            log(f"[ulr gates] --n {n}: the {split} split has only {size} sentences")
        return [(i, name(i)) for i in range(min(n, size))]
    if not verse_ids:
        raise ToolError(f"--ids needs the verse ids of the {split} split: no "
                        f"{os.path.join(root, 'raw', split + '.ids')} (nor {os.path.join(data, split + '.ids')})")
    index: dict[str, int] = {}
    for i, v in enumerate(verse_ids):
        index.setdefault(v, i)
        index.setdefault(v.split(":", 1)[-1], i)
    out = []
    for v in (x.strip() for x in ids_arg.split(",")):
        if not v:
            continue
        if v not in index:
            raise ToolError(f"verse id {v!r} is not in the {split} split", ids_path)
        out.append((index[v], verse_ids[index[v]]))
    if not out:
        raise ToolError("--ids names no verse")
    return out


def mole_gates(model, task, split: str, indices: list[int]) -> list[dict]:
    """Per sentence (in ``indices`` order): the source pieces (padding and </s> dropped), the sentence language
    and softmax_k(g(h)) of every piece over the K experts (the auxiliary languages) — Eq. 5.6's gate."""
    import torch

    ds = task.dataset(split)
    sample = ds.collater([ds[i] for i in indices])
    src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    with torch.no_grad():
        enc = model.encoder(src_tokens, src_lengths=src_lengths)
    gate = torch.softmax(enc["mole_gate"][0].float(), dim=-1).transpose(0, 1)  # (B, S, K)
    langs = enc["src_lang"][0].tolist()
    d = task.source_dictionary
    rows = {}
    for b, sid in enumerate(sample["id"].tolist()):
        keep = [j for j, t in enumerate(src_tokens[b].tolist()) if t not in (d.pad(), d.eos())]
        symbols = [d[src_tokens[b, j]] for j in keep]
        lang = task.langs[langs[b]] if 0 <= langs[b] < len(task.langs) else None
        rows[sid] = {"lang": lang, "symbols": symbols,
                     "pieces": [s.rpartition(SUFFIX)[0] if SUFFIX in s else s for s in symbols],
                     "gates": gate[b, keep].tolist()}
    return [rows[i] for i in indices]


def plot_gates(path: str, records: list[dict], experts: list[str]) -> None:
    """One heatmap per sentence (experts × source pieces, softmax of the gate in [0, 1]) stacked in one PNG."""
    from fairseq_ext.tools.plots import pyplot

    plt = pyplot()
    widest = max(len(r["pieces"]) for r in records)
    K = len(experts)
    fig, axes = plt.subplots(len(records), 1, squeeze=False, layout="constrained",
                             figsize=(max(5.0, 0.32 * widest + 2.5), len(records) * (0.35 * K + 1.9) + 0.6))
    try:
        im = None
        for ax, r in zip(axes[:, 0], records):
            g = np.asarray(r["gates"], dtype=np.float32).reshape(-1, K).T  # (K, T)
            im = ax.imshow(g, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_yticks(range(K))
            ax.set_yticklabels(experts, fontsize=8)
            ax.set_xticks(range(len(r["pieces"])))
            ax.set_xticklabels(r["pieces"], rotation=90, fontsize=7)
            ax.set_title(f"{r['id']} ({r['lang'] or '?'})", fontsize=9)
        fig.colorbar(im, ax=axes[:, 0].tolist(), fraction=0.02, label="softmax(g(h))")
        fig.suptitle("MoLE gate activations per source piece (Fig. 5.8)", fontsize=10)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def cmd_gates(a) -> None:
    import argparse
    import json

    from fairseq import utils

    import fairseq_ext
    from fairseq_ext.modules.checkpoint import load_ensemble

    _require_data(a.data)
    utils.import_user_module(argparse.Namespace(user_dir=os.path.dirname(os.path.abspath(fairseq_ext.__file__))))
    models, _cfg, task = load_ensemble([a.path], arg_overrides={"data": a.data}, frozen=True)
    model = models[0]
    if getattr(getattr(model, "encoder", None), "mole", None) is None:
        raise ToolError("not a universal_rnn checkpoint with MoLE (trained without --mole): it has no gate to "
                        "export", a.path)
    experts = list(task.aux_langs)
    if model.encoder.num_experts != len(experts):
        raise ToolError(f"the checkpoint has {model.encoder.num_experts} experts but the task names "
                        f"{len(experts)} auxiliary languages ({', '.join(experts)}): another data folder?", a.path)
    task.load_dataset(a.split)
    picked = _gate_sentences(a.data, a.split, a.n, a.ids, len(task.dataset(a.split)))
    records = []
    for (i, vid), r in zip(picked, mole_gates(model, task, a.split, [i for i, _ in picked])):
        records.append({"index": i, "id": vid, "lang": r["lang"], "experts": experts,
                        "src": "".join(r["pieces"]).replace(WORD_START, " ").strip(),
                        "tokens": [{"piece": p, "symbol": s, "gate": [round(x, 6) for x in g],
                                    "top": experts[int(np.argmax(g))]}
                                   for p, s, g in zip(r["pieces"], r["symbols"], r["gates"])]})
    with atomic_write(a.json) as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    shown = records if a.plot_n is None else records[:a.plot_n]
    plot_gates(a.plot, [{"id": r["id"], "lang": r["lang"], "pieces": [t["piece"] for t in r["tokens"]],
                         "gates": [t["gate"] for t in r["tokens"]]} for r in shown], experts)
    summary = gate_summary(records, experts)
    if a.summary:
        with atomic_write(a.summary) as f:
            f.write(json.dumps(summary, indent=1) + "\n")
    for rec in records:
        share = Counter(t["top"] for t in rec["tokens"])
        log(f"[ulr gates] {rec['id']} ({rec['lang']}): {len(rec['tokens'])} pieces, top expert per piece "
            + ", ".join(f"{e} {share.get(e, 0)}" for e in experts))
    log(f"[ulr gates] {len(records)} sentences of {a.split} -> {a.json}, {a.plot}"
        + (f" (the first {len(shown)})" if len(shown) < len(records) else ""))
    log(f"[ulr gates] over {summary['pieces']} pieces: mean gate "
        + ", ".join(f"{e} {summary['mean_gate'][e]:.3f}" for e in experts) + "; top expert "
        + ", ".join(f"{e} {summary['top_share'][e]:.3f}" for e in experts)
        + f"; max gate > 0.99 for {summary['saturated_share']:.3f}; mean entropy {summary['mean_entropy']:.3f} nats")


def gate_summary(records: list[dict], experts: list[str]) -> dict:
    """Over every piece of ``records`` (cmd_gates's): the mean gate per expert, the share of pieces whose top expert
    it is, the share of saturated pieces (max gate > 0.99) and the mean gate entropy (nats; ln K = uniform)."""
    g = np.asarray([t["gate"] for r in records for t in r["tokens"]], dtype=np.float64).reshape(-1, len(experts))
    if not len(g):
        raise ToolError("no source piece in the chosen sentences: nothing to summarise")
    top = g.argmax(1)
    return {"sentences": len(records), "pieces": int(len(g)),
            "mean_gate": {e: float(g[:, k].mean()) for k, e in enumerate(experts)},
            "top_share": {e: float((top == k).mean()) for k, e in enumerate(experts)},
            "saturated_share": float((g.max(1) > 0.99).mean()),
            "mean_entropy": float(-(g * np.log(np.clip(g, 1e-12, None))).sum(1).mean())}


# =========================================================================== CLI
def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-ulr", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, metavar="SUBCOMMAND")

    def common(sp: ArgumentParser, langs: bool = True) -> None:
        sp.add_argument("--data", required=True, help="data folder of `fairseq-ext-data universal` (DIR)")
        if langs:
            sp.add_argument("--langs", help="comma-separated source languages (default: the manifest's)")
        sp.add_argument("--force", action="store_true", help="redo the step even if its stamp matches")

    e = sub.add_parser("embed", help="monolingual skip-gram embeddings -> DIR/ulr/emb.<lang>.vec")
    common(e)
    e.add_argument("--dim", type=positive_int, default=100, help="default %(default)s")
    e.add_argument("--epochs", type=positive_int, default=5, help="default %(default)s")
    e.add_argument("--window", type=positive_int, default=5, help="default %(default)s")
    e.add_argument("--min-count", type=positive_int, default=1, help="default %(default)s")
    e.add_argument("--model", choices=MODELS, default="fasttext", help="default %(default)s")
    e.add_argument("--bucket", type=positive_int, default=200000,
                   help="fastText n-gram buckets (default %(default)s)")
    e.add_argument("--center", action="store_true",
                   help="mean-centre the unit vectors and renormalise (default: unit norm only, as the thesis)")
    e.add_argument("--seed", type=int, default=1)

    s = sub.add_parser("seed-dict", help="seed pairs source -> English -> DIR/ulr/seed.<lang>.tsv")
    common(s)
    s.add_argument("--max-pairs", type=positive_int, default=500, help="default %(default)s")
    s.add_argument("--min-count", type=positive_int, default=5, help="default %(default)s")
    s.add_argument("--no-symmetric", action="store_true",
                   help="use the forward eflomal links only (default: forward ∩ reverse)")
    s.add_argument("--seed", type=int, default=1)

    j = sub.add_parser("project", help="Procrustes projection -> query/key/universal/alpha in DIR/ulr")
    common(j, langs=False)
    j.add_argument("--num-universal", type=positive_int, default=20000,
                   help="M, the number of universal (English) tokens (default %(default)s; capped at the "
                        "English pieces with an embedding)")
    j.add_argument("--alpha-top", type=int, default=500,
                   help="α(x) = 1 for this many most frequent pieces per language (default %(default)s)")

    c = sub.add_parser("closest", help="nearest universal tokens of each source piece (TSV)")
    c.add_argument("--data", required=True)
    c.add_argument("--lang", help="only this source language")
    c.add_argument("--top", type=positive_int, default=5, help="default %(default)s")
    c.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, help="τ of Eq. 5.3 (default 0.05)")
    c.add_argument("--out", help="output TSV (default: stdout)")

    g = sub.add_parser("gates", help="MoLE gate activations per source piece of a checkpoint (JSONL + heatmap)")
    g.add_argument("--path", required=True, help="a universal_rnn checkpoint trained with --mole")
    g.add_argument("--data", required=True, help="its binarized data folder (DIR/bin)")
    g.add_argument("--split", default="test", help="default %(default)s")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--n", type=positive_int, default=5, help="the first N sentences of the split (default "
                                                                  "%(default)s)")
    which.add_argument("--ids", help="comma-separated verse ids of DIR/raw/<split>.ids instead")
    g.add_argument("--json", required=True, help="output JSONL, one sentence a line")
    g.add_argument("--plot", required=True, help="output PNG, one heatmap (experts x pieces) per sentence")
    g.add_argument("--plot-n", type=positive_int, help="plot only the first N of the sentences (default: all)")
    g.add_argument("--summary", help="output JSON: mean gate, top-expert share, saturation, entropy over all pieces")
    return p


COMMANDS = {"embed": cmd_embed, "seed-dict": cmd_seed_dict, "project": cmd_project, "closest": cmd_closest,
            "gates": cmd_gates}


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if getattr(a, "alpha_top", 0) < 0:
        raise ToolError(f"--alpha-top must be >= 0, got {a.alpha_top}")
    if getattr(a, "temperature", 1.0) <= 0:
        raise ToolError(f"--temperature must be > 0, got {a.temperature}")
    COMMANDS[a.cmd](a)
    return 0


def cli_main(argv=None) -> None:
    """Console script ``fairseq-ext-ulr``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()

"""The first two steps of the Universal Lexical Representation (Gu 2019 thesis ch. 5, §5.3.1), ``fairseq-ext-ulr
embed`` and ``seed-dict``: monolingual skip-gram embeddings of each language's pieces (fastText or word2vec,
unit norm) and the seed dictionary source piece -> English piece that the Procrustes projection (Eq. 5.4) is
fitted on: one-to-one whole-word pairs from eflomal alignments (forward, ∩ reverse by default) and identical
strings, most frequent first.
"""
from __future__ import annotations

import os
import zlib
from collections import Counter
from typing import Optional

import numpy as np

from fairseq_ext.tools.common import Timer, ToolError, atomic_write, log, read_lines, require_file, stamp_ok, write_stamp
from fairseq_ext.tools.corpora.ulr_files import (ENGLISH, SPM_SPECIALS, WORD_START, fingerprint, require_data,
                                                 source_langs, spm_path, ulr_dir, unit_rows, write_vec)


# =========================================================================== embeddings
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
    require_data(a.data)
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
                  "inputs": fingerprint([text, vocab])}
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


def is_whole_word(tokens: list[str], i: int) -> bool:
    """Piece i is a whole word: it starts with "▁", has more than the marker, and the next piece (if any)
    starts a new word (no BPE fragment)."""
    t = tokens[i]
    if not t.startswith(WORD_START) or len(t) <= 1:
        return False
    return i + 1 == len(tokens) or tokens[i + 1].startswith(WORD_START)


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


def cmd_seed_dict(a) -> None:
    require_data(a.data)
    langs = source_langs(a.data, a.langs, "para.{lang}")
    out = ulr_dir(a.data)
    os.makedirs(out, exist_ok=True)
    for lang in langs:
        src_p, en_p = spm_path(a.data, f"para.{lang}"), spm_path(a.data, f"para.{lang}.{ENGLISH}")
        require_file(en_p, f"English side of the {lang} parallel text")
        name = f"seed.{lang}.tsv"
        params = {"max_pairs": a.max_pairs, "min_count": a.min_count, "symmetric": not a.no_symmetric,
                  "seed": a.seed, "inputs": fingerprint([src_p, en_p])}
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

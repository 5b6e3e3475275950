"""The last steps of the Universal Lexical Representation (Gu 2019 thesis ch. 5, §5.3.1), ``fairseq-ext-ulr project``
and ``closest``: the Procrustes rotation O_k of each language onto English fitted on its seed pairs (Eq. 5.4),
the arrays :class:`fairseq_ext.modules.ulr.ULREmbedding` loads (query = rotated source embeddings, key = the M
universal English tokens, α of Eq. 5.5: the most frequent pieces of each language), and, to inspect them, the
nearest universal tokens of each source piece under q(u|x) (Eq. 5.3 with A = I).
"""
from __future__ import annotations

import os
from collections import Counter

import numpy as np

from fairseq_ext.tools.common import OutputSet, Timer, ToolError, atomic_write, log, read_lines, require_file, \
    stamp_ok, write_stamp
from fairseq_ext.tools.corpora.ulr_files import (DEFAULT_TEMPERATURE, ENGLISH, SPM_SPECIALS, fingerprint,
                                                 load_src_dict, manifest_langs, read_seed, read_vec, require_data,
                                                 spm_path, ulr_dir, unit_rows)


def cmd_project(a) -> None:
    import torch

    from fairseq_ext.modules.ulr import procrustes

    require_data(a.data)
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
              "inputs": fingerprint([dict_p, train_p, en_text] + list(emb_p.values()) + list(seed_p.values()))}
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
    require_data(a.data)
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

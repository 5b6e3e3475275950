"""Gu (2018) ch. 4 (SEG-NMT) retrieval stage -- fairseq_ext.tools.tm.retrieval (``fairseq-ext-tm``).

Eq. 4.1 (fuzzy score) on hand cases, BM25 = tantivy's with k1 1.2 / b 0.75, the exact match first, the
query's own line excluded in training mode, Algorithm 1 (union erratum) against the literal formula and
its coverage never decreasing, deterministic ties, the index stamp (reuse, stale and corrupt refusal),
reserved query characters, empty lines, and the CLI end to end on the committed tiny Bible slice (the
side file read back by ``fairseq_ext.data.translation_memory.read_tm``). CPU only; one subprocess of the
console script (``retrieve``), everything else in-process (``main`` / ``cli_status``, the same entry).
"""
from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest

from fairseq_ext.data.translation_memory import read_tm
from fairseq_ext.tools.tm import memory_index, selection, tm_engines
from fairseq_ext.tools.tm import retrieval as tm
from fairseq_ext.tools.common import ToolError, cli_status, read_lines, stamp_path

from harness import BIN, TINY, run


def _write(path, lines) -> str:
    Path(path).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def _index(tmp_path, lines, name="idx"):
    """``(memory, retriever)`` for a memory of ``lines`` indexed in ``tmp_path/name``."""
    src = _write(tmp_path / f"{name}.src", lines)
    folder = str(tmp_path / name)
    memory_index.build_index(src, folder)
    mem = memory_index.Memory(src)
    return mem, memory_index.open_index(folder, mem)


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    """The tiny slice's training source indexed once: ``(memory path, index folder)``."""
    folder = str(tmp_path_factory.mktemp("tm") / "index")
    memory_index.build_index(str(TINY / "train.es"), folder)
    return str(TINY / "train.es"), folder


# --------------------------------------------------------------------------------------------- Eq. 4.1
def test_fuzzy_score_identical_disjoint_and_hand_case():
    x = tm_engines.tokenize("Y dijo Jehová á Moisés, diciendo: Habla á los hijos de Israel.")
    assert selection.fuzzy_score(x, x) == 1.0
    assert selection.fuzzy_score(tm_engines.tokenize("el rey David"), tm_engines.tokenize("una mujer sabia .")) == 0.0
    # hand case: one substitution (dijo -> habló) + three insertions (", diciendo :") = 4 edits; max = 8
    a = tm_engines.tokenize("Y dijo Jehová á Moisés")
    b = tm_engines.tokenize("Y habló Jehová á Moisés, diciendo:")
    assert (len(a), len(b)) == (5, 8)
    assert selection.fuzzy_score(a, b) == pytest.approx(1 - 4 / 8) == selection.fuzzy_score(b, a)
    # token level, not characters; case kept; the empty sentence
    assert selection.fuzzy_score(["casa"], ["cosa"]) == 0.0
    assert selection.fuzzy_score(["Y"], ["y"]) == 0.0
    assert selection.fuzzy_score([], []) == 1.0 and selection.fuzzy_score([], ["a"]) == 0.0
    with pytest.raises(TypeError):
        selection.fuzzy_score("a b", "a c")


def test_rerank_scores_are_eq_4_1_on_the_tokens_and_ordered(tmp_path):
    """The fast path (one character per token, rapidfuzz cdist) gives fuzzy_score's values, in order."""
    rng = random.Random(3)
    words = ["y", "Y", "de", "la", "Dios", ",", ".", ":", "rey", "casa", "á"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(60)]
    mem = memory_index.Memory(_write(tmp_path / "mem.txt", lines))
    for _ in range(30):
        q = tm_engines.tokenize(" ".join(rng.choice(words + ["nuevo", "otro"]) for _ in range(rng.randint(1, 10))))
        hits = [(i, float(rng.choice([1.0, 2.0, 3.0]))) for i in rng.sample(range(len(lines)), 20)]
        ranked = selection.rerank(mem.encode(q), hits, mem.codes)
        assert [c.fuzzy for c in ranked] == [selection.fuzzy_score(q, mem.tokens[c.index]) for c in ranked]
        keys = [(-c.fuzzy, -c.bm25, c.index) for c in ranked]
        assert keys == sorted(keys) and len(ranked) == 20
        assert selection.rerank(mem.encode(q), hits, mem.codes, keep=5) == ranked[:5]


def test_bm25_is_tantivys_with_k1_1_2_and_b_0_75(tmp_path):
    docs = ["a b c", "a b c a", "x y", "a", "b c d e f", ""]
    mem, r = _index(tmp_path, docs)
    n = len(docs)
    toks = [d.split() for d in docs]
    avgdl = sum(map(len, toks)) / n

    def bm25(term, d):
        df = sum(term in t for t in toks)
        tf = toks[d].count(term)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * len(toks[d]) / avgdl))

    # the terms: word tokens lowercased, punctuation dropped, repeats counted
    for query, terms in ((["a"], ["a"]), (["b", "c"], ["b", "c"]), (["a", "a", "x"], ["a", "a", "x"]),
                         (["A", ",", "B", "("], ["a", "b"])):
        assert tm_engines.index_terms(query) == terms
        got = dict(r.search(query, 10))
        want = {d: sum(bm25(t, d) for t in terms) for d in range(n) if any(t in toks[d] for t in terms)}
        assert set(got) == set(want)
        for d in want:
            assert got[d] == pytest.approx(want[d], rel=1e-5), (query, d)


# --------------------------------------------------------------------------------------------- retrieval
def test_exact_match_is_retrieved_first(tiny_index):
    src, folder = tiny_index
    mem = memory_index.Memory(src)
    r = memory_index.open_index(folder, mem)
    unique = [i for i, t in enumerate(mem.tokens) if t and sum(x == t for x in mem.tokens) == 1]
    for i in unique[::10]:
        e = tm.retrieve_one(r, mem, mem.tokens[i])
        assert e.ids[0] == i and e.fuzzy[0] == 1.0
        assert i in e.adaptive and e.adaptive[0] == i
        assert len(e.ids) == 16 and e.fuzzy == sorted(e.fuzzy, reverse=True)
    # a lightly edited verse still finds its source first
    q = mem.tokens[unique[3]][:-2] + ["también"]
    assert tm.retrieve_one(r, mem, q).ids[0] == unique[3]


def test_training_mode_excludes_the_query(tiny_index, tmp_path):
    src, folder = tiny_index
    mem = memory_index.Memory(src)
    r = memory_index.open_index(folder, mem)
    entries, _ = tm.retrieve_split(r, mem, mem.lines[:60], exclude_self=True)
    for i, e in enumerate(entries):
        assert i not in e.ids and i not in e.adaptive
        assert len(e.ids) == 16
    # duplicates of the query stay (faithful to the thesis) unless --exclude-identical
    mem2, r2 = _index(tmp_path, ["el rey de Israel", "el rey de Israel", "el rey de Judá", "otra cosa"])
    [e] = tm.retrieve_split(r2, mem2, mem2.lines[:1], exclude_self=True)[0]
    assert e.ids[0] == 1 and e.fuzzy[0] == 1.0 and 0 not in e.ids
    [e] = tm.retrieve_split(r2, mem2, mem2.lines[:1], exclude_self=True, exclude_identical=True)[0]
    assert e.ids == [2] and 1 not in e.ids
    # excluding does not cost candidates: still `candidates` of them when the memory has enough
    e = tm.retrieve_one(r, mem, mem.tokens[5], candidates=10, keep=10, exclude=[5])
    assert len(e.ids) == 10 and 5 not in e.ids


def _alg1_literal(query, candidates):
    """Algorithm 1 as printed, with R <- R ∪ {X'_k} (the erratum): the reference for adaptive_select."""
    R, c, chosen = [], 0.0, []
    for k, cand in enumerate(candidates):
        keys = set().union(*R, cand)
        c_tmp = sum(1 for x in query if x in keys) / len(query)
        if c_tmp > c:
            c = c_tmp
            R.append(cand)
            chosen.append(k)
    return chosen


def test_adaptive_selection_coverage_never_decreases():
    # the union matters: the second pair covers what the first does not, both are kept
    assert selection.adaptive_select("a b c d".split(), ["a b".split(), "c d".split()]) == [0, 1]
    # a pair that adds no new query token is skipped; later ones still count
    assert selection.adaptive_select("a b c d".split(), ["a b".split(), "b a x".split(), "d".split()]) == [0, 2]
    assert selection.adaptive_select("a b".split(), ["x".split(), "y".split()]) == []
    assert selection.adaptive_select([], ["a".split()]) == []
    rng = random.Random(0)
    for _ in range(500):
        vocab = [f"w{i}" for i in range(rng.randint(2, 12))]
        query = [rng.choice(vocab) for _ in range(rng.randint(1, 15))]
        cands = [[rng.choice(vocab) for _ in range(rng.randint(0, 8))] for _ in range(rng.randint(0, 16))]
        chosen = selection.adaptive_select(query, cands)
        assert chosen == _alg1_literal(query, cands)
        assert chosen == sorted(set(chosen))
        covs = [selection.coverage(query, [cands[p] for p in chosen[:j]]) for j in range(len(chosen) + 1)]
        assert all(b > a for a, b in zip(covs, covs[1:]))            # each selection strictly increases c
        assert covs[-1] == selection.coverage(query, cands)                  # ... up to the coverage of all of them
        # and coverage never decreases along the candidate list either
        seen = [selection.coverage(query, [cands[p] for p in chosen if p <= k]) for k in range(len(cands))]
        assert all(b >= a for a, b in zip(seen, seen[1:]))


def test_ties_are_broken_by_memory_index(tmp_path):
    tv = pytest.importorskip("tantivy")
    # an index whose documents are stored in reverse line order: the engine's own tie order (document
    # id) is then the opposite of the memory order, and search must still return the lowest lines
    lines = ["a b c"] * 6 + ["a b c d"] * 2 + ["z"]
    folder = str(tmp_path / "rev")
    sb = tv.SchemaBuilder()
    sb.add_text_field(tm_engines.TEXT_FIELD, tokenizer_name="whitespace", index_option="freq")
    sb.add_unsigned_field(tm_engines.LINE_FIELD, fast=True)
    os.makedirs(folder)
    index = tv.Index(sb.build(), path=folder, reuse=False)
    w = index.writer(heap_size=50_000_000, num_threads=1)
    for i in reversed(range(len(lines))):
        doc = tv.Document()
        doc.add_unsigned(tm_engines.LINE_FIELD, i)
        doc.add_text(tm_engines.TEXT_FIELD, lines[i])
        w.add_document(doc)
    w.commit()
    w.wait_merging_threads()
    r = tm_engines.TantivyRetriever(folder)
    assert [i for i, _ in r.search(["a", "b", "c"], 3)] == [0, 1, 2]
    assert [i for i, _ in r.search(["a", "b", "c"], 7)] == [0, 1, 2, 3, 4, 5, 6]
    # re-ranking ties: same fuzzy, same BM25 -> memory index ascending
    ranked = selection.rerank(["a", "b", "c"], [(5, 1.0), (2, 1.0), (7, 1.0), (4, 2.0)],
                       [["a", "b", "c"]] * 6 + [["a", "b", "c", "d"]] * 2)
    assert [c.index for c in ranked] == [4, 2, 5, 7]


def test_reserved_characters_empty_and_punctuation_lines(tiny_index, tmp_path):
    src, folder = tiny_index
    queries = ['Y dijo: "(venid) * AND OR NOT -mal +bien ^2 ~1 [a TO b] {x} \\ / title:rey ¿qué? ¡sí!',
               "", "  ", "... : ; !", 'AND y OR', 'Dios:* "']
    _write(tmp_path / "q.es", queries)
    out = tmp_path / "bin"
    assert tm.main(["retrieve", "--index", folder, "--memory-src", src, "--query", str(tmp_path / "q.es"),
                    "--out-dir", str(out), "--split", "test"]) == 0
    entries, meta = read_tm(str(out), "test", split_lines=len(queries), memory_lines=209)
    assert entries[0].ids and entries[4].ids and entries[5].ids       # the words still retrieve
    assert [len(e.ids) for e in entries[1:4]] == [0, 0, 0]             # empty / punctuation only: nothing
    assert entries[1].adaptive == [] and entries[1].fuzzy == []


# --------------------------------------------------------------------------------------------- the index folder
def test_index_is_reused_and_stale_or_corrupt_refused(tmp_path, capsys):
    mem_a = _write(tmp_path / "a.es", ["el rey de Israel", "la casa de Dios", "y dijo"])
    mem_b = _write(tmp_path / "b.es", ["el rey de Judá", "la casa de Dios", "y dijo"])
    folder = str(tmp_path / "index")
    info = memory_index.build_index(mem_a, folder)
    assert not info["reused"] and info["docs"] == 3
    stamp = json.loads(Path(stamp_path(folder, memory_index.STAMP_STEP)).read_text())
    assert stamp["params"]["memory_lines"] == 3 and stamp["memory_src"] == os.path.abspath(mem_a)
    assert stamp["params"]["memory_sha1"] and stamp["params"]["memory_size"] == os.path.getsize(mem_a)
    before = {p.name: p.stat().st_mtime_ns for p in Path(folder).iterdir()}
    capsys.readouterr()
    assert memory_index.build_index(mem_a, folder)["reused"]
    assert "reused" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in Path(folder).iterdir()} == before

    # stale: built by another version of the tool (another tokenizer)
    sp = Path(stamp_path(folder, memory_index.STAMP_STEP))
    good = sp.read_text()
    sp.write_text(good.replace(json.dumps(tm_engines.TOKENIZER)[1:-1], "whitespace"))
    with pytest.raises(ToolError, match="another version.*tokenizer") as e:
        memory_index.open_index(folder, memory_index.Memory(mem_a))
    assert e.value.path == folder
    sp.write_text(good)

    # stale: built on other data -- build-index and retrieve both refuse, naming the folder
    with pytest.raises(ToolError, match="stale index: built on other data") as e:
        memory_index.build_index(mem_b, folder)
    assert e.value.path == folder
    with pytest.raises(ToolError, match="stale index: built on other data") as e:
        memory_index.open_index(folder, memory_index.Memory(mem_b))
    assert e.value.path == folder
    q = _write(tmp_path / "q.es", ["el rey"])
    assert cli_status(tm.main, ["retrieve", "--index", folder, "--memory-src", mem_b, "--query", q,
                                "--out-dir", str(tmp_path / "bin")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder}: stale index") and "--force" in err
    assert not (tmp_path / "bin" / "q.tm.jsonl").exists()

    # corrupt: a changed index file, a missing one, a missing stamp
    seg = next(p for p in Path(folder).iterdir() if p.suffix == ".idx")
    data = seg.read_bytes()
    seg.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    for call in (lambda: memory_index.open_index(folder, memory_index.Memory(mem_a)), lambda: memory_index.build_index(mem_a, folder)):
        with pytest.raises(ToolError, match=f"corrupt index: file {seg.name} changed") as e:
            call()
        assert e.value.path == folder
    seg.unlink()
    with pytest.raises(ToolError, match="corrupt.*missing") as e:
        memory_index.open_index(folder, memory_index.Memory(mem_a))
    assert e.value.path == folder
    Path(stamp_path(folder, memory_index.STAMP_STEP)).unlink()
    with pytest.raises(ToolError, match="no stamp") as e:
        memory_index.open_index(folder, memory_index.Memory(mem_a))
    assert e.value.path == folder

    # --force rebuilds (here on the other memory), and the index works
    assert not memory_index.build_index(mem_b, folder, force=True)["reused"]
    mem = memory_index.Memory(mem_b)
    assert tm.retrieve_one(memory_index.open_index(folder, mem), mem, ["rey", "de", "Judá"]).ids[0] == 0
    # a folder that is not an index is never deleted, not even with --force
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(ToolError, match="not a translation-memory index"):
        memory_index.build_index(mem_a, str(other), force=True)
    assert (other / "keep.txt").exists()
    with pytest.raises(ToolError, match="no translation-memory index"):
        memory_index.open_index(str(tmp_path / "nowhere"), mem)


# --------------------------------------------------------------------------------------------- CLI
def test_cli_end_to_end_on_the_tiny_slice(tmp_path, capsys):
    tool = BIN / "fairseq-ext-tm"
    folder, out = tmp_path / "index", tmp_path / "bin"
    assert tm.main(["build-index", "--memory-src", str(TINY / "train.es"), "--index", str(folder)]) == 0
    p = run([tool, "retrieve", "--index", folder, "--memory-src", TINY / "train.es", "--query",
             TINY / "test.es", "--out-dir", out, "--split", "test", "--keep", "8"])
    assert "queries/s" in p.stderr
    n_test, n_train = len(read_lines(TINY / "test.es")), len(read_lines(TINY / "train.es"))
    entries, meta = read_tm(str(out), "test", split_lines=n_test, memory_lines=n_train)
    assert len(entries) == n_test == 36
    assert all(len(e.ids) == 8 and set(e.adaptive) <= set(e.ids) for e in entries)
    assert meta["candidates"] == 100 and meta["keep"] == 8 and meta["exclude_self"] is False
    assert meta["memory_sha1"] and meta["tokenizer"] == tm_engines.TOKENIZER

    # deterministic: the same run again (in-process) gives byte-identical side files
    out2 = tmp_path / "bin2"
    assert tm.main(["retrieve", "--index", str(folder), "--memory-src", str(TINY / "train.es"), "--query",
                    str(TINY / "test.es"), "--out-dir", str(out2), "--split", "test", "--keep", "8"]) == 0
    for name in ("test.tm.jsonl", "test.tm.meta.json"):
        assert (out / name).read_bytes() == (out2 / name).read_bytes()

    # the TM baseline: one line per example, the best match's target
    side = str(out / "test.tm.jsonl")
    hyp = tmp_path / "hyp.txt"
    assert cli_status(tm.main, ["tm-baseline", "--side", side, "--memory-tgt", str(TINY / "train.en"),
                                "--out", str(hyp)]) == 0
    tgt = read_lines(TINY / "train.en")
    assert read_lines(hyp) == [tgt[e.ids[0]] for e in entries]
    assert cli_status(tm.main, ["tm-baseline", "--side", side, "--memory-tgt", str(TINY / "test.en"),
                                "--out", str(hyp)]) == 2              # a target side of another size
    assert "another memory" in capsys.readouterr().err

    # select: top-K and adaptive ids, one line per example
    capsys.readouterr()
    assert cli_status(tm.main, ["select", "--side", side, "--selection", "topk", "--k", "2"]) == 0
    res = capsys.readouterr()
    assert res.out.splitlines() == [" ".join(map(str, e.ids[:2])) for e in entries]
    assert cli_status(tm.main, ["select", "--side", side, "--out", str(tmp_path / "ad.txt")]) == 0
    assert read_lines(tmp_path / "ad.txt") == [" ".join(map(str, e.adaptive)) for e in entries]
    assert "adaptive" in capsys.readouterr().err

    # stats: JSON on stdout, optional PNG
    assert cli_status(tm.main, ["stats", "--side", side, "--plot", str(tmp_path / "h.png")]) == 0
    st = json.loads(capsys.readouterr().out)
    top = [e.fuzzy[0] for e in entries]
    assert st["examples"] == 36 and st["top1_ge_0.5"] == sum(s >= 0.5 for s in top)
    assert st["top1_ge_0.7"] == sum(s >= 0.7 for s in top) and sum(st["histogram"]["counts"]) == 36
    assert (tmp_path / "h.png").stat().st_size > 0
    assert cli_status(tm.main, ["stats", "--side", str(tmp_path / "x.jsonl")]) == 2


def test_train_mode_requires_the_memory_as_query(tiny_index, tmp_path, capsys):
    src, folder = tiny_index
    assert cli_status(tm.main, ["retrieve", "--index", folder, "--memory-src", src, "--query",
                                str(TINY / "test.es"), "--out-dir", str(tmp_path), "--train-mode"]) == 2
    assert "--train-mode" in capsys.readouterr().err
    assert tm.main(["retrieve", "--index", folder, "--memory-src", src, "--query", src,
                    "--out-dir", str(tmp_path), "--train-mode", "--keep", "4"]) == 0
    entries, meta = read_tm(str(tmp_path), "train", split_lines=209, memory_lines=209)
    assert meta["exclude_self"] is True
    assert all(i not in e.ids for i, e in enumerate(entries)) and all(len(e.ids) == 4 for e in entries)

"""Gu (2018) ch. 4 retrieval stage: the two BM25 engines of ``fairseq-ext-tm`` (fairseq_ext.tools.tm.tm_engines).

The ``numpy`` engine reproduces tantivy's BM25: a one-term query scores bit for bit as tantivy does (idf,
the one-byte length norm past 40 terms, the boost of a repeated query term), a many-term query to float
tolerance; both engines give the same ranked candidates and the same written answers (kept candidates,
fuzzy scores, Algorithm 1) on the tiny Bible slice and on random memories full of ties; ties -- at the
cut-off too -- go to the lowest memory line whatever the batch; a batch answers as its queries one by one;
the top-n selection equals a full sort of every line's score; ``--engine`` on the command line.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from fairseq_ext.tools.tm import memory_index
from fairseq_ext.tools.tm import retrieval as tm
from fairseq_ext.tools.tm import tm_engines
from fairseq_ext.tools.common import ToolError, read_lines

from harness import TINY
from test_retrieval import _index, _write


def _engines(tmp_path, lines):
    """``(memory, numpy retriever, tantivy retriever)`` of a memory of ``lines``."""
    mem, npy = _index(tmp_path, lines)
    return mem, npy, memory_index.open_index(str(tmp_path / "idx"), mem, "tantivy")


def _random_memory(rng, n_lines, vocab, max_len):
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, max_len))) for _ in range(n_lines)]


def _reference_top(engine, tokens, n):
    """Every line's score (numpy engine), fully sorted by (score desc, line asc): the top n."""
    scores = engine.score_matrix([engine.query_terms(tokens)])[0]
    lines = [i for i in range(len(scores)) if scores[i] > 0]
    lines.sort(key=lambda i: (-scores[i], i))
    return [(i, float(scores[i])) for i in lines[:n]]


def test_fieldnorm_table_is_one_byte_and_exact_up_to_40():
    table = tm_engines.fieldnorm_table()
    assert len(table) == 256 and table[0] == 0 and list(table[:41]) == list(range(41))
    assert list(table[41:49]) == [42, 44, 46, 48, 50, 52, 54, 56] and table[49] == 60
    assert table[-1] == 2_013_265_944 and all(np.diff(table) > 0)


def test_one_term_scores_are_tantivys_bit_for_bit(tmp_path):
    """A one-term query scores each line by that term alone: tantivy's single-precision value exactly --
    over short and long lines (lengths past 40 are quantised), repeated terms in a line, and a query
    term repeated (its weight boosted by the count)."""
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(30)] + ["y"] * 20 + ["de"] * 10        # frequent and rare terms
    lines = _random_memory(rng, 150, vocab, 12) + _random_memory(rng, 30, vocab, 120) + ["", ". , ;"]
    mem, npy, tv = _engines(tmp_path, lines)
    for term in ["y", "de", "w0", "w7", "w29"]:
        for count in (1, 2, 3):
            q = [term] * count
            want = tv.search(q, 500)
            got = npy.search(q, 500)
            assert [i for i, _ in got] == [i for i, _ in want], (term, count)
            assert [s for _, s in got] == [s for _, s in want], (term, count)    # the same float32 values
    assert npy.search(["absent"], 10) == tv.search(["absent"], 10) == []
    assert npy.search([",", "."], 10) == []


def test_many_term_scores_and_ranking_equal_tantivys(tmp_path):
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(40)] + ["y"] * 30 + ["de"] * 15 + ["la"] * 8
    lines = _random_memory(rng, 300, vocab, 25) + _random_memory(rng, 20, vocab, 90)
    mem, npy, tv = _engines(tmp_path, lines)
    for _ in range(60):
        q = tm_engines.tokenize(" ".join(rng.choice(vocab + ["nuevo", ","]) for _ in range(rng.randint(1, 20))))
        for n in (1, 10, 100, 400):
            want = tv.search(q, n)
            got = npy.search(q, n)
            assert [i for i, _ in got] == [i for i, _ in want], (q, n)
            assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-6, abs=0)
            assert got == _reference_top(npy, q, n)


def test_ties_go_to_the_lowest_line_at_the_cut_off_and_in_any_batch(tmp_path):
    lines = ["a b c"] * 6 + ["a b c d"] * 2 + ["z"] + ["a b c"] * 5 + ["c"] * 3
    mem, npy, tv = _engines(tmp_path, lines)
    q = ["a", "b", "c"]
    assert [i for i, _ in npy.search(q, 3)] == [0, 1, 2]
    assert [i for i, _ in npy.search(q, 8)] == [0, 1, 2, 3, 4, 5, 9, 10]
    for n in (1, 3, 7, 12, 20):
        assert npy.search(q, n) == [(i, s) for i, s in _reference_top(npy, q, n)]
        assert [i for i, _ in npy.search(q, n)] == [i for i, _ in tv.search(q, n)]
    # the same answer whatever the other queries of the batch
    batch = [["z"], q, ["c", "c"], [], q, ["d"]]
    together = npy.search_batch(batch, 7)
    for toks, (idx, scores) in zip(batch, together):
        alone = npy.search_arrays(toks, 7)
        assert idx.tolist() == alone[0].tolist() and scores.tolist() == alone[1].tolist()
    # re-ranking ties (same fuzzy, same BM25) also go to the lowest line
    e = tm.retrieve_one(npy, mem, q, candidates=8, keep=8)
    assert e.ids == [0, 1, 2, 3, 4, 5, 9, 10]


@pytest.mark.parametrize("probe", [1, 10, 1000])
def test_top_n_is_a_full_sort_of_every_score(tmp_path, monkeypatch, probe):
    """The lower bound of the n-th score (over the rarest terms' lines) never loses a line."""
    monkeypatch.setattr(tm_engines.NumpyRetriever, "PROBE", probe)
    rng = random.Random(probe)
    vocab = ["a", "b", "c", "d", "e", "f", "g", "h"] + ["y"] * 12
    lines = _random_memory(rng, 400, vocab, 10)
    mem, npy, _ = _engines(tmp_path, lines)
    queries = [tm_engines.tokenize(" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 8)))) for _ in range(40)]
    for n in (1, 5, 50, 399, 1000):
        for toks, (idx, scores) in zip(queries, npy.search_batch(queries, n)):
            assert list(zip(idx.tolist(), scores.tolist())) == _reference_top(npy, toks, n)


def test_both_engines_write_the_same_answers_on_the_tiny_slice(tmp_path):
    src = str(TINY / "train.es")
    folder = str(tmp_path / "index")
    memory_index.build_index(src, folder)
    mem = memory_index.Memory(src)
    queries = read_lines(TINY / "test.es") + read_lines(TINY / "valid.es")
    npy, tv = memory_index.open_index(folder, mem, "numpy"), memory_index.open_index(folder, mem, "tantivy")
    for kwargs in ({}, {"candidates": 20, "keep": 20}):
        a = tm.retrieve_split(npy, mem, queries, **kwargs)[0]
        b = tm.retrieve_split(tv, mem, queries, **kwargs)[0]
        assert a == b and len(a) == len(queries)
    # training mode: the own line excluded, batches of any size
    a = tm.retrieve_split(npy, mem, mem.lines, exclude_self=True, batch=7)[0]
    b = tm.retrieve_split(tv, mem, mem.lines, exclude_self=True)[0]
    assert a == b and all(i not in e.ids for i, e in enumerate(a))


def test_engine_option_and_errors(tmp_path, capsys):
    src = str(TINY / "train.es")
    folder = str(tmp_path / "index")
    assert tm.main(["build-index", "--memory-src", src, "--index", folder]) == 0
    outs = {}
    for engine in ("numpy", "tantivy", None):
        out = tmp_path / f"bin_{engine}"
        argv = ["retrieve", "--index", folder, "--memory-src", src, "--query", str(TINY / "test.es"),
                "--out-dir", str(out), "--split", "test"] + (["--engine", engine] if engine else [])
        capsys.readouterr()
        assert tm.main(argv) == 0
        err = capsys.readouterr().err
        assert "queries/s" in err and f"{engine or tm_engines.DEFAULT_ENGINE} BM25" in err
        outs[engine] = (out / "test.tm.jsonl").read_bytes()
    assert outs["numpy"] == outs["tantivy"] == outs[None]
    with pytest.raises(SystemExit) as e:
        tm.main(["retrieve", "--index", folder, "--memory-src", src, "--query", str(TINY / "test.es"),
                 "--out-dir", str(tmp_path), "--engine", "lucene"])
    assert e.value.code == 2 and "invalid choice: 'lucene'" in capsys.readouterr().err
    with pytest.raises(ToolError, match="unknown engine"):
        memory_index.open_index(folder, memory_index.Memory(src), "lucene")
    # a stale index is refused by the numpy engine too (it is checked even though not searched)
    other = _write(tmp_path / "other.es", ["el rey de Israel"])
    with pytest.raises(ToolError, match="stale index"):
        memory_index.open_index(folder, memory_index.Memory(other), "numpy")

"""Gu (2018) ch. 4 retrieval stage (``fairseq-ext-tm retrieve``): the fast path answers exactly as the definition.

The reference here is the retrieval written out the slow way: every memory line's BM25 score
(``score_matrix``), a full sort by (score desc, line asc) for the top ``--candidates``, Eq. 4.1 by
:func:`~fairseq_ext.tools.tm.selection.fuzzy_score` on the token strings with a full sort by (fuzzy desc,
BM25 desc, line asc) for the best ``--keep``, and Algorithm 1 as printed (the union erratum). ``retrieve_split``
must write the same kept ids, the same fuzzy scores (as doubles) and the same adaptive selection for every
query -- on the tiny Bible slice (test + valid queries, and the training split in training mode) and on a
synthetic memory of perturbed verses full of near-duplicates and ties -- whatever the batch size and the
size of the lower-bound probe of the BM25 top-n.
"""
from __future__ import annotations

import random

import pytest

from fairseq_ext.tools.tm import retrieval as tm
from fairseq_ext.tools.tm import tm_engines
from fairseq_ext.tools.tm.selection import fuzzy_score
from fairseq_ext.tools.common import read_lines

from harness import TINY
from test_retrieval import _alg1_literal, _index


def _reference(engine, mem, queries, candidates, keep, exclude_self=False):
    """``[(ids, fuzzy, adaptive)]`` of every query, computed the slow way (see the module docstring)."""
    out = []
    for qi, text in enumerate(queries):
        toks = tm_engines.tokenize(text)
        scores = engine.score_matrix([engine.query_terms(toks)])[0].tolist()
        lines = [i for i, s in enumerate(scores) if s > 0 and not (exclude_self and i == qi)]
        lines.sort(key=lambda i: (-scores[i], i))
        ranked = sorted(((fuzzy_score(toks, mem.tokens[i]), scores[i], i) for i in lines[:candidates]),
                        key=lambda f_s_i: (-f_s_i[0], -f_s_i[1], f_s_i[2]))[:keep]
        ids = [i for _, _, i in ranked]
        chosen = _alg1_literal(toks, [mem.tokens[i] for i in ids]) if toks else []
        out.append((ids, [f for f, _, _ in ranked], [ids[k] for k in chosen]))
    return out


def _answers(entries):
    return [(e.ids, e.fuzzy, e.adaptive) for e in entries]


def _perturbed(rng, lines, n):
    """``n`` lines made from ``lines``: a random verse with words dropped, repeated or swapped."""
    out = []
    for _ in range(n):
        words = rng.choice(lines).split()
        for _ in range(rng.randint(0, 3)):
            if not words:
                break
            j = rng.randrange(len(words))
            op = rng.random()
            if op < 0.4:
                del words[j]
            elif op < 0.7:
                words.insert(j, words[j])
            else:
                k = rng.randrange(len(words))
                words[j], words[k] = words[k], words[j]
        out.append(" ".join(words))
    return out


@pytest.mark.parametrize("probe,batch", [(1, 1), (3, 16), (10, 5)])
def test_tiny_slice_answers_equal_the_slow_definition(tmp_path, monkeypatch, probe, batch):
    monkeypatch.setattr(tm_engines.NumpyRetriever, "PROBE", probe)
    train = read_lines(TINY / "train.es")
    mem, npy = _index(tmp_path, train)
    queries = read_lines(TINY / "test.es") + read_lines(TINY / "valid.es")
    for cand, keep in ((100, 16), (7, 3)):
        got, _ = tm.retrieve_split(npy, mem, queries, candidates=cand, keep=keep, log_every=0, batch=batch)
        assert _answers(got) == _reference(npy, mem, queries, cand, keep)
    got, _ = tm.retrieve_split(npy, mem, train, candidates=100, keep=16, exclude_self=True, log_every=0,
                               batch=batch)
    assert _answers(got) == _reference(npy, mem, train, 100, 16, exclude_self=True)


def test_synthetic_memory_answers_equal_the_slow_definition(tmp_path):
    """3,000 perturbed verses (many near-duplicates: ties in BM25 and in Eq. 4.1), 150 perturbed queries."""
    rng = random.Random(7)
    verses = read_lines(TINY / "train.es") + read_lines(TINY / "valid.es")
    memory = _perturbed(rng, verses, 3000) + ["", "y y y y", "."]
    queries = _perturbed(rng, verses + read_lines(TINY / "test.es"), 150) + ["", "y", "de la y que", "zzz"]
    mem, npy = _index(tmp_path, memory)
    got, _ = tm.retrieve_split(npy, mem, queries, candidates=100, keep=16, log_every=0)
    assert _answers(got) == _reference(npy, mem, queries, 100, 16)
    assert sum(len(e.ids) == 16 for e in got) > 140        # the memory answers most queries in full

r"""METEOR with exact and Porter-stem matching only (nltk 3.9), labelled :data:`METEOR_LABEL`: the METEOR
of Maruf (2019)'s document-level results (chs. 3-4), not comparable to METEOR 1.5 (no WordNet synonyms, no
paraphrases).

:func:`meteor_sentence` scores one hypothesis against its references (the best one counts);
:func:`meteor_corpus` is the mean of the sentence scores, x100. ``fairseq-ext-score meteor``
(:mod:`fairseq_ext.tools.evaluation.score`) runs it on files. nltk is imported only when it is called.
"""
from __future__ import annotations

from typing import Any, Sequence

from fairseq_ext.tools.common import ToolError
from fairseq_ext.tools.evaluation.bleu import Refs, reference_streams

__all__ = ["METEOR_LABEL", "meteor_sentence", "meteor_corpus"]

METEOR_LABEL = "METEOR (exact+stem, nltk; not comparable to METEOR 1.5)"


class _NoSynonyms:
    """A WordNet stand-in without synonyms: nltk's METEOR then matches exact and Porter-stem only and
    never loads (or downloads) WordNet."""

    def synsets(self, *args: Any, **kwargs: Any) -> list:
        return []


def _meteor_tokens(text: str, tokenised: bool) -> list[str]:
    if tokenised:
        return text.split()
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()(text).split()


def meteor_sentence(hyp: str, refs: Sequence[str], tokenised: bool = False) -> float:
    """nltk METEOR (exact + stem) of one hypothesis against its references (the best one counts)."""
    from nltk.stem.porter import PorterStemmer
    from nltk.translate.meteor_score import meteor_score

    return float(meteor_score([_meteor_tokens(r, tokenised) for r in refs], _meteor_tokens(hyp, tokenised),
                              stemmer=PorterStemmer(), wordnet=_NoSynonyms()))


def meteor_corpus(hyps: Sequence[str], refs: Refs, tokenised: bool = False) -> dict[str, Any]:
    """Mean sentence METEOR (exact + stem, nltk) over the corpus, x100, with its label and settings."""
    try:
        import nltk
        from nltk.stem.porter import PorterStemmer
        from nltk.translate.meteor_score import meteor_score
    except ImportError:
        raise ToolError("METEOR needs nltk: pip install nltk==3.9.1") from None
    hyps = list(hyps)
    streams = reference_streams(refs, len(hyps))
    stemmer, wn = PorterStemmer(), _NoSynonyms()
    scores = []
    for i, h in enumerate(hyps):
        rs = [_meteor_tokens(s[i], tokenised) for s in streams]
        scores.append(float(meteor_score(rs, _meteor_tokens(h, tokenised), stemmer=stemmer, wordnet=wn)))
    mean = 100.0 * sum(scores) / len(scores)
    return {
        "meteor": mean,
        "meteor_label": METEOR_LABEL,
        "meteor_str": f"{METEOR_LABEL} = {mean:.2f}",
        "sentence_scores": scores,
        "corpus": "mean of sentence scores",
        "matching": "exact + Porter stem (no WordNet synonyms, no paraphrases)",
        "params": {"alpha": 0.9, "beta": 3.0, "gamma": 0.5, "lowercase": True},
        "tokenizer": "whitespace" if tokenised else "13a",
        "nltk_version": nltk.__version__,
        "n_sentences": len(hyps),
        "n_refs": len(streams),
    }

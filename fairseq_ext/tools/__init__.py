"""fairseq_ext.tools: the offline command-line tools (nothing here is used while fairseq trains).

Each tool module is ``python -m fairseq_ext.tools.<package>.<name>`` and most have a console script
``fairseq-ext-<name>``, with one convention (:mod:`fairseq_ext.tools.common`: ``main(argv)``,
``error: FILE:LINE: message`` and exit status 2 on bad input, progress on stderr).  Nothing is imported here:
a tool loads only what it needs.  The tools are grouped by what you do with them; the docstring of each
sub-package lists its modules:

=================  ============================================================================================
package / module   what
=================  ============================================================================================
``corpora``        prepare what a training run reads: corpora (``fairseq-ext-data``), segmentation,
                   binarization, and the thesis-specific inputs (transfer vocabularies, fertilities, lexicons,
                   ULR embeddings, synthetic and back-translated corpora, document context)
``evaluation``     score translations: BLEU/chrF/METEOR/d-BLEU, contrastive sets, consistency, latency;
                   reading fairseq's logs and running the recipes' command lines
``analysis``       look inside a trained model: attention statistics, copy heatmaps, learned lexicons, TM bins,
                   diagnostic corpora of each mechanism
``tm``             Gu ch. 4: the translation memory (``fairseq-ext-tm``): index, fuzzy re-rank, selection
``export``         use a trained model outside fairseq: CTranslate2 export, translation, SimulEval agent
``chapters``       one chapter's pipeline, data helpers and report (``examples/<topic>/report.py``)
``common``         the CLI convention, line/JSON I/O, atomic outputs, step stamps (every tool)
``hypotheses``     reading fairseq-generate output (corpora, evaluation, analysis and export use it)
``plots``          matplotlib helpers (corpora, evaluation, analysis and tm use them)
=================  ============================================================================================

Imports go one way: ``chapters`` may use every other package; ``analysis`` may use ``corpora``, ``evaluation``
and ``tm``; ``evaluation`` and ``export`` may use ``corpora``; every package uses the three shared modules above
(``tests/test_layout.py``).
"""

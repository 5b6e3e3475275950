"""Simultaneous NMT with a learned READ/WRITE agent (Gu 2019, ch. 9; Gu, Neubig, Cho, Li 2017), one concern a
module:

* :mod:`~fairseq_ext.modules.simultaneous.environment` -- the NMT environment on a frozen uni-directional
  ``rnnsearch`` (§9.3.1, Eqs. 9.1–9.3): :class:`~fairseq_ext.modules.simultaneous.environment.SimulEnvironment`;
* :mod:`~fairseq_ext.modules.simultaneous.agent` -- the recurrent agent and its baseline (§9.3.2, Eq. 9.4);
* :mod:`~fairseq_ext.modules.simultaneous.rewards` -- sentence BLEU⁰ and the quality and delay rewards
  (§9.4.2, Eqs. 9.5–9.9);
* :mod:`~fairseq_ext.modules.simultaneous.policies` -- the policies: the agent and the WUE / WOS / WIW / WID /
  wait-k baselines;
* :mod:`~fairseq_ext.modules.simultaneous.search` -- simultaneous greedy decoding (Alg. 4) and simultaneous
  beam search (§9.3.3);
* :mod:`~fairseq_ext.modules.simultaneous.streaming` -- greedy decoding of a source that arrives token by
  token (the core of the SimulEval agent).

The latency metrics (AP Eq. 9.7, CW, AL, LAAL, DAL, AL_CA) and the READ/WRITE codes are in
:mod:`fairseq_ext.modules.latency`.

References: Gu, Neubig, Cho, Li, "Learning to Translate in Real-time with Neural Machine Translation",
EACL 2017; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019
(ch. 9); Cho, Esipova, "Can neural machine translation do simultaneous translation?", 2016; Ma et al.,
"STACL: Simultaneous Translation with Implicit Anticipation and Controllable Latency using
Prefix-to-Prefix Framework", ACL 2019; Cherry, Foster, "Thinking Slow about Latency Evaluation for
Simultaneous Machine Translation", 2019; Lin, Och, "ORANGE: a Method for Evaluating Automatic Evaluation
Metrics for Machine Translation", COLING 2004; Mnih, Gregor, "Neural Variational Inference and Learning
in Belief Networks", ICML 2014.
"""

"""Optional extra: a SimulEval (v1.1+) text-to-text agent around the simultaneous decoders of Gu (2019, ch. 9),
for cross-checking AP/AL/DAL with SimulEval's own scorers.

SimulEval is **not** a dependency of the plugin (it pins an older ``bitarray`` than fairseq's); install it in
a separate environment with the plugin (``pip install -e ".[simuleval]"``, SimulEval 1.1.4) and run::

    simuleval --agent fairseq_ext/tools/export/simuleval_agent.py \\
        --checkpoint AGENT.pt --data-bin DATA_BIN --spm SRC_SPM.model \\
        --simul-policy agent --source SRC.txt --target REF.txt --output OUT

The agent (:class:`SimulAgentText`, defined only when ``simuleval`` can be imported) segments each incoming
source word with the source sentencepiece model (``--spm``; without it the words are looked up as they are),
feeds the subword ids to :class:`fairseq_ext.modules.simultaneous.streaming.StreamingSimulTranslator` (the same
environment and policy as ``fairseq-generate --task simul_rl_translation``: a READ of the environment is one
subword, so a SimulEval READ is asked for only when the buffered subwords are used up) and writes complete
words (sentencepiece ``▁`` boundaries; the last word when ⟨/s⟩ is written). SimulEval then measures latency
in *words*, whereas ``--simul-actions-out`` / :mod:`fairseq_ext.tools.evaluation.simul_latency` count subwords
with ⟨/s⟩.

SimulEval is not installed in the plugin's test environment: ``tests/test_simultaneous.py`` runs this adapter
on a stub of the SimulEval v1.1 API it imports (``GenericAgent.__init__`` calling :meth:`reset`, ``pushpop``,
the evaluator's one-word-per-step loop) and checks that its WRITEs are the offline simultaneous decoding of
the sentence; the streaming core it wraps is tested there too.
"""
from __future__ import annotations

from typing import List, Optional

try:  # pragma: no cover - depends on the optional package
    from simuleval.agents import TextToTextAgent
    from simuleval.agents.actions import ReadAction, WriteAction
    from simuleval.utils import entrypoint
except ImportError:  # the plugin's own environment
    TextToTextAgent = ReadAction = WriteAction = entrypoint = None


def simuleval_available() -> bool:
    return TextToTextAgent is not None


def require_simuleval() -> None:
    if not simuleval_available():
        raise ImportError("the SimulEval adapter needs SimulEval, an optional extra not installed with the plugin: "
                          "pip install -e '.[simuleval]' (in a separate environment: it pins an older bitarray)")


def load_translator(checkpoint: str, data_bin: str, policy: str = "agent", waitk: int = 3, max_len: int = 200,
                    cpu: bool = True):
    """``(translator, task)``: a :class:`StreamingSimulTranslator` on the checkpoint (a ``simul_agent`` or, for
    the baselines, a uni-directional ``rnnsearch``)."""
    import fairseq_ext  # noqa: F401  (registrations)
    from fairseq_ext.modules.checkpoint import load_ensemble
    from fairseq_ext.modules.simultaneous.streaming import StreamingSimulTranslator

    models, _, task = load_ensemble([checkpoint], arg_overrides={"data": data_bin}, frozen=True, use_cuda=not cpu)
    return StreamingSimulTranslator(models[0], policy, waitk=waitk, max_len=max_len), task


if TextToTextAgent is not None:  # pragma: no cover - depends on the optional package

    @entrypoint
    class SimulAgentText(TextToTextAgent):
        """SimulEval text agent (module doc)."""

        def __init__(self, args):
            # SimulEval's GenericAgent.__init__ builds the states and calls self.reset(), which resets the
            # translator and this adapter's buffers: they must exist before super().__init__ runs
            self.translator, task = load_translator(args.checkpoint, args.data_bin, args.simul_policy,
                                                    args.simul_waitk, args.max_len, not args.gpu)
            self.src_dict, self.tgt_dict = task.source_dictionary, task.target_dictionary
            self.spm = None
            if args.spm:
                import sentencepiece

                self.spm = sentencepiece.SentencePieceProcessor(model_file=args.spm)
            self.pending: List[str] = []  # target subwords written but not yet sent (an incomplete last word)
            self.fed = 0  # source words of self.states.source already pushed to the translator
            super().__init__(args)

        @staticmethod
        def add_args(parser):
            parser.add_argument("--checkpoint", required=True, help="simul_agent (or uni rnnsearch) checkpoint")
            parser.add_argument("--data-bin", required=True, help="the binarized data folder (dictionaries)")
            parser.add_argument("--spm", default=None, help="source sentencepiece model")
            parser.add_argument("--simul-policy", default="agent", choices=("agent", "wue", "wos", "waitk"))
            parser.add_argument("--simul-waitk", type=int, default=3)
            parser.add_argument("--max-len", type=int, default=200)
            parser.add_argument("--gpu", action="store_true")

        def reset(self):
            super().reset()
            self.translator.reset()
            self.pending = []
            self.fed = 0

        def encode(self, word: str) -> List[int]:
            pieces = self.spm.encode(word, out_type=str) if self.spm is not None else [word]
            return [self.src_dict.index(p) for p in pieces]

        def complete_words(self, final: bool) -> Optional[str]:
            """The buffered target subwords that form complete words (all of them when ``final``)."""
            cut = len(self.pending) if final else max(
                (i for i, p in enumerate(self.pending) if p.startswith("\u2581") and i > 0), default=0)
            if cut == 0:
                return None
            text = "".join(self.pending[:cut]).replace("\u2581", " ").strip()
            self.pending = self.pending[cut:]
            return text or None

        def policy(self):
            words = self.states.source[self.fed:]
            self.fed = len(self.states.source)
            ids = [i for w in words for i in self.encode(w)]
            if ids or (self.states.source_finished and not self.translator.source_finished):
                self.translator.push(ids, finished=self.states.source_finished)
            out = self.translator.pop()
            eos = self.tgt_dict.eos()
            self.pending += [self.tgt_dict[t] for t in out if t != eos]
            text = self.complete_words(self.translator.finished)
            if text is not None or self.translator.finished:
                return WriteAction(text or "", finished=self.translator.finished)
            return ReadAction()

else:
    SimulAgentText = None

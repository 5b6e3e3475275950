"""``simul_rl_translation``: simultaneous NMT with a learned READ/WRITE agent (Gu 2019, ch. 9) —
``translation_decoding`` whose decoding is simultaneous, for the ``simul_agent`` model and the
``simul_policy_gradient`` criterion.

Training (Alg. 5): ``fairseq-train DATA --task simul_rl_translation --arch simul_agent --nmt-path NMT.pt
--criterion simul_policy_gradient --optimizer adam --lr 2e-4 --clip-norm 1.0 --batch-size 10
--required-batch-size-multiple 1`` (10 sentences per batch — fairseq rounds ``--batch-size`` down to a
multiple of 8 otherwise — with ``--traj-per-sent`` 5 sampled trajectories each; the released code clips
gradients); the criterion runs the rollouts on the frozen environment
(:mod:`fairseq_ext.criterions.simul_policy_gradient`). Validation decodes with the argmax agent; the
thesis selects, per delay target, the checkpoint with the best BLEU/AP on the validation set:
``--best-checkpoint-metric bleu_over_ap --maximize-best-checkpoint-metric``. The NMT is trained first, e.g.
``fairseq-train DATA --task translation_decoding --arch rnnsearch_gu_wmt15_uni --criterion cross_entropy ...``.

Decoding (``fairseq-generate`` / ``fairseq-interactive``; :mod:`fairseq_ext.generators.simultaneous`):

* ``--simul-policy agent`` (default; ``--path AGENT.pt``) or a baseline ``wue | wos | wiw | wid | waitk``
  (``--simul-waitk`` k) on the same environment (``--path`` a ``simul_agent`` or a plain uni-directional
  ``rnnsearch`` checkpoint);
* ``--simul-decoding simul_greedy`` (Alg. 4) or ``simul_beam`` (§9.3.3, ``--simul-beam`` K hypotheses within
  each run of WRITEs);
* ``--simul-actions-out FILE``: one JSON line per sentence ``{"id", "src_len", "tgt_len", "actions",
  "delays", "ap", "cw", "al", "dal"}`` (``id`` fairseq's sentence id; a running number in
  ``fairseq-interactive``; lengths in subwords with ⟨/s⟩; ``actions`` the policy's R/W decisions after the
  pre-read of x_1), which ``python -m fairseq_ext.tools.evaluation.simul_latency FILE`` turns into corpus AP/CW/AL/DAL.

fairseq's ``--max-len-a/-b``, ``--max-len`` and ``--min-len`` bound the output (per sentence); the plain
``--decoding-algorithm`` / ``--beam`` of ``translation_decoding`` are not used (``--score-reference`` is).
"""
import json
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from fairseq_ext.modules.generation_options import generation_option
from fairseq_ext.generators.decoding import length_limits
from fairseq_ext.generators.simultaneous import SIMUL_DECODERS, SimultaneousGenerator
from fairseq_ext.modules.simultaneous.policies import POLICIES
from fairseq_ext.tasks.translation_decoding import TranslationDecodingConfig, TranslationDecodingTask


@dataclass
class SimulRLTranslationConfig(TranslationDecodingConfig):
    simul_policy: ChoiceEnum(POLICIES) = field(
        default="agent", metadata={"help": "READ/WRITE policy: the learned agent (a simul_agent checkpoint) or a "
                                           "baseline (wue: wait until end, wos: wait one step, wiw/wid: wait if "
                                           "worse/diff, waitk: wait-k)"})
    simul_waitk: int = field(default=3, metadata={"help": "k of --simul-policy waitk"})
    simul_decoding: ChoiceEnum(SIMUL_DECODERS) = field(
        default="simul_greedy", metadata={"help": "simul_greedy (Alg. 4) or simul_beam (beam search within runs "
                                                  "of WRITEs, collapsed on READ)"})
    simul_beam: int = field(default=5, metadata={"help": "beam size of simul_beam"})
    simul_actions_out: Optional[str] = field(
        default=None, metadata={"help": "write each sentence's READ/WRITE actions, delays and AP/CW/AL/DAL to this "
                                        "JSON Lines file"})


@register_task("simul_rl_translation", dataclass=SimulRLTranslationConfig)
class SimulRLTranslationTask(TranslationDecodingTask):
    """``translation_decoding`` with simultaneous decoding and the actions export (module doc)."""

    cfg: SimulRLTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.actions_file = None
        self.actions_lines = 0

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        if generation_option(args, "score_reference"):
            return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                           extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
        beam = 1 if self.cfg.simul_decoding == "simul_greedy" else self.cfg.simul_beam
        return SimultaneousGenerator(models, self.target_dictionary, policy=self.cfg.simul_policy, beam_size=beam,
                                     waitk=self.cfg.simul_waitk, **length_limits(args))

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        results = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                         constraints=constraints)
        if self.cfg.simul_actions_out and isinstance(generator, SimultaneousGenerator):
            self.write_actions(sample, results)
        return results

    def write_actions(self, sample, results) -> None:
        """Append one JSON line per sentence of the batch (module doc); an empty source (⟨/s⟩ only) reads
        ⟨/s⟩ and writes ⟨/s⟩."""
        B = len(results)
        ids = sample["id"].tolist() if "id" in sample else list(range(self.actions_lines, self.actions_lines + B))
        self.actions_lines += B
        if self.actions_file is None:
            self.actions_file = open(self.cfg.simul_actions_out, "w", encoding="utf-8")
        for i, hyps in enumerate(results):
            h = hyps[0]
            if "actions" in h:
                rec = {"id": ids[i], "src_len": h["src_len"], "tgt_len": len(h["delays"]), "actions": h["actions"],
                       "delays": h["delays"], **{k: round(v, 6) for k, v in h["latency"].items()}}
            else:
                rec = {"id": ids[i], "src_len": 1, "tgt_len": 1, "actions": "W", "delays": [1], "ap": 1.0,
                       "cw": 0.0, "al": 1.0, "dal": 1.0}
            self.actions_file.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self.actions_file.flush()

"""``trainable_greedy_decoding``: ``translation_decoding`` for the trainable greedy decoder of Gu (2019) ch. 7
(:mod:`fairseq_ext.models.trainable_greedy`, criterion ``actor_critic``).

Training: the ``actor_critic`` criterion asks this task for the greedy part of Alg. 3's DECODE
(:meth:`TrainableGreedyDecodingTask.greedy_rollouts`): the project's greedy decoder
(:class:`fairseq_ext.generators.decoding.GreedyGenerator`, Eq. 2.10, fairseq's length limits and bans)
run on the model as it is (actor and exploration noise included).

Decoding (``fairseq-generate --task trainable_greedy_decoding --path ACTOR.pt``): every
``--decoding-algorithm`` of ``translation_decoding`` (greedy, fairseq's beam, the shrinking beam, NPD)
decodes with the actor, which lives in the model's decoder;

* ``--tg-actor off``: the same decoders with the plain frozen NMT (the comparison rows of Fig. 7.3);
* ``--tg-influence-out FILE``: the influence export of Fig. 7.5 — for the best hypothesis of every
  sentence, per output token (⟨eos⟩ included), KL(p_with ‖ p_without) between the output distributions
  with and without the action, from the same previous state and symbol
  (:meth:`fairseq_ext.models.trainable_greedy.TrainableGreedyModel.influence`). A tab-separated file,
  one line per token after a ``#``-header: ``id  position (1-based)  token  kl  influenced``, where
  ``influenced`` is 1 when kl > ``--tg-influence-threshold`` (0.001, the thesis's colouring rule) and
  ``id`` is fairseq's sentence id (the H-line's; a running line number in ``fairseq-interactive``).
"""
import logging
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from torch import Tensor

from fairseq_ext.generators.decoding import GreedyGenerator
from fairseq_ext.models.trainable_greedy import TrainableGreedyModel
from fairseq_ext.tasks.translation_decoding import TranslationDecodingConfig, TranslationDecodingTask
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)


@dataclass
class TrainableGreedyDecodingConfig(TranslationDecodingConfig):
    tg_actor: ChoiceEnum(["on", "off"]) = field(
        default="on", metadata={"help": "decode a trainable_greedy model with its actor (on) or the plain NMT (off)"})
    tg_influence_out: Optional[str] = field(
        default=None,
        metadata={"help": "write the per-token influence KL(p_with_actor || p_without) of every best hypothesis "
                          "to this TSV file (Fig. 7.5)"})
    tg_influence_threshold: float = field(
        default=0.001, metadata={"help": "influence above which a token is flagged (thesis: 0.001)"})


@register_task("trainable_greedy_decoding", dataclass=TrainableGreedyDecodingConfig)
class TrainableGreedyDecodingTask(TranslationDecodingTask):
    """``translation_decoding`` + the actor switch, the influence export and the training rollouts (module doc)."""

    cfg: TrainableGreedyDecodingConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.influence_file = None
        self.influence_lines = 0

    # ------------------------------------------------------------------ training: Alg. 3's DECODE
    def greedy_rollouts(self, model, encoder_out, src_tokens: Tensor, n_rows: int, max_len_a: float,
                        max_len_b: int) -> List[Tensor]:
        """Greedy decoding (Eq. 2.10) of the ``n_rows`` rows of ``encoder_out`` with ``model`` as it is: each
        hypothesis's tokens, ending in ⟨eos⟩; at most max_len_a·|X| + max_len_b tokens (|X| the padded width
        of ``src_tokens``)."""
        gen = GreedyGenerator([model], self.target_dictionary, max_len_a=max_len_a, max_len_b=max_len_b)
        return [h["tokens"] for h in gen.greedy(encoder_out, n_rows, gen.decode_limit(src_tokens))]

    # ------------------------------------------------------------------ decoding
    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        for m in models:
            if isinstance(m, TrainableGreedyModel):
                m.set_actor_enabled(self.cfg.tg_actor == "on")
            elif self.cfg.tg_actor == "off":
                logger.warning("--tg-actor off: %s has no actor", type(m).__name__)
        return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                       extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        results = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                         constraints=constraints)
        if self.cfg.tg_influence_out:
            self.write_influence(models, sample, results)
        return results

    def write_influence(self, models, sample, results) -> None:
        """Append the influence lines of this batch's best hypotheses (module doc)."""
        model = models[0]
        if len(models) != 1 or not isinstance(model, TrainableGreedyModel):
            raise UserDataError("--tg-influence-out needs one trainable_greedy model (--path ACTOR.pt)")
        src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        B = src_tokens.size(0)
        ids = sample["id"].tolist() if "id" in sample else list(range(self.influence_lines,
                                                                      self.influence_lines + B))
        self.influence_lines += B
        rows = [i for i in range(B) if int(src_lengths[i]) > 1 and results[i]]
        if self.influence_file is None:
            self.influence_file = open(self.cfg.tg_influence_out, "w", encoding="utf-8")
            self.influence_file.write("#id\tposition\ttoken\tkl\tinfluenced\n")
        if not rows:
            return
        hyps = [results[i][0]["tokens"] for i in rows]
        pad = self.target_dictionary.pad()
        tokens = src_tokens.new_full((len(rows), max(h.numel() for h in hyps)), pad)
        for j, h in enumerate(hyps):
            tokens[j, : h.numel()] = h
        keep = torch.tensor(rows, device=src_tokens.device)
        with torch.no_grad():
            kl = model.influence(src_tokens.index_select(0, keep), src_lengths.index_select(0, keep), tokens)
        thr = self.cfg.tg_influence_threshold
        d = self.target_dictionary
        for j, i in enumerate(rows):
            for t, (tok, k) in enumerate(zip(hyps[j].tolist(), kl[j].tolist()), start=1):
                self.influence_file.write(f"{ids[i]}\t{t}\t{d[tok]}\t{k:.6g}\t{int(k > thr)}\n")
        self.influence_file.flush()

"""A trainable head around a frozen ``rnnsearch`` NMT: the shared base of the models that learn to *decode* a
fixed translation model — the trainable greedy decoder's actor and critic (Gu 2019 ch. 7,
:mod:`fairseq_ext.models.trainable_greedy`) and the simultaneous-translation READ/WRITE agent (ch. 9,
:mod:`fairseq_ext.models.simul_agent`).

* ``--nmt-path CKPT`` (:func:`add_nmt_path_arg`, :func:`load_frozen_nmt`): the NMT is loaded with
  :func:`fairseq_ext.modules.checkpoint.load_ensemble` (eval mode, every parameter ``requires_grad=False``, so
  fairseq's optimiser never sees it); the path is stored absolute, so ``fairseq-generate --path HEAD.pt`` finds it
  from any directory (the checkpoint's own copy of the NMT tensors wins over the file, which is read again only
  for the NMT's architecture).
* :class:`FrozenNMTModel`: the NMT's encoder and decoder are the model's ``encoder``/``decoder`` (so ``forward`` is
  the plain NMT and every decoder of the plugin runs on it); they stay in eval mode whatever ``train()`` is
  asked (no dropout in the environment); the update number is kept for the heads' schedules.
"""
import os

from fairseq.models import FairseqEncoderDecoderModel

from fairseq_ext.modules.checkpoint import load_ensemble
from fairseq_ext.data.errors import UserDataError


def add_nmt_path_arg(parser, help: str) -> None:
    parser.add_argument("--nmt-path", metavar="CKPT", help=help)


def load_frozen_nmt(args, task, model_name: str, requirement: str = "an rnnsearch checkpoint"):
    """The frozen NMT of ``args.nmt_path`` (made absolute in ``args``); one clear error when it is missing."""
    if not getattr(args, "nmt_path", None):
        raise UserDataError(f"{model_name} needs the frozen NMT: --nmt-path CKPT ({requirement})")
    args.nmt_path = os.path.abspath(args.nmt_path)
    models, _, _ = load_ensemble([args.nmt_path], task=task, frozen=True)
    return models[0]


class FrozenNMTModel(FairseqEncoderDecoderModel):
    """The frozen NMT's encoder/decoder plus whatever trainable heads a subclass adds (module doc)."""

    def __init__(self, encoder, decoder):
        super().__init__(encoder, decoder)
        self.num_updates = 0

    def train(self, mode: bool = True):
        super().train(mode)
        self.encoder.eval()
        self.decoder.eval()
        return self

    def set_num_updates(self, num_updates):
        self.num_updates = num_updates
        super().set_num_updates(num_updates)

    def max_positions(self):
        return self.encoder.max_positions(), self.decoder.max_positions()

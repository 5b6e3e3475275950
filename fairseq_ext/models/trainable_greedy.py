"""``trainable_greedy``: trainable greedy decoding (Gu 2019, ch. 7) — an actor that steers a frozen ``rnnsearch``
NMT by adding a_t to its decoder state, and the critic that teaches it.

The model is the frozen NMT (``--nmt-path``), the actor π_φ and the critic R^c_ψ
(:mod:`fairseq_ext.modules.actor_critic`). With the actor installed it is an ordinary fairseq
encoder-decoder, so every decoder of the plugin and fairseq's beam search decode with the actor (§7.4.1);
:meth:`set_actor_enabled` decodes with the plain NMT.

Where a_t enters (``--tg-action-site``; §7.2.2, it replaces the noise of Eq. 2.14): ``state`` (default,
the first layer's previous state, the decoder's ``state_action`` hook) or ``output`` (the top layer's
state before the readout, ``output_action``). Training noise (Eq. 7.4) comes through
:meth:`with_action_noise`.

Checkpoints hold the frozen NMT's tensors too; the NMT never reaches the optimiser. The actor's and the
critic's parameters carry ``param_group = "actor" | "critic"`` for :mod:`fairseq_ext.optim.rmsprop`.
:meth:`influence` gives KL(p_with ‖ p_without) per token (Fig. 7.5).

Architectures: ``trainable_greedy`` (the thesis's sizes) and ``trainable_greedy_tiny`` (tests).

References: Gu, Cho, Li, "Trainable Greedy Decoding for Neural Machine Translation", EMNLP 2017; Gu,
"Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019 (ch. 7).
"""
import contextlib
from typing import Dict, List

import torch
from torch import Tensor
from fairseq.models import register_model, register_model_architecture

from fairseq_ext.models.rnnsearch import RNNSearchDecoder
from fairseq_ext.modules.actor_critic import Actor, Critic
from fairseq_ext.modules.arch_utils import set_default
from fairseq_ext.modules.frozen_nmt import FrozenNMTModel, add_nmt_path_arg, load_frozen_nmt
from fairseq_ext.data.errors import UserDataError

ACTION_SITES = ("state", "output")
NOISE_KEY = "tg_action_noise"


@register_model("trainable_greedy")
class TrainableGreedyModel(FrozenNMTModel):
    """Frozen NMT + actor + critic (module doc)."""

    def __init__(self, encoder, decoder, actor: Actor, critic: Critic, site: str = "state"):
        super().__init__(encoder, decoder)
        if site not in ACTION_SITES:
            raise UserDataError(f"--tg-action-site must be one of {ACTION_SITES}, got {site!r}")
        self.actor = actor
        self.critic = critic
        self.site = site
        for p in actor.parameters():
            p.param_group = "actor"
        for p in critic.parameters():
            p.param_group = "critic"
        self.actor_enabled = True
        self.install_actor()

    @staticmethod
    def add_args(parser):
        add_nmt_path_arg(parser, "the frozen rnnsearch NMT checkpoint the actor steers (required)")
        parser.add_argument("--tg-action-site", choices=ACTION_SITES,
                            help="state: a_t added to z_{t-1} before the transition, c_t from the unperturbed "
                                 "state (default); output: added to z_t before the readout")
        parser.add_argument("--actor-hidden-size", "--actor-hidden-dim", dest="actor_hidden_dim", type=int, metavar="N",
                            help="tanh units of the actor (32; --actor-hidden-dim is its earlier spelling)")
        parser.add_argument("--critic-embed-dim", type=int, metavar="N",
                            help="critic embeddings (0: the NMT's decoder embedding size)")
        parser.add_argument("--critic-hidden-size", type=int, metavar="N",
                            help="critic GRU units per direction and in its decoder (0: the NMT's decoder size)")
        parser.add_argument("--critic-attention-dim", type=int, metavar="N",
                            help="critic attention MLP (0: --critic-hidden-size)")

    @classmethod
    def build_model(cls, args, task):
        trainable_greedy(args)
        nmt = load_frozen_nmt(args, task, "trainable_greedy")
        if not isinstance(nmt.decoder, RNNSearchDecoder):
            raise UserDataError(f"--nmt-path {args.nmt_path}: trainable greedy decoding steers an rnnsearch decoder, "
                             f"got {type(nmt.decoder).__name__}")
        dec = nmt.decoder
        H, C, E = dec.hidden_size, dec.context_dim, dec.embed_tokens.embedding_dim
        actor = Actor(H, C, args.actor_hidden_dim)
        hid = args.critic_hidden_size or H
        critic = Critic(len(task.target_dictionary), task.target_dictionary.pad(), H, args.critic_embed_dim or E,
                        hid, args.critic_attention_dim or hid)
        return cls(nmt.encoder, dec, actor, critic, args.tg_action_site)

    # ------------------------------------------------------------------ the actor in the decoder
    def act(self, z: Tensor, ctx: Tensor, step: int, encoder_out: Dict[str, List[Tensor]]) -> Tensor:
        """z + a_t (the decoder's hooks call this at step t = 1, 2, ...): a_t = π_φ([z; c_t]) plus the row's
        exploration noise of step t when the encoder output carries it (Eq. 7.4)."""
        a = self.actor(z, ctx)
        noise = encoder_out.get(NOISE_KEY) if isinstance(encoder_out, dict) else None
        if noise is not None and step <= noise[0].size(1):
            a = a + noise[0][:, step - 1].type_as(a)
        return z + a

    def install_actor(self) -> None:
        on = self.actor_enabled
        self.decoder.state_action = self.act if on and self.site == "state" else None
        self.decoder.output_action = self.act if on and self.site == "output" else None

    def set_actor_enabled(self, enabled: bool) -> None:
        """Decode with (True) or without (False: the plain frozen NMT) the actor."""
        self.actor_enabled = bool(enabled)
        self.install_actor()

    @contextlib.contextmanager
    def using_actor(self, enabled: bool):
        """The actor on (True) or off (False: the plain NMT) for the duration of the block."""
        saved = self.actor_enabled
        self.set_actor_enabled(enabled)
        try:
            yield
        finally:
            self.set_actor_enabled(saved)

    def actor_disabled(self):
        """The plain NMT for the duration of the block."""
        return self.using_actor(False)

    @staticmethod
    def with_action_noise(encoder_out: Dict[str, List[Tensor]], noise: Tensor) -> Dict[str, List[Tensor]]:
        """``encoder_out`` whose rows carry ``noise`` (rows, steps, dim z): σ·n of Eq. 7.4, added to a_t at step
        t ≤ steps (re-ordered with the rows by ``reorder_encoder_out``)."""
        return dict(encoder_out, **{NOISE_KEY: [noise]})

    @property
    def state_dim(self) -> int:
        return self.decoder.hidden_size

    # ------------------------------------------------------------------ passes the criterion uses
    def trajectory(self, encoder_out, prev_output_tokens: Tensor) -> Tensor:
        """z_{1:T} (N, T, H): the top-layer decoder states of a teacher-forced pass over ``prev_output_tokens``
        (with the actor when it is enabled; gradients reach the actions through the frozen recurrence)."""
        _, extra = self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=True)
        return extra["states"][0]

    def nmt_log_probs(self, encoder_out, prev_output_tokens: Tensor) -> Tensor:
        """(N, T, V) log p_θ of the plain frozen NMT (no actor), teacher-forced."""
        with self.actor_disabled():
            out = self.decoder(prev_output_tokens, encoder_out=encoder_out)
            return self.get_normalized_probs(out, log_probs=True)

    @torch.no_grad()
    def influence(self, src_tokens: Tensor, src_lengths: Tensor, tokens: Tensor) -> Tensor:
        """(B, T) KL(p_with ‖ p_without) at every step of the hypotheses ``tokens`` (B, T: ending in ⟨eos⟩,
        right-padded): both distributions from the actor trajectory's previous state z_{t−1} and symbol
        ŷ_{t−1}, one step with the action and one without (Fig. 7.5), whether or not the actor is enabled
        for decoding; 0 at pads."""
        dec = self.decoder
        pad, eos = dec.dictionary.pad(), dec.dictionary.eos()
        enc = self.encoder(src_tokens, src_lengths=src_lengths)
        prev = torch.cat([tokens.new_full((tokens.size(0), 1), eos), tokens[:, :-1]], 1).masked_fill(
            tokens.eq(pad), pad)
        embedded = dec.embed_tokens(prev)
        state = dec.initial_state(enc)
        with_act, without = [], []
        for t in range(1, tokens.size(1) + 1):
            state = dec.transform_state(state, t)
            with self.using_actor(False):
                f0, _, _ = dec.decoder_step(embedded[:, t - 1], state, enc, t)
            with self.using_actor(True):
                f1, state, _ = dec.decoder_step(embedded[:, t - 1], state, enc, t)
            with_act.append(f1)
            without.append(f0)
        lp1 = self.get_normalized_probs((dec.output_layer(torch.stack(with_act, 1)), None), log_probs=True).float()
        lp0 = self.get_normalized_probs((dec.output_layer(torch.stack(without, 1)), None), log_probs=True).float()
        kl = (lp1.exp() * (lp1 - lp0)).sum(-1).clamp(min=0.0)
        return kl.masked_fill(tokens.eq(pad), 0.0)


@register_model_architecture("trainable_greedy", "trainable_greedy")
def trainable_greedy(args):
    """Gu §7.4.1: actor with one hidden layer of 32 tanh units; critic GRU and embeddings of the NMT's sizes."""
    set_default(args, "nmt_path", None)
    set_default(args, "tg_action_site", "state")
    set_default(args, "actor_hidden_dim", 32)
    set_default(args, "critic_embed_dim", 0)
    set_default(args, "critic_hidden_size", 0)
    set_default(args, "critic_attention_dim", 0)


@register_model_architecture("trainable_greedy", "trainable_greedy_tiny")
def trainable_greedy_tiny(args):
    """Unit and command-line tests: actor 8 units, critic 16."""
    set_default(args, "actor_hidden_dim", 8)
    set_default(args, "critic_embed_dim", 16)
    set_default(args, "critic_hidden_size", 16)
    set_default(args, "critic_attention_dim", 16)
    trainable_greedy(args)

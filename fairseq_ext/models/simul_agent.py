"""``simul_agent``: the READ/WRITE agent of simultaneous NMT (Gu 2019, ch. 9) on a frozen uni-directional
``rnnsearch`` environment.

The model is the frozen NMT (``--nmt-path``, loaded with :func:`fairseq_ext.modules.checkpoint.load_ensemble`,
eval mode, every parameter ``requires_grad=False``; its encoder and decoder are this model's
``encoder``/``decoder``, so ``forward`` is the plain NMT) plus the agent
(:class:`fairseq_ext.modules.simultaneous.agent.SimulAgent`: the GRU policy of Eq. 9.4 over the observations
o_t = [c; z; ε_I[y]], the baseline MLP b_φ(o_t) and the running advantage statistics). The NMT must have a
left-to-right encoder (Eq. 9.1): ``--arch rnnsearch_gu_wmt15_uni`` (the thesis environment, §9.3.1: uni-GRU
encoder, conditional GRU decoder, 1028 units, emb 512, no dropout) or any ``rnnsearch`` trained with
``--encoder-unidirectional`` (e.g. ``rnnsearch_bench --encoder-unidirectional`` on CPU, ``rnnsearch_tiny
--encoder-unidirectional`` in the tests).

Checkpoints hold the NMT's tensors too (the frozen copy the agent was trained with wins over the file at
``--nmt-path``, which is read again for the NMT's architecture, so ``fairseq-generate --path AGENT.pt``
needs only that file to exist; the path is stored absolute). The NMT's parameters never reach the optimiser
(fairseq optimises ``requires_grad`` parameters only). The policy's and the baseline's parameters carry
``param_group = "policy" | "baseline"`` (for a per-group learning rate with ``--optimizer rmsprop
--group-lr``; the thesis trains both with Adam, lr 2e-4 in the released code). The NMT stays in eval mode
whatever ``train()`` is asked.

Architectures: ``simul_agent`` (thesis §9.5.1: 512 GRU units; baseline 128 tanh units as in the released
code), ``simul_agent_tiny`` (tests: 16 / 8).

References: Gu, Neubig, Cho, Li, "Learning to Translate in Real-time with Neural Machine Translation",
EACL 2017; Gu, "Efficient Neural Machine Translation", PhD thesis, The University of Hong Kong, 2019 (ch. 9).
"""
from fairseq.models import register_model, register_model_architecture

from fairseq_ext.modules.arch_utils import set_default
from fairseq_ext.modules.frozen_nmt import FrozenNMTModel, add_nmt_path_arg, load_frozen_nmt
from fairseq_ext.modules.simultaneous.agent import SimulAgent
from fairseq_ext.modules.simultaneous.environment import check_environment
from fairseq_ext.data.errors import UserDataError


@register_model("simul_agent")
class SimulAgentModel(FrozenNMTModel):
    """Frozen uni-directional NMT + READ/WRITE agent (module doc)."""

    def __init__(self, encoder, decoder, agent: SimulAgent):
        super().__init__(encoder, decoder)
        self.agent = agent

    @staticmethod
    def add_args(parser):
        add_nmt_path_arg(parser, "the frozen rnnsearch NMT checkpoint (uni-directional encoder) the agent drives "
                                 "(required)")
        parser.add_argument("--agent-hidden-size", type=int, metavar="N", help="GRU units of the policy (512)")
        parser.add_argument("--agent-baseline-dim", type=int, metavar="N", help="tanh units of the baseline MLP (128)")
        parser.add_argument("--agent-adv-momentum", type=float, metavar="M",
                            help="momentum of the running advantage mean/variance (0.99)")

    @classmethod
    def build_model(cls, args, task):
        simul_agent(args)
        nmt = load_frozen_nmt(args, task, "simul_agent", "an rnnsearch checkpoint with a uni-directional encoder, "
                              "e.g. --arch rnnsearch_gu_wmt15_uni, or --encoder-unidirectional")
        try:
            check_environment(nmt)
        except ValueError as e:
            raise UserDataError(f"--nmt-path {args.nmt_path}: {e}") from None
        dec = nmt.decoder
        obs_dim = dec.context_dim + dec.hidden_size + dec.embed_tokens.embedding_dim  # o_t = [c; z; ε_I[y]]
        agent = SimulAgent(obs_dim, args.agent_hidden_size, args.agent_baseline_dim, args.agent_adv_momentum)
        return cls(nmt.encoder, dec, agent)


@register_model_architecture("simul_agent", "simul_agent")
def simul_agent(args):
    """Gu §9.5.1: a 512-unit GRU policy; baseline MLP of 128 tanh units (released code)."""
    set_default(args, "nmt_path", None)
    set_default(args, "agent_hidden_size", 512)
    set_default(args, "agent_baseline_dim", 128)
    set_default(args, "agent_adv_momentum", 0.99)


@register_model_architecture("simul_agent", "simul_agent_tiny")
def simul_agent_tiny(args):
    """Unit and command-line tests: policy 16 units, baseline 8."""
    set_default(args, "agent_hidden_size", 16)
    set_default(args, "agent_baseline_dim", 8)
    simul_agent(args)

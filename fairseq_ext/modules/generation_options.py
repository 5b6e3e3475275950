"""The generation options the plugin's tasks and generators share, each defined once.

* fairseq's own generation defaults (``--beam``, ``--max-len-a/-b``, ``--min-len``, ``--lenpen``, ...), read
  from its ``GenerationConfig`` (:func:`generation_default`, :func:`generation_option`) instead of being
  written again;
* ``--npd-samples`` (:class:`NoisyParallelConfig`): noisy parallel decoding, an opt-in decoding mode of both
  the autoregressive task (``translation_decoding --decoding-algorithm npd``: N noisy greedy decodes, Gu 2019
  Eq. 2.14) and the non-autoregressive one (``translation_fertility``: N sampled fertility sequences,
  Eq. 8.7); each keeps the candidate a noise-free scorer ranks best.  Off (0) unless asked for.
"""
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass

NPD_SAMPLES = 0  # --npd-samples: noisy parallel decoding is off unless asked for


def generation_default(name: str):
    """fairseq's default of the generation option ``name`` (``beam``, ``max_len_a``, ``lenpen``, ...): the field of
    its ``GenerationConfig``, or for a keyword of its ``SequenceGenerator`` without a command-line option
    (``max_len``) that keyword's default.  The plugin's generators and tasks read fairseq's defaults from here
    instead of writing them again."""
    import dataclasses
    import inspect

    from fairseq.dataclass.configs import GenerationConfig

    option = GenerationConfig.__dataclass_fields__.get(name)
    if option is not None:
        return option.default if option.default is not dataclasses.MISSING else option.default_factory()
    from fairseq.sequence_generator import SequenceGenerator

    param = inspect.signature(SequenceGenerator.__init__).parameters.get(name)
    if param is None or param.default is inspect.Parameter.empty:
        raise KeyError(f"{name!r} is not one of fairseq's generation options")
    return param.default


def generation_option(args, name: str):
    """``args.name`` (a Namespace or fairseq's ``cfg.generation``), or :func:`generation_default` when ``args``
    lacks it."""
    return getattr(args, name, generation_default(name))


@dataclass
class NoisyParallelConfig(FairseqDataclass):
    """``--npd-samples`` of every task that decodes by noisy parallel decoding (module doc)."""
    npd_samples: int = field(
        default=NPD_SAMPLES,
        metadata={"help": "noisy parallel decoding: this many noisy candidates per sentence, the one the scorer "
                          "ranks best kept (translation_decoding --decoding-algorithm npd: noisy greedy decodes, "
                          "Eq. 2.14; translation_fertility: fertility sequences sampled from p_F and rescored by "
                          "the teacher, Eq. 8.7); 0 = off"},
    )

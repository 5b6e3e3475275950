"""``translation_ext``: fairseq's ``translation`` task plus what every fairseq_ext task shares.

Later tasks of the plugin (document-level, multilingual, retrieval) subclass
:class:`TranslationExtTask` so they inherit:

* ``--cpu-bf16``: forward/backward/inference under ``torch.autocast("cpu", torch.bfloat16)``.
  On CPUs with AMX/AVX512-BF16 this trains the small Bible transformer about 1.4x faster
  (measured in recipes/bench); master weights, optimizer state and the loss stay float32.
* ``--math-attention``: scaled-dot-product attention through PyTorch's math kernel.  For the short
  sequences of sentence-level MT on CPU the fused flash kernel's backward is slower: with
  ``--cpu-bf16`` the math kernel made a training step of the small transformer 1.3x faster.
* ``--gnmt-alpha``: decode with the GNMT length penalty (see
  :mod:`fairseq_ext.generators.length_penalty`) instead of fairseq's ``--lenpen``.
"""

import contextlib
from dataclasses import dataclass, field

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_ext.generators.length_penalty import GNMTLengthPenaltySequenceGenerator


@dataclass
class TranslationExtConfig(TranslationConfig):
    cpu_bf16: bool = field(
        default=False,
        metadata={"help": "run the model under torch.autocast('cpu', dtype=bfloat16) "
                          "(float32 master weights); ~1.4x faster on AMX/AVX512-BF16 CPUs"},
    )
    math_attention: bool = field(
        default=False,
        metadata={"help": "use the math kernel of scaled_dot_product_attention (faster than the "
                          "flash kernel for short sentences on CPU)"},
    )
    gnmt_alpha: float = field(
        default=0.0,
        metadata={"help": "if > 0, beam search normalises scores by the GNMT length penalty "
                          "((5+|Y|)/6)^alpha instead of |Y|^lenpen"},
    )


class AutocastMixin:
    """Runs train/valid/inference steps under CPU bf16 autocast when ``cfg.cpu_bf16`` is set, and
    with the math attention kernel when ``cfg.math_attention`` is set."""

    def autocast(self):
        stack = contextlib.ExitStack()
        if getattr(self.cfg, "cpu_bf16", False):
            stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        if getattr(self.cfg, "math_attention", False):
            stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        return stack

    def train_step(self, *args, **kwargs):
        with self.autocast():
            return super().train_step(*args, **kwargs)

    def valid_step(self, *args, **kwargs):
        with self.autocast():
            return super().valid_step(*args, **kwargs)

    def inference_step(self, *args, **kwargs):
        with self.autocast():
            return super().inference_step(*args, **kwargs)


class GNMTGeneratorMixin:
    """``build_generator`` that picks the GNMT-length-penalty beam search when asked."""

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        alpha = getattr(self.cfg, "gnmt_alpha", 0.0)
        if alpha and alpha > 0 and seq_gen_cls is None and not getattr(args, "sampling", False):
            seq_gen_cls = GNMTLengthPenaltySequenceGenerator
            extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {}, gnmt_alpha=alpha)
        return super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)


@register_task("translation_ext", dataclass=TranslationExtConfig)
class TranslationExtTask(AutocastMixin, GNMTGeneratorMixin, TranslationTask):
    """fairseq ``translation`` + ``--cpu-bf16`` + ``--math-attention`` + ``--gnmt-alpha``
    (base of the plugin's tasks)."""

    cfg: TranslationExtConfig

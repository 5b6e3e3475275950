"""The CPU fast path of ``fairseq-generate`` / ``fairseq-interactive``: ``--quantize int8``.

One option, added to fairseq's *Generation* argument group when the plugin registers
(:func:`install_quantize_option`), and applied to every model of the ensemble right after it is loaded (in
``prepare_for_inference_``, which ``fairseq-generate``, ``fairseq-interactive`` and fairseq's hub interface
call), so it works for every architecture of the plugin, including those CTranslate2 cannot represent
(``fairseq-ext-export``)::

    fairseq-generate DATA --user-dir fairseq_ext --path ckpt.pt --cpu --beam 5 --quantize int8

``--quantize int8`` replaces every ``nn.Linear`` of the model by :class:`Int8Linear`: int8 weights
(symmetric, one scale per output row) and activations quantized per call (dynamic quantisation,
fbgemm/x86 ``quantized::linear_dynamic``, as ``torch.ao.quantization.quantize_dynamic`` does).  Unlike
``quantize_dynamic``, the module stays an ``nn.Linear`` and keeps its float32 ``weight`` parameter, so
code that reads ``linear.weight`` directly (fairseq's ``F.multi_head_attention_forward`` fast path of
the encoder, tied output projections, the plugin's own layers) still works, unchanged, in float32;
every *call* of the module runs in int8.  Inputs that are not float32 CPU tensors (``--cpu-bf16``
autocast, CUDA) fall back to the float32 ``F.linear``.

How the option gets there: the plugin cannot add options to fairseq's own parsers, so
:func:`install_quantize_option` adds a field ``quantize`` to fairseq's ``GenerationConfig`` (the *Generation*
argument group and ``cfg.generation`` are both built from that dataclass; hydra's schema is re-stored) and
wraps ``BaseFairseqModel.prepare_for_inference_``, which both CLIs call on every model right after
``checkpoint_utils.load_model_ensemble``.

Nothing else is changed: the search, the length rules, the outputs' format. Its speed is measured by
``recipes/bench/cpu_inference.py`` (results in ``recipes/bench/RESULTS.md``).
"""
from __future__ import annotations

import logging
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

QUANTIZE_CHOICES = ("none", "int8")
QUANTIZE_HELP = ("CPU fast path: 'int8' = dynamic int8 quantisation of every nn.Linear at load time "
                 "(int8 weights with per-row scales, activations quantized per call; fbgemm), for "
                 "every architecture; 'none' (default) decodes in float32 "
                 "(fairseq_ext.modules.fast_inference)")


def int8_engine_available() -> bool:
    return any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm"))


def _pack_int8(weight: torch.Tensor, bias) -> object:
    """Prepacked fbgemm int8 weights: symmetric per-output-row scales (zero point 0)."""
    w = weight.detach().float().contiguous()
    scales = (w.abs().amax(dim=1).clamp_min(1e-8) / 127.0).double()
    zero_points = torch.zeros(w.size(0), dtype=torch.long)
    with warnings.catch_warnings():  # torch >= 2.10 marks quantized tensor creation deprecated
        warnings.simplefilter("ignore")
        qweight = torch.quantize_per_channel(w, scales, zero_points, 0, torch.qint8)
        return torch.ops.quantized.linear_prepack(
            qweight, None if bias is None else bias.detach().float().contiguous())


class Int8Linear(nn.Linear):
    """An ``nn.Linear`` whose calls run in int8 (dynamic quantisation); ``weight``/``bias`` remain the
    original float32 parameters (shared, e.g. tied with an embedding) for code that reads them."""

    def __init__(self, linear: nn.Linear):  # noqa: super().__init__ would allocate new weights
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self._packed = _pack_int8(linear.weight, linear.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        return cls(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu" or x.numel() == 0:
            return F.linear(x, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))
        # reduce_range: 7-bit activations, as fbgemm's dynamic Linear uses, so that the AVX2 int8
        # multiply-add (u8 x s8 -> s16) cannot saturate.
        return torch.ops.quantized.linear_dynamic(x, self._packed, True)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, int8 dynamic"


def quantize_linears_(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` (exact type) in ``model`` by an :class:`Int8Linear`, in place;
    returns how many were replaced."""
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.device.type == "cpu" \
                    and child.weight.dtype == torch.float32:
                setattr(parent, name, Int8Linear.from_linear(child))
                n += 1
    return n


def optimize_for_inference_(model: nn.Module, quantize: str = "none") -> nn.Module:
    """Apply the fast path ``quantize`` (one of :data:`QUANTIZE_CHOICES`) to ``model`` in place, once."""
    quantize = (quantize or "none").lower()
    if quantize not in QUANTIZE_CHOICES:
        raise UserDataError(f"--quantize {quantize!r}: expected one of {', '.join(QUANTIZE_CHOICES)}")
    if quantize == "none" or getattr(model, "_fairseq_ext_quantized", None) == quantize:
        return model
    if quantize == "int8":
        if not int8_engine_available():
            raise RuntimeError("--quantize int8 needs torch's fbgemm/x86 quantized engine "
                               f"(this build has {torch.backends.quantized.supported_engines})")
        param = next(model.parameters(), None)
        if param is not None and param.device.type != "cpu":
            logger.warning("--quantize int8 is a CPU fast path; the model is on %s: left as is", param.device)
            return model
        n = quantize_linears_(model)
        # a swapped layer computes in int8 only when it is *called*: one whose weight is read directly (fairseq's
        # fused encoder self-attention, FixNorm/tied output projections, some plugin layers) stays float32
        logger.info("fairseq_ext: --quantize int8: %d Linear layers of %s swapped to int8 (those whose weight is "
                    "read directly, e.g. fairseq's fused encoder self-attention, still compute in float32)",
                    n, type(model).__name__)
    model._fairseq_ext_quantized = quantize
    return model


def install_quantize_option() -> None:
    """Add ``--quantize`` to fairseq's generation options and apply it when a model is prepared for
    inference (module doc)."""
    import dataclasses

    from fairseq.dataclass import ChoiceEnum, configs
    from fairseq.models import BaseFairseqModel

    gen = configs.GenerationConfig
    if "quantize" not in gen.__dataclass_fields__:
        typ = ChoiceEnum(list(QUANTIZE_CHOICES))
        f = dataclasses.field(default="none", metadata={"help": QUANTIZE_HELP})
        f.name, f.type, f._field_type = "quantize", typ, dataclasses._FIELD
        gen.__dataclass_fields__["quantize"] = f
        gen.__annotations__["quantize"] = typ
        gen.quantize = "none"
        from fairseq.dataclass.initialize import hydra_init

        hydra_init()  # re-store the schema that fairseq stored at import, now with the field

    orig = BaseFairseqModel.prepare_for_inference_
    if getattr(orig, "_fairseq_ext", False):
        return

    def prepare_for_inference_(self, cfg):
        orig(self, cfg)
        generation = cfg.get("generation") if hasattr(cfg, "get") else getattr(cfg, "generation", None)
        # a DictConfig's generation group, or a legacy flat argparse.Namespace
        quantize = getattr(generation if generation is not None else cfg, "quantize", None)
        quantize = getattr(quantize, "value", quantize)  # a ChoiceEnum member or its string
        if quantize and str(quantize) != "none":
            optimize_for_inference_(self, str(quantize))

    prepare_for_inference_._fairseq_ext = True
    prepare_for_inference_.__wrapped__ = orig
    BaseFairseqModel.prepare_for_inference_ = prepare_for_inference_


install_quantize_option()  # when the plugin registers (fairseq_ext.modules imports every module)

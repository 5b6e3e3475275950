"""The CPU fast path of ``fairseq-generate`` / ``fairseq-interactive``: ``--quantize int8``.

One option, added to fairseq's *Generation* argument group when the plugin registers
(:func:`install_quantize_option`), and applied to every model of the ensemble right after it is loaded (in
``prepare_for_inference_``, which ``fairseq-generate``, ``fairseq-interactive`` and fairseq's hub interface
call), so it works for every architecture of the plugin, including those CTranslate2 cannot represent
(``fairseq-ext-export``)::

    fairseq-generate DATA --user-dir fairseq_ext --path ckpt.pt --cpu --beam 5 --quantize int8

``--quantize int8`` makes every matrix product with a weight run in int8 (symmetric int8 weights, one scale
per output row, activations quantized per call: dynamic quantisation, fbgemm/x86
``quantized::linear_dynamic``, as ``torch.ao.quantization.quantize_dynamic`` does):

* every ``nn.Linear`` becomes an :class:`Int8Linear`.  Unlike ``quantize_dynamic``, the module stays an
  ``nn.Linear`` and keeps its float32 ``weight`` parameter (shared, e.g. tied with an embedding);
* every ``nn.LSTM``/``nn.GRU``/``nn.LSTMCell``/``nn.GRUCell`` becomes its int8 subclass (torch's dynamic
  quantized recurrent kernels; the float parameters stay);
* weights that the models read directly -- a tied output projection, the MoLE experts (Eq. 5.6), fairseq's
  ``F.multi_head_attention_forward`` -- are registered: ``F.linear`` on such a weight (or its ``detach()``)
  runs in int8.  fairseq's ``MultiheadAttention`` is also switched off its fused path, so that its
  projections are called as (int8) modules;
* a weight the model derives from parameters on every call -- FixNorm's row-normalised output matrix
  g·W/‖W‖ (Eq. 6.6, §5.4) -- goes through :func:`frozen_derived`: computed once per version of the parameter,
  then an int8 matrix too.

Embedding lookups (including the ULR embedding's softmax over the universal tokens, Eqs. 5.2-5.3) stay
float32.  A weight changed in place after quantisation is re-packed at its next use; for inputs that are not
float32 CPU tensors (``--cpu-bf16`` autocast, CUDA) the float32 computation runs.  Without ``--quantize int8`` nothing of this is installed: the float32 path is
fairseq's.

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
import weakref

import torch
import torch.nn.functional as F
from torch import nn
from fairseq_ext.data.errors import UserDataError

logger = logging.getLogger(__name__)

QUANTIZE_CHOICES = ("none", "int8")
QUANTIZE_HELP = ("CPU fast path: 'int8' = dynamic int8 quantisation of every Linear / LSTM / GRU layer and "
                 "every weight read directly (attention, FixNorm, MoLE) at load time "
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


def _int8_input(x: torch.Tensor) -> bool:
    return x.dtype == torch.float32 and x.device.type == "cpu" and x.numel() > 0


class Int8Linear(nn.Linear):
    """An ``nn.Linear`` whose calls run in int8 (dynamic quantisation); ``weight``/``bias`` remain the
    original float32 parameters (shared, e.g. tied with an embedding) for code that reads them."""

    def __init__(self, linear: nn.Linear):  # noqa: super().__init__ would allocate new weights
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self._pack()

    def _pack(self):
        self._packed = _pack_int8(self.weight, self.bias)
        self._versions = (self.weight._version, None if self.bias is None else self.bias._version)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        return cls(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _int8_input(x):
            return F.linear(x, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))
        if self._versions != (self.weight._version, None if self.bias is None else self.bias._version):
            self._pack()  # the float weights were changed in place (e.g. training went on)
        # reduce_range: 7-bit activations, as fbgemm's dynamic Linear uses, so that the AVX2 int8
        # multiply-add (u8 x s8 -> s16) cannot saturate.
        return torch.ops.quantized.linear_dynamic(x, self._packed, True)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, int8 dynamic"


# ------------------------------------------------------------------- weights read directly (F.linear)
class _Int8Weight:
    """A float32 matrix that ``F.linear`` computes with in int8: packed on first use, re-packed when the
    tensor is changed in place (its version counter moves); also the weights derived from it
    (:func:`frozen_derived`)."""

    __slots__ = ("ref", "shape", "stride", "version", "packed", "derived")

    def __init__(self, t: torch.Tensor):
        key = t.data_ptr()

        def forget(ref):  # the tensor is gone: so are its int8 copies
            if _INT8_WEIGHTS.get(key) is self:
                del _INT8_WEIGHTS[key]

        self.ref, self.shape, self.stride = weakref.ref(t, forget), t.shape, t.stride()
        self.version, self.packed, self.derived = None, None, {}

    def matches(self, t: torch.Tensor) -> bool:
        """``t`` is the registered tensor or a view of all of it (``detach()``), unchanged in layout."""
        return self.ref() is not None and t.shape == self.shape and t.stride() == self.stride

    def pack(self, t: torch.Tensor):
        if self.packed is None or self.version != t._version:
            self.packed, self.version = _pack_int8(t, None), t._version
        return self.packed


#: data pointer -> registered weight; filled by :func:`optimize_for_inference_`
_INT8_WEIGHTS: dict = {}


def register_int8_weight(t: torch.Tensor) -> None:
    """Let ``F.linear(x, t', b)`` run in int8 for ``t'`` = ``t`` or ``t.detach()`` (float32 2-D CPU)."""
    if t.dim() == 2 and t.dtype == torch.float32 and t.device.type == "cpu" and t.numel() > 0:
        e = _INT8_WEIGHTS.get(t.data_ptr())
        if e is None or not e.matches(t):
            _INT8_WEIGHTS[t.data_ptr()] = _Int8Weight(t)
        _install_int8_linear()


def _lookup(weight: torch.Tensor):
    if not _INT8_WEIGHTS or weight.dtype != torch.float32 or weight.dim() != 2:
        return None
    e = _INT8_WEIGHTS.get(weight.data_ptr())
    return e if e is not None and e.matches(weight) else None


def _install_int8_linear() -> None:
    """Wrap ``F.linear`` (once, at the first quantised model) so that a registered weight computes in int8
    (also inside ``F.multi_head_attention_forward``, which calls this module-level ``linear``)."""
    if getattr(F.linear, "_fairseq_ext_int8", False):
        return
    linear = F.linear

    def int8_linear(input, weight, bias=None):
        e = _lookup(weight) if _int8_input(input) else None
        if e is None:
            return linear(input, weight, bias)
        out = torch.ops.quantized.linear_dynamic(input, e.pack(weight), True)
        return out if bias is None else out.add_(bias)

    int8_linear._fairseq_ext_int8 = True
    int8_linear.__doc__ = linear.__doc__
    from torch.jit._builtins import _register_builtin

    _register_builtin(int8_linear, "aten::linear")  # TorchScript: the float op
    F.linear = int8_linear


def frozen_derived(fn, weight: torch.Tensor, *args) -> torch.Tensor:
    """``fn(weight, *args)``, e.g. FixNorm's row-normalised output matrix (Eq. 6.6).  For a weight that
    ``--quantize int8`` registered, when no gradient is wanted, the result is computed once per version of
    ``weight`` and registered too, so the ``F.linear`` that reads it runs in int8; otherwise (no
    ``--quantize int8``) it is computed as is, every call (the float32 behaviour)."""
    e = _lookup(weight)
    if e is None:
        return fn(weight, *args)
    key = (fn, args)
    version, out = e.derived.get(key, (None, None))
    if out is None or version != weight._version:
        out = fn(weight.detach(), *args)
        e.derived[key] = (weight._version, out)
        register_int8_weight(out)
    return out


# -------------------------------------------------------------------------------- recurrent layers
def _dynamic_qconfig(mod: nn.Module):
    from torch.ao.quantization.qconfig import default_dynamic_qconfig

    mod.qconfig = default_dynamic_qconfig
    return mod


class _Int8Recurrent:
    """Mixin of an ``nn.LSTM``/``nn.GRU``/``nn.LSTMCell``/``nn.GRUCell`` whose calls run in torch's dynamic
    int8 kernels (``torch.ao.nn.quantized.dynamic``); the module keeps its class (a subclass of it) and
    its float32 parameters."""

    def _int8_pack(self):
        from torch.ao.nn.quantized import dynamic as nnqd

        q = getattr(nnqd, type(self).__mro__[2].__name__)  # the float class: LSTM, GRU, LSTMCell, GRUCell
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            float_mod = type(self).__mro__[2].__new__(type(self).__mro__[2])
            float_mod.__dict__.update(self.__dict__)
            qmod = q.from_float(_dynamic_qconfig(float_mod))
        del float_mod
        self.__dict__["_int8"] = (qmod, [p._version for p in self._parameters.values() if p is not None])

    def forward(self, input, hx=None):
        qmod, versions = self.__dict__["_int8"]
        x = input.data if isinstance(input, nn.utils.rnn.PackedSequence) else input
        if not _int8_input(x):
            return super().forward(input, hx)
        if versions != [p._version for p in self._parameters.values() if p is not None]:
            self._int8_pack()
            qmod = self.__dict__["_int8"][0]
        return qmod(input, hx)


def _int8_class(base):
    return type(f"Int8{base.__name__}", (_Int8Recurrent, base), {"__module__": __name__})


INT8_RECURRENT = {base: _int8_class(base) for base in (nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell)}


def quantize_recurrent_(model: nn.Module) -> int:
    """Make every ``nn.LSTM``/``nn.GRU``/``nn.LSTMCell``/``nn.GRUCell`` (exact type) of ``model`` compute in
    int8, in place (the module's class becomes its int8 subclass); returns how many."""
    n = 0
    for m in list(model.modules()):
        cls = INT8_RECURRENT.get(type(m))
        if cls is not None and all(p.dtype == torch.float32 and p.device.type == "cpu" for p in m.parameters()):
            m.__class__ = cls
            m._int8_pack()
            n += 1
    return n


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


def unfuse_attention_(model: nn.Module) -> int:
    """fairseq's ``MultiheadAttention`` without incremental state calls ``F.multi_head_attention_forward``
    with its projection weights; ``skip_embed_dim_check`` (its one switch with no other effect on a
    model whose projections keep their sizes) makes it call its ``q/k/v/out_proj`` modules, now int8."""
    from fairseq.modules import MultiheadAttention

    n = 0
    for m in model.modules():
        if isinstance(m, MultiheadAttention) and not m.skip_embed_dim_check:
            m.skip_embed_dim_check = True
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
        n_rnn = quantize_recurrent_(model)
        n_att = unfuse_attention_(model)
        n_direct = 0
        for p in model.parameters():  # read directly by F.linear: tied/FixNorm projections, MoLE experts
            if p.dim() == 2:
                register_int8_weight(p)
                n_direct += 1
        logger.info("fairseq_ext: --quantize int8: %d Linear layers of %s swapped to int8, %d recurrent layers, "
                    "%d attention layers unfused, %d matrices int8 where read directly",
                    n, type(model).__name__, n_rnn, n_att, n_direct)
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

"""Frozen weights under CPU bf16 autocast (``--cpu-bf16``) take the GEMM a trainable weight gets.

``torch.matmul`` folds a >= 3-D input into a matrix (at
most one contiguous copy of the activations, then one GEMM) when the weight needs a gradient; otherwise an
input whose strides do not fold for free (fairseq's time-major decoder states transposed to batch-major, even
the ``B x 1 x C`` step of incremental decoding) goes to ``bmm`` with the weight expanded and copied once per
batch element.  Under ``torch.autocast("cpu", torch.bfloat16)`` (``--cpu-bf16``) that made every model with
frozen parameters slow -- a distillation teacher decoding a 242-sentence batch took 127 s instead of 4.1 s;
a 3+3 transformer's 10 greedy steps at batch 128, 40 s instead of 0.6 s.  :func:`install` wraps ``F.linear`` so
that it folds the input itself (``reshape`` to 2-D, one GEMM), the computation a trainable weight gets, so frozen
and trainable weights take the same path.

Applied once when the plugin registers (``fairseq_ext.modules`` imports every module of this folder).
"""
import torch


def install() -> None:
    """``F.linear`` under CPU autocast folds a >= 3-D input whose weight is frozen into a matrix (as matmul
    does for a trainable weight) instead of letting ``matmul`` expand the weight per batch element."""
    import torch.nn.functional as F

    if getattr(F.linear, "_fairseq_ext_fold", False):
        return
    linear = F.linear

    def folded_linear(input, weight, bias=None):
        if (input.dim() >= 3 and not weight.requires_grad and torch.is_autocast_enabled("cpu")
                and input.device.type == "cpu"):
            out = linear(input.reshape(-1, input.shape[-1]), weight, bias)
            return out.view(*input.shape[:-1], out.shape[-1])
        return linear(input, weight, bias)

    folded_linear._fairseq_ext_fold = True
    folded_linear.__doc__ = linear.__doc__
    # TorchScript compiles calls of F.linear to aten::linear (the Python-side fold does not apply there)
    from torch.jit._builtins import _register_builtin

    _register_builtin(folded_linear, "aten::linear")
    F.linear = folded_linear


install()

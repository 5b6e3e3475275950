"""A dict of cached tensors per module in fairseq's ``incremental_state`` (shared by the plugin's
attention-like modules, as fairseq's ``MultiheadAttention`` keeps its ``attn_state``)."""
from typing import Dict, Optional

from torch import Tensor


class IncrementalBufferMixin:
    """``_get_input_buffer`` / ``_set_input_buffer`` / ``reorder_incremental_state`` over one named
    buffer.  Use on a class decorated with ``fairseq.incremental_decoding_utils.with_incremental_state``
    and set ``buffer_key``."""

    buffer_key = "state"

    def _get_input_buffer(self, incremental_state) -> Dict[str, Optional[Tensor]]:
        result = self.get_incremental_state(incremental_state, self.buffer_key)
        return result if result is not None else {}

    def _set_input_buffer(self, incremental_state, buffer: Dict[str, Optional[Tensor]]):
        return self.set_incremental_state(incremental_state, self.buffer_key, buffer)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Beam search reordered its hypotheses: reorder every cached tensor along the batch axis."""
        buf = self._get_input_buffer(incremental_state)
        if buf:
            for k, v in buf.items():
                if v is not None:
                    buf[k] = v.index_select(0, new_order)
            self._set_input_buffer(incremental_state, buf)
        return incremental_state

"""fairseq's own ``transformer`` on the plugin's shapes (:mod:`fairseq_ext.modules.arch_utils`), so that a
baseline is one ``--arch`` name like the families built on it:

* ``transformer_bench``: the benchmark baseline (3+3 layers, d 256, FFN 1024, PreNorm, shared embeddings);
* ``transformer_cpu_small``: ``transformer_bench`` at d 128, FFN 512, the own-data preset for a budget of
  minutes on a CPU (README, "A short budget"): an update costs under half of ``transformer_bench``'s.

Nothing is overridden: each is fairseq's ``base_architecture`` after the shape's defaults, and every option
given on the command line wins.
"""
from fairseq.models import register_model_architecture
from fairseq.models.transformer import base_architecture

from fairseq_ext.modules.arch_utils import apply_defaults, register_shaped, shaped

# what transformer_cpu_small changes in the bench shape
CPU_SMALL = {"embed_dim": 128, "ffn_embed_dim": 512}

register_shaped("transformer", "transformer", base_architecture)


@register_model_architecture("transformer", "transformer_cpu_small")
def transformer_cpu_small(args):
    apply_defaults(args, CPU_SMALL)
    shaped("bench", base_architecture)(args)

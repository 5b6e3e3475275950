"""fairseq_ext.models: every module in this folder is imported (and so registered) on import, then the earlier
names of renamed models and architectures (:data:`fairseq_ext.modules.arch_utils.ARCH_ALIASES`)."""
from fairseq_ext._registry import import_all
from fairseq_ext.modules.arch_utils import register_model_aliases

import_all(__name__, __file__)
register_model_aliases()

"""fairseq_ext.criterions: every module in this folder is imported (and so registered) on import, then the
earlier names of renamed criterions (:data:`fairseq_ext.modules.arch_utils.CRITERION_ALIASES`)."""
from fairseq_ext._registry import import_all
from fairseq_ext.modules.arch_utils import register_criterion_aliases

import_all(__name__, __file__)
register_criterion_aliases()

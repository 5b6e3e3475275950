"""fairseq_ext.models: every module in this folder is imported (and so registered) on import."""
from fairseq_ext._registry import import_all

import_all(__name__, __file__)

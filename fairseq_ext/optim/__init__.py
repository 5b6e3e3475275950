"""fairseq_ext.optim: learning-rate schedulers (and optimizers); every module here registers on import."""
from fairseq_ext._registry import import_all

import_all(__name__, __file__)

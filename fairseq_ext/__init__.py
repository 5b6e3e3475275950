"""fairseq_ext — a fairseq plugin for the systems of five NMT theses.

``fairseq-train --user-dir fairseq_ext`` (from the repo root) or
``--user-dir $(python -c 'import fairseq_ext,os;print(os.path.dirname(fairseq_ext.__file__))')``
(installed package) imports this module, which

1. applies the torch-2.13 / numpy-2 compatibility fixes once (:mod:`fairseq_ext._compat`), and
2. imports every sub-package so that all architectures, criterions, tasks and generators register.
   fairseq's ``import_user_module`` auto-imports only ``models/`` and ``tasks/``; criterions and
   generators are imported here explicitly.
"""
import logging

# fairseq's speech task logs "Please install tensorboardX" at import; not relevant to text MT.
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)

from . import _compat  # noqa: E402

_compat.apply()

from . import criterions, data, generators, models, modules, optim, tasks  # noqa: E402,F401  (registration)

__version__ = "0.1.0"

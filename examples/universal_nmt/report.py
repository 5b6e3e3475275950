#!/usr/bin/env python
"""The report of recipes/gu/ch5.sh (Gu 2019 ch. 5, universal NMT: ULR + MoLE): Table 5.4, Fig. 5.5, the
MoLE gates of Fig. 5.8 and the training cost.

    python examples/universal_nmt/report.py --out OUT --main TAG

The code is :mod:`fairseq_ext.tools.chapters.universal_report`
(``python -m fairseq_ext.tools.chapters.universal_report`` is the same command; ``--help`` lists the options).
"""
from fairseq_ext.tools.common import run_cli
from fairseq_ext.tools.chapters.universal_report import main

if __name__ == "__main__":
    run_cli(main)

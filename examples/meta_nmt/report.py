#!/usr/bin/env python
"""The helpers and report of recipes/gu/ch6.sh (Gu 2019 ch. 6, MetaNMT): the meta-learning splits, the
concatenated fine-tuning draws, and Table 6.2 / Fig. 6.3 with the cost ratio.

    python examples/meta_nmt/report.py splits|concat|report ...

The code is :mod:`fairseq_ext.tools.chapters.meta_report`
(``python -m fairseq_ext.tools.chapters.meta_report`` is the same command; ``--help`` lists the options).
"""
from fairseq_ext.tools.common import run_cli
from fairseq_ext.tools.chapters.meta_report import main

if __name__ == "__main__":
    run_cli(main)

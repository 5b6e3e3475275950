#!/usr/bin/env python
"""The report of recipes/gu/ch7.sh (Gu 2019 ch. 7, trainable greedy decoding): Figs. 7.3-7.5 and the
decode-time table.

    python examples/trainable_greedy/report.py --out OUT --data BIN --nmt NMT.pt --ref REF --decode-dir DIR ...

The code is :mod:`fairseq_ext.tools.chapters.greedy_report`
(``python -m fairseq_ext.tools.chapters.greedy_report`` is the same command; ``--help`` lists the options).
"""
from fairseq_ext.tools.common import run_cli
from fairseq_ext.tools.chapters.greedy_report import main

if __name__ == "__main__":
    run_cli(main)

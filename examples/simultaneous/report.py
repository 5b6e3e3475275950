#!/usr/bin/env python
"""The report of recipes/gu/ch9.sh (Gu 2019 ch. 9, simultaneous NMT): the < 50-subword test filter, then
BLEU / chrF / AP / CW / AL / LAAL / DAL per system, Figs. 9.4-9.6 and the dominance checks.

    python examples/simultaneous/report.py filter|report ...

The code is :mod:`fairseq_ext.tools.chapters.simul_report`
(``python -m fairseq_ext.tools.chapters.simul_report`` is the same command; ``--help`` lists the options).
"""
from fairseq_ext.tools.common import run_cli
from fairseq_ext.tools.chapters.simul_report import main

if __name__ == "__main__":
    run_cli(main)

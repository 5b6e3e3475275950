#!/usr/bin/env python
"""The helpers and report of recipes/maruf/ch5.sh (Maruf 2019 ch. 5, Bi-MSMT): the Bi-MSMT release converter
and Table 5.3's layout with the paired bootstrap per column and the cost of each system.

    python examples/multi_speaker_conversations/report.py from-bimsmt|report ...

The code is :mod:`fairseq_ext.tools.chapters.conversation_report`
(``python -m fairseq_ext.tools.chapters.conversation_report`` is the same command; ``--help`` lists the options).
"""
from fairseq_ext.tools.common import run_cli
from fairseq_ext.tools.chapters.conversation_report import main

if __name__ == "__main__":
    run_cli(main)

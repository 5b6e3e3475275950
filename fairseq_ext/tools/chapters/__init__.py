"""fairseq_ext.tools.chapters: what one thesis chapter's recipe runs besides fairseq and the other tools -- its
pipeline, its data helpers and its report in the thesis's table and figure layouts.  The command line of each
report is ``examples/<topic>/report.py`` (``python -m fairseq_ext.tools.chapters.<name>`` is the same).

=======================  ==============================================  ======================================
module                   command line                                    what
=======================  ==============================================  ======================================
``universal_report``     ``examples/universal_nmt/report.py``            Gu ch. 5: Table 5.4, Fig. 5.5, gates
``meta_report``          ``examples/meta_nmt/report.py``                 Gu ch. 6: Table 6.2 / Fig. 6.3, cost
``meta_splits``          (``examples/meta_nmt/report.py splits``)        ... the MetaNMT splits of a folder
``greedy_report``        ``examples/trainable_greedy/report.py``         Gu ch. 7: Figs. 7.3-7.5
``nat_pipeline``         (``python -m``; ``recipes/gu/ch8.sh``)          Gu ch. 8: teacher to Table 8.2
``nat_latency``          (``python -m``; ``nat_pipeline``)               ... decoding latency, Fig. 8.6
``simul_report``         ``examples/simultaneous/report.py``             Gu ch. 9: Figs. 9.4-9.6, dominance
``conversation_report``  ``examples/multi_speaker_conversations/          Maruf ch. 5: Table 5.3 layout, cost
                         report.py``
``bimsmt``               (``... report.py from-bimsmt``)                 ... the Bi-MSMT release converted
``transfer_pipeline``    ``recipes/nguyen/transfer.py``                  Nguyen ch. 3: parent -> child runs,
                                                                         Table 3.3, Fig. 3.1; the tiny slice
=======================  ==============================================  ======================================

Nothing else in the package imports these modules; they may use every other tools package.
"""

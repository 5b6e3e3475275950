"""fairseq_ext.tools.export: use a trained model outside fairseq (``python -m fairseq_ext.tools.export.<name>``).

=====================  =====================================  ===============================================
module                 console script                         what
=====================  =====================================  ===============================================
``export``             ``fairseq-ext-export``                 a checkpoint -> CTranslate2 (transformer archs;
                                                              ``--list-archs`` says which cannot and why), with
                                                              the source segmentation model
``export_twt``         (``fairseq-ext-export``)               Nguyen ch. 6 TwT models as CTranslate2 Transformers
``translate``          ``fairseq-ext-translate``              raw lines -> detokenised translations with an
                                                              exported model (CTranslate2)
``simuleval_agent``    — (optional: SimulEval installed)      Gu ch. 9: the agent as a SimulEval text agent
``greedy_check``       — (``python -m``)                      exported models against fairseq on a data set:
                                                              identical greedy outputs, reference log-probs
=====================  =====================================  ===============================================
"""

"""The systems of the document-context diagnostic (recipes/bench/diagnostics.py, Maruf ch. 3-4 and their
baselines): per task, each system's family, stage-2 flags, the distance buckets its context can resolve, and the
shapes and learning rates of the two families. Kept in the package so that tests read the same table."""
from fairseq_ext.tools.analysis.diagnostics import BUCKETS
from fairseq_ext.tools.analysis.diagnostics_runs import LANGS

TRANSFORMER = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64",
               "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
               "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0.1"]
RNN = ["--encoder-embed-dim", "64", "--encoder-hidden-size", "64", "--decoder-layers", "2",
       "--decoder-variant", "plain", "--dropout", "0.1"]
SHAPES = {"transformer": TRANSFORMER, "rnn": RNN}  # every system of a family has its shape
LR = {"transformer": (2e-3, 1e-3), "rnn": (5e-3, 2e-3)}  # Adam peak learning rate of stage 1, stage 2
FAMILIES = {"transformer": ["--arch", "transformer_maruf_base_bench"], "rnn": ["--arch", "rnnsearch_tiny"]}  # stage 1
GOLD = ["--doc-target-context", "gold"]
ALL = list(BUCKETS)

# task -> [(system, family, stage-2 flags (arch + task flags, also used to score), resolvable buckets, note)]
# "sentence": the family's stage-1 model trained on (no flags). Resolvable = what its context can decide.
SYSTEMS = {
    "antecedent": [
        ("sentence", "transformer", None, [], "transformer_maruf_base_bench"),
        ("concat", "transformer", ["--arch", "transformer_maruf_base_bench", "--doc-concat-prev", "1"], ["1"],
         "2-to-1 concatenation (previous sentence + <brk>)"),
        ("hatt_enc", "transformer", ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench", "--doc-context-mode",
                                     "offline"], ["1", "2", "3"], "H-attention sparse-soft, encoder, offline"),
        ("zhang_enc", "transformer", ["--arch", "transformer_zhang2018_bench", "--ctx-integration", "encoder",
                                      "--doc-context-mode", "online"], ["1", "2"],
         "Zhang et al. 2018 (2 previous sentences, sentence parameters frozen)"),
        ("han_enc", "transformer", ["--arch", "transformer_han_enc_bench", "--doc-context-mode", "online"],
         ["1", "2", "3"], "HAN encoder, Miculicich et al. 2018 (3 previous sentences)"),
        ("han_dec", "transformer", ["--arch", "transformer_han_dec_bench", "--doc-context-mode", "online", *GOLD],
         ["1", "2", "3"], "HAN decoder, Miculicich et al. 2018 (gold translations of the 3 previous sentences)"),
        ("rnn_sentence", "rnn", None, [], "rnnsearch (2-layer plain GRU decoder)"),
        ("m2c_src", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2c", "--doc-memories", "src"],
         ["1", "2", "3"], "memory network, source memory, Memory-to-Context"),
        ("m2o_src", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2o", "--doc-memories", "src"],
         ["1", "2", "3"], "memory network, source memory, Memory-to-Output"),
        ("jean2017", "rnn", ["--arch", "docmem_tiny", "--doc-context", "jean2017"], ["1"],
         "Jean et al. 2017 (attention over the previous source sentence)"),
        # the thesis-size preset at the family's shape: its attention MLP (256 there) and document-RNN dropout set
        # to the stage-1 model's (rnnsearch_tiny: attention = hidden; docmem_tiny: the model's dropout)
        ("wang2017", "rnn", ["--arch", "docmem_wang2017", "--attention-dim", "64", "--doc-rnn-dropout", "0.1"],
         ["1", "2", "3"], "Wang et al. 2017 (hierarchical summary of 3 previous sentences, auxiliary decoder input)"),
    ],
    "cataphor": [
        ("sentence", "transformer", None, [], "transformer_maruf_base_bench"),
        ("hatt_enc_off", "transformer", ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench", "--doc-context-mode",
                                         "offline"], ["1", "2", "3"], "H-attention, encoder, offline"),
        ("hatt_enc_on", "transformer", ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench", "--doc-context-mode",
                                        "online"], [], "H-attention, encoder, online (must stay at the bound)"),
        ("rnn_sentence", "rnn", None, [], "rnnsearch"),
        ("m2o_src_off", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2o", "--doc-memories", "src",
                                "--doc-context-mode", "offline"], ["1", "2", "3"],
         "memory network, source memory, M2O, offline"),
        ("m2o_src_on", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2o", "--doc-memories", "src",
                               "--doc-context-mode", "online"], [],
         "memory network, source memory, M2O, online (must stay at the bound)"),
    ],
    "consistency": [
        ("sentence", "transformer", None, [], "transformer_maruf_base_bench"),
        ("hatt_enc", "transformer", ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench"], [],
         "H-attention, encoder (source context: must stay at the bound)"),
        ("hatt_dec", "transformer", ["--arch", "transformer_selattn_dec_hier_sparsesoft_bench", *GOLD], ALL,
         "H-attention sparse-soft, decoder, gold target context"),
        ("rnn_sentence", "rnn", None, [], "rnnsearch"),
        ("m2c_tgt", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2c", "--doc-memories", "tgt",
                            *GOLD], ALL, "memory network, target memory, M2C, gold target context"),
        ("m2o_tgt", "rnn", ["--arch", "docmem_tiny", "--memory-integration", "m2o", "--doc-memories", "tgt",
                            *GOLD], ALL, "memory network, target memory, M2O, gold target context"),
    ],
}
BCD = {"hatt_dec": "sentence", "m2c_tgt": "rnn_sentence", "m2o_tgt": "rnn_sentence"}  # doc model -> pass 0
TASK_FLAGS = ["--task", "doc_translation", *LANGS]

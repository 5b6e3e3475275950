"""Named configurations of the benchmark (``recipes/bench/bench.py``) and of the recipes.

One entry per system: the ``fairseq-train`` flags (after the data folder), the task, and the
``fairseq-generate`` flags.  Every later issue adds its rows here; the baseline is what every
thesis method is compared against, at the same data, budget and decoding settings.

``python -m fairseq_ext.tools.evaluation.bench_configs NAME`` prints the shell-quoted train flags of NAME
(``--context NAME``: the task flags that build its document context, for a tool decoding its checkpoint).
"""
import os
import shlex
import sys

from fairseq_ext.modules.arch_utils import shape_flags

# The small fairseq transformer tuned for the ~29k-verse es-en Bible on 2 CPU cores (README).
# PreNorm makes the high learning rate stable; bf16 autocast uses the CPU's AMX/AVX512-BF16 units.
TRANSFORMER_SMALL = ["--arch", "transformer", *shape_flags("bench")]  # the bench shape (arch_utils.SHAPES)

# bf16 autocast + the math attention kernel where the CPU computes bf16 natively (1.5x and 1.3x per
# step on the AMX machine of job1/job2); float32 elsewhere (emulated bf16 is ~9x slower, measured on
# an AVX2-only EPYC). The job's flags are recorded with its rows.
# (the same test as fairseq_ext.tasks.translation_ext.native_cpu_bf16, without importing torch)
def native_cpu_bf16() -> bool:
    # torch told to use no AVX-512 kernels (ATEN_CPU_CAPABILITY=avx2/default, e.g. emulating an AVX2-only CPU:
    # recipes/bench/quickstart_avx2.sh) computes float32, as that CPU would
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() in ("default", "avx2"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


BF16 = ["--cpu-bf16", "--math-attention"] if native_cpu_bf16() else []

SCHEDULE = [
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--clip-norm", "1.0",
    "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "300",
    "--warmup-init-lr", "1e-7", "--label-smoothing", "0.1",
    "--max-tokens", "2048", *BF16,
]
OPTIM = SCHEDULE + ["--criterion", "label_smoothed_cross_entropy"]

# (bench.py adds --post-process from the data's segment.json: sentencepiece or subword_nmt)
# the decoding length limit of every recipe, max length = 1.2·|x| + 10 (the shell recipes: recipes/lib.sh LEN); as
# fairseq options (DECODE_LIMITS: --eval-bleu-args, a generation Namespace) and as flags (DECODE_LEN)
DECODE_LIMITS = {"max_len_a": 1.2, "max_len_b": 10}
DECODE_LEN = [s for k, v in DECODE_LIMITS.items() for s in ("--" + k.replace("_", "-"), str(v))]
GENERATE = ["--beam", "5", "--batch-size", "64", *DECODE_LEN]

CONFIGS = {
    "transformer": {
        "desc": "fairseq transformer 3+3 d256 ffn1024 PreNorm (baseline)",
        "task": "translation_ext",
        "train": TRANSFORMER_SMALL + OPTIM,
        "generate": GENERATE,
    },
    # Ampomah ch. 3: Multi-Layer Multi-Head Attention M-11 over all 3 encoder layers (issue 3)
    "jas_m11": {
        "desc": "Ampomah MLMHA M-11, top 3 encoder layers (same dims)",
        "task": "translation_ext",
        "train": ["--arch", "transformer_jas_m11_bench"] + OPTIM,
        "generate": GENERATE,
    },
    # Ampomah ch. 5: Dual Contextual module in every encoder layer, kernel size 2 (issue 3). At the bench's lr 3e-3
    # (tuned for the baseline) it trails per update; at the DC paper's 7e-4 (enc_dc_lr7e4 vs transformer_lr7e4) it
    # is level: RESULTS.md, "why Enc-DC trails per update" (issue 19)
    "enc_dc": {
        "desc": "Ampomah Enc-DC (f=2) (same dims)",
        "task": "translation_ext",
        "train": ["--arch", "transformer_enc_dc_bench"] + OPTIM,
        "generate": GENERATE,
    },
    # Nguyen ch. 6: PreNorm + ScaleNorm + FixNorm (issue 4)
    "twt_scalenorm_fixnorm": {
        "desc": "Nguyen PreNorm+ScaleNorm+FixNorm (same dims)",
        "task": "translation_ext",
        "train": ["--arch", "transformer_twt_bench", "--norm-type", "scalenorm", "--fixnorm"] + OPTIM,
        "generate": GENERATE,
    },
}

# The quickstart's system (recipes/quickstart.sh): the baseline's recipe at d 128, FFN 512 (transformer_cpu_small),
# since in a budget of minutes the number of updates limits: an update costs under half of the baseline's
# (float32 on an AVX2-only CPU: README, "Measured baseline (quickstart)"), every other flag the baseline's.
CONFIGS["quickstart"] = {
    "desc": "fairseq transformer 3+3 d128 ffn512 PreNorm (the quickstart's)",
    "task": "translation_ext",
    "train": ["--arch", "transformer_cpu_small"] + OPTIM,
    "generate": GENERATE,
}

# Every ch. 3 joint-attention variant and every DC placement, same budget and optimiser (recipes/ampomah).
for _v, _name in [("sagg", "S-Agg"), ("iter_sagg", "Iter-S-Agg"), ("cagg", "C-Agg"),
                  ("iter_cagg", "Iter-C-Agg"), ("m00", "M-00"), ("m01", "M-01"), ("m10", "M-10"),
                  ("m11", "M-11")]:
    CONFIGS.setdefault(f"jas_{_v}", {
        "desc": f"Ampomah {_name}, top 3 encoder layers (same dims)", "task": "translation_ext",
        "train": ["--arch", f"transformer_jas_{_v}_bench"] + OPTIM, "generate": GENERATE})
# S-Agg with each WS sum normalised (--jas-sum-layernorm; not in the thesis): is the equal-updates loss of the
# freshly initialised WS map (RESULTS.md, job variants) its missing normalisation?
# (and Iter-S-Agg with each of its chained WS sums normalised)
for _v, _name in [("sagg", "S-Agg + LayerNorm after the WS sum"),
                  ("iter_sagg", "Iter-S-Agg + LayerNorm after each WS sum")]:
    CONFIGS[f"jas_{_v}_sumln"] = {
        "desc": f"Ampomah {_name} (not in the thesis; same dims)",
        "task": "translation_ext",
        "train": ["--arch", f"transformer_jas_{_v}_bench", "--jas-sum-layernorm"] + OPTIM, "generate": GENERATE}
for _v, _name in [("dec", "Dec-DC"), ("full", "Full-DC")]:
    CONFIGS[f"{_v}_dc"] = {
        "desc": f"Ampomah {_name} (f=2) (same dims)", "task": "translation_ext",
        "train": ["--arch", f"transformer_{_v}_dc_bench"] + OPTIM, "generate": GENERATE}
# Ampomah ch. 4: auxiliary decoders on encoder layers 1 and 2 with AIF fusion, gamma = 1 (Eq. 4.1)
CONFIGS["ms12_aif"] = {
    "desc": "Ampomah MS-12+AIF (aux decoders on enc layers 1,2)", "task": "translation_ext",
    "train": ["--arch", "transformer_ms_aif_bench", "--aux-layers", "1,2",
              "--criterion", "multi_supervision_label_smoothed", "--aux-weight", "1.0"] + SCHEDULE,
    "generate": GENERATE}

# Nguyen ch. 5: fixnorm + lexical model on the TwT transformer (PreNorm+ScaleNorm+FixNorm) (issue 4)
CONFIGS["fixnorm_lex"] = {
    "desc": "Nguyen fixnorm+lex (lexical module, ScaleNorm, FixNorm) (same dims)", "task": "translation_ext",
    "train": ["--arch", "transformer_lex_bench", "--norm-type", "scalenorm", "--fixnorm"] + OPTIM,
    "generate": GENERATE}

# ---------------------------------------------------------------------------------------------
# Nguyen ch. 4, 5, 7 (issue 5; recipes/nguyen/ch{4,5,7}.sh). Every row keeps the baseline's model,
# optimiser and decoding; only the thesis feature differs.

# ch. 4: concatenation augmentation (task concat_translation) on the baseline transformer. Table 4.2
# (CONSEC, RAND), Table 4.4 (position shifts) and Table 4.5 (mask / sep-batch / reset-pos ablations).
for _name, _flags, _desc in [
    ("concat_consec", ["--concat", "consec"], "CONSEC: D_orig + consecutive pairs"),
    ("concat_rand", ["--concat", "rand"], "RAND: D_orig + pairs of a random permutation"),
    ("shift_sim", ["--position-shift", "sim"], "baseline + sim-shift (p=1/3)"),
    ("shift_uniform", ["--position-shift", "uniform"], "baseline + uniform-shift (p=0.1, 0..100)"),
    ("concat_rand_uniform_shift", ["--concat", "rand", "--position-shift", "uniform"], "RAND + uniform-shift"),
    ("concat_rand_mask", ["--concat", "rand", "--concat-attn-mask"], "RAND + mask"),
    ("concat_rand_sep_batch", ["--concat", "rand", "--concat-sep-batch"], "RAND + sep-batch"),
    ("concat_rand_mask_sep_batch", ["--concat", "rand", "--concat-attn-mask", "--concat-sep-batch"],
     "RAND + mask + sep-batch"),
    ("concat_rand_mask_sep_batch_reset_pos", ["--concat", "rand", "--concat-attn-mask", "--concat-sep-batch",
                                              "--concat-reset-pos"], "RAND + mask + sep-batch + reset-pos"),
]:
    CONFIGS[_name] = {"desc": f"Nguyen ch.4 {_desc} (same model)", "task": "concat_translation",
                      "train": TRANSFORMER_SMALL + OPTIM + _flags, "generate": GENERATE}

# ch. 5 on the transformer: untied (no embedding sharing). (tied = the baseline; fixnorm =
# twt_scalenorm_fixnorm; fixnorm+lex = fixnorm_lex.)
CONFIGS["transformer_untied"] = {
    "desc": "Nguyen ch.5 untied: no embedding sharing (same dims)", "task": "translation_ext",
    "train": [f for f in TRANSFORMER_SMALL if f != "--share-all-embeddings"] + OPTIM, "generate": GENERATE}

# ch. 5 on the thesis's own model: Luong global-attention LSTM ("general" score, input feeding, source
# reversed, U[-0.01, 0.01] init, dropout 0.2), 2 layers x 256 (thesis 2 x 512) to fit the CPU budget.
# Adam 1e-3 + clip 5 instead of the thesis's Adadelta (faster to converge in a wall-clock budget);
# no bf16 autocast (LSTM). Compare these rows with luong_tied (the thesis's Table 5.4 reference).
LUONG_OPTIM = ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "1e-3", "--clip-norm", "5.0",
               "--max-tokens", "2048", "--criterion", "cross_entropy"]
for _arch, _desc in [("lstm_luong", "untied"), ("lstm_luong_tied", "tied"),
                     ("lstm_luong_fixnorm", "fixnorm (r=5)"), ("lstm_luong_fixnorm_lex", "fixnorm+lex (r=3.5)")]:
    CONFIGS["luong_" + (_arch[len("lstm_luong_"):] or "untied")] = {
        "desc": f"Nguyen ch.5 Luong LSTM 2x256 {_desc}", "task": "translation_ext",
        "train": ["--arch", _arch, "--encoder-embed-dim", "256", "--encoder-layers", "2"] + LUONG_OPTIM,
        "generate": GENERATE}

# Arthur et al. (2016), the discrete-lexicon baseline of Table 5.4: luong_tied + the bias log(L_f a_t + eps). Its
# lexicon p_l(e|f) is estimated (eflomal links, top 100 per source type) from the job's training data before
# training, by the "prepare" step (see resolve()); the checkpoints carry it, so decoding needs no file.
CONFIGS["luong_arthur"] = {
    "desc": "Arthur et al. 2016 discrete lexicon bias on the Luong LSTM 2x256 tied (eps 0.001)",
    "task": "translation_ext",
    "train": ["--arch", "lstm_luong_arthur", "--encoder-embed-dim", "256", "--encoder-layers", "2",
              "--arthur-lexicon", "{run}/arthur_lexicon.pt", "--arthur-eps", "0.001"] + LUONG_OPTIM,
    "generate": GENERATE,
    "prepare": [("{run}/arthur_lexicon.pt", ["-m", "fairseq_ext.tools.corpora.arthur_lexicon", "--data", "{bin}", "--src",
                                             "{src}", "--tgt", "{tgt}", "--out", "{run}/arthur_lexicon.pt"])]}

# ch. 7: untied positional attention (Eq. 7.6) on the baseline model (PreNorm LayerNorm, same dims),
# and on the thesis's PreNorm + ScaleNorm + FixNorm model (compare with twt_scalenorm_fixnorm).
CONFIGS["untied_pos"] = {
    "desc": "Nguyen ch.7 untied-pos (sinusoidal p, Eq. 7.6) (same dims)", "task": "translation_ext",
    "train": ["--arch", "transformer_untied_pos_bench"] + OPTIM, "generate": GENERATE}
CONFIGS["random_untied_pos"] = {
    "desc": "Nguyen ch.7 random-untied-pos (learned random p) (same dims)", "task": "translation_ext",
    "train": ["--arch", "transformer_untied_pos_random_bench"] + OPTIM, "generate": GENERATE}
CONFIGS["untied_pos_scalenorm_fixnorm"] = {
    "desc": "Nguyen ch.7 untied-pos on PreNorm+ScaleNorm+FixNorm (same dims)", "task": "translation_ext",
    "train": ["--arch", "transformer_untied_pos_bench", "--norm-type", "scalenorm", "--fixnorm"] + OPTIM,
    "generate": GENERATE}
CONFIGS["random_untied_pos_scalenorm_fixnorm"] = {
    "desc": "Nguyen ch.7 random-untied-pos on PreNorm+ScaleNorm+FixNorm (same dims)", "task": "translation_ext",
    "train": ["--arch", "transformer_untied_pos_random_bench", "--norm-type", "scalenorm", "--fixnorm"] + OPTIM,
    "generate": GENERATE}

# ---------------------------------------------------------------------------------------------
# Gu ch. 2 (issue 11; recipes/gu/ch2.sh): RNNsearch, Bahdanau attention over a bi-GRU encoder with the
# dl4mt conditional GRU decoder (fairseq_ext/models/rnnsearch.py ``rnnsearch_bench``: emb 256, encoder
# 2x288, decoder 576, attention 288, all embeddings shared; 7.46M parameters vs the transformer's 7.58M).
# Plain maximum likelihood (Eq. 2.8, no label smoothing), Adam 1e-3 + clip 1 (the thesis: Adadelta/Adam),
# no bf16 autocast (GRU cells). Decoded with fairseq's beam 5 like every row; recipes/gu/ch2.sh adds the
# §2.3 decoders (greedy, shrinking beam, NPD) on the same checkpoint.
RNNSEARCH_OPTIM = ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "1e-3", "--clip-norm", "1.0",
                   "--max-tokens", "2048", "--criterion", "cross_entropy"]
CONFIGS["rnnsearch"] = {
    "desc": "Gu ch.2 RNNsearch: bi-GRU + attention + conditional GRU, emb 256 (same params)",
    "task": "translation_decoding", "train": ["--arch", "rnnsearch_bench"] + RNNSEARCH_OPTIM,
    "generate": GENERATE}
# Gu ch. 9 (recipes/gu/ch9.sh, recipes/bench/converged_decoding.sh): the environment of the simultaneous agents, the
# same RNNsearch with a uni-directional encoder (Eq. 9.1: the prefix read so far is encoded left to right)
CONFIGS["rnnsearch_uni"] = {
    "desc": "Gu ch.9 environment: rnnsearch_bench with a uni-directional GRU encoder (Eq. 9.1)",
    "task": "translation_decoding", "train": ["--arch", "rnnsearch_bench", "--encoder-unidirectional"] + RNNSEARCH_OPTIM,
    "generate": GENERATE}

# ---------------------------------------------------------------------------------------------
# Maruf ch. 4 (issue 13; recipes/maruf/ch4.sh): stage 2 of the two-stage procedure on Bible chapters (task
# doc_translation, one or more whole chapters per batch), every system warm-started from the same stage-1
# sentence checkpoint (--finetune-from-model, added by the recipe) and trained on all its parameters with
# Adam at a fine-tuning learning rate; the stage-2 baseline is the sentence model trained on the same batches.
# Decoded greedily (the thesis decodes greedily everywhere). bench.py runs them with --finetune-from-model STAGE1
# (and --doc-generated-dir where they read the stage-1 translations; recipes/bench/converged_doc.sh); speed.py times
# them (it adds --doc-ids-dir).
MARUF_STAGE2 = ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--clip-norm", "1.0", "--lr", "3e-4",
                "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100", "--criterion",
                "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "2048"]
GREEDY = ["--beam", "1", "--batch-size", "64", *DECODE_LEN]
for _name, _desc, _flags in [
        ("maruf_sentence", "Maruf ch.4 stage-2 baseline: the sentence transformer on document batches",
         ["--arch", "transformer_maruf_base_bench"]),
        ("maruf_hatt_enc_off", "Maruf ch.4 H-attention sparse-soft, encoder, offline (whole chapter)",
         ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench", "--doc-context-mode", "offline"]),
        ("maruf_hatt_enc_on", "Maruf ch.4 H-attention sparse-soft, encoder, online (earlier verses)",
         ["--arch", "transformer_selattn_enc_hier_sparsesoft_bench", "--doc-context-mode", "online"]),
        ("maruf_hatt_dec", "Maruf ch.4 H-attention sparse-soft, decoder (target context = stage-1 translations; "
         "the recipe adds --doc-generated-dir)",
         ["--arch", "transformer_selattn_dec_hier_sparsesoft_bench", "--doc-target-context", "generated"]),
        ("maruf_zhang_enc", "Zhang et al. 2018 (2 previous verses, sentence parameters frozen), encoder",
         ["--arch", "transformer_zhang2018_bench", "--ctx-integration", "encoder", "--doc-context-mode",
          "online"]),
        ("maruf_concat_warm", "concatenation 2-to-1 (previous verse + <brk>), warm-started: <brk> row added",
         ["--arch", "transformer_maruf_base_bench", "--doc-concat-prev", "1"]),
        ("maruf_han_enc", "Miculicich et al. 2018 HAN encoder (3 previous verses), online",
         ["--arch", "transformer_han_enc_bench", "--doc-context-mode", "online"]),
        ("maruf_han_dec", "Miculicich et al. 2018 HAN decoder (3 previous verses' translations; trained on the "
         "stage-1 translations, the recipe adds --doc-generated-dir; decode with HAN_DEC_GENERATE)",
         ["--arch", "transformer_han_dec_bench", "--doc-context-mode", "online", "--doc-target-context",
          "generated"])]:
    CONFIGS[_name] = {"desc": _desc, "task": "doc_translation", "train": _flags + MARUF_STAGE2,
                      "generate": GREEDY}
# the HAN decoder decodes in document order, each verse reading the model's own translations of the previous ones
# (pass 0: the model without context; one Gauss-Seidel pass)
HAN_DEC_GENERATE = GREEDY + ["--decoding-algorithm", "doc_bcd", "--doc-iterations", "1", "--bcd-update", "gauss_seidel"]
CONFIGS["maruf_han_dec"]["generate"] = HAN_DEC_GENERATE

# Maruf ch. 3 (issue 13; recipes/maruf/ch3.sh): stage 2 of the memory networks on Bible chapters, every system
# warm-started from the stage-1 rnnsearch_bench checkpoint, Adam 1e-3 + clip 1, cross-entropy (the recipe's
# OPTIM=adam); the target memory reads the stage-1 translations (--doc-target-context generated: the recipe and
# speed.py add --doc-generated-dir; speed.py gives every configuration of the job the same batches).
MARUF3_STAGE2 = ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "1e-3", "--clip-norm", "1.0",
                 "--criterion", "cross_entropy", "--max-tokens", "2048"]
for _name, _desc, _flags in [
        ("maruf3_sentence", "Maruf ch.3 stage-2 baseline: rnnsearch_bench on document batches",
         ["--arch", "rnnsearch_bench"]),
        ("maruf3_m2c_both", "Maruf ch.3 memory network, source + target memory, Memory-to-Context",
         ["--arch", "docmem_m2c_both_bench", "--doc-target-context", "generated"]),
        ("maruf3_prev_tgt", "Maruf ch.3 baseline PREV TGT (the previous verse's translation)",
         ["--arch", "ctx_prevtgt_rnn_bench", "--doc-target-context", "generated"]),
        ("maruf3_wang2017", "Maruf ch.3 baseline Wang et al. 2017 (hierarchical RNN over the 3 previous verses, "
         "an auxiliary decoder input)", ["--arch", "docmem_wang2017_bench"]),
        ("maruf3_jean2017", "Maruf ch.3 baseline Jean et al. 2017 (attention over the previous verse's source)",
         ["--arch", "ctx_jean2017_rnn_bench"])]:
    CONFIGS[_name] = {"desc": _desc, "task": "doc_translation", "train": _flags + MARUF3_STAGE2,
                      "generate": GREEDY}

# Gu ch. 4 (recipes/gu/ch4.sh, recipes/bench/converged_tm.sh): SEG-NMT's translation stage, task seg_translation
# (the {split}.tm.jsonl side files of `fairseq-ext-tm retrieve` next to the binarized data) with the top-2 retrieved
# pairs, batches of 32 sentence pairs (the thesis's), Adam 1e-3 + clip 1. Warm-started from a stage-1
# rnnsearch_bench (bench.py --finetune-from-model: seg_nmt copies the sentence tensors, M = I, lambda = 0) but
# seg_copynet (other shapes: trained from scratch); seg_rnnsearch is the baseline continued on the same batches
# (the memory is not given to it).
SEG_STAGE2 = ["--tm-topk", "2", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "1e-3", "--clip-norm",
              "1.0", "--batch-size", "32"]
for _name, _desc, _flags in [
        ("seg_rnnsearch", "Gu ch.4 NMT baseline: rnnsearch_bench on the SEG-NMT batches",
         ["--arch", "rnnsearch_bench", "--criterion", "cross_entropy"]),
        ("seg_nmt_shallow", "Gu ch.4 SEG-NMT, shallow fusion (Eq. 4.5), top-2 retrieved pairs",
         ["--arch", "seg_nmt_bench", "--criterion", "seg_nmt_cross_entropy"]),
        ("seg_nmt_deep", "Gu ch.4 SEG-NMT, deep fusion (Eq. 4.4), top-2 retrieved pairs",
         ["--arch", "seg_nmt_bench", "--fusion", "deep", "--criterion", "seg_nmt_cross_entropy"]),
        ("seg_copynet", "Gu ch.4 baseline CopyNet over the top-1 retrieved target (from scratch)",
         ["--arch", "seg_copynet_bench", "--criterion", "copynet_cross_entropy"])]:
    CONFIGS[_name] = {"desc": _desc, "task": "seg_translation", "train": _flags + SEG_STAGE2,
                      "generate": GENERATE + ["--tm-topk", "2"]}

# Decoding a stage-2 system (bench.py --finetune-from-model STAGE1): the task flags that build its context in
# training (DOC_CONTEXT_FLAGS) build it at test too; a system reading the generated target context (the stage-1
# model's translations) decodes in two passes, the thesis's (§3.3; block coordinate descent K = 1, Jacobi, pass 0
# = the stage-1 model: bench.py gives --path BEST:STAGE1), the HAN decoder in document order (HAN_DEC_GENERATE).
DOC_CONTEXT_FLAGS = ("--doc-context-mode", "--doc-target-context", "--doc-concat-prev")
TWO_PASS = ["--decoding-algorithm", "doc_bcd", "--doc-iterations", "1", "--bcd-update", "jacobi",
            "--bcd-init", "base_model"]


def context_flags(flags: list) -> list:
    """The DOC_CONTEXT_FLAGS of ``flags`` with their values, in order."""
    return [x for i, f in enumerate(flags) if f in DOC_CONTEXT_FLAGS for x in (f, flags[i + 1])]


def reads_generated(flags: list) -> bool:
    """Whether ``flags`` train on the generated target context (``--doc-target-context generated``)."""
    return "generated" in context_flags(flags)[1::2]


def doc_data_flags(data_bin, generated_dir=None) -> list:
    """The data flags of a ``doc_translation`` run on the binarized folder ``data_bin``: ``--doc-ids-dir`` = the
    segmented folder where the binarized one has no ``{split}.ids`` (``fairseq-ext-data binarize`` copies them), and
    ``--doc-generated-dir`` when ``generated_dir`` is given."""
    from pathlib import Path

    flags = [] if (Path(data_bin) / "train.ids").exists() else ["--doc-ids-dir", str(Path(data_bin).parent)]
    return flags + (["--doc-generated-dir", str(generated_dir)] if generated_dir else [])


for _cfg in CONFIGS.values():
    if _cfg["task"] == "doc_translation":
        _two_pass = TWO_PASS if _cfg["generate"] is GREEDY and reads_generated(_cfg["train"]) else []
        _cfg["generate"] = _cfg["generate"] + _two_pass + context_flags(_cfg["train"])

# ---------------------------------------------------------------------------------------------
# CPU inference (issue 17): Kasai et al. (2021) "Deep Encoder, Shallow Decoder": the baseline's layers moved to
# the encoder, 6+1 at the same dimensions (5.79M parameters without the embeddings against 3+3's 5.53M: a
# decoder layer has cross-attention), the autoregressive model a NAT should be compared with for speed; a plain
# fairseq transformer, so fairseq-ext-export converts it to CTranslate2.
_DEEP_SHALLOW = [("6" if TRANSFORMER_SMALL[i - 1] == "--encoder-layers" else
                  "1" if TRANSFORMER_SMALL[i - 1] == "--decoder-layers" else f) for i, f in enumerate(TRANSFORMER_SMALL)]
CONFIGS["transformer_6_1"] = {"desc": "Kasai et al. 2021 deep encoder, shallow decoder: transformer 6+1 (same dims)",
                              "task": "translation_ext", "train": _DEEP_SHALLOW + OPTIM, "generate": GENERATE}

# ---------------------------------------------------------------------------------------------
# Reproduction at convergence (issue 19; recipes/bench/converged.sh): the candidate causes of Enc-DC's
# per-update gap and the AIF initialisation, one change each against enc_dc / ms12_aif, at equal updates.
_LR_7E4 = [("7e-4" if f == "3e-3" else f) for f in OPTIM]
for _name, _desc, _train in [
        ("enc_dc_local_zero", "Enc-DC, W_z's local half zero-initialised (starts as self-attention)",
         ["--arch", "transformer_enc_dc_bench", "--dc-agg-init", "local-zero"] + OPTIM),
        ("enc_dc_pad_left", "Enc-DC, conv window [t-1, t] instead of [t, t+1]",
         ["--arch", "transformer_enc_dc_bench", "--dc-encoder-conv-padding", "left"] + OPTIM),
        ("enc_dc_nodrop", "Enc-DC, no dropout inside the Local Context Unit",
         ["--arch", "transformer_enc_dc_bench", "--dc-dropout", "0"] + OPTIM),
        ("enc_dc_lr7e4", "Enc-DC at lr 7e-4 (the DC paper's)", ["--arch", "transformer_enc_dc_bench"] + _LR_7E4),
        ("transformer_lr7e4", "baseline at lr 7e-4", TRANSFORMER_SMALL + _LR_7E4),
        ("dec_dc_lr7e4", "Dec-DC at lr 7e-4 (the DC paper's)", ["--arch", "transformer_dec_dc_bench"] + _LR_7E4),
        ("full_dc_lr7e4", "Full-DC at lr 7e-4 (the DC paper's)", ["--arch", "transformer_full_dc_bench"] + _LR_7E4),
        ("jas_iter_cagg_lr7e4", "Ampomah Iter-C-Agg at lr 7e-4 (against transformer_lr7e4)",
         ["--arch", "transformer_jas_iter_cagg_bench"] + _LR_7E4),
        ("ms12_aif_zero", "MS-12+AIF, AIF weights zero-initialised (starts as MS-12)",
         CONFIGS["ms12_aif"]["train"] + ["--aif-zero-init"]),
        ("ms12", "MS-12 without AIF (aux decoders on enc layers 1,2)",
         ["--arch", "transformer_ms_bench", "--aux-layers", "1,2", "--criterion", "multi_supervision_label_smoothed",
          "--aux-weight", "1.0"] + SCHEDULE)]:
    CONFIGS[_name] = {"desc": _desc, "task": "translation_ext", "train": _train, "generate": GENERATE}

# ---------------------------------------------------------------------------------------------
# Gu ch. 5 (issue 15; recipes/gu/ch5.sh): many sources -> English (task universal_translation on a
# `fairseq-ext-data universal` folder, its ULR arrays in <folder>/ulr), the universal_rnn_bench shape, training
# languages drawn with temperature 5, Adam 1e-3 + clip 1. speed.py times them against gu5_multi (the training
# cost per word of ULR / ULR+MoLE vs Multi-NMT); recipes/gu/ch5.sh runs them at fixed budgets, bench.py at
# convergence (recipes/bench/converged_universal.sh: --src src --tgt en, the references in the folder's raw/).
GU5 = ["--arch", "universal_rnn_bench", "--lang-temperature", "5", "--optimizer", "adam", "--lr", "1e-3",
       "--clip-norm", "1.0", "--max-tokens", "2048"]
for _name, _desc, _flags in [
        ("gu5_multi", "Gu ch.5 Multi-NMT (marked per-language source vocabularies)",
         ["--criterion", "cross_entropy"]),
        ("gu5_ulr", "Gu ch.5 + ULR (Eqs. 5.2-5.5)", ["--ulr", "--criterion", "cross_entropy"]),
        ("gu5_ulr_mole", "Gu ch.5 + ULR + MoLE (Eqs. 5.6-5.7, gate loss)",
         ["--ulr", "--mole", "--criterion", "universal_mole_cross_entropy"])]:
    CONFIGS[_name] = {"desc": _desc, "task": "universal_translation", "train": GU5 + _flags, "generate": GENERATE}
# + back-translation (§5.4.2): the synthetic low-resource pairs of split `bt_converged` (recipes/bench/
# converged_universal.sh writes it: two passes bootstrapped from the converged + ULR model), each real pair counted 10
# times against them (--bt-real-upsample; the thesis gives no ratio, 1:1 drowned the real pairs at 8 synthetic to 1)
GU5_BT = ["--bt-split", "bt_converged", "--bt-real-upsample", "10"]
for _name in ("gu5_multi", "gu5_ulr", "gu5_ulr_mole"):
    CONFIGS[f"{_name}_bt10"] = dict(CONFIGS[_name], desc=CONFIGS[_name]["desc"] + " + BT (real pairs x10)",
                                    train=CONFIGS[_name]["train"] + GU5_BT)

# Maruf ch. 5 (issue 14; recipes/maruf/ch5.sh): Bi-MSMT on conversations (task conversation_translation on
# data/bible_conv_es_en, whole conversations per batch), the recipe's CPU-mode systems (the thesis's 256/256/128
# sizes, the NMT-encoder sentence vectors, InitDec), Adam 1e-3 + clip 1, decoded greedily online (the thesis's
# §5.7). speed.py times them against maruf5_base (the reference target history, the task's default: the same work
# as the generated one); bench.py runs them at convergence (recipes/bench/converged_conv.sh: the base from scratch,
# then each system warm-started from it with --finetune-from-model; --doc-generated-dir gives the systems that read
# the target history the stage-1 model's translations, conv_generated_flags).
MARUF5 = ["--conv-langs", "en,es", "--criterion", "conversation_cross_entropy",
          "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "1e-3", "--clip-norm", "1.0",
          "--max-tokens", "2048"]
MARUF5_CTX = ["--arch", "bimsmt_rnn", "--src-sent-encoder", "nmt_encoder", "--ctx-inject", "initdec"]
for _name, _desc, _flags in [
        ("maruf5_base", "Maruf ch.5 base (two RNNsearch directions, no context)", ["--arch", "bimsmt_rnn_base"]),
        ("maruf5_src_lsa", "Maruf ch.5 source context, Lang-Specific Sentence-level Attention (Eqs. 5.1-5.2)",
         MARUF5_CTX + ["--src-ctx", "lang_sent_attn"]),
        ("maruf5_src_la", "Maruf ch.5 source context, Lang-Specific (turn) Attention", MARUF5_CTX + ["--src-ctx", "lang_attn"]),
        ("maruf5_tgt", "Maruf ch.5 target context (frozen base vectors)",
         MARUF5_CTX + ["--src-ctx", "none", "--tgt-ctx", "lang_sent_attn", "--tgt-vectors", "frozen_base"]),
        ("maruf5_dual", "Maruf ch.5 Dual Context Src-Tgt", MARUF5_CTX + ["--dual", "src_tgt", "--tgt-vectors", "frozen_base"]),
        ("maruf5_dual_mix", "Maruf ch.5 Dual Context Src-Tgt-Mix",
         MARUF5_CTX + ["--dual", "src_tgt_mix", "--tgt-vectors", "frozen_base"])]:
    CONFIGS[_name] = {"desc": _desc, "task": "conversation_translation", "train": MARUF5 + _flags, "generate": GREEDY}


def reads_target_history(flags: list) -> bool:
    """Whether a conversation_translation configuration's model reads the target side of the history (the target
    context, --tgt-ctx, or a dual context, --dual; Maruf Table 5.3's "Target Context" and "Dual Context" rows)."""
    return any(opt in flags and flags[flags.index(opt) + 1] != "none" for opt in ("--tgt-ctx", "--dual"))


def conv_generated_flags(generated_dir) -> list:
    """The task flags that train on a stage-1 model's translations as the target history (``{split}.tgt`` in
    ``generated_dir``), the thesis's setting (Maruf §5.7)."""
    return ["--conv-target-history", "generated", "--conv-generated-dir", str(generated_dir)]

# ---------------------------------------------------------------------------------------------
# Real-data evidence on a GPU (recipes/bench/gpu_batch.sh): the rows still open at convergence.
# Ampomah ch. 4 MS-l with a single auxiliary decoder (Tables 4.1, 4.6: MS-1, MS-2), as ms12 without AIF.
for _l in ("1", "2"):
    CONFIGS[f"ms{_l}"] = {
        "desc": f"Ampomah MS-{_l} without AIF (one aux decoder, on enc layer {_l})", "task": "translation_ext",
        "train": ["--arch", "transformer_ms_bench", "--aux-layers", _l, "--criterion", "multi_supervision_label_smoothed",
                  "--aux-weight", "1.0"] + SCHEDULE,
        "generate": GENERATE}

# Nguyen ch. 4 Table 4.2 on the thesis's own base (ch. 6: PreNorm + ScaleNorm + FixNorm, SMALLINIT, word dropout
# 0.1, Morishita chunked batching) at the bench's dims and optimiser; the baseline of this trio is twt_concat_none
# (run with --baseline twt_concat_none, and the thesis's patience 20: recipes/bench/gpu_batch.sh SET=nguyen4).
TWT_MODEL = ["--arch", "transformer_twt_bench", "--norm-type", "scalenorm", "--fixnorm", "--twt-init", "smallinit"]
TWT_BASE = TWT_MODEL + ["--word-dropout", "0.1", "--batching", "chunked", "--chunk-size", "10000"]
for _mode, _desc in [("none", "baseline (no concatenation)"), ("consec", "CONSEC"), ("rand", "RAND")]:
    CONFIGS[f"twt_concat_{_mode}"] = {
        "desc": f"Nguyen ch.4 {_desc} on the TwT base (ScaleNorm+FixNorm, SMALLINIT, word dropout, chunked)",
        "task": "concat_translation", "train": TWT_BASE + OPTIM + ["--concat", _mode], "generate": GENERATE}

# Nguyen ch. 6 Table 6.2 at the thesis's 6+6 layers (512/2048, 8 heads, dropout 0.3, all embeddings shared: the
# twt_{post,pre}norm_layernorm presets), Xavier (the "Baseline" rows) vs SMALLINIT, PostNorm vs PreNorm; the
# thesis's optimiser (Adam (0.9, 0.999), clip 1, INVSQRTDECAY lambda 1 with its shortest warm-up, 4k), word dropout
# 0.1, 4096-token batches; the baseline of this set is twt66_postnorm_xavier (the original Transformer).
TWT_TRAIN = ["--optimizer", "adam", "--adam-betas", "(0.9,0.999)", "--clip-norm", "1.0",
             "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "4096",
             "--word-dropout", "0.1", *BF16]
TWT_OPTIM = TWT_TRAIN + ["--lr-scheduler", "twt_invsqrt", "--lr-lambda", "1", "--lr-model-dim", "512",
                         "--warmup-updates", "4000"]
for _norm in ("postnorm", "prenorm"):
    for _init in ("xavier", "smallinit"):
        CONFIGS[f"twt66_{_norm}_{_init}"] = {
            "desc": f"Nguyen ch.6 Table 6.2 {'PostNorm' if _norm == 'postnorm' else 'PreNorm'} "
                    f"{'Xavier' if _init == 'xavier' else 'SMALLINIT'}, 6+6 512/2048/8 LayerNorm",
            "task": "translation_ext",
            "train": ["--arch", f"twt_{_norm}_layernorm", "--twt-init", _init] + TWT_OPTIM, "generate": GENERATE}

# Nguyen ch. 6 Table 6.4, the learning-rate regimes, on its model (PreNorm + FixNorm + ScaleNorm, SMALLINIT) at the bench
# shape (d 256) with the optimiser above: INVSQRTDECAY (Eq. 6.7, lambda 1, 8k warm-up; the baseline of this set),
# VALDECAY (the same warm-up to the same peak, then x0.8 when dev BLEU falls below the previous 3), NOWARMUP (VALDECAY
# from a flat 3e-4) and the 2xLR rows (lambda 2). VALDECAY decides at the end of an epoch, so its epochs are 200
# updates: each ends on one of gpu_batch.sh's validations (CURVE_EVERY 200).
_TWT_EPOCHS = ["--updates-per-epoch", "200"]
_TWT_PEAK = ["--lr-model-dim", "256", "--warmup-updates", "8000"]
for _name, _desc, _sched in [
        ("invsqrt", "INVSQRTDECAY", ["--lr-scheduler", "twt_invsqrt", "--lr-lambda", "1"] + _TWT_PEAK),
        ("invsqrt_2x", "INVSQRTDECAY + 2xLR", ["--lr-scheduler", "twt_invsqrt", "--lr-lambda", "2"] + _TWT_PEAK),
        ("valdecay", "VALDECAY", ["--lr-scheduler", "valdecay", "--lr-lambda", "1"] + _TWT_PEAK + _TWT_EPOCHS),
        ("valdecay_2x", "VALDECAY + 2xLR", ["--lr-scheduler", "valdecay", "--lr-lambda", "2"] + _TWT_PEAK + _TWT_EPOCHS),
        ("nowarmup", "NOWARMUP (lr 3e-4)", ["--lr-scheduler", "valdecay", "--warmup-updates", "0", "--lr", "3e-4"]
         + _TWT_EPOCHS)]:
    CONFIGS[f"twt_lr_{_name}"] = {
        "desc": f"Nguyen ch.6 Table 6.4 {_desc}, PreNorm+FixNorm+ScaleNorm SMALLINIT (same dims)",
        "task": "translation_ext", "train": TWT_MODEL + TWT_TRAIN + _sched, "generate": GENERATE}

BASELINE = "transformer"


def get(name: str) -> dict:
    if name not in CONFIGS:
        raise KeyError(f"unknown configuration {name!r}; known: {', '.join(sorted(CONFIGS))}")
    return CONFIGS[name]


def resolve(name: str, run, data_bin, src: str, tgt: str) -> dict:
    """NAME's configuration with its placeholders filled in: ``{run}`` (the configuration's run folder), ``{bin}``
    (the binarized data), ``{src}``, ``{tgt}``.  ``prepare`` lists the files to make before training, as
    (path, arguments of ``python``), in order; a file that exists is not made again."""
    subs = {"{run}": str(run), "{bin}": str(data_bin), "{src}": src, "{tgt}": tgt}

    def fill(x: str) -> str:
        for k, v in subs.items():
            x = x.replace(k, v)
        return x

    cfg = get(name)
    return dict(cfg, train=[fill(f) for f in cfg["train"]], generate=[fill(f) for f in cfg["generate"]],
                prepare=[(fill(path), [fill(a) for a in argv]) for path, argv in cfg.get("prepare", [])])


if __name__ == "__main__":
    _context = sys.argv[1:2] == ["--context"]  # --context NAME: the task flags that build NAME's document context
    _args = sys.argv[1 + _context:]
    if len(_args) != 1 or _args[0] not in CONFIGS:
        print(f"error: {_args and _args[0]!r} is not a benchmark configuration; known: "
              f"{', '.join(sorted(CONFIGS))}", file=sys.stderr)
        sys.exit(2)
    _cfg = get(_args[0])
    print(shlex.join(context_flags(_cfg["train"]) if _context else ["--task", _cfg["task"], *_cfg["train"]]))

"""Named configurations of the benchmark (``recipes/bench/bench.py``) and of the recipes.

One entry per system: the ``fairseq-train`` flags (after the data folder), the task, and the
``fairseq-generate`` flags.  Every later issue adds its rows here; the baseline is what every
thesis method is compared against, at the same data, budget and decoding settings.

``python recipes/bench/configs.py NAME`` prints the shell-quoted train flags of NAME.
"""
import shlex
import sys

# The small fairseq transformer tuned for the ~29k-verse es-en Bible on 2 CPU cores (README).
# PreNorm makes the high learning rate stable; bf16 autocast uses the CPU's AMX/AVX512-BF16 units.
TRANSFORMER_SMALL = [
    "--arch", "transformer",
    "--encoder-layers", "3", "--decoder-layers", "3",
    "--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
    "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--share-all-embeddings", "--encoder-normalize-before", "--decoder-normalize-before",
    "--dropout", "0.1",
]

SCHEDULE = [
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--clip-norm", "1.0",
    "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "300",
    "--warmup-init-lr", "1e-7", "--label-smoothing", "0.1",
    "--max-tokens", "2048", "--cpu-bf16", "--math-attention",
]
OPTIM = SCHEDULE + ["--criterion", "label_smoothed_cross_entropy"]

GENERATE = ["--beam", "5", "--batch-size", "64", "--max-len-a", "1.2", "--max-len-b", "10",
            "--post-process", "sentencepiece"]

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
    # Ampomah ch. 5: Dual Contextual module in every encoder layer, kernel size 2 (issue 3)
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
        "train": ["--arch", "transformer_twt_small", "--norm-type", "scalenorm", "--fixnorm"] + OPTIM,
        "generate": GENERATE,
    },
}

# Every ch. 3 joint-attention variant and every DC placement, same budget and optimiser (recipes/ampomah).
for _v, _name in [("sagg", "S-Agg"), ("iter_sagg", "Iter-S-Agg"), ("cagg", "C-Agg"),
                  ("iter_cagg", "Iter-C-Agg"), ("m00", "M-00"), ("m01", "M-01"), ("m10", "M-10"),
                  ("m11", "M-11")]:
    CONFIGS.setdefault(f"jas_{_v}", {
        "desc": f"Ampomah {_name}, top 3 encoder layers (same dims)", "task": "translation_ext",
        "train": ["--arch", f"transformer_jas_{_v}_bench"] + OPTIM, "generate": GENERATE})
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
    "train": ["--arch", "transformer_lex_small", "--norm-type", "scalenorm", "--fixnorm"] + OPTIM,
    "generate": GENERATE}

BASELINE = "transformer"


def get(name: str) -> dict:
    if name not in CONFIGS:
        raise KeyError(f"unknown configuration {name!r}; known: {', '.join(sorted(CONFIGS))}")
    return CONFIGS[name]


if __name__ == "__main__":
    print(shlex.join(["--task", get(sys.argv[1])["task"], *get(sys.argv[1])["train"]]))

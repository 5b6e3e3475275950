#!/usr/bin/env bash
# Nguyen thesis ch. 7 (unpublished; cf. Ke et al., TUPE): untied positional attention. No positional
# embedding at the input; every attention logit gets p_q W'_q W'_k^T p_k^T (Eq. 7.6) with its own
# projections, computed once per attention type (encoder self, decoder self, cross) and reused across
# layers; p sinusoidal (untied-pos) or random learned vectors (random-untied-pos)
# (fairseq_ext/models/untied_position.py).
#
#   bash recipes/nguyen/ch7.sh                          # Bible es->en, full and 5k-verse subsample
#   SETS=low bash recipes/nguyen/ch7.sh
#   MODE=thesis THESIS_DATA=data-bin/ted_gl_en bash recipes/nguyen/ch7.sh   # print (RUN=1: run)
#   DATA=tiny BUDGET_MIN=0.02 RUNS=/tmp/r bash recipes/nguyen/ch7.sh        # smoke test
#
# ---- Thesis setting [T §7, Tables 7.1-7.2; spec 002 §7] (MODE=thesis) ----------------------------
# Data and training exactly as ch. 4 (TED gl->en, sk->en, en->vi, en->he; Table 4.1 sizes; PreNorm +
# FixNorm + ScaleNorm, SMALLINIT, shared embeddings; Adam, INVSQRTDECAY lambda 1 / 8k warm-up,
# 4096-token batches, label smoothing 0.1, dev-BLEU early stopping), without concatenation.
# Systems: baseline (twt_prenorm_fixnorm_scalenorm), untied-pos (twt_untied_pos), random-untied-pos
# (twt_random_untied_pos). Decoding beam 4, GNMT alpha 0.6; tokenized BLEU, bootstrap p<0.01.
# Fig. 7.1: normalised p_q W'_q W'_k^T p_k^T for positions 0..100 (encoder and decoder
# self-attention); Fig. 7.2: the cross-attention maps (target x source positions).
# Choices the thesis leaves open (spec §7.3): TUPE scaling 1/sqrt(2 d_k) (--untied-pos-scale), per-head
# positional terms, trainable random p (--untied-pos-freeze for fixed ones).
#
# ---- Bible mode (real data, this 2-core CPU) -----------------------------------------------------
# es->en (RV1909 -> WEB): full (~28.7k verses, spm 8000) and low (LOW_SIZE=5000 verses, spm 4000),
# as recipes/nguyen/ch5.sh. Configs (bench_configs), BUDGET_MIN (15) minutes each, beam 5,
# sacreBLEU BLEU/chrF + paired bootstrap vs the transformer baseline:
#   transformer (baseline: sinusoidal positions added to the input, PreNorm LayerNorm),
#   untied_pos, random_untied_pos (the same model with Eq. 7.6 instead);
#   optional, on the thesis's norm choices: twt_scalenorm_fixnorm (the ch. 7 baseline row),
#   untied_pos_scalenorm_fixnorm, random_untied_pos_scalenorm_fixnorm.
# Then Fig. 7.1/7.2 for every untied model: fig7_<config>.png (encoder self, decoder self and cross
# positional scores, positions 0..100, min-max normalised, head 0 and the mean over heads).
# CPU budget: 3 configs x 15 min x 2 sets ~ 1 h 30 min of training + ~15 min of decoding.
# Results: runs/nguyen_ch7_{full,low}/.
source "$(dirname "$0")/../lib.sh"

RUNS=${RUNS:-runs}
N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
LOW_SIZE=${LOW_SIZE:-5000}
PY=.venv/bin/python

# fig7 CHECKPOINT BIN PNG: Figs. 7.1/7.2 from a transformer_untied_pos checkpoint
fig7() {
  $PY - "$1" "$2" "$3" <<'EOF'
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from fairseq_ext.tools.analysis.lexicon import load_model

ckpt, data, png = sys.argv[1:4]
model, _ = load_model(ckpt, data)
fig, axes = plt.subplots(2, 3, figsize=(12, 8))
for j, (att, title) in enumerate([("enc", "encoder self"), ("dec", "decoder self"), ("cross", "cross (tgt x src)")]):
    s = model.positional_scores(att, 101).float()  # heads x 101 x 101
    for i, (m, label) in enumerate([(s[0], "head 0"), (s.mean(0), "mean over heads")]):
        m = (m - m.min()) / (m.max() - m.min() + 1e-9)
        axes[i, j].imshow(m.numpy(), cmap="viridis", origin="upper")
        axes[i, j].set_title(f"{title}, {label}", fontsize=9)
        axes[i, j].set_xlabel("key position"); axes[i, j].set_ylabel("query position")
fig.suptitle(f"p_q W'_q W'_k^T p_k^T (min-max normalised): {ckpt}", fontsize=8)
fig.tight_layout()
fig.savefig(png, dpi=80)
print(f"== Fig. 7.1/7.2: {png}")
EOF
}

if [ "$MODE" = thesis ]; then
  : "${THESIS_DATA:?set THESIS_DATA to a binarized (BPE, --joined-dictionary) TED pair folder}"
  OUT=${THESIS_OUT:-checkpoints/nguyen_ch7}
  LAYERS=${LAYERS:-4} HEADS=${HEADS:-4} DROPOUT=${DROPOUT:-0.4} MAX_UPDATE=${MAX_UPDATE:-100000}  # gl->en
  TRAIN=(--encoder-layers "$LAYERS" --decoder-layers "$LAYERS" --encoder-attention-heads "$HEADS"
         --decoder-attention-heads "$HEADS" --dropout "$DROPOUT" --attention-dropout "$DROPOUT"
         --activation-dropout "$DROPOUT"
         --optimizer adam --adam-betas '(0.9,0.999)' --clip-norm 1.0 --max-tokens 4096
         --lr-scheduler twt_invsqrt --lr-lambda 1 --lr-model-dim 512 --warmup-updates 8000
         --criterion masked_label_smoothed_cross_entropy --label-smoothing 0.1 --max-update "$MAX_UPDATE"
         --eval-bleu --eval-bleu-args '{"beam":4}' --eval-tokenized-bleu --eval-bleu-remove-bpe
         --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --patience 50 --stop-min-lr 1e-6
         --no-epoch-checkpoints)
  # the baseline: twt_prenorm_fixnorm_scalenorm written out on transformer_lex --no-lexical, which (as
  # the untied archs) has the ch. 4/6 word dropout and target-vocabulary mask
  declare -A ARCH=(
    [twt_prenorm_fixnorm_scalenorm]="--arch transformer_lex --no-lexical --encoder-normalize-before
      --decoder-normalize-before --norm-type scalenorm --fixnorm --twt-init smallinit --share-all-embeddings"
    [twt_untied_pos]="--arch twt_untied_pos" [twt_random_untied_pos]="--arch twt_random_untied_pos")
  for arch in twt_prenorm_fixnorm_scalenorm twt_untied_pos twt_random_untied_pos; do
    # shellcheck disable=SC2086
    thesis .venv/bin/fairseq-train "$THESIS_DATA" --user-dir fairseq_ext --task translation_ext ${ARCH[$arch]} \
      --word-dropout 0.1 --target-vocab-mask train "${TRAIN[@]}" --save-dir "$OUT/$arch"
    thesis .venv/bin/fairseq-generate "$THESIS_DATA" --user-dir fairseq_ext --task translation_ext \
      --path "$OUT/$arch/checkpoint_best.pt" --gen-subset test --beam 4 --gnmt-alpha 0.6 --max-len-a 1 \
      --max-len-b 50 --remove-bpe --results-path "$OUT/$arch/test"
  done
  thesis $PY -m fairseq_ext.tools.evaluation.score compare \
    --baseline "$OUT/twt_prenorm_fixnorm_scalenorm/test/generate-test.txt" \
    --system "$OUT/twt_untied_pos/test/generate-test.txt" --system "$OUT/twt_random_untied_pos/test/generate-test.txt" \
    --ref "${THESIS_REF:-$THESIS_DATA/../test.en}" --tokenised
  for arch in twt_untied_pos twt_random_untied_pos; do
    thesis fig7 "$OUT/$arch/checkpoint_best.pt" "$THESIS_DATA" "$OUT/$arch/fig7.png"
  done
  exit 0
fi

figures() {  # figures SEGMENTED_FOLDER JOB CONFIGS
  local c
  for c in ${3//,/ }; do
    if [[ $c == *untied_pos* && -f "$2/$c/checkpoint_best.pt" ]]; then
      fig7 "$2/$c/checkpoint_best.pt" "$1/bin" "$2/fig7_$c.png"
    fi
  done
}

if [ "${DATA:-bible}" = tiny ]; then
  seg=$($PY recipes/nguyen/transfer.py tiny-data --out "$RUNS/nguyen_tiny/data")
  CONFIGS=${CONFIGS:-transformer,untied_pos}
  job="$RUNS/nguyen_tiny/job$(job_suffix)"   # shared by the tiny runs of ch4/5/7: the baseline trains once
  nbench "$seg" "$job" "$CONFIGS" es en kjv
  figures "$seg" "$job" "$CONFIGS"
  exit 0
fi

CONFIGS=${CONFIGS:-transformer,untied_pos,random_untied_pos}
SETS=${SETS:-full,low}
bible_data
for set in ${SETS//,/ }; do
  seg=$(es_en_set "$set")
  nbench "$seg" "$RUNS/nguyen_ch7_$set$(job_suffix)" "$CONFIGS" es en kjv
  figures "$seg" "$RUNS/nguyen_ch7_$set$(job_suffix)" "$CONFIGS"
done

#!/usr/bin/env bash
# A short wall-clock budget on your own data: README's own-data fairseq-train command (float32, inverse_sqrt with
# 300 warm-up updates) against other settings, side by side on the two cores for BUDGET_MIN minutes (15, recipes/lib.sh) each on one
# thread, then beam-5 decoding of the test set and sacreBLEU with a paired bootstrap against the first setting.
# Settings (SETTINGS, the first is the baseline; at most two run at once):
#   readme  README's command (Transformer 3+3 layers, d 256, ffn 1024, 2k-token batches, lr 3e-3, warm-up 300)
#   small   README's "short budget" command: the same recipe with --arch transformer_cpu_small (d 128, FFN 512:
#           under half the cost of an update, so about twice the updates in a budget)
#   small4k `small` with 4k-token batches
#   preset  the d 256 baseline (recipes/bench/bench.py --configs transformer: the readme's measured model with CPU bf16
#           autocast and the math attention kernel where the CPU has native bf16)
# Results: runs/short_budget/<setting>/, the table on stdout.
#
#   bash recipes/bench/short_budget.sh                                    # es->en Bible (built offline)
#   SETTINGS="readme preset" bash recipes/bench/short_budget.sh
#   DATA=data/mine/spm8000 SRC=de TGT=en bash recipes/bench/short_budget.sh
source "$(dirname "$0")/../lib.sh"
SRC=${SRC:-es} TGT=${TGT:-en}
SETTINGS=(${SETTINGS:-readme small})
if [ -z "${DATA:-}" ]; then
  bible_data
  DATA=data/bible_es_en/spm8000
fi
REF=$($PY -c "import json,sys; print(json.load(open('$DATA/segment.json')).get('raw', '$DATA/../raw'))")/test.$TGT
OUT=${OUT:-$RUNS/short_budget}
HOURS=$($PY -c "print($BUDGET_MIN / 60)")
COMMON=(--share-all-embeddings --encoder-normalize-before --decoder-normalize-before
        --dropout 0.1 --optimizer adam --adam-betas '(0.9,0.98)' --clip-norm 1.0 --lr 3e-3
        --lr-scheduler inverse_sqrt --warmup-updates 300 --warmup-init-lr 1e-7
        --criterion label_smoothed_cross_entropy --label-smoothing 0.1)
D256=(--arch transformer --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
      --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
      --decoder-attention-heads 4)
D128=(--arch transformer_cpu_small)  # = D256 at d 128, FFN 512 (tests/test_short_budget.py)

setting_args() {  # NAME -> ARGS (the fairseq-train options of the setting)
  case $1 in
    readme)  ARGS=("${D256[@]}" "${COMMON[@]}" --max-tokens 2048) ;;
    small)   ARGS=("${D128[@]}" "${COMMON[@]}" --max-tokens 2048) ;;
    small4k) ARGS=("${D128[@]}" "${COMMON[@]}" --max-tokens 4096) ;;
    preset)  ARGS=() ;;
    *) echo "error: unknown setting '$1' (readme, small, small4k, preset)" >&2; return 2 ;;
  esac
}

train_one() {  # NAME: train for the budget, then decode the test set
  local name=$1 dir=$OUT/$1
  mkdir -p "$dir"
  if [ "$name" = preset ]; then
    [ -s "$dir/generate.out" ] || { $PY recipes/bench/bench.py --data "$DATA" --src "$SRC" --tgt "$TGT" --ref2 "" \
      --configs transformer --budget-min "$BUDGET_MIN" --threads "$THREADS" --out "$dir/job" > "$dir/train.log" 2>&1 \
      && cp "$dir/job/transformer/generate.out" "$dir/generate.out"; }
    return
  fi
  setting_args "$name"
  [ -f "$dir/checkpoint_last.pt" ] || $FS/fairseq-train "$DATA/bin" "${UD[@]}" --task translation_ext --cpu \
    "${ARGS[@]}" --stop-time-hours "$HOURS" --save-dir "$dir" --no-epoch-checkpoints \
    --log-format simple --log-interval 50 --seed 1 > "$dir/train.log" 2>&1
  [ -s "$dir/generate.out" ] || $FS/fairseq-generate "$DATA/bin" "${UD[@]}" --task translation_ext --cpu \
    --path "$dir/checkpoint_last.pt" --beam 5 --batch-size 64 --post-process sentencepiece \
    > "$dir/generate.out" 2> "$dir/generate.log"
}

for s in "${SETTINGS[@]}"; do setting_args "$s" || exit 2; done
i=0
for s in "${SETTINGS[@]}"; do
  train_one "$s" &
  i=$((i + 1))
  [ $((i % 2)) -eq 0 ] && wait
done
wait
for s in "${SETTINGS[@]}"; do
  echo "$s: $(grep -ohE "num_updates[= ][0-9]+" "$OUT/$s/train.log" "$OUT/$s"/job/*/train.log 2>/dev/null | tail -1) in $BUDGET_MIN min"
done
base=${SETTINGS[0]}
for s in "${SETTINGS[@]:1}"; do
  $PY -m fairseq_ext.tools.evaluation.score compare --ref "$REF" --baseline "$OUT/$base/generate.out" \
    --system "$OUT/$s/generate.out" --n-bootstrap 1000
done

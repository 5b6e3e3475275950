#!/usr/bin/env bash
# README's own-data command under a short wall-clock budget, with fairseq's inverse_sqrt (warm-up 300) and with
# budget_inverse_sqrt (the same, warm-up at most 10% of the updates the budget allows), side by side (one thread
# each, started together so both see the same load), then beam-5 decoding of the test set and sacreBLEU with a
# paired bootstrap. Results: runs/short_budget/{inverse_sqrt,budget_inverse_sqrt}/, table on stdout.
#
#   BUDGET_MIN=5 bash recipes/bench/short_budget.sh          # es->en Bible (built offline), 5 minutes each
#   DATA=data/mine/spm8000 SRC=de TGT=en REF=data/mine/raw/test.en bash recipes/bench/short_budget.sh
source "$(dirname "$0")/../lib.sh"
BUDGET_MIN=${BUDGET_MIN:-5}
SRC=${SRC:-es} TGT=${TGT:-en}
if [ -z "${DATA:-}" ]; then
  bible_data
  DATA=data/bible_es_en/spm8000 REF=data/bible_es_en/raw/test.en
fi
OUT=$RUNS/short_budget
HOURS=$($PY -c "print($BUDGET_MIN / 60)")
MODEL=(--arch transformer --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
       --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
       --decoder-attention-heads 4 --share-all-embeddings --encoder-normalize-before --decoder-normalize-before
       --dropout 0.1 --optimizer adam --adam-betas '(0.9,0.98)' --clip-norm 1.0 --lr 3e-3
       --warmup-updates 300 --warmup-init-lr 1e-7 --criterion label_smoothed_cross_entropy --label-smoothing 0.1
       --max-tokens 2048)
pids=()
for sched in inverse_sqrt budget_inverse_sqrt; do
  mkdir -p "$OUT/$sched"
  [ -f "$OUT/$sched/checkpoint_last.pt" ] && continue
  $FS/fairseq-train "$DATA/bin" "${UD[@]}" --task translation_ext --cpu "${MODEL[@]}" --lr-scheduler "$sched" \
    --stop-time-hours "$HOURS" --save-dir "$OUT/$sched" --no-epoch-checkpoints --log-format simple \
    --log-interval 50 --seed 1 > "$OUT/$sched/train.log" 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for sched in inverse_sqrt budget_inverse_sqrt; do
  [ -s "$OUT/$sched/generate.out" ] || $FS/fairseq-generate "$DATA/bin" "${UD[@]}" --task translation_ext --cpu \
    --path "$OUT/$sched/checkpoint_last.pt" --beam 5 --batch-size 64 --post-process sentencepiece \
    > "$OUT/$sched/generate.out" 2> "$OUT/$sched/generate.log" &
done
wait
for sched in inverse_sqrt budget_inverse_sqrt; do
  updates=$(grep -oE "num_updates[= ][0-9]+" "$OUT/$sched/train.log" | tail -1)
  echo "$sched: ${updates:-?} in $BUDGET_MIN min"
done
$PY -m fairseq_ext.tools.score compare --ref "$REF" --baseline "$OUT/inverse_sqrt/generate.out" \
  --system "$OUT/budget_inverse_sqrt/generate.out" --n-bootstrap 1000

#!/usr/bin/env bash
# A short wall-clock budget on your own data: README's own-data fairseq-train command (float32, inverse_sqrt with
# 300 warm-up updates) against the quickstart's preset (recipes/bench/bench.py --configs transformer: the same
# model with CPU bf16 autocast and the math attention kernel where the CPU has native bf16), both for BUDGET_MIN
# minutes on one thread, then beam-5 decoding of the test set and sacreBLEU with a paired bootstrap.
# Results: runs/short_budget/{readme,preset}/, the table on stdout.
#
#   BUDGET_MIN=10 bash recipes/bench/short_budget.sh          # es->en Bible (built offline)
#   DATA=data/mine/spm8000 SRC=de TGT=en bash recipes/bench/short_budget.sh
source "$(dirname "$0")/../lib.sh"
BUDGET_MIN=${BUDGET_MIN:-10}
SRC=${SRC:-es} TGT=${TGT:-en}
if [ -z "${DATA:-}" ]; then
  bible_data
  DATA=data/bible_es_en/spm8000
fi
REF=$($PY -c "import json,sys; print(json.load(open('$DATA/segment.json')).get('raw', '$DATA/../raw'))")/test.$TGT
OUT=$RUNS/short_budget
HOURS=$($PY -c "print($BUDGET_MIN / 60)")
README_CMD=(--arch transformer --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
            --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
            --decoder-attention-heads 4 --share-all-embeddings --encoder-normalize-before --decoder-normalize-before
            --dropout 0.1 --optimizer adam --adam-betas '(0.9,0.98)' --clip-norm 1.0 --lr 3e-3
            --lr-scheduler inverse_sqrt --warmup-updates 300 --warmup-init-lr 1e-7
            --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 2048)
mkdir -p "$OUT/readme"
[ -f "$OUT/readme/checkpoint_last.pt" ] || $FS/fairseq-train "$DATA/bin" "${UD[@]}" --task translation_ext --cpu \
  "${README_CMD[@]}" --stop-time-hours "$HOURS" --save-dir "$OUT/readme" --no-epoch-checkpoints \
  --log-format simple --log-interval 50 --seed 1 > "$OUT/readme/train.log" 2>&1 &
[ -s "$OUT/preset_job/transformer/generate.out" ] || $PY recipes/bench/bench.py --data "$DATA" --src "$SRC" \
  --tgt "$TGT" --ref2 "" --configs transformer --budget-min "$BUDGET_MIN" --threads "$THREADS" \
  --out "$OUT/preset_job" > "$OUT/preset.log" 2>&1 &
wait
[ -s "$OUT/readme/generate.out" ] || $FS/fairseq-generate "$DATA/bin" "${UD[@]}" --task translation_ext --cpu \
  --path "$OUT/readme/checkpoint_last.pt" --beam 5 --batch-size 64 --post-process sentencepiece \
  > "$OUT/readme/generate.out" 2> "$OUT/readme/generate.log"
echo "readme: $(grep -oE "num_updates[= ][0-9]+" "$OUT/readme/train.log" | tail -1) in $BUDGET_MIN min"
grep -h "updates" "$OUT/preset.log" | tail -2
$PY -m fairseq_ext.tools.score compare --ref "$REF" --baseline "$OUT/readme/generate.out" \
  --system "$OUT/preset_job/transformer/generate.out" --n-bootstrap 1000

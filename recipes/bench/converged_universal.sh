#!/usr/bin/env bash
# Universal NMT at convergence (Gu ch. 5, Table 5.4's ladder): Multi-NMT, + ULR and + ULR + MoLE trained from scratch
# on the multilingual Bibles until their dev BLEU stops improving, with learning curves; then back-translation
# bootstrapped from the converged + ULR model (its two passes, the backward model trained to its own early stop) and
# the same three systems + BT. Each row is compared with its own baseline (paired bootstrap) beside the thesis's
# delta, with a verdict (fairseq_ext/tools/evaluation/verdicts.py: reproduced / direction only / level / lost).
# Code: recipes/bench/bench.py --curve-every / --patience (the lanes, curves and "converged" table of
# recipes/bench/converged.sh) on a `fairseq-ext-data universal` folder (--src src --tgt en: the languages are marked
# in the pieces; references from the folder's raw/), configurations gu5_* of bench_configs; the data, ULR arrays and
# back-translation commands of recipes/gu/ch5.sh (its short-budget ladder).
#
#   nice bash recipes/bench/converged_universal.sh                  # both stages, two single-thread lanes
#   STAGES=ladder nice bash recipes/bench/converged_universal.sh    # ladder | bt (bt needs ladder's gu5_ulr)
#   LANES=1 bash recipes/bench/converged_universal.sh               # one lane (A's configurations, then B's)
#   DATA=tiny bash recipes/bench/converged_universal.sh             # the committed tiny slice, a few updates
#   TABLE=recipes/bench/RESULTS.md bash recipes/bench/converged_universal.sh   # merge the converged rows
#
# Data (as recipes/gu/ch5.sh's main size): data/bible_multi -> data/bible_universal/it_16k_esfrru: auxiliary es, fr,
# ru (~26k verses each) -> en_web, low-resource LOWRES it with LOWRES_TOKENS (16,000) English tokens = 647 pairs
# (disjoint from the auxiliary verses), 2,000 held-back monolingual it verses; dev 644 / test 1,506 it verses (the
# held-out books); sentencepiece BPE 4k per language, marked pieces; ULR arrays (fastText 300-d, eflomal seed
# dictionaries, Procrustes) in its ulr/.
# Stages (dev BLEU greedy every CURVE_EVERY (200) updates on the it dev set, stopped after PATIENCE (5) validations
# without a better one, CAP_MIN (600) minutes of training at most per configuration; test beam 5):
#   ladder  gu5_multi (Multi-NMT, the baseline), gu5_ulr (+ ULR), gu5_ulr_mole (+ ULR + MoLE), from scratch (the
#           thesis trains each from scratch). Job OUT/ladder. Rows: + ULR vs Multi-NMT (thesis +5.07), + ULR + MoLE
#           vs + ULR (+0.50) and vs Multi-NMT (+5.57).
#   bt      back-translation (§5.4.2) from ladder's converged gu5_ulr (OUT/bt_data): (1) the 2,000 monolingual it
#           verses -> English* (greedy); an English -> it rnnsearch (ch5.sh's backward shape) on the 647 real pairs
#           reversed + those, trained to early stopping on its dev loss (the same CURVE_EVERY / PATIENCE / caps);
#           (2) N_BT_EN (5,000) English training-book verses none of it's -> it* (greedy): split `bt_converged` of
#           the data folder (its own name: ch5.sh's `bt` split, from a short-budget model, is left alone). Then
#           gu5_multi_bt10, gu5_ulr_bt10, gu5_ulr_mole_bt10 (each real pair counted 10 times against the 5,000
#           synthetic ones), from scratch. Job OUT/bt (its table baseline gu5_multi_bt10). Rows: each + BT vs the
#           same system without BT of the ladder (thesis: Multi-NMT +2.97, + ULR +2.34, + ULR + MoLE +2.41).
#   After each stage: OUT/verdicts.md (every row whose two systems exist; thesis deltas from Table 5.4, Ro-En 6k,
#   aux Es Fr It Pt: Multi-NMT 14.94, + ULR 20.01, + BT 17.91, + ULR + BT 22.35, + ULR + MoLE 20.51,
#   + ULR + MoLE + BT 22.92).
# Resumable: a finished configuration (result.json) is reused, an interrupted one resumes from its last checkpoint
# (saved at every validation, its patience count with it); the data folder and ULR arrays are stamped; each BT
# pass is kept once written (the split `bt_converged` is not rebuilt: delete it with OUT/bt_data to redo it).
# CPU cost, measured 2026-11-29 on the Intel Xeon (model 207) with AVX512-BF16 (no AMX exposed), one thread, on
# data/bible_universal/it_16k_esfrru: CPU seconds per training update with bench.py's exact flags
# (fairseq_ext/tools/evaluation/update_cost.py: runs of 1 and 11 updates, the same first batches, 3 interleaved
# rounds; getrusage, so the load does not enter; load average 12.4 before, 9.0 after; ~1,515 target tokens per
# update, 1,554 updates per epoch): gu5_multi 0.88 (0.82-0.88), gu5_ulr 0.94 (0.87-0.99; 1.07x), gu5_ulr_mole 1.14
# (1.13-1.18; 1.30x); an earlier 2-round run (1 vs 6 updates) gave 0.84 / 0.97 / 1.25. The *_bt10 systems are the
# same models on the same 2,048-token batches (not timed: their split exists only after the ladder). The data stage
# took 44 min wall at load 2-14 (corpus 1.5 min; fastText 94-181 s per language; eflomal 600-644 s per auxiliary
# language), once. Estimate: ~8,000 updates per system to the stop (ASSUMED, not measured: the 10k-verse en->tl
# baseline stopped at 7,800 with the same rule; Multi-NMT's valid loss was still falling at 1,200 updates, ch5.sh's
# results; here ~5 epochs): ladder 1.96 + 2.09 + 2.53 = 6.6 CPU-hours of training, lanes A (ulr, multi) 4.1 h and B
# (mole) 2.5 h on two free cores; bt the same again + the backward model (not timed) + the two passes (~2 min in
# ch5.sh's run); + 40 greedy validations of the 644 dev verses per system (not timed). About 13.2 CPU-hours of
# training, ~8.1 h on two free cores (lane A's 4.05 h per job) + the parts not timed; a niced lane on the loaded
# machine (~16% of a core) takes ~6x that.
source "$(dirname "$0")/../lib.sh"
STAGES=${STAGES:-ladder bt}
AUX=${AUX:-es,fr,ru}
LOWRES=${LOWRES:-it}
BT_SPLIT=bt_converged
ULR_ARGS=(--dim 300)
SEED_ARGS=()
if [ "${DATA:-bible}" = tiny ]; then
  OUT=$RUNS/converged_universal_tiny
  MULTI=tests/data/bible_multi_tiny/multi.tsv
  DATA_ROOT=$OUT/data
  DATA_ARGS=(--vocab-size 150 --lowres-mono 50)
  LOWRES_TOKENS=${LOWRES_TOKENS:-300}
  ULR_ARGS=(--dim 16 --epochs 2 --min-count 1)
  SEED_ARGS=(--min-count 1)
  N_BT_EN=${N_BT_EN:-40} BW_UNITS=${BW_UNITS:-16}
  CURVE_EVERY=${CURVE_EVERY:-2} PATIENCE=${PATIENCE:-2} CAP_MIN=${CAP_MIN:-5} CAP_UPDATES=${CAP_UPDATES:-4}
  N_BOOTSTRAP=${N_BOOTSTRAP:-50}
else
  OUT=$RUNS/converged/universal
  MULTI=data/bible_multi/raw/multi.tsv
  DATA_ROOT=data/bible_universal
  DATA_ARGS=(--vocab-size 4000)
  LOWRES_TOKENS=${LOWRES_TOKENS:-16000}
  N_BT_EN=${N_BT_EN:-5000} BW_UNITS=${BW_UNITS:-256}
  CURVE_EVERY=${CURVE_EVERY:-200} PATIENCE=${PATIENCE:-5} CAP_MIN=${CAP_MIN:-600} CAP_UPDATES=${CAP_UPDATES:-0}
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
fi
for s in $STAGES; do   # one clear error before any work
  case $s in ladder|bt) ;; *) echo "error: unknown stage '$s' (ladder bt)" >&2; exit 2 ;; esac
done
CONV=(--patience "$PATIENCE" --budget-min "$CAP_MIN")
[ "$CAP_UPDATES" = 0 ] || CONV+=(--max-updates "$CAP_UPDATES")
if [ "${DRY_RUN:-0}" = 1 ]; then   # the plan, nothing run
  echo "stages: $STAGES; out: $OUT; dev every $CURVE_EVERY, ${CONV[*]}"
  echo "ladder: gu5_multi gu5_ulr gu5_ulr_mole (baseline gu5_multi)"
  echo "bt: gu5_multi_bt10 gu5_ulr_bt10 gu5_ulr_mole_bt10 (baseline gu5_multi_bt10; split $BT_SPLIT)"
  exit 0
fi

# the data folder (ch5.sh's data_dir of the main size) and its ULR arrays (ch5.sh's ulr_arrays); both stamped
[ -s "$MULTI" ] || $PY -m fairseq_ext.tools.corpora.corpora multi --out "$(dirname "$MULTI")"
if (( LOWRES_TOKENS % 1000 == 0 )); then TAG=$(( LOWRES_TOKENS / 1000 ))k; else TAG=$LOWRES_TOKENS; fi
D=$DATA_ROOT/${LOWRES}_${TAG}_${AUX//,/}
mkdir -p "$OUT"
{ $PY -m fairseq_ext.tools.corpora.corpora universal --multi "$MULTI" --aux "$AUX" --lowres "$LOWRES" \
    --lowres-tokens "$LOWRES_TOKENS" "${DATA_ARGS[@]}" --out "$D" \
  && $FS/fairseq-ext-ulr embed --data "$D" "${ULR_ARGS[@]}" \
  && $FS/fairseq-ext-ulr seed-dict --data "$D" "${SEED_ARGS[@]}" \
  && $FS/fairseq-ext-ulr project --data "$D"; } >> "$OUT/data.log" 2>&1 \
  || { tail -20 "$OUT/data.log"; echo "error: the data folder $D failed (log $OUT/data.log)" >&2; exit 1; }

# verdicts: every row of Table 5.4 whose two systems have been decoded -> OUT/verdicts.md (.json)
verdicts() {
  local L=$OUT/ladder B=$OUT/bt g=generate.out
  $PY -m fairseq_ext.tools.evaluation.verdicts --ref "$D/raw/test.en" --n-bootstrap "$N_BOOTSTRAP" \
    --out "$OUT/verdicts" \
    --row "+ ULR vs Multi-NMT" "$L/gu5_multi/$g" "$L/gu5_ulr/$g" 5.07 \
    --row "+ ULR + MoLE vs + ULR" "$L/gu5_ulr/$g" "$L/gu5_ulr_mole/$g" 0.50 \
    --row "+ ULR + MoLE vs Multi-NMT" "$L/gu5_multi/$g" "$L/gu5_ulr_mole/$g" 5.57 \
    --row "Multi-NMT + BT vs Multi-NMT" "$L/gu5_multi/$g" "$B/gu5_multi_bt10/$g" 2.97 \
    --row "+ ULR + BT vs + ULR" "$L/gu5_ulr/$g" "$B/gu5_ulr_bt10/$g" 2.34 \
    --row "+ ULR + MoLE + BT vs + ULR + MoLE" "$L/gu5_ulr_mole/$g" "$B/gu5_ulr_mole_bt10/$g" 2.41 \
    --row "+ ULR + BT vs Multi-NMT + BT" "$B/gu5_multi_bt10/$g" "$B/gu5_ulr_bt10/$g" 4.44
}

# bt_data: the split BT_SPLIT of D, two passes bootstrapped from ladder's converged + ULR model (each step kept)
bt_data() {
  local b=$OUT/bt_data ulr=$OUT/ladder/gu5_ulr gen=(--beam 1 "${LEN[@]}" --batch-size 64 --cpu --seed 1)
  [ -s "$ulr/result.json" ] || { echo "error: $ulr has not finished: run STAGES=ladder first" >&2; return 1; }
  [ -s "$D/bin/$BT_SPLIT.lang" ] && return 0
  mkdir -p "$b"
  if [ ! -s "$b/pass1/generate-mono.txt" ]; then   # (1) the monolingual it verses -> English*
    rm -rf "$b/pass1.tmp"
    $FS/fairseq-generate "$D/bin/mono" "${UD[@]}" --task universal_translation --gen-subset mono \
      --path "$ulr/checkpoint_best.pt" "${gen[@]}" --results-path "$b/pass1.tmp" > "$b/pass1.log" 2>&1 \
      || { tail -20 "$b/pass1.log"; return 1; }
    mv "$b/pass1.tmp" "$b/pass1"
  fi
  [ -s "$b/en_mono.txt" ] || $FS/fairseq-ext-bt english-mono --data "$D" --n "$N_BT_EN" --out "$b/en_mono.txt" \
    || return 1
  [ -s "$b/backward/bin/dict.en.txt" ] || $FS/fairseq-ext-bt backward --data "$D" \
    --synthetic "$b/pass1/generate-mono.txt" --out "$b/backward" --mono-en "$b/en_mono.txt" || return 1
  if [ ! -e "$b/backward/train.done" ]; then   # English -> it, to early stopping on its dev loss
    local cap=(--stop-time-hours "$(echo "$CAP_MIN / 60" | bc -l)")
    [ "$CAP_UPDATES" = 0 ] || cap+=(--max-update "$CAP_UPDATES")
    $FS/fairseq-train "$b/backward/bin" "${UD[@]}" --task translation_decoding -s en -t src --arch rnnsearch \
      --rnn-type lstm --decoder-variant plain --decoder-layers 2 --encoder-embed-dim "$BW_UNITS" \
      --encoder-hidden-size "$BW_UNITS" --attention-dim "$BW_UNITS" --dropout 0.2 \
      --criterion cross_entropy --optimizer adam --lr 1e-3 --clip-norm 1.0 --max-tokens 2048 --seed 1 --cpu \
      --no-progress-bar --log-format simple --log-interval 50 --no-epoch-checkpoints --max-epoch 1000 \
      --validate-interval-updates "$CURVE_EVERY" --validate-interval 1000000 --save-interval-updates "$CURVE_EVERY" \
      --save-interval 1000000 --keep-interval-updates 1 --patience "$PATIENCE" "${cap[@]}" \
      --save-dir "$b/backward" >> "$b/backward/train.log" 2>&1 || { tail -20 "$b/backward/train.log"; return 1; }
    touch "$b/backward/train.done"
  fi
  if [ ! -s "$b/pass2/generate-mono_en.txt" ]; then   # (2) English verses -> it*
    rm -rf "$b/pass2.tmp"
    $FS/fairseq-generate "$b/backward/bin" "${UD[@]}" --task translation_decoding -s en -t src --gen-subset mono_en \
      --path "$b/backward/checkpoint_best.pt" "${gen[@]}" --results-path "$b/pass2.tmp" > "$b/pass2.log" 2>&1 \
      || { tail -20 "$b/pass2.log"; return 1; }
    mv "$b/pass2.tmp" "$b/pass2"
  fi
  $FS/fairseq-ext-bt bt-split --data "$D" --hyps "$b/pass2/generate-mono_en.txt" --en "$b/en_mono.txt" \
    --name "$BT_SPLIT"
}

for s in $STAGES; do
  case $s in
    # lanes: + ULR first (the BT stage bootstraps from it), then Multi-NMT; + ULR + MoLE (1.3x per word) alone
    ladder) curve_job ladder "$D" src en "" gu5_ulr,gu5_multi gu5_ulr_mole "${CONV[@]}" --baseline gu5_multi ;;
    bt) bt_data && curve_job bt "$D" src en "" gu5_ulr_bt10,gu5_multi_bt10 gu5_ulr_mole_bt10 "${CONV[@]}" \
          --baseline gu5_multi_bt10 ;;
  esac || { echo "error: stage $s failed (logs in $OUT)" >&2; exit 1; }
  verdicts || { echo "error: the verdicts failed" >&2; exit 1; }
done

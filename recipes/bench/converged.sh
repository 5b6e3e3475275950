#!/usr/bin/env bash
# Reproduction at convergence: the rows that lose to the baseline at 10-15 minutes per system (JAS M-11,
# Enc-DC, MS-12+AIF on es->en; CONSEC and RAND on en->tl), trained until their dev BLEU stops improving, with
# learning curves (dev BLEU vs updates and vs training wall-clock) so that a budget effect and a per-update
# handicap can be told apart; and the candidate causes of Enc-DC's per-update gap and of the AIF
# initialisation, one change at a time at equal updates.
# Code: recipes/bench/bench.py --curve-every (fairseq's --eval-bleu validation hook, greedy dev BLEU every N
# updates; --patience early stopping on it; curves.csv / curves.png; the "converged" table of RESULTS.md).
#
#   bash recipes/bench/converged.sh                        # every stage below, two single-thread lanes
#   STAGES="ablate" bash recipes/bench/converged.sh        # one or more of: ablate conv_es conv_tl variants
#                                                          # variants_lr7e4 variants_ms
#   DATA=tiny bash recipes/bench/converged.sh              # the committed tiny slice, a few updates (~6 min)
#   TABLE=recipes/bench/RESULTS.md bash recipes/bench/converged.sh   # merge the rows into the converged table
#
# Stages (every configuration of bench_configs keeps the bench's model, optimiser and decoding):
#   conv_es  es->en, LOW_SIZE (5,000) training verses, sentencepiece 4k (the Nguyen ch. 5 low set): transformer,
#            jas_m11, enc_dc, ms12_aif; dev BLEU every CURVE_EVERY (200) updates, stopped after PATIENCE (5)
#            validations without a better dev BLEU, capped at CAP_MIN (150) minutes of training each. A configuration
#            the ablate stage trained (same data, flags and seed) continues from its last checkpoint there
#            (bench.py --continue-from; CONTINUE=0: from scratch), so the ablate stage runs first.
#   variants es->en low set, the conv_es patience at equal updates (VARIANT_UPDATES, 1,280: the baseline's count
#            when the 150-minute cap stopped it; no time cap): the Ampomah variants and the TwT base, in priority
#            order on two lanes (VARIANTS_A, VARIANTS_B; the thesis's best first): the transformer baseline, M-00,
#            TwT (ScaleNorm + FixNorm), M-01, Iter-S-Agg with its WS sum normalised | M-10, S-Agg, C-Agg, Dec-DC,
#            Full-DC, Iter-S-Agg, Iter-C-Agg, S-Agg with its WS sum normalised, MS-1, MS-2. Its own baseline (a
#            configuration trained elsewhere is not reused across jobs); the normalised sums are also paired with
#            their plain ones (bench.py --pair: the pairs table of RESULTS.md).
#   variants_lr7e4  the same data and rule: Dec-DC, Full-DC and Iter-C-Agg at the DC paper's lr 7e-4 against the
#            transformer at lr 7e-4 (the job's baseline, --baseline transformer_lr7e4).
#   variants_ms     the same data and rule: MS-1 and MS-2 against MS-12+AIF (--pair ms12_aif=ms1,ms2), with the
#            transformer as the job's baseline.
#   conv_tl  en_web->tl, TL_SIZE (10,000) training verses, sentencepiece 4k (the Nguyen ch. 4 set): transformer,
#            concat_consec, concat_rand; the same stopping rule; then Table 4.3 (the CONSEC-concatenated test set
#            decoded segment-aware, recipes/lib.sh concat_eval) -> runs/converged/conv_tl/concat_eval.tsv.
#   ablate   es->en low set, equal updates (ABLATE_UPDATES, 1,500; curves every ABLATE_CURVE_EVERY, 250: the
#            settings of the Enc-DC ablation reported in RESULTS.md, job `ablate`): enc_dc against
#            enc_dc_local_zero (W_z's local half zero-initialised), enc_dc_pad_left (window [t-1, t]),
#            enc_dc_nodrop (no dropout in the Local Context Unit), enc_dc_lr7e4 (with transformer_lr7e4: the
#            DC paper's learning rate for both); ms12_aif against ms12_aif_zero (--aif-zero-init) and ms12 (no
#            AIF); the transformer baseline beside them.
# Each stage is one bench job (runs/converged/<stage>/) split over two lanes (bench.py --train-only), then
# compared (paired bootstrap against the job's baseline, test beam 5) and, with TABLE, merged into the
# converged table. The NAT pipeline's convergence (teacher first) is recipes/gu/ch8.sh's, not this recipe's.
# CPU budget (THREADS=1, two lanes): conv_es <= 4 x CAP_MIN / 2 = 5 h at the cap (the baseline converges well
# before it: see the curves), conv_tl <= 3 x CAP_MIN / 2, ablate 10 x 15-24 min / 2 ~ 1.7 h (measured: 1,500
# updates took 14.8-24.1 min of training per configuration with 2-4 processes on the 2 cores, bf16 AMX). A
# multi-session run: every configuration resumes from its last checkpoint (saved at each validation), and
# finished configurations are reused.
source "$(dirname "$0")/../lib.sh"
STAGES=${STAGES:-ablate conv_es conv_tl}
OUT=$RUNS/converged

if [ "${DATA:-bible}" = tiny ]; then
  ES=$($PY recipes/nguyen/transfer.py tiny-data --out "$RUNS/converged_tiny/data")
  TL=$ES SRC_TL=es TGT_TL=en
  OUT=$RUNS/converged_tiny
  CURVE_EVERY=${CURVE_EVERY:-2} PATIENCE=${PATIENCE:-2} CAP_MIN=${CAP_MIN:-5}
  CAP_UPDATES=${CAP_UPDATES:-6} ABLATE_UPDATES=${ABLATE_UPDATES:-4} ABLATE_CURVE_EVERY=${ABLATE_CURVE_EVERY:-2}
  VARIANT_UPDATES=${VARIANT_UPDATES:-4}
  N_BOOTSTRAP=${N_BOOTSTRAP:-50}
else
  ES=$(es_en_set low)
  TL_SIZE=${TL_SIZE:-10000}
  $PY -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_multi --src en_web --tgt tl \
    --method sentencepiece --vocab-size 4000 --train-size "$TL_SIZE" >&2
  TL="data/bible_multi/en_web-tl/spm4000-train$TL_SIZE-seed1" SRC_TL=en_web TGT_TL=tl
  CURVE_EVERY=${CURVE_EVERY:-200} PATIENCE=${PATIENCE:-5} CAP_MIN=${CAP_MIN:-150}
  CAP_UPDATES=${CAP_UPDATES:-0} ABLATE_UPDATES=${ABLATE_UPDATES:-1500} ABLATE_CURVE_EVERY=${ABLATE_CURVE_EVERY:-250}
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
fi

CONV=(--patience "$PATIENCE" --budget-min "$CAP_MIN")
[ "$CAP_UPDATES" = 0 ] || CONV+=(--max-updates "$CAP_UPDATES")
for stage in $STAGES; do
  case $stage in
    conv_es) cont=()
             [ "${CONTINUE:-1}" = 1 ] && [ -d "$OUT/ablate" ] && cont=(--continue-from "$OUT/ablate")
             curve_job conv_es "$ES" es en "" "transformer,enc_dc" "jas_m11,ms12_aif" "${CONV[@]}" "${cont[@]}" ;;
    # the variants train to the baseline's update count (equal updates: the baseline stopped at 1,280 by the
    # 150-minute cap), patience 5 on dev BLEU as above, no time cap
    variants) curve_job variants "$ES" es en "" \
              "${VARIANTS_A:-transformer,jas_m00,twt_scalenorm_fixnorm,jas_m01,jas_iter_sagg_sumln}" \
              "${VARIANTS_B:-jas_m10,jas_sagg,jas_cagg,dec_dc,full_dc,jas_iter_sagg,jas_iter_cagg,jas_sagg_sumln,ms1,ms2}" \
              --patience "$PATIENCE" --budget-min 0 --max-updates "${VARIANT_UPDATES:-1280}" \
              --pair jas_sagg=jas_sagg_sumln --pair jas_iter_sagg=jas_iter_sagg_sumln ;;
    variants_lr7e4) curve_job variants_lr7e4 "$ES" es en "" "transformer_lr7e4,dec_dc_lr7e4" \
              "full_dc_lr7e4,jas_iter_cagg_lr7e4" --baseline transformer_lr7e4 \
              --patience "$PATIENCE" --budget-min 0 --max-updates "${VARIANT_UPDATES:-1280}" ;;
    variants_ms) curve_job variants_ms "$ES" es en "" "ms12_aif,ms1" "transformer,ms2" --pair ms12_aif=ms1,ms2 \
              --patience "$PATIENCE" --budget-min 0 --max-updates "${VARIANT_UPDATES:-1280}" ;;
    conv_tl) curve_job conv_tl "$TL" "$SRC_TL" "$TGT_TL" "" "transformer,concat_consec" "concat_rand" "${CONV[@]}" &&
             concat_eval "$TL" "$OUT/conv_tl" transformer,concat_consec,concat_rand ;;
    ablate) curve_job ablate "$ES" es en "" "transformer,enc_dc,enc_dc_pad_left,enc_dc_lr7e4,ms12_aif" \
              "enc_dc_local_zero,enc_dc_nodrop,transformer_lr7e4,ms12_aif_zero,ms12" \
              --max-updates "$ABLATE_UPDATES" --curve-every "$ABLATE_CURVE_EVERY" --budget-min 0 ;;
    *) echo "error: unknown stage '$stage' (ablate conv_es conv_tl variants variants_lr7e4 variants_ms)" >&2; exit 2 ;;
  esac || { echo "error: stage $stage failed (logs in $OUT/$stage)" >&2; exit 1; }
done

#!/usr/bin/env bash
# Real-data evidence in one command: a list of bench_configs configurations trained to convergence AT THE
# SAME TIME on one GPU (one recipes/bench/bench.py --train-only process each), each stopped by its dev BLEU (PATIENCE
# validations every CURVE_EVERY updates without a better one) or by the wall-clock cap CAP_MIN, then decoded (test
# set, beam 5), scored (sacreBLEU BLEU/chrF) and compared (paired bootstrap against the job's baseline) by bench.py,
# with the learning curves (dev BLEU vs updates and vs training wall-clock, dev NLL).
#
#   bash recipes/bench/gpu_batch.sh                                   # SET=ampomah on the es->en low set, cuda
#   SET=twt66 bash recipes/bench/gpu_batch.sh                         # Nguyen Table 6.2 at 6+6 layers
#   SET=nguyen4 bash recipes/bench/gpu_batch.sh                       # Nguyen Table 4.2 on the TwT base, en->tl
#   SET=twt_lr bash recipes/bench/gpu_batch.sh                        # Nguyen Table 6.4, the learning-rate regimes
#   SET=luong bash recipes/bench/gpu_batch.sh                         # Nguyen Table 5.4, Luong LSTMs, equal updates
#   SET=ms bash recipes/bench/gpu_batch.sh                            # Ampomah MS-1 / MS-2 against MS-12+AIF
#   SET=doc1 bash recipes/bench/gpu_batch.sh                          # the converged stage-1 models of issue 39's sets
#   CONFIGS=transformer,ms1 CAP_MIN=60 DEVICE=cpu OUT=/tmp/o bash recipes/bench/gpu_batch.sh
#   SET=nguyen4 DRY_RUN=1 bash recipes/bench/gpu_batch.sh             # print the configurations and the commands
#
# Sets (the default CONFIGS, BASELINE, PATIENCE, MAX_UPDATES and DATA of each; the variables override them):
#   ampomah  es->en low set: the rows never trained to convergence: the transformer baseline, JAS M-00/M-01/M-10,
#            S-Agg, C-Agg, Iter-S-Agg, Iter-C-Agg (ch. 3), Dec-DC and Full-DC at the bench's lr 3e-3 and at the DC
#            paper's 7e-4 with the baseline at 7e-4 beside them (ch. 5), MS-1 and MS-2 (ch. 4); the cause tests of
#            the aggregations' loss (S-Agg / Iter-S-Agg with their WS sums normalised, Iter-C-Agg at 7e-4); patience 5
#   twt66    es->en low set: Nguyen ch. 6 Table 6.2 at 6+6 layers 512/2048: PostNorm vs PreNorm, Xavier vs SMALLINIT
#            (baseline twt66_postnorm_xavier); the thesis's patience 20
#   nguyen4  en_web->tl 10k (converged.sh's conv_tl set): Nguyen ch. 4 Table 4.2 on the thesis's own base (TwT:
#            ScaleNorm+FixNorm, SMALLINIT, word dropout 0.1, chunked batching): none / CONSEC / RAND (baseline
#            twt_concat_none); the thesis's patience 20
#   twt_lr   es->en low set: Nguyen ch. 6 Table 6.4 on PreNorm+FixNorm+ScaleNorm (SMALLINIT, bench dims): INVSQRTDECAY
#            (baseline twt_lr_invsqrt), VALDECAY, NOWARMUP, and both decays at 2xLR; the thesis's patience 20
#   luong    es->en low set: Nguyen ch. 5 Table 5.4 on the Luong LSTM 2x256: tied (baseline luong_tied), untied,
#            fixnorm, fixnorm+lex, Arthur et al.; equal updates, the thesis's 50 epochs (MAX_UPDATES 6000, no
#            patience: tied and untied sit on the plateau of the U[-0.01, 0.01] init for the first ~2,000 updates,
#            where a patience rule would stop them), dev every 500 updates
#   ms       es->en low set: Ampomah ch. 4 Tables 4.1/4.6: MS-1 and MS-2 against MS-12+AIF (baseline ms12_aif);
#            patience 10 (MS-12+AIF's dev BLEU stayed below an earlier best for 1,300 updates at convergence)
#   doc1     the document-level es->en folder of converged_doc.sh (recipes/lib.sh doc_set: 10k verses as whole
#            chapters, five books held out): the stage-1 sentence models the converged stage-2 recipes warm-start
#            from: transformer (baseline; converged_doc.sh's ch. 4 systems), rnnsearch (ch. 3's memory networks,
#            converged_tm.sh's SEG-NMT, converged_decoding.sh's trainable greedy), rnnsearch_uni (converged_decoding.sh's
#            simultaneous environment); patience 5. Copy each best checkpoint to runs/converged/doc1/<config>/ (or
#            dec_stage1/) with its result.json and the stage-2 recipes start from it
#   bimsmt1  data/bible_conv_es_en (converged_conv.sh's conversations): Maruf ch. 5's stage 1 maruf5_base; patience 5,
#            dev every 110 updates (one epoch)
#   gu5      data/bible_universal/it_16k_esfrru (converged_universal.sh's it 16k folder; carry bin/, manifest.json,
#            raw/test.en and ulr/'s query.npy, key.npy, alpha.npy, universal.txt, rotation.npz): Gu ch. 5's ladder
#            gu5_multi (baseline), gu5_ulr, gu5_ulr_mole; patience 5
# Environment:
#   DATA         a prepared folder (bin/ + segment.json or bin/segment.json, its raw folder beside it, inside it or
#                where segment.json says;
#                relative to the repository). Default: the set's folder under data/, built offline when missing
#                (recipes/lib.sh es_en_set low, as converged.sh) -- a machine without the corpus cache must be given
#                a prepared folder (e.g. carry data/bible_es_en/spm4000-train5000-seed1 and raw-train5000-seed1)
#   SRC, TGT     the languages (default: the folder's segment.json)
#   CAP_MIN      wall-clock cap of each configuration's training, minutes (fairseq --stop-time-hours; default 120)
#   HARD_MIN     a lane still running after HARD_MIN minutes is stopped (default CAP_MIN + 30: start-up, decoding)
#   PATIENCE (0: none), CURVE_EVERY (200; luong 500), N_BOOTSTRAP (1000), SEED (1)
#   MAX_UPDATES  stop every configuration at this many updates (bench.py --max-updates; empty: no such limit)
#   DEVICE       cuda (default) or cpu; PRECISION: bench.py --precision (auto: fairseq --amp where the card has
#                float16 tensor cores)
#   THREADS      CPU threads of each process (default 1); PYTHON: the interpreter (default .venv/bin/python;
#                the checkout is put on PYTHONPATH, so fairseq_ext need not be installed)
#   BENCH_ARGS   more recipes/bench/bench.py options for every lane and the comparison, split on spaces: the warm
#                start of a stage-2 set (--finetune-from-model runs/converged/doc1/transformer/checkpoint_best.pt, with
#                --doc-generated-dir DIR for a system that reads the stage-1 translations as target context; build them
#                with converged_doc.sh first), or --pair BASE=CFG[,CFG] for one-change references
#   JOB          the bench job folder (default $RUNS/gpu_batch/<SET>; a rerun resumes it: finished configurations are
#                reused, interrupted ones continue from their last checkpoint)
#   OUT          where the results are gathered (default JOB/out): result.json (every configuration's result, with
#                its curve summary and bootstrap p), curves.csv, curves.png, compare.log (the converged table, the
#                lanes' status) and runs.tar.gz (per configuration: result.json, curve.csv, train.log,
#                generate.out, its lane's log) -- five files, no checkpoints
source "$(dirname "$0")/../lib.sh"
PY=${PYTHON:-$PY}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

SET=${SET:-ampomah}
case $SET in
  ampomah) set_configs=transformer,jas_m00,jas_m01,jas_m10,jas_sagg,jas_cagg,jas_iter_sagg,jas_iter_cagg,dec_dc,full_dc,transformer_lr7e4,dec_dc_lr7e4,full_dc_lr7e4,ms1,ms2,jas_sagg_sumln,jas_iter_sagg_sumln,jas_iter_cagg_lr7e4
           set_baseline=transformer set_patience=5 set_data=es_low ;;
  twt66)   set_configs=twt66_postnorm_xavier,twt66_prenorm_xavier,twt66_postnorm_smallinit,twt66_prenorm_smallinit
           set_baseline=twt66_postnorm_xavier set_patience=20 set_data=es_low ;;
  nguyen4) set_configs=twt_concat_none,twt_concat_consec,twt_concat_rand
           set_baseline=twt_concat_none set_patience=20 set_data=tl ;;
  twt_lr)  set_configs=twt_lr_invsqrt,twt_lr_valdecay,twt_lr_nowarmup,twt_lr_invsqrt_2x,twt_lr_valdecay_2x
           set_baseline=twt_lr_invsqrt set_patience=20 set_data=es_low ;;
  luong)   set_configs=luong_tied,luong_untied,luong_fixnorm,luong_fixnorm_lex,luong_arthur
           set_baseline=luong_tied set_patience=0 set_max_updates=6000 set_curve_every=500 set_data=es_low ;;
  ms)      set_configs=ms12_aif,ms1,ms2
           set_baseline=ms12_aif set_patience=10 set_data=es_low ;;
  doc1)    set_configs=transformer,rnnsearch,rnnsearch_uni
           set_baseline=transformer set_patience=5 set_data=doc ;;
  bimsmt1) set_configs=maruf5_base set_baseline=maruf5_base set_patience=5 set_curve_every=110
           set_data=data/bible_conv_es_en set_src=src set_tgt=tgt ;;
  gu5)     set_configs=gu5_multi,gu5_ulr,gu5_ulr_mole
           set_baseline=gu5_multi set_patience=5 set_data=data/bible_universal/it_16k_esfrru set_src=src set_tgt=en ;;
  *) echo "error: unknown SET '$SET' (ampomah, twt66, nguyen4, twt_lr, luong, ms, doc1, bimsmt1, gu5)" >&2; exit 2 ;;
esac
CONFIGS=${CONFIGS:-$set_configs}
BASELINE=${BASELINE:-$set_baseline}
PATIENCE=${PATIENCE:-$set_patience}
MAX_UPDATES=${MAX_UPDATES-${set_max_updates:-}}
CURVE_EVERY=${CURVE_EVERY:-${set_curve_every:-200}}
CAP_MIN=${CAP_MIN:-120}
HARD_MIN=${HARD_MIN:-$($PY -c "print($CAP_MIN + 30)")}
DEVICE=${DEVICE:-cuda}
PRECISION=${PRECISION:-auto}
N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
SEED=${SEED:-1}
JOB=${JOB:-$RUNS/gpu_batch/$SET}
OUT=${OUT:-$JOB/out}

IFS=, read -r -a NAMES <<< "$CONFIGS"
[[ ",$CONFIGS," == *",$BASELINE,"* ]] || NAMES=("$BASELINE" "${NAMES[@]}")
$PY -c 'import sys
from fairseq_ext.tools.evaluation.bench_configs import CONFIGS
bad = [n for n in sys.argv[1:] if n not in CONFIGS]
sys.exit("error: fairseq_ext/tools/evaluation/bench_configs.py has no configuration "
         + ", ".join(bad) if bad else 0)' "${NAMES[@]}"

if [ -z "${DATA:-}" ]; then
  case $set_data in
    es_low) DATA=data/bible_es_en/spm4000-train${LOW_SIZE:-5000}-seed1
            [ -n "${DRY_RUN:-}" ] || [ -d "$DATA/bin" ] || DATA=$(es_en_set low) ;;
    tl)     DATA=data/bible_multi/en_web-tl/spm4000-train${TL_SIZE:-10000}-seed1
            [ -n "${DRY_RUN:-}" ] || [ -d "$DATA/bin" ] || $PY -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_multi \
              --src en_web --tgt tl --method sentencepiece --vocab-size 4000 --train-size "${TL_SIZE:-10000}" >&2 ;;
    doc)    if [ -n "${DRY_RUN:-}" ]; then DATA='$(doc_set)'; else DATA=$(doc_set) || exit 1; fi ;;
    *)      DATA=$set_data ;;   # a folder the set's recipe prepares (see the set above)
  esac
fi
SRC=${SRC:-${set_src:-}} TGT=${TGT:-${set_tgt:-}}
SEGJSON=$DATA/segment.json; [ -f "$SEGJSON" ] || SEGJSON=$DATA/bin/segment.json
seg() { $PY -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$SEGJSON" "$1"; }
if [ -z "${DRY_RUN:-}" ]; then
  [ -d "$DATA/bin" ] && { [ -f "$SEGJSON" ] || [ -n "$SRC" ]; } || {
    echo "error: $DATA: not a prepared folder (bin/ and segment.json; see DATA in $0)" >&2; exit 2; }
  SRC=${SRC:-$(seg src)} TGT=${TGT:-$(seg tgt)}
fi

COMMON=(recipes/bench/bench.py --data "$DATA" --src "${SRC:-?}" --tgt "${TGT:-?}" --ref2 "" --baseline "$BASELINE"
        --device "$DEVICE" --precision "$PRECISION" --threads "$THREADS" --seed "$SEED" --n-bootstrap "$N_BOOTSTRAP"
        --curve-every "$CURVE_EVERY" --patience "$PATIENCE" --budget-min "$CAP_MIN" --out "$JOB"
        ${MAX_UPDATES:+--max-updates "$MAX_UPDATES"})
read -r -a EXTRA <<< "${BENCH_ARGS:-}"
COMMON+=("${EXTRA[@]}")
echo "[gpu_batch] $SET on $DATA ($DEVICE): ${NAMES[*]}; baseline $BASELINE; patience $PATIENCE every $CURVE_EVERY" \
     "updates${MAX_UPDATES:+, at most $MAX_UPDATES updates}, cap $CAP_MIN min (lanes stopped at $HARD_MIN min);" \
     "job $JOB, results $OUT"
if [ -n "${DRY_RUN:-}" ]; then
  for n in "${NAMES[@]}"; do echo "$PY ${COMMON[*]} --train-only --configs $n"; done
  exit 0
fi

mkdir -p "$JOB/lanes" "$OUT"
declare -A PID
for n in "${NAMES[@]}"; do
  timeout --signal=TERM --kill-after=60 "$($PY -c "print(int($HARD_MIN * 60))")" \
    $PY "${COMMON[@]}" --train-only --configs "$n" > "$JOB/lanes/$n.log" 2>&1 &
  PID[$n]=$!
done
done_names=() failed=()
for n in "${NAMES[@]}"; do
  if wait "${PID[$n]}" && [ -f "$JOB/$n/result.json" ]; then
    done_names+=("$n")
  else
    failed+=("$n")
    echo "[gpu_batch] $n failed or was stopped; the end of $JOB/lanes/$n.log:" >&2
    tail -5 "$JOB/lanes/$n.log" >&2
  fi
done

status=0
{
  echo "# gpu_batch $SET: ${#done_names[@]} of ${#NAMES[@]} configurations finished ($DEVICE, $DATA)"
  [ ${#failed[@]} = 0 ] || echo "failed or stopped: ${failed[*]} (see lanes/ in runs.tar.gz)"
} > "$OUT/compare.log"
if [[ " ${done_names[*]} " == *" $BASELINE "* ]]; then
  list=$(IFS=,; echo "${done_names[*]}")
  $PY "${COMMON[@]}" --configs "$list" >> "$OUT/compare.log" 2>&1 || status=1
  for f in curves.csv curves.png; do [ ! -f "$JOB/$f" ] || cp "$JOB/$f" "$OUT/$f"; done
  [ ! -f "$JOB/summary.json" ] || cp "$JOB/summary.json" "$OUT/result.json"
else
  echo "error: the baseline $BASELINE did not finish: no comparison" | tee -a "$OUT/compare.log" >&2
  status=1
fi
files=()
for n in "${NAMES[@]}"; do
  for f in "$n/result.json" "$n/curve.csv" "$n/train.log" "$n/generate.out" "lanes/$n.log"; do
    [ ! -f "$JOB/$f" ] || files+=("$f")
  done
done
[ ${#files[@]} = 0 ] || tar -czf "$OUT/runs.tar.gz" -C "$JOB" "${files[@]}"
grep "^| " "$OUT/compare.log" || true
echo "[gpu_batch] results: $OUT"
[ ${#failed[@]} = 0 ] || status=1
exit $status

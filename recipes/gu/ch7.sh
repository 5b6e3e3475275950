#!/usr/bin/env bash
# Gu thesis ch. 7: trainable greedy decoding (Gu, Cho, Li, EMNLP 2017) -- an actor pi_phi that adds a_t to the
# decoder state of a frozen RNNsearch (Eq. 7.4; the state site of spec §2.8.1), trained by critic-aware actor
# learning (Alg. 3: a critic R^c_psi over the reference reads the decoder states, 10 critic updates per actor
# update, normalised importance weights exp(-(r^c - r)^2 / tau), Eqs. 7.2-7.6) for a decoding objective: smoothed
# sentence BLEU (BLEU+1) or negative perplexity under the frozen NMT. Fig. 7.3 (delta BLEU and delta perplexity of
# each actor vs plain greedy / beam on the same NMT, paired bootstrap), Fig. 7.4 (validation curves with and
# without the critic-aware weights), Fig. 7.5 (per-token influence KL(p_with || p_without)), and the decoding
# overhead of the actor.
# Spec: specs/004b-gu-decoding-efficient.md §2.  Code: model `trainable_greedy` (--nmt-path, --tg-action-site),
# criterion `actor_critic` (--tg-objective bleu|perplexity, --tg-uniform-weights, --tg-tau, --tg-noise-std,
# --critic-updates 10), optimizer `rmsprop` (--group-lr actor:LR,critic:LR), task `trainable_greedy_decoding`
# (--tg-actor on|off, --tg-influence-out), decoders of `translation_decoding` (--decoding-algorithm greedy|beam);
# report examples/trainable_greedy/report.py; decode-time ratio recipes/bench/decode_speed.py.
#
#   bash recipes/gu/ch7.sh                    # CPU: Bible es->en (budget below)
#   STAGE1=ckpt.pt bash recipes/gu/ch7.sh     # the frozen NMT: that rnnsearch checkpoint (no stage 1), e.g.
#                                             # runs/rnn_stage1/checkpoint_best.pt or runs/gu_ch2/rnnsearch_30/...
#   ACTORS="bleu bleu_uniform" bash recipes/gu/ch7.sh   # a subset of the actors (default: all three)
#   DATA=tiny bash recipes/gu/ch7.sh          # the committed tiny slice, tiny models, a few updates (~3 min)
#   MODE=thesis bash recipes/gu/ch7.sh        # print the thesis-setting commands (RUN=1: run them)
#
# ---- Thesis settings (MODE=thesis; binarized data you provide, a GPU assumed) ------------------------------------
# WMT'15 En<->De/Ru/Cs/Fi (8 directions; THESIS_DATA/<src>-<tgt>/bin, dl4mt-cdec preprocessing: normalise
# punctuation, Moses tokenizer, 20k BPE merges per language -- the spec's §2.8.8 recommendation), dev newstest2013
# (newsdev2015 for Fi), test newstest2015. NMT: rnnsearch_gu_wmt15 (GRU 1028, emb 512, conditional GRU, no dropout),
# MLE on pairs <= 50 subwords (Adadelta in the thesis; Adam here), batch 32. Actors (§7.4.1): trainable_greedy (actor
# 32 tanh units, critic of the NMT's sizes), two per NMT (objectives BLEU+1 and perplexity), pairs <= 200 subwords,
# RMSProp 2e-6 (actor) / 2e-4 (critic), 10 critic updates per actor update; sigma, tau, S and the batch are not
# given (spec §2.5 [I]: S_c = S_a = 4, sigma 0.1, tau 0.01, batch 32); the actor with the best validation objective
# is kept. Decoding: greedy and beam 5 with the actor (and --tg-actor off: the plain rows); BLEU + perplexity of
# every output under the frozen NMT, paired bootstrap (Fig. 7.3).
# Thesis (Fig. 7.3 caption, newstest2015, plain greedy / beam): En-De 18.97 / 21.33, De-En 21.63 / 24.46, En-Ru
# 16.97 / 19.68, Ru-En 21.06 / 23.34, En-Cs 14.49 / 16.20, Cs-En 18.90 / 21.20, En-Fi 7.53 / 8.82, Fi-En 9.79 / 11.03
# (the actors' deltas exist only as bars).
#
# ---- CPU mode (default; 2 cores, THREADS=1) --------------------------------------------------------------------
# data/bible_es_en (sentencepiece 8k joined), es->en. The frozen NMT: STAGE1, or rnnsearch_bench trained here for
# BUDGET_MIN (30) minutes (the bench's Adam 1e-3, clip 1, 2,048 tokens). Three actors of trainable_greedy on it,
# each for UPDATES (220 = 20 actor phases of 10 critic + 1 actor update) updates of BATCH (8) verses of <= MAXLEN
# (50) subwords, S_c = S_a = 4 noisy rollouts each, validated every VALID_EVERY (55) updates on the valid split
# (greedy with the actor; loss = -mean objective, so fairseq keeps the best actor):
#   bleu          objective BLEU+1, critic-aware weights (the thesis's actor)
#   bleu_uniform  the same with uniform weights 1/S (--tg-uniform-weights: the ablation of Fig. 7.4)
#   perplexity    objective negative perplexity under the frozen NMT
# Actor learning rate: ACTOR_LR (1e-4). The thesis's 2e-6 (MODE=thesis) is for days of updates; here an actor gets
# ~20 updates, and RMSProp moves a parameter by about the learning rate per update, so 2e-6 would leave the actor
# at its zero initialisation (plain greedy). CRITIC_LR 2e-4 (the thesis's).
# Decoding of test (1,494 verses): plain greedy and beam BEAM (5) on the NMT, and each actor's best checkpoint
# greedy and beam; per-token influence of the bleu actor (Fig. 7.5). Scores (examples/trainable_greedy/report.py): sacreBLEU
# BLEU / chrF and paired bootstrap against the plain decoder of the same search; the perplexity of every output
# under the frozen NMT (exp of minus the mean per-sentence (1/|Y|) sum log p, </s> included) with a paired bootstrap
# of its difference (Fig. 7.3 layout, fig7_3_deltas.png); Fig. 7.4 from the validation logs (fig7_4_curves.png:
# validation BLEU+1 of the greedy actor vs updates, critic-aware and uniform, the plain-greedy line); the decode-time
# ratio actor greedy / plain greedy (decode_speed.py, ROUNDS (3) interleaved rounds on the valid split).
# CPU budget (THREADS=1, two lanes). Measured here with two other busy processes (load ~4): an update of 8 verses
# takes ~6 s (critic and actor updates alike; long verses up to 17 s), a validation on the 645 valid verses ~40 s.
# Hence: stage 1 BUDGET_MIN (30 min) unless STAGE1 is given; lane A bleu + perplexity, lane B bleu_uniform + the
# plain decodes (~25 + 4 min per actor, ~5 min of test decoding per system); decode_speed ~6 min; report ~3 min.
# About 75 min in all with STAGE1 (1 h 45 without); less on an idle machine.
STAGE1_MIN=${BUDGET_MIN:-30}
source "$(dirname "$0")/../lib.sh"
PY=.venv/bin/python
FS=.venv/bin
UD=(--user-dir fairseq_ext)
RUNS=${RUNS:-runs}
BEAM=${BEAM:-5}
ACTOR_OPT=(--optimizer rmsprop --lr "${CRITIC_LR:-2e-4}" --lr-scheduler fixed)
AC=(--criterion actor_critic --critic-updates 10 --actor-updates 1 --tg-critic-samples 4 --tg-actor-samples 4
    --tg-noise-std 0.1 --tg-tau 0.01)

if [ "$MODE" = thesis ]; then
  J=${THESIS_DATA:-data/wmt15}
  C=checkpoints/gu_ch7
  for pair in ${PAIRS:-en-de de-en en-ru ru-en en-cs cs-en en-fi fi-en}; do
    B=$J/$pair/bin
    echo "# ---- WMT'15 $pair: the NMT (MLE, pairs <= 50 subwords), then two actors on it"
    thesis $FS/fairseq-train $B "${UD[@]}" --task translation_decoding --arch rnnsearch_gu_wmt15 \
      --criterion cross_entropy --optimizer adam --lr 1e-3 --clip-norm 1.0 --batch-size 32 \
      --max-source-positions 50 --max-target-positions 50 --patience 5 --no-epoch-checkpoints \
      --save-dir $C/$pair/nmt
    for obj in bleu perplexity; do
      thesis $FS/fairseq-train $B "${UD[@]}" --task trainable_greedy_decoding --arch trainable_greedy \
        --nmt-path $C/$pair/nmt/checkpoint_best.pt "${AC[@]}" --tg-objective $obj --optimizer rmsprop --lr 2e-4 \
        --group-lr actor:2e-6,critic:2e-4 --lr-scheduler fixed --batch-size 32 --max-source-positions 200 \
        --max-target-positions 200 --validate-interval-updates 1100 --patience 10 --no-epoch-checkpoints \
        --save-dir $C/$pair/actor_$obj
      for algo in greedy beam; do
        thesis $FS/fairseq-generate $B "${UD[@]}" --task trainable_greedy_decoding --gen-subset test \
          --path $C/$pair/actor_$obj/checkpoint_best.pt --decoding-algorithm $algo --beam 5 \
          --results-path $C/$pair/actor_$obj/$algo
      done
    done
    for algo in greedy beam; do
      thesis $FS/fairseq-generate $B "${UD[@]}" --task translation_decoding --gen-subset test \
        --path $C/$pair/nmt/checkpoint_best.pt --decoding-algorithm $algo --beam 5 --results-path $C/$pair/plain_$algo
    done
    thesis $PY examples/trainable_greedy/report.py --out $C/$pair --data $B --nmt $C/$pair/nmt/checkpoint_best.pt \
      --ref THESIS_REF_$pair.txt
  done
  exit 0
fi

ACTORS=(${ACTORS:-bleu bleu_uniform perplexity})
actor_flags() {
  case $1 in
    bleu) echo "--tg-objective bleu" ;;
    bleu_uniform) echo "--tg-objective bleu --tg-uniform-weights" ;;
    perplexity) echo "--tg-objective perplexity" ;;
    *) echo "error: unknown actor $1 (bleu, bleu_uniform, perplexity)" >&2; return 2 ;;
  esac
}
for a in "${ACTORS[@]}"; do actor_flags "$a" > /dev/null || exit 2; done

# ---- CPU mode / DATA=tiny --------------------------------------------------------------------------------------
if [ "${DATA:-bible}" = tiny ]; then
  OUT=$RUNS/gu_ch7_tiny
  RAW=tests/data/bible_tiny
  SEG=$OUT/data/seg
  BIN=$OUT/data/bin
  tiny_slice $OUT
  NMT_ARCH=rnnsearch_tiny TG_ARCH=trainable_greedy_tiny
  UPDATES=${UPDATES:-11} VALID_EVERY=${VALID_EVERY:-11} BATCH=${BATCH:-4} MAXLEN=${MAXLEN:-30}
  STAGE1_LIMIT=(--max-update "${STAGE1_UPDATES:-20}")
  N_BOOTSTRAP=${N_BOOTSTRAP:-100}
  ROUNDS=${ROUNDS:-1}
  BEAM=${BEAM_TINY:-2}
else
  RAW=data/bible_es_en/raw
  SEG=data/bible_es_en/spm8000
  BIN=$SEG/bin
  [ -s $BIN/dict.es.txt ] || bible_data
  OUT=$RUNS/gu_ch7/es-en
  NMT_ARCH=rnnsearch_bench TG_ARCH=trainable_greedy
  UPDATES=${UPDATES:-220} VALID_EVERY=${VALID_EVERY:-55} BATCH=${BATCH:-8} MAXLEN=${MAXLEN:-50}
  STAGE1_LIMIT=(--stop-time-hours "$(echo "$STAGE1_MIN / 60" | bc -l)")
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
  ROUNDS=${ROUNDS:-3}
fi
mkdir -p $OUT
COMMON=(--seed 1 --cpu --no-progress-bar --log-format simple --log-interval 10 --no-epoch-checkpoints)

# ---- the frozen NMT
STAGE1=${STAGE1:-$OUT/nmt/checkpoint_best.pt}
if [ ! -s "$STAGE1" ]; then
  $FS/fairseq-train $BIN "${UD[@]}" --task translation_decoding --arch $NMT_ARCH --criterion cross_entropy \
    --optimizer adam --adam-betas '(0.9,0.98)' --lr 1e-3 --clip-norm 1.0 --max-tokens 2048 "${COMMON[@]}" \
    "${STAGE1_LIMIT[@]}" --save-dir $OUT/nmt > $OUT/nmt.log 2>&1 || { tail -20 $OUT/nmt.log; exit 1; }
  STAGE1=$OUT/nmt/checkpoint_best.pt
fi
STAGE1=$(realpath "$STAGE1")

train_actor() {
  local name=$1
  [ -e $OUT/$name/train.done ] && return 0
  # shellcheck disable=SC2046
  $FS/fairseq-train $BIN "${UD[@]}" --task trainable_greedy_decoding --arch $TG_ARCH --nmt-path "$STAGE1" \
    "${AC[@]}" $(actor_flags "$name") "${ACTOR_OPT[@]}" --group-lr "actor:${ACTOR_LR:-1e-4},critic:${CRITIC_LR:-2e-4}" \
    --batch-size "$BATCH" --max-source-positions "$MAXLEN" --max-target-positions "$MAXLEN" \
    --skip-invalid-size-inputs-valid-test --batch-size-valid 64 --max-update "$UPDATES" \
    --validate-interval-updates "$VALID_EVERY" --save-interval-updates "$VALID_EVERY" \
    --keep-interval-updates 1 --validate-interval 1000 "${COMMON[@]}" --save-dir $OUT/$name \
    > $OUT/$name.log 2>&1 || { tail -20 $OUT/$name.log; return 1; }
  touch $OUT/$name/train.done
}

# decode NAME ALGO [FLAGS...]: test -> $OUT/decode/NAME.ALGO/generate-test.txt (sentencepiece pieces in H-lines)
decode() {
  local name=$1 algo=$2 dir path task
  shift 2
  dir=$OUT/decode/$name.$algo
  [ -s $dir/generate-test.txt ] && return 0
  mkdir -p $OUT/decode
  if [ "$name" = plain ]; then path=$STAGE1 task=translation_decoding
  else path=$OUT/$name/checkpoint_best.pt task=trainable_greedy_decoding; fi
  rm -rf $dir.tmp
  $FS/fairseq-generate $BIN "${UD[@]}" --task $task --gen-subset test --path "$path" --decoding-algorithm "$algo" \
    --beam "$BEAM" "${LEN[@]}" --batch-size 64 --cpu --seed 1 --results-path $dir.tmp "$@" > $dir.log 2>&1 \
    || { tail -20 $dir.log; return 1; }
  mv $dir.tmp $dir
}

run_actor() {
  local name=$1
  train_actor "$name" || return 1
  if [ "$name" = bleu ]; then decode bleu greedy --tg-influence-out $OUT/decode/bleu.influence.tsv || return 1
  else decode "$name" greedy || return 1; fi
  decode "$name" beam
}

run_lane() {
  local job
  for job in "$@"; do
    case $job in
      plain) decode plain greedy && decode plain beam || { touch $OUT/plain.failed; return 1; } ;;
      *) run_actor "$job" || { touch $OUT/$job.failed; return 1; } ;;
    esac
  done
}

# two single-thread lanes: the actors alternate between them, the plain decodes go to lane B
lane_a=() lane_b=(plain)
for i in "${!ACTORS[@]}"; do
  if ((i % 2 == 0)); then lane_a+=("${ACTORS[$i]}"); else lane_b+=("${ACTORS[$i]}"); fi
done
rm -f $OUT/*.failed
echo "lane A: ${lane_a[*]}; lane B: ${lane_b[*]}"
run_lane "${lane_a[@]}" & pa=$!
run_lane "${lane_b[@]}" & pb=$!
failed=0
wait $pa || failed=1
wait $pb || failed=1
[ $failed = 0 ] || { echo "error: a job failed (logs in $OUT)" >&2; exit 1; }

# ---- decode-time ratio: the first actor greedy / plain greedy, interleaved rounds on valid
if [ ! -s $OUT/decode_speed.json ]; then
  SP="--user-dir fairseq_ext --gen-subset valid --decoding-algorithm greedy ${LEN[*]} --batch-size 64 --cpu --seed 1"
  decode_speed $OUT/decode_speed --system "plain=$BIN $SP --task translation_decoding --path $STAGE1" \
    --system "actor=$BIN $SP --task trainable_greedy_decoding --path $OUT/${ACTORS[0]}/checkpoint_best.pt"
fi

# ---- report
args=()
for a in "${ACTORS[@]}"; do args+=(--actor "$a=$OUT/$a.log"); done
$PY examples/trainable_greedy/report.py --out $OUT --data $BIN --nmt "$STAGE1" --ref $RAW/test.en --decode-dir $OUT/decode \
  "${args[@]}" --n-bootstrap "$N_BOOTSTRAP" --influence $OUT/decode/bleu.influence.tsv --speed $OUT/decode_speed.md
echo "results: $OUT/results.md"

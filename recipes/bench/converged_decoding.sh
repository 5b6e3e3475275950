#!/usr/bin/env bash
# The decoding agents of Gu ch. 7 and ch. 9 at convergence: a converged stage-1 NMT, then (ch. 7) the trainable greedy
# actor at the thesis's learning rates, trained until its dev objective stops improving, against plain greedy and
# beam on the same NMT (paired bootstrap), and (ch. 9) the simultaneous READ/WRITE agents (AP and CW delay targets)
# trained the same way on a converged uni-directional environment, against the wait-k curve at equal AL.
# Code: recipes/bench/bench.py --curve-every / --patience (stage 1: dev BLEU curves, early stopping; as
# recipes/bench/converged_doc.sh), the ch. 7 / ch. 9 models, criteria and tasks with fairseq's own --patience on
# their validation objective (recipes/gu/ch7.sh and ch9.sh have the same commands on a short budget), the reports
# fairseq_ext/tools/chapters/greedy_report.py (Fig. 7.3 deltas + paired bootstrap, Fig. 7.4 dev curves) and
# simul_report.py (BLEU vs AP / CW / AL beside wait-k, Fig. 9.4 dev curves, the agents against wait-k at their AL).
#
#   nice bash recipes/bench/converged_decoding.sh                  # every stage (tg needs converged_doc.sh's doc1)
#   STAGES=stage1 nice bash recipes/bench/converged_decoding.sh     # stage1 tg simul (= simul stage 2) cost
#   TG_STAGE1=own bash recipes/bench/converged_decoding.sh          # stage1 also trains the bi-directional rnnsearch
#   DATA=tiny bash recipes/bench/converged_decoding.sh              # the committed tiny slice, a few updates (minutes)
#   TABLE=recipes/bench/RESULTS.md bash ...                         # merge stage 1's rows into the converged table
#
# Data: the folder of converged_doc.sh's doc1 (es->en, 10,001 training verses drawn as whole chapters, sentencepiece
# 4k, full dev 645 / test 1,494 verses): data/bible_es_en/spm4000-train10000docs-seed1-heldout5-f99846bf.
# Stages (dev curves every CURVE_EVERY (200) updates in stage 1, PATIENCE (5) validations; CAP_MIN (600) minutes of
# training at most per model):
#   stage1  job OUT/dec_stage1 (bench.py): rnnsearch_uni (rnnsearch_bench --encoder-unidirectional, the ch. 9
#           environment, Eq. 9.1) from scratch to the stop; with TG_STAGE1=own (DATA=tiny's default) also `rnnsearch`
#           on lane B (then the job's baseline); by default ch. 7's frozen NMT is converged_doc.sh's doc1 `rnnsearch`
#           (RUNS/converged/doc1/rnnsearch: the same configuration on the same data, trained by converged_doc.sh's doc1 stage).
#   tg      ch. 7 (job OUT/dec_tg): one actor per TG_ACTORS (default bleu_lr2e-6 bleu_lr1e-5 bleu_lr1e-4:
#           objective BLEU+1, critic-aware weights, actor learning rate 2e-6 = the thesis's, 1e-5 and 1e-4 = the
#           short-budget rows'; <objective>_lr<LR> with objective bleu, bleu_uniform or perplexity), the thesis's
#           flags (§7.4.1): RMSProp actor LR / critic TG_CRITIC_LR (2e-4), 10 critic updates per actor update,
#           S_c = S_a = 4, sigma 0.1, tau 0.01, TG_BATCH (32) verses of <= 200 subwords; validated every TG_VALID
#           (1,100) updates (greedy with the actor on the dev verses: the mean BLEU+1, Fig. 7.4's curve), stopped
#           after TG_PATIENCE (10) validations without a better one (the thesis's), at most TG_CAP (0: none) updates
#           and CAP_MIN minutes. Test: plain greedy and beam BEAM (5) on the frozen NMT, each actor's best
#           checkpoint greedy and beam; results.md (Fig. 7.3: BLEU/chrF and paired bootstrap against the plain
#           decoder of the same search, perplexity under the NMT), fig7_3_deltas.png, fig7_4_curves.png.
#   simul   ch. 9 (job OUT/dec_simul): one agent per TARGETS (default ap0.3 ap0.5 ap0.7 cw2 cw5 cw8; beta BETA
#           (-1), alpha ALPHA (-0.03)) on stage1's rnnsearch_uni, the thesis's flags (§9.5.1): simul_agent (GRU 512),
#           Adam 2e-4, clip 1, 10 verses x 5 trajectories, pairs < MAXLEN (50) subwords, validated every
#           AGENT_VALID (1,000) updates (argmax actions on the dev verses < MAXLEN), the best BLEU/AP kept, stopped
#           after AGENT_PATIENCE (10) validations without a better one, at most AGENT_CAP (0: none) updates and
#           CAP_MIN minutes. Test: the pairs with both sides < MAXLEN subwords (TEST_N: that many evenly spaced; all
#           by default): every agent simul_greedy (and simul_beam BEAM with AGENT_BEAM=1), WUE / WOS / WIW / WID and
#           wait-k (k in WAITK: 1 2 3 5 7 9 12; the environment read by the wait-k policy) greedy; results.md, the
#           agents against the wait-k curve at their own AL, bleu_al.png, fig9_5/9_6, fig9_4_curves.png.
#   cost    OUT/dec_cost/cost.md: CPU seconds per update of every stage's training with its exact flags on this
#           data (one thread, /usr/bin/time user seconds of a COST_N1- and a COST_N2-update run, the difference per
#           update: the start-up cancels), COST_ROUNDS interleaved rounds; stage 2 on the converged stage-1 models
#           when they exist, else on the stage-1 timing runs' checkpoints (barely trained: their rollouts run to
#           the length limit, an upper bound); the CPU seconds of one dev validation of each stage-2 system.
# Resumable: a finished model (result.json / train.done) is reused, an interrupted one resumes from its last
# checkpoint (saved at every validation; the patience count travels in it), finished decodes are kept; tg starts only
# when its stage-1 NMT has finished, simul when stage1's rnnsearch_uni has (else one error line).
# Wait-k here is the converged environment read by the wait-k policy (test-time wait-k, as recipes/gu/ch9.sh): a
# wait-k model trained on prefixes (Ma et al. 2019) is not implemented in the package.
# CPU cost, measured 2026-11-29 00:05-00:25 UTC with STAGES=cost on this data, Intel Xeon with AVX512-BF16 (no AMX
# exposed), one thread, user CPU seconds (load average 12-15 on the 2 cores then: CPU time does not depend on it;
# wall-clock was ~8x it); one round only (the load left no time for more). CPU s per update:
#   stage 1: rnnsearch 1.55 (updates 3-8: 1.55; updates 2-4: 1.55), rnnsearch_uni 1.11 (updates 2-4, the same
#   batches): 0.72 of it (converged_doc.sh measured rnnsearch at 1.39 on its fixed batches).
#   tg: 5.33 per critic update (updates 2-3; TG_BATCH 32 verses, 4 noisy rollouts + the reference) on an NMT of 8
#   updates, whose rollouts run to the length limit 1.5|X| + 10: an upper bound; the actor update (1 in 11) not timed.
#   simul: 1.85 per agent update (ap0.5, 10 verses x 5 trajectories, updates 2-4) on an environment of 4 updates.
#   One dev validation (the same caveat): tg 44 s (645 verses), agent 17 s (the dev verses < 50 subwords).
# Estimates (one free core; updates to the stop are NOT measured, their basis is stated):
#   stage1  rnnsearch_uni: ~7,800 updates (converged_doc.sh's basis: the 10k en->tl baseline stopped there; doc1's
#           transformer on this data was still rising at 1,800) x 1.1-1.55 s = 2.4-3.4 h + 39 validations.
#   tg      patience 10 at every 1,100 updates stops an actor at 11,000 updates at the earliest (best = the first
#           validation): 11,000 x 5.3 s = 16 h + 10 validations per actor, ~49 h for the three (lanes: 2 + 1 actors,
#           ~33 h on two free cores); an actor still improving runs longer (TG_CAP caps it).
#   simul   patience 10 at every 1,000: >= 10,000 updates per agent x 1.85 s = 5.1 h + 10 validations, ~31 h for six
#           (~16 h on two lanes) + the test decodes (not timed here; ch9.sh: simul_greedy ~0.1 s a verse, 17 decodes).
#   In all >= ~85 h of CPU, ~45 h on two free cores: a GPU job (DEVICE=cuda, not run on a GPU yet) or caps.
source "$(dirname "$0")/../lib.sh"
STAGES=${STAGES:-stage1 tg simul}
OUT=$RUNS/converged
TG_ACTORS=(${TG_ACTORS:-bleu_lr2e-6 bleu_lr1e-5 bleu_lr1e-4})
TARGETS=(${TARGETS:-ap0.3 ap0.5 ap0.7 cw2 cw5 cw8})
BEAM=${BEAM:-5} BETA=${BETA:--1} ALPHA=${ALPHA:--0.03} MAXLEN=${MAXLEN:-50}
REPORT9=examples/simultaneous/report.py

if [ "${DATA:-bible}" = tiny ]; then
  OUT=$RUNS/converged_decoding_tiny
  CURVE_EVERY=${CURVE_EVERY:-2} PATIENCE=${PATIENCE:-2} CAP_MIN=${CAP_MIN:-5} CAP_UPDATES=${CAP_UPDATES:-4}
  N_BOOTSTRAP=${N_BOOTSTRAP:-50} TG_STAGE1=${TG_STAGE1:-own}
  TG_ARCH=trainable_greedy_tiny AGENT_ARCH=simul_agent_tiny MAXLEN=${MAXLEN_TINY:-100}
  TG_BATCH=${TG_BATCH:-4} TG_VALID=${TG_VALID:-11} TG_PATIENCE=${TG_PATIENCE:-1} TG_CAP=${TG_CAP:-22}
  AGENT_VALID=${AGENT_VALID:-2} AGENT_PATIENCE=${AGENT_PATIENCE:-1} AGENT_CAP=${AGENT_CAP:-4} TRAJ=${TRAJ:-2}
  BEAM=${BEAM_TINY:-2} LEN_A=0.5 LEN_B=5   # an untrained NMT rarely writes </s>: short outputs keep decodes fast
  WAITK_DEF="1 3"
  COST_N1=${COST_N1:-1} COST_N2=${COST_N2:-2} COST_TG_N2=${COST_TG_N2:-3} COST_ROUNDS=${COST_ROUNDS:-1}
else
  CURVE_EVERY=${CURVE_EVERY:-200} PATIENCE=${PATIENCE:-5} CAP_MIN=${CAP_MIN:-600} CAP_UPDATES=${CAP_UPDATES:-0}
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000} TG_STAGE1=${TG_STAGE1:-doc1}
  TG_ARCH=trainable_greedy AGENT_ARCH=simul_agent
  TG_BATCH=${TG_BATCH:-32} TG_VALID=${TG_VALID:-1100} TG_PATIENCE=${TG_PATIENCE:-10} TG_CAP=${TG_CAP:-0}
  AGENT_VALID=${AGENT_VALID:-1000} AGENT_PATIENCE=${AGENT_PATIENCE:-10} AGENT_CAP=${AGENT_CAP:-0} TRAJ=${TRAJ:-5}
  LEN_A=1.5 LEN_B=10   # tau_MAX = 1.5|X| + 10 (the criterion's default), rollouts and decodes alike
  WAITK_DEF="1 2 3 5 7 9 12"
  COST_N1=${COST_N1:-2} COST_N2=${COST_N2:-8} COST_TG_N2=${COST_TG_N2:-13} COST_ROUNDS=${COST_ROUNDS:-3}
fi
WAITK=(${WAITK:-$WAITK_DEF})
case ${DEVICE:-cpu} in cpu|cuda) ;; *) echo "error: DEVICE must be cpu or cuda, got '$DEVICE'" >&2; exit 2 ;; esac
case $TG_STAGE1 in doc1|own) ;; *) echo "error: TG_STAGE1 must be doc1 or own, got '$TG_STAGE1'" >&2; exit 2 ;; esac

# the settings, checked before any work: one error line each
for stage in $STAGES; do
  case $stage in stage1|tg|simul|cost) ;; *) echo "error: unknown stage '$stage' (stage1 tg simul cost)" >&2; exit 2 ;;
  esac
done
# tg_flags NAME: the criterion and optimiser flags of an actor <objective>_lr<LR> (the thesis's, §7.4.1)
tg_flags() {
  local obj=${1%_lr*} lr=${1##*_lr}
  [[ $1 == *_lr* && $lr =~ ^[0-9.]+(e-?[0-9]+)?$ ]] || {
    echo "error: actor '$1' is not <objective>_lr<LR> (e.g. bleu_lr2e-6)" >&2; return 2; }
  case $obj in
    bleu) echo "--tg-objective bleu" ;;
    bleu_uniform) echo "--tg-objective bleu --tg-uniform-weights" ;;
    perplexity) echo "--tg-objective perplexity" ;;
    *) echo "error: actor '$1': unknown objective '$obj' (bleu, bleu_uniform, perplexity)" >&2; return 2 ;;
  esac
  echo "--criterion actor_critic --critic-updates 10 --actor-updates 1 --tg-critic-samples 4 --tg-actor-samples 4"
  echo "--tg-noise-std 0.1 --tg-tau 0.01 --optimizer rmsprop --lr ${TG_CRITIC_LR:-2e-4} --lr-scheduler fixed"
  echo "--group-lr actor:$lr,critic:${TG_CRITIC_LR:-2e-4}"
}

# agent_flags TARGET: the criterion and optimiser flags of an agent (apD: AP target D; cwC: CW target C; §9.5.1)
agent_flags() {
  case $1 in
    ap0.[0-9]*|ap1|ap1.0) echo "--delay-type ap --target-ap ${1#ap} --delay-beta $BETA" ;;
    cw[0-9]*) echo "--delay-type cw --target-cw ${1#cw} --delay-alpha $ALPHA" ;;
    *) echo "error: unknown delay target '$1' (apD with 0 < D <= 1, e.g. ap0.5; cwC, e.g. cw5)" >&2; return 2 ;;
  esac
  echo "--criterion simul_policy_gradient --traj-per-sent $TRAJ --simul-max-len-a $LEN_A --simul-max-len-b $LEN_B"
  echo "--reward-bpe sentencepiece --optimizer adam --lr ${AGENT_LR:-2e-4} --clip-norm 1.0 --lr-scheduler fixed"
  echo "--batch-size 10 --required-batch-size-multiple 1"
}
for a in "${TG_ACTORS[@]}"; do tg_flags "$a" > /dev/null || exit 2; done
for t in "${TARGETS[@]}"; do agent_flags "$t" > /dev/null || exit 2; done
for w in "${WAITK[@]}"; do
  [[ $w =~ ^[1-9][0-9]*$ ]] || { echo "error: WAITK values must be integers >= 1, got '$w'" >&2; exit 2; }
done

if [ "${DATA:-bible}" = tiny ]; then
  DOC=$($PY recipes/nguyen/transfer.py tiny-data --out "$OUT/data" --test 36)
else
  DOC=$(doc_set) || exit 1
fi
BIN=$DOC/bin
RAW=$($PY -c "import sys; from fairseq_ext.tools.evaluation.runs import raw_folder as r; print(r(sys.argv[1]))" "$DOC")
J=$OUT
CONV=(--patience "$PATIENCE" --budget-min "$CAP_MIN")
[ "$CAP_UPDATES" = 0 ] || CONV+=(--max-updates "$CAP_UPDATES")
DEVICE=${DEVICE:-cpu}   # cuda: the same runs on a GPU (not run there yet); cpu: THREADS threads
CPU=(--cpu); [ "$DEVICE" = cpu ] || CPU=()
COMMON=(--seed 1 "${CPU[@]}" --no-progress-bar --log-format simple --log-interval 10 --no-epoch-checkpoints)
LANGS=(--source-lang es --target-lang en)
POS=(--max-source-positions "$MAXLEN" --max-target-positions "$MAXLEN")
HOURS=$(echo "$CAP_MIN / 60" | bc -l)

# ckpt_of JOB CONFIG: the best checkpoint of a finished bench configuration (its result.json), or an error
ckpt_of() {
  [ -s "$1/$2/result.json" ] || {
    echo "error: $1/$2 has not finished: run its stage first (STAGES=${3:-stage1})" >&2; return 1; }
  echo "$(realpath "$1/$2")/checkpoint_best.pt"
}
tg_stage1() { if [ "$TG_STAGE1" = doc1 ]; then ckpt_of "$OUT/doc1" rnnsearch doc1; else ckpt_of "$J/dec_stage1" rnnsearch; fi; }

stage1() {
  if [ "$TG_STAGE1" = own ]; then
    curve_job dec_stage1 "$DOC" es en "" rnnsearch_uni rnnsearch "${CONV[@]}" --baseline rnnsearch --device "$DEVICE"
  else
    $PY recipes/bench/bench.py --data "$DOC" --src es --tgt en --ref2 "" --threads "$THREADS" --device "$DEVICE" \
      --n-bootstrap "$N_BOOTSTRAP" --out "$J/dec_stage1" --curve-every "$CURVE_EVERY" "${CONV[@]}" \
      --configs rnnsearch_uni --baseline rnnsearch_uni ${TABLE:+--table "$TABLE"} > "$J/dec_stage1.log" 2>&1 \
      || { tail -20 "$J/dec_stage1.log"; return 1; }
    grep -A5 "^| config | system | best dev BLEU" "$J/dec_stage1.log" | grep "^|"
  fi
}

# train DIR LOG FLAGS...: fairseq-train to DIR (resumes its checkpoint_last.pt; DIR/train.done when it stops)
train() {
  local dir=$1 log=$2
  shift 2
  [ -e "$dir/train.done" ] && { echo "$(basename "$dir"): reusing"; return 0; }
  mkdir -p "$dir"
  $FS/fairseq-train "$BIN" "${UD[@]}" "${LANGS[@]}" "$@" --skip-invalid-size-inputs-valid-test \
    --batch-size-valid 64 --keep-interval-updates 1 --validate-interval 1000 --stop-time-hours "$HOURS" \
    "${COMMON[@]}" --save-dir "$dir" >> "$log" 2>&1 || { tail -20 "$log"; return 1; }
  touch "$dir/train.done"
}

# gen DIR LOG FLAGS...: fairseq-generate of test into DIR (written to DIR.tmp and moved; a finished DIR is kept)
gen() {
  local dir=$1 log=$2
  shift 2
  [ -s "$dir/generate-test.txt" ] && return 0
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  $FS/fairseq-generate "${UD[@]}" "$@" --gen-subset test --batch-size 64 "${CPU[@]}" --seed 1 --results-path "$dir.tmp" \
    > "$log" 2>&1 || { tail -20 "$log"; return 1; }
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
}

# two_lanes FUNC ARG "JOBS_A" "JOBS_B": FUNC ARG JOB... on two single-thread lanes side by side (LANES=1: one lane,
# A's jobs then B's)
two_lanes() {
  local f=$1 arg=$2 lanes=("$3" "$4") i pids=() failed=0
  [ "${LANES:-2}" != 1 ] || lanes=("$3 $4" "")
  echo "lanes: ${lanes[0]} |${lanes[1]}"
  for i in 0 1; do
    # shellcheck disable=SC2086
    [ -z "${lanes[i]// /}" ] || { $f "$arg" ${lanes[i]} & pids+=($!); }
  done
  for i in "${pids[@]}"; do wait "$i" || failed=1; done
  return $failed
}

# ---- ch. 7: trainable greedy decoding
tg_actor() {  # tg_actor NAME NMT: train, then greedy and beam on test with the actor
  local name=$1 nmt=$2 cap=()
  [ "$TG_CAP" = 0 ] || cap=(--max-update "$TG_CAP")
  # shellcheck disable=SC2046
  train "$J/dec_tg/$name" "$J/dec_tg/$name.log" --task trainable_greedy_decoding --arch $TG_ARCH --nmt-path "$nmt" \
    $(tg_flags "$name") --batch-size "$TG_BATCH" --max-source-positions 200 --max-target-positions 200 \
    --validate-interval-updates "$TG_VALID" --save-interval-updates "$TG_VALID" --patience "$TG_PATIENCE" \
    "${cap[@]}" || return 1
  for search in greedy beam; do
    gen "$J/dec_tg/decode/$name.$search" "$J/dec_tg/decode/$name.$search.log" "$BIN" --task trainable_greedy_decoding \
      --path "$J/dec_tg/$name/checkpoint_best.pt" --decoding-algorithm $search --beam "$BEAM" "${LEN[@]}" || return 1
  done
}
tg_lane() {  # tg_lane NMT ACTOR...: "plain" = the frozen NMT's greedy and beam decodes
  local nmt=$1 a
  shift
  for a in "$@"; do
    if [ "$a" = plain ]; then
      for search in greedy beam; do
        gen "$J/dec_tg/decode/plain.$search" "$J/dec_tg/decode/plain.$search.log" "$BIN" --task translation_decoding \
          --path "$nmt" --decoding-algorithm $search --beam "$BEAM" "${LEN[@]}" || return 1
      done
    else tg_actor "$a" "$nmt" || return 1; fi
  done
}
tg() {
  local nmt lanes=("" plain) i args=()
  nmt=$(tg_stage1) || return 1
  mkdir -p "$J/dec_tg/decode"
  for i in "${!TG_ACTORS[@]}"; do lanes[i % 2]+=" ${TG_ACTORS[i]}"; done
  echo "[tg] NMT $nmt"
  two_lanes tg_lane "$nmt" "${lanes[@]}" || return 1
  for a in "${TG_ACTORS[@]}"; do args+=(--actor "$a=$J/dec_tg/$a.log"); done
  $PY examples/trainable_greedy/report.py --out "$J/dec_tg" --data "$BIN" --nmt "$nmt" --ref "$RAW/test.en" \
    --decode-dir "$J/dec_tg/decode" "${args[@]}" --n-bootstrap "$N_BOOTSTRAP" > "$J/dec_tg/report.log" 2>&1 \
    || { tail -20 "$J/dec_tg/report.log"; return 1; }
  cat "$J/dec_tg/results.md"
}

# ---- ch. 9: simultaneous agents against wait-k
simul_decode() {  # simul_decode NAME SEARCH ENV: the test pairs -> OUT/dec_simul/decode/NAME.SEARCH (+ actions.jsonl)
  local name=$1 search=$2 path=$3 flags d=$J/dec_simul/decode/$1.$2
  [ -s "$d/actions.jsonl" ] || rm -rf "$d"
  mapfile -t flags < <(simul_flags "$name" "$search" "$BEAM")
  [ "${flags[1]}" != agent ] || path=$J/dec_simul/$name/checkpoint_best.pt
  gen "$d" "$d.log" "$J/dec_simul/test/bin" --task simul_rl_translation "${LANGS[@]}" --path "$path" "${flags[@]}" \
    --max-len-a $LEN_A --max-len-b $LEN_B --simul-actions-out "$d.tmp/actions.jsonl"
}
simul_lane() {  # simul_lane ENV JOB...: an agent name, or "baselines"
  local env=$1 job b cap=()
  shift
  [ "$AGENT_CAP" = 0 ] || cap=(--max-update "$AGENT_CAP")
  for job in "$@"; do
    if [ "$job" = baselines ]; then
      for b in wue wos wiw wid "${WAITK[@]/#/wait}"; do simul_decode "$b" greedy "$env" || return 1; done
      continue
    fi
    # shellcheck disable=SC2046
    train "$J/dec_simul/$job" "$J/dec_simul/$job.log" --task simul_rl_translation --arch $AGENT_ARCH --nmt-path "$env" \
      $(agent_flags "$job") "${POS[@]}" --validate-interval-updates "$AGENT_VALID" \
      --save-interval-updates "$AGENT_VALID" --best-checkpoint-metric bleu_over_ap --maximize-best-checkpoint-metric \
      --patience "$AGENT_PATIENCE" "${cap[@]}" || return 1
    simul_decode "$job" greedy "$env" || return 1
    [ "${AGENT_BEAM:-0}" = 0 ] || simul_decode "$job" beam "$env" || return 1
  done
}
simul() {
  local env lanes=("" "") i args=() t=$J/dec_simul/test
  env=$(ckpt_of "$J/dec_stage1" rnnsearch_uni) || return 1
  mkdir -p "$J/dec_simul/decode"
  if [ ! -s "$t/bin/test.es-en.es.idx" ]; then   # the test pairs with both sides under MAXLEN subwords
    rm -rf "$t.tmp"
    $PY $REPORT9 filter --seg-prefix "$DOC/test" --raw-prefix "$RAW/test" --src es --tgt en --max-len "$MAXLEN" \
      ${TEST_N:+--max-pairs "$TEST_N"} --out "$t.tmp" || return 1
    $FS/fairseq-preprocess "${LANGS[@]}" --testpref "$t.tmp/test" --srcdict "$BIN/dict.es.txt" \
      --tgtdict "$BIN/dict.en.txt" --destdir "$t.tmp/bin" --workers 1 > "$t.tmp/preprocess.log" 2>&1 \
      || { tail -20 "$t.tmp/preprocess.log"; return 1; }
    mv "$t.tmp" "$t"
  fi
  for i in "${!TARGETS[@]}"; do lanes[i % 2]+=" ${TARGETS[i]}"; done
  lanes[1]+=" baselines"
  echo "[simul] environment $env"
  two_lanes simul_lane "$env" "${lanes[@]}" || return 1
  for a in "${TARGETS[@]}"; do args+=(--agent "$a=$J/dec_simul/$a.log"); done
  $PY $REPORT9 report --decode-dir "$J/dec_simul/decode" --ref "$t/ref.txt" --out "$J/dec_simul" \
    --remove-bpe sentencepiece --title "Bible es-en (converged), test < $MAXLEN subwords" "${args[@]}" \
    > "$J/dec_simul/report.log" 2>&1 || { tail -20 "$J/dec_simul/report.log"; return 1; }
  cat "$J/dec_simul/results.md"
}

# ---- cost: CPU seconds per update of each stage's training, interleaved rounds (see the header)
# cost_run NAME N VALID FLAGS...: one timed fairseq-train of N updates (VALID=1: one validation at update N; the run
# saves its checkpoint_last.pt); appends "NAME N VALID user-seconds" to OUT/dec_cost/cost.tsv
cost_run() {
  local name=$1 n=$2 valid=$3 d=$J/dec_cost/$1 v=(--disable-validation)
  shift 3
  [ "$valid" = 0 ] || v=(--validate-interval-updates "$n" --validate-interval 1000 --skip-invalid-size-inputs-valid-test)
  rm -rf "$d" && mkdir -p "$d"
  /usr/bin/time -f %U -o "$d/user.s" $FS/fairseq-train "$BIN" "${UD[@]}" "${LANGS[@]}" "$@" "${v[@]}" \
    --max-update "$n" --max-epoch 1000 --seed 1 --cpu --no-progress-bar --log-format simple --log-interval 1 \
    --no-epoch-checkpoints --save-dir "$d" > "$d.log" 2>&1 || { tail -20 "$d.log"; return 1; }
  printf '%s\t%s\t%s\t%s\n' "${name%_*}" "$n" "$valid" "$(tail -n 1 "$d/user.s")" >> "$J/dec_cost/cost.tsv"
}
# cost_flags SYSTEM: the training flags (FLAGS) and the longer run's updates (N2) of a timed system
cost_flags() {
  local keep=$J/dec_cost/frozen
  case $1 in
    s1_bi|s1_uni) eval "FLAGS=($($PY -m fairseq_ext.tools.evaluation.bench_configs \
                    "$([ "$1" = s1_bi ] && echo rnnsearch || echo rnnsearch_uni)"))" N2=$COST_N2 ;;
    tg) # shellcheck disable=SC2046
        FLAGS=(--task trainable_greedy_decoding --arch $TG_ARCH --nmt-path "$keep/bi.pt" $(tg_flags bleu_lr2e-6)
               --batch-size "$TG_BATCH" --max-source-positions 200 --max-target-positions 200) N2=$COST_TG_N2 ;;
    agent) # shellcheck disable=SC2046
           FLAGS=(--task simul_rl_translation --arch $AGENT_ARCH --nmt-path "$keep/uni.pt" $(agent_flags ap0.5)
                  "${POS[@]}" --skip-invalid-size-inputs-valid-test --batch-size-valid 64
                  --best-checkpoint-metric bleu_over_ap --maximize-best-checkpoint-metric) N2=$COST_N2 ;;
    *) echo "error: unknown COST_SYSTEMS entry '$1' (s1_bi s1_uni tg agent)" >&2; return 2 ;;
  esac
  [[ $1 == s1_* || -s ${FLAGS[5]} ]] || {
    echo "error: ${FLAGS[5]} is missing: time s1_$(basename "${FLAGS[5]}" .pt) first (COST_SYSTEMS)" >&2; return 1; }
}
# the frozen NMT of the stage-2 timings: the converged stage-1 model when it exists, else the timing run's
freeze() {
  local keep=$J/dec_cost/frozen nmt
  [ ! -s "$keep/${1#s1_}.pt" ] || return 0
  mkdir -p "$keep"
  if [ "$1" = s1_bi ] && nmt=$(tg_stage1 2> /dev/null); then ln -sf "$nmt" "$keep/bi.pt"
  elif [ "$1" = s1_uni ] && nmt=$(ckpt_of "$J/dec_stage1" rnnsearch_uni 2> /dev/null); then ln -sf "$nmt" "$keep/uni.pt"
  else cp "$J/dec_cost/${1}_b/checkpoint_last.pt" "$keep/${1#s1_}.pt"; echo "${1#s1_}: $2 updates" >> "$keep/README"
  fi
}
cost() {   # COST_SYSTEMS: the systems timed (an existing cost.tsv is appended to); COST_VALID=0: no validation runs
  local r s sys=(${COST_SYSTEMS:-s1_bi s1_uni tg agent}) FLAGS N2
  local eval=(--eval-bleu --eval-bleu-args "{\"beam\": 1, \"max_len_a\": ${LEN[1]}, \"max_len_b\": ${LEN[3]}}"
              --eval-bleu-remove-bpe sentencepiece --best-checkpoint-metric bleu --maximize-best-checkpoint-metric)
  [ -s "$J/dec_cost/cost.tsv" ] || printf 'system\tupdates\tvalidation\tuser_s\n' > "$J/dec_cost/cost.tsv"
  uptime >> "$J/dec_cost/uptime.txt"
  for r in $(seq "$COST_ROUNDS"); do
    for s in "${sys[@]}"; do
      cost_flags "$s" || return 1
      cost_run "${s}_a" "$COST_N1" 0 "${FLAGS[@]}" && cost_run "${s}_b" "$N2" 0 "${FLAGS[@]}" || return 1
      [[ $s != s1_* ]] || freeze "$s" "$N2"
    done
  done
  for s in "${sys[@]}"; do   # one dev validation each (stage 1: greedy dev BLEU, as bench.py's curves)
    [ "${COST_VALID:-1}" != 0 ] || break
    cost_flags "$s" || return 1
    [[ $s != s1_* ]] || FLAGS+=("${eval[@]}")
    cost_run "${s}_v" "$COST_N1" 1 "${FLAGS[@]}" || return 1
  done
  uptime >> "$J/dec_cost/uptime.txt"
  $PY - "$J/dec_cost" > "$J/dec_cost/cost.md" <<'PYEOF' || return 1
import csv, statistics, sys
from collections import defaultdict
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/cost.tsv"), delimiter="\t"))
runs = defaultdict(list)
for r in rows:
    runs[r["system"], r["validation"]].append((int(r["updates"]), float(r["user_s"])))
per = {}
for (s, v), xs in runs.items():
    if v != "0":
        continue
    per[s] = [(tb - ta) / (nb - na) for (na, ta), (nb, tb) in zip(xs[0::2], xs[1::2])]   # each round: a short, a long run
base = statistics.median(per["s1_bi"]) if "s1_bi" in per else None
print("| stage / system | CPU s per update (median; rounds) | ratio to s1_bi | one dev validation, CPU s |")
print("|---|---|---|---|")
for s, xs in per.items():
    val = ""
    if (s, "1") in runs:
        n, tv = runs[s, "1"][-1]
        ta = statistics.median(t for m, t in runs[s, "0"] if m == n)
        val = f"{tv - ta:.1f}"
    ratio = f"{statistics.median(xs) / base:.2f}" if base else "–"
    print(f"| {s} | {statistics.median(xs):.2f} ({', '.join(f'{x:.2f}' for x in xs)}) | {ratio} | {val} |")
print()
up = open(f"{d}/uptime.txt").read().strip().splitlines()
print(f"load before / after: {up[0].strip()} / {up[-1].strip()}")
PYEOF
  cat "$J/dec_cost/cost.md"
}

for stage in $STAGES; do
  case $stage in
    *) mkdir -p "$J/dec_cost"; $stage ;;
  esac || { echo "error: stage $stage failed (logs in $J)" >&2; exit 1; }
done

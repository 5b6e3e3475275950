#!/usr/bin/env bash
# Gu thesis ch. 6: MetaNMT -- meta-learning for low-resource NMT (Gu, Wang, Chen, Cho, Li, EMNLP 2018): first-order
# MAML over source languages (episodes: a language k ~ U(sources), an inner Adam step on a batch D of k, the loss on
# an independent batch D' at theta' as the meta-gradient, Eqs. 6.4-6.6/6.10) with the Universal Lexical
# Representation and a language-specific change Delta-eps (Eq. 6.12), against multilingual transfer (joint training
# on the same sources, Eq. 6.11); then fine-tuning on the target language's small corpus with the three strategies
# all / emb+enc / emb, 5 draws each, and zero-shot decoding (Table 6.2 / Fig. 6.3 layout), plus the cost of one
# meta-iteration against one multilingual update.
# Spec: specs/004a-gu-data-efficient.md §6.  Code: data `fairseq-ext-data universal` (fairseq_ext/tools/corpora/universal_data.py),
# ULR arrays `fairseq-ext-ulr embed | seed-dict | project` (fairseq_ext/tools/corpora/ulr.py), tasks `meta_translation`
# (--meta-langs, --meta-valid-lang, --meta-valid-steps, --inner-steps, --meta-gradient) and `ulr_finetune_translation`
# (--finetune-strategy, --target-token-budget, --subsample-seed) of fairseq_ext/tasks/meta_translation.py,
# `universal_translation` (the transfer baseline's joint phase), model `ulr_transformer` (--ulr, --ulr-freeze-delta;
# archs ulr_transformer_{base,bench,tiny}); helpers and report examples/meta_nmt/report.py (splits, concat, report).
#
#   bash recipes/gu/ch6.sh                          # CPU: Bible, meta-train es fr ru ar, validation tl, target it
#   META_LANGS=es,fr VALID_LANG=vi bash recipes/gu/ch6.sh   # other languages (each set has its own folders)
#   TARGET=vi VALID_LANG=it bash recipes/gu/ch6.sh  # a target without a Romance relative (as Lv/Fi/Tr in the thesis)
#   MEASURE_COST=0 bash recipes/gu/ch6.sh           # without the cost-ratio stage
#   EQUAL_UPDATES=1 bash recipes/gu/ch6.sh          # + the transfer baseline at the meta run's update count
#   DATA=tiny bash recipes/gu/ch6.sh                # the committed tiny multi-parallel slice, tiny models, 2 draws
#                                                   # (~8 min next to other work)
#   MODE=thesis bash recipes/gu/ch6.sh              # print the thesis-setting commands (RUN=1: run them)
#   python examples/meta_nmt/proximal.py --build-tiny --out runs/gu_ch6_proximal   # fine-tuning with Eq. 6.3's prior
#                                                   # (--criterion metanmt_cross_entropy --proximal-weight B)
#
# ---- Thesis settings (MODE=thesis; data you provide, a GPU assumed) --------------------------------------------
# Source tasks (§6.4.1): Europarl Bg Cs Da De El Es Et Fr Hu It Lt Nl Pl Pt Sk Sl Sv (17) + Ru (WMT'17 subsample,
# ~2M pairs) = 18; targets Ro (WMT'16), Lv, Fi, Tr (WMT'17), Ko (KPD), official dev/test; validation task Ro-En or
# Lv-En (the target is never the validation task: Lv validates Ro, Ro the others). Put every corpus in
# THESIS_DATA/multi.tsv (the layout of the Bible's multi.tsv, built by your own script: a verse-id-like first column
# whose "book" decides train/valid/test, one column per language, English the target) -- then per source set and
# target the data builder writes the marked vocabularies (BPE 40k per language), ULR inputs (fastText 300-d; the
# thesis aligns them with MUSE, here Procrustes on alignment seeds), M = 20k universal English tokens; `examples/meta_nmt/report.py
# splits` writes train_multi (the sources), train_meta_<V> (+ V) and valid_<V> (V's dev). ulr_transformer_base
# (d 512, FFN 512, 6+6 layers, 8 heads, dropout 0.1), batches of 4,000 tokens (D and D' each), 1 episode per
# meta-update, 1 inner Adam step (first-order, Eq. 6.10), Adam (0.9, 0.98, 1e-9), Noam-like lr 3.5e-4 peak with 16k
# warm-up (inverse_sqrt; inner lr = the current meta lr), meta-validation every 1,000 updates (a copy fine-tuned
# emb+enc 160 steps = 5 x 32 at 1e-4 on V, then the copy's greedy dev BLEU, --eval-bleu, the checkpoint metric;
# patience 10); the transfer baseline the same on train_multi (languages drawn uniformly, --lang-temperature 0, Delta-eps frozen) validated on V's dev. Fine-tuning
# (spec REC): 16k English tokens drawn 5 times (--subsample-seed 1..5), Adam 1e-4 constant, <= 3,000 updates, dev
# every epoch, patience 10; test beam 4, GNMT length penalty 0.6. Printed: Table 6.2 (six source sets x five
# targets, MetaNMT zero-shot + emb+enc fine-tuning) and Fig. 6.3 (Es Fr It Pt De Ru; Ro Lv Fi Tr x validation Ro/Lv;
# MetaNMT and transfer x all / emb+enc / emb). Fig. 6.4 is the same with --target-token-budget 4000 / 40000 /
# 160000 (not printed). Thesis Ro-En (Table 6.2): Es 9.20 / 15.71 +- .22, Es Fr 12.35 / 17.46 +- .41, Es Fr It Pt
# 13.88 / 18.54 +- .19, De Ru 10.60 / 16.05 +- .31, Es Fr It Pt De Ru 15.93 / 20.00 +- .27, All 18.12 / 22.04 +- .23
# (zero / finetune), full supervised 31.76; Fig. 6.3 has bars only (no numbers).
#
# ---- CPU mode (default; 2 cores, THREADS=1) --------------------------------------------------------------------
# Languages (the free Bibles of fairseq-ext-data multi, all -> en_web): meta-training (= joint-training) sources
# META_LANGS es,fr,ru,ar (two Romance relatives of the target, a Slavic and a Semitic language); validation task
# VALID_LANG tl (Tagalog: not a relative, like Lv for Ro); target TARGET it (the Romance relative, as Ro).
# Data: one `fairseq-ext-data universal` folder (--aux META_LANGS,VALID_LANG --lowres TARGET): TARGET's pool of
# POOL_TOKENS (80,000) English whitespace tokens (3,261 verses), disjoint from every source verse, its dev/test =
# the held-out books (644 / 1,506 verses); the sources keep every other training verse (~25.7k each); BPE 4k per
# language, marked "<piece>__<lang>"; ULR built once for the folder (fastText 300-d on every training-book verse of
# each language, seed dictionaries from symmetrised eflomal links of each language's pairs -- TARGET's from its
# pool, more parallel text than one draw: the thesis's MUSE uses none -- Procrustes, M = all English pieces); then
# `examples/meta_nmt/report.py splits` (train_multi, train_meta_tl, valid_tl: tl's dev = its held-out valid books).
# Joint phase (ulr_transformer_bench: 3+3 layers, 256/1024, 4 heads; Adam (0.9, 0.98, 1e-9), lr 5e-4 inverse_sqrt,
# 200 warm-up updates; 2,048-token batches = D and D'), META_BUDGET_MIN (40) minutes each, side by side:
#   meta   meta_translation on train_meta_tl: episodes over META_LANGS, first-order, 1 inner Adam step (lr = the
#          current meta lr); meta-validation every VALID_EVERY (200) updates: a copy fine-tuned emb+enc for 32 steps
#          (lr FT_LR) on tl's training pairs, then tl's dev loss (strict: the target's data is never looked at; the
#          loss, not dev BLEU: see the note below)
#   multi  universal_translation on train_multi (the same sources, drawn uniformly, --lang-temperature 0),
#          ulr_transformer --ulr --ulr-freeze-delta (Delta-eps stays 0, as in the meta model between episodes),
#          validated zero-shot on tl's dev every VALID_EVERY (200) updates
# Equal wall-clock budgets, so the transfer baseline makes ~2x more updates (see the cost ratio; measured here
# without ULR: 2.65 s per meta-iteration vs 1.25 s per multilingual update -> ~800 vs ~1,700 updates in 40 min);
# each run's checkpoint with the best tl dev loss is kept. (The loss rather than --eval-bleu, which works for
# meta-validation too -- it decodes with the fine-tuned copy, as MODE=thesis does -- to save the dev decoding.)
# Target: zero-shot = each checkpoint decodes TARGET's test directly; fine-tuning = ulr_finetune_translation from
# it, --target-token-budget TARGET_TOKENS (16,000 English subword tokens ~ 12k words ~ 500 pairs; the task counts
# subwords) --subsample-seed 1..5 (the same draws for both systems), strategies all / emb+enc / emb (Delta-eps +
# encoder + decoder / Delta-eps + encoder / Delta-eps; eps_U and A frozen), Adam FT_LR (3e-4 constant: the spec's
# 1e-4 needs thousands of updates) <= FT_UPDATES (150) updates, TARGET dev loss every FT_VALID_EVERY (25), patience
# FT_PATIENCE (3) -> the best checkpoint decodes the test (then deleted). 2 systems x 3 strategies x 5 draws = 30
# fine-tunings + 32 decodes of the 1,506 test verses, greedy (BEAM 1; the spec's beam 4 would about triple it).
# Scores: sacreBLEU BLEU / chrF per decode against raw/test.en; paired bootstrap (N_BOOTSTRAP 1000) of MetaNMT vs
# transfer per column on the concatenation of the 5 draws (and on the one zero-shot decode).
# Cost ratio (MEASURE_COST=1): COST_ROUNDS (3) rounds of two fairseq-train runs back to back (meta, transfer; the
# order alternates), each 3 x COST_INTERVAL (10) updates from scratch without validation; seconds per update from
# fairseq's train_wall over the intervals after the first; the report gives the median ratio.
# CPU budget (THREADS=1, two lanes, next to other work): data ~1.5 min + splits ~2 min, ULR ~30 min (two lanes:
# embeddings of 6 languages + English, eflomal on 5 x ~25.7k pairs + the 3,261-verse pool), joint phase 40 min,
# cost ~10 min, fine-tuning + decoding ~75-80 min (a run ~3-4 min for <= 150 updates at ~1.3 s + dev losses, a
# greedy decode of the test ~1-1.5 min; 16 jobs per lane): about 2 h 45 min in all. Every stage resumes where it
# stopped (finished stages are skipped; the joint runs checkpoint every VALID_EVERY updates with their training
# clock; an unfinished fine-tuning run restarts).
source "$(dirname "$0")/../lib.sh"
REPORT=examples/meta_nmt/report.py
META_LANGS=${META_LANGS:-es,fr,ru,ar}
VALID_LANG=${VALID_LANG:-tl}
TARGET=${TARGET:-it}
STRATEGIES=(${STRATEGIES:-all emb+enc emb})
BEAM=${BEAM:-1}
BETAS="(0.9,0.98)"

if [ "$MODE" = thesis ]; then
  T=${THESIS_DATA:-data/metanmt_thesis}
  C=checkpoints/gu_ch6
  ALL=bg,cs,da,de,el,es,et,fr,hu,it,lt,nl,pl,pt,sk,sl,sv,ru
  S6=es,fr,it,pt,de,ru
  OPT=(--criterion cross_entropy --optimizer adam --adam-betas "$BETAS" --adam-eps 1e-9 --max-tokens 4000)
  JOINT=(--arch ulr_transformer_base --ulr "${OPT[@]}" --lr 3.5e-4 --lr-scheduler inverse_sqrt --warmup-updates 16000
         --validate-interval-updates 1000 --save-interval-updates 1000 --keep-interval-updates 1 --patience 10
         --no-epoch-checkpoints --eval-bleu --eval-bleu-args '{"beam": 1}' --eval-bleu-remove-bpe sentencepiece
         --best-checkpoint-metric bleu --maximize-best-checkpoint-metric)
  FT=(--arch ulr_transformer_base --ulr "${OPT[@]}" --lr 1e-4 --lr-scheduler fixed --max-update 3000 --patience 10
      --no-epoch-checkpoints --no-last-checkpoints)
  GEN=(--task universal_translation --gen-subset test --beam 4 --gnmt-alpha 0.6 "${LEN[@]}" --batch-size 64
       --post-process sentencepiece)
  # thesis_runs D CKPTS VALID SYS "STRATEGIES": the joint phase of SYS validated on VALID, its zero-shot decode
  # and the fine-tunings (5 draws) with its best checkpoint
  thesis_runs() {
    local d=$1 c=$2 v=$3 sys=$4 strategies=$5 task st k o
    if [ "$sys" = meta ]; then
      task=(--task meta_translation --train-subset "train_meta_$v" --meta-langs "$src" --meta-valid-lang "$v"
            --meta-valid-steps 160 --meta-valid-lr 1e-4 --finetune-strategy emb+enc --inner-steps 1
            --inner-optimizer adam --meta-gradient first_order)
    else
      task=(--task universal_translation --train-subset train_multi --lang-temperature 0 --ulr-freeze-delta)
    fi
    o=$c/${sys}_val$v
    thesis $FS/fairseq-train $d/bin_meta "${UD[@]}" "${task[@]}" --valid-subset "valid_$v" "${JOINT[@]}" --save-dir $o
    thesis $FS/fairseq-generate $d/bin_meta "${UD[@]}" "${GEN[@]}" --path $o/checkpoint_best.pt --results-path $o/zero
    for st in $strategies; do
      for k in 1 2 3 4 5; do
        thesis $FS/fairseq-train $d/bin_meta "${UD[@]}" --task ulr_finetune_translation --finetune-from-model \
          $o/checkpoint_best.pt --finetune-strategy "$st" --target-token-budget 16000 --subsample-seed $k "${FT[@]}" \
          --seed $k --save-dir $o/ft_${st}_d$k
        thesis $FS/fairseq-generate $d/bin_meta "${UD[@]}" "${GEN[@]}" --path $o/ft_${st}_d$k/checkpoint_best.pt \
          --results-path $o/ft_${st}_d$k/test
      done
    done
  }
  for src in es es,fr es,fr,it,pt de,ru $S6 $ALL; do
    tag=${src//,/}; [ "$src" != "$ALL" ] || tag=all18
    for tgt in ro lv fi tr ko; do
      vals=$(echo ro,lv | tr , '\n' | grep -vx "$tgt" | paste -sd,)   # both validation tasks but the target
      d=$T/${tag}_$tgt
      echo "# ---- meta-training $src, target $tgt (validation $vals in the folder)"
      thesis $PY -m fairseq_ext.tools.corpora.corpora universal --multi $T/multi.tsv --aux "$src,$vals" --lowres $tgt \
        --lowres-tokens -1 --no-disjoint --lowres-mono 0 --vocab-size 40000 --out $d
      thesis $FS/fairseq-ext-ulr embed --data $d --dim 300
      thesis $FS/fairseq-ext-ulr seed-dict --data $d
      thesis $FS/fairseq-ext-ulr project --data $d --num-universal 20000
      thesis $PY $REPORT splits --data $d --meta-langs "$src" --valid-langs "$vals"
      v=ro; [ $tgt != ro ] || v=lv
      if [ "$src" = $S6 ] && [ $tgt != ko ]; then   # Fig. 6.3: both approaches, every strategy, both validations
        for v in ${vals//,/ }; do
          echo "# Fig. 6.3: $tgt, validation $v"
          for sys in meta multi; do thesis_runs $d $C/${tag}_$tgt $v $sys "all emb+enc emb"; done
        done
      else                                            # Table 6.2: MetaNMT, zero-shot + emb+enc
        echo "# Table 6.2: $tgt, validation $v"
        thesis_runs $d $C/${tag}_$tgt $v meta "emb+enc"
      fi
    done
  done
  exit 0
fi

# ---- settings of the two local modes
for st in "${STRATEGIES[@]}"; do
  case $st in all|emb+enc|emb) ;; *) echo "error: unknown strategy $st (all emb+enc emb)" >&2; exit 2 ;; esac
done
IFS=, read -r -a ML <<< "$META_LANGS"
for l in "${ML[@]}"; do
  if [ "$l" = "$VALID_LANG" ] || [ "$l" = "$TARGET" ]; then
    echo "error: $l is a meta-training language and the validation or target language" >&2; exit 2
  fi
done
[ "$VALID_LANG" != "$TARGET" ] || { echo "error: the validation language is the target ($TARGET)" >&2; exit 2; }

if [ "${DATA:-bible}" = tiny ]; then
  MULTI=tests/data/bible_multi_tiny/multi.tsv
  OUT=$RUNS/gu_ch6_tiny
  DATA_ROOT=$OUT/data
  DATA_ARGS=(--vocab-size 150 --lowres-mono 0)
  POOL_TOKENS=${POOL_TOKENS:-800}
  TARGET_TOKENS=${TARGET_TOKENS:-300}
  DRAWS=(${DRAWS:-1 2})
  ARCH=ulr_transformer_tiny
  JOINT_LIMIT=(--max-update "${UPDATES:-6}")
  VALID_EVERY=${VALID_EVERY:-3}
  META_VALID_STEPS=${META_VALID_STEPS:-2}
  MAX_TOKENS=${MAX_TOKENS:-512}
  WARMUP=${WARMUP:-2}
  FT_UPDATES=${FT_UPDATES:-4}
  FT_VALID_EVERY=${FT_VALID_EVERY:-2}
  FT_PATIENCE=${FT_PATIENCE:-2}
  ULR_ARGS=(--dim 16 --epochs 2 --min-count 1)
  SEED_ARGS=(--min-count 1)
  N_BOOTSTRAP=${N_BOOTSTRAP:-100}
  COST_INTERVAL=${COST_INTERVAL:-2}
  COST_ROUNDS=${COST_ROUNDS:-2}
  LOG_INTERVAL=1
else
  MULTI=data/bible_multi/raw/multi.tsv
  [ -s $MULTI ] || $PY -m fairseq_ext.tools.corpora.corpora multi --out data/bible_multi/raw
  OUT=$RUNS/gu_ch6/${TARGET}_${META_LANGS//,/}_$VALID_LANG
  DATA_ROOT=data/bible_metanmt
  DATA_ARGS=(--vocab-size 4000 --lowres-mono 0)
  POOL_TOKENS=${POOL_TOKENS:-80000}
  TARGET_TOKENS=${TARGET_TOKENS:-16000}
  DRAWS=(${DRAWS:-1 2 3 4 5})
  ARCH=ulr_transformer_bench
  JOINT_LIMIT=(--stop-time-hours "$(echo "${META_BUDGET_MIN:-40} / 60" | bc -l)")
  VALID_EVERY=${VALID_EVERY:-200}
  META_VALID_STEPS=${META_VALID_STEPS:-32}
  MAX_TOKENS=${MAX_TOKENS:-2048}
  WARMUP=${WARMUP:-200}
  FT_UPDATES=${FT_UPDATES:-150}
  FT_VALID_EVERY=${FT_VALID_EVERY:-25}
  FT_PATIENCE=${FT_PATIENCE:-3}
  ULR_ARGS=(--dim 300)
  SEED_ARGS=()
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
  COST_INTERVAL=${COST_INTERVAL:-10}
  COST_ROUNDS=${COST_ROUNDS:-3}
  LOG_INTERVAL=50
fi
LR=${LR:-5e-4}
FT_LR=${FT_LR:-3e-4}
V=$VALID_LANG
D=$DATA_ROOT/${TARGET}_pool${POOL_TOKENS}_${META_LANGS//,/}_$V
B=$D/bin_meta
mkdir -p $OUT
echo "$D" > $OUT/data_dir
printf '{"meta_langs": ["%s"], "valid_lang": "%s", "target": "%s", "pool_tokens": %s, "target_tokens": %s,
 "draws": [%s], "strategies": ["%s"], "arch": "%s", "meta_budget_min": %s, "max_tokens": %s, "lr": %s,
 "ft_lr": %s, "ft_updates": %s, "ft_valid_every": %s, "ft_patience": %s, "beam": %s, "data": "%s"}\n' \
  "${META_LANGS//,/\", \"}" "$V" "$TARGET" "$POOL_TOKENS" "$TARGET_TOKENS" "$(IFS=,; echo "${DRAWS[*]}")" \
  "$(IFS=,; echo "${STRATEGIES[*]}" | sed 's/,/", "/g')" "$ARCH" \
  "$([ "${DATA:-bible}" = tiny ] && echo null || echo "${META_BUDGET_MIN:-40}")" "$MAX_TOKENS" "$LR" "$FT_LR" \
  "$FT_UPDATES" "$FT_VALID_EVERY" "$FT_PATIENCE" "$BEAM" "$D" > $OUT/settings.json

# two_lanes CMD_A CMD_B: two shell commands side by side (single-thread lanes); fails if either fails
two_lanes() {
  local pa pb failed=0
  eval "$1" & pa=$!
  eval "$2" & pb=$!
  wait $pa || failed=1
  wait $pb || failed=1
  return $failed
}

# ---- data: the universal folder (target = the low-resource language), ULR arrays, the MetaNMT splits
$PY -m fairseq_ext.tools.corpora.corpora universal --multi $MULTI --aux "$META_LANGS,$V" --lowres "$TARGET" \
  --lowres-tokens "$POOL_TOKENS" "${DATA_ARGS[@]}" --out $D > $OUT/data.log 2>&1 || { tail -20 $OUT/data.log; exit 1; }
FULL=("${ML[@]}" "$V")                     # the full-size languages; TARGET's pool aligns in no time
NA=$(( ${#FULL[@]} / 3 ))
LANGS_A=$(IFS=,; echo "$TARGET${NA:+,}${FULL[*]:0:$NA}"); LANGS_A=${LANGS_A%,}
LANGS_B=$(IFS=,; echo "${FULL[*]:$NA}")
# (each step and language is skipped while its stamp in $D/ulr is up to date)
echo "ULR: lane A embeddings of every language + seed dictionaries of $LANGS_A; lane B seed dictionaries of $LANGS_B"
two_lanes "{ $FS/fairseq-ext-ulr embed --data $D ${ULR_ARGS[*]} && $FS/fairseq-ext-ulr seed-dict --data $D \
             --langs $LANGS_A ${SEED_ARGS[*]}; } >> $OUT/ulr_a.log 2>&1" \
          "$FS/fairseq-ext-ulr seed-dict --data $D --langs $LANGS_B ${SEED_ARGS[*]} >> $OUT/ulr_b.log 2>&1" \
  || { tail -20 $OUT/ulr_a.log $OUT/ulr_b.log; exit 1; }
$FS/fairseq-ext-ulr project --data $D >> $OUT/ulr.log 2>&1 || { tail -20 $OUT/ulr.log; exit 1; }
$PY $REPORT splits --data $D --meta-langs "$META_LANGS" --valid-langs "$V" >> $OUT/data.log 2>&1 \
  || { tail -20 $OUT/data.log; exit 1; }

# ---- the joint phase: MetaNMT and the multilingual-transfer baseline, side by side
COMMON=(--arch $ARCH --ulr --criterion cross_entropy --optimizer adam --adam-betas "$BETAS" --adam-eps 1e-9 --lr $LR
        --lr-scheduler inverse_sqrt --warmup-updates $WARMUP --max-tokens $MAX_TOKENS --seed 1 --cpu --no-progress-bar
        --log-format simple)
META_TASK=(--task meta_translation --train-subset "train_meta_$V" --valid-subset "valid_$V" --meta-langs "$META_LANGS"
           --meta-valid-lang "$V" --meta-valid-steps $META_VALID_STEPS --meta-valid-lr $FT_LR --finetune-strategy emb+enc
           --inner-steps 1 --inner-optimizer adam --meta-gradient first_order)
MULTI_TASK=(--task universal_translation --train-subset train_multi --valid-subset "valid_$V" --lang-temperature 0
            --ulr-freeze-delta)
task_of() { if [ "$1" = meta ]; then echo "${META_TASK[*]}"; else echo "${MULTI_TASK[*]}"; fi; }

train_joint() {  # SYS (meta | multi) -> OUT/SYS/checkpoint_best.pt
  local s=$1 o=$OUT/$1
  [ -e $o/train.done ] && return 0
  mkdir -p $o
  # shellcheck disable=SC2046
  $FS/fairseq-train $B "${UD[@]}" $(task_of $s) "${COMMON[@]}" --log-interval $LOG_INTERVAL --no-epoch-checkpoints \
    --validate-interval 1000 --save-interval 1000 --validate-interval-updates $VALID_EVERY \
    --save-interval-updates $VALID_EVERY --keep-interval-updates 1 "${JOINT_LIMIT[@]}" --save-dir $o >> $o/train.log 2>&1 \
    || { tail -20 $o/train.log; return 1; }
  [ -s $o/checkpoint_best.pt ] || { echo "error: $o/checkpoint_best.pt is missing (see $o/train.log)" >&2; return 1; }
  touch $o/train.done
}
two_lanes "train_joint meta" "train_joint multi" || { echo "error: the joint phase failed (logs in $OUT)" >&2; exit 1; }

# ---- the cost ratio: rounds of meta / transfer runs back to back (order alternating), seconds per update from
# fairseq's train_wall after the first log interval (examples/meta_nmt/report.py)
if [ "${MEASURE_COST:-1}" = 1 ]; then
  for r in $(seq 1 $COST_ROUNDS); do
    c=$OUT/cost/r$r
    grep -qs "done training" $c/meta.log && grep -qs "done training" $c/multi.log && continue
    mkdir -p $c
    order="meta multi"; (( r % 2 )) || order="multi meta"
    for s in $order; do
      # shellcheck disable=SC2046
      $FS/fairseq-train $B "${UD[@]}" $(task_of $s) "${COMMON[@]}" --log-interval $COST_INTERVAL \
        --max-update $(( 3 * COST_INTERVAL )) --disable-validation --no-save --save-dir $c/$s.ckpt > $c/$s.log 2>&1 \
        || { tail -20 $c/$s.log; exit 1; }
    done
  done
fi

# ---- the target: zero-shot decodes, fine-tunings (strategies x draws), each decoded and scored
decode() {  # CKPT DIR -> DIR/test/generate-test.txt, DIR/score.json
  rm -rf $2/test.tmp
  $FS/fairseq-generate $B "${UD[@]}" --task universal_translation --gen-subset test --path $1 --beam $BEAM "${LEN[@]}" \
    --batch-size 64 --post-process sentencepiece --cpu --seed 1 --results-path $2/test.tmp > $2/test.log 2>&1 \
    || { tail -20 $2/test.log; return 1; }
  rm -rf $2/test && mv $2/test.tmp $2/test
  $PY -m fairseq_ext.tools.evaluation.score score --hyp $2/test/generate-test.txt --ref $D/raw/test.en --json $2/score.json \
    > $2/score.txt || return 1
}
FT_COMMON=(--arch $ARCH --ulr --criterion cross_entropy --optimizer adam --adam-betas "$BETAS" --adam-eps 1e-9
           --lr $FT_LR --lr-scheduler fixed --max-tokens $MAX_TOKENS --max-update $FT_UPDATES --validate-interval 1000
           --save-interval 1000 --validate-interval-updates $FT_VALID_EVERY --save-interval-updates $FT_VALID_EVERY
           --keep-interval-updates 1 --patience $FT_PATIENCE --no-epoch-checkpoints --no-last-checkpoints
           --no-save-optimizer-state --cpu --no-progress-bar --log-format simple --log-interval 10)
run_job() {  # zero:SYS | ft:SYS:STRATEGY:DRAW
  local s st k o
  IFS=: read -r kind s st k <<< "$1"
  if [ $kind = zero ]; then
    o=$OUT/zero/$s
    [ -s $o/score.json ] && return 0
    mkdir -p $o
    decode $OUT/$s/checkpoint_best.pt $o
    return
  fi
  o=$OUT/ft/$s/$st/d$k
  [ -s $o/score.json ] && return 0
  if [ ! -e $o/train.done ]; then
    rm -rf $o && mkdir -p $o
    $FS/fairseq-train $B "${UD[@]}" --task ulr_finetune_translation --finetune-from-model $OUT/$s/checkpoint_best.pt \
      --finetune-strategy $st --target-token-budget $TARGET_TOKENS --subsample-seed $k "${FT_COMMON[@]}" --seed $k \
      --save-dir $o > $o/train.log 2>&1 || { tail -20 $o/train.log; return 1; }
    touch $o/train.done
  fi
  decode $o/checkpoint_best.pt $o && rm -f $o/*.pt
}
run_lane() { local j; for j in "$@"; do run_job "$j" || return 1; done; }
LANE_A=(zero:meta) LANE_B=(zero:multi)
for k in "${DRAWS[@]}"; do
  for st in "${STRATEGIES[@]}"; do LANE_A+=("ft:meta:$st:$k"); LANE_B+=("ft:multi:$st:$k"); done
done
two_lanes "run_lane ${LANE_A[*]}" "run_lane ${LANE_B[*]}" || { echo "error: a target job failed (logs in $OUT)" >&2; exit 1; }

# ---- paired bootstrap per column (zero-shot; each strategy on the concatenation of the draws both systems have)
# compare_columns BASE DIR COLUMN...: MetaNMT - BASE (multi | multi_eq) -> DIR/<column>.{md,json}
compare_columns() {
  local base=$1 dir=$2 col k a b c gm gb
  shift 2
  mkdir -p $dir
  for col in "$@"; do
    gm=() gb=()
    if [ $col = zero ]; then
      gm=($OUT/zero/meta/test/generate-test.txt) gb=($OUT/zero/$base/test/generate-test.txt)
    else
      for k in "${DRAWS[@]}"; do
        a=$OUT/ft/meta/$col/d$k/test/generate-test.txt b=$OUT/ft/$base/$col/d$k/test/generate-test.txt
        if [ -s $a ] && [ -s $b ]; then gm+=($a); gb+=($b); fi
      done
    fi
    [ ${#gm[@]} -gt 0 ] || continue
    c=$dir/$col
    $PY $REPORT concat --ref $D/raw/test.en --out $c/meta.txt --ref-out $c/ref.txt "${gm[@]}" 2> /dev/null
    $PY $REPORT concat --ref $D/raw/test.en --out $c/$base.txt --ref-out $c/ref.txt "${gb[@]}" 2> /dev/null
    $PY -m fairseq_ext.tools.evaluation.score compare --baseline $c/$base.txt --system $c/meta.txt --ref $c/ref.txt \
      --format text --n-bootstrap $N_BOOTSTRAP --json $dir/$col.json > $dir/$col.md 2> $dir/$col.log \
      || { tail -5 $dir/$col.log; return 1; }
  done
}
compare_columns multi $OUT/compare zero "${STRATEGIES[@]}" || exit 1
$PY $REPORT --out $OUT

# ---- EQUAL_UPDATES=1: the transfer baseline again, stopped at the meta run's number of updates (the joint phase
# gives both the same wall-clock, so transfer makes ~2x more updates), then its zero-shot decode and fine-tunings
# (EQ_STRATEGIES, default emb+enc; the same draws) -> OUT/multi_eq, OUT/compare_eq/<column>.md (MetaNMT - it).
# Same seed and flags as `multi`, so its first updates are those of `multi` (its valid losses repeat multi's).
if [ "${EQUAL_UPDATES:-0}" = 1 ]; then
  N_META=$(grep -o "num_updates [0-9]*" $OUT/meta/train.log | tail -1 | cut -d' ' -f2)
  [ -n "$N_META" ] || { echo "error: no update count in $OUT/meta/train.log" >&2; exit 1; }
  JOINT_LIMIT=(--max-update "$N_META")
  echo "equal updates: multi_eq = the transfer baseline stopped at $N_META updates (the meta run's)"
  train_joint multi_eq || exit 1
  EQ_STRATEGIES=(${EQ_STRATEGIES:-emb+enc})
  LANE_A=(zero:multi_eq) LANE_B=()
  for k in "${DRAWS[@]}"; do
    for st in "${EQ_STRATEGIES[@]}"; do
      if [ $(( ${#LANE_A[@]} )) -le $(( ${#LANE_B[@]} )) ]; then LANE_A+=("ft:multi_eq:$st:$k")
      else LANE_B+=("ft:multi_eq:$st:$k"); fi
    done
  done
  two_lanes "run_lane ${LANE_A[*]}" "run_lane ${LANE_B[*]}" || { echo "error: a job failed (logs in $OUT)" >&2; exit 1; }
  compare_columns multi_eq $OUT/compare_eq zero "${EQ_STRATEGIES[@]}" || exit 1
  echo "equal updates: $OUT/compare_eq"
fi

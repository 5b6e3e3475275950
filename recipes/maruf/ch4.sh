#!/usr/bin/env bash
# Maruf thesis ch. 4: selective attention for context-aware NMT (Maruf, Martins & Haffari, NAACL 2019) --
# the document context layer (no residual, LayerNorm after each sub-layer), hierarchical attention (sentence-
# level sparsemax, then word-level softmax "sparse-soft" or sparsemax "sparse-sparse", Eqs. 4.2-4.4), flat
# sentence/word attention (Eq. 4.5), the bias-free context gate (Eqs. 4.6-4.7), integrated into the encoder or
# the decoder (never both), offline or online; the two-stage procedure (stage 2 trains ALL parameters); and the
# baselines: Zhang et al. 2018 (frozen sentence parameters), the HAN encoder and HAN decoder of Miculicich et al.
# 2018 (the 3 previous sentences) and the concatenation "2-to-1" model.
# Spec: specs/003-maruf.md §4, §10.  Code: task `doc_translation` (fairseq_ext/tasks/doc_translation.py, data
# in fairseq_ext/data/documents.py), models `transformer_selattn`, `transformer_zhang2018`, `transformer_han`
# (fairseq_ext/models/selattn_transformer.py, zhang2018_doc_transformer.py, han_transformer.py), evaluation tools `fairseq_ext.tools.evaluation.contrastive` (Bible pronoun
# test, Table 4.4 layout), `fairseq_ext.tools.evaluation.doc_consistency`, `fairseq_ext.tools.evaluation.score meteor`.
#
#   bash recipes/maruf/ch4.sh                # CPU: Bible es->en chapters (budget below)
#   PAIR=fr-en bash recipes/maruf/ch4.sh     # the same on French->English (data/bible_multi/fr-en_web)
#   DATA=tiny bash recipes/maruf/ch4.sh      # the committed tiny slice, the same systems, a few updates (minutes)
#   MODE=thesis bash recipes/maruf/ch4.sh    # print the thesis-setting commands (RUN=1: run them)
#
# ---- Thesis settings (MODE=thesis; binarized data + {split}.ids you provide; GPU assumed) ----------------
# TED (IWSLT17 en-de; talk = document; test tst2016+2017, dev = the other dev/tst sets), News (NC v11;
# news-test2015 dev, news-test2016 test), Europarl v7 (speaker turn = document, > 5 sentences); Moses
# tokenisation + truecasing, joint BPE 30k, separate source/target embeddings (Table 4.1).
# Stage 1: transformer_maruf_base (4+4, 512/2048/8, dropout 0.1, label smoothing 0.1), Adam lr 1e-4,
# ~1000-token batches, early stopping on dev perplexity (patience 10), clip 5.
# Stage 2: every transformer_selattn_* arch (dropout 0.2) warm-started from the stage-1 checkpoint with
# --finetune-from-model (the sentence parameters are copied, the new ones initialised, all trained),
# one document per batch (--doc-batching document), --doc-context-mode offline|online; decoder integration
# needs the stage-1 model's translations of every split as target context (--doc-target-context generated)
# and two-pass decoding at test (--decoding-algorithm doc_bcd --doc-iterations 1). Greedy decoding everywhere.
# Table 4.3's Miculicich et al. (2018) rows: transformer_han_enc (online, the 3 previous source sentences) and
# transformer_han_dec (the 3 previous target sentences: trained on the stage-1 translations, decoded in document
# order reading its own translations, doc_bcd --doc-iterations 1 --bcd-update gauss_seidel), same procedure.
# Table 4.2/4.3: BLEU / METEOR; Table 4.4: ContraPro accuracy by antecedent distance; Table 4.5: parameters
# (Transformer 50M, +Attention 53.7M, +H-Attention 54.2M) and speed.
#
# ---- CPU mode (default; 2 cores, THREADS=1; Bible chapters = documents) ----------------------------------
# Stage 1: the sentence transformer of the bench (transformer_maruf_base_bench = the project's baseline,
# 3+3 d256 PreNorm, 7.58M): STAGE1=path/to/checkpoint, or trained here for STAGE1_MIN (30) minutes.
# Stage 2 (the same UPDATES (600) document batches, two systems side by side; the flags are the configurations
# maruf_<system> of bench_configs: Adam lr 3e-4, inverse-sqrt warm-up 100), each warm-started from
# stage 1:
#   sentence        the sentence model trained on (the same updates: the fair baseline of stage 2)
#   hatt_enc_off    transformer_selattn_enc_hier_sparsesoft_bench, offline context (the whole chapter)
#   hatt_enc_on     transformer_selattn_enc_hier_sparsesoft_bench, online context (earlier verses)
#   zhang_enc       transformer_zhang2018_bench (2 previous verses, sentence parameters frozen)
#   hatt_dec        (in SYSTEMS only when named) transformer_selattn_dec_hier_sparsesoft_bench: the decoder
#                   integration (the context = the other verses' target side: stage 1's greedy translations of
#                   every split, written once to runs/maruf_ch4/PAIR/generated, ~30k verses); decoded with doc_bcd
#                   K = 1 (pass 0 = stage 1)
#   han_enc         (in SYSTEMS only when named) transformer_han_enc_bench: the HAN encoder, online (3 previous verses)
#   han_dec         (in SYSTEMS only when named) transformer_han_dec_bench: the HAN decoder (the 3 previous verses'
#                   stage-1 translations, as hatt_dec); decoded in chapter order reading its own translations
#                   (doc_bcd K = 1 Gauss-Seidel, bench_configs HAN_DEC_GENERATE)
#   concat_warm     (in SYSTEMS only when named) the 2-to-1 concatenation model (the previous verse + <brk>
#                   prepended to the source), warm-started like the others (the <brk> embedding row added)
#   concat          (in SYSTEMS only when named) the same model trained from scratch like stage 1 for as many
#                   updates as the stage-1 checkpoint (CONCAT_UPDATES) and compared with stage 1
# then greedy decoding of test, sacreBLEU + paired bootstrap against `sentence`, the contrastive pronoun
# accuracy (Table 4.4 layout) and the chapter-level consistency -> runs/maruf_ch4/PAIR/results.md (a SYSTEMS
# subset: results.<systems>.md), and the decode-time ratio of each warm-started system against `sentence` (its test
# decoding flags on valid, ROUNDS (3) interleaved rounds of fairseq-generate: recipes/bench/decode_speed.py).
# About 2 x (UPDATES x 2 s) + 10 min on an otherwise idle machine, + ~3 min per system and round for the timing.
source "$(dirname "$0")/../lib.sh"
PY=.venv/bin/python
FS=.venv/bin
UD=(--user-dir fairseq_ext)
PAIR=${PAIR:-es-en}
SRC=${PAIR%-*}
TGT=${PAIR#*-}

if [ "$MODE" = thesis ]; then
  D=${THESIS_DATA:-data/maruf/news_en_de/bin}
  C=checkpoints/maruf_ch4
  T=(--task doc_translation --doc-ids-dir "$(dirname "$D")")
  TRAIN=(--optimizer adam --adam-betas '(0.9,0.98)' --lr 1e-4 --clip-norm 5 --criterion label_smoothed_cross_entropy
         --label-smoothing 0.1 --max-tokens 1000 --max-epoch 35 --patience 10)
  thesis $FS/fairseq-train "$D" "${UD[@]}" "${T[@]}" --arch transformer_maruf_base "${TRAIN[@]}" --save-dir $C/sentence
  for arch in transformer_selattn_enc_sent transformer_selattn_enc_word transformer_selattn_enc_hier_sparsesoft \
      transformer_selattn_enc_hier_sparsesparse; do
    for mode in offline online; do
      thesis $FS/fairseq-train "$D" "${UD[@]}" "${T[@]}" --doc-context-mode $mode --arch $arch "${TRAIN[@]}" \
        --finetune-from-model $C/sentence/checkpoint_best.pt --save-dir $C/$arch.$mode
      thesis $FS/fairseq-generate "$D" "${UD[@]}" "${T[@]}" --doc-context-mode $mode --path $C/$arch.$mode/checkpoint_best.pt \
        --beam 1 --remove-bpe --results-path $C/$arch.$mode
    done
  done
  # decoder integration: the stage-1 translations of every split are the target context
  for split in train valid test; do
    thesis $FS/fairseq-generate "$D" "${UD[@]}" --task doc_translation --doc-ids-dir "$(dirname "$D")" --gen-subset $split \
      --path $C/sentence/checkpoint_best.pt --beam 1 --results-path $C/sentence/gen_$split
    thesis $PY -m fairseq_ext.tools.corpora.doc_context $C/sentence/gen_$split/generate-$split.txt --data "$D" --split $split \
      --out $C/generated
  done
  for arch in transformer_selattn_dec_sent transformer_selattn_dec_word transformer_selattn_dec_hier_sparsesoft \
      transformer_selattn_dec_hier_sparsesparse; do
    thesis $FS/fairseq-train "$D" "${UD[@]}" "${T[@]}" --doc-target-context generated --doc-generated-dir $C/generated \
      --arch $arch "${TRAIN[@]}" --finetune-from-model $C/sentence/checkpoint_best.pt --save-dir $C/$arch
    thesis $FS/fairseq-generate "$D" "${UD[@]}" "${T[@]}" --doc-target-context generated --doc-generated-dir $C/generated \
      --decoding-algorithm doc_bcd --doc-iterations 1 --path $C/$arch/checkpoint_best.pt:$C/sentence/checkpoint_best.pt \
      --remove-bpe --results-path $C/$arch
  done
  thesis $FS/fairseq-train "$D" "${UD[@]}" "${T[@]}" --doc-context-mode online --arch transformer_zhang2018 \
    --ctx-integration encoder "${TRAIN[@]}" --finetune-from-model $C/sentence/checkpoint_best.pt --save-dir $C/zhang
  # Miculicich et al. (2018): HAN encoder, HAN decoder (the decoder decodes in document order on its own translations)
  thesis $FS/fairseq-train "$D" "${UD[@]}" "${T[@]}" --doc-context-mode online --arch transformer_han_enc "${TRAIN[@]}" \
    --finetune-from-model $C/sentence/checkpoint_best.pt --save-dir $C/han_enc
  thesis $FS/fairseq-generate "$D" "${UD[@]}" "${T[@]}" --doc-context-mode online --path $C/han_enc/checkpoint_best.pt \
    --beam 1 --remove-bpe --results-path $C/han_enc
  thesis $FS/fairseq-train "$D" "${UD[@]}" "${T[@]}" --doc-context-mode online --doc-target-context generated \
    --doc-generated-dir $C/generated --arch transformer_han_dec "${TRAIN[@]}" \
    --finetune-from-model $C/sentence/checkpoint_best.pt --save-dir $C/han_dec
  thesis $FS/fairseq-generate "$D" "${UD[@]}" "${T[@]}" --doc-context-mode online --doc-target-context generated \
    --doc-generated-dir $C/generated --decoding-algorithm doc_bcd --doc-iterations 1 --bcd-update gauss_seidel \
    --path $C/han_dec/checkpoint_best.pt --beam 1 --remove-bpe --results-path $C/han_dec
  thesis $FS/fairseq-train "$D" "${UD[@]}" "${T[@]}" --doc-concat-prev 1 --arch transformer_maruf_base "${TRAIN[@]}" \
    --save-dir $C/concat
  exit 0
fi

# ---- CPU mode / DATA=tiny ------------------------------------------------------------------------------------
RUNS=${RUNS:-runs}
if [ "${DATA:-bible}" = tiny ]; then
  # the committed tiny slice (209 training verses in 9 chapters), sentencepiece 300, the bench's models, a few updates
  [ "$PAIR" = es-en ] || { echo "error: DATA=tiny is es-en" >&2; exit 2; }
  OUT=$RUNS/maruf_ch4_tiny
  RAW=tests/data/bible_tiny
  SEG=$OUT/data/seg
  BIN=$OUT/data/bin
  IDS=$RAW
  tiny_slice $OUT
  UPDATES=${UPDATES:-6}
  STAGE1_LIMIT=(--max-update "${STAGE1_UPDATES:-12}")
  ROUNDS=${ROUNDS:-1}
else
  case $PAIR in
    es-en) SEG=data/bible_es_en/spm8000; RAW=$SEG/../raw; [ -s $SEG/bin/dict.es.txt ] || bible_data ;;
    fr-en) SEG=data/bible_multi/fr-en_web/spm8000; RAW=data/bible_multi/raw/fr-en_web
           [ -s $SEG/bin/dict.fr.txt ] || $PY -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_multi --src fr \
             --tgt en_web --method sentencepiece --vocab-size 8000 ; TGT=en_web ;;
    *) echo "error: PAIR must be es-en or fr-en" >&2; exit 2 ;;
  esac
  OUT=$RUNS/maruf_ch4/$PAIR
  BIN=$SEG/bin
  IDS=$SEG
  UPDATES=${UPDATES:-600}
  STAGE1_LIMIT=(--stop-time-hours "$(echo "${STAGE1_MIN:-30} / 60" | bc -l)")
fi
mkdir -p $OUT
T=(--task doc_translation --doc-ids-dir $IDS --source-lang $SRC --target-lang $TGT)
RUN_OPT=(--seed 1 --cpu --no-progress-bar --log-format simple --log-interval 50 --no-epoch-checkpoints)

# stage 1 = the bench's sentence transformer and optimizer, trained from scratch on sentence batches
STAGE1_TRAIN=(--doc-batching size --arch transformer_maruf_base_bench --optimizer adam --adam-betas '(0.9,0.98)'
  --clip-norm 1.0 --lr 3e-3 --lr-scheduler inverse_sqrt --warmup-updates 300 --warmup-init-lr 1e-7
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 2048)
STAGE1=${STAGE1:-$OUT/stage1/checkpoint_best.pt}
if [ ! -s "$STAGE1" ]; then
  $FS/fairseq-train $BIN "${UD[@]}" "${T[@]}" "${STAGE1_TRAIN[@]}" "${RUN_OPT[@]}" \
    "${STAGE1_LIMIT[@]}" --save-dir $OUT/stage1 > $OUT/stage1.log 2>&1 || { tail -20 $OUT/stage1.log; exit 1; }
  STAGE1=$OUT/stage1/checkpoint_best.pt
fi
GREEDY=(--beam 1 "${LEN[@]}" --batch-size 64 --post-process sentencepiece --cpu)

# system NAME -> its stage-2 flags: configuration maruf_NAME of bench_configs (one place for them)
system_flags() {
  $PY -m fairseq_ext.tools.evaluation.bench_configs "maruf_$1"
}
reads_target() {  # the decoder integrations: their context is the other verses' target side
  case $1 in hatt_dec|han_dec) return 0 ;; *) return 1 ;; esac
}
ctx_flags() {  # the task flags a system also needs at decoding time (--doc-context-mode, --doc-concat-prev,
  # the generated target context)
  local f
  case $1 in concat) echo "--doc-concat-prev 1"; return 0 ;; stage1) return 0 ;; esac
  ! reads_target "$1" || echo "${CTX[*]}"
  eval "f=($(system_flags "$1"))"
  for ((k = 0; k < ${#f[@]}; k++)); do
    case ${f[k]} in --doc-context-mode|--doc-concat-prev) echo "${f[k]} ${f[k+1]}" ;; esac
  done
  return 0
}

# concat: the 2-to-1 baseline (Tiedemann & Scherrer 2017), trained from scratch like stage 1 (its source
# dictionary gains <brk>, so it cannot be warm-started) for as many updates as the stage-1 checkpoint made
# (CONCAT_UPDATES), and compared with stage 1 decoded the same way.
run_concat() {
  local updates=${CONCAT_UPDATES:-$($PY -c "import sys, torch, fairseq_ext; print(torch.load(sys.argv[1], weights_only=True)['optimizer_history'][-1]['num_updates'])" "$STAGE1")}
  if ! finished $OUT/concat "$updates"; then
    $FS/fairseq-train $BIN "${UD[@]}" "${T[@]}" "${STAGE1_TRAIN[@]}" --doc-concat-prev 1 "${RUN_OPT[@]}" \
      --max-update "$updates" --save-dir $OUT/concat >> $OUT/concat.log 2>&1 || { tail -20 $OUT/concat.log; return 1; }
    touch $OUT/concat/train.done
  fi
  [ -s $OUT/concat/generate-test.txt ] || $FS/fairseq-generate $BIN "${UD[@]}" "${T[@]}" --doc-concat-prev 1 \
    --path $OUT/concat/checkpoint_last.pt "${GREEDY[@]}" --results-path $OUT/concat > $OUT/concat.generate.log 2>&1 \
    || { tail -20 $OUT/concat.generate.log; return 1; }
  [ -s $OUT/stage1_greedy/generate-test.txt ] || $FS/fairseq-generate $BIN "${UD[@]}" "${T[@]}" --path "$STAGE1" \
    "${GREEDY[@]}" --results-path $OUT/stage1_greedy > $OUT/stage1_greedy.generate.log 2>&1
}

# the checkpoint(s) and decoding flags of a stage-2 system (decoding of test and the decode-time stage)
decode_path() {
  if [ "$1" = hatt_dec ]; then echo "$OUT/$1/checkpoint_last.pt:$STAGE1"; else echo "$OUT/$1/checkpoint_last.pt"; fi
}
decode_flags() {  # two passes for the decoder integration: stage 1's greedy translations, then the document model;
  # the HAN decoder: chapter order, each verse reading its own translations of the previous ones (HAN_DEC_GENERATE)
  case $1 in
    hatt_dec) echo "--decoding-algorithm doc_bcd --doc-iterations 1 --bcd-update jacobi --bcd-init base_model" ;;
    han_dec) echo "--decoding-algorithm doc_bcd --doc-iterations 1 --bcd-update gauss_seidel" ;;
  esac
}

run_system() {
  local name=$1 flags path dec=()
  [ "$name" != concat ] || { run_concat; return; }
  eval "flags=($(system_flags "$name"))"
  ! reads_target "$name" || flags+=("${CTX[@]}")
  if ! finished $OUT/$name "$UPDATES"; then   # a killed run resumes from its last 100-update checkpoint (fairseq prefers
    # checkpoint_last.pt to --finetune-from-model)
    $FS/fairseq-train $BIN "${UD[@]}" "${T[@]}" "${flags[@]}" "${RUN_OPT[@]}" --max-update "$UPDATES" \
      --save-interval-updates 100 --keep-interval-updates 1 --finetune-from-model "$STAGE1" --save-dir $OUT/$name \
      >> $OUT/$name.log 2>&1 || { tail -20 $OUT/$name.log; return 1; }
    touch $OUT/$name/train.done
  fi
  path=$(decode_path "$name")
  read -r -a dec <<< "$(decode_flags "$name")"
  if [ ! -s $OUT/$name/generate-test.txt ]; then
    # shellcheck disable=SC2046
    $FS/fairseq-generate $BIN "${UD[@]}" "${T[@]}" $(ctx_flags "$name") "${dec[@]}" --path "$path" \
      "${GREEDY[@]}" --results-path $OUT/$name > $OUT/$name.generate.log 2>&1 || { tail -20 $OUT/$name.generate.log; return 1; }
  fi
}

SYSTEMS=(${SYSTEMS:-sentence hatt_enc_off hatt_enc_on zhang_enc})

# the target context of the decoder integration: stage 1's greedy translations of every split (the same document
# batches and length limits as doc_bcd's pass 0; dictionary units, no --post-process), once per stage 1
GEN=$OUT/generated
CTX=(--doc-target-context generated --doc-generated-dir $GEN)
if [[ " ${SYSTEMS[*]} " == *" hatt_dec "* || " ${SYSTEMS[*]} " == *" han_dec "* ]]; then
  for split in train valid test; do
    if [ ! -s $GEN/$split.$TGT ]; then
      mkdir -p $OUT/stage1_gen
      $FS/fairseq-generate $BIN "${UD[@]}" "${T[@]}" --gen-subset $split --path "$STAGE1" \
        --decoding-algorithm greedy --beam 1 "${LEN[@]}" --batch-size 128 --cpu \
        > $OUT/stage1_gen/generate-$split.txt 2> $OUT/stage1_gen/generate-$split.log \
        || { tail -20 $OUT/stage1_gen/generate-$split.log; exit 1; }
      $PY -m fairseq_ext.tools.corpora.doc_context $OUT/stage1_gen/generate-$split.txt --data $BIN --split $split --out $GEN \
        || exit 1
    fi
  done
fi
for ((i = 0; i < ${#SYSTEMS[@]}; i += 2)); do   # two single-thread runs side by side
  run_system "${SYSTEMS[i]}" & p1=$!
  if [ -n "${SYSTEMS[i+1]:-}" ]; then run_system "${SYSTEMS[i+1]}" & p2=$!; wait $p2; fi
  wait $p1
done

# ---- decode-time ratio × sentence: ROUNDS (3) interleaved rounds of each warm-started system's test decoding flags
# on valid (recipes/bench/decode_speed.py: fairseq-generate's own decoding time, order rotated per round; ROUNDS=0
# skips it; concat, compared with stage 1, is left out). One report per set of systems, as for the scores.
ROUNDS=${ROUNDS:-3}
DS_SYSTEMS=()
for s in "${SYSTEMS[@]}"; do [ "$s" = concat ] || DS_SYSTEMS+=("$s"); done
DS=$OUT/decode_speed.$(IFS=_; echo "${DS_SYSTEMS[*]}")
if [ "$ROUNDS" -gt 0 ] && [ "${DS_SYSTEMS[0]:-}" = sentence ] && [ ${#DS_SYSTEMS[@]} -gt 1 ] && [ ! -s $DS.json ]; then
  sp_args=()
  for s in "${DS_SYSTEMS[@]}"; do
    sp_args+=(--system "$s=$BIN ${UD[*]} ${T[*]} $(ctx_flags "$s") $(decode_flags "$s") --path $(decode_path "$s") \
${GREEDY[*]} --gen-subset valid")
  done
  decode_speed $DS "${sp_args[@]}"
fi

# ---- scores (SCORE=0: train and decode only; the per-system contrastive / consistency JSONs are kept and
# reused when a later run scores again) -------------------------------------------------------------------
[ "${SCORE:-1}" = 1 ] || exit 0
sys_args=()
for s in "${SYSTEMS[@]}"; do [ "$s" = sentence ] || [ "$s" = concat ] || sys_args+=(--system $OUT/$s/generate-test.txt); done
# one report per set of systems (the default set: results.md; SYSTEMS="a b": results.a_b.md, compare.a_b.json,
# meteor.a_b.json), so that scoring a subset never overwrites an earlier report
TAG=""
[ "${SYSTEMS[*]}" = "sentence hatt_enc_off hatt_enc_on zhang_enc" ] || TAG=.$(IFS=_; echo "${SYSTEMS[*]}")
RES=$OUT/results$TAG.md
: > $RES
[ ${#sys_args[@]} = 0 ] || $PY -m fairseq_ext.tools.evaluation.score compare --baseline $OUT/sentence/generate-test.txt \
  "${sys_args[@]}" --ref $RAW/test.${TGT} --json $OUT/compare$TAG.json | tee -a $RES
SCORED=("${SYSTEMS[@]}")
if [[ " ${SYSTEMS[*]} " == *" concat "* ]]; then  # the concatenation model against stage 1 (same updates)
  $PY -m fairseq_ext.tools.evaluation.score compare --baseline $OUT/stage1_greedy/generate-test.txt \
    --system $OUT/concat/generate-test.txt --ref $RAW/test.${TGT} --json $OUT/compare_concat$TAG.json \
    | tee -a $RES
  SCORED+=(stage1)
fi
hyp_of() { if [ "$1" = stage1 ]; then echo $OUT/stage1_greedy/generate-test.txt; else echo $OUT/$1/generate-test.txt; fi; }
ckpt_of() { if [ "$1" = stage1 ]; then echo "$STAGE1"; else echo $OUT/$1/checkpoint_last.pt; fi; }
hyps=()
for s in "${SCORED[@]}"; do hyps+=(--hyp "$(hyp_of $s)"); done
$PY -m fairseq_ext.tools.evaluation.score meteor "${hyps[@]}" --ref $RAW/test.${TGT} --json $OUT/meteor$TAG.json \
  | tee -a $RES
for s in "${SCORED[@]}"; do  # d-BLEU: BLEU over whole chapters (Bao et al. 2021)
  echo "d-BLEU ($s): $($PY -m fairseq_ext.tools.evaluation.score dbleu --hyp "$(hyp_of $s)" --ref $RAW/test.${TGT} \
    --ids $RAW/test.ids --json $OUT/$s.dbleu$TAG.json)" | tee -a $RES
done

# contrastive pronoun test (Table 4.4 layout; built from the test split; the ambiguous pronouns are Spanish ones,
# so es-en only) and chapter consistency
[ "$PAIR" != es-en ] || [ -s $OUT/contrastive.test.jsonl ] || $PY -m fairseq_ext.tools.evaluation.contrastive build \
  --raw $RAW --split test --src $SRC --ref $TGT --out $OUT/contrastive.test.jsonl \
  --stats-json $OUT/contrastive.stats.json
for s in "${SCORED[@]}"; do
  # shellcheck disable=SC2046
  if [ "$PAIR" = es-en ] && [ ! -s $OUT/$s.contrastive.json ]; then
    $PY -m fairseq_ext.tools.evaluation.contrastive score --set $OUT/contrastive.test.jsonl --spm $SEG/spm.model --name $s \
      --json $OUT/$s.contrastive.json $BIN --path "$(ckpt_of $s)" "${T[@]}" $(ctx_flags "$s") \
      --gen-subset test --cpu | tee -a $RES
  elif [ "$PAIR" = es-en ]; then
    echo "contrastive ($s): $OUT/$s.contrastive.json (kept from an earlier run)" | tee -a $RES
  fi
  if [ ! -s $OUT/$s.consistency.json ]; then
    $PY -m fairseq_ext.tools.evaluation.doc_consistency --raw $RAW --split test --src-lang $SRC --tgt-lang $TGT \
      --hyp "$(hyp_of $s)" --json $OUT/$s.consistency.json | tee -a $RES
  else
    echo "consistency ($s): $OUT/$s.consistency.json (kept from an earlier run)" | tee -a $RES
  fi
done
if [ -s $DS.md ]; then
  printf '\n## Decoding time (valid, %s interleaved rounds, × sentence)\n\n' "$ROUNDS" >> $RES
  tee -a $RES < $DS.md
fi
echo "results: $RES"

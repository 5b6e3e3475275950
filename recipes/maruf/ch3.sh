#!/usr/bin/env bash
# Maruf thesis ch. 3: document NMT as structured prediction with memory networks (Maruf & Haffari, ACL 2018) --
# the sentence RNNSearch (bi-GRU encoder, 2-layer GRU decoder) with a source memory (document bi-GRU over the
# sentence vectors of the other sentences, read by h^j) and/or a target memory (last decoder states of the
# other sentences' current translations, read by s^j + W_at h^j), integrated Memory-to-Context (extra inputs of
# the first decoder layer) or Memory-to-Output (extra logit terms); trained in two stages (stage 1: the sentence
# model; stage 2: every parameter, the target memory built from the stage-1 model's translations) and decoded
# by block coordinate descent (greedy pass 0 with the sentence model, then one greedy pass of the document
# model: the thesis's "two-pass decoding"); baselines S-NMT, PREV TGT, Jean et al. (2017) and
# Wang et al. (2017).
# Spec: specs/003-maruf.md §1.1, §2, §3, §10 items 1-11.  Code: model `docmem` (fairseq_ext/models/docmem.py,
# memory math in fairseq_ext/modules/memnet.py), `docmem_wang2017` (fairseq_ext/models/wang2017_doc_rnn.py, its
# hierarchical summary in fairseq_ext/modules/local_context.py), sentence model `rnnsearch` (fairseq_ext/models/rnnsearch.py),
# warm start --finetune-from-model (fairseq_ext/modules/warm_start.py), task `doc_translation`
# (fairseq_ext/tasks/doc_translation.py, fairseq_ext/data/documents.py), generator doc_bcd
# (fairseq_ext/generators/doc_bcd.py), tools fairseq_ext.tools.corpora.doc_context, fairseq_ext.tools.evaluation.{score,contrastive,doc_consistency}.
#
#   bash recipes/maruf/ch3.sh                # CPU: Bible es->en chapters (budget below)
#   PAIR=fr-en bash recipes/maruf/ch3.sh     # the same on French->English (bible_multi fr -> en_web)
#   DATA=tiny bash recipes/maruf/ch3.sh      # the committed tiny slice, tiny models, a few updates (~3-4 min)
#   MODE=thesis bash recipes/maruf/ch3.sh    # print the thesis-setting commands (RUN=1: run them)
#
# ---- Thesis settings (MODE=thesis; the text you provide, GPU assumed) ------------------------------------
# Corpora (Table 3.1, X->En): TED fr-en (talk = document), Europarl v7 et-en (SPEAKER turn = document), News
# Commentary v9 de-en (news-dev2009 dev; two test sets, news-test2011 = test and news-test2016 = test1).
# THESIS_DATA/<corpus>/raw/{train,valid,test[,test1]}.{src,en,ids}: Moses-tokenised, lowercased, one sentence a
# line, ids `<doc>.<n>` (the document of a line = its id without the last dot-field, lines of a document
# contiguous). Word level, no BPE: fairseq-preprocess --thresholdsrc/--thresholdtgt 5 (words seen < 5 times
# -> <unk>, Cohn et al. 2016).
# Stage 0 (source memory with SRC_MEM=rnnlm, the thesis; SRC_MEM=encoder uses the NMT encoder's sentence
#   vectors instead and skips it): forward and backward RNNLMs = fairseq's stock `language_modeling` +
#   `lstm_lm` (1 layer, 512, our choice: §10.8) on the training source side and on its reversed lines,
#   binarized with --srcdict = the translation source dictionary; frozen in the NMT model.
# Stage 1: S-NMT = rnnsearch_maruf (bi-GRU 512, 2-layer GRU decoder 512, alignment 256; dropout 0.2, §10.7),
#   SGD lr 0.1 halved "after the fourth epoch", 10 epochs. fairseq's `fixed` scheduler gives epoch e (1-based)
#   lr * shrink^(e + 1 - force_anneal) from e = force_anneal on, so --force-anneal 5 --lr-shrink 0.5 is
#   0.1 x4, 0.05, 0.025, ... (§10.41: "after epoch k" = --force-anneal k+1). One stage-1 checkpoint warm-starts
#   every stage-2 model (docmem_* --zero-memory is the same sentence model bit for bit, but its checkpoint
#   warm-starts only its own arch).
#   Its greedy translations of train/valid/test -> --doc-generated-dir (python -m fairseq_ext.tools.corpora.doc_context).
# Stage 2: every docmem_{m2c,m2o}_{src,tgt,both} warm-started from stage 1 (--finetune-from-model: the sentence
#   tensors copied, the memory ones initialised, all trained), SGD lr 0.08, x0.9 after the first epoch
#   (--force-anneal 2 --lr-shrink 0.9), 15 epochs, best = minimum dev loss; dropout 0.2 (one memory) or 0.5
#   with 0.2 on the document RNN (both memories); target memory from the generated context
#   (--doc-target-context generated); whole documents per batch (--doc-batching document, ~2000 tokens).
# Baselines (footnote 10, same procedure): ctx_prevtgt_rnn (PREV TGT, Table 3.6), ctx_jean2017_rnn (Jean et al.
#   2017), docmem_wang2017 (Wang et al. 2017, Table 3.4: a hierarchical RNN over the 3 previous source sentences,
#   its summary an auxiliary input of the first decoder layer; source context only).
# Decoding: greedy everywhere; doc_bcd --doc-iterations 1 (Jacobi, pass 0 = the stage-1 model via
#   --path DOC.pt:SENT.pt). Scores: BLEU on the tokenised lowercased text, <unk> counted as a token (score
#   compare --tokenised: paired bootstrap vs S-NMT), METEOR (score meteor: exact + stem, not METEOR 1.5).
# Not reproduced exactly: mantis/DyNet sums the loss over a mini-batch, fairseq averages it over the tokens,
#   so "SGD lr 0.1" is not the same step size here; mini-batch sizes are not given (§10.6).
#
# ---- CPU mode (default; 2 cores, THREADS=1; Bible chapters = documents) ----------------------------------
# data/bible_es_en/spm8000 (sentencepiece 8k, joined vocabulary; bible_data of recipes/lib.sh), es->en.
# Stage 1: STAGE1=path/to/checkpoint (an rnnsearch_bench checkpoint, e.g. runs/gu_ch2/rnnsearch/checkpoint_best.pt
#   of the bench), or rnnsearch_bench trained here for BUDGET_MIN (30) minutes (the bench's RNNSEARCH_OPTIM:
#   Adam 1e-3, clip 1, 2048 tokens, cross-entropy; OPTIM=sgd: the thesis's SGD schedule).
# Its greedy translations of train/valid/test -> runs/maruf_ch3/es-en/generated (the target context).
# Stage 2 (UPDATES (600) document batches of <= 2048 padded tokens, the same optimizer (Adam 1e-3 or, OPTIM=sgd,
#   SGD 0.08 --force-anneal 2 --lr-shrink 0.9), two single-thread systems side by side), warm-started from stage 1:
#   sentence   rnnsearch_bench continued on the same document batches (the fair baseline of stage 2)
#   m2c_both   docmem_m2c_both_bench: both memories, Memory-to-Context, generated target context
#   prev_tgt   ctx_prevtgt_rnn_bench: PREV TGT, generated target context
#   (SYSTEMS may also name m2c_src, m2c_tgt, m2o_src, m2o_tgt, m2o_both, jean2017, and wang2017:
#   docmem_wang2017_bench, Wang et al. 2017, the 3 previous verses, source context only)
# Decoding of test: doc_bcd K=1 (pass 0 = stage 1, Jacobi) for the document systems, greedy for `sentence`;
# sacreBLEU + paired bootstrap against `sentence`, METEOR, the contrastive pronoun accuracy (Table 4.4 layout;
# target-context models read the stage-1 translations) and the chapter-level consistency
# -> runs/maruf_ch3/es-en/results.md; the decode-time ratio of each system against `sentence` (the same decoding
# flags on valid, ROUNDS (3) interleaved rounds of fairseq-generate: recipes/bench/decode_speed.py, ~10 min).
# CPU budget (THREADS=1; measured here on one thread next to two busy cores: rnnsearch_bench trains at ~300-350
# target tokens/s, docmem_m2c_both_bench at ~200, greedy decoding of a weak stage-1 model ~1,500 tokens/s):
# stage 1 BUDGET_MIN (30 min, ~350 updates of ~1,700 target tokens, ~0.6 epoch; STAGE1_UPDATES=N: N updates
# instead) unless STAGE1 is given; its translation of the 28,717 training verses (+ valid, test) ~15-20 min;
# stage 2: a document batch of 2048 padded tokens holds ~660 target tokens (1,174 batches an epoch: 600 updates
# ~ half an epoch), ~2.2 s/update for `sentence`, ~3.6 s for m2c_both and about as much for prev_tgt (both
# also teacher-force the context translations): ~40 min for the first pair side by side, ~35 min for prev_tgt;
# decoding, contrastive scoring and the consistency aligner ~20 min. About 2-2.5 h in all. These are weak models
# (BLEU of a few points): read the differences with their bootstrap p-values.
STAGE1_MIN=${BUDGET_MIN:-30}
source "$(dirname "$0")/../lib.sh"
PY=.venv/bin/python
FS=.venv/bin
UD=(--user-dir fairseq_ext)
RUNS=${RUNS:-runs}
OPTIM=${OPTIM:-adam}

if [ "$MODE" = thesis ]; then
  ROOTD=${THESIS_DATA:-data/maruf}
  SRC_MEM=${SRC_MEM:-rnnlm}
  SGD=(--optimizer sgd --clip-norm 5 --lr-scheduler fixed --criterion cross_entropy --max-tokens 2000)
  STAGE1_OPT=(--lr 0.1 --force-anneal 5 --lr-shrink 0.5 --max-epoch 10)
  STAGE2_OPT=(--lr 0.08 --force-anneal 2 --lr-shrink 0.9 --max-epoch 15)
  REVERSE='import sys; open(sys.argv[2], "w").writelines(" ".join(l.split()[::-1]) + "\n" for l in open(sys.argv[1]))'
  for corpus in ${CORPORA:-ted_fr-en europarl_et-en nc_de-en}; do
    name=${corpus%_*} pair=${corpus#*_}
    S=${pair%-*} T=${pair#*-}
    R=$ROOTD/${name}_$S-$T/raw
    D=$ROOTD/${name}_$S-$T/bin
    C=checkpoints/maruf_ch3/$name
    TESTS=(test); [ "$name" != nc ] || TESTS=(test test1)   # NC: news-test2011, news-test2016
    echo "# ---- $name $S-$T"
    testpref=$R/test; [ "$name" != nc ] || testpref=$R/test,$R/test1
    thesis $FS/fairseq-preprocess --source-lang "$S" --target-lang "$T" --trainpref $R/train --validpref $R/valid \
      --testpref $testpref --thresholdsrc 5 --thresholdtgt 5 --destdir "$D" --workers 8
    T0=(--task doc_translation --doc-ids-dir "$R" --doc-max-context 1000)   # the whole document is the context
    LMS=""
    if [ "$SRC_MEM" = rnnlm ]; then  # stage 0: the two source RNNLMs of the source memory
      thesis mkdir -p $C/lm_data
      for split in train valid; do
        thesis $PY -c "$REVERSE" $R/$split.$S $C/lm_data/$split.rev.$S
      done
      thesis $FS/fairseq-preprocess --only-source --srcdict "$D/dict.$S.txt" --trainpref $R/train.$S \
        --validpref $R/valid.$S --destdir $C/lm_data/fwd --workers 8
      thesis $FS/fairseq-preprocess --only-source --srcdict "$D/dict.$S.txt" --trainpref $C/lm_data/train.rev.$S \
        --validpref $C/lm_data/valid.rev.$S --destdir $C/lm_data/bwd --workers 8
      for dir in fwd bwd; do
        thesis $FS/fairseq-train $C/lm_data/$dir --task language_modeling --sample-break-mode eos --arch lstm_lm \
          --decoder-embed-dim 512 --decoder-hidden-size 512 --decoder-out-embed-dim 512 --decoder-layers 1 \
          --dropout 0.2 --optimizer sgd --lr 1.0 --clip-norm 5 --lr-scheduler fixed --force-anneal 5 \
          --lr-shrink 0.5 --max-epoch 10 --criterion cross_entropy --max-tokens 4000 --save-dir $C/lm_$dir
      done
      LMS="--src-mem-encoder rnnlm --src-mem-lm $C/lm_fwd/checkpoint_best.pt,$C/lm_bwd/checkpoint_best.pt"
    fi
    # stage 1: S-NMT (the base model of Table 3.2 and of pass 0)
    thesis $FS/fairseq-train "$D" "${UD[@]}" "${T0[@]}" --doc-batching size --arch rnnsearch_maruf --dropout 0.2 \
      "${SGD[@]}" "${STAGE1_OPT[@]}" --save-dir $C/s_nmt
    SENT=$C/s_nmt/checkpoint_best.pt
    for split in train valid "${TESTS[@]}"; do   # its translations: the target memory of training and dev
      thesis $FS/fairseq-generate "$D" "${UD[@]}" "${T0[@]}" --gen-subset $split --path $SENT \
        --decoding-algorithm greedy --beam 1 "${LEN[@]}" --batch-size 128 --results-path $C/s_nmt/gen_$split
      thesis $PY -m fairseq_ext.tools.corpora.doc_context $C/s_nmt/gen_$split/generate-$split.txt --data "$D" --split $split \
        --out $C/generated
    done
    # stage 2: the memory models and the baselines, all warm-started from S-NMT
    GEN=(--doc-target-context generated --doc-generated-dir $C/generated)
    models=()
    for integration in m2c m2o; do
      for memories in src tgt both; do
        arch=docmem_${integration}_$memories
        flags=(--arch $arch)
        if [ $memories = both ]; then flags+=(--dropout 0.5 --doc-rnn-dropout 0.2); else flags+=(--dropout 0.2); fi
        # shellcheck disable=SC2206
        [ $memories = tgt ] || flags+=($LMS)
        [ $memories = src ] || flags+=("${GEN[@]}")
        thesis $FS/fairseq-train "$D" "${UD[@]}" "${T0[@]}" "${flags[@]}" "${SGD[@]}" "${STAGE2_OPT[@]}" \
          --finetune-from-model $SENT --save-dir $C/$arch
        models+=($arch)
      done
    done
    thesis $FS/fairseq-train "$D" "${UD[@]}" "${T0[@]}" --arch ctx_prevtgt_rnn --dropout 0.2 "${GEN[@]}" "${SGD[@]}" \
      "${STAGE2_OPT[@]}" --finetune-from-model $SENT --save-dir $C/ctx_prevtgt_rnn
    thesis $FS/fairseq-train "$D" "${UD[@]}" "${T0[@]}" --arch ctx_jean2017_rnn --dropout 0.2 "${SGD[@]}" \
      "${STAGE2_OPT[@]}" --finetune-from-model $SENT --save-dir $C/ctx_jean2017_rnn
    thesis $FS/fairseq-train "$D" "${UD[@]}" "${T0[@]}" --arch docmem_wang2017 --dropout 0.2 "${SGD[@]}" \
      "${STAGE2_OPT[@]}" --finetune-from-model $SENT --save-dir $C/docmem_wang2017
    models+=(ctx_prevtgt_rnn ctx_jean2017_rnn docmem_wang2017)
    # two-pass decoding (pass 0 = S-NMT, one Jacobi pass of the document model; the source-only models, Jean et
    # al. and Wang et al. read no target context and are decoded once) and the scores, per test set
    for split in "${TESTS[@]}"; do
      systems=()
      for m in "${models[@]}"; do
        thesis $FS/fairseq-generate "$D" "${UD[@]}" "${T0[@]}" --gen-subset $split --decoding-algorithm doc_bcd \
          --doc-iterations 1 --bcd-update jacobi --bcd-init base_model --path $C/$m/checkpoint_best.pt:$SENT \
          --beam 1 "${LEN[@]}" --results-path $C/$m/gen_$split
        systems+=(--system $C/$m/gen_$split/generate-$split.txt)
      done
      thesis $PY -m fairseq_ext.tools.evaluation.score compare --tokenised --baseline $C/s_nmt/gen_$split/generate-$split.txt \
        "${systems[@]}" --ref $R/$split.$T --json $C/bleu_$split.json
      for m in s_nmt "${models[@]}"; do
        thesis $PY -m fairseq_ext.tools.evaluation.score meteor --tokenised --hyp $C/$m/gen_$split/generate-$split.txt \
          --ref $R/$split.$T --json $C/$m/meteor_$split.json
      done
    done
  done
  exit 0
fi

# ---- CPU mode / DATA=tiny ------------------------------------------------------------------------------------
SRC=es
TGT=en
if [ "${DATA:-bible}" = tiny ]; then
  # the committed tiny slice (209 training verses in 9 chapters), sentencepiece 300, tiny models, a few updates
  OUT=$RUNS/maruf_ch3_tiny
  RAW=tests/data/bible_tiny
  SEG=$OUT/data/seg
  BIN=$OUT/data/bin
  tiny_slice $OUT
  # rnnsearch_tiny with docmem_tiny's decoder (2-layer plain GRU): the sentence model of docmem_tiny
  SENT_FLAGS="--arch rnnsearch_tiny --decoder-layers 2 --decoder-variant plain"
  DOC_ARCH=docmem_tiny
  # Wang et al. at that size (its preset's attention MLP and document-RNN dropout set to the sentence model's)
  WANG_ARCH="docmem_wang2017 --encoder-embed-dim 16 --encoder-hidden-size 16 --attention-dim 16 --dropout 0.0 \
--doc-rnn-dropout 0.0"
  UPDATES=${UPDATES:-6}
  STAGE1_LIMIT=(--max-update "${STAGE1_UPDATES:-12}")
  BATCH=(--max-tokens 1024)
  N_BOOTSTRAP=${N_BOOTSTRAP:-100}
  ROUNDS=${ROUNDS:-1}
else
  PAIR=${PAIR:-es-en}
  case $PAIR in
    es-en) SEG=data/bible_es_en/spm8000; RAW=$SEG/../raw; [ -s $SEG/bin/dict.es.txt ] || bible_data ;;
    fr-en) SEG=data/bible_multi/fr-en_web/spm8000; RAW=data/bible_multi/raw/fr-en_web; SRC=fr; TGT=en_web
           [ -s $SEG/bin/dict.fr.txt ] || $PY -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_multi --src fr \
             --tgt en_web --method sentencepiece --vocab-size 8000 ;;
    *) echo "error: PAIR must be es-en or fr-en" >&2; exit 2 ;;
  esac
  OUT=$RUNS/maruf_ch3/$PAIR
  BIN=$SEG/bin
  SENT_FLAGS="--arch rnnsearch_bench"
  DOC_ARCH=""
  WANG_ARCH=docmem_wang2017_bench
  UPDATES=${UPDATES:-600}
  if [ -n "${STAGE1_UPDATES:-}" ]; then STAGE1_LIMIT=(--max-update "$STAGE1_UPDATES")   # an update budget, which
  else STAGE1_LIMIT=(--stop-time-hours "$(echo "$STAGE1_MIN / 60" | bc -l)"); fi       # load cannot bias
  BATCH=(--max-tokens 2048)
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
  ROUNDS=${ROUNDS:-3}
fi
mkdir -p $OUT
T=(--task doc_translation --doc-ids-dir $RAW --source-lang $SRC --target-lang $TGT)
COMMON=(--criterion cross_entropy "${BATCH[@]}" --seed 1 --cpu --no-progress-bar --log-format simple
        --log-interval 50 --no-epoch-checkpoints)
case $OPTIM in  # stage 1 / stage 2 optimizer
  adam) OPT1=(--optimizer adam --adam-betas '(0.9,0.98)' --lr 1e-3 --clip-norm 1.0)   # the bench's RNNSEARCH_OPTIM
        OPT2=("${OPT1[@]}") ;;
  sgd)  OPT1=(--optimizer sgd --lr 0.1 --clip-norm 5 --lr-scheduler fixed --force-anneal 5 --lr-shrink 0.5)
        OPT2=(--optimizer sgd --lr 0.08 --clip-norm 5 --lr-scheduler fixed --force-anneal 2 --lr-shrink 0.9) ;;
  *) echo "error: OPTIM must be adam or sgd" >&2; exit 2 ;;
esac

# ---- stage 1: the sentence model, and its greedy translations of every split (the generated target context)
STAGE1=${STAGE1:-$OUT/stage1/checkpoint_best.pt}
if [ ! -s "$STAGE1" ]; then
  # shellcheck disable=SC2086
  $FS/fairseq-train $BIN "${UD[@]}" "${T[@]}" --doc-batching size $SENT_FLAGS "${OPT1[@]}" "${COMMON[@]}" \
    "${STAGE1_LIMIT[@]}" --save-dir $OUT/stage1 > $OUT/stage1.log 2>&1 || { tail -20 $OUT/stage1.log; exit 1; }
  STAGE1=$OUT/stage1/checkpoint_best.pt
fi
GEN=$OUT/generated
for split in train valid test; do
  if [ ! -s $GEN/$split.$TGT ]; then
    mkdir -p $OUT/stage1_gen
    # greedy exactly as doc_bcd's pass 0: same generator, same document batches (fairseq's length limit
    # a * (longest source of the batch) + b is per batch), no --post-process (dictionary units)
    $FS/fairseq-generate $BIN "${UD[@]}" "${T[@]}" --gen-subset $split --path "$STAGE1" \
      --decoding-algorithm greedy --beam 1 "${LEN[@]}" --batch-size 128 --cpu \
      > $OUT/stage1_gen/generate-$split.txt 2> $OUT/stage1_gen/generate-$split.log \
      || { tail -20 $OUT/stage1_gen/generate-$split.log; exit 1; }
    $PY -m fairseq_ext.tools.corpora.doc_context $OUT/stage1_gen/generate-$split.txt --data $BIN --split $split --out $GEN
  fi
done
CTX=(--doc-target-context generated --doc-generated-dir $GEN)

# ---- stage 2
# system NAME -> the flags of its stage-2 run
system_flags() {
  local arch
  case $1 in
    sentence) echo "$SENT_FLAGS"; return ;;
    m2c_src|m2c_tgt|m2c_both|m2o_src|m2o_tgt|m2o_both)
      if [ -n "$DOC_ARCH" ]; then arch="$DOC_ARCH --memory-integration ${1%_*} --doc-memories ${1#*_}"
      else arch=docmem_$1_bench; fi ;;
    prev_tgt) arch=${DOC_ARCH:+$DOC_ARCH --doc-context prev_tgt}; arch=${arch:-ctx_prevtgt_rnn_bench} ;;
    jean2017) arch=${DOC_ARCH:+$DOC_ARCH --doc-context jean2017}; arch=${arch:-ctx_jean2017_rnn_bench} ;;
    wang2017) arch=$WANG_ARCH ;;
    *) echo "error: unknown system $1" >&2; return 2 ;;
  esac
  echo "--arch $arch $(ctx_flags "$1")"
}
ctx_flags() {  # the task flags a system needs (training and decoding): the generated target context
  case $1 in
    m2c_tgt|m2c_both|m2o_tgt|m2o_both|prev_tgt) echo "${CTX[*]}" ;;
    *) echo "" ;;
  esac
}
decode_flags() {  # document models: two-pass decoding, pass 0 = the stage-1 model (a model without target
  # context is decoded once); the sentence model: greedy. (Not `--decoding-algorithm greedy` for a document
  # model: that generator gives the model src_tokens only, i.e. empty memories.)
  case $1 in
    sentence) echo "--decoding-algorithm greedy" ;;
    *) echo "--decoding-algorithm doc_bcd --doc-iterations 1 --bcd-update jacobi --bcd-init base_model" ;;
  esac
}
run_system() {
  local name=$1 flags path
  flags=$(system_flags "$name") || return 2
  if ! finished $OUT/$name "$UPDATES"; then
    # shellcheck disable=SC2086
    $FS/fairseq-train $BIN "${UD[@]}" "${T[@]}" $flags "${OPT2[@]}" "${COMMON[@]}" --max-update "$UPDATES" \
      --finetune-from-model "$STAGE1" --save-dir $OUT/$name >> $OUT/$name.log 2>&1 || { tail -20 $OUT/$name.log; return 1; }
    touch $OUT/$name/train.done
  fi
  path=$OUT/$name/checkpoint_last.pt
  [ "$name" = sentence ] || path=$path:$STAGE1
  if [ ! -s $OUT/$name/generate-test.txt ]; then
    # shellcheck disable=SC2046
    $FS/fairseq-generate $BIN "${UD[@]}" "${T[@]}" $(decode_flags "$name") --path "$path" --beam 1 "${LEN[@]}" \
      --batch-size 64 --post-process sentencepiece --cpu --results-path $OUT/$name \
      > $OUT/$name.generate.log 2>&1 || { tail -20 $OUT/$name.generate.log; return 1; }
  fi
}

SYSTEMS=(${SYSTEMS:-sentence m2c_both prev_tgt})
for s in "${SYSTEMS[@]}"; do system_flags "$s" > /dev/null || exit 2; done
for ((i = 0; i < ${#SYSTEMS[@]}; i += 2)); do   # two single-thread runs side by side
  run_system "${SYSTEMS[i]}" & p1=$!
  if [ -n "${SYSTEMS[i+1]:-}" ]; then run_system "${SYSTEMS[i+1]}" & p2=$!; wait $p2; fi
  wait $p1
done

# ---- decode-time ratio × sentence: ROUNDS interleaved rounds of each system's test decoding (the same flags) on
# valid (recipes/bench/decode_speed.py: fairseq-generate's own decoding time, order rotated per round)
if [ ! -s $OUT/decode_speed.json ] && [ ${#SYSTEMS[@]} -gt 1 ]; then
  sp_args=()
  for s in "${SYSTEMS[@]}"; do
    path=$OUT/$s/checkpoint_last.pt
    [ "$s" = sentence ] || path=$path:$STAGE1
    sp_args+=(--system "$s=$BIN ${UD[*]} ${T[*]} $(ctx_flags "$s") $(decode_flags "$s") --path $path --beam 1 ${LEN[*]} \
--batch-size 64 --gen-subset valid --cpu")
  done
  decode_speed $OUT/decode_speed "${sp_args[@]}"
fi

# ---- scores --------------------------------------------------------------------------------------------------
RES=$OUT/results.md
{
  echo "# Maruf ch. 3 on $BIN ($SRC->$TGT, test; stage 1 $STAGE1, stage 2 $UPDATES updates, OPTIM=$OPTIM)"
  echo
  echo '## BLEU / chrF, paired bootstrap against `sentence`'
  echo '```'
} > $RES
sys_args=()
for s in "${SYSTEMS[@]}"; do [ "$s" = sentence ] || sys_args+=(--system $OUT/$s/generate-test.txt); done
$PY -m fairseq_ext.tools.evaluation.score compare --baseline $OUT/sentence/generate-test.txt "${sys_args[@]}" \
  --ref $RAW/test.$TGT --n-bootstrap "$N_BOOTSTRAP" --json $OUT/compare.json | tee -a $RES
printf '```\n\n## METEOR (exact + stem)\n\n' >> $RES
for s in "${SYSTEMS[@]}"; do
  m=$($PY -m fairseq_ext.tools.evaluation.score meteor --hyp $OUT/$s/generate-test.txt --ref $RAW/test.$TGT \
    --json $OUT/$s.meteor.json)
  echo "$s: $m" | tee -a $RES
done
printf '\n## d-BLEU (whole chapters; Bao et al. 2021)\n\n' >> $RES
for s in "${SYSTEMS[@]}"; do
  d=$($PY -m fairseq_ext.tools.evaluation.score dbleu --hyp $OUT/$s/generate-test.txt --ref $RAW/test.$TGT --ids $RAW/test.ids \
    --json $OUT/$s.dbleu.json)
  echo "$s: $d" | tee -a $RES
done

# contrastive pronoun test (Table 4.4 layout, built from the test split; target-memory models read the stage-1
# translations of the test chapters) and chapter consistency
printf '\n## Contrastive pronouns\n\n' >> $RES
[ "$SRC" != es ] || [ -s $OUT/contrastive.test.jsonl ] || $PY -m fairseq_ext.tools.evaluation.contrastive build --raw $RAW --split test \
  --src $SRC --ref $TGT --out $OUT/contrastive.test.jsonl --stats-json $OUT/contrastive.stats.json
if [ -s $OUT/contrastive.test.jsonl ]; then
  for s in "${SYSTEMS[@]}"; do
    # shellcheck disable=SC2046
    $PY -m fairseq_ext.tools.evaluation.contrastive score --set $OUT/contrastive.test.jsonl --spm $SEG/spm.model --name $s \
      --json $OUT/$s.contrastive.json $BIN --path $OUT/$s/checkpoint_last.pt "${T[@]}" $(ctx_flags "$s") \
      --gen-subset test --cpu | tee -a $RES
  done
else
  echo "(no contrastive instance in this test set)" | tee -a $RES
fi
printf '\n## Chapter consistency\n\n' >> $RES
for s in "${SYSTEMS[@]}"; do
  echo "### $s" >> $RES
  $PY -m fairseq_ext.tools.evaluation.doc_consistency --raw $RAW --split test --src-lang $SRC --tgt-lang $TGT \
    --hyp $OUT/$s/generate-test.txt --json $OUT/$s.consistency.json | tee -a $RES
done
printf '\n## Decoding time (valid, %s interleaved rounds, × sentence)\n\n' "$ROUNDS" >> $RES
[ ! -s $OUT/decode_speed.md ] || cat $OUT/decode_speed.md | tee -a $RES
echo "results: $RES"

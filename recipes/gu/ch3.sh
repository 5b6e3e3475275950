#!/usr/bin/env bash
# Gu thesis ch. 3: CopyNet (Gu, Lu, Li, Li, ACL 2016) -- generate and copy modes under one normaliser
# (Eqs. 3.1-3.5, tanh copy scores), the per-sentence extended vocabulary for source OOVs, the selective read
# (Eq. 3.6) and the marginal likelihood -- against the Enc-Dec and RNNSearch baselines of ch. 2.
# Spec: specs/004a-gu-data-efficient.md §3.  Code: model `copynet` (fairseq_ext/models/copynet.py), criterion
# `copynet_cross_entropy`, task `copy_translation` (reads the raw text next to the binarized data for the OOV
# words: --copy-raw-dir; every --decoding-algorithm of translation_decoding works), heatmap tool
# `python -m fairseq_ext.tools.analysis.copy_heatmap` (Fig. 3.3: PNG + TSV of per-step copy vs generate probability).
#
#   bash recipes/gu/ch3.sh                  # CPU: synthetic rules at --scale 0.1, then Bible KJV -> WEB (budget below)
#   PARTS=synthetic bash recipes/gu/ch3.sh  # only the synthetic part (PARTS=bible: only the Bible part;
#                                           # PARTS=es-en: CopyNet vs RNNSearch on the es->en bench data)
#   MODE=thesis bash recipes/gu/ch3.sh      # print the thesis-setting commands (RUN=1: run them)
#
# ---- Thesis settings (MODE=thesis; GPU assumed) -----------------------------------------------------------
# Archs: encdec_copynet_syn / rnnsearch_copynet_syn / copynet_syn (bi-GRU encoder, GRU decoder, emb 150, hidden
# 300, Table 3.2 and 3.5) and copynet_lcsts (emb 350, hidden 500, Table 3.4). Training: plain MLE (cross_entropy
# for the baselines, copynet_cross_entropy = the marginal likelihood for CopyNet), Adam 1e-3, batch 20 sentences
# (REF-CODE), clip 1.0, early stopping on valid (patience 5); the thesis gives no optimiser details. Test: beam 10.
#   Table 3.2  synthetic rules (200 rules x 100 train / 100 test, vocab 1,000): exact-match accuracy per rule type,
#              `synthetic_rules accuracy`. Thesis: Enc-Dec 100/3.3/1.5/2.9/0.0, RNNSearch 99.0/69.4/22.3/40.7/2.6,
#              CopyNet 97.3/93.7/98.3/68.2/77.5 (x->0, x->x, x->xx, xy->x, xy->xy).
#   Table 3.4  LCSTS (licence: bring your own; LCSTS_RAW = {train,valid,test}.{src,tgt}, characters (+C, vocab 3,000)
#              or jieba words (+W, vocab 10,000), space-separated): ROUGE-1/2/L (not in this package: score the
#              H- lines with `rouge-score` over the space-separated tokens). Thesis CopyNet +C 34.4/21.6/31.3,
#              +W 35.0/22.3/32.0.
#   Table 3.5  dialogue DS-I / DS-II (6,500 train / 1,500 test, characters): top-1 / top-10 exact match from
#              beam 10 (`dialogue_patterns accuracy --topk 1 10`). Thesis RNNSearch 44.1/57.7 13.5/15.9,
#              CopyNet 61.2/71.0 50.5/64.8.
#   Fig. 3.3   copy_heatmap on a synthetic test sentence.
#
# ---- CPU mode (default; 2 cores, THREADS=1) ----------------------------------------------------------------
# 1. synthetic rules at --scale 0.1 (20 rules, 200 train / 200 test / 100 valid sentences): Enc-Dec, RNNSearch
#    and CopyNet at the thesis sizes (150/300), 60 epochs each (~5 min each), beam 10, Table 3.2 accuracy
#    -> runs/gu_ch3/synthetic/accuracy.md, and the Fig. 3.3 heatmap of test sentence 0 -> heatmap.png/.tsv.
# 2. Bible KJV -> WEB (the KJV reference of data/bible_es_en/raw as the source, WEB English as the target), word
#    level with a 10k-word joined vocabulary, so rare names are true OOVs that only copying can produce:
#    RNNSearch (rnnsearch_bench) vs CopyNet (copynet_bench, the same sizes), BUDGET_MIN (15) minutes each, side by side,
#    beam 5, sacreBLEU + paired bootstrap (CopyNet vs RNNSearch), recall of the reference OOV words (`score oov`) -> runs/gu_ch3/bible/. About BUDGET_MIN + 10 min in all.
USER_BUDGET=${BUDGET_MIN:-}
source "$(dirname "$0")/../lib.sh"
PY=.venv/bin/python
FS=.venv/bin
PARTS=${PARTS:-synthetic bible}
UD=(--user-dir fairseq_ext)
OPT=(--optimizer adam --lr 0.001 --clip-norm 1.0 --seed 1 --no-progress-bar --log-format simple --log-interval 50)

# binarize RAW BIN: fairseq-preprocess of RAW/{train,valid,test}.{src,tgt} with one joined dictionary (EXTRA args)
binarize() {
  local raw=$1 bin=$2
  shift 2
  [ -s "$bin/dict.src.txt" ] || $FS/fairseq-preprocess --source-lang src --target-lang tgt --trainpref "$raw/train" \
    --validpref "$raw/valid" --testpref "$raw/test" --destdir "$bin" --joined-dictionary --workers 1 "$@"
}

if [ "$MODE" = thesis ]; then
  D=${THESIS_DIR:-data/gu_ch3}
  C=checkpoints/gu_ch3
  TRAIN=(--batch-size 20 --max-epoch 50 --patience 5 "${OPT[@]}")
  # Table 3.2 -- synthetic rules (full size) and Fig. 3.3
  thesis $PY -m fairseq_ext.tools.corpora.synthetic_rules generate $D/rules
  thesis $FS/fairseq-preprocess --source-lang src --target-lang tgt --trainpref $D/rules/train --validpref $D/rules/valid \
    --testpref $D/rules/test --destdir $D/rules/bin --joined-dictionary
  # Table 3.5 -- dialogue DS-I / DS-II, characters
  for ds in ds1 ds2; do
    thesis $PY -m fairseq_ext.tools.corpora.dialogue_patterns generate --protocol $ds --unit char $D/dialog_$ds
    thesis $FS/fairseq-preprocess --source-lang src --target-lang tgt --trainpref $D/dialog_$ds/train \
      --validpref $D/dialog_$ds/valid --testpref $D/dialog_$ds/test --destdir $D/dialog_$ds/bin --joined-dictionary
  done
  for set in rules dialog_ds1 dialog_ds2; do
    archs="rnnsearch_copynet_syn copynet_syn"
    [ $set = rules ] && archs="encdec_copynet_syn $archs"
    for arch in $archs; do
      case $arch in
        copynet*) T=(--task copy_translation --copy-raw-dir $D/$set) L=(--criterion copynet_cross_entropy) ;;
        *) T=(--task translation_decoding) L=(--criterion cross_entropy) ;;
      esac
      thesis $FS/fairseq-train $D/$set/bin "${UD[@]}" "${T[@]}" "${L[@]}" --arch $arch "${TRAIN[@]}" --save-dir $C/$set/$arch
      thesis $FS/fairseq-generate $D/$set/bin "${UD[@]}" "${T[@]}" --path $C/$set/$arch/checkpoint_best.pt \
        --beam 10 --nbest 10 --max-len-b 60 --results-path $C/$set/$arch
    done
  done
  thesis $PY -m fairseq_ext.tools.corpora.synthetic_rules accuracy $D/rules --hyp Enc-Dec=$C/rules/encdec_copynet_syn/generate-test.txt \
    --hyp RNNSearch=$C/rules/rnnsearch_copynet_syn/generate-test.txt --hyp CopyNet=$C/rules/copynet_syn/generate-test.txt
  thesis $PY -m fairseq_ext.tools.corpora.dialogue_patterns accuracy --data DS-I=$D/dialog_ds1 --data DS-II=$D/dialog_ds2 \
    --topk 1 10 --hyp RNNSearch@DS-I=$C/dialog_ds1/rnnsearch_copynet_syn/generate-test.txt \
    --hyp CopyNet@DS-I=$C/dialog_ds1/copynet_syn/generate-test.txt \
    --hyp RNNSearch@DS-II=$C/dialog_ds2/rnnsearch_copynet_syn/generate-test.txt \
    --hyp CopyNet@DS-II=$C/dialog_ds2/copynet_syn/generate-test.txt
  thesis $PY -m fairseq_ext.tools.analysis.copy_heatmap --path $C/rules/copynet_syn/checkpoint_best.pt --data $D/rules/bin \
    --copy-raw-dir $D/rules --index 0 --out $C/rules/copynet_syn/fig3_3.png
  # Table 3.4 -- LCSTS (+C: --nwordssrc 3000, +W: --nwordssrc 10000), LCSTS_RAW provided by you
  L=${LCSTS_RAW:-data/lcsts_char}
  thesis $FS/fairseq-preprocess --source-lang src --target-lang tgt --trainpref $L/train --validpref $L/valid \
    --testpref $L/test --destdir $L/bin --joined-dictionary --nwordssrc ${LCSTS_VOCAB:-3000}
  thesis $FS/fairseq-train $L/bin "${UD[@]}" --task copy_translation --copy-raw-dir $L --criterion copynet_cross_entropy \
    --arch copynet_lcsts --batch-size 64 --max-epoch 20 --patience 3 "${OPT[@]}" --save-dir $C/lcsts
  thesis $FS/fairseq-generate $L/bin "${UD[@]}" --task copy_translation --copy-raw-dir $L \
    --path $C/lcsts/checkpoint_best.pt --beam 10 --max-len-b 33 --results-path $C/lcsts
  exit 0
fi

RUNS=runs/gu_ch3
mkdir -p $RUNS

# ---- 1. synthetic rules at --scale 0.1 ------------------------------------------------------------------------
if [[ " $PARTS " == *" synthetic "* ]]; then
  S=$RUNS/synthetic
  $PY -m fairseq_ext.tools.corpora.synthetic_rules generate --scale 0.1 data/gu_ch3/rules_0.1
  binarize data/gu_ch3/rules_0.1 data/gu_ch3/rules_0.1/bin
  for arch in encdec_copynet_syn rnnsearch_copynet_syn copynet_syn; do
    case $arch in
      copynet*) T=(--task copy_translation --copy-raw-dir data/gu_ch3/rules_0.1) C=(--criterion copynet_cross_entropy) ;;
      *) T=(--task translation_decoding) C=(--criterion cross_entropy) ;;
    esac
    if [ ! -s $S/$arch/generate-test.txt ]; then
      $FS/fairseq-train data/gu_ch3/rules_0.1/bin "${UD[@]}" "${T[@]}" "${C[@]}" --arch $arch --batch-size 20 \
        --max-epoch ${SYN_EPOCHS:-60} "${OPT[@]}" --cpu --save-dir $S/$arch --no-epoch-checkpoints > $S.$arch.log 2>&1 \
        || { mkdir -p $S; tail -20 $S.$arch.log; exit 1; }
      $FS/fairseq-generate data/gu_ch3/rules_0.1/bin "${UD[@]}" "${T[@]}" --path $S/$arch/checkpoint_best.pt --cpu \
        --beam 10 --max-len-b 60 --batch-size 64 --results-path $S/$arch
    fi
  done
  $PY -m fairseq_ext.tools.corpora.synthetic_rules accuracy data/gu_ch3/rules_0.1 --hyp Enc-Dec=$S/encdec_copynet_syn/generate-test.txt \
    --hyp RNNSearch=$S/rnnsearch_copynet_syn/generate-test.txt --hyp CopyNet=$S/copynet_syn/generate-test.txt \
    | tee $S/accuracy.md
  $PY -m fairseq_ext.tools.analysis.copy_heatmap --path $S/copynet_syn/checkpoint_best.pt --data data/gu_ch3/rules_0.1/bin \
    --copy-raw-dir data/gu_ch3/rules_0.1 --index 0 --out $S/heatmap.png
  # Gu ch. 2 decoders on the RNNSearch checkpoint (exact match per rule type; decode seconds from fairseq-generate,
  # batch 64, 1 thread): greedy, beam 10, shrinking beam 10, NPD N=4/8/16 at sigma0 = NPD_SIGMA (0.5)
  D=$S/decoders
  hyps=()
  for spec in "greedy --decoding-algorithm greedy" "beam10 --decoding-algorithm beam --beam 10" \
              "shrinking_beam10 --decoding-algorithm shrinking_beam --beam 10" \
              "npd4 --decoding-algorithm npd --npd-samples 4 --npd-sigma0 ${NPD_SIGMA:-0.5}" \
              "npd8 --decoding-algorithm npd --npd-samples 8 --npd-sigma0 ${NPD_SIGMA:-0.5}" \
              "npd16 --decoding-algorithm npd --npd-samples 16 --npd-sigma0 ${NPD_SIGMA:-0.5}"; do
    read -r name flags <<< "$spec"
    if [ ! -s $D/$name/generate-test.txt ] || [ ! -s $D/$name.log ]; then
      mkdir -p $D
      # shellcheck disable=SC2086
      $FS/fairseq-generate data/gu_ch3/rules_0.1/bin "${UD[@]}" --task translation_decoding \
        --path $S/rnnsearch_copynet_syn/checkpoint_best.pt --cpu --max-len-b 60 --batch-size 64 --seed 1 $flags \
        --results-path $D/$name 2> $D/$name.log
    fi
    hyps+=(--hyp "$name=$D/$name/generate-test.txt")
  done
  {
    $PY -m fairseq_ext.tools.corpora.synthetic_rules accuracy data/gu_ch3/rules_0.1 "${hyps[@]}"
    echo
    for h in "${hyps[@]}"; do
      [ "$h" = --hyp ] && continue
      echo "- ${h%%=*}: $(grep -o 'Translated.*' "$D/${h%%=*}.log" | head -1)"
    done
  } | tee $D/accuracy.md
fi

# bible_system ARCH: train ARCH on $BIN_DIR (raw text in $SEG) for BUDGET_MIN minutes into $B/ARCH, decode test
# (beam 5). The two systems of a part train side by side (one thread each: the machine's two cores).
bible_system() {
  local arch=$1 T C
  case $arch in
    copynet*) T=(--task copy_translation --copy-raw-dir $SEG) C=(--criterion copynet_cross_entropy) ;;
    *) T=(--task translation_decoding) C=(--criterion cross_entropy) ;;
  esac
  [ -s $B/$arch/generate-test.txt ] && return 0
  $FS/fairseq-train $BIN_DIR "${UD[@]}" "${T[@]}" "${C[@]}" --arch $arch --max-tokens 4096 "${OPT[@]}" --cpu \
    --stop-time-hours "$(echo "$BUDGET_MIN / 60" | bc -l)" --save-dir $B/$arch --no-epoch-checkpoints \
    > $B/$arch.log 2>&1 || { tail -20 $B/$arch.log; return 1; }
  $FS/fairseq-generate $BIN_DIR "${UD[@]}" "${T[@]}" --path $B/$arch/checkpoint_best.pt --cpu --beam 5 \
    "${LEN[@]}" --batch-size 64 --results-path $B/$arch > $B/$arch.generate.log 2>&1 \
    || { tail -20 $B/$arch.generate.log; return 1; }
}

# bible_pair: RNNSearch and CopyNet side by side on $BIN_DIR, then CopyNet bootstrapped against RNNSearch
bible_pair() {
  bible_system rnnsearch_bench & p1=$!
  bible_system copynet_bench & p2=$!
  wait $p1 && wait $p2
  $PY -m fairseq_ext.tools.evaluation.score compare --baseline $B/rnnsearch_bench/generate-test.txt \
    --system $B/copynet_bench/generate-test.txt --ref data/bible_es_en/raw/test.en --remove-bpe sentencepiece \
    --json $B/compare.json | tee $B/results.md
}

# ---- 2. Bible KJV -> WEB, word level ---------------------------------------------------------------------------
if [[ " $PARTS " == *" bible "* ]]; then
  B=$RUNS/bible
  mkdir -p $B
  [ -s data/bible_es_en/raw/train.kjv ] || bible_data
  # Word-level segmentation (the whitespace tokens) with a 10k-word vocabulary: `--method word` is the word mode
  # of the segmentation CLI that the coordinator adds (issue 11); the folder name is pinned with --name. The
  # binarized dictionary must keep only those 10k words (rarer words, e.g. most names, become <unk> there and
  # are copied from the raw text $SEG/{split}.kjv by task copy_translation).
  $PY -m fairseq_ext.tools.corpora.corpora prepare --raw data/bible_es_en/raw --src kjv --tgt en --method word \
    --vocab-size 10000 --name word10k --out data/bible_kjv_en
  SEG=data/bible_kjv_en/word10k
  BIN_DIR=$SEG/bin
  bible_pair
  # accuracy on the reference's OOV words (outside the 10k dictionary), and on those the source also has
  $PY -m fairseq_ext.tools.evaluation.score oov --hyp $B/rnnsearch_bench/generate-test.txt --hyp $B/copynet_bench/generate-test.txt \
    --ref $SEG/test.en --src $SEG/test.kjv --dict $BIN_DIR/dict.en.txt --json $B/oov.json | tee -a $B/results.md
  $PY -m fairseq_ext.tools.analysis.copy_heatmap --path $B/copynet_bench/checkpoint_best.pt --data $BIN_DIR \
    --copy-raw-dir $SEG --index 0 --out $B/heatmap.png
fi

# ---- 3. Bible es -> en (sentencepiece 8k, the bench's data): the same two systems, the same budget ----------
if [[ " $PARTS " == *" es-en "* ]]; then
  B=$RUNS/es-en
  mkdir -p $B
  SEG=data/bible_es_en/spm8000
  BIN_DIR=$SEG/bin
  [ -s $BIN_DIR/dict.es.txt ] || bible_data
  bible_pair
fi

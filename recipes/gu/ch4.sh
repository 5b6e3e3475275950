#!/usr/bin/env bash
# Gu thesis ch. 4: SEG-NMT, search-engine guided non-parametric NMT (Gu, Wang, Cho, Li, AAAI 2018) -- a retrieval
# stage (the training set as translation memory, BM25 candidates re-ranked by the fuzzy score of Eq. 4.1, top-K or
# Algorithm 1's adaptive coverage selection) and a translation stage (the retrieved pairs encoded by the same
# RNNsearch as a key-value memory, Eqs. 4.2-4.3 and 4.6-4.7 with coverage, a gate zeta_t, shallow fusion Eq. 4.5 or
# deep fusion Eq. 4.4), against the TM, NMT and COPYNET baselines of Table 4.2; Figs. 4.3 (BLEU per fuzzy bin),
# 4.4 (BLEU vs the number of retrieved pairs, adaptive marked) and 4.5 (zeta_t per output token).
# Spec: specs/004a-gu-data-efficient.md §4.  Code: retrieval tool `fairseq-ext-tm` (fairseq_ext/tools/tm/retrieval.py:
# build-index, retrieve -> {split}.tm.jsonl side files next to the binarized data, tm-baseline, stats), task
# `seg_translation` (fairseq_ext/tasks/seg_translation.py: --tm-topk K, --tm-selection topk|adaptive, --tm-max-k,
# --tm-export), model `seg_nmt` (fairseq_ext/models/seg_nmt.py: --fusion shallow|deep), criterion
# `seg_nmt_cross_entropy`, baseline `seg_copynet` (criterion `copynet_cross_entropy`), NMT `rnnsearch`; analyses
# `python -m fairseq_ext.tools.analysis.tm_analysis` (fuzzy-bins, k-sweep, gate, split-corpus); scores
# fairseq_ext.tools.evaluation.score; decode-time ratio recipes/bench/decode_speed.py.
#
#   bash recipes/gu/ch4.sh                    # CPU: Bible es->en (budget below)
#   STAGE1=ckpt.pt bash recipes/gu/ch4.sh     # ... warm-started from that rnnsearch_bench checkpoint (no stage 1),
#                                             # e.g. runs/gu_ch2/rnnsearch_30/checkpoint_best.pt
#   SYSTEMS="nmt seg_nmt" bash recipes/gu/ch4.sh   # a subset (nmt is needed: it is the baseline of every score)
#   DATA=tiny bash recipes/gu/ch4.sh          # the committed tiny slice, tiny models, a few updates (~4-5 min)
#   MODE=thesis bash recipes/gu/ch4.sh        # print the thesis-setting commands (RUN=1: run them)
#
# ---- Thesis settings (MODE=thesis; the corpora you provide, a GPU assumed) ------------------------------------
# JRC-Acquis 3.0 (Steinberger et al. 2006), En-Fr / En-Es / En-De, both directions (PAIRS="en-fr en-es en-de"):
#   THESIS_DATA/<pair>/all.{en,xx}: the sentence-aligned pair (e.g. the OPUS JRC-Acquis release), one sentence a
#   line, not lowercased. `tm_analysis split-corpus` drops pairs with a side of special characters only, samples
#   3,000 dev and 3,000 test pairs uniformly (seed 1), Moses-tokenises (sacremoses, XML escapes as in the thesis's
#   examples: pip install sacremoses) and then applies the length limits (<= 80 tokens train, <= 100 dev/test; the
#   §4.8 reading "sample 3,000, then filter": Table 4.1 has 2,4xx-2,6xx dev/test pairs) -> raw/ and tok/.
#   BPE: subword-nmt, 20,000 symbols per language (separate, REF-CODE's voc_sizes 20000), `corpora bpe --no-joint`;
#   binarized once per direction (separate dictionaries) -> <pair>/<src>-<tgt>/bin.
# Retrieval (§4.2.1, §4.3.1): the training source side (Moses tokens) indexed once per language; 100 BM25
#   candidates, fuzzy re-rank, 16 kept; the training split in train mode (its own line never retrieved).
# Models (§4.3.1): NMT = rnnsearch_jrc (bi-GRU 1024, conditional GRU 1024, emb 512), SEG-NMT = seg_nmt_jrc (the same
#   + memory, shallow fusion, diagonal M = I, coverage, gate MLP 1024), both from scratch; top-K with K = 2 in
#   training (TRAIN_KS="1 2" also trains K = 1: "vary K among 1 and 2"); deep fusion (--fusion deep) and COPYNET
#   (seg_copynet: CopyNet over the top-1 retrieved target, copynet_cross_entropy) on En-Fr both directions only
#   (Table 4.2 and the deep-vs-shallow ablation). Adam 1e-3, clip 1.0, batch 32 sentence pairs, early stopping on
#   the dev loss (patience 5; the thesis stops on dev performance).
# Decoding: beam 5, length-normalised (fairseq --lenpen 1 = REF-CODE alpha 1), K = 2 for Table 4.2 (dev and test);
#   Fr->En (FIG_DIRS): K in {1,2,4,8,16} and adaptive (Alg. 1, --tm-max-k 16) on dev and test (Fig. 4.4), zeta_t
#   exported on dev (Fig. 4.5). Scores: case-sensitive tokenised BLEU (multi-bleu style, `score compare
#   --tokenised` on the H- lines against tok/; the spec's recommendation) and sacreBLEU (D- lines, Moses-detokenised
#   by fairseq's --tokenizer moses, against raw/), paired bootstrap against NMT; the TM row = the top-1 retrieved
#   target (tm-baseline). Figs. 4.3 (dev, NMT vs SEG-NMT per fuzzy bin) and 4.4 via tm_analysis.
# Thesis (Table 4.2, test BLEU): En-Fr -> 64.60 / <- 65.11, En-De 48.80 / 55.33, En-Es 57.27 / 59.34 (SEG-NMT) vs
#   NMT 59.42 / 60.11, 43.98 / 49.74, 50.48 / 54.66; adaptive selection 4.814 pairs on average (Fr->En).
#
# ---- CPU mode (default; 2 cores, THREADS=1) --------------------------------------------------------------------
# data/bible_es_en (sentencepiece 8k joined, bible_data of recipes/lib.sh), es->en, memory = the 28,717 training
# verses (raw text, the retrieval tool's word tokens). Retrieval: build-index + retrieve test / valid / train
# (train mode) when the side files are missing; TM baseline (tm-baseline) and the top-1 fuzzy histogram (stats).
# Stage 1: STAGE1=checkpoint (an rnnsearch_bench checkpoint), or rnnsearch_bench trained here for BUDGET_MIN (30)
#   minutes (task translation_decoding, the bench's RNNSEARCH_OPTIM: Adam 1e-3, clip 1, 2,048 tokens).
# Stage 2 (task seg_translation, top-K = 2, batches of 32 sentence pairs (the thesis's batch), Adam 1e-3, clip 1;
#   two single-thread lanes side by side), for UPDATES (300) updates, warm-started from stage 1
#   (--finetune-from-model: the sentence tensors copied, the memory's M = I, lambda = 0, the gate initialised):
#     nmt           rnnsearch_bench continued on the same batches (the fair baseline; the memory is not given to it)
#     seg_nmt       seg_nmt_bench, shallow fusion (the thesis's model)
#     seg_nmt_deep  seg_nmt_bench --fusion deep (the ablation)
#     seg_copynet   seg_copynet_bench. It cannot be warm-started from rnnsearch (its decoder GRU also reads the
#                   selective read, and Y' has its own encoder: other shapes), so it trains FROM SCRATCH for the
#                   stage-1 updates + UPDATES (COPYNET_UPDATES), batches of 32: read its row as a from-scratch
#                   baseline with as many updates as the NMT, not as a warm-started one.
# Decoding of test: beam BEAM (5), K = 2 for every system; for seg_nmt also K in SWEEP_KS (1 4 8 16) and adaptive
#   (Fig. 4.4), and --tm-export of zeta_t with its K = 2 decode (the three test verses with the highest top-1
#   fuzzy -> gate_examples.md, Fig. 4.5; the export re-scores every hypothesis teacher-forced: that decode's
#   seconds include it).
# Scores: sacreBLEU BLEU / chrF + paired bootstrap against nmt (TM, seg_nmt, seg_nmt_deep, seg_copynet), Fig. 4.3
#   (BLEU per top-1 fuzzy bin [0,.3) [.3,.5) [.5,.7) [.7,1], every system), Fig. 4.4 (K sweep + adaptive, NMT line),
#   decode-time ratio seg_nmt / nmt (decode_speed.py, ROUNDS (3) interleaved rounds on the SPEED_SUBSET (valid,
#   645 verses), beam BEAM, no export) -> runs/gu_ch4/es-en/results.md (+ compare.json, fig4_3_fuzzy_bins.png,
#   fig4_4_k_sweep.png, fuzzy_hist.png, gate_examples.md, decode_speed.json).
# CPU budget (THREADS=1). Measured here, one thread per process next to two busy cores (load ~5), from the 30-min
# rnnsearch_bench of recipes/gu/ch2.sh: an update of 32 verses (~1,260 target tokens) takes ~2.0 s for nmt,
# ~6.6 s for seg_nmt (K = 2: both retrieved pairs are teacher-forced through the same model too), ~6.0 s for
# seg_nmt_deep, ~3.4 s for seg_copynet; beam-5 decoding of 128 test verses takes 20 s for the NMT and, for SEG-NMT,
# 26 s (K = 1), 32 s (K = 2), 113 s (adaptive, 5.9 pairs on average), 187 s (K = 16), 75 s (K = 2 with the export);
# retrieval answers ~1,000 queries/s. Hence: stage 1 BUDGET_MIN (30 min, ~450 updates of 2,048 tokens) unless
# STAGE1 is given; retrieval of the missing side files ~1 min; stage 2 + decoding of test, in two lanes balanced by
# those costs: nmt 10 + 4 min, seg_nmt 33 + 15 (K = 2 with the export), seg_nmt_deep 30 + 7, seg_copynet (~750
# updates from scratch) 43 + 5, the sweep K = 1 / 4 / 8 / 16 / adaptive 5 / 11 / 19 / 36 / 22 min (4 and 8
# interpolated) -- ~2 h side by side; decode_speed 3 rounds on valid ~13 min; scores ~5 min. About 2.7 h in all
# (2.2 h with STAGE1; SWEEP_KS="1 4 8" saves ~35 min, BEAM=1 about half of the decoding); less on an idle machine.
# The bases are weak (BLEU ~1 after 30 min of stage 1): read the differences with their bootstrap p-values and the
# per-bin table (the test set has 187 verses with a top-1 fuzzy >= 0.5, where copying can pay).
STAGE1_MIN=${BUDGET_MIN:-30}
source "$(dirname "$0")/../lib.sh"
PY=.venv/bin/python
FS=.venv/bin
UD=(--user-dir fairseq_ext)
RUNS=${RUNS:-runs}
BEAM=${BEAM:-5}
SWEEP_KS=(${SWEEP_KS:-1 4 8 16})   # Fig. 4.4: + K = 2 (the main decode) and adaptive

if [ "$MODE" = thesis ]; then
  J=${THESIS_DATA:-data/jrc_acquis}
  C=checkpoints/gu_ch4
  TRAIN=(--optimizer adam --lr 0.001 --clip-norm 1.0 --batch-size 32 --max-epoch "${MAX_EPOCH:-20}" --patience 5
         --no-epoch-checkpoints --log-format simple --log-interval 100)
  TRAIN_KS=${TRAIN_KS:-2}
  FIG_DIRS=${FIG_DIRS:-fr-en}
  for pair in ${PAIRS:-en-fr en-es en-de}; do
    x=${pair#en-}
    R=$J/$pair
    echo "# ---- JRC-Acquis $pair: data, translation memory"
    thesis $PY -m fairseq_ext.tools.analysis.tm_analysis split-corpus --prefix $R/all --langs en "$x" --out $R --dev 3000 \
      --test 3000 --max-len-train 80 --max-len-test 100 --seed 1 --tokenize moses
    thesis $PY -m fairseq_ext.tools.corpora.corpora bpe $R/tok $R/bpe20k --src en --tgt "$x" --method subword-nmt \
      --vocab-size 20000 --no-joint
    for lang in en "$x"; do
      thesis $FS/fairseq-ext-tm build-index --memory-src $R/tok/train.$lang --index $R/tm_index.$lang
    done
    for dir in "en-$x" "$x-en"; do
      s=${dir%-*} t=${dir#*-}
      D=$R/$dir/bin
      O=$C/$dir
      echo "# ---- $dir"
      thesis $PY -m fairseq_ext.tools.corpora.corpora binarize $R/bpe20k --out $R/$dir --src "$s" --tgt "$t" \
        --no-joined-dictionary --workers 8
      for split in train valid test; do
        mode=(); [ $split != train ] || mode=(--train-mode)
        thesis $FS/fairseq-ext-tm retrieve --index $R/tm_index.$s --memory-src $R/tok/train.$s \
          --query $R/tok/$split.$s --out-dir "$D" --split $split --candidates 100 --keep 16 "${mode[@]}"
      done
      for split in valid test; do  # TM: the top-1 retrieved target, tokenised and raw
        for form in tok raw; do
          ext=$form; [ $form != raw ] || ext=txt
          thesis $FS/fairseq-ext-tm tm-baseline --side $D/$split.tm.jsonl --memory-tgt $R/$form/train.$t \
            --out $O/tm/$split.$ext
        done
      done
      thesis $FS/fairseq-ext-tm stats --side $D/test.tm.jsonl --plot $O/fuzzy_hist.png --json $O/fuzzy_stats.json
      # systems: name -> task and model flags (every one from scratch)
      SEG_NMT="--arch seg_nmt_jrc --criterion seg_nmt_cross_entropy"
      systems=("nmt|--task translation_decoding --arch rnnsearch_jrc --criterion cross_entropy")
      for k in $TRAIN_KS; do
        systems+=("seg_nmt_k$k|--task seg_translation --tm-topk $k $SEG_NMT")
      done
      if [ "$x" = fr ]; then
        systems+=("seg_nmt_deep|--task seg_translation --tm-topk 2 $SEG_NMT --fusion deep"
                  "seg_copynet|--task seg_translation --tm-topk 2 --arch seg_copynet --criterion copynet_cross_entropy")
      fi
      GEN=(--beam 5 --lenpen 1 --batch-size 64 "${LEN[@]}" --post-process subword_nmt
           --tokenizer moses --source-lang "$s" --target-lang "$t")   # (moses reads the task's languages)
      for sys in "${systems[@]}"; do
        name=${sys%%|*}
        read -r -a flags <<< "${sys#*|}"
        thesis $FS/fairseq-train "$D" "${UD[@]}" "${flags[@]}" "${TRAIN[@]}" --save-dir $O/$name
        task=(--task seg_translation --tm-topk 2); [ "$name" != nmt ] || task=(--task translation_decoding)
        for split in valid test; do
          export_flag=()
          if [[ " $FIG_DIRS " == *" $dir "* ]] && [ "$name" = seg_nmt_k2 ] && [ $split = valid ]; then
            export_flag=(--tm-export $O/seg_nmt_k2/zeta_valid.jsonl)
          fi
          thesis $FS/fairseq-generate "$D" "${UD[@]}" "${task[@]}" --gen-subset $split \
            --path $O/$name/checkpoint_best.pt "${GEN[@]}" "${export_flag[@]}" --results-path $O/$name/$split
        done
      done
      # Table 4.2: tokenised BLEU (the thesis's) and sacreBLEU, paired bootstrap against NMT
      for split in valid test; do
        hyps=(--system $O/tm/$split.tok)
        detok=(--system $O/tm/$split.txt)
        for sys in "${systems[@]:1}"; do
          hyps+=(--system $O/${sys%%|*}/$split/generate-$split.txt)
          detok+=(--system $O/${sys%%|*}/$split/generate-$split.txt)
        done
        thesis $PY -m fairseq_ext.tools.evaluation.score compare --tokenised --baseline $O/nmt/$split/generate-$split.txt \
          "${hyps[@]}" --ref $R/tok/$split.$t --json $O/bleu_tok_$split.json
        thesis $PY -m fairseq_ext.tools.evaluation.score compare --baseline $O/nmt/$split/generate-$split.txt "${detok[@]}" \
          --ref $R/raw/$split.$t --json $O/sacrebleu_$split.json
      done
      [[ " $FIG_DIRS " == *" $dir "* ]] || continue
      # Figs. 4.3-4.5 (Fr->En): the K = 2 model decoded with K = 1, 4, 8, 16 and adaptive
      for split in valid test; do
        sweep=(--hyp 2=$O/seg_nmt_k2/$split/generate-$split.txt)
        for k in "${SWEEP_KS[@]}" adaptive; do
          if [ $k = adaptive ]; then sel=(--tm-selection adaptive --tm-max-k 16); else sel=(--tm-topk $k); fi
          thesis $FS/fairseq-generate "$D" "${UD[@]}" --task seg_translation "${sel[@]}" --gen-subset $split \
            --path $O/seg_nmt_k2/checkpoint_best.pt "${GEN[@]}" --results-path $O/seg_nmt_k2/${split}_$k
          sweep+=(--hyp $k=$O/seg_nmt_k2/${split}_$k/generate-$split.txt)
        done
        thesis $PY -m fairseq_ext.tools.analysis.tm_analysis k-sweep --side $D/$split.tm.jsonl --ref $R/tok/$split.$t \
          --tokenised "${sweep[@]}" --baseline NMT=$O/nmt/$split/generate-$split.txt --json $O/fig4_4_$split.json \
          --md $O/fig4_4_$split.md --plot $O/fig4_4_$split.png
        bins=(--hyp NMT=$O/nmt/$split/generate-$split.txt --hyp SEG-NMT=$O/seg_nmt_k2/$split/generate-$split.txt)
        thesis $PY -m fairseq_ext.tools.analysis.tm_analysis fuzzy-bins --side $D/$split.tm.jsonl --ref $R/tok/$split.$t \
          --tokenised "${bins[@]}" --json $O/fig4_3_$split.json --md $O/fig4_3_$split.md --plot $O/fig4_3_$split.png
      done
      thesis $PY -m fairseq_ext.tools.analysis.tm_analysis gate --export $O/seg_nmt_k2/zeta_valid.jsonl --n 5 \
        --ref $R/tok/valid.$t --memory-tgt $R/tok/train.$t --md $O/fig4_5_valid.md
    done
  done
  exit 0
fi

# ---- CPU mode / DATA=tiny --------------------------------------------------------------------------------------
if [ "${DATA:-bible}" = tiny ]; then
  # the committed tiny slice (209 training verses), sentencepiece 300, tiny models, a few updates
  OUT=$RUNS/gu_ch4_tiny
  RAW=tests/data/bible_tiny
  SEG=$OUT/data/seg
  BIN=$OUT/data/bin
  INDEX=$OUT/data/tm_index
  tiny_slice $OUT
  NMT_ARCH=rnnsearch_tiny SEG_ARCH=seg_nmt_tiny COPY_ARCH=seg_copynet_tiny
  UPDATES=${UPDATES:-6}
  STAGE1_LIMIT=(--max-update "${STAGE1_UPDATES:-12}")
  STAGE1_BATCH=(--max-tokens 1024)
  N_BOOTSTRAP=${N_BOOTSTRAP:-100}
  ROUNDS=${ROUNDS:-1}
else
  RAW=data/bible_es_en/raw
  SEG=data/bible_es_en/spm8000
  BIN=$SEG/bin
  INDEX=data/bible_es_en/tm_index
  [ -s $BIN/dict.es.txt ] || bible_data
  OUT=$RUNS/gu_ch4/es-en
  NMT_ARCH=rnnsearch_bench SEG_ARCH=seg_nmt_bench COPY_ARCH=seg_copynet_bench
  UPDATES=${UPDATES:-300}
  STAGE1_LIMIT=(--stop-time-hours "$(echo "$STAGE1_MIN / 60" | bc -l)")
  STAGE1_BATCH=(--max-tokens 2048)
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
  ROUNDS=${ROUNDS:-3}
fi
SPEED_SUBSET=${SPEED_SUBSET:-valid}
mkdir -p $OUT
SYSTEMS=(${SYSTEMS:-nmt seg_nmt seg_nmt_deep seg_copynet})
[[ " ${SYSTEMS[*]} " == *" nmt "* ]] || { echo "error: SYSTEMS must include nmt (the baseline of the scores)" >&2; exit 2; }
has() { [[ " ${SYSTEMS[*]} " == *" $1 "* ]]; }
OPT=(--optimizer adam --adam-betas '(0.9,0.98)' --lr 1e-3 --clip-norm 1.0)   # the bench's RNNSEARCH_OPTIM
COMMON=(--seed 1 --cpu --no-progress-bar --log-format simple --log-interval 50 --no-epoch-checkpoints)
T=(--task seg_translation --tm-topk 2)

# ---- retrieval stage: the training source side as the memory; side files next to the binarized data
TM=$FS/fairseq-ext-tm
$TM build-index --memory-src $RAW/train.es --index $INDEX   # reuses the index when it is up to date
for split in test valid train; do
  if [ ! -s $BIN/$split.tm.jsonl ] || [ ! -s $BIN/$split.tm.meta.json ]; then
    mode=(); [ $split != train ] || mode=(--train-mode)
    $TM retrieve --index $INDEX --memory-src $RAW/train.es --query $RAW/$split.es --out-dir $BIN --split $split \
      "${mode[@]}"
  fi
done
mkdir -p $OUT/tm
$TM tm-baseline --side $BIN/test.tm.jsonl --memory-tgt $RAW/train.en --out $OUT/tm/test.txt
$TM stats --side $BIN/test.tm.jsonl --plot $OUT/fuzzy_hist.png --json $OUT/fuzzy_stats.json > /dev/null

# ---- stage 1: the sentence model every stage-2 system starts from
STAGE1=${STAGE1:-$OUT/stage1/checkpoint_best.pt}
if [ ! -s "$STAGE1" ]; then
  $FS/fairseq-train $BIN "${UD[@]}" --task translation_decoding --arch $NMT_ARCH --criterion cross_entropy \
    "${OPT[@]}" "${STAGE1_BATCH[@]}" "${COMMON[@]}" "${STAGE1_LIMIT[@]}" --save-dir $OUT/stage1 \
    > $OUT/stage1.log 2>&1 || { tail -20 $OUT/stage1.log; exit 1; }
  STAGE1=$OUT/stage1/checkpoint_best.pt
fi
STAGE1_UPDATES=$($PY -c "import sys, torch; print(torch.load(sys.argv[1], map_location='cpu', weights_only=False)\
['optimizer_history'][-1]['num_updates'])" "$STAGE1")
COPYNET_UPDATES=${COPYNET_UPDATES:-$((STAGE1_UPDATES + UPDATES))}

# ---- stage 2
system_flags() {
  case $1 in
    nmt) echo "--arch $NMT_ARCH --criterion cross_entropy" ;;
    seg_nmt) echo "--arch $SEG_ARCH --criterion seg_nmt_cross_entropy" ;;
    seg_nmt_deep) echo "--arch $SEG_ARCH --fusion deep --criterion seg_nmt_cross_entropy" ;;
    seg_copynet) echo "--arch $COPY_ARCH --criterion copynet_cross_entropy" ;;
    *) echo "error: unknown system $1 (nmt, seg_nmt, seg_nmt_deep, seg_copynet)" >&2; return 2 ;;
  esac
}
for s in "${SYSTEMS[@]}"; do system_flags "$s" > /dev/null || exit 2; done

train_system() {
  local name=$1 flags init
  [ -e $OUT/$name/train.done ] && return 0
  flags=$(system_flags "$name")
  if [ "$name" = seg_copynet ]; then init=(--max-update "$COPYNET_UPDATES")   # from scratch (header)
  else init=(--finetune-from-model "$STAGE1" --max-update "$UPDATES"); fi
  # shellcheck disable=SC2086
  $FS/fairseq-train $BIN "${UD[@]}" "${T[@]}" $flags "${OPT[@]}" --batch-size 32 "${COMMON[@]}" "${init[@]}" \
    --save-interval-updates 100 --keep-interval-updates 1 \
    --save-dir $OUT/$name >> $OUT/$name.log 2>&1 || { tail -20 $OUT/$name.log; return 1; }
  touch $OUT/$name/train.done
}

# decode NAME TAG FLAGS...: test with NAME's checkpoint -> $OUT/NAME/TAG/generate-test.txt (+ TAG.log)
decode() {
  local name=$1 tag=$2 dir
  shift 2
  dir=$OUT/$name/$tag
  [ -s $dir/generate-test.txt ] && return 0
  rm -rf $dir.tmp
  $FS/fairseq-generate $BIN "${UD[@]}" "${T[@]}" --gen-subset test --path $OUT/$name/checkpoint_last.pt \
    --beam "$BEAM" "${LEN[@]}" --batch-size 64 --post-process sentencepiece --cpu --seed 1 \
    --results-path $dir.tmp "$@" > $dir.log 2>&1 || { tail -20 $dir.log; return 1; }
  mv $dir.tmp $dir
}

run_system() {  # train, then decode test with K = 2 (seg_nmt: with the zeta export)
  local name=$1
  train_system "$name" || return 1
  if [ "$name" = seg_nmt ]; then decode seg_nmt k2 --tm-export $OUT/seg_nmt/zeta_test.jsonl
  else decode "$name" k2; fi
}

sweep_decode() {  # Fig. 4.4: the seg_nmt model with K = TAG (kK) or adaptive, after its training
  while [ ! -e $OUT/seg_nmt/train.done ]; do [ ! -e $OUT/seg_nmt.failed ] || return 1; sleep 15; done
  case $1 in
    adaptive) decode seg_nmt adaptive --tm-selection adaptive --tm-max-k 16 ;;
    *) decode seg_nmt "$1" --tm-topk "${1#k}" ;;
  esac
}

run_lane() {  # JOB...: sys:NAME (train + K = 2 decode) or dec:TAG (a sweep decode of seg_nmt)
  local job
  for job in "$@"; do
    case $job in
      sys:*) run_system "${job#sys:}" || { touch $OUT/${job#sys:}.failed; return 1; } ;;
      dec:*) sweep_decode "${job#dec:}" || return 1 ;;
    esac
  done
}

# two single-thread lanes side by side, balanced by the minutes each job took on one busy thread (header):
# seg_nmt first in lane A, the other systems where the load is smaller, then the sweep decodes likewise
declare -A COST=([nmt]=14 [seg_nmt]=49 [seg_nmt_deep]=37 [seg_copynet]=48 [adaptive]=22)
cost() { echo "${COST[$1]:-$((2 * ${1#k} + 3))}"; }   # a sweep decode kK: ~(2K + 3) minutes
lane_a=() lane_b=() wa=0 wb=0
rm -f $OUT/*.failed
jobs=()
has seg_nmt && jobs=(sys:seg_nmt)
for s in "${SYSTEMS[@]}"; do [ "$s" = seg_nmt ] || jobs+=("sys:$s"); done
if has seg_nmt; then
  for tag in $(for k in "${SWEEP_KS[@]}" adaptive; do t=k$k; [ $k != adaptive ] || t=adaptive
               echo "$(cost $t) $t"; done | sort -rn | cut -d' ' -f2); do
    jobs+=("dec:$tag")
  done
fi
for job in "${jobs[@]}"; do
  w=$(cost "${job#*:}")
  if ((wa <= wb)); then lane_a+=("$job"); wa=$((wa + w)); else lane_b+=("$job"); wb=$((wb + w)); fi
done
echo "lane A: ${lane_a[*]}; lane B: ${lane_b[*]:-} (weights $wa / $wb: minutes of the es-en setting)"
run_lane "${lane_a[@]}" & pa=$!
run_lane "${lane_b[@]}" & pb=$!
failed=0
wait $pa || failed=1
wait $pb || failed=1
[ $failed = 0 ] || { echo "error: a stage-2 job failed (logs in $OUT)" >&2; exit 1; }

# ---- decode-time ratio seg_nmt / nmt, interleaved rounds (one thread each, one run at a time)
if has seg_nmt && [ ! -s $OUT/decode_speed.json ]; then
  SP="--user-dir fairseq_ext ${T[*]} --gen-subset $SPEED_SUBSET --beam $BEAM ${LEN[*]} --batch-size 64 --cpu --seed 1"
  decode_speed $OUT/decode_speed --system "nmt=$BIN $SP --path $OUT/nmt/checkpoint_last.pt" \
    --system "seg_nmt=$BIN $SP --path $OUT/seg_nmt/checkpoint_last.pt"
fi

# ---- scores ----------------------------------------------------------------------------------------------------
declare -A LABEL=([nmt]=NMT [seg_nmt]=SEG-NMT [seg_nmt_deep]="SEG-NMT-deep" [seg_copynet]=COPYNET)
hyp() { echo "$OUT/$1/k2/generate-test.txt"; }
RES=$OUT/results.md
valid_loss() {
  grep -o "valid on 'valid' subset | loss [0-9.]*" "$OUT/$1.log" | tail -1 | awk '{print $NF}'
}
decode_secs() {
  grep -ho "Translated [0-9,]* sentences ([0-9,]* tokens) in [0-9.]*s" "$OUT/$1/$2.log" "$OUT/$1/$2/generate-test.txt" \
    2>/dev/null | head -1 | grep -o "in [0-9.]*s" | tr -d 'ins '
}
{
  echo "# Gu ch. 4 (SEG-NMT) on $BIN (es->en, test, beam $BEAM)"
  echo
  echo "Stage 1: $STAGE1 ($STAGE1_UPDATES updates). Stage 2: $UPDATES updates of 32 verses, top-K = 2 in training,"
  echo "warm-started from stage 1; seg_copynet from scratch for $COPYNET_UPDATES updates (cannot be warm-started)."
  echo
  echo "| system | arch | valid loss (base 2) after stage 2 | decode s (test, K = 2; seg_nmt: with the export) |"
  echo "|---|---|---|---|"
  for s in "${SYSTEMS[@]}"; do
    arch=$(system_flags "$s" | sed 's/ *--criterion.*//; s/--arch //')
    echo "| ${LABEL[$s]} ($s) | $arch | $(valid_loss "$s") | $(decode_secs "$s" k2) |"
  done
  echo
  echo "## Retrieval (test): top-1 fuzzy score"
  echo
  $PY -c "import json, sys; s = json.load(open(sys.argv[1])); print(f\"{s['examples']} examples, {s['with_candidate']} \
with a candidate; top-1 fuzzy mean {s['top1_mean']:.3f}, median {s['top1_median']:.3f}; >= 0.5: {s['top1_ge_0.5']}, \
>= 0.7: {s['top1_ge_0.7']}, >= 0.9: {s['top1_ge_0.9']}, = 1: {s['top1_eq_1.0']}; adaptive selects \
{s['avg_adaptive_pairs']:.2f} pairs on average (histogram: fuzzy_hist.png)\")" $OUT/fuzzy_stats.json
  echo
  echo '## Table 4.2: BLEU / chrF, paired bootstrap against NMT (TM = the top-1 retrieved target)'
  echo
  echo '```'
} > $RES
systems=(--system $OUT/tm/test.txt)
for s in "${SYSTEMS[@]}"; do [ "$s" = nmt ] || systems+=(--system "$(hyp "$s")"); done
$PY -m fairseq_ext.tools.evaluation.score compare --baseline "$(hyp nmt)" "${systems[@]}" --ref $RAW/test.en \
  --n-bootstrap "$N_BOOTSTRAP" --json $OUT/compare.json 2> $OUT/compare.log | tee -a $RES
printf '```\n\n## Fig. 4.3: BLEU per fuzzy score of the top-1 retrieved pair (fig4_3_fuzzy_bins.png)\n\n' >> $RES
bins=(--hyp "NMT=$(hyp nmt)" --hyp TM=$OUT/tm/test.txt)
for s in "${SYSTEMS[@]}"; do [ "$s" = nmt ] || bins+=(--hyp "${LABEL[$s]}=$(hyp "$s")"); done
$PY -m fairseq_ext.tools.analysis.tm_analysis fuzzy-bins --side $BIN/test.tm.jsonl --ref $RAW/test.en "${bins[@]}" \
  --json $OUT/fig4_3_fuzzy_bins.json --plot $OUT/fig4_3_fuzzy_bins.png --title "es->en test: BLEU by top-1 fuzzy score" \
  2>> $OUT/compare.log | tee -a $RES
if has seg_nmt; then
  printf '\n## Fig. 4.4: BLEU vs the number of retrieved pairs (seg_nmt trained with K = 2; fig4_4_k_sweep.png)\n\n' >> $RES
  sweep_args=()
  for k in 2 "${SWEEP_KS[@]}" adaptive; do
    tag=k$k; [ $k != adaptive ] || tag=adaptive
    sweep_args+=(--hyp "$k=$OUT/seg_nmt/$tag/generate-test.txt")
  done
  $PY -m fairseq_ext.tools.analysis.tm_analysis k-sweep --side $BIN/test.tm.jsonl --ref $RAW/test.en "${sweep_args[@]}" \
    --baseline "NMT=$(hyp nmt)" --json $OUT/fig4_4_k_sweep.json --plot $OUT/fig4_4_k_sweep.png \
    --title "es->en test: BLEU vs retrieved pairs" 2>> $OUT/compare.log | tee -a $RES
  printf '\n## Fig. 4.5: the gate zeta_t of three test sentences (highest top-1 fuzzy; --tm-export)\n\n' >> $RES
  $PY -m fairseq_ext.tools.analysis.tm_analysis gate --export $OUT/seg_nmt/zeta_test.jsonl --n 3 --ref $RAW/test.en \
    --memory-tgt $RAW/train.en --md $OUT/gate_examples.md 2>> $OUT/compare.log >> $RES
  printf '\n## Decoding time, SEG-NMT / NMT (%s rounds interleaved, %s split, beam %s, one thread)\n\n' \
    "$ROUNDS" "$SPEED_SUBSET" "$BEAM" >> $RES
  cat $OUT/decode_speed.md >> $RES
fi
echo "results: $RES"

#!/usr/bin/env bash
# The document systems at convergence (Maruf ch. 3-4): a converged stage-1 sentence model on whole Bible chapters,
# then every stage-2 system warm-started from it and trained until its dev BLEU stops improving, with learning
# curves, against the sentence model continued the same way; the contrastive pronoun accuracy of every checkpoint.
# Code: recipes/bench/bench.py --curve-every / --patience (as recipes/bench/converged.sh: its lanes, curves and the
# "converged" table of RESULTS.md), --finetune-from-model (the warm start; decoding's pass 0) and
# --doc-generated-dir (the stage-1 translations read as target context).
#
#   nice bash recipes/bench/converged_doc.sh                 # both stages, two single-thread lanes
#   LANES=1 STAGES=doc1 nice bash recipes/bench/converged_doc.sh   # stage 1 on one lane (transformer, then rnnsearch)
#   STAGES="doc2_ch4" bash recipes/bench/converged_doc.sh    # doc1 doc2 (= doc2_ch4 doc2_ch3) doc2_ch4 doc2_ch3
#   DATA=tiny bash recipes/bench/converged_doc.sh            # the committed tiny slice, a few updates (minutes)
#   TABLE=recipes/bench/RESULTS.md bash recipes/bench/converged_doc.sh   # merge the rows into the converged table
#
# Data: es->en, DOC_SIZE (10,000) training verses drawn as whole chapters (corpora prepare --subsample-by document:
# 10,001 verses) from the training books but HELDOUT_BOOKS (Jeremiah, Proverbs, Hosea, Lamentations, Revelation: split
# `heldout`, 3,017 verses, the larger contrastive set below), sentencepiece 4k on them; dev and test are the full
# Bible splits (645 / 1,494 verses). Folder data/bible_es_en/spm4000-train10000docs-seed1-heldout5-f99846bf.
# Why 10k: the converged rows so far say how many updates patience 5 (every 200) takes per training-set size: the
# 5k es->en baseline stopped at 3,200 updates (best 2,200; test BLEU 12.3, the weak stage 1 to replace), the 10k
# en->tl one at 7,800 (best 6,800): at the stage-1 cost measured below, ~3.5 h of a free core per model; 20k would
# double it.
# Stages (every flag is a bench_configs configuration's; dev BLEU greedy every CURVE_EVERY (200) updates, stopped
# after PATIENCE (5) validations without a better one, CAP_MIN (600) minutes of training at most per configuration):
#   doc1      the stage-1 sentence models, from scratch on sentence batches: `transformer` (the bench's baseline,
#             = transformer_maruf_base_bench, 3+3 d256 PreNorm: stage 1 of Maruf ch. 4's H-attention, Zhang 2018,
#             the concatenation model and HAN) and `rnnsearch` (rnnsearch_bench, the RNNsearch of ch. 3's memory
#             networks, PREV-TGT, Jean 2017 and Wang 2017). Job OUT/doc1; its test rows are beam 5.
#   doc2_ch4  warm-started from doc1's transformer (checkpoint_best.pt), document batches, Adam 3e-4 (MARUF_STAGE2),
#             greedy: maruf_sentence (the baseline: the stage-1 model continued on the same document batches under
#             the same stopping rule; RESULTS.md's ch. 3/4 rows compare with it too), maruf_hatt_enc_off/_on
#             (H-attention encoder, offline/online), maruf_hatt_dec (decoder integration: target context = stage 1's
#             translations, two-pass decoding), maruf_zhang_enc, maruf_concat_warm (2-to-1), maruf_han_enc,
#             maruf_han_dec. Job OUT/doc2_ch4.
#   doc2_ch3  warm-started from doc1's rnnsearch, Adam 1e-3 (MARUF3_STAGE2): maruf3_sentence (the baseline),
#             maruf3_m2c_both (memory network, both memories, decoded by BCD K = 1 with pass 0 = stage 1),
#             maruf3_prev_tgt (PREV-TGT, BCD likewise), maruf3_jean2017, maruf3_wang2017. Job OUT/doc2_ch3.
#   Before a doc2 job: stage 1's greedy translations of every split (OUT/doc2_context/<model>, the generated target
#   context; doc_bcd's pass 0 exactly). After it: the contrastive pronoun accuracy (Table 4.4 layout) of every best
#   checkpoint on the test split's set (33 feminine instances: too few to decide alone) and on the held-out books'
#   fair set (172 masculine, 73 feminine) -> OUT/<job>/contrastive.md.
# Resumable: a finished configuration (result.json) is reused, an interrupted one resumes from its last checkpoint
# (saved at every validation; its patience count travels in it), finished context translations and scores are kept;
# a doc2 job starts only when doc1 has finished the model it warm-starts from.
# CPU cost, measured 2026-11-28 on the Intel Xeon with AVX512-BF16 (no AMX exposed), one thread: CPU seconds per
# training step (the bench configurations' own flags on the same fixed 2,048-token batches of this data, 3
# interleaved rounds; the CPU time does not depend on the load, load average 7.7-8.4 then; wall-clock was 6x it):
#   stage 1: transformer 1.41 s/update (1.40-1.41; 1,675 target tokens), rnnsearch 1.39 (1.38-1.40), i.e. 0.7
#   updates/s on a free core; ~7,800 updates to the stop (as the 10k en->tl baseline) + 39 validations of ~45 s:
#   ~3.5 h per model on a free core, doc1 ~7 h on one lane (~3.5 h on two free cores). A niced lane on a loaded
#   machine gets its share of a core only: 8.5 s/update wall at load 7.7 (16% of a core) would make it ~20 h.
#   stage 2, document batches (~700 target tokens), s/update: maruf_sentence 0.74, hatt_enc_off 1.25, hatt_enc_on
#   1.31, hatt_dec 1.33, zhang_enc 1.11, han_enc 1.00, han_dec 1.20 (concat_warm not timed); maruf3_sentence 1.37,
#   m2c_both 2.23, prev_tgt 1.94, jean2017 2.03, wang2017 1.86. At an assumed 3,000 updates per system (not measured):
#   doc2_ch4 ~6.6 h of training CPU, doc2_ch3 ~7.9 h, + ~11 min of validation per system: ~8.5 h on two free cores
#   (lanes balanced by these costs). "#39 stage 1 recipe" in recipes/bench/RESULTS.md has the same numbers.
source "$(dirname "$0")/../lib.sh"
STAGES=${STAGES:-doc1 doc2}
OUT=$RUNS/converged

if [ "${DATA:-bible}" = tiny ]; then
  OUT=$RUNS/converged_doc_tiny
  DOC=$($PY recipes/nguyen/transfer.py tiny-data --out "$OUT/data" --test 36)
  CURVE_EVERY=${CURVE_EVERY:-2} PATIENCE=${PATIENCE:-2} CAP_MIN=${CAP_MIN:-5} CAP_UPDATES=${CAP_UPDATES:-4}
  N_BOOTSTRAP=${N_BOOTSTRAP:-50}
else
  HELDOUT_BOOKS=${HELDOUT_BOOKS-Jeremiah,Proverbs,Hosea,Lamentations,Revelation_of_John}
  DOC=$(doc_set) || exit 1   # recipes/lib.sh: DOC_SIZE verses as whole chapters, HELDOUT_BOOKS held out
  CURVE_EVERY=${CURVE_EVERY:-200} PATIENCE=${PATIENCE:-5} CAP_MIN=${CAP_MIN:-600} CAP_UPDATES=${CAP_UPDATES:-0}
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
fi
SETS="test${HELDOUT_BOOKS:+ heldout}"   # the contrastive sets (splits of DOC)
RAW=$($PY -c "import sys; from fairseq_ext.tools.evaluation.runs import raw_folder as r; print(r(sys.argv[1]))" "$DOC")
CONV=(--patience "$PATIENCE" --budget-min "$CAP_MIN")
[ "$CAP_UPDATES" = 0 ] || CONV+=(--max-updates "$CAP_UPDATES")

# stage1 MODEL: doc1's best checkpoint of MODEL, once doc1 has finished it (its result.json)
stage1() {
  [ -s "$OUT/doc1/$1/result.json" ] || {
    echo "error: $OUT/doc1/$1 has not finished: run STAGES=doc1 first" >&2; return 1; }
  echo "$OUT/doc1/$1/checkpoint_best.pt"
}

# stage1_context MODEL: its greedy translations of train/valid and the contrastive sets' splits (dictionary units; the
# same generator, document batches and length limits as doc_bcd's pass 0) -> OUT/doc2_context/MODEL/{split}.en, once
stage1_context() {
  local ckpt gen=$OUT/doc2_context/$1 split
  ckpt=$(stage1 "$1") || return 1
  mkdir -p "$gen/log"
  for split in train valid $SETS; do
    [ -s "$gen/$split.en" ] && continue
    $FS/fairseq-generate "$DOC/bin" "${UD[@]}" --task doc_translation --gen-subset $split --path "$ckpt" \
      --decoding-algorithm greedy --beam 1 "${LEN[@]}" --batch-size 128 --cpu \
      > "$gen/log/generate-$split.txt" 2> "$gen/log/generate-$split.log" \
      || { tail -20 "$gen/log/generate-$split.log"; return 1; }
    $PY -m fairseq_ext.tools.corpora.doc_context "$gen/log/generate-$split.txt" --data "$DOC/bin" --split $split \
      --out "$gen" || return 1
  done
}

# contrastive JOB GENERATED: the contrastive pronoun accuracy of each configuration's best checkpoint in OUT/JOB (its
# context flags; the generated target context for those reading it) on the sets of SETS -> OUT/JOB/<config>/
# contrastive.<split>.json, the tables in OUT/JOB/contrastive.md; each set is built once: `test` (the ch. 4 recipe's,
# 33 feminine instances) and, with HELDOUT_BOOKS, `heldout` (the held-out books' fair set of
# examples/selective_attention: antecedent outside the verse, no gendered source pronoun; 172 masculine, 73 feminine)
contrastive() {
  local job=$OUT/$1 split set d c flags
  : > "$job/contrastive.md"
  for split in $SETS; do
    set=$OUT/contrastive.$split.jsonl
    if [ ! -s "$set" ]; then
      local fair=()   # the held-out books' fair set (examples/selective_attention)
      [ "$split" = test ] || fair=(--name-corpus data/bible_es_en/raw/train.en --min-distance 1
                                   --exclude-gendered-source)
      $PY -m fairseq_ext.tools.evaluation.contrastive build --raw "$RAW" --split $split --src es --ref en "${fair[@]}" \
        --out "$set" --stats-json "$OUT/contrastive.$split.stats.json" || return 1
    fi
    if [ ! -s "$set" ]; then echo "(no contrastive instance in the $split set)" >> "$job/contrastive.md"; continue; fi
    for d in "$job"/*/result.json; do
      d=$(dirname "$d") c=$(basename "$(dirname "$d/x")")
      read -r -a flags <<< "$($PY -m fairseq_ext.tools.evaluation.bench_configs --context "$c")"
      [[ " ${flags[*]} " != *" generated "* ]] || flags+=(--doc-generated-dir "$2")
      if [ ! -s "$d/contrastive.$split.json" ]; then   # scored once (a rerun keeps the score)
        $PY -m fairseq_ext.tools.evaluation.contrastive score --set "$set" --spm "$DOC/spm.model" --name "$c" \
          --json "$d/contrastive.$split.json.tmp" "$DOC/bin" --path "$d/checkpoint_best.pt" --task doc_translation \
          "${flags[@]}" --gen-subset $split --cpu > "$d/contrastive.$split.log" 2>&1 \
          || { tail -20 "$d/contrastive.$split.log"; return 1; }
        mv "$d/contrastive.$split.json.tmp" "$d/contrastive.$split.json"
      fi
      { printf '\n### %s, %s set\n\n' "$c" "$split"
        grep -v "^\[\|^INFO\|^DEBUG\|^WARNING" "$d/contrastive.$split.log"; } >> "$job/contrastive.md"
    done
  done
  cat "$job/contrastive.md"
}

# doc2 FAMILY STAGE1_MODEL BASELINE "LANE_A" "LANE_B": one stage-2 job warm-started from doc1's STAGE1_MODEL
doc2() {
  local ckpt
  ckpt=$(stage1 "$2") && stage1_context "$2" || return 1
  curve_job "doc2_$1" "$DOC" es en "" "$4" "$5" "${CONV[@]}" --baseline "$3" --finetune-from-model "$ckpt" \
    --doc-generated-dir "$OUT/doc2_context/$2" && contrastive "doc2_$1" "$OUT/doc2_context/$2"
}

for stage in $STAGES; do
  [ "$stage" != doc2 ] || stage="doc2_ch4 doc2_ch3"
  for s in $stage; do
    case $s in
      doc1) curve_job doc1 "$DOC" es en "" transformer rnnsearch "${CONV[@]}" ;;
      # lanes: the thesis's main systems first; the costlier ones (H-attention, memory network) split over the two
      doc2_ch4) doc2 ch4 transformer maruf_sentence "maruf_sentence,maruf_hatt_enc_off,maruf_zhang_enc,maruf_han_dec" \
                  "maruf_hatt_dec,maruf_hatt_enc_on,maruf_han_enc,maruf_concat_warm" ;;
      doc2_ch3) doc2 ch3 rnnsearch maruf3_sentence "maruf3_sentence,maruf3_prev_tgt,maruf3_wang2017" \
                  "maruf3_m2c_both,maruf3_jean2017" ;;
      *) echo "error: unknown stage '$s' (doc1 doc2 doc2_ch4 doc2_ch3)" >&2; exit 2 ;;
    esac || { echo "error: stage $s failed (logs in $OUT)" >&2; exit 1; }
  done
done

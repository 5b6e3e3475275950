#!/usr/bin/env bash
# SEG-NMT at convergence (Gu ch. 4): the translation memory retrieved from the training set of the converged es->en
# stage 1's data, then SEG-NMT (shallow and deep fusion) warm-started from that stage-1 RNNsearch and trained until
# its dev BLEU stops improving, with learning curves, against the RNNsearch continued the same way, the TM itself
# (the top-1 retrieved target) and CopyNet over the TM; test BLEU overall and per top-1 fuzzy bin (Fig. 4.3: the
# gains grow with the match), paired bootstrap overall and inside each bin.
# Code: recipes/bench/bench.py --curve-every / --patience / --finetune-from-model (recipes/lib.sh curve_job, as
# recipes/bench/converged_doc.sh), the bench configurations seg_rnnsearch / seg_nmt_shallow / seg_nmt_deep /
# seg_copynet (fairseq_ext/tools/evaluation/bench_configs.py), retrieval `fairseq-ext-tm`, the per-bin report
# `python -m fairseq_ext.tools.analysis.tm_analysis fuzzy-bins --n-bootstrap`; the short-budget recipe of the
# chapter is recipes/gu/ch4.sh.
#
#   nice bash recipes/bench/converged_tm.sh                  # every stage (stage 1 reused when finished)
#   STAGES="tm tm2" bash recipes/bench/converged_tm.sh       # stage1 tm tm2 copynet report (+ cost: not by default)
#   DATA=tiny bash recipes/bench/converged_tm.sh             # the committed tiny slice, a few updates (minutes)
#   TABLE=recipes/bench/RESULTS.md bash recipes/bench/converged_tm.sh   # merge the rows into the converged table
#
# Data: the folder of converged_doc.sh (es->en, DOC_SIZE (10,000) training verses drawn as whole chapters: 10,001,
# sentencepiece 4k; full dev 645 / test 1,494 verses): data/bible_es_en/spm4000-train10000docs-seed1-heldout5-f99846bf,
# seen through OUT/data_tm (links to its files, plus the retrieval side files: converged_doc.sh's folder is not written).
# Stages (dev BLEU greedy every CURVE_EVERY (200) updates, stopped after PATIENCE (5) validations without a better
# one, CAP_MIN (600) minutes of training at most per configuration):
#   stage1   the converged RNNsearch every warm-started system starts from: converged_doc.sh's doc1 `rnnsearch`
#            (rnnsearch_bench, OUT_DOC/doc1/rnnsearch, the same job and flags), reused when it has finished; trained
#            here (bench.py --train-only, its lane) when it has not started, refused while another process trains it.
#   tm       retrieval (§4.2.1): the training source side as the memory (word tokens, BM25 100 candidates re-ranked by
#            the fuzzy score of Eq. 4.1, 16 kept; train in train mode: a verse never retrieves itself) -> the side
#            files {train,valid,test}.tm.jsonl of OUT/data_tm/bin; the TM baseline (the top-1 retrieved target of
#            every test verse, OUT/tm/test.txt) and the top-1 fuzzy histogram (OUT/fuzzy_stats.json, fuzzy_hist.png).
#   tm2      warm-started from stage 1, top-2 retrieved pairs, batches of 32 verses, Adam 1e-3 + clip 1 (the
#            thesis's batch; recipes/gu/ch4.sh): seg_rnnsearch (the baseline: stage 1 continued on the same
#            batches, no memory), seg_nmt_shallow (Eq. 4.5, the thesis's model), seg_nmt_deep (Eq. 4.4). Job OUT/tm2.
#   copynet  seg_copynet (CopyNet over the top-1 retrieved target): its decoder GRU reads the selective read and Y'
#            has its own encoder, so a RNNsearch does not warm-start it: from scratch, same batches and stopping
#            rule (the thesis trains every system from scratch). Job OUT/tm2_copynet, one lane.
#   report   test BLEU / chrF with paired bootstrap against seg_rnnsearch (TM, stage 1, SEG-NMT shallow/deep,
#            CopyNet), against the TM and against CopyNet (SEG-NMT shallow/deep), and Fig. 4.3: BLEU per top-1
#            fuzzy bin [0,.3) [.3,.5) [.5,.7) [.7,1] of every system with the bootstrap p against the NMT inside each
#            bin -> OUT/report.md (+ compare_*.json, fig4_3_fuzzy_bins.{json,png}); the dev curves are OUT/tm2/
#            curves.png and OUT/tm2_copynet/curves.png.
#   cost     (not in the default list) CPU seconds per update of each stage-2 configuration on this data with its
#            exact flags (python -m fairseq_ext.tools.evaluation.update_cost: fairseq-train of COST_SHORT (1) and
#            COST_LONG (21) updates, the child's user + system time, the difference / 20 updates, COST_ROUNDS (2)
#            rounds in a rotated order; ~10 min of CPU) -> OUT/cost/cost.md, with the ratios to seg_rnnsearch.
# Resumable: a finished configuration (result.json) is reused, an interrupted one resumes from its last checkpoint
# (saved at every validation, its patience count in it); side files are made once.
# Retrieval on this data (measured): the whole `tm` stage took 25 s of CPU (index, 12,140 queries, TM baseline,
# statistics; 68 s wall at load ~13). Test top-1 fuzzy mean 0.297, median 0.263; 101 of the 1,494 test verses have
# a top-1 fuzzy >= 0.5, 23 >= 0.7, 7 >= 0.9 (Bible verses are rarely near-repeats within 10k verses): the
# high-match bins of Fig. 4.3 are small, read their p-values.
# CPU cost, measured 2026-11-29 (00:00-00:40 UTC) on the Intel Xeon with AVX512-BF16 (no AMX exposed), one thread,
# load average 13-14 (CPU time does not depend on it), stage `cost` on this data (update_cost, exact bench flags, the
# same first batches of 32 verses for every configuration), CPU seconds per update:
#   1 round of 1 and 21 updates (batches 2-21: 1,040 target tokens on average): seg_rnnsearch 1.04, seg_nmt_shallow
#   3.97 (3.8x), seg_copynet 1.88 (1.8x); 2 rotated rounds of 1 and 5 updates (batches 2-5: 881 tokens):
#   seg_rnnsearch 0.55 (0.38-0.72: 4 updates are too few for it), seg_nmt_shallow 3.29 (3.28-3.29), seg_nmt_deep 3.44
#   (3.32-3.55: 1.05x shallow), seg_copynet 1.49 (1.34-1.63). At the epoch's mean batch (1,113 target tokens; cost
#   taken as proportional to tokens): seg_rnnsearch ~1.1, shallow ~4.2, deep ~4.45, CopyNet ~2.0 s per update.
# Estimates (the updates are NOT measured; an epoch is 313 updates): seg_rnnsearch ~2,000 (stage 1 converged on the
# same data: its best comes early, then patience 5 x 200) ~0.6 h; seg_nmt_shallow / _deep ~3,000 each (the stage-2
# assumption of converged_doc.sh; new memory and gate parameters to learn) ~3.5 h / ~3.7 h; seg_copynet from
# scratch as many target tokens as a 10k stage 1 from scratch takes to its stop (the 10k en->tl baseline: 7,800
# updates of ~1,675 target tokens, ~37 epochs) ~11,700 updates, ~6.5 h. ~14.5 CPU-hours of training in all, plus
# the dev validations (645 verses, greedy, every 200 updates: not measured here) and the beam-5 test decodes. On
# two free cores: tm2 ~4.3 h (lane A shallow, lane B seg_rnnsearch then deep), copynet ~6.5 h after it on one lane,
# or STAGES=copynet started in a second shell at the same time (it needs the side files only, not stage 1).
source "$(dirname "$0")/../lib.sh"
STAGES=${STAGES:-stage1 tm tm2 copynet report}
TM=$FS/fairseq-ext-tm

if [ "${DATA:-bible}" = tiny ]; then
  OUT=$RUNS/converged_tm_tiny
  OUT_DOC=$OUT
  DOC=$($PY recipes/nguyen/transfer.py tiny-data --out "$OUT/data" --test 36)
  CURVE_EVERY=${CURVE_EVERY:-2} PATIENCE=${PATIENCE:-2} CAP_MIN=${CAP_MIN:-5} CAP_UPDATES=${CAP_UPDATES:-4}
  N_BOOTSTRAP=${N_BOOTSTRAP:-50} COST_SHORT=${COST_SHORT:-1} COST_LONG=${COST_LONG:-3} COST_ROUNDS=${COST_ROUNDS:-1}
else
  OUT=$RUNS/converged_tm
  OUT_DOC=$RUNS/converged   # converged_doc.sh's
  DOC=$(doc_set) || exit 1
  CURVE_EVERY=${CURVE_EVERY:-200} PATIENCE=${PATIENCE:-5} CAP_MIN=${CAP_MIN:-600} CAP_UPDATES=${CAP_UPDATES:-0}
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000} COST_SHORT=${COST_SHORT:-1} COST_LONG=${COST_LONG:-21} COST_ROUNDS=${COST_ROUNDS:-2}
fi
RAW=$($PY -c "import sys; from fairseq_ext.tools.evaluation.runs import raw_folder as r; print(r(sys.argv[1]))" "$DOC")
VIEW=$OUT/data_tm
CONV=(--patience "$PATIENCE" --budget-min "$CAP_MIN")
[ "$CAP_UPDATES" = 0 ] || CONV+=(--max-updates "$CAP_UPDATES")
STAGE2=(seg_rnnsearch seg_nmt_shallow seg_nmt_deep seg_copynet)
mkdir -p "$OUT"

# stage1: doc1's rnnsearch (the same bench job as converged_doc.sh's doc1), reused once finished, trained here (its
# own lane) when doc1 is idle; refused while a log of doc1 moves (converged_doc.sh's lane may be on the transformer
# and reach rnnsearch later: never two writers)
stage1() {
  local d=$OUT_DOC/doc1/rnnsearch busy
  [ -s "$d/result.json" ] && return 0
  busy=$(find "$OUT_DOC/doc1" -name "*.log" -mmin -30 2> /dev/null | head -n 1)
  if [ -n "$busy" ]; then
    echo "error: $OUT_DOC/doc1 is being trained ($busy written in the last 30 minutes): wait for $d/result.json" >&2
    return 1
  fi
  mkdir -p "$OUT_DOC/doc1"
  $PY recipes/bench/bench.py --data "$DOC" --src es --tgt en --ref2 "" --threads "$THREADS" \
    --n-bootstrap "$N_BOOTSTRAP" --out "$OUT_DOC/doc1" --curve-every "$CURVE_EVERY" "${CONV[@]}" --train-only \
    --configs rnnsearch > "$OUT/stage1.log" 2>&1 || { tail -20 "$OUT/stage1.log"; return 1; }
}

# stage1_ckpt: the stage-1 checkpoint, once stage 1 has finished
stage1_ckpt() {
  [ -s "$OUT_DOC/doc1/rnnsearch/result.json" ] || {
    echo "error: $OUT_DOC/doc1/rnnsearch has not finished: run STAGES=stage1 first" >&2; return 1; }
  echo "$OUT_DOC/doc1/rnnsearch/checkpoint_best.pt"
}

# tm: OUT/data_tm = DOC's files as links + the retrieval side files; the TM baseline and the fuzzy statistics
tm() {
  local f split mode
  mkdir -p "$VIEW/bin" "$OUT/tm"
  for f in "$DOC"/*; do [ -d "$f" ] || ln -sfn "$(realpath "$f")" "$VIEW/"; done
  for f in "$DOC"/bin/*; do ln -sfn "$(realpath "$f")" "$VIEW/bin/"; done
  $TM build-index --memory-src "$RAW/train.es" --index "$OUT/tm_index" > "$OUT/tm/retrieve.log" 2>&1 \
    || { tail "$OUT/tm/retrieve.log"; return 1; }
  for split in test valid train; do
    [ -s "$VIEW/bin/$split.tm.jsonl" ] && [ -s "$VIEW/bin/$split.tm.meta.json" ] && continue
    mode=(); [ $split != train ] || mode=(--train-mode)
    $TM retrieve --index "$OUT/tm_index" --memory-src "$RAW/train.es" --query "$RAW/$split.es" --out-dir "$VIEW/bin" \
      --split $split "${mode[@]}" >> "$OUT/tm/retrieve.log" 2>&1 || { tail "$OUT/tm/retrieve.log"; return 1; }
  done
  $TM tm-baseline --side "$VIEW/bin/test.tm.jsonl" --memory-tgt "$RAW/train.en" --out "$OUT/tm/test.txt"
  $TM stats --side "$VIEW/bin/test.tm.jsonl" --plot "$OUT/fuzzy_hist.png" --json "$OUT/fuzzy_stats.json" > /dev/null
}

need_tm() {
  [ -s "$VIEW/bin/train.tm.jsonl" ] || { echo "error: $VIEW has no side files: run STAGES=tm first" >&2; return 1; }
}

# cost: CPU seconds per update of each stage-2 configuration (header) -> OUT/cost/cost.md. From a random
# initialisation: the same model, batches and flags as the warm start (CopyNet has none), hence the same cost.
cost() {
  need_tm || return 1
  $PY -m fairseq_ext.tools.evaluation.update_cost --data "$VIEW" --configs "$(IFS=,; echo "${STAGE2[*]}")" \
    --short "$COST_SHORT" --long "$COST_LONG" --rounds "$COST_ROUNDS" --threads "$THREADS" --out "$OUT/cost" \
    > "$OUT/cost.log" 2>&1 || { tail -20 "$OUT/cost.log"; return 1; }
  echo "(load average at the end: $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%H:%M)Z)" >> "$OUT/cost/cost.md"
  cat "$OUT/cost/cost.md"
}

# report: the comparisons and Fig. 4.3 (header) -> OUT/report.md
report() {
  local ckpt nmt tm=$OUT/tm/test.txt s name
  ckpt=$(stage1_ckpt) && need_tm || return 1
  nmt=$OUT/tm2/seg_rnnsearch/generate.out
  [ -s "$OUT/tm2/seg_rnnsearch/result.json" ] || { echo "error: run STAGES=tm2 first" >&2; return 1; }
  declare -A hyp=([TM]=$tm [NMT-stage1]=$(dirname "$ckpt")/generate.out
                  [SEG-NMT]=$OUT/tm2/seg_nmt_shallow/generate.out [SEG-NMT-deep]=$OUT/tm2/seg_nmt_deep/generate.out
                  [CopyNet]=$OUT/tm2_copynet/seg_copynet/generate.out)
  local order=(TM NMT-stage1 SEG-NMT SEG-NMT-deep CopyNet) have=()
  for name in "${order[@]}"; do [ ! -s "${hyp[$name]}" ] || have+=("$name"); done
  hyp[NMT]=$nmt
  {
    echo "# SEG-NMT at convergence (es->en test, $(wc -l < "$RAW/test.en") verses, beam 5, K = 2)"
    echo
    echo "Stage 1: \`$ckpt\`; memory = the $(wc -l < "$RAW/train.en") training verses; dev curves: tm2/curves.png,"
    echo "tm2_copynet/curves.png. Systems (in compare_*.json by file): NMT = $nmt"
    for name in "${have[@]}"; do echo "- $name = ${hyp[$name]}"; done
    echo
    $PY -c "import json, sys; s = json.load(open(sys.argv[1])); print(f\"Retrieval (test): top-1 fuzzy mean \
{s['top1_mean']:.3f}, median {s['top1_median']:.3f}; >= 0.5: {s['top1_ge_0.5']}, >= 0.7: {s['top1_ge_0.7']}, \
>= 0.9: {s['top1_ge_0.9']} (fuzzy_hist.png)\")" "$OUT/fuzzy_stats.json"
  } > "$OUT/report.md"
  { compare_to NMT nmt "${have[@]}"; compare_to TM tm SEG-NMT SEG-NMT-deep CopyNet
    compare_to CopyNet copynet SEG-NMT SEG-NMT-deep; } >> "$OUT/report.md"
  local bins=(--hyp "NMT=$nmt")
  for name in "${have[@]}"; do bins+=(--hyp "$name=${hyp[$name]}"); done
  printf '\n## Fig. 4.3: BLEU per top-1 fuzzy bin, bootstrap p against NMT inside each bin %s\n\n' \
    "(fig4_3_fuzzy_bins.png)" >> "$OUT/report.md"
  $PY -m fairseq_ext.tools.analysis.tm_analysis fuzzy-bins --side "$VIEW/bin/test.tm.jsonl" --ref "$RAW/test.en" \
    "${bins[@]}" --n-bootstrap "$N_BOOTSTRAP" --json "$OUT/fig4_3_fuzzy_bins.json" --plot "$OUT/fig4_3_fuzzy_bins.png" \
    --title "es->en test (converged): BLEU by top-1 fuzzy score" 2>> "$OUT/report.log" >> "$OUT/report.md" \
    || { tail "$OUT/report.log"; return 1; }
  cat "$OUT/report.md"
}

# compare_to BASELINE TAG NAME...: paired bootstrap of the systems NAME... (those that exist) against BASELINE
compare_to() {
  local b=$1 o=$2 args=() n
  shift 2
  [ -s "${hyp[$b]}" ] || return 0
  for n in "$@"; do [ "$n" = "$b" ] || [[ " ${have[*]} " != *" $n "* ]] || args+=(--system "${hyp[$n]}"); done
  [ ${#args[@]} -gt 0 ] || return 0
  printf '\n## Against %s\n\n```\n' "$b"
  $PY -m fairseq_ext.tools.evaluation.score compare --baseline "${hyp[$b]}" "${args[@]}" --ref "$RAW/test.en" \
    --n-bootstrap "$N_BOOTSTRAP" --json "$OUT/compare_$o.json" 2>> "$OUT/report.log" || return 1
  printf '```\n'
}

for s in $STAGES; do
  case $s in
    stage1) stage1 ;;
    tm) tm ;;
    tm2) ckpt=$(stage1_ckpt) && need_tm \
           && curve_job tm2 "$VIEW" es en "" seg_nmt_shallow seg_rnnsearch,seg_nmt_deep "${CONV[@]}" \
                --baseline seg_rnnsearch --finetune-from-model "$ckpt" ;;
    copynet) need_tm && LANES=1 curve_job tm2_copynet "$VIEW" es en "" seg_copynet "" "${CONV[@]}" \
               --baseline seg_copynet ;;
    report) report ;;
    cost) cost ;;
    *) echo "error: unknown stage '$s' (stage1 tm tm2 copynet report cost)" >&2; exit 2 ;;
  esac || { echo "error: stage $s failed (logs in $OUT)" >&2; exit 1; }
done

#!/usr/bin/env bash
# Bilingual multi-speaker conversation translation at convergence (Maruf ch. 5, Bi-MSMT, Table 5.3): a converged
# stage-1 base (two RNNsearch directions, no context), then the Table 5.3 systems warm-started from it, each trained
# until its dev BLEU stops improving, with learning curves, against the base continued the same way; the test
# split decoded greedily online (the history holds the model's own translations), BLEU overall and per direction
# with the paired bootstrap against the continued base.
# Code: recipes/bench/bench.py --curve-every / --patience (recipes/lib.sh curve_job: its lanes, curves and the
# "converged" table of RESULTS.md), --finetune-from-model (the warm start) and --doc-generated-dir (the stage-1
# translations as the target history of the systems that read it); the configurations maruf5_* of
# fairseq_ext/tools/evaluation/bench_configs.py; Table 5.3's layout by examples/multi_speaker_conversations/report.py.
#
#   nice bash recipes/bench/converged_conv.sh                  # both stages (stage 2 on two single-thread lanes)
#   STAGES=bimsmt1 nice bash recipes/bench/converged_conv.sh   # bimsmt1 bimsmt2 cost
#   DATA=tiny bash recipes/bench/converged_conv.sh             # the committed tiny conversations, a few updates
#   TABLE=recipes/bench/RESULTS.md bash recipes/bench/converged_conv.sh   # merge the rows into the converged table
#
# Data: data/bible_conv_es_en (python -m fairseq_ext.tools.corpora.conversations build, as recipes/maruf/ch5.sh: the
# chapters of the gospels / Acts / Revelation / Song of Songs in which Jesus or the Beloved speak English (en->es)
# and everyone else Spanish (es->en); 75/6/15 conversations, 2,953/202/630 verses, test = Mark; the es-en Bible's
# sentencepiece 8k, one joint dictionary); whole conversations per batch (<= 2,048 tokens, 26 sentences and ~780
# target tokens on average: ~110 batches an epoch). Its own stage 1: no other recipe trains this shape.
# Stages (every flag is a bench_configs configuration's; dev BLEU greedy online every CURVE_EVERY (110 = one epoch)
# updates, stopped after PATIENCE (5) validations without a better one, CAP_MIN (600) minutes at most each):
#   bimsmt1  maruf5_base from scratch (bimsmt_rnn_base: bi-GRU 256, 2-layer GRU decoder 256, alignment 128, dropout
#            0.2, Adam 1e-3, clip 1). Job OUT/bimsmt1 (its test row is greedy online, as every row here).
#   bimsmt2  stage 1's greedy online translations of train/valid/test (OUT/bimsmt2_context: the target history the
#            target and dual systems train on, the thesis's §5.7), then warm-started from bimsmt1's best checkpoint:
#            maruf5_base (the baseline: the base continued on the same batches under the same stopping rule),
#            maruf5_src_lsa (Source Context, Lang-Specific Sentence-level Attention), maruf5_src_la (Lang-Specific
#            turn Attention), maruf5_tgt (Target Context), maruf5_dual (Dual Context Src-Tgt), maruf5_dual_mix
#            (Src-Tgt-Mix); InitDec, the NMT encoder's sentence vectors. Job OUT/bimsmt2; Table 5.3's layout (BLEU
#            overall / en->es / es->en, chrF, paired bootstrap per column against maruf5_base) in
#            OUT/bimsmt2/table53/results.md.
#   cost     (not in the default list) CPU seconds per update of every configuration on this data with its exact
#            flags (python -m fairseq_ext.tools.evaluation.update_cost, COST_ROUNDS rotated rounds) -> OUT/bimsmt_cost.
# Not run here (Table 5.3's other rows): the frozen bi-RNNLM sentence vectors (the thesis's public-data setting:
# fairseq's language_modeling task does not train on this numpy yet; recipes/maruf/ch5.sh MODE=thesis prints it),
# Direct Transformation / Hierarchical Gating / Combined Attention (recipes/maruf/ch5.sh SYSTEMS=src_direct,...; no
# bench configuration: they would need rows maruf5_src_direct/_hier/_combined, ~the src_lsa cost each) and the
# AddDec / InitDec+AddDec injections (rows with --ctx-inject adddec / initdec_adddec).
# Resumable: a finished configuration (result.json) is reused, an interrupted one resumes from its last checkpoint
# (saved at every validation; its patience count travels in it), finished stage-1 translations are kept; bimsmt2
# starts only when bimsmt1 has finished.
# Measured (2026-11-28 23:45 - 2026-11-29 00:54 UTC, Intel Xeon model 207 with AVX512-BF16, no AMX exposed; one
# thread; load average 7-18 on the 2 cores, wall-clock up to ~15x the CPU time): CPU seconds per update (python -m
# fairseq_ext.tools.evaluation.update_cost, `STAGES=cost`: each configuration's exact training flags on this data,
# runs of 2 and 8 updates, the difference over the same 6 conversation batches (~780 target tokens each), rotated
# rounds; the reference target history, the same work as the generated one; the CPU time does not depend on the
# load), median of 3 rounds (range), x maruf5_base:
#   maruf5_base 1.27 (1.15-1.35), src_lsa 1.65 (1.29-1.68) x1.30, src_la 1.71 (1.59-1.72) x1.35, tgt 1.78
#   (1.58-1.84) x1.40, dual 1.82 (1.80-1.92) x1.44, dual_mix 1.62 (1.55-2.01) x1.27 (its spread covers dual's).
# One validation (dev loss + greedy online decoding of the 202 dev verses): 19.3 CPU s of decoding for the 9,569
# tokens a 20-update base wrote (fairseq-generate, 27.1 s less 7.8 s of start-up); at the references' 5,950
# tokens ~12 s, ~15 s with the dev loss for the base and ~20 s for a context model (decoding x1.3, the ch. 5 CPU
# run's ratio). Stage 1's translations of train/valid/test (~106k tokens): ~4 min, once.
# Estimate (updates not measured here: basis): the thesis trains the base 15 epochs and the contextual models 30
# (§5.7); an epoch is 110 updates here; the ch. 5 CPU run's base was still lowering its dev loss after 1,166 + 330
# updates. Planning figures: stage 1 stops near 3,000 updates (best ~2,450 + 5 epochs of patience), each stage-2
# system at most 3,300 (30 epochs). Stage 1: 3,000 x 1.27 s + 27 validations x 15 s = ~1.2 h of CPU. Stage 2:
# 3,300 x the s/update above + 30 validations (x ~15-20 s) per system: base 1.3 h, src_lsa 1.7, src_la 1.7, tgt
# 1.8, dual 1.8, dual_mix 1.7: ~10 h of CPU, ~5.2 h on two free cores (lane A base+src_lsa+tgt 4.8 h, lane B
# dual+src_la+dual_mix 5.2 h). Both stages: ~11 h of CPU, ~6.5 h on two free cores; patience stops earlier
# shorten stage 2 (the thesis's 30 epochs are an upper bound, not a measured stop).
# On this machine under its present load a niced lane gets ~7% of a core (16 s/update wall for the base's
# ~1.2 s of CPU in the real-data check): the same work would take ~15x longer; run it on free cores or a GPU.
source "$(dirname "$0")/../lib.sh"
STAGES=${STAGES:-bimsmt1 bimsmt2}
OUT=$RUNS/converged
CONFIGS=(maruf5_base maruf5_src_lsa maruf5_src_la maruf5_tgt maruf5_dual maruf5_dual_mix)

if [ "${DATA:-bible}" = tiny ]; then
  # the committed tiny fixture (24/5/12 lines, whitespace tokens: post-processing none), one joint dictionary
  OUT=$RUNS/converged_conv_tiny
  CONV=$OUT/data
  if [ ! -s "$CONV/bin/test.conv" ]; then
    rm -rf "$CONV" && mkdir -p "$CONV" && cp -r tests/data/conversations "$CONV/raw"
    $FS/fairseq-preprocess -s src -t tgt --joined-dictionary --trainpref "$CONV/raw/train" \
      --validpref "$CONV/raw/valid" --testpref "$CONV/raw/test" --destdir "$CONV/bin.tmp" --workers 1 \
      > "$OUT/preprocess.log" 2>&1 \
      || { tail -20 "$OUT/preprocess.log"; exit 1; }
    echo '{"post_process": "none"}' > "$CONV/segment.json"   # bench.py: whitespace tokens, nothing to detokenise
    cp "$CONV"/raw/*.conv "$CONV/bin.tmp/" && mv "$CONV/bin.tmp" "$CONV/bin"
  fi
  CURVE_EVERY=${CURVE_EVERY:-2} PATIENCE=${PATIENCE:-2} CAP_MIN=${CAP_MIN:-5} CAP_UPDATES=${CAP_UPDATES:-4}
  N_BOOTSTRAP=${N_BOOTSTRAP:-50} COST_ROUNDS=${COST_ROUNDS:-1} COST_SHORT=1 COST_LONG=2
else
  CONV=data/bible_conv_es_en
  if [ ! -s $CONV/bin/test.conv ]; then
    [ -s data/bible_es_en/spm8000/bin/dict.en.txt ] || bible_data
    $PY -m fairseq_ext.tools.corpora.conversations build --out $CONV --spm data/bible_es_en/spm8000/spm.model \
      --dict data/bible_es_en/spm8000/bin/dict.en.txt || exit 1
  fi
  CURVE_EVERY=${CURVE_EVERY:-110} PATIENCE=${PATIENCE:-5} CAP_MIN=${CAP_MIN:-600} CAP_UPDATES=${CAP_UPDATES:-0}
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000} COST_ROUNDS=${COST_ROUNDS:-3} COST_SHORT=2 COST_LONG=8
fi
mkdir -p "$OUT"
# bench.py scores against the folder's own raw/ (runs.raw_folder) and detokenises sentencepiece (no segment.json)
BIN=$CONV/bin
CONV_ARGS=(--patience "$PATIENCE" --budget-min "$CAP_MIN" --baseline maruf5_base)
[ "$CAP_UPDATES" = 0 ] || CONV_ARGS+=(--max-updates "$CAP_UPDATES")
T=(--task conversation_translation --conv-langs en,es)

# stage1: bimsmt1's best checkpoint of maruf5_base, once bimsmt1 has finished it (its result.json)
stage1() {
  [ -s "$OUT/bimsmt1/maruf5_base/result.json" ] || {
    echo "error: $OUT/bimsmt1/maruf5_base has not finished: run STAGES=bimsmt1 first" >&2; return 1; }
  echo "$OUT/bimsmt1/maruf5_base/checkpoint_best.pt"
}

# stage1_context: its greedy online translations of every split (dictionary units, re-encoded by the task) ->
# OUT/bimsmt2_context/{split}.tgt, once; test's is read by the data loader only (decoding uses its own history)
stage1_context() {
  local ckpt gen=$OUT/bimsmt2_context split
  ckpt=$(stage1) || return 1
  mkdir -p "$gen/log"
  for split in train valid test; do
    [ -s "$gen/$split.tgt" ] && continue
    $FS/fairseq-generate "$BIN" "${UD[@]}" "${T[@]}" --gen-subset $split --path "$ckpt" --beam 1 "${LEN[@]}" \
      --batch-size 64 --cpu > "$gen/log/generate-$split.txt" 2> "$gen/log/generate-$split.log" \
      || { tail -20 "$gen/log/generate-$split.log"; return 1; }
    $PY -m fairseq_ext.tools.corpora.doc_context "$gen/log/generate-$split.txt" --data "$BIN" --split $split \
      --out "$gen" || return 1
  done
}

# table53: Table 5.3's layout of the stage-2 job (BLEU overall and per direction, chrF, bootstrap per column)
table53() {
  local c args=() logs=() job=$OUT/bimsmt2
  for c in "${CONFIGS[@]}"; do
    args+=(--system "${c#maruf5_}=$job/$c/generate.out")   # the report's system names (its thesis column)
    logs+=(--log "${c#maruf5_}=$job/$c/train.log")
  done
  mkdir -p "$job/table53"
  $PY examples/multi_speaker_conversations/report.py report --out "$job/table53" --conv "$BIN/test.conv" \
    --ref "$CONV/raw/test.tgt" --langs en,es --n-bootstrap "$N_BOOTSTRAP" "${args[@]}" "${logs[@]}" \
    --thesis-pair en-de --title "Bible es<->en conversations at convergence (job bimsmt2, warm-started from $(stage1))"
}

for stage in $STAGES; do
  case $stage in
    bimsmt1) LANES=1 curve_job bimsmt1 "$CONV" src tgt "" maruf5_base "" "${CONV_ARGS[@]}" ;;
    # lanes: the thesis's headline pair first (the continued base | Dual Src-Tgt), the costlier target-history
    # systems split over the two
    bimsmt2) ckpt=$(stage1) && stage1_context \
               && curve_job bimsmt2 "$CONV" src tgt "" "maruf5_base,maruf5_src_lsa,maruf5_tgt" \
                    "maruf5_dual,maruf5_src_la,maruf5_dual_mix" "${CONV_ARGS[@]}" --finetune-from-model "$ckpt" \
                    --doc-generated-dir "$OUT/bimsmt2_context" \
               && table53 ;;
    cost) $PY -m fairseq_ext.tools.evaluation.update_cost --data "$CONV" --src src --tgt tgt \
            --configs "$(IFS=,; echo "${CONFIGS[*]}")" --short $COST_SHORT --long $COST_LONG --rounds "$COST_ROUNDS" \
            --threads "$THREADS" --out "$OUT/bimsmt_cost" ;;
    *) echo "error: unknown stage '$stage' (bimsmt1 bimsmt2 cost)" >&2; exit 2 ;;
  esac || { echo "error: stage $stage failed (logs in $OUT)" >&2; exit 1; }
done

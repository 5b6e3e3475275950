#!/usr/bin/env bash
# Gu thesis ch. 2 (background systems reused by ch. 3-9): RNNsearch -- bidirectional GRU/LSTM encoder,
# Bahdanau MLP attention, plain or dl4mt conditional-GRU decoder -- and the Enc-Dec baseline without
# attention (model `rnnsearch`, fairseq_ext/models/rnnsearch.py), trained by maximum likelihood (Eq. 2.8),
# decoded by the §2.3 algorithms of task `translation_decoding` (fairseq_ext/generators/decoding.py):
#   --decoding-algorithm greedy           Eq. 2.10
#   --decoding-algorithm beam             fairseq's beam search (K live hypotheses until K have finished)
#   --decoding-algorithm shrinking_beam   Eqs. 2.11-2.12, beam K -> K-1 per finished hypothesis, Eq. 2.13
#                                         re-ranking with alpha = --lenpen (|Y| counts </s>)
#   --decoding-algorithm npd              Eq. 2.14: --npd-samples N noisy greedy decodes, noise
#                                         N(0, sigma0^2/t^2) (--npd-sigma0) on z_{t-1}, noise-free rescoring
# Spec: specs/004a-gu-data-efficient.md §2 (and 004b §1, Maruf 003 §1.1 for the shared sizes).
#
#   bash recipes/gu/ch2.sh                      # Bible es->en on this CPU (budget below)
#   DATA=tiny bash recipes/gu/ch2.sh            # the committed tiny slice, tiny model, a few updates (~2 min)
#   DECODE_CKPT=ckpt.pt bash recipes/gu/ch2.sh  # only step 2 (the decoding table) on that es-en checkpoint
#                                               # (NPD_SIGMAS=0.5: a single sigma0, no search on valid;
#                                               # SHRINKING=0: without the shrinking beam)
#   MODE=thesis bash recipes/gu/ch2.sh          # print the thesis-setting commands (RUN=1: run them)
#
# ---- Thesis settings (MODE=thesis; binarized data you provide, a GPU assumed) ----------------------------
# Archs of `rnnsearch` (sizes: embedding / hidden per encoder direction and decoder / attention MLP):
#   rnnsearch_copynet_syn  GRU 150/300/300, plain decoder -- Table 3.2 "RNNSearch" (synthetic rules), Table 3.5
#   encdec_copynet_syn     the same without attention (fixed context [fwd h_T'; bwd h_1]) -- Table 3.2 "Enc-Dec"
#   rnnsearch_lcsts        GRU 350/500/500 -- LCSTS (Table 3.4 setting)
#   rnnsearch_jrc          GRU 512/1024/1024, conditional GRU -- the SEG-NMT base NMT (ch. 4)
#   rnnsearch_uninmt       1-layer bi-LSTM encoder, 2-layer LSTM attention decoder, 512, dropout 0.4 (ch. 5)
#   rnnsearch_gu_wmt15     GRU 512/1028/1028, conditional GRU, no dropout (ch. 7 trainable greedy decoding)
#   rnnsearch_gu_wmt15_uni the same with a left-to-right encoder (ch. 9 simultaneous-translation environment)
#   rnnsearch_maruf(_small) Maruf ch. 3/4 (5): bi-GRU, 2-layer GRU decoder, 512/512/256 (256/256/128)
# Training: plain MLE (criterion cross_entropy, no label smoothing in ch. 2-6), Adam 1e-3 (thesis: Adadelta or
# Adam; batch and schedule are not given -- REF-CODE CopyNet: batch 20 sentences, dropout 0), clip 1.0,
# early stopping on dev. Decoding: beam 10 in ch. 3 (exact match on synthetic/dialogue); alpha ~ 0.6 in
# Eq. 2.13 "in practice"; sigma0 and N of NPD are not given (sweep sigma0 in {0.1, 0.3, 0.5, 1.0}, N = 8).
# The synthetic copy-rule data and CopyNet itself come with issue 11 part 2; the commands below take THESIS_DATA.
#
# ---- Bible mode (real data, this 2-core CPU) -------------------------------------------------------------
# data/bible_es_en/spm8000 (sentencepiece 8k, joined vocabulary), es->en, second reference KJV when present.
#   1. recipes/bench/bench.py trains `transformer` (the baseline) and `rnnsearch` (rnnsearch_bench: bi-GRU
#      2x288 + attention 288 + conditional GRU 576, emb 256, shared embeddings, 7.46M parameters vs 7.58M;
#      Adam 1e-3, cross-entropy) for BUDGET_MIN (15) minutes each, decodes test with fairseq's beam 5, and
#      bootstraps rnnsearch against the transformer -> runs/gu_ch2/{transformer,rnnsearch}/ (the bench table).
#   2. the rnnsearch checkpoint is decoded on test with greedy, beam 5, shrinking_beam K=5 (alpha 1 and 0.6)
#      and NPD with N in NPD_NS (4,8,16) at the sigma0 of NPD_SIGMAS (0.3,0.5,1.0) that is best on valid with
#      N=NPD_SAMPLES (8); decode seconds (fairseq-generate's own count, batch 64, 1 thread) as ratios to
#      greedy, and every system bootstrapped against greedy -> runs/gu_ch2/decoding/results.md.
# CPU budget (THREADS=1): 2 x BUDGET_MIN of training (~30 min) + ~40 min of decoding (estimate: the
# RNN decodes ~1,500 test verses in a few minutes greedily; NPD runs N rows per sentence, on valid once per
# sigma0). The CPU trains the RNN far slower per token than the transformer (small per-step matrix
# products), so at equal minutes it sees fewer updates: read the transformer row as the budget's reference.
USER_BUDGET=${BUDGET_MIN:-}
source "$(dirname "$0")/../lib.sh"
PY=.venv/bin/python
NPD_SAMPLES=${NPD_SAMPLES:-8}          # N of the sigma0 search on valid
NPD_NS=${NPD_NS:-4,8,16}               # the N decoded on test at the chosen sigma0
NPD_SIGMAS=${NPD_SIGMAS:-0.3,0.5,1.0}

if [ "$MODE" = thesis ]; then
  D=${THESIS_DATA:-data-bin/copy_rules}
  C=checkpoints/gu_ch2
  COMMON=(--user-dir fairseq_ext --task translation_decoding --criterion cross_entropy --optimizer adam
          --lr 0.001 --clip-norm 1.0 --batch-size 20 --max-epoch 50 --patience 5)
  for arch in ${ARCHS:-rnnsearch_copynet_syn encdec_copynet_syn}; do
    thesis .venv/bin/fairseq-train "$D" "${COMMON[@]}" --arch "$arch" --save-dir $C/$arch
    for alg in greedy "shrinking_beam --beam 10" "beam --beam 10 --nbest 10" \
               "npd --npd-samples 8 --npd-sigma0 0.5"; do
      # shellcheck disable=SC2086
      thesis .venv/bin/fairseq-generate "$D" --user-dir fairseq_ext --task translation_decoding \
        --path $C/$arch/checkpoint_best.pt --decoding-algorithm $alg --gen-subset test
    done
  done
  exit 0
fi

# decode NAME CKPT SUBSET FLAGS...: fairseq-generate of $DATA_BIN with task translation_decoding -> $DEC/NAME.out
decode() {
  local name=$1 ckpt=$2 subset=$3
  shift 3
  if [ ! -s "$DEC/$name.out" ] || [ -n "${FORCE:-}" ]; then
    .venv/bin/fairseq-generate "$DATA_BIN" --user-dir fairseq_ext --task translation_decoding --path "$ckpt" \
      --gen-subset "$subset" --cpu --batch-size 64 "${LEN[@]}" --post-process "$POST" \
      --seed 1 "$@" > "$DEC/$name.out.tmp" 2> "$DEC/$name.log"
    mv "$DEC/$name.out.tmp" "$DEC/$name.out"
  fi
}

# bleu FILE REF: corpus BLEU of a fairseq-generate output
bleu() {
  $PY -m fairseq_ext.tools.evaluation.score score --hyp "$1" --ref "$2" --json "$1.json" > /dev/null
  $PY -c "import json,sys; print(json.load(open(sys.argv[1]))['bleu'])" "$1.json"
}

# decoding_table DATA_BIN CKPT: the §2.3 decoders on one rnnsearch checkpoint (sigma0 chosen on valid);
# the references and the detokenisation come from DATA_BIN/segment.json
decoding_table() {
  DATA_BIN=$1
  local ckpt=$2 raw
  raw=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['raw'])" "$DATA_BIN/segment.json")
  [ -d "$raw" ] || raw=$(dirname "$(dirname "$DATA_BIN")")/raw  # the folder was built elsewhere and moved
  POST=$($PY -c "import json,sys; print(json.load(open(sys.argv[1])).get('post_process','sentencepiece'))" \
    "$DATA_BIN/segment.json")
  mkdir -p "$DEC"
  local best_sigma="" best_bleu=-1 s b
  if [[ "$NPD_SIGMAS" != *,* ]]; then
    best_sigma=$NPD_SIGMAS  # one sigma0: nothing to choose on valid
  else
    for s in ${NPD_SIGMAS//,/ }; do
      decode "valid_npd_s$s" "$ckpt" valid --decoding-algorithm npd --npd-samples "$NPD_SAMPLES" --npd-sigma0 "$s"
      b=$(bleu "$DEC/valid_npd_s$s.out" "$raw/valid.en")
      echo "valid NPD N=$NPD_SAMPLES sigma0=$s: BLEU $b"
      if $PY -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "$b" "$best_bleu"; then
        best_sigma=$s; best_bleu=$b
      fi
    done
  fi
  decode greedy "$ckpt" test --decoding-algorithm greedy
  decode beam5 "$ckpt" test --decoding-algorithm beam --beam 5
  local names=(greedy beam5) n
  if [ "${SHRINKING:-1}" = 1 ]; then  # SHRINKING=0: skip the shrinking beam (a per-sentence loop: slow)
    decode shrinking_beam5_a1 "$ckpt" test --decoding-algorithm shrinking_beam --beam 5 --lenpen 1.0
    decode shrinking_beam5_a0.6 "$ckpt" test --decoding-algorithm shrinking_beam --beam 5 --lenpen 0.6
    names+=(shrinking_beam5_a1 shrinking_beam5_a0.6)
  fi
  for n in ${NPD_NS//,/ }; do
    decode "npd${n}_s$best_sigma" "$ckpt" test --decoding-algorithm npd --npd-samples "$n" --npd-sigma0 "$best_sigma"
    names+=("npd${n}_s$best_sigma")
  done
  local systems=()
  for f in "${names[@]:1}"; do
    systems+=(--system "$DEC/$f.out")
  done
  {
    if [[ "$NPD_SIGMAS" == *,* ]]; then how="chosen on valid with N=$NPD_SAMPLES"; else how="fixed (NPD_SIGMAS)"; fi
    echo "# Gu ch. 2 decoding of $ckpt ($DATA_BIN, test; sigma0 $best_sigma $how)"
    echo
    echo "| decoder | BLEU | decode seconds | time x greedy |"
    echo "|---|---|---|---|"
    local g t
    g=$($PY -c "import re,sys; print(re.search(r'in ([0-9.]+)s', open(sys.argv[1]).read()).group(1))" "$DEC/greedy.log")
    for f in "${names[@]}"; do
      t=$($PY -c "import re,sys; print(re.search(r'in ([0-9.]+)s', open(sys.argv[1]).read()).group(1))" "$DEC/$f.log")
      echo "| $f | $(bleu "$DEC/$f.out" "$raw/test.en") | $t | $($PY -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.2f}')" "$t" "$g") |"
    done
    echo
    echo '```'
    $PY -m fairseq_ext.tools.evaluation.score compare --baseline "$DEC/greedy.out" "${systems[@]}" --ref "$raw/test.en" \
      --n-bootstrap "${N_BOOTSTRAP:-1000}"
    echo '```'
  } > "$DEC/results.md"
  cat "$DEC/results.md"
}

if [ "${DATA:-bible}" = tiny ]; then
  # the committed tiny slice (209 training verses), sentencepiece 300, rnnsearch_tiny, a few updates
  OUT=runs/gu_ch2_tiny
  if [ ! -d $OUT/data/bin ]; then
    $PY -m fairseq_ext.tools.corpora.corpora bpe tests/data/bible_tiny $OUT/data/seg --src es --tgt en \
      --method sentencepiece --vocab-size 300
    $PY -m fairseq_ext.tools.corpora.corpora binarize $OUT/data/seg --out $OUT/data --src es --tgt en
  fi
  if [ ! -s $OUT/model/checkpoint_best.pt ] || [ -n "${FORCE:-}" ]; then
    # the bench's RNNSEARCH_OPTIM (fairseq_ext/tools/evaluation/bench_configs.py)
    .venv/bin/fairseq-train $OUT/data/bin --user-dir fairseq_ext --task translation_decoding --arch rnnsearch_tiny \
      --optimizer adam --adam-betas '(0.9,0.98)' --lr 1e-3 --clip-norm 1.0 --max-tokens 2048 \
      --criterion cross_entropy --max-update "${MAX_UPDATE:-40}" --cpu --seed 1 \
      --save-dir $OUT/model --no-epoch-checkpoints --no-progress-bar --log-format simple --log-interval 10
  fi
  DEC=$OUT/decoding N_BOOTSTRAP=${N_BOOTSTRAP:-100} decoding_table $OUT/data/bin $OUT/model/checkpoint_best.pt
  exit 0
fi

bible_data
if [ -n "${DECODE_CKPT:-}" ]; then  # only the decoding table, of any es-en checkpoint (a transformer's too: NPD
  # then perturbs the last decoder layer's output) -> runs/gu_ch2/decoding_<DECODE_NAME>/
  DEC=runs/gu_ch2/decoding_${DECODE_NAME:-$(basename "$(dirname "$DECODE_CKPT")")}
  decoding_table data/bible_es_en/spm8000/bin "$DECODE_CKPT"
  exit 0
fi
bench gu_ch2 transformer,rnnsearch   # BUDGET_MIN minutes each -> runs/gu_ch2/{transformer,rnnsearch}/
DEC=runs/gu_ch2/decoding
decoding_table data/bible_es_en/spm8000/bin runs/gu_ch2/rnnsearch/checkpoint_best.pt

#!/usr/bin/env bash
# Nguyen thesis ch. 3 (Nguyen & Chiang, IJCNLP 2017): transfer learning across low-resource, related
# languages. Train a parent on a related high-resource pair, copy ALL its parameters (source
# embeddings included) into the child and continue on the child pair; the vocabulary is made shareable
# by transliterating the child into the parent's script and by ONE joint BPE learned on parent+child
# source+target (fairseq_ext/data/transliterate.py, fairseq_ext/data/transfer.py, task
# transfer_translation: --finetune-from-model, --freeze-target-embeddings; driver recipes/nguyen/transfer.py).
#
#   bash recipes/nguyen/ch3.sh                               # Bible: both experiments below
#   EXPERIMENTS=related BUDGET_MIN=10 bash recipes/nguyen/ch3.sh
#   MODE=thesis THESIS_DATA=data/lorelei bash recipes/nguyen/ch3.sh     # print (RUN=1: run)
#   DATA=tiny BUDGET_MIN=0.02 RUNS=/tmp/r bash recipes/nguyen/ch3.sh      # smoke test (tests/data/bible_tiny)
#   UNK_COPY=5 bash recipes/nguyen/ch3.sh                     # + the thesis's UNK-copy augmentation
#
# ---- Thesis setting [T §3.2-3.3; spec 002 §3] (MODE=thesis) --------------------------------------
# Data: LORELEI (LDC-licensed) Uzbek->English parent (102k sents), Turkish->English (56k) and
# Uyghur->English (82k) children; Moses tokenizer (Tur-Eng also truecased); max length 50 word / 60
# BPE tokens. Uyghur is transliterated from Arabic to Latin script for the BPE systems (string
# homomorphism; --scheme uyghur, ASCII-fied ULY table). Joint BPE on parent src+tgt + child src+tgt,
# merges tuned in 5k..60k (Tur 10k baseline / 20k transfer; Uyg 10k / 8k); one dictionary for source and
# target in both models. Model: Luong global attention (general score, input feeding), 2x512 LSTM,
# reversed source, U[-0.01,0.01] init, untied embeddings (lstm_luong). Adadelta (lr 1.0, rho 0.95, eps
# 1e-6), batch 32 sentences, dropout 0.2, clip 5. Epochs: Uzb->Tur parent 100 / child 50, Uzb->Uyg
# parent 50 / child 200 (BPE systems half as many, they train on the UNK-copy doubled data). Best
# checkpoint by tokenized dev BLEU. Decoding: beam 12, GNMT alpha 0.8. Test: rejoin BPE, recase,
# detokenize, case-sensitive BLEU; bootstrap significance (p<0.05 / p<0.01).
# Systems (Table 3.2): word baseline / word transfer (Zoph: parent rows re-assigned by index,
# `transfer remap`) / +freeze; BPE baseline / BPE transfer. Table 3.3 `transfer overlap`; Fig. 3.1
# `transfer plot` over a merges sweep.
#
# ---- Bible mode (real data, this 2-core CPU) -----------------------------------------------------
# Experiment "related": parent es->en_web (full Bible train split, ~29k verses, minus the child's
# training verses), child it->en_web with CHILD_SIZE (3000) training verses; joint BPE of MERGES
# (8000) merges. Experiment "xscript" (the Uyghur analogue, a script change): parent ar->en_web,
# child fa->en_web, both sources romanised with uroman before the joint BPE (XLIT=uroman; XLIT=none: the
# control in the original script, in its own folder runs/nguyen_ch3/ar-fa-none).
# Splits are by book (the same valid/test verses for parent and child); target references en_web.
# Systems, each scored with sacreBLEU (BLEU/chrF) + paired bootstrap against the BPE baseline:
#   bpe_baseline         child only, the joint-BPE vocabulary, random init
#   bpe_transfer         every parameter from the parent (--finetune-from-model: optimizer/LR reset)
#   bpe_transfer_freeze  + --freeze-target-embeddings
# Model: the bench transformer (3+3, d256, PreNorm, Adam 3e-3 inverse-sqrt) with separate source and
# target embeddings (freezing must not touch the source side) instead of the thesis's LSTM; beam 5.
# CPU budget: per experiment PARENT_BUDGET_MIN (30) + 3 x BUDGET_MIN (15) minutes of training + 4
# decodings (~2 min each) => ~1 h 20 min; both experiments ~2 h 45 min (uroman on ~33k Arabic-script
# lines adds ~6 min). Results:
# runs/nguyen_ch3/<experiment>/bpe<K>/{parent,child_<c>-<tgt>_from_<p>_bpe<K>}/, summary.json, sweep.tsv, data/bpe<K>/overlap.json
# (Table 3.3 for words and BPE). MERGES=4000,8000,16000 runs the Fig. 3.1 sweep (bleu_vs_merges.png).
# UNK-copy augmentation (fairseq_ext/data/unk_copy.py) is opt-in: UNK_COPY=5 appends to both pairs'
# joint-BPE training data a copy with the types seen < 5 times on their side replaced by <unk> (jobs in
# bpe<K>_unk5/). The thesis halves the epochs for the doubled data; these runs have wall-clock
# budgets, so nothing is halved. Not reproduced here: the word-based Zoph rows (the commands are in
# MODE=thesis), truecasing/recasing (the Bible data is not truecased).
source "$(dirname "$0")/../lib.sh"
# training drops pairs over 50/60 tokens (--max-*-positions); every test sentence is decoded
NOLIMIT="{'max_source_positions':100000,'max_target_positions':100000}"
# UNK replacement: fairseq 0.12's bare --replace-unk opens its constant '@@ ' as an alignment dictionary;
# an empty dictionary (/dev/null) gives the intended behaviour: copy the most-attended source word

RUNS=${RUNS:-runs}
PARENT_BUDGET_MIN=${PARENT_BUDGET_MIN:-30}
CHILD_SIZE=${CHILD_SIZE:-3000}
MERGES=${MERGES:-8000}
N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
PY=.venv/bin/python

if [ "$MODE" = thesis ]; then
  : "${THESIS_DATA:?set THESIS_DATA to a folder with parent/ and child/ tokenized parallel folders}"
  PSRC=${PARENT_SRC:-uz} CSRC=${CHILD_SRC:-ug} TGT=${TGT:-en}
  OUT=${THESIS_OUT:-checkpoints/nguyen_ch3}
  K=${MERGES}
  PARENT_EPOCHS=${PARENT_EPOCHS:-50} CHILD_EPOCHS=${CHILD_EPOCHS:-200}   # Uzb->Uyg; Uzb->Tur: 100 / 50
  LSTM=(--arch lstm_luong --encoder-layers 2 --encoder-embed-dim 512 --dropout 0.2
        --optimizer adadelta --lr 1.0 --adadelta-rho 0.95 --adadelta-eps 1e-6 --clip-norm 5 --batch-size 32
        --criterion cross_entropy --skip-invalid-size-inputs-valid-test
        --eval-bleu --eval-bleu-args '{"beam":12}' --eval-tokenized-bleu --eval-bleu-remove-bpe
        --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --no-epoch-checkpoints)
  GEN=(--beam 12 --gnmt-alpha 0.8 --max-len-a 3 --max-len-b 0 --model-overrides "$NOLIMIT" --remove-bpe)
  # BPE systems: transliterate the child (Uyghur only), one joint BPE, parent, then child rows
  if [ "$CSRC" = ug ]; then
    thesis $PY -m fairseq_ext.tools.corpora.transliterate folder "$THESIS_DATA/child" "$OUT/child_latn" --lang ug --scheme uyghur
    CHILD="$OUT/child_latn"
  else CHILD="$THESIS_DATA/child"; fi
  thesis $PY -m fairseq_ext.tools.corpora.transfer joint-bpe --parent "$THESIS_DATA/parent" --parent-src "$PSRC" \
    --parent-tgt "$TGT" --child "$CHILD" --child-src "$CSRC" --merges "$K" --out "$OUT/bpe$K"
  thesis $PY -m fairseq_ext.tools.corpora.transfer overlap --child-train "$OUT/bpe$K/child/train.$CSRC" \
    --child-dev "$OUT/bpe$K/child/valid.$CSRC" --parent-dict "$OUT/bpe$K/dict.txt"          # Table 3.3
  # UNK copy [T §3.3]: + a copy with the types seen < 5 times (per side, own training set) as <unk>,
  # binarized with the joint dictionary; the BPE systems then train for half the epochs
  for side in parent child; do
    lang=$PSRC; [ $side = child ] && lang=$CSRC
    thesis $PY -m fairseq_ext.tools.corpora.unk_copy "$OUT/bpe$K/$side" "$OUT/bpe$K/${side}_unk" --src "$lang" --tgt "$TGT" \
      --min-freq "${UNK_MIN_FREQ:-5}"
    thesis $PY -m fairseq_ext.tools.corpora.corpora binarize "$OUT/bpe$K/${side}_unk" --src "$lang" --tgt "$TGT" \
      --fairseq-args "--srcdict $OUT/bpe$K/dict.txt"
  done
  thesis .venv/bin/fairseq-train "$OUT/bpe$K/parent_unk/bin" --user-dir fairseq_ext --task transfer_translation \
    "${LSTM[@]}" --max-source-positions 61 --max-target-positions 61 --max-epoch $((PARENT_EPOCHS / 2)) \
    --save-dir "$OUT/bpe$K/parent_ck"
  for sys in baseline transfer; do
    extra=(); [ $sys = transfer ] && extra=(--finetune-from-model "$OUT/bpe$K/parent_ck/checkpoint_best.pt"
                                           --transfer-parent-data "$OUT/bpe$K/parent_unk/bin")
    thesis .venv/bin/fairseq-train "$OUT/bpe$K/child_unk/bin" --user-dir fairseq_ext --task transfer_translation \
      "${LSTM[@]}" --max-source-positions 61 --max-target-positions 61 --max-epoch $((CHILD_EPOCHS / 2)) \
      "${extra[@]}" --save-dir "$OUT/bpe$K/${sys}_ck"
    thesis .venv/bin/fairseq-generate "$OUT/bpe$K/child/bin" --user-dir fairseq_ext --task transfer_translation \
      --path "$OUT/bpe$K/${sys}_ck/checkpoint_best.pt" --gen-subset test "${GEN[@]}" --results-path "$OUT/bpe$K/${sys}_gen"
  done
  # (the thesis detokenizes (sacremoses) and recases the D- lines before this case-sensitive BLEU)
  thesis $PY -m fairseq_ext.tools.evaluation.score compare --baseline "$OUT/bpe$K/baseline_gen/generate-test.txt" \
    --system "$OUT/bpe$K/transfer_gen/generate-test.txt" --ref "$THESIS_DATA/child/test.$TGT"
  # Word-based rows (original script): separate word vocabularies (size N, tuned 10k..45k), parent rows
  # re-assigned to child types by index (Zoph et al.), +freeze = frozen target embeddings. Raw-text
  # datasets, because fairseq's --replace-unk (UNK replacement from the attention) needs them.
  N=${WORD_VOCAB:-15000}
  for side in parent child; do
    lang=$PSRC; [ $side = child ] && lang=$CSRC
    thesis .venv/bin/fairseq-preprocess -s "$lang" -t "$TGT" --trainpref "$THESIS_DATA/$side/train" \
      --validpref "$THESIS_DATA/$side/valid" --testpref "$THESIS_DATA/$side/test" \
      --nwordssrc "$N" --nwordstgt "$N" --dataset-impl raw --destdir "$OUT/word/$side"
  done
  thesis .venv/bin/fairseq-train "$OUT/word/parent" --user-dir fairseq_ext --task transfer_translation "${LSTM[@]}" --dataset-impl raw \
    --max-source-positions 51 --max-target-positions 51 --max-epoch "$PARENT_EPOCHS" --save-dir "$OUT/word/parent_ck"
  thesis $PY -m fairseq_ext.tools.corpora.transfer remap --parent-ckpt "$OUT/word/parent_ck/checkpoint_best.pt" \
    --parent-src-dict "$OUT/word/parent/dict.$PSRC.txt" --parent-tgt-dict "$OUT/word/parent/dict.$TGT.txt" \
    --child-src-dict "$OUT/word/child/dict.$CSRC.txt" --child-tgt-dict "$OUT/word/child/dict.$TGT.txt" \
    --source-map index --target-map identity --allow-size-mismatch --out "$OUT/word/remapped.pt"
  for sys in baseline transfer freeze; do
    extra=(); [ $sys != baseline ] && extra=(--finetune-from-model "$OUT/word/remapped.pt")
    [ $sys = freeze ] && extra+=(--freeze-target-embeddings)
    thesis .venv/bin/fairseq-train "$OUT/word/child" --user-dir fairseq_ext --task transfer_translation \
      "${LSTM[@]}" --dataset-impl raw --max-source-positions 51 --max-target-positions 51 --max-epoch "$CHILD_EPOCHS" "${extra[@]}" \
      --save-dir "$OUT/word/${sys}_ck"
    thesis .venv/bin/fairseq-generate "$OUT/word/child" --user-dir fairseq_ext --task transfer_translation \
      --dataset-impl raw --path "$OUT/word/${sys}_ck/checkpoint_best.pt" --gen-subset test --beam 12 --gnmt-alpha 0.8 \
      --max-len-a 3 --max-len-b 0 --model-overrides "$NOLIMIT" --replace-unk /dev/null --results-path "$OUT/word/${sys}_gen"
  done
  # Fig. 3.1: repeat with MERGES in 5k..60k (or WORD_VOCAB) and collect system<TAB>size<TAB>bleu rows
  thesis $PY -m fairseq_ext.tools.corpora.transfer plot "$OUT/sweep.tsv" --out "$OUT/bleu_vs_vocab.png"
  exit 0
fi

run_experiment() {  # OUT PARENT_SRC CHILD_SRC TGT [extra transfer.py args]
  local out=$1 psrc=$2 csrc=$3 tgt=$4
  shift 4
  $PY recipes/nguyen/transfer.py run --parent-src "$psrc" --child-src "$csrc" --tgt "$tgt" \
    --child-train-size "$CHILD_SIZE" --merges "$MERGES" --budget-min "$BUDGET_MIN" \
    --parent-budget-min "$PARENT_BUDGET_MIN" --threads "$THREADS" --n-bootstrap "$N_BOOTSTRAP" \
    --systems "${SYSTEMS:-bpe_baseline,bpe_transfer,bpe_transfer_freeze}" \
    --out "$out" ${TABLE:+--table "$TABLE"} ${UNK_COPY:+--unk-copy "$UNK_COPY"} "$@"
}

if [ "${DATA:-bible}" = tiny ]; then
  # parent es->en and child kjv->en from the committed slice (the child's verses excluded from the
  # parent); kjv "transliterated" with uroman to exercise the cross-script path
  $PY recipes/nguyen/transfer.py tiny-data --out "$RUNS/nguyen_tiny/data" >/dev/null
  raw="$RUNS/nguyen_tiny/data/raw"
  CHILD_SIZE=${CHILD_SIZE_TINY:-100} MERGES=${MERGES_TINY:-300} SYSTEMS=${SYSTEMS:-bpe_baseline,bpe_transfer_freeze}
  run_experiment "$RUNS/nguyen_tiny/ch3" es kjv en --parent-raw "$raw" --child-raw "$raw" \
    --xlit uroman --xlit-langs kjv
  exit 0
fi

EXPERIMENTS=${EXPERIMENTS:-related,xscript}
for e in ${EXPERIMENTS//,/ }; do
  case "$e" in related|xscript) ;; *) echo "error: unknown experiment '$e' (related, xscript)" >&2; exit 2 ;; esac
done
case "${XLIT:-uroman}" in none|uroman|uyghur) ;; *) echo "error: unknown XLIT '$XLIT' (none, uroman, uyghur)" >&2; exit 2 ;; esac
bash scripts/setup_env.sh
for e in ${EXPERIMENTS//,/ }; do
  case "$e" in
    related) run_experiment "$RUNS/nguyen_ch3/es-it" es it en_web ;;
    xscript) run_experiment "$RUNS/nguyen_ch3/ar-fa-${XLIT:-uroman}" ar fa en_web --xlit "${XLIT:-uroman}" ;;
  esac
done

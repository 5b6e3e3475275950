#!/usr/bin/env bash
# Gu thesis ch. 5: universal NMT for extremely low-resource languages (Gu, Hassan, Devlin, Li, NAACL 2018) -- many
# sources -> English with one model: the multilingual baseline (Multi-NMT, Eq. 5.1, marked per-language source
# vocabularies), the Universal Lexical Representation (ULR: source embeddings as attention over universal English
# tokens through monolingual embeddings projected by Procrustes, Eqs. 5.2-5.5) and the Mixture of Language Experts
# (MoLE, Eqs. 5.6-5.7); Table 5.4's ablation ladder at one low-resource size and Fig. 5.5 (BLEU vs low-resource
# size), Fig. 5.8 (MoLE gate activations per token).
# Spec: specs/004a-gu-data-efficient.md §5. Code: data `fairseq-ext-data universal` (fairseq_ext/tools/corpora/universal_data.py),
# ULR arrays `fairseq-ext-ulr embed | seed-dict | project | closest | gates` (fairseq_ext/tools/corpora/ulr.py), task
# `universal_translation` (--aux-langs, --lowres-lang, --lang-temperature, --bt-split), model `universal_rnn`
# (--ulr, --ulr-fixed-A, --ulr-closest-only, --ulr-no-language-specific, --mole), criterion
# `universal_mole_cross_entropy` (--gate-loss-weight); report examples/universal_nmt/report.py.
#
#   bash recipes/gu/ch5.sh                       # CPU: Bible, aux es fr ru -> en, low-resource it (budget below)
#   SYSTEMS="multi ulr" bash recipes/gu/ch5.sh   # a subset of the ladder (default: all six below)
#   FIG55=0 bash recipes/gu/ch5.sh               # without the Fig. 5.5 sizes (0 and full)
#   MEASURE_COST=0 bash recipes/gu/ch5.sh        # without the interleaved cost ratio (ULR, ULR+MoLE vs Multi-NMT)
#   BUDGET_MIN=15 bash recipes/gu/ch5.sh         # another training budget per system (runs/gu_ch5/it/15min)
#   WARM_FROM=runs/gu_ch5/it/15min bash recipes/gu/ch5.sh   # the 45-min ladder continues the 15-min runs
#   UPDATES=1200 bash recipes/gu/ch5.sh          # equal updates instead of equal time (runs/gu_ch5/it/1200upd)
#   LOWRES=vi AUX=es,fr,ru bash recipes/gu/ch5.sh  # a low-resource language without a Romance relative (as Ko)
#   DATA=tiny bash recipes/gu/ch5.sh             # the committed tiny multi-parallel slice, tiny models (~4 min)
#   MODE=thesis bash recipes/gu/ch5.sh           # print the thesis-setting commands (RUN=1: run them)
#
# ---- Thesis settings (MODE=thesis; data you provide, a GPU assumed) --------------------------------------------
# Ro-En (WMT16, 6k / 60k / 612k subsets; newsdev2016 / newstest2016), Lv-En (Europarl v8 6k; WMT17 dev/test),
# Ko-En (KPD 10k); auxiliary Europarl v8 Cs De El Es Fi Fr It Pt (and Ru from MultiUN, 2M), Table 5.1/5.2. Put
# every corpus as THESIS_DATA/multi.tsv (a verse-id-like first column, one column per language, "en" the
# target; the same layout as the Bible's, built by your own script) -- the data builder then writes the marked
# vocabularies (BPE <= 40k per language: --vocab-size 40000), the ULR inputs are fastText 300-d embeddings on
# Wikipedia (here: --dim 300 skip-gram on THESIS_DATA's monolingual text), seed dictionaries from alignments
# (here eflomal, symmetrised), Procrustes per language, M = 20k universal English tokens. Model universal_rnn_512
# (1-layer bi-LSTM encoder, 2-layer attention LSTM decoder, 512, dropout 0.4), Adam 1e-3, batch 128 sentences,
# 1M steps; beam 5. Thesis Table 5.4 (Ro-En 6k, aux Es Fr It Pt): Vanilla 1.21, Multi-NMT 14.94, Closest
# Uni-Token Only 5.83, +ULR (A=I) 18.61, +ULR 20.01, +BT 17.91, +ULR+BT 22.35, +ULR+MoLE 20.51, +ULR+MoLE+BT
# 22.92, full data 28.34.
#
# ---- CPU mode (default; 2 cores, THREADS=1) --------------------------------------------------------------------
# Data (fairseq-ext-data universal, from data/bible_multi): auxiliary AUX (es,fr,ru; ~26k verses each) -> en_web,
# low-resource LOWRES (it, the Romance relative as Ro in the thesis) with a budget of LOWRES_TOKENS (16000)
# English tokens (~650 verses) of training pairs, disjoint from the auxiliary verses; valid/test = the held-out
# books in LOWRES (~640 / ~1,500 verses). Sentencepiece BPE 4k per language, marked pieces "<piece>__<lang>".
# Monolingual text for the embeddings: every training-book verse of each language, source side only (the
# thesis's Wikipedia analogue; --mono-text all). ULR: fastText skip-gram 300-d per language (5 epochs), seed
# dictionaries (symmetrised eflomal links, <= 500 pairs, + identical strings), Procrustes, M = all English pieces.
# Systems (universal_rnn_bench: the §5.4.1 shape at 256 units, dropout 0.2; Adam 1e-3, clip 1, 2,048 tokens,
# training languages drawn with temperature LANG_T (5: p_k ~ N_k^(1/5), the low-resource language ~14% of the
# sentences), each trained for BUDGET_MIN (45) minutes, the checkpoint with the best valid loss decoded; the
# results of a budget go to runs/gu_ch5/LOWRES/<BUDGET_MIN>min, so that budgets form a learning curve):
#   vanilla   the low-resource pairs only (its own data folder: --aux '' (no auxiliary language), same verses;
#             the languages named by --aux-langs / --lowres-lang, its manifest having no auxiliary one)
#   multi     Multi-NMT (no ULR, no MoLE): the baseline of the bootstrap
#   ulr_a_i   + ULR with A fixed to I
#   ulr       + ULR
#   ulr_mole  + ULR + MoLE (criterion universal_mole_cross_entropy, gate loss weight 1)
#   ulr_mole_res, ulr_mole_gw0   MoLE diagnostics (not in the default SYSTEMS): s' = h + MoLE(h) (--mole-residual),
#             and the gate left unsupervised (--gate-loss-weight 0)
#   closest   Closest Uni-Token Only: every source token is its closest universal token (--ulr-closest-only
#             --ulr-no-language-specific)
#   multi_bt, ulr_bt, ulr_mole_bt   the same + back-translated pairs (--bt-split bt; BT=0 skips them): two passes
#             from the +ULR model -- LOWRES's 2,000 held-back monolingual verses -> English*; an English -> LOWRES
#             rnnsearch (the same shape) on the 650 real pairs reversed + those, BT_BUDGET_MIN (15) minutes
#             (BT_UPDATES=n: n updates instead);
#             N_BT_EN (5,000) English verses of the training books (none of LOWRES's) -> LOWRES*; translations
#             greedy (BT_BEAM 1). The thesis's amounts are not given (spec REC: 2M synthetic pairs).
#   multi_btK, ulr_btK, ulr_mole_btK   (K an integer, e.g. ulr_bt10; BT_SYSTEMS="ulr_bt10") the same, with the
#             real LOWRES pairs counted K times against the synthetic ones (--bt-real-upsample K; spec REC:
#             "real 6k up-sampled (e.g. x10) so it is not drowned"); the plain *_bt systems use K = 1.
# Fig. 5.5 (FIG55=1): vanilla / multi / ulr also at LOWRES_TOKENS 0 (zero-resource; vanilla has no data) and -1
# (every training verse of LOWRES, ~27k).
# Decoding: test, beam BEAM (5), lib.sh's length limit LEN; sacreBLEU BLEU / chrF against raw/test.en with
# paired bootstrap against multi (same size); examples/universal_nmt/report.py writes table5_4.md, fig5_5.png and the MoLE
# gates of a few test verses (fig5_8_gates.png).
# CPU budget (THREADS=1, two lanes side by side). Measured: the ULR stage took 26 min at load 3-7 (embeddings
# 90-206 s per language, eflomal 5-9 min per auxiliary language); multi trained 356 updates of 2,048 tokens in 15
# min at load ~3 (valid perplexity 168: far from converged, hence the 45-minute default). Estimated from those:
# 6 systems x (45 + ~5 min decoding) / 2 lanes -> 2.5 h; FIG55 (5 more, + ULR of the other sizes) -> 2.5 h more;
# back-translation ~30 min of passes + 3 systems -> 1.7 h. About 7 h in all (4.2 h with FIG55=0, 2.5 h with
# FIG55=0 BT=0): a multi-session run. Every stage resumes where it stopped (checkpoints every 200 updates, the
# training clock with them; finished stages are skipped).
# Measured with UPDATES=1200 (2026-11-27, AMX machine, 2-5 processes on the 2 cores): ULR stage 9 min (eflomal
# 1.5-3 min per auxiliary language), a system 14-16 min with two processes (24-27 min with 3-5), vanilla 32 min (a
# validation every 16-update epoch), the BT chain (BT_UPDATES=600) 24 min, each BT system ~46 min at 4-5 processes;
# + ULR + MoLE 31 min and + ULR + MoLE + BT 28 min of training with two processes (MoLE costs 1.30x per word).
# The vanilla run exposed fairseq's per-epoch DataLoader-worker leak on resampled data (fixed: _compat fix 10).
SYSTEM_MIN=${BUDGET_MIN:-45}   # read before lib.sh, whose own default (15) would win otherwise
source "$(dirname "$0")/../lib.sh"
BEAM=${BEAM:-5}
AUX=${AUX:-es,fr,ru}
LOWRES=${LOWRES:-it}
LANG_T=${LANG_T:-5}
SYSTEMS=(${SYSTEMS:-vanilla multi ulr_a_i ulr ulr_mole closest})

if [ "$MODE" = thesis ]; then
  T=${THESIS_DATA:-data/universal_thesis}
  C=checkpoints/gu_ch5
  for setting in "ro:cs,de,el,fi:6k" "ro:cs,de,el,fr:6k" "ro:de,el,fi,it:6k" "ro:es,fr,it,pt:6k" \
                 "lv:es,fr,it,pt:6k" "lv:es,fr,it,pt,ru:6k" "ko:es,fr,it,pt:10k"; do
    IFS=: read -r lo aux size <<< "$setting"
    D=$T/${lo}_${aux//,/}_$size
    echo "# ---- $lo ($size) with auxiliary $aux (Table 5.3)"
    thesis $PY -m fairseq_ext.tools.corpora.corpora universal --multi $T/multi.tsv --aux "$aux" --lowres "$lo" --target en \
      --lowres-tokens "${THESIS_LOWRES_TOKENS:-160000}" --vocab-size 40000 --out $D
    thesis $FS/fairseq-ext-ulr embed --data $D --dim 300
    thesis $FS/fairseq-ext-ulr seed-dict --data $D
    thesis $FS/fairseq-ext-ulr project --data $D --num-universal 20000
    TR=(--arch universal_rnn_512 --optimizer adam --lr 1e-3 --clip-norm 1.0 --batch-size 128 --max-update 1000000
        --lang-temperature "$LANG_T" --patience 10 --no-epoch-checkpoints)
    for sys in "multi|--criterion cross_entropy" "ulr|--ulr --criterion cross_entropy" \
               "ulr_mole|--ulr --mole --criterion universal_mole_cross_entropy"; do
      name=${sys%%|*}
      read -r -a flags <<< "${sys#*|}"
      thesis $FS/fairseq-train $D/bin "${UD[@]}" --task universal_translation "${TR[@]}" "${flags[@]}" \
        --save-dir $C/${lo}_${aux//,/}/$name
      thesis $FS/fairseq-generate $D/bin "${UD[@]}" --task universal_translation --gen-subset test \
        --path $C/${lo}_${aux//,/}/$name/checkpoint_best.pt --beam 5 --post-process sentencepiece \
        --results-path $C/${lo}_${aux//,/}/$name/test
    done
  done
  exit 0
fi

ULR_ARGS=(--dim 300)
if [ "${DATA:-bible}" = tiny ]; then
  MULTI=tests/data/bible_multi_tiny/multi.tsv
  OUT=$RUNS/gu_ch5_tiny
  DATA_ROOT=$OUT/data
  DATA_ARGS=(--vocab-size 150 --lowres-mono 50)
  LOWRES_TOKENS=${LOWRES_TOKENS:-300}
  FULL_SIZES=${FULL_SIZES:-0 -1}
  ARCH=universal_rnn_tiny
  LIMIT=(--max-update "${UPDATES:-8}")
  ULR_ARGS=(--dim 16 --epochs 2 --min-count 1)
  BW_UNITS=${BW_UNITS:-16}
  SEED_ARGS=(--min-count 1)
  N_BOOTSTRAP=${N_BOOTSTRAP:-100}
  COST_ROUNDS=${COST_ROUNDS:-2} COST_STEPS=${COST_STEPS:-1} COST_TOKENS=${COST_TOKENS:-300}
else
  MULTI=data/bible_multi/raw/multi.tsv
  [ -s $MULTI ] || $PY -m fairseq_ext.tools.corpora.corpora multi --out data/bible_multi/raw
  OUT=$RUNS/gu_ch5/$LOWRES/${SYSTEM_MIN}min
  [ -z "${UPDATES:-}" ] || OUT=$RUNS/gu_ch5/$LOWRES/${UPDATES}upd
  DATA_ROOT=data/bible_universal
  DATA_ARGS=(--vocab-size 4000)
  LOWRES_TOKENS=${LOWRES_TOKENS:-16000}
  FULL_SIZES=${FULL_SIZES:-0 -1}
  ARCH=universal_rnn_bench
  LIMIT=(--stop-time-hours "$(echo "$SYSTEM_MIN / 60" | bc -l)")
  [ -z "${UPDATES:-}" ] || LIMIT=(--max-update "$UPDATES")   # equal updates instead (load-independent)
  SEED_ARGS=()
  N_BOOTSTRAP=${N_BOOTSTRAP:-1000}
  COST_ROUNDS=${COST_ROUNDS:-5} COST_STEPS=${COST_STEPS:-10} COST_TOKENS=${COST_TOKENS:-2048}
fi
mkdir -p $OUT
# (a budget that is not a multiple of 1000 keeps its number: the tiny 300 must not become "0k", the zero-resource tag)
tag_of() { case $1 in 0) echo 0k ;; -1) echo full ;; *) if (( $1 % 1000 == 0 )); then echo "$(( $1 / 1000 ))k"; else echo "$1"; fi ;; esac; }

# data_dir SIZE [vanilla]: build (or reuse) the universal data folder of that low-resource size (-1: every
# training verse of LOWRES, so the auxiliary languages share its verses: --no-disjoint)
data_dir() {
  local size=$1 name d aux=$AUX extra=()
  name=${LOWRES}_$(tag_of "$size")_${AUX//,/}
  [ "${2:-}" != vanilla ] || { name=${name}_vanilla; aux=""; }
  [ "$size" != -1 ] || extra+=(--no-disjoint)
  d=$DATA_ROOT/$name
  $PY -m fairseq_ext.tools.corpora.corpora universal --multi $MULTI --aux "$aux" --lowres "$LOWRES" --lowres-tokens "$size" \
    "${DATA_ARGS[@]}" "${extra[@]}" --out "$d" >&2
  echo "$d"
}

# ulr_arrays DIR [SEED_FROM]: the ULR inputs of a data folder (each step reuses its stamped output). With
# SEED_FROM (zero-resource: no LOWRES pair to align), LOWRES's seed dictionary is that folder's ("0k uses the
# pre-projection learned from the 6k data", Fig. 5.5) -- the same sentencepiece models, so the same pieces.
ulr_arrays() {
  $FS/fairseq-ext-ulr embed --data "$1" "${ULR_ARGS[@]}"
  if [ -n "${2:-}" ]; then
    $FS/fairseq-ext-ulr seed-dict --data "$1" --langs "$AUX" "${SEED_ARGS[@]}"
    cmp -s "$2/spm/spm.$LOWRES.model" "$1/spm/spm.$LOWRES.model" \
      || { echo "error: $2 and $1 segment $LOWRES differently: its seed dictionary does not carry over" >&2; return 1; }
    cp "$2/ulr/seed.$LOWRES.tsv" "$1/ulr/seed.$LOWRES.tsv"
  else
    $FS/fairseq-ext-ulr seed-dict --data "$1" "${SEED_ARGS[@]}"
  fi
  $FS/fairseq-ext-ulr project --data "$1"
}

system_flags() {
  case $1 in
    vanilla|multi) echo "--criterion cross_entropy" ;;
    ulr_a_i) echo "--ulr --ulr-fixed-A --criterion cross_entropy" ;;
    ulr) echo "--ulr --criterion cross_entropy" ;;
    ulr_mole) echo "--ulr --mole --criterion universal_mole_cross_entropy" ;;
    ulr_mole_res) echo "--ulr --mole --mole-residual --criterion universal_mole_cross_entropy" ;;
    ulr_mole_gw0) echo "--ulr --mole --criterion universal_mole_cross_entropy --gate-loss-weight 0" ;;
    closest) echo "--ulr --ulr-closest-only --ulr-no-language-specific --criterion cross_entropy" ;;
    *_bt) system_flags "${1%_bt}" > /dev/null && echo "$(system_flags "${1%_bt}") --bt-split bt" ;;
    *_bt[0-9]*) [[ ${1##*_bt} =~ ^[0-9]+$ ]] || { echo "error: unknown system $1 (_btK: K an integer)" >&2; return 2; }
                system_flags "${1%_bt*}" > /dev/null \
                  && echo "$(system_flags "${1%_bt*}") --bt-split bt --bt-real-upsample ${1##*_bt}" ;;
    *) echo "error: unknown system $1 (vanilla multi ulr_a_i ulr ulr_mole ulr_mole_res ulr_mole_gw0 closest, + _bt or" \
            "_btK: the real pairs counted K times against the synthetic ones)" >&2
       return 2 ;;
  esac
}
BT_SYSTEMS=(${BT_SYSTEMS:-multi_bt ulr_bt ulr_mole_bt})
for s in "${SYSTEMS[@]}" "${BT_SYSTEMS[@]}"; do system_flags "$s" > /dev/null || exit 2; done

# run_system SIZE NAME: train NAME on the data of SIZE, decode test -> $OUT/<tag>/NAME/test/generate-test.txt
run_system() {
  local size=$1 name=$2 d o flags langs=()
  o=$OUT/$(tag_of "$size")/$name
  [ -s $o/test/generate-test.txt ] && return 0
  if [ "$name" = vanilla ]; then d=$(data_dir "$size" vanilla 2> /dev/null); else d=$(data_dir "$size" 2> /dev/null); fi
  flags=$(system_flags "$name")
  [ "$name" != vanilla ] || langs=(--aux-langs "$AUX" --lowres-lang "$LOWRES")  # its manifest names no aux language
  mkdir -p $o
  if [ -n "${WARM_FROM:-}" ] && [ ! -e $o/checkpoint_last.pt ] && [ -e "$WARM_FROM/$(tag_of "$size")/$name/train.done" ]; then
    # a longer budget continues the shorter budget's run: fairseq resumes its weights, optimiser, data order
    # and training clock from checkpoint_last.pt (checkpoint_best.pt: the best so far)
    cp "$WARM_FROM/$(tag_of "$size")/$name/checkpoint_last.pt" "$WARM_FROM/$(tag_of "$size")/$name/checkpoint_best.pt" $o/
    echo "$name at $(tag_of "$size"): continuing $WARM_FROM's run" >> $o/train.log
  fi
  if [ ! -e $o/train.done ]; then
    # shellcheck disable=SC2086
    $FS/fairseq-train $d/bin "${UD[@]}" --task universal_translation "${langs[@]}" --lang-temperature "$LANG_T" --arch $ARCH \
      $flags --optimizer adam --lr 1e-3 --clip-norm 1.0 --max-tokens 2048 --seed 1 --cpu --no-progress-bar \
      --log-format simple --log-interval 50 --no-epoch-checkpoints --save-interval-updates 200 \
      --keep-interval-updates 1 "${LIMIT[@]}" --save-dir $o >> $o/train.log 2>&1 || { tail -20 $o/train.log; return 1; }
    touch $o/train.done
  fi
  rm -rf $o/test.tmp
  $FS/fairseq-generate $d/bin "${UD[@]}" --task universal_translation "${langs[@]}" --gen-subset test \
    --path $o/checkpoint_best.pt --beam "$BEAM" "${LEN[@]}" --batch-size 64 --post-process sentencepiece --cpu --seed 1 \
    --results-path $o/test.tmp > $o/test.log 2>&1 || { tail -20 $o/test.log; return 1; }
  mv $o/test.tmp $o/test
  echo "$d" > $o/data_dir
}

# jobs: the ladder at LOWRES_TOKENS, then the Fig. 5.5 sizes; two lanes, alternating
jobs=()
for s in "${SYSTEMS[@]}"; do jobs+=("$LOWRES_TOKENS:$s"); done
if [ "${FIG55:-1}" = 1 ]; then
  for size in $FULL_SIZES; do
    for s in vanilla multi ulr; do
      if [ "$size" = 0 ] && [ $s = vanilla ]; then   # no low-resource pair: BLEU 0 by definition (the report's
        mkdir -p $OUT/0k/vanilla && touch $OUT/0k/vanilla/no_data; continue   # marker)
      fi
      jobs+=("$size:$s")
    done
  done
fi
# the data folders and ULR arrays first, one at a time (the lanes then only read them)
MAIN=$(data_dir "$LOWRES_TOKENS")
for j in "${jobs[@]}"; do
  size=${j%%:*} s=${j#*:}
  if [ $s = vanilla ]; then data_dir "$size" vanilla > /dev/null; continue; fi
  d=$(data_dir "$size")
  [[ "$(system_flags "$s")" == *--ulr* ]] || continue
  from=""; [ "$size" != 0 ] || from=$MAIN
  if [ "$size" = 0 ]; then ulr_arrays "$MAIN" >> $OUT/ulr.log 2>&1 || { tail -20 $OUT/ulr.log; exit 1; }; fi
  ulr_arrays "$d" $from >> $OUT/ulr.log 2>&1 || { tail -20 $OUT/ulr.log; exit 1; }
done
run_lane() { local j; for j in "$@"; do run_system "${j%%:*}" "${j#*:}" || return 1; done; }
two_lanes() {  # SIZE:SYSTEM...: alternately into two single-thread lanes side by side
  local a=() b=() i pa pb failed=0
  for ((i = 1; i <= $#; i++)); do if ((i % 2)); then a+=("${!i}"); else b+=("${!i}"); fi; done
  echo "lane A: ${a[*]}; lane B: ${b[*]:-}"
  run_lane "${a[@]}" & pa=$!
  run_lane "${b[@]}" & pb=$!
  wait $pa || failed=1
  wait $pb || failed=1
  return $failed
}
two_lanes "${jobs[@]}" || { echo "error: a job failed (logs in $OUT)" >&2; exit 1; }

# ---- back-translation (§5.4.2), two passes bootstrapped from the +ULR model of the main size (spec REC):
# (1) LOWRES's held-back monolingual verses -> English* with that model; an English -> LOWRES model (the ladder's
# shape as a plain rnnsearch) on the real pairs reversed + those synthetic pairs, BT_BUDGET_MIN minutes;
# (2) N_BT_EN monolingual English verses (training books, none of LOWRES's) -> LOWRES* with it: split "bt" of the
# main data, added to training by --bt-split bt (BT_SYSTEMS, each BUDGET_MIN). Both translations beam BT_BEAM (1).
MAIN_TAG=$(tag_of "$LOWRES_TOKENS")
if [ "${BT:-1}" = 1 ] && [ ${#BT_SYSTEMS[@]} -gt 0 ]; then
  B=$OUT/$MAIN_TAG/bt
  ULR_CKPT=$OUT/$MAIN_TAG/ulr/checkpoint_best.pt
  [ -s $ULR_CKPT ] || run_system "$LOWRES_TOKENS" ulr || exit 1
  mkdir -p $B
  BGEN=(--beam "${BT_BEAM:-1}" "${LEN[@]}" --batch-size 64 --cpu --seed 1)
  if [ ! -s $B/pass1/generate-mono.txt ]; then
    rm -rf $B/pass1.tmp
    $FS/fairseq-generate $MAIN/bin/mono "${UD[@]}" --task universal_translation --gen-subset mono --path $ULR_CKPT \
      "${BGEN[@]}" --results-path $B/pass1.tmp > $B/pass1.log 2>&1 || { tail -20 $B/pass1.log; exit 1; }
    mv $B/pass1.tmp $B/pass1
  fi
  [ -s $B/en_mono.txt ] || $FS/fairseq-ext-bt english-mono --data $MAIN --n "${N_BT_EN:-5000}" --out $B/en_mono.txt
  [ -s $B/backward/bin/dict.en.txt ] || $FS/fairseq-ext-bt backward --data $MAIN --synthetic $B/pass1/generate-mono.txt \
    --out $B/backward --mono-en $B/en_mono.txt
  if [ ! -e $B/backward/train.done ]; then
    BW_LIMIT=("${LIMIT[@]}")
    [ "${DATA:-bible}" = tiny ] || BW_LIMIT=(--stop-time-hours "$(echo "${BT_BUDGET_MIN:-15} / 60" | bc -l)")
    [ -z "${BT_UPDATES:-}" ] || BW_LIMIT=(--max-update "$BT_UPDATES")   # equal updates (load-independent)
    $FS/fairseq-train $B/backward/bin "${UD[@]}" --task translation_decoding -s en -t src --arch rnnsearch \
      --rnn-type lstm --decoder-variant plain --decoder-layers 2 --encoder-embed-dim "${BW_UNITS:-256}" \
      --encoder-hidden-size "${BW_UNITS:-256}" --attention-dim "${BW_UNITS:-256}" --dropout 0.2 \
      --criterion cross_entropy --optimizer adam --lr 1e-3 --clip-norm 1.0 --max-tokens 2048 --seed 1 --cpu \
      --no-progress-bar --log-format simple --log-interval 50 --no-epoch-checkpoints --save-interval-updates 200 \
      --keep-interval-updates 1 "${BW_LIMIT[@]}" --save-dir $B/backward >> $B/backward/train.log 2>&1 \
      || { tail -20 $B/backward/train.log; exit 1; }
    touch $B/backward/train.done
  fi
  if [ ! -s $B/pass2/generate-mono_en.txt ]; then
    rm -rf $B/pass2.tmp
    $FS/fairseq-generate $B/backward/bin "${UD[@]}" --task translation_decoding -s en -t src --gen-subset mono_en \
      --path $B/backward/checkpoint_best.pt "${BGEN[@]}" --results-path $B/pass2.tmp > $B/pass2.log 2>&1 \
      || { tail -20 $B/pass2.log; exit 1; }
    mv $B/pass2.tmp $B/pass2
  fi
  [ -s $MAIN/bin/bt.lang ] || $FS/fairseq-ext-bt bt-split --data $MAIN --hyps $B/pass2/generate-mono_en.txt \
    --en $B/en_mono.txt --name bt
  two_lanes $(for x in "${BT_SYSTEMS[@]}"; do echo "$LOWRES_TOKENS:$x"; done) \
    || { echo "error: a back-translation system failed (logs in $OUT/$MAIN_TAG)" >&2; exit 1; }
fi

# ---- cost ratio (MEASURE_COST=1): training time per target word of +ULR and +ULR+MoLE vs Multi-NMT, measured
# interleaved in one process on the same fixed batches of the main size (recipes/bench/speed.py, configurations
# gu5_* of bench_configs: the universal_rnn_bench shape), COST_ROUNDS rounds x COST_STEPS steps
if [ "${MEASURE_COST:-1}" = 1 ] && [ ! -s $OUT/cost/speed.json ]; then
  $PY recipes/bench/speed.py --data $MAIN --baseline gu5_multi --configs gu5_ulr,gu5_ulr_mole \
    --rounds "$COST_ROUNDS" --steps "$COST_STEPS" --warmup 2 --max-tokens "$COST_TOKENS" --out $OUT/cost \
    > $OUT/cost.log 2>&1 || { tail -20 $OUT/cost.log; exit 1; }
fi

# ---- scores: sacreBLEU + paired bootstrap against multi of the same size; the report
for tag in $(for j in "${jobs[@]}"; do tag_of "${j%%:*}"; done | sort -u); do
  [ -s $OUT/$tag/multi/test/generate-test.txt ] || continue
  d=$(cat $OUT/$tag/multi/data_dir)
  sys=()
  for o in $OUT/$tag/*/test/generate-test.txt; do [ "$o" = $OUT/$tag/multi/test/generate-test.txt ] || sys+=(--system "$o"); done
  [ ${#sys[@]} -gt 0 ] || continue   # multi alone: nothing to compare yet
  $PY -m fairseq_ext.tools.evaluation.score compare --baseline $OUT/$tag/multi/test/generate-test.txt "${sys[@]}" \
    --ref $d/raw/test.en --n-bootstrap "$N_BOOTSTRAP" --json $OUT/$tag/scores.json > $OUT/$tag/scores.md
done
$PY examples/universal_nmt/report.py --out $OUT --main "$(tag_of "$LOWRES_TOKENS")"

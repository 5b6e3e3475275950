# Sourced by recipes/<author>/<chapter>.sh.  Two modes per recipe:
#   MODE=bible  (default) real es->en Bible data on this CPU: every named configuration trains for
#               BUDGET_MIN minutes (default 15), decodes the test set (beam 5), and is scored with
#               sacreBLEU (BLEU + chrF, signatures) and paired bootstrap against the baseline
#               transformer of the same run (recipes/bench/bench.py; results in runs/<recipe>/).
#   MODE=thesis the thesis's full setting, as fairseq commands on data you provide
#               (THESIS_DATA=binarized dir); printed, and run when RUN=1 (a GPU machine is assumed).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MODE=${MODE:-bible}
BUDGET_MIN=${BUDGET_MIN:-15}
THREADS=${THREADS:-1}   # 1 thread stays fast when other work shares the 2 cores; use $(nproc) on an idle machine
export OMP_NUM_THREADS=$THREADS
PY=.venv/bin/python   # the project's interpreter and console scripts
FS=.venv/bin
UD=(--user-dir fairseq_ext)
RUNS=${RUNS:-runs}
# the decoding length limit of every recipe (fairseq-generate; the bench's GENERATE in bench_configs)
LEN=(--max-len-a 1.2 --max-len-b 10)

bible_data() {
  bash scripts/setup_env.sh
  .venv/bin/python -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_es_en --src es --tgt en \
      --method sentencepiece --vocab-size 8000 --out data/bible_es_en
}

# bench OUT CONFIG[,CONFIG...]: train/decode/score the configurations of fairseq_ext/tools/evaluation/bench_configs.py
bench() {
  local out=$1 configs=$2
  .venv/bin/python recipes/bench/bench.py --data data/bible_es_en/spm8000 --configs "$configs" \
      --budget-min "$BUDGET_MIN" --threads "$THREADS" --out "runs/$out"
}

# decode_speed PREFIX --system NAME=ARGS...: decode-time ratios against the first system (recipes/bench/decode_speed.py:
# ROUNDS (3) interleaved rounds of fairseq-generate's own decoding time, THREADS threads) -> PREFIX.md, and PREFIX.json
# only once every round is done (a stage is skipped when its PREFIX.json exists, so a killed run redoes it)
decode_speed() {
  local prefix=$1
  shift
  rm -f "$prefix.json.tmp"
  if ! $PY recipes/bench/decode_speed.py --rounds "${ROUNDS:-3}" --threads "$THREADS" --out "$prefix.json.tmp" "$@" \
      > "$prefix.md"; then
    echo "error: the decode-time stage failed ($prefix.md; the command's messages are above)" >&2
    return 1
  fi
  mv "$prefix.json.tmp" "$prefix.json"
}

# finished DIR UPDATES: the fairseq run in DIR is complete (DIR/train.done, or a checkpoint_last.pt that reached
# UPDATES); a killed run's checkpoint_last.pt is not (fairseq-train resumes it)
finished() {
  [ -e "$1/train.done" ] && return 0
  [ -s "$1/checkpoint_last.pt" ] || return 1
  .venv/bin/python -c "import sys, torch, fairseq_ext; s = torch.load(sys.argv[1], weights_only=True); \
sys.exit(0 if s['optimizer_history'][-1]['num_updates'] >= int(sys.argv[2]) else 1)" "$1/checkpoint_last.pt" "$2"
}

# thesis CMD...: print a thesis-setting command; run it when RUN=1
thesis() {  # the command, shell-quoted: a printed line pastes back into bash as the same arguments
  local a line="+"
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then line+=" $a"; else line+=" '${a//\'/\'\\\'\'}'"; fi
  done
  echo "$line"
  if [ "${RUN:-0}" = 1 ]; then "$@"; fi
}

# nbench SEGMENTED_FOLDER OUT CONFIGS SRC TGT REF2: bench on any prepared pair (RUNS/TABLE/N_BOOTSTRAP env).
# MAX_UPDATES=U: equal updates instead of BUDGET_MIN minutes, dev BLEU curves every CURVE_EVERY (500) updates
# (bench.py --max-updates U --curve-every N --budget-min 0); give such a job its own OUT (job_suffix).
nbench() {
  local limits=(--budget-min "$BUDGET_MIN")
  [ -z "${MAX_UPDATES:-}" ] || limits=(--budget-min 0 --max-updates "$MAX_UPDATES" --curve-every "${CURVE_EVERY:-500}")
  .venv/bin/python recipes/bench/bench.py --data "$1" --out "$2" --configs "$3" --src "$4" --tgt "$5" \
    --ref2 "$6" "${limits[@]}" --threads "$THREADS" --n-bootstrap "${N_BOOTSTRAP:-1000}" \
    ${TABLE:+--table "$TABLE"}
}

# job_suffix: "_uU" for an equal-updates job (MAX_UPDATES=U), "" for a wall-clock one: the two never share a folder
job_suffix() {
  if [ -n "${MAX_UPDATES:-}" ]; then echo "_u$MAX_UPDATES"; fi
}

# es_en_set full|low: print the segmented es-en folder of that set (low = LOW_SIZE training verses,
# sentencepiece 4k), preparing it when missing
es_en_set() {
  case $1 in
    full) echo data/bible_es_en/spm8000 ;;
    low)
      .venv/bin/python -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_es_en --src es --tgt en \
        --method sentencepiece --vocab-size 4000 --train-size "${LOW_SIZE:-5000}" --out data/bible_es_en >&2
      echo "data/bible_es_en/spm4000-train${LOW_SIZE:-5000}-seed1" ;;
    *) echo "error: unknown set '$1' (full, low)" >&2; return 2 ;;
  esac
}

# doc_set: print the document-level es-en folder of the converged recipes (recipes/bench/converged_doc.sh): DOC_SIZE
# (10,000) training verses drawn as whole chapters from the training books but HELDOUT_BOOKS (default: Jeremiah,
# Proverbs, Hosea, Lamentations, Revelation; empty: none held out; split `heldout`), sentencepiece 4k; prepared
# when missing (the corpus cache is needed then)
doc_set() {
  local held=${HELDOUT_BOOKS-Jeremiah,Proverbs,Hosea,Lamentations,Revelation_of_John} f
  f=$($PY -m fairseq_ext.tools.corpora.corpora prepare --corpus bible_es_en --src es --tgt en \
    --method sentencepiece --vocab-size 4000 --train-size "${DOC_SIZE:-10000}" --subsample-by document \
    ${held:+--exclude-books "$held"} --out data/bible_es_en | tail -n 1) || return 1
  dirname "$f"
}

# tiny_slice OUT: the committed tiny es-en slice (tests/data/bible_tiny), sentencepiece 300, binarized once
# -> OUT/data/seg, OUT/data/bin (the DATA=tiny mode of the recipes)
tiny_slice() {
  if [ ! -s "$1/data/bin/dict.en.txt" ]; then
    .venv/bin/python -m fairseq_ext.tools.corpora.corpora bpe tests/data/bible_tiny "$1/data/seg" --src es --tgt en \
      --method sentencepiece --vocab-size 300
    .venv/bin/python -m fairseq_ext.tools.corpora.corpora binarize "$1/data/seg" --out "$1/data" --src es --tgt en
  fi
}

# Nguyen ch. 4 Table 4.3 on the test set: each JOB/CONFIG/checkpoint_best.pt decodes the CONSEC-concatenated
# test set segment-aware (task concat_translation --concat-eval consec), fairseq's sacrebleu scorer -> JOB/concat_eval.tsv
concat_eval() {  # concat_eval SEGMENTED_FOLDER JOB CONFIGS
  local seg=$1 job=$2 c cfg flags
  printf 'config\tconcat_eval\tbleu\n' > "$job/concat_eval.tsv"
  for c in ${3//,/ }; do
    [ -f "$job/$c/checkpoint_best.pt" ] || continue
    flags=()
    cfg=$($PY -m fairseq_ext.tools.evaluation.bench_configs "$c")
    case ",$cfg," in *--cpu-bf16*) flags+=(--cpu-bf16 --math-attention) ;; esac
    .venv/bin/fairseq-generate "$seg/bin" --user-dir fairseq_ext --task concat_translation \
      --path "$job/$c/checkpoint_best.pt" --gen-subset test --cpu --concat-eval consec --beam 5 \
      --batch-size 64 "${LEN[@]}" --post-process sentencepiece --scoring sacrebleu \
      "${flags[@]}" > "$job/$c/generate_concat_consec.out" 2> "$job/$c/generate_concat_consec.log"
    bleu=$(sed -n 's/.*Generate test with beam=[0-9]*: BLEU = \([0-9.]*\).*/\1/p' "$job/$c/generate_concat_consec.out")
    printf '%s\tconsec\t%s\n' "$c" "${bleu:-?}" | tee -a "$job/concat_eval.tsv"
  done
}

# curve_job NAME DATA SRC TGT REF2 "LANE_A" "LANE_B" BENCH_ARGS...: a learning-curve bench job in OUT/NAME
# (recipes/bench/converged*.sh; OUT, THREADS, N_BOOTSTRAP, CURVE_EVERY and TABLE from the recipe): two --train-only
# lanes side by side (LANES=1: one lane, A's configurations then B's), then the comparison (paired bootstrap against
# the job's baseline, the converged table rows)
simul_flags() {  # simul_flags NAME SEARCH BEAM: fairseq-generate's flags for a simultaneous system, one word per line;
  # NAME wue|wos|wiw|wid (Gu §9.5.2's baselines), waitK (wait-k reading), else a trained agent; SEARCH greedy|beam
  case $1 in
    wue|wos|wiw|wid) printf '%s\n' --simul-policy "$1" ;;
    wait[0-9]*) printf '%s\n' --simul-policy waitk --simul-waitk "${1#wait}" ;;
    *) printf '%s\n' --simul-policy agent ;;
  esac
  case $2 in
    greedy) printf '%s\n' --simul-decoding simul_greedy ;;
    beam) printf '%s\n' --simul-decoding simul_beam --simul-beam "$3" ;;
    *) echo "error: simul_flags: unknown search '$2' (greedy beam)" >&2; return 2 ;;
  esac
}
curve_job() {
  local name=$1 data=$2 src=$3 tgt=$4 ref2=$5 a=$6 b=$7 k pids=() failed=0 letter=(A B)
  shift 7
  local common=(recipes/bench/bench.py --data "$data" --src "$src" --tgt "$tgt" --ref2 "$ref2" --threads "$THREADS"
                --n-bootstrap "$N_BOOTSTRAP" --out "$OUT/$name" --curve-every "$CURVE_EVERY" "$@")
  local lanes=("$a" "$b")
  [ "${LANES:-2}" != 1 ] || lanes=("$a,$b")
  mkdir -p "$OUT/$name"
  echo "[$name] lanes: ${lanes[*]}"
  for k in "${!lanes[@]}"; do
    $PY "${common[@]}" --train-only --configs "${lanes[k]}" > "$OUT/$name/lane${letter[k]}.log" 2>&1 & pids+=($!)
  done
  for k in "${!pids[@]}"; do
    wait "${pids[k]}" || { failed=1; tail -20 "$OUT/$name/lane${letter[k]}.log"; }
  done
  [ $failed = 0 ] || return 1
  $PY "${common[@]}" --configs "$a,$b" ${TABLE:+--table "$TABLE"} > "$OUT/$name/compare.log" 2>&1 \
    || { tail -20 "$OUT/$name/compare.log"; return 1; }
  grep -A20 "^| config | system | best dev BLEU" "$OUT/$name/compare.log" | grep "^|"
}

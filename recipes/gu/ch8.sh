#!/usr/bin/env bash
# Gu thesis ch. 8: Non-Autoregressive Transformer with fertility (NAT) — sequence-level distillation,
# eflomal fertilities, NAT training (Eq. 8.9), fine-tuning (Eq. 8.11), argmax / average / noisy parallel
# decoding (Eqs. 8.5-8.7) and, optionally, exact parallel decoding (EPD, Eq. 8.8: the K most probable fertility
# sequences rescored by the teacher; EPD=10[,100] adds nat_ft_epdK rows), Table 8.2 rows (BLEU + latency
# speed-up vs the AR teacher) and Fig. 8.6.
# Spec: specs/004b-gu-decoding-efficient.md §3.  Driver: fairseq_ext.tools.chapters.nat_pipeline; timing: ...nat_latency.
#
#   bash recipes/gu/ch8.sh                                   # Bible es->en on this CPU (budget below)
#   TEACHER=runs/bench/JOB/transformer/checkpoint_best.pt bash recipes/gu/ch8.sh   # reuse a bench teacher
#   DATA=tiny bash recipes/gu/ch8.sh                         # the committed tiny slice, tiny models (~2 min)
#   EPD=10 bash recipes/gu/ch8.sh                            # also NAT+FT+EPD K=10 (not in the default rows)
#   AR2=1 bash recipes/gu/ch8.sh                             # also the 6+1 deep-encoder/shallow-decoder AR model
#        (Kasai et al. 2021; bench config transformer_6_1, BUDGET_MIN more minutes) in the table: ar2_b4 and
#        ar2_ct2_int8_b4 rows, the NAT's speed-ups against it too (AR2=ckpt.pt: that checkpoint)
#   MAX_UPDATE=800 FT_MAX_UPDATE=50 bash recipes/gu/ch8.sh   # NAT / FT stop at updates instead of minutes
#   MODE=thesis bash recipes/gu/ch8.sh                       # print the thesis commands (RUN=1: run them)
#   SET=low TEACHER=runs/converged/conv_es/transformer/checkpoint_best.pt PATIENCE=5 bash recipes/gu/ch8.sh
#        # convergence (issue 19): the es->en 5k-verse set (recipes/lib.sh es_en_set low), a converged teacher (the
#        # bench baseline trained to convergence by recipes/bench/converged.sh), the NAT trained until PATIENCE
#        # validations (every VALID_EVERY=200 updates) bring no better dev BLEU, capped at CAP_MIN (240) minutes,
#        # resumable, curve in runs/gu_ch8_low/nat/nat/curve.png; fine-tuning FT_MAX_UPDATE (300) updates
#
# CPU budget of the Bible mode (2 vCPUs, THREADS=1, BUDGET_MIN=15; about 2 h in all, ~40 min of it NPD s=100):
#   teacher      BUDGET_MIN min: the bench baseline `transformer` (bench_configs: 3+3 d256 FFN 1024
#                PreNorm, shared embeddings, label smoothing 0.1, beam-5 test decode) via recipes/bench/bench.py
#                -> runs/gu_ch8/transformer/ (skipped with TEACHER=ckpt; bench reuses a finished result);
#   distillation greedy decode of the 28,717 training pairs (~10 min) + eflomal fertilities (~1-2 min);
#   NAT          BUDGET_MIN min: nat_fertility_bench (the teacher's shape + positional attention + fertility
#                predictor), encoder from the teacher, the bench optimiser without label smoothing, best dev BLEU;
#   fine-tuning  FT_FRACTION x BUDGET_MIN min (default 1/3 -> 5 min), Eq. 8.11 with lambda = 0.25, lr FT_LR
#                (thesis 2e-5, constant), dev BLEU every FT_VALID_EVERY updates;
#   decoding     the 1,494 test verses at batch 64 for BLEU (AR b=4/b=1, NAT, NAT+FT argmax/average,
#                NAT+FT+NPD s=10, 100) and batch-1 latency over LAT_SENTENCES of them (default 200, a seeded
#                sample; 0 = all, as the thesis) — ~50-60 min, fp32.  NPD is s NAT passes + s teacher-forced
#                passes (~1.5 s per verse at s=100 on one core: a CPU has no idle parallel units to absorb
#                the samples, unlike the thesis' GPU).
#   Results: runs/gu_ch8/nat/results.md (+ .json), decode/latency.{json,md}, decode/latency_vs_length.png.
#
# Thesis setting (spec 004b §3.5-3.7), printed by MODE=thesis (binarized data you provide; GPU assumed):
#   IWSLT16 En->De (TED; 208,389 / 993 / 1,305 pairs; separate En/De BPE and embeddings; results on dev = tst2013):
#     AR teacher and NAT d_model 278, d_hidden 507, 5 layers, 2 heads, dropout 0.079 (thesis prints 287; code/ICLR
#     say 278), post-LN, no label smoothing; Adam (0.9, 0.98, 1e-9), Noam lr = d^-0.5 * min(step^-0.5,
#     step * 746^-1.5) (= inverse_sqrt, peak 278^-0.5 * 746^-0.5 = 2.2e-3), ~2,048 tokens per batch.
#   WMT14 En->De (4,500,966 / 3,000 / 3,003; newstest2013 dev, newstest2014 test) and WMT16 En->Ro (608,319 /
#     1,999 / 1,999; newsdev2016 / newstest2016): shared BPE (32k En-De, 40k En-Ro [I]) and shared embeddings,
#     Transformer-base (512/2048/6/8, dropout 0.1) without label smoothing, warm-up 4,000 (peak 7e-4),
#     3,072 tokens (teacher) / 1,600 (NAT).
#   All: distillation with greedy decoding of the training set (beam 4 = the ablation); fast_align IBM-2
#     (-d -o -v -N) fertilities — here eflomal, or --links-dir with fast_align links; NAT encoder from the
#     teacher; dev BLEU every 500 updates (1,000 for the AR model), best kept (~300k updates [I]); fine-tuning
#     lambda = 0.25 (En-Ro code: 0.1), constant lr 2e-5, 1,600 tokens (En-Ro 1,024), dev BLEU every 100 updates;
#     decoding argmax / NPD s=10, 100 / EPD K=10, 100 rescored by the teacher (mean token log-prob; EPD is not in
#     Table 8.2: "10-20% more time than sampling, about +0.5 BLEU"); tokenised cased BLEU after
#     BPE removal (multi-bleu); latency: batch 1, averaged over the test set, speed-up vs AR beam 4 (one P100).
#   Table 8.2: NAT 25.20 / +FT 26.52 / +NPD s=10 27.44 / s=100 28.16 vs AR b=1 28.89, b=4 29.70 (IWSLT16 dev);
#     latency 39 ms (15.6x), 79 ms (7.68x), 257 ms (2.36x), AR b=1 408 ms (1.49x), b=4 607 ms (1.00x).
USER_BUDGET=${BUDGET_MIN:-}
source "$(dirname "$0")/../lib.sh"
PY=.venv/bin/python

if [ "$MODE" = thesis ]; then
  IWSLT16_DATA=${IWSLT16_DATA:-data-bin/iwslt16_en_de}
  WMT14_DATA=${WMT14_DATA:-data-bin/wmt14_en_de}
  WMT16_DATA=${WMT16_DATA:-data-bin/wmt16_en_ro}
  for set in ${DATASETS:-iwslt16 wmt14 wmt16}; do
    case $set in
      iwslt16) D=$IWSLT16_DATA
        T_ARCH=(--arch transformer --encoder-embed-dim 278 --decoder-embed-dim 278 --encoder-ffn-embed-dim 507
                --decoder-ffn-embed-dim 507 --encoder-layers 5 --decoder-layers 5 --encoder-attention-heads 2
                --decoder-attention-heads 2 --dropout 0.079)
        N_ARCH=(--arch nat_fertility_iwslt16)
        OPT=(--lr 0.0022 --warmup-updates 746); T_TOK=2048; N_TOK=2048; FT_TOK=1600; LAMBDA=0.25; SUBSET=valid ;;
      wmt14|wmt16) [ "$set" = wmt14 ] && D=$WMT14_DATA || D=$WMT16_DATA
        T_ARCH=(--arch transformer_wmt_en_de --share-all-embeddings --dropout 0.1)
        N_ARCH=(--arch nat_fertility --share-all-embeddings --dropout 0.1)
        OPT=(--lr 0.0007 --warmup-updates 4000); T_TOK=3072; N_TOK=1600
        if [ "$set" = wmt16 ]; then FT_TOK=1024; else FT_TOK=1600; fi
        LAMBDA=0.25; SUBSET=test ;;  # En-Ro released code: --ft-lambda 0.1
      *) echo "unknown dataset $set (iwslt16 wmt14 wmt16)" >&2; exit 2 ;;
    esac
    C=checkpoints/gu_ch8_$set
    COMMON=(--user-dir fairseq_ext --optimizer adam --adam-betas '(0.9,0.98)' --adam-eps 1e-9
            --max-update 300000 --skip-invalid-size-inputs-valid-test
            --eval-bleu --eval-bleu-remove-bpe --best-checkpoint-metric bleu --maximize-best-checkpoint-metric)
    echo "# ---- $set ($D) ----"
    # 1. autoregressive teacher (no label smoothing)
    thesis .venv/bin/fairseq-train "$D" "${COMMON[@]}" --task translation_ext "${T_ARCH[@]}" --criterion cross_entropy \
      --lr-scheduler inverse_sqrt --warmup-init-lr 1e-7 "${OPT[@]}" --max-tokens $T_TOK \
      --validate-interval-updates 1000 --save-interval-updates 1000 --save-dir $C/teacher
    # 2. sequence-level distillation of the training set (greedy) + fertilities
    thesis $PY -m fairseq_ext.tools.corpora.distill --path $C/teacher/checkpoint_best.pt --data "$D" --out "$D-kd" \
      --splits train --beam 1 --gpu --fertility eflomal
    # 3. NAT (Eq. 8.9), encoder from the teacher
    thesis .venv/bin/fairseq-train "$D-kd" "${COMMON[@]}" --task translation_fertility "${N_ARCH[@]}" \
      --criterion nat_fertility_loss --init-encoder-from $C/teacher/checkpoint_best.pt \
      --lr-scheduler inverse_sqrt --warmup-init-lr 1e-7 "${OPT[@]}" --max-tokens $N_TOK \
      --validate-interval-updates 500 --save-interval-updates 500 --save-dir $C/nat
    # 4. fine-tuning (Eq. 8.11)
    thesis .venv/bin/fairseq-train "$D-kd" "${COMMON[@]}" --task translation_fertility "${N_ARCH[@]}" \
      --criterion nat_fertility_loss --finetune --teacher-path $C/teacher/checkpoint_best.pt --ft-lambda $LAMBDA \
      --ft-rl-center --ft-rl-scale 0.1 --finetune-from-model $C/nat/checkpoint_best.pt \
      --lr 2e-5 --lr-scheduler fixed --max-tokens $FT_TOK \
      --validate-interval-updates 100 --save-interval-updates 100 --save-dir $C/ft
    # 5. Table 8.2: decoding (tokenised BLEU after BPE removal: fairseq-ext-score --tokenised on the H- lines)
    thesis .venv/bin/fairseq-generate "$D" --user-dir fairseq_ext --task translation_ext --gen-subset $SUBSET \
      --path $C/teacher/checkpoint_best.pt --beam 4 --lenpen 1 --remove-bpe
    thesis .venv/bin/fairseq-generate "$D" --user-dir fairseq_ext --task translation_ext --gen-subset $SUBSET \
      --path $C/teacher/checkpoint_best.pt --beam 1 --remove-bpe
    for ck in nat ft; do
      thesis .venv/bin/fairseq-generate "$D-kd" --user-dir fairseq_ext --task translation_fertility \
        --gen-subset $SUBSET --path $C/$ck/checkpoint_best.pt --fertility-decoding argmax --remove-bpe
    done
    for s in 10 100; do
      thesis .venv/bin/fairseq-generate "$D-kd" --user-dir fairseq_ext --task translation_fertility \
        --gen-subset $SUBSET --path $C/ft/checkpoint_best.pt --npd-samples $s \
        --teacher-path $C/teacher/checkpoint_best.pt --remove-bpe
    done
    # exact parallel decoding (Eq. 8.8): the K most probable fertility sequences instead of s samples
    for k in 10 100; do
      thesis .venv/bin/fairseq-generate "$D-kd" --user-dir fairseq_ext --task translation_fertility \
        --gen-subset $SUBSET --path $C/ft/checkpoint_best.pt --fertility-decoding epd --epd-topk $k \
        --teacher-path $C/teacher/checkpoint_best.pt --rescore-batch 64 --remove-bpe
    done
    # 6. latency (batch 1, whole set; Fig. 8.6) on the GPU
    thesis $PY -m fairseq_ext.tools.chapters.nat_latency --gpu --data "$D-kd" --split $SUBSET --teacher $C/teacher/checkpoint_best.pt \
      --nat $C/nat/checkpoint_best.pt --ft $C/ft/checkpoint_best.pt --post-process subword_nmt \
      --systems ar_b4,ar_b1,nat,nat_ft,nat_ft_npd10,nat_ft_npd100,nat_ft_epd10,nat_ft_epd100 --batch-sizes 1 64 \
      --out $C/latency
  done
  exit 0
fi

NPD=${NPD:-10,100}
EPD=${EPD:-}  # exact parallel decoding sizes K, e.g. 10 or 10,100 (default: none)
if [ "${DATA:-bible}" = tiny ]; then
  # the committed tiny slice (209 training verses), sentencepiece 300, tiny 2+2 d32 models, a few updates
  OUT=runs/gu_ch8_tiny
  if [ ! -d $OUT/data/bin ]; then
    $PY -m fairseq_ext.tools.corpora.corpora bpe tests/data/bible_tiny $OUT/data/seg --src es --tgt en \
      --method sentencepiece --vocab-size 300
    $PY -m fairseq_ext.tools.corpora.corpora binarize $OUT/data/seg --out $OUT/data --src es --tgt en
  fi
  $PY -m fairseq_ext.tools.chapters.nat_pipeline --data $OUT/data --out $OUT --size tiny \
    ${TEACHER:+--teacher "$TEACHER"} --teacher-max-update "${TEACHER_UPDATES:-30}" \
    --budget-min "${USER_BUDGET:-0}" --max-update "${MAX_UPDATE:-20}" --ft-max-update "${FT_MAX_UPDATE:-5}" \
    --npd "$NPD" --epd "$EPD" --b1-max-sentences "${LAT_SENTENCES:-0}" --threads "$THREADS" ${FORCE:+--force}
  exit 0
fi

SET=${SET:-full}
case $SET in full|low) ;; *) echo "error: unknown SET '$SET' (full, low)" >&2; exit 2 ;; esac
bible_data
SEG=$(es_en_set "$SET")
JOB=gu_ch8; [ "$SET" = full ] || JOB=gu_ch8_$SET
if [ -z "${TEACHER:-}" ]; then
  # the bench baseline, BUDGET_MIN minutes -> runs/$JOB/transformer/
  nbench "$SEG" "runs/$JOB" transformer es en kjv
  TEACHER=runs/$JOB/transformer/checkpoint_best.pt
fi
AR2_ARGS=()
if [ "${AR2:-0}" = 1 ]; then   # the deep-shallow AR model, same budget, same job (compared with the baseline)
  bench gu_ch8 transformer,transformer_6_1
  AR2_ARGS=(--ar2 runs/gu_ch8/transformer_6_1/checkpoint_best.pt --ar2-name 6+1)
elif [ "${AR2:-0}" != 0 ]; then
  AR2_ARGS=(--ar2 "$AR2")
fi
NAT_BUDGET=(--budget-min "$BUDGET_MIN")
[ -z "${MAX_UPDATE:-}" ] || NAT_BUDGET=(--budget-min 0 --max-update "$MAX_UPDATE" --ft-max-update "${FT_MAX_UPDATE:-50}")
if [ -n "${PATIENCE:-}" ]; then  # the NAT to convergence: dev BLEU every VALID_EVERY updates, CAP_MIN minutes at most
  NAT_BUDGET=(--patience "$PATIENCE" --validate-every "${VALID_EVERY:-200}" --budget-min "${CAP_MIN:-240}"
              --ft-max-update "${FT_MAX_UPDATE:-300}")
fi
$PY -m fairseq_ext.tools.chapters.nat_pipeline --data "$SEG" --out "runs/$JOB/nat" --teacher "$TEACHER" \
  "${AR2_ARGS[@]}" --size small "${NAT_BUDGET[@]}" --ft-fraction "${FT_FRACTION:-0.333}" --ft-lr "${FT_LR:-2e-5}" \
  --ft-validate-interval-updates "${FT_VALID_EVERY:-50}" --npd "$NPD" --epd "$EPD" \
  --b1-max-sentences "${LAT_SENTENCES:-200}" \
  --threads "$THREADS" ${FORCE:+--force}

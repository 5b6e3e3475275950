#!/usr/bin/env bash
# Ampomah thesis ch. 3: Joint Attention Strategies over the top-n encoder layers.
#   Layer aggregation S-Agg, Iter-S-Agg, C-Agg, Iter-C-Agg; Multi-Layer Multi-Head Attention
#   M-00/01/10/11 (fairseq_ext/models/joint_attention.py, arch transformer_jas_<variant>_<size>).
#
#   bash recipes/ampomah/ch3.sh                       # Bible es->en, every variant, BUDGET_MIN each
#   CONFIGS=transformer,jas_m11 bash recipes/ampomah/ch3.sh
#   MODE=thesis THESIS_DATA=data-bin/wmt14_en_de bash recipes/ampomah/ch3.sh   # print (RUN=1: run)
#
# Thesis setting (spec 000-001 §1.5, §2): WMT'14 En->De (4.5M pairs, joint BPE ~33k, newstest2013
# valid / newstest2014 test, detokenised case-sensitive BLEU), IWSLT'14 Es->En and IWSLT'15 En->Vi
# ("small": 4 layers, 256/1024/4). Post-LN transformer, all embeddings tied, n = L (6 WMT / 4 IWSLT).
# Adam (0.9, 0.98, 1e-9), single-cycle cosine with linear warm-up (8k WMT / 4k IWSLT; peak 7e-4 / 1e-3
# as the spec recommends), 4,960 tokens x 160k updates (WMT) / 2,048 x 200k (IWSLT), label smoothing
# 0.1, beam 4 lenpen 0.6 (WMT) / beam 6 lenpen 1.1 (IWSLT). Inference-time layer masking (Table 3.5):
# fairseq-generate ... --model-overrides "{'jas_mask_layers':'2'}".
source "$(dirname "$0")/../lib.sh"

if [ "$MODE" = thesis ]; then
  : "${THESIS_DATA:?set THESIS_DATA to the binarized WMT14 En-De folder}"
  for v in sagg iter_sagg cagg iter_cagg m00 m01 m10 m11; do
    thesis .venv/bin/fairseq-train "$THESIS_DATA" --user-dir fairseq_ext --task translation_ext \
      --arch "transformer_jas_${v}_wmt_en_de" --share-all-embeddings \
      --optimizer adam --adam-betas '(0.9,0.98)' --adam-eps 1e-9 \
      --lr-scheduler cosine --warmup-updates 8000 --warmup-init-lr 1e-7 --lr 7e-4 --max-update 160000 \
      --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 4960 \
      --max-source-positions 200 --max-target-positions 200 --skip-invalid-size-inputs-valid-test \
      --validate-interval-updates 10000 --save-interval-updates 10000 --save-dir "checkpoints/jas_${v}"
    thesis .venv/bin/fairseq-generate "$THESIS_DATA" --user-dir fairseq_ext --task translation_ext \
      --path "checkpoints/jas_${v}/checkpoint_best.pt" --beam 4 --lenpen 0.6 --remove-bpe
  done
  exit 0
fi

bible_data
bench ampomah_ch3 "${CONFIGS:-transformer,jas_sagg,jas_iter_sagg,jas_cagg,jas_iter_cagg,jas_m00,jas_m01,jas_m10,jas_m11}"

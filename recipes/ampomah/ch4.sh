#!/usr/bin/env bash
# Ampomah thesis ch. 4: encoder-based multi-level supervision: auxiliary decoders on lower encoder
# layers (MS-l), sharing embeddings and output projection, trained with main + gamma * sum(aux)
# (criterion multi_supervision_label_smoothed, Eq. 4.1), and the AIF fusion of auxiliary decoder
# states into the main decoder (fairseq_ext/models/multi_supervision.py).
#
#   bash recipes/ampomah/ch4.sh                      # Bible es->en: baseline vs MS-12+AIF
#   MODE=thesis THESIS_DATA=data-bin/iwslt15_en_vi bash recipes/ampomah/ch4.sh
#
# Generate from an auxiliary decoder:   --model-overrides "{'generate_from':'aux2'}"
# AIF off at inference ("ind-decoder"): --model-overrides "{'aif_disable':True}"
# Thesis setting: as ch. 3 (spec §1.5); Table 4.6a IWSLT En->Vi MS-1/12/123 (+AIF): 17.0/21.2/25.4M
# (+AIF 17.3/21.7/26.2M); WMT MS-1+AIF 88.0M. gamma = 1.
source "$(dirname "$0")/../lib.sh"

if [ "$MODE" = thesis ]; then
  : "${THESIS_DATA:?set THESIS_DATA to the binarized IWSLT15 En-Vi folder}"
  for aux in 1 1,2 1,2,3; do
    for aif in "" "--aif"; do
      name="ms$(echo "$aux" | tr -d ,)"; [ -n "$aif" ] && name="${name}_aif"
      thesis .venv/bin/fairseq-train "$THESIS_DATA" --user-dir fairseq_ext --task translation_ext \
        --arch transformer_ms_iwslt_small --aux-layers "$aux" $aif \
        --criterion multi_supervision_label_smoothed --aux-weight 1.0 --label-smoothing 0.1 \
        --optimizer adam --adam-betas '(0.9,0.98)' --adam-eps 1e-9 --lr-scheduler cosine \
        --warmup-updates 4000 --warmup-init-lr 1e-7 --lr 1e-3 --max-update 200000 --max-tokens 2048 \
        --validate-interval-updates 4000 --save-interval-updates 4000 --save-dir "checkpoints/$name"
      thesis .venv/bin/fairseq-generate "$THESIS_DATA" --user-dir fairseq_ext --task translation_ext \
        --path "checkpoints/$name/checkpoint_best.pt" --beam 6 --lenpen 1.1 --remove-bpe
    done
  done
  exit 0
fi

bible_data
bench ampomah_ch4 "${CONFIGS:-transformer,ms12_aif}"

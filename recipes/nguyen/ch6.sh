#!/usr/bin/env bash
# Nguyen thesis ch. 6: Transformers without Tears: PreNorm, ScaleNorm (Eq. 6.5, g init sqrt(d)),
# FixNorm, SMALLINIT, and the learning-rate regimes (fairseq_ext/models/twt.py,
# fairseq_ext/optim/twt_schedules.py).
#
#   bash recipes/nguyen/ch6.sh                        # Bible es->en: baseline vs PreNorm+ScaleNorm+FixNorm
#   MODE=thesis THESIS_DATA=data-bin/iwslt15_en_vi bash recipes/nguyen/ch6.sh   # print (RUN=1: run)
#
# Every row of the ch. 6 tables is a flag combination (INV = --lr-scheduler twt_invsqrt --lr-lambda 1
# --warmup-updates 8000; common: --optimizer adam --adam-betas '(0.9,0.999)' --clip-norm 1.0
# --max-tokens 4096 --word-dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1
# --updates-per-epoch N --max-epoch E (an "epoch" is N updates, Table 6.1: validation, VALDECAY's decay
# decision, --max-epoch and --patience count them) --eval-bleu --best-checkpoint-metric bleu
# --maximize-best-checkpoint-metric --patience 20 --stop-min-lr 1e-6; --lr-model-dim must equal d):
#   6.2 Baseline Post/Pre        --arch twt_{post,pre}norm_layernorm --twt-init xavier + INV (warm-up 4k/8k/16k)
#   6.2 SMALLINIT Post/Pre       --arch twt_{post,pre}norm_layernorm + INV
#   6.3 (1)-(4)                  --arch twt_postnorm_layernorm | twt_prenorm_layernorm |
#                                twt_prenorm_fixnorm_layernorm | twt_prenorm_fixnorm_scalenorm, + INV
#   6.4 NOWARMUP                 --arch twt_prenorm_fixnorm_scalenorm --lr-scheduler valdecay --warmup-updates 0 --lr 3e-4
#   6.4 INVSQRTDECAY (+2xLR)     INV (--lr-lambda 2)
#   6.4 VALDECAY (+2xLR)         --lr-scheduler valdecay --lr-lambda 1 (2) --warmup-updates 8000
#   6.5 Post/Pre x L=4,5,6       --arch twt_{post,pre}norm_layernorm --encoder-layers L --decoder-layers L
#                                --lr-scheduler valdecay --warmup-updates 0 --lr 3e-4
#   6.6 WMT                      twt_{pre,post}norm_layernorm, twt_{pre,post}norm_fixnorm_scalenorm, --dropout 0.1
#   6.7 RMSNorm/ScaleNorm/fixed-g twt_prenorm_fixnorm_{rmsnorm,scalenorm,scalenorm_fixedg} + INV
# Word dropout (--word-dropout p: source and decoder-input tokens -> <unk> w.p. p in training, specials
# kept; default 0) is a flag of every twt_* arch. The target-vocabulary mask of the thesis is not a flag of
# the twt_* archs: transformer_lex --no-lexical --target-vocab-mask train has it (see ch4.sh).
# Thesis data (Table 6.1): TED low-resource pairs (gl/sk/ar->en, en->he) and IWSLT'15 en->vi, 8k-BPE (gl: 3k).
# The commands below are en->vi's (6+6 layers, 8 heads, dropout 0.3: the archs' defaults; 1,500 updates per
# epoch, at most 200 epochs, patience 20). sk->en: UPDATES_PER_EPOCH=600; en->he, ar->en: 2000; gl->en:
# UPDATES_PER_EPOCH=100 MAX_EPOCH=1000 PATIENCE=50, and sizes --encoder-layers 4 --decoder-layers 4
# --encoder-attention-heads 4 --decoder-attention-heads 4 --dropout 0.4.
source "$(dirname "$0")/../lib.sh"

if [ "$MODE" = thesis ]; then
  : "${THESIS_DATA:?set THESIS_DATA to a binarized TED pair folder}"
  UPDATES_PER_EPOCH=${UPDATES_PER_EPOCH:-1500} MAX_EPOCH=${MAX_EPOCH:-200} PATIENCE=${PATIENCE:-20}  # en->vi
  for arch in twt_postnorm_layernorm twt_prenorm_layernorm twt_prenorm_fixnorm_layernorm twt_prenorm_fixnorm_scalenorm; do
    thesis .venv/bin/fairseq-train "$THESIS_DATA" --user-dir fairseq_ext --task translation_ext --arch "$arch" \
      --optimizer adam --adam-betas '(0.9,0.999)' --clip-norm 1.0 --max-tokens 4096 --word-dropout 0.1 \
      --lr-scheduler twt_invsqrt --lr-lambda 1 --lr-model-dim 512 --warmup-updates 8000 \
      --updates-per-epoch "$UPDATES_PER_EPOCH" --max-epoch "$MAX_EPOCH" \
      --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --eval-bleu --eval-bleu-remove-bpe \
      --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --patience "$PATIENCE" --stop-min-lr 1e-6 \
      --save-dir "checkpoints/$arch"
    thesis .venv/bin/fairseq-generate "$THESIS_DATA" --user-dir fairseq_ext --task translation_ext \
      --path "checkpoints/$arch/checkpoint_best.pt" --beam 4 --gnmt-alpha 0.6 --remove-bpe
  done
  exit 0
fi

bible_data
bench nguyen_ch6 "${CONFIGS:-transformer,twt_scalenorm_fixnorm}"

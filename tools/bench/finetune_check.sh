#!/usr/bin/env bash
# Fine-tuning against training from scratch: Multi30k's training set in two halves (A: lines
# 1-14,500, B: the rest), every run on the multi30k-15min recipe with its budget changed:
#   A15     15 minutes on A (the recipe's vocabulary, trained on A)
#   A15+B5  A15's best checkpoint fine-tuned 5 minutes on B (train --init-from: its vocabulary,
#           a new 5-minute schedule, fresh optimizer state)
#   B5      5 minutes from scratch on B (A15's vocabulary, so only the weights differ)
#   A20     20 minutes on A (A15's vocabulary)
# then each one's BLEU (beam 5) on the validation set and on test_2016. About 45 minutes of
# training; run from the project root after tools/get_data.sh.
#   tools/bench/finetune_check.sh [OUT_DIR]
set -euo pipefail
out=${1:-runs/finetune}
tm=${TORCHMT_BUILD_DIR:-build}/torchmt
d=data/multi30k
mkdir -p "$out/data"
for side in de en; do
  zcat "$d/train.$side.gz" | sed -n 1,14500p > "$out/data/A.$side"
  zcat "$d/train.$side.gz" | tail -n +14501 > "$out/data/B.$side"
done
train() {  # NAME HALF [train options...]
  local name=$1 half=$2
  shift 2
  [ -f "$out/$name/checkpoint_best.pt" ] && return 0  # done by an earlier call
  "$tm" train --recipe multi30k-15min --train-src "$out/data/$half.de" --train-tgt "$out/data/$half.en" \
    --valid-src "$d/val.de.gz" --valid-tgt "$d/val.en.gz" --out "$out/$name" "$@" 2>&1 | tail -n 3
}
train A15 A
train A15+B5 B --init-from "$out/A15/checkpoint_best.pt" --max-minutes 5
train B5 B --spm "$out/A15/spm.model" --max-minutes 5
train A20 A --spm "$out/A15/spm.model" --max-minutes 20
printf '%-8s %10s %10s\n' run val test_2016
for name in A15 A15+B5 B5 A20; do
  bleu() { "$tm" evaluate -m "$out/$name/checkpoint_best.pt" --src "$d/$1.de.gz" --ref "$d/$1.en.gz" --beam 5 -q \
    | grep -o 'BLEU[^=]*= *[0-9.]*' | grep -o '[0-9.]*$'; }
  printf '%-8s %10s %10s\n' "$name" "$(bleu val)" "$(bleu test_2016_flickr)"
done

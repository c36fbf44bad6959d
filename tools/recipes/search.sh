#!/usr/bin/env bash
# One point of the recipe search (tools/recipes/README.md): trains with the given flags, then scores
# the best checkpoint on the validation set only (greedy and beam 5) and appends one line to
# runs/search/results.tsv. The test sets are scored once, for the final choice, by hand.
#   tools/recipes/search.sh NAME [SRC TGT] -- TRAIN_FLAGS...
#   e.g. tools/recipes/search.sh cosine-2e-3 -- --recipe multi30k-15min --lr 0.002
#        tools/recipes/search.sh ende en de -- --recipe multi30k-15min   (English->German)
#   SEARCH_SCORE_ONLY=1: score a finished run again without training
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=$1; shift
src=de; tgt=en
if [ "${1:-}" != "--" ]; then src=$1; tgt=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
tm=${TORCHMT:-$root/build/torchmt}
d=${MULTI30K_DIR:-$root/data/multi30k}
out=${SEARCH_DIR:-$root/runs/search}
mkdir -p "$out"
run="$out/$name"
log="$out/$name.log"
[ -n "${SEARCH_SCORE_ONLY:-}" ] || "$tm" train --train-src "$d/train.$src.gz" --train-tgt "$d/train.$tgt.gz" --valid-src "$d/val.$src.gz" \
  --valid-tgt "$d/val.$tgt.gz" --out "$run" "$@" 2>&1 | tee "$log" | grep -E "^(valid|schedule|dtype|done|model)" || true
bleu() {  # BEAM LENPEN
  "$tm" evaluate -m "$run/checkpoint_best.pt" --src "$d/val.$src.gz" --ref "$d/val.$tgt.gz" --beam "$1" \
    --lenpen "$2" 2>/dev/null | grep -m1 -o '^BLEU = [0-9.]*' | grep -o '[0-9.]*$'
}
updates=$(grep -o "^done: [0-9]*" "$log" | grep -o "[0-9]*$" || true)
tok_s=$(grep -o "[0-9]* target tokens/s" "$log" | tail -1 | grep -o "^[0-9]*" || true)
# Which weights checkpoint_best.pt holds: the last validation line marked (best).
best_from=$(grep "(best)" "$log" | tail -1 | grep -o "[a-z ]*: loss [0-9.]*, BLEU [0-9.]* (best)" | cut -d: -f1 || true)
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$src-$tgt" "$updates" "$tok_s" "${best_from:-weights}" \
  "$(bleu 1 0.6)" "$(bleu 5 0.6)" "$(bleu 5 1.0)" "$*" | tee -a "$out/results.tsv"

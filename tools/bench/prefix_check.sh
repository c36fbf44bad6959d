#!/usr/bin/env bash
# Target prefixes end to end: on test_2016 and test_2017, each line's prefix the first two words of
# its reference, `translate --target-prefix` with greedy and beam 5, the checkpoint and its
# TorchScript export; prints how many outputs start with their prefix, and BLEU.
#   tools/bench/prefix_check.sh MODEL.pt [DATA_DIR (data/multi30k)] [BUILD_DIR (build)]
set -euo pipefail
model=${1:?usage: tools/bench/prefix_check.sh MODEL.pt [DATA_DIR] [BUILD_DIR]}
data=${2:-data/multi30k}
tm=${3:-build}/torchmt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$tm" export -m "$model" -o "$work/model.ts" > /dev/null
for set in test_2016_flickr test_2017_flickr; do
  zcat "$data/$set.en.gz" | awk '{print $1" "$2}' > "$work/prefix"
  for m in "$model" "$work/model.ts"; do
    for beam in 1 5; do
      "$tm" translate -m "$m" -i "$data/$set.de.gz" --target-prefix "$work/prefix" --beam $beam -o "$work/out" -q 2>/dev/null
      ok=$(paste -d'\t' "$work/prefix" "$work/out" | awk -F'\t' 'index($2, $1) == 1' | wc -l)
      bleu=$("$tm" evaluate --hyp "$work/out" --ref "$data/$set.en.gz" 2>&1 | head -1 | cut -d' ' -f1-3)
      echo "$set $(basename "$m") beam $beam: $ok of $(wc -l < "$work/out") start with their prefix; $bleu"
    done
  done
done

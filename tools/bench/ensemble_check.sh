#!/usr/bin/env bash
# Ensembles (issue 76 part 2): BLEU of two models and of their ensemble on test_2016 and test_2017
# (beam 5, length penalty 1.0), and the whole-process time of each decoding (farm-style: one run
# each, the ratio ensemble / single from this run). Goal: the ensemble gains >= 1 BLEU over the
# better model on both sets, at most 2x a single model's time.
#   tools/bench/ensemble_check.sh A.pt B.pt [DATA_DIR (data/multi30k)] [BUILD_DIR (build)]
set -euo pipefail
a=${1:?usage: tools/bench/ensemble_check.sh A.pt B.pt [DATA_DIR] [BUILD_DIR]}
b=${2:?usage: tools/bench/ensemble_check.sh A.pt B.pt [DATA_DIR] [BUILD_DIR]}
data=${3:-data/multi30k}
tm=${4:-build}/torchmt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for set in test_2016_flickr test_2017_flickr; do
  for beam in 1 5; do
    declare -A secs=()
    for name in A B A+B; do
      case $name in A) models=(-m "$a") ;; B) models=(-m "$b") ;; A+B) models=(-m "$a" -m "$b") ;; esac
      start=$(date +%s.%N)
      "$tm" translate "${models[@]}" -i "$data/$set.de.gz" -o "$work/out" --beam $beam --lenpen 1.0 --dtype fp32 -q 2>/dev/null
      secs[$name]=$(echo "$(date +%s.%N) - $start" | bc)
      bleu=$("$tm" evaluate --hyp "$work/out" --ref "$data/$set.en.gz" 2>&1 | head -1 | cut -d' ' -f1-3)
      printf '%s beam %d %-4s %s  %.1f s\n' "$set" "$beam" "$name" "$bleu" "${secs[$name]}"
    done
    echo "$set beam $beam: ensemble time / A's $(echo "scale=2; ${secs[A+B]} / ${secs[A]}" | bc), / B's $(echo "scale=2; ${secs[A+B]} / ${secs[B]}" | bc)"
  done
done

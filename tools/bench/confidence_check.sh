#!/usr/bin/env bash
# Confidence (issue 76 part 3): fits the calibration on the validation set, then measures the raw
# and the calibrated estimate on test_2017 (never fitted on): Spearman's rho of sentence
# confidence and sentence chrF (goal >= 0.5) and the word-level ROC AUC for "this word does not
# appear in the reference" (goal >= 0.70). Beam 5, length penalty 1.0 (the recipe's evaluation).
#   tools/bench/confidence_check.sh MODEL.pt [DATA_DIR (data/multi30k)] [BUILD_DIR (build)]
set -euo pipefail
model=${1:?usage: tools/bench/confidence_check.sh MODEL.pt [DATA_DIR] [BUILD_DIR]}
data=${2:-data/multi30k}
tm=${3:-build}/torchmt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
search=(--beam 5 --lenpen 1.0 --dtype fp32 -q)
echo "== fit on val (in-sample figures) =="
"$tm" confidence -m "$model" --src "$data/val.de.gz" --ref "$data/val.en.gz" --fit "$work/calibration.json" "${search[@]}"
echo "== test_2017_flickr =="
"$tm" confidence -m "$model" --src "$data/test_2017_flickr.de.gz" --ref "$data/test_2017_flickr.en.gz" \
  --calibration "$work/calibration.json" "${search[@]}"

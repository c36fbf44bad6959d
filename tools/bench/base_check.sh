#!/usr/bin/env bash
# A base-size model against CTranslate2 on the CPU, measured in one run (tools/bench/README.md,
# "Base size against CTranslate2"): BLEU of torchmt fp32 and int8, greedy and beam 5, on test_2016
# and test_2017, each with and without a vocabulary shortlist built from the training set; then
# bench_translate against CTranslate2 on the same weights (its export by torchmt) in the four rows
# (greedy / beam 5 x batch 64 / 1) and in CTranslate2's own protocol (beam 4, batch 32), fp32 and
# int8, and the shortlist's speed-ups.
#   tools/bench/base_check.sh [CHECKPOINT] [SENTENCES]
#   CHECKPOINT: default runs/multi30k_cpu_base/checkpoint_best.pt (train it:
#     build/torchmt train --config tools/recipes/multi30k_cpu_base.yaml)
#   SENTENCES of test_2016 for the speed runs (default 0 = all 1,000: with 200, batch 64 is four
#   batches for two workers and the rows measure the last batch's idle worker); ROUNDS (default 1);
#   MAX_LENGTH: both sides' length limit (default 256, CTranslate2's: an undertrained model's
#   looping lines then cost both sides alike); SKIP_BLEU=1, SKIP_SPEED=1, CT2_SETTINGS (default 2x1)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
model=${1:-runs/multi30k_cpu_base/checkpoint_best.pt}
sentences=${2:-0}
rounds=${ROUNDS:-1}
tm=build/torchmt
d=data/multi30k
[ -f "$model" ] || { echo "base_check: $model not found (train one: $tm train --config tools/recipes/multi30k_cpu_base.yaml)" >&2; exit 2; }
[ -f "$d/train.de.gz" ] || { echo "base_check: run tools/get_data.sh first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "base_check: $model, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"

$tm shortlist -m "$model" --src $d/train.de.gz --tgt $d/train.en.gz -o "$work/shortlist.tsv" 2>&1 | tail -1

if [ "${SKIP_BLEU:-0}" != 1 ]; then
  echo "== BLEU (sacreBLEU-exact, torchmt evaluate) =="
  for test in test_2016_flickr test_2017_flickr; do
    for dtype in fp32 int8; do
      for beam in 1 5; do
        for shortlist in "" "$work/shortlist.tsv"; do
          bleu=$($tm evaluate -m "$model" --src $d/$test.de.gz --ref $d/$test.en.gz --beam $beam --dtype $dtype -q \
                   ${shortlist:+--shortlist "$shortlist"} 2>/dev/null | grep -o 'BLEU[^/]*= [0-9.]*' | head -1)
          printf '  %-17s %-5s beam %s %-10s %s\n' "$test" "$dtype" "$beam" "${shortlist:+shortlist}" "$bleu"
        done
      done
    done
  done
fi

if [ "${SKIP_SPEED:-0}" != 1 ]; then
  common=(-m "$model" --sentences "$sentences" --dtypes fp32,int8 --no-uncached --no-python
          --ct2-settings "${CT2_SETTINGS:-2x1}" --rounds "$rounds" --fixed-length "${MAX_LENGTH:-256}")
  echo "== the four rows, with the shortlist's speed-ups =="
  build/bench_translate "${common[@]}" --beams 1,5 --batch-sizes 64,1 --shortlist "$work/shortlist.tsv"
  echo "== CTranslate2's protocol: beam 4, batch 32 =="
  build/bench_translate "${common[@]}" --beams 4 --batch-sizes 32
fi

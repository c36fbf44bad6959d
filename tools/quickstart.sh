#!/usr/bin/env bash
# From a fresh clone to a working German->English translator in one command: install what the
# CLI needs (no test oracles) and build it, fetch Multi30k, train the vocabulary and a model with
# the multi30k-15min recipe (15 minutes of training on a CPU; the full schedule when a GPU is
# present), translate a few sentences and score test_2016_flickr with sacreBLEU-exact BLEU.
# Prints the wall time of each phase at the end.
#   QUICKSTART_MINUTES  training budget on CPU (default: the recipe's 15)
#   QUICKSTART_RUN      run directory (default runs/quickstart)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
phases=()
start=$SECONDS
phase() {  # NAME: record the time since the previous mark
  phases+=("$(printf '%-28s %4d s' "$1" $((SECONDS - start)))")
  start=$SECONDS
}
total_start=$SECONDS

TORCHMT_SETUP=cli TORCHMT_TARGETS=torchmt "$root/tools/setup.sh"  # only what this script runs
tm="$root/${TORCHMT_BUILD_DIR:-build}/torchmt"
phase "set up and build"
"$root/tools/get_data.sh"
phase "data"
d=data/multi30k
run=${QUICKSTART_RUN:-runs/quickstart}

if python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && "$tm" info >/dev/null; then
  budget=(--recipe multi30k-15min --max-minutes 0 --max-epochs 30)  # GPU: the full schedule
else
  budget=(--recipe multi30k-15min ${QUICKSTART_MINUTES:+--max-minutes "$QUICKSTART_MINUTES"})
fi
resume=()
[ -f "$run/checkpoint_last.pt" ] && resume=(--resume)
"$tm" train --train-src $d/train.de.gz --train-tgt $d/train.en.gz --valid-src $d/val.de.gz --valid-tgt $d/val.en.gz \
  "${budget[@]}" --out "$run" "${resume[@]}"
phase "vocabulary and training"

echo
echo "== a few translations (greedy) =="
printf '%s\n' "Ein Mann fährt mit dem Fahrrad durch die Stadt." "Zwei Kinder spielen im Park mit einem Hund." \
  "Eine Frau liest ein Buch am Strand." | "$tm" translate -m "$run/checkpoint_best.pt" \
  --attention-svg "$run/attention.svg"
echo
lenpen=1.45  # chosen on the validation set (tools/recipes/README.md, "The length penalty")
echo "== test_2016_flickr (beam 5, length penalty $lenpen) =="
"$tm" evaluate -m "$run/checkpoint_best.pt" --src $d/test_2016_flickr.de.gz --ref $d/test_2016_flickr.en.gz --beam 5 \
  --lenpen $lenpen \
  | tee "$run/test_2016.txt"
phase "translate and evaluate"

echo
echo "== wall time =="
printf '%s\n' "${phases[@]}"
printf '%-28s %4d s\n' "total" $((SECONDS - total_start))
echo
echo "BLEU (test_2016_flickr, beam 5, lenpen $lenpen): $(grep -m1 -o '^BLEU = [0-9.]*' "$run/test_2016.txt")"
echo "Pictures: $run/curves.svg (loss and BLEU), $run/attention.svg (cross-attention of the first sentence)"
echo "Metrics: $run/metrics.csv   Model: $run/checkpoint_best.pt"

#!/usr/bin/env bash
# From a fresh clone to a working German->English translator in one command:
# set up and build, fetch Multi30k, train the vocabulary and a model (about 15 minutes of
# training on a CPU; the full schedule when a GPU is present), translate a few sentences
# and score test_2016_flickr with sacreBLEU-exact BLEU.
#   QUICKSTART_MINUTES  training budget on CPU (default 15)
#   QUICKSTART_RUN      run directory (default runs/quickstart)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
TORCHMT_TARGETS=torchmt "$root/tools/setup.sh"  # only what this script runs
tm="$root/${TORCHMT_BUILD_DIR:-build}/torchmt"
"$root/tools/get_data.sh"
d=data/multi30k
run=${QUICKSTART_RUN:-runs/quickstart}

if python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && "$tm" info >/dev/null; then
  budget=(--max-epochs 30)  # GPU: the full schedule
else
  budget=(--max-minutes "${QUICKSTART_MINUTES:-15}")
fi
resume=()
[ -f "$run/checkpoint_last.pt" ] && resume=(--resume)
"$tm" train --train-src $d/train.de.gz --train-tgt $d/train.en.gz --valid-src $d/val.de.gz --valid-tgt $d/val.en.gz \
  --preset small --dropout 0.2 --warmup 1000 --batch-tokens 4096 "${budget[@]}" --out "$run" "${resume[@]}"

echo
echo "== a few translations (greedy) =="
printf '%s\n' "Ein Mann fährt mit dem Fahrrad durch die Stadt." "Zwei Kinder spielen im Park mit einem Hund." \
  "Eine Frau liest ein Buch am Strand." | "$tm" translate -m "$run/checkpoint_best.pt"
echo
echo "== test_2016_flickr (beam 5) =="
"$tm" evaluate -m "$run/checkpoint_best.pt" --src $d/test_2016_flickr.de.gz --ref $d/test_2016_flickr.en.gz --beam 5
echo
echo "Curves: $run/curves.svg   Metrics: $run/metrics.csv   Model: $run/checkpoint_best.pt"

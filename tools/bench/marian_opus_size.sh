#!/usr/bin/env bash
# An imported Marian model at OPUS-MT's size (6+6 layers, d_model 512, FFN 2048, 58,101 pieces,
# random weights: tools/bench/make_marian_model.py --opus-size), timed through `torchmt import`
# and `export --format marian`, then translated by torchmt and by CTranslate2 from the same
# directory converted with CTranslate2's own ct2-transformers-converter (bench_translate
# --ct2-models). Run from the project root after tools/get_data.sh.
#   tools/bench/marian_opus_size.sh [SENTENCES] [WORK_DIR]     (SENTENCES of test_2016; 0 = all)
set -euo pipefail
sentences=${1:-300}
work=${2:-${TMPDIR:-/tmp}/torchmt_marian_opus}
build=${TORCHMT_BUILD_DIR:-build}
rm -rf "$work" && mkdir -p "$work"
# Random weights end a sentence at once or never: the end never wins here, and every sentence is
# decoded for exactly 20 steps by both (bench_translate --fixed-length).
python3 tools/bench/make_marian_model.py "$work/marian" data/multi30k/train.de.gz --opus-size --eos-bias -100
start=$(date +%s.%N)
"$build/torchmt" import --format marian "$work/marian" -o "$work/model.pt"
middle=$(date +%s.%N)
"$build/torchmt" export -m "$work/model.pt" --format marian -o "$work/exported"
end=$(date +%s.%N)
echo "import $(echo "$middle - $start" | bc) s, export $(echo "$end - $middle" | bc) s, checkpoint $(du -m "$work/model.pt" | cut -f1) MB"
for q in float32 int8; do
  ct2-transformers-converter --model "$work/marian" --output_dir "$work/ct2_$q" --quantization "$q" --force >/dev/null
done
grep -E '"add_source_eos"|"decoder_start_token"' "$work/ct2_float32/config.json" || true
"$build/bench_translate" -m "$work/model.pt" --sentences "$sentences" --beams 1,5 --batch-sizes 64,1 \
  --dtypes fp32,int8 --no-uncached --no-python --ct2-settings 2x1 --rounds 1 \
  --fixed-length 20 --ct2-models "fp32=$work/ct2_float32,int8=$work/ct2_int8"

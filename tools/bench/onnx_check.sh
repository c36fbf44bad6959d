#!/usr/bin/env bash
# The ONNX export and static int8, measured in one run (tools/bench/README.md, "ONNX export and
# static int8"): export time and size (fp32, static int8); BLEU (beam 5) on test_2016 and test_2017
# of torchmt fp32, torchmt dynamic int8, torchmt static int8 (a TorchScript export made with
# --calibrate, `translate --dtype int8`), ONNX Runtime fp32 and static int8 (tools/onnx_translate.py);
# whole-process translate times of torchmt dynamic vs static int8, both from TorchScript exports
# (best of ROUNDS); then
# bench_translate with ONNX Runtime as a peer (greedy / beam 5 x batch 1 / 64, same threads).
#   tools/bench/onnx_check.sh [CHECKPOINT] [CALIBRATION_LINES]
#   ROUNDS (default 3), THREADS (default: all cores), SKIP_SPEED=1 (only exports and BLEU)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
model=${1:-runs/quickstart/checkpoint_best.pt}
calibration_lines=${2:-200}
rounds=${ROUNDS:-3}
threads=${THREADS:-$(env -u OMP_NUM_THREADS nproc)}
tm=build/torchmt
d=data/multi30k
[ -f "$model" ] || { echo "onnx_check: $model not found (train one: tools/quickstart.sh)" >&2; exit 2; }
[ -f "$d/val.de.gz" ] || { echo "onnx_check: run tools/get_data.sh first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "onnx_check: $model, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads"

# Calibration sentences: the first N of the validation set (never a test set).
zcat "$d/val.de.gz" | sed -n "1,${calibration_lines}p" > "$work/calibration.de"
timed() {  # LABEL COMMAND...: runs it, prints its wall time
  local label=$1 start end
  shift
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  printf '  %-44s %6.2f s\n' "$label" "$(echo "$end - $start" | bc)"
}
size() { du -sk "$1" | cut -f1; }
echo "== exports =="
timed "onnx fp32" $tm export -m "$model" --format onnx -o "$work/onnx_fp32" 2>/dev/null
timed "onnx static int8 ($calibration_lines calibration lines)" \
  $tm export -m "$model" --format onnx --calibrate "$work/calibration.de" -o "$work/onnx_int8" 2>/dev/null
timed "torchscript fp32 + static int8 ranges" \
  $tm export -m "$model" --calibrate "$work/calibration.de" -o "$work/static.ts" 2>/dev/null
timed "torchscript fp32" $tm export -m "$model" -o "$work/dynamic.ts" 2>/dev/null
echo "  sizes: onnx fp32 $(size "$work/onnx_fp32") KiB, onnx static int8 $(size "$work/onnx_int8") KiB," \
     "torchscript $(size "$work/static.ts") KiB"

echo "== BLEU, beam 5 =="
[ "${SKIP_BLEU:-0}" = 1 ] || for test in test_2016_flickr test_2017_flickr; do
  zcat "$d/$test.de.gz" > "$work/src.de"
  run() {  # NAME COMMAND...: translation of src.de to work/NAME.en, then its BLEU
    local name=$1
    shift
    "$@" < "$work/src.de" > "$work/$name.en"
    printf '  %-18s %-28s %s\n' "$test" "$name" \
      "$($tm evaluate --hyp "$work/$name.en" --ref "$d/$test.en.gz" 2>/dev/null | grep -o 'BLEU[^/]*= [0-9.]*' | head -1)"
  }
  run torchmt_fp32 $tm translate -m "$model" --beam 5 -q
  run torchmt_int8_dynamic $tm translate -m "$model" --beam 5 --dtype int8 -q
  run torchmt_int8_static $tm translate -m "$work/static.ts" --beam 5 --dtype int8 -q
  run onnxruntime_fp32 python3 tools/onnx_translate.py -m "$work/onnx_fp32" --beam 5 --threads "$threads"
  run onnxruntime_int8_static python3 tools/onnx_translate.py -m "$work/onnx_int8" --beam 5 --threads "$threads"
  printf '  %-18s onnxruntime fp32 lines equal to torchmt fp32: %s of %s\n' "$test" \
    "$(paste -d '\t' "$work/onnxruntime_fp32.en" "$work/torchmt_fp32.en" | awk -F'\t' '$1 == $2' | wc -l)" \
    "$(wc -l < "$work/src.de")"
done
[ "${SKIP_SPEED:-0}" = 1 ] && exit 0

echo "== torchmt int8: dynamic vs static (the two TorchScript exports), whole processes, best of $rounds =="
zcat "$d/test_2016_flickr.de.gz" > "$work/src.de"
best() {  # COMMAND...: the fastest of $rounds runs, seconds
  local best=999999 start end t
  for _ in $(seq "$rounds"); do
    start=$(date +%s.%N)
    "$@" < "$work/src.de" > /dev/null
    end=$(date +%s.%N)
    t=$(echo "$end - $start" | bc)
    best=$(echo "if ($t < $best) $t else $best" | bc)
  done
  echo "$best"
}
for search in "--beam 1 --batch-size 64" "--beam 5 --batch-size 64" "--beam 1 --batch-size 1" "--beam 5 --batch-size 1"; do
  # shellcheck disable=SC2086
  dynamic=$(best $tm translate -m "$work/dynamic.ts" $search --dtype int8 -q)
  # shellcheck disable=SC2086
  static=$(best $tm translate -m "$work/static.ts" $search --dtype int8 -q)
  printf '  %-26s dynamic %6.2f s, static %6.2f s, static/dynamic speed %.3fx\n' "$search" "$dynamic" "$static" \
    "$(echo "$dynamic / $static" | bc -l)"
done

[ "${SKIP_PEERS:-0}" = 1 ] && exit 0
echo "== bench_translate: torchmt vs ONNX Runtime =="
build/bench_translate -m "$model" --threads "$threads" --dtypes fp32,int8 --beams 1,5 --batch-sizes 1,64 \
  --no-python --no-uncached --no-ctranslate2 --onnx-models "fp32=$work/onnx_fp32,int8=$work/onnx_int8"

#!/usr/bin/env bash
# The CPU kernels on every instruction set this machine runs (src/kernels/cpu_isa.h), end to end:
#   tools/cpu_isa_checks.sh MODEL [BUILD_DIR]      (MODEL: a checkpoint; BUILD_DIR default: build)
# For each level from `portable` up to the detected one (TORCHMT_CPU_ISA):
#   - the kernel tests (the CpuIsa/* suites run every level anyway; here at 2 and all threads);
#   - greedy fp32 on test_2016 and test_2017 with the screened projection and without it
#     (TORCHMT_SCREENED_ARGMAX=0, the full projection): the lines must be identical;
#   - beam 5 fp32 likewise (TORCHMT_SCREENED_BEAM=0): its normaliser is approximate (~2e-4), so
#     lines may differ on near-ties: at most 5 of 1,000;
#   - greedy and beam 5 in fp32 and int8: lines that differ from the highest level's, seconds.
# int8 must be identical on avx2 and every level above it (the same integers; ATen's kernels at
# avx2 on all of them; attention in the kernel layer's rows, not MKL's GEMMs, whose AVX-512 code
# rounds otherwise on Intel); portable's float kernels (no FMA) and ATen's portable ones round otherwise,
# so its int8 lines, like fp32's anywhere the GEMM libraries round differently, are counted, not
# failed. Prints one summary line per check; exits 1
# when a check that must hold does not. ISA_CHECK_FROM=avx2 starts at a higher level;
# ISA_CHECK_WORKERS (default 2) decoding workers of 2 threads each.
set -uo pipefail
model=${1:?usage: tools/cpu_isa_checks.sh MODEL [BUILD_DIR]}
build=${2:-build}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tm=$build/torchmt
d=${ISA_DATA:-data/multi30k}  # test_2016_flickr / test_2017_flickr .de.gz
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
isas=$("$tm" info --preset tiny | sed -n 's/^cpu kernels: \([a-z0-9-]*\).*/\1/p')
levels=()
from=${ISA_CHECK_FROM:-portable}
for level in portable avx2 avx512 avx512-vnni avx512-bf16 avx512-amx; do
  [ "$level" = "$from" ] && from=
  [ -z "$from" ] && levels+=("$level")
  [ "$level" = "$isas" ] && break
done
top=${levels[-1]}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; levels: ${levels[*]}"

threads=$(nproc)
for t in 2 "$threads"; do
  OMP_NUM_THREADS=$t "$build/torchmt_tests" --gtest_filter='CpuIsa/*:PackedLinear*' --gtest_brief=1 >"$out/tests.$t" 2>&1
  rc=$?
  echo "kernel tests, $t threads: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$out/tests.$t" | tr '\n' ' ') (rc $rc)"
  [ $rc -eq 0 ] || { status=1; grep -E -A6 "Failure" "$out/tests.$t" | head -40; }
done

translate() {  # level set dtype beam screen -> file; prints seconds
  local level=$1 set=$2 dtype=$3 beam=$4 screen=$5
  local start=$(date +%s.%N)
  zcat "$d/$set.de.gz" | TORCHMT_CPU_ISA=$level TORCHMT_SCREENED_ARGMAX=$screen TORCHMT_SCREENED_BEAM=$screen OMP_NUM_THREADS=2 \
    "$tm" translate -m "$model" --device cpu --dtype "$dtype" --beam "$beam" --workers "${ISA_CHECK_WORKERS:-2}" -q \
    >"$out/$level.$set.$dtype.$beam.$screen" 2>"$out/err" || { cat "$out/err"; status=1; }
  awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", b - a }'
}

for level in "${levels[@]}"; do
  for set in test_2016_flickr test_2017_flickr; do
    s1=$(translate "$level" $set fp32 1 1)
    s0=$(translate "$level" $set fp32 1 0)
    if cmp -s "$out/$level.$set.fp32.1.1" "$out/$level.$set.fp32.1.0"; then same=identical; else
      same="DIFFERENT ($(diff "$out/$level.$set.fp32.1.1" "$out/$level.$set.fp32.1.0" | grep -c '^<') lines)"; status=1; fi
    echo "$level $set greedy fp32, screen vs full projection: $same (${s1} s vs ${s0} s)"
    for dtype in int8 fp32; do
      for beam in 1 5; do
        [ "$dtype.$beam" = fp32.1 ] || translate "$level" $set $dtype $beam 1 >"$out/secs.$level.$set.$dtype.$beam"
      done
    done
    s0=$(translate "$level" $set fp32 5 0)
    n=$(diff "$out/$level.$set.fp32.5.1" "$out/$level.$set.fp32.5.0" | grep -c '^<')
    echo "$level $set beam 5 fp32, screen vs full projection: $n lines differ ($(cat "$out/secs.$level.$set.fp32.5") s vs ${s0} s)"
    [ "$n" -le 5 ] || status=1
  done
done
for level in "${levels[@]}"; do
  for set in test_2016_flickr test_2017_flickr; do
    for dtype in int8 fp32; do
      for beam in 1 5; do
        f=$out/$level.$set.$dtype.$beam.1
        n=$(diff "$f" "$out/$top.$set.$dtype.$beam.1" | grep -c '^<')
        secs=$(cat "$out/secs.$level.$set.$dtype.$beam" 2>/dev/null || echo "-")
        echo "$level $set $dtype beam $beam: $n lines differ from $top; ${secs} s"
        [ "$dtype" = int8 ] && [ "$level" != portable ] && [ "$n" -ne 0 ] && status=1
      done
    done
  done
done
exit $status

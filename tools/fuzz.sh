#!/usr/bin/env bash
# libFuzzer campaigns on the targets of tests/fuzz/ (records: tools/bench/README.md, "Fuzzing").
#   tools/fuzz.sh [--runs N] [--seconds S] [TARGET...]
#       default: 1,000,000 executions of every target (--seconds: stop each target after S s)
# Builds build-fuzz/ with clang (coverage + ASan + UBSan on torchmt's code; clang comes from
# Debian when missing), runs each target from its committed corpus, then replaces that corpus with
# the smallest set covering what both reached (commit it: every test build replays it).
# A finding stops the script with the reproducer's path; its log is build-fuzz/fuzz-TARGET.log.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
runs=1000000
max_seconds=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seconds) max_seconds=$2; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  for src in tests/fuzz/*.cpp; do
    name=$(basename "$src" .cpp)
    [ "$name" = replay_main ] || targets+=("$name")
  done
fi
for t in "${targets[@]}"; do
  [ -f "tests/fuzz/$t.cpp" ] || { echo "fuzz.sh: no target '$t' (tests/fuzz/$t.cpp)" >&2; exit 2; }
done
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: installing clang (Debian)" >&2
  [ "$(id -u)" -eq 0 ] && sudo_cmd="" || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq clang >/dev/null
fi
build=build-fuzz
CC=clang CXX=clang++ TORCHMT_BUILD_DIR=$build \
  TORCHMT_CMAKE_ARGS="-DTORCHMT_FUZZ=ON -DTORCHMT_BUILD_TESTS=OFF -DTORCHMT_BUILD_BENCHMARKS=OFF" \
  TORCHMT_TARGETS="${targets[*]/#/fuzz_}" "$root/tools/setup.sh"

# LibTorch is not instrumented: its allocations at exit are not ours to report (no leak checks).
# The targets' own stderr is closed (the checkpoint loader warns on every unsealed input), so the
# sanitizers write their reports to files next to the log.
export OMP_NUM_THREADS=1
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  log="$build/fuzz-$t.log"
  mkdir -p "$work" "tests/fuzz/corpus/$t"
  export ASAN_OPTIONS="detect_leaks=0:log_path=$root/$build/asan-$t"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$root/$build/ubsan-$t"
  start=$(date +%s)
  set +e
  "$build/fuzz_$t" -runs="$runs" -max_total_time="$max_seconds" -timeout=30 -rss_limit_mb=4096 -close_fd_mask=2 -print_final_stats=1 \
    -artifact_prefix="$root/$build/finding-$t-" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
  code=$?
  set -e
  seconds=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$code" -ne 0 ]; then
    echo "fuzz.sh: $t: FINDING after ${execs:-?} executions (exit $code): $(ls "$build"/finding-"$t"-* 2>/dev/null | head -1); see $log" >&2
    exit 1
  fi
  # The committed corpus becomes the smallest set that covers every edge the two sets reach
  # (edges only, not hit counts: a few hundred small files rather than thousands).
  before=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
  merged="$build/merged-$t"
  rm -rf "$merged" && mkdir -p "$merged"
  "$build/fuzz_$t" -merge=1 -use_counters=0 -close_fd_mask=2 "$merged" "tests/fuzz/corpus/$t" "$work" >>"$log" 2>&1
  rm -rf "tests/fuzz/corpus/$t" && mv "$merged" "tests/fuzz/corpus/$t"
  after=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
  echo "fuzz.sh: $t: ${execs:-?} executions in ${seconds} s ($(( ${execs:-0} / (seconds > 0 ? seconds : 1) ))/s), no finding; corpus $before -> $after files" >&2
done

#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite, then the same suite under AddressSanitizer +
# UndefinedBehaviorSanitizer (what CI runs: .ci/run). Arguments after the mode go to ctest.
#   tools/test.sh              everything (CI's limit is 90 min on 2 cores; each phase prints when it ends)
#   tools/test.sh --quick      without the sanitizer pass
#   tools/test.sh --sanitize   only the sanitizer pass (build-asan/)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=all
# Where the time goes, in CI's log too: minutes since the start at the end of each phase.
mark() { echo "test.sh: $1 at $((SECONDS / 60)) min $((SECONDS % 60)) s" >&2; }
case "${1:-}" in
  --quick) mode=quick; shift ;;
  --sanitize) mode=sanitize; shift ;;
esac
# Both passes build with warnings as errors (a new build directory; an existing one keeps its flags).
export TORCHMT_CMAKE_ARGS="-DTORCHMT_WERROR=ON ${TORCHMT_CMAKE_ARGS:-}"

# The suite built with ASan + UBSan in build-asan/ (fuzz corpora replayed there too). LibTorch is
# not instrumented: leak reports at exit would be its own, so leak detection is off.
sanitize() {
  (
    export TORCHMT_BUILD_DIR=build-asan
    export TORCHMT_CMAKE_ARGS="-DTORCHMT_SANITIZE=ON -DTORCHMT_BUILD_BENCHMARKS=OFF ${TORCHMT_CMAKE_ARGS:-}"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    "$root/tools/setup.sh"
    mark "sanitizer build done"
    cd "$root/build-asan"
    # Not the tests whose time goes to an uninstrumented oracle (Python's CTranslate2, ONNX Runtime,
    # transformers, Chromium) or to waiting out a timeout: the code they check in torchmt runs under the
    # sanitizers in the other tests (the exporters' writers, the server, the worker launcher).
    local oracles='TransformersAgrees|CTranslate2ReadsWhatItsOwn|EveryVariantCTranslate2|OnnxRuntimeComputes|Multi30kTranslationsAgree|EveryModelVariantExportsAndComputesAlike|PythonLoadsTheFile|WebPageInHeadlessChromium|AWorkerThatHangs'
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} ctest --output-on-failure -j "${TORCHMT_TEST_JOBS:-2}" -E "$oracles" "$@"
    mark "sanitizer suite done"
  )
  echo "test.sh: the suite passes under AddressSanitizer + UndefinedBehaviorSanitizer" >&2
}
if [ "$mode" = sanitize ]; then
  sanitize "$@"
  exit 0
fi
"$root/tools/setup.sh"
mark "setup and build done"
cd "$root/${TORCHMT_BUILD_DIR:-build}"
# Tests run in parallel processes: one intra-op thread each avoids OpenMP oversubscription.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
ctest --output-on-failure -j "${TORCHMT_TEST_JOBS:-2}" "$@"
mark "suite done"

# Checkpoints survive kill -9 at random moments and runs resume from them (a small campaign;
# tools/kill_campaign.sh 20 for the full one).
TORCHMT_BUILD_DIR=${TORCHMT_BUILD_DIR:-build} bash "$root/tools/kill_campaign.sh" 5
# A dataset being preprocessed survives kill -9 the same way: none, or a complete one that verifies.
TORCHMT_BUILD_DIR=${TORCHMT_BUILD_DIR:-build} bash "$root/tools/preprocess_kill_campaign.sh" 4 50000
# A distillation killed anywhere goes on where it stopped and ends with the uninterrupted run's teacher corpus.
TORCHMT_BUILD_DIR=${TORCHMT_BUILD_DIR:-build} bash "$root/tools/distill_kill_campaign.sh" 4

# The installed package as another CMake project uses it: find_package(torchmt) and the
# Translator API (tools/example/), built against `cmake --install`'s output.
prefix="$root/${TORCHMT_BUILD_DIR:-build}/install"
cmake --install . --prefix "$prefix" >/dev/null
torch_prefix=$("${PYTHON:-python3}" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S "$root/tools/example" -B "$root/${TORCHMT_BUILD_DIR:-build}/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}" >/dev/null
cmake --build "$root/${TORCHMT_BUILD_DIR:-build}/example"
example="$root/${TORCHMT_BUILD_DIR:-build}/example/translate_batch"
set +e
"$example" "$root/data/no-such-model.pt" "Hallo." 2>/dev/null
code=$?
set -e
[ "$code" -eq 1 ] || { echo "test.sh: the installed-package example exited $code on a missing model (expected 1)" >&2; exit 1; }
echo "test.sh: tools/example built against the installed package and runs" >&2
mark "kill campaign and installed-package example done"

[ "$mode" = quick ] || sanitize "$@"

#!/usr/bin/env bash
# Sets up, builds, and runs the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/setup.sh"
cd "$root/${TORCHMT_BUILD_DIR:-build}"
# Tests run in parallel processes: one intra-op thread each avoids OpenMP oversubscription.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
ctest --output-on-failure -j "${TORCHMT_TEST_JOBS:-2}" "$@"

#!/usr/bin/env bash
# Sets up, builds, and runs the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/setup.sh"
cd "$root/${TORCHMT_BUILD_DIR:-build}"
ctest --output-on-failure -j "${TORCHMT_TEST_JOBS:-2}" "$@"

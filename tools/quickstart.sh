#!/usr/bin/env bash
# One command from a fresh clone to a working tool: set up, build, show what torchmt does.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/setup.sh"
tm="$root/${TORCHMT_BUILD_DIR:-build}/torchmt"
"$tm" --help
"$tm" info --preset small

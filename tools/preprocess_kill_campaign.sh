#!/usr/bin/env bash
# Kill campaign for `torchmt preprocess`: N times, preprocessing a generated corpus is killed
# with SIGKILL at a random moment. Afterwards the output directory must either not exist or
# verify as complete (`preprocess --verify`: manifest, sizes, every checksum); and a new run must
# finish over whatever the killed one left. Prints the tally; exits 1 on any failure.
#   tools/preprocess_kill_campaign.sh [N=20] [PAIRS=200000]   (TORCHMT_BUILD_DIR picks the build)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=$root/${TORCHMT_BUILD_DIR:-build}
tm=$build/torchmt
n=${1:-20}
pairs=${2:-200000}
[ -x "$tm" ] && [ -x "$build/generate_corpus" ] || { echo "preprocess_kill_campaign: build torchmt and generate_corpus first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/generate_corpus" --pairs "$pairs" --out "$work/c" || exit 1
"$tm" vocab --src data/sample.de --tgt data/sample.en --out "$work/spm" --vocab-size 400 -q >/dev/null 2>&1 ||
  { echo "preprocess_kill_campaign: vocab failed" >&2; exit 1; }
args=(--src "$work/c.de" --tgt "$work/c.en" --spm "$work/spm.model" -o "$work/d" -q)
start=$(date +%s.%N)
"$tm" preprocess "${args[@]}" >/dev/null || exit 1
full=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
absent=0 complete=0 failed=0
for round in $(seq 1 "$n"); do
  rm -rf "$work/d"
  "$tm" preprocess "${args[@]}" >/dev/null 2>&1 &
  pid=$!
  sleep "$(awk -v s="$RANDOM" -v f="$full" 'BEGIN { srand(s); printf "%.2f", 1.1 * f * rand() }')"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ ! -e "$work/d" ]; then
    absent=$((absent + 1))
  elif "$tm" preprocess --verify "$work/d" >/dev/null 2>"$work/verify.log"; then
    complete=$((complete + 1))
  else
    echo "round $round: a dataset that does not verify: $(head -1 "$work/verify.log")" >&2
    failed=$((failed + 1))
  fi
done
rm -rf "$work/d"
"$tm" preprocess "${args[@]}" >/dev/null && "$tm" preprocess --verify "$work/d" >/dev/null ||
  { echo "preprocess_kill_campaign: a run after the kills failed" >&2; failed=$((failed + 1)); }
echo "preprocess_kill_campaign: $n kills of a ${full%.*} s preprocess of $pairs pairs: no dataset after $absent," \
  "a complete one (verified) after $complete, $failed failures"
[ "$failed" -eq 0 ]

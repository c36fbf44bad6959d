#!/usr/bin/env bash
# Kill campaign: N times, a small training run (resumed from the last round) is killed with
# SIGKILL at a random moment (checkpoints are written every few steps, so many kills land
# mid-write); after each kill checkpoint_last.pt must load (`translate -m`, which verifies its
# checksum) and the next round must resume from it. Prints the tally; exits 1 on any failure.
#   tools/kill_campaign.sh [N=20]        (CI runs a small N; TORCHMT_BUILD_DIR picks the build)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tm=$root/${TORCHMT_BUILD_DIR:-build}/torchmt
n=${1:-20}
[ -x "$tm" ] || { echo "kill_campaign: $tm not built" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$tm" vocab --src data/sample.de --tgt data/sample.en --out "$work/spm" --vocab-size 400 >/dev/null 2>&1 ||
  { echo "kill_campaign: vocab failed" >&2; exit 1; }
args=(--train-src data/sample.de --train-tgt data/sample.en --spm "$work/spm.model" --preset tiny --dtype fp32
      --device cpu --threads 1 --batch-tokens 600 --warmup 50 --validate-every 3 --keep-last 2 --out "$work/run")
"$tm" train "${args[@]}" --max-steps 3 >"$work/first.log" 2>&1 || { cat "$work/first.log" >&2; exit 1; }
loaded=0 resumed=0 failed=0 clean=0
for round in $(seq 1 "$n"); do
  "$tm" train "${args[@]}" --max-steps 1000000 --resume >"$work/round.log" 2>&1 &
  pid=$!
  sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", 0.8 + 2.5 * rand() }')"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if grep -q "^resumed " "$work/round.log"; then resumed=$((resumed + 1)); else
    echo "round $round: did not resume:" >&2; head -3 "$work/round.log" >&2; failed=$((failed + 1)); fi
  if "$tm" translate -m "$work/run/checkpoint_last.pt" </dev/null >/dev/null 2>"$work/load.log"; then
    loaded=$((loaded + 1))
  else
    echo "round $round: checkpoint_last.pt does not load: $(head -1 "$work/load.log")" >&2
    failed=$((failed + 1))
  fi
  leftovers=$(find "$work/run" -name '*.tmp.*' | wc -l)
  [ "$leftovers" -eq 0 ] && clean=$((clean + 1))  # a kill mid-save leaves one; the next run removes it
done
echo "kill_campaign: $n kills: checkpoint_last.pt loaded after $loaded, the next run resumed $resumed times" \
  "(no temporary file left by $clean kills; the others were mid-save), $failed failures"
[ "$failed" -eq 0 ]

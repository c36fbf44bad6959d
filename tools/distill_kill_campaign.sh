#!/usr/bin/env bash
# Kill campaign for `torchmt distill`: N times, a distillation (its teacher translating the sample in
# small chunks, then a short student) is killed with SIGKILL at a random moment, and run again over
# what the killed one left. At the end the teacher's corpus must equal an uninterrupted run's line
# for line and the student's checkpoint must load. Prints the tally; exits 1 on any failure.
#   tools/distill_kill_campaign.sh [N=20]   (TORCHMT_BUILD_DIR picks the build)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tm=$root/${TORCHMT_BUILD_DIR:-build}/torchmt
n=${1:-20}
[ -x "$tm" ] || { echo "distill_kill_campaign: $tm not built" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$tm" train --train-src data/sample.de --train-tgt data/sample.en --vocab-size 400 --preset tiny --dtype fp32 \
  --device cpu --threads 1 --batch-tokens 600 --warmup 50 --max-steps 300 --out "$work/teacher" >"$work/teacher.log" 2>&1 ||
  { cat "$work/teacher.log" >&2; exit 1; }
for i in $(seq 10); do cat data/sample.de >>"$work/src.de"; cat data/sample.en >>"$work/src.en"; done  # a few seconds' work
args=(--teacher-model "$work/teacher/checkpoint_last.pt" --teacher-threads 1 --teacher-dtype fp32 --chunk-lines 64
      --train-src "$work/src.de" --train-tgt "$work/src.en" --preset tiny --dtype fp32 --device cpu --threads 1
      --batch-tokens 600 --warmup 50 --max-steps 40)
start=$(date +%s.%N)
"$tm" distill "${args[@]}" --out "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log" >&2; exit 1; }
full=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
failed=0 teacher_resumed=0 student_resumed=0
for round in $(seq 1 "$n"); do
  "$tm" distill "${args[@]}" --out "$work/d" >"$work/round.log" 2>&1 &
  pid=$!
  sleep "$(awk -v s="$RANDOM" -v f="$full" 'BEGIN { srand(s); printf "%.2f", 1.1 * f * rand() }')"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  grep -q "going on from line" "$work/round.log" && teacher_resumed=$((teacher_resumed + 1))
  grep -q "^student: resuming" "$work/round.log" && student_resumed=$((student_resumed + 1))
  if grep -q "error" "$work/round.log"; then
    echo "round $round: $(grep error "$work/round.log" | head -1)" >&2
    failed=$((failed + 1))
  fi
done
"$tm" distill "${args[@]}" --out "$work/d" >"$work/last.log" 2>&1 ||
  { echo "distill_kill_campaign: the run after the kills failed: $(tail -1 "$work/last.log")" >&2; failed=$((failed + 1)); }
if ! cmp -s "$work/ref/teacher/train.en" "$work/d/teacher/train.en" || ! cmp -s "$work/ref/teacher/train.de" "$work/d/teacher/train.de"; then
  echo "distill_kill_campaign: the teacher's corpus differs from an uninterrupted run's" >&2
  failed=$((failed + 1))
fi
"$tm" translate -m "$work/d/student/checkpoint_last.pt" </dev/null >/dev/null 2>&1 ||
  { echo "distill_kill_campaign: the student's checkpoint does not load" >&2; failed=$((failed + 1)); }
echo "distill_kill_campaign: $n kills of a $full s distillation (a run went on with the teacher's corpus $teacher_resumed" \
  "times, with the student $student_resumed times), then a run to the end: teacher corpus" \
  "$(wc -l < "$work/d/teacher/train.en") lines, as an uninterrupted run's; $failed failures"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# Distillation (issue 77): BLEU on test_2016 and test_2017 of the teachers, of a baseline (the
# student's preset trained on the original pairs for the same budget) and of the student (beam 5,
# and int8 greedy with its shortlist), then the speed goal: whole processes on the 1,000 test_2016
# sentences at batch 64, the teachers' fp32 beam 5 against the student's int8 greedy + shortlist,
# alternated ROUNDS times, each one's median and the ratio of the medians from this run.
# Goals: the student within 1 BLEU of its teachers, >= 2 above the baseline; >= 3x faster.
#   tools/bench/distill_check.sh DISTILL_DIR BASELINE.pt TEACHER.pt [TEACHER.pt ...]
#   env: DATA (data/multi30k), BUILD (build), ROUNDS (3)
set -euo pipefail
usage="usage: tools/bench/distill_check.sh DISTILL_DIR BASELINE.pt TEACHER.pt [TEACHER.pt ...]"
dir=${1:?$usage}
baseline=${2:?$usage}
shift 2
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
teachers=()
for t in "$@"; do teachers+=(-m "$t"); done
data=${DATA:-data/multi30k}
tm=${BUILD:-build}/torchmt
rounds=${ROUNDS:-3}
student=$dir/student/checkpoint_best.pt
[ -f "$student" ] || student=$dir/student/checkpoint_last.pt
shortlist=$dir/shortlist.txt
for f in "$student" "$shortlist" "$baseline" "$@"; do
  [ -f "$f" ] || { echo "distill_check: $f not found" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bleu() {  # NAME SET ARGS...: translate SET, print its BLEU
  local name=$1 set=$2
  shift 2
  "$tm" translate "$@" -i "$data/$set.de.gz" -o "$work/out" -q 2>/dev/null
  printf '%-34s %s %s\n' "$name" "$set" "$("$tm" evaluate --hyp "$work/out" --ref "$data/$set.en.gz" 2>&1 | head -1 | cut -d' ' -f1-3)"
}
for set in test_2016_flickr test_2017_flickr; do
  bleu "teachers, beam 5" $set "${teachers[@]}" --beam 5 --dtype fp32
  bleu "baseline, beam 5" $set -m "$baseline" --beam 5 --dtype fp32
  bleu "student, beam 5" $set -m "$student" --beam 5 --dtype fp32
  bleu "student, int8 greedy + shortlist" $set -m "$student" --dtype int8 --shortlist "$shortlist"
done

seconds() {  # ARGS...: wall seconds of one whole translate process
  local start
  start=$(date +%s.%N)
  "$tm" translate "$@" -i "$data/test_2016_flickr.de.gz" -o "$work/speed" --batch-size 64 -q 2>/dev/null
  echo "$(date +%s.%N) - $start" | bc
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
: > "$work/teacher.s"
: > "$work/student.s"
for ((r = 0; r < rounds; ++r)); do
  seconds "${teachers[@]}" --beam 5 --dtype fp32 >> "$work/teacher.s"
  seconds -m "$student" --dtype int8 --shortlist "$shortlist" >> "$work/student.s"
done
t=$(median < "$work/teacher.s")
s=$(median < "$work/student.s")
echo "speed, 1,000 lines at batch 64, median of $rounds: teachers fp32 beam 5 ${t} s, student int8 greedy + shortlist ${s} s:" \
     "$(echo "scale=2; $t / $s" | bc)x"

#!/usr/bin/env bash
# Terminology constraints end to end: on test_2016 and test_2017, one or two phrases per line drawn
# from its reference (content words, some of them two-word phrases; seeded), `translate --constraints`
# at beam 5 against plain beam 5: how many outputs hold every phrase, BLEU of both, and the time
# of each (whole processes, best of two alternating rounds); then a word the model has never seen
# as a constraint on 100 lines.
#   tools/bench/constraints_check.sh MODEL [DATA_DIR (data/multi30k)] [BUILD_DIR (build)]
set -euo pipefail
model=${1:?usage: tools/bench/constraints_check.sh MODEL [DATA_DIR] [BUILD_DIR]}
data=${2:-data/multi30k}
tm=${3:-build}/torchmt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
draw() {  # reference file -> constraints file
  zcat "$1" | python3 -c '
import random, re, sys
stop = set("with from that this they their there them then than have were what when where which while into onto over under about some very".split())
for n, line in enumerate(sys.stdin):
    rng = random.Random(n)
    words = line.split()
    good = [i for i, w in enumerate(words) if re.fullmatch(r"[A-Za-z]{4,}", w) and w.lower() not in stop]
    picked = sorted(rng.sample(good, min(len(good), rng.choice([1, 2]))))
    phrases = []
    for i in picked:
        two = n % 3 == 0 and i + 1 < len(words) and re.fullmatch(r"[A-Za-z]+", words[i + 1])
        phrases.append(" ".join(words[i:i + 2]) if two else words[i])
    print("\t".join(phrases))
'
}
held() {  # constraints file, output file -> lines holding every phrase
  python3 - "$1" "$2" <<'PY'
import sys
c = open(sys.argv[1], encoding="utf-8").read().splitlines()
o = open(sys.argv[2], encoding="utf-8").read().splitlines()
n = sum(1 for a, b in zip(c, o) if all(p in b for p in a.split("\t") if p))
print(n)
PY
}
timed() {  # seconds of one translate run
  local t0 t1
  t0=$(date +%s.%N)
  "$tm" translate -m "$model" -q "$@" 2>/dev/null
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
for set in test_2016_flickr test_2017_flickr; do
  draw "$data/$set.en.gz" > "$work/constraints"
  zcat "$data/$set.de.gz" > "$work/src"
  phrases=$(awk -F'\t' '{n += NF} END {print n}' "$work/constraints")
  plain=() constrained=()
  for round in 1 2; do
    plain+=("$(timed -i "$work/src" --beam 5 -o "$work/plain")")
    constrained+=("$(timed -i "$work/src" --beam 5 --constraints "$work/constraints" -o "$work/out")")
  done
  best() { printf '%s\n' "$@" | sort -g | head -1; }
  p=$(best "${plain[@]}") c=$(best "${constrained[@]}")
  bleu_plain=$("$tm" evaluate --hyp "$work/plain" --ref "$data/$set.en.gz" 2>&1 | head -1 | cut -d' ' -f1-3)
  bleu_out=$("$tm" evaluate --hyp "$work/out" --ref "$data/$set.en.gz" 2>&1 | head -1 | cut -d' ' -f1-3)
  echo "$set, beam 5, $phrases phrases on $(wc -l < "$work/src") lines:" \
    "$(held "$work/constraints" "$work/out") lines hold all theirs ($(held "$work/constraints" "$work/plain") without constraints)"
  echo "  BLEU plain $bleu_plain; constrained $bleu_out"
  echo "  time plain ${p} s, constrained ${c} s: $(echo "scale=2; $c / $p" | bc)x"
done
head -100 "$work/src" > "$work/src100"
printf "Zyxquorbl\n%.0s" {1..100} > "$work/unknown"
"$tm" translate -m "$model" -q -i "$work/src100" --beam 5 --constraints "$work/unknown" -o "$work/out" 2>/dev/null
echo "unknown word 'Zyxquorbl' as a constraint: $(held "$work/unknown" "$work/out") of 100 lines hold it; e.g. $(head -1 "$work/out")"

#!/usr/bin/env bash
# Data-parallel training on this machine: the same global batch (2 x --batch-tokens per update)
# as one process with --update-freq 2 (all cores), as 2 workers (--nproc-per-node 2, cores
# shared) with the all-reduce overlapped with backward, and as 2 workers with it after backward.
# Prints target tokens/s, ms per update waited for the all-reduce, and the ratios, one run.
#   tools/bench/data_parallel.sh [STEPS] [PRESET] [BATCH_TOKENS]   (defaults 40 small 4096)
# Needs build/torchmt and data/multi30k (tools/get_data.sh); writes into a temporary directory.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
steps=${1:-40}
preset=${2:-small}
batch=${3:-4096}
bin=$root/build/torchmt
data=$root/data/multi30k
[ -x "$bin" ] || { echo "data_parallel.sh: build/torchmt is missing (tools/setup.sh)" >&2; exit 1; }
[ -f "$data/train.de.gz" ] || { echo "data_parallel.sh: $data/train.de.gz is missing (tools/get_data.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

common=(--train-src "$data/train.de.gz" --train-tgt "$data/train.en.gz" --preset "$preset" --dtype fp32
        --batch-tokens "$batch" --max-steps "$steps" --log-every 1000000 --keep-last 0)
# The vocabulary once, outside the timings.
"$bin" vocab --src "$data/train.de.gz" --tgt "$data/train.en.gz" --out "$work/spm" --vocab-size 8000 >/dev/null
spm=$work/spm.model

run() {  # name, extra flags...
  local name=$1
  shift
  "$bin" train "${common[@]}" --spm "$spm" --out "$work/$name" "$@" 2>&1 | tee "$work/$name.log" | grep -E "^(done|data parallel)" >&2 || true
  local tps wait
  tps=$(sed -n 's/.* s of training, \([0-9]*\) target tokens\/s.*/\1/p' "$work/$name.log" | tail -1)
  wait=$(sed -n 's/^data parallel: \([0-9.]*\) ms per update waiting.*/\1/p' "$work/$name.log" | tail -1)
  echo "$name ${tps:-0} ${wait:--}"
}

echo "data parallel on $(nproc) cores: $preset, fp32, $steps updates of 2 x $batch batch tokens" >&2
results=$(
  run one_process --update-freq 2
  run two_workers_overlap --nproc-per-node 2
  run two_workers_after --nproc-per-node 2 --overlap-allreduce=false
)
echo "$results" | awk '
  { name[NR] = $1; tps[NR] = $2; wait[NR] = $3 }
  END {
    printf "%-22s %12s %22s %10s\n", "configuration", "target tok/s", "all-reduce wait ms/upd", "vs 1 proc"
    for (i = 1; i <= NR; ++i)
      printf "%-22s %12d %22s %9.2fx\n", name[i], tps[i], wait[i], (tps[1] > 0 ? tps[i] / tps[1] : 0)
    if (wait[3] != "-" && wait[3] > 0)
      printf "all-reduce hidden behind backward: %.0f%% (%.1f of %.1f ms per update)\n",
             100 * (1 - wait[2] / wait[3]), wait[3] - wait[2], wait[3]
  }'

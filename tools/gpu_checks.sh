#!/usr/bin/env bash
# Every GPU check of the project in one call on a GPU machine (the device tool's), from the
# project root, with .devkit/ (tools/device_kit.sh: the libraries and Multi30k) carried along
# (the device tool's `carry: [".devkit"]`):
#   tools/gpu_checks.sh [STAGE ...]      (default: build test bench_train train use bench_translate)
# The whole list takes about 13 minutes on an H100 (build 148 s, suite 146 s, bench_train 110 s,
# train 5 min, use 80 s, bench_translate 90 s at 100 sentences), over the device tool's 10 minutes
# a call. A task has 15 minutes of device time in all, a machine's start included: one call of
# `tools/gpu_checks.sh quick bench_translate bench_train` (7.2 minutes with BENCH_TRAIN_* narrowed)
# or `quick train use`, and a short second call; each stage prints the seconds it used.
# Stages:
#   quick            build test smoke: the checks every GPU session runs first (H100: 308 s, build 148 s)
#   build            configure + build against the machine's CUDA LibTorch (tools/device_build.sh)
#   test             the whole suite, CUDA tests included; prints the skipped ones (there should be none);
#                    CTEST_REGEX runs only the tests it matches, CTEST_TIMEOUT (s) bounds each
#   bench_train      base, 50,000-token batches (the paper's 25,000 source + 25,000 target tokens),
#                    bf16 and fp32, ours (each attention kernel) vs the Python reference (documents'
#                    attention and SDPA), MFU, and a profile of 3 updates (CPU ops, GPU kernels);
#                    BENCH_TRAIN_DTYPES, BENCH_TRAIN_ATTENTION, BENCH_TRAIN_PYTHON_ATTENTION narrow it
#   smoke            a 40-step GPU run, then translate / evaluate / export, the export on the CPU
#   train            tools/recipes/multi30k_gpu.yaml (GPU_TRAIN_MINUTES caps it), averaged checkpoints
#   base             tools/recipes/multi30k_gpu_base.yaml (the paper's base, 16k joint vocabulary, bf16),
#                    its test BLEU, and its weights packed for the trip back ($RESULTS/base/weights.part*:
#                    tools/bench/weights_transfer.py unpack them into a checkpoint on the CPU)
#   use              test_2016 / test_2017 BLEU of that model on the GPU (greedy, beam 5), translate,
#                    export, and the TorchScript file translating on the CPU
#   bench_translate  greedy / beam 5, batch 1 / 32 / 64, fp32 / bf16 / fp16, ours vs the Python reference
#                    with its KV cache (BENCH_MODEL: a checkpoint to use instead of the GPU recipe's)
#   fp16             fp32 / bf16 / fp16 (loss scaling) on the first 1,000 updates of the GPU recipe
#   nccl             a 1-worker data-parallel job: NCCL on the device vs Gloo through the host vs none
#   cpu_isa          the host CPU's kernels on every instruction set it runs (tools/cpu_isa_checks.sh
#                    with ISA_MODEL, default runs/isa/model.pt: carry one), from ISA_CHECK_FROM (avx2)
#   pack             the built programs into $RESULTS/bin.tar.gz (a later call can skip the build:
#                    unpack them into $TORCHMT_BUILD_DIR)
# Results go to $RESULTS (default: $OUT where the device tool sets it, else gpu_checks/): one
# log, checks.log, with every figure.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
results=${RESULTS:-${OUT:-$root/gpu_checks}}
mkdir -p "$results"
log=$results/checks.log
build=${TORCHMT_BUILD_DIR:-build-cuda}
KIT=$root/.devkit/usr
export LD_LIBRARY_PATH=$KIT/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build test bench_train train use bench_translate)
expanded=()
for stage in "${stages[@]}"; do
  if [ "$stage" = quick ]; then expanded+=(build test smoke); else expanded+=("$stage"); fi
done
stages=("${expanded[@]}")
run_dir=${GPU_RUN_DIR:-runs/multi30k_gpu}
d=data/multi30k
# data/multi30k is a link to ../shared here, which does not travel: point it at the kit's copy.
if [ ! -f $d/train.de.gz ] && [ -f .devkit/multi30k/train.de.gz ]; then rm -rf $d; ln -s ../.devkit/multi30k $d; fi
tm=$build/torchmt

say() { echo "== $* ($(date +%T))" | tee -a "$log"; }
# Runs a command with its output in the log; a stage's failure is reported, not fatal.
step() { say "$*"; "$@" 2>&1 | tee -a "$log"; local rc=${PIPESTATUS[0]}; [ "$rc" -eq 0 ] || say "FAILED ($rc): $*"; return "$rc"; }

peak_tflops() {  # dense bf16 datasheet figures
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H100*|*H200*|*GH200*) echo 989 ;;
    *A100*) echo 312 ;;
    *L40S*) echo 362 ;;
    *) echo 0 ;;
  esac
}

say "gpu_checks: ${stages[*]}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$log"
echo "host: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1); $(grep -o -w \
  'avx2\|avx512f\|avx512_vnni\|avx512_bf16\|amx_bf16\|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')" | tee -a "$log"
python3 -c 'import torch; print("python torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tee -a "$log"

for stage in "${stages[@]}"; do
  stage_t0=$(date +%s)
  case $stage in
  build)
    t0=$(date +%s)
    DEVICE_BUILD_NO_TEST=1 step tools/device_build.sh || exit 1
    say "build took $(( $(date +%s) - t0 )) s" ;;
  test)
    (cd "$build" && OMP_NUM_THREADS=2 step ctest --output-on-failure -j 12 --timeout "${CTEST_TIMEOUT:-600}" \
      ${CTEST_REGEX:+-R "$CTEST_REGEX"})
    (cd "$build" && ctest -N | tail -1 | tee -a "$log"
     grep -h "Skipped" Testing/Temporary/LastTest.log 2>/dev/null | head -20 | tee -a "$log") ;;
  bench_train)
    rm -rf /tmp/gpu_profile
    step "$build/bench_train" --device cuda --presets base --dtypes "${BENCH_TRAIN_DTYPES:-bf16,fp32}" \
      --attention "${BENCH_TRAIN_ATTENTION:-auto,explicit,fused}" \
      --python-attention "${BENCH_TRAIN_PYTHON_ATTENTION:-both}" --batch-tokens 50000 --base-steps 10 \
      --warmup 3 --peak-tflops "$(peak_tflops)" \
      --work-dir /tmp/bench_train_gpu --profile /tmp/gpu_profile
    for trace in /tmp/gpu_profile/*.json; do step python3 tools/bench/profile_summary.py "$trace" 12; done ;;
  smoke)
    rm -rf /tmp/smoke
    step "$tm" train --train-src $d/train.de.gz --train-tgt $d/train.en.gz --valid-src $d/val.de.gz \
      --valid-tgt $d/val.en.gz --preset small --max-steps 40 --validate-every 20 --device cuda --out /tmp/smoke
    zcat $d/test_2016_flickr.de.gz | head -20 > /tmp/smoke/in.de
    step "$tm" translate -m /tmp/smoke/checkpoint_last.pt -i /tmp/smoke/in.de -o /tmp/smoke/gpu.en --device cuda \
      --dtype fp32 --beam 5
    step "$tm" export -m /tmp/smoke/checkpoint_last.pt -o /tmp/smoke/model.ts
    step "$tm" translate -m /tmp/smoke/model.ts -i /tmp/smoke/in.de -o /tmp/smoke/ts_cpu.en --device cpu \
      --dtype fp32 --beam 5
    cmp /tmp/smoke/gpu.en /tmp/smoke/ts_cpu.en && say "smoke: TorchScript on CPU = checkpoint on GPU (20 lines)" ;;
  train)
    rm -rf "$run_dir"
    t0=$(date +%s)
    step "$tm" train --config tools/recipes/multi30k_gpu.yaml --out "$run_dir" \
      ${GPU_TRAIN_MINUTES:+--max-minutes "$GPU_TRAIN_MINUTES"}
    say "train wall time $(( $(date +%s) - t0 )) s (process start to exit)"
    cat "$run_dir/metrics.csv" | tee -a "$log"
    mapfile -t last < <(ls -t "$run_dir"/checkpoint_[0-9]*.pt)
    [ ${#last[@]} -gt 0 ] && step "$tm" average -o "$run_dir/averaged.pt" "${last[@]}" ;;
  use)
    model=$run_dir/averaged.pt
    [ -f "$model" ] || model=$run_dir/checkpoint_best.pt
    step "$tm" evaluate -m "$run_dir/checkpoint_best.pt" --src $d/test_2016_flickr.de.gz \
      --ref $d/test_2016_flickr.en.gz --beam 5 --device cuda
    for test in test_2016_flickr test_2017_flickr; do
      for beam in 1 5; do
        step "$tm" evaluate -m "$model" --src $d/$test.de.gz --ref $d/$test.en.gz --beam $beam --device cuda
      done
    done
    zcat $d/test_2016_flickr.de.gz | head -100 > /tmp/use_in.de
    step "$tm" translate -m "$model" -i /tmp/use_in.de -o /tmp/use_gpu.en --device cuda --dtype fp32 --beam 5
    head -3 /tmp/use_gpu.en | tee -a "$log"
    step "$tm" export -m "$model" -o "$run_dir/model.ts"
    ls -la "$run_dir/model.ts" | tee -a "$log"
    step "$tm" translate -m "$run_dir/model.ts" -i /tmp/use_in.de -o /tmp/use_ts_cpu.en --device cpu --dtype fp32 \
      --beam 5
    say "TorchScript on CPU vs checkpoint on GPU (fp32, beam 5, 100 lines): $(paste -d'\n' /tmp/use_gpu.en \
      /tmp/use_ts_cpu.en | paste - - | awk -F'\t' '$1==$2' | wc -l) identical" ;;
  bench_translate)
    model=${BENCH_MODEL:-$run_dir/averaged.pt}
    [ -f "$model" ] || model=$run_dir/checkpoint_best.pt
    # CTranslate2 is a CPU peer here; the device image has no PyPI, so it is compared only where installed.
    ct2=()
    python3 -c 'import ctranslate2' 2>/dev/null || { ct2=(--no-ctranslate2); say "no ctranslate2 package: skipped"; }
    step timeout "${BENCH_TRANSLATE_SECONDS:-600}" "$build/bench_translate" --model "$model" --device cuda \
      --beams 1,5 --batch-sizes 1,32,64 --dtypes fp32,bf16,fp16 --python-beams 1,5 --sentences "${BENCH_SENTENCES:-100}" \
      --no-uncached "${ct2[@]}" ;;
  fp16)
    # fp32 / bf16 / fp16 (dynamic loss scaling) on the GPU recipe's first 1,000 updates: loss,
    # validation BLEU, tokens/s, and the loss scale's course.
    for dt in fp32 bf16 fp16; do
      rm -rf /tmp/dtype_$dt
      step "$tm" train --config tools/recipes/multi30k_gpu.yaml --out /tmp/dtype_$dt --dtype $dt --max-steps 1000 \
        --validate-every 1000 --max-minutes 3 ${spm:+--spm $spm}
      spm=${spm:-/tmp/dtype_fp32/spm.model}
      head -1 /tmp/dtype_$dt/metrics.csv | tee -a "$log"; tail -2 /tmp/dtype_$dt/metrics.csv | tee -a "$log"
    done ;;
  nccl)
    # A data-parallel job of one worker on the GPU: gradients reduced by NCCL on the device vs
    # Gloo through the host vs no process group, base preset, bf16.
    for backend in none gloo nccl; do
      rm -rf /tmp/dp_$backend
      dist=()
      [ "$backend" = none ] || dist=(env WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$((29600 + RANDOM % 1000)) TORCHMT_DIST_BACKEND=$backend)
      step "${dist[@]}" "$tm" train --config tools/recipes/multi30k_gpu.yaml --out /tmp/dp_$backend --preset base \
        --dtype bf16 --batch-tokens 12000 --max-steps 60 --validate-every 1000 --log-every 20 \
        ${spm:+--spm $spm}
    done ;;
  pack)
    tar -C "$build" -czf "$results/bin.tar.gz" torchmt torchmt_tests bench_train bench_translate bench_export \
      bench_data && ls -la "$results/bin.tar.gz" | tee -a "$log" ;;
  cpu_isa)
    ISA_CHECK_FROM=${ISA_CHECK_FROM:-avx2} step bash tools/cpu_isa_checks.sh "${ISA_MODEL:-runs/isa/model.pt}" "$build" ;;
  base)
    base_dir=runs/multi30k_gpu_base
    rm -rf "$base_dir"
    step "$tm" train --config tools/recipes/multi30k_gpu_base.yaml --out "$base_dir"
    cat "$base_dir/metrics.csv" | tee -a "$log"
    for test in test_2016_flickr test_2017_flickr; do
      for beam in 1 5; do
        step "$tm" evaluate -m "$base_dir/checkpoint_best.pt" --src $d/$test.de.gz --ref $d/$test.en.gz --beam $beam \
          --device cuda
      done
    done
    step python3 tools/bench/weights_transfer.py pack "$base_dir/checkpoint_best.pt" "$results/base" ;;
  *) say "unknown stage '$stage'"; exit 2 ;;
  esac
  say "stage $stage: $(( $(date +%s) - stage_t0 )) s of device time"
done
say "gpu_checks done"

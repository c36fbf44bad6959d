#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine: system packages, the pinned PyTorch wheel
# (its LibTorch is what we build against), test oracles, then configure + build into build/.
#   TORCHMT_SETUP        full (default) or cli: only what building the CLI needs (no test oracles,
#                        Chromium or GoogleTest; a new build directory without tests and benchmarks)
#   TORCHMT_BUILD_DIR  build directory (default: build)
#   TORCHMT_SKIP_INSTALL=1  only configure and build
#   TORCHMT_TARGETS      build only these targets (e.g. "torchmt"; default: everything)
#   TORCHMT_CMAKE_ARGS   extra configure arguments for a new build directory (e.g. -DTORCHMT_SANITIZE=ON)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${TORCHMT_BUILD_DIR:-build}
mode=${TORCHMT_SETUP:-full}
case "$mode" in
  full|cli) ;;
  *) echo "setup: TORCHMT_SETUP='$mode' is not full or cli" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

# libcpp-httplib-dev: torchmt serve; chromium + chromium-driver: the browser test of its page;
# libgloo-dev: the headers of the Gloo library LibTorch ships compiled (c10d, train --nproc-per-node).
apt_packages=(libsentencepiece-dev libcxxopts-dev libyaml-cpp-dev nlohmann-json3-dev zlib1g-dev pkg-config ninja-build cmake g++
              libcpp-httplib-dev libgloo-dev)
[ "$mode" = cli ] || apt_packages+=(libgtest-dev chromium chromium-driver)
if [ "${TORCHMT_SKIP_INSTALL:-0}" != 1 ]; then
  missing=()
  for p in "${apt_packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  # cmake and ninja may come from pip instead of Debian: accept them on PATH.
  if [ ${#missing[@]} -gt 0 ]; then
    filtered=()
    for p in "${missing[@]}"; do
      case "$p" in
        cmake) command -v cmake >/dev/null || filtered+=("$p") ;;
        ninja-build) command -v ninja >/dev/null || filtered+=("$p") ;;
        g++) command -v g++ >/dev/null || filtered+=("$p") ;;
        *) filtered+=("$p") ;;
      esac
    done
    missing=("${filtered[@]+"${filtered[@]}"}")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # Always pinned: an unpinned torch pulls several GB of CUDA packages.
  if ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.__version__.split("+")[0] >= "2.1" else 1)' 2>/dev/null; then
    echo "setup: installing torch==2.13.0 (CPU wheel)" >&2
    "$PYTHON" -m pip install -q torch==2.13.0
  fi
  # Test oracles, benchmark peers and the Python package's build tools: not for the CLI alone.
  if [ "$mode" = full ]; then
    if ! "$PYTHON" -c 'import sacrebleu, sentencepiece, ctranslate2, selenium, transformers, safetensors, onnxruntime, onnx' 2>/dev/null; then
      echo "setup: installing sacrebleu, sentencepiece, ctranslate2, selenium, transformers, safetensors, onnxruntime and onnx (test oracles, benchmark peers, browser driver)" >&2
      "$PYTHON" -m pip install -q sacrebleu==2.6.0 sentencepiece ctranslate2==4.8.5 selenium==4.51.0 transformers==5.24.0 safetensors==0.8.0 \
        onnxruntime==1.32.0 onnx==1.23.2
    fi
    # The Python package's bindings and its tests (build/python/, tests/python/).
    if ! "$PYTHON" -c 'import pybind11, pytest' 2>/dev/null; then
      echo "setup: installing pybind11 and pytest (the Python package and its tests)" >&2
      "$PYTHON" -m pip install -q 'pybind11>=2.12' pytest
    fi
    if ! "$PYTHON" -c 'import libretranslatepy' 2>/dev/null; then
      echo "setup: installing libretranslatepy (LibreTranslate's client, a test oracle of torchmt serve)" >&2
      "$PYTHON" -m pip install -q libretranslatepy==2.1.4 || echo "setup: warning: libretranslatepy not installed" >&2
    fi
    # LibreTranslate's own API tests, run against `torchmt serve` (tests/libretranslate/): taken
    # from its wheel on PyPI, never copied into the repository.
    lt_tests="$root/$build_dir/libretranslate_tests"
    if [ ! -f "$lt_tests/test_api_translate.py" ]; then
      echo "setup: fetching LibreTranslate 1.9.6's API tests (PyPI wheel, tests only)" >&2
      lt_wheel=$(mktemp -d)
      if "$PYTHON" -m pip download -q --no-deps libretranslate==1.9.6 -d "$lt_wheel" >/dev/null 2>&1; then
        mkdir -p "$lt_tests"
        "$PYTHON" - "$lt_wheel"/libretranslate-1.9.6-py3-none-any.whl "$lt_tests" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith("libretranslate/tests/test_api/test_") and name.endswith(".py"):
            with open(sys.argv[2] + "/" + name.rsplit("/", 1)[1], "wb") as f:
                f.write(z.read(name))
PY
      else
        echo "setup: warning: could not download libretranslate==1.9.6 from PyPI (its API tests will fail)" >&2
      fi
      rm -rf "$lt_wheel"
    fi
  fi
fi

torch_prefix=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cli_only="$build_dir/.setup-cli-only"  # marks a build directory configured without tests by `cli`
configure=()
if [ ! -f "$build_dir/build.ninja" ]; then
  configure=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}"
             -DPython3_EXECUTABLE="$(command -v "$PYTHON")")
  [ "$mode" = cli ] && configure+=(-DTORCHMT_BUILD_TESTS=OFF -DTORCHMT_BUILD_BENCHMARKS=OFF)
elif [ "$mode" = full ] && [ -f "$cli_only" ]; then
  configure=(-DTORCHMT_BUILD_TESTS=ON -DTORCHMT_BUILD_BENCHMARKS=ON)  # a quickstart's build, now whole
fi
if [ ${#configure[@]} -gt 0 ]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$build_dir" "${configure[@]}" ${TORCHMT_CMAKE_ARGS:-} >/dev/null
  if [ "$mode" = cli ]; then touch "$cli_only"; else rm -f "$cli_only"; fi
fi
# One job per core (each LibTorch translation unit needs ~1.5 GB of RAM). Not plain `nproc`: it
# obeys OMP_NUM_THREADS, which tools/test.sh sets to 1 for the tests, so the sanitizer build it
# runs next had gone with one job on two cores (twice as long; CI ran past its 90 minutes).
jobs=${TORCHMT_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
# shellcheck disable=SC2086
cmake --build "$build_dir" ${TORCHMT_TARGETS:+--target $TORCHMT_TARGETS} -- -j "$jobs"
if [ "$mode" = cli ]; then
  echo "setup: built $root/$build_dir/torchmt" >&2
else
  echo "setup: built $root/$build_dir/torchmt (and the Python package in $root/$build_dir/python/)" >&2
fi

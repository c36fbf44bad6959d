#!/usr/bin/env bash
# Prepares .devkit/ for a GPU machine without a package registry: the shared kit
# (../shared/tools/device-kit.sh: SentencePiece, cxxopts, GoogleTest) plus what torchmt
# needs beyond it (yaml-cpp, nlohmann/json, Gloo's headers for c10d's process groups),
# unpacked from Debian's packages. Run it here, then tools/device_build.sh there with carry
# [".devkit"].
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash "$root/../shared/tools/device-kit.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -qq libyaml-cpp0.7 libyaml-cpp-dev nlohmann-json3-dev libgloo-dev >/dev/null)
for deb in "$tmp"/*.deb; do dpkg -x "$deb" .devkit; done
rm -rf .devkit/usr/share/doc
# Multi30k travels inside the kit: data/multi30k is a link to ../shared, which a device call does
# not send (tools/gpu_checks.sh points the link here there).
mkdir -p .devkit/multi30k
cp "$root"/../shared/data/multi30k/*.gz .devkit/multi30k/
du -sh .devkit

#!/usr/bin/env bash
# Installs every Debian package Tessera needs to build, test and benchmark.
set -euo pipefail
PACKAGES=(cmake ninja-build g++ pkg-config libfmt-dev libhwloc-dev libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata libzip-dev libcli11-dev
  libflatbuffers-dev flatbuffers-compiler zlib1g-dev libisal-dev nlohmann-json3-dev
  libsqlite3-dev libxgboost-dev python3-matplotlib
  python3 binutils)  # python3, binutils: the isa_symbols build check (objdump, nm, c++filt)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

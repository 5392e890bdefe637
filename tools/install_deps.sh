#!/usr/bin/env bash
# Installs what attnjit builds and tests with on a Debian/Ubuntu machine: the C++
# libraries from the distribution, and cuobjdump/nvdisasm from PyPI (for the SASS checks;
# the CUDA toolkit proper — nvcc is not needed, NVRTC and headers are — is expected at
# /usr/local/cuda or $CUDA_HOME).
set -euo pipefail

# clang + libclang-rt-dev (Debian's default clang, its sanitizer runtimes and libFuzzer; only
# a Recommends of clang, so named here for --no-install-recommends): tools/fuzz.sh.
packages=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev catch2 libcli11-dev libssl-dev python3-pip
          clang libclang-rt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda_root="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
if [ ! -f "$cuda_root/include/cuda_bf16.h" ] || [ ! -d "$cuda_root/include/cccl" ]; then
  echo "error: no CUDA 13 toolkit at $cuda_root (need include/cuda_bf16.h and include/cccl, and" \
       "lib64/libnvrtc). Install the CUDA toolkit or set CUDA_HOME." >&2
  exit 1
fi

# cuobjdump + nvdisasm for the tests that read SASS (pip wheels; no GPU needed).
if ! command -v cuobjdump >/dev/null 2>&1 || ! command -v nvdisasm >/dev/null 2>&1; then
  bin="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13/bin"
  if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
    python3 -m pip install -q --disable-pip-version-check nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm \
      2>/dev/null || python3 -m pip install -q --break-system-packages nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  fi
fi
echo "dependencies ready (CUDA toolkit: $cuda_root)"

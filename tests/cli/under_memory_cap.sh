#!/usr/bin/env bash
# Runs a command with its address space capped (ulimit -v, in KiB): a regression that allocates
# without bound then fails at once with std::bad_alloc instead of exhausting the machine.
# Usage: under_memory_cap.sh KIB COMMAND [ARGS...]
set -eu
ulimit -v "$1"
shift
exec "$@"

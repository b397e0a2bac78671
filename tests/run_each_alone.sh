#!/usr/bin/env bash
# Runs each checkpoint and CLI test alone, each in a build directory as fresh as the build left
# it, with an empty cache directory: a test that needs what another test happens to leave
# behind (a directory, a run, a measured cache) fails here, while CI's `ctest -j` order may hide
# it. CTest still runs the fixture tests a test declares (FIXTURES_REQUIRED), as `ctest -R` does.
# Too slow for CI (every test pays for its fixtures again); run it after changing the tests.
# Usage: tests/run_each_alone.sh [BUILD_DIR [REGEX]]
#   BUILD_DIR  configured and built here (default: build-alone in the repository)
#   REGEX      the tests to run (default: ^(ckpt|cli)\.)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(realpath -m "${1:-$repo/build-alone}")"
regex="${2:-^(ckpt|cli)\.}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# What the build left; before each test everything else under the build directory goes.
(cd "$build" && find . -mindepth 1 | sort) >"$scratch/built"
mapfile -t tests < <(ctest --test-dir "$build" -N -R "$regex" | sed -n 's/^ *Test *#[0-9]*: //p')
((${#tests[@]} > 0)) || { echo "no test matches $regex"; exit 1; }

failed=()
start=$SECONDS
for t in "${tests[@]}"; do
  (cd "$build" && find . -mindepth 1 | sort | comm -13 "$scratch/built" - | xargs -r -d '\n' rm -rf)
  rm -rf "$scratch/cache" && mkdir "$scratch/cache"
  pattern="^$(printf '%s' "$t" | sed 's/[][\.*^$()+?{}|]/\\&/g')\$"
  if XDG_CACHE_HOME="$scratch/cache" ctest --test-dir "$build" -R "$pattern" --output-on-failure \
    >"$scratch/log" 2>&1; then
    echo "alone: $t passed"
  else
    cat "$scratch/log"
    echo "alone: $t FAILED"
    failed+=("$t")
  fi
done
echo "${#tests[@]} tests run alone in $((SECONDS - start)) s; ${#failed[@]} failed${failed[*]:+: ${failed[*]}}"
((${#failed[@]} == 0))

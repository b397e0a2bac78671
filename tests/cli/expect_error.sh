#!/usr/bin/env bash
# Runs a command that must fail cleanly: non-zero exit, one line on stderr matching a pattern,
# no crash (signals, sanitizer or stack dumps).
# Usage: expect_error.sh PATTERN COMMAND [ARGS...]
set -u
pattern="$1"
shift
stderr_file="$(mktemp)"
trap 'rm -f "$stderr_file"' EXIT
"$@" >/dev/null 2>"$stderr_file"
status=$?
message="$(cat "$stderr_file")"
if ((status == 0)); then
  echo "expected failure, but the command succeeded: $*"
  exit 1
fi
if ((status >= 128)); then
  echo "the command crashed (status $status): $*"
  echo "$message"
  exit 1
fi
if ! grep -Eq -- "$pattern" <<<"$message"; then
  echo "stderr does not match /$pattern/:"
  echo "$message"
  exit 1
fi
lines=$(grep -c '' <<<"$message")
if ((lines != 1)); then
  echo "expected one line of error, got $lines:"
  echo "$message"
  exit 1
fi
echo "ok: $message"

#!/usr/bin/env bash
# Runs a launcher (mpirun ...) so that a stop signal to it always ends in the pre-emption save
# (docs/checkpoints.md, "Pre-emption under mpirun"):
#
#   scripts/preemptible.sh mpirun -np 8 kintsugi train --config ... --out runs/x
#
# Open MPI's mpirun answers SIGTERM/SIGINT with its own kill sequence: the ranks get TERM only
# odls_base_sigkill_timeout seconds later and KILL as long again after that, and a second
# TERM/INT within that time makes mpirun exit at once, forwarding nothing (the ranks are then
# ended by Open MPI about a second later, unsaved). SIGUSR1 and SIGUSR2 it passes on to every
# rank at once and kills nobody; kintsugi takes them like TERM: it saves the last completed step
# and exits 0. So this wrapper turns the first TERM, INT, HUP, USR1 or USR2 it receives into one
# SIGUSR1 to the launcher and swallows the ones after it (one is all kintsugi needs, and an mpirun
# that is already ending dies of a further USR1: seen as status 138 when three TERMs came 0.2 s
# apart on a loaded machine), and runs the launcher in a session (so a process group) of
# its own, so that a signal to the wrapper's group (Ctrl-C at a terminal, `kill -- -PGID`)
# reaches the launcher only through it. It exits with the launcher's status.
#
# A scheduler's KILL after its grace period still ends everything: give it time for the save
# (docs/checkpoints.md, "Give the save time").
set -u
if (($# == 0)); then
  echo "usage: $0 LAUNCHER [ARGS...]   (e.g. $0 mpirun -np 8 kintsugi train ...)" >&2
  exit 2
fi
# setsid, not `set -m`: bash 5.2 loses the exit status of a job started under job control when
# it ends while a trap runs (status -1, seen 3 times in 100 tries). A background child of a
# shell without job control is no group leader, so setsid execs the launcher itself: $! is it.
setsid "$@" &
launcher=$!
forwarded=0
forward() {
  ((forwarded)) && return
  forwarded=1
  kill -USR1 "$launcher" 2>/dev/null
}
trap forward TERM INT HUP USR1 USR2
# `wait` returns 128+N when a trapped signal N arrives: wait again until the launcher is gone,
# then once more for its own status (bash keeps it; the launcher may have ended during the trap,
# which is how this wrapper once exited 143 after a clean save).
while :; do
  wait "$launcher"
  status=$?
  kill -0 "$launcher" 2>/dev/null && continue
  wait "$launcher"
  status=$?
  break
done
exit "$status"

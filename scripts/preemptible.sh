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
# The trap is set before the launcher starts, so a signal that comes at once is not the wrapper's
# death (status 143, the launcher left running): until the launcher's pid is known it is noted and
# forwarded as soon as it is. Trapped (not ignored) signals are reset to their defaults in the
# launcher, which can install its own handlers.
# After the first forwarded signal the others are ignored, not trapped: a trap that runs while the
# launcher ends can lose its status (bash 5.2's wait then says -1, 1 time in 100 with six TERMs in
# 0.2 s), and each trapped signal cuts `wait` short (the wrapper once exited 143 after a clean
# save, the third of three TERMs 0.2 s apart on a loaded machine cutting short the wait that
# collects the launcher's status).
launcher="" pending=0 interrupted=0
forward() {
  interrupted=1
  if [[ -z "$launcher" ]]; then
    pending=1
    return
  fi
  trap '' TERM INT HUP USR1 USR2
  kill -USR1 "$launcher" 2>/dev/null
}
trap forward TERM INT HUP USR1 USR2
# setsid, not `set -m`: bash 5.2 loses the exit status of a job started under job control when
# it ends while a trap runs (status -1, seen 3 times in 100 tries). A background child of a
# shell without job control is no group leader, so setsid execs the launcher itself: $! is it.
setsid "$@" &
launcher=$!
((pending)) && forward
# `wait` returns 128+N when the trapped signal N arrives: wait again (bash keeps an ended
# launcher's status); should the signal come just after the status was collected, the next wait
# says 127 and the status collected stands.
rewait=0
while :; do
  interrupted=0
  wait "$launcher"
  code=$?
  ((rewait && code == 127)) && break
  status=$code
  ((interrupted && code > 128)) || break
  rewait=1
done
exit "$status"

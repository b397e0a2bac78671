#!/usr/bin/env bash
# kintsugi under Slurm (docs/slurm.md): starts a one-node Slurm cluster on this machine (slurmctld
# and slurmd as root, no munge: auth/none, every file under a temporary directory, ports free
# at the time) and runs, on the tiny model of MICRO_RUN:
#   srun     `srun --mpi=pmix -n 4` (dp 4): losses and weights as the serial run (RTOL 1e-5)
#   sbatch   scripts/slurm_train.sbatch with 4 tasks: bit for bit the srun run
#   requeue  `scancel --signal=TERM` to the job's ranks in the middle of the run: they save and
#            the job ends; `scontrol requeue` starts the script again, which resumes (--resume
#            auto) and ends bit for bit equal to the uninterrupted sbatch run
#   limit    `scancel --batch --signal=USR1` (what `--signal=B:USR1@120` sends at the time
#            limit): the script passes it on, the ranks save and the script requeues itself;
#            the second start resumes and ends bit for bit equal too
#   cancel   a plain `scancel`: the ranks save the last completed step and the job ends
#            CANCELLED for good (the script must not requeue it)
#   array    `sbatch --array=0-1` of two 2-rank runs, each in its own --out (array-<task>),
#            with seeds 1234 + task: task 0 equals the serial run, task 1 differs from it
# The array runs beside the sbatch job, and the three pre-empted jobs run at once, each in its
# own job and --out: their waits (Slurm's requeue delay, the slowed steps, the cancel case's
# watch for a requeue) overlap instead of adding up. Every Slurm command runs under `timeout`,
# the daemons are killed on exit, and the whole test is bounded by CTest's TIMEOUT. Skips (exit 77, with the reason) only where Slurm's programs
# are not installed (scripts/setup.sh installs them on Debian).
# Usage: slurm_jobs.sh KINTSUGI CHECK_RUN SBATCH_SCRIPT OUT_DIR [train flags...]
set -uo pipefail
kintsugi="$1" check="$2" script="$3" out="$4"
shift 4
for prog in slurmctld slurmd srun sbatch scancel scontrol squeue sinfo; do
  command -v "$prog" >/dev/null || { echo "SKIP: $prog is not installed (scripts/setup.sh installs Slurm)"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: slurmd must run as root to start jobs (CI runs as root)"; exit 77; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset SLURM_JOB_ID SLURM_JOBID SLURM_NODELIST SLURM_NTASKS  # a test run inside a real job
runs="$out/slurm"
rm -rf "$runs" && mkdir -p "$runs"
# The daemons' files: a short path (slurmd's sockets live in its spool directory).
tmp=$(mktemp -d /tmp/kintsugi-slurm.XXXXXX)
ctld="" slurmd=""
cleanup() {
  # The jobs first, while slurmctld runs (their ranks belong to slurmstepd, which outlives
  # slurmd): cancelled, then up to 10 s for the queue to empty.
  if [[ -n "$ctld" ]] && kill -0 "$ctld" 2>/dev/null; then
    timeout 10 scancel --full --user=root 2>/dev/null
    for _ in $(seq 20); do
      [[ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]] && break
      sleep 0.5
    done
  fi
  for pid in $slurmd $ctld; do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 10); do  # up to 1 s to exit
    kill -0 $slurmd $ctld 2>/dev/null || break
    sleep 0.1
  done
  for pid in $slurmd $ctld; do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/log/*.log; do echo "--- $f"; tail -20 "$f"; done
  exit 1
}

free_port() {  # a port nothing listens on (bash's /dev/tcp fails to connect)
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  fail "no free port"
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
((slurmd_port != ctld_port)) || slurmd_port=$((ctld_port + 1))
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/log"
cpus=$(nproc)
# The three pre-empted jobs of 4 ranks at once on fewer cores: declared, not checked.
((cpus >= 12)) || cpus=12
cat >"$tmp/slurm.conf" <<CONF
ClusterName=kintsugitest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# Requeued jobs wait cred_expire seconds before they start again (120 by default).
AuthInfo=cred_expire=5
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$tmp/slurm.conf"
srun --mpi=list 2>&1 | grep -q pmix || fail "this Slurm has no pmix plugin (srun --mpi=list)"
slurmctld -D -i >"$tmp/log/slurmctld.out" 2>&1 &
ctld=$!
slurmd -D -N localhost >"$tmp/log/slurmd.out" 2>&1 &
slurmd=$!
for _ in $(seq 60); do
  [[ "$(timeout 5 sinfo -h -n localhost -o %t 2>/dev/null)" == idle ]] && break
  sleep 0.5
done
[[ "$(timeout 5 sinfo -h -n localhost -o %t 2>/dev/null)" == idle ]] ||
  { cat "$tmp"/log/*.out; fail "the node is not idle 30 s after the daemons started"; }
echo "slurm: slurmctld on port $ctld_port, slurmd on $slurmd_port, $cpus CPUs declared"

flags=("$@" --set train.decay_steps=20)
steps=$(printf '%s\n' "$@" | sed -n 's/^train.steps=//p' | tail -1)
[[ -n "$steps" ]] || fail "the train flags set no train.steps"
export KINTSUGI="$kintsugi"

job_state() { timeout 10 scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_job() {  # JOB SECONDS: until it has ended (left the queue or COMPLETED/FAILED/...)
  local start=$SECONDS s
  while ((SECONDS - start < $2)); do
    s=$(job_state "$1")
    case "$s" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | "") echo "$s"; return ;; esac
    sleep 0.5
  done
  echo "STUCK:$s"
}
# Step records in a metrics file (the step-0 record carries only val_loss, no "loss").
lines() { if [[ -f "$1" ]]; then grep -c '"loss":' "$1" || true; else echo 0; fi; }
until_step() {  # METRICS N SECONDS
  local start=$SECONDS
  while ((SECONDS - start < $3)); do
    (($(lines "$1") >= $2)) && return 0
    sleep 0.2
  done
  return 1
}

# The serial reference.
"$kintsugi" train "${flags[@]}" --out "$runs/serial" >"$runs/serial.log" 2>&1 ||
  { cat "$runs/serial.log"; fail "the serial run failed"; }

# srun: the ranks started by Slurm through PMIx, no mpirun.
timeout 120 srun --mpi=pmix -n 4 "$kintsugi" train "${flags[@]}" --out "$runs/srun" \
  >"$runs/srun.log" 2>&1 || { cat "$runs/srun.log"; fail "srun -n 4 failed"; }
grep -q "4 ranks = tp 1 x dp 4" "$runs/srun.log" || { cat "$runs/srun.log"; fail "srun did not start one 4-rank job"; }
"$check" compare "$runs/serial" "$runs/srun" || fail "srun dp 4 differs from the serial run"
echo "ok (srun): 4 ranks through srun --mpi=pmix agree with the serial run"

# sbatch: the batch script users copy, 4 tasks; beside it a job array: two runs, each its own
# output directory and seed.
job=$(timeout 10 sbatch --parsable -n 4 --ntasks-per-node=4 -o "$runs/sbatch.out" \
  "$script" "${flags[@]}" --out "$runs/sbatch") || fail "sbatch refused the job"
array=$(timeout 10 sbatch --parsable --array=0-1 -n 2 --ntasks-per-node=2 -o "$runs/array-%a.out" \
  --wrap "srun --mpi=pmix '$kintsugi' train ${flags[*]@Q} --set train.seed=\$((1234 + SLURM_ARRAY_TASK_ID)) --out '$runs'/array-\$SLURM_ARRAY_TASK_ID") ||
  fail "sbatch refused the array"
s=$(wait_job "$job" 120)
[[ "$s" == COMPLETED ]] || { cat "$runs/sbatch.out"; fail "sbatch job $job ended $s"; }
"$check" resumed "$runs/srun" "$runs/sbatch" 0 || fail "the sbatch run differs from the srun run"
echo "ok (sbatch): job $job completed, bit for bit the srun run"
for task in 0 1; do
  s=$(wait_job "${array}_$task" 120)
  [[ "$s" == COMPLETED ]] || { cat "$runs/array-$task.out"; fail "array task $task ended $s"; }
  (($(lines "$runs/array-$task/metrics.jsonl") == steps)) || fail "array task $task: not $steps steps"
done
"$check" compare "$runs/serial" "$runs/array-0" || fail "array task 0 differs from the serial run"
"$check" compare "$runs/serial" "$runs/array-1" >/dev/null 2>&1 && fail "array task 1 (another seed) equals the serial run"
echo "ok (array): tasks 0 and 1 wrote array-0 and array-1; task 0 agrees with the serial run, task 1 (seed 1235) differs"

# Pre-emption: the signal in the middle of a run (micro-batches slowed to 0.3 s), after step 2.
preempt() {  # NAME HOW
  local name="$1" how="$2" dir="$runs/$1" job s stopped
  job=$(KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:300 timeout 10 sbatch --parsable -n 4 \
    --ntasks-per-node=4 -o "$runs/$name.out" "$script" "${flags[@]}" --out "$dir") ||
    fail "sbatch refused the $name job"
  until_step "$dir/metrics.jsonl" 2 120 || { cat "$runs/$name.out"; fail "$name: no step 2 within 120 s"; }
  case "$how" in
    term) timeout 10 scancel --signal=TERM "$job" || fail "scancel --signal=TERM failed"
          s=$(wait_job "$job" 60)
          [[ "$s" == COMPLETED ]] || { cat "$runs/$name.out"; fail "$name: the signalled job ended $s"; }
          stopped=$(lines "$dir/metrics.jsonl")
          ((stopped < steps)) || fail "$name: the job trained to the end before the signal"
          timeout 10 scontrol requeue "$job" || fail "scontrol requeue $job failed" ;;
    limit) timeout 10 scancel --batch --signal=USR1 "$job" || fail "scancel --batch failed" ;;
    cancel) timeout 10 scancel "$job" || fail "scancel failed"
            s=$(wait_job "$job" 60)
            [[ "$s" == CANCELLED ]] || { cat "$runs/$name.out"; fail "$name: the cancelled job ended $s"; }
            # The ranks save within Slurm's KillWait; then the script must not requeue: its
            # requeue would follow srun's end at once, so 5 s after the save it would show.
            local start=$SECONDS
            until grep -q "^wrote .*metrics.jsonl" "$runs/$name.out" 2>/dev/null || ((SECONDS - start > 60)); do sleep 0.2; done
            sleep 5
            cat "$runs/$name.out"
            grep -q "stopped by a signal after step" "$runs/$name.out" || fail "$name: the ranks did not save"
            stopped=$(lines "$dir/metrics.jsonl")
            test -f "$dir/checkpoints/step-$(printf %08d "$stopped")/manifest.json" ||
              fail "$name: no checkpoint of step $stopped"
            s=$(job_state "$job")
            [[ "$s" == CANCELLED ]] || fail "$name: the job is $s after scancel, not CANCELLED"
            timeout 10 scontrol show job "$job" | grep -q "Restarts=0" || fail "$name: the job was requeued"
            grep -q "start 1 on" "$runs/$name.out" && fail "$name: the job started again"
            echo "ok ($name): scancel saved step $stopped and ended the job for good"
            return ;;
  esac
  # The job runs again (after the cred_expire delay): until it has added the remaining steps.
  until_step "$dir/metrics.jsonl" "$steps" 120 || { cat "$runs/$name.out"; fail "$name: not finished 120 s after the signal"; }
  s=$(wait_job "$job" 60)
  [[ "$s" == COMPLETED ]] || { cat "$runs/$name.out"; fail "$name: the requeued job ended $s"; }
  cat "$runs/$name.out"
  grep -q "stopped by a signal after step" "$runs/$name.out" || fail "$name: no stop message"
  grep -q "start 1 on" "$runs/$name.out" || fail "$name: the job did not start a second time"
  grep -q "resum" "$runs/$name.out" || fail "$name: the second start did not resume"
  (($(lines "$dir/metrics.jsonl") == steps)) || fail "$name: metrics.jsonl has not $steps steps"
  "$check" resumed "$runs/sbatch" "$dir" 0 || fail "$name: the requeued run differs from the uninterrupted one"
  echo "ok ($name): stopped, requeued, resumed to step $steps bit for bit"
}
# The three at once, each reporting into its own file (a failure exits its subshell only).
cases=(requeue:term limit:limit cancel:cancel) pids=()
for c in "${cases[@]}"; do
  preempt "${c%%:*}" "${c#*:}" >"$runs/${c%%:*}.check" 2>&1 &
  pids+=($!)
done
failed=""
for i in "${!cases[@]}"; do
  wait "${pids[$i]}" || failed+=" ${cases[$i]%%:*}"
  cat "$runs/${cases[$i]%%:*}.check"
done
[[ -z "$failed" ]] || fail "pre-emption:$failed (lines above)"

echo "ok: all Slurm checks passed"

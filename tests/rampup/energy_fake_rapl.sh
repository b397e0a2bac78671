#!/usr/bin/env bash
# Measured energy end to end on a fake RAPL package (docs/energy.md): a writer advances
# energy_uj at 100 W of wall time (renamed into place, as sysfs never shows a half-written
# value); a serial run and a 2-rank run on this one "package" must report energy_j, energy_s,
# power_w and joules_per_token in metrics.jsonl and TensorBoard, with power near 100 W: the two
# ranks read the same package and count it once (200 W would be a double count). Each
# micro-batch is made 80 ms longer (KINTSUGI_TEST_SLOW_MICRO_BATCHES) so that a step outlasts
# the writer's update period many times. Then a counter that updates less often than steps end
# (as NVML's does on a GPU): a writer updating every 0.4 s under 5 ms micro-batches, 32 steps;
# a step no update reached carries no energy (never 0 J), the next one carries the joules,
# seconds and tokens since the last reading, and the power over the run is still near 100 W.
# Usage: energy_fake_rapl.sh KINTSUGI OUT_DIR CHECK_TFEVENTS [common flags...]
set -euo pipefail
kintsugi="$1" out="$2" tfevents="$3"
shift 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/energy"
rm -rf "$dir"
writers=()
stop_writers() {
  ((${#writers[@]} == 0)) || kill "${writers[@]}" 2>/dev/null || true
  writers=()
}
trap stop_writers EXIT
fake_package() {  # fake_package ROOT PERIOD_S: a package-0 zone at 100 W, updated every PERIOD_S
  local zone="$1/intel-rapl:0" period="$2"
  mkdir -p "$zone"
  echo package-0 >"$zone/name"
  echo 262143328850 >"$zone/max_energy_range_uj"
  echo 0 >"$zone/energy_uj"
  # One process (a shell loop forked date, mv and sleep every period: a core's worth of work),
  # counting from now; the runs start once it has written.
  python3 - "$zone" "$period" "$(date +%s%N)" <<'PY' &
import os, sys, time
zone, period, start = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
while True:  # microjoules at 100 W: (ns since start) / 10
    with open(f"{zone}/energy_uj.tmp", "w") as f:
        f.write(f"{(time.time_ns() - start) // 10}\n")
    os.replace(f"{zone}/energy_uj.tmp", f"{zone}/energy_uj")
    time.sleep(period)
PY
  writers+=($!)
  for _ in $(seq 500); do
    [[ "$(cat "$zone/energy_uj")" != 0 ]] && break
    sleep 0.01
  done
}
fake_package "$dir/powercap" 0.005
export KINTSUGI_TEST_POWERCAP_ROOT="$dir/powercap" KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:80
"$kintsugi" train "$@" --tensorboard "$dir/serial/tb" --out "$dir/serial" >"$dir/serial.log"
mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train "$@" --dp 2 \
  --out "$dir/dp2" >"$dir/dp2.log"
grep -q "^energy: RAPL package-0 (rank 0's)$" "$dir/serial.log"
grep -q "^energy: RAPL package-0 (rank 0's), 1 counter over 2 ranks summed$" "$dir/dp2.log"
python3 "$tfevents" "$dir/serial/tb" "$dir/serial/metrics.jsonl"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
for run in ("serial", "dp2"):
    lines = [json.loads(l) for l in open(f"{d}/{run}/metrics.jsonl") if l.strip()]
    lines = [r for r in lines if "loss" in r]  # steps (step 0 records only val_loss)
    for r in lines:
        tokens = r["global_batch"] * (r["tokens_seen"] // r["samples_seen"])
        assert abs(r["joules_per_token"] * tokens - r["energy_j"]) <= 1e-9 * r["energy_j"], r
        assert abs(r["power_w"] * r["energy_s"] - r["energy_j"]) <= 1e-9 * r["energy_j"], r
    # Over all steps: each reading may lag the writer by one of its updates (a few ms, more on
    # a busy machine); the sum over steps of ~0.7 s each averages that out.
    power = sum(r["energy_j"] for r in lines) / sum(r["energy_s"] for r in lines)
    print(f"{run}: {power:.1f} W over {len(lines)} steps (the fake package: 100 W)")
    if not 70 < power < 130:
        sys.exit(f"{run}: measured {power:.1f} W of a 100 W fake package")
PY

# A coarse counter: steps of about 50 ms against updates every 0.4 s.
fake_package "$dir/coarse_powercap" 0.4
KINTSUGI_TEST_POWERCAP_ROOT="$dir/coarse_powercap" KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:5 \
  "$kintsugi" train "$@" --set train.steps=32 --set train.eval_every=0 --out "$dir/coarse" \
  >"$dir/coarse.log"
python3 - "$dir/coarse/metrics.jsonl" <<'PY'
import json, sys
steps = [r for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if "loss" in r]
carried = [r for r in steps if "energy_j" in r]
if not (0 < len(carried) < len(steps)):
    sys.exit(f"coarse counter: {len(carried)} of {len(steps)} steps carry energy: expected some")
tokens = 0
for r in steps:  # each reading covers the tokens since the last one
    tokens += r["global_batch"] * (r["tokens_seen"] // r["samples_seen"])
    if "energy_j" not in r:
        continue
    assert r["energy_j"] > 0 and r["energy_s"] > 0, r
    assert abs(r["joules_per_token"] * tokens - r["energy_j"]) <= 1e-9 * r["energy_j"], r
    tokens = 0
power = sum(r["energy_j"] for r in carried) / sum(r["energy_s"] for r in carried)
print(f"coarse: {len(carried)} of {len(steps)} steps carry energy, {power:.1f} W (the fake: 100 W)")
if not 60 < power < 140:
    sys.exit(f"coarse counter: measured {power:.1f} W of a 100 W fake package")
PY
stop_writers  # before their directories go
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"

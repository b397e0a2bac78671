#!/usr/bin/env python3
"""Where two runs' final weights differ, tensor by tensor, and how large the gradients there are.

  where_runs_differ.py RUN_A RUN_B CHECKPOINT [BETA2 [ROWS]]

RUN_A and RUN_B are `kintsugi train` output directories (their model/); CHECKPOINT is a training
checkpoint of RUN_A's last step written by one rank (--set train.save_every=N on a serial run),
whose AdamW second moments give each element's gradient RMS, sqrt(v / (1 - beta2^t)); BETA2 is
the run's train.beta2 (default 0.95). Prints the tensors whose largest difference, relative to
max(|weight|, 0.02) as `check_run` measures it, is largest, each with the gradient RMS at that
element and the largest difference among elements whose gradient RMS is below 1e-6 (rounding
noise: AdamW turns it into lr-sized steps) and among the others. docs/parallelism.md ("How long
layouts agree") shows what it found. Pure Python: no numpy needed.
"""
import json
import math
import sys
from array import array


def floats(raw, count, offset):
    values = array("f")
    values.frombytes(raw[offset:offset + 4 * count])
    return values


def model_weights(run):
    manifest = json.load(open(f"{run}/model/manifest.json"))
    raw = open(f"{run}/model/params.bin", "rb").read()
    return {t["name"]: floats(raw, t["bytes"] // 4, t["offset"]) for t in manifest["tensors"]}


def gradient_rms(checkpoint, beta2):
    manifest = json.load(open(f"{checkpoint}/manifest.json"))
    if len(manifest["files"]) != 1:
        sys.exit("the checkpoint must come from a serial run (one shard file)")
    raw = open(f"{checkpoint}/rank-00000.bin", "rb").read()
    correction = 1 - beta2 ** manifest["optimizer_steps"]
    # A piece holds `count` weights, then as many first and as many second moments.
    second = {p["tensor"]: floats(raw, p["count"], p["offset"] + 8 * p["count"])
              for p in manifest["pieces"]}
    return {name: (v, correction) for name, v in second.items()}


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    a, b = model_weights(sys.argv[1]), model_weights(sys.argv[2])
    rms = gradient_rms(sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.95)
    rows = []
    for name, wa in a.items():
        wb = b[name]
        second, correction = rms[name]
        scale = max(max(abs(x) for x in wa), 0.02)
        worst = worst_noise = worst_other = rms_at_worst = 0.0
        noise = 0
        for k in range(len(wa)):
            d = abs(wa[k] - wb[k])
            r = math.sqrt(second[k] / correction)
            if r < 1e-6:
                noise += 1
                worst_noise = max(worst_noise, d)
            else:
                worst_other = max(worst_other, d)
            if d > worst:
                worst, rms_at_worst = d, r
        rows.append((worst / scale, name, len(wa), rms_at_worst, worst_noise / scale,
                     worst_other / scale, noise))
    rows.sort(reverse=True)
    print(f"{'difference':>10}  {'tensor':<32} {'elements':>9}  {'rms there':>9}  "
          f"{'rms < 1e-6':>10}  {'the others':>10}  {'# rms < 1e-6':>12}")
    for r in rows[:int(sys.argv[5]) if len(sys.argv) > 5 else 12]:
        print(f"{r[0]:10.2e}  {r[1]:<32} {r[2]:9d}  {r[3]:9.2e}  {r[4]:10.2e}  {r[5]:10.2e}  "
              f"{r[6]:12d}")


if __name__ == "__main__":
    main()

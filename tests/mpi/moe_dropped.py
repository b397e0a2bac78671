#!/usr/bin/env python3
"""Capacity factor (docs/moe.md, "Capacity factor"): every training step of each run reports
moe_dropped_fraction, strictly between 0 and 1 (the factor drops some choices, not all), and the
runs report the same fractions step for step (the drops are deterministic).
Usage: moe_dropped.py RUN_DIR [RUN_DIR...]"""
import json
import sys


def fractions(run):
    out = {}
    with open(f"{run}/metrics.jsonl") as f:
        for line in f:
            m = json.loads(line)
            if "loss" not in m:
                continue
            if "moe_dropped_fraction" not in m:
                sys.exit(f"{run}: step {m['step']} reports no moe_dropped_fraction")
            out[m["step"]] = m["moe_dropped_fraction"]
    if not out:
        sys.exit(f"{run}: no training steps")
    return out


runs = [fractions(r) for r in sys.argv[1:]]
for step, f in runs[0].items():
    if not 0 < f < 1:
        sys.exit(f"{sys.argv[1]}: step {step} dropped fraction {f} is not in (0, 1)")
for other, run in zip(runs[1:], sys.argv[2:]):
    if other != runs[0]:
        sys.exit(f"{run}: dropped fractions {other} differ from {sys.argv[1]}'s {runs[0]}")
print("dropped fractions per step:", ", ".join(f"{f:.4f}" for f in runs[0].values()))

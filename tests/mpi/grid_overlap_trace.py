#!/usr/bin/env python3
"""Counts, per rank of a Chrome trace (--trace), the grid collectives whose span (issue to the
wait that ended it) overlaps a grid GEMM's span on the same rank (model/grid_linear.hpp).
Usage: grid_overlap_trace.py TRACE (on|off): "on" needs at least one such overlap, "off" none."""
import json
import sys

path, mode = sys.argv[1], sys.argv[2]
events = [e for e in json.load(open(path))["traceEvents"]
          if e.get("ph") == "X" and e["name"].startswith("grid ")]
comm = [e for e in events if e.get("cat") == "communication"]
gemm = [e for e in events if e.get("cat") == "compute" and " GEMM " in e["name"]]
if not comm or not gemm:
    sys.exit(f"FAIL: {path} has {len(comm)} grid collective and {len(gemm)} grid GEMM spans")
overlaps = 0
for c in comm:
    for g in gemm:
        if c["pid"] == g["pid"] and c["ts"] < g["ts"] + g["dur"] and g["ts"] < c["ts"] + c["dur"]:
            overlaps += 1
            break
print(f"{overlaps} of {len(comm)} grid collectives overlap a grid GEMM ({len(gemm)} GEMMs)")
if (mode == "on") != (overlaps > 0):
    sys.exit(f"FAIL: overlap {mode} but {overlaps} overlapping collectives")

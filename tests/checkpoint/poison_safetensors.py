#!/usr/bin/env python3
"""Copies a float32 safetensors file with one element of one tensor replaced (NaN by default):
a file that is well formed but holds weights no run can start from.
Usage: poison_safetensors.py IN OUT TENSOR [VALUE]"""
import json
import struct
import sys

src, dst, name = sys.argv[1:4]
value = float(sys.argv[4]) if len(sys.argv) > 4 else float("nan")
data = bytearray(open(src, "rb").read())
(length,) = struct.unpack_from("<Q", data, 0)
entry = json.loads(data[8 : 8 + length])[name]
assert entry["dtype"] == "F32", entry
begin = 8 + length + entry["data_offsets"][0]
struct.pack_into("<f", data, begin + 4 * 5, value)  # element 5
open(dst, "wb").write(data)

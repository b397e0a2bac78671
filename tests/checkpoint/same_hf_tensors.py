#!/usr/bin/env python3
"""Checks that a Hugging Face folder came back from `kintsugi import` and `export` bit for bit:
every tensor of FOLDER is in BACK with the same name (GPT2LMHeadModel's "transformer." prefix
aside), type, shape and bytes, and BACK holds no other tensor but lm_head as the copy of a tied
embedding (a tied Llama's export writes it).

Usage: same_hf_tensors.py FOLDER BACK"""
import json
import os
import struct
import sys


def tensors(folder):
    """name (without GPT2LMHeadModel's "transformer." prefix) -> (dtype, shape, bytes)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    out = {}
    for f in files:
        raw = open(os.path.join(folder, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for k, v in json.loads(raw[8:8 + n]).items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            out[k.removeprefix("transformer.")] = (v["dtype"], v["shape"], raw[8 + n + a:8 + n + b])
    return out


src, back = tensors(sys.argv[1]), tensors(sys.argv[2])
for k, t in src.items():
    if back.get(k) != t:
        sys.exit(f"FAIL: {k} differs after import and export")
extra = set(back) - set(src)
if extra - {"lm_head.weight"} or ("lm_head.weight" in extra and
                                  back["lm_head.weight"] != src["model.embed_tokens.weight"]):
    sys.exit(f"FAIL: export wrote other tensors: {sorted(extra)}")
print(f"{len(src)} tensors bit for bit after import and export"
      + (" (and lm_head, the tied embedding's copy)" if extra else ""))

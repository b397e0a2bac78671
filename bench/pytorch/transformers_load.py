#!/usr/bin/env python3
"""Loads a folder written by `kintsugi export` with Hugging Face transformers itself
(AutoTokenizer and AutoModelForCausalLM) and prints one JSON line: the ids the loaded
tokenizer gives TEXT (no specials added), and the mean next-token loss of the loaded model on
the first SEQ + 1 tokens of a kintsugi token file. bench/transformers_check.sh compares both
with kintsugi's own `encode` and `eval` on the same input.

Usage: transformers_load.py EXPORT_DIR TOKENS.bin SEQ TEXT
Needs torch and transformers (the GPU machine has them; Debian does not package transformers).
"""
import json
import struct
import sys

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer


def first_window(path: str, count: int) -> list:
    """The first `count` ids of a kintsugi token file (docs/data.md: a 64-byte header with the
    token width at byte 16, then little-endian ids)."""
    with open(path, "rb") as f:
        header = f.read(64)
        (width,) = struct.unpack_from("<I", header, 16)
        data = f.read(count * width)
    fmt = {2: "H", 4: "I"}[width]
    return list(struct.unpack(f"<{count}{fmt}", data))


def main() -> int:
    folder, tokens_path, seq, text = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model.eval()
    ids = first_window(tokens_path, seq + 1)
    x = torch.tensor([ids[:-1]])
    y = torch.tensor(ids[1:])
    with torch.no_grad():
        logits = model(x).logits[0].float()
    loss = F.cross_entropy(logits, y).item()
    print(json.dumps({"architecture": type(model).__name__,
                      "tokenizer": type(tokenizer).__name__,
                      "ids": tokenizer.encode(text, add_special_tokens=False),
                      "loss": loss}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

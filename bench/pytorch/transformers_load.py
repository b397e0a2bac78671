#!/usr/bin/env python3
"""Loads a folder written by `kintsugi export` with Hugging Face transformers itself
(AutoTokenizer and AutoModelForCausalLM) and prints one JSON line: the ids the loaded
tokenizer gives TEXT (with the specials it adds, e.g. Llama 2's <s>), and the mean next-token loss of the loaded model on
the first SEQ + 1 tokens of a kintsugi token file. bench/transformers_check.sh compares both
with kintsugi's own `encode` and `eval` on the same input.

Usage: transformers_load.py EXPORT_DIR TOKENS.bin SEQ TEXT
Needs torch and transformers (the GPU machine has them; Debian does not package transformers).
"""
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

try:
    from tokenizers import Tokenizer
except ImportError:
    Tokenizer = None


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
    # With the specials the tokenizer adds (Llama 2's <s>), as `kintsugi encode` gives them.
    ids = tokenizer.encode(text)
    # The file itself, run by Hugging Face's tokenizers as written: when AutoTokenizer's class
    # builds its own pipeline around the file's vocabulary (transformers 5 does for Llama), this
    # tells a difference of the class from a difference of the file.
    path = f"{folder}/tokenizer.json"  # GPT-2's exports carry vocab.json and merges.txt instead
    file_ids = Tokenizer.from_file(path).encode(text).ids if Tokenizer and os.path.exists(path) else None
    print(json.dumps({"architecture": type(model).__name__,
                      "tokenizer": type(tokenizer).__name__,
                      "ids": ids,
                      "tokens": tokenizer.convert_ids_to_tokens(ids),
                      "file_ids": file_ids,
                      "loss": loss}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

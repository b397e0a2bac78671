#!/usr/bin/env python3
"""Loads a folder written by `kintsugi export` with Hugging Face transformers and saves it again
with transformers' own save_pretrained, sharded (max_shard_size SIZE, safetensors), tokenizer
included: a folder as the Hub ships them, written by transformers rather than by kintsugi, for
bench/transformers_folder_check.sh to load with `kintsugi train --init-from FOLDER`.

Usage: transformers_save_sharded.py EXPORT_DIR OUT_DIR SIZE
Needs torch and transformers (the GPU machine has them)."""
import os
import sys

from transformers import AutoModelForCausalLM, AutoTokenizer

src, dst, size = sys.argv[1:4]
model = AutoModelForCausalLM.from_pretrained(src)
model.save_pretrained(dst, max_shard_size=size, safe_serialization=True)
AutoTokenizer.from_pretrained(src).save_pretrained(dst)
print(" ".join(sorted(os.listdir(dst))))

#!/usr/bin/env python3
"""Checks an exported GPT-2 safetensors file against the kintsugi model checkpoint it came from,
with a reader written from the format's specification (not kintsugi's code): header, metadata,
names, shapes, and every value under Hugging Face's layout (Conv1D weights are [in, out]; the
attention projection packs q | k | v over all heads, kintsugi packs q, k, v per head).

Usage: verify_hf_export.py FILE.safetensors MODEL_CHECKPOINT_DIR"""
import array
import json
import os
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    assert (8 + n) % 8 == 0, "data must start 8-byte aligned"
    body = data[8 + n :]
    meta = header.pop("__metadata__", {})
    tensors, end = {}, 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        assert t["dtype"] == "F32", name
        b, e = t["data_offsets"]
        assert b == end, f"{name}: gap or overlap at {b}"
        count = 1
        for d in t["shape"]:
            count *= d
        assert e - b == 4 * count, name
        values = array.array("f")
        values.frombytes(body[b:e])
        tensors[name] = (t["shape"], values)
        end = e
    assert end == len(body), "trailing bytes after the last tensor"
    return meta, tensors


def read_kintsugi(model_dir):
    manifest = json.load(open(os.path.join(model_dir, "manifest.json")))
    raw = open(os.path.join(model_dir, "params.bin"), "rb").read()
    out = {}
    for t in manifest["tensors"]:
        values = array.array("f")
        values.frombytes(raw[t["offset"] : t["offset"] + t["bytes"]])
        out[t["name"]] = (t["shape"], values)
    return manifest["model"], out


def main():
    meta, hf = read_safetensors(sys.argv[1])
    model, ours = read_kintsugi(sys.argv[2])
    config = json.load(open(os.path.join(os.path.dirname(sys.argv[1]), "config.json")))
    assert meta.get("format") == "pt", meta
    assert config["model_type"] == "gpt2"
    for key, ours_key in [("n_layer", "n_layer"), ("n_embd", "d_model"), ("n_head", "n_head"),
                          ("vocab_size", "vocab_size"), ("n_positions", "seq_len")]:
        assert config[key] == model[ours_key], key
    d, heads, layers = model["d_model"], model["n_head"], model["n_layer"]
    hd = d // heads
    checked = 0

    def same(hf_name, our_name, index):
        """index(hf flat position, hf shape) -> our flat position."""
        nonlocal checked
        shape, values = hf[hf_name]
        our_shape, our_values = ours[our_name]
        assert len(values) == len(our_values), (hf_name, shape, our_shape)
        for k in range(len(values)):
            assert values[k] == our_values[index(k, shape)], (hf_name, k)
        checked += 1

    plain = lambda k, shape: k
    transposed = lambda k, shape: (k % shape[1]) * shape[0] + k // shape[1]  # hf [in, out]

    def qkv_row(o):  # hf output column o (q | k | v) -> our row (per head: q, k, v)
        s, h, j = o // d, (o % d) // hd, o % hd
        return h * 3 * hd + s * hd + j

    same("transformer.wte.weight", "embedding.token.weight", plain)
    same("transformer.wpe.weight", "embedding.position.weight", plain)
    for i in range(layers):
        p, q = f"transformer.h.{i}.", f"blocks.{i}."
        for a, b in [("ln_1", "ln1"), ("ln_2", "ln2")]:
            same(p + a + ".weight", q + b + ".weight", plain)
            same(p + a + ".bias", q + b + ".bias", plain)
        same(p + "attn.c_attn.weight", q + "attn.qkv.weight",
             lambda k, shape: qkv_row(k % shape[1]) * shape[0] + k // shape[1])
        same(p + "attn.c_attn.bias", q + "attn.qkv.bias", lambda k, shape: qkv_row(k))
        for a, b in [("attn.c_proj", "attn.proj"), ("mlp.c_fc", "mlp.fc"), ("mlp.c_proj", "mlp.fc2")]:
            same(p + a + ".weight", q + b + ".weight", transposed)
            same(p + a + ".bias", q + b + ".bias", plain)
    same("transformer.ln_f.weight", "final_norm.weight", plain)
    same("transformer.ln_f.bias", "final_norm.bias", plain)
    assert checked == len(hf) == len(ours), (checked, len(hf), len(ours))
    print(f"ok: {checked} tensors match under Hugging Face GPT-2 names and layout")


if __name__ == "__main__":
    main()

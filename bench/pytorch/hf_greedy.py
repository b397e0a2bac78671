#!/usr/bin/env python3
"""Greedy continuation of a prompt by a model exported with `kintsugi export`, computed in
PyTorch from the safetensors file and config.json alone, with Hugging Face transformers'
conventions for each architecture written out here (GPT2LMHeadModel: Conv1D weights [in, out],
fused c_attn, learned positions, gelu_new; LlamaForCausalLM: RMSNorm, rotate_half RoPE,
SwiGLU, grouped-query attention, untied lm_head; BloomForCausalLM: build_alibi_tensor slopes,
word-embedding LayerNorm, fused query_key_value per head, tied head). If kintsugi's greedy
`generate` prints the same text, the exported file means to a transformers user what it meant
to kintsugi.

Usage: hf_greedy.py MODEL.safetensors PROMPT_IDS TOKENS ENCODER_JSON
  PROMPT_IDS: space-separated GPT-2 token ids (`kintsugi encode`); prints the continuation text.
Needs python3-torch (scripts/setup.sh --bench)."""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        assert t["dtype"] == "F32"
        out[name] = torch.frombuffer(bytearray(body[b:e]), dtype=torch.float32).reshape(t["shape"])
    return out


def layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))


def attend(q, k, v, bias=None):  # q [H, T, hd], k/v [H, T, hd]
    T, hd = q.shape[1], q.shape[2]
    s = q @ k.transpose(1, 2) / math.sqrt(hd)
    if bias is not None:
        s = s + bias
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v


def gpt2_logits(w, c, ids):
    T, d, H = len(ids), c["n_embd"], c["n_head"]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], c["layer_norm_epsilon"])
        q, k, v = (h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(d, -1)
        heads = lambda t: t.view(T, H, d // H).transpose(0, 1)
        a = attend(heads(q), heads(k), heads(v)).transpose(0, 1).reshape(T, d)
        x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], c["layer_norm_epsilon"])
        h = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], c["layer_norm_epsilon"])
    return x @ w["transformer.wte.weight"].T


def rotate_half(x):
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)


def llama_logits(w, c, ids):
    T, d, H, KV = len(ids), c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd, eps = d // H, c["rms_norm_eps"]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat((angles, angles), -1)
    cos, sin = emb.cos().float(), emb.sin().float()
    rope = lambda t: t * cos + rotate_half(t) * sin
    x = w["model.embed_tokens.weight"][ids]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, H, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, KV, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, KV, hd).transpose(0, 1)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        a = attend(q, k, v).transpose(0, 1).reshape(T, d)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + g @ w[p + "mlp.down_proj.weight"].T
    return rms_norm(x, w["model.norm.weight"], eps) @ w["lm_head.weight"].T


def alibi_slopes(n):  # transformers' build_alibi_tensor
    closest = 2 ** math.floor(math.log2(n))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != n:
        extra = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(min(closest, n - closest))]
    return torch.tensor(slopes)


def bloom_logits(w, c, ids):
    T, d, H, eps = len(ids), c["hidden_size"], c["n_head"], c["layer_norm_epsilon"]
    hd = d // H
    bias = alibi_slopes(H).view(H, 1, 1) * torch.arange(T).view(1, 1, T)  # slope * key position
    x = w["transformer.word_embeddings.weight"][ids]
    x = layer_norm(x, w["transformer.word_embeddings_layernorm.weight"],
                   w["transformer.word_embeddings_layernorm.bias"], eps)
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        h = layer_norm(x, w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"], eps)
        qkv = (h @ w[p + "self_attention.query_key_value.weight"].T
               + w[p + "self_attention.query_key_value.bias"]).view(T, H, 3, hd)
        q, k, v = (qkv[:, :, j].transpose(0, 1) for j in range(3))
        a = attend(q, k, v, bias).transpose(0, 1).reshape(T, d)
        x = x + a @ w[p + "self_attention.dense.weight"].T + w[p + "self_attention.dense.bias"]
        h = layer_norm(x, w[p + "post_attention_layernorm.weight"], w[p + "post_attention_layernorm.bias"], eps)
        h = gelu_new(h @ w[p + "mlp.dense_h_to_4h.weight"].T + w[p + "mlp.dense_h_to_4h.bias"])
        x = x + h @ w[p + "mlp.dense_4h_to_h.weight"].T + w[p + "mlp.dense_4h_to_h.bias"]
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w["transformer.word_embeddings.weight"].T


def decoder(encoder_json):  # GPT-2's byte-level BPE: token string -> bytes
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}
    vocab = {i: s for s, i in json.load(open(encoder_json)).items()}
    return lambda ids: bytes(byte_of[ch] for i in ids for ch in vocab[i]).decode("utf-8", "replace")


def main():
    path, prompt, count, encoder_json = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    config = json.load(open(os.path.join(os.path.dirname(path), "config.json")))
    weights = load(path)
    forward = {"gpt2": gpt2_logits, "llama": llama_logits, "bloom": bloom_logits}[config["model_type"]]
    ids = [int(t) for t in prompt.split()]
    new = []
    torch.set_grad_enabled(False)
    for _ in range(count):
        logits = forward(weights, config, ids + new)[-1]
        new.append(int(logits.argmax()))
    print(decoder(encoder_json)(new))


if __name__ == "__main__":
    main()

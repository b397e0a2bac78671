#!/usr/bin/env python3
"""Checks an exported safetensors file against the kintsugi model checkpoint it came from, with a
reader written from the format's specification (not kintsugi's code): header, metadata, names,
shapes, the tensors' type (F32, BF16 or F16, one for the file, config.json's torch_dtype naming
it), and every value under Hugging Face's layout for the model's family, exactly (a 16-bit value
widened to float32 must equal the checkpoint's value: an export of a bf16 run's bf16 weights
rounds nothing):
  GPT2LMHeadModel   Conv1D weights are [in, out]; c_attn packs q | k | v over all heads
                    (kintsugi packs per head: its query heads, key, value)
  LlamaForCausalLM  nn.Linear [out, in]; q_proj, k_proj, v_proj are separate tensors
  MistralForCausalLM, Qwen2ForCausalLM  Llama's names; Qwen2's q/k/v_proj have biases; no
                    lm_head when tie_word_embeddings (Qwen2.5's small models)
  Qwen3ForCausalLM  Llama's names, no biases; self_attn.q_norm and k_norm, a weight of
                    head_dim each, shared by all query heads and all key heads
  BloomForCausalLM  nn.Linear [out, in]; query_key_value packs q, k, v per head, as kintsugi
  MixtralForCausalLM  (a mixture of experts of family llama or mistral) Mistral's attention;
                    block_sparse_moe.gate [experts, hidden] and experts.N.w1, w3 [ffn, hidden],
                    w2 [hidden, ffn], intermediate_size the experts' width
  Qwen2MoeForCausalLM, Qwen3MoeForCausalLM  (family qwen2, qwen3 with experts) the family's
                    attention; mlp.gate, mlp.experts.N.gate_proj, up_proj, down_proj of
                    moe_intermediate_size; Qwen2-MoE's mlp.shared_expert.*_proj and
                    mlp.shared_expert_gate [1, hidden]; their dense layers (decoder_sparse_step,
                    mlp_only_layers) mlp.gate_proj, up_proj, down_proj of intermediate_size

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
    tensors, end, dtypes = {}, 0, set()
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        dtype = t["dtype"]
        assert dtype in SIZE, (name, dtype)
        dtypes.add(dtype)
        b, e = t["data_offsets"]
        assert b == end, f"{name}: gap or overlap at {b}"
        count = 1
        for d in t["shape"]:
            count *= d
        assert e - b == SIZE[dtype] * count, name
        tensors[name] = (t["shape"], decode(body[b:e], dtype, count))
        end = e
    assert end == len(body), "trailing bytes after the last tensor"
    assert len(dtypes) == 1, f"one type per export, not {dtypes}"
    return meta, tensors, dtypes.pop()


SIZE = {"F32": 4, "BF16": 2, "F16": 2}
TORCH_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def decode(raw, dtype, count):
    """Little-endian values widened to float32 (exact for BF16 and F16)."""
    if dtype == "F16":
        return array.array("f", struct.unpack(f"<{count}e", raw))
    if dtype == "BF16":  # the high half of a float32: two zero bytes below each value
        wide = bytearray(4 * count)
        wide[2::4], wide[3::4] = raw[0::2], raw[1::2]
        raw = bytes(wide)
    values = array.array("f")
    values.frombytes(raw)
    return values


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
    meta, hf, dtype = read_safetensors(sys.argv[1])
    model, ours = read_kintsugi(sys.argv[2])
    config = json.load(open(os.path.join(os.path.dirname(sys.argv[1]), "config.json")))
    assert meta.get("format") == "pt", meta
    assert config["torch_dtype"] == TORCH_DTYPE[dtype], (config["torch_dtype"], dtype)
    family = model.get("family", "gpt2")
    d, heads, layers = model["d_model"], model["n_head"], model["n_layer"]
    kv = model.get("n_kv_head", 0) or heads
    hd, group = model.get("head_dim", 0) or d // heads, heads // kv
    checked = 0

    def same(hf_name, our_name, index, rows=None):
        """index(hf flat position, hf shape) -> our flat position; rows: the hf tensor is that
        many rows of ours (a part of a fused tensor)."""
        nonlocal checked
        shape, values = hf[hf_name]
        our_shape, our_values = ours[our_name]
        expected = len(our_values) if rows is None else rows * (our_shape[1:] or [1])[0]
        assert len(values) == expected, (hf_name, shape, our_shape)
        for k in range(len(values)):
            assert values[k] == our_values[index(k, shape)], (hf_name, k)
        checked += 1

    plain = lambda k, shape: k
    transposed = lambda k, shape: (k % shape[1]) * shape[0] + k // shape[1]  # hf [in, out]

    def our_row(kind, head, j):  # kintsugi: per kv head g, `group` query heads, key g, value g
        if kind == "q":
            return ((head // group) * (group + 2) + head % group) * hd + j
        return (head * (group + 2) + group + (kind == "v")) * hd + j

    if family == "gpt2":
        assert config["model_type"] == "gpt2"
        for key, ours_key in [("n_layer", "n_layer"), ("n_embd", "d_model"), ("n_head", "n_head"),
                              ("vocab_size", "vocab_size"), ("n_positions", "seq_len")]:
            assert config[key] == model[ours_key], key

        def qkv_row(o):  # hf output column o (q | k | v) -> our row
            s, h, j = o // d, (o % d) // hd, o % hd
            return our_row("qkv"[s], h, j)

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
            for a, b in [("attn.c_proj", "attn.proj"), ("mlp.c_fc", "mlp.fc"),
                         ("mlp.c_proj", "mlp.fc2")]:
                same(p + a + ".weight", q + b + ".weight", transposed)
                same(p + a + ".bias", q + b + ".bias", plain)
        same("transformer.ln_f.weight", "final_norm.weight", plain)
        same("transformer.ln_f.bias", "final_norm.bias", plain)
        total = len(ours)
    elif family in ("llama", "mistral", "qwen2", "qwen3"):
        moe = model.get("moe")
        mixtral = moe is not None and family in ("llama", "mistral")
        if moe is None:
            model_type = family
            architecture = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                            "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[family]
        elif mixtral:
            model_type, architecture = "mixtral", "MixtralForCausalLM"
        else:
            model_type = family + "_moe"
            architecture = {"qwen2": "Qwen2MoeForCausalLM", "qwen3": "Qwen3MoeForCausalLM"}[family]
        assert config["model_type"] == model_type and config["architectures"] == [architecture]
        for key, ours_key in [("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"),
                              ("num_attention_heads", "n_head"), ("vocab_size", "vocab_size")]:
            assert config[key] == model[ours_key], key
        expert_width = 0
        if moe is not None:
            expert_width = moe["expert_hidden"] or model["d_ff"]
            experts_key = "num_local_experts" if mixtral else "num_experts"
            assert config[experts_key] == moe["experts"], experts_key
            assert config["num_experts_per_tok"] == moe["top_k"]
            if not mixtral:
                assert config["moe_intermediate_size"] == expert_width
                assert config["norm_topk_prob"] is moe["router_norm_topk"]
        if mixtral:
            assert config["intermediate_size"] == expert_width
        else:
            assert config["intermediate_size"] == model["d_ff"]
        shared_width = 0
        if moe is not None and moe["shared_experts"]:
            shared_width = moe["shared_hidden"] or moe["shared_experts"] * expert_width
            assert config["shared_expert_intermediate_size"] == shared_width
        # Llama's block unties its head unless model.tie_embeddings says otherwise.
        tied = model.get("tie_embeddings", "family") == "tied"
        assert config["num_key_value_heads"] == kv and config["tie_word_embeddings"] is tied
        assert config.get("head_dim", d // heads) == hd, (config.get("head_dim"), hd)
        window = model.get("sliding_window", 0)
        if family == "mistral" or mixtral:
            assert config["sliding_window"] == (window or None), config["sliding_window"]
        else:
            assert window == 0 and config.get("use_sliding_window", False) is False
        scaling = model.get("rope_scaling")
        if scaling is None or scaling.get("type", "none") == "none":
            assert config["rope_scaling"] is None, config["rope_scaling"]
        else:
            r = config["rope_scaling"]
            assert r["rope_type"] == scaling["type"] and r["factor"] == scaling["factor"], r
            if scaling["type"] == "llama3":
                assert (r["low_freq_factor"], r["high_freq_factor"],
                        r["original_max_position_embeddings"]) == (
                    scaling["low_freq_factor"], scaling["high_freq_factor"],
                    scaling["original_context"] or model["seq_len"]), r
        biases = family == "qwen2"
        qk_norm = family == "qwen3"
        if qk_norm:
            assert config["attention_bias"] is False, config["attention_bias"]
        same("model.embed_tokens.weight", "embedding.token.weight", plain)
        for i in range(layers):
            p, q = f"model.layers.{i}.", f"blocks.{i}."
            same(p + "input_layernorm.weight", q + "ln1.weight", plain)
            same(p + "post_attention_layernorm.weight", q + "ln2.weight", plain)
            for kind, count in [("q", heads), ("k", kv), ("v", kv)]:
                same(p + f"self_attn.{kind}_proj.weight", q + "attn.qkv.weight",
                     lambda k, shape, kind=kind: our_row(kind, (k // d) // hd, (k // d) % hd) * d + k % d,
                     rows=count * hd)
                if biases:
                    same(p + f"self_attn.{kind}_proj.bias", q + "attn.qkv.bias",
                         lambda k, shape, kind=kind: our_row(kind, k // hd, k % hd),
                         rows=count * hd)
            same(p + "self_attn.o_proj.weight", q + "attn.proj.weight", plain)
            if qk_norm:
                for a in ["q_norm", "k_norm"]:
                    assert hf[p + f"self_attn.{a}.weight"][0] == [hd], hf[p + f"self_attn.{a}.weight"][0]
                    same(p + f"self_attn.{a}.weight", q + f"attn.{a}.weight", plain)
            # A dense block of a mixture of experts (docs/moe.md, "Dense blocks"): from
            # first_dense_layers on, every layer_freq-th block not in dense_layers is a MoE block.
            first = (moe or {}).get("first_dense_layers", 0)
            moe_block = (moe is not None and i >= first
                         and (i - first + 1) % moe.get("layer_freq", 1) == 0
                         and i not in moe.get("dense_layers", []))
            if not moe_block:
                for a in ["gate", "up", "down"]:
                    same(p + f"mlp.{a}_proj.weight", q + f"mlp.{a}.weight", plain)
                continue
            m = p + ("block_sparse_moe." if mixtral else "mlp.")
            assert hf[m + "gate.weight"][0] == [moe["experts"], d]
            same(m + "gate.weight", q + "moe.router.weight", plain)
            for e in range(moe["experts"]):
                for w, proj, shape in [("w1", "gate", [expert_width, d]),
                                       ("w3", "up", [expert_width, d]),
                                       ("w2", "down", [d, expert_width])]:
                    name = f"{m}experts.{e}." + (f"{w}.weight" if mixtral else f"{proj}_proj.weight")
                    assert hf[name][0] == shape, (name, hf[name][0])
                    same(name, q + f"moe.experts.{e}.{w}.weight", plain)
            if shared_width:
                for a in ["gate", "up", "down"]:
                    same(m + f"shared_expert.{a}_proj.weight",
                         q + f"moe.shared_expert.{a}.weight", plain)
                assert hf[m + "shared_expert_gate.weight"][0] == [1, d]
                same(m + "shared_expert_gate.weight", q + "moe.shared_expert_gate.weight", plain)
        same("model.norm.weight", "final_norm.weight", plain)
        if tied:
            assert "lm_head.weight" not in hf and "head.weight" not in ours
        else:
            same("lm_head.weight", "head.weight", plain)
        # Each fused qkv (and Qwen2's fused qkv bias) became three tensors.
        total = len(ours) + 2 * layers * (2 if biases else 1)
    elif family == "bloom":
        assert config["model_type"] == "bloom" and config["architectures"] == ["BloomForCausalLM"]
        for key, ours_key in [("n_layer", "n_layer"), ("hidden_size", "d_model"),
                              ("n_head", "n_head"), ("vocab_size", "vocab_size")]:
            assert config[key] == model[ours_key], key
        same("transformer.word_embeddings.weight", "embedding.token.weight", plain)
        for a in ["weight", "bias"]:
            same(f"transformer.word_embeddings_layernorm.{a}", f"embedding.norm.{a}", plain)
            same(f"transformer.ln_f.{a}", f"final_norm.{a}", plain)
        for i in range(layers):
            p, q = f"transformer.h.{i}.", f"blocks.{i}."
            for a, b in [("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2"),
                         ("self_attention.query_key_value", "attn.qkv"),
                         ("self_attention.dense", "attn.proj"), ("mlp.dense_h_to_4h", "mlp.fc"),
                         ("mlp.dense_4h_to_h", "mlp.fc2")]:
                same(p + a + ".weight", q + b + ".weight", plain)
                same(p + a + ".bias", q + b + ".bias", plain)
        total = len(ours)
    else:
        raise AssertionError(f"unknown family {family}")
    assert checked == len(hf) == total, (checked, len(hf), total)
    print(f"ok: {checked} {dtype} tensors match under Hugging Face {family} names and layout")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a Hugging Face model folder by hand, as transformers' save_pretrained lays one out,
without kintsugi's exporter or any Python package: config.json, the weights in SHARDS files
model-0000K-of-0000N.safetensors with model.safetensors.index.json (SHARDS 1: model.safetensors),
in DTYPE (f32, bf16, or mixed: tensors alternate), and the same weights as one float32 file
FILE for --init-from FILE. Every value lies on bfloat16's grid, so the bf16 shards and the
float32 file hold the same numbers.

Usage: make_hf_folder.py FOLDER FILE FAMILY SHARDS DTYPE [gqa] [tied] [noprefix] [config=PATH]
  FAMILY gpt2 (tied head, learned positions), llama (untied head unless `tied`: no lm_head;
  `gqa`: 2 key/value heads for 4 query heads) or qwen3 (as llama, with Qwen3's q_norm and k_norm
  weights of head_dim 16 each per layer, a head size apart from hidden_size / heads, and
  Qwen3Config's config.json); `noprefix`: GPT2Model's names (h.0..., no "transformer.").
  `config=PATH` (FAMILY llama): a config.json of Llama's block as a family ships it
  (tests/fixtures/hf/*/config.json: Llama 3.1, Mistral, Qwen2.5, Qwen3, and the mixtures of
  experts Mixtral, Qwen2-MoE and Qwen3-MoE), copied as it is, the weights in its shapes
  (head_dim, key/value heads, Qwen2's q/k/v biases, Qwen3's q_norm and k_norm, no lm_head when
  tie_word_embeddings, the router and every expert's matrices, Qwen2-MoE's shared expert, the
  dense MLP of the Qwen-MoE layers that decoder_sparse_step and mlp_only_layers leave dense)."""
import array
import json
import random
import struct
import sys

folder, single, family, shards, dtype = sys.argv[1:6]
shards = int(shards)
flags = set(a for a in sys.argv[6:] if not a.startswith("config="))
fixture_text = next((open(a[7:]).read() for a in sys.argv[6:] if a.startswith("config=")), None)
fixture = None if fixture_text is None else json.loads(fixture_text)
rng = random.Random(20261126)
# The vocabulary of the tests' tokenizer (GPT-2's BPE cut at 512 ids, scripts/fetch_data.sh),
# which the scripts put in the folder: GPT-2's 50257 rows made most of the files' bytes and
# the runs' time.
V, D, L, H, P = 512, 32, 2, 4, 64
KV = 2 if "gqa" in flags else H
HD = 16 if family == "qwen3" else D // H
FF = 64
qkv_bias = False
qk_norm = family == "qwen3"
if fixture is not None:
    assert family == "llama", "config= gives a family of Llama's block"
    V, D, L, P = (fixture[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                       "max_position_embeddings"))
    H, FF = fixture["num_attention_heads"], fixture["intermediate_size"]
    KV = fixture.get("num_key_value_heads", H)
    HD = fixture.get("head_dim") or D // H
    # Qwen2Attention's (and Qwen2MoeAttention's) q/k/v_proj have bias=True
    qkv_bias = fixture["model_type"] in ("qwen2", "qwen2_moe")
    # Qwen3Attention's (and Qwen3MoeAttention's) q_norm and k_norm
    qk_norm = fixture["model_type"] in ("qwen3", "qwen3_moe")
    if fixture.get("tie_word_embeddings"):
        flags.add("tied")
GRID = [k / 256 for k in range(-127, 128)]


def matrix(*shape, centre=0.0):
    """Values k / 256 (|k| < 128), or 1 + k / 128 (|k| < 16) around `centre`: on bfloat16's
    grid (8 significant bits)."""
    n = 1
    for s in shape:
        n *= s
    if centre:
        return shape, [centre + k / 128 for k in rng.choices(range(-15, 16), k=n)]
    return shape, rng.choices(GRID, k=n)


tensors = {}  # name -> (shape, values), in the order a model's state dict has them


def swiglu(prefix, width, names=("gate_proj", "up_proj", "down_proj")):
    """A SwiGLU MLP's gate and up [width, D] and down [D, width] weights under `names`."""
    gate, up, down = names
    tensors[f"{prefix}{gate}.weight"] = matrix(width, D)
    tensors[f"{prefix}{up}.weight"] = matrix(width, D)
    tensors[f"{prefix}{down}.weight"] = matrix(D, width)
if family == "gpt2":
    pre = "" if "noprefix" in flags else "transformer."
    tensors[pre + "wte.weight"] = matrix(V, D)
    tensors[pre + "wpe.weight"] = matrix(P, D)
    for i in range(L):
        b = f"{pre}h.{i}."
        tensors[b + "ln_1.weight"] = matrix(D, centre=1.0)
        tensors[b + "ln_1.bias"] = matrix(D)
        tensors[b + "attn.c_attn.weight"] = matrix(D, 3 * D)
        tensors[b + "attn.c_attn.bias"] = matrix(3 * D)
        tensors[b + "attn.c_proj.weight"] = matrix(D, D)
        tensors[b + "attn.c_proj.bias"] = matrix(D)
        tensors[b + "ln_2.weight"] = matrix(D, centre=1.0)
        tensors[b + "ln_2.bias"] = matrix(D)
        tensors[b + "mlp.c_fc.weight"] = matrix(D, 4 * D)
        tensors[b + "mlp.c_fc.bias"] = matrix(4 * D)
        tensors[b + "mlp.c_proj.weight"] = matrix(4 * D, D)
        tensors[b + "mlp.c_proj.bias"] = matrix(D)
    tensors[pre + "ln_f.weight"] = matrix(D, centre=1.0)
    tensors[pre + "ln_f.bias"] = matrix(D)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
              "n_positions": P, "n_ctx": P, "n_embd": D, "n_layer": L, "n_head": H,
              "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
              "initializer_range": 0.02, "resid_pdrop": 0.1, "embd_pdrop": 0.1,
              "attn_pdrop": 0.1, "summary_type": "cls_index", "summary_use_proj": True,
              "bos_token_id": 50256, "eos_token_id": 50256, "use_cache": True,
              "task_specific_params": {"text-generation": {"do_sample": True}},
              "torch_dtype": "float32", "transformers_version": "4.46.0"}
else:
    tensors["model.embed_tokens.weight"] = matrix(V, D)
    for i in range(L):
        b = f"model.layers.{i}."
        tensors[b + "input_layernorm.weight"] = matrix(D, centre=1.0)
        for part, heads in (("q", H), ("k", KV), ("v", KV)):
            tensors[b + f"self_attn.{part}_proj.weight"] = matrix(heads * HD, D)
            if qkv_bias:
                tensors[b + f"self_attn.{part}_proj.bias"] = matrix(heads * HD)
        tensors[b + "self_attn.o_proj.weight"] = matrix(D, H * HD)
        if qk_norm:
            tensors[b + "self_attn.q_norm.weight"] = matrix(HD, centre=1.0)
            tensors[b + "self_attn.k_norm.weight"] = matrix(HD, centre=1.0)
        tensors[b + "post_attention_layernorm.weight"] = matrix(D, centre=1.0)
        moe_type = (fixture or {}).get("model_type")
        if moe_type == "mixtral":
            # MixtralSparseMoeBlock: gate (the router), experts.N.w1 / w3 [FF, D], w2 [D, FF]
            E = fixture["num_local_experts"]
            tensors[b + "block_sparse_moe.gate.weight"] = matrix(E, D)
            for e in range(E):
                swiglu(f"{b}block_sparse_moe.experts.{e}.", FF, ("w1", "w3", "w2"))
        elif moe_type in ("qwen2_moe", "qwen3_moe") and (
                i in fixture.get("mlp_only_layers", [])
                or (i + 1) % fixture.get("decoder_sparse_step", 1) != 0):
            # Qwen2MoeDecoderLayer's dense MLP (Qwen2MoeMLP of intermediate_size): a layer in
            # mlp_only_layers or off the decoder_sparse_step
            swiglu(b + "mlp.", FF)
        elif moe_type in ("qwen2_moe", "qwen3_moe"):
            # Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock: gate, experts.N.*_proj of
            # moe_intermediate_size; Qwen2-MoE's shared_expert and its one-output gate
            E = fixture["num_experts"]
            tensors[b + "mlp.gate.weight"] = matrix(E, D)
            for e in range(E):
                swiglu(f"{b}mlp.experts.{e}.", fixture["moe_intermediate_size"])
            if moe_type == "qwen2_moe":
                swiglu(b + "mlp.shared_expert.", fixture["shared_expert_intermediate_size"])
                tensors[b + "mlp.shared_expert_gate.weight"] = matrix(1, D)
        else:
            swiglu(b + "mlp.", FF)
    tensors["model.norm.weight"] = matrix(D, centre=1.0)
    tied = "tied" in flags
    if not tied:
        tensors["lm_head.weight"] = matrix(V, D)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
              "hidden_size": D, "intermediate_size": FF, "num_hidden_layers": L,
              "num_attention_heads": H, "num_key_value_heads": KV, "max_position_embeddings": P,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
              "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
              "pretraining_tp": 1, "rope_scaling": None, "tie_word_embeddings": tied,
              "bos_token_id": 50256, "eos_token_id": 50256, "initializer_range": 0.02,
              "use_cache": True, "torch_dtype": "bfloat16", "transformers_version": "4.46.0"}
    if family == "qwen3":
        # Qwen3Config's fields, as save_pretrained writes them (sorted keys; Qwen3-0.6B's).
        config = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
                  "attention_dropout": 0.0, "bos_token_id": 50256, "eos_token_id": 50256,
                  "head_dim": HD, "hidden_act": "silu", "hidden_size": D,
                  "initializer_range": 0.02, "intermediate_size": FF,
                  "max_position_embeddings": P, "max_window_layers": L, "model_type": "qwen3",
                  "num_attention_heads": H, "num_hidden_layers": L, "num_key_value_heads": KV,
                  "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
                  "sliding_window": None, "tie_word_embeddings": tied,
                  "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
                  "use_cache": True, "use_sliding_window": False, "vocab_size": V}


def encode(values, dt):
    raw = array.array("f", values)
    if sys.byteorder != "little":
        raw.byteswap()
    raw = raw.tobytes()
    if dt == "F32":
        return raw
    # The upper halves of the float32 words: exact, since every value is on bfloat16's grid.
    half = bytearray(len(raw) // 2)
    half[0::2] = raw[2::4]
    half[1::2] = raw[3::4]
    return bytes(half)


def write(path, names, dtype_of):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in names:
        shape, values = tensors[name]
        blob = encode(values, dtype_of(name))
        header[name] = {"dtype": dtype_of(name), "shape": list(shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return offset


names = list(tensors)
order = {n: k for k, n in enumerate(names)}


def folder_dtype(name):
    if dtype == "mixed":
        return "BF16" if order[name] % 2 else "F32"
    return "BF16" if dtype == "bf16" else "F32"


with open(f"{folder}/config.json", "w") as f:
    if fixture_text is not None:
        f.write(fixture_text)  # byte for byte
    else:
        json.dump(config, f, indent=2)
if shards == 1:
    write(f"{folder}/model.safetensors", names, folder_dtype)
else:
    # Contiguous runs of tensors, the embedding alone in the first shard (as a size limit would).
    rest = names[1:]
    per = -(-len(rest) // (shards - 1))
    groups = [names[:1]] + [rest[k:k + per] for k in range(0, len(rest), per)]
    assert len(groups) == shards, (len(groups), shards)
    weight_map, total = {}, 0
    for k, group in enumerate(groups):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        total += write(f"{folder}/{file}", group, folder_dtype)
        weight_map.update({n: file for n in group})
    with open(f"{folder}/model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
# The single float32 file: the same weights; a tied Llama's head written out as its copy.
if family != "gpt2" and "tied" in flags:
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    names.append("lm_head.weight")
write(single, names, lambda name: "F32")

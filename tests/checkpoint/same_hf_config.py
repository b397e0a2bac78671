#!/usr/bin/env python3
"""Checks that an exported Hugging Face config.json keeps what fixes the model in the folder it
came from: each field below that both files hold is equal, and a field the original sets (to
anything but null or false) is not missing from the export. Metadata, the tokenizer's ids,
Qwen2's unused window fields and the router's training coefficient are left aside.

Usage: same_hf_config.py WANT GOT [POSITIONS]
  POSITIONS: the export must say max_position_embeddings = POSITIONS instead of WANT's (a run
  continued at a longer sequence length exports the length it trained at)."""
import json
import sys

KEYS = ["architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
        "rope_theta", "rope_scaling", "hidden_act", "tie_word_embeddings",
        "max_position_embeddings", "head_dim", "sliding_window", "use_sliding_window",
        "attention_bias", "mlp_bias",
        # the experts' (Mixtral, Qwen2-MoE, Qwen3-MoE)
        "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
        "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
        "mlp_only_layers", "router_jitter_noise"]


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    want, got = (json.load(open(p)) for p in sys.argv[1:3])
    if len(sys.argv) == 4:
        want["max_position_embeddings"] = int(sys.argv[3])
    bad = [k for k in KEYS if k in want and k in got and want[k] != got[k]]
    bad += [k for k in KEYS if k in want and k not in got and want[k] not in (None, False)
            and not (want["model_type"] in ("qwen2", "qwen2_moe") and k == "sliding_window")]
    if bad:
        sys.exit("FAIL: the export's config.json differs in " +
                 ", ".join(f"{k} ({want.get(k)!r} vs {got.get(k)!r})" for k in bad))
    kept = [k for k in KEYS if k in want]
    print(f"config.json: the {want['model_type']} folder's fields ({', '.join(kept)})")


if __name__ == "__main__":
    main()

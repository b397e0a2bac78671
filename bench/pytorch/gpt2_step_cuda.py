#!/usr/bin/env python3
"""PyTorch GPT-2 training-step benchmark on one NVIDIA GPU: the peer of
`kintsugi bench step --device cuda --precision bf16`.

What it measures
    Wall time of complete training steps of GPT-2 (124M, 1.5B, ...) on a fixed batch of random
    token ids: forward under bf16 autocast, mean cross-entropy, backward, clip_grad_norm_(1.0),
    fused AdamW step, zero_grad. Steps are timed between torch.cuda.synchronize() calls. It
    prints ms/step (median of the timed steps), tokens/s = B*T / median, model TFLOP/s and MFU
    with kintsugi's formula: model FLOPs per token 6N + 12*L*T*d (N: parameters of the matrix
    multiplies, the LM head with the true vocabulary) over the GPU's dense bf16 peak
    (--peak-tflops; 989 for an H100 SXM).

The model is the network kintsugi trains: learned token and position embeddings, L pre-LayerNorm
blocks (fused qkv Linear with bias, output projection, MLP 4d with tanh GELU), final LayerNorm,
LM head tied to the token embedding, vocabulary padded to a multiple of 128 (50257 -> 50304),
no dropout. Attention is F.scaled_dot_product_attention(is_causal=True) (flash attention on
Hopper). Weights are fp32 (autocast runs the GEMMs in bf16 with fp32 accumulation); AdamW is
torch.optim.AdamW(fused=True). --compile wraps the model in torch.compile.

    python3 bench/pytorch/gpt2_step_cuda.py --model gpt2 --batch 32 --seq 1024 --compile --json
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# name -> (n_layer, d_model, n_head); the presets of kintsugi.
PRESETS = {
    "gpt2": (12, 768, 12),
    "gpt2-medium": (24, 1024, 16),
    "gpt2-large": (36, 1280, 20),
    "gpt2-xl": (48, 1600, 25),
}


def model_flops_per_token(n_layer: int, d: int, seq: int, vocab: int) -> int:
    """kintsugi's model-FLOP formula (plan/flops.hpp): 6N + 12 L T d per token."""
    return 6 * (12 * n_layer * d * d + vocab * d) + 12 * n_layer * seq * d


class Block(nn.Module):
    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.c_attn = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).view(B, T, 3, self.n_head, d // self.n_head).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, n_layer: int, d: int, n_head: int, vocab_padded: int, n_ctx: int):
        super().__init__()
        self.wte = nn.Embedding(vocab_padded, d)
        self.wpe = nn.Embedding(n_ctx, d)
        self.h = nn.ModuleList([Block(d, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--batch", "-B", type=int, default=32)
    ap.add_argument("--seq", "-T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps (compilation included)")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="dense bf16 peak of the GPU, for MFU (H100 SXM: 989)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpt2_step_cuda.py: no CUDA device visible", file=sys.stderr)
        return 2

    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    n_layer, d, n_head = PRESETS[args.model]
    vocab_padded = (args.vocab + 127) // 128 * 128
    model = GPT2(n_layer, d, n_head, vocab_padded, max(1024, args.seq)).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if args.compile else model
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device="cuda")
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    params = list(model.parameters())

    def step() -> float:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)

    med = statistics.median(times)
    tokens = args.batch * args.seq
    flops = model_flops_per_token(n_layer, d, args.seq, args.vocab) * tokens / med
    result = {
        "impl": "pytorch-compiled" if args.compile else "pytorch-eager",
        "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "model": args.model, "batch": args.batch, "seq": args.seq, "steps": args.steps,
        "params": sum(p.numel() for p in params),
        "ms_per_step": med * 1e3, "step_ms": [t * 1e3 for t in times],
        "tokens_per_s": tokens / med, "tflops": flops / 1e12,
        "mfu": flops / (args.peak_tflops * 1e12), "peak_tflops": args.peak_tflops,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(), "loss_last": loss.item(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['impl']} {args.model} B={args.batch} T={args.seq} on {result['device']}: "
              f"{result['ms_per_step']:.1f} ms/step, {result['tokens_per_s']:.0f} tokens/s, "
              f"{result['tflops']:.1f} TFLOP/s, MFU {100 * result['mfu']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

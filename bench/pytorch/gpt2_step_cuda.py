#!/usr/bin/env python3
"""PyTorch training-step benchmark of kintsugi's GPT-2, Llama and BLOOM presets on one NVIDIA
GPU: the peer of `kintsugi bench step --device cuda --precision bf16`.

What it measures
    Wall time of complete training steps (GPT-2 124M, 1.5B, Llama, BLOOM) on a fixed batch of random
    token ids: forward under bf16 autocast, mean cross-entropy, backward, clip_grad_norm_(1.0),
    fused AdamW step, zero_grad. Steps are timed between torch.cuda.synchronize() calls. It
    prints ms/step (median of the timed steps), tokens/s = B*T / median, model TFLOP/s and MFU
    with kintsugi's formula: model FLOPs per token 6N + 12*L*T*d (N: parameters of the matrix
    multiplies, the LM head with the true vocabulary) over the GPU's dense bf16 peak
    (--peak-tflops; 989 for an H100 SXM).

The model is the network kintsugi trains: for GPT-2 learned token and position embeddings, L
pre-LayerNorm blocks (fused qkv Linear with bias, output projection, MLP 4d with tanh GELU), final
LayerNorm, LM head tied to the token embedding, vocabulary padded to a multiple of 128
(50257 -> 50304), no dropout; Llama: RMSNorm, no biases, RoPE, grouped-query attention, SwiGLU,
an untied head; BLOOM: GPT-2's block with ALiBi instead of positions and a LayerNorm after the
embedding. Attention is F.scaled_dot_product_attention: is_causal=True (flash attention on
Hopper; enable_gqa for grouped heads), and for BLOOM an additive ALiBi mask (which rules out the
flash kernel: PyTorch then runs its memory-efficient kernel). Weights are fp32 (autocast runs the GEMMs in bf16 with fp32 accumulation); AdamW is
torch.optim.AdamW(fused=True). --compile wraps the model in torch.compile.

Energy: where pynvml (nvidia-ml-py) imports, NVML's total-energy counter of the GPU is read
around each timed step (after its synchronize), as `kintsugi bench step` reads it; the JSON gains
joules_per_step (their sum over their count), joules_per_token and power_w, and energy_source
says what was read or why nothing was (docs/energy.md).

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

# name -> (family, n_layer, d_model, n_head, n_kv_head, d_ff, vocab); kintsugi's presets
# (src/kintsugi/model/config.cpp).
PRESETS = {
    "gpt2": ("gpt", 12, 768, 12, 12, 3072, 50257),
    "gpt2-medium": ("gpt", 24, 1024, 16, 16, 4096, 50257),
    "gpt2-large": ("gpt", 36, 1280, 20, 20, 5120, 50257),
    "gpt2-xl": ("gpt", 48, 1600, 25, 25, 6400, 50257),
    "llama-125m": ("llama", 12, 768, 12, 4, 2048, 32000),
    "llama-1.1b": ("llama", 22, 2048, 32, 4, 5632, 32000),
    "bloom-560m": ("bloom", 24, 1024, 16, 16, 4096, 250880),
    "bloom-1b7": ("bloom", 24, 2048, 16, 16, 8192, 250880),
}


def model_flops_per_token(family: str, n_layer: int, d: int, n_head: int, n_kv: int, d_ff: int,
                          seq: int, vocab: int) -> int:
    """kintsugi's model-FLOP formula (plan/flops.hpp): 6N + 12 L T d per token, N the
    parameters of the matrix multiplies (SwiGLU's three matrices, grouped keys and values)."""
    hd = d // n_head
    mlp = (3 if family == "llama" else 2) * d * d_ff
    per_layer = 2 * d * d + 2 * d * n_kv * hd + mlp
    return 6 * (n_layer * per_layer + vocab * d) + 12 * n_layer * seq * d


def alibi_slopes(n_head: int) -> torch.Tensor:
    """BLOOM's ALiBi slopes (Press et al.): a geometric series, interleaved past a power of 2."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n_head).is_integer():
        return torch.tensor(power_of_2(n_head))
    closest = 2 ** math.floor(math.log2(n_head))
    return torch.tensor(power_of_2(closest) + power_of_2(2 * closest)[0::2][:n_head - closest])


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embeddings, Hugging Face's rotate_half convention (kintsugi's too)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Block(nn.Module):
    """One pre-norm block of the family: GPT-2 and BLOOM (LayerNorm, biases, tanh GELU; BLOOM
    with ALiBi instead of learned positions), Llama (RMSNorm, no biases, RoPE, grouped-query
    attention, SwiGLU)."""

    def __init__(self, family: str, d: int, n_head: int, n_kv: int, d_ff: int):
        super().__init__()
        self.family, self.n_head, self.n_kv, self.hd = family, n_head, n_kv, d // n_head
        llama = family == "llama"
        norm = (lambda: nn.RMSNorm(d, eps=1e-5)) if llama else (lambda: nn.LayerNorm(d, eps=1e-5))
        self.ln_1, self.ln_2 = norm(), norm()
        self.c_attn = nn.Linear(d, (n_head + 2 * n_kv) * self.hd, bias=not llama)
        self.attn_proj = nn.Linear(d, d, bias=not llama)
        self.c_fc = nn.Linear(d, (2 if llama else 1) * d_ff, bias=not llama)
        self.mlp_proj = nn.Linear(d_ff, d, bias=not llama)

    def forward(self, x: torch.Tensor, extra) -> torch.Tensor:
        B, T, d = x.shape
        qkv = self.c_attn(self.ln_1(x))
        q, k, v = qkv.split([self.n_head * self.hd, self.n_kv * self.hd, self.n_kv * self.hd], -1)
        q = q.view(B, T, self.n_head, self.hd).transpose(1, 2)
        k = k.view(B, T, self.n_kv, self.hd).transpose(1, 2)
        v = v.view(B, T, self.n_kv, self.hd).transpose(1, 2)
        if self.family == "llama":
            cos, sin = extra
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=self.n_kv != self.n_head)
        elif self.family == "bloom":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=extra.to(q.dtype))
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, d))
        h = self.c_fc(self.ln_2(x))
        if self.family == "llama":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.mlp_proj(h)


class Model(nn.Module):
    """kintsugi's network of the family: token embeddings (+ learned positions for GPT-2, a
    LayerNorm for BLOOM), L blocks, final norm, LM head (tied to the embedding except Llama's),
    vocabulary padded to a multiple of 128, no dropout."""

    def __init__(self, family, n_layer, d, n_head, n_kv, d_ff, vocab_padded, n_ctx):
        super().__init__()
        self.family, self.n_head, self.hd = family, n_head, d // n_head
        self.wte = nn.Embedding(vocab_padded, d)
        if family == "gpt":
            self.wpe = nn.Embedding(n_ctx, d)
        if family == "bloom":
            self.ln_emb = nn.LayerNorm(d, eps=1e-5)
        self.h = nn.ModuleList([Block(family, d, n_head, n_kv, d_ff) for _ in range(n_layer)])
        self.ln_f = nn.RMSNorm(d, eps=1e-5) if family == "llama" else nn.LayerNorm(d, eps=1e-5)
        if family == "llama":
            self.head = nn.Linear(d, vocab_padded, bias=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def extra(self, T: int, device):
        """What attention needs besides q, k, v: RoPE's cos/sin, or ALiBi's causal bias."""
        pos = torch.arange(T, device=device, dtype=torch.float32)
        if self.family == "llama":
            inv = 10000.0 ** (-torch.arange(0, self.hd, 2, device=device) / self.hd)
            angles = torch.outer(pos, inv)
            angles = torch.cat((angles, angles), dim=-1)
            return angles.cos(), angles.sin()
        if self.family == "bloom":
            slopes = alibi_slopes(self.n_head).to(device)
            bias = slopes[:, None, None] * (pos[None, None, :] - pos[None, :, None])
            causal = torch.ones(T, T, device=device, dtype=torch.bool).tril()
            return bias.masked_fill(~causal, float("-inf"))[None]
        return None

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        if self.family == "gpt":
            x = x + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        if self.family == "bloom":
            x = self.ln_emb(x)
        extra = self.extra(idx.shape[1], idx.device)
        for block in self.h:
            x = block(x, extra)
        head = self.head.weight if self.family == "llama" else self.wte.weight
        logits = F.linear(self.ln_f(x), head)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


class EnergyCounter:
    """NVML's total-energy counter (millijoules) of this process's GPU, or why there is none."""

    def __init__(self):
        self.handle, self.why_not = None, ""
        try:
            import pynvml
        except ImportError:
            self.why_not = "pynvml (nvidia-ml-py) is not installed for the PyTorch peer"
            return
        try:
            pynvml.nvmlInit()
            # The NVML index of the CUDA device, whatever CUDA_VISIBLE_DEVICES renumbered.
            try:
                index = torch.cuda._get_nvml_device_index(torch.cuda.current_device())
            except Exception:
                index = torch.cuda.current_device()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.pynvml = pynvml
            self.read()
            self.source = f"NVML {pynvml.nvmlDeviceGetName(self.handle)} (pynvml)"
        except Exception as e:  # no counter (pre-Volta), no permission, no driver library
            self.handle, self.why_not = None, f"NVML through pynvml failed ({e})"

    def read(self) -> float:
        return self.pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) * 1e-3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--batch", "-B", type=int, default=32)
    ap.add_argument("--seq", "-T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps (compilation included)")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary (0: the preset's)")
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
    family, n_layer, d, n_head, n_kv, d_ff, vocab = PRESETS[args.model]
    vocab = args.vocab or vocab
    vocab_padded = (vocab + 127) // 128 * 128
    model = Model(family, n_layer, d, n_head, n_kv, d_ff, vocab_padded,
                  max(1024, args.seq)).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if args.compile else model
    data = torch.randint(0, vocab, (args.batch, args.seq + 1), device="cuda")
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
    times, joules = [], 0.0
    energy = EnergyCounter()
    for _ in range(args.steps):
        before = energy.read() if energy.handle else 0.0
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if energy.handle:
            joules += energy.read() - before

    med = statistics.median(times)
    tokens = args.batch * args.seq
    flops = model_flops_per_token(family, n_layer, d, n_head, n_kv, d_ff, args.seq,
                                  vocab) * tokens / med
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
    result["energy_source"] = energy.source if energy.handle else energy.why_not
    if energy.handle:
        result["joules_per_step"] = joules / args.steps
        result["joules_per_token"] = joules / args.steps / tokens
        result["power_w"] = joules / sum(times)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['impl']} {args.model} B={args.batch} T={args.seq} on {result['device']}: "
              f"{result['ms_per_step']:.1f} ms/step, {result['tokens_per_s']:.0f} tokens/s, "
              f"{result['tflops']:.1f} TFLOP/s, MFU {100 * result['mfu']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

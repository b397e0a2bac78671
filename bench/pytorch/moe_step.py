#!/usr/bin/python3
"""Plain-PyTorch training steps of a tiny Llama-style model whose MLP is dense or a mixture of
experts: the CPU peer of bench/moe_cpu.sh (docs/benchmarks.md, "Mixture of experts").

The network is configs/moe-tiny.toml's (docs/moe.md), written here with torch alone:
    * token embedding (vocabulary V), L pre-RMSNorm blocks (eps 1e-5), final RMSNorm, untied head;
    * attention: one fused qkv Linear (no bias) for H query heads and KV key/value heads
      (grouped-query: each kv head serves H / KV query heads), RoPE (rotate_half, base 10000),
      causal softmax attention as two batched GEMMs (PyTorch 1.13 has no
      scaled_dot_product_attention), an output projection;
    * MLP, dense: SwiGLU of width F, down(silu(gate(x)) * up(x));
    * MLP, --experts E --top-k K --expert-hidden F: a router Linear (d -> E, no bias), softmax,
      each token's top K experts, their probabilities renormalised to sum to 1 (Mixtral), every
      expert a SwiGLU of width F applied to the tokens routed to it (gathered by index, the
      gate-weighted outputs added back with index_add_: dropless), and the Switch/GShard
      load-balancing loss E sum_e f_e P_e weighted 0.01 per layer.
    Cross-entropy, backward, clip_grad_norm_(1.0), AdamW(lr 1e-4, weight decay 0.1 on
    matrices), zero_grad(set_to_none=True); one fixed random batch reused every step.

Prints one JSON object: ms/step (median of the timed steps), tokens/s, parameters, and the
process's peak resident memory (ru_maxrss: weights, optimizer state, activations, and whatever
the allocator keeps).

    /usr/bin/python3 bench/pytorch/moe_step.py --batch 8 --seq 128 --ffn 176
    /usr/bin/python3 bench/pytorch/moe_step.py --batch 8 --seq 128 --experts 8 --top-k 2 --ffn 88
"""

import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, d, width):
        super().__init__()
        self.gate = nn.Linear(d, width, bias=False)
        self.up = nn.Linear(d, width, bias=False)
        self.down = nn.Linear(width, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    def __init__(self, d, experts, top_k, width):
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d, width) for _ in range(experts))
        self.top_k = top_k
        self.aux = torch.zeros(())

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(x), dim=-1)
        gates, chosen = torch.topk(probs, self.top_k, dim=-1)
        gates = gates / gates.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        count = len(self.experts)
        routed = torch.zeros(count)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(chosen == e, as_tuple=True)
            routed[e] = rows.numel()
            if rows.numel():
                y = expert(x.index_select(0, rows)) * gates[rows, slot].unsqueeze(-1)
                out = out.index_add(0, rows, y)
        fraction = routed / (x.shape[0] * self.top_k)
        self.aux = count * (fraction * probs.mean(0)).sum()
        return out.reshape(shape)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.kv, self.hd = a.heads, a.kv_heads, a.d_model // a.heads
        self.ln1 = RMSNorm(a.d_model, 1e-5)
        self.qkv = nn.Linear(a.d_model, (a.heads + 2 * a.kv_heads) * self.hd, bias=False)
        self.proj = nn.Linear(a.d_model, a.d_model, bias=False)
        self.ln2 = RMSNorm(a.d_model, 1e-5)
        self.mlp = MoE(a.d_model, a.experts, a.top_k, a.ffn) if a.experts else SwiGLU(a.d_model, a.ffn)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(
            [self.heads * self.hd, self.kv * self.hd, self.kv * self.hd], dim=-1)
        q = rope(q.view(b, t, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = rope(k.view(b, t, self.kv, self.hd).transpose(1, 2), cos, sin)
        v = v.view(b, t, self.kv, self.hd).transpose(1, 2)
        group = self.heads // self.kv
        k = k.repeat_interleave(group, dim=1).reshape(b * self.heads, t, self.hd)
        v = v.repeat_interleave(group, dim=1).reshape(b * self.heads, t, self.hd)
        q = q.reshape(b * self.heads, t, self.hd)
        scores = torch.baddbmm(mask, q, k.transpose(1, 2), alpha=1 / math.sqrt(self.hd))
        y = torch.bmm(F.softmax(scores, dim=-1), v).view(b, self.heads, t, self.hd)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.d_model)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.d_model, 1e-5)
        self.head = nn.Linear(a.d_model, a.vocab, bias=False)
        hd = a.d_model // a.heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        angles = torch.outer(torch.arange(a.seq).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        self.register_buffer("mask", torch.triu(torch.full((a.seq, a.seq), float("-inf")), 1))

    def forward(self, ids, targets, aux_weight):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, self.cos, self.sin, self.mask)
        logits = self.head(self.norm(x))
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        aux = sum(b.mlp.aux for b in self.blocks if isinstance(b.mlp, MoE))
        return loss + aux_weight * aux if aux_weight else loss


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--ffn", type=int, default=352, help="the dense MLP's or each expert's width")
    p.add_argument("--experts", type=int, default=0, help="0: a dense MLP")
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = Model(a)
    matrices = [w for w in model.parameters() if w.dim() == 2]
    others = [w for w in model.parameters() if w.dim() != 2]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1},
                             {"params": others, "weight_decay": 0.0}], lr=1e-4, foreach=True)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    inputs, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    times = []
    for step in range(a.warmup + a.steps):
        start = time.perf_counter()
        loss = model(inputs, targets, 0.01 if a.experts else 0.0)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    ms = 1000 * statistics.median(times)
    print(json.dumps({"ms_per_step": ms, "tokens_per_s": a.batch * a.seq / (ms / 1000),
                      "parameters": sum(w.numel() for w in model.parameters()),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "threads": torch.get_num_threads(), "loss": float(loss)}))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Plain-PyTorch GPT-2 training-step benchmark: the CPU peer of `kintsugi bench step`.

What it measures
    Wall time of complete fp32 training steps of a GPT-2 model on the CPU:
    forward on a fixed batch of random token ids, mean cross-entropy loss, backward,
    clip_grad_norm_(1.0), AdamW step, zero_grad.  It prints ms/step (median and mean over
    the timed steps), tokens/s = B*T / median and GFLOP/s computed with kintsugi's model-FLOP
    formula (see `model_flops_per_token`), so the numbers line up column for column with
    `kintsugi bench step --json`.

The model is meant to be the same network kintsugi trains:
    * learned token and position embeddings (n_ctx = max(1024, T) positions),
    * L pre-LayerNorm blocks (eps 1e-5): x += proj(attn(ln_1(x))); x += fc2(gelu(fc(ln_2(x)))),
    * causal multi-head attention with one fused qkv Linear (d -> 3d, bias) and an output
      projection Linear (d -> d, bias),
    * MLP of width 4d with biases and the tanh approximation of GELU,
    * final LayerNorm, LM head tied to the token embedding (no bias), no dropout, fp32.
    The vocabulary is padded to a multiple of 128 (50257 -> 50304) like kintsugi, so the LM-head
    GEMMs have the same shapes.  By default the padded logits are NOT masked (they take part in
    the softmax like ordinary, never-targeted classes); --mask-padded-vocab fills them with -inf
    before the loss instead.  Either way the GEMM shapes and FLOPs are identical.

Implementation choices (stated so tables can say what was measured)
    * PyTorch 1.13 has no scaled_dot_product_attention.  Attention is written as one batched
      GEMM for Q K^T that also adds the causal mask and applies the 1/sqrt(hd) scale
      (torch.baddbmm with a registered additive 0/-inf mask buffer), a softmax, and one batched
      GEMM for P V.
    * AdamW(lr 1e-4, betas (0.9, 0.999), eps 1e-8), weight decay 0.1 on 2-D weights only
      (the Linear weights and both embedding tables), 0 on biases and LayerNorm parameters,
      foreach=True (multi-tensor kernels).
    * clip_grad_norm_ is torch.nn.utils.clip_grad_norm_ (1.13 has no foreach variant of it).
    * zero_grad(set_to_none=True) by default (--zero-grad none): backward then writes the first
      gradient straight into a fresh buffer instead of memset + accumulate.  --zero-grad zeros
      selects set_to_none=False.  On the 2-core reference machine (GPT-2 124M, B=4 T=64) the two
      were within noise of each other (about 1.53-1.58 s/step either way); set_to_none=True
      does strictly less work, so it is the default.
    * One fixed batch (seeded) is reused for every step; data loading is not measured.

Run it with Debian's interpreter (that is where python3-torch is installed):
    /usr/bin/python3 bench/pytorch/gpt2_step.py --model gpt2 --batch 4 --seq 64 --steps 5
    /usr/bin/python3 bench/pytorch/gpt2_step.py --model gpt2 --batch 4 --seq 256 --steps 3 --json
"""

import argparse
import ctypes
import json
import math
import os
import platform
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# name -> (n_layer, d_model, n_head); same presets as kintsugi.
PRESETS = {
    "gpt2": (12, 768, 12),
    "gpt2-medium": (24, 1024, 16),
    "gpt2-large": (36, 1280, 20),
    "gpt2-xl": (48, 1600, 25),
}

# Environment variables that change what is being measured (threading runtime, allocator);
# they are echoed in the JSON so a table can say under which settings a row was taken.
ENV_KNOBS = [
    "OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_SPINCOUNT",
    "OPENBLAS_NUM_THREADS", "LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX",
    "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
    "TCMALLOC_RELEASE_RATE", "TCMALLOC_AGGRESSIVE_DECOMMIT",
]


def padded_vocab(vocab: int, multiple: int = 128) -> int:
    return (vocab + multiple - 1) // multiple * multiple


def model_flops_per_token(n_layer: int, d: int, seq: int, true_vocab: int) -> int:
    """kintsugi's model-FLOP formula: 6*N + 12*L*T*d per token.

    N counts only parameters that take part in matrix multiplies: per layer qkv 3d^2 +
    proj d^2 + fc 4d^2 + fc2 4d^2 = 12 d^2, plus the LM head V*d with the TRUE vocabulary
    (not the padded one).  12*L*T*d is the attention score / value GEMMs (fwd + bwd)."""
    n_matmul = 12 * n_layer * d * d + true_vocab * d
    return 6 * n_matmul + 12 * n_layer * seq * d


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, n_head: int, n_ctx: int):
        super().__init__()
        assert d % n_head == 0, "d_model must be divisible by n_head"
        self.n_head = n_head
        self.head_dim = d // n_head
        self.c_attn = nn.Linear(d, 3 * d, bias=True)   # fused q, k, v
        self.c_proj = nn.Linear(d, d, bias=True)
        # Additive causal mask: 0 on and below the diagonal, -inf above.  Added inside the
        # Q K^T GEMM by baddbmm (beta=1), so masking costs no separate pass.
        mask = torch.full((n_ctx, n_ctx), float("-inf")).triu_(1)
        self.register_buffer("mask_bias", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        H, hd = self.n_head, self.head_dim
        qkv = self.c_attn(x)                                   # (B, T, 3d)
        # (B, T, 3, H, hd) -> (3, B, H, T, hd): one copy, then q/k/v are contiguous (B*H, T, hd).
        q, k, v = qkv.view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4).reshape(3, B * H, T, hd).unbind(0)
        # scores = mask + (q @ k^T) / sqrt(hd)   -- one batched GEMM, mask broadcast over B*H
        att = torch.baddbmm(self.mask_bias[:T, :T], q, k.transpose(1, 2), alpha=1.0 / math.sqrt(hd))
        att = torch.softmax(att, dim=-1)
        y = torch.bmm(att, v)                                  # (B*H, T, hd)
        y = y.view(B, H, T, hd).transpose(1, 2).reshape(B, T, d)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d, bias=True)
        self.c_proj = nn.Linear(4 * d, d, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d: int, n_head: int, n_ctx: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = CausalSelfAttention(d, n_head, n_ctx)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT2(nn.Module):
    def __init__(self, n_layer: int, d: int, n_head: int, vocab: int, vocab_padded: int, n_ctx: int,
                 mask_padded_vocab: bool = False):
        super().__init__()
        self.vocab, self.vocab_padded = vocab, vocab_padded
        self.mask_padded_vocab = mask_padded_vocab
        self.wte = nn.Embedding(vocab_padded, d)
        self.wpe = nn.Embedding(n_ctx, d)
        self.h = nn.ModuleList([Block(d, n_head, n_ctx) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        # GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2L), zero biases.
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight)                  # tied LM head, (B, T, V_padded)
        logits = logits.view(B * T, self.vocab_padded)
        if self.mask_padded_vocab and self.vocab_padded > self.vocab:
            # in place is fine: the mm backward does not need its output
            logits[:, self.vocab:] = float("-inf")
        return F.cross_entropy(logits, targets.reshape(B * T))


def loaded_libraries() -> list:
    """Shared objects mapped into this process (to report the allocator / BLAS really in use)."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and ".so" in parts[5]:
                    libs.add(parts[5])
    except OSError:
        pass
    return sorted(libs)


def blas_info(libs: list) -> str:
    """OpenBLAS core/config string if OpenBLAS is what torch links against, else a best guess."""
    for path in libs:
        if "libopenblas" in os.path.basename(path):
            try:
                lib = ctypes.CDLL(path)
                lib.openblas_get_config.restype = ctypes.c_char_p
                return lib.openblas_get_config().decode()
            except (OSError, AttributeError):
                return path
    for path in libs:
        base = os.path.basename(path)
        if "mkl" in base or "blis" in base or "libblas" in base:
            return path
    return "unknown"


def allocator_in_use(libs: list) -> str:
    for path in libs:
        base = os.path.basename(path)
        if "tcmalloc" in base:
            return "tcmalloc (" + path + ")"
        if "jemalloc" in base:
            return "jemalloc (" + path + ")"
    return "glibc malloc"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--batch", "-B", type=int, default=4)
    ap.add_argument("--seq", "-T", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--vocab", type=int, default=50257, help="true vocabulary size (padded to --vocab-multiple)")
    ap.add_argument("--vocab-multiple", type=int, default=128)
    ap.add_argument("--mask-padded-vocab", action="store_true",
                    help="fill padded logits with -inf before the loss (default: left unmasked)")
    ap.add_argument("--zero-grad", choices=["none", "zeros"], default="none",
                    help="none: zero_grad(set_to_none=True) (default, faster); zeros: set_to_none=False")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--label", default=None, help="free-form variant name copied into the JSON")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()

    if args.batch < 1 or args.seq < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--batch, --seq, --steps, --threads must be >= 1 and --warmup >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    n_layer, d, n_head = PRESETS[args.model]
    vocab_p = padded_vocab(args.vocab, args.vocab_multiple)
    n_ctx = max(1024, args.seq)

    model = GPT2(n_layer, d, n_head, args.vocab, vocab_p, n_ctx, args.mask_padded_vocab)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt_kwargs = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    try:
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}], foreach=True, **opt_kwargs)
        foreach = True
    except TypeError:  # very old torch without the foreach argument
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}], **opt_kwargs)
        foreach = False
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)

    # One fixed batch of random token ids (true vocabulary only); targets are the next tokens.
    gen = torch.Generator().manual_seed(args.seed)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen)
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    set_to_none = args.zero_grad == "none"

    def step():
        t0 = time.perf_counter()
        loss = model(idx, targets)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        t3 = time.perf_counter()
        return loss.item(), (t3 - t0, t1 - t0, t2 - t1, t3 - t2)

    load_before = os.getloadavg()
    first_loss = None
    for _ in range(args.warmup):
        loss_val, _ = step()
        first_loss = loss_val if first_loss is None else first_loss

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    times, fwd, bwd, optim = [], [], [], []
    for _ in range(args.steps):
        loss_val, (t, tf, tb, to) = step()
        first_loss = loss_val if first_loss is None else first_loss
        times.append(t); fwd.append(tf); bwd.append(tb); optim.append(to)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    load_after = os.getloadavg()

    med = statistics.median(times)
    tokens = args.batch * args.seq
    flops_step = model_flops_per_token(n_layer, d, args.seq, args.vocab) * tokens
    libs = loaded_libraries()
    result = {
        "impl": "pytorch",
        "label": args.label,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "model": args.model,
        "n_layer": n_layer, "d_model": d, "n_head": n_head,
        "vocab": args.vocab, "vocab_padded": vocab_p, "mask_padded_vocab": args.mask_padded_vocab,
        "params": n_params,
        "batch": args.batch, "seq": args.seq,
        "threads": torch.get_num_threads(), "threads_requested": args.threads,
        "warmup": args.warmup, "steps": args.steps,
        "ms_per_step": med * 1e3,
        "ms_per_step_mean": statistics.mean(times) * 1e3,
        "ms_per_step_min": min(times) * 1e3,
        "ms_per_step_max": max(times) * 1e3,
        "ms_steps": [t * 1e3 for t in times],
        "ms_forward": statistics.median(fwd) * 1e3,
        "ms_backward": statistics.median(bwd) * 1e3,
        "ms_optimizer": statistics.median(optim) * 1e3,   # clip + AdamW + zero_grad
        "tokens_per_s": tokens / med,
        "flops_per_step": flops_step,
        "gflops": flops_step / med / 1e9,
        "loss_first": first_loss, "loss_last": loss_val,
        "minor_faults_per_step": (ru1.ru_minflt - ru0.ru_minflt) / args.steps,
        "max_rss_mib": ru1.ru_maxrss / 1024.0,
        "optimizer": "AdamW(lr=1e-4, wd=0.1 on 2-D weights, foreach=%s)" % foreach,
        "zero_grad_set_to_none": set_to_none,
        "attention": "baddbmm(mask, q, k^T) + softmax + bmm",
        "blas": blas_info(libs),
        "allocator": allocator_in_use(libs),
        "env": {k: os.environ.get(k) for k in ENV_KNOBS},
        "cpu": cpu_model(), "nproc": os.cpu_count(),
        "loadavg_before": load_before[0], "loadavg_after": load_after[0],
    }

    if args.json:
        print(json.dumps(result))
        return 0

    print(f"pytorch {torch.__version__}  {args.model} (L={n_layer} d={d} H={n_head}, {n_params/1e6:.1f}M params, "
          f"vocab {args.vocab}->{vocab_p})  B={args.batch} T={args.seq}  threads={result['threads']}")
    print(f"blas: {result['blas']}\nallocator: {result['allocator']}")
    knobs = ", ".join(f"{k}={v}" for k, v in result["env"].items() if v is not None) or "(none set)"
    print(f"env: {knobs}")
    print(f"{'metric':<24}{'value':>14}")
    rows = [
        ("ms/step (median)", f"{result['ms_per_step']:.1f}"),
        ("ms/step (mean)", f"{result['ms_per_step_mean']:.1f}"),
        ("ms/step (min..max)", f"{result['ms_per_step_min']:.0f}..{result['ms_per_step_max']:.0f}"),
        ("  forward / backward", f"{result['ms_forward']:.0f} / {result['ms_backward']:.0f}"),
        ("  clip+AdamW+zero_grad", f"{result['ms_optimizer']:.1f}"),
        ("tokens/s", f"{result['tokens_per_s']:.1f}"),
        ("GFLOP/s (model FLOPs)", f"{result['gflops']:.1f}"),
        ("minor faults / step", f"{result['minor_faults_per_step']:.0f}"),
        ("loss first -> last", f"{first_loss:.3f} -> {loss_val:.3f}"),
        ("loadavg before/after", f"{load_before[0]:.2f} / {load_after[0]:.2f}"),
    ]
    for name, val in rows:
        print(f"{name:<24}{val:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Causal attention forward and backward in PyTorch's fused SDPA kernels, on the shapes of the
GPT-2 steps of bench/gpu_check.sh: the peer of kintsugi's attention kernels (docs/gpu.md).

For each shape (batch, heads, sequence, head size) and each SDPA backend PyTorch offers on the
GPU (FlashAttention-2 `flash`, cuDNN's fused attention `cudnn`, `efficient`), it times the
forward alone and forward + backward of bf16 q, k, v with is_causal=True between CUDA events
(median of the timed repeats) and prints ms and TFLOP/s in FlashAttention's convention (causal:
forward 2 * 2 * B * H * T^2 * D / 2, backward 2.5x that), beside what kintsugi's profile prints
for its own `attention_forward` and `attention_backward`. A backend that refuses the shape is
listed with PyTorch's reason.

    python3 bench/pytorch/attention_peer.py --json
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = {"gpt2 B=32": (32, 12, 1024, 64), "gpt2-xl B=8": (8, 25, 1024, 64)}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def timed_ms(fn, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one JSON line per row as well")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| shape | backend | forward ms | TFLOP/s | backward ms | TFLOP/s |")
    print("|---|---|---:|---:|---:|---:|")
    for label, (B, H, T, D) in SHAPES.items():
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        grad = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
        fwd_flops = 2 * 2 * B * H * T * T * D / 2
        for name, backend in BACKENDS.items():
            row = {"shape": label, "backend": name}
            try:
                with sdpa_kernel(backend):
                    forward = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)

                    def both():
                        out = forward()
                        out.backward(grad)
                    fwd = timed_ms(forward, args.repeats, args.warmup)
                    total = timed_ms(both, args.repeats, args.warmup)
                bwd = max(total - fwd, 1e-9)
                row.update(forward_ms=fwd, backward_ms=bwd,
                           forward_tflops=fwd_flops / fwd / 1e9,
                           backward_tflops=2.5 * fwd_flops / bwd / 1e9)
                print(f"| {label} | {name} | {fwd:.2f} | {row['forward_tflops']:.0f} | "
                      f"{bwd:.2f} | {row['backward_tflops']:.0f} |")
            except RuntimeError as e:  # the backend cannot run this shape or is not built in
                row["error"] = str(e).splitlines()[0][:200]
                print(f"| {label} | {name} | refused: {row['error']} | | | |")
            if args.json:
                print(json.dumps(row))
            q.grad = k.grad = v.grad = None


if __name__ == "__main__":
    main()

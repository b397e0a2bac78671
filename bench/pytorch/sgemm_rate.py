#!/usr/bin/python3
"""Measure this machine's GEMM rate as seen by PyTorch (torch.mm -> its BLAS; bf16 -> oneDNN).

Times C = A @ B for square n x n fp32 matrices with a given number of threads and prints the
best-of-R rate in GFLOP/s (2*n^3 flops per product).  Used by bench/compare_cpu.sh as the
fallback "GEMM rate" reference when neither GEMM_GFLOPS nor `kintsugi bench gemm` is available.

    /usr/bin/python3 bench/pytorch/sgemm_rate.py --n 4096 --threads 2 [--dtype bf16] [--json]

With --dtype bf16, B is used transposed (a linear layer's x @ W^T), as `kintsugi bench gemm
--dtype bf16` does.
"""

import argparse
import json
import sys
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096, help="matrix size (n x n)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="timed repetitions; the best is reported")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    a = torch.randn(args.n, args.n, generator=g).to(dtype)
    b = torch.randn(args.n, args.n, generator=g).to(dtype)
    if args.dtype == "bf16":
        b = b.t()  # a weight [out, in] used as x @ W^T
    c = torch.empty(args.n, args.n, dtype=dtype)
    torch.mm(a, b, out=c)                       # warm-up (BLAS buffers, threads)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        times.append(time.perf_counter() - t0)
    flops = 2.0 * args.n ** 3
    best = min(times)
    res = {"impl": "torch.mm", "dtype": args.dtype, "torch": torch.__version__, "n": args.n, "threads": torch.get_num_threads(),
           "gflops": flops / best / 1e9, "gflops_median": flops / sorted(times)[len(times) // 2] / 1e9,
           "ms": best * 1e3}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"torch.mm {args.dtype} {args.n}x{args.n}x{args.n}, {res['threads']} threads: "
              f"{res['gflops']:.1f} GFLOP/s best, {res['gflops_median']:.1f} median ({best*1e3:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

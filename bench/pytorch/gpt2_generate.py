#!/usr/bin/python3
"""Plain-PyTorch GPT-2 generation benchmark: the CPU peer of `kintsugi generate`.

What it measures
    Greedy generation of --tokens new tokens after a one-token prompt, batch 1, fp32, random
    weights (N(0, 0.02); the speed does not depend on them), in two ways:
      * cache:    one forward of the prompt, then one row per new token against a key/value
                  cache preallocated for the whole window (the fast way to write it: no
                  concatenation per step),
      * no-cache: the whole context (at most --seq tokens) rerun for every new token.
    It prints tokens/s of both, under torch.inference_mode(). --tokens must leave the context
    within the window, so both ways compute the same tokens (checked: the two greedy sequences
    must be equal).

The network is kintsugi's GPT-2 (bench/pytorch/gpt2_step.py describes it): learned positions,
pre-LayerNorm blocks, fused qkv with bias, tanh GELU MLP of width 4d, tied head over the
vocabulary padded to a multiple of 128, logits of the real vocabulary only.

    /usr/bin/python3 bench/pytorch/gpt2_generate.py --layers 12 --d-model 768 --heads 12 \
        --seq 1024 --tokens 256
"""

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class GPT2:
    def __init__(self, layers: int, d: int, heads: int, vocab: int, seq: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        normal = lambda *shape: torch.randn(*shape, generator=g) * 0.02
        self.d, self.heads, self.hd, self.vocab, self.seq = d, heads, d // heads, vocab, seq
        padded = (vocab + 127) // 128 * 128
        self.wte, self.wpe = normal(padded, d), normal(seq, d)
        self.blocks = [dict(ln1=(torch.ones(d), torch.zeros(d)), ln2=(torch.ones(d), torch.zeros(d)),
                            qkv=(normal(3 * d, d), torch.zeros(3 * d)), proj=(normal(d, d), torch.zeros(d)),
                            fc=(normal(4 * d, d), torch.zeros(4 * d)), fc2=(normal(d, 4 * d), torch.zeros(d)))
                       for _ in range(layers)]
        self.lnf = (torch.ones(d), torch.zeros(d))
        self.mask = torch.full((seq, seq), float("-inf")).triu(1)

    def new_cache(self):
        return [(torch.empty(self.heads, self.seq, self.hd), torch.empty(self.heads, self.seq, self.hd))
                for _ in self.blocks]

    def logits(self, tokens: torch.Tensor, start: int, cache) -> torch.Tensor:
        """Rows start..start+len(tokens)-1; keys and values go into (or come from) `cache`.
        Returns the last row's logits over the real vocabulary."""
        n = tokens.shape[0]
        end = start + n
        x = self.wte[tokens] + self.wpe[start:end]
        for b, (k_cache, v_cache) in zip(self.blocks, cache):
            h = F.layer_norm(x, (self.d,), *b["ln1"])
            q, k, v = F.linear(h, *b["qkv"]).view(n, 3, self.heads, self.hd).permute(1, 2, 0, 3)
            k_cache[:, start:end] = k
            v_cache[:, start:end] = v
            scores = torch.baddbmm(self.mask[start:end, :end].expand(self.heads, n, end), q,
                                   k_cache[:, :end].transpose(1, 2), alpha=1 / math.sqrt(self.hd))
            attn = torch.bmm(scores.softmax(-1), v_cache[:, :end]).transpose(0, 1).reshape(n, self.d)
            x = x + F.linear(attn, *b["proj"])
            h = F.layer_norm(x, (self.d,), *b["ln2"])
            x = x + F.linear(F.gelu(F.linear(h, *b["fc"]), approximate="tanh"), *b["fc2"])
        x = F.layer_norm(x[-1:], (self.d,), *self.lnf)
        return F.linear(x, self.wte[: self.vocab])[0]


def generate(model: GPT2, tokens: int, cached: bool):
    context = [0]
    cache = model.new_cache()
    start = time.perf_counter()
    for i in range(tokens):
        if cached and i > 0:
            logits = model.logits(torch.tensor(context[-1:]), len(context) - 1, cache)
        else:
            logits = model.logits(torch.tensor(context), 0, cache)
        context.append(int(logits.argmax()))
    return context, time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.tokens + 1 > a.seq:
        p.error("--tokens must leave the context within --seq")
    if a.threads:
        torch.set_num_threads(a.threads)
    model = GPT2(a.layers, a.d_model, a.heads, a.vocab, a.seq)
    with torch.inference_mode():
        generate(model, 4, True)  # warm-up: allocator, thread pool
        cached, t_cached = generate(model, a.tokens, True)
        full, t_full = generate(model, a.tokens, False)
    if cached != full:
        raise SystemExit("the cached and uncached greedy tokens differ")
    result = {"tokens": a.tokens, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "cache_tokens_per_s": a.tokens / t_cached, "no_cache_tokens_per_s": a.tokens / t_full}
    if a.json:
        print(json.dumps(result))
    else:
        print(f"pytorch {torch.__version__}, {result['threads']} threads, {a.tokens} tokens: "
              f"cache {result['cache_tokens_per_s']:.1f} tokens/s, "
              f"no cache {result['no_cache_tokens_per_s']:.1f} tokens/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

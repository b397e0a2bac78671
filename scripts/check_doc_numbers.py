#!/usr/bin/env python3
"""Reruns the `kintsugi plan` commands whose output the docs quote and compares the numbers.

Usage: check_doc_numbers.py KINTSUGI_BINARY [REPO_ROOT]

docs/planner.md quotes predictions of `kintsugi plan` on the cluster presets (tables against
published runs, rankings, strong scaling, the bytes per parameter). Those depend only on the
binary and the files in configs/, so they can be recomputed anywhere: each check below runs its
commands, renders the sentence or table row the docs quote with the numbers the binary prints
now, and requires the docs to contain it. A change of the cost model that moves a quoted number
fails here until the docs are updated by rerunning the commands.

The docs mark each section whose numbers are checked with the words "checked by CTest
`docs.numbers`"; every quote must lie in such a section, and every such section must hold at
least one quote, so the mark tells a reader which numbers are current. Numbers measured on a
machine (the local cluster, GPU runs, `tune`) are not reproducible and are not checked; their
sections give the machine and date instead.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

BINARY = None
ROOT = None
_cache = {}


def run(args, cwd=None, refusal=None):
    """stdout of `kintsugi ARGS`; fails the check on a non-zero exit, unless stderr matches
    `refusal` (plan --json prints its predictions, then refuses when no layout fits)."""
    key = (tuple(args), cwd)
    if key not in _cache:
        p = subprocess.run([BINARY] + list(args), cwd=cwd or ROOT, capture_output=True, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        if p.returncode != 0 and not (refusal and re.search(refusal, p.stderr)):
            raise RuntimeError(f"`kintsugi {' '.join(args)}` failed: {p.stderr.strip()}")
        _cache[key] = p.stdout
    return _cache[key]


def plan(command, cwd=None):
    """`kintsugi plan COMMAND --json` with every fitting layout, ranked (none when none fits)."""
    return json.loads(run(["plan"] + command.split() + ["--json", "--top", "1000000"], cwd,
                          refusal="no layout fits"))


def only(p):
    """The one layout a fully pinned command predicts."""
    if len(p["layouts"]) != 1:
        raise RuntimeError(f"expected one fitting layout, got {len(p['layouts'])}")
    return p["layouts"][0]


def rank_of(p, **pins):
    """1-based rank of the first layout whose fields equal `pins`."""
    for i, x in enumerate(p["layouts"]):
        if all(x["layout"][k] == v for k, v in pins.items()):
            return i + 1
    raise RuntimeError(f"no fitting layout with {pins}")


def step(x):
    return x["step_seconds"]["total"]


def gb(x):
    return f"{x['memory_bytes']['total'] / 1e9:.1f}"


def pct(v, digits=1):
    return f"{100 * v:.{digits}f}%"


def signed_pct(v, digits=1):
    return f"{100 * v:+.{digits}f}%"


def seconds(s):
    """As the plan table prints a time, with a space before the unit."""
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def thousands(n):
    return f"{n:,}"


# ---- docs/planner.md, "Memory per device" -------------------------------------------------

def bytes_per_parameter():
    def total(*flags):
        first = run(["plan", "--memory"] + list(flags)).splitlines()[0]
        return int(re.search(r"= (\d+) bytes", first).group(1))
    yield (f"**{total()} bytes**; with `grad_precision = \"param\"`, "
           f"{total('--grad-precision', 'param')} (the ZeRO paper's 16); fp32 training, "
           f"{total('--precision', 'fp32')}.")
    published = {"gpt-22b": "440 GB", "gpt-175b": "3.5 TB", "gpt-1t": "20 TB"}
    for line in run(["plan", "--memory"]).splitlines():
        name = line.split()[0] if line.strip() else ""
        if name in published:
            params = line.split()[1]
            sizes = re.findall(r"\d+(?:\.\d+)? [GT]B", line)
            yield (f"| {name} | {params} | {sizes[-2]} | {sizes[-1]} "
                   f"(published: {published[name]}) |")


# ---- docs/planner.md, "Validation against published runs" ---------------------------------

GAUDI_LLAMA = ("--model llama-13b --cluster gaudi2 --nodes 8 --global-batch 256 --seq 2048 "
               "--tp 4 --pp 2 --dp 8 --micro-batch 1 --schedule 1f1b --zero 0 --recompute none "
               "--sequence-parallel=false --pipeline-p2p blocking")
TR1_13B = ("--config configs/gpt-tiny.toml --set model.n_layer=40 --set model.d_model=5120 "
           "--set model.n_head=32 --set model.d_ff=20480 --set model.seq_len=2048 "
           "--precision bf16")
GAUDI_BLOOM = (TR1_13B + " --cluster gaudi2 --nodes 16 --global-batch 1024 --tp 4 --pp 2 "
               "--dp 16 --micro-batch 1 --schedule 1f1b --zero 0 --recompute none --sequence-parallel=false "
               "--attention materialized --pipeline-p2p blocking")
FRONTIER_175B = ("--model gpt-175b --cluster frontier --nodes 8 --global-batch 640 --seq 2048 "
                 "--precision fp16 --tp 4 --pp 16 --dp 1 --micro-batch 1 --schedule 1f1b "
                 "--recompute full --sequence-parallel=false --pipeline-p2p blocking")
FRONTIER_1T = ("--model gpt-1t --cluster frontier --nodes 64 --global-batch 1600 --seq 2048 "
               "--precision fp16 --tp 8 --pp 64 --dp 1 --micro-batch 1 --schedule 1f1b "
               "--recompute full --sequence-parallel=false --pipeline-p2p blocking")
A100 = ("--cluster dgx-a100-80gb --seq 2048 --tp 8 --dp 1 --micro-batch 1 --recompute selective "
        "--sequence-parallel --attention materialized")
A100_22B = "--model gpt-22b --nodes 1 --global-batch 4 --pp 1 " + A100
A100_175B = "--model gpt-175b --nodes 8 --global-batch 64 --pp 8 --schedule 1f1b " + A100
A100_530B = "--model gpt-530b --nodes 35 --global-batch 280 --pp 35 --schedule 1f1b " + A100
A100_1T = "--model gpt-1t --nodes 64 --global-batch 512 --pp 64 --schedule 1f1b " + A100

# (row label up to the metric, command, metric, published value as the docs print it)
PUBLISHED_ROWS = [
    ("| Llama-13B, 64 devices | gaudi2 | TP 4, PP 2, DP 8, mb 1, 1F1B, GBS 256 | samples/s |",
     GAUDI_LLAMA, "samples", "55.48"),
    ("| \"BLOOM-13B\" (BigScience tr1-13B), 128 devices | gaudi2 | TP 4, PP 2, DP 16, mb 1, "
     "1F1B, GBS 1024, materialized attention | samples/s |", GAUDI_BLOOM, "samples", "114.1"),
    ("| GPT 175B, 64 GCDs (one replica) | frontier | TP 4, PP 16, mb 1, 640 per replica, fp16, "
     "full recompute | HFU |", FRONTIER_175B, "hfu", "36.14%"),
    ("| GPT 1T, 512 GCDs | frontier | TP 8, PP 64, mb 1, 1600 per replica, fp16, full recompute "
     "| HFU |", FRONTIER_1T, "hfu", "31.96%"),
    ("| GPT 22B (Korthikanti et al. Table 5) | dgx-a100-80gb | TP 8, PP 1, GBS 4, mb 1, sp, "
     "selective | MFU |", A100_22B, "mfu", "41.5%"),
    ("| GPT 175B | dgx-a100-80gb | TP 8, PP 8, GBS 64, mb 1, 1F1B, sp, selective | MFU |",
     A100_175B, "mfu", "51.4%"),
    ("| GPT 530B | dgx-a100-80gb | TP 8, PP 35, GBS 280, mb 1, 1F1B, sp, selective | MFU |",
     A100_530B, "mfu", "56.0%"),
    ("| GPT 1T | dgx-a100-80gb | TP 8, PP 64, GBS 512, mb 1, 1F1B, sp, selective | MFU |",
     A100_1T, "mfu", "56.3%"),
]


def metric(x, which):
    return x["samples_per_s"] if which == "samples" else x[which]


def render_metric(v, which):
    return f"{v:#.4g}" if which == "samples" else pct(v, 2)


def error_of(predicted, published):
    value = float(published.rstrip("%")) / (100 if published.endswith("%") else 1)
    return predicted / value - 1


def published_runs():
    within = 0
    for label, command, which, published in PUBLISHED_ROWS:
        x = only(plan(command))
        v = metric(x, which)
        err = error_of(v, published)
        within += abs(err) <= 0.10
        shown = signed_pct(err) if abs(err) <= 0.10 else f"**{signed_pct(err)}**"
        yield f"{label} {render_metric(v, which)} | {published} | {shown} | {gb(x)} GB |"
    words = ["No", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight"]
    yield f"{words[within]} of the eight throughput rows are within 10%"
    # The campaign rows: energy, days and strong scaling, from the commands of their sections.
    campaign_within = 0
    for label, command, published in [
            ("| GPT 22B, 20 tokens per parameter | frontier | the planner's best, 2 nodes, GBS 128 "
             "| energy |", "--model gpt-22b --nodes 2 --global-batch 128 --zero 0,1", 284e9),
            ("| GPT 175B, 20 tokens per parameter | frontier | Table VI, one replica | energy |",
             "--model gpt-175b --nodes 8 --global-batch 640 --tp 4 --pp 16 --micro-batch 1",
             17.65e12),
            ("| GPT 1T, 20 tokens per parameter | frontier | Table VI, one replica | energy |",
             "--model gpt-1t --nodes 64 --global-batch 1600 --tp 8 --pp 64 --micro-batch 1",
             662e12)]:
        x = plan(f"{command} {ENERGY}")["layouts"][0]
        err = x["campaign"]["energy_j"] / published - 1
        campaign_within += abs(err) <= 0.10
        yield (f"{label} {joules(x['campaign']['energy_j'])} | {joules(published)} | "
               f"**{signed_pct(err)}** | {gb(x)} GB |" if abs(err) > 0.10 else
               f"{label} {joules(x['campaign']['energy_j'])} | {joules(published)} | "
               f"{signed_pct(err)} | {gb(x)} GB |")
    b = plan(BLOOM)["layouts"][0]
    err = b["campaign"]["days"] / 15.6 - 1
    campaign_within += abs(err) <= 0.10
    shown = signed_pct(err) if abs(err) <= 0.10 else f"**{signed_pct(err)}**"
    yield (f"| \"BLOOM-13B\", 3.15e11 tokens (implied) | gaudi2 | as its samples/s row | days | "
           f"{b['campaign']['days']:.2f} | 15.6 | {shown} | {gb(b)} GB |")
    for label, model, tp, pp, batch, nodes, published in [
            ("| GPT 175B strong scaling, 128 -> 1024 GCDs | frontier | TP 4, PP 16, GBS 8000 | "
             "efficiency |", "gpt-175b", 4, 16, 8000, (16, 128), 0.8993),
            ("| GPT 1T strong scaling, 1024 -> 3072 GCDs | frontier | TP 8, PP 64, GBS 8016 | "
             "efficiency |", "gpt-1t", 8, 64, 8016, (128, 384), 0.8705)]:
        points = scaling_points(f"--model {model} --cluster frontier --scaling strong --nodes "
                                f"{nodes[0]},{nodes[1]} --global-batch {batch} --tp {tp} "
                                f"--pp {pp} {SCALING}")
        e = points[1]["efficiency"]
        err = e / published - 1
        campaign_within += abs(err) <= 0.10
        shown = signed_pct(err) if abs(err) <= 0.10 else f"**{signed_pct(err)}**"
        yield (f"{label} {pct(e)} | {pct(published, 2)} | {shown} | "
               f"{points[1]['prediction']['memory_bytes']['total'] / 1e9:.1f} GB |")
    yield (f"{words[campaign_within]} of the six campaign rows (energy, days, scaling) "
           f"{'is' if campaign_within == 1 else 'are'} within 10%")


# Megatron-Bridge's DGX-H100 rows of Qwen3-30B-A3B (its published performance summary, 25.11,
# and the summary's archive for 26.02), pinned to their layouts; they ran FP8,
# which the planner has no rate for, so it predicts bf16 (docs/planner.md, "A mixture of
# experts").
MOE_ROWS = [
    ("| Megatron-Bridge 25.11, FP8-CS | GBS 512, MBS 2, TP 1, PP 2, VP 24, EP 8 |",
     "--model qwen3-30b-a3b --cluster dgx-h100 --nodes 2 --global-batch 512 --seq 4096 --tp 1 "
     "--pp 2 --virtual-stages 24 --ep 8 --micro-batch 2 --zero 1 --precision bf16", 5275),
    ("| Megatron-Bridge 26.02, FP8 | GBS 1024, MBS 1, TP 1, PP 2, VP 12, EP 8 |",
     "--model qwen3-30b-a3b --cluster dgx-h100 --nodes 2 --global-batch 1024 --seq 4096 --tp 1 "
     "--pp 2 --virtual-stages 12 --ep 8 --micro-batch 1 --zero 1 --precision bf16", 5113),
]


def moe_published_rows():
    for label, command, published in MOE_ROWS:
        x = only(plan(command))
        per_gpu = x["tokens_per_s"] / 16
        t = x["step_seconds"]
        yield (f"{label} {thousands(round(per_gpu))} | {thousands(published)} | "
               f"{signed_pct(per_gpu / published - 1)} | {x['layout']['recompute']} | "
               f"{seconds(t['ep'])} of {seconds(t['total'])} | {gb(x)} GB |")


def published_run_assumptions():
    # Korthikanti et al.: micro-batch 4, and interleaving with the most chunks per rank that
    # divide the blocks of a stage (at most 8, as the planner enumerates them).
    mb4 = only(plan(A100_22B.replace("--micro-batch 1", "--micro-batch 4")))
    yield (f"(with micro-batch 4 the 22B row is "
           f"{signed_pct(error_of(metric(mb4, 'mfu'), '41.5%'))})")
    parts = []
    for command, layers, stages, published in [(A100_175B, 96, 8, "51.4%"),
                                               (A100_530B, 105, 35, "56.0%")]:
        v = max(k for k in range(2, 9) if (layers // stages) % k == 0)
        x = only(plan(command.replace("--schedule 1f1b",
                                      f"--schedule interleaved --virtual-stages {v}")))
        parts.append(signed_pct(error_of(metric(x, "mfu"), published)))
    tied = plan(A100_1T.replace("--schedule 1f1b", "--schedule interleaved --virtual-stages 2"))
    fits = "does not fit" if not tied["layouts"] else "fits"
    yield (f"(interleaving with the most chunks predicts 175B {parts[0]} and 530B {parts[1]}; "
           f"1T {fits} with two chunks per rank)")
    yield f"Their 1T layout now fits in 80 GB ({gb(only(plan(A100_1T)))} GB;"
    # Gaudi2: the second row at 256 sequences, with kintsugi's bloom-13b preset and with the
    # tr1-13B shape; the Llama row with materialized attention.
    at_256 = GAUDI_BLOOM.replace("--global-batch 1024", "--global-batch 256")
    preset = only(plan(at_256.replace(TR1_13B, "--model bloom-13b --seq 2048")))
    shape = only(plan(at_256))
    llama = only(plan(GAUDI_LLAMA + " --attention materialized"))

    def samples(x, published):
        v = x["samples_per_s"]
        return f"{v:#.4g}", signed_pct(error_of(v, published))
    a, b, c = samples(preset, "114.1"), samples(shape, "114.1"), samples(llama, "55.48")
    yield (f"the second row predicts {a[0]} samples/s ({a[1]}); the tr1-13B shape at 256 "
           f"sequences, {b[0]} ({b[1]}). The Llama row with materialized attention: {c[0]} "
           f"({c[1]}).")


# ---- docs/planner.md, GPU predictions from specs written by the docs' commands -------------

def dgx_h100_variant(substitutions, attention_tflops=None):
    """configs/clusters/dgx-h100.toml through the docs' `sed -e 's/A/B/' ...` (and the
    `printf '\n[attention]\ntflops = R\n' >>`)."""
    with open(os.path.join(ROOT, "configs", "clusters", "dgx-h100.toml")) as f:
        spec = f.read()
    for old, new in substitutions:
        spec = re.sub(old, new, spec, count=1, flags=re.M)
    if attention_tflops is not None:
        spec += f"\n[attention]\ntflops = {attention_tflops}\n"
    return spec


def plan_with_spec(spec, command):
    """The one layout `kintsugi plan COMMAND` predicts on cluster file `spec.toml` (cwd)."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "spec.toml"), "w") as f:
            f.write(spec)
        return only(plan(command + " --cluster spec.toml", cwd=d))


GPT2_124M = "--model gpt2 --global-batch 32 --seq 1024 --micro-batch 32 --recompute none --zero 0"
GPT2_XL = "--model gpt2-xl --global-batch 8 --seq 1024 --micro-batch 8 --recompute none --zero 0"
H200_ONE = [(r"^devices = 8", "devices = 1"), (r"memory_gb = 80", "memory_gb = 141"),
            (r"memory_bandwidth_gbs = 3350", "memory_bandwidth_gbs = 4800")]


def ms(s):
    return f"{s * 1e3:.1f} ms"


def one_gpu():
    rows = [("| GPT-2 124M, B = 32, attention as GEMMs, against PyTorch eager |", GPT2_124M,
             91.4e-3, None),
            ("| GPT-2 1.5B, B = 8, attention as GEMMs, against PyTorch eager |", GPT2_XL,
             213.5e-3, None),
            ("| GPT-2 124M, B = 32, `[attention] tflops = 6.36`, against kintsugi |", GPT2_124M,
             678.1e-3, 6.36),
            ("| GPT-2 1.5B, B = 8, `[attention] tflops = 6.36`, against kintsugi |", GPT2_XL,
             1454.8e-3, 6.36)]
    errors = []
    for label, command, measured, attention in rows:
        t = step(plan_with_spec(dgx_h100_variant(H200_ONE, attention), command))
        errors.append(t / measured - 1)
        yield f"{label} {ms(t)} | {ms(measured)} | {signed_pct(t / measured - 1)} |"
    yield (f"the model predicts PyTorch eager's step within "
           f"{pct(max(abs(e) for e in errors[:2]))}")
    yield f"It predicts the 1.5B step, which it was not taken from, within {pct(abs(errors[3]))}"


# The H200's measured figures: the GEMM curve (peak 865, half_dim 77), the attention rate of
# b8c3528's kernels (107 TFLOP/s), a bandwidth, then the training GEMMs' share as efficiency.
H200_MEASURED = [(r"^devices = 8", "devices = 1"), (r"memory_gb = 80", "memory_gb = 141"),
                 (r"peak_tflops_bf16 = 989", "peak_tflops_bf16 = 865"),
                 (r"max_efficiency = 0.72", "max_efficiency = 1"),
                 (r"half_dim = 192", "half_dim = 77")]


def measured_figures():
    def predict(bandwidth, efficiency, command):
        spec = dgx_h100_variant(H200_MEASURED + [
            (r"memory_bandwidth_gbs = 3350", f"memory_bandwidth_gbs = {bandwidth}"),
            (r"max_efficiency = 1$", f"max_efficiency = {efficiency}")], 107)
        return step(plan_with_spec(spec, command))

    measured = {GPT2_124M: 124.4e-3, GPT2_XL: 279.1e-3}

    def cell(t, command):
        return f"{ms(t)} ({100 * (t / measured[command] - 1):+.0f}%)"
    for label, bandwidth in [("| 4187 GB/s (copy) |", 4187), ("| 1900 GB/s (GELU backward) |", 1900)]:
        a, b = predict(bandwidth, 1, GPT2_124M), predict(bandwidth, 1, GPT2_XL)
        yield (f"{label} {cell(a, GPT2_124M)} | {ms(measured[GPT2_124M])} | {cell(b, GPT2_XL)} | "
               f"{ms(measured[GPT2_XL])} |")
    a, b = predict(1900, 0.741, GPT2_124M), predict(1900, 0.741, GPT2_XL)
    yield (f"the same spec predicts {ms(a)} for the 124M step "
           f"({signed_pct(a / measured[GPT2_124M] - 1)} against 124.4) and {ms(b)} for the 1.5B "
           f"({signed_pct(b / measured[GPT2_XL] - 1)} against 279.1)")


# ---- docs/planner.md, "Frontier: the study's best layouts in the planner's ranking" -------

F175 = "--model gpt-175b --cluster frontier --nodes 128 --global-batch 640 --seq 2048 --precision fp16"
F1T = "--model gpt-1t --cluster frontier --nodes 64 --global-batch 1600 --seq 2048 --precision fp16"
STUDY_SPACE = ("--zero 0,1 --schedule 1f1b --sequence-parallel=false --recompute full --hsdp 0 "
               "--cp 1")
PUBLISHED_175B = dict(tp=4, pp=16, micro_batch=1, zero=1, recompute="full", schedule="1f1b",
                      sequence_parallel=False, hsdp=0, virtual_stages=1, cp=1)
PUBLISHED_1T = dict(tp=8, pp=64, micro_batch=1, recompute="full", schedule="1f1b",
                    sequence_parallel=False, virtual_stages=1, cp=1)


def describe(l):
    """The docs' short form of a layout: "TP 8, PP 8, interleaved, ZeRO-1 ..."."""
    s = f"TP {l['tp']}, PP {l['pp']}"
    if l["dp"] > 1:
        s += f", DP {l['dp']}"
    if l.get("cp", 1) > 1:
        s += f", CP {l['cp']}"
    return s + (" with sp" if l["sequence_parallel"] else "")


def frontier_ranking():
    study = plan(f"{F175} {STUDY_SPACE}")
    r = rank_of(study, **PUBLISHED_175B)
    first = study["layouts"][0]
    slower = step(study["layouts"][r - 1]) / step(first) - 1
    full = plan(F175)
    rf = rank_of(full, **PUBLISHED_175B)
    best = full["layouts"][0]
    speedup = step(full["layouts"][rf - 1]) / step(best)
    x = full["layouts"][rf - 1]
    bl = best["layout"]
    best_words = (f"TP {bl['tp']}, PP {bl['pp']}, "
                  + (f"CP {bl['cp']}, " if bl.get("cp", 1) > 1 else "")
                  + f"{bl['schedule']}, ZeRO-{bl['zero']} with "
                  f"hybrid sharding over {bl['hsdp']}, " + ("sp" if bl["sequence_parallel"] else
                                                            "no sp"))
    behind = (f" ({pct(slower)} slower than the first, TP {first['layout']['tp']} "
              f"PP {first['layout']['pp']})" if r > 1 else "")
    yield (f"**{r} of {study['fitting']}** fitting{behind} | {rf} of "
           f"{thousands(full['fitting'])} (the best, {best_words}, is predicted "
           f"{speedup:.2f}x faster) | {pct(x['mfu'])} / {pct(x['hfu'])} | {gb(x)} GB |")
    study1t = plan(f"{F1T} {STUDY_SPACE}")
    r1 = rank_of(study1t, **PUBLISHED_1T)
    full1t = plan(F1T)
    rf1 = rank_of(full1t, **PUBLISHED_1T)
    y = full1t["layouts"][rf1 - 1]
    b1 = full1t["layouts"][0]
    yield (f"**{r1} of {study1t['fitting']}** fitting | {rf1} of {full1t['fitting']} "
           f"({pct(step(y) / step(b1) - 1)} slower than {describe(b1['layout'])}) | "
           f"{pct(y['mfu'])} / {pct(y['hfu'])} | {gb(y)} GB of 64 |")
    yield (f"The 1T layout needs {gb(y)} of 64 GB per GCD: only {full1t['fitting']} of "
           f"{thousands(full1t['enumerated'])} valid layouts fit at all")


# ---- docs/planner.md, "Frontier: strong scaling" -----------------------------------------

SCALING = ("--seq 2048 --precision fp16 --micro-batch 1 --schedule 1f1b --recompute full "
           "--sequence-parallel=false --zero 1 --hsdp 0 --pipeline-p2p blocking")


def scaling_points(command, cwd=None):
    """The points of `kintsugi plan --scaling ... --json`."""
    return json.loads(run(["plan"] + command.split() + ["--json"], cwd))["points"]


def frontier_slow_links(bandwidth):
    """configs/clusters/frontier.toml with the inter-node bandwidth per GCD replaced."""
    with open(os.path.join(ROOT, "configs", "clusters", "frontier.toml")) as f:
        spec = f.read()
    return re.sub(r"(\[inter_node\]\nbandwidth_gbs = )[0-9.]+", rf"\g<1>{bandwidth}", spec)


def strong_scaling():
    for label, model, tp, pp, batch, nodes, published in [
            ("| 175B (TP 4, PP 16) |", "gpt-175b", 4, 16, 8000, (16, 128), 0.8993),
            ("| 1T (TP 8, PP 64) |", "gpt-1t", 8, 64, 8016, (128, 384), 0.8705)]:
        points = scaling_points(f"--model {model} --cluster frontier --scaling strong --nodes "
                                f"{nodes[0]},{nodes[1]} --global-batch {batch} --tp {tp} "
                                f"--pp {pp} {SCALING}")
        t = [p["prediction"]["step_seconds"]["total"] for p in points]
        # The same steps as predicting each node count alone.
        for n, ti in zip(nodes, t):
            alone = step(only(plan(f"--model {model} --cluster frontier --nodes {n} "
                                   f"--global-batch {batch} --tp {tp} --pp {pp} "
                                   f"--dp {8 * n // (tp * pp)} {SCALING}")))
            if alone != ti:
                raise RuntimeError(f"--scaling's step {ti} differs from the plan's {alone}")
        efficiency = points[1]["efficiency"]
        gcds = [8 * n for n in nodes]
        yield (f"{label} {gcds[0]} -> {gcds[1]} | {t[0]:.1f} s -> {t[1]:.1f} s | "
               f"{pct(efficiency)} | {pct(published, 2)} | "
               f"{100 * (efficiency - published):+.1f} points |")
    # How slow the links between nodes would have to be for the data-parallel collectives to
    # explain the gap: the 175B rows with a tenth and a fortieth of the bandwidth.
    for bandwidth in (12.5, 1.25, 0.3125):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "spec.toml"), "w") as f:
                f.write(frontier_slow_links(bandwidth))
            points = scaling_points(f"--model gpt-175b --cluster spec.toml --scaling strong "
                                    f"--nodes 16,128 --global-batch 8000 --tp 4 --pp 16 "
                                    f"{SCALING}", cwd=d)
        yield (f"| {bandwidth:g} GB/s | {pct(points[1]['efficiency'])} | "
               f"{points[1]['prediction']['step_seconds']['dp']:.1f} s |")


# ---- docs/planner.md, "Frontier: the study's Table V space, searched exhaustively" ---------

TABLE_V = ("--model gpt-175b --cluster frontier --tp 1,2,4,8 --pp 1,2,4,8,12,16 --zero 0,1 "
           "--seq 2048 --precision fp16 --schedule 1f1b --recompute full --sequence-parallel=false --hsdp 0 "
           "--cp 1 --objective time")


def table_v():
    v = plan(f"{TABLE_V} --nodes 12,16 --micro-batch 4:20 --grad-accum 5,10")
    best = v["layouts"][0]
    bl = best["layout"]
    yield (f"{thousands(v['enumerated'])} valid layouts, {v['fitting']} fitting, over "
           f"{len(v['global_batch'])} global batches")
    yield (f"| Table V (MBS 4-20, GAS 5 or 10, 12 or 16 nodes) | TP {bl['tp']}, PP {bl['pp']}, "
           f"DP {bl['dp']}, mb {bl['micro_batch']}, GAS {best['global_batch'] // (bl['micro_batch'] * bl['dp'])}, "
           f"GBS {best['global_batch']}, {best['nodes']} nodes | "
           f"{best['tokens_per_s']:.0f} | {pct(best['step_seconds']['bubble'] / best['step_seconds']['total'], 0)} |")
    w = plan(f"{TABLE_V} --nodes 12,16 --global-batch 640 --micro-batch 1:20")
    first = w["layouts"][0]
    fl = first["layout"]
    rank = next(i + 1 for i, x in enumerate(w["layouts"])
                if x["nodes"] == 16 and x["layout"]["tp"] == 4 and x["layout"]["pp"] == 16
                and x["layout"]["micro_batch"] == 1 and x["layout"]["zero"] == 1)
    x = w["layouts"][rank - 1]
    yield (f"| GBS 640, MBS 1-20, 12 or 16 nodes | TP {fl['tp']}, PP {fl['pp']}, DP {fl['dp']}, "
           f"mb {fl['micro_batch']}, ZeRO-{fl['zero']}, {first['nodes']} nodes | "
           f"{first['tokens_per_s']:.0f} | "
           f"{pct(first['step_seconds']['bubble'] / first['step_seconds']['total'], 0)} |")
    yield (f"| Table VI's choice in that space: rank **{rank} of {w['fitting']}** | TP 4, PP 16, "
           f"DP 2, mb 1, ZeRO-1, 16 nodes | {x['tokens_per_s']:.0f} | "
           f"{pct(x['step_seconds']['bubble'] / x['step_seconds']['total'], 0)} |")
    yield (f"Table VI's layout trains {x['tokens_per_s'] / best['tokens_per_s']:.2f}x as many "
           f"tokens per second as the best of Table V's space")
    yield (f"{pct(first['tokens_per_s'] / x['tokens_per_s'] - 1)} more tokens per second than "
           f"Table VI's")


# ---- docs/planner.md, "The Frontier study's energy estimates" ---------------------------

ENERGY = ("--cluster frontier --seq 2048 --precision fp16 --schedule 1f1b --recompute full "
          "--sequence-parallel=false --hsdp 0 --pipeline-p2p blocking --tokens-per-param 20")
BLOOM = ("--config configs/gpt-tiny.toml --set model.n_layer=40 --set model.d_model=5120 "
         "--set model.n_head=32 --set model.d_ff=20480 --set model.seq_len=2048 --precision bf16 "
         "--cluster gaudi2 --nodes 16 --global-batch 1024 --tp 4 --pp 2 --dp 16 --micro-batch 1 "
         "--schedule 1f1b --zero 0 --recompute none --sequence-parallel=false --attention materialized "
         "--pipeline-p2p blocking --tokens 3.15e11")


def joules(j):
    """As plan prints an energy: four significant digits and an SI prefix."""
    for prefix in ["", "k", "M", "G", "T", "P"]:
        if j < 1000:
            break
        j /= 1000
    return f"{j:.4g} {prefix}J"


def layout_words(l):
    s = f"TP {l['tp']}, PP {l['pp']}"
    if l["dp"] > 1:
        s += f", DP {l['dp']}"
    s += f", mb {l['micro_batch']}"
    if l["zero"]:
        s += f", ZeRO-{l['zero']}"
    return s


def frontier_energy():
    rows = [("22B", "--model gpt-22b --nodes 2 --global-batch 128 --zero 0,1", 284e9, None),
            ("175B", "--model gpt-175b --nodes 8 --global-batch 640 --tp 4 --pp 16 --micro-batch 1",
             17.65e12, 0.3614),
            ("1T", "--model gpt-1t --nodes 64 --global-batch 1600 --tp 8 --pp 64 --micro-batch 1",
             662e12, 0.3196)]
    implied, facts = [], []
    for name, command, published, hfu in rows:
        p = plan(f"{command} {ENERGY}")
        x = p["layouts"][0]
        c = x["campaign"]
        n = c["tokens"] / 20
        six_n = 6 * n * c["tokens"] / published / 1e9
        counted = c["model_flops"] / published / 1e9
        watts = 250 * published / c["energy_j"]
        yield (f"| {name} | {layout_words(x['layout'])} | {six_n:.1f} (6 N), {counted:.1f} "
               f"(plan's count) | {joules(c['energy_j'])} | {joules(published)} | "
               f"{signed_pct(c['energy_j'] / published - 1)} | {watts:.0f} W |")
        if hfu:
            # What the study's measured throughput at its own figure means in watts per GCD:
            # model FLOP/s per GCD (its HFU x the peak x plan's model/hardware ratio) over the
            # model FLOPs per joule.
            model_flops_per_s = hfu * 191.5e12 * x["mfu"] / x["hfu"]
            implied.append(model_flops_per_s / (counted * 1e9))
            facts.append((x["mfu"] / x["hfu"], model_flops_per_s / 1e12, counted))
    ratio, tflops, counted = facts[0]
    yield (f"{pct(ratio, 0)} of it model FLOPs with full recomputation, is {tflops:.1f} model "
           f"TFLOP/s; at {counted:.0f} GFLOP/J that is {implied[0]:.0f} W; the 1T row gives "
           f"{implied[1]:.0f} W)")
    b = plan(BLOOM)["layouts"][0]
    yield (f"predicts {b['campaign']['days']:.2f} days, which is the row's samples/s error "
           f"({signed_pct(b['samples_per_s'] / 114.1 - 1)})")


# ---- docs/architecture.md, "Attention without a T x T matrix" ---------------------------

def attention_block():
    """The CPU attention's query block, as src/kintsugi/backend/cpu/attention_common.hpp sets it
    (a constant of the source, not of the binary's output, quoted by the docs all the same)."""
    with open(os.path.join(ROOT, "src", "kintsugi", "backend", "cpu", "attention_common.hpp")) as f:
        n = re.search(r"constexpr std::int64_t kBlock = (\d+);", f.read()).group(1)
    yield f"processes queries in blocks of {n} rows"
    yield f"with a per-thread scratch of {n} x T scores"


# ---- docs/planner.md, "3D tensor parallelism" and "Perlmutter: AxoNN's 80B GPT" -------------

GPT2_4_NODES = "--model gpt2 --cluster dgx-h100 --nodes 4 --global-batch 64"


def grid_words(l):
    """The docs' form of a layout with or without a grid: "grid 1x4x4, dp 64, mb 32, ZeRO-2
    over 32, full" or "tp 4, pp 16, dp 16, mb 1, ZeRO-1 over 8, sp"."""
    g = l["tensor_grid"]
    words = [f"grid {g[0]}x{g[1]}x{g[2]}" if g else f"tp {l['tp']}"]
    if l["pp"] > 1:
        words.append(f"pp {l['pp']}")
    words += [f"dp {l['dp']}", f"mb {l['micro_batch']}"]
    if l["zero"]:
        words.append(f"ZeRO-{l['zero']}" + (f" over {l['hsdp']}" if l["hsdp"] else ""))
    if l["recompute"] != "none":
        words.append(l["recompute"])
    if l["sequence_parallel"]:
        words.append("sp")
    return ", ".join(words)


def grid_preset_example():
    grid = fastest(f"{GPT2_4_NODES} --tensor-grid any")
    one_d = fastest(f"{GPT2_4_NODES} --tensor-grid none")
    g = grid["layout"]["tensor_grid"]
    yield (f"{g[0]}x{g[1]}x{g[2]} x dp {grid['layout']['dp']} predicted at "
           f"{seconds(step(grid))} against the best 1D layout's {seconds(step(one_d))})")


PERLMUTTER_80B = "--model gpt-80b --cluster perlmutter --nodes 256 --seq 2048 --global-batch"
SPACES_80B = {"1d": "--tensor-grid none",
              "1d_full": "--tensor-grid none --recompute full --sequence-parallel=false",
              "3d": "--tensor-grid any --tp-across-nodes --pp 1",
              "all": "--tensor-grid none any --tp-across-nodes"}


def fastest(command):
    """The first layout of `kintsugi plan COMMAND --json --top 1` (the large searches below
    would print tens of thousands of layouts with plan()'s --top)."""
    return json.loads(run(["plan"] + command.split() + ["--json", "--top", "1"]))["layouts"][0]


def perlmutter_80b():
    def best(batch):
        # The search over everything only at the assumed batch: it takes the longest.
        return {k: fastest(f"{PERLMUTTER_80B} {batch} {v}") for k, v in SPACES_80B.items()
                if k != "all" or batch == 2048}
    yield ("| global batch (sequences) | 1D, the planner's best | 1D, full recomputation, no sp | "
           "3D x dp, no pipeline | 3D / 1D best | 3D / 1D full |")
    rows = {}
    for batch in (1024, 2048, 4096):
        r = rows[batch] = best(batch)
        if "all" in r and step(r["all"]) < step(r["1d"]):
            raise RuntimeError(f"at {batch} the search over everything picks "
                               f"{grid_words(r['all']['layout'])}, not the 1D best")
        cells = [f"{grid_words(r[k]['layout'])}: {seconds(step(r[k]))}" for k in ("1d", "1d_full", "3d")]
        yield (f"| {batch}{' (assumed)' if batch == 2048 else ''} | {' | '.join(cells)} | "
               f"{step(r['3d']) / step(r['1d']):.2f} | {step(r['3d']) / step(r['1d_full']):.2f} |")
    r = rows[2048]
    yield f"At the assumed batch the best 3D layout takes {step(r['3d']) / step(r['1d']):.2f} times"
    yield (f"without sequence parallelism the 3D layout is "
           f"{pct(1 - step(r['3d']) / step(r['1d_full']), 0)} faster")
    yield f"keeps {gb(r['1d'])} GB per GPU"
    yield f"to fit 40 GB; the grid's z"
    yield (f"its **tp** column, {r['3d']['step_seconds']['tp']:.1f} s of "
           f"{step(r['3d']):.1f} s)")
    three = r["3d"]
    published_speedup = 1.26
    ratio = step(r["1d"]) / step(three)
    ratio_full = step(r["1d_full"]) / step(three)
    yield (f"| 3D (AxoNN) against 1D (Megatron-LM): time of 1D / time of 3D | 1.26 | "
           f"{ratio:.2f} (1D best), {ratio_full:.2f} (1D, full recomputation, no sp) | "
           f"{signed_pct(ratio / published_speedup - 1, 0)}, "
           f"{signed_pct(ratio_full / published_speedup - 1, 0)} |")
    devices, peak = 1024, 312e12
    yield (f"| AxoNN's share of the peak | 57% | {pct(three['mfu'])} MFU, {pct(three['hfu'])} HFU "
           f"({grid_words(three['layout'])}) | {signed_pct(three['mfu'] / 0.57 - 1, 0)}, "
           f"{signed_pct(three['hfu'] / 0.57 - 1, 0)} |")
    yield (f"| AxoNN's PFLOP/s on 1,024 GPUs | 182 | {three['mfu'] * devices * peak / 1e15:.0f} "
           f"(model), {three['hfu'] * devices * peak / 1e15:.0f} (hardware) | "
           f"{signed_pct(three['mfu'] * devices * peak / 182e15 - 1, 0)}, "
           f"{signed_pct(three['hfu'] * devices * peak / 182e15 - 1, 0)} |")


CHECKS = [
    ("docs/planner.md", bytes_per_parameter),
    ("docs/planner.md", grid_preset_example),
    ("docs/planner.md", perlmutter_80b),
    ("docs/planner.md", published_runs),
    ("docs/planner.md", published_run_assumptions),
    ("docs/planner.md", moe_published_rows),
    ("docs/planner.md", one_gpu),
    ("docs/planner.md", measured_figures),
    ("docs/planner.md", frontier_ranking),
    ("docs/planner.md", strong_scaling),
    ("docs/planner.md", frontier_energy),
    ("docs/planner.md", table_v),
    ("docs/architecture.md", attention_block),
]

MARK = "checked by CTest `docs.numbers`"  # any case: it may start a sentence or not


def normalize(text):
    return re.sub(r"\s+", " ", text).strip()


def sections(text):
    """(start, end, marked) of each part of a markdown file between headings (outside code)."""
    bounds, in_code, offset = [0], False, 0
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            bounds.append(offset)
        offset += len(line)
    bounds.append(len(text))
    return [(a, b, MARK.lower() in normalize(text[a:b]).lower()) for a, b in zip(bounds, bounds[1:])
            if b > a]


def main():
    global BINARY, ROOT
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    BINARY = os.path.abspath(sys.argv[1])
    ROOT = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else
                           os.path.join(os.path.dirname(__file__), ".."))
    problems, quotes = [], 0
    used = {}
    for doc, check in CHECKS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        parts = [(normalize(text[a:b]), marked) for a, b, marked in sections(text)]
        used.setdefault(doc, [False] * len(parts))
        try:
            expected = list(check())
        except RuntimeError as e:
            problems.append(f"{doc}: {check.__name__}: {e}")
            continue
        for quote in expected:
            quotes += 1
            q = normalize(quote)
            where = [i for i, (part, _) in enumerate(parts) if q in part]
            if not where:
                problems.append(f"{doc}: {check.__name__}: the binary now gives\n    {q}\n  "
                                f"and the docs do not say that (rerun the commands in "
                                f"scripts/check_doc_numbers.py and update the numbers)")
            elif not any(parts[i][1] for i in where):
                problems.append(f"{doc}: {check.__name__}: `{q}` is checked, but its section "
                                f"does not say \"{MARK}\"")
            for i in where:
                used[doc][i] = True
    for doc, flags in used.items():
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        for (a, b, marked), hit in zip(sections(text), flags):
            if marked and not hit:
                heading = text[a:b].splitlines()[0]
                problems.append(f"{doc}: the section \"{heading}\" says \"{MARK}\" but no "
                                f"check quotes it")
    for p in problems:
        print(p)
    print(f"{quotes} quoted numbers checked against {BINARY}, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

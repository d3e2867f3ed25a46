#!/usr/bin/python3
# PyTorch eager twin of bench/bench_step.cpp: the same MoE transformer
# (docs/design.md "The paper's model": pre-LN GQA attention, dense SwiGLU / top-2 MoE with balance and
# z-loss, tied LM head over the padded vocabulary), one training step = zero grads, forward +
# backward with per-block activation checkpointing, grad-norm clip; no optimizer. fp32 on the CPU.
#
# Usage (Debian's torch 1.13): /usr/bin/python3 bench/torch_step.py --model moe10m --threads 2
# Side by side (benchmark): /usr/bin/python3 bench/torch_step.py --compare build/bench/bench_step
#   runs --rounds rounds of one skew and one torch process per model (alternating) and writes
#   bench/results/step_cpu.json: per side the median and range of tokens/s, and the median and range of
#   the per-round ratio skew / torch.
#   Both sides run with OMP_WAIT_POLICY=passive: with libgomp's default spin-wait, idle OpenMP workers
#   and OpenBLAS's pthreads fight for the cores (skew and Debian's torch both link libgomp and
#   openblas-pthread) and both run ~5-10x slower on a 2-core machine.
#   Both sides run on the same OpenBLAS core (OPENBLAS_CORETYPE): the user's, else the one skew
#   chooses (`bench_step --blas-core` with the variable unset; kernels/cpu/process_env.h). Each side
#   records the core it loaded (openblas_get_corename).
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import resource
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

MODELS = {
    # configs/tiny.yaml
    "tiny": dict(vocab=50257, vocab_padded=50304, d=64, blocks=2, moe_blocks=[1], heads=4, kv_heads=2, d_ff=128,
                 max_seq=64, experts=8, d_expert=64, top_k=2, batch=8, seq=32, microbatch=4),
    # bench_step.cpp's MOE10M_YAML
    "moe10m": dict(vocab=50257, vocab_padded=50304, d=128, blocks=2, moe_blocks=[1], heads=4, kv_heads=2,
                   d_ff=1024, max_seq=128, experts=8, d_expert=1024, top_k=2, batch=8, seq=128, microbatch=8),
}


class Block(torch.nn.Module):
    def __init__(self, c, moe):
        super().__init__()
        d, hd = c["d"], c["d"] // c["heads"]
        self.c, self.moe, self.hd = c, moe, hd
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.wq = torch.nn.Linear(d, c["heads"] * hd, bias=False)
        self.wk = torch.nn.Linear(d, c["kv_heads"] * hd, bias=False)
        self.wv = torch.nn.Linear(d, c["kv_heads"] * hd, bias=False)
        self.wo = torch.nn.Linear(c["heads"] * hd, d, bias=False)
        if moe:
            E, h = c["experts"], c["d_expert"]
            self.router = torch.nn.Linear(d, E, bias=False)
            torch.nn.init.zeros_(self.router.weight)
            self.w1 = torch.nn.Parameter(torch.randn(E, h, d) * 0.02)
            self.w2 = torch.nn.Parameter(torch.randn(E, h, d) * 0.02)
            self.w3 = torch.nn.Parameter(torch.randn(E, d, h) * 0.02 / math.sqrt(2 * c["blocks"]))
        else:
            self.f1 = torch.nn.Linear(d, c["d_ff"], bias=False)
            self.f2 = torch.nn.Linear(d, c["d_ff"], bias=False)
            self.f3 = torch.nn.Linear(c["d_ff"], d, bias=False)

    def attention(self, x):
        B, T, d = x.shape
        H, KV, hd = self.c["heads"], self.c["kv_heads"], self.hd
        q = self.wq(x).view(B, T, H, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, KV, hd).transpose(1, 2).repeat_interleave(H // KV, dim=1)
        v = self.wv(x).view(B, T, KV, hd).transpose(1, 2).repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        return self.wo((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, H * hd))

    def moe_ffn(self, x, noise):
        B, T, d = x.shape
        N, E, K = B * T, self.c["experts"], self.c["top_k"]
        xf = x.reshape(N, d)
        logits = self.router(xf)
        z = 1e-4 * (torch.logsumexp(logits, -1) ** 2).mean()
        p = torch.softmax(logits + noise, -1)
        top_p, idx = p.topk(K, dim=-1)
        gates = top_p / top_p.sum(-1, keepdim=True)
        counts = torch.bincount(idx.reshape(-1), minlength=E)
        balance = 0.05 * E * (p.mean(0) * (counts.float() / (N * K))).sum()
        out = torch.zeros_like(xf)
        flat_idx, flat_gate = idx.reshape(-1), gates.reshape(-1)
        tok = torch.arange(N).repeat_interleave(K)
        for e in range(E):
            sel = (flat_idx == e).nonzero(as_tuple=True)[0]
            if sel.numel() == 0:
                continue
            xe = xf[tok[sel]]
            ye = (F.silu(xe @ self.w1[e].T) * (xe @ self.w2[e].T)) @ self.w3[e].T
            out = out.index_add(0, tok[sel], ye * flat_gate[sel, None])
        return out.view(B, T, d), balance + z

    def forward(self, x, noise):
        x = x + self.attention(self.ln1(x))
        h = self.ln2(x)
        if self.moe:
            y, aux = self.moe_ffn(h, noise)
        else:
            y, aux = self.f3(F.silu(self.f1(h)) * self.f2(h)), x.new_zeros(())
        return x + y, aux


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = torch.nn.Parameter(torch.randn(c["vocab_padded"], c["d"]) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(c["max_seq"], c["d"]) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(c, b in c["moe_blocks"]) for b in range(c["blocks"]))
        self.lnf = torch.nn.LayerNorm(c["d"])

    def forward(self, tokens, targets):
        B, T = tokens.shape
        x = self.wte[tokens] + self.wpe[:T]
        aux_total = 0.0
        for blk in self.blocks:
            noise = 0.5 * torch.randn(B * T, self.c["experts"])  # router noise (training)
            x, aux = checkpoint(blk, x, noise)  # per-block activation checkpointing
            aux_total = aux_total + aux
        logits = self.lnf(x) @ self.wte.T
        lm = F.cross_entropy(logits[..., : self.c["vocab"]].reshape(B * T, -1), targets.reshape(-1))
        return lm + aux_total


def cpu_model():
    """The processor as /proc/cpuinfo names it: model name, vendor, family and model number."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown"
    return (f"{info.get('model name', 'unknown')} ({info.get('vendor_id', '?')} family {info.get('cpu family', '?')} "
            f"model {info.get('model', '?')})")


def blas_core():
    """The OpenBLAS core this process loaded (torch links Debian's OpenBLAS), or "unknown"."""
    try:
        f = ctypes.CDLL("libopenblas.so.0").openblas_get_corename
        f.restype = ctypes.c_char_p
        return f().decode()
    except (OSError, AttributeError):
        return "unknown"


def spread(values):
    """Median, minimum and maximum of a list."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def compare(a):
    """Rounds of one skew and one torch process per model, on one OpenBLAS core; medians and
    ranges of tokens/s and of the per-round ratio, peak RSS, to JSON."""
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    env.setdefault("OMP_WAIT_POLICY", "passive")
    core_source = "OPENBLAS_CORETYPE"
    if "OPENBLAS_CORETYPE" not in env:  # the core skew chooses, for both sides
        probe = {k: v for k, v in env.items() if k != "OPENBLAS_CORETYPE"}
        env["OPENBLAS_CORETYPE"] = subprocess.run([a.compare, "--blas-core"], env=probe, capture_output=True,
                                                  text=True, check=True).stdout.strip()
        core_source = "skew's choice (bench_step --blas-core)"
    runs = []
    for model in a.models.split(","):
        for _ in range(a.rounds):
            for cmd in ([a.compare, "--model", model, "--steps", str(a.steps), "--threads", str(a.threads)],
                        [sys.executable, os.path.abspath(__file__), "--model", model, "--steps", str(a.steps),
                         "--threads", str(a.threads)]):
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                runs.append(json.loads(out.strip().splitlines()[-1]))
    res = {"bench": "step_cpu", "commit": runs[0]["commit"], "threads": a.threads,
           "omp_wait_policy": env["OMP_WAIT_POLICY"], "openblas_coretype": env["OPENBLAS_CORETYPE"],
           "openblas_coretype_from": core_source, "cpu": cpu_model(), "rounds": a.rounds, "steps_per_run": a.steps,
           "loadavg_at_end": os.getloadavg(), "cpus": os.cpu_count(), "models": {}}
    for model in a.models.split(","):
        m = {}
        for side in ("skew", "torch"):
            rs = [r for r in runs if r["model"] == model and r["impl"].startswith(side)]
            m[side] = {"impl": rs[0]["impl"], "params": rs[0]["params"], "batch": rs[0]["batch"],
                       "blas_cores": sorted({r.get("blas_core", "unknown") for r in rs}),
                       "tokens_per_s": spread([r["tokens_per_s"] for r in rs]),
                       "tokens_per_s_runs": [r["tokens_per_s"] for r in rs],
                       "loss": rs[0]["loss"],
                       "peak_rss_mib": max(r["peak_rss_mib"] for r in rs)}
        ratios = [s / t for s, t in zip(m["skew"]["tokens_per_s_runs"], m["torch"]["tokens_per_s_runs"])]
        m["ratio_skew_over_torch"] = spread(ratios)
        m["ratio_skew_over_torch_runs"] = ratios
        res["models"][model] = m
        sk, to, r = m["skew"]["tokens_per_s"], m["torch"]["tokens_per_s"], m["ratio_skew_over_torch"]
        print(f"{model}: skew {sk['median']:.0f} tok/s ({sk['min']:.0f}-{sk['max']:.0f}; core "
              f"{','.join(m['skew']['blas_cores'])}), torch {to['median']:.0f} ({to['min']:.0f}-{to['max']:.0f}; core "
              f"{','.join(m['torch']['blas_cores'])}), ratio {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}) over "
              f"{a.rounds} rounds")
    path = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "step_cpu.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="moe10m", choices=sorted(MODELS))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compare", metavar="BENCH_STEP", help="path of bench_step: run both side by side")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", help="--compare's JSON (default bench/results/step_cpu.json)")
    ap.add_argument("--models", default="tiny,moe10m")
    a = ap.parse_args()
    if a.compare:
        return compare(a)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = MODELS[a.model]
    model = Model(c)
    B, T, mb = c["batch"], c["seq"], c["microbatch"]
    accum = B // mb
    g = torch.Generator().manual_seed(1)
    stream = torch.randint(0, c["vocab"], (B * T + 1,), generator=g)

    def step():
        model.zero_grad(set_to_none=False)
        total = 0.0
        for i in range(accum):
            x = stream[i * mb * T: (i + 1) * mb * T + 1]
            loss = model(x[:-1].view(mb, T), x[1:].view(mb, T)) / accum
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        return total

    step()  # warm-up
    secs = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        secs.append(time.perf_counter() - t0)
    med = sorted(secs)[len(secs) // 2]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "unknown"
    print(json.dumps(dict(bench="step", impl=f"torch-{torch.__version__}-eager-fp32", model=a.model, commit=commit or "unknown",
                          params=sum(p.numel() for p in model.parameters()),
                          batch=dict(sequences=B, seq_len=T, microbatch=mb, accum_steps=accum), threads=a.threads,
                          steps_timed=a.steps, step_seconds_median=med, step_seconds=secs, tokens_per_s=B * T / med,
                          peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, loss=loss,
                          blas_core=blas_core())))


if __name__ == "__main__":
    main()

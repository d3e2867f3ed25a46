#!/usr/bin/python3
# Independent PyTorch reference for the whole MoE transformer (docs/design.md "The paper's model"; paper
# Section 4): builds the tiny model from the equations in float64, draws the router noise from its
# own numpy Philox4x32-10, and writes weights, batch, loss parts, logits and every gradient.
#
# Run with Debian's python3 (torch 1.13, numpy):  /usr/bin/python3 tests/reference/model/make_golden.py
# Writes golden_inputs.bin and golden_{noise_off,noise_on,aux,accum2}{,.bf16}.bin next to this script
# (.bf16: the same equations rounded to bf16 where the engine stores bf16), read by
# tests/model/test_golden.cpp. Record format (little-endian): b"SKEWGOLD", u32 count, then per record
# u32 name length, name bytes, u32 ndim, i64 dims[ndim], f32 data.
import math
import os
import struct

import numpy as np
import torch

# ---- the tiny model (must match GOLDEN_YAML in tests/model/test_golden.cpp)
CFG = dict(vocab_size=96, padded_vocab_size=128, d_model=32, n_blocks=3, moe_blocks=[1, 2], n_heads=4,
           n_kv_heads=2, d_ff=64, max_seq_len=16, n_experts=4, d_expert=32, top_k=2, batch=2, seq_len=16,
           seed=42, noise_std=0.5, balance_alpha=0.05, z_coef=1e-4, eps=1e-5)
NOISE_STEP = 7                      # optimizer step keying the router noise in the noisy variant
AUX_Z_COEF, AUX_BALANCE_COEF = 0.1, 0.5  # the "aux" variant: auxiliary losses dominate the router
PROBE_ROWS = [0, 5, 17, 31]         # token rows whose logits are recorded
CONFIG_KEYS = ["vocab_size", "padded_vocab_size", "d_model", "n_blocks", "n_heads", "n_kv_heads", "d_ff",
               "max_seq_len", "n_experts", "d_expert", "top_k", "batch", "seq_len", "seed"]

PHILOX_STREAM_ROUTER_NOISE = 2
MIN_MARGIN = 0.04  # smallest allowed gap between the k-th and (k+1)-th noisy router logit: the
                   # engine's bf16 activations move logits by ~1e-2, so a nearer tie could flip
ROUTING_MARGIN = []


# ---- Philox4x32-10 (kernels/common/philox.h), vectorized over elements
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    M0, M1, W0, W1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57), 0x9E3779B9, 0xBB67AE85
    mask = np.uint64(0xFFFFFFFF)
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in (c0, c1, c2, c3))
    for _ in range(10):
        p0 = M0 * c0
        p1 = M1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & mask
        hi1, lo1 = p1 >> np.uint64(32), p1 & mask
        n0 = hi1 ^ c1 ^ np.uint64(k0)
        n2 = hi0 ^ c3 ^ np.uint64(k1)
        c0, c1, c2, c3 = n0, lo1, n2, lo0
        k0 = (k0 + W0) & 0xFFFFFFFF
        k1 = (k1 + W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def philox_normal(seed, stream, step, tensor, elements):
    """philox_normal of kernels/common/philox.h for an array of element indices (float32)."""
    elements = np.asarray(elements, dtype=np.uint64)
    group = elements >> np.uint64(1)
    k0 = seed & 0xFFFFFFFF
    k1 = ((seed >> 32) ^ ((stream * 0x9E3779B9) & 0xFFFFFFFF)) & 0xFFFFFFFF
    words = philox4x32_10(group & np.uint64(0xFFFFFFFF), group >> np.uint64(32), np.full_like(group, tensor),
                          np.full_like(group, step), k0, k1)
    w = np.stack(words, axis=-1)  # (n, 4)
    sel = (elements & np.uint64(1)).astype(np.int64) * 2
    a = w[np.arange(len(elements)), sel]
    b = w[np.arange(len(elements)), sel + 1]
    u1 = ((a >> np.uint64(8)).astype(np.float32) + np.float32(1.0)) * np.float32(1.0 / 16777216.0)
    u2 = (b >> np.uint64(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    r = np.sqrt(np.float32(-2.0) * np.log(u1))
    return (r * np.cos(np.float32(6.2831853071795864) * u2)).astype(np.float32)


# ---- parameter table (engine/param_table.cpp order; index keys the noise)
def param_table(c):
    d, hd = c["d_model"], c["d_model"] // c["n_heads"]
    q, kv = c["n_heads"] * hd, c["n_kv_heads"] * hd
    t = [("embed.tokens", (c["padded_vocab_size"], d), "bf16"), ("embed.positions", (c["max_seq_len"], d), "bf16")]
    for b in range(c["n_blocks"]):
        p = f"blocks.{b}."
        t += [(p + "ln1.weight", (d,), "f32"), (p + "ln1.bias", (d,), "f32"), (p + "attn.wq", (q, d), "bf16"),
              (p + "attn.wk", (kv, d), "bf16"), (p + "attn.wv", (kv, d), "bf16"), (p + "attn.wo", (d, q), "bf16"),
              (p + "ln2.weight", (d,), "f32"), (p + "ln2.bias", (d,), "f32")]
        if b in c["moe_blocks"]:
            E, h = c["n_experts"], c["d_expert"]
            t += [(p + "moe.router.weight", (E, d), "f32"), (p + "moe.experts.w1", (E, h, d), "bf16"),
                  (p + "moe.experts.w2", (E, h, d), "bf16"), (p + "moe.experts.w3", (E, d, h), "bf16")]
        else:
            t += [(p + "ffn.w1", (c["d_ff"], d), "bf16"), (p + "ffn.w2", (c["d_ff"], d), "bf16"),
                  (p + "ffn.w3", (d, c["d_ff"]), "bf16")]
    t += [("final_ln.weight", (d,), "f32"), ("final_ln.bias", (d,), "f32")]
    return t


def round_bf16(x):
    """Round float32 values to the nearest bf16 (ties to even), returned as float32."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    return u.astype(np.uint32).view(np.float32)


# ---- where the engine rounds to bf16 (model/model.cpp, kernels/cpu/*): the "bf16" reference applies
# these at the same points, the "exact" one makes them identities. Every bf16 activation slot is a
# forward rounding (Rf); every bf16 gradient slot (d_resid, d_ln_out, d_q/k/v, d_attn_out, d_ffn_*,
# d_moe_*, d_final_ln_out) is a backward rounding (Rb); fp32 slots (router logits, probabilities,
# gates, attention lse, LM logits, d_stream, LayerNorm statistics) are not rounded.
def bf16_round64(x):
    """float64 tensor -> nearest bf16 value (ties to even, via fp32 as the engine's stores), float64."""
    return x.float().to(torch.bfloat16).to(x.dtype)


class _RoundForward(torch.autograd.Function):
    """y = bf16(x) forward (an activation stored in bf16), gradient passed unchanged."""
    @staticmethod
    def forward(ctx, x):
        return bf16_round64(x)

    @staticmethod
    def backward(ctx, g):
        return g


class _RoundBackward(torch.autograd.Function):
    """y = x forward; the gradient reaching x is rounded to bf16 (a gradient stored in bf16)."""
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return bf16_round64(g)


class _Fanout(torch.autograd.Function):
    """n copies of x; the gradient is summed in the engine's order into a bf16 buffer, one rounding
    per term: R(R(R(g1) + g2) + g3) (matmul_backward with accumulate_dinp into a bf16 d_ln_out)."""
    @staticmethod
    def forward(ctx, x, n):
        return tuple(x.clone() for _ in range(n))

    @staticmethod
    def backward(ctx, *gs):
        acc = None
        for g in gs:
            if g is None:
                continue
            acc = bf16_round64(g) if acc is None else bf16_round64(acc + g)
        return acc, None


class Rounding:
    """Rounding points: exact (identities, the equations in float64) or bf16 (the engine's)."""
    def __init__(self, bf16):
        self.bf16 = bf16

    def f(self, x):  # activation stored in bf16
        return _RoundForward.apply(x) if self.bf16 else x

    def b(self, x):  # gradient stored in bf16
        return _RoundBackward.apply(x) if self.bf16 else x

    def fb(self, x):  # both: a bf16 activation whose gradient is also a bf16 slot
        return self.b(self.f(x))

    def fan(self, x, n):  # n uses whose gradients accumulate into one bf16 slot
        return _Fanout.apply(x, n) if self.bf16 else tuple(x for _ in range(n))


EXACT = Rounding(False)
BF16 = Rounding(True)


def make_weights(c, rng):
    w = {}
    for name, shape, dt in param_table(c):
        if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "final_ln.weight":
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            v = 0.1 * rng.standard_normal(shape)
        elif name == "embed.tokens":
            v = 0.3 * rng.standard_normal(shape)
        elif name == "embed.positions":
            v = 0.2 * rng.standard_normal(shape)
        elif "router" in name:
            v = 0.3 * rng.standard_normal(shape)
        else:
            v = rng.standard_normal(shape) / math.sqrt(shape[-1])
        v = v.astype(np.float32)
        w[name] = round_bf16(v) if dt == "bf16" else v
    return w


# ---- the model from the equations, float64
def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def attention(x, p, pre, c, r=EXACT):
    B, T, d = x.shape
    H, KV = c["n_heads"], c["n_kv_heads"]
    hd = d // H
    xq, xk, xv = r.fan(x, 3)  # d_ln_out = R(R(R(dq Wq) + dk Wk) + dv Wv)
    q = r.fb(xq @ p[pre + "attn.wq"].T).view(B, T, H, hd).transpose(1, 2)
    k = r.fb(xk @ p[pre + "attn.wk"].T).view(B, T, KV, hd).transpose(1, 2)
    v = r.fb(xv @ p[pre + "attn.wv"].T).view(B, T, KV, hd).transpose(1, 2)
    G = H // KV
    k = k.repeat_interleave(G, dim=1)  # query head h reads KV head h // G (grouped)
    v = v.repeat_interleave(G, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    s = s.masked_fill(mask, float("-inf"))
    o = r.fb(torch.softmax(s, dim=-1) @ v)  # act.attn_out, d_attn_out
    return r.fb(o.transpose(1, 2).reshape(B, T, H * hd) @ p[pre + "attn.wo"].T)  # wo out; d_resid


def swiglu(x, w1, w2, w3, r=EXACT):
    x1, x2 = r.fan(x, 2)  # d_ln_out = R(R(dh1 W1) + dh2 W2)
    h1, h2 = r.fb(x1 @ w1.T), r.fb(x2 @ w2.T)
    return r.fb(r.fb(torch.nn.functional.silu(h1) * h2) @ w3.T)


def moe(x, p, pre, c, noise, r=EXACT):
    B, T, d = x.shape
    N, E, K = B * T, c["n_experts"], c["top_k"]
    xg, xr = r.fan(x.reshape(N, d), 2)  # d_ln_out = R(R(gather of the copies) + d_logits Wr)
    logits = xr @ p[pre + "moe.router.weight"].T  # clean logits (N, E), fp32
    z = c["z_coef"] * (torch.logsumexp(logits, dim=-1) ** 2).mean()
    noisy = logits + noise if noise is not None else logits
    probs = torch.softmax(noisy, dim=-1)
    # top-k by probability, ties to the lower index (stable sort of -p)
    order = np.argsort(-probs.detach().numpy(), axis=-1, kind="stable")[:, :K]
    idx = torch.from_numpy(order.copy())
    chosen = probs.gather(1, idx)
    gates = chosen / chosen.sum(-1, keepdim=True)
    counts = torch.bincount(idx.reshape(-1), minlength=E)
    srt = np.sort(noisy.detach().numpy(), axis=-1)[:, ::-1]
    ROUTING_MARGIN.append(float((srt[:, K - 1] - srt[:, K]).min()))  # gap at the top-k boundary
    f = counts.double() / (N * K)
    balance = c["balance_alpha"] * E * (probs.mean(0) * f).sum()
    W1, W2, W3 = p[pre + "moe.experts.w1"], p[pre + "moe.experts.w2"], p[pre + "moe.experts.w3"]
    out = torch.zeros(N, d, dtype=x.dtype)
    for s in range(K):  # token copy s of every token through its expert idx[:, s]
        e = idx[:, s]
        x1, x2 = r.fan(xg, 2)  # d_moe_in of the copy = R(R(dh1 W1e) + dh2 W2e)
        h1 = r.fb(torch.einsum("nd,nhd->nh", x1, W1[e]))
        h2 = r.fb(torch.einsum("nd,nhd->nh", x2, W2[e]))
        act = r.fb(torch.nn.functional.silu(h1) * h2)
        y = r.fb(torch.einsum("nh,ndh->nd", act, W3[e]))  # act.moe_out; d_moe_out = R(gate * dout)
        out = out + gates[:, s:s + 1] * y
    return r.fb(out).view(B, T, d), balance, z, counts


def forward(p, tokens, targets, c, noise_step, row_offset=0, r=EXACT, wte_head=None):
    """Loss parts of one microbatch. row_offset: its first token's row in the step's batch (token t
    of the microbatch draws router noise at element (row_offset + t)·E + e, as in the engine).
    r: the rounding points (EXACT or BF16). wte_head: the tied embedding as the LM head reads it
    (a separate leaf, so its two gradient terms can be rounded in the engine's order)."""
    B, T = tokens.shape
    N, E, V = B * T, c["n_experts"], c["vocab_size"]
    wte_head = p["embed.tokens"] if wte_head is None else wte_head
    x = r.fb(p["embed.tokens"][tokens] + p["embed.positions"][:T])
    bal_total, z_total, all_counts = 0.0, 0.0, []
    for b in range(c["n_blocks"]):
        pre = f"blocks.{b}."
        x = r.f(x + attention(r.f(layernorm(r.b(x), p[pre + "ln1.weight"], p[pre + "ln1.bias"], c["eps"])), p,
                              pre, c, r))  # act.resid1
        h = r.f(layernorm(r.b(x), p[pre + "ln2.weight"], p[pre + "ln2.bias"], c["eps"]))
        if b in c["moe_blocks"]:
            noise = None
            if noise_step is not None:
                tensor = [n for n, _, _ in param_table(c)].index(pre + "moe.router.weight")
                eps = philox_normal(c["seed"], PHILOX_STREAM_ROUTER_NOISE, noise_step, tensor,
                                    np.arange(row_offset * E, (row_offset + N) * E))
                noise = c["noise_std"] * torch.from_numpy(eps.astype(np.float64)).view(N, E).to(x.dtype)
            y, bal, z, counts = moe(h, p, pre, c, noise, r)
            bal_total, z_total = bal_total + bal, z_total + z
            all_counts.append(counts)
        else:
            y = swiglu(h, p[pre + "ffn.w1"], p[pre + "ffn.w2"], p[pre + "ffn.w3"], r)
        x = r.f(x + y)  # the next block's input
    h = r.fb(layernorm(r.b(x), p["final_ln.weight"], p["final_ln.bias"], c["eps"])).reshape(N, -1)
    logits = h @ wte_head.T  # tied head, (N, Vp), fp32
    masked = logits.clone()
    masked[:, V:] = float("-inf")  # padding columns: probability 0
    lm = torch.nn.functional.cross_entropy(masked, targets.reshape(N))
    return lm, bal_total, z_total, logits, all_counts


def write_records(path, records):
    with open(path, "wb") as f:
        f.write(b"SKEWGOLD")
        f.write(struct.pack("<I", len(records)))
        for name, arr in records:
            arr = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<I", arr.ndim))
            f.write(struct.pack(f"<{arr.ndim}q", *arr.shape))
            f.write(arr.tobytes())


def draw_problem(c):
    """Weights and batch; redrawn while some token sits near a top-k tie in either variant (the
    fixture would then test bf16 rounding, not the model). Returns (weights, tokens, targets, attempt)."""
    for attempt in range(100):
        rng = np.random.default_rng(20260517 + attempt)
        w = make_weights(c, rng)
        B, T, V = c["batch"], c["seq_len"], c["vocab_size"]
        stream = rng.integers(0, V, size=B * T + 1)
        tokens = stream[:-1].reshape(B, T)
        targets = stream[1:].reshape(B, T)
        ROUTING_MARGIN.clear()
        with torch.no_grad():
            p = {n: torch.tensor(v, dtype=torch.float64) for n, v in w.items()}
            for step in (None, NOISE_STEP):
                forward(p, torch.from_numpy(tokens), torch.from_numpy(targets), c, step)
        if min(ROUTING_MARGIN) > MIN_MARGIN:
            break
    return w, tokens, targets, attempt


def main():
    c = CFG
    here = os.path.dirname(os.path.abspath(__file__))
    w, tokens, targets, attempt = draw_problem(c)
    print(f"weights seed 20260517 + {attempt}: smallest top-k logit gap {min(ROUTING_MARGIN):.3f}")
    table = param_table(c)
    inputs = [("config", np.array([c[k] for k in CONFIG_KEYS], dtype=np.float64)),
              ("tokens", tokens), ("targets", targets), ("probe_rows", np.array(PROBE_ROWS)),
              ("noise_step", np.array([NOISE_STEP]))]
    inputs += [("weight." + name, w[name]) for name, _, _ in table]
    write_records(os.path.join(here, "golden_inputs.bin"), inputs)

    # noise_off, noise_on: the paper's coefficients, one microbatch of the whole batch.
    # aux: z_loss_coef 0.1 and balance_loss_coef 0.5, so the auxiliary losses dominate the router's
    #      gradient (a halved balance gradient or a missing z-loss gradient moves it by O(1)).
    # accum2: two microbatches of one sequence each, every loss part weighted 1/2, gradients summed
    #      (the engine runs it with a chunked LM head); its loss record holds the microbatch means.
    variants = [("noise_off", None, c, 1), ("noise_on", NOISE_STEP, c, 1),
                ("aux", NOISE_STEP, dict(c, z_coef=AUX_Z_COEF, balance_alpha=AUX_BALANCE_COEF), 1),
                ("accum2", NOISE_STEP, c, 2)]
    # Each variant twice: "exact" (golden_<variant>.bin, the equations in float64) and "bf16"
    # (golden_<variant>.bf16.bin, float64 rounded to bf16 where the engine stores bf16; its
    # noise_on file also holds grad_bf16.<name>, the gradients as bf16 gradient buffers hold them).
    bf16_params = {name for name, _, dt in table if dt == "bf16"}
    for (variant, step, cv, accum), (suffix, r) in [(v, rr) for v in variants
                                                    for rr in (("", EXACT), (".bf16", BF16))]:
        p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in w.items()}
        wte_head = torch.tensor(w["embed.tokens"], dtype=torch.float64, requires_grad=True)
        B = cv["batch"]
        mb = B // accum
        lm = bal = z = 0.0
        all_counts, all_logits = [], []
        for m in range(accum):
            rows = slice(m * mb, (m + 1) * mb)
            lm_m, bal_m, z_m, logits_m, counts_m = forward(p, torch.from_numpy(tokens[rows]),
                                                           torch.from_numpy(targets[rows]), cv, step,
                                                           row_offset=m * mb * cv["seq_len"], r=r,
                                                           wte_head=wte_head)
            lm, bal, z = lm + lm_m / accum, bal + bal_m / accum, z + z_m / accum
            all_counts.append(counts_m)
            all_logits.append(logits_m)
        total = lm + bal + z
        total.backward()
        logits = torch.cat(all_logits)
        counts = [sum(cm[i] for cm in all_counts) for i in range(len(all_counts[0]))]
        grads = {name: p[name].grad.clone() for name, _, _ in table}
        grads["embed.tokens"] = wte_head.grad + p["embed.tokens"].grad
        out = [("loss", np.array([float(lm), float(bal), float(z), float(total)])),
               ("logits", logits.detach().numpy()[PROBE_ROWS])]
        out += [(f"counts.{i}", cnt.numpy()) for i, cnt in enumerate(counts)]
        out += [("grad." + name, grads[name].numpy()) for name, _, _ in table]
        if r is BF16 and variant == "noise_on":
            # bf16 gradient buffers (fp32 parameters keep fp32 gradients): one rounding per write;
            # the tied embedding is written by the LM head, then += by the embedding backward.
            gb = {n: bf16_round64(g) if n in bf16_params else g for n, g in grads.items()}
            gb["embed.tokens"] = bf16_round64(bf16_round64(wte_head.grad) + p["embed.tokens"].grad)
            out += [("grad_bf16." + name, gb[name].numpy()) for name, _, _ in table]
        write_records(os.path.join(here, f"golden_{variant}{suffix}.bin"), out)
        print(f"{variant}{suffix}: lm {float(lm):.6f} balance {float(bal):.6f} z {float(z):.6e} counts "
              f"{[cnt.tolist() for cnt in counts]}")

if __name__ == "__main__":
    main()

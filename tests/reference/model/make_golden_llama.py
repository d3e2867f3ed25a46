#!/usr/bin/python3
# Independent PyTorch reference for the Llama-family block skew trains with model.positions: rope,
# model.norm: rmsnorm and model.tie_embeddings: false (Mixtral's shape: docs/architectures.md),
# written from the published equations, not from the engine: RMSNorm y = x / sqrt(mean(x^2) + eps) * w;
# rotary positions in the "rotate half" layout (lane i with lane i + d/2, angle pos * theta^(-2i/d))
# on q and k before the scores; an untied LM head; every block an MoE (softmax over all experts,
# top-k, gates renormalized to sum 1, or not: OLMoE); the engine's balance loss (alpha * E * sum_e
# mean_p_e * f_e per MoE block, f = counts / (N k)) and z-loss (coef * mean lse^2) summed over
# blocks. float64 autograd, router noise off. Five variants (VARIANTS), each written as
# golden_<name>_inputs.bin and golden_<name>.bin next to this script (the SKEWGOLD records of
# make_golden.py), read by tests/model/test_golden_llama.cpp:
#   llama  Mixtral's block (GQA, renormalized top-2 of 4).
#   olmoe  OLMoE's (Groeneveld et al. / Muennighoff et al. 2024): MHA, QK-norm over the full q and k
#          widths (q = RMSNorm_{H*hd}(x Wq^T) * w_q, k likewise), top-8 of 16 not renormalized, theta 1e4.
#   qwen3  Qwen3-MoE's (Qwen3 technical report 2025): GQA, head_dim 16 > d_model / n_heads = 8, QK-norm
#          per head (each head's hd lanes normalized, one weight of hd shared by the heads), top-8 of 16
#          renormalized, eps 1e-6, theta 1e6.
#   qwen2  Qwen2's attention biases (q = x Wq^T + b_q, k and v likewise; none on o), GQA, top-2 of 4.
#   qwen2moe  Qwen2-MoE's FFN side: top-4 of 8 routed experts, gates not renormalized, and in every
#          MoE block n_shared_experts always-on SwiGLU experts on the same normalized input x, added as
#          sigmoid(x . w_gate) * sum_j w3_j(silu(w1_j x) * w2_j x) (Qwen2-MoE's shared_expert_gate);
#          written here one by one, the engine stores them as one SwiGLU of the summed width.
# QK-norm is applied after the projections (and biases), before the rotation.
#
# Run with Debian's python3 (torch 1.13, numpy):  /usr/bin/python3 tests/reference/model/make_golden_llama.py
import math
import os
import struct

import numpy as np
import torch

MIN_MARGIN = 0.04  # no token within this of a top-k tie in router logits
# Each must match its YAML in tests/model/golden_fixture.h (checked through the "config" record).
CFG = dict(vocab_size=96, padded_vocab_size=128, d_model=32, n_blocks=2, n_heads=4, n_kv_heads=2, max_seq_len=16,
           n_experts=4, d_expert=32, top_k=2, batch=2, seq_len=16, rope_theta=100.0, eps=1e-5, balance_alpha=0.05,
           z_coef=1e-4, head_dim=0, qk_norm="none", attention_bias=False, normalize_top_k=True)
CONFIG_KEYS = ["vocab_size", "padded_vocab_size", "d_model", "n_blocks", "n_heads", "n_kv_heads", "max_seq_len",
               "n_experts", "d_expert", "top_k", "batch", "seq_len", "rope_theta"]
# the variants' config record adds these (qk_norm as 0 none, 1 full, 2 per_head)
EXTRA_KEYS = ["head_dim", "qk_norm", "attention_bias", "normalize_top_k", "eps"]
QK_NORMS = ["none", "full", "per_head"]
# name: (config, first weights seed, smallest top-k logit gap, config keys recorded). The router's
# weights keep std 0.3 in every variant: a sharper router (std 1) makes the step ill-conditioned (a
# 2^-9 relative perturbation of the weights moves a gradient by 15%), so bf16 rounding alone would
# exceed the limits. Top-8 of 16 leaves smaller gaps between the 8th and 9th logits: 0.02 there.
VARIANTS = {
    "llama": (CFG, 20261203, MIN_MARGIN, CONFIG_KEYS),
    "olmoe": (dict(CFG, n_kv_heads=4, n_experts=16, d_expert=16, top_k=8, rope_theta=1e4, qk_norm="full",
                   normalize_top_k=False), 20270101, 0.02, CONFIG_KEYS + EXTRA_KEYS),
    "qwen3": (dict(CFG, head_dim=16, n_experts=16, d_expert=16, top_k=8, rope_theta=1e6, eps=1e-6,
                   qk_norm="per_head"), 20270201, 0.02, CONFIG_KEYS + EXTRA_KEYS),
    "qwen2": (dict(CFG, rope_theta=1e6, eps=1e-6, attention_bias=True), 20270301, MIN_MARGIN,
              CONFIG_KEYS + EXTRA_KEYS),
    # Qwen2-MoE's FFN side: top-4 of 8 routed experts not renormalized, two shared experts of 24
    # behind the sigmoid gate (y = sigmoid(x . w_gate) * sum_j w3_j(silu(w1_j x) * w2_j x))
    "qwen2moe": (dict(CFG, n_experts=8, d_expert=16, top_k=4, normalize_top_k=False, n_shared_experts=2,
                      d_shared_expert=24, shared_expert_gate=True), 20270114, MIN_MARGIN,
                 CONFIG_KEYS + ["n_shared_experts", "d_shared_expert"]),
}
PROBE_ROWS = [0, 7, 20, 31]
ROUTING_MARGIN = []


def head_dim(c):
    return c["head_dim"] or c["d_model"] // c["n_heads"]


def shared_param_table(c, p):
    """The shared experts of MoE block prefix p, as the engine stores them (one SwiGLU of the summed width)."""
    d, hs = c["d_model"], c.get("n_shared_experts", 0) * c.get("d_shared_expert", 0)
    if hs == 0:
        return []
    t = [(p + "moe.shared_experts.w1", (hs, d), "bf16"), (p + "moe.shared_experts.w2", (hs, d), "bf16"),
         (p + "moe.shared_experts.w3", (d, hs), "bf16")]
    return t + ([(p + "moe.shared_experts.gate", (d,), "f32")] if c.get("shared_expert_gate") else [])


def shared_experts(xf, p, pre, c):
    """sigmoid(x . w_gate) * sum over the shared experts j of w3_j(silu(w1_j x) * w2_j x); xf (N, d)."""
    n, h = c.get("n_shared_experts", 0), c.get("d_shared_expert", 0)
    if n == 0:
        return 0.0
    W1, W2, W3 = p[pre + "moe.shared_experts.w1"], p[pre + "moe.shared_experts.w2"], p[pre + "moe.shared_experts.w3"]
    y = 0.0
    for j in range(n):  # expert j: rows j*h..(j+1)*h of w1 and w2, those columns of w3
        r = slice(j * h, (j + 1) * h)
        y = y + (torch.nn.functional.silu(xf @ W1[r].T) * (xf @ W2[r].T)) @ W3[:, r].T
    if c.get("shared_expert_gate"):
        y = torch.sigmoid(xf @ p[pre + "moe.shared_experts.gate"])[:, None] * y
    return y


def param_table(c):
    """Names, shapes, dtypes in engine/param_table.cpp's order for this architecture (Hugging Face's
    order within attention: q, k, v projections each followed by its bias, o, q_norm, k_norm)."""
    d, hd = c["d_model"], head_dim(c)
    q, kv, E, h = c["n_heads"] * hd, c["n_kv_heads"] * hd, c["n_experts"], c["d_expert"]
    bias = c["attention_bias"]
    t = [("embed.tokens", (c["padded_vocab_size"], d), "bf16")]
    for b in range(c["n_blocks"]):
        p = f"blocks.{b}."
        t += [(p + "ln1.weight", (d,), "f32"), (p + "attn.wq", (q, d), "bf16")]
        t += [(p + "attn.bq", (q,), "f32")] if bias else []
        t += [(p + "attn.wk", (kv, d), "bf16")]
        t += [(p + "attn.bk", (kv,), "f32")] if bias else []
        t += [(p + "attn.wv", (kv, d), "bf16")]
        t += [(p + "attn.bv", (kv,), "f32")] if bias else []
        t += [(p + "attn.wo", (d, q), "bf16")]
        if c["qk_norm"] != "none":
            full = c["qk_norm"] == "full"
            t += [(p + "attn.q_norm.weight", (q if full else hd,), "f32"),
                  (p + "attn.k_norm.weight", (kv if full else hd,), "f32")]
        t += [(p + "ln2.weight", (d,), "f32"), (p + "moe.router.weight", (E, d), "f32"),
              (p + "moe.experts.w1", (E, h, d), "bf16"), (p + "moe.experts.w2", (E, h, d), "bf16"),
              (p + "moe.experts.w3", (E, d, h), "bf16")]
        t += shared_param_table(c, p)
    t += [("final_ln.weight", (d,), "f32"), ("lm_head", (c["padded_vocab_size"], d), "bf16")]
    return t


def round_bf16(x):
    """float32 -> nearest-even bf16, kept as float32 (the engine stores these weights in bf16)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def make_weights(c, rng):
    w = {}
    for name, shape, dt in param_table(c):
        if name.endswith("norm.weight") or name.endswith("ln1.weight") or name.endswith("ln2.weight") or \
                name == "final_ln.weight":
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name in ("embed.tokens", "lm_head"):
            v = 0.3 * rng.standard_normal(shape)
        elif "router" in name:
            v = 0.3 * rng.standard_normal(shape)
        elif name.endswith(("attn.bq", "attn.bk", "attn.bv")):
            v = 0.5 * rng.standard_normal(shape)
        else:
            v = rng.standard_normal(shape) / math.sqrt(shape[-1])
        v = v.astype(np.float32)
        w[name] = round_bf16(v) if dt == "bf16" else v
    return w


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """x (B, heads, T, d): lane i pairs with lane i + d/2, turned by t * theta^(-2i/d)."""
    T, d = x.shape[2], x.shape[3]
    inv = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2.0 / d)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]  # (T, d/2)
    cos, sin = torch.cos(ang).repeat(1, 2), torch.sin(ang).repeat(1, 2)  # (T, d): concat(f, f)
    rot = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)  # rotate_half
    return x * cos + rot * sin


def attention(x, p, pre, c):
    B, T, d = x.shape
    H, KV = c["n_heads"], c["n_kv_heads"]
    hd = head_dim(c)
    q, k, v = x @ p[pre + "attn.wq"].T, x @ p[pre + "attn.wk"].T, x @ p[pre + "attn.wv"].T  # (B, T, heads * hd)
    if c["attention_bias"]:
        q, k, v = q + p[pre + "attn.bq"], k + p[pre + "attn.bk"], v + p[pre + "attn.bv"]
    if c["qk_norm"] == "full":  # OLMoE: over all of q's (k's) lanes
        q = rmsnorm(q, p[pre + "attn.q_norm.weight"], c["eps"])
        k = rmsnorm(k, p[pre + "attn.k_norm.weight"], c["eps"])
    q, k, v = q.view(B, T, H, hd), k.view(B, T, KV, hd), v.view(B, T, KV, hd)
    if c["qk_norm"] == "per_head":  # Qwen3: over each head's hd lanes, one weight for every head
        q = rmsnorm(q, p[pre + "attn.q_norm.weight"], c["eps"])
        k = rmsnorm(k, p[pre + "attn.k_norm.weight"], c["eps"])
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
    k = k.repeat_interleave(H // KV, dim=1)  # query head h reads KV head h // (H / KV)
    v = v.repeat_interleave(H // KV, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return o.transpose(1, 2).reshape(B, T, H * hd) @ p[pre + "attn.wo"].T


def moe(x, p, pre, c):
    B, T, d = x.shape
    N, E, K = B * T, c["n_experts"], c["top_k"]
    xf = x.reshape(N, d)
    logits = xf @ p[pre + "moe.router.weight"].T
    z = c["z_coef"] * (torch.logsumexp(logits, dim=-1) ** 2).mean()
    probs = torch.softmax(logits, dim=-1)
    order = np.argsort(-probs.detach().numpy(), axis=-1, kind="stable")[:, :K]  # ties to the lower index
    idx = torch.from_numpy(order.copy())
    chosen = probs.gather(1, idx)
    gates = chosen / chosen.sum(-1, keepdim=True) if c["normalize_top_k"] else chosen
    srt = np.sort(logits.detach().numpy(), axis=-1)[:, ::-1]
    ROUTING_MARGIN.append(float((srt[:, K - 1] - srt[:, K]).min()))
    counts = torch.bincount(idx.reshape(-1), minlength=E)
    balance = c["balance_alpha"] * E * (probs.mean(0) * counts.double() / (N * K)).sum()
    W1, W2, W3 = p[pre + "moe.experts.w1"], p[pre + "moe.experts.w2"], p[pre + "moe.experts.w3"]
    out = torch.zeros(N, d, dtype=x.dtype)
    for s in range(K):
        e = idx[:, s]
        h1 = torch.einsum("nd,nhd->nh", xf, W1[e])
        h2 = torch.einsum("nd,nhd->nh", xf, W2[e])
        y = torch.einsum("nh,ndh->nd", torch.nn.functional.silu(h1) * h2, W3[e])
        out = out + gates[:, s:s + 1] * y
    out = out + shared_experts(xf, p, pre, c)
    return out.view(B, T, d), balance, z, counts


def forward(p, tokens, targets, c):
    B, T = tokens.shape
    N, V = B * T, c["vocab_size"]
    x = p["embed.tokens"][tokens]  # no position table: rotary positions in attention
    bal_total, z_total, all_counts = 0.0, 0.0, []
    for b in range(c["n_blocks"]):
        pre = f"blocks.{b}."
        x = x + attention(rmsnorm(x, p[pre + "ln1.weight"], c["eps"]), p, pre, c)
        y, bal, z, counts = moe(rmsnorm(x, p[pre + "ln2.weight"], c["eps"]), p, pre, c)
        bal_total, z_total = bal_total + bal, z_total + z
        all_counts.append(counts)
        x = x + y
    h = rmsnorm(x, p["final_ln.weight"], c["eps"]).reshape(N, -1)
    logits = h @ p["lm_head"].T  # untied head
    masked = logits.clone()
    masked[:, V:] = float("-inf")
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


def make_variant(name, c, seed0, min_margin, config_keys, here):
    for attempt in range(500):
        rng = np.random.default_rng(seed0 + attempt)
        w = make_weights(c, rng)
        stream = rng.integers(0, c["vocab_size"], size=c["batch"] * c["seq_len"] + 1)
        tokens = stream[:-1].reshape(c["batch"], c["seq_len"])
        targets = stream[1:].reshape(c["batch"], c["seq_len"])
        ROUTING_MARGIN.clear()
        with torch.no_grad():
            forward({n: torch.tensor(v, dtype=torch.float64) for n, v in w.items()}, torch.from_numpy(tokens),
                    torch.from_numpy(targets), c)
        if min(ROUTING_MARGIN) > min_margin:
            break
    print(f"{name}: weights seed {seed0} + {attempt}: smallest top-k logit gap {min(ROUTING_MARGIN):.3f}")
    table = param_table(c)
    record = {k: c[k] for k in config_keys}
    if "qk_norm" in record:
        record["qk_norm"] = QK_NORMS.index(record["qk_norm"])
    inputs = [("config", np.array([float(record[k]) for k in config_keys], dtype=np.float64)), ("tokens", tokens),
              ("targets", targets), ("probe_rows", np.array(PROBE_ROWS))]
    inputs += [("weight." + n, w[n]) for n, _, _ in table]
    write_records(os.path.join(here, f"golden_{name}_inputs.bin"), inputs)

    p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in w.items()}
    lm, bal, z, logits, counts = forward(p, torch.from_numpy(tokens), torch.from_numpy(targets), c)
    total = lm + bal + z
    total.backward()
    out = [("loss", np.array([float(lm), float(bal), float(z), float(total)])),
           ("logits", logits.detach().numpy()[PROBE_ROWS])]
    out += [(f"counts.{i}", cnt.numpy()) for i, cnt in enumerate(counts)]
    out += [("grad." + n, p[n].grad.numpy()) for n, _, _ in table]
    write_records(os.path.join(here, f"golden_{name}.bin"), out)
    print(f"{name}: lm {float(lm):.6f} balance {float(bal):.6f} z {float(z):.6e} counts "
          f"{[cnt.tolist() for cnt in counts]}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, (c, seed0, min_margin, config_keys) in VARIANTS.items():
        make_variant(name, c, seed0, min_margin, config_keys, here)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Golden fixtures for skew's optimizers, written from the equations (not from the engine).

Five steps of each optimizer (SkewAdam per paper Algorithm 1 with docs/design.md's clamps, AdamW with
PyTorch semantics, Lion, Muon paper form and Keller Jordan form, HF Adafactor, GaLore reference and
paper form) on four tensors -- a bf16 matrix, an fp32 vector, a bf16 expert stack (each expert its
own W) and an fp32 router -- with fixed gradients and a varying lr_t. Write-back: round to nearest
(bf16 params), exact fp32 (fp32 params); weight decay fused in fp32: W*(1 - lr*wd) - lr*U.
Equations: docs/optimizers.md sections 2-7.

Run with Debian's python3 and python3-torch (1.13):  /usr/bin/python3 make_golden.py
Writes optim_golden.json next to this script.
"""
import json
import math
import os

import torch

torch.manual_seed(20261129)
F = torch.float32
STEPS = 5
LRS = [0.01, 0.02, 0.03, 0.02, 0.01]  # lr_t per step (the schedule lives in the trainer)

# name, shape, dtype, tier, role, index
PARAMS = [
    ("mat", [8, 6], "bf16", "backbone", "attn_q", 0),
    ("vec", [6], "f32", "backbone", "norm_weight", 1),
    ("experts", [2, 4, 6], "bf16", "experts", "expert_w1", 2),
    ("router", [3, 6], "f32", "router", "router", 3),
]


def bf16_round(x):
    return x.to(torch.bfloat16).to(F)


def init_weights():
    w = {}
    for name, shape, dt, *_ in PARAMS:
        t = torch.randn(shape, dtype=F)
        w[name] = bf16_round(t) if dt == "bf16" else t
    return w


def init_grads():
    g = []
    for s in range(STEPS):
        gs = {}
        for name, shape, *_ in PARAMS:
            scale = 10.0 ** (-(s % 3))  # gradients of varying magnitude
            gs[name] = torch.randn(shape, dtype=F) * scale
        g.append(gs)
    return g


def is_vector(shape):
    return len(shape) == 1


def matrices(t):
    """View a 2-D or 3-D tensor as (E, rows, cols)."""
    return t.reshape(-1, t.shape[-2], t.shape[-1])


def write_back(w, u, lr_update, keep, dt):
    x = w * keep - lr_update * u
    return bf16_round(x) if dt == "bf16" else x


def rms(u):
    return torch.sqrt(torch.mean(u.double() * u.double())).float()


# ---- configs (shared with the C++ test through the fixture)

CONFIGS = {
    "skewadam": dict(type="skewadam", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1,
                     tiers={"backbone": ["fp32", "factored", 0.1], "experts": ["none", "factored", 0.1],
                            "router": ["none", "full", 0.0]}),
    "skewadam-expert-momentum": dict(type="skewadam", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1,
                                     tiers={"backbone": ["fp32", "factored", 0.1], "experts": ["fp32", "factored", 0.1],
                                            "router": ["none", "full", 0.0]}),
    "skewadam-factored-router": dict(type="skewadam", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1,
                                     tiers={"backbone": ["fp32", "factored", 0.1], "experts": ["none", "factored", 0.1],
                                            "router": ["none", "factored", 0.0]}),
    "uniform": dict(type="skewadam", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1,
                    tiers={"backbone": ["fp32", "factored", 0.1], "experts": ["fp32", "factored", 0.1],
                           "router": ["fp32", "factored", 0.0]}),
    "adamw": dict(type="adamw", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1),
    "lion": dict(type="lion", lr=0.02, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1),
    "muon": dict(type="muon", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, muon_momentum=0.95,
                 ns_steps=3, nesterov=False, shape_scale=False, ema_momentum=False, adam_lr=1e-3),
    "muon-kj": dict(type="muon-kj", lr=0.02, beta1=0.9, beta2=0.95, eps=1e-10, weight_decay=0.1, muon_momentum=0.95,
                    ns_steps=5, nesterov=True, shape_scale=True, ema_momentum=True, adam_lr=3e-4),
    "adafactor": dict(type="adafactor", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1,
                      decay_rate=-0.8, eps1=1e-30, update_clip=1.0),
    "galore": dict(type="galore", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.1, rank=4,
                   update_proj_gap=2, galore_scale=0.25),
    # eps 1e-4: at step 1 the off-diagonal entries of P^T G Q are zero up to fp32 rounding (~1e-7);
    # with eps 1e-8 their m/(sqrt(v)+eps) would be O(1) noise that no two implementations share, with
    # 1e-4 it is ~1e-4 (vs ~3 on the diagonal), so the projected weights can be compared too.
    "galore-paper": dict(type="galore-paper", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-4, weight_decay=0.0, rank=8),
}


def param_wd(cfg, p):
    name, shape, dt, tier, role, idx = p
    if cfg["type"] == "skewadam":
        return cfg["tiers"][tier][2]
    return 0.0 if tier == "router" else cfg["weight_decay"]


# ---- SkewAdam (Algorithm 1)

def skewadam(cfg, w, grads):
    b1, b2, eps = cfg["beta1"], cfg["beta2"], cfg["eps"]
    st = {p[0]: {} for p in PARAMS}
    for s in range(STEPS):
        t, lr = s + 1, LRS[s]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        for p in PARAMS:
            name, shape, dt, tier, role, idx = p
            mom, second, wd = cfg["tiers"][tier]
            if second == "factored" and is_vector(shape):
                second = "full"
            g = grads[s][name]
            S = st[name]
            if mom == "fp32":
                S.setdefault("MOMENTUM", torch.zeros(shape, dtype=F))
                S["MOMENTUM"] = b1 * S["MOMENTUM"] + (1 - b1) * g
                num = (math.sqrt(bc2) / bc1) * S["MOMENTUM"]
            else:
                num = math.sqrt(bc2) * g
            if second == "full":
                S.setdefault("SECOND_FULL", torch.zeros(shape, dtype=F))
                S["SECOND_FULL"] = b2 * S["SECOND_FULL"] + (1 - b2) * g * g
                u = num / torch.sqrt(torch.clamp(S["SECOND_FULL"], min=eps))
                u = u / torch.clamp(rms(u), min=1.0)
            else:
                gm, nm = matrices(g), matrices(num)
                E, rows, cols = gm.shape
                S.setdefault("SECOND_ROW", torch.zeros(E, rows, dtype=F))
                S.setdefault("SECOND_COL", torch.zeros(E, cols, dtype=F))
                S["SECOND_ROW"] = b2 * S["SECOND_ROW"] + (1 - b2) * (gm * gm).mean(-1)
                S["SECOND_COL"] = b2 * S["SECOND_COL"] + (1 - b2) * (gm * gm).mean(-2)
                R, C = S["SECOND_ROW"], S["SECOND_COL"]
                rbar = torch.clamp(R.mean(-1, keepdim=True), min=1e-15)
                row = torch.sqrt(torch.clamp(R / rbar, min=eps))
                col = torch.sqrt(torch.clamp(C, min=eps))
                um = nm / row[:, :, None] / col[:, None, :]
                for e in range(E):  # each expert matrix its own RMS clip
                    um[e] = um[e] / torch.clamp(rms(um[e]), min=1.0)
                u = um.reshape(shape)
            w[name] = write_back(w[name], u, lr, 1 - lr * wd, dt)
    return st


# ---- AdamW (PyTorch), Lion

def adamw(cfg, w, grads):
    b1, b2, eps = cfg["beta1"], cfg["beta2"], cfg["eps"]
    st = {p[0]: {} for p in PARAMS}
    for s in range(STEPS):
        t, lr = s + 1, LRS[s]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        for p in PARAMS:
            name, shape, dt = p[0], p[1], p[2]
            g, S = grads[s][name], st[name]
            S.setdefault("MOMENTUM", torch.zeros(shape, dtype=F))
            S.setdefault("SECOND_FULL", torch.zeros(shape, dtype=F))
            S["MOMENTUM"] = b1 * S["MOMENTUM"] + (1 - b1) * g
            S["SECOND_FULL"] = b2 * S["SECOND_FULL"] + (1 - b2) * g * g
            u = (S["MOMENTUM"] / bc1) / (torch.sqrt(S["SECOND_FULL"]) / math.sqrt(bc2) + eps)
            w[name] = write_back(w[name], u, lr, 1 - lr * param_wd(cfg, p), dt)
    return st


def lion(cfg, w, grads):
    b1, b2 = cfg["beta1"], cfg["beta2"]
    st = {p[0]: {} for p in PARAMS}
    for s in range(STEPS):
        lr = LRS[s]
        for p in PARAMS:
            name, shape, dt = p[0], p[1], p[2]
            g, S = grads[s][name], st[name]
            S.setdefault("MOMENTUM", torch.zeros(shape, dtype=F))
            u = torch.sign(b1 * S["MOMENTUM"] + (1 - b1) * g)
            S["MOMENTUM"] = b2 * S["MOMENTUM"] + (1 - b2) * g
            w[name] = write_back(w[name], u, lr, 1 - lr * param_wd(cfg, p), dt)
    return st


# ---- Muon

def newton_schulz(G, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.clone()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / (torch.linalg.norm(X.double()).float() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    return X.T if transposed else X


def muon(cfg, w, grads):
    b1, b2, eps, mu = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["muon_momentum"]
    st = {p[0]: {} for p in PARAMS}
    for s in range(STEPS):
        t, lr = s + 1, LRS[s]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        for p in PARAMS:
            name, shape, dt, tier, role, idx = p
            g, S = grads[s][name], st[name]
            if is_vector(shape) or role in ("router", "token_embedding", "position_embedding"):
                lr_adam = cfg["adam_lr"] * lr / cfg["lr"]
                S.setdefault("ADAM_M", torch.zeros(shape, dtype=F))
                S.setdefault("ADAM_V", torch.zeros(shape, dtype=F))
                S["ADAM_M"] = b1 * S["ADAM_M"] + (1 - b1) * g
                S["ADAM_V"] = b2 * S["ADAM_V"] + (1 - b2) * g * g
                u = (S["ADAM_M"] / bc1) / (torch.sqrt(S["ADAM_V"]) / math.sqrt(bc2) + eps)
                w[name] = write_back(w[name], u, lr_adam, 1.0, dt)
                continue
            S.setdefault("MOMENTUM", torch.zeros(shape, dtype=F))
            B = matrices(S["MOMENTUM"]).clone()
            gm = matrices(g)
            O = torch.zeros_like(gm)
            for e in range(gm.shape[0]):
                if cfg["ema_momentum"]:
                    B[e] = B[e] + (1 - mu) * (gm[e] - B[e])
                    u0 = gm[e] + mu * (B[e] - gm[e]) if cfg["nesterov"] else B[e]
                else:
                    B[e] = mu * B[e] + gm[e]
                    u0 = gm[e] + mu * B[e] if cfg["nesterov"] else B[e]
                O[e] = newton_schulz(u0, cfg["ns_steps"])
                if cfg["shape_scale"]:
                    O[e] = O[e] * math.sqrt(max(1.0, gm.shape[1] / gm.shape[2]))
            S["MOMENTUM"] = B.reshape(shape)
            w[name] = write_back(w[name], O.reshape(shape), lr, 1 - lr * param_wd(cfg, p), dt)
    return st


# ---- Adafactor (HF, beta1=None, scale_parameter=False, relative_step=False)

def adafactor(cfg, w, grads):
    eps1, clip_d = cfg["eps1"], cfg["update_clip"]
    st = {p[0]: {} for p in PARAMS}
    for s in range(STEPS):
        t, lr = s + 1, LRS[s]
        beta = 1.0 - t ** cfg["decay_rate"]
        for p in PARAMS:
            name, shape, dt = p[0], p[1], p[2]
            g, S = grads[s][name], st[name]
            q = g * g + eps1
            if is_vector(shape):
                S.setdefault("SECOND_FULL", torch.zeros(shape, dtype=F))
                S["SECOND_FULL"] = beta * S["SECOND_FULL"] + (1 - beta) * q
                u = g * torch.rsqrt(S["SECOND_FULL"])
                u = u / torch.clamp(rms(u) / clip_d, min=1.0)
            else:
                gm, qm = matrices(g), matrices(q)
                E, rows, cols = gm.shape
                S.setdefault("SECOND_ROW", torch.zeros(E, rows, dtype=F))
                S.setdefault("SECOND_COL", torch.zeros(E, cols, dtype=F))
                S["SECOND_ROW"] = beta * S["SECOND_ROW"] + (1 - beta) * qm.mean(-1)
                S["SECOND_COL"] = beta * S["SECOND_COL"] + (1 - beta) * qm.mean(-2)
                R, C = S["SECOND_ROW"], S["SECOND_COL"]
                r = torch.rsqrt(R / R.mean(-1, keepdim=True))
                c = torch.rsqrt(C)
                um = gm * r[:, :, None] * c[:, None, :]
                for e in range(E):
                    um[e] = um[e] / torch.clamp(rms(um[e]) / clip_d, min=1.0)
                u = um.reshape(shape)
            w[name] = write_back(w[name], u, lr, 1 - lr * param_wd(cfg, p), dt)
    return st


# ---- GaLore

def canon_cols(U):
    """Flip each column so that its largest-magnitude entry is positive; returns signs."""
    idx = torch.argmax(torch.abs(U), dim=0)
    sg = torch.sign(U[idx, torch.arange(U.shape[1])])
    sg[sg == 0] = 1
    return sg


def galore_target(cfg, p):
    name, shape, dt, tier, role, idx = p
    if is_vector(shape):
        return False
    if cfg["type"] == "galore-paper":
        return True
    return role.startswith("attn") or role.startswith("ffn") or role.startswith("expert")


def galore(cfg, w, grads):
    b1, b2, eps = cfg["beta1"], cfg["beta2"], cfg["eps"]
    paper = cfg["type"] == "galore-paper"
    st = {p[0]: {} for p in PARAMS}
    for s in range(STEPS):
        t, lr = s + 1, LRS[s]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        for p in PARAMS:
            name, shape, dt, tier, role, idx = p
            g, S = grads[s][name], st[name]
            wd = param_wd(cfg, p)
            if not galore_target(cfg, p):
                S.setdefault("ADAM_M", torch.zeros(shape, dtype=F))
                S.setdefault("ADAM_V", torch.zeros(shape, dtype=F))
                S["ADAM_M"] = b1 * S["ADAM_M"] + (1 - b1) * g
                S["ADAM_V"] = b2 * S["ADAM_V"] + (1 - b2) * g * g
                if paper:
                    u = S["ADAM_M"] / (torch.sqrt(S["ADAM_V"]) + eps)
                else:
                    u = (S["ADAM_M"] / bc1) / (torch.sqrt(S["ADAM_V"]) / math.sqrt(bc2) + eps)
                w[name] = write_back(w[name], u, lr, 1 - lr * wd, dt)
                continue
            gm = matrices(g)
            E, m, n = gm.shape
            r = min(cfg["rank"], m, n)
            tall = m >= n
            if paper:
                pshape, qshape, sshape = (E, m, r), (E, r, n), (E, r, r)
            else:
                pshape = (E, r, n) if tall else (E, m, r)
                sshape = (E, m, r) if tall else (E, r, n)
            if "GALORE_P" not in S:
                S["GALORE_P"] = torch.zeros(pshape, dtype=F)
                if paper:
                    S["GALORE_Q"] = torch.zeros(qshape, dtype=F)
                S["GALORE_M"] = torch.zeros(sshape, dtype=F)
                S["GALORE_V"] = torch.zeros(sshape, dtype=F)
            upd = torch.zeros_like(gm)
            for e in range(E):
                G = gm[e]
                P = S["GALORE_P"][e]
                if paper:
                    if t == 1:  # computed once; r = min(m, n) here, so the randomized SVD is exact
                        U, Sv, Vh = torch.linalg.svd(G.double(), full_matrices=False)
                        U, V = U[:, :r], Vh[:r, :].T
                        sg = canon_cols(U)
                        S["GALORE_P"][e] = (U * sg).float()
                        S["GALORE_Q"][e] = (V * sg).T.float()
                    Ue, Vt = S["GALORE_P"][e], S["GALORE_Q"][e]
                    Gt = Ue.T @ G @ Vt.T
                    S["GALORE_M"][e] = b1 * S["GALORE_M"][e] + (1 - b1) * Gt
                    S["GALORE_V"][e] = b2 * S["GALORE_V"][e] + (1 - b2) * Gt * Gt
                    N = S["GALORE_M"][e] / (torch.sqrt(S["GALORE_V"][e]) + eps)
                    upd[e] = Ue @ N @ Vt
                else:
                    if (t - 1) % cfg["update_proj_gap"] == 0:
                        U, Sv, Vh = torch.linalg.svd(G.double(), full_matrices=False)
                        if tall:
                            Pn = Vh[:r, :]
                            sg = canon_cols(Pn.T)
                            S["GALORE_P"][e] = (Pn * sg[:, None]).float()
                        else:
                            Pn = U[:, :r]
                            S["GALORE_P"][e] = (Pn * canon_cols(Pn)).float()
                    P = S["GALORE_P"][e]
                    Gt = G @ P.T if tall else P.T @ G
                    S["GALORE_M"][e] = b1 * S["GALORE_M"][e] + (1 - b1) * Gt
                    S["GALORE_V"][e] = b2 * S["GALORE_V"][e] + (1 - b2) * Gt * Gt
                    N = S["GALORE_M"][e] / (torch.sqrt(S["GALORE_V"][e]) + eps)
                    upd[e] = N @ P if tall else P @ N
            alpha = lr if paper else lr * math.sqrt(bc2) / bc1 * cfg["galore_scale"]
            x = w[name] * (1 - lr * wd) - alpha * upd.reshape(shape)
            w[name] = bf16_round(x) if dt == "bf16" else x
    return st


RUN = {"skewadam": skewadam, "skewadam-expert-momentum": skewadam, "skewadam-factored-router": skewadam,
       "uniform": skewadam, "adamw": adamw, "lion": lion, "muon": muon, "muon-kj": muon,
       "adafactor": adafactor, "galore": galore, "galore-paper": galore}


def flat(t):
    return [float(v) for v in t.reshape(-1).tolist()]


def main():
    w0 = init_weights()
    grads = init_grads()
    out = {
        "steps": STEPS,
        "lrs": LRS,
        "params": [dict(name=n, shape=s, dtype=d, tier=t, role=r, index=i) for n, s, d, t, r, i in PARAMS],
        "weights0": {k: flat(v) for k, v in w0.items()},
        "grads": [{k: flat(v) for k, v in gs.items()} for gs in grads],
        "optimizers": {},
    }
    for name, cfg in CONFIGS.items():
        w = {k: v.clone() for k, v in w0.items()}
        st = RUN[name](cfg, w, grads)
        out["optimizers"][name] = dict(
            config=cfg,
            weights={k: flat(v) for k, v in w.items()},
            state={pn: {k: flat(v) for k, v in S.items()} for pn, S in st.items()},
        )
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()

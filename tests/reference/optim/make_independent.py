#!/usr/bin/python3
# Optimizer trajectories derived from the published algorithms, written from the papers, the
# reference code they cite and docs/optimizers.md's statement of conventions, without reading skew's
# C++ (unlike make_golden.py, the Python twin written alongside it):
#   Adafactor: Shazeer & Stern 2018, Algorithm 4 (factored second moment, per matrix) and 5
#     (vectors), update clipping (Section 6) and the decay schedule beta2_t = 1 - t^-0.8 (Section
#     7.2), with HuggingFace transformers' conventions as docs/optimizers.md §5 states them:
#     Q = G² + eps1 averaged over rows/columns (means, not sums), no relative step, no parameter
#     scaling, no momentum, W·(1 - lr·wd) - lr·U; a 3-D expert tensor is factored per expert over
#     its last two dims and clipped per expert too (each expert matrix by its own RMS(U)). HF on one
#     3-D parameter would clip by the whole tensor's RMS; docs §5 does not say which, skew clips per
#     expert (the first version of this script clipped by the whole tensor and differed by up to
#     3.5e-3 in the expert weights after 5 steps; matrices and vectors agreed to 2e-7).
#   Muon: Keller Jordan's muon.py: zeropower_via_newtonschulz5 (quintic (3.4445, -4.7750, 2.0315),
#     X / (||X||_F + 1e-7), tall matrices transposed, batched over experts) and muon_update (EMA
#     momentum lerp, Nesterov lerp, sqrt(max(1, rows/cols)) scale), W·(1 - lr·wd) - lr·O; and the
#     paper's form of docs/optimizers.md §4.3 (sum momentum, no Nesterov, 3 steps, no scale, no
#     decay). In float64 (Keller Jordan runs it in bf16; skew's CPU step runs fp32, docs §4.3).
#   GaLore: Zhao et al. 2024, Algorithm 2 (Adam in the projected space) with jiaweizzhao/GaLore's
#     GaLoreProjector ("std": rows >= cols projects on the right with Vh[:r], else on the left with
#     U[:, :r]; refreshed when the pre-increment step count is a multiple of update_proj_gap; the
#     Adam state is kept across refreshes) and its AdamW (bias correction folded into the step size,
#     eps added to sqrt(v), scale applied on projection back); singular vectors sign-normalized
#     (largest-magnitude entry positive) and weight decay applied before the update, as docs §6.1
#     states skew's conventions.
#
# Run: /usr/bin/python3 tests/reference/optim/make_independent.py   (numpy only; writes
# independent_golden.json next to this script, read by tests/optim/test_independent.cpp)
import json
import math
import os

import numpy as np

STEPS = 5
LRS = [0.02, 0.018, 0.015, 0.01, 0.005]

# name, shape, role, tier (fp32 weights throughout: the comparison is of the update, not rounding)
MATRICES = [("attn.wide", (12, 20), "attn_q", "backbone"),
            ("ffn.tall", (20, 12), "ffn_w1", "backbone"),
            ("experts.w1", (2, 12, 20), "expert_w1", "experts")]
VECTOR = ("ln.weight", (20,), "norm_weight", "backbone")


def make_problem(params, seed):
    rng = np.random.default_rng(seed)
    w0 = {n: (rng.standard_normal(s) * 0.5).astype(np.float32) for n, s, _, _ in params}
    grads = []
    for _ in range(STEPS):
        # a low-rank drift plus noise: the projected and orthogonalized directions are well defined
        step = {}
        for n, s, _, _ in params:
            g = rng.standard_normal(s) * 0.1
            if len(s) >= 2:
                u = rng.standard_normal(s[:-1] + (1,))
                v = rng.standard_normal(s[:-2] + (1, s[-1]))
                g = g + 0.3 * u * v
            step[n] = g.astype(np.float32)
        grads.append(step)
    return w0, grads


# ---- Adafactor
def adafactor(cfg, params, w0, grads):
    eps1, clip, decay = cfg["eps1"], cfg["update_clip"], cfg["decay_rate"]
    w = {n: w0[n].astype(np.float64) for n in w0}
    st = {}
    for n, s, _, _ in params:
        st[n] = {"row": np.zeros(s[:-1]), "col": np.zeros(s[:-2] + (s[-1],))} if len(s) >= 2 else {"v": np.zeros(s)}
    traj = []
    for t in range(1, STEPS + 1):
        lr = LRS[t - 1]
        beta2t = 1.0 - t ** decay
        for n, s, _, _ in params:
            g = grads[t - 1][n].astype(np.float64)
            q = g * g + eps1
            if len(s) >= 2:
                r, c = st[n]["row"], st[n]["col"]
                r[...] = beta2t * r + (1 - beta2t) * q.mean(axis=-1)
                c[...] = beta2t * c + (1 - beta2t) * q.mean(axis=-2)
                vhat = r[..., :, None] * c[..., None, :] / r.mean(axis=-1)[..., None, None]
                u = g / np.sqrt(vhat)
            else:
                v = st[n]["v"]
                v[...] = beta2t * v + (1 - beta2t) * q
                u = g / np.sqrt(v)
            if len(s) == 3:  # per expert matrix (see the header)
                rms = np.sqrt((u * u).mean(axis=(-2, -1), keepdims=True))
                u = u / np.maximum(1.0, rms / clip)
            else:
                rms = math.sqrt((u * u).mean())
                u = u / max(1.0, rms / clip)
            w[n] = w[n] * (1 - lr * cfg["weight_decay"]) - lr * u
        traj.append({n: w[n].copy() for n in w})
    state = {n: {"SECOND_ROW" if k == "row" else "SECOND_COL" if k == "col" else "SECOND_FULL": v
                 for k, v in st[n].items()} for n in st}
    return traj, state


# ---- Muon
def zeropower_via_newtonschulz5(G, steps):
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.copy()
    tall = G.shape[-2] > G.shape[-1]
    if tall:
        X = np.swapaxes(X, -1, -2)
    X = X / (np.sqrt((X * X).sum(axis=(-2, -1), keepdims=True)) + 1e-7)
    for _ in range(steps):
        A = X @ np.swapaxes(X, -1, -2)
        B = b * A + c * A @ A
        X = a * X + B @ X
    if tall:
        X = np.swapaxes(X, -1, -2)
    return X


def muon(cfg, params, w0, grads):
    mu, kj = cfg["muon_momentum"], cfg["type"] == "muon-kj"
    w = {n: w0[n].astype(np.float64) for n in w0}
    buf = {n: np.zeros(s) for n, s, _, _ in params}
    traj = []
    for t in range(1, STEPS + 1):
        lr = LRS[t - 1]
        for n, s, _, _ in params:
            g = grads[t - 1][n].astype(np.float64)
            if kj:  # momentum.lerp_(grad, 1 - beta); update = grad.lerp_(momentum, beta)
                buf[n] = buf[n] + (1 - mu) * (g - buf[n])
                upd = g + mu * (buf[n] - g) if cfg["nesterov"] else buf[n]
            else:  # the paper's form: B <- mu*B + G, no Nesterov
                buf[n] = mu * buf[n] + g
                upd = buf[n]
            o = zeropower_via_newtonschulz5(upd, cfg["ns_steps"])
            if cfg["shape_scale"]:
                o = o * max(1.0, s[-2] / s[-1]) ** 0.5
            w[n] = w[n] * (1 - lr * cfg["weight_decay"]) - lr * o
        traj.append({n: w[n].copy() for n in w})
    return traj, {n: {"MOMENTUM": buf[n]} for n in buf}


# ---- GaLore (reference form)
def sign_normalize(vecs, axis):
    """Flip each singular vector (columns when axis=0, rows when axis=1) so that its entry of
    largest magnitude is positive."""
    idx = np.argmax(np.abs(vecs), axis=axis)
    if axis == 0:
        signs = np.sign(vecs[idx, np.arange(vecs.shape[1])])
        return vecs * signs[None, :]
    signs = np.sign(vecs[np.arange(vecs.shape[0]), idx])
    return vecs * signs[:, None]


def galore(cfg, params, w0, grads):
    b1, b2, eps, gap = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["update_proj_gap"]
    w = {n: w0[n].astype(np.float64) for n in w0}
    mats = {}  # (param, expert) -> dict(P, right, m, v)
    traj = []
    for t in range(1, STEPS + 1):
        lr = LRS[t - 1]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        step_size = lr * math.sqrt(bc2) / bc1
        for n, s, _, _ in params:
            g_all = grads[t - 1][n].astype(np.float64).reshape((-1,) + s[-2:])
            new_w = w[n].reshape((-1,) + s[-2:]) * (1 - lr * cfg["weight_decay"])
            for e in range(g_all.shape[0]):
                g = g_all[e]
                rows, cols = g.shape
                r = min(cfg["rank"], rows, cols)
                key = (n, e)
                right = rows >= cols
                if key not in mats or (t - 1) % gap == 0:  # projector.project(grad, step) before step += 1
                    U, _, Vh = np.linalg.svd(g, full_matrices=False)
                    P = sign_normalize(Vh[:r, :], 1) if right else sign_normalize(U[:, :r], 0)
                    st = mats.setdefault(key, {"m": None, "v": None})
                    st["P"] = P
                st = mats[key]
                P = st["P"]
                lg = g @ P.T if right else P.T @ g
                if st["m"] is None:
                    st["m"], st["v"] = np.zeros_like(lg), np.zeros_like(lg)
                st["m"] = b1 * st["m"] + (1 - b1) * lg
                st["v"] = b2 * st["v"] + (1 - b2) * lg * lg
                ng = st["m"] / (np.sqrt(st["v"]) + eps)
                back = (ng @ P if right else P @ ng) * cfg["galore_scale"]
                new_w[e] = new_w[e] - step_size * back
            w[n] = new_w.reshape(s)
        traj.append({n: w[n].copy() for n in w})
    return traj, {}


def tolist(d):
    """Flattened values, 9 significant digits (exact for fp32 inputs, 1e-9 relative for float64)."""
    return {n: [float(f"{x:.9g}") for x in np.asarray(v, dtype=np.float64).reshape(-1)] for n, v in d.items()}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = {"steps": STEPS, "lrs": LRS, "optimizers": {}}
    cases = [
        ("adafactor", adafactor, MATRICES + [VECTOR],
         dict(type="adafactor", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, decay_rate=-0.8,
              eps1=1e-30, update_clip=1.0)),
        ("muon-kj", muon, MATRICES,
         dict(type="muon-kj", lr=0.02, beta1=0.9, beta2=0.95, eps=1e-10, weight_decay=0.1, muon_momentum=0.95,
              ns_steps=5, nesterov=True, shape_scale=True, ema_momentum=True, adam_lr=1e-3)),
        ("muon", muon, MATRICES,
         dict(type="muon", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, muon_momentum=0.95,
              ns_steps=3, nesterov=False, shape_scale=False, ema_momentum=False, adam_lr=1e-3)),
        ("galore", galore, MATRICES,
         dict(type="galore", lr=0.02, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.1, rank=4,
              update_proj_gap=2, galore_scale=0.25)),
    ]
    for i, (name, fn, params, cfg) in enumerate(cases):
        w0, grads = make_problem(params, 20260519 + i)
        traj, state = fn(cfg, params, w0, grads)
        out["optimizers"][name] = {
            "config": cfg,
            "params": [dict(name=n, shape=list(s), role=role, tier=tier, index=k)
                       for k, (n, s, role, tier) in enumerate(params)],
            "weights0": tolist(w0),
            "grads": [tolist(g) for g in grads],
            "weights": [tolist(wt) for wt in traj],
            "state": {n: tolist(sd) for n, sd in state.items()},
        }
        print(f"{name}: {len(params)} tensors, final |W - W0| max "
              f"{max(float(np.abs(traj[-1][n] - w0[n]).max()) for n in w0):.4f}")
    with open(os.path.join(here, "independent_golden.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()

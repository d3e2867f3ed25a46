#!/usr/bin/python3
"""Optimizer fixtures independent of skew's code: AdamW from torch.optim.AdamW itself, Lion from
the equations of its paper (Chen et al. 2023, Algorithm 2), written here without skew's code.

Two trajectories of STEPS steps with fixed gradients and a varying lr_t:

* "nearest": a bf16 matrix, an fp32 vector, a bf16 expert stack and an fp32 router. torch keeps an
  fp32 tensor per parameter; after every optimizer.step() a bf16 parameter is rounded to nearest
  even (what skew's `rounding: nearest` writes back), fp32 parameters are left as torch computed
  them. The router is in a group with weight_decay 0 (docs/optimizers.md: the baselines never decay
  the router). Weights after every step and the final exp_avg / exp_avg_sq are written.
* "stochastic": one bf16 matrix of weights in +-[1, 2) (one ulp = 2^-7 everywhere) with updates
  well below half an ulp, stepped by torch in fp32 without rounding. Unbiased stochastic rounding
  must follow this fp32 trajectory in expectation; rounding to nearest would freeze the weights.

Run with Debian's python3 and python3-torch (1.13):  /usr/bin/python3 make_adamw_torch.py
* "lion": the "nearest" parameters, weights and gradients stepped by Lion (its own lr_t), same
  write-back.

Writes adamw_torch_golden.json next to this script.
"""
import json
import os

import torch

torch.manual_seed(20261201)
F = torch.float32
STEPS = 6
LRS = [0.01, 0.02, 0.03, 0.02, 0.015, 0.01]
BETAS = (0.9, 0.95)
EPS = 1e-8
WD = 0.1

# name, shape, dtype, tier, role, index
PARAMS = [
    ("mat", [8, 6], "bf16", "backbone", "attn_q", 0),
    ("vec", [6], "f32", "backbone", "norm_weight", 1),
    ("experts", [2, 4, 6], "bf16", "experts", "expert_w1", 2),
    ("router", [3, 6], "f32", "router", "router", 3),
]
SR_SHAPE = [16, 64]
LION_LRS = [1e-3, 2e-3, 3e-3, 2e-3, 1.5e-3, 1e-3]
LION_BETAS = (0.9, 0.99)
SR_LRS = [1e-3] * STEPS


def bf16_round(x):
    return x.to(torch.bfloat16).to(F)


def flat(t):
    return [float(v) for v in t.reshape(-1).tolist()]


def nearest_trajectory():
    weights0, tensors = {}, {}
    for name, shape, dt, *_ in PARAMS:
        t = torch.randn(shape, dtype=F)
        t = bf16_round(t) if dt == "bf16" else t
        weights0[name] = flat(t)
        tensors[name] = torch.nn.Parameter(t.clone())
    grads = []
    for s in range(STEPS):
        scale = 10.0 ** (-(s % 3))
        grads.append({name: torch.randn(shape, dtype=F) * scale for name, shape, *_ in PARAMS})
    decay = [tensors[name] for name, _, _, tier, *_ in PARAMS if tier != "router"]
    no_decay = [tensors["router"]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LRS[0], betas=BETAS, eps=EPS, foreach=False)
    trajectory = []
    for s in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = LRS[s]
        for name, *_ in PARAMS:
            tensors[name].grad = grads[s][name].clone()
        opt.step()
        with torch.no_grad():
            for name, shape, dt, *_ in PARAMS:
                if dt == "bf16":
                    tensors[name].copy_(bf16_round(tensors[name]))
        trajectory.append({name: flat(tensors[name].detach()) for name, *_ in PARAMS})
    state = {}
    for name, *_ in PARAMS:
        st = opt.state[tensors[name]]
        state[name] = {"exp_avg": flat(st["exp_avg"]), "exp_avg_sq": flat(st["exp_avg_sq"])}
    return {
        "params": [{"name": n, "shape": s, "dtype": d, "tier": t, "role": r, "index": i} for n, s, d, t, r, i in PARAMS],
        "lrs": LRS,
        "weights0": weights0,
        "grads": [{n: flat(g[n]) for n in g} for g in grads],
        "weights": trajectory,
        "state": state,
    }


class LionPaper(torch.optim.Optimizer):
    """Lion, Chen et al. 2023 ("Symbolic Discovery of Optimization Algorithms"), Algorithm 2:
    c = b1*m + (1-b1)*g; theta <- theta - lr*(sign(c) + wd*theta); m <- b2*m + (1-b2)*g."""

    def __init__(self, params, lr, betas, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                st = self.state[p]
                if "exp_avg" not in st:
                    st["exp_avg"] = torch.zeros_like(p)
                m, g = st["exp_avg"], p.grad
                c = b1 * m + (1 - b1) * g
                p.mul_(1 - lr * wd).add_(torch.sign(c), alpha=-lr)
                m.mul_(b2).add_(g, alpha=1 - b2)


def lion_trajectory(start):
    """The nearest trajectory's parameters, weights and gradients, stepped by LionPaper."""
    tensors = {name: torch.nn.Parameter(torch.tensor(start["weights0"][name], dtype=F).view(shape))
               for name, shape, *_ in PARAMS}
    decay = [tensors[name] for name, _, _, tier, *_ in PARAMS if tier != "router"]
    opt = LionPaper([{"params": decay, "weight_decay": WD}, {"params": [tensors["router"]], "weight_decay": 0.0}],
                    lr=LION_LRS[0], betas=LION_BETAS, weight_decay=WD)
    trajectory = []
    for s in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = LION_LRS[s]
        for name, shape, *_ in PARAMS:
            tensors[name].grad = torch.tensor(start["grads"][s][name], dtype=F).view(shape)
        opt.step()
        with torch.no_grad():
            for name, shape, dt, *_ in PARAMS:
                if dt == "bf16":
                    tensors[name].copy_(bf16_round(tensors[name]))
        trajectory.append({name: flat(tensors[name].detach()) for name, *_ in PARAMS})
    state = {name: {"exp_avg": flat(opt.state[tensors[name]]["exp_avg"])} for name, *_ in PARAMS}
    return {"lrs": LION_LRS, "config": {"lr": LION_LRS[0], "beta1": LION_BETAS[0], "beta2": LION_BETAS[1],
                                        "weight_decay": WD}, "weights": trajectory, "state": state}


def stochastic_trajectory():
    sign = torch.where(torch.rand(SR_SHAPE) < 0.5, -1.0, 1.0)
    w0 = bf16_round(sign * (1.0 + torch.rand(SR_SHAPE, dtype=F)))
    w0 = torch.where(w0.abs() >= 2.0, sign * 1.9921875, w0)  # stay inside the binade [1, 2)
    p = torch.nn.Parameter(w0.clone())
    opt = torch.optim.AdamW([p], lr=SR_LRS[0], betas=BETAS, eps=EPS, weight_decay=WD, foreach=False)
    grads, trajectory = [], []
    for s in range(STEPS):
        g = torch.randn(SR_SHAPE, dtype=F)
        grads.append(flat(g))
        for group in opt.param_groups:
            group["lr"] = SR_LRS[s]
        p.grad = g.clone()
        opt.step()  # fp32, unrounded: the expectation of an unbiased rounding
        trajectory.append(flat(p.detach()))
    return {"shape": SR_SHAPE, "lrs": SR_LRS, "weights0": flat(w0), "grads": grads, "weights": trajectory}


def main():
    out = {
        "generator": "torch.optim.AdamW " + torch.__version__,
        "steps": STEPS,
        "config": {"lr": LRS[0], "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS, "weight_decay": WD},
        "nearest": nearest_trajectory(),
        "stochastic": stochastic_trajectory(),
    }
    out["lion"] = lion_trajectory(out["nearest"])
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adamw_torch_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", path)


if __name__ == "__main__":
    main()

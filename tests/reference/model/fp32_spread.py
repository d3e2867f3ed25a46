#!/usr/bin/python3
# How far an fp32 implementation of the bf16-rounding reference (make_golden.py, BF16 rounding
# points) can land from its float64 run: the same model evaluated in torch float32 with the d_model
# channels randomly permuted (every GEMM and LayerNorm then sums in another order, as another BLAS
# or CPU would), gradients un-permuted and compared per tensor. This is the spread the tolerances
# of tests/model/test_golden.cpp against golden_<variant>.bf16.bin must cover: fp32 rounding flips
# an occasional bf16 rounding, whose one-ulp step then propagates down the backward.
#
# Run: /usr/bin/python3 tests/reference/model/fp32_spread.py [orderings, default 40]
# Measured (40 orderings): worst tensor 4.1e-3 (noise_off), 3.1e-3 (aux), 1.7e-6 (noise_on);
# router tensors 9e-4, 2.4e-4, 1.9e-7; LM loss <= 1e-7 relative.
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402


def d_axes(name):
    """Axes of a parameter that run over d_model."""
    if name in ("embed.tokens", "embed.positions") or name.endswith(
            ("attn.wq", "attn.wk", "attn.wv", "ffn.w1", "ffn.w2", "router.weight", "experts.w3")):
        return [1]
    if "ln" in name or name.endswith(("attn.wo", "ffn.w3")):
        return [0]
    if name.endswith(("experts.w1", "experts.w2")):
        return [2]
    raise KeyError(name)


def permute(arr, name, perm):
    for ax in d_axes(name):
        arr = np.take(arr, perm, axis=ax)
    return arr


def grads(w, tokens, targets, cv, step, dtype, perm):
    p = {n: torch.tensor(permute(v, n, perm), dtype=dtype, requires_grad=True) for n, v in w.items()}
    wh = torch.tensor(permute(w["embed.tokens"], "embed.tokens", perm), dtype=dtype, requires_grad=True)
    lm, bal, z, _, _ = mg.forward(p, torch.from_numpy(tokens), torch.from_numpy(targets), cv, step, r=mg.BF16,
                                  wte_head=wh)
    (lm + bal + z).backward()
    g = {n: p[n].grad.double().numpy() for n in p}
    g["embed.tokens"] = g["embed.tokens"] + wh.grad.double().numpy()
    inv = np.argsort(perm)
    return {n: permute(v, n, inv) for n, v in g.items()}, float(lm)


def main():
    n_orders = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    c = mg.CFG
    w, tokens, targets, _ = mg.draw_problem(c)
    rng = np.random.default_rng(5)
    d = c["d_model"]
    for name, step, cv in [("noise_off", None, c), ("noise_on", mg.NOISE_STEP, c),
                           ("aux", mg.NOISE_STEP, dict(c, z_coef=mg.AUX_Z_COEF, balance_alpha=mg.AUX_BALANCE_COEF))]:
        ref, lm_ref = grads(w, tokens, targets, cv, step, torch.float64, np.arange(d))
        worst = router = lm_err = 0.0
        for _ in range(n_orders):
            g, lm = grads(w, tokens, targets, cv, step, torch.float32, rng.permutation(d))
            e = {n: float(np.linalg.norm(g[n] - ref[n]) / max(np.linalg.norm(ref[n]), 1e-30)) for n in ref}
            worst = max(worst, max(e.values()))
            router = max(router, max(v for n, v in e.items() if "router" in n))
            lm_err = max(lm_err, abs(lm - lm_ref) / lm_ref)
        print(f"{name}: over {n_orders} fp32 orderings, worst tensor {worst:.2g}, router {router:.2g}, "
              f"LM loss {lm_err:.2g} relative")


if __name__ == "__main__":
    main()

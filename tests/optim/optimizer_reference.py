"""PyTorch's own optimizers, schedulers and clipping on a fixed float64 problem, for test_optim.

Reads one case per line on stdin, as `key=value` words (optim, lr, momentum, nesterov, weight_decay,
beta1, beta2, eps, schedule, warmup, step_size, gamma, min_lr, clip, steps), and prints one line per
case: `lrs <the lr of each step>` then `params <the parameters after the last step>`.
"""
import sys

import torch


def problem():
    """The same least-squares problem as test_optim.cpp: parameters p, loss ||A p - b||^2."""
    a = torch.linspace(-1.0, 1.0, 24, dtype=torch.float64).reshape(4, 6).cos()
    b = torch.linspace(0.5, -0.5, 4, dtype=torch.float64)
    p = torch.linspace(-0.3, 0.4, 6, dtype=torch.float64).requires_grad_()
    return a, b, p


def optimizer(case, params):
    lr = float(case["lr"])
    wd = float(case["weight_decay"])
    if case["optim"] == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(case["momentum"]),
                               nesterov=case["nesterov"] == "true", weight_decay=wd)
    betas = (float(case["beta1"]), float(case["beta2"]))
    cls = torch.optim.Adam if case["optim"] == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=betas, eps=float(case["eps"]), weight_decay=wd)


def scheduler(case, opt, steps):
    warmup = int(case["warmup"])
    if warmup > 0:
        assert case["schedule"] == "constant", "warmup is compared with a constant schedule only"
        return torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0,
                                                 total_iters=warmup - 1)
    if case["schedule"] == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=int(case["step_size"]), gamma=float(case["gamma"]))
    if case["schedule"] == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=float(case["min_lr"]))
    return torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0)


def run(case):
    a, b, p = problem()
    steps = int(case["steps"])
    opt = optimizer(case, [p])
    sched = scheduler(case, opt, steps)
    lrs = []
    for _ in range(steps):
        opt.zero_grad()
        ((a @ p - b) ** 2).sum().backward()
        if float(case["clip"]) > 0:
            torch.nn.utils.clip_grad_norm_([p], float(case["clip"]))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    print("lrs " + " ".join(repr(x) for x in lrs))
    print("params " + " ".join(repr(x) for x in p.detach().tolist()))


for line in sys.stdin:
    if line.strip():
        run(dict(word.split("=", 1) for word in line.split()))

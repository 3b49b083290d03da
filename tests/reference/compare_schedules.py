#!/usr/bin/python3
"""Runs schedule_reference, which writes the learning rate and the momentum every optimizer step of
a torchbus run used, recomputes them with PyTorch's torch.optim.lr_scheduler and compares them step
by step: relative error at most 1e-9 (float64 both sides).
Usage: compare_schedules.py PATH/TO/schedule_reference WORK_DIR"""

import json
import os
import subprocess
import sys
import warnings

import torch

TOLERANCE = 1e-9


def make_optimizer(kind, base_lr):
    """The optimizer torchbus ran on: SGD with momentum 0.9 or Adam (default betas)."""
    parameter = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    if kind == "sgd":
        return torch.optim.SGD([parameter], lr=base_lr, momentum=0.9)
    return torch.optim.Adam([parameter], lr=base_lr)


def make_scheduler(spec, optimizer):
    """torch.optim.lr_scheduler.<class>(optimizer, **kwargs); SequentialLR with its schedulers."""
    cls = getattr(torch.optim.lr_scheduler, spec["class"])
    if spec["class"] == "SequentialLR":
        inner = [make_scheduler(s, optimizer) for s in spec["schedulers"]]
        return cls(optimizer, schedulers=inner, milestones=spec["milestones"])
    return cls(optimizer, **spec["kwargs"])


def momentum_of(group):
    return group["betas"][0] if "betas" in group else group["momentum"]


def pytorch_values(case):
    """The learning rate and momentum of every step with PyTorch's scheduler."""
    optimizer = make_optimizer(case["optimizer"], case["base_lr"])
    scheduler = make_scheduler(case["torch"], optimizer)
    metrics = case["metrics"]
    lrs, momenta = [], []
    for step in range(len(case["lr"])):
        group = optimizer.param_groups[0]
        lrs.append(group["lr"])
        momenta.append(momentum_of(group))
        optimizer.step()
        if metrics:
            scheduler.step(metrics[step])  # ReduceLROnPlateau, once per epoch
        else:
            scheduler.step()
    return lrs, momenta


def close(a, b):
    return a == b or abs(a - b) <= TOLERANCE * max(abs(a), abs(b))


def compare(case):
    """Failure lines for one case (empty when every step agrees)."""
    expected_lr, expected_momentum = pytorch_values(case)
    failures = []
    for what, ours, theirs in (("lr", case["lr"], expected_lr),
                               ("momentum", case["momentum"], expected_momentum)):
        if len(ours) != len(theirs):
            failures.append(f"{case['name']}: {len(ours)} {what} values, PyTorch {len(theirs)}")
            continue
        for step, (a, b) in enumerate(zip(ours, theirs)):
            if not close(a, b):
                failures.append(f"{case['name']}: step {step} {what} torchbus {a!r} PyTorch {b!r}"
                                f" (rel err {abs(a - b) / max(abs(b), 1e-300):.3g})")
    return failures


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    os.makedirs(sys.argv[2], exist_ok=True)
    results = os.path.join(sys.argv[2], "schedules.json")
    subprocess.run([sys.argv[1], results], check=True)
    warnings.simplefilter("ignore")  # SequentialLR's step(0) deprecation warning
    with open(results, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    failures = []
    for case in cases:
        case_failures = compare(case)
        status = "ok" if not case_failures else f"{len(case_failures)} steps differ"
        print(f"{case['name']}: {len(case['lr'])} steps vs torch.optim.lr_scheduler."
              f"{case['torch']['class']}: {status}")
        failures += case_failures
    for line in failures:
        print("FAIL", line)
    print(f"{len(cases)} cases, {len(failures)} differences (PyTorch {torch.__version__})")
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main())

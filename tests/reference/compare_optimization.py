#!/usr/bin/python3
"""Runs optimization_reference, which writes what torchbus' EMA, SWA (with update_batch_norm) and
the trainer's gradient clipping produced on a small model with a batch-norm layer, and recomputes
it with PyTorch on the same inputs:
- EMA: torch.optim.swa_utils.AveragedModel with the EMA average `decay * avg + (1 - decay) * new`
  (use_buffers as average_buffers; integer buffers are copied, as documented) in float64, fed the
  raw weights torchbus had after every optimizer step;
- SWA: AveragedModel's default equal-weight average in float64, fed the raw weights of every epoch
  end from the start epoch on; then torch.optim.swa_utils.update_bn on the same batch-norm data
  with the averaged weights torchbus put in the model; the learning rate of every step with
  torch.optim.swa_utils.SWALR (relative error 1e-9);
- clipping: torch.nn.utils.clip_grad_norm_ / clip_grad_value_ on the gradients the backward left.
Every tensor of every step agrees within a relative error of 1e-6 (max |torchbus - PyTorch| over
the largest |PyTorch| value of the tensor; float32 against float64 for the averages), integer
tensors exactly. Usage: compare_optimization.py PATH/TO/optimization_reference WORK_DIR"""

import json
import math
import os
import subprocess
import sys
import warnings

import torch
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

TOLERANCE = 1e-6


def make_model():
    """The model of optimization_reference.cpp (its weights come from the recorded tensors)."""
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 3))


def tensors_of(record, tag):
    """The tensors recorded under "<tag>/<name>", by name."""
    prefix = tag + "/"
    return {key[len(prefix):]: value for key, value in record.items() if key.startswith(prefix)}


def load(model, tensors):
    """Copies `tensors` (every parameter and buffer of `model`) into it, in its dtypes."""
    state = model.state_dict()
    if set(tensors) != set(state):
        raise ValueError(f"recorded {sorted(tensors)}, the model has {sorted(state)}")
    model.load_state_dict({name: tensors[name].to(state[name].dtype) for name in state})


def relative_error(ours, theirs):
    """max |ours - theirs| / max |theirs| (0 when both are 0); inf when integers differ."""
    if not theirs.is_floating_point():
        return 0.0 if torch.equal(ours, theirs) else float("inf")
    difference = (ours.double() - theirs.double()).abs().max().item()
    scale = theirs.double().abs().max().item()
    return 0.0 if difference == 0 else difference / scale if scale > 0 else float("inf")


class Comparison:
    """The failures and the largest relative error of one case."""

    def __init__(self, case):
        self.case = case
        self.failures = []
        self.worst = 0.0
        self.tensors = 0

    def tensors_agree(self, where, ours, theirs):
        """Compares torchbus' tensors with PyTorch's, by name."""
        if set(ours) != set(theirs):
            self.failures.append(f"{where}: torchbus has {sorted(ours)}, PyTorch {sorted(theirs)}")
            return
        for name, expected in theirs.items():
            error = relative_error(ours[name], expected)
            self.tensors += 1
            self.worst = max(self.worst, error)
            if error > TOLERANCE:
                self.failures.append(f"{where} {name}: relative error {error:.3g}\n"
                                     f"  torchbus {ours[name].flatten()[:6].tolist()}\n"
                                     f"  PyTorch  {expected.flatten()[:6].tolist()}")


def averaged_tensors(averaged_model, with_buffers):
    """The averages of an AveragedModel, named as the model's parameters (and buffers)."""
    named = dict(averaged_model.module.named_parameters())
    if with_buffers:
        named.update(averaged_model.module.named_buffers())
    return {name: tensor.detach() for name, tensor in named.items()}


def compare_ema(case, record, comparison):
    decay = case["decay"]

    def ema(average, new, _count):
        return decay * average + (1 - decay) * new if average.is_floating_point() else new

    model = make_model().double()
    load(model, tensors_of(record, "initial"))
    average = AveragedModel(model, avg_fn=ema, use_buffers=case["average_buffers"])
    average.update_parameters(model)  # the first average: a copy of the weights before step 1
    for step in range(1, case["steps"] + 1):
        load(model, tensors_of(record, f"step{step}/raw"))
        if step % case["every_n_steps"] == 0:
            average.update_parameters(model)
        expected = averaged_tensors(average, case["average_buffers"])
        comparison.tensors_agree(f"step {step} average", tensors_of(record, f"step{step}/average"),
                                 expected)
    if case["apply_at_end"]:
        final = tensors_of(record, "final")
        expected = averaged_tensors(average, case["average_buffers"])
        comparison.tensors_agree("model after fit (apply_at_end)",
                                 {name: final[name] for name in expected}, expected)


def swalr_rates(case):
    """The learning rate of every epoch with SWALR built at the start epoch: torchbus' averaged
    epoch start + k runs with SWALR's rate after k + 1 steps (the annealing starts in the first
    averaged epoch; PyTorch's example steps SWALR after each averaged epoch, one epoch later)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))],
                                lr=case["base_lr"], momentum=0.9)
    rates = []
    for epoch in range(case["epochs"]):
        if epoch == case["start_epoch"]:
            scheduler = SWALR(optimizer, swa_lr=case["swa_lr"],
                              anneal_epochs=case["annealing_epochs"],
                              anneal_strategy=case["annealing"])
        if epoch >= case["start_epoch"]:
            optimizer.step()
            scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])
    return rates


def compare_swa(case, record, comparison):
    rates = swalr_rates(case)
    if not case["lr"]:
        comparison.failures.append("no learning rate recorded")
    for step, (epoch, lr) in enumerate(case["lr"]):
        if not math.isclose(lr, rates[epoch], rel_tol=1e-9):
            comparison.failures.append(f"step {step} (epoch {epoch}) lr: torchbus {lr!r},"
                                       f" SWALR {rates[epoch]!r}")
    model = make_model().double()
    average = AveragedModel(model)  # equal weights: avg + (new - avg) / (n + 1)
    for epoch in range(case["start_epoch"], case["epochs"]):
        load(model, tensors_of(record, f"epoch{epoch}/raw"))
        average.update_parameters(model)
        comparison.tensors_agree(f"epoch {epoch} average",
                                 tensors_of(record, f"epoch{epoch}/average"),
                                 averaged_tensors(average, with_buffers=False))
    final = tensors_of(record, "final")
    expected = averaged_tensors(average, with_buffers=False)
    comparison.tensors_agree("model after fit: parameters",
                             {name: final[name] for name in expected}, expected)
    # update_bn on the averaged weights torchbus put in the model, from the last epoch's buffers.
    bn_model = make_model()
    last = tensors_of(record, f"epoch{case['epochs'] - 1}/raw")
    load(bn_model, {name: final[name] if name in expected else last[name] for name in last})
    bn_data = [record[f"bn_data/{i}"] for i in range(case["bn_batches"])]
    bn_model.train(False)
    update_bn(bn_data, bn_model)
    buffers = {name: tensor for name, tensor in bn_model.named_buffers()}
    comparison.tensors_agree("model after fit: update_bn's buffers",
                             {name: final[name] for name in buffers}, buffers)


def compare_clip(case, record, comparison):
    clipped_steps = 0
    for step in range(case["steps"]):
        raw = tensors_of(record, f"step{step}/raw_grad")
        parameters = {}
        for name, gradient in raw.items():
            parameter = torch.nn.Parameter(torch.zeros_like(gradient))
            parameter.grad = gradient.clone()
            parameters[name] = parameter
        if case["clip_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(parameters.values(), case["clip_norm"])
        else:
            torch.nn.utils.clip_grad_value_(parameters.values(), case["clip_value"])
        comparison.tensors_agree(f"step {step} gradients",
                                 tensors_of(record, f"step{step}/clipped_grad"),
                                 {name: p.grad for name, p in parameters.items()})
        clipped_steps += any(not torch.equal(parameter.grad, raw[name])
                             for name, parameter in parameters.items())
    if (clipped_steps > 0) != case["clips"]:
        meant = "some" if case["clips"] else "none"
        comparison.failures.append(f"PyTorch clips {clipped_steps} of {case['steps']} steps;"
                                   f" the case is meant to clip {meant}")


COMPARE = {"ema": compare_ema, "swa": compare_swa, "clip": compare_clip}


def comparator_can_fail():
    """The comparison flags a difference of 1e-5 relative and an integer off by one."""
    comparison = Comparison({})
    base = torch.tensor([1.0, -2.0, 0.5])
    comparison.tensors_agree("self-check", {"a": base * (1 + 1e-5), "b": torch.tensor([3])},
                             {"a": base, "b": torch.tensor([4])})
    return len(comparison.failures) == 2


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    warnings.simplefilter("ignore")  # SWALR's "lr_scheduler.step() before optimizer.step()"
    directory = os.path.join(sys.argv[2], "optimization")
    subprocess.run([sys.argv[1], directory], check=True)
    with open(os.path.join(directory, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    failures = []
    for case in cases:
        record = torch.load(os.path.join(directory, case["name"] + ".pt"))
        comparison = Comparison(case)
        COMPARE[case["kind"]](case, record, comparison)
        if comparison.tensors == 0:
            comparison.failures.append("nothing compared")
        status = "ok" if not comparison.failures else f"{len(comparison.failures)} differ"
        print(f"{case['name']}: {comparison.tensors} tensors, largest relative error "
              f"{comparison.worst:.2g}: {status}")
        failures += [f"{case['name']}: {line}" for line in comparison.failures]
    if not comparator_can_fail():
        failures.append("self-check: the comparison did not flag perturbed tensors")
    for line in failures:
        print("FAIL", line)
    print(f"{len(cases)} cases, {len(failures)} differences (PyTorch {torch.__version__})")
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main())

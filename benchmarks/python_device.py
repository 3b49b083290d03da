#!/usr/bin/env python3
"""The training step of torchbus_device_bench in Python: the raw PyTorch loop (foreach optimizers,
zero_grad(set_to_none=True)) and, when it is installed, Lightning's Trainer (no logger, no
checkpoints, no progress bar), on the same MLP 784-256-256-10, batch 256, data on the device,
float32, SGD (momentum 0.9) and Adam. Prints the same table and name=value lines
(python_<optimizer>_<variant>_us).

    python_device.py [--device cuda] [--steps 300] [--rounds 7] [--variants raw,lightning]
"""

import argparse
import importlib.util
import statistics
import time

import torch


def make_mlp():
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 10))


def make_optimizer(name, parameters):
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01, momentum=0.9)
    return torch.optim.Adam(parameters, lr=1e-3)


def wait_for(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw(device, optimizer_name, batches, steps, warmup):
    torch.manual_seed(0)
    model = make_mlp().to(device)
    optimizer = make_optimizer(optimizer_name, model.parameters())

    def step(i):
        data, target = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()

    for i in range(warmup):
        step(i)
    wait_for(device)
    started = time.perf_counter()
    for i in range(steps):
        step(i)
    wait_for(device)
    return (time.perf_counter() - started) / steps * 1e6


def lightning_trainer(device, optimizer_name, batches, steps, warmup):
    import lightning.pytorch as pl  # noqa: the variant runs only when it is installed

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.model = make_mlp()

        def training_step(self, batch, _):
            data, target = batch
            return torch.nn.functional.cross_entropy(self.model(data), target)

        def configure_optimizers(self):
            return make_optimizer(optimizer_name, self.parameters())

    class Timing(pl.Callback):
        def __init__(self):
            self.started = None

        def on_train_batch_start(self, trainer, *_):
            if trainer.global_step == warmup:
                wait_for(device)
                self.started = time.perf_counter()

    class Cycle(torch.utils.data.IterableDataset):
        def __iter__(self):
            i = 0
            while True:
                yield batches[i % len(batches)]
                i += 1

    timing = Timing()
    trainer = pl.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                         max_steps=warmup + steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, callbacks=[timing])
    loader = torch.utils.data.DataLoader(Cycle(), batch_size=None)
    trainer.fit(Module(), loader)
    wait_for(device)
    return (time.perf_counter() - timing.started) / steps * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--optimizers", default="sgd,adam")
    parser.add_argument("--variants", default="raw,lightning")
    options = parser.parse_args()
    device = torch.device(options.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("python_device.py: no CUDA device is visible; nothing measured")
        return
    variants = {"raw": raw}
    if "lightning" in options.variants.split(","):
        if importlib.util.find_spec("lightning") is not None:
            variants["lightning"] = lightning_trainer
        else:
            print("python_device.py: Lightning is not installed; its variant is left out")
    torch.manual_seed(1)
    batches = [(torch.randn(256, 784).to(device), torch.randint(10, (256,)).to(device))
               for _ in range(16)]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print("device %s (%s), PyTorch %s, %d steps x %d rounds" %
          (device, name, torch.__version__, options.steps, options.rounds))
    warmup = min(20, options.steps)
    times = {}
    for round_index in range(options.rounds):
        for optimizer in options.optimizers.split(","):
            order = list(variants)
            if round_index % 2:
                order.reverse()
            for variant in order:
                us = variants[variant](device, optimizer, batches, options.steps, warmup)
                times.setdefault("%s_%s" % (optimizer, variant), []).append(us)
    print("%-16s %10s %10s %10s" % ("variant", "median_us", "min_us", "max_us"))
    for key, values in sorted(times.items()):
        print("%-16s %10.1f %10.1f %10.1f" % (key, statistics.median(values), min(values),
                                              max(values)))
    for key, values in sorted(times.items()):
        print("python_%s_us=%.1f" % (key, statistics.median(values)))


if __name__ == "__main__":
    main()

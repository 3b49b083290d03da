#!/usr/bin/python3
"""Variant (d) of the loop benchmark: the hand-written training loop in Python PyTorch.

Same models as torchbus_loop_bench, same number of pre-generated batches per epoch (same seed),
cross-entropy, the same intra-op and OpenBLAS thread counts:
  mlp32   32-64-10, batch 32, SGD lr 0.01, 64 batches per epoch
  mlp784  784-256-10, batch 64, SGD lr 0.01, 64 batches per epoch
  cnn     the MNIST CNN without dropout (Conv2d(1,32,3) ReLU Conv2d(32,64,3) ReLU MaxPool2d(2)
          flatten Linear(9216,128) ReLU Linear(128,10)), random 1x28x28 inputs, batch 128,
          Adam lr 1e-3, --steps-cnn batches per epoch; in float32 (`cnn`) and with forward and loss
          under torch.autocast("cpu", dtype=torch.bfloat16) (`cnn_bf16`, its own model copy)
  resnet  ResNet-18's shape for 32x32 images at a quarter of its width (3x3 stem, four stages of
          two basic blocks with batch norm at 16, 32, 64, 128 channels, global average pooling,
          Linear(128,10)), random 3x32x32 inputs, batch 64, SGD lr 0.05 momentum 0.9, --steps-cnn
          batches per epoch; `resnet` and `resnet_bf16` as the CNN's
Two modes:

  python_loop.py [--threads N] [--blas-threads M] [--rounds R] [--epochs-mlp32 E]
                 [--epochs-mlp784 E] [--steps-cnn S] [--models LIST] [--channels-last]
                 [--clock cpu|wall]
      standalone: one warm-up round, R rounds, prints us_per_step_python_<model>=<median> lines
      (us_per_step_python_cnn and us_per_step_python_bf16_cnn for the CNN).
  python_loop.py --serve [--threads N] [--blas-threads M] [--steps-cnn S] [--channels-last]
      driven by torchbus_loop_bench over stdin/stdout so that Python runs interleaved with the
      C++ variants: first prints "ready GLIBC_TUNABLES=<value, - when unset>" (the allocator
      settings it runs under, which the driver compares with its own), then reads
      "run <model> <epochs>" lines (model: mlp32, mlp784, cnn, cnn_bf16, resnet, resnet_bf16), answers
      "<wall seconds> <thread CPU seconds> <steps> <minor page faults of the thread>", stops on
      "quit" or end of input.

As in loop_bench.cpp, the standalone mode times thread CPU time with one thread (--clock wall to
change) and wall-clock time with more. --channels-last puts the CNN's parameters and inputs in
channels_last memory format.

Use Debian's /usr/bin/python3 (python3-torch); another python3 on PATH may lack torch.
"""

import argparse
import ctypes
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SEED = 1234
BATCHES_PER_EPOCH = 64
# name -> (inputs, hidden, classes, batch size); must match loop_bench.cpp
MODELS = {
    "mlp32": (32, 64, 10, 32),
    "mlp784": (784, 256, 10, 64),
}
CNN_BATCH = 128
CNN_CLASSES = 10
CNN_LEARNING_RATE = 1e-3
RESNET_BATCH = 64
RESNET_LEARNING_RATE = 0.05
RESNET_WIDTHS = (16, 32, 64, 128)
# Workloads of the image models: name -> bfloat16 autocast around forward and loss
CNN_WORKLOADS = {"cnn": False, "cnn_bf16": True, "resnet": False, "resnet_bf16": True}


def set_blas_threads(threads):
    """Sets OpenBLAS's own thread pool (separate from torch's intra-op threads) when present."""
    try:
        blas = ctypes.CDLL("libblas.so.3")
        setter = getattr(blas, "openblas_set_num_threads")
    except (OSError, AttributeError):
        return False
    setter(ctypes.c_int(threads))
    return True


def make_batches(shape, classes, count, seed, memory_format=torch.contiguous_format):
    """`count` batches of random inputs of `shape` (batch first) and random class targets."""
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(*shape, generator=generator).contiguous(memory_format=memory_format),
            torch.randint(0, classes, (shape[0],), generator=generator),
        )
        for _ in range(count)
    ]


def minor_faults():
    """Minor page faults of the calling thread so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


class Mlp(torch.nn.Module):
    """The model of loop_bench.cpp's `Mlp`: two linear layers with a ReLU between them."""

    def __init__(self, inputs, hidden, classes):
        super().__init__()
        self.fc1 = torch.nn.Linear(inputs, hidden)
        self.fc2 = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Cnn(torch.nn.Module):
    """The model of loop_bench.cpp's `Cnn`: the MNIST CNN without dropout."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3)
        self.conv2 = torch.nn.Conv2d(32, 64, 3)
        self.fc1 = torch.nn.Linear(9216, 128)
        self.fc2 = torch.nn.Linear(128, CNN_CLASSES)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = torch.flatten(F.max_pool2d(x, 2), 1)
        return self.fc2(F.relu(self.fc1(x)))


class BasicBlock(torch.nn.Module):
    """loop_bench.cpp's `BasicBlock`: two 3x3 convolutions with batch norm and a shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.shortcut_conv = None
        if stride != 1 or cin != cout:
            self.shortcut_conv = torch.nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
            self.shortcut_bn = torch.nn.BatchNorm2d(cout)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        shortcut = x if self.shortcut_conv is None else self.shortcut_bn(self.shortcut_conv(x))
        return F.relu(y + shortcut)


class ResNet(torch.nn.Module):
    """loop_bench.cpp's `Resnet`: ResNet-18's shape for 32x32 images at a quarter of its width."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, RESNET_WIDTHS[0], 3, padding=1, bias=False)
        self.stem_bn = torch.nn.BatchNorm2d(RESNET_WIDTHS[0])
        blocks = []
        cin = RESNET_WIDTHS[0]
        for stage, width in enumerate(RESNET_WIDTHS):
            for block in range(2):
                blocks.append(BasicBlock(cin, width, 2 if stage > 0 and block == 0 else 1))
                cin = width
        self.blocks = torch.nn.Sequential(*blocks)
        self.fc = torch.nn.Linear(RESNET_WIDTHS[-1], CNN_CLASSES)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem_bn(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Workload:
    def __init__(self, name, cnn_batches=4, channels_last=False):
        torch.manual_seed(SEED)
        self.bf16 = False
        if name in CNN_WORKLOADS:
            self.bf16 = CNN_WORKLOADS[name]
            memory_format = torch.channels_last if channels_last else torch.contiguous_format
            if name.startswith("resnet"):
                self.model = ResNet().to(memory_format=memory_format)
                self.optimizer = torch.optim.SGD(
                    self.model.parameters(), lr=RESNET_LEARNING_RATE, momentum=0.9
                )
                shape = (RESNET_BATCH, 3, 32, 32)
            else:
                self.model = Cnn().to(memory_format=memory_format)
                self.optimizer = torch.optim.Adam(self.model.parameters(), lr=CNN_LEARNING_RATE)
                shape = (CNN_BATCH, 1, 28, 28)
            self.batches = make_batches(shape, CNN_CLASSES, cnn_batches, SEED, memory_format)
        else:
            inputs, hidden, classes, batch = MODELS[name]
            self.model = Mlp(inputs, hidden, classes)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
            self.batches = make_batches((batch, inputs), classes, BATCHES_PER_EPOCH, SEED)

    def run(self, epochs):
        """Trains `epochs` epochs with the hand loop; returns (wall s, thread CPU s, steps,
        minor page faults)."""
        model, optimizer, batches = self.model, self.optimizer, self.batches
        model.train()
        faults = minor_faults()
        start_cpu = time.thread_time()
        start = time.perf_counter()
        if self.bf16:
            for _ in range(epochs):
                for data, target in batches:
                    optimizer.zero_grad()
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        output = model(data)
                        loss = F.cross_entropy(output, target)
                    loss.backward()
                    optimizer.step()
        else:
            for _ in range(epochs):
                for data, target in batches:
                    optimizer.zero_grad()
                    output = model(data)
                    loss = F.cross_entropy(output, target)
                    loss.backward()
                    optimizer.step()
        wall = time.perf_counter() - start
        cpu = time.thread_time() - start_cpu
        return wall, cpu, epochs * len(batches), minor_faults() - faults


def serve(make_workload):
    """The line protocol; workloads are made on their first run (untimed)."""
    print(f"ready GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '-')}", flush=True)
    workloads = {}
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] != "run" or len(words) != 3 or words[1] not in (*MODELS, *CNN_WORKLOADS):
            print(f"error: bad command {line.strip()!r}", flush=True)
            continue
        if words[1] not in workloads:
            workloads[words[1]] = make_workload(words[1])
        wall, cpu, steps, faults = workloads[words[1]].run(int(words[2]))
        print(f"{wall:.9f} {cpu:.9f} {steps} {faults}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--blas-threads", type=int, help="OpenBLAS threads (default: --threads)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--epochs-mlp32", type=int, default=8)
    parser.add_argument("--epochs-mlp784", type=int, default=2)
    parser.add_argument("--steps-cnn", type=int, default=4, help="CNN batches per epoch")
    parser.add_argument("--models", default="mlp32,mlp784,cnn", help="standalone: which models")
    parser.add_argument("--channels-last", action="store_true", help="the CNN in channels_last")
    parser.add_argument("--clock", choices=["cpu", "wall"], help="default: cpu with 1 thread")
    parser.add_argument("--serve", action="store_true", help="line protocol for torchbus_loop_bench")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    blas_threads = args.blas_threads or args.threads
    set_blas_threads(blas_threads)

    def make_workload(name):
        return Workload(name, max(1, args.steps_cnn), args.channels_last)

    if args.serve:
        serve(make_workload)
        return

    clock = args.clock or ("cpu" if args.threads == 1 and blas_threads == 1 else "wall")
    epochs = {"mlp32": args.epochs_mlp32, "mlp784": args.epochs_mlp784}
    epochs.update({name: 1 for name in CNN_WORKLOADS})
    names = []
    for model in args.models.split(","):
        names += [model, f"{model}_bf16"] if model in ("cnn", "resnet") else [model]
    workloads = {name: make_workload(name) for name in names}
    for name, workload in workloads.items():  # warm-up
        workload.run(epochs[name])
    per_step = {name: [] for name in workloads}
    for _ in range(args.rounds):
        for name, workload in workloads.items():
            wall, cpu, steps, _ = workload.run(epochs[name])
            per_step[name].append((cpu if clock == "cpu" else wall) / steps * 1e6)
    for name in workloads:
        label = f"python_bf16_{name[:-5]}" if name.endswith("_bf16") else f"python_{name}"
        print(f"us_per_step_{label}={statistics.median(per_step[name]):.3f}")


if __name__ == "__main__":
    main()

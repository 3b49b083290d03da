#!/usr/bin/python3
"""Variant (d) of the loop benchmark: the hand-written training loop in Python PyTorch.

Same models (32-64-10 with batch 32, 784-256-10 with batch 64), same number of pre-generated
batches per epoch (same seed), cross-entropy, SGD lr 0.01, the same intra-op and OpenBLAS thread
counts as torchbus_loop_bench. Two modes:

  python_loop.py [--threads N] [--blas-threads M] [--rounds R] [--epochs-mlp32 E]
                 [--epochs-mlp784 E] [--clock cpu|wall]
      standalone: one warm-up round, R rounds, prints us_per_step_python_<model>=<median> lines.
  python_loop.py --serve [--threads N] [--blas-threads M]
      driven by torchbus_loop_bench over stdin/stdout so that Python runs interleaved with the
      C++ variants: reads "run <model> <epochs>" lines, answers
      "<wall seconds> <thread CPU seconds> <steps>", stops on "quit" or end of input.

As in loop_bench.cpp, the standalone mode times thread CPU time with one thread (--clock wall to
change) and wall-clock time with more.

Use Debian's /usr/bin/python3 (python3-torch); another python3 on PATH may lack torch.
"""

import argparse
import ctypes
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


def set_blas_threads(threads):
    """Sets OpenBLAS's own thread pool (separate from torch's intra-op threads) when present."""
    try:
        blas = ctypes.CDLL("libblas.so.3")
        setter = getattr(blas, "openblas_set_num_threads")
    except (OSError, AttributeError):
        return False
    setter(ctypes.c_int(threads))
    return True


def make_batches(inputs, classes, batch, count, seed):
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(batch, inputs, generator=generator),
            torch.randint(0, classes, (batch,), generator=generator),
        )
        for _ in range(count)
    ]


class Mlp(torch.nn.Module):
    """The model of loop_bench.cpp's `Mlp`: two linear layers with a ReLU between them."""

    def __init__(self, inputs, hidden, classes):
        super().__init__()
        self.fc1 = torch.nn.Linear(inputs, hidden)
        self.fc2 = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Workload:
    def __init__(self, name):
        inputs, hidden, classes, batch = MODELS[name]
        torch.manual_seed(SEED)
        self.model = Mlp(inputs, hidden, classes)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.batches = make_batches(inputs, classes, batch, BATCHES_PER_EPOCH, SEED)

    def run(self, epochs):
        """Trains `epochs` epochs with the hand loop; returns (wall s, thread CPU s, steps)."""
        model, optimizer, batches = self.model, self.optimizer, self.batches
        model.train()
        start_cpu = time.thread_time()
        start = time.perf_counter()
        for _ in range(epochs):
            for data, target in batches:
                optimizer.zero_grad()
                output = model(data)
                loss = F.cross_entropy(output, target)
                loss.backward()
                optimizer.step()
        wall = time.perf_counter() - start
        return wall, time.thread_time() - start_cpu, epochs * len(batches)


def serve(workloads):
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] != "run" or len(words) != 3 or words[1] not in workloads:
            print(f"error: bad command {line.strip()!r}", flush=True)
            continue
        wall, cpu, steps = workloads[words[1]].run(int(words[2]))
        print(f"{wall:.9f} {cpu:.9f} {steps}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--blas-threads", type=int, help="OpenBLAS threads (default: --threads)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--epochs-mlp32", type=int, default=8)
    parser.add_argument("--epochs-mlp784", type=int, default=2)
    parser.add_argument("--clock", choices=["cpu", "wall"], help="default: cpu with 1 thread")
    parser.add_argument("--serve", action="store_true", help="line protocol for torchbus_loop_bench")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    blas_threads = args.blas_threads or args.threads
    set_blas_threads(blas_threads)
    workloads = {name: Workload(name) for name in MODELS}
    if args.serve:
        serve(workloads)
        return

    clock = args.clock or ("cpu" if args.threads == 1 and blas_threads == 1 else "wall")
    epochs = {"mlp32": args.epochs_mlp32, "mlp784": args.epochs_mlp784}
    for name, workload in workloads.items():  # warm-up
        workload.run(epochs[name])
    per_step = {name: [] for name in MODELS}
    for _ in range(args.rounds):
        for name, workload in workloads.items():
            wall, cpu, steps = workload.run(epochs[name])
            per_step[name].append((cpu if clock == "cpu" else wall) / steps * 1e6)
    for name in MODELS:
        print(f"us_per_step_python_{name}={statistics.median(per_step[name]):.3f}")


if __name__ == "__main__":
    main()

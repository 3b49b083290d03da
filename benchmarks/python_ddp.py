#!/usr/bin/env python3
"""PyTorch's own DistributedDataParallel doing what examples/distributed.cpp does.

benchmarks/run runs this next to `example_distributed` and compares the samples per second. The
same model, optimizer, batch per rank, data shape, sharding and thread count; one process plain
(no process group, as the example in a world of one), or one rank of a gloo process group under
a launcher:

    /usr/bin/python3 benchmarks/python_ddp.py --model mlp --steps 300 --warmup 20
    mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 \
        /usr/bin/python3 benchmarks/python_ddp.py --model cnn --steps 20 --warmup 3
    (--model resnet: python_loop.py's ResNet, the example's small_resnet.hpp, on 3x32x32 images)
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 python_ddp.py ... &
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 python_ddp.py ...

Rank and world size come from RANK/WORLD_SIZE (torchrun's variables; Debian's torchrun itself is
broken) or from OpenMPI's OMPI_COMM_WORLD_RANK/SIZE. Rank 0 prints `samples_per_second=` over the
timed steps (the steps after the warm-up), counting every rank's samples.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from python_loop import ResNet  # examples/small_resnet.hpp's module

SAMPLES = 4096  # the example's data set size
BATCH = 64  # per rank


def make_model(name):
    """The example's models, the same layers in the same order (so the same initialisation)."""
    if name == "cnn":  # the MNIST CNN without dropout
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "resnet":
        return nn.Sequential(ResNet())
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def launch_environment():
    """(rank, world size) from torchrun's variables or OpenMPI's; (0, 1) without a launcher."""
    for rank_name, size_name in (("RANK", "WORLD_SIZE"),
                                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_name in os.environ:
            return int(os.environ[rank_name]), int(os.environ[size_name])
    return 0, 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("mlp", "cnn", "resnet"), default="mlp")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps timed")
    parser.add_argument("--warmup", type=int, default=0, help="steps run before the clock starts")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    rank, world = launch_environment()
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

    # The example's data: 4096 samples, the same on every rank, targets learnable from the input.
    torch.manual_seed(0)
    sample_shapes = {"mlp": (784,), "cnn": (1, 28, 28), "resnet": (3, 32, 32)}
    shape = (SAMPLES,) + sample_shapes[args.model]
    inputs = torch.randn(shape)
    targets = inputs.flatten(1)[:, :10].argmax(1)

    torch.manual_seed(1)
    model = make_model(args.model)
    if world > 1:
        # Defaults as a user gets them: 25 MB buckets, all-reduce overlapped with the backward.
        model = nn.parallel.DistributedDataParallel(model)
    lr = 0.01 if args.model == "cnn" else 0.05  # the ResNet's as the MLP's
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    # Each rank reads its shard of a new permutation every epoch, as DistributedSampler does in
    # the example. A batch is one indexing of the data tensors (the cheapest way in Python; a
    # DataLoader would fetch and collate sample by sample, which costs more than the MLP's step).
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(SAMPLES), num_replicas=world, rank=rank, shuffle=True, seed=0)

    def batches():
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            shard = torch.tensor(list(sampler))
            for i in range(0, len(shard) - BATCH + 1, BATCH):
                index = shard[i:i + BATCH]
                yield inputs[index], targets[index]
            epoch += 1

    last_step = args.warmup + args.steps
    start = time.perf_counter()
    for step, (x, y) in enumerate(batches(), start=1):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # under DDP, returns once every bucket's all-reduce is done
        optimizer.step()
        if step == args.warmup:
            start = time.perf_counter()
        if step == last_step:
            break
    seconds = time.perf_counter() - start

    if rank == 0:
        print(f"samples_per_second={BATCH * world * args.steps / seconds:.1f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""torchbus-train's weights in Python PyTorch and back, with the Python code of docs/interop.md.

Run by ctest with Debian's /usr/bin/python3 (python3-torch). In a work folder holding a tiny MNIST
(mnist/, the label in the brightness) it runs the ```python blocks of docs/interop.md whose first
line is "# interop: NAME" and checks:
  evaluate:   OUT/model.pt of a CNN run, loaded with strict=True, gives summary.json's validation
              accuracy (and its loss to rounding);
  initialise: init.pt saved in Python; torchbus-train --init-from init.pt --validate reports the
              loss and accuracy Python computes, trains nothing; a run --init-from it trains, with
              the file's SHA-256 in its identity; --hidden 8 is exit 2 naming the keys.
"""

import argparse
import hashlib
import json
import math
import os
import re
import struct
import subprocess
import sys

import torch


def write_idx_pair(images, labels, count):
    # As tests/apps/train_test.cpp's write_idx_pair: 28x28 images, label i % 10 in the brightness.
    with open(images, "wb") as image_file, open(labels, "wb") as label_file:
        image_file.write(struct.pack(">IIII", 2051, count, 28, 28))
        label_file.write(struct.pack(">II", 2049, count))
        for i in range(count):
            label = i % 10
            image_file.write(bytes(label * 25 + pixel % 3 for pixel in range(28 * 28)))
            label_file.write(bytes([label]))


def docs_blocks(path):
    blocks = {}
    for block in re.findall(r"```python\n(.*?)```", open(path).read(), re.S):
        first = block.split("\n", 1)[0]
        if first.startswith("# interop: "):
            blocks[first[len("# interop: "):].strip()] = block
    return blocks


class Checks:
    def __init__(self, train, work):
        self.train = train
        self.work = work
        self.failures = []

    def check(self, condition, what):
        print(("ok   " if condition else "FAIL ") + what)
        if not condition:
            self.failures.append(what)

    def run_train(self, *args):
        command = [self.train, "--data", "mnist:mnist", "--batch-size", "50", "--no-progress",
                   "--no-tensorboard", "--no-report", "--no-csv", "--sanity-val-steps", "0", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=self.work)


def summary(path):
    with open(path) as file:
        return json.load(file)


def close(a, b):
    return a is not None and math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train", required=True, help="the torchbus-train program")
    parser.add_argument("--docs", required=True, help="docs/interop.md")
    parser.add_argument("--work", required=True, help="a folder for the runs")
    args = parser.parse_args()
    blocks = docs_blocks(args.docs)
    train = os.path.abspath(args.train)
    os.makedirs(os.path.join(args.work, "mnist"), exist_ok=True)
    os.chdir(args.work)
    for split, count in (("train", 200), ("t10k", 50)):
        write_idx_pair("mnist/%s-images-idx3-ubyte" % split, "mnist/%s-labels-idx1-ubyte" % split,
                       count)
    checks = Checks(train, os.getcwd())
    checks.check(set(blocks) == {"models", "evaluate", "initialise"},
                 "docs/interop.md has the blocks models, evaluate, initialise: %s" % sorted(blocks))
    namespace = {}
    exec(blocks["models"], namespace)

    # C++ -> Python: a CNN run's model.pt gives the accuracy its summary reports.
    result = checks.run_train("--epochs", "1", "--overwrite", "--out", "runs/mnist")
    checks.check(result.returncode == 0, "torchbus-train trains the CNN: " + result.stdout[-2000:])
    exec(blocks["evaluate"], namespace)
    reported = summary("runs/mnist/summary.json")
    checks.check(namespace["accuracy"] == reported["final_val_accuracy"],
                 "Python's accuracy %s == summary's %s"
                 % (namespace["accuracy"], reported["final_val_accuracy"]))
    model, (images, labels) = namespace["model"], namespace["read_mnist"]("mnist")
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(images), labels).item()
    checks.check(close(reported["final_val_loss"], loss),
                 "Python's loss %s ~ summary's %s" % (loss, reported["final_val_loss"]))

    # Python -> C++: weights initialised in Python, validated and trained by torchbus-train.
    exec(blocks["initialise"], namespace)
    mlp = namespace["mlp"]
    with torch.no_grad():
        outputs = mlp(images)
    loss = torch.nn.functional.cross_entropy(outputs, labels).item()
    accuracy = (outputs.argmax(1) == labels).sum().item() / len(labels)
    result = checks.run_train("--model", "mlp", "--hidden", "16", "--init-from", "init.pt",
                              "--validate", "--overwrite", "--out", "runs/init")
    checks.check(result.returncode == 0, "--init-from --validate runs: " + result.stdout[-2000:])
    validated = summary("runs/init/summary.json")
    checks.check(close(validated["final_val_loss"], loss),
                 "--validate's loss %s ~ Python's %s" % (validated["final_val_loss"], loss))
    checks.check(validated["final_val_accuracy"] == accuracy,
                 "--validate's accuracy %s == Python's %s"
                 % (validated["final_val_accuracy"], accuracy))
    checks.check(validated["steps"] == 0 and validated["stop_reason"] == "validated",
                 "--validate trains nothing: %s steps, %s"
                 % (validated["steps"], validated["stop_reason"]))
    checks.check(not os.path.exists("runs/init/model.pt"), "--validate writes no model.pt")

    result = checks.run_train("--model", "mlp", "--hidden", "16", "--init-from", "init.pt",
                              "--epochs", "1", "--overwrite", "--out", "runs/tuned")
    checks.check(result.returncode == 0, "a run --init-from init.pt trains: " + result.stdout[-2000:])
    digest = hashlib.sha256(open("init.pt", "rb").read()).hexdigest()
    checks.check("init_from_sha256=%s\n" % digest in summary("runs/tuned/summary.json")["identity"],
                 "the identity holds init.pt's SHA-256")
    tuned = namespace["torchbus_mlp"](28 * 28, hidden=[16])
    tuned.load_state_dict(torch.load("runs/tuned/model.pt"), strict=True)
    checks.check(not torch.equal(tuned[1].weight, mlp[1].weight),
                 "the trained model.pt differs from init.pt")

    result = checks.run_train("--model", "mlp", "--hidden", "8", "--init-from", "init.pt",
                              "--epochs", "1", "--overwrite", "--out", "runs/wrong")
    message = result.stdout + result.stderr
    checks.check(result.returncode == 2 and "init.pt" in message
                 and "size mismatch for 1.weight: [16, 784] in the file, [8, 784] in the model"
                 in message,
                 "--init-from of other shapes is exit 2 naming the keys: %d %s"
                 % (result.returncode, message[-1000:]))

    if checks.failures:
        print("%d check(s) failed" % len(checks.failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

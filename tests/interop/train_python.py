"""torchbus-train's weights in Python PyTorch and back, with the Python code of docs/interop.md.

Run by ctest with Debian's /usr/bin/python3 (python3-torch). In a work folder holding a tiny MNIST
(mnist/, the label in the brightness) it runs the ```python blocks of docs/interop.md whose first
line is "# interop: NAME" and checks:
  evaluate:   OUT/model.pt of a CNN run, loaded with strict=True, gives summary.json's validation
              accuracy (and its loss to rounding);
  predict:    torchbus-train --predict of that model.pt writes one row per t10k image, in order,
              with the classes Python's model predicts (also on two ranks); --predict synthetic
              gives the classes Python's MLP predicts on the same set drawn in Python; and
              --predict of a CSV file without labels those Python's MLP predicts from its rows;
  initialise: init.pt saved in Python; torchbus-train --init-from init.pt --validate reports the
              loss and accuracy Python computes, trains nothing; a run --init-from it trains, with
              the file's SHA-256 in its identity; --hidden 8 is exit 2 naming the keys.
"""

import argparse
import csv
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
    checks.check(set(blocks) == {"models", "evaluate", "predict", "initialise"},
                 "docs/interop.md has the blocks models, evaluate, predict, initialise: %s"
                 % sorted(blocks))
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

    # C++ -> Python: predictions.csv of model.pt has Python's classes, in the images' order.
    result = checks.run_train("--predict", "mnist:mnist", "--weights", "runs/mnist/model.pt",
                              "--out", "runs/predict")
    checks.check(result.returncode == 0, "--predict runs: " + result.stdout[-2000:])
    exec(blocks["predict"], namespace)
    rows = namespace["rows"]
    checks.check(namespace["same"], "predictions.csv has the classes Python's model predicts")
    checks.check([int(row["index"]) for row in rows] == list(range(len(labels))),
                 "one row per image, in order: %d rows" % len(rows))
    checks.check([int(row["label"]) for row in rows] == labels.tolist(), "the labels are the t10k's")
    with torch.no_grad():
        probabilities = model(images).softmax(1)
    checks.check(all(abs(float(row["probability_%d" % k]) - probabilities[i, k].item()) < 1e-5
                     for i, row in enumerate(rows) for k in range(10)),
                 "the probabilities are the softmax of Python's logits")
    port = str(29600 + os.getpid() % 200)
    result = subprocess.run(
        ["mpirun", "-np", "2", "--oversubscribe", "--allow-run-as-root", "-x",
         "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + port, train, "--data", "mnist:mnist",
         "--no-progress", "--predict", "mnist:mnist", "--weights", "runs/mnist/model.pt",
         "--batch-size", "7", "--out", "runs/predict2"],
        capture_output=True, text=True, timeout=300, cwd=os.getcwd())
    checks.check(result.returncode == 0, "--predict on two ranks runs: " + result.stdout[-2000:])
    two = list(csv.DictReader(open("runs/predict2/predictions.csv")))
    checks.check([(row["index"], row["class"]) for row in two]
                 == [(row["index"], row["class"]) for row in rows],
                 "two ranks write the same rows, complete and in order: %d rows" % len(two))

    # The built-in data: Python draws the same synthetic set (the same LibTorch generator and calls
    # as apps/torchbus-train/dataset.cpp's synthetic_dataset), the labels prove it, and the
    # documented MLP gives predictions.csv's classes.
    synthetic = [train, "--no-progress", "--no-tensorboard", "--no-report", "--no-csv"]
    result = subprocess.run(synthetic + ["--epochs", "1", "--overwrite", "--out", "runs/synthetic"],
                            capture_output=True, text=True, timeout=300)
    checks.check(result.returncode == 0, "a synthetic run trains: " + result.stdout[-2000:])
    result = subprocess.run(synthetic + ["--predict", "synthetic", "--weights",
                                         "runs/synthetic/model.pt", "--out", "runs/synthetic_pred"],
                            capture_output=True, text=True, timeout=300)
    checks.check(result.returncode == 0, "--predict synthetic runs: " + result.stdout[-2000:])
    generator = torch.Generator().manual_seed(42)
    centres = torch.randn(10, 32, generator=generator) * 0.3
    for count in (8192, 2048):  # the training split, then the held-out one predicted
        held_out_targets = torch.randint(10, (count,), generator=generator)
        held_out = centres.index_select(0, held_out_targets) + torch.randn(count, 32,
                                                                           generator=generator)
    synthetic_rows = list(csv.DictReader(open("runs/synthetic_pred/predictions.csv")))
    checks.check([int(row["label"]) for row in synthetic_rows] == held_out_targets.tolist(),
                 "Python draws the synthetic set's held-out labels (%d rows)" % len(synthetic_rows))
    synthetic_model = namespace["torchbus_mlp"](32)
    synthetic_model.load_state_dict(torch.load("runs/synthetic/model.pt"), strict=True)
    with torch.no_grad():
        synthetic_classes = synthetic_model(held_out).argmax(1).tolist()
    checks.check([int(row["class"]) for row in synthetic_rows] == synthetic_classes,
                 "predictions.csv of the synthetic set has the classes of Python's MLP")

    # A CSV file: trained on a labelled file, predicting an unlabelled one.
    torch.manual_seed(1)
    features = torch.randn(120, 3)
    train_labels = (features[:, 0] > features[:, 1]).long() + (features[:, 2] > 0.5).long()
    with open("train.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["x", "y", "z", "label"])
        for row, label in zip(features.tolist(), train_labels.tolist()):
            writer.writerow(row + [label])
    unlabelled = torch.randn(9, 3)
    with open("new.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["x", "y", "z"])
        writer.writerows(unlabelled.tolist())
    command = [train, "--data", "csv:train.csv", "--model", "mlp", "--hidden", "8",
               "--batch-size", "16", "--no-progress", "--no-tensorboard", "--no-report"]
    result = subprocess.run(command + ["--epochs", "2", "--overwrite", "--out", "runs/csv"],
                            capture_output=True,
                            text=True, timeout=300)
    checks.check(result.returncode == 0, "a CSV run trains: " + result.stdout[-2000:])
    result = subprocess.run(command + ["--predict", "csv:new.csv", "--weights",
                                       "runs/csv/model.pt", "--out", "runs/csv_predict"],
                            capture_output=True, text=True, timeout=300)
    checks.check(result.returncode == 0, "--predict of a CSV file runs: " + result.stdout[-2000:])
    predicted = list(csv.DictReader(open("runs/csv_predict/predictions.csv")))
    csv_model = namespace["torchbus_mlp"](3, hidden=[8], classes=3)
    csv_model.load_state_dict(torch.load("runs/csv/model.pt"), strict=True)
    # The rows as float32, as torchbus-train reads them (the file holds Python's float repr).
    with open("new.csv") as file:
        table = torch.tensor([[float(cell) for cell in row] for row in list(csv.reader(file))[1:]])
    with torch.no_grad():
        expected = csv_model(table).argmax(1).tolist()
    checks.check([int(row["class"]) for row in predicted] == expected
                 and "label" not in predicted[0],
                 "--predict of new.csv (no labels) gives Python's classes: %s vs %s"
                 % ([row["class"] for row in predicted], expected))

    # A regression on the same CSV file: the label column's numbers as the target.
    result = subprocess.run(command + ["--task", "regression", "--epochs", "2", "--overwrite",
                                       "--out", "runs/regression", "--test", "csv:train.csv"],
                            capture_output=True, text=True, timeout=300)
    checks.check(result.returncode == 0, "a regression run trains: " + result.stdout[-2000:])
    regressed = summary("runs/regression/summary.json")
    checks.check(close(regressed.get("test_mse"), regressed.get("test_loss"))
                 and regressed.get("test_mae") is not None,
                 "the regression's summary has test_mse (= test_loss) and test_mae: %s"
                 % {key: regressed.get(key) for key in ("test_loss", "test_mse", "test_mae")})
    result = subprocess.run(command + ["--task", "regression", "--predict", "csv:new.csv",
                                       "--weights", "runs/regression/model.pt", "--out",
                                       "runs/regression_predict"],
                            capture_output=True, text=True, timeout=300)
    checks.check(result.returncode == 0, "--predict of a regression runs: " + result.stdout[-2000:])
    values = list(csv.DictReader(open("runs/regression_predict/predictions.csv")))
    regression_model = namespace["torchbus_mlp"](3, hidden=[8], classes=1)
    regression_model.load_state_dict(torch.load("runs/regression/model.pt"), strict=True)
    with torch.no_grad():
        expected_values = regression_model(table).squeeze(1).tolist()
    checks.check(len(values) == len(expected_values)
                 and all(abs(float(row["prediction"]) - value) <= 1e-5 * max(1.0, abs(value))
                         for row, value in zip(values, expected_values)),
                 "--predict of a regression gives Python's MLP values: %s vs %s"
                 % ([row["prediction"] for row in values], expected_values))

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

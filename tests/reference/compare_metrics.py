#!/usr/bin/python3
"""Runs metrics_reference, which writes the outputs, targets and metrics of ClassificationMetrics
and RegressionMetrics runs, recomputes every metric with scikit-learn (Debian's python3-sklearn)
and compares them: relative error at most 1e-9 (regression: 1e-9 relative or 1e-12 absolute).
Usage: compare_metrics.py PATH/TO/metrics_reference WORK_DIR"""

import json
import os
import subprocess
import sys

import numpy as np
from sklearn.metrics import (accuracy_score, explained_variance_score, mean_absolute_error,
                             mean_squared_error, precision_recall_fscore_support, r2_score,
                             top_k_accuracy_score)

TOLERANCE = 1e-9


def sklearn_metrics(case, prefix="val_"):
    """Every metric ClassificationMetrics records, by name, computed by scikit-learn."""
    scores = np.array(case["scores"])
    y_true = np.array(case["targets"])
    y_pred = scores.argmax(axis=1)
    labels = list(range(case["classes"]))
    expected = {prefix + "accuracy": accuracy_score(y_true, y_pred)}
    for average, suffix in (("macro", ""), ("micro", "_micro"), ("weighted", "_weighted")):
        p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, labels=labels,
                                                     average=average, zero_division=0)
        expected.update({prefix + "precision" + suffix: p, prefix + "recall" + suffix: r,
                         prefix + "f1" + suffix: f})
    p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, labels=labels, average=None,
                                                 zero_division=0)
    for c in labels:
        expected.update({f"{prefix}precision_class_{c}": p[c], f"{prefix}recall_class_{c}": r[c],
                         f"{prefix}f1_class_{c}": f[c]})
    for k in case["top_k"]:
        expected[f"{prefix}accuracy_top_{k}"] = top_k_accuracy_score(y_true, scores, k=k,
                                                                     labels=labels)
    return expected


def sklearn_regression_metrics(case):
    """Every metric RegressionMetrics records, by name, computed by scikit-learn."""
    predicted = np.array(case["predictions"])
    truth = np.array(case["targets"])
    prefix = case["prefix"]
    per_column_mse = mean_squared_error(truth, predicted, multioutput="raw_values")
    return {
        prefix + "mse": mean_squared_error(truth, predicted),
        prefix + "mae": mean_absolute_error(truth, predicted),
        prefix + "rmse": float(np.mean(np.sqrt(per_column_mse))),
        prefix + "r2": r2_score(truth, predicted),
        prefix + "explained_variance": explained_variance_score(truth, predicted),
    }


def compare(case):
    regression = case.get("kind") == "regression"
    expected = sklearn_regression_metrics(case) if regression else sklearn_metrics(case)
    ours = {name: value for name, value in case["metrics"].items()
            if name not in ("val_loss", "test_loss")}
    failures = []
    if set(ours) != set(expected):
        failures.append(f"{case['name']}: metrics recorded {sorted(ours)}, expected "
                        f"{sorted(expected)}")
    for name in sorted(set(ours) & set(expected)):
        a, b = ours[name], float(expected[name])
        if not (a == b or abs(a - b) <= TOLERANCE * max(abs(a), abs(b))
                or (regression and abs(a - b) <= 1e-12)):
            failures.append(f"{case['name']}: {name} torchbus {a!r} scikit-learn {b!r}")
    return failures, len(expected)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    os.makedirs(sys.argv[2], exist_ok=True)
    results = os.path.join(sys.argv[2], "metrics.json")
    subprocess.run([sys.argv[1], results], check=True)
    with open(results, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    failures = []
    for case in cases:
        case_failures, count = compare(case)
        print(f"{case['name']}: {count} metrics on {len(case['targets'])} samples vs "
              f"sklearn.metrics: {'ok' if not case_failures else 'DIFFERENT'}")
        failures += case_failures
    for line in failures:
        print("FAIL", line)
    print(f"{len(cases)} cases, {len(failures)} differences")
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main())

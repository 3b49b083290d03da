#!/usr/bin/python3
"""The CSV files other tools write train torchbus-train to the weights of the plain file.

Writes one table of 240 rows (two features and a class label) as a plain file (bare cells, LF)
and as Python's csv.writer writes it with QUOTE_MINIMAL, QUOTE_ALL and QUOTE_NONNUMERIC (CRLF
line ends), as R's write.csv(df, row.names = FALSE) writes it (quoted header, bare numbers), as
Excel's "CSV UTF-8" does (a byte order mark, quoted cells), semicolon- and tab-separated (named
with --csv-delimiter), with a header name holding the delimiter, a doubled quote and a line break,
and with blank lines at the end. Every run must end with the plain run's params_sha256; a test
and a prediction on the semicolon file must equal those on the plain file; a semicolon file
without the flag, and bad quoting, are refused with a message naming the cause.
Usage: csv_dialects.py --train PATH/TO/torchbus-train --work DIR"""

import argparse
import csv
import io
import json
import os
import random
import subprocess
import sys

FLAGS = ["--epochs", "2", "--batch-size", "16", "--no-progress", "--no-tensorboard",
         "--overwrite"]


def table():
    rng = random.Random(68)
    rows = []
    for i in range(240):
        label = i % 3
        rows.append([repr(round(label + rng.gauss(0, 0.4), 6)),
                     repr(round(rng.gauss(0, 1) - label, 6)), str(label)])
    return ["x", "y", "label"], rows


def write_csv_module(path, header, rows, **options):
    out = io.StringIO(newline="")
    writer = csv.writer(out, **options)
    writer.writerow(header)
    writer.writerows(rows)
    with open(path, "w", newline="", encoding="utf-8") as file:
        file.write(out.getvalue())


def write_raw(path, text, encoding="utf-8"):
    with open(path, "w", newline="", encoding=encoding) as file:
        file.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    header, rows = table()
    files = {}

    def path(name):
        files[name] = os.path.join(args.work, name + ".csv")
        return files[name]

    write_raw(path("plain"), ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows))
    write_csv_module(path("quote_minimal"), header, rows, quoting=csv.QUOTE_MINIMAL)
    write_csv_module(path("quote_all"), header, rows, quoting=csv.QUOTE_ALL)
    # QUOTE_NONNUMERIC quotes strings and leaves numbers bare: the label as a number, the features
    # as text (quoted), as pandas' to_csv(quoting=csv.QUOTE_NONNUMERIC) writes a frame of strings.
    write_csv_module(path("quote_nonnumeric"), header,
                     [[x, y, int(label)] for x, y, label in rows], quoting=csv.QUOTE_NONNUMERIC)
    # R's write.csv(df, row.names = FALSE): the header quoted, numbers bare, LF line ends.
    write_raw(path("r_write_csv"), ",".join('"%s"' % name for name in header) + "\n" +
              "".join(",".join(r) + "\n" for r in rows))
    # Excel's "CSV UTF-8": a byte order mark, CRLF, text cells quoted.
    write_raw(path("excel_utf8"), "\r\n".join([",".join('"%s"' % name for name in header)] +
                                              [",".join(r) for r in rows]) + "\r\n",
              encoding="utf-8-sig")
    # A spreadsheet in a locale with a decimal comma: semicolons (the numbers keep their points).
    write_csv_module(path("semicolon"), header, rows, delimiter=";")
    write_csv_module(path("tab"), header, rows, delimiter="\t", lineterminator="\n")
    # Blank lines at the end, and CR-only line ends.
    write_raw(path("trailing_blank_lines"),
              "\r".join([",".join(header)] + [",".join(r) for r in rows]) + "\r\r\n\n")

    def train(name, *extra, label="label"):
        out = os.path.join(args.work, "runs", name)
        command = [args.train, "--data", "csv:%s:%s" % (files[name], label), "--out", out]
        result = subprocess.run(command + FLAGS + list(extra), capture_output=True, text=True,
                                timeout=240)
        return result, out

    failures = []
    expected = None
    for name, extra in [("plain", []), ("quote_minimal", []), ("quote_all", []),
                        ("quote_nonnumeric", []), ("r_write_csv", []), ("excel_utf8", []),
                        ("semicolon", ["--csv-delimiter", ";"]),
                        ("tab", ["--csv-delimiter", "tab"]), ("trailing_blank_lines", [])]:
        result, out = train(name, *extra)
        if result.returncode != 0:
            failures.append("%s: exit %d: %s" % (name, result.returncode, result.stdout[-600:] +
                                                 result.stderr[-600:]))
            continue
        with open(os.path.join(out, "summary.json")) as file:
            sha = json.load(file)["params_sha256"]
        expected = expected or sha
        print("%-22s params_sha256 %s" % (name, sha))
        if sha != expected:
            failures.append("%s: params_sha256 %s, the plain file's %s" % (name, sha, expected))

    # A header name holding the delimiter, a doubled quote and a line break, read as that name.
    odd = 'x, "the\nsecond"'
    write_csv_module(path("odd_names"), [header[0], odd, "label"], rows)
    result, out = train("odd_names")
    if result.returncode != 0:
        failures.append("odd_names: exit %d: %s" % (result.returncode, result.stderr[-600:]))
    else:
        with open(os.path.join(out, "summary.json")) as file:
            if json.load(file)["params_sha256"] != expected:
                failures.append("odd_names: other weights than the plain file's")
    # The test stage and predictions read the semicolon file as the plain one.
    plain_weights = os.path.join(args.work, "runs", "plain", "model.pt")
    outputs = {}
    for name, extra in [("plain", []), ("semicolon", ["--csv-delimiter", ";"])]:
        out = os.path.join(args.work, "predict", name)
        result = subprocess.run(
            [args.train, "--data", "csv:" + files[name], "--predict", "csv:" + files[name],
             "--weights", plain_weights, "--out", out, "--no-progress", "--overwrite"] + extra,
            capture_output=True, text=True, timeout=240)
        if result.returncode != 0:
            failures.append("predict %s: exit %d: %s" % (name, result.returncode,
                                                        result.stderr[-600:]))
            continue
        with open(os.path.join(out, "predictions.csv")) as file:
            outputs[name] = file.read()
    if len(outputs) == 2 and outputs["plain"] != outputs["semicolon"]:
        failures.append("predictions on the semicolon file differ from those on the plain file")
    tests = {}
    for name, extra in [("plain", []), ("semicolon", ["--csv-delimiter", ";"])]:
        result, out = train(name, "--test", "csv:" + files[name], *extra)
        if result.returncode != 0:
            failures.append("test %s: exit %d: %s" % (name, result.returncode,
                                                     result.stderr[-600:]))
            continue
        with open(os.path.join(out, "summary.json")) as file:
            summary = json.load(file)
        tests[name] = (summary["test_loss"], summary["test_accuracy"])
    if len(tests) == 2 and tests["plain"] != tests["semicolon"]:
        failures.append("--test on the semicolon file: %s, on the plain file: %s" % (
            tests["semicolon"], tests["plain"]))
    # Refusals that name their cause.
    write_raw(path("bad_quote"), "x,y,label\n1,2,0\n3,4\"5,1\n")
    write_raw(path("unclosed"), "x,y,label\n1,2,0\n\"3,4,1\n")
    for name, extra, reason in [
            ("semicolon", [], "did you mean --csv-delimiter ';'?"),
            ("tab", [], "did you mean --csv-delimiter tab?"),
            ("bad_quote", [], "line 3: a quote inside a cell that does not start with one"),
            ("unclosed", [], "ends inside a quoted cell opened after line 2"),
            ("plain", ["--csv-delimiter", "ab"], "--csv-delimiter")]:
        result, _ = train(name, *extra)
        output = result.stdout + result.stderr
        if result.returncode == 0 or reason not in output or "terminate called" in output:
            failures.append("%s %s: exit %d, expected a refusal naming %r: %s" % (
                name, extra, result.returncode, reason, output[-600:]))
        else:
            print("%-22s refused: %s" % (name + " " + " ".join(extra), reason))
    for line in failures:
        print("FAIL", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

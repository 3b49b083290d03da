#!/usr/bin/python3
"""torchbus-train's CSV reader against Python's csv module, on generated files.

Writes two kinds of files to WORK_DIR and has csv_reference read them:
- tables written by csv.writer with every quoting mode (QUOTE_MINIMAL, QUOTE_ALL,
  QUOTE_NONNUMERIC), several delimiters and line ends (CRLF, LF), some with a UTF-8 byte order
  mark, some larger than the reader's 64 KiB buffer, their cells drawn from quotes, delimiters,
  line breaks, spaces, digits and non-ASCII text: torchbus must read the records csv.reader reads
  (strict=True), each starting on the line csv.reader's line_num puts it;
- random texts of the same characters, most of them malformed: where csv.reader(strict=True)
  refuses a text, torchbus refuses it too; where it reads one, torchbus reads the same records or
  refuses a quote inside an unquoted cell (RFC 4180 quotes such a cell; Python takes the quote as
  text), and then Python's records do hold a quote.
Blank lines are no records to torchbus; csv.reader gives [] for them, left out here.
Usage: compare_csv.py PATH/TO/csv_reference WORK_DIR [TABLES TEXTS]"""

import csv
import io
import json
import os
import random
import subprocess
import sys

DELIMITERS = [",", ";", "\t", "|", " "]
QUOTING = [csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC]
PIECES = ["", "a", "x y", "1", "-2.5", "1e3", " ", "\"", "\"\"", ",", ";", "\t", "|", "\n",
          "\r\n", "\r", "\u00e9", "\u6f22", "label"]
UNQUOTED_QUOTE = "a quote inside a cell that does not start with one"


def python_records(data, delimiter):
    """csv.reader's records of `data` (bytes) with their first lines, or the error it raises."""
    text = data.decode("utf-8-sig")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    records = []
    try:
        for cells in reader:
            if not cells:
                continue
            breaks = sum(len(cell.replace("\r\n", "\n").replace("\r", "\n").split("\n")) - 1
                         for cell in cells)
            records.append({"line": reader.line_num - breaks, "cells": cells})
    except csv.Error as error:
        return None, str(error)
    return records, None


def random_cell(rng):
    if rng.random() < 0.3:
        return rng.choice([0.0, 1.5, -3.25, 1e-7, 12345.0])  # bare numbers under QUOTE_NONNUMERIC
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 4)))


def write_table(rng, path, large):
    delimiter = rng.choice(DELIMITERS)
    quoting = rng.choice(QUOTING)
    columns = rng.randint(1, 5)
    rows = rng.randint(3000, 6000) if large else rng.randint(0, 12)
    out = io.StringIO(newline="")
    writer = csv.writer(out, delimiter=delimiter, quoting=quoting,
                        lineterminator=rng.choice(["\r\n", "\n"]))
    for _ in range(rows):
        writer.writerow([random_cell(rng) for _ in range(columns)])
    encoding = "utf-8-sig" if rng.random() < 0.1 else "utf-8"
    with open(path, "wb") as file:
        file.write(out.getvalue().encode(encoding))
    return delimiter


def write_text(rng, path):
    alphabet = ["a", "1", " ", "\"", "\"", ",", ",", "\n", "\r", "\r\n", "\u00e9"]
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
    with open(path, "wb") as file:
        file.write(text.encode("utf-8"))
    return ","


def main():
    if len(sys.argv) not in (3, 5):
        sys.exit(__doc__)
    tool, work = sys.argv[1], sys.argv[2]
    tables, texts = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) == 5 else (3000, 3000)
    os.makedirs(work, exist_ok=True)
    rng = random.Random(68)
    manifest = []
    for i in range(tables):
        path = os.path.join(work, "table-%d.csv" % i)
        manifest.append({"path": path, "delimiter": write_table(rng, path, large=i % 200 == 0),
                         "kind": "table"})
    for i in range(texts):
        path = os.path.join(work, "text-%d.csv" % i)
        manifest.append({"path": path, "delimiter": write_text(rng, path), "kind": "text"})
    manifest_path = os.path.join(work, "manifest.json")
    results_path = os.path.join(work, "results.json")
    with open(manifest_path, "w") as file:
        json.dump(manifest, file)
    subprocess.run([tool, manifest_path, results_path], check=True)
    with open(results_path) as file:
        results = json.load(file)

    failures = []
    counts = {"same records": 0, "both refuse": 0, "quote in an unquoted cell": 0}
    for entry, ours in zip(manifest, results):
        with open(entry["path"], "rb") as file:
            data = file.read()
        expected, error = python_records(data, entry["delimiter"])
        name = "%s (%r, delimiter %r)" % (entry["path"], data[:60], entry["delimiter"])
        if expected is not None and ours.get("records") == expected:
            counts["same records"] += 1
        elif expected is None and "error" in ours:
            counts["both refuse"] += 1
        elif (entry["kind"] == "text" and expected is not None and
              UNQUOTED_QUOTE in ours.get("error", "") and
              any("\"" in cell for record in expected for cell in record["cells"])):
            counts["quote in an unquoted cell"] += 1
        else:
            failures.append("%s: Python %s, torchbus %s" % (
                name, expected if expected is not None else "refuses: " + error,
                json.dumps(ours)[:300]))
    for line in failures[:20]:
        print("FAIL", line)
    print("%d files (%d tables written by csv.writer, %d random texts): %s; %d differences" % (
        len(manifest), tables, texts, ", ".join("%s %d" % item for item in counts.items()),
        len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

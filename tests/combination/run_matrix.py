#!/usr/bin/python3
"""Combination test of torchbus-train: runs it over a matrix of data source x checkpoint
schedule x validation schedule x how the run ends, and checks the invariants of every cell
(exit code, summary.json, checkpoint files, run directory contents, resume equivalence).

A cell id is DATA/CHECKPOINTS/VALIDATION/END, e.g. csv/step7/steps5/sigterm:
  DATA         synthetic (MLP, batch 256) | cnn (generated IDX set, --model cnn --batch-size 64)
               | csv (generated CSV, ';'-separated, batch 8)
  CHECKPOINTS  epoch (epoch ends) | step1 | step7 (--checkpoint-every N) | none (--no-checkpoints)
  VALIDATION   epoch (--val-every 1) | steps5 (--val-every 0 --val-every-steps 5)
               | never (--val-every 0)
  END          completes | max_steps | time_limit | nan | early_stop | sigint | sigterm | sigkill
SIGINT/SIGTERM/SIGKILL cells resume (or, without checkpoints, --overwrite) and must end with
the parameters of the uninterrupted run of the same flags (the "completes" cell, run once and
cached).

No cell assumes how fast the machine is: a signal waits for what the program reports (a logged
step, a checkpoint file, a line of its output), and a run that must still be training when its
signal comes has the work for it. A SIGINT/SIGTERM cell signals at a random step k of the first
3/5 of the usual %d-epoch run, but trains enough epochs that at least %d steps remain after k
(its uninterrupted run, with as many epochs, is cached as well). A SIGKILL cell kills at a
random moment of start-up or of training, each measured on its uninterrupted run and counted
from the start or from the first logged step. faults/startup_signals signals runs of %d epochs.

Standard library only. Typical use:

  run_matrix.py --train build/release/apps/torchbus-train/torchbus-train \\
                --checker build/release/tests/checkpoint_check \\
                --work /tmp/combination --sample 56 --seed 1
  run_matrix.py ... --full                   # every cell (288)
  run_matrix.py ... --data cnn --sample 4    # only CNN cells; --end sigkill: only those ends
  run_matrix.py ... --cell csv/step7/steps5/sigterm --seed 1   # rerun one cell
  run_matrix.py ... --list [--sample N]      # print the cell ids

After the matrix, the fault cells faults/all_corrupt, faults/forged_payload and faults/mutations
damage the checkpoints of an interrupted run and check what --resume does: no crash, no hang;
exit 0 continuing a genuine checkpoint (to the uninterrupted run's parameters), or exit 1
naming the checkpoints with nothing in the run changed. faults/mutations applies %d random
mutations (bit flips, truncation, appended or zeroed bytes, files swapped with another run's,
payloads changed behind a recomputed CRC, odd entries), %d with --full. faults/bad_flags runs
the campaign's bad values (exit 2 naming the flag, nothing written); faults/startup_signals
sends stop signals during start-up and at the rendezvous (exit 128+N within seconds);
faults/world_size_change SIGKILLs a run of 2 ranks at a random step and resumes it on 1 rank and
on 3 with the same global batch (the uninterrupted run's steps and validation loss, both
segments in the summary), and on 3 ranks of another global batch (exit 1 naming it).

The stage cells stages/synthetic, stages/cnn, stages/csv (classification) and
stages/synthetic_regression, stages/cnn_regression, stages/csv_regression (--task regression) train a run of the data
source with --test (the data's held-out samples; the CSV file's every row): exit 0, finite
test_loss and test_accuracy (regression: test_mse equal to test_loss, test_mae) in summary.json,
one `test` row in metrics.csv; then --predict the same data with its model.pt, on one rank and on
two (mpirun): one row per sample, indices 0..N-1 in order, the same rows on both, probabilities
summing to 1 and the accuracy of the predicted classes against the labels equal to test_accuracy
(regression: the mean squared error of the predictions equal to test_mse); and --predict with the
weights of another network: exit 2 naming the mismatch, no predictions.csv.

With --gan EXAMPLE (examples/gan.cpp: two optimizer phases, a checkpoint every 16 steps), the
cell examples/gan_sigkill runs it to the end once, then SIGKILLs another run of it once the
checkpoint of a random step S (16 to %d) is on disk, within the next 16 steps (a fraction of the
uninterrupted run's time per checkpoint), runs it again in the same directory (it resumes) and
compares the final weights (model.pt) with the uninterrupted run's, byte for byte.

--sample N spreads the cells evenly over the ends. Random values of a cell (signal step, kill
delay, max-steps) come from Random("<seed>/<cell>"), so `--cell ID --seed S` reruns what the
sampled run did (the kill delay is a fraction of the reference run's measured start-up or
training, so it lands at a similar, not identical, moment). Every command line is printed before
it runs; a passed cell's directory under WORK/cells is deleted, a failed one's is kept (--keep:
all).

The last line printed is `N passed, M failed`; the exit status is 1 if any cell failed.
"""

import argparse
import csv
import hashlib
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback

# ----------------------------------------------------------------------------------------------
# The matrix

EPOCHS = 2
COMMON = ["--no-progress", "--threads", "1", "--log-every", "1"]

IDX_TRAIN, IDX_TEST = 640, 128
CSV_ROWS = 400
CSV_BATCH = 8


def csv_train_rows():
    return CSV_ROWS - max(1, CSV_ROWS // 5)  # torchbus-train keeps the last fifth for validation


DATA = {
    # name: (flags, train samples, batch size)
    "synthetic": (["--batch-size", "256"], 8192, 256),  # 32 steps an epoch
    "cnn": (["--data", "mnist:{idx}", "--model", "cnn", "--batch-size", "64"], IDX_TRAIN, 64),
    # The CSV file as a spreadsheet in a decimal-comma locale writes it: ';' (--csv-delimiter).
    "csv": (["--data", "csv:{csv}", "--csv-delimiter", ";", "--batch-size", str(CSV_BATCH)],
            csv_train_rows(), CSV_BATCH),
}

CKPT = {
    "epoch": [],
    "step1": ["--checkpoint-every", "1"],
    "step7": ["--checkpoint-every", "7"],
    "none": ["--no-checkpoints"],
}

VAL = {
    "epoch": ["--val-every", "1"],
    "steps5": ["--val-every", "0", "--val-every-steps", "5"],
    "never": ["--val-every", "0"],
}

ENDS = ["completes", "max_steps", "time_limit", "nan", "early_stop", "sigint", "sigterm",
        "sigkill"]

# Flags some ends add (they change the run, so such cells have no reference run), and their
# epochs.
TIME_LIMIT_FLAGS, TIME_LIMIT_EPOCHS = ["--time-limit", "0.5"], 1000  # the limit ends it
NAN_FLAGS = ["--optimizer", "sgd", "--lr", "1e30"]  # non-finite loss within a few steps
EARLY_STOP_FLAGS, EARLY_STOP_EPOCHS = ["--early-stopping", "1"], 30
# SIGINT/SIGTERM cells: the fewest steps their run has left after the step whose log line sends
# the signal. The signal stops the run at the next step boundary, so the steps it never trains
# cost nothing; what remains must outlast the moment between the program's writing that line and
# the signal's arrival on any machine (also a loaded one, where this driver waits for a core). Only
# the uninterrupted run and the resume train them all.
SIGNAL_SLACK = 300
# SIGKILL cells: the share of kills sent during start-up (before the first logged step); the
# others land at a random moment of training or up to 15 % of it past the end.
SIGKILL_IN_STARTUP = 0.15

ALLOWED_OUT = {"train.log", "identity.txt", "summary.json", "model.pt", "metrics.csv",
               "report.html", "tensorboard", "checkpoints"}
SANITIZER = re.compile(r"AddressSanitizer|runtime error:|LeakSanitizer|UndefinedBehaviorSanitizer")
SIGNALS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM}
STEP_LINE = re.compile(r"\bstep \d+ epoch\b")  # SimpleLogger's line of a step (--log-every 1)


def all_cells():
    return ["/".join((d, c, v, e)) for d in DATA for c in CKPT for v in VAL for e in ENDS]


def stratified_sample(cells, count, rng):
    """`count` cells, spread evenly over the ends (then at random), in matrix order."""
    groups = {}
    for cell in cells:
        groups.setdefault(cell.split("/")[3], []).append(cell)
    ends = sorted(groups)
    rng.shuffle(ends)
    for end in ends:
        rng.shuffle(groups[end])
    chosen = []
    while len(chosen) < min(count, len(cells)):
        for end in ends:
            if groups[end] and len(chosen) < count:
                chosen.append(groups[end].pop())
    return sorted(chosen, key=all_cells().index)


def steps_per_epoch(data):
    _, samples, batch = DATA[data]
    return (samples + batch - 1) // batch


def full_steps(data, epochs=EPOCHS):
    return epochs * steps_per_epoch(data)


def signal_step_range(data):
    """The steps a SIGINT/SIGTERM cell draws its signal step from: the first 3/5 of the usual run."""
    return 1, max(1, (full_steps(data) * 3) // 5)


def signal_epochs(data):
    """The epochs of a SIGINT/SIGTERM cell's runs: at least SIGNAL_SLACK steps after its latest
    possible signal step."""
    latest = signal_step_range(data)[1]
    return max(EPOCHS, -(-(latest + SIGNAL_SLACK) // steps_per_epoch(data)))


# ----------------------------------------------------------------------------------------------
# Data files


def write_idx_pair(images, labels, count, mislabel_every=0):
    """IDX images (magic 2051) and labels (2049), label encoded in brightness (as train_test.cpp).
    With mislabel_every n, every n-th label is wrong: a model that grows confident then sees its
    loss on them rise, so validation loss stops improving and early stopping triggers."""
    pixels = bytearray()
    for i in range(count):
        label = i % 10
        pixels += bytes((label * 25 + (p % 3)) & 0xFF for p in range(28 * 28))
    with open(images, "wb") as f:
        f.write(struct.pack(">IIII", 2051, count, 28, 28))
        f.write(pixels)
    with open(labels, "wb") as f:
        f.write(struct.pack(">II", 2049, count))
        f.write(bytes((i % 10 + (1 if mislabel_every and i % mislabel_every == 3 else 0)) % 10
                      for i in range(count)))


def write_csv(path):
    """~400 rows, 3 numeric features, 3 classes, learnable (class centres + small noise); one in
    ten validation rows is mislabelled (see write_idx_pair). Written as R's write.csv2 and
    spreadsheets write it: ';' between cells, the header quoted, CRLF line ends."""
    rng = random.Random(1234)
    centres = [(0.0, 1.0, -1.0), (1.5, -0.5, 0.5), (-1.0, -1.0, 1.5)]
    lines = ['"x0";"x1";"x2";"label"']
    for i in range(CSV_ROWS):
        label = i % 3
        cells = ["%.4f" % (c + rng.gauss(0, 0.3)) for c in centres[label]]
        if i >= csv_train_rows() and i % 10 == 0:
            label = (label + 1) % 3
        lines.append(";".join(cells + [str(label)]))
    with open(path, "w", newline="") as f:
        f.write("\r\n".join(lines) + "\r\n")


def make_data(work):
    root = os.path.join(work, "data")
    idx = os.path.join(root, "idx")
    os.makedirs(idx, exist_ok=True)
    write_idx_pair(os.path.join(idx, "train-images-idx3-ubyte"),
                   os.path.join(idx, "train-labels-idx1-ubyte"), IDX_TRAIN)
    write_idx_pair(os.path.join(idx, "t10k-images-idx3-ubyte"),
                   os.path.join(idx, "t10k-labels-idx1-ubyte"), IDX_TEST, mislabel_every=10)
    csv = os.path.join(root, "data.csv")
    write_csv(csv)
    return {"idx": idx, "csv": csv}


# ----------------------------------------------------------------------------------------------
# Running the program


class Failure(Exception):
    """A cell's invariant does not hold; the message is the one-line reason."""


class Run:
    def __init__(self, argv):
        self.argv = argv
        self.rc = None
        self.stdout = ""
        self.stderr = ""
        self.seconds = 0.0
        self.timed_out = False

    def output(self):
        return self.stdout + self.stderr

    def describe_exit(self):
        if self.timed_out:
            return "timed out"
        if self.rc is not None and self.rc < 0:
            return "killed by signal %d (%s)" % (-self.rc, signal.Signals(-self.rc).name)
        return "exit %s" % self.rc

    def last_stderr(self):
        lines = [l.strip() for l in self.stderr.splitlines() if l.strip()]
        if not lines:
            lines = [l.strip() for l in self.stdout.splitlines() if l.strip()]
        return lines[-1][:240] if lines else "(no output)"


class Runner:
    def __init__(self, options, printer):
        self.train = options.train
        self.checker = options.checker
        self.timeout = options.timeout
        self.print = printer
        self.live = []

    def start(self, args, program=None):
        run = Run([program or self.train] + args)
        self.print("  $ " + " ".join(shlex.quote(a) for a in run.argv))
        for attempt in range(10):
            run.start_time = time.monotonic()
            try:
                run.process = subprocess.Popen(run.argv, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               start_new_session=True)
                break
            except OSError as error:  # e.g. the executable is being relinked right now
                if attempt == 9:
                    raise Failure("cannot start %s: %s" % (self.train, error))
                time.sleep(1.0)
        self.live.append(run.process)
        run.chunks = {"stdout": [], "stderr": []}
        run.marker = None
        run.marker_seen = threading.Event()
        run.marker_signal = None  # a signal to send as soon as a reader sees the marker
        run.signal_lock = threading.Lock()
        run.signal_sent = False
        run.first_step_at = None  # when its first step's line was read (time.monotonic())
        run.first_step_seen = threading.Event()

        def read(stream, name):
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace")
                run.chunks[name].append(line)
                if run.first_step_at is None and STEP_LINE.search(line):
                    run.first_step_at = time.monotonic()
                    run.first_step_seen.set()
                if run.marker is not None and run.marker.search(line):
                    if run.marker_signal is not None:  # from here: no wait for another thread
                        self.send_once(run, run.marker_signal)
                    run.marker_seen.set()
            stream.close()

        run.readers = [threading.Thread(target=read, args=(run.process.stdout, "stdout")),
                       threading.Thread(target=read, args=(run.process.stderr, "stderr"))]
        for reader in run.readers:
            reader.daemon = True
            reader.start()
        return run

    def finish(self, run, timeout=None):
        timeout = self.timeout if timeout is None else timeout
        remaining = max(0.1, timeout - (time.monotonic() - run.start_time))
        try:
            run.rc = run.process.wait(remaining)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            run.process.kill()
            run.rc = run.process.wait()
        run.end_time = time.monotonic()
        run.seconds = run.end_time - run.start_time
        for reader in run.readers:
            reader.join(10)
        run.stdout = "".join(run.chunks["stdout"])
        run.stderr = "".join(run.chunks["stderr"])
        self.live.remove(run.process)
        self.print("    -> %s in %.1f s" % (run.describe_exit(), run.seconds))
        return run

    def run(self, args, program=None):
        return self.finish(self.start(args, program))

    @staticmethod
    def send_once(run, number):
        """Sends signal `number` to `run` unless it was sent already; False if it was gone."""
        with run.signal_lock:
            if not run.signal_sent:
                try:
                    os.kill(run.process.pid, number)
                except ProcessLookupError:
                    return False
                run.signal_sent = True
        return True

    @staticmethod
    def wait_for_output(run, pattern, timeout):
        """Waits until `run` printed a line matching `pattern` (a compiled regex); False if it
        ended or `timeout` seconds passed first."""
        run.marker = pattern
        if any(pattern.search(l) for l in list(run.chunks["stdout"]) + list(run.chunks["stderr"])):
            run.marker_seen.set()  # a line read before the marker was set
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if run.marker_seen.wait(0.005):
                return True
            if run.process.poll() is not None:
                return run.marker_seen.wait(1.0)  # (its last lines may still be being read)
        return False

    @staticmethod
    def phases(run):
        """(start-up, training) seconds of a finished run: until its first logged step, and from
        there to its exit; (run.seconds, 0) if it logged no step."""
        if run.first_step_at is None:
            return run.seconds, 0.0
        return run.first_step_at - run.start_time, run.end_time - run.first_step_at

    def kill_all(self):
        for process in list(self.live):
            try:
                process.kill()
            except OSError:
                pass

    def check_checkpoints(self, paths):
        """{path: result dict} from checkpoint_check."""
        if not paths:
            return {}
        result = subprocess.run([self.checker] + paths, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        found = {}
        lines = result.stdout.decode("utf-8", "replace").splitlines()
        for path, line in zip(paths, lines):
            fields = line.split("\t")
            if fields[0] == "ok" and len(fields) == 3:
                found[path] = {"path": path, "ok": True, "step": int(fields[1]),
                               "identity": bytes.fromhex(fields[2]).decode("utf-8", "replace")}
            elif fields[0] == "error" and len(fields) >= 2:
                found[path] = {"path": path, "ok": False, "error": "\t".join(fields[1:])}
            else:
                raise Failure("checkpoint_check printed a line it should not: %r" % line[:200])
        missing = [p for p in paths if p not in found]
        if missing:
            raise Failure("checkpoint_check said nothing about %s (exit %d, stderr %r)" %
                          (missing[0], result.returncode,
                           result.stderr.decode("utf-8", "replace")[-200:]))
        if SANITIZER.search(result.stderr.decode("utf-8", "replace")):
            raise Failure("checkpoint_check: sanitizer report: " +
                          result.stderr.decode("utf-8", "replace")[-300:])
        return found


# ----------------------------------------------------------------------------------------------
# Invariants


def snapshot(directory):
    """Everything observable about a directory tree: names, link targets, sizes, mtimes, contents."""
    if not os.path.lexists(directory):
        return None
    state = {}
    for root, dirs, files in os.walk(directory):
        rel_root = os.path.relpath(root, directory)
        stat = os.lstat(root)
        state[rel_root + "/"] = ("dir", stat.st_mtime_ns)
        for name in dirs + files:
            path = os.path.join(root, name)
            rel = os.path.normpath(os.path.join(rel_root, name))
            stat = os.lstat(path)
            if os.path.islink(path):
                state[rel] = ("link", os.readlink(path), stat.st_mtime_ns)
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                state[rel] = ("file", stat.st_size, stat.st_mtime_ns, digest)
    return state


def snapshot_difference(before, after):
    if before == after:
        return None
    if before is None:
        return "it did not exist and was created"
    if after is None:
        return "it was removed"
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    parts = []
    if added:
        parts.append("added " + ", ".join(added[:4]))
    if removed:
        parts.append("removed " + ", ".join(removed[:4]))
    if changed:
        parts.append("changed " + ", ".join(changed[:4]))
    return "; ".join(parts)


def read_summary(out):
    path = os.path.join(out, "summary.json")
    if not os.path.isfile(path):
        raise Failure("no summary.json")
    try:
        with open(path) as f:
            summary = json.load(f)
    except ValueError as error:
        raise Failure("summary.json is not JSON: %s" % error)
    if not isinstance(summary, dict):
        raise Failure("summary.json is not a JSON object")
    return summary


def reason_matches(reason, expected):
    """expected: an exact text, or a prefix ending with '*'."""
    if not isinstance(reason, str):
        return False
    if expected.endswith("*"):
        return reason.startswith(expected[:-1])
    return reason == expected


class Checks:
    """Collects the problems of one cell; the first ones make its one-line reason."""

    def __init__(self, runner, cell_flags):
        self.runner = runner
        self.flags = cell_flags
        self.problems = []

    def fail(self, text):
        self.problems.append(text)

    def no_sanitizer(self, run, what):
        match = SANITIZER.search(run.output())
        if match:
            line = next((l for l in run.output().splitlines() if SANITIZER.search(l)), "")
            self.fail("%s: sanitizer report: %s" % (what, line.strip()[:200]))

    def exit_code(self, run, expected, what):
        """True when `run` exited with `expected` (an int, or a set of ints)."""
        self.no_sanitizer(run, what)
        accepted = expected if isinstance(expected, (set, frozenset)) else {expected}
        if run.rc in accepted and not run.timed_out:
            return True
        wanted = "/".join(("killed by signal %d" % -e) if e < 0 else str(e) for e in sorted(accepted))
        self.fail("%s: %s, expected %s; last line: %s" %
                  (what, run.describe_exit(), wanted, run.last_stderr()))
        if run.rc == 1 and "--help" in run.stderr:
            self.fail("%s: exit 1 (runtime failure) followed by the --help hint" % what)
        return False

    def usage_error(self, run, what, out, before):
        """Exit 2 with a message on stderr, nothing trained, no summary, directory as before."""
        if not self.exit_code(run, 2, what):
            return
        if not run.stderr.strip():
            self.fail("%s: exit 2 with nothing on stderr" % what)
        if re.search(r"\bstep 1 epoch\b", run.output()):
            self.fail("%s: exit 2 after training had started (logged step 1)" % what)
        after = snapshot(out)
        if before is None:
            if after is not None and "summary.json" in after:
                self.fail("%s: exit 2 but wrote summary.json" % what)
        else:
            difference = snapshot_difference(before, after)
            if difference:
                self.fail("%s: exit 2 but the run directory changed: %s" % (what, difference))

    def outputs(self, run, out, expected_reason, steps=None, what="run", checkpoints=True):
        """summary.json, checkpoint files and the run directory after an exit 0 or 128+N.
        `steps`: an int, a (low, high) range, or None. Returns the summary (or None)."""
        try:
            summary = read_summary(out)
        except Failure as error:
            self.fail("%s: %s (%s)" % (what, error, run.describe_exit()))
            summary = None
        if summary is not None:
            reason = summary.get("stop_reason")
            if not reason_matches(reason, expected_reason):
                self.fail("%s: stop_reason %s, expected %s" %
                          (what, json.dumps(reason), json.dumps(expected_reason.rstrip("*")) +
                           (" (prefix)" if expected_reason.endswith("*") else "")))
            if "exit_code" not in summary:
                self.fail("%s: summary.json has no exit_code" % what)
            elif summary["exit_code"] != run.rc:
                self.fail("%s: summary.json exit_code %s, but the process exited %s" %
                          (what, json.dumps(summary["exit_code"]), run.rc))
            identity = summary.get("identity")
            if not isinstance(identity, str) or not identity.strip():
                self.fail("%s: summary.json identity is %s, expected the run identity text" %
                          (what, "missing" if identity is None else json.dumps(identity)[:60]))
            sha = summary.get("params_sha256")
            if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
                self.fail("%s: params_sha256 %s is not 64 hex digits" % (what, json.dumps(sha)))
            got = summary.get("steps")
            if not isinstance(got, int) or isinstance(got, bool):
                self.fail("%s: steps %s is not an integer" % (what, json.dumps(got)))
            elif isinstance(steps, int) and got != steps:
                self.fail("%s: steps %d, expected %d" % (what, got, steps))
            elif isinstance(steps, tuple) and not steps[0] <= got <= steps[1]:
                self.fail("%s: steps %d, expected %d..%d" % (what, got, steps[0], steps[1]))
        self.directory(out, what)
        if checkpoints:  # (not where damaged files were left in place on purpose)
            self.checkpoints(out, summary, what)
        return summary

    def continued_from(self, run, newest, total, what):
        """The run trained from step newest + 1 (from step 1 if no checkpoint): its first
        logged step (--log-every 1) says where it started."""
        first = re.search(r"\bstep (\d+) epoch\b", run.stdout + run.stderr)
        expected = (newest or 0) + 1
        if expected > total:
            if first:
                self.fail("%s: the newest checkpoint is of the last step %d, yet it trained "
                          "(logged step %s)" % (what, total, first.group(1)))
        elif not first:
            self.fail("%s: logged no step; expected to train from step %d" % (what, expected))
        elif int(first.group(1)) != expected:
            self.fail("%s: first logged step %s, expected %d (%s)" %
                      (what, first.group(1), expected,
                       "the newest checkpoint is of step %d" % newest if newest
                       else "no valid checkpoint: from scratch"))

    def directory(self, out, what):
        if not os.path.isdir(out):
            self.fail("%s: run directory %s missing" % (what, out))
            return
        extra = sorted(set(os.listdir(out)) - ALLOWED_OUT)
        if extra:
            self.fail("%s: unexpected file(s) in the run directory: %s" % (what, ", ".join(extra)))
        for root, dirs, files in os.walk(out):
            for name in dirs + files:
                if ".tmp" in name:
                    self.fail("%s: leftover temporary %s" %
                              (what, os.path.relpath(os.path.join(root, name), out)))
                    return

    def checkpoints(self, out, summary, what):
        directory = os.path.join(out, "checkpoints")
        files = []
        if os.path.isdir(directory):
            files = sorted(os.path.join(directory, n) for n in os.listdir(directory)
                           if n.endswith(".tbckpt"))
        checkpoints_on = "--no-checkpoints" not in self.flags
        if not checkpoints_on:
            if files:
                self.fail("%s: --no-checkpoints, yet %d checkpoint file(s) in %s" %
                          (what, len(files), directory))
            return
        try:
            results = self.runner.check_checkpoints(files)
        except Failure as error:
            self.fail("%s: %s" % (what, error))
            return
        identity = summary.get("identity") if summary else None
        steps = summary.get("steps") if summary else None
        newest = -1
        for path in files:
            entry = results[path]
            name = os.path.basename(path)
            if not entry.get("ok"):
                self.fail("%s: checkpoint %s unreadable: %s" % (what, name, entry.get("error")))
                continue
            newest = max(newest, entry.get("step", -1))
            if isinstance(identity, str) and identity and entry.get("identity") != identity:
                self.fail("%s: checkpoint %s has identity %s, summary.json %s" %
                          (what, name, json.dumps(entry.get("identity"))[:80],
                           json.dumps(identity)[:80]))
            if isinstance(steps, int) and entry.get("step", 0) > steps:
                self.fail("%s: checkpoint %s is of step %d, after the run's last step %d" %
                          (what, name, entry.get("step"), steps))
        if summary and reason_matches(summary.get("stop_reason"), "completed") and not files:
            self.fail("%s: completed with checkpoints on, but %s holds no checkpoint" %
                      (what, directory))
        if files and not os.path.lexists(os.path.join(directory, "last.tbckpt")):
            self.fail("%s: checkpoints but no last.tbckpt" % what)
        return newest


# ----------------------------------------------------------------------------------------------
# Cells


class Matrix:
    def __init__(self, options, runner, data_files, printer):
        self.options = options
        self.runner = runner
        self.files = data_files
        self.print = printer
        self.references = {}  # (data, ckpt, val, epochs) -> (problems, sha, seconds, phases)
        self.relaunch_checked = set()  # data sources whose relaunch check ran
        self.faults = Faults(self)
        self.gan = GanExample(self)
        self.stages = Stages(self)

    def cell_dir(self, cell, tag):
        return os.path.join(self.options.work, "cells", cell.replace("/", "-"), tag)

    def flags(self, data, ckpt, val, out, epochs=EPOCHS):
        flags = [f.format(**self.files) for f in DATA[data][0]]
        return flags + CKPT[ckpt] + VAL[val] + ["--epochs", str(epochs)] + COMMON + ["--out", out]

    # The uninterrupted run of a (data, ckpt, val) combination, run once per driver invocation
    # (per number of epochs: the SIGINT/SIGTERM cells train more). The first reference run of
    # each data source also checks that a second fresh launch into its finished directory is
    # refused; those problems go to the cell that triggered it.
    def reference(self, data, ckpt, val, epochs=EPOCHS):
        key = (data, ckpt, val, epochs)
        relaunch_problems = []
        if key not in self.references:
            cell = "/".join((data, ckpt, val, "completes"))
            self.print("  reference run (%s%s):" %
                       (cell, "" if epochs == EPOCHS else ", %d epochs" % epochs))
            out = self.cell_dir(cell, "reference" if epochs == EPOCHS else
                                "reference-%d-epochs" % epochs)
            shutil.rmtree(out, ignore_errors=True)
            checks = Checks(self.runner, self.flags(data, ckpt, val, out, epochs))
            run = self.runner.run(checks.flags)
            sha = None
            if checks.exit_code(run, 0, "run"):
                summary = checks.outputs(run, out, "completed", full_steps(data, epochs))
                sha = summary.get("params_sha256") if summary else None
                if data not in self.relaunch_checked:
                    self.relaunch_checked.add(data)
                    relaunch = Checks(self.runner, checks.flags)
                    before = snapshot(out)
                    again = self.runner.run(checks.flags)
                    relaunch.usage_error(again, "relaunch into a finished run directory without "
                                         "--resume/--overwrite", out, before)
                    relaunch_problems = relaunch.problems
            if not checks.problems and not relaunch_problems and not self.options.keep:
                shutil.rmtree(out, ignore_errors=True)
            self.references[key] = (checks.problems, sha, run.seconds, self.runner.phases(run))
        problems, sha, seconds, _ = self.references[key]
        return problems, sha, seconds, relaunch_problems

    def reference_sha(self, data, ckpt, val, checks, epochs=EPOCHS):
        """The params_sha256 of the reference run and its (start-up, training) seconds."""
        problems, sha, _, relaunch_problems = self.reference(data, ckpt, val, epochs)
        checks.problems.extend(relaunch_problems)
        if sha is None:  # its other problems are the completes cell's, not this one's
            raise Failure("reference run (%s/%s/%s/completes%s) failed: %s" %
                          (data, ckpt, val, "" if epochs == EPOCHS else ", %d epochs" % epochs,
                           problems[0] if problems else "no params_sha256"))
        return sha, self.references[(data, ckpt, val, epochs)][3]

    def run_cell(self, cell, seed):
        """Runs one cell; returns (problems, note)."""
        if cell.startswith("faults/"):
            return self.faults.run_cell(cell.split("/")[1], self.options)
        if cell == GAN_CELL:
            return self.gan.run_cell(seed)
        if cell.startswith("stages/"):
            return self.stages.run_cell(cell.split("/")[1])
        data, ckpt, val, end = cell.split("/")
        rng = random.Random("%s/%s" % (seed, cell))
        out = self.cell_dir(cell, "out")
        shutil.rmtree(out, ignore_errors=True)
        flags = self.flags(data, ckpt, val, out)
        checks = Checks(self.runner, flags)
        total = full_steps(data)
        no_validation = val == "never"
        note = ""

        if end == "completes":
            problems, _, seconds, relaunch_problems = self.reference(data, ckpt, val)
            return list(problems) + relaunch_problems, "%.1f s" % seconds

        if end == "early_stop" and no_validation:
            checks.flags = self.flags(data, ckpt, val, out, EARLY_STOP_EPOCHS) + EARLY_STOP_FLAGS
            run = self.runner.run(checks.flags)
            checks.usage_error(run, "--early-stopping without validation", out, None)
            return checks.problems, "usage error expected"

        if end == "max_steps":
            k = rng.randint(1, total - 1)
            checks.flags = flags + ["--max-steps", str(k)]
            run = self.runner.run(checks.flags)
            if checks.exit_code(run, 0, "run"):
                checks.outputs(run, out, "max_steps reached", k)
            return checks.problems, "max-steps %d" % k

        if end == "time_limit":
            checks.flags = self.flags(data, ckpt, val, out, TIME_LIMIT_EPOCHS) + TIME_LIMIT_FLAGS
            run = self.runner.run(checks.flags)
            if checks.exit_code(run, 0, "run"):
                summary = checks.outputs(run, out, "Timer: time limit*")
                self.resume_finished(checks, out, summary)
            return checks.problems, ""

        if end == "nan":
            checks.flags = flags + NAN_FLAGS  # (CSV cells of nan are refused when loaded)
            run = self.runner.run(checks.flags)
            if checks.exit_code(run, 0, "run"):
                summary = checks.outputs(run, out, "TerminateOnNaN:*", (0, total - 1))
                self.resume_finished(checks, out, summary)
            return checks.problems, ""

        if end == "early_stop":
            checks.flags = self.flags(data, ckpt, val, out, EARLY_STOP_EPOCHS) + EARLY_STOP_FLAGS
            run = self.runner.run(checks.flags)
            if checks.exit_code(run, 0, "run"):
                summary = checks.outputs(run, out, "EarlyStopping:*")
                if summary:
                    note = "stopped at step %s" % summary.get("steps")
                self.resume_finished(checks, out, summary)
            return checks.problems, note

        if end in SIGNALS:
            number = SIGNALS[end]
            expected_rc = 128 + number
            k = rng.randint(*signal_step_range(data))
            # Epochs enough that SIGNAL_SLACK steps or more remain after step k, on any machine.
            epochs = signal_epochs(data)
            flags = self.flags(data, ckpt, val, out, epochs)
            checks.flags = flags
            total = full_steps(data, epochs)
            run = self.runner.start(flags)
            landed = self.signal_at_step(run, out, k, number)
            self.runner.finish(run)
            note = "%s after step %d of %d" % (end.upper(), k, total)
            if not landed:
                checks.no_sanitizer(run, "run")
                checks.fail("run: no %s after 'step %d epoch': it never logged it, or it ended "
                            "first (%s; last line: %s)" %
                            (end.upper(), k, run.describe_exit(), run.last_stderr()))
                return checks.problems, note
            if not checks.exit_code(run, expected_rc, "run after %s" % end.upper()):
                return checks.problems, note
            summary = checks.outputs(run, out, "interrupted (%s)" % end.upper(), (k, total),
                                     what="run after %s" % end.upper())
            if summary and ckpt != "none":
                newest = self.newest_checkpoint_step(out)
                if isinstance(summary.get("steps"), int) and newest != summary["steps"]:
                    checks.fail("run after %s: newest checkpoint is of step %s, the run stopped "
                                "at step %d (no checkpoint at the stop)" %
                                (end.upper(), newest, summary["steps"]))
            if ckpt == "none":
                return checks.problems, note
            sha, _ = self.reference_sha(data, ckpt, val, checks, epochs)
            newest = self.newest_checkpoint_step(out)
            resumed = self.runner.run(flags + ["--resume"])
            if checks.exit_code(resumed, 0, "--resume"):
                checks.continued_from(resumed, newest, total, "--resume")
                summary = checks.outputs(resumed, out, "completed", total, what="--resume")
                if summary and summary.get("params_sha256") != sha:
                    checks.fail("--resume: params_sha256 %s differs from the uninterrupted run's "
                                "%s" % (str(summary.get("params_sha256"))[:12], sha[:12]))
            return checks.problems, note

        if end == "sigkill":
            sha, (startup, training) = self.reference_sha(data, ckpt, val, checks)
            # A moment of the start-up (loading LibTorch, the data, taking the run directory), or
            # of the training (from the first logged step to the exit, up to 15 % past it), each
            # a fraction of that phase of the uninterrupted run: not of the whole run, whose
            # start-up may be most of it on one machine and little of it on another.
            in_startup = rng.random() < SIGKILL_IN_STARTUP
            fraction = rng.uniform(0.0, 1.0 if in_startup else 1.15)
            delay = fraction * (startup if in_startup else training)
            run = self.runner.start(flags)
            if not in_startup:
                deadline = run.start_time + self.runner.timeout
                while not run.first_step_seen.wait(0.005) and run.process.poll() is None and \
                        time.monotonic() < deadline:
                    pass
            time.sleep(delay)
            if run.process.poll() is None:
                os.kill(run.process.pid, signal.SIGKILL)
            self.runner.finish(run)
            checks.no_sanitizer(run, "killed run")
            if run.rc not in (-signal.SIGKILL, 0):
                checks.fail("killed run: %s, expected killed by signal 9 (or exit 0 if it finished "
                            "first); last line: %s" % (run.describe_exit(), run.last_stderr()))
                return checks.problems, ""
            checkpoint_files = self.checkpoint_files(out)
            valid = [e for e in self.runner.check_checkpoints(checkpoint_files).values()
                     if e.get("ok")] if checkpoint_files else []
            if run.rc == 0:
                landed = "after the run finished"
            elif ckpt == "none":
                landed = "while it ran"
            elif not valid:
                landed = "before the first checkpoint"
            else:
                landed = "after step %d's checkpoint" % max(e.get("step", -1) for e in valid)
            temporaries = [os.path.relpath(os.path.join(root, n), out)
                           for root, dirs, files in os.walk(out) for n in dirs + files
                           if ".tmp" in n]
            if temporaries:
                landed += ", during a write (%s)" % temporaries[0]
            note = "SIGKILL %.3f s after its %s (%.0f%% of the reference's %s), %s" % (
                delay, "start" if in_startup else "first step", fraction * 100,
                "start-up" if in_startup else "training", landed)
            if ckpt == "none":
                before = snapshot(out)
                resumed = self.runner.run(flags + ["--resume"])
                checks.usage_error(resumed, "--resume with --no-checkpoints", out, before)
                what = "--overwrite"
                again = self.runner.run(flags + [what])
                finished = checks.exit_code(again, 0, what)
            else:
                what = "--resume"
                newest = max((e.get("step", -1) for e in valid), default=None)
                again = self.runner.run(flags + [what])
                finished = checks.exit_code(again, 0, what)
                if finished:
                    checks.continued_from(again, newest, total, what)
                if finished and run.rc != 0 and not valid and \
                        not re.search(r"warn", again.output(), re.IGNORECASE):
                    checks.fail("--resume: no valid checkpoint to resume from, yet no warning "
                                "that it starts from scratch")
            if finished:
                summary = checks.outputs(again, out, "completed", total, what=what)
                if summary and summary.get("params_sha256") != sha:
                    checks.fail("%s: params_sha256 %s differs from the uninterrupted run's %s" %
                                (what, str(summary.get("params_sha256"))[:12], sha[:12]))
            return checks.problems, note

        raise AssertionError(cell)

    def resume_finished(self, checks, out, summary):
        """A run that ended by its own decision is over: --resume trains nothing, changes
        nothing but train.log, and exits 0 with `already finished: <stop_reason>`."""
        if summary is None or "--no-checkpoints" in checks.flags:
            return
        before = snapshot(out)
        resumed = self.runner.run(checks.flags + ["--resume"])
        if not checks.exit_code(resumed, 0, "--resume of the finished run"):
            return
        expected = "already finished: %s" % summary.get("stop_reason")
        if expected not in resumed.output():
            checks.fail("--resume of the finished run: no '%s' in its output; last line: %s" %
                        (expected[:80], resumed.last_stderr()))
        if re.search(r"\bstep \d+ epoch\b", resumed.output()):
            checks.fail("--resume of the finished run trained (logged a step)")
        after = snapshot(out)
        for state in (before, after):
            if state:
                state.pop("train.log", None)
                state.pop("./", None)
        difference = snapshot_difference(before, after)
        if difference:
            checks.fail("--resume of the finished run changed its outputs: %s" % difference)

    def signal_at_step(self, run, out, k, number):
        """Sends `number` once step k is logged (console or train.log); False if it never was.
        The thread that reads the line sends it at once."""
        run.marker_signal = number
        run.marker = re.compile(r"\bstep %d epoch\b" % k)
        # A line read before the marker was set.
        if any(run.marker.search(l) for l in list(run.chunks["stdout"]) +
               list(run.chunks["stderr"])):
            run.marker_seen.set()
        log = os.path.join(out, "train.log")
        deadline = time.monotonic() + self.runner.timeout
        next_log_poll = 0.0
        while time.monotonic() < deadline:
            if run.marker_seen.wait(0.002):
                break
            if time.monotonic() >= next_log_poll:
                next_log_poll = time.monotonic() + 0.02
                try:
                    with open(log, errors="replace") as f:
                        if run.marker.search(f.read()):
                            break
                except OSError:
                    pass
            if run.process.poll() is not None:
                return run.signal_sent  # (by the reader, maybe, just before the run ended)
        else:
            return False
        return self.runner.send_once(run, number)

    def checkpoint_files(self, out):
        directory = os.path.join(out, "checkpoints")
        if not os.path.isdir(directory):
            return []
        return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                      if n.endswith(".tbckpt"))

    def newest_checkpoint_step(self, out):
        files = self.checkpoint_files(out)
        try:
            results = self.runner.check_checkpoints(files)
        except Failure:
            return None
        steps = [e.get("step") for e in results.values() if e.get("ok")]
        return max(steps) if steps else None



# ----------------------------------------------------------------------------------------------
# Stages: --test after training and --predict with its weights, on each data source.

# cell name: (data source, its --test/--predict spec, --task)
STAGES = {
    "synthetic": ("synthetic", "synthetic", "classification"),
    "cnn": ("cnn", "mnist:{idx}", "classification"),
    "csv": ("csv", "csv:{csv}", "classification"),
    "synthetic_regression": ("synthetic", "synthetic", "regression"),
    "cnn_regression": ("cnn", "mnist:{idx}", "regression"),
    "csv_regression": ("csv", "csv:{csv}", "regression"),
}


def read_predictions(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


class Stages:
    def __init__(self, matrix):
        self.matrix = matrix

    def run_cell(self, name):
        matrix = self.matrix
        cell = "stages/" + name
        data, spec, task = STAGES[name]
        regression = task == "regression"
        checks = Checks(matrix.runner, [])
        out = matrix.cell_dir(cell, "train")
        shutil.rmtree(out, ignore_errors=True)
        test = spec.format(**matrix.files)
        run = matrix.runner.run(matrix.flags(data, "epoch", "epoch", out, epochs=1) +
                                ["--test", test, "--task", task])
        if not checks.exit_code(run, 0, "train --test"):
            return checks.problems, ""
        summary = read_summary(out)
        loss, accuracy = summary.get("test_loss"), summary.get("test_accuracy")
        mse = summary.get("test_mse")
        if not (isinstance(loss, float) and math.isfinite(loss)):
            checks.fail("summary.json test_loss %s is not a finite number" % json.dumps(loss))
        if regression:
            # RegressionMetrics' MSE (float64 sums) is the mean loss per sample (float32 losses).
            if not (isinstance(mse, float) and isinstance(loss, float)
                    and math.isclose(mse, loss, rel_tol=1e-5)):
                checks.fail("summary.json test_mse %s is not test_loss %s"
                            % (json.dumps(mse), json.dumps(loss)))
            if not isinstance(summary.get("test_mae"), float):
                checks.fail("summary.json has no test_mae")
        elif not (isinstance(accuracy, float) and 0.0 <= accuracy <= 1.0):
            checks.fail("summary.json test_accuracy %s is not in [0, 1]" % json.dumps(accuracy))
        with open(os.path.join(out, "metrics.csv"), newline="") as file:
            rows = [row for row in csv.DictReader(file) if row["kind"] == "test"]
        if len(rows) != 1 or not rows[0].get("test_loss") or float(rows[0]["test_loss"]) != loss:
            checks.fail("metrics.csv has %d test rows (expected one with test_loss %s)"
                        % (len(rows), loss))
        weights = os.path.join(out, "model.pt")
        predicted = {}
        for ranks in (1, 2):
            where = matrix.cell_dir(cell, "predict%d" % ranks)
            shutil.rmtree(where, ignore_errors=True)
            flags = [f.format(**matrix.files) for f in DATA[data][0]] + COMMON + [
                "--task", task, "--predict", test, "--weights", weights, "--out", where]
            if ranks == 1:
                run = matrix.runner.run(flags)
            else:
                port = str(20000 + random.Random(cell).randrange(20000))
                run = matrix.runner.run(
                    ["-np", "2", "--oversubscribe", "--allow-run-as-root", "-x",
                     "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + port, matrix.runner.train] +
                    flags, program="mpirun")
            if not checks.exit_code(run, 0, "--predict on %d rank(s)" % ranks):
                continue
            predicted[ranks] = read_predictions(os.path.join(where, "predictions.csv"))
        one = predicted.get(1)
        if one is not None:
            if [int(row["index"]) for row in one] != list(range(len(one))):
                checks.fail("predictions.csv: indices are not 0..%d in order" % (len(one) - 1))
            two = predicted.get(2)
            if regression:
                squared = sum((float(r["prediction"]) - float(r["label"])) ** 2 for r in one)
                if mse is not None and not math.isclose(squared / len(one), mse, rel_tol=1e-4):
                    checks.fail("predictions.csv: mean squared error %r, test_mse %r"
                                % (squared / len(one), mse))
                if two is not None and (
                        [(r["index"], r["label"]) for r in two] !=
                        [(r["index"], r["label"]) for r in one]
                        or any(abs(float(a["prediction"]) - float(b["prediction"])) > 1e-4
                               for a, b in zip(one, two))):
                    checks.fail("predictions.csv on two ranks differs from one rank's")
            else:
                classes = [key for key in one[0] if key.startswith("probability_")]
                if any(abs(sum(float(row[key]) for key in classes) - 1.0) > 1e-5 for row in one):
                    checks.fail("predictions.csv: probabilities that do not sum to 1")
                hits = sum(row["class"] == row["label"] for row in one) / len(one)
                if accuracy is not None and hits != accuracy:
                    checks.fail("predictions.csv: classes right for %r of the samples, "
                                "test_accuracy %r" % (hits, accuracy))
                if two is not None and [(r["index"], r["class"], r["label"]) for r in two] != [
                        (r["index"], r["class"], r["label"]) for r in one]:
                    checks.fail("predictions.csv on two ranks differs from one rank's (%d vs %d "
                                "rows)" % (len(two), len(one)))
        # Weights of another network: exit 2 naming the mismatch, nothing written.
        wrong = matrix.cell_dir(cell, "wrong")
        shutil.rmtree(wrong, ignore_errors=True)
        network = [f.format(**matrix.files) for f in DATA[data][0]]
        if data == "cnn":  # an MLP on the images instead of the CNN
            network[network.index("cnn")] = "mlp"
        run = matrix.runner.run(network + ["--hidden", "5", "--task", task] + COMMON +
                                ["--predict", test, "--weights", weights, "--out", wrong])
        if checks.exit_code(run, 2, "--predict with another network's weights"):
            if "mismatch" not in run.stderr and "missing" not in run.stderr:
                checks.fail("--predict with other weights: the message names no mismatch: " +
                            run.last_stderr())
            if os.path.exists(os.path.join(wrong, "predictions.csv")):
                checks.fail("--predict with other weights wrote predictions.csv")
        return checks.problems, "%d predictions" % (len(one) if one else 0)


# ----------------------------------------------------------------------------------------------
# Faults: what a damaged run directory does to --resume. Each scenario is a cell "faults/NAME".

FAULTS = ["all_corrupt", "forged_payload", "mutations", "bad_flags", "startup_signals",
          "world_size_change"]
# The campaign's bad values (issue 31): each is exit 2 naming the flag, found before OUT exists,
# within seconds (the first hung: it walked every epoch).
BAD_FLAGS = [
    (["--epochs", "1000000000000", "--max-steps", "5", "--lr", "1e38"], "--lr"),
    (["--lr", "1e38"], "--lr"),
    (["--seed", "-1"], "--seed"),
    (["--seed", "18446744073709551616"], "--seed"),
    (["--out", ""], "--out"),
    (["--epochs", "0"], "--epochs"),
    (["--batch-size", "-3"], "--batch-size"),
    (["--time-limit", "nan"], "--time-limit"),
    (["--ema", "inf"], "--ema"),
    (["--limit-train-batches", "1.5"], "--limit-train-batches"),
    (["--accumulate-schedule", "0:0"], "--accumulate-schedule"),
    (["--threads", "100000"], "--threads"),
    (["--device", "gpu"], "--device"),
]
# A small run with several checkpoints, interrupted (no summary) so that a resume trains on: 120
# steps (6 epochs of 20 batches), SIGTERM once step FAULT_STOP is logged. It stops at the next step
# boundary (--max-steps is in the identity: a signal stops it), keeping its newest three
# checkpoints (of steps 8 and 12, and of the step it stopped at, as a rule); the hundred-odd steps
# it had left (and some 25 checkpoint writes) are more than any machine trains before the signal
# arrives. (With 20 steps, 6 left, a fast machine could have finished first.)
FAULT_FLAGS = ["--batch-size", "256", "--epochs", "6", "--limit-train-batches", "20",
               "--checkpoint-every", "4", "--val-every", "0"] + COMMON
FAULT_STOP = 14
# A stop signal during start-up goes to a run of this many epochs (synthetic data, 128 steps
# each): when it lands after start-up on a fast machine, the run is training, and stops at once.
STARTUP_SIGNAL_EPOCHS = 100000
MUTATIONS_SAMPLED, MUTATIONS_FULL = 12, 200
# faults/world_size_change: a global batch of 96 (2 ranks of 48; 3 of 32; 1 of 96), the first 40
# batches of each rank's shard per epoch (the same 3,840 samples of the epoch's order whatever
# the split), 3 epochs of 40 steps, checkpoints every 4 steps, validation every epoch. The ranks
# are SIGKILLed once a random step of 6..60 is logged.
RESHARD_FLAGS = ["--epochs", "3", "--limit-train-batches", "40", "--checkpoint-every", "4",
                 "--val-every", "1"] + COMMON
RESHARD_GLOBAL_BATCH = 96


CRC32C_TABLE = []


def crc32c(data):
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, RFC 3720), written here
    independently of the framework's Boost.CRC."""
    if not CRC32C_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
            CRC32C_TABLE.append(c)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def split_checkpoint(blob):
    """(header before the payload size, payload) of a version-2 .tbckpt, or None."""
    if len(blob) < 36 or blob[:8] != b"TBCKPT\r\n" or struct.unpack("<I", blob[8:12])[0] != 2:
        return None
    identity_size = struct.unpack("<I", blob[20:24])[0]
    offset = 24 + identity_size
    size = struct.unpack("<Q", blob[offset:offset + 8])[0]
    return blob[:offset], blob[offset + 12:offset + 12 + size]


def frame_checkpoint(head, payload):
    """A version-2 .tbckpt of `head` (up to the payload size) and `payload`, with a valid CRC."""
    covered = head + struct.pack("<Q", len(payload))
    return covered + struct.pack("<I", crc32c(covered + payload)) + payload


def wait_for_handler(pid, number, seconds=5.0):
    """Waits until process `pid` catches signal `number` (SigCgt in /proc/PID/status)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/status" % pid) as f:
                caught = next(int(l.split()[1], 16) for l in f if l.startswith("SigCgt:"))
            if caught & (1 << (number - 1)):
                return
        except (OSError, StopIteration, ValueError):
            return  # gone: the caller sees how it ended
        time.sleep(0.0005)


class Faults:
    def __init__(self, matrix):
        self.matrix = matrix
        self.runner = matrix.runner
        self.print = matrix.print
        self.base = None  # (directory of the interrupted run, params_sha256 of the whole run)

    def flags(self, out, seed=42):
        return FAULT_FLAGS + ["--seed", str(seed), "--out", out]

    def interrupted_run(self, out, seed=42):
        """Runs FAULT_FLAGS, SIGTERM after step FAULT_STOP; the run keeps its checkpoints."""
        shutil.rmtree(out, ignore_errors=True)
        run = self.runner.start(self.flags(out, seed))
        if not self.matrix.signal_at_step(run, out, FAULT_STOP, signal.SIGTERM):
            self.runner.finish(run)
            raise Failure("the run to damage was not signalled after step %d: it never logged it, "
                          "or it ended first (%s)" %
                          (FAULT_STOP, run.last_stderr()))
        self.runner.finish(run)
        if run.rc != 128 + signal.SIGTERM:
            raise Failure("the run to damage: %s, expected exit 143" % run.describe_exit())

    def prepare(self):
        """The interrupted run (copied per scenario), another run's checkpoints, and the sha of
        the uninterrupted run."""
        if self.base:
            return self.base
        root = os.path.join(self.matrix.options.work, "faults")
        reference = os.path.join(root, "reference")
        shutil.rmtree(reference, ignore_errors=True)
        run = self.runner.run(self.flags(reference))
        if run.rc != 0:
            raise Failure("fault reference run: %s; %s" % (run.describe_exit(), run.last_stderr()))
        sha = read_summary(reference)["params_sha256"]
        base = os.path.join(root, "interrupted")
        self.interrupted_run(base)
        other = os.path.join(root, "other")
        self.interrupted_run(other, seed=7)
        self.base = (base, other, sha)
        return self.base

    def copy_of_base(self, name):
        base, _, _ = self.prepare()
        out = os.path.join(self.matrix.options.work, "cells", "faults-" + name)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out, symlinks=True)
        return out

    @staticmethod
    def checkpoint_files(out):
        directory = os.path.join(out, "checkpoints")
        return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                      if n.endswith(".tbckpt") and not os.path.islink(os.path.join(directory, n)))

    def resume(self, checks, out, what, expect_failure=None):
        """--resume of a damaged copy: no crash, no hang; exit 0 continuing a genuine checkpoint,
        or exit 1 naming what is wrong with nothing in the run changed. expect_failure: True
        (must fail), False (must resume), None (either)."""
        _, _, sha = self.prepare()
        before = snapshot(out)
        run = self.runner.run(self.flags(out) + ["--resume"], )
        if not checks.exit_code(run, {0, 1} if expect_failure is None else
                                (1 if expect_failure else 0), what):
            return run
        if run.rc == 1:
            text = run.stderr.strip()
            if not text or "run failed: \n" in run.stderr or text.endswith("run failed:"):
                checks.fail("%s: exit 1 without a message" % what)
            elif not re.search(r"checkpoint", text):
                checks.fail("%s: exit 1, but the message names no checkpoint: %s" %
                            (what, run.last_stderr()))
            after = snapshot(out)
            for state in (before, after):
                state.pop("./", None)
                state.pop("train.log", None)  # may tell of the attempt
            difference = snapshot_difference(before, after)
            if difference:
                checks.fail("%s: exit 1, but the run directory changed: %s" % (what, difference))
            return run
        if "resumed from" not in run.output() and "from scratch" not in run.output():
            checks.fail("%s: exit 0 without 'resumed from' or 'from scratch'; last line: %s" %
                        (what, run.last_stderr()))
        # A payload changed behind a recomputed CRC may still load, with other weights: that run
        # may end any way (a non-finite loss, say); a genuine checkpoint gives the reference run.
        forged = what.endswith(" forged")
        summary = checks.outputs(run, out, "*" if forged else "completed", what=what,
                                 checkpoints=False)
        if summary and summary.get("params_sha256") != sha and not forged:
            checks.fail("%s: params_sha256 %s differs from the uninterrupted run's %s" %
                        (what, str(summary.get("params_sha256"))[:12], sha[:12]))
        return run

    def all_corrupt(self, checks):
        out = self.copy_of_base("all_corrupt")
        files = self.checkpoint_files(out)
        if len(files) < 2:
            raise Failure("the interrupted run left %d checkpoint(s), expected several" % len(files))
        for path in files:
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) // 2)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0x5A]))
        run = self.resume(checks, out, "--resume with every checkpoint corrupt", True)
        for path in files:
            if path not in run.stderr:
                checks.fail("--resume with every checkpoint corrupt: %s not named" % path)
        return "%d checkpoints" % len(files)

    def forged_payload(self, checks):
        out = self.copy_of_base("forged_payload")
        # The newest by the step it holds: not by its mtime, which the file system keeps in ticks
        # (4 ms here) that two checkpoints written in quick succession can share.
        steps = {path: entry.get("step", -1) for path, entry in
                 self.runner.check_checkpoints(self.checkpoint_files(out)).items()}
        newest = max(steps, key=steps.get)
        with open(newest, "rb") as f:
            head, payload = split_checkpoint(f.read())
        with open(newest, "wb") as f:  # garbage in the archive's middle, the CRC made to match
            middle = len(payload) // 2
            f.write(frame_checkpoint(head, payload[:middle] + b"`" * 64 + payload[middle + 64:]))
        run = self.resume(checks, out, "--resume with a forged newest checkpoint forged", None)
        if run.rc == 0 and newest not in run.output() and "resumed from %s" % newest not in \
                run.output():
            checks.fail("--resume with a forged newest checkpoint: neither resumed from it nor "
                        "named it")
        return os.path.basename(newest)

    def mutate(self, rng, out, other):
        """Applies one random mutation to the checkpoints of `out`; returns its description."""
        files = self.checkpoint_files(out)
        kind = rng.choice(["flip", "truncate", "append", "swap", "forge", "zero", "odd_entry"])
        victims = rng.sample(files, rng.randint(1, len(files)))
        for path in victims:
            with open(path, "rb") as f:
                blob = bytearray(f.read())
            if kind == "flip":
                for _ in range(rng.randint(1, 8)):
                    position = rng.randrange(len(blob))
                    blob[position] ^= 1 << rng.randrange(8)
            elif kind == "truncate":
                del blob[rng.randrange(len(blob)):]
            elif kind == "append":
                blob += bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096)))
            elif kind == "zero":
                start = rng.randrange(len(blob))
                blob[start:start + rng.randint(1, 4096)] = b"\0" * len(blob[start:start + 4096])
            elif kind == "swap":
                theirs = self.checkpoint_files(other)
                with open(rng.choice(theirs), "rb") as f:
                    blob = bytearray(f.read())
            elif kind == "forge":
                head, payload = split_checkpoint(bytes(blob))
                payload = bytearray(payload)
                for _ in range(rng.randint(1, 16)):
                    payload[rng.randrange(len(payload))] = rng.randrange(256)
                blob = bytearray(frame_checkpoint(head, bytes(payload)))
            elif kind == "odd_entry":
                os.remove(path)
                if rng.random() < 0.5:
                    os.mkdir(path)
                else:
                    os.symlink(os.path.basename(path), path)  # a loop
                continue
            with open(path, "wb") as f:
                f.write(blob)
        return "%s of %s" % (kind, ", ".join(os.path.basename(v) for v in victims))

    def mutations(self, checks, count, seed):
        _, other, _ = self.prepare()
        rng = random.Random("%s/mutations" % seed)
        kinds = {}
        for number in range(count):
            out = self.copy_of_base("mutation")
            description = self.mutate(rng, out, other)
            kind = description.split(" ")[0]
            what = "mutation %d (%s)" % (number + 1, description) + (
                " forged" if kind == "forge" else "")
            self.print("  %s" % what)
            run = self.resume(checks, out, what)
            kinds.setdefault(kind, [0, 0])[0 if run.rc == 0 else 1] += 1
        return ", ".join("%s %d resumed/%d refused" % (k, v[0], v[1]) for k, v in sorted(kinds.items()))

    def bad_flags(self, checks):
        out = os.path.join(self.matrix.options.work, "cells", "faults-bad_flags")
        shutil.rmtree(out, ignore_errors=True)
        for extra, flag in BAD_FLAGS:
            arguments = COMMON + extra
            if "--out" not in extra:
                arguments = arguments + ["--out", out]
            what = " ".join(shlex.quote(a) for a in extra)
            run = self.runner.finish(self.runner.start(arguments), timeout=30)
            checks.usage_error(run, what, out, None)
            if flag not in run.stderr:
                checks.fail("%s: the message does not name %s: %s" % (what, flag, run.last_stderr()))
            if os.path.lexists(out):
                checks.fail("%s: exit %s, yet %s was created" % (what, run.rc, out))
                shutil.rmtree(out, ignore_errors=True)
        return "%d bad values" % len(BAD_FLAGS)

    def startup_signals(self, checks):
        """A stop signal at any moment of start-up (loading LibTorch, the data, the model) exits
        with 128+N before anything is written; at the rendezvous of a rank whose peer never
        comes, within seconds."""
        out = os.path.join(self.matrix.options.work, "cells", "faults-startup_signals")
        rng = random.Random("startup_signals")
        for delay in [0.0, 0.02, 0.08, 0.2, 0.5] + [rng.uniform(0, 0.6) for _ in range(3)]:
            number = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1])
            shutil.rmtree(out, ignore_errors=True)
            what = "%s %.0f ms after start" % (signal.Signals(number).name, delay * 1000)
            # However fast the machine, the run is not over before the signal: it stops it,
            # at once (during start-up), or at the next step boundary.
            run = self.runner.start(COMMON + ["--epochs", str(STARTUP_SIGNAL_EPOCHS), "--out", out])
            wait_for_handler(run.process.pid, number)  # the launcher's first act; exec is before it
            time.sleep(delay)
            os.kill(run.process.pid, number)
            self.runner.finish(run, timeout=30)
            if not checks.exit_code(run, 128 + number, what):
                continue
            # Before training: nothing of the run; once it trains: a graceful stop.
            if os.path.exists(os.path.join(out, "summary.json")):
                reason = read_summary(out).get("stop_reason")
                if reason != "interrupted (%s)" % signal.Signals(number).name:
                    checks.fail("%s: summary.json says %s" % (what, json.dumps(reason)))
            elif "run failed" in run.output():
                checks.fail("%s: 'run failed' in the output" % what)
        env = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29600 + rng.randrange(300)))
        shutil.rmtree(out, ignore_errors=True)
        saved = os.environ.copy()
        os.environ.update(env)
        try:
            run = self.runner.start(COMMON + ["--out", out])
        finally:
            os.environ.clear()
            os.environ.update(saved)
        # Rank 0 waits at the rendezvous for rank 1, which never comes: once it says so, well
        # inside that wait.
        waiting = self.runner.wait_for_output(run, re.compile(r"is at the rendezvous"), 60)
        time.sleep(0.3)
        started = time.monotonic()
        os.kill(run.process.pid, signal.SIGINT)
        self.runner.finish(run, timeout=30)
        if not waiting:
            checks.fail("SIGINT at the rendezvous: rank 0 never said it is at the rendezvous (%s; "
                        "last line: %s)" % (run.describe_exit(), run.last_stderr()))
        elif checks.exit_code(run, 130, "SIGINT at the rendezvous"):
            if time.monotonic() - started > 5:
                checks.fail("SIGINT at the rendezvous: took %.1f s to exit" %
                            (time.monotonic() - started))
            if "run failed" in run.output() or os.path.exists(os.path.join(out, "summary.json")):
                checks.fail("SIGINT at the rendezvous: wrote a failure or a summary")
        return ""

    def start_ranks(self, args, world, logs, tag, rng):
        """`world` ranks of torchbus-train with torchrun's variables, each rank's output in
        logs/TAG-rank<r>.log; returns the processes."""
        os.makedirs(logs, exist_ok=True)
        port = 29000 + (rng.randrange(900) + os.getpid()) % 900  # another matrix may run too
        processes = []
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            log = open(os.path.join(logs, "%s-rank%d.log" % (tag, rank)), "w")
            processes.append(subprocess.Popen([self.runner.train] + args, env=env, stdout=log,
                                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        self.print("  $ %d ranks: %s" % (world, " ".join(shlex.quote(a) for a in args)))
        return processes

    def wait_ranks(self, processes, timeout=None):
        codes = []
        for process in processes:
            try:
                codes.append(process.wait(timeout or self.runner.timeout))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append(process.wait())
        return codes

    def world_size_change(self, checks):
        """A run of 2 ranks SIGKILLed mid-run resumes on 1 rank and on 3 with the same global
        batch (ending as the uninterrupted run does, its segments in the summary), and a resume
        that would change the global batch is refused naming it, with nothing changed."""
        root = os.path.join(self.matrix.options.work, "cells", "faults-world_size_change")
        shutil.rmtree(root, ignore_errors=True)
        logs = os.path.join(root, "logs")
        rng = random.Random(self.matrix.options.seed)

        def flags(out, ranks):
            return RESHARD_FLAGS + ["--batch-size", str(RESHARD_GLOBAL_BATCH // ranks), "--out", out]

        whole = os.path.join(root, "whole")
        codes = self.wait_ranks(self.start_ranks(flags(whole, 2), 2, logs, "whole", rng))
        if codes != [0, 0]:
            raise Failure("the uninterrupted 2-rank run: exit codes %s" % codes)
        expected = read_summary(whole)
        killed = os.path.join(root, "killed")
        kill_step = rng.randrange(6, 61)
        processes = self.start_ranks(flags(killed, 2), 2, logs, "killed", rng)
        log = os.path.join(killed, "train.log")
        deadline = time.monotonic() + self.runner.timeout
        pattern = re.compile(r"\bstep %d epoch" % kill_step)
        while time.monotonic() < deadline and processes[0].poll() is None:
            if os.path.exists(log) and pattern.search(open(log, errors="replace").read()):
                break
            time.sleep(0.005)
        for process in processes:
            process.kill()
        codes = self.wait_ranks(processes)
        if os.path.exists(os.path.join(killed, "summary.json")):
            raise Failure("the 2-rank run ended before the SIGKILL after step %d" % kill_step)
        for ranks in (1, 3):
            what = "2 ranks -> %d (killed after step %d)" % (ranks, kill_step)
            out = os.path.join(root, "resumed-%d" % ranks)
            shutil.copytree(killed, out, symlinks=True)
            codes = self.wait_ranks(self.start_ranks(flags(out, ranks) + ["--resume"], ranks, logs,
                                                     "resumed-%d" % ranks, rng))
            if codes != [0] * ranks:
                checks.fail("%s: exit codes %s: %s" % (what, codes, open(os.path.join(
                    logs, "resumed-%d-rank0.log" % ranks), errors="replace").read()[-600:]))
                continue
            resumed = read_summary(out)
            for key, tolerance in (("steps", 0), ("epochs", 0), ("final_val_loss", 1e-3),
                                   ("final_val_accuracy", 0.02)):
                if abs(resumed[key] - expected[key]) > tolerance:
                    checks.fail("%s: %s %s, the uninterrupted run's %s" %
                                (what, key, resumed[key], expected[key]))
            segments = [(s["world_size"], s["batch_size"]) for s in resumed.get("segments", [])]
            if segments != [(2, 48), (ranks, RESHARD_GLOBAL_BATCH // ranks)]:
                checks.fail("%s: segments %s" % (what, segments))
        # 3 ranks of 48: a global batch of 144 is another run; nothing of the run changes.
        out = os.path.join(root, "refused")
        shutil.copytree(killed, out, symlinks=True)
        def kept():  # a resume removes what a killed write left (.tmp-PID); nothing else
            return sorted(n for n in os.listdir(os.path.join(out, "checkpoints")) if ".tmp-" not in n)

        before = kept()
        args = RESHARD_FLAGS + ["--batch-size", "48", "--out", out, "--resume"]
        codes = self.wait_ranks(self.start_ranks(args, 3, logs, "refused", rng), timeout=60)
        output = open(os.path.join(logs, "refused-rank0.log"), errors="replace").read()
        if codes != [1, 1, 1]:
            checks.fail("3 ranks of 48: exit codes %s, expected 1 on every rank" % codes)
        if "global_batch: 96 -> 144" not in output:
            checks.fail("3 ranks of 48: the refusal does not name the global batch: %s" %
                        output[-400:])
        if kept() != before:
            checks.fail("3 ranks of 48: the refused resume changed the checkpoints")
        return "killed after step %d" % kill_step

    def run_cell(self, name, options):
        checks = Checks(self.runner, self.flags("-"))
        if name == "mutations":
            note = self.mutations(checks, MUTATIONS_FULL if options.full else MUTATIONS_SAMPLED,
                                  options.seed)
        else:
            note = getattr(self, name)(checks)
        return checks.problems, note


# ----------------------------------------------------------------------------------------------
# The GAN example: several optimizers, killed and resumed

GAN_CELL = "examples/gan_sigkill"
GAN_EPOCHS = "24"  # 32 steps an epoch: 768 steps
GAN_CHECKPOINT_EVERY = 16  # examples/gan.cpp: ModelCheckpoint every 16 steps
# The kill follows the checkpoint of step 16 * randint(1, GAN_KILL_CHECKPOINTS), within the next
# 16 steps: 560 steps or more remain, which no machine trains before the SIGKILL arrives.
GAN_KILL_CHECKPOINTS = 12
GAN_CHECKPOINT_STEP = re.compile(r"-step-(\d+)\.tbckpt$")


def gan_checkpoint_step(directory):
    """The step of the newest checkpoint file in `directory` (0: none yet)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    return max((int(m.group(1)) for m in map(GAN_CHECKPOINT_STEP.search, names) if m), default=0)


class GanExample:
    def __init__(self, matrix):
        self.matrix = matrix
        self.runner = matrix.runner

    def wait_for_checkpoint(self, run, directory, step):
        """Waits until `directory` holds the checkpoint of `step` or a later one; returns when
        (time.monotonic()), or None if the run ended first."""
        while gan_checkpoint_step(directory) < step:
            if run.process.poll() is not None:
                return None
            time.sleep(0.001)
        return time.monotonic()

    def run_cell(self, seed):
        gan = self.matrix.options.gan
        rng = random.Random("%s/%s" % (seed, GAN_CELL))
        root = self.matrix.cell_dir(GAN_CELL, "runs")
        shutil.rmtree(root, ignore_errors=True)
        reference = os.path.join(root, "reference")
        killed = os.path.join(root, "killed")
        total = int(GAN_EPOCHS) * 32
        run = self.runner.start([reference, GAN_EPOCHS], gan)
        first = self.wait_for_checkpoint(run, reference, GAN_CHECKPOINT_EVERY)
        self.runner.finish(run)
        if run.rc != 0 or first is None:
            return ["uninterrupted run: %s; %s" % (run.describe_exit(), run.last_stderr())], ""
        # Its time from one checkpoint to the next (from the first to its exit, per checkpoint).
        interval = (run.end_time - first) / (total // GAN_CHECKPOINT_EVERY - 1)
        # SIGKILL once the checkpoint of step S is on disk, at a random moment of the next 16
        # steps (during the next checkpoint's write, maybe): what the run reports, not how long
        # it ran, says where it is.
        step = GAN_CHECKPOINT_EVERY * rng.randint(1, GAN_KILL_CHECKPOINTS)
        delay = rng.uniform(0.0, 1.0) * interval
        run = self.runner.start([killed, GAN_EPOCHS], gan)
        reached = self.wait_for_checkpoint(run, killed, step) is not None
        if reached:
            time.sleep(delay)
            try:
                os.kill(run.process.pid, signal.SIGKILL)
            except OSError:
                pass
        self.runner.finish(run)
        note = "SIGKILL %.3f s after the checkpoint of step %d" % (delay, step)
        if run.rc != -signal.SIGKILL:
            return ["killed run: %s before its SIGKILL%s; %s" % (
                run.describe_exit(), "" if reached else
                " (it never wrote the checkpoint of step %d)" % step, run.last_stderr())], note
        # Killed before its end, it had not written model.pt; the next run trains the rest.
        if os.path.exists(os.path.join(killed, "model.pt")):
            return ["the killed run wrote model.pt, which a run writes at its end"], note
        run = self.runner.run([killed, GAN_EPOCHS], gan)
        resumed = re.search(r"resumed from \S+ at epoch (\d+), step (\d+)", run.output())
        note += ", resumed at step %s" % (resumed.group(2) if resumed else "?")
        problems = []
        if run.rc != 0:
            problems.append("resumed run: %s; %s" % (run.describe_exit(), run.last_stderr()))
        elif not resumed:
            problems.append("the run after the kill did not resume: %s" % run.last_stderr())
        elif int(resumed.group(2)) < step:
            problems.append("the run after the kill resumed at step %s, before the checkpoint of "
                            "step %d that was on disk" % (resumed.group(2), step))
        elif "epoch %d:" % (int(GAN_EPOCHS) - 1) not in run.output():
            problems.append("the resumed run did not train to the last epoch: %s" %
                            run.last_stderr())
        else:
            with open(os.path.join(reference, "model.pt"), "rb") as a, \
                    open(os.path.join(killed, "model.pt"), "rb") as b:
                if a.read() != b.read():
                    problems.append("the resumed run's model.pt differs from the uninterrupted "
                                    "run's")
        return problems, note


# ----------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, help="the torchbus-train executable")
    parser.add_argument("--checker", required=True, help="the checkpoint_check executable")
    parser.add_argument("--work", required=True, help="scratch directory (created)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sample", type=int, help="run N cells drawn with --seed")
    mode.add_argument("--full", action="store_true",
                      help="run every cell (every cell the filters leave, if there are filters)")
    mode.add_argument("--cell", action="append", help="run this cell (repeatable)")
    parser.add_argument("--list", action="store_true",
                        help="print the ids of the cells chosen (all, without --sample/--cell) "
                        "and exit")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sample (spread evenly over "
                        "the ends) and of each cell's random values (default 1)")
    parser.add_argument("--data", help="only these data sources, comma-separated: " +
                        ", ".join(DATA))
    parser.add_argument("--end", help="only these ends, comma-separated: " + ", ".join(ENDS))
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds one process may run (default 180)")
    parser.add_argument("--keep", action="store_true", help="keep the directories of passed cells")
    parser.add_argument("--gan", help="examples/gan.cpp's executable: adds the cell " + GAN_CELL)
    parser.add_argument("--allow", action="append", default=[], metavar="NAME",
                        help="also accept NAME in a run directory (repeatable; the expected "
                        "names are %s)" % ", ".join(sorted(ALLOWED_OUT)))
    options = parser.parse_args()
    ALLOWED_OUT.update(options.allow)

    def printer(text):
        print(text, flush=True)

    cells = all_cells()
    for axis, index, names in (("data", 0, DATA), ("end", 3, ENDS)):
        wanted = getattr(options, axis)
        if wanted:
            chosen = wanted.split(",")
            unknown = [c for c in chosen if c not in names]
            if unknown:
                parser.error("--%s: unknown %s; expected %s" % (axis, ", ".join(unknown),
                                                                  ", ".join(names)))
            cells = [c for c in cells if c.split("/")[index] in chosen]
    fault_cells = (["stages/" + name for name in STAGES] + ["faults/" + name for name in FAULTS] +
                   ([GAN_CELL] if options.gan else []))
    if options.cell:
        unknown = [c for c in options.cell if c not in all_cells() + fault_cells]
        if unknown:
            parser.error("unknown cell %s (see --list)" % ", ".join(unknown))
        cells = options.cell
    elif options.sample is not None:
        cells = stratified_sample(cells, options.sample, random.Random(options.seed))
    elif not (options.full or options.data or options.end or options.list):
        parser.error("choose --sample N, --full (or a --data/--end filter), --cell ID or --list")
    if not options.cell and not options.data and not options.end:
        cells = cells + fault_cells  # after the matrix, with --sample and --full alike
    if options.list:
        print("\n".join(cells))
        return 0
    for tool in (options.train, options.checker) + ((options.gan,) if options.gan else ()):
        if not os.access(tool, os.X_OK):
            parser.error("%s is not an executable" % tool)
    if options.gan:
        options.gan = os.path.abspath(options.gan)
    options.train = os.path.abspath(options.train)
    options.checker = os.path.abspath(options.checker)
    options.work = os.path.abspath(options.work)
    os.makedirs(options.work, exist_ok=True)
    shutil.rmtree(os.path.join(options.work, "cells"), ignore_errors=True)

    runner = Runner(options, printer)
    matrix = Matrix(options, runner, make_data(options.work), printer)
    me = [sys.executable, os.path.abspath(__file__), "--train", options.train, "--checker",
          options.checker, "--work", options.work, "--seed", str(options.seed),
          "--timeout", "%g" % options.timeout] + (["--gan", options.gan] if options.gan else [])
    for name in options.allow:
        me += ["--allow", name]
    failed = []
    passed = 0
    started = time.monotonic()
    try:
        for number, cell in enumerate(cells, 1):
            printer("[%d/%d] %s   (rerun: %s)" %
                    (number, len(cells), cell, " ".join(shlex.quote(a) for a in me +
                                                         ["--cell", cell])))
            cell_start = time.monotonic()
            try:
                problems, note = matrix.run_cell(cell, options.seed)
            except Failure as error:
                problems, note = [str(error)], ""
            except Exception as error:  # a bug of this driver: report it, go on with the others
                traceback.print_exc(file=sys.stdout)
                problems, note = ["driver error: %s: %s" % (type(error).__name__, error)], ""
                runner.kill_all()
            seconds = time.monotonic() - cell_start
            if problems:
                reason = problems[0] + ("  [+%d more: %s]" % (len(problems) - 1,
                                                             " | ".join(problems[1:]))
                                        if len(problems) > 1 else "")
                failed.append((cell, reason))
                printer("FAIL %s (%.1f s%s): %s" % (cell, seconds, ", " + note if note else "",
                                                   reason))
            else:
                passed += 1
                printer("PASS %s (%.1f s%s)" % (cell, seconds, ", " + note if note else ""))
                if not options.keep:
                    shutil.rmtree(os.path.join(options.work, "cells", cell.replace("/", "-")),
                                  ignore_errors=True)
    except KeyboardInterrupt:
        runner.kill_all()
        printer("interrupted")
        raise
    finally:
        runner.kill_all()
    printer("")
    printer("%d cells in %.0f s (seed %d)" % (len(cells), time.monotonic() - started,
                                            options.seed))
    if failed:
        printer("Failed cells (directories kept under %s):" % os.path.join(options.work, "cells"))
        for cell, reason in failed:
            printer("  %s: %s" % (cell, reason))
    printer("%d passed, %d failed" % (passed, len(failed)))
    return 1 if failed else 0


__doc__ = __doc__ % (EPOCHS, SIGNAL_SLACK, STARTUP_SIGNAL_EPOCHS, MUTATIONS_SAMPLED,
                     MUTATIONS_FULL, GAN_KILL_CHECKPOINTS * GAN_CHECKPOINT_EVERY)

if __name__ == "__main__":
    sys.exit(main())

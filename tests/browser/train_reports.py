#!/usr/bin/python3
"""Runs torchbus-train for real, three ways, and checks each run's OUT/report.html in headless
Chromium with check_report.py:

  finished     2 epochs of 32 steps on the built-in synthetic data, validating every epoch and
               every 8 steps: exit 0, status "finished";
  failed       the same, saving a checkpoint every 20 steps while files may not grow past 64 KiB
               (SIGXFSZ ignored, so the write fails with EFBIG as on a full disk): the first
               checkpoint cannot be written, exit 1, status "failed" with "File too large";
  interrupted  100 epochs, SIGINT once step 16 is logged: exit 130, status "stopped" with
               "interrupted (SIGINT)".

Every report must have a drawn chart of each metric (those of the run's metrics.csv and train_loss,
val_loss, val_accuracy, lr, step_time), the options table with the run's batch_size, no browser
errors and a screenshot that is not blank. Artifacts (the run, the DOM, the screenshot) stay in
WORK/SCENARIO. The last line is `N passed, M failed`; the exit status is 1 if any failed.

  train_reports.py --train build/release/apps/torchbus-train/torchbus-train --work /tmp/reports
  train_reports.py ... --scenario failed     # only that one
"""

import argparse
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time

from check_report import add_browser_arguments, check_report, csv_metrics
from chromium import BrowserError, HeadlessChromium

COMMON = [
    "--batch-size", "256", "--val-every", "1", "--val-every-steps", "8", "--log-every", "8",
    "--no-progress", "--threads", "1"
]
METRICS = ["train_loss", "val_loss", "val_accuracy", "lr", "step_time"]
FILE_SIZE_LIMIT = 64 * 1024  # the report (about 30 KiB) fits, a checkpoint (about 200 KiB) not
RUN_TIMEOUT = 120.0


class Scenario:
    """How torchbus-train is run and what its report must say."""

    def __init__(self, arguments, exit_code, status, detail=None, limit_file_size=False,
                 interrupt_at=None):
        self.arguments = arguments
        self.exit_code = exit_code
        self.status = status
        self.detail = detail
        self.limit_file_size = limit_file_size
        self.interrupt_at = interrupt_at  # SIGINT once train.log contains this


SCENARIOS = {
    "finished": Scenario(["--epochs", "2"], 0, "finished"),
    "failed": Scenario(["--epochs", "2", "--checkpoint-every", "20"], 1, "failed",
                       detail="File too large", limit_file_size=True),
    "interrupted": Scenario(["--epochs", "100"], 128 + signal.SIGINT, "stopped",
                            detail="interrupted (SIGINT)", interrupt_at="step 16 "),
}


def limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def read_text(path):
    try:
        with open(path, errors="replace") as file:
            return file.read()
    except FileNotFoundError:
        return ""


def run_train(train, scenario, out):
    """Runs torchbus-train; returns (exit code, problem or None)."""
    command = [train] + COMMON + scenario.arguments + ["--out", out]
    print("+ " + " ".join(shlex.quote(part) for part in command), flush=True)
    output_path = out + ".output"
    with open(output_path, "wb") as output:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT,
                                   preexec_fn=limit_file_size if scenario.limit_file_size else None)
    deadline = time.monotonic() + RUN_TIMEOUT
    if scenario.interrupt_at is not None:
        log = os.path.join(out, "train.log")
        while scenario.interrupt_at not in read_text(log) and process.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
        if process.poll() is not None:
            return process.returncode, "it ended before {!r} was logged".format(
                scenario.interrupt_at)
        process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None, "it did not end within {:.0f} s".format(RUN_TIMEOUT)
    if code != scenario.exit_code:
        return code, "exit code {}; expected {}; its output:\n{}".format(
            code, scenario.exit_code, read_text(output_path)[-3000:])
    return code, None


def run_scenario(browser, train, work, name):
    """Problems of one scenario, as strings."""
    scenario = SCENARIOS[name]
    directory = os.path.join(work, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    out = os.path.join(directory, "run")
    _, problem = run_train(train, scenario, out)
    if problem is not None:
        return ["torchbus-train: " + problem]
    metrics = METRICS + csv_metrics(os.path.join(out, "metrics.csv"))
    return check_report(browser, os.path.join(out, "report.html"), scenario.status,
                        scenario.detail, metrics, [("batch_size", "256")],
                        artifacts=os.path.join(directory, "browser"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, help="the torchbus-train executable")
    parser.add_argument("--work", required=True, help="directory for the runs and artifacts")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="run only these (default: all)")
    add_browser_arguments(parser)
    arguments = parser.parse_args()
    os.makedirs(arguments.work, exist_ok=True)
    names = arguments.scenario or list(SCENARIOS)
    passed = failed = 0
    try:
        with HeadlessChromium(arguments.chromium, log_path=arguments.browser_log) as browser:
            for name in names:
                started = time.monotonic()
                problems = run_scenario(browser, arguments.train, arguments.work, name)
                for problem in problems:
                    print("{}: {}".format(name, problem))
                print("{}: {} ({:.1f} s)".format(name, "FAILED" if problems else "passed",
                                                 time.monotonic() - started), flush=True)
                failed += bool(problems)
                passed += not problems
    except BrowserError as error:
        print("browser failure: {}".format(error))
        return 1
    print("{} passed, {} failed".format(passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Negative tests of check_report.py: it must pass a real report and find each defect put into
copies of it.

Runs torchbus-train once (1 epoch of 32 steps on the synthetic data, validating every 8 steps),
then checks its report.html unchanged (no problem allowed) and copies of it that are each broken
one way, where every expected problem must be reported:

  no_series_drawing  every series line emptied (points="" / d=""): a report with no chart drawn
  no_charts          every <figure> of a chart removed (the list of metrics still links to them)
  script_errors      a script that calls console.error and one that throws, an image that is
                     missing
  unpainted_chart    train_loss's line and dots hidden by CSS: its DOM is fine, its pixels are not
  blank_page         the whole body hidden: the screenshot is blank
  not_xml            a </td> removed: HTML parsers repair it, the XHTML parser must not
  stale_status       the badge says "running" in the report of a finished run

The last line is `N passed, M failed`; the exit status is 1 if any failed. Artifacts stay in WORK.

  checker_self_test.py --train build/release/apps/torchbus-train/torchbus-train --work /tmp/checker
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

from check_report import add_browser_arguments, check_report, csv_metrics
from chromium import BrowserError, HeadlessChromium

RUN = [
    "--epochs", "1", "--batch-size", "256", "--val-every-steps", "8", "--no-progress", "--threads",
    "1"
]
METRICS = ["train_loss", "val_loss", "val_accuracy", "train_loss_epoch", "lr", "step_time"]


def empty_series(html):
    return re.sub(r'(<(?:polyline|path)\b[^>]*\bclass="series"[^>]*?\b(?:points|d)=")[^"]*"',
                  r'\1"', html)


def remove_figures(html):
    return re.sub(r'<figure class="metric".*?</figure>\n?', "", html, flags=re.S)


def before_body_end(addition):
    return lambda html: html.replace("</body>", addition + "\n</body>")


def before_head_end(addition):
    return lambda html: html.replace("</head>", addition + "\n</head>")


def remove_first(text):
    return lambda html: html.replace(text, "", 1)


def replace(old, new):
    return lambda html: html.replace(old, new)


def per_metric(template):
    return [template.format(metric) for metric in METRICS]


# name -> (how the copy is broken, problems that must be reported)
DEFECTS = {
    "no_series_drawing": (empty_series, per_metric("metric {!r}: the browser parsed 0 vertices")),
    "no_charts": (remove_figures, per_metric("metric {!r}: 0 charts; expected 1")),
    "script_errors": (before_body_end(
        '<script>console.error("deliberate console error");</script>'
        '<script>undefinedFunction();</script><img src="missing.png" alt=""/>'), [
            "browser error: console.error: deliberate console error",
            "browser error: uncaught exception: Uncaught ReferenceError: undefinedFunction",
            "browser error: browser log (network): Failed to load resource",
        ]),
    "unpainted_chart": (before_head_end(
        '<style>svg.chart[data-metric="train_loss"] .series, '
        'svg.chart[data-metric="train_loss"] circle {visibility: hidden}</style>'),
                        ["metric 'train_loss': 0 pixels of its series colour"]),
    "blank_page": (before_head_end("<style>body {visibility: hidden}</style>"),
                   ["is blank"]),
    "not_xml": (remove_first("</td>"), ["as XHTML: application/xhtml+xml with 1 parser errors"]),
    "stale_status": (replace('id="status">finished<', 'id="status">running<'),
                     ["status badge says 'running'; expected 'finished'"]),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, help="the torchbus-train executable")
    parser.add_argument("--work", required=True, help="directory for the run and the copies")
    add_browser_arguments(parser)
    arguments = parser.parse_args()
    shutil.rmtree(arguments.work, ignore_errors=True)
    out = os.path.join(arguments.work, "run")
    os.makedirs(arguments.work)
    result = subprocess.run([arguments.train] + RUN + ["--out", out], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=120)
    if result.returncode != 0:
        print("torchbus-train exited {}:\n{}".format(result.returncode,
                                                     result.stdout.decode(errors="replace")))
        return 1
    with open(os.path.join(out, "report.html"), encoding="utf-8") as file:
        original = file.read()
    metrics = METRICS + csv_metrics(os.path.join(out, "metrics.csv"))
    options = [("batch_size", "256")]

    passed = failed = 0
    try:
        with HeadlessChromium(arguments.chromium, log_path=arguments.browser_log) as browser:
            cases = [("unchanged", lambda html: html, [])] + [
                (name, defect[0], defect[1]) for name, defect in DEFECTS.items()
            ]
            for name, breaks, expected in cases:
                copy = os.path.join(arguments.work, name + ".html")
                broken = breaks(original)
                if name != "unchanged" and broken == original:
                    print("{}: the defect could not be put into the report".format(name))
                    failed += 1
                    continue
                with open(copy, "w", encoding="utf-8") as file:
                    file.write(broken)
                problems = check_report(browser, copy, "finished", None, metrics, options,
                                        artifacts=os.path.join(arguments.work, "browser"),
                                        name=name)
                missing = [text for text in expected if not any(text in p for p in problems)]
                ok = not missing and (bool(problems) == bool(expected))
                for problem in problems:
                    print("{}: checker said: {}".format(name, problem))
                for text in missing:
                    print("{}: checker did not say: {}".format(name, text))
                if not expected and problems:
                    print("{}: the unchanged report must pass".format(name))
                print("{}: {}".format(name, "passed" if ok else "FAILED"), flush=True)
                passed += ok
                failed += not ok
    except BrowserError as error:
        print("browser failure: {}".format(error))
        return 1
    print("{} passed, {} failed".format(passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

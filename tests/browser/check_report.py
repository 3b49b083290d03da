#!/usr/bin/python3
"""Checks a RunReport HTML file (torchbus-train's OUT/report.html) in headless Chromium.

The report is opened as a web page and its checks read what the browser made of it, not the file:
  - the browser reports no error while loading it (uncaught exceptions, console.error, resources
    that fail to load; see chromium.py);
  - the status badge (#status) says the expected status, and the text after it (the error box of a
    failed run, the reason of a stopped one) contains the expected words;
  - every metric has exactly one chart (svg.chart[data-metric]): the metrics of the report's list
    of links, the metric columns of metrics.csv and the names given with --metric. In each chart
    the browser parsed the series line (polyline points, or a path's d of M and L commands) into
    as many vertices as the chart says it drew (data-drawn, at least 1), a line of two or more distinct vertices has a
    length, the line lies inside the chart's viewBox, and the chart has a size on the page;
  - the options table (table.options) is there with its header and the --option KEY=VALUE rows;
  - the screenshot of the whole page is not blank (several colours; the background under 99.5% of
    the pixels of every second row and column), and the box of every chart holds pixels of its
    series' colour (the line or, for a single value, its dot was painted);
  - the same file opened as XHTML (application/xhtml+xml, the browser's XML parser) parses
    without a parsererror and has as many charts.

Prints `report ok: ...` or every problem found, one per line, and exits 0 or 1 (2 on usage or
browser failure). With --artifacts DIR it keeps the DOM the browser built (NAME.dom.html), the
screenshot (NAME.png) and the XHTML copy there.

  check_report.py OUT/report.html --status finished --metrics-csv OUT/metrics.csv \\
      --option batch_size=256 --artifacts /tmp/report-check
"""

import argparse
import csv
import io
import os
import pathlib
import shutil
import sys
import tempfile

from PIL import Image  # python3-pil (scripts/debian-test-packages.txt)

from chromium import DEFAULT_CHROMIUM, BrowserError, HeadlessChromium

# metrics.csv: the first columns are no metrics; a tensor logged per step is charted as the metric
# of its name here (torchbus-train logs the loss tensor, whose metric history is train_loss).
CSV_NON_METRIC_COLUMNS = {"kind", "step", "epoch", "wall_time"}
CSV_TENSOR_METRICS = {"step_loss": "train_loss"}

# Run in the page: what the checks need, as JSON.
PROBE = r"""
(() => {
  const text = (selector) => {
    const element = document.querySelector(selector);
    return element === null ? null : element.textContent.trim();
  };
  // [x, y] of each vertex of a polyline, or of a path of absolute M and L commands (else null).
  const vertices = (line) => {
    if (line.points !== undefined) {
      return [...Array(line.points.numberOfItems).keys()].map(
          (i) => [line.points.getItem(i).x, line.points.getItem(i).y]);
    }
    const d = line.getAttribute('d') || '';
    if (!/^[\sML0-9eE.,+\-]*$/.test(d)) return null;
    const numbers = (d.match(/[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?/g) || []).map(Number);
    return [...Array(Math.floor(numbers.length / 2)).keys()].map(
        (i) => [numbers[2 * i], numbers[2 * i + 1]]);
  };
  const charts = [...document.querySelectorAll('svg.chart')].map((svg) => {
    const series = svg.querySelectorAll('.series');
    const box = svg.getBoundingClientRect();
    const chart = {
      metric: svg.getAttribute('data-metric'),
      drawn: Number(svg.getAttribute('data-drawn')),
      seriesCount: series.length,
      page: {left: box.left + window.scrollX, top: box.top + window.scrollY,
             width: box.width, height: box.height},
    };
    if (series.length === 1) {
      const line = series[0];
      const view = svg.viewBox.baseVal;
      const extent = line.getBBox();
      const drawn = vertices(line);
      chart.kind = line.tagName;
      chart.vertices = drawn === null ? -1 : drawn.length;
      chart.distinct = drawn === null ? 0 : new Set(drawn.map((v) => v.join(','))).size;
      chart.length = line.getTotalLength();
      chart.inside = extent.x >= view.x - 0.5 && extent.y >= view.y - 0.5 &&
                     extent.x + extent.width <= view.x + view.width + 0.5 &&
                     extent.y + extent.height <= view.y + view.height + 0.5;
      chart.colour = getComputedStyle(line).stroke;
    }
    return chart;
  });
  const options = document.querySelector('table.options');
  return {
    contentType: document.contentType,
    parserErrors: document.getElementsByTagName('parsererror').length,
    status: text('#status'),
    detail: text('pre.error') || text('.reason'),
    links: [...document.querySelectorAll('nav a')].map((a) => ({
      text: a.textContent,
      target: (a.getAttribute('href') || '').replace(/^#/, ''),
    })).map((link) => Object.assign(link, {found: document.getElementById(link.target) !== null})),
    charts: charts,
    optionHeader: options === null ? null :
        [...options.querySelectorAll('thead th')].map((th) => th.textContent),
    optionRows: options === null ? [] : [...options.querySelectorAll('tbody tr')].map(
        (tr) => [...tr.children].map((td) => td.textContent)),
  };
})()
"""


def csv_metrics(path):
    """The metric names the columns of a metrics.csv stand for."""
    with open(path, newline="") as file:
        header = next(csv.reader(file), [])
    return [
        CSV_TENSOR_METRICS.get(name, name) for name in header
        if name not in CSV_NON_METRIC_COLUMNS
    ]


def parse_colour(css):
    """(r, g, b) of a computed CSS colour 'rgb(31, 111, 180)', or None."""
    if not css or not css.startswith("rgb"):
        return None
    values = css[css.index("(") + 1:css.index(")")].split(",")
    return tuple(int(float(value)) for value in values[:3])


def check_dom(probe, status, detail, metrics, options):
    """Problems of the page's structure (the PROBE result)."""
    problems = []
    if probe["status"] != status:
        problems.append("status badge says {!r}; expected {!r}".format(probe["status"], status))
    if detail is not None and detail not in (probe["detail"] or ""):
        problems.append("the status text {!r} does not contain {!r}".format(
            probe["detail"], detail))

    charts = {}
    for chart in probe["charts"]:
        charts.setdefault(chart["metric"], []).append(chart)
    linked = [link["text"] for link in probe["links"]]
    for link in probe["links"]:
        if not link["found"]:
            problems.append("the link {!r} points to #{}, which is not in the page".format(
                link["text"], link["target"]))
    expected = list(dict.fromkeys(list(metrics) + linked))
    if not expected:
        problems.append("the report lists no metric (no links, no metrics.csv columns)")
    for metric in expected:
        found = charts.get(metric, [])
        if len(found) != 1:
            problems.append("metric {!r}: {} charts; expected 1".format(metric, len(found)))
            continue
        chart = found[0]
        where = "metric {!r}".format(metric)
        if chart["seriesCount"] != 1:
            problems.append("{}: {} series lines; expected 1".format(where, chart["seriesCount"]))
            continue
        if not chart["drawn"] >= 1:
            problems.append("{}: the chart says it drew {} points".format(where, chart["drawn"]))
        if chart["vertices"] < 0:
            problems.append("{}: its {} line is not made of M and L commands".format(
                where, chart["kind"]))
        elif chart["vertices"] != chart["drawn"]:
            problems.append("{}: the browser parsed {} vertices of its {} line; the chart says it "
                            "drew {}".format(where, chart["vertices"], chart["kind"],
                                             chart["drawn"]))
        if chart["distinct"] >= 2 and not chart["length"] > 0:
            problems.append("{}: its line has {} distinct points but no length".format(
                where, chart["distinct"]))
        if not chart["inside"]:
            problems.append("{}: its line leaves the chart's viewBox".format(where))
        if chart["page"]["width"] < 100 or chart["page"]["height"] < 50:
            problems.append("{}: the chart is {:.0f}x{:.0f} px on the page".format(
                where, chart["page"]["width"], chart["page"]["height"]))
    for metric in charts:
        if metric not in expected:
            problems.append("chart of {!r} is not in the report's list of metrics".format(metric))

    if probe["optionHeader"] is None:
        problems.append("no options table (table.options)")
    else:
        if probe["optionHeader"] != ["option", "value", "from"]:
            problems.append("options table header is {}".format(probe["optionHeader"]))
        rows = {tuple(row[:2]) for row in probe["optionRows"]}
        for key, value in options:
            if (key, value) not in rows:
                problems.append("options table has no row {} = {}".format(key, value))
    return problems


def colour_counts(image, box=None):
    """{(r, g, b): pixels} of `image` (a PIL image) inside `box` (left, top, right, bottom)."""
    region = image.crop(box) if box else image
    return {rgb: count for count, rgb in region.getcolors(maxcolors=region.width * region.height)}


def check_pixels(png, probe):
    """Problems of the screenshot: blank, or a chart whose series colour was never painted."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    counts = colour_counts(image)
    background, most = max(counts.items(), key=lambda item: item[1])
    total = sum(counts.values())
    problems = []
    if len(counts) < 2 or most > 0.995 * total:
        problems.append("the screenshot ({}x{}) is blank: {} colours, {:.2%} of the pixels are "
                        "{}".format(image.width, image.height, len(counts), most / total,
                                    background))
    for chart in probe["charts"]:
        colour = parse_colour(chart.get("colour"))
        if colour is None:
            continue
        box = chart["page"]
        left, top = int(box["left"]), int(box["top"])
        inside = colour_counts(image, (left, top, min(image.width, left + int(box["width"]) + 1),
                                       min(image.height, top + int(box["height"]) + 1)))
        painted = sum(count for rgb, count in inside.items()
                      if sum(abs(a - b) for a, b in zip(rgb, colour)) <= 60)
        if painted < 5:
            problems.append("metric {!r}: {} pixels of its series colour {} painted in its "
                            "chart".format(chart["metric"], painted, colour))
    return problems


def check_report(browser, report, status, detail=None, metrics=(), options=(), artifacts=None,
                 name="report"):
    """Every problem of the report at `report` (a path), as strings; empty when it passes."""
    report = pathlib.Path(report).resolve()
    if not report.is_file():
        return ["no report at {}".format(report)]
    keep = pathlib.Path(artifacts) if artifacts else pathlib.Path(tempfile.mkdtemp())
    keep.mkdir(parents=True, exist_ok=True)
    try:
        page = browser.open(report.as_uri())
        problems = ["browser error: " + error for error in page.errors]
        probe = browser.evaluate(PROBE)
        (keep / (name + ".dom.html")).write_text(browser.evaluate(
            "'<!DOCTYPE html>\\n' + document.documentElement.outerHTML"))
        if probe["contentType"] != "text/html":
            problems.append("opened as {}, not text/html".format(probe["contentType"]))
        problems += check_dom(probe, status, detail, metrics, options)
        png = browser.screenshot()
        (keep / (name + ".png")).write_bytes(png)
        problems += check_pixels(png, probe)

        xhtml = keep / (name + ".xhtml")
        shutil.copyfile(report, xhtml)
        page = browser.open(xhtml.as_uri())
        problems += ["browser error (as XHTML): " + error for error in page.errors]
        as_xml = browser.evaluate(PROBE)
        if as_xml["contentType"] != "application/xhtml+xml" or as_xml["parserErrors"] != 0:
            problems.append("as XHTML: {} with {} parser errors: {}".format(
                as_xml["contentType"], as_xml["parserErrors"],
                browser.evaluate(
                    "document.documentElement.textContent.replace(/\\s+/g, ' ').slice(0, 200)")))
        elif len(as_xml["charts"]) != len(probe["charts"]):
            problems.append("as XHTML: {} charts; as HTML {}".format(
                len(as_xml["charts"]), len(probe["charts"])))
        return problems
    finally:
        if not artifacts:
            shutil.rmtree(keep, ignore_errors=True)


def option_pair(text):
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE, got {!r}".format(text))
    return key, value


def add_browser_arguments(parser):
    parser.add_argument("--chromium", default=DEFAULT_CHROMIUM, help="the browser to run")
    parser.add_argument("--browser-log", default=os.devnull,
                        help="file for the browser's own stdout and stderr")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", help="the report.html to check")
    parser.add_argument("--status", required=True,
                        choices=["finished", "stopped", "failed", "running"])
    parser.add_argument("--detail", help="words the status text (error or stop reason) contains")
    parser.add_argument("--metrics-csv", help="metrics.csv of the run: each metric column needs "
                        "a chart")
    parser.add_argument("--metric", action="append", default=[], help="a metric that needs a chart")
    parser.add_argument("--option", action="append", default=[], type=option_pair,
                        metavar="KEY=VALUE", help="a row the options table must have")
    parser.add_argument("--artifacts", help="keep the DOM, screenshot and XHTML copy here")
    add_browser_arguments(parser)
    arguments = parser.parse_args()
    metrics = list(arguments.metric)
    if arguments.metrics_csv:
        metrics += csv_metrics(arguments.metrics_csv)
    try:
        with HeadlessChromium(arguments.chromium, log_path=arguments.browser_log) as browser:
            problems = check_report(browser, arguments.report, arguments.status, arguments.detail,
                                    metrics, arguments.option, arguments.artifacts)
    except BrowserError as error:
        print("browser failure: {}".format(error))
        return 2
    for problem in problems:
        print("report problem: " + problem)
    if problems:
        return 1
    print("report ok: {}".format(arguments.report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

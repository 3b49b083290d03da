"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe), the
way Puppeteer does it, with the standard library only.

One browser process serves every page a test opens. A page load collects what the browser
reports as an error: uncaught exceptions (Runtime.exceptionThrown), console.error and
console.assert calls (Runtime.consoleAPICalled) and the browser's own error entries
(Log.entryAdded with level "error": resources that fail to load, blocked content, ...).
"""

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

DEFAULT_CHROMIUM = "/usr/bin/chromium"


class BrowserError(RuntimeError):
    """The browser did not start, answered with an error or did not answer in time."""


class LoadedPage:
    """What a page load left behind: the URL and the errors the browser reported."""

    def __init__(self, url, errors):
        self.url = url
        self.errors = errors


def describe_event(event):
    """A one-line text for an error event of the protocol, or None when it is no error."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        description = details.get("exception", {}).get("description", "")
        return "uncaught exception: {} {} ({}:{})".format(
            details.get("text", ""), description.splitlines()[0] if description else "",
            details.get("url", "?"), details.get("lineNumber", "?"))
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        values = [
            str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])
        ]
        return "console.{}: {}".format(params["type"], " ".join(values))
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        entry = params["entry"]
        return "browser log ({}): {} {}".format(entry.get("source"), entry.get("text"),
                                                entry.get("url", ""))
    return None


class HeadlessChromium:
    """A headless Chromium with one tab. Use as a context manager; every call has a timeout."""

    def __init__(self, executable=DEFAULT_CHROMIUM, width=1280, height=1000, timeout=30.0,
                 log_path=os.devnull):
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="torchbus-chromium-")
        self._buffer = b""
        self._next_id = 0
        self._events = []
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def on_fds_3_and_4():  # the protocol's pipe: the browser reads fd 3 and writes fd 4
            read_end, write_end = os.dup(to_browser_read), os.dup(from_browser_write)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        command = [
            executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
            "--user-data-dir=" + self._profile, "--no-first-run", "--hide-scrollbars",
            "--mute-audio", "--window-size={},{}".format(width, height), "about:blank"
        ]
        with open(log_path, "wb") as log:
            try:
                self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                                 stderr=log, preexec_fn=on_fds_3_and_4,
                                                 pass_fds=(3, 4))
            except OSError as error:
                shutil.rmtree(self._profile, ignore_errors=True)
                raise BrowserError("cannot start {}: {} (scripts/install-deps "
                                   "debian-test-packages.txt installs it)".format(
                                       executable, error)) from error
        os.close(to_browser_read)
        os.close(from_browser_write)
        try:
            target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self._call("Target.attachToTarget", {
                "targetId": target,
                "flatten": True
            })["sessionId"]
            for domain in ("Runtime", "Log", "Page"):
                self._call(domain + ".enable", session=True)
            self._call("Emulation.setDeviceMetricsOverride", {
                "width": width,
                "height": height,
                "deviceScaleFactor": 1,
                "mobile": False
            }, session=True)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def close(self):
        """Closes the browser (killing it if it does not exit) and removes its profile."""
        if self._process.poll() is None:
            try:
                self._send("Browser.close", {}, session=False)
                self._process.wait(timeout=10)
            except (OSError, BrowserError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def open(self, url):
        """Loads `url` in the tab, waits for its load event and returns a LoadedPage."""
        self._events.clear()
        result = self._call("Page.navigate", {"url": url}, session=True)
        if result.get("errorText"):
            raise BrowserError("cannot open {}: {}".format(url, result["errorText"]))
        self._wait(lambda message: message.get("method") == "Page.loadEventFired")
        # Errors are reported asynchronously: a round trip after the load event collects the rest.
        self.evaluate("document.readyState")
        errors = [text for text in map(describe_event, self._events) if text is not None]
        return LoadedPage(url, errors)

    def evaluate(self, expression):
        """The JSON value of a JavaScript expression evaluated in the page."""
        result = self._call("Runtime.evaluate", {
            "expression": expression,
            "returnByValue": True,
            "awaitPromise": True
        }, session=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError("JavaScript failed: {} {}".format(
                details.get("text"), details.get("exception", {}).get("description", "")))
        return result["result"].get("value")

    def screenshot(self):
        """A PNG of the whole page (not only the viewport), at one device pixel per CSS pixel."""
        size = self._call("Page.getLayoutMetrics", session=True)["cssContentSize"]
        return base64.b64decode(
            self._call("Page.captureScreenshot", {
                "format": "png",
                "optimizeForSpeed": True,
                "captureBeyondViewport": True,
                "clip": {
                    "x": 0,
                    "y": 0,
                    "width": size["width"],
                    "height": size["height"],
                    "scale": 1
                }
            }, session=True)["data"])

    # ---- the protocol ------------------------------------------------------------------------

    def _send(self, method, params, session):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._to_browser, data):]
        except OSError as error:
            raise BrowserError("the browser closed its pipe ({})".format(error)) from error
        return self._next_id

    def _call(self, method, params=None, session=False):
        call_id = self._send(method, params or {}, session)
        answer = self._wait(lambda message: message.get("id") == call_id)
        if "error" in answer:
            raise BrowserError("{} failed: {}".format(method, answer["error"]))
        return answer.get("result", {})

    def _wait(self, wanted):
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buffer:
                raw, _, self._buffer = self._buffer.partition(b"\0")
                message = json.loads(raw)
                if "method" in message:
                    self._events.append(message)
                if wanted(message):
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError("no answer from the browser within {} s".format(self.timeout))
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("the browser exited (code {})".format(self._process.poll()))
            self._buffer += chunk

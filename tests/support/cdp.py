"""A real browser for tests: Debian's headless Chromium driven over the DevTools protocol (CDP) with
the websockets package's synchronous client. Nothing is downloaded: ``chromium_path()`` finds the
installed binary (None: the test skips with "chromium not installed").

``Chromium(folder)`` starts the browser (its profile and log in ``folder``), ``new_page(url)`` opens a
tab and returns a ``Page``: ``evaluate(js)`` (the value of an expression), ``wait_for(js, timeout_s,
what)``, ``click(selector)`` (a real mouse press and release at the element's centre), ``type_text``,
``screenshot()`` (PNG bytes of the whole page). JavaScript dialogs (``confirm``) are answered OK
(``Page.accept_dialogs``; False: Cancel) and their messages recorded in ``Page.dialogs``; uncaught
page exceptions are kept in ``Page.console``. ``close()`` kills the browser and its process group.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from websockets.sync.client import connect

CHROMIUM_NAMES = ("chromium", "chromium-browser")
SKIP_REASON = "chromium not installed"


def chromium_path() -> str | None:
    """The Chromium binary on PATH, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class CdpError(RuntimeError):
    """A DevTools command answered with an error, or no answer came in time."""


class Chromium:
    """A headless Chromium with remote debugging on a free 127.0.0.1 port."""

    def __init__(self, folder: Path, *, width: int = 1440, height: int = 1000, timeout_s: float = 30.0):
        binary = chromium_path()
        if binary is None:
            raise CdpError(SKIP_REASON)
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        argv = [binary, "--headless", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--metrics-recording-only", "--mute-audio",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={folder / 'profile'}", f"--window-size={width},{height}", "about:blank"]
        if os.geteuid() == 0:  # Chromium refuses to run its sandbox as root
            argv.insert(1, "--no-sandbox")
        self.log_path = folder / "chromium.log"
        (folder / "profile" / "DevToolsActivePort").unlink(missing_ok=True)  # a reused profile's is stale
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self._stack = contextlib.ExitStack()
        try:
            self.ws_url = self._endpoint(timeout_s)
            ws = connect(self.ws_url, max_size=64 * 1024 * 1024, open_timeout=timeout_s)
            self.conn = self._stack.enter_context(ws)
        except BaseException:
            self.close()
            raise
        self._id = 0
        self.width, self.height = width, height

    def _endpoint(self, timeout_s: float) -> str:
        port_file = self.folder / "profile" / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CdpError(f"chromium exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                port, path = port_file.read_text().split("\n")[:2]
                if port and path:
                    return f"ws://127.0.0.1:{port}{path}"
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise CdpError(f"chromium wrote no DevToolsActivePort within {timeout_s} s: {self.log_path.read_text()[-2000:]}")

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout_s: float = 30.0,
             on_event=None) -> dict:
        """Send one command and return its result; events meanwhile go to ``on_event(msg)``.

        Raises:
            CdpError: the command failed, or no answer within ``timeout_s``.
        """
        self._id += 1
        cid = self._id
        msg = {"id": cid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.conn.send(json.dumps(msg))
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError(f"{method}: no answer within {timeout_s} s")
            try:
                raw = self.conn.recv(timeout=left)
            except TimeoutError:
                continue
            got = json.loads(raw)
            if got.get("id") == cid:
                if "error" in got:
                    raise CdpError(f"{method}: {got['error']}")
                return got.get("result", {})
            if "method" in got and on_event is not None:
                on_event(got)

    def send_nowait(self, method: str, params: dict, session: str | None = None) -> None:
        """Send a command without waiting for its answer (inside an event handler)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.conn.send(json.dumps(msg))

    def new_page(self, url: str) -> "Page":
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.call("Page.enable")
        page.call("Runtime.enable")
        page.call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                           "deviceScaleFactor": 1, "mobile": False})
        page.call("Page.navigate", {"url": url})
        return page

    def close(self) -> None:
        try:
            self._stack.close()
        except Exception:  # the browser may already be gone
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)


class Page:
    """One tab, attached in flat mode (its commands carry the session id)."""

    def __init__(self, browser: Chromium, session: str):
        self.browser = browser
        self.session = session
        self.dialogs: list[str] = []
        self.console: list[str] = []
        self.accept_dialogs = True  # how the next dialogs are answered (OK / Cancel)

    def _event(self, msg: dict) -> None:
        if msg.get("sessionId") != self.session:
            return
        if msg["method"] == "Page.javascriptDialogOpening":
            self.dialogs.append(msg["params"].get("message", ""))
            self.browser.send_nowait("Page.handleJavaScriptDialog", {"accept": self.accept_dialogs}, self.session)
        elif msg["method"] == "Runtime.exceptionThrown":
            self.console.append(json.dumps(msg["params"].get("exceptionDetails", {}))[:500])

    def call(self, method: str, params: dict | None = None, timeout_s: float = 30.0) -> dict:
        return self.browser.call(method, params, self.session, timeout_s, on_event=self._event)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-able values only).

        Raises:
            CdpError: the expression threw.
        """
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise CdpError(f"{expression[:80]}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float, what: str, interval_s: float = 0.1):
        """Poll ``expression`` until it is truthy; its value.

        Raises:
            TimeoutError: naming ``what``, with the page's last value.
        """
        deadline = time.monotonic() + timeout_s
        value = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except CdpError:
                value = None
            if value:
                return value
            time.sleep(interval_s)
        raise TimeoutError(f"timed out after {timeout_s} s waiting for {what} (last value {value!r})")

    def click(self, selector: str) -> None:
        """A left click (press and release of the mouse) at the centre of the element ``selector``."""
        box = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
                            "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def type_text(self, selector: str, text: str) -> None:
        """Focus ``selector`` and type ``text`` as keyboard input."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", {"text": text})

    def screenshot(self) -> bytes:
        """The whole page (beyond the viewport) as PNG bytes."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        res = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})
        return base64.b64decode(res["data"])

"""A headless Chromium driven over the DevTools protocol through a pipe (standard library only), for tests
that must see a page after its scripts ran: navigate, evaluate JavaScript, take a screenshot.

``--remote-debugging-pipe`` makes Chromium read NUL-terminated JSON commands on file descriptor 3 and write
replies and events on descriptor 4, so no websocket client is needed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--enable-unsafe-swiftshader", "--use-angle=swiftshader")


def browser() -> str | None:
    """The first of chromium, chromium-browser, google-chrome on PATH."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class Chromium:
    """One headless browser with one page; use as a context manager."""

    def __init__(self, profile: os.PathLike, *, width: int = 1400, height: int = 900, mobile: bool = False):
        exe = browser()
        if exe is None:
            raise FileNotFoundError("no chromium, chromium-browser or google-chrome on PATH")
        to_child, self._write = os.pipe()   # the browser reads commands on fd 3
        self._read, from_child = os.pipe()  # and writes on fd 4

        def fds() -> None:  # runs in the child before exec; dup first so that neither end overwrites the other
            reading, writing = os.dup(to_child), os.dup(from_child)
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "about:blank"], preexec_fn=fds, pass_fds=(3, 4),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._id = 0
        self.session: str | None = None
        self.size = (width, height)
        self.mobile = mobile  # a phone: the page's viewport meta tag decides its layout width, as on a real one

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._write, self._read):
            try:
                os.close(fd)
            except OSError:
                pass

    def send(self, method: str, params: dict | None = None, *, session: bool = True, timeout: float = 60) -> dict:
        """Send one command and return its result (events are skipped)."""
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _next(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def open(self, url: str) -> None:
        """Open `url` in a new page and attach to it."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        width, height = self.size
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": self.mobile})
        self.send("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60, every: float = 0.5) -> Any:
        """Evaluate `expression` until it is truthy; its value, or TimeoutError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(every)
        raise TimeoutError(f"'{expression}' stayed false for {timeout} s")

    def screenshot(self) -> bytes:
        """The page as PNG bytes."""
        return base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])

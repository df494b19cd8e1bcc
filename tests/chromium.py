"""Headless Chromium for tests, driven over the DevTools protocol (a WebSocket per page).

Debian's ``chromium`` package is the browser; CI installs it (.ci/run), and a test that needs
it fails, rather than skips, when it is missing.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import websocket

BINARIES = ("chromium", "chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0
POLL_S = 0.2


def binary() -> str:
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("headless Chromium is not installed: apt-get install -y chromium")


class Chromium:
    """One browser with one page; ``events`` keeps every protocol event received."""

    def __init__(self, profile: Path, width: int, height: int) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self._profile = profile
        self._log = (profile / "chromium.log").open("wb")
        self._process = subprocess.Popen(
            [binary(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._ids = 0
        self.events: list[dict[str, Any]] = []
        try:
            self._socket = websocket.create_connection(
                self._page_socket(), timeout=CALL_TIMEOUT_S, suppress_origin=True
            )
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable")
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise

    def _page_socket(self) -> str:
        active = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._process.returncode}")
            if active.exists() and active.read_text().strip():
                port = active.read_text().split()[0]
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                if pages:
                    return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(POLL_S)
        raise RuntimeError(f"chromium did not open its DevTools port in {START_TIMEOUT_S:.0f} s")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._ids += 1
        identifier = self._ids
        self._socket.send(json.dumps({"id": identifier, "method": method, "params": params}))
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            message = json.loads(self._socket.recv())
            if message.get("id") == identifier:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(f"{method}: no answer in {CALL_TIMEOUT_S:.0f} s")

    def navigate(self, url: str) -> None:
        """Open ``url`` and wait until the document has loaded."""
        self.call("Page.navigate", url=url)
        self.wait_for(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'",
            START_TIMEOUT_S,
        )

    def evaluate(self, expression: str) -> Any:
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float) -> Any:
        """The expression's first truthy value, evaluated every 0.2 s."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(POLL_S)
        raise TimeoutError(f"still false after {timeout_s:.0f} s: {expression}")

    def console_errors(self) -> list[str]:
        """Errors the page logged or threw, and failed loads Chromium reported."""
        self.evaluate("0")  # collect the events sent so far
        errors = []
        for event in self.events:
            params = event.get("params", {})
            if event["method"] == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "assert",
            ):
                errors.append(json.dumps(params.get("args")))
            elif event["method"] == "Runtime.exceptionThrown":
                errors.append(json.dumps(params.get("exceptionDetails")))
            elif event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
                errors.append(params["entry"].get("text", ""))
        return errors

    def screenshot(self, path: Path) -> Path:
        shot = self.call("Page.captureScreenshot", format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        socket = getattr(self, "_socket", None)
        if socket is not None:
            socket.close()
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._log.close()

"""Shared fixtures for the worker tests: a real downstream on loopback, events, decoding.

The downstream answers what each request asks for, so a test knows the mix it produced:
``GET /status/<code>?retry_after=<s>`` (and ``&header=<Name: value>``, repeatable, for further
headers), or a POST whose JSON body holds ``status`` (default 200) and ``retry_after``.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from controller.model import Sample
from controller.telemetry import samples_from_log_message
from tests.paths import EVENTS
from worker import instrument, schema, wrapper
from worker.aggregate import Reports
from worker.invocation import failures


class _Downstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real clients use it
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        segments = parts.path.strip("/").split("/")
        status = int(segments[1]) if segments[0] == "status" and len(segments) > 1 else 200
        query = parse_qs(parts.query)
        headers = [header.split(":", 1) for header in query.get("header", [])]
        self._answer(status, query.get("retry_after", [None])[0], headers)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        asked = json.loads(self.rfile.read(length) or b"{}")
        retry_after = asked.get("retry_after")
        self._answer(
            int(asked.get("status", 200)), None if retry_after is None else str(retry_after)
        )

    def _answer(
        self, status: int, retry_after: str | None, headers: list[list[str]] | None = None
    ) -> None:
        body = json.dumps({"status": status}).encode()
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        for name, value in headers or []:
            self.send_header(name, value.strip())
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on what the worker prints."""


@pytest.fixture
def downstream() -> Iterator[str]:
    """Base URL of a downstream on 127.0.0.1 (free port), stopped after the test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Downstream)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def instrumentation(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Hooks installed, no invocation left open, failure count reset, no AWS endpoint env,
    no reports held from another test."""
    for name in ("AWS_ENDPOINT_URL", "QUEUEMESH_NAMESPACE", "QUEUEMESH_RESPECT_RETRY_AFTER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(failures, "count", 0)
    monkeypatch.setattr(wrapper, "_reports", Reports())
    instrument.install()
    try:
        yield
    finally:
        instrument.end()


def load_event(name: str) -> dict[str, Any]:
    """A fresh copy of tests/events/<name> (the wrapper annotates an event's Records)."""
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return copy.deepcopy(event)


def worker_output(capsys: pytest.CaptureFixture[str]) -> str:
    """What the worker printed, with the reports it still holds (those of invocations whose
    second has not passed yet: ``worker.aggregate``) flushed as at shutdown."""
    wrapper.flush()
    return capsys.readouterr().out


def decoded(printed: str, namespace: str = schema.NAMESPACE) -> list[Sample]:
    """The samples the controller's decoder reads from what the worker printed."""
    samples: list[Sample] = []
    skipped: Counter[str] = Counter()
    for line in printed.splitlines():
        samples.extend(samples_from_log_message(line, None, namespace=namespace, skipped=skipped))
    assert not skipped, f"the decoder skipped worker output: {skipped}"
    return samples


def by_queue(samples: list[Sample]) -> dict[str, Sample]:
    result = {sample.queue: sample for sample in samples}
    assert len(result) == len(samples), "more than one document for a queue"
    return result

"""Client-side timeouts (connect or read) are downstream timeouts, with the time waited, for
every hooked HTTP client: against loopback servers that stall."""

from __future__ import annotations

import asyncio
import http.client
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import requests
import urllib3

from controller.model import Sample
from tests.worker_support import (  # noqa: F401 (fixtures)
    decoded,
    instrumentation,
    load_event,
    worker_output,
)
from worker import instrument, wrapper

pytestmark = pytest.mark.usefixtures("instrumentation")

TIMEOUT_S = 0.2
# Whatever a client raises when it gives up waiting (each wraps socket.timeout its own way).
CLIENT_ERRORS = (
    OSError,
    http.client.HTTPException,
    urllib3.exceptions.HTTPError,
    requests.RequestException,
    httpx.HTTPError,
)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections on 127.0.0.1 and never answers: every read times out."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def full_server() -> Iterator[str]:
    """Listens on 127.0.0.1 with its accept queue full: every new connect times out."""
    with socket.socket() as server, socket.socket() as queued:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        queued.connect(server.getsockname())  # fills the queue; nothing ever accepts it
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def _http_client(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        connection.request("GET", "/")
        connection.getresponse()
    finally:
        connection.close()


def _urllib3(url: str) -> None:
    with urllib3.PoolManager(retries=False, timeout=TIMEOUT_S) as pool:
        pool.request("GET", url + "/")


def _requests(url: str) -> None:
    with requests.Session() as session:
        session.get(url + "/", timeout=TIMEOUT_S)


def _urllib_request(url: str) -> None:
    with urllib.request.urlopen(url + "/", timeout=TIMEOUT_S):
        pass


def _httpx(url: str) -> None:
    with httpx.Client(timeout=TIMEOUT_S) as client:
        client.get(url + "/")


def _httpx_async(url: str) -> None:
    async def call() -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            await client.get(url + "/")

    asyncio.run(call())


CLIENTS: dict[str, Callable[[str], None]] = {
    "http.client": _http_client,
    "urllib3": _urllib3,
    "requests": _requests,
    "urllib.request": _urllib_request,
    "httpx": _httpx,
    "httpx-async": _httpx_async,
}


def _sample_of(call: Callable[[], Any], capsys: pytest.CaptureFixture[str]) -> Sample:
    def application(event: Any, context: Any) -> None:
        with pytest.raises(CLIENT_ERRORS):
            call()

    wrapper.invoke(application, load_event("sqs_mixed_answers.json"), None)
    (sample,) = decoded(worker_output(capsys))
    return sample


@pytest.mark.parametrize("client", CLIENTS)
def test_a_read_timeout_is_a_downstream_timeout_with_its_latency(
    client: str, silent_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = _sample_of(lambda: CLIENTS[client](silent_server), capsys)

    assert (sample.requests, sample.timed_out, sample.ok, sample.server_errors) == (1, 1, 0, 0)
    assert sample.latency_count == 1
    assert sample.pressure == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_a_connect_timeout_is_a_downstream_timeout_with_its_latency(
    client: str, full_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = _sample_of(lambda: CLIENTS[client](full_server), capsys)

    assert (sample.requests, sample.timed_out, sample.latency_count) == (1, 1, 1)


def test_a_refused_connection_is_not_a_timeout() -> None:
    refused = urllib3.exceptions.NewConnectionError(None, "refused")  # type: ignore[arg-type]
    assert not instrument.is_timeout(refused)
    assert not instrument.is_timeout(ConnectionRefusedError())
    assert instrument.is_timeout(urllib3.exceptions.ConnectTimeoutError())
    assert instrument.is_timeout(urllib3.exceptions.ReadTimeoutError(None, "/", "slow"))  # type: ignore[arg-type]
    assert instrument.is_timeout(httpx.PoolTimeout("no connection"))
    assert instrument.is_timeout(TimeoutError())


def test_a_worker_document_without_timeouts_leaves_the_count_out_and_reads_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrapper.invoke(lambda event, context: None, load_event("sqs_mixed_answers.json"), None)
    printed = worker_output(capsys)
    assert '"DownstreamTimeout"' not in printed
    (sample,) = decoded(printed)
    assert sample.timed_out == 0

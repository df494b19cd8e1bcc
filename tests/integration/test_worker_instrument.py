"""HTTP client hooks: every client seen, each call once, AWS calls never, failures harmless."""

from __future__ import annotations

import asyncio
import http.client
import inspect
import logging
import socket
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlsplit

import boto3
import httpx
import pytest
import requests
import urllib3
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Sample
from tests.worker_support import (  # noqa: F401 (fixtures)
    decoded,
    downstream,
    instrumentation,
    load_event,
    worker_output,
)
from worker import api, emf, instrument, wrapper
from worker.invocation import FOLD_EVERY, Invocation, failures, is_aws_host
from worker.tally import Tally

pytestmark = pytest.mark.usefixtures("instrumentation")


def _sample_of(application: Callable[[], Any], capsys: pytest.CaptureFixture[str]) -> Sample:
    """Run ``application`` as the handler of an SQS invocation; the queue's decoded sample."""
    wrapper.invoke(lambda event, context: application(), load_event("sqs_mixed_answers.json"), None)
    (sample,) = decoded(worker_output(capsys))
    return sample


def _with_http_client(base: str, path: str) -> int:
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _with_urllib3(base: str, path: str) -> int:
    with urllib3.PoolManager(retries=False) as pool:
        return pool.request("GET", base + path).status


def _with_requests(base: str, path: str) -> int:
    with requests.Session() as session:
        return session.get(base + path, timeout=5).status_code


def _with_urllib_request(base: str, path: str) -> int:
    try:
        with urllib.request.urlopen(base + path, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def _with_httpx(base: str, path: str) -> int:
    with httpx.Client() as client:
        return client.get(base + path).status_code


def _with_httpx_async(base: str, path: str) -> int:
    async def call() -> int:
        async with httpx.AsyncClient() as client:
            return (await client.get(base + path)).status_code

    return asyncio.run(call())


CLIENTS = {
    "http.client": _with_http_client,
    "urllib3": _with_urllib3,
    "requests": _with_requests,
    "urllib.request": _with_urllib_request,
    "httpx": _with_httpx,
    "httpx-async": _with_httpx_async,
}


@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_is_seen_and_each_call_counted_once(
    client: str,
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    call = CLIENTS[client]
    paths = [
        "/status/200",
        "/status/204",
        "/status/429?retry_after=11",
        "/status/503?retry_after=4",
        "/status/500",
        "/status/404",
        "/status/200",
    ]

    sample = _sample_of(lambda: [call(downstream, path) for path in paths], capsys)

    assert (sample.requests, sample.ok, sample.throttled) == (7, 3, 1)
    assert (sample.server_errors, sample.overloaded, sample.client_errors) == (2, 1, 1)
    assert sample.latency_count == 7
    assert sample.retry_after_s == 11
    assert sample.downstream == downstream.removeprefix("http://")


def test_a_retry_after_date_is_read_as_seconds_from_now(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    path = "/status/429?retry_after=" + urllib.parse.quote(when)

    sample = _sample_of(lambda: _with_urllib3(downstream, path), capsys)

    assert sample.throttled == 1
    assert 100 <= sample.retry_after_s <= 120


def test_redirects_count_as_the_call_they_lead_to(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = _sample_of(lambda: _with_urllib3(downstream, "/status/302"), capsys)
    assert sample.requests == 0


@pytest.mark.parametrize("client", ["urllib3", "requests", "httpx", "httpx-async"])
def test_a_refused_connection_is_a_call_without_an_answer(
    client: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        closed_port = placeholder.getsockname()[1]

    def refused() -> None:
        with pytest.raises(
            (urllib3.exceptions.HTTPError, requests.RequestException, httpx.HTTPError)
        ):
            CLIENTS[client](f"http://127.0.0.1:{closed_port}", "/status/200")

    sample = _sample_of(refused, capsys)

    assert (sample.requests, sample.ok, sample.server_errors, sample.latency_count) == (1, 0, 0, 0)
    assert sample.timed_out == 0


def test_calls_outside_an_invocation_are_not_counted(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _with_urllib3(downstream, "/status/429") == 429
    sample = _sample_of(lambda: _with_urllib3(downstream, "/status/200"), capsys)
    assert (sample.requests, sample.ok, sample.throttled) == (1, 1, 0)


def test_aws_sdk_calls_are_not_downstream_calls(
    moto_endpoint: str,
    downstream: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # An explicit endpoint, not AWS_ENDPOINT_URL: the SDK's own connections are recognised.
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_endpoint)

    def application() -> None:
        queue_url = sqs.create_queue(QueueName="qm-sdk")["QueueUrl"]
        sqs.send_message(QueueUrl=queue_url, MessageBody="{}")
        assert sqs.receive_message(QueueUrl=queue_url)["Messages"]
        _with_urllib3(downstream, "/status/200")

    sample = _sample_of(application, capsys)

    assert (sample.requests, sample.ok) == (1, 1)


def test_plain_http_to_the_configured_aws_endpoint_is_not_a_downstream_call(
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    sample = _sample_of(lambda: _with_urllib3(moto_endpoint, "/moto-api/"), capsys)
    assert sample.requests == 0


@pytest.mark.parametrize(
    ("host", "aws"),
    [
        ("sqs.us-east-1.amazonaws.com", True),
        ("SQS.eu-west-1.AmazonAWS.com.", True),
        ("dynamodb.cn-north-1.amazonaws.com.cn", True),
        ("sqs.us-east-1.api.aws", True),
        ("amazonaws.com", True),
        ("api.example.com", False),
        ("notamazonaws.com", False),
        ("amazonaws.com.evil.example", False),
        ("payments.internal", False),
    ],
)
def test_aws_hosts_are_recognised_by_their_domain(host: str, aws: bool) -> None:
    assert is_aws_host(host) is aws


def test_httpx_calls_are_named_by_their_scheme_host_and_port() -> None:
    # The hooks key httpx's names by its parsed URL's fields: each of the three tells origins apart.
    invocation = Invocation(["orders"], environ={"AWS_ENDPOINT_URL": "http://local"})

    def name(url: str) -> str | None:
        return instrument._httpx_downstream(invocation, httpx.Request("GET", url))

    assert [
        name(url)
        for url in (
            "http://local/",
            "https://local/",
            "http://local:8080/",
            "http://remote:8080/",
            "http://local:8080/again",
        )
    ] == [None, "local", "local:8080", "remote:8080", "local:8080"]


def test_the_http_client_hooks_take_the_stdlib_arguments() -> None:
    # The hooks spell the stdlib's parameters out (no *args/**kwargs on the hot path).
    def parameters(function: Callable[..., Any]) -> list[tuple[str, object, object]]:
        return [
            (parameter.name, parameter.kind, parameter.default)
            for parameter in inspect.signature(function).parameters.values()
        ]

    names = ("putrequest", "endheaders", "getresponse")
    hooked = {name: parameters(getattr(http.client.HTTPConnection, name)) for name in names}
    instrument.uninstall()
    try:
        for name in names:
            assert hooked[name] == parameters(getattr(http.client.HTTPConnection, name)), name
    finally:
        instrument.install()


def test_installing_twice_hooks_once() -> None:
    hooked = http.client.HTTPConnection.getresponse
    instrument.install()
    assert http.client.HTTPConnection.getresponse is hooked
    assert instrument.installed()


def test_uninstalling_restores_the_clients(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    instrument.uninstall()
    try:
        assert http.client.HTTPConnection.getresponse.__module__ == "http.client"
        assert http.client.HTTPConnection.getresponse.__qualname__ == "HTTPConnection.getresponse"
        sample = _sample_of(lambda: _with_urllib3(downstream, "/status/200"), capsys)
        assert sample.requests == 0
    finally:
        instrument.install()


# the explicit API --------------------------------------------------------------------------------

STATUSES = st.sampled_from([200, 201, 204, 400, 404, 429, 500, 502, 503, 504])


@settings(max_examples=40)
@given(
    calls=st.lists(
        st.tuples(STATUSES, st.floats(0, 5_000), st.none() | st.integers(0, 3_600)),
        max_size=150,
    )
)
def test_recorded_calls_decode_to_the_same_counts(
    calls: list[tuple[int, float, int | None]],
) -> None:
    printed: list[str] = []

    def application(event: Any, context: Any) -> None:
        for status, latency_ms, retry_after in calls:
            api.record(status, latency_ms, retry_after=retry_after, downstream="payments")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emf, "emit", lambda document: printed.append(emf.json.dumps(document)))
        wrapper.invoke(application, load_event("sqs_mixed_answers.json"), None)
        wrapper.flush()

    (sample,) = decoded("\n".join(printed))
    statuses = [status for status, _, _ in calls]
    assert sample.requests == len(calls)
    assert sample.ok == sum(200 <= status < 300 for status in statuses)
    assert sample.throttled == statuses.count(429)
    assert sample.server_errors == sum(status >= 500 for status in statuses)
    # Downstream503 is written beside any 5xx (zero counts are left out, read as none).
    assert sample.overloaded == (statuses.count(503) if sample.server_errors else None)
    assert sample.client_errors == sum(400 <= status < 500 and status != 429 for status in statuses)
    assert sample.latency_count == len(calls)
    if calls:
        total = sum(latency for _, latency, _ in calls)
        # Sent as a sum rounded to the microsecond.
        assert sample.latency_ms_sum == pytest.approx(total, abs=1e-3)
        assert sample.downstream == "payments"
    answered_after = [retry for status, _, retry in calls if retry is not None]
    assert sample.retry_after_s == max(answered_after, default=0)


def test_record_outside_an_invocation_is_a_no_op_and_never_raises() -> None:
    api.record(429, 12.0, retry_after="soon")
    assert instrument.active() is None
    invocation = Invocation(["orders"])
    instrument.begin(invocation)
    api.record("not a status", 1.0)  # type: ignore[arg-type]
    instrument.end()
    assert invocation.tallies["orders"].requests == 0
    assert failures.count == 1


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit-Policy": '"q";q=30;w=1', "RateLimit": '"q";r=4;t=1', "Retry-After": "2"},
        # gRPC's metadata: a tuple of (name, value) pairs, lowercase names.
        (("ratelimit-policy", '"q";q=30;w=1'), ("ratelimit", '"q";r=4;t=1'), ("retry-after", "2")),
        [
            (b"RateLimit-Policy", b'"q";q=30;w=1'),
            (b"RateLimit", b'"q";r=4;t=1'),
            (b"Retry-After", b"2"),
        ],
    ],
    ids=["mapping", "grpc-metadata", "raw-pairs"],
)
def test_record_reads_an_answers_announced_quota_and_retry_after_from_its_headers(
    headers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def application() -> None:
        api.record(200, 10.0, downstream="payments", headers={"Content-Type": "text/plain"})
        api.record(429, 12.0, downstream="payments", headers=headers)

    sample = _sample_of(application, capsys)

    assert (sample.requests, sample.throttled) == (2, 1)
    assert (sample.quota_remaining, sample.quota_limit, sample.quota_window_s) == (4, 30, 1)
    assert sample.quota_reset_s is not None and 0 < sample.quota_reset_s <= 1.5
    assert sample.retry_after_s == 2


def test_record_prefers_the_retry_after_it_is_given_to_its_headers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = _sample_of(
        lambda: api.record(429, 12.0, retry_after=7, headers={"Retry-After": "2"}), capsys
    )
    assert sample.retry_after_s == 7


@settings(max_examples=50)
@given(
    statuses=st.lists(st.sampled_from([200, 204, 301, 404, 429, 500, 503]), max_size=40),
    reads=st.sets(st.integers(min_value=0, max_value=40)),
)
def test_reading_the_tallies_mid_invocation_counts_each_call_once(
    statuses: list[int], reads: set[int]
) -> None:
    """The hooks' calls become tallies when read; a read between calls changes nothing."""
    read_often = Invocation(["orders"], environ={})
    read_once = Invocation(["orders"], environ={})
    for index, status in enumerate(statuses):
        if index in reads:
            assert read_often.tallies["orders"].requests == _counted(statuses[:index])
        for invocation in (read_often, read_once):
            invocation.count(status, 1.0, 2.0 if status == 429 else None, "payments")

    assert read_often.tallies == read_once.tallies
    assert read_often.unattributed_retry_after == read_once.unattributed_retry_after
    assert read_once.tallies["orders"].requests == _counted(statuses)


def _counted(statuses: list[int]) -> int:
    """The calls among ``statuses`` that count (a redirect leads to the call that does)."""
    return sum(not 300 <= status < 400 for status in statuses)


@pytest.mark.parametrize("fold_every", [FOLD_EVERY, 7])
def test_calls_from_many_threads_are_all_counted(
    fold_every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Folding every 7 calls: the threads fold the calls into the tallies while others count.
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr("worker.invocation.FOLD_EVERY", fold_every)
    invocation = Invocation(["orders"], environ={})
    seen: list[int] = []  # what one thread reads while the others count

    def calls(thread: int) -> None:
        for _ in range(2_000):
            api.record(200, 1.0)
            if thread == 0:
                seen.append(invocation.tallies["orders"].ok)

    instrument.begin(invocation)
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(calls, range(4)))
    finally:
        instrument.end()

    assert seen == sorted(seen) and seen[-1] <= 8_000
    assert invocation.tallies["orders"].ok == 8_000
    assert invocation.tallies["orders"].latency_count == 8_000


def test_a_call_made_while_its_invocation_folds_calls_neither_waits_nor_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fold's first failure is logged in the folding thread, and a logging handler that
    # calls an API brings a call back to the same invocation while its fold is in progress.
    monkeypatch.setattr("worker.invocation.FOLD_EVERY", 2)
    invocation = Invocation(["orders"], environ={})
    add = Tally.add
    failing = iter([True])

    def add_failing_once(self: Tally, *args: Any) -> None:
        if next(failing, False):
            raise RuntimeError("broken once")
        add(self, *args)

    monkeypatch.setattr(Tally, "add", add_failing_once)

    class CallingHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            invocation.count(200, 1.0, None, "logs")

    handler = CallingHandler()
    logging.getLogger("queuemesh").addHandler(handler)
    try:
        for _ in range(4):
            invocation.count(200, 1.0, None, "payments")
    finally:
        logging.getLogger("queuemesh").removeHandler(handler)

    assert failures.count == 1
    # the four calls but the one that failed, and the handler's
    assert invocation.tallies["orders"].requests == 4
    assert invocation.tallies["orders"].downstreams == {"payments", "logs"}


def test_an_invocation_holds_a_bounded_number_of_calls_however_many_it_makes() -> None:
    """Past ``FOLD_EVERY`` calls the tallies take the calls in and the calls are let go, and
    a tally holds its latencies as a sum and a count: an invocation's memory does not grow
    with each call (about 130 bytes a call if it did)."""
    import tracemalloc

    invocation = Invocation(["orders"], environ={})
    many = 20 * FOLD_EVERY
    tracemalloc.start()
    try:
        for index in range(many):
            invocation.count(200, index / 1000, None, "payments")
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert invocation.tallies["orders"].ok == many
    assert peak_bytes < 20 * many


def test_processing_attributes_calls_to_a_record_in_a_worker_thread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def handle(record: dict[str, Any]) -> None:
        with api.processing(record):
            api.record(429 if "refunds" in record["eventSourceARN"] else 200, 5.0)

    def application(event: Any, context: Any) -> None:
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(handle, event["Records"]))

    wrapper.invoke(application, load_event("sqs_two_queues.json"), None)
    samples = {sample.queue: sample for sample in decoded(worker_output(capsys))}

    assert (samples["orders"].requests, samples["orders"].ok) == (3, 3)
    assert (samples["refunds"].requests, samples["refunds"].throttled) == (2, 2)


def test_the_decorator_reports_like_the_wrapper(capsys: pytest.CaptureFixture[str]) -> None:
    @api.instrumented
    def handler(event: Any, context: Any) -> str:
        api.record(503, 20.0, downstream="ledger")
        return "done"

    assert handler(load_event("sqs_mixed_answers.json"), None) == "done"
    assert handler.__name__ == "handler"
    (sample,) = decoded(worker_output(capsys))
    assert (sample.queue, sample.server_errors, sample.overloaded, sample.downstream) == (
        "orders",
        1,
        1,
        "ledger",
    )


# pieces ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30", 30.0),
        (" 2.5 ", 2.5),
        (b"7", 7.0),
        (-3, 0.0),
        ("-3", 0.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        (True, None),
        (None, None),
    ],
)
def test_retry_after_values(value: object, seconds: float | None) -> None:
    assert instrument.parse_retry_after(value) == seconds


@settings(max_examples=60)
@given(st.text(max_size=40) | st.floats() | st.integers())
def test_retry_after_is_never_negative_nor_raises(value: object) -> None:
    seconds = instrument.parse_retry_after(value)
    assert seconds is None or seconds >= 0


def test_a_urllib3_call_is_counted_once_at_urllib3s_layer_with_its_header_dict(
    downstream: str,  # noqa: F811
) -> None:
    # urllib3's hook takes the call before http.client's below it sees it: one call held, its
    # answer read from the header dict urllib3 answers with (by lowercase name).
    invocation = Invocation(["orders"], environ={})
    instrument.begin(invocation)
    try:
        with urllib3.PoolManager(retries=False) as pool:
            response = pool.request(
                "GET",
                downstream
                + "/status/429?retry_after=7&header=X-RateLimit-Remaining%3A%200"
                + "&header=Stripe-Rate-Limited-Reason%3A%20global-concurrency",
            )
    finally:
        instrument.end()

    (held,) = invocation.calls
    assert held[1:4:2] == (429, 7)
    tally = invocation.tallies["orders"]
    assert (tally.requests, tally.throttled, tally.throttled_concurrency) == (1, 1, 1)
    assert tally.announcing is not None and tally.announcing[0] is response.headers

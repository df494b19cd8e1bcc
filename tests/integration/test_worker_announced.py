"""Rate-limit headers read on every hooked client, reported per invocation (docs/worker.md,
"Rate-limit headers"), and decoded by the controller into the Sample's announced fields."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest

from tests.integration.test_worker_instrument import CLIENTS, _sample_of
from tests.worker_support import (  # noqa: F401 (fixtures)
    downstream,
    instrumentation,
    load_event,
    worker_output,
)
from worker import announced, instrument, schema, wrapper
from worker.invocation import failures

pytestmark = pytest.mark.usefixtures("instrumentation")


def _path(status: int, *headers: str) -> str:
    return f"/status/{status}?" + "&".join(f"header={quote(header)}" for header in headers)


IETF_POLICY = 'RateLimit-Policy: "burst";q=100;w=10, "day";q=5000;w=86400'


@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_reports_the_least_remaining_quota_with_its_policy(
    client: str,
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    call = CLIENTS[client]
    paths = [
        _path(200, IETF_POLICY, 'RateLimit: "burst";r=40;t=8, "day";r=4000;t=80000'),
        _path(200, IETF_POLICY, 'RateLimit: "burst";r=30;t=7, "day";r=3990;t=80000'),
        _path(200, IETF_POLICY, 'RateLimit: "burst";r=7;t=6, "day";r=3980;t=80000'),
        _path(200),  # an answer without headers changes nothing
    ]

    sample = _sample_of(lambda: [call(downstream, path) for path in paths], capsys)

    assert sample.requests == 4
    assert (sample.quota_remaining, sample.quota_limit, sample.quota_window_s) == (7, 100, 10)
    # The reset counts from the document's timestamp: the answer came a moment before it.
    assert sample.quota_reset_s is not None
    assert 5.0 <= sample.quota_reset_s <= 6.001  # the timestamp is in whole ms


def test_x_ratelimit_resets_as_epoch_seconds_and_as_seconds_to_wait(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    reset_at = int(time.time()) + 600
    github = (
        "X-RateLimit-Limit: 5000",
        "X-RateLimit-Remaining: 12",
        f"X-RateLimit-Reset: {reset_at}",
    )
    waiting = ("X-RateLimit-Limit: 60", "X-RateLimit-Remaining: 50", "X-RateLimit-Reset: 30")
    call = CLIENTS["requests"]

    sample = _sample_of(
        lambda: [call(downstream, _path(200, *github)), call(downstream, _path(200, *waiting))],
        capsys,
    )

    assert (sample.quota_remaining, sample.quota_limit, sample.quota_window_s) == (12, 5000, None)
    assert sample.quota_reset_s is not None
    assert 595 <= sample.quota_reset_s <= 600.001


def test_the_earlier_draft_fields_with_their_window(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    headers = ("RateLimit-Limit: 10, 10;w=1, 50;w=60", "RateLimit-Remaining: 3")
    sample = _sample_of(lambda: CLIENTS["urllib3"](downstream, _path(200, *headers)), capsys)

    assert (sample.quota_remaining, sample.quota_limit, sample.quota_window_s) == (3, 10, 1)
    assert sample.quota_reset_s is None


@pytest.mark.parametrize("client", CLIENTS)
def test_429s_are_counted_by_the_kind_of_limit_they_name(
    client: str,
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    call = CLIENTS[client]
    paths = [
        _path(429, "Stripe-Rate-Limited-Reason: endpoint-concurrency"),
        _path(429, "Stripe-Rate-Limited-Reason: global-rate"),
        _path(429, "Stripe-Rate-Limited-Reason: resource-specific"),
        _path(429, "Twilio-Concurrent-Requests: 12"),
        _path(429, "Stripe-Rate-Limited-Reason: something-new"),
        _path(429),
        # Only a 429 names the kind of limit it hit.
        _path(200, "Stripe-Rate-Limited-Reason: global-rate"),
    ]

    sample = _sample_of(lambda: [call(downstream, path) for path in paths], capsys)

    assert sample.throttled == 6
    assert (sample.throttled_concurrency, sample.throttled_rate) == (2, 2)
    assert sample.quota_remaining is None


def test_malformed_headers_are_ignored_and_never_reach_the_application(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = [
        _path(200, 'RateLimit: "a";r=-1;t=2, "b";r=nan, "c";r=lots, ;;;,"'),
        _path(200, "RateLimit-Policy: q=; w", "X-RateLimit-Remaining: inf"),
        _path(200, "X-RateLimit-Limit: 10", "X-RateLimit-Reset: 5"),  # no remaining: no limit
        _path(200, "RateLimit-Remaining: 4", "RateLimit-Reset: soon"),
    ]

    sample = _sample_of(lambda: [CLIENTS["requests"](downstream, p) for p in paths], capsys)

    assert sample.requests == 4
    assert (sample.quota_remaining, sample.quota_limit, sample.quota_reset_s) == (4, None, None)


def test_without_rate_limit_headers_no_announced_member_is_written(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    event = load_event("sqs_mixed_answers.json")
    wrapper.invoke(lambda e, c: CLIENTS["httpx"](downstream, _path(429)), event, None)

    (document,) = [json.loads(line) for line in worker_output(capsys).splitlines()]
    assert document[schema.THROTTLED.name] == 1
    assert not {metric.name for metric in schema.ANNOUNCED} & set(document)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_reader_that_fails_costs_the_announcement_only(
    client: str,
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every answer is read as it comes, in the hook: a reader that raises there is counted as
    # instrumentation's failure, and the call, its 429 and Retry-After are counted all the same.
    def broken(headers: object) -> float | None:
        raise RuntimeError("reader broken")

    paths = [
        _path(200, 'RateLimit: "burst";r=7;t=6'),
        _path(429, "Stripe-Rate-Limited-Reason: global-rate", "Retry-After: 3"),
    ]
    # httpx's hooks take their header class's reader when installed: installed again, they
    # take the broken one, and the real one again afterwards.
    try:
        with monkeypatch.context() as patched:
            patched.setattr(announced, "_remaining_readers", {})
            patched.setattr(announced, "_remaining_reader", lambda headers: broken)
            instrument.uninstall()
            instrument.install()
            sample = _sample_of(lambda: [CLIENTS[client](downstream, p) for p in paths], capsys)
    finally:
        instrument.uninstall()
        instrument.install()

    assert (sample.requests, sample.ok, sample.throttled) == (2, 1, 1)
    assert sample.throttled_rate == 1
    assert sample.quota_remaining is None
    assert failures.count == 2

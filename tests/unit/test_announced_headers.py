"""Reading rate-limit headers (worker/announced.py): every style, the least remaining policy,
resets as instants, the kinds of a 429, and anything malformed ignored without raising."""

from __future__ import annotations

import asyncio
from functools import partial

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from worker import announced, instrument
from worker.announced import Limit
from worker.invocation import Invocation

NOW = 1_795_000_000.0


def glance(headers: object, status: int) -> tuple[float | None, str | None]:
    """What the fold reads of every answer: its least remaining quota, and a 429's kind."""
    kind = announced.limit_kind(headers) if status == 429 else None
    return announced.least_remaining(headers), kind


def read(headers: list[tuple[str, str]], status: int = 200) -> tuple[Limit | None, str | None]:
    """The limit ``limit`` reads and the kind ``limit_kind`` reads, checking that the remaining
    quota ``least_remaining`` reads for every answer is the limit's."""
    remaining, kind = glance(headers, status)
    limit = announced.limit(headers, NOW)
    assert remaining == (None if limit is None else limit.remaining)
    return limit, kind


def test_the_draft_08_policy_with_the_least_remaining_counts_with_its_own_quota() -> None:
    limit, kind = read(
        [
            ("ratelimit-policy", '"day";q=5000;w=86400, "burst";q=100;w=60'),
            ("RateLimit", '"burst";r=40;t=10, "day";r=3;t=3000'),
        ]
    )
    assert limit == Limit(3, 5000, 86400, NOW + 3000)
    assert kind is None


def test_a_field_sent_twice_is_one_list_and_a_name_may_hold_a_comma() -> None:
    limit, _ = read(
        [
            ("RateLimit-Policy", '"a, b";q=10;w=1'),
            ("RateLimit", '"x";r=9;t=1'),
            ("RateLimit", '"a, b";r=2;t=1'),
        ]
    )
    assert limit == Limit(2, 10, 1, NOW + 1)


def test_a_policy_it_does_not_name_leaves_the_quota_and_window_unknown() -> None:
    assert read([("RateLimit", "burst;r=5")])[0] == Limit(5, None, None, None)


@pytest.mark.parametrize(
    ("reset", "instant"),
    [("30", NOW + 30), ("1795000600", 1795000600.0), ("1795000600000", 1795000600.0)],
)
def test_a_reset_is_seconds_to_wait_or_an_epoch_instant(reset: str, instant: float) -> None:
    limit, _ = read(
        [("X-RateLimit-Limit", "60"), ("X-RateLimit-Remaining", "7"), ("X-RateLimit-Reset", reset)]
    )
    assert limit == Limit(7, 60, None, instant)


def test_the_earlier_draft_reads_its_window_from_the_limit_or_an_unnamed_policy() -> None:
    limit, _ = read([("RateLimit-Limit", "10, 10;w=1, 50;w=60"), ("RateLimit-Remaining", "4")])
    assert limit == Limit(4, 10, 1, None)
    limit, _ = read(
        [("RateLimit-Limit", "50"), ("RateLimit-Policy", "50;w=60"), ("RateLimit-Remaining", "4")]
    )
    assert limit == Limit(4, 50, 60, None)


def test_one_style_per_answer_the_newest_draft_first() -> None:
    limit, _ = read(
        [
            ("X-RateLimit-Remaining", "1"),
            ("RateLimit-Policy", '"p";q=10;w=1'),
            ("RateLimit", '"p";r=8;t=1'),
        ]
    )
    assert limit is not None and limit.remaining == 8


@pytest.mark.parametrize(
    ("headers", "kind"),
    [
        ([("Stripe-Rate-Limited-Reason", "global-concurrency")], announced.CONCURRENCY),
        ([("Stripe-Rate-Limited-Reason", "endpoint-concurrency")], announced.CONCURRENCY),
        ([("Stripe-Rate-Limited-Reason", "global-rate")], announced.RATE),
        ([("Stripe-Rate-Limited-Reason", "endpoint-rate")], announced.RATE),
        ([("Stripe-Rate-Limited-Reason", " Resource-Specific ")], announced.RATE),
        ([("Stripe-Rate-Limited-Reason", "unheard-of")], None),
        ([("Twilio-Concurrent-Requests", "12")], announced.CONCURRENCY),
    ],
)
def test_a_429_names_the_kind_of_limit_it_hit(headers: list[tuple[str, str]], kind: str) -> None:
    assert read(headers, 429) == (None, kind)
    assert read(headers, 200) == (None, None)


def test_raw_byte_headers_read_as_text() -> None:
    glimpse = glance([(b"X-RateLimit-Remaining", b"5")], 200)
    assert glimpse == (5.0, None)


@pytest.mark.parametrize(
    "headers",
    [
        [("RateLimit", ";r=0")],
        [("RateLimit", '";r=0;"')],
        [("RateLimit", '"'), ("RateLimit", '0;r=0;"')],
        [("ratelimit-remaining", ""), ("ratelimit-remaining", "0")],
    ],
)
def test_what_every_answer_is_glanced_for_is_what_its_limit_reads(
    headers: list[tuple[str, str]],
) -> None:
    # Malformed fields hypothesis found read one way by the fold and another by the limit.
    read(headers, 200)


def test_an_answer_without_rate_limit_fields_is_not_an_announcement() -> None:
    plain = [("Content-Type", "application/json"), ("Retry-After", "3")]
    assert glance(plain, 429) == (None, None)


header_names = st.sampled_from(
    [
        "RateLimit",
        "RateLimit-Policy",
        "RateLimit-Limit",
        "ratelimit-remaining",
        "RateLimit-Reset",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "x-ratelimit-reset",
        "Stripe-Rate-Limited-Reason",
        "Twilio-Concurrent-Requests",
        "Content-Type",
    ]
)
structured_values = st.from_regex(r'\A("?[a-z,]{0,4}"?;?[rtqw]=-?[0-9.e]{0,6}[,; ]?){0,4}\Z')
header_values = st.text(max_size=40) | structured_values


@settings(max_examples=300)
@given(st.lists(st.tuples(header_names, header_values), max_size=6), st.sampled_from([200, 429]))
def test_any_headers_read_without_raising_and_only_finite_non_negative_numbers(
    headers: list[tuple[str, str]], status: int
) -> None:
    limit, kind = read(headers, status)
    assert kind in (None, announced.CONCURRENCY, announced.RATE)
    if limit is not None:
        for value in limit:
            assert value is None or 0 <= value < float("inf")


def as_clients_hold_them(headers: list[tuple[str, str]]) -> dict[str, object]:
    """The same answer's headers as each client's answer object holds them."""
    import http.client
    import io

    import httpx
    from urllib3 import HTTPHeaderDict

    text = "".join(f"{name}: {value}\r\n" for name, value in headers) + "\r\n"
    return {
        "http.client": http.client.parse_headers(io.BytesIO(text.encode("latin-1"))),
        "urllib3": HTTPHeaderDict(headers),
        "httpx": httpx.Headers(headers),
        "raw bytes": [(name.encode(), value.encode()) for name, value in headers],
        "a mapping": dict(headers[-1:]),
    }


# What a header value may be on the wire: printable ASCII, no surrounding whitespace.
wire_values = (
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30) | structured_values
).map(str.strip)


@settings(max_examples=200)
@given(st.lists(st.tuples(header_names, wire_values), max_size=6), st.sampled_from([200, 429]))
def test_every_clients_header_object_reads_as_its_pairs(
    headers: list[tuple[str, str]], status: int
) -> None:
    held = as_clients_hold_them(headers)
    mapping = held.pop("a mapping")
    for client, headers_held in held.items():
        assert glance(headers_held, status) == glance(headers, status), client
        assert announced.limit(headers_held, NOW) == announced.limit(headers, NOW), client
    last = headers[-1:]
    assert glance(mapping, status) == glance(last, status)


@settings(max_examples=150)
@given(st.lists(st.lists(st.tuples(header_names, wire_values), max_size=5), max_size=6))
@example([[("X-RateLimit-Remaining", "3")], [("RateLimit", "a;r=3")], [("RateLimit", "a;r=4")]])
@example([[("RateLimit", "a;r=2")], [("RateLimit", "a;r=9")], [("RateLimit", "a;r=5")]])
@example([[("RateLimit-Policy", "a;w=1"), ("RateLimit", "a;r=2")], [("RateLimit", "a;r=9")]])
def test_an_invocation_reports_the_least_remaining_or_the_same_limit_announced_later(
    answers: list[list[tuple[str, str]]],
) -> None:
    invocation = Invocation(["orders"], environ={})
    for at, headers in enumerate(answers):
        invocation.count(200, 1.0, None, "api", headers=headers, answered_at=float(at))

    tally = invocation.tallies["orders"]
    # The reference: every answer's whole limit (``limit``, not ``least_remaining``).
    remaining = [(limit.remaining, at) for at, h in enumerate(answers) if (limit := read(h)[0])]
    if not remaining:
        assert tally.announcing is None and tally.limit is None
        return
    least, chosen = min(remaining, key=lambda item: (item[0], -item[1]))
    assert tally.least_remaining == least
    assert tally.announcing is not None and tally.announcing[0] is answers[chosen]
    kept = announced.limit(answers[chosen], tally.announcing[1])
    assert kept is not None
    last = remaining[-1][1]
    latest = announced.limit(answers[last], tally.latest[1] if tally.latest else 0.0)
    # The latest answer's limit where it announces the least's window (the same limit, a later
    # window: a reset or a quota changed), else the least's.
    same_window = latest is not None and latest.window_s is not None
    same_window = same_window and latest is not None and latest.window_s == kept.window_s
    assert tally.limit == (latest if same_window else kept)


def test_an_invocation_across_a_capacity_drop_reports_the_new_quota() -> None:
    # The live announced demo: a batch's calls in the last second at 68 a second (6 left of
    # it, the least of the batch), then two in the first second at 30 (29 and 25 left). The
    # old window's answer is gone with its window; reported, it hid the drop for a whole
    # invocation.
    invocation = Invocation(["orders"], environ={})
    answers = [
        [("RateLimit-Policy", f'"default";q={quota};w=1'), ("RateLimit", f'"default";r={left};t=1')]
        for left, quota in [(40, 68), (6, 68), (29, 30), (25, 30)]
    ]
    for at, headers in enumerate(answers):
        invocation.count(200, 250.0, None, "api", headers=headers, answered_at=at / 4)

    limit = invocation.tallies["orders"].limit
    assert limit is not None and (limit.remaining, limit.quota, limit.window_s) == (25, 30, 1)


def test_limits_of_other_windows_or_of_none_report_the_least() -> None:
    # A day's quota nearly spent, then a minute's with much left (two limits of one API), and
    # two X-RateLimit limits, whose windows nobody announces: the least may be another
    # limit than the latest, and counts.
    for limit_name, first, second in [
        ("RateLimit", "5000, 5000;w=86400", "60, 60;w=60"),
        ("X-RateLimit", "5000", "60"),
    ]:
        invocation = Invocation(["orders"], environ={})
        for quota, left in [(first, "12"), (second, "50")]:
            headers = [(f"{limit_name}-Limit", quota), (f"{limit_name}-Remaining", left)]
            invocation.count(200, 1.0, None, "api", headers=headers)
        limit = invocation.tallies["orders"].limit
        assert limit is not None and (limit.remaining, limit.quota) == (12, 5000)


def test_the_remaining_quotas_read_lately_are_held_up_to_their_bound() -> None:
    # An API's RateLimit field changes as its quota counts down: each text is read once, and
    # what is remembered stays bounded however many an execution environment sees.
    for remaining in range(3 * announced._PARSED_HELD):
        field = f'"burst";r={remaining};t=1'
        assert glance([("RateLimit", field)], 200) == (remaining, None)
        assert glance([("RateLimit", field)], 200) == (remaining, None)
        assert len(announced._least_by_field) <= announced._PARSED_HELD


ratelimit_fields = st.lists(
    st.tuples(st.sampled_from(["RateLimit", "ratelimit", "X-RateLimit-Remaining"]), wire_values),
    min_size=1,
    max_size=4,
)


@settings(max_examples=200)
@given(
    ratelimit_fields,
    st.lists(st.tuples(header_names, wire_values), max_size=4),
    st.randoms(use_true_random=False),
)
def test_every_readers_least_remaining_is_its_limits_read_cold_or_remembered(
    announcing: list[tuple[str, str]], others: list[tuple[str, str]], random: object
) -> None:
    # The readers keep a field sent once as it is (remembered by its text, or by httpx's raw
    # bytes) and read one sent twice as one list: whichever, cold or remembered, what they
    # read is the remaining of the whole limit (``limit``, which remembers neither).
    headers = announcing + others
    random.shuffle(headers)  # type: ignore[attr-defined]
    limit = announced.limit(headers, NOW)
    expected = None if limit is None else limit.remaining
    held = as_clients_hold_them(headers)
    held.pop("a mapping")
    for forgotten in (True, False):
        if forgotten:
            announced._least_by_field.clear()
        for client, headers_held in [("pairs", headers), *held.items()]:
            assert announced.least_remaining(headers_held) == expected, (client, forgotten)


@settings(max_examples=100, deadline=None)
@given(
    ratelimit_fields,
    st.lists(st.tuples(header_names, wire_values), max_size=4),
    st.sampled_from([200, 429]),
)
def test_httpxs_hooks_read_their_own_header_class_as_any_other(
    announcing: list[tuple[str, str]], others: list[tuple[str, str]], status: int
) -> None:
    # httpx's hooks read httpx's header class with the reader chosen once, when they are
    # installed, and any other header object through ``remaining_reader``: both count the
    # remaining of the whole limit, in the sync hook and in the async one.
    class OtherHeaders(httpx.Headers):
        """Not httpx's own class: read through ``remaining_reader``."""

    headers = announcing + others
    limit = announced.limit(headers, NOW)
    expected = None if limit is None else limit.remaining
    request = httpx.Request("GET", "https://api.example.com/")
    read_remaining = announced.remaining_reader(httpx.Headers())
    for header_class in (httpx.Headers, OtherHeaders):
        response = httpx.Response(status)
        response.headers = header_class(headers)
        invocation = Invocation(["orders"], environ={})
        instrument.begin(invocation)
        try:
            instrument._hook_httpx_handle_request(
                lambda transport, request, answer=response: answer, httpx.Headers, read_remaining
            )(None, request)
            asyncio.run(
                instrument._hook_httpx_handle_async_request(
                    partial(_answered_async, response), httpx.Headers, read_remaining
                )(None, request)
            )
        finally:
            instrument.end()
        assert [call[7] for call in invocation.calls] == [expected, expected], header_class


async def _answered_async(response: object, transport: object, request: object) -> object:
    """An async transport's original method that answers ``response``."""
    return response

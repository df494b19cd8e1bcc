"""The announced-limit members decoded into the Sample (docs/telemetry.md, "Announced limits"):
read when present, validated like the others, never above what the document's counts allow."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Sample
from controller.telemetry import samples_from_log_message
from controller.telemetry.announced import MAX_ANNOUNCED
from worker import schema

FAST = settings(max_examples=150)
TIMESTAMP_MS = 1_795_976_609_000

amounts = st.integers(0, 10**9) | st.floats(0, MAX_ANNOUNCED, allow_nan=False)
# A member as one value (powertools writes an array of one) or an array of several flushes.
members_of = st.one_of(amounts, st.lists(amounts, min_size=1, max_size=4))
counts = st.integers(0, 50)
bad_amounts = st.one_of(
    st.floats(max_value=-1e-9),
    st.floats(min_value=MAX_ANNOUNCED, exclude_min=True),
    st.just(float("nan")),
    st.booleans(),
    st.text(max_size=5),
    st.just([]),
    st.lists(st.just("1"), min_size=1, max_size=2),
)


def decode(members: list[tuple[schema.Metric, Any]]) -> tuple[list[Sample], Counter[str]]:
    document = schema.emf_document("orders", members, timestamp_ms=TIMESTAMP_MS)
    skipped: Counter[str] = Counter()
    samples = samples_from_log_message(json.dumps(document), None, skipped=skipped)
    return samples, skipped


def _values(member: Any) -> list[float]:
    return [float(value) for value in (member if isinstance(member, list) else [member])]


@FAST
@given(
    st.fixed_dictionaries(
        {"remaining": members_of},
        optional={"quota": members_of, "window": members_of, "reset": members_of},
    ),
    st.none() | counts,
    st.none() | counts,
    counts,
)
def test_announced_members_decode_to_the_cautious_reading(
    limit: dict[str, Any], concurrency: int | None, rate: int | None, throttled: int
) -> None:
    metrics = {
        "remaining": schema.RATE_LIMIT_REMAINING,
        "quota": schema.RATE_LIMIT_QUOTA,
        "window": schema.RATE_LIMIT_WINDOW,
        "reset": schema.RATE_LIMIT_RESET,
    }
    members = [(schema.REQUESTS, 60), (schema.THROTTLED, throttled)]
    members += [(metrics[name], value) for name, value in limit.items()]
    members += [(schema.THROTTLED_CONCURRENCY, concurrency)] if concurrency is not None else []
    members += [(schema.THROTTLED_RATE, rate)] if rate is not None else []

    samples, skipped = decode(members)

    kinds = (concurrency or 0) + (rate or 0)
    if throttled and kinds > throttled:
        # The kinds are 429s: more of them than 429s is a broken document.
        assert (samples, skipped) == ([], {"bad_value": 1})
        return
    [sample] = samples
    assert not skipped
    # The least remaining quota, quota and window; the latest reset.
    assert sample.quota_remaining == min(_values(limit["remaining"]))
    for name, field in (("quota", "quota_limit"), ("window", "quota_window_s")):
        expected = min(_values(limit[name])) if name in limit else None
        assert getattr(sample, field) == expected
    expected_reset = max(_values(limit["reset"])) if "reset" in limit else None
    assert sample.quota_reset_s == expected_reset
    # The kinds are read beside some 429s only.
    expected_kinds = (concurrency or 0, rate or 0) if throttled else (0, 0)
    assert (sample.throttled_concurrency, sample.throttled_rate) == expected_kinds
    assert sample.throttled == throttled


@FAST
@given(
    st.sampled_from(schema.ANNOUNCED),
    bad_amounts,
)
def test_a_bad_announced_member_skips_the_document_as_bad_value(
    metric: schema.Metric, bad: Any
) -> None:
    members = [(schema.REQUESTS, 3), (schema.THROTTLED, 3), (schema.RATE_LIMIT_REMAINING, 5)]
    if metric != schema.RATE_LIMIT_REMAINING:
        members.append((metric, bad))
    else:
        members = [(schema.REQUESTS, 3), (schema.THROTTLED, 3), (metric, bad)]
    if metric in (schema.THROTTLED_CONCURRENCY, schema.THROTTLED_RATE) and bad == []:
        return  # an empty array of counts sums to 0, as every count member's does
    samples, skipped = decode(members)
    assert samples == []
    assert skipped == {"bad_value": 1}


def test_a_count_of_a_kind_must_be_a_whole_number() -> None:
    samples, skipped = decode([(schema.THROTTLED, 2), (schema.THROTTLED_RATE, 1.5)])
    assert (samples, skipped) == ([], {"bad_value": 1})


def test_kinds_without_429s_are_not_read() -> None:
    [sample], skipped = decode([(schema.REQUESTS, 3), (schema.THROTTLED_RATE, "not read")])
    assert not skipped
    assert (sample.throttled, sample.throttled_rate) == (0, 0)


def test_quota_window_and_reset_without_a_remaining_quota_are_not_read() -> None:
    [sample], skipped = decode(
        [
            (schema.REQUESTS, 3),
            (schema.RATE_LIMIT_QUOTA, 100),
            (schema.RATE_LIMIT_WINDOW, "not read"),
            (schema.RATE_LIMIT_RESET, 5),
        ]
    )
    assert not skipped
    assert (sample.quota_limit, sample.quota_window_s, sample.quota_reset_s) == (None,) * 3


def test_a_document_without_the_members_announces_nothing() -> None:
    [sample], _ = decode([(schema.REQUESTS, 3), (schema.OK, 3)])
    assert sample == Sample("orders", TIMESTAMP_MS / 1000, requests=3, ok=3)

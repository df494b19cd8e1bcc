"""The aggregated form of worker telemetry (docs/telemetry.md, "Aggregated documents"): what an
execution environment writes for its invocations reads back, second by second, as what their
own documents would have said; malformed aggregated documents are skipped and counted."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Sample
from controller.telemetry import samples_from_log_message
from controller.window import QueueWindow
from load.bench.telemetry import held, same_windows
from worker import emf, schema
from worker.aggregate import Reports
from worker.tally import Tally

START = 1_767_225_600.0
STATUSES = (200, 200, 200, 429, 503, 500, 404, None)


@st.composite
def invocations(draw: st.DrawFn) -> list[tuple[dict[str, Tally], float, float]]:
    """One environment's invocations, one after another: the calls per queue, the duration
    in ms and the end (epoch seconds)."""
    made = []
    now = START + draw(st.floats(0, 1))
    for _ in range(draw(st.integers(1, 25))):
        now += draw(st.floats(0, 1.5))  # waiting for the poller
        duration_ms = draw(st.floats(1, 1500))
        now += duration_ms / 1000.0
        tallies = {}
        for queue in draw(st.sets(st.sampled_from(["orders", "billing"]), min_size=1)):
            tally = Tally()
            for status in draw(st.lists(st.sampled_from(STATUSES), max_size=12)):
                timed_out = status is None and draw(st.booleans())
                latency = draw(st.floats(0, 5000)) if status or timed_out else None
                retry = draw(st.sampled_from([None, 1.0, 30.0])) if status == 429 else None
                tally.add(status, latency, retry, "api.example.com", timed_out)
            tallies[queue] = tally
        made.append((tallies, duration_ms, now))
    return made


def own_documents(made: list[tuple[dict[str, Tally], float, float]]) -> list[Sample]:
    """Each invocation as its own document would have said it, at its true start."""
    return [
        Sample(
            queue,
            ended_at,
            tally.requests,
            tally.ok,
            tally.throttled,
            tally.server_errors,
            tally.overloaded,
            tally.client_errors,
            tally.latency_ms_sum,
            tally.latency_count,
            tally.retry_after_s,
            duration_ms,
            timed_out=tally.timed_out,
            started=float(math.floor(ended_at - duration_ms / 1000.0)),
        )
        for tallies, duration_ms, ended_at in made
        for queue, tally in tallies.items()
    ]


@settings(max_examples=150)
@given(invocations())
def test_an_environment_s_documents_read_back_as_its_invocations_did(
    made: list[tuple[dict[str, Tally], float, float]],
) -> None:
    reports = Reports()
    written = [
        report for tallies, ms, ended in made for report in reports.ended(tallies, ms, ended)
    ]
    written += reports.drain()
    lines = [
        json.dumps(emf.document(queue, report, namespace=schema.NAMESPACE))
        for queue, report in written
    ]
    skipped: Counter[str] = Counter()
    decoded = [s for line in lines for s in samples_from_log_message(line, None, skipped=skipped)]

    assert not skipped
    # A document sums one queue's invocations of one second (usually all of them: more than
    # one document when an invocation came sooner than the environment's last wait foretold).
    assert len(decoded) <= sum(len(tallies) for tallies, _, _ in made)
    for sample in decoded:
        if sample.started is not None:
            assert sample.started <= sample.event_time
    # Every count equal; sums travel rounded to the microsecond, once per document.
    assert same_windows(held(decoded), held(own_documents(made)))


def aggregated_line(**members: Any) -> str:
    document: dict[str, Any] = {
        "QueueName": "orders",
        "Downstream2xx": 10,
        "DownstreamLatencySum": 120.5,
        "DownstreamLatencyCount": 10,
        "InvocationDurationMs": 900.0,
        "Invocations": 3,
        "InvocationStartSecond": 1_767_225_600,
        "_aws": {
            "Timestamp": 1_767_225_601_250,
            "CloudWatchMetrics": [
                {"Namespace": "QueueMesh", "Dimensions": [["QueueName"]], "Metrics": []}
            ],
        },
    }
    for name, value in members.items():
        if value is _ABSENT:
            document.pop(name)
        else:
            document[name] = value
    return json.dumps(document)


_ABSENT = object()


def test_a_well_formed_aggregated_document_is_its_invocations() -> None:
    [sample] = samples_from_log_message(aggregated_line(), None)
    assert (sample.invocations, sample.started, sample.started_at) == (3, START, START)
    assert (sample.latency_ms_sum, sample.latency_count, sample.invocation_ms) == (
        120.5,
        10,
        900.0,
    )
    window = QueueWindow()
    window.add(sample)
    stats = window.stats(START, START + 1)
    assert (stats.samples, stats.timed_samples, stats.busy_ms) == (3, 3, 900.0)


def test_without_a_start_second_the_start_is_read_as_a_per_flush_document_s() -> None:
    [sample] = samples_from_log_message(aggregated_line(InvocationStartSecond=_ABSENT), None)
    assert sample.started is None
    assert sample.started_at == 1_767_225_601.25 - 0.9


BAD_MEMBERS = {
    "Invocations": [0, -1, 1.5, "3", True, [], [1, -2], {"n": 3}, 2_000_000],
    "InvocationStartSecond": [
        "1767225600",
        1_767_225_600.5,
        1_767_225_602,  # after the document's timestamp
        1_767_225_601 - 902,  # longer before it than an invocation runs
        True,
        [],
        [1, 2],
    ],
    "DownstreamLatencySum": [-1, "5", True, [1, "2"], 1e13, _ABSENT],
    "DownstreamLatencyCount": [-1, 1.5, "5", [1, -1], _ABSENT],
}
REASON = {"InvocationStartSecond": "bad_timestamp"}


@settings(max_examples=200)
@given(
    st.sampled_from(sorted(BAD_MEMBERS)).flatmap(
        lambda name: st.tuples(st.just(name), st.sampled_from(BAD_MEMBERS[name]))
    )
)
def test_a_malformed_aggregated_document_is_skipped_and_counted(bad: tuple[str, Any]) -> None:
    name, value = bad
    skipped: Counter[str] = Counter()
    assert samples_from_log_message(aggregated_line(**{name: value}), None, skipped=skipped) == []
    assert skipped == Counter({REASON.get(name, "bad_value"): 1})


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from(sorted(BAD_MEMBERS)),
        st.none()
        | st.booleans()
        | st.integers(-10, 10**13)
        | st.floats(allow_nan=False)
        | st.text(max_size=5)
        | st.lists(st.integers(-5, 5), max_size=3),
    )
)
def test_no_aggregated_member_makes_the_decoder_raise(members: dict[str, Any]) -> None:
    skipped: Counter[str] = Counter()
    samples = samples_from_log_message(aggregated_line(**members), None, skipped=skipped)
    assert len(samples) + sum(skipped.values()) == 1
    assert "internal_error" not in skipped
